"""The long-sessions page's worked example (docs/long-sessions.md), run as a user would: its
```python block in an empty directory with the installed package, printing exactly the ```text
block that follows it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .conftest import ROOT

SECTION = "## A worked example"
PAGE = ROOT / "docs" / "long-sessions.md"


def _blocks(readme: str) -> tuple[str, str]:
    assert SECTION in readme, f"{PAGE.name} has no {SECTION!r} section"
    section = readme.split(SECTION, 1)[1].split("\n## ", 1)[0]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    expected = section.split("```text\n", 1)[1].split("```", 1)[0]
    return code, expected


def test_the_long_sessions_example_prints_what_the_page_shows(tmp_path: Path) -> None:
    code, expected = _blocks(PAGE.read_text())
    script = tmp_path / "long.py"
    script.write_text(code)
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "PYTHONPATH")}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == expected
    assert (tmp_path / "support.db").exists()  # it wrote where it ran, nowhere else
