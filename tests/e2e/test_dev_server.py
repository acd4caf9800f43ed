"""``dormant dev`` over real HTTP: the README's walkthrough, client mistakes, the inspector."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from dormant.stores.sqlite import SqliteStore

from .conftest import ROOT, DevServer

JSON = {"Content-Type": "application/json"}
LEDGER_AFTER_RESUME = [
    "invocation_start", "user", "tool_call", "tool_yield", "invocation_yield",
    "tool_input", "invocation_resume", "tool_result", "assistant", "invocation_end",
]


#: What ``ask_guest`` waits for, as the session view and the inspector describe it.
ANSWER_SCHEMA = {"properties": {"answer": {"description": "The guest's answer", "title": "Answer",
                                           "type": "string"}},
                 "required": ["answer"], "title": "Answer", "type": "object"}

def _post(server: DevServer, body: Any, **headers: str) -> httpx.Response:
    return httpx.post(f"{server.url}/turns", json=body, headers=headers, timeout=30)


def _session(server: DevServer, session_id: str, **params: str) -> httpx.Response:
    return httpx.get(f"{server.url}/sessions/{session_id}", params=params, timeout=30)


def _pause(server: DevServer, session_id: str) -> dict[str, Any]:
    reply = _post(server, {"sessionId": session_id, "message": "book me in"})
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    assert body["status"] == "yielded_tool"
    return body


def _inspect(server: DevServer, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "dormant.cli", "sessions", *args,
                           "--db", str(server.db)], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=True)
    return done.stdout


# --- the walkthrough --------------------------------------------------------------------------


def test_startup_line_says_which_model_serves_and_where_the_data_lives(
        dev_server: DevServer) -> None:
    assert "demo model" in dev_server.startup_line
    assert str(dev_server.db) in dev_server.startup_line
    assert "timers served locally, 0 pending re-armed" in dev_server.startup_line


def test_a_paused_session_survives_a_restart_and_resumes(dev_server: DevServer) -> None:
    paused = _pause(dev_server, "y1")
    assert paused["sessionId"] == "session_y1"
    assert paused["output"] == {"items": [], "text": ""}
    [call] = paused["yieldedTools"]
    assert call["name"] == "ask_guest" and call["args"] == {"q": "Which night?"}

    dev_server.restart()  # SIGKILL: nothing survives but what was committed

    waiting = _session(dev_server, "y1").json()
    assert waiting["status"] == "awaiting_input" and waiting["version"] == 1
    # The session view adds what the call expects (the ledger keeps the tool's yield schema).
    assert waiting["yieldedTools"] == [{**call, "inputSchema": ANSWER_SCHEMA}]
    resumed = _post(dev_server, {"sessionId": "y1", "tools": [
        {"callId": call["callId"], "input": {"answer": "Friday"}}]})
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["status"] == "completed"
    assert resumed.json()["output"]["text"] == "Booked for Friday."
    ledger = _session(dev_server, "session_y1", events="true").json()  # one id, two spellings
    # the answer settled the step: its claim is a version of its own, then the turn's commit
    assert ledger["status"] == "active" and ledger["version"] == 3
    assert [e["type"] for e in ledger["events"]] == LEDGER_AFTER_RESUME
    assert "events" not in _session(dev_server, "y1").json()  # the ledger only when asked


def test_a_graceful_stop_exits_cleanly(dev_server: DevServer) -> None:
    assert dev_server.stop() == 0


def test_the_inspector_renders_a_readable_timeline(dev_server: DevServer) -> None:
    call = _pause(dev_server, "inspect-me")["yieldedTools"][0]

    listing = _inspect(dev_server, "list")
    shown = _inspect(dev_server, "show", "inspect-me")
    as_json = json.loads(_inspect(dev_server, "show", "inspect-me", "--json"))

    assert "session_inspect-me" in listing and "awaiting input" in listing
    assert "version 1 · awaiting input · principal local" in shown
    assert "user: book me in" in shown
    assert f"ask_guest yielded: waits for input on {{\"q\": \"Which night?\"}}  " \
           f"[{call['callId']}]" in shown
    assert "run waiting for tool input" in shown
    assert "expects input {answer: string}" in shown
    assert as_json["yieldedTools"] == [{**call, "inputSchema": ANSWER_SCHEMA}]
    assert [e["type"] for e in as_json["events"]] == LEDGER_AFTER_RESUME[:5]


# --- reminders: the local scheduler -----------------------------------------------------------

REMINDER_WAIT = 15.0  # seconds a due reminder may take to land before the test fails


def _texts(ledger: dict[str, Any], kind: str) -> list[str]:
    return [e["text"] for e in ledger.get("events", []) if e["type"] == kind]


def _until_reminded(server: DevServer, session_id: str, reminder: str) -> dict[str, Any]:
    """Poll the ledger until the reminder and the demo's reply to it are there (the server is
    another process: there is nothing to wait on but its API)."""
    deadline = time.monotonic() + REMINDER_WAIT
    while True:
        ledger: dict[str, Any] = _session(server, session_id, events="true").json()
        if reminder in _texts(ledger, "user") and _texts(ledger, "assistant")[-1:] == [reminder]:
            return ledger
        assert time.monotonic() < deadline, f"no {reminder!r} within {REMINDER_WAIT}s: " \
                                            f"{_texts(ledger, 'user')}"
        time.sleep(0.1)


def test_a_reminder_arrives_as_a_message_and_gets_a_reply(dev_server: DevServer) -> None:
    reply = _post(dev_server, {"sessionId": "remind", "message": "remind me in 1 seconds to "
                                                                  "stretch"})
    assert reply.status_code == 200, reply.text
    assert reply.json()["status"] == "completed"
    assert reply.json()["output"]["text"] == "OK, I'll remind you in 1 second: stretch."

    ledger = _until_reminded(dev_server, "remind", "Reminder: stretch")

    assert _texts(ledger, "user") == ["remind me in 1 seconds to stretch", "Reminder: stretch"]
    types = [e["type"] for e in ledger["events"]]
    assert types.count("timer_set") == 1
    assert types[types.index("timer_fired"):] == [
        "timer_fired", "invocation_start", "user", "assistant", "invocation_end"]
    # three writes: the tool step's write-ahead, the turn's end, the reminder's turn
    assert ledger["status"] == "active" and ledger["version"] == 3
    shown = _inspect(dev_server, "show", "remind")
    assert "⏱ timer reminder:call_" in shown and "fired" in shown
    assert "timers:" not in shown  # nothing pending any more


def test_a_reminder_survives_a_restart_and_lands_once(dev_server: DevServer) -> None:
    reply = _post(dev_server, {"sessionId": "remind-restart",
                               "message": "remind me in 3 seconds to drink water"})
    assert reply.json()["status"] == "completed", reply.text
    assert "timers:\n    reminder:call_" in _inspect(dev_server, "show", "remind-restart")

    dev_server.restart()  # SIGKILL before it is due: only the session head remembers it

    assert "1 pending re-armed" in dev_server.startup_line
    ledger = _until_reminded(dev_server, "remind-restart", "Reminder: drink water")
    dev_server.restart()  # and again: nothing left to re-arm, nothing delivered twice
    assert "0 pending re-armed" in dev_server.startup_line
    again = _session(dev_server, "remind-restart", events="true").json()
    assert again["version"] == ledger["version"] == 3  # write-ahead, turn's end, reminder
    assert _texts(again, "user") == ["remind me in 3 seconds to drink water",
                                     "Reminder: drink water"]
    assert [e["type"] for e in again["events"]].count("timer_fired") == 1


# --- client mistakes: 4xx, JSON with a code, nothing written ----------------------------------


def _raw(server: DevServer, body: bytes, **headers: str) -> httpx.Response:
    return httpx.post(f"{server.url}/turns", content=body, headers={**JSON, **headers},
                      timeout=30)


Mistake = Callable[[DevServer, str, str], httpx.Response]

MISTAKES: dict[str, tuple[Mistake, int, str, str]] = {
    # name: (request, status, code, text the message must contain)
    "unknown session": (lambda s, sid, call: _session(s, "nobody-here"), 404,
                        "session_not_found", "session_nobody-here"),
    "delete an unknown session": (
        lambda s, sid, call: httpx.delete(f"{s.url}/sessions/nobody-here", timeout=30), 404,
        "session_not_found", "session_nobody-here"),
    "malformed JSON": (lambda s, sid, call: _raw(s, b'{"sessionId": "' + sid.encode() + b'",'),
                       400, "invalid_json", "not valid JSON"),
    "wrong types": (lambda s, sid, call: _post(s, {"sessionId": sid, "message": 5}), 422,
                    "validation_error", "message: Input should be a valid string"),
    "server-only initialState": (
        lambda s, sid, call: _post(s, {"sessionId": sid, "message": "hi",
                                       "initialState": {"vip": True}}),
        422, "validation_error", "initialState: Extra inputs are not permitted"),
    "principal in the body": (
        lambda s, sid, call: _post(s, {"sessionId": sid, "tools": [
            {"callId": call, "input": {"answer": "Friday"}}], "principal": "local"}),
        422, "validation_error", "principal: Extra inputs are not permitted"),
    "oversize body": (lambda s, sid, call: _post(s, {"sessionId": sid, "message": "x" * 1_100_000}),
                      413, "payload_too_large", "limit is 1000000"),
    "rejected message while awaiting tool input": (
        lambda s, sid, call: _post(s, {"sessionId": sid, "message": "hello?",
                                       "ifBusy": "reject"}), 409,
        "awaiting_input", "ask_guest"),
    "answer to a call nobody asked": (
        lambda s, sid, call: _post(s, {"sessionId": sid, "tools": [
            {"callId": "call_unknown", "input": {"answer": "Friday"}}]}),
        409, "not_pending", "call_unknown"),
    "another principal's session": (
        lambda s, sid, call: _post(s, {"sessionId": sid, "tools": [
            {"callId": call, "input": {"answer": "Friday"}}]}, **{"X-Principal": "mallory"}),
        404, "session_not_found", "not found"),
    "another principal reads it": (
        lambda s, sid, call: httpx.get(f"{s.url}/sessions/{sid}",
                                       headers={"X-Principal": "mallory"}, timeout=30),
        404, "session_not_found", "not found"),
    "a bad session id": (lambda s, sid, call: _post(s, {"sessionId": "no spaces!", "message": "x"}),
                         400, "invalid_input", "invalid session id"),
    "no such route": (lambda s, sid, call: httpx.get(f"{s.url}/nowhere", timeout=30), 404,
                      "not_found", "/nowhere"),
}


def _snapshot(server: DevServer) -> list[tuple[str, int, int]]:
    """Every session's version and ledger length, read from the server's SQLite file."""
    store = SqliteStore(server.db)
    try:
        return sorted((s.session_id, s.version, len(store.load(s.session_id).events))
                      for s in store.list(limit=1000))
    finally:
        store.close()


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_a_client_mistake_is_a_4xx_json_error_and_writes_nothing(
        shared_server: DevServer, mistake: str) -> None:
    request, status, code, needle = MISTAKES[mistake]
    sid = "session_mistake-" + mistake.replace(" ", "-").replace("'", "")
    call = _pause(shared_server, sid)["yieldedTools"][0]["callId"]
    before = _snapshot(shared_server)

    reply = request(shared_server, sid, call)

    assert reply.status_code == status, reply.text
    assert reply.headers["content-type"].startswith("application/json")
    body = reply.json()
    assert body["code"] == code
    assert needle in body["message"]
    assert _snapshot(shared_server) == before
    assert _session(shared_server, sid).json()["version"] == 1


def test_a_message_to_a_waiting_session_names_the_pending_calls(shared_server: DevServer) -> None:
    call = _pause(shared_server, "names-the-calls")["yieldedTools"][0]
    reply = _post(shared_server, {"sessionId": "names-the-calls", "message": "hello?",
                                  "ifBusy": "reject"})
    assert reply.status_code == 409
    assert reply.json()["pending"] == [call]
    assert call["callId"] in reply.json()["message"]


def test_validation_errors_name_each_field(shared_server: DevServer) -> None:
    reply = _post(shared_server, {"message": "", "tools": [{"input": 1}]})
    assert reply.status_code == 422
    fields = {f["field"] for f in reply.json()["fields"]}
    assert fields == {"message", "tools.0.callId"}


def test_a_wrong_answer_is_not_a_client_error_but_reaches_the_model(
        shared_server: DevServer) -> None:
    call = _pause(shared_server, "wrong-answer")["yieldedTools"][0]
    reply = _post(shared_server, {"sessionId": "wrong-answer", "tools": [
        {"callId": call["callId"], "input": {"when": "Friday"}}]})
    assert reply.status_code == 200
    assert "Invalid input" in reply.json()["output"]["text"]


def test_delete_forgets_a_session(shared_server: DevServer) -> None:
    _pause(shared_server, "to-delete")
    assert httpx.delete(f"{shared_server.url}/sessions/to-delete", timeout=30).json() == {
        "sessionId": "session_to-delete", "deleted": True}
    assert _session(shared_server, "to-delete").status_code == 404


# --- the API description and concurrency ------------------------------------------------------


def test_the_root_serves_the_openapi_description(shared_server: DevServer) -> None:
    spec = httpx.get(f"{shared_server.url}/", timeout=30).json()
    assert spec["openapi"].startswith("3.")
    assert {"/turns", "/sessions/{session_id}", "/agui"} <= set(spec["paths"])
    assert set(spec["paths"]["/sessions/{session_id}"]) == {"get", "delete"}
    docs = httpx.get(f"{shared_server.url}/docs", timeout=30)
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


def test_concurrent_requests_each_get_their_own_answer(shared_server: DevServer) -> None:
    refs = [f"BK-{n}" for n in range(12)]
    replies: dict[str, dict[str, Any]] = {}
    barrier = threading.Barrier(len(refs))

    def ask(ref: str) -> None:
        barrier.wait(timeout=30)
        replies[ref] = _post(shared_server, {"sessionId": f"many-{ref}",
                                             "message": f"how long is my stay {ref}?"}).json()

    threads = [threading.Thread(target=ask, args=(ref,)) for ref in refs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for ref in refs:
        assert replies[ref]["sessionId"] == f"session_many-{ref}"
        assert replies[ref]["output"]["text"] == f"Your stay {ref} is 3 nights."


def test_agui_events_are_flushed_one_by_one(gated_server: tuple[DevServer, Path]) -> None:
    server, gate = gated_server
    body = {"threadId": "streamed", "runId": "r1", "state": {}, "tools": [], "context": [],
            "forwardedProps": {}, "messages": [{"id": "m1", "role": "user", "content": "hi"}]}
    seen: list[str] = []
    with httpx.stream("POST", f"{server.url}/agui", json=body, timeout=30) as reply:
        assert reply.headers["content-type"].startswith("text/event-stream")
        for line in reply.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[len("data: "):])
            seen.append(event["type"])
            if event["type"] == "TEXT_MESSAGE_CONTENT" and not gate.exists():
                gate.write_text("open")  # the model waits for this before saying more
    assert seen[0] == "RUN_STARTED" and seen[-1] == "RUN_FINISHED"
    assert seen.count("TEXT_MESSAGE_CONTENT") > 1
    assert "RUN_ERROR" not in seen


def test_a_chunked_request_body_is_read_whole(shared_server: DevServer) -> None:
    def pieces() -> Iterator[bytes]:
        yield b'{"sessionId": "chunked", '
        yield b'"message": "how long is my stay BK-77?"}'

    reply = httpx.post(f"{shared_server.url}/turns", content=pieces(), headers=JSON, timeout=30)
    assert reply.status_code == 200, reply.text
    assert reply.json()["output"]["text"] == "Your stay BK-77 is 3 nights."


def test_with_an_openai_key_the_startup_line_names_openai(tmp_path: Path) -> None:
    server = DevServer(tmp_path / "openai.db", env={"OPENAI_API_KEY": "sk-test-not-real"})
    try:
        server.start()  # no request is made: no model call, no network
        assert "model: OpenAIModel(" in server.startup_line
        assert "demo" not in server.startup_line
    finally:
        server.kill()
