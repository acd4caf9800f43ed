"""``kill -9`` of ``dormant dev`` while an approved tool runs: the run is recovered.

A real ``dormant dev`` process serves :mod:`tests.reliability.kill_app` on SQLite. A session
parks on the approval of a slow tool, three messages queue behind it, a person approves, and
the server is killed with SIGKILL while the approved tool runs: the approval's claim (its
lease one heartbeat, 10 s, past its last beat; its wake-up at the default turn timeout, over
a quarter of an hour) is committed, the tool's result is not, and the claim's lease wake-up
died with the process. The server restarts on the same
database. It is the only process serving it, and the claim names the boot that wrote it, so
the claim is known dead at once, its lease not waited out. Then, within 5 s of the restart:

- with no request at all (only reads), the restarted server's start-up fires the lease's
  wake-up, which takes the stranded invocation over and drains the inbox;
- or a stop sent at once ends the invocation (the stop takes it over and ends it, then runs
  the inbox in its request, or the takeover running by then honours it);
- or the next client request (a new message) queues behind the takeover and runs after it.

Either way the approved call ends with one result, its invocation ends once, each queued
message runs once, and the tool's real runs (counted in a file, outside the store) are all
under the one call id: the killed run and the takeover's re-run.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from dormant.stores.sqlite import SqliteStore
from tests.e2e.conftest import DevServer
from tests.reliability.kill_app import RUNS, TOOL_SECONDS

KILL_APP = Path(__file__).with_name("kill_app.py")
#: Seconds after the restart by which the session must be recovered (or a stop honoured).
RECOVERED_WITHIN = 5.0
#: How long the approved tool runs, and how long after it started the server is killed.
TOOL_RUN = "1.5"
KILL_AFTER = 0.3
#: Seconds the session may take to settle after the restart before the test fails.
SETTLE = 30.0
POLL = 0.1
QUEUED = ("q1", "q2", "q3")
SESSION = "kill9"


@dataclass
class Killed:
    """What the killed server left behind."""

    server: DevServer
    runs: Path
    call_id: str
    invocation_id: str
    #: The approval claim's lease (epoch ms) as the kill left it in the session head.
    lease: int = 0

    def runs_started(self) -> list[tuple[str, int]]:
        """The tool's real runs: (call id, epoch ms it started), in order."""
        lines = self.runs.read_text().splitlines() if self.runs.exists() else []
        return [(call, int(started)) for call, started in (line.split() for line in lines)]

    def run_calls(self) -> list[str]:
        return [call for call, _ in self.runs_started()]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[DevServer]:
    dev = DevServer(tmp_path / "kill.db", KILL_APP, env={
        RUNS: str(tmp_path / "runs.txt"), TOOL_SECONDS: TOOL_RUN})
    try:
        yield dev
    finally:
        dev.kill()


def _post(server: DevServer, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}/turns", json={"sessionId": SESSION, **body}, timeout=30)


def _view(server: DevServer, **params: str) -> dict[str, Any]:
    reply = httpx.get(f"{server.url}/sessions/{SESSION}", params=params, timeout=30)
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


def _kill_while_the_approved_tool_runs(server: DevServer) -> Killed:
    """Park on the approval, queue three messages, approve, SIGKILL while the tool runs."""
    server.start()
    runs = Path(server.env[RUNS])
    parked = _post(server, {"message": "please run the job", "messageId": "m0"})
    assert parked.status_code == 200, parked.text
    assert parked.json()["status"] == "yielded_tool"
    [approval] = parked.json()["pendingApprovals"]
    for message_id in QUEUED:
        queued = _post(server, {"message": f"and then {message_id}", "messageId": message_id})
        assert (queued.status_code, queued.json()["status"]) == (202, "queued"), queued.text
    invocation_id = _view(server)["openInvocation"]

    def approve() -> None:  # answered by nobody: the server dies under it
        with contextlib.suppress(httpx.HTTPError):
            _post(server, {"approvals": [{"approvalId": approval["approvalId"],
                                          "approved": True}]})

    approving = threading.Thread(target=approve, daemon=True)
    approving.start()
    killed = Killed(server, runs, approval["callId"], invocation_id)
    deadline = time.monotonic() + 10
    while not killed.run_calls():  # the approved tool started (its claim committed first)
        assert time.monotonic() < deadline, "the approved tool never started"
        time.sleep(0.01)
    time.sleep(KILL_AFTER)
    server.kill()
    approving.join(timeout=10)

    assert killed.run_calls() == [killed.call_id]
    store = SqliteStore(server.db)  # what the kill left: the claim, no result
    try:
        stored = store.load(f"session_{SESSION}", turns=None)
        assert stored is not None
        assert stored.head.running and stored.head.open_invocation == invocation_id
        assert stored.head.lease > 0
        killed.lease = stored.head.lease
        assert len(stored.head.queue) == len(QUEUED)
    finally:
        store.close()
    return killed


