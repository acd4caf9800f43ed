"""``POST /sessions/{id}/replay``, ``dormant dev``'s own route: a session recorded with the
Bookings sample (:mod:`tests.e2e.replay_app`) replayed against the agent served now, through a
real in-process ``DevServer`` serving what ``dormant dev`` builds (:class:`Serving`)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from dormant._devserver import DevServer
from dormant._devserver.serving import Serving
from dormant.stores import SqliteStore

APP = str(Path(__file__).parents[1] / "e2e" / "replay_app.py")
CHANGED = "DORMANT_TEST_REPLAY_CHANGED"


class Dev:
    """``dormant dev`` in this process: its store, serving, server and an HTTP client."""

    def __init__(self, db: Path) -> None:
        self.store = SqliteStore(str(db))
        self.serving = Serving(APP, self.store, model=None, cors=False, client_state=[],
                               timeout=None)
        self.factory = self.serving.load()
        _, _, resolver = self.serving.build(self.factory)
        self.server = DevServer(("127.0.0.1", 0), resolver)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.client = httpx.Client(base_url=self.server.url, timeout=30)

    def serve_again(self) -> None:
        """The app built again (as ``--reload`` does): the agent as the environment says now."""
        _, _, resolver = self.serving.build(self.factory)
        self.server.serve_app(resolver)

    def post(self, path: str, body: Any = None, principal: str = "local") -> httpx.Response:
        return self.client.post(path, json=body, headers={"X-Principal": principal})

    def close(self) -> None:
        self.client.close()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)
        self.store.close()


@pytest.fixture
def dev(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Dev]:
    monkeypatch.delenv(CHANGED, raising=False)
    served = Dev(tmp_path / "dev.db")
    try:
        yield served
    finally:
        served.close()


def record(dev: Dev, session: str = "stay") -> None:
    """Upgrade (approved), then change a night (the guest answers which): four inputs."""
    first = dev.post("/turns", {"sessionId": session, "message": "upgrade BK-1 to a suite"})
    assert first.status_code == 200, first.text
    approval = first.json()["pendingApprovals"][0]["approvalId"]
    assert dev.post("/turns", {"sessionId": session, "approvals": [
        {"approvalId": approval, "approved": True}]}).status_code == 200
    asked = dev.post("/turns", {"sessionId": session, "message": "and change a night"})
    call = asked.json()["yieldedTools"][0]["callId"]
    done = dev.post("/turns", {"sessionId": session, "tools": [
        {"callId": call, "input": {"answer": "the 2nd"}}]})
    assert done.json()["status"] == "completed", done.text


def ledger(dev: Dev, session: str = "stay") -> list[dict[str, Any]]:
    answer = dev.client.get(f"/sessions/{session}/events", headers={"X-Principal": "local"})
    events: list[dict[str, Any]] = answer.json()["events"]
    return events


def test_a_replay_against_the_changed_agent_shows_the_changed_call_and_the_orphan(
        dev: Dev, monkeypatch: pytest.MonkeyPatch) -> None:
    record(dev)
    before = ledger(dev)
    monkeypatch.setenv(CHANGED, "1")
    dev.serve_again()

    answer = dev.post("/sessions/stay/replay")

    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert set(body) == {"sessionId", "agent", "tools", "changed", "toolsChanged",
                         "newApprovals", "textScore", "turns", "orphans", "notes", "recorded",
                         "replayed"}
    assert (body["sessionId"], body["agent"], body["tools"]) == (
        "session_stay", "concierge", "recorded")
    assert body["changed"] is True
    assert body["toolsChanged"] == 3  # the upgrade's room, the night not asked, the orphan
    assert body["newApprovals"] == []
    turns = body["turns"]
    assert [turn["input"] for turn in turns] == [
        "message 'upgrade BK-1 to a suite'", "approve upgrade_room",
        "message 'and change a night'", "answer ask_guest"]
    upgrade = turns[0]
    assert upgrade["recorded"]["tools"] == ['upgrade_room({"ref": "BK-1", "room": "suite"})']
    assert upgrade["replayed"]["tools"] == ['upgrade_room({"ref": "BK-1", "room": "deluxe"})']
    assert upgrade["changes"][0].startswith("tools: ")
    assert set(upgrade) == {"index", "input", "recorded", "replayed", "changes", "textScore"}
    assert turns[1]["changes"] == [] and turns[1]["textScore"] == 1.0
    assert turns[2]["replayed"]["text"] == "I moved your stay by one night."
    assert turns[2]["recorded"]["questions"] == ["ask_guest"]
    assert turns[3]["replayed"] is None
    assert body["orphans"] == [{"index": 3, "input": "answer ask_guest", "reason": (
        "the replay never made the recording's call 1 of ask_guest")}]
    assert [e["type"] for e in body["recorded"]] == [e["type"] for e in before]
    assert "user" in [e["type"] for e in body["replayed"]]
    # The recorded session is untouched: the replay ran on a store of its own.
    assert ledger(dev) == before
    assert [line["sessionId"] for line in dev.client.get("/sessions").json()["sessions"]] == [
        "session_stay"]


def test_the_same_agent_replays_to_the_same_turns(dev: Dev) -> None:
    record(dev)
    body = dev.post("/sessions/stay/replay", {"tools": "recorded"}).json()
    assert body["changed"] is False
    assert (body["toolsChanged"], body["textScore"], body["orphans"]) == (0, 1.0, [])
    assert all(turn["changes"] == [] for turn in body["turns"])


def test_another_principals_session_is_not_found(dev: Dev) -> None:
    record(dev)
    answer = dev.post("/sessions/stay/replay", principal="mallory")
    assert answer.status_code == 404
    assert answer.json()["code"] == "session_not_found"
    assert dev.post("/sessions/nobody/replay").status_code == 404


def test_tools_must_be_recorded_or_real(dev: Dev) -> None:
    record(dev)
    answer = dev.post("/sessions/stay/replay", {"tools": "imagined"})
    assert answer.status_code == 422, answer.text


def test_a_replay_whose_agent_fails_answers_what_it_raised(
        dev: Dev, monkeypatch: pytest.MonkeyPatch) -> None:
    record(dev)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the new prompt template has a typo")

    monkeypatch.setattr("dormant._devserver.replay.replay", broken)
    answer = dev.post("/sessions/stay/replay")
    assert answer.status_code == 500
    assert answer.json() == {
        "code": "replay_failed", "sessionId": "session_stay",
        "message": "the replay failed: RuntimeError: the new prompt template has a typo"}


def test_the_lambda_api_has_no_replay_route() -> None:
    from dormant.http import build_resolver
    from dormant.samples.bookings import build

    app, agent = build()
    assert build_resolver(app, agent).allowed_methods("/sessions/s1/replay") == []
