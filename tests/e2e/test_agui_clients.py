"""Stock AG-UI clients against ``dormant dev``: the protocol's validator, the official
JavaScript client (``@ag-ui/client``'s ``HttpAgent``, run by Node.js), and a client that
hangs up mid-stream. (CopilotKit in front of it: ``test_copilotkit.py``.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from .conftest import DevServer, ended_session, run_node

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


ANSWER = "The page said: confirmed (context: page=checkout) "


def test_the_official_js_client_answers_a_front_end_tool_with_a_tool_message(
        frontend_server: DevServer) -> None:
    """The page offers a tool and context; the model calls the tool; the page answers with a
    ``tool`` message on its next run, and the answer shows the result and the context."""
    seen = run_node("agui_frontend_tools.mjs", server=frontend_server)

    assert seen["text"] == ANSWER, seen
    assert seen["call"]["name"] == "confirm_in_page" and seen["call"]["args"] == {"room": "12"}
    assert seen["pendingInterrupts"] == 0
    kept = ended_session(frontend_server, seen["sessionId"])["events"]
    call = next(e for e in kept if e["type"] == "tool_call")
    assert (call["call_id"], call["dynamic"]) == (seen["call"]["id"], True), call
    result = next(e for e in kept if e["type"] == "tool_result")
    assert (result["call_id"], result["result"], result["error"]) == (
        call["call_id"], "confirmed", None), result
    assert [e["text"] for e in kept if e["type"] == "assistant"] == [ANSWER]
    assert kept[-1]["type"] == "invocation_end" and kept[-1]["status"] == "completed", kept[-1]


def test_a_client_that_hangs_up_mid_stream_keeps_its_message_and_what_it_was_sent(
        frontend_server: DevServer) -> None:
    """No client library: a streaming ``POST /agui`` closed after the first text delta. The
    server takes the hang-up for a stop: the message and the text sent are committed."""
    body = {"threadId": "hangs-up", "runId": "run-1", "state": {}, "tools": [],
            "context": [], "forwardedProps": {},
            "messages": [{"id": "m1", "role": "user", "content": "tell me slowly"}]}
    seen: list[dict[str, Any]] = []
    with httpx.Client(timeout=30) as client, \
            client.stream("POST", f"{frontend_server.url}/agui", json=body) as answer:
        assert answer.status_code == 200
        for line in answer.iter_lines():
            if line.startswith("data: "):
                seen.append(json.loads(line[len("data: "):]))
                if seen[-1]["type"] == "TEXT_MESSAGE_CONTENT":
                    break  # leaving the block closes the connection mid-stream
    assert seen and seen[-1]["type"] == "TEXT_MESSAGE_CONTENT", seen
    session_id = seen[0]["metadata"]["sessionId"]

    kept = ended_session(frontend_server, session_id)["events"]

    told = [e for e in kept if e["type"] == "user"]
    assert [e["text"] for e in told] == ["tell me slowly"], kept
    said = [e["text"] for e in kept if e["type"] == "assistant"]
    assert len(said) == 1 and said[0].startswith(seen[-1]["delta"]), (seen[-1], said)
    assert "word50" not in said[0], f"the turn ran on after the hang-up: {said[0]!r}"
    assert [e["type"] for e in kept][-2:] == ["stop_requested", "invocation_end"], kept
    assert kept[-1]["status"] == "stopped", kept[-1]
