"""One item per commit: the version key decides races, the head rebuilds exactly from
checkpoint and deltas, ``list`` reads the index newest first, control writes follow the head,
and the compact encoding gives back the very events it was given."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from pydantic import BaseModel

import dormant
from dormant._head import Head
from dormant.events import (
    ApprovalDecided,
    ApprovalRequested,
    AssistantEvent,
    Event,
    InvocationEnd,
    InvocationStart,
    InvocationYield,
    QueuedEvent,
    RetryEvent,
    StateDelta,
    TimerSet,
    ToolCall,
    ToolResult,
    UserEvent,
    load_events,
)
from dormant.models import ScriptedModel
from dormant.session import Session
from dormant.stores import DynamoDBStore
from dormant.stores._dynamodb import codec, layout
from dormant.types import Control
from tests._moto import aws_env, in_process_aws

TABLE = "dormant-versions"


class Nights(BaseModel):
    nights: int


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[DynamoDBStore]:
    aws_env(monkeypatch)
    with in_process_aws():
        store = DynamoDBStore(TABLE)
        store.ensure_table()
        yield store


def _keys(session_id: str) -> list[str]:
    found = boto3.client("dynamodb").query(
        TableName=TABLE, KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": session_id}})["Items"]
    return [item["sk"]["S"] for item in found]


# --- races ---------------------------------------------------------------------------------------


def test_commits_racing_at_one_version_land_exactly_once(store: DynamoDBStore) -> None:
    app = dormant.App(store=store)
    app.sessions.create("race")
    racers = 8
    sessions = [app.sessions.get("race") for _ in range(racers)]
    barrier = threading.Barrier(racers)
    results: list[Any] = [None] * racers

    def commit(n: int) -> None:
        session = sessions[n]
        assert session is not None
        session.input.message(f"racer {n}")
        mine = DynamoDBStore(TABLE)  # its own process, as far as memory goes
        barrier.wait()
        results[n] = mine.append(session.head, session.new_events,
                                 expected_version=session.version)

    threads = [threading.Thread(target=commit, args=(n,)) for n in range(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    won = [r for r in results if r.ok]
    assert len(won) == 1 and won[0].version == 2
    assert all(r.conflict and r.current_version == 2 for r in results if not r.ok)
    loaded = store.load("session_race")
    assert loaded is not None and loaded.head.version == 2
    assert len([e for e in loaded.events if isinstance(e, UserEvent)]) == 1
    assert [k for k in _keys("session_race") if k.startswith("e#v")] == [
        "e#v0000000001", "e#v0000000002"]


# --- the head, rebuilt ---------------------------------------------------------------------------


def _varied_turns(app: dormant.App, turns: int) -> None:
    """Turns that touch most of the head: state, tool calls, approvals, ids, timers."""
    book = app.tool(name="book", description="Book nights", schema=Nights,
                    execute=lambda ctx: {"booked": ctx.args.nights})
    model = ScriptedModel()
    rest = app.handler.rest(agent=app.agent(name="concierge", model=model, tools=[book],
                                            tool_approval={"book": "user-approval"}))
    for n in range(turns):
        if n % 5 == 3:
            model.add({"tool_calls": [{"name": "book", "args": {"nights": n}}]})
            paused = rest({"session_id": "varied",
                           "input": {"message": f"book {n}", "state": {"n": n}}})
            assert paused.pending_approvals
            model.add(f"booked {n}")
            done = rest({"session_id": "varied", "input": {"approvals": [
                {"approval_id": paused.pending_approvals[0].approval_id, "approved": True}]}})
            assert done.commit_status == "committed"
        else:
            model.add(f"reply {n}")
            given: dict[str, Any] = {"message": f"turn {n}"}
            if n % 3 == 0:
                given["messageId"] = f"m-{n}"
            assert rest({"session_id": "varied", "input": given}).commit_status == "committed"


def test_the_head_rebuilds_exactly_from_its_checkpoint_and_deltas(store: DynamoDBStore) -> None:
    app = dormant.App(store=store)
    _varied_turns(app, 45)
    written = store.load("session_varied")
    assert written is not None and written.head.version > 2 * layout.CHECKPOINT_EVERY

    fresh = DynamoDBStore(TABLE)  # nothing remembered: everything from the table
    for turns in (None, 0, 1, 3, 20):
        loaded = fresh.load("session_varied", turns=turns)
        assert loaded is not None
        assert dataclasses.asdict(loaded.head) == dataclasses.asdict(written.head), turns
    # The head is stored whole only at checkpoints: most items carry a delta.
    whole = app.sessions.get("varied")
    assert whole is not None and whole.head.turn_starts == written.head.turn_starts


def test_a_writer_that_does_not_hold_the_previous_head_writes_a_checkpoint(
        store: DynamoDBStore) -> None:
    app = dormant.App(store=store)
    session = app.sessions.create("fresh")
    other = DynamoDBStore(TABLE)
    assert other.load("session_fresh") is not None  # it remembers version 1 ...
    for n in range(3):
        session.input.message(f"turn {n}")
        assert app.sessions.commit(session).ok  # ... while the session moves on elsewhere
    session.input.message("from elsewhere")

    assert other.append(session.head, session.new_events, expected_version=4).ok

    item = boto3.client("dynamodb").get_item(
        TableName=TABLE, Key={"pk": {"S": "session_fresh"}, "sk": {"S": "e#v0000000005"}})
    assert "h" in codec.unpack(item["Item"]["b"]["B"])  # the whole head, not a delta
    loaded = DynamoDBStore(TABLE).load("session_fresh")
    assert loaded is not None and loaded.head.version == 5
    assert dataclasses.asdict(loaded.head) == dataclasses.asdict(session.head) | {
        "version": 5, "updated_at": loaded.head.updated_at,
        "commit_seqs": loaded.head.commit_seqs}


def test_a_windowed_load_reads_a_bounded_number_of_items_at_any_turn(
        store: DynamoDBStore) -> None:
    app = dormant.App(store=store)
    session = app.sessions.create("flat")
    counts: list[int] = []
    returned: list[int] = []

    def count(parsed: dict[str, Any], **_: Any) -> None:
        returned.append(len(parsed.get("Items", [])))

    store._client.meta.events.register("after-call.dynamodb.Query", count)
    for n in range(200):
        session.input.message(f"turn {n}")
        assert app.sessions.commit(session).ok
        if n + 1 in (20, 77, 200):
            returned.clear()
            loaded = store.load("session_flat", turns=2)
            assert loaded is not None and len(loaded.events) == 2
            counts.append(sum(returned))
    # The window (2 items) and the head's chain back to its checkpoint (at most 24 items):
    # the same bound at turn 20 and turn 200.
    assert len(counts) == 3 and max(counts) <= 2 + layout.CHECKPOINT_EVERY


# --- list ----------------------------------------------------------------------------------------


def test_list_is_newest_first_with_each_session_s_latest_version(store: DynamoDBStore) -> None:
    app = dormant.App(store=store)
    sessions = {name: app.sessions.create(name, owner="alice") for name in ("a", "b", "c")}
    bob = app.sessions.create("d", owner="bob")
    order = ["a", "b", "a", "c", "a", "b", "c", "c", "a", "b"] * 4 + ["c", "a"]
    for n, name in enumerate(order):
        session = sessions[name]
        session.input.message(f"{name} {n}")
        assert app.sessions.commit(session).ok
    bob.input.message("bob's")
    assert app.sessions.commit(bob).ok

    listed = app.sessions.list(principal="alice")

    assert [(s.session_id, s.version) for s in listed] == [
        ("session_a", sessions["a"].version), ("session_c", sessions["c"].version),
        ("session_b", sessions["b"].version)]
    assert [s.status for s in listed] == ["active"] * 3
    assert listed == sorted(listed, key=lambda s: s.updated_at, reverse=True)
    assert [s.session_id for s in app.sessions.list(principal="alice", limit=2)] == [
        "session_a", "session_c"]
    assert {s.session_id for s in app.sessions.list()} == {
        "session_a", "session_b", "session_c", "session_d"}
    assert app.sessions.delete("a")
    assert [s.session_id for s in app.sessions.list(principal="alice")] == [
        "session_c", "session_b"]


def test_list_shows_a_session_waiting_on_an_approval_as_awaiting_input(
        store: DynamoDBStore) -> None:
    app = dormant.App(store=store)
    book = app.tool(name="book", description="Book nights", schema=Nights,
                    execute=lambda ctx: {"booked": ctx.args.nights})
    model = ScriptedModel([{"tool_calls": [{"name": "book", "args": {"nights": 2}}]}])
    rest = app.handler.rest(agent=app.agent(name="c", model=model, tools=[book],
                                            tool_approval={"book": "user-approval"}))
    assert rest({"session_id": "wait", "principal": "alice",
                 "input": {"message": "book"}}).pending_approvals

    (listed,) = app.sessions.list(principal="alice")

    assert (listed.session_id, listed.status) == ("session_wait", "awaiting_input")


# --- control writes follow the head --------------------------------------------------------------


def test_control_writes_are_refused_once_the_head_moved(store: DynamoDBStore) -> None:
    app = dormant.App(store=store)
    session = app.sessions.create("ctl")
    assert store.write_control("session_ctl", Control(rev=1), head_version=1) is True
    session.input.message("a commit")
    assert app.sessions.commit(session).ok

    assert store.write_control("session_ctl", Control(rev=2), head_version=1) is False
    assert DynamoDBStore(TABLE).write_control("session_ctl", Control(rev=2),
                                              head_version=1) is False  # nothing remembered
    assert store.write_control("session_ctl", Control(rev=2), head_version=2) is True
    assert store.write_control("session_ctl", Control(rev=2), head_version=2) is False  # rev
    assert app.sessions.delete("ctl")
    assert store.write_control("session_ctl", Control(rev=1), head_version=2) is False
    assert store.write_control("session_new", Control(rev=1), head_version=0) is True


def test_a_session_created_again_after_a_delete_starts_over(store: DynamoDBStore) -> None:
    app = dormant.App(store=store)
    old = app.sessions.create("again")
    old.input.message("old life")
    assert app.sessions.commit(old).ok
    assert app.sessions.delete("again")
    old.input.message("late")
    assert app.sessions.commit(old).conflict  # in flight at the deleted head: refused

    new = DynamoDBStore(TABLE)
    app2 = dormant.App(store=new)
    again = app2.sessions.create("again")
    again.input.message("new life")
    assert app2.sessions.commit(again).ok

    loaded = store.load("session_again")
    assert loaded is not None and loaded.head.version == 2
    assert [e.text for e in loaded.events if isinstance(e, UserEvent)] == ["new life"]
    assert [s.version for s in app.sessions.list()] == [2]


# --- the compact encoding ------------------------------------------------------------------------


def _events() -> list[Event]:
    inv = "inv_0123456789abcdef_1"
    return [
        InvocationStart(invocation_id=inv, agent="a"),
        UserEvent(invocation_id=inv, text="hé ✓", message_id="m-1"),
        UserEvent(invocation_id=None, text="appended", queued=True),
        ToolCall(invocation_id=inv, call_id="c1", name="book", args={"nights": 0}),
        ApprovalRequested(invocation_id=inv, call_id="c1", approval_id="ap1", name="book",
                          args=None),
        InvocationYield(invocation_id=inv, reason="tool"),
        ApprovalDecided(invocation_id=inv, approval_id="ap1", approved=False, reason=""),
        ToolResult(invocation_id=inv, call_id="c1", name="book", result=0, ts=1),
        StateDelta(invocation_id="inv_other", patch=[{"op": "add", "path": "/x", "value": 0}]),
        TimerSet(name="t", fire_at=5, message="wake"),
        QueuedEvent(message_id="q1", text="later", position=0),
        RetryEvent(invocation_id=inv, retry_id="r1"),
        AssistantEvent(invocation_id=inv, text=""),
        InvocationEnd(invocation_id=inv, status="completed"),
    ]


def test_events_decode_to_exactly_what_was_encoded() -> None:
    events = _events()
    dumped = [e.model_dump(mode="json") for e in events]

    updated_at = events[-1].ts + 7
    shared, compact = codec.encode_events(dumped, updated_at)
    doc = codec.unpack(codec.pack({"s": 0, "i": shared, "ev": compact}))
    back = load_events(codec.decode_events(doc["i"], doc["ev"], updated_at))

    assert back == events
    assert [e.model_dump(mode="json") for e in back] == dumped
    assert "invocation_id" not in compact[1] and "steer" not in compact[1]
    # Times are differences: from the item's updated-at, then from the event before.
    assert compact[0]["ts"] == events[0].ts - updated_at
    assert compact[7]["ts"] == 1 - events[6].ts  # a time before the previous one too
    assert "ts" not in compact[2] or compact[2]["ts"] == events[2].ts - events[1].ts


def test_the_omitted_defaults_are_format_1_s() -> None:
    """Events stored compactly omit fields at these defaults and restore them from here: a
    model whose default changes must not change what an old item means (a new format)."""
    # ``audio`` came later: an item written before it has no ``audio`` and means False,
    # which is what decoding restores (a new field's default is the old items' meaning).
    assert codec.EVENT_DEFAULTS["user"] == {"steer": False, "queued": False, "audio": False}
    # likewise ``deferred`` (a result supplied from outside): an older item means False.
    assert codec.EVENT_DEFAULTS["tool_result"] == {"result": None, "error": None,
                                                   "denied": False, "preliminary": False,
                                                   "deferred": False,
                                                   "provider_executed": False,
                                                   "provider_metadata": None}
    # and the tool-call metadata (seed 003: dynamic, provider-executed, provider and tool
    # metadata): an older item's call is none of these.
    assert codec.EVENT_DEFAULTS["tool_call"] == {"args": None, "dynamic": False,
                                                 "provider_executed": False,
                                                 "provider_metadata": None,
                                                 "tool_metadata": None}
    assert codec.EVENT_DEFAULTS["invocation_start"] == {"agent": ""}
    assert codec.EVENT_DEFAULTS["approval_decided"] == {"call_id": "", "reason": None}
    head = Head("s")
    assert {k: v for k, v in head.model_dump(mode="json").items()
            if k not in ("session_id", "version")} == codec.HEAD_DEFAULTS


def test_a_payload_that_does_not_shrink_is_stored_plain() -> None:
    doc = {"q": "Zx9Q"}
    assert codec.pack(doc)[0] == codec.RAW_2 and codec.unpack(codec.pack(doc)) == doc
    chatty = {"s": 0, "ev": [{"type": "user", "text": "hello " * 50}]}
    assert codec.pack(chatty)[0] == codec.DEFLATE_2
    assert codec.unpack(codec.pack(chatty)) == chatty
    assert codec.format_of(codec.pack(doc)) == codec.format_of(codec.pack(chatty)) == 2


def test_a_session_head_survives_a_store_that_remembers_nothing(store: DynamoDBStore) -> None:
    session = Session.new("session_plain")
    session.input.message("hello")
    assert store.append(session.head, session.new_events, expected_version=0).ok
    loaded = DynamoDBStore(TABLE).load("session_plain")
    assert loaded is not None and loaded.head.session_id == "session_plain"


# --- TTL and the head's chain --------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_live_head_rebuilds_from_items_whose_history_aged_out(store: DynamoDBStore) -> None:
    """Items read as gone at ``lx`` but are deleted a quarter TTL later; a chain is cut when
    its checkpoint is a quarter TTL old: so a live head always finds its chain."""
    clock = _Clock()
    ttl = DynamoDBStore(TABLE, ttl_seconds=100, clock=clock)
    app = dormant.App(store=ttl)
    session = app.sessions.create("aging")  # version 1: a checkpoint, lx = t + 100
    for step in (10, 10):
        clock.now += step
        session.input.message(f"at +{clock.now - 1_800_000_000:.0f}")
        assert app.sessions.commit(session).ok  # deltas: the checkpoint is 10, 20 s old
    clock.now += 95  # versions 1 and 2 read as expired, version 3 does not

    loaded = DynamoDBStore(TABLE, ttl_seconds=100, clock=clock).load("session_aging")

    assert loaded is not None and loaded.head.version == 3
    stamped = {"updated_at": 0}  # the store stamps the head it writes
    assert dataclasses.asdict(loaded.head) | stamped == dataclasses.asdict(session.head) | stamped
    assert [e.text for e in loaded.events if isinstance(e, UserEvent)] == ["at +20"]
    clock.now += 10  # 30 s past the last commit: a new chain starts (the old one is too old)
    session.input.message("later")
    assert app.sessions.commit(session).ok
    item = boto3.client("dynamodb").get_item(
        TableName=TABLE, Key={"pk": {"S": "session_aging"}, "sk": {"S": "e#v0000000004"}})
    assert "h" in codec.unpack(item["Item"]["b"]["B"])


def test_a_head_changed_in_place_by_its_caller_leaves_the_remembered_one_as_stored(
        store: DynamoDBStore) -> None:
    """The next version is written as a delta against the head this process read: a caller
    folding events into the head it was given (nested state changed in place) must not
    change that."""
    app = dormant.App(store=store)
    app.sessions.create("nested", state={"prefs": {"nights": 1, "rooms": [1]}})
    session = app.sessions.get("nested")
    assert session is not None
    session.add_event(StateDelta(patch=[{"op": "replace", "path": "/prefs/nights", "value": 2},
                                      {"op": "add", "path": "/prefs/rooms/-", "value": 2}]))
    assert app.sessions.commit(session).ok
    session = app.sessions.get("nested")
    assert session is not None
    session.add_event(StateDelta(patch=[{"op": "replace", "path": "/prefs/nights", "value": 3}]))
    assert app.sessions.commit(session).ok

    loaded = DynamoDBStore(TABLE).load("session_nested")

    assert loaded is not None and loaded.head.version == 3
    assert loaded.head.state == {"prefs": {"nights": 3, "rooms": [1, 2]}}
