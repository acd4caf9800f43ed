"""DynamoDBStore beyond the contract for long sessions: a compacted session's read is bounded
by what came after its latest compaction (one Query, the same items at any length), and forks
copy nothing: they read their sources' partitions (one Query per segment a window reaches),
hold them with reference items across deletes, and release them when they go.

Runs on moto in-process (calls into moto serialised, see ``tests/_moto.py``) and on Amazon's
DynamoDB Local where it can run (S3 stays on moto); every count is taken on the wire with a
botocore hook on the store's client.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

import dormant
from dormant.errors import InputError, SessionNotFound, StoreError
from dormant.events import AssistantEvent, CompactionEvent, UserEvent
from dormant.session import Session
from dormant.stores import DynamoDBStore
from dormant.stores._dynamodb import layout
from tests import _dynamodb_local
from tests._moto import dynamodb_engine

TABLE = "dormant-forks"
BUCKET = "dormant-forks-ledger"
#: A compaction every this many turns (its tail keeps the turn before and its own).
COMPACT_EVERY = 12
LEGACY = json.loads((Path(__file__).parents[1] / "fixtures" / "dynamodb"
                     / "legacy_session.json").read_text())


#: DynamoDB engines: DynamoDB Local joins where it can run (see tests/conformance/conftest.py).
ENGINES = ["moto", *(["dynamodb-local"] if _dynamodb_local.unavailable() is None else [])]


@pytest.fixture(params=ENGINES)
def aws(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with dynamodb_engine(request.param, monkeypatch, table=TABLE, bucket=BUCKET):
        yield


def _store(**kwargs: Any) -> DynamoDBStore:
    store = DynamoDBStore(TABLE, **kwargs)
    store.ensure_table()
    return store


@pytest.fixture
def store(aws: None) -> DynamoDBStore:
    return _store()


def _keys(session_id: str) -> list[str]:
    pages = boto3.client("dynamodb").get_paginator("query").paginate(
        TableName=TABLE, KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": session_id}})
    return [item["sk"]["S"] for page in pages for item in page["Items"]]


def _objects() -> set[str]:
    listed = boto3.client("s3").list_objects_v2(Bucket=BUCKET)
    return {o["Key"] for o in listed.get("Contents", [])}


class Wire:
    """The requests a store's client sends (operation, and the partition a Query reads) and
    what each Query returned (items, and their bytes as DynamoDB counts them)."""

    def __init__(self, store: DynamoDBStore) -> None:
        self.sent: list[tuple[str, str | None]] = []
        self.items = 0
        self.bytes = 0
        self.keys: list[str] = []
        events = store._client.meta.events
        events.register_first("before-send.dynamodb", self._request)
        events.register("after-call.dynamodb.Query", self._queried)

    def start(self) -> Wire:
        self.sent.clear()
        self.keys.clear()
        self.items = self.bytes = 0
        return self

    @property
    def operations(self) -> list[str]:
        return [operation for operation, _ in self.sent]

    def _request(self, request: Any, **_: Any) -> None:
        target = request.headers.get("X-Amz-Target", b"")
        operation = (target.decode() if isinstance(target, bytes) else str(target)
                     ).rpartition(".")[2]
        body = json.loads(request.body or b"{}")
        partition = body.get("ExpressionAttributeValues", {}).get(":pk", {}).get("S")
        self.sent.append((operation, partition))

    def _queried(self, parsed: dict[str, Any], **_: Any) -> None:
        found = parsed.get("Items", [])
        self.items += len(found)
        self.bytes += sum(layout.item_size(item) for item in found)
        self.keys += [item["sk"]["S"] for item in found]


def _talk(app: dormant.App, session: Session, name: str, turns: int) -> None:
    for n in range(turns):
        session.input.message(f"{name} {n:05d}")
        session.add_event(AssistantEvent(text=f"reply {n:05d}"))
        assert app.sessions.commit(session).ok


# --- compacted windows ---------------------------------------------------------------------------


def _compacted_session(store: DynamoDBStore, name: str, turns: int) -> Session:
    """``turns`` turns, one commit each; every ``COMPACT_EVERY``-th compacts what is before
    the turn before it."""
    app = dormant.App(store=store)
    session = app.sessions.create(name)
    for n in range(turns):
        session.input.message(f"turn {n:05d}")
        session.add_event(AssistantEvent(text=f"reply {n:05d}"))
        if n % COMPACT_EVERY == COMPACT_EVERY - 1:
            session.add_event(CompactionEvent(summary=f"turns to {n - 2}",
                                            tail_start=session.head.turn_starts[-2], turns=n - 1))
        assert app.sessions.commit(session).ok
    return session


def _compacted_read(turns: int) -> tuple[Wire, Wire, list[str]]:
    """A compacted load of a ``turns``-turn session, by the process that wrote it (it
    remembers the head) and by a fresh one (it remembers nothing): what each read."""
    store = _store()
    written = _compacted_session(store, f"len-{turns:05d}", turns)
    wire = Wire(store).start()
    loaded = store.load(written.session_id, compacted=True)
    assert loaded is not None and loaded.first_seq == written.head.compacted_to > 0
    assert [e.id for e in loaded.events] == [
        e.id for e in written.events[written.head.compacted_to:]]
    fresh = DynamoDBStore(TABLE)
    cold = Wire(fresh).start()
    again = fresh.load(written.session_id, compacted=True)
    assert again is not None and again.first_seq == loaded.first_seq
    texts = [e.text for e in loaded.events if isinstance(e, UserEvent)]
    return wire, cold, texts


def test_a_compacted_load_reads_the_same_at_any_length(aws: None) -> None:
    """``load(compacted=True)`` with no ``turns``: one Query, sized from the remembered head's
    turns since the compaction, and the same items (and about the same bytes) at turn 100 and
    at turn 1,996 (the same place in the compaction and checkpoint cycles)."""
    cycle = 2 * COMPACT_EVERY  # = layout.CHECKPOINT_EVERY: one version per turn here
    assert cycle == layout.CHECKPOINT_EVERY
    short, short_cold, short_texts = _compacted_read(100)
    long, long_cold, long_texts = _compacted_read(100 + 79 * cycle)

    assert short_texts == [f"turn {n:05d}" for n in range(94, 100)]
    assert long_texts == [f"turn {n:05d}" for n in range(94 + 79 * cycle, 100 + 79 * cycle)]
    for wire in (short, long):
        assert wire.operations == ["Query"]
        assert wire.items <= 2 + layout.CHECKPOINT_EVERY
    assert long.items == short.items
    assert abs(long.bytes - short.bytes) <= short.bytes // 20, (short.bytes, long.bytes)
    # Remembering nothing, the read starts from a modest guess: still bounded, still flat.
    assert long_cold.operations == short_cold.operations == ["Query"]
    assert long_cold.items == short_cold.items <= 2 + 2 * layout.CHECKPOINT_EVERY


def test_a_compacted_load_pages_on_when_the_guess_is_short(store: DynamoDBStore) -> None:
    """A compaction long ago (more turns since than the guess): the read pages on, doubling,
    until the tail's start, and stops there."""
    app = dormant.App(store=store)
    session = app.sessions.create("wide")
    _talk(app, session, "early", 3)
    session.add_event(CompactionEvent(summary="early", tail_start=session.head.seq, turns=3))
    assert app.sessions.commit(session).ok
    _talk(app, session, "late", 70)
    fresh = DynamoDBStore(TABLE)
    wire = Wire(fresh).start()

    loaded = fresh.load("session_wide", compacted=True)

    assert loaded is not None and loaded.first_seq == 6
    assert [e.type for e in loaded.events][:2] == ["compaction", "user"]
    assert 1 < wire.operations.count("Query") <= 3
    assert not [k for k in wire.keys if k < layout.VERSION_PREFIX]  # never below the window


