"""Long sessions on every store: a compacted session's turns read the same however long it
lives, and a fork's history is its source's, copy-on-write, through turns and deletes."""

from __future__ import annotations

from typing import Any

import dormant
from dormant.events import UserEvent
from dormant.models import ScriptedModel
from dormant.stores import Store
from dormant.types import StoredSession


class _Counting:
    """The store under test, recording how many events each turn's load returned."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.loaded: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def load(self, session_id: str, *, turns: int | None = None,
             compacted: bool = False) -> StoredSession | None:
        stored = self.inner.load(session_id, turns=turns, compacted=compacted)
        if compacted and stored is not None:
            self.loaded.append(len(stored.events))
        return stored


def test_a_compacted_sessions_turns_read_a_bounded_window(store: Store) -> None:
    counting = _Counting(store)
    app = dormant.App(name="long", store=counting)  # type: ignore[arg-type]
    agent = app.agent(name="a", model=ScriptedModel(["fine"] * 40), context=[
        app.context.history(compact=dormant.Compaction(
            max_turns=4, keep_last=2, summarize=lambda messages: f"{len(messages)} folded"))])
    turn = app.handler.rest(agent=agent)
    for n in range(36):
        answer = turn({"session_id": "long", "input": {"message": f"question {n}"}})
        assert answer.status == "completed"
    session = app.sessions.get("long")
    assert session is not None and len(session.events) > 36 * 4  # everything kept
    assert session.head.compactions >= 10
    # a turn reads at most the summary's tail: up to 4 turns of 4 events, and the compaction
    early, late = counting.loaded[8:16], counting.loaded[-8:]
    assert max(counting.loaded) <= 4 * 4 + 1
    assert max(late) == max(early)


def test_a_fork_takes_turns_of_its_own_and_outlives_its_source(store: Store) -> None:
    app = dormant.App(name="forks", store=store)
    agent = app.agent(name="a", model=ScriptedModel([f"reply {n}" for n in range(8)]))
    turn = app.handler.rest(agent=agent)
    for text in ("plan a trip", "to Lisbon"):
        turn({"session_id": "trip", "input": {"message": text}})
    fork = app.sessions.fork("trip", at_version=1, new_session_id="trip-rome")
    turn({"session_id": fork.session_id, "input": {"message": "to Rome"}})
    turn({"session_id": "trip", "input": {"message": "in May"}})
    assert app.sessions.delete("trip")
    forked = app.sessions.get("trip-rome")
    assert forked is not None
    assert [e.text for e in forked.events if isinstance(e, UserEvent)] == [
        "plan a trip", "to Rome"]
    answer = turn({"session_id": "trip-rome", "input": {"message": "in June"}})
    assert answer.status == "completed"
    again = app.sessions.get("trip-rome")
    assert again is not None
    assert [e.text for e in again.events if isinstance(e, UserEvent)] == [
        "plan a trip", "to Rome", "in June"]
