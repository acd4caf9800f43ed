"""Stock AG-UI clients against ``dormant dev``: the protocol's validator and the official
JavaScript client (``@ag-ui/client``'s ``HttpAgent``, run by Node.js)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from .conftest import DevServer

JS = Path(__file__).with_name("js")


def _validator() -> str:
    found = shutil.which("ag-ui-validate", path=str(Path(sys.executable).parent))
    assert found, "ag-ui-validate is not installed (pip install -e '.[dev]')"
    return found


def test_ag_ui_validate_reports_no_violation(dev_server: DevServer) -> None:
    done = subprocess.run([_validator(), "--json", "--timeout", "30", f"{dev_server.url}/agui"],
                          capture_output=True, text=True, timeout=120)
    report = json.loads(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    assert report["summary"]["errors"] == 0, report["diagnostics"]
    assert report["eventCount"] > 0 and report["internalErrors"] == []


def test_ag_ui_validate_accepts_a_recorded_yield_and_resume(dev_server: DevServer,
                                                             tmp_path: Path) -> None:
    """The validator's own request only chats; record the human-in-the-loop runs too."""
    base = {"threadId": "validated", "state": {}, "tools": [], "context": [],
            "forwardedProps": {}}
    ask = {**base, "runId": "r1", "messages": [
        {"id": "m1", "role": "user", "content": "book me in"}]}
    first = httpx.post(f"{dev_server.url}/agui", json=ask, timeout=30).text
    call_id = next(e["toolCallId"] for e in _events(first) if e["type"] == "TOOL_CALL_START")
    answer = {**base, "runId": "r2", "messages": [], "resume": [
        {"interruptId": call_id, "status": "resolved", "payload": {"answer": "Friday"}}]}
    second = httpx.post(f"{dev_server.url}/agui", json=answer, timeout=30).text
    for name, text in (("yield", first), ("resume", second)):
        capture = tmp_path / f"{name}.sse"
        capture.write_text(text)
        done = subprocess.run([_validator(), "--json", str(capture)], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, f"{name}: {done.stdout}{done.stderr}"
        assert json.loads(done.stdout)["summary"]["errors"] == 0
    said = "".join(e["delta"] for e in _events(second) if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert said == "Booked for Friday."


def _events(sse: str) -> list[dict[str, Any]]:
    return [json.loads(line[len("data: "):]) for line in sse.splitlines()
            if line.startswith("data: ")]


def test_the_official_js_client_drives_a_yield_and_its_resume_streamed(
        gated_server: tuple[DevServer, Path]) -> None:
    server, gate = gated_server
    node = shutil.which("node")
    assert node, "Node.js is needed for the AG-UI JavaScript client test"
    assert (JS / "node_modules" / "@ag-ui" / "client").is_dir(), \
        "run `npm ci --prefix tests/e2e/js` first (.ci/run does)"
    env = {**os.environ, "DORMANT_URL": server.url, "DORMANT_TEST_GATE": str(gate)}
    done = subprocess.run([node, "agui_client.mjs"], cwd=JS, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["first"][-2:] == ["CUSTOM", "RUN_FINISHED"]  # RUN_INTERRUPTED, then the end
    assert "TOOL_CALL_RESULT" in seen["second"]
    assert seen["text"] == "Booked for Friday."