# --- forks: reads -------------------------------------------------------------------------------


def test_a_fork_reads_its_own_window_in_one_query_and_each_segment_in_one_more(
        store: DynamoDBStore) -> None:
    app = dormant.App(store=store)
    source = app.sessions.create("source")
    _talk(app, source, "source", 30)
    child = app.sessions.fork("source", new_session_id="child")
    _talk(app, child, "child", 40)
    grandchild = app.sessions.fork("child", new_session_id="grandchild")
    _talk(app, grandchild, "grandchild", 2)
    assert store.load("session_child", turns=3) is not None  # the window is learned
    wire = Wire(store).start()

    own = store.load("session_child", turns=3)

    assert own is not None and [e.text for e in own.events if isinstance(e, UserEvent)] == [
        f"child {n:05d}" for n in range(37, 40)]
    assert wire.sent == [("Query", "session_child")]
    # The grandchild's reference sorts below every version item: a window never reaches it.
    assert "#f#0000000000#session_grandchild" in _keys("session_child")
    assert not [k for k in wire.keys if not k.startswith(layout.VERSION_PREFIX)]

    wire.start()
    reaching = store.load("session_child", turns=43)
    assert reaching is not None
    assert [e.text for e in reaching.events if isinstance(e, UserEvent)] == [
        *(f"source {n:05d}" for n in range(27, 30)), *(f"child {n:05d}" for n in range(40))]
    assert reaching.first_seq == 54
    assert wire.sent == [("Query", "session_child"), ("Query", "session_source")]

    wire.start()
    whole = store.load("session_grandchild")
    assert whole is not None and whole.first_seq == 0 and len(whole.events) == 144
    kept = DynamoDBStore(TABLE).load("session_child")  # another client: not on the wire
    assert kept is not None and [e.id for e in whole.events[:140]] == [e.id for e in kept.events]
    assert wire.sent == [("Query", "session_grandchild"), ("Query", "session_child"),
                         ("Query", "session_source")]


