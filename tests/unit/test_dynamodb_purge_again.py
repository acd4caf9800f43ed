"""A deleted session whose purge was lost is asked for again by ``list``: its items stay in the
owner's index until the purge deletes them, and a quarter hour after the delete a listing that
meets them hands the purge on again (moto, and DynamoDB Local where it runs)."""

from __future__ import annotations

import time

import dormant
from dormant.stores import DynamoDBStore
from dormant.stores._dynamodb import layout as lay
from tests.unit import test_dynamodb_forks as forks
from tests.unit.test_dynamodb_deletes import Later
from tests.unit.test_dynamodb_forks import TABLE, _keys, _talk

aws = forks.aws  # the engines (moto, DynamoDB Local), as the fork tests have them
LATE = lay.LIST_REFRESH_MS / 1000 + 60  # seconds: past the quarter hour after the delete


class Clock:
    def __init__(self) -> None:
        self.skew = 0.0

    def __call__(self) -> float:
        return time.time() + self.skew


def _owned(store: DynamoDBStore, name: str, turns: int) -> None:
    app = dormant.App(store=store)
    _talk(app, app.sessions.create(name, owner="ann"), name, turns)


def test_a_listing_asks_again_for_a_purge_that_never_ran(aws: None) -> None:
    clock = Clock()
    store = DynamoDBStore(TABLE, clock=clock)
    store.ensure_table()
    _owned(store, "lost", 30)
    _owned(store, "kept", 2)
    later = Later()
    store.purge_later = later
    assert store.delete("session_lost")
    later.jobs.clear()  # the step was lost (its send failed)

    assert [s.session_id for s in store.list(principal="ann")] == ["session_kept"]
    assert later.jobs == []  # just deleted: its purge may still be on its way
    clock.skew = LATE
    assert [s.session_id for s in store.list(principal="ann")] == ["session_kept"]
    assert later.jobs == [("session_lost", None)]

    later.run(store)
    assert _keys("session_lost") == ["e#v0000000032"]
    assert [s.session_id for s in store.list(principal="ann")] == ["session_kept"]
    assert later.jobs == []  # purged: nothing of it in the index any more


def test_a_session_deleted_at_its_first_version_is_asked_for_by_its_marker(aws: None) -> None:
    clock = Clock()
    store = DynamoDBStore(TABLE, clock=clock)
    store.ensure_table()
    dormant.App(store=store).sessions.create("brief", owner="ann")
    later = Later()
    store.purge_later = later
    assert store.delete("session_brief")
    later.run(store)  # the marker carried the index keys; the purge took them out
    clock.skew = LATE
    assert store.list(principal="ann") == []
    assert later.jobs == []

    dormant.App(store=store).sessions.create("brief2", owner="ann")
    assert store.delete("session_brief2")
    later.jobs.clear()  # lost
    assert store.list(principal="ann") == []
    assert later.jobs == [("session_brief2", None)]


def test_an_inline_store_never_purges_from_a_listing(aws: None) -> None:
    clock = Clock()
    store = DynamoDBStore(TABLE, clock=clock)
    store.ensure_table()
    _owned(store, "inline", 5)
    later = Later()
    store.purge_later = later
    assert store.delete("session_inline")
    store.purge_later = None
    clock.skew = LATE
    reads: list[str] = []
    store._client.meta.events.register(
        "before-call.dynamodb.BatchWriteItem", lambda **_: reads.append("batch"))
    assert store.list(principal="ann") == []
    assert reads == []
    assert len(_keys("session_inline")) > 1  # left for the purge it was handed to


def test_a_new_session_made_before_the_purge_keeps_the_deleted_one_s_guards(
        aws: None) -> None:
    """The limit docs/stores.md states: guards go only with a purge that finds no live session."""
    store = DynamoDBStore(TABLE)
    store.ensure_table()
    app = dormant.App(store=store)
    old = app.sessions.create("reused")
    old.input.message("hello", id="m-1")
    assert app.sessions.commit(old).ok
    later = Later()
    store.purge_later = later
    assert store.delete("session_reused")
    new = app.sessions.create("reused")  # before the purge ran
    new.input.message("hello again", id="m-1")

    assert app.sessions.commit(new).duplicate == "m:m-1"
    later.run(store)
    assert _keys("session_reused") == ["#o#m:m-1", "e#v0000000003", "e#v0000000004"]
    fresh = app.sessions.get("reused")
    assert fresh is not None
    fresh.input.message("hello again", id="m-2")  # a fresh id lands
    assert app.sessions.commit(fresh).ok