def _settled(server: DevServer, within: float = SETTLE) -> dict[str, Any]:
    """Read (never write) the session until nothing runs, waits or is queued."""
    deadline = time.monotonic() + within
    view = _view(server)
    while "running" in view or view["inbox"] or view["status"] in ("awaiting_input", "failed"):
        assert time.monotonic() < deadline, (
            f"the session did not settle within {within:.0f}s after the restart: {view}\n"
            f"{server.log.read_text()}")
        time.sleep(POLL)
        view = _view(server)
    return view


def _assert_recovered_once(killed: Killed, messages: tuple[str, ...]) -> None:
    view = _view(killed.server, events="true")
    assert view["status"] == "active" and view["inbox"] == [] and "running" not in view
    events = view["events"]
    results = [e for e in events
               if e["type"] == "tool_result" and e["call_id"] == killed.call_id]
    assert len(results) == 1, results
    assert results[0]["result"] == {"job": "nightly", "status": "done"}
    ends = [e["status"] for e in events
            if e["type"] == "invocation_end" and e["invocation_id"] == killed.invocation_id]
    assert ends == ["completed"]
    ran = Counter(e["message_id"] for e in events if e["type"] == "user")
    assert ran == dict.fromkeys(messages, 1)
    replies = [e["text"] for e in events if e["type"] == "assistant"]
    assert replies.count("The job is done.") == 1
    for message_id in messages[1:]:
        assert replies.count(f"Noted: and then {message_id}") == 1, replies
    calls = killed.run_calls()  # the killed run and the takeover's, under one call id
    assert len(calls) >= 2 and set(calls) == {killed.call_id}, calls


def test_a_restart_alone_takes_over_the_run_its_kill_stranded(server: DevServer) -> None:
    killed = _kill_while_the_approved_tool_runs(server)
    # the lease alone would keep it stranded for longer than the restart takes to recover it
    assert killed.lease > time.time() * 1000 + RECOVERED_WITHIN * 1000

    server.start()  # then nothing is sent: only reads until it settles
    restarted = time.time() * 1000

    assert "1 pending re-armed" in server.startup_line  # the lease's wake-up, due at once
    _settled(server, within=RECOVERED_WITHIN + float(TOOL_RUN))
    _assert_recovered_once(killed, ("m0", *QUEUED))
    [_, (_, rerun_at)] = killed.runs_started()
    assert rerun_at - restarted < RECOVERED_WITHIN * 1000, rerun_at - restarted


def test_a_stop_sent_after_the_restart_is_honoured_within_seconds(server: DevServer) -> None:
    killed = _kill_while_the_approved_tool_runs(server)
    server.start()
    restarted = time.monotonic()

    reply = _post(server, {"stop": {"invocationId": killed.invocation_id}})

    assert reply.status_code in (200, 202), reply.text
    answer = reply.json()
    # The stop is asked of the restart's takeover that claimed the invocation first
    # ("accepted"), or it reaches the invocation ahead of the takeover and ends it in its own
    # request; the inbox is then free, and the reply is the inbox's turn that ran next, with
    # the rest of the inbox drained.
    took_the_inbox = answer["status"] not in ("stopped", "accepted")
    if took_the_inbox:
        assert answer["status"] == "completed" and answer["drained"] == list(QUEUED[1:]), \
            reply.text
    deadline = restarted + RECOVERED_WITHIN
    while True:
        view = _view(server, events="true")
        ends = [e["status"] for e in view["events"] if e["type"] == "invocation_end"
                and e["invocation_id"] == killed.invocation_id]
        if ends:
            break
        assert time.monotonic() < deadline, f"not ended within {RECOVERED_WITHIN} s: {view}"
        time.sleep(POLL)
    if took_the_inbox:
        assert ends == ["stopped"], ends
    else:
        assert ends in (["stopped"], ["completed"]), ends  # (the takeover may finish first)
    results = [e for e in view["events"]
               if e["type"] == "tool_result" and e["call_id"] == killed.call_id]
    assert len(results) == 1, results
    _settled(server)
    final = _view(server, events="true")
    ran = Counter(e["message_id"] for e in final["events"] if e["type"] == "user")
    assert ran == dict.fromkeys(("m0", *QUEUED), 1)


def test_the_next_message_queues_behind_the_takeover_and_runs(server: DevServer) -> None:
    killed = _kill_while_the_approved_tool_runs(server)
    server.start()
    restarted = time.monotonic()

    reply = _post(server, {"message": "and then m4", "messageId": "m4"})

    assert reply.status_code == 202, reply.text
    assert reply.json()["status"] == "queued"
    _settled(server, within=max(RECOVERED_WITHIN + float(TOOL_RUN)
                                - (time.monotonic() - restarted), 0.5))
    _assert_recovered_once(killed, ("m0", *QUEUED, "m4"))