def test_a_fork_holds_only_its_own_events_and_references_below_every_version(
        store: DynamoDBStore) -> None:
    app = dormant.App(store=store)
    source = app.sessions.create("origin", owner="alice")
    _talk(app, source, "origin", 3)
    fork = app.sessions.fork("origin", at_version=3, new_session_id="branch")

    assert _keys("session_branch") == ["e#v0000000001"]
    keys = _keys("session_origin")
    assert "#f#0000000000#session_branch" in keys
    assert sorted(keys) == keys and keys[0].startswith(layout.FORK_PREFIX)  # below e#v…
    # the fork as loaded: its lineage with where the source's items start (base)
    assert fork.head.lineage == [{"session": "session_origin", "created_at": source.head.created_at,
                                  "version": 3, "end": 4, "base": 0}]
    stored = store.load("session_branch")
    assert stored is not None and stored.head.lineage[0]["base"] == 0
    assert store.version_end("session_branch", 1) == 4  # a fork's first version: its point
    assert store.version_end("session_origin", 3) == 4
    assert store.version_end("session_origin", 9) is None
    assert store.landed("session_origin", 2, source.events[2].id) is True
    assert store.landed("session_branch", 2, source.events[2].id) is False  # not its commit
    assert store.has_once("session_branch", "m:" + source.events[0].message_id) is False  # type: ignore[union-attr]
    assert {s.session_id for s in app.sessions.list(principal="alice")} == {
        "session_origin", "session_branch"}


def test_a_fork_of_a_session_created_again_reads_that_incarnation_s_items(
        store: DynamoDBStore) -> None:
    """The source's items are numbered after an earlier session's under its id: the fork's
    lineage keeps the offset (``base``) through the fork's own commits, which the caller
    makes with the head ``fork`` returned (it has no store keys)."""
    app = dormant.App(store=store)
    first = app.sessions.create("again")
    _talk(app, first, "first life", 2)
    assert app.sessions.delete("again")
    second = app.sessions.create("again")
    _talk(app, second, "second life", 2)
    fork = app.sessions.fork("again", new_session_id="sprout")
    _talk(app, fork, "sprout", 1)
    grown = app.sessions.fork("sprout", new_session_id="tree")

    for sid in ("session_sprout", "session_tree"):
        loaded = DynamoDBStore(TABLE).load(sid)  # nothing remembered: all from the table
        assert loaded is not None
        assert loaded.head.lineage[0]["base"] == 4  # after the first life's marker
        assert [e.text for e in loaded.events if isinstance(e, UserEvent)] == [
            "second life 00000", "second life 00001", "sprout 00000"]
    tree = DynamoDBStore(TABLE).load("session_tree")
    assert grown.head.seq == 6 and tree is not None and len(tree.events) == 6


def test_version_end_is_one_query_when_the_session_is_remembered(store: DynamoDBStore) -> None:
    app = dormant.App(store=store)
    session = app.sessions.create("ends")
    _talk(app, session, "ends", 4)
    wire = Wire(store).start()
    assert [store.version_end("session_ends", v) for v in range(1, 6)] == [0, 2, 4, 6, 8]
    assert wire.operations == ["Query"] * 4  # the newest comes from the remembered head
    fresh = DynamoDBStore(TABLE)
    wire = Wire(fresh).start()
    assert fresh.version_end("session_ends", 2) == 2
    assert wire.operations == ["Query", "Query"]  # the head first, then the version


