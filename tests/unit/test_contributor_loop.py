"""The contributor's loop: one set-up command, a fast subset, timeouts that stretch on a
loaded machine, and a run that says what this machine lacked."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import _dynamodb_local, _timing
from tests.conftest import is_slow, missing_tools

ROOT = Path(__file__).resolve().parents[2]


def _item(path: str, nodeid: str) -> pytest.Item:
    return SimpleNamespace(path=ROOT / path, nodeid=nodeid)  # type: ignore[return-value]


@pytest.mark.parametrize(("path", "nodeid", "slow"), [
    ("tests/e2e/test_console.py", "tests/e2e/test_console.py::test_x", True),
    ("tests/functions/test_api_function.py", "tests/functions/test_api_function.py::t", True),
    ("tests/unit/test_dynamodb_deletes.py", "tests/unit/test_dynamodb_deletes.py::t[moto]", True),
    ("tests/conformance/test_turn_races.py",
     "tests/conformance/test_turn_races.py::t[dynamodb-local]", True),
    ("tests/conformance/test_store_contract.py",
     "tests/conformance/test_store_contract.py::TestDynamoDBStoreOnMotoServer::t", True),
    ("tests/conformance/test_turn_races.py",
     "tests/conformance/test_turn_races.py::t[memory]", False),
    ("tests/unit/test_openai_model.py", "tests/unit/test_openai_model.py::test_x", False),
])
def test_slow_is_what_starts_processes_or_builds_long_sessions(path: str, nodeid: str,
                                                               slow: bool) -> None:
    assert is_slow(_item(path, nodeid)) is slow


def test_the_fast_loop_is_marked_on_the_collected_suite(request: pytest.FixtureRequest) -> None:
    # This test itself is in the fast loop; the marker is what `-m "not slow"` selects on.
    assert request.node.get_closest_marker("slow") is None
    assert not is_slow(request.node)


def test_a_machine_without_the_tools_is_told_what_it_lacks(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(_dynamodb_local, "unavailable", lambda: "missing java")  # cached
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on it
    monkeypatch.setenv("DORMANT_TEST_CHROMIUM", str(tmp_path / "no-chromium"))
    lines = missing_tools()
    for tool in ("DynamoDB Local: missing java", "espeak-ng", "soxi", "node", "curl",
                 "Chromium"):
        assert any(line.startswith(tool) for line in lines), (tool, lines)


def test_timeouts_stretch_with_the_factor_and_never_shrink(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    monkeypatch.setattr(_timing, "_load_per_core", lambda: 0.2)
    monkeypatch.delenv(_timing.SCALE_ENV, raising=False)
    assert _timing.scaled(30) == 30
    monkeypatch.setenv(_timing.SCALE_ENV, "3")
    assert _timing.scaled(30) == 90
    monkeypatch.setenv(_timing.SCALE_ENV, "0.1")
    assert _timing.scaled(30) == 30
    monkeypatch.setattr(_timing, "_load_per_core", lambda: 2.5)
    assert _timing.scaled(30) == 75
    monkeypatch.setenv(_timing.SCALE_ENV, "fast")
    with pytest.raises(ValueError, match=_timing.SCALE_ENV):
        _timing.scaled(30)


def test_ci_runs_the_set_up_and_both_documented_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "```bash\nscripts/setup-dev" in readme
    assert re.search(r"^bash scripts/setup-dev$", ci, re.M)
    assert '```bash\npytest -q -m "not slow"\n```' in readme
    assert re.search(r'^\.venv/bin/pytest -q -m "not slow"$', ci, re.M)
    assert (ROOT / "scripts" / "setup-dev").stat().st_mode & 0o111
