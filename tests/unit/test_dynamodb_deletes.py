"""A delete of a long session returns at once and finishes in bounded background steps; a fork
of its current version reads its head and no more (moto, and DynamoDB Local where it runs)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

import dormant
from dormant._fork import fork_head, fork_of_head
from dormant.events import StateDelta, UserEvent
from dormant.stores import DynamoDBStore, MemoryStore
from dormant.stores._dynamodb import deletes
from dormant.types import StoredSession
from tests.unit import test_dynamodb_forks as forks
from tests.unit.test_dynamodb_forks import TABLE, Wire, _keys, _talk

aws = forks.aws  # the engines (moto, DynamoDB Local) and the store, as the fork tests have them
store = forks.store

LONG = 5_000


def _grow(store: DynamoDBStore, name: str, turns: int) -> dormant.App:
    app = dormant.App(store=store)
    _talk(app, app.sessions.create(name), name, turns)
    return app


class Later:
    """A stand-in for the webhook queue: records the purge steps handed on."""

    def __init__(self) -> None:
        self.jobs: list[tuple[str, str | None]] = []

    def __call__(self, session_id: str, after: str | None) -> None:
        self.jobs.append((session_id, after))

    def run(self, store: DynamoDBStore, wire: Wire | None = None) -> list[int]:
        """Run the queued steps to the end (each re-enqueues the next); the requests each made."""
        sizes: list[int] = []
        while self.jobs:
            session_id, after = self.jobs.pop(0)
            if wire is not None:
                wire.start()
            nxt = store.purge(session_id, after)
            if wire is not None:
                sizes.append(len(wire.sent))
            if nxt is not None:
                self.jobs.append((session_id, nxt))
        return sizes


@pytest.mark.parametrize("turns", [10, LONG])
def test_a_delete_is_the_same_few_requests_at_10_and_5000_turns(
        store: DynamoDBStore, turns: int, request: pytest.FixtureRequest) -> None:
    if turns == LONG and "dynamodb-local" in request.node.name:
        turns = 1_000  # DynamoDB Local writes slowly; still far past one purge page
    _grow(store, "long", turns)
    later = Later()
    store.purge_later = later
    wire = Wire(store).start()

    assert store.delete("session_long") is True

    # the head, the fork references, the fork mark, the marker's transaction: nothing else
    assert [op for op, _ in wire.sent] == ["Query", "Query", "GetItem", "TransactWriteItems"]
    assert wire.bytes < 2_000
    assert later.jobs == [("session_long", None)]
    assert dormant.App(store=DynamoDBStore(TABLE)).sessions.get("long") is None
    assert [s.session_id for s in store.list()] == []  # gone from the listing at once

    steps = later.run(store, wire)
    assert len(steps) == (turns + 1) // deletes.PURGE_PAGE + 1
    assert max(steps) <= 3 + deletes.PURGE_PAGE // 25 + 1  # bounded whatever the length
    assert _keys("session_long") == [f"e#v{turns + 2:010d}"]  # only the marker
    assert store.list() == []


def test_a_commit_in_flight_is_refused_and_a_second_delete_finds_nothing(
        store: DynamoDBStore) -> None:
    app = _grow(store, "twice", 30)
    stale = app.sessions.get("twice")
    assert stale is not None
    later = Later()
    store.purge_later = later
    assert store.delete("session_twice") is True
    stale.input.message("too late")
    assert not dormant.App(store=DynamoDBStore(TABLE)).sessions.commit(stale).ok
    assert store.delete("session_twice") is False  # idempotent: asks for the purge again
    assert later.jobs == [("session_twice", None), ("session_twice", None)]
    later.run(store)
    assert _keys("session_twice") == ["e#v0000000032"]


def test_a_purge_step_run_twice_or_cut_half_way_leaves_nothing_behind(
        store: DynamoDBStore) -> None:
    _grow(store, "crash", 250)
    later = Later()
    store.purge_later = later
    store.delete("session_crash")
    later.jobs.clear()
    first = store.purge("session_crash", None)
    assert first is not None and store.purge("session_crash", None) is not None  # again
    calls = 0

    def crash(**_: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("the function died half way")

    store._client.meta.events.register("before-call.dynamodb.BatchWriteItem", crash)
    with pytest.raises(RuntimeError):
        store.purge("session_crash", first)
    store._client.meta.events.unregister("before-call.dynamodb.BatchWriteItem", crash)
    cursor: str | None = first  # the step redelivered, then the rest
    while cursor is not None:
        cursor = store.purge("session_crash", cursor)
    assert store.purge("session_crash", None) is None
    assert _keys("session_crash") == ["e#v0000000252"]


def test_a_deleted_source_s_forks_load_whole_and_a_new_session_takes_the_id(
        store: DynamoDBStore) -> None:
    app = _grow(store, "origin", 150)
    child = app.sessions.fork("origin", new_session_id="child")
    child.input.message("child's own")
    assert app.sessions.commit(child).ok
    later = Later()
    store.purge_later = later
    assert app.sessions.delete("origin")
    later.run(store)

    fresh = dormant.App(store=DynamoDBStore(TABLE))
    loaded = fresh.sessions.get("child")
    assert loaded is not None
    texts = [e.text for e in loaded.events if isinstance(e, UserEvent)]
    assert len(texts) == 151 and texts[0] == "origin 00000" and texts[-1] == "child's own"
    with pytest.raises(dormant.SessionNotFound):
        fresh.sessions.fork("origin", new_session_id="orphan")
    assert [s.session_id for s in fresh.sessions.list()] == ["session_child"]

    reborn = fresh.sessions.create("origin")
    reborn.input.message("a new life")
    assert fresh.sessions.commit(reborn).ok
    again = fresh.sessions.get("origin")
    assert again is not None
    assert [e.text for e in again.events if isinstance(e, UserEvent)] == ["a new life"]
    assert store.purge("session_origin", None) is not None  # the old one's kept items
    # the last fork deleted takes the kept history with it; the new session stays whole
    assert app.sessions.delete("child")
    later.run(store)
    assert all(not k.startswith("e#v00000000") or int(k[3:13]) > 152
               for k in _keys("session_origin") if k.startswith("e#v"))
    kept = fresh.sessions.get("origin")
    assert kept is not None and [e.text for e in kept.events
                                 if isinstance(e, UserEvent)] == ["a new life"]


@pytest.mark.parametrize("turns", [10, LONG])
def test_a_fork_of_the_current_version_reads_the_head_alone(
        store: DynamoDBStore, turns: int, request: pytest.FixtureRequest) -> None:
    if turns == LONG and "dynamodb-local" in request.node.name:
        turns = 1_000
    app = _grow(store, "deep", turns)
    cold = DynamoDBStore(TABLE)  # nothing remembered: the fork reads what it needs
    wire = Wire(cold).start()

    fork = dormant.App(store=cold).sessions.fork("deep", new_session_id="shoot", history=False)

    # one Query of the source (its head), one of the fork's id (free?), the fork's transaction
    assert wire.sent == [("Query", "session_deep"), ("Query", "session_shoot"),
                         ("TransactWriteItems", None)]
    assert wire.bytes < 4_000
    assert fork.head.fork_of == {"session": "session_deep", "version": turns + 1,
                                 "seq": 2 * turns}
    loaded = app.sessions.get("shoot")
    assert loaded is not None and len(loaded.events) == 2 * turns
    # Without history=False the fork comes back with its history, read from the store.
    whole = dormant.App(store=cold).sessions.fork("deep", new_session_id="branch")
    assert len(whole.events) == 2 * turns


def test_the_head_of_a_fork_is_what_folding_the_source_gives() -> None:
    memory = MemoryStore()
    app = dormant.App(store=memory)
    session = app.sessions.create("rich", state={"seed": 1})
    for n in range(40):
        session.input.message(f"m {n}")
        session.add_event(StateDelta(patch=[{"op": "add", "path": f"/k{n % 3}", "value": n}]))
        assert app.sessions.commit(session).ok
    stored = memory.load("session_rich", turns=None)
    assert stored is not None
    folded = fork_head(StoredSession(copy.deepcopy(stored.head), stored.events, 0),
                       stored.head.version, stored.head.seq, "session_x", "p")
    taken = fork_of_head(stored.head, "session_x", "p")
    skip = {"created_at", "updated_at", "format"}
    assert {k: v for k, v in taken.model_dump().items() if k not in skip} == {
        k: v for k, v in folded.model_dump().items() if k not in skip}