# --- forks: writes that race ---------------------------------------------------------------------


def test_a_fork_of_a_source_that_moved_on_elsewhere_reads_it_again_and_lands(
        store: DynamoDBStore) -> None:
    app = dormant.App(store=store)
    source = app.sessions.create("busy")
    _talk(app, source, "busy", 2)
    stored = store.load("session_busy")  # this process remembers version 3 ...
    assert stored is not None
    elsewhere = dormant.App(store=DynamoDBStore(TABLE))
    _talk(elsewhere, source, "elsewhere", 1)  # ... while another commits version 4
    head = dormant._fork.fork_head(stored, 3, stored.head.seq, "session_twig", None)

    assert store.fork(head).ok

    twig = app.sessions.get("twig")
    assert twig is not None and len(twig.events) == 4
    assert [e.text for e in twig.events if isinstance(e, UserEvent)] == [
        "busy 00000", "busy 00001"]


def test_a_fork_of_a_source_deleted_elsewhere_is_refused_and_writes_nothing(
        store: DynamoDBStore) -> None:
    app = dormant.App(store=store)
    source = app.sessions.create("doomed")
    _talk(app, source, "doomed", 2)
    stored = store.load("session_doomed")
    assert stored is not None
    assert DynamoDBStore(TABLE).delete("session_doomed")
    head = dormant._fork.fork_head(stored, 3, stored.head.seq, "session_orphan", None)

    with pytest.raises(SessionNotFound):
        store.fork(head)

    assert _keys("session_orphan") == []
    assert [k for k in _keys("session_doomed") if not k.startswith("e#v0000000004")] == []


def test_a_fork_landing_while_its_source_is_deleted_keeps_what_it_reads(
        store: DynamoDBStore) -> None:
    """The fork commits after the delete read the source's keys and before its marker: the
    marker is refused (the head's ``fk`` moved), the delete reads again, and keeps the items
    the fork reads."""
    app = dormant.App(store=store)
    source = app.sessions.create("racing")
    _talk(app, source, "racing", 3)
    forker = DynamoDBStore(TABLE)
    stored = forker.load("session_racing")
    assert stored is not None
    head = dormant._fork.fork_head(stored, 4, stored.head.seq, "session_racer", None)
    landed: list[bool] = []

    def fork_first(**_: Any) -> None:
        if not landed:
            landed.append(forker.fork(head).ok)

    store._client.meta.events.register("before-call.dynamodb.TransactWriteItems", fork_first)
    assert store.delete("session_racing") is True
    store._client.meta.events.unregister("before-call.dynamodb.TransactWriteItems", fork_first)

    assert landed == [True]
    assert store.load("session_racing") is None
    racer = app.sessions.get("racer")
    assert racer is not None and [e.id for e in racer.events] == [e.id for e in source.events]


def test_a_source_and_its_last_fork_deleted_side_by_side_leave_nothing_behind(
        store: DynamoDBStore) -> None:
    """The fork goes after the source's delete read its keys (a reference: keep) and before
    its marker (so the fork saw the source live: not its to clear): the source's delete looks
    at the references again once it is marked, finds none, and clears what it kept."""
    app = dormant.App(store=store)
    source = app.sessions.create("pair")
    _talk(app, source, "pair", 3)
    app.sessions.fork("pair", new_session_id="leaf")
    other = DynamoDBStore(TABLE)
    gone: list[bool] = []

    def delete_the_fork_first(**_: Any) -> None:
        if not gone:
            gone.append(other.delete("session_leaf"))

    store._client.meta.events.register("before-call.dynamodb.TransactWriteItems",
                                       delete_the_fork_first)
    assert store.delete("session_pair") is True
    store._client.meta.events.unregister("before-call.dynamodb.TransactWriteItems",
                                         delete_the_fork_first)

    assert gone == [True]
    assert _keys("session_pair") == ["e#v0000000005"]  # only the marker
    assert _keys("session_leaf") == ["e#v0000000002"]


# --- forks: deletes ------------------------------------------------------------------------------


