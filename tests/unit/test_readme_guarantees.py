"""The guarantees page's tables (docs/guarantees.md) name the tests that check each promise:
they must exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _guarantee_rows() -> list[str]:
    text = (ROOT / "docs" / "guarantees.md").read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.startswith("| ") and "`" in line]


def test_every_test_the_guarantees_table_names_exists() -> None:
    sources = "\n".join(p.read_text(encoding="utf-8")
                        for p in (ROOT / "tests").rglob("*.py") if "node_modules" not in p.parts)
    sources += (ROOT / "layers/dormant/dormant/testing/store_contract.py").read_text("utf-8")
    named = [name for row in _guarantee_rows()
             for name in re.findall(r"\btest_[a-z0-9_]+\b(?!\.py)", row.rsplit("|", 2)[-2])]
    assert len(named) > 20
    missing = [name for name in named if f"def {name}(" not in sources]
    assert missing == []