def test_a_deleted_source_s_kept_items_leave_the_listing_and_go_with_the_last_fork(
        aws: None) -> None:
    store = _store(bucket=BUCKET, offload_above=1_000)
    app = dormant.App(store=store)
    source = app.sessions.create("root", owner="alice")
    source.input.message("big " * 400)  # offloaded: its event lives in S3
    assert app.sessions.commit(source).ok
    _talk(app, source, "root", 2)
    assert source.head.version == 4 and len(_objects()) == 1
    first = app.sessions.fork("root", at_version=2, new_session_id="first", owner="alice")
    second = app.sessions.fork("root", new_session_id="second", owner="alice")
    _talk(app, second, "second", 1)

    assert app.sessions.delete("root") is True
    # Both forks read versions 1-4 (the second the newest): they stay, out of the index.
    assert _keys("session_root") == [
        "#f#0000000000#session_first", "#f#0000000000#session_second",
        *(layout.version_key(v) for v in range(1, 6))]
    assert {s.session_id for s in app.sessions.list(principal="alice")} == {
        "session_first", "session_second"}
    assert len(_objects()) == 1
    reborn = app.sessions.create("root", owner="alice")
    _talk(app, reborn, "reborn", 1)
    assert [(s.session_id, s.version) for s in app.sessions.list(principal="alice")
            if s.session_id == "session_root"] == [("session_root", 2)]

    assert app.sessions.delete("second") is True
    loaded = app.sessions.get("first")
    assert loaded is not None and loaded.events[0].text == "big " * 400  # type: ignore[union-attr]
    assert len(loaded.events) == first.head.seq == 1
    assert app.sessions.delete("first") is True

    # The last reference gone, the old incarnation's items and object go; the new one stays.
    assert _keys("session_root") == [layout.version_key(v) for v in (5, 6, 7)]
    assert _objects() == set()
    again = app.sessions.get("root")
    assert again is not None and [e.text for e in again.events if isinstance(e, UserEvent)] == [
        "reborn 00000"]
    assert _keys("session_first") == ["e#v0000000002"]  # its marker, as for any session


def test_a_delete_of_a_session_no_fork_reads_costs_what_it_did(store: DynamoDBStore) -> None:
    app = dormant.App(store=store)
    session = app.sessions.create("plain")
    _talk(app, session, "plain", 3)
    wire = Wire(store).start()

    assert store.delete("session_plain") is True

    # the head, its references and fork mark, the marker; then one purge step, inline
    assert wire.operations[:8] == ["Query", "Query", "GetItem", "TransactWriteItems",
                                   "Query", "Query", "Query", "BatchWriteItem"]
    assert wire.operations[8:] in ([], ["PutItem"])  # the marker leaves the listing
    assert _keys("session_plain") == ["e#v0000000005"]


# --- forks of sessions from the old layout -------------------------------------------------------


@pytest.fixture
def legacy(store: DynamoDBStore) -> DynamoDBStore:
    client = boto3.client("dynamodb")
    for item in LEGACY["items"]:
        client.put_item(TableName=TABLE, Item=item)
    return store


def test_a_session_still_in_the_old_layout_is_forked_only_once_it_moved(
        legacy: DynamoDBStore) -> None:
    app = dormant.App(store=legacy)
    sid = LEGACY["head"]["session_id"]
    with pytest.raises(StoreError, match="old DynamoDB layout"):
        app.sessions.fork(sid, new_session_id="early")
    assert _keys("session_early") == []

    session = app.sessions.get(sid)
    assert session is not None
    session.input.message("moved now")
    assert app.sessions.commit(session).ok  # migrates it: version 5 is a version item
    with pytest.raises(InputError, match="not in the store"):
        app.sessions.fork(sid, at_version=3)  # written by the old layout: no version item
    app.sessions.fork(sid, new_session_id="late")
    fork = app.sessions.get("late")
    assert fork is not None

    assert legacy.delete(sid) is True
    loaded = app.sessions.get("late")
    assert loaded is not None and [e.id for e in loaded.events] == [e.id for e in fork.events]
    assert [e.text for e in loaded.events if isinstance(e, UserEvent)][-2:] == [
        "bye", "moved now"]
    assert app.sessions.delete("late") is True
    assert _keys(sid) == ["e#v0000000006"]  # the slices went with the last fork
