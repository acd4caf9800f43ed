"""DynamoDBStore beyond the shared contract: item layout, large events, retries, TTL, cost.

Runs against two engines: moto in-process (calls into moto serialised, see
``tests/_moto.py``), and Amazon's DynamoDB Local (``tests/_dynamodb_local.py``; S3 stays on
moto), which enforces what moto does not (the 4 MB transaction, client request tokens, unused
expression values). Faults neither produces (throttling, TransactionConflict) are injected
with a ``before-send`` hook.
"""

from __future__ import annotations

import json
import random
import re
import string
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from pydantic import BaseModel

import dormant
from dormant.errors import ConfigError, StoreError
from dormant.events import ToolResult, UserEvent
from dormant.models import ScriptedModel
from dormant.session import Session
from dormant.stores import DynamoDBStore
from dormant.stores._dynamodb import codec, layout
from tests import _dynamodb_local
from tests._moto import (
    FaultInjector,
    MotoServer,
    aws_env,
    client_error,
    dynamodb_engine,
    shared_moto_server,
    throttling,
    transaction_conflict,
)

TABLE = "dormant-unit"
BUCKET = "dormant-unit-ledger"
ONE_MB = 1_000_000
NOISE = string.ascii_letters + string.digits + "éü"


class Ref(BaseModel):
    ref: str


#: DynamoDB engines: DynamoDB Local joins where it can run (CI always: see
#: tests/conformance/conftest.py, which says why when it cannot).
ENGINES = ["moto", *(["dynamodb-local"] if _dynamodb_local.unavailable() is None else [])]


@pytest.fixture(params=ENGINES)
def aws(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with dynamodb_engine(request.param, monkeypatch, table=TABLE, bucket=BUCKET):
        yield


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _store(**kwargs: Any) -> DynamoDBStore:
    store = DynamoDBStore(TABLE, **kwargs)
    store.ensure_table()
    return store


def _items(session_id: str) -> list[dict[str, Any]]:
    pages = boto3.client("dynamodb").get_paginator("query").paginate(
        TableName=TABLE, KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": session_id}})
    return [item for page in pages for item in page["Items"]]


class Calls:
    """Counts DynamoDB operations a client sends."""

    def __init__(self, client: Any) -> None:
        self.operations: list[str] = []
        client.meta.events.register_first("before-send.dynamodb", self._record)

    def _record(self, request: Any, **_: Any) -> None:
        target = request.headers.get("X-Amz-Target", b"")
        self.operations.append((target.decode() if isinstance(target, bytes) else target)
                               .rpartition(".")[2])


def _noise(size: int) -> str:
    """``size`` characters that do not compress much (the store deflates its payloads, and
    these tests are about what does not fit), two-byte ones among them."""
    return "".join(random.Random(size).choices(NOISE, k=size))


def _big_tool_turn(store: DynamoDBStore, size: int) -> tuple[dormant.App, str]:
    """A real turn whose tool returns ``size`` characters."""
    app = dormant.App(name="big", store=store)
    fetch = app.tool(name="fetch", description="Fetch a document", schema=Ref,
                     execute=lambda ctx: _noise(size))
    model = ScriptedModel([{"tool_calls": [{"name": "fetch", "args": {"ref": "doc"}}]},
                           "Read it."])
    agent = app.agent(name="reader", model=model, tools=[fetch])
    response = app.handler.rest(agent=agent)({"session_id": "big",
                                              "input": {"message": "read the doc"}})
    assert response.status == "completed" and response.commit_status == "committed"
    return app, "session_big"


def _result_of(app: dormant.App, session_id: str) -> Any:
    session = app.sessions.get(session_id)
    assert session is not None
    return next(e.result for e in session.events if isinstance(e, ToolResult))


# --- the table -----------------------------------------------------------------------------------


def test_ensure_table_creates_the_declared_table_once(aws: None) -> None:
    store = DynamoDBStore(TABLE)
    assert store.ensure_table() is True
    assert store.ensure_table() is False
    client = boto3.client("dynamodb")
    table = client.describe_table(TableName=TABLE)["Table"]
    definition = DynamoDBStore.table_definition()
    assert table["KeySchema"] == DynamoDBStore.TABLE_KEY_SCHEMA == definition["KeySchema"]
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    assert [i["IndexName"] for i in table["GlobalSecondaryIndexes"]] == ["by_owner"]
    ttl = client.describe_time_to_live(TableName=TABLE)["TimeToLiveDescription"]
    assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": "expires_at"}


def test_from_env_reads_table_bucket_and_ttl(aws: None) -> None:
    store = DynamoDBStore.from_env({"DORMANT_TABLE": TABLE, "DORMANT_BUCKET": BUCKET,
                                    "DORMANT_SESSION_TTL_DAYS": "7"})
    assert (store.table_name, store.bucket, store.ttl_seconds) == (TABLE, BUCKET, 7 * 86_400)
    with pytest.raises(ConfigError, match="DORMANT_TABLE"):
        DynamoDBStore.from_env({})


def test_dormant_offload_above_sends_a_large_tool_result_to_s3(aws: None) -> None:
    """``DORMANT_OFFLOAD_ABOVE`` (bytes) reaches the store: a 900 KB tool result is an S3
    object and a small version item, not parts of a transaction; unset, it stays in the
    table."""
    env = {"DORMANT_TABLE": TABLE, "DORMANT_BUCKET": BUCKET, "DORMANT_OFFLOAD_ABOVE": "65536"}
    store = DynamoDBStore.from_env(env)
    store.ensure_table()
    app, sid = _big_tool_turn(store, 900_000)
    assert _result_of(app, sid) == _noise(900_000)
    objects = boto3.client("s3").list_objects_v2(Bucket=BUCKET)["Contents"]
    assert [o["Key"].startswith("ledger/session_big/") for o in objects] == [True]
    assert all(layout.item_size(item) < 5_000 for item in _items(sid))

    unset = DynamoDBStore.from_env({**env, "DORMANT_OFFLOAD_ABOVE": "0"})
    before = {item["sk"]["S"] for item in _items(sid)}
    app, sid = _big_tool_turn(unset, 900_000)  # the same session, one more turn
    assert len(boto3.client("s3").list_objects_v2(Bucket=BUCKET)["Contents"]) == 1
    assert max(layout.item_size(item) for item in _items(sid)
               if item["sk"]["S"] not in before) > 300_000


@pytest.mark.parametrize("value", ["64KB", "-1", "1.5", "1e6", "²"])
def test_a_bad_dormant_offload_above_is_a_clear_config_error(value: str) -> None:
    env = {"DORMANT_TABLE": TABLE, "DORMANT_BUCKET": BUCKET, "DORMANT_OFFLOAD_ABOVE": value}
    with pytest.raises(ConfigError, match=r"DORMANT_OFFLOAD_ABOVE must be a whole number "
                                          r"of bytes .*got '" + re.escape(value)):
        DynamoDBStore.from_env(env)


def test_dormant_offload_above_needs_a_bucket_and_offload_above_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="DORMANT_BUCKET is not set"):
        DynamoDBStore.from_env({"DORMANT_TABLE": TABLE, "DORMANT_OFFLOAD_ABOVE": "1000"})
    for bad in (0, -5, True, 1.5):
        with pytest.raises(ConfigError, match="offload_above must be a positive number"):
            DynamoDBStore(TABLE, client=object(), bucket=BUCKET,  # type: ignore[arg-type]
                          offload_above=bad)  # type: ignore[arg-type]


def test_a_commit_writes_one_version_item_and_a_guard_per_client_message_id(
        aws: None) -> None:
    store = _store()
    app = dormant.App(store=store)
    session = app.sessions.create("layout", principal="alice")
    session.input.message("one", id="m-1")
    session.input.message("two", id="m-2")
    session.input.message("three")  # no id: dormant mints one, and writes no guard for it
    assert app.sessions.commit(session).ok
    items = {item["sk"]["S"]: item for item in _items("session_layout")}
    assert sorted(items) == ["#o#m:m-1", "#o#m:m-2", "e#v0000000001", "e#v0000000002"]
    second = items["e#v0000000002"]
    # In list's index: the session's first item only (the second names when that was).
    assert items["e#v0000000001"]["own"] == {"S": "p:alice"}
    assert "own" not in second and "ver" not in second
    doc = codec.unpack(second["b"]["B"])
    assert "li" not in second  # format 2: the payload says, in ms before the item's ``ua``
    updated_at = int(second["ua"]["N"])
    assert updated_at - doc["l"] == int(items["e#v0000000001"]["ua"]["N"])
    assert [e["text"] for e in codec.decode_events(doc.get("i"), doc["ev"], updated_at)] == [
        "one", "two", "three"]
    assert doc["s"] == 0
    assert "h" in codec.unpack(items["e#v0000000001"]["b"]["B"])  # the first: a checkpoint
    assert "h" not in doc and "d" not in doc  # the second: the head exactly as predicted
    minted = session.events[-1].message_id
    assert store.has_once("session_layout", "m:m-1") and store.has_once(
        "session_layout", f"m:{minted}")
    assert not store.has_once("session_layout", f"m:{minted}0")


@pytest.mark.parametrize("ids", [97, 98, 99, 100, 101])
def test_client_message_ids_fill_the_transaction_to_its_hundred_actions(
        aws: None, ids: int) -> None:
    """A commit is its version item and a guard per client message id: 99 ids make exactly
    DynamoDB's 100 actions and land; one more is refused before anything is written (no S3
    object either), naming the guards and the limit."""
    store = _store(bucket=BUCKET)
    app = dormant.App(store=store)
    app.sessions.create("many")
    session = app.sessions.get("many")
    assert session is not None
    for n in range(ids):
        session.input.message(f"message {n}", id=f"client-{n}")
    sent: list[int] = []
    store._client.meta.events.register(
        "provide-client-params.dynamodb.TransactWriteItems",
        lambda params, **_: sent.append(len(params["TransactItems"])))
    if ids <= 99:
        assert app.sessions.commit(session).ok
        assert sent == [ids + 1]
        guards = {i["sk"]["S"] for i in _items("session_many") if i["sk"]["S"].startswith("#o#")}
        assert guards == {f"#o#m:client-{n}" for n in range(ids)}
        loaded = app.sessions.get("many")
        assert loaded is not None and len(loaded.events) == ids
        return
    with pytest.raises(StoreError, match=rf"carries {ids} client message or retry ids.*"
                                         rf"{ids + 1} actions, over DynamoDB's 100 per "
                                         r"transaction; commit at most 99 such ids") as raised:
        app.sessions.commit(session)
    assert raised.value.retryable is False
    assert "S3" not in str(raised.value)
    assert sent == []
    assert [i["sk"]["S"] for i in _items("session_many")] == ["e#v0000000001"]
    assert not boto3.client("s3").list_objects_v2(Bucket=BUCKET).get("Contents")


def test_the_owner_index_gets_an_entry_per_session_and_quarter_hour_not_per_turn(
        aws: None, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """Turns within ``LIST_REFRESH_MS`` of a session's last index entry write no index entry
    (DynamoDB Local's ReturnConsumedCapacity=INDEXES says so; moto reports no index
    capacity, so there the items say it); the listing stays newest first with each session's
    true version, status and time, across an old entry and a deletion."""
    local = request.node.callspec.params["aws"] == "dynamodb-local"
    clock = [1_800_000_000_000]
    monkeypatch.setattr("dormant.stores._base.now_ms", lambda: clock[0])
    store = _store()
    index_units: list[float] = []

    def capacity(params: dict[str, Any], **_: Any) -> None:
        params["ReturnConsumedCapacity"] = "INDEXES"

    def consumed(parsed: dict[str, Any], **_: Any) -> None:
        entries = parsed.get("ConsumedCapacity") or []
        index_units.append(sum(
            i.get("CapacityUnits", 0.0)
            for entry in (entries if isinstance(entries, list) else [entries])
            for i in entry.get("GlobalSecondaryIndexes", {}).values()))

    for op in ("PutItem", "TransactWriteItems"):
        store._client.meta.events.register(f"provide-client-params.dynamodb.{op}", capacity)
        store._client.meta.events.register(f"after-call.dynamodb.{op}", consumed)
    app = dormant.App(store=store)
    old = app.sessions.create("old", owner="alice")  # its only entry: now
    index_units.clear()
    for n in range(5):
        clock[0] += 60_000
        old.input.message(f"turn {n}")
        assert app.sessions.commit(old).ok
    assert index_units == [0.0] * 5  # five turns, no index write
    assert [("own" in i, "l" in codec.unpack(i["b"]["B"])) for i in _items("session_old")] == [
        (True, False)] + [(False, True)] * 5
    clock[0] += layout.LIST_REFRESH_MS  # the next turn renews the entry: one index write
    old.input.message("later")
    assert app.sessions.commit(old).ok
    assert index_units[-1] == (1.0 if local else 0.0)
    assert "own" in _items("session_old")[-1]

    clock[0] += 60_000
    new = app.sessions.create("new", owner="alice")
    for n in range(3):
        clock[0] += 1_000
        new.input.message(f"new {n}")
        assert app.sessions.commit(new).ok
    clock[0] += 60_000
    old.input.message("old again")  # its entry is older than "new"'s, its session is not
    assert app.sessions.commit(old).ok
    entries = [i for i in _items("session_old") if "own" in i]
    assert len(entries) == 2 and len(_items("session_old")) == 8

    listed = app.sessions.list(principal="alice")
    assert [(s.session_id, s.version, s.updated_at) for s in listed] == [
        ("session_old", old.version, clock[0]), ("session_new", new.version, clock[0] - 60_000)]
    assert [s.session_id for s in app.sessions.list(principal="alice", limit=1)] == [
        "session_old"]
    assert [s.session_id for s in app.sessions.list()] == ["session_old", "session_new"]
    assert app.sessions.list(principal="bob") == []
    assert app.sessions.delete("old") is True
    assert [s.session_id for s in app.sessions.list(principal="alice")] == ["session_new"]


@pytest.mark.parametrize("ids", [97, 98, 99])
def test_item_parts_count_among_the_hundred_actions(aws: None, ids: int) -> None:
    """A 900 KB message (about 700 KB deflated) is a version item and one part: beside 97 or
    98 guards that is 99 or 100 actions and stays in the table; beside 99 it would be 101,
    so it goes to S3 instead."""
    store = _store(bucket=BUCKET)
    app = dormant.App(store=store)
    app.sessions.create("parts")
    session = app.sessions.get("parts")
    assert session is not None
    for n in range(ids):
        session.input.message(f"message {n}", id=f"client-{n}")
    session.input.message(_noise(900_000))
    sent: list[int] = []
    store._client.meta.events.register(
        "provide-client-params.dynamodb.TransactWriteItems",
        lambda params, **_: sent.append(len(params["TransactItems"])))
    assert app.sessions.commit(session).ok
    objects = boto3.client("s3").list_objects_v2(Bucket=BUCKET).get("Contents", [])
    assert (sent, len(objects)) == (([ids + 2], 0) if ids < 99 else ([ids + 1], 1))
    loaded = app.sessions.get("parts")
    assert loaded is not None and loaded.events[-1].text == _noise(900_000)


# --- any event size ------------------------------------------------------------------------------


def test_a_one_megabyte_tool_result_round_trips_in_chunks(aws: None) -> None:
    store = _store()
    app, sid = _big_tool_turn(store, ONE_MB)
    assert _result_of(app, sid) == _noise(ONE_MB)
    items = {item["sk"]["S"]: item for item in _items(sid)}
    parts = [sk for sk in items if sk.startswith("e#v") and sk.count("#") == 2]
    # (version 1: the tool step's call, before it ran; version 2: its result, in parts)
    assert parts and parts[0] == "e#v0000000002#001"  # the version item is part 0
    assert items["e#v0000000002"]["parts"] == {"N": str(len(parts) + 1)}
    assert all(layout.item_size(item) <= layout.ITEM_LIMIT for item in items.values())
    assert not boto3.client("s3").list_objects_v2(Bucket=BUCKET).get("Contents")


def test_a_message_of_multibyte_characters_in_parts_reads_back_exactly(aws: None) -> None:
    text = "".join(random.Random(3).choices("é✓ü€𝄞ab", k=250_000))  # about 700 KB
    app = dormant.App(store=_store())
    session = app.sessions.create("utf8")
    session.input.message(text)
    assert app.sessions.commit(session).ok
    loaded = app.sessions.get("utf8")
    assert loaded is not None and loaded.events[0].model_dump() == session.events[0].model_dump()


def test_a_one_megabyte_tool_result_can_live_in_s3(aws: None) -> None:
    store = _store(bucket=BUCKET, offload_above=100_000)
    app, sid = _big_tool_turn(store, ONE_MB)
    assert _result_of(app, sid) == _noise(ONE_MB)
    objects = boto3.client("s3").list_objects_v2(Bucket=BUCKET)["Contents"]
    assert len(objects) == 1 and objects[0]["Key"].startswith("ledger/session_big/")
    assert all(layout.item_size(item) < 20_000 for item in _items(sid))
    assert app.sessions.delete(sid) is True
    # Only the deletion marker stays: it holds the next version's key.
    assert [(i["sk"]["S"], "del" in i) for i in _items(sid)] == [("e#v0000000003", True)]
    assert not boto3.client("s3").list_objects_v2(Bucket=BUCKET).get("Contents")


def _big_commit(store: DynamoDBStore, sizes: list[int]) -> tuple[dormant.App, Session]:
    app = dormant.App(store=store)
    session = app.sessions.create("huge")
    for n, size in enumerate(sizes):
        session.input.message(f"{n}" + "y" * size)
    return app, session


def test_a_commit_over_the_transaction_limit_offloads_the_largest_events(aws: None) -> None:
    store = _store(bucket=BUCKET)
    app, session = _big_commit(store, [1_500_000, 2_000_000, 1_000_000, 10])
    assert app.sessions.commit(session).ok
    keys = [o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket=BUCKET)["Contents"]]
    assert len(keys) == 1 and "/000000000001-" in keys[0]  # the 2 MB message, not the others
    loaded = app.sessions.get("huge")
    assert loaded is not None
    assert [len(e.text) for e in loaded.events if isinstance(e, UserEvent)] == [
        1_500_001, 2_000_001, 1_000_001, 11]


def test_without_a_bucket_an_oversize_commit_fails_and_writes_nothing(aws: None) -> None:
    store = _store()
    app, session = _big_commit(store, [2_500_000, 2_500_000])
    with pytest.raises(StoreError, match="DORMANT_BUCKET"):
        app.sessions.commit(session)
    loaded = app.sessions.get("huge")
    assert loaded is not None and loaded.version == 1 and loaded.events == []


def test_a_refused_commit_removes_what_it_offloaded(aws: None) -> None:
    store = _store(bucket=BUCKET, offload_above=1_000)
    app = dormant.App(store=store)
    app.sessions.create("race")
    one, two = app.sessions.get("race"), app.sessions.get("race")
    assert one is not None and two is not None
    one.input.message("short")
    two.input.message("z" * 5_000)
    assert app.sessions.commit(one).ok
    assert app.sessions.commit(two).conflict
    assert not boto3.client("s3").list_objects_v2(Bucket=BUCKET).get("Contents")


def test_the_whole_ledger_reads_across_one_megabyte_query_pages(aws: None) -> None:
    store = _store()
    app = dormant.App(store=store)
    session = app.sessions.create("long")
    for n in range(12):
        session.input.message(f"{n}:" + _noise(300_000))
        assert app.sessions.commit(session).ok
    calls = Calls(store._client)
    loaded = app.sessions.get("long")
    assert loaded is not None and len(loaded.events) == 12
    assert [e.text.split(":")[0] for e in loaded.events if isinstance(e, UserEvent)] == [
        str(n) for n in range(12)]
    assert calls.operations.count("Query") >= 3  # 3.6 MB cannot come back in one page


# --- conflicts and retries -----------------------------------------------------------------------


def test_a_refused_commit_names_the_version_that_took_its_key_without_a_second_read(
        aws: None) -> None:
    """The key ``e#v<v+1>`` was taken: the refusal names that version (the head may be further
    on; the merge that follows reads it anyway), from the item DynamoDB returned."""
    store = _store()
    app = dormant.App(store=store)
    app.sessions.create("stale")
    one, two = app.sessions.get("stale"), app.sessions.get("stale")
    assert one is not None and two is not None
    one.input.message("first")
    assert app.sessions.commit(one).ok
    one.input.message("second")
    assert app.sessions.commit(one).ok
    calls = Calls(store._client)
    two.input.message("late")
    refused = app.sessions.commit(two)
    assert refused.model_dump() == {"ok": False, "version": None, "conflict": True,
                                    "current_version": 2}
    assert calls.operations == ["PutItem"]


def test_a_transaction_conflict_is_retried_with_the_same_token(aws: None) -> None:
    store = _store()
    app = dormant.App(store=store)
    session = app.sessions.create("busy")
    faults = FaultInjector(store._client).fail(
        "TransactWriteItems", transaction_conflict(), transaction_conflict())
    session.input.message("hello", id="m-1")  # a client's id: a guard, so a transaction
    assert app.sessions.commit(session).ok
    sent = [json.loads(body) for op, body in faults.sent if op == "TransactWriteItems"]
    assert len(sent) == 3
    assert len({body["ClientRequestToken"] for body in sent}) == 1
    loaded = app.sessions.get("busy")
    assert loaded is not None and loaded.version == 2 and len(loaded.events) == 1


def test_a_conflict_that_persists_fails_without_writing(aws: None) -> None:
    store = _store()
    app = dormant.App(store=store)
    session = app.sessions.create("jammed")
    FaultInjector(store._client).fail("TransactWriteItems",
                                      *[transaction_conflict() for _ in range(4)])
    session.input.message("hello", id="m-1")
    with pytest.raises(StoreError, match="TransactionConflict"):
        app.sessions.commit(session)
    loaded = app.sessions.get("jammed")
    assert loaded is not None and loaded.version == 1 and loaded.events == []


def test_throttling_is_retried_by_botocore(aws: None) -> None:
    store = _store()
    app = dormant.App(store=store)
    session = app.sessions.create("hot")
    faults = FaultInjector(store._client)
    faults.fail("Query", throttling()).fail("PutItem", throttling())
    session.input.message("hello")
    assert app.sessions.commit(session).ok
    loaded = app.sessions.get("hot")
    assert loaded is not None and loaded.version == 2
    operations = [op for op, _ in faults.sent]
    assert operations.count("PutItem") == 2 and operations.count("Query") == 2


@pytest.mark.parametrize("operation,code", [
    ("Query", "ResourceNotFoundException"),
    ("PutItem", "ValidationException"),
])
def test_other_failures_raise_store_error(aws: None, operation: str, code: str) -> None:
    store = _store()
    app = dormant.App(store=store)
    session = app.sessions.create("broken")
    session.input.message("hello")
    FaultInjector(store._client).fail(operation, client_error(code, "injected failure"))
    with pytest.raises(StoreError, match="injected failure") as raised:
        app.sessions.commit(session) if operation != "Query" else store.load("session_broken")
    assert raised.value.__cause__ is not None


def test_a_missing_table_is_a_store_error(aws: None) -> None:
    store = DynamoDBStore("no-such-table")
    with pytest.raises(StoreError, match="session_x"):
        store.load("session_x")


def test_a_turn_whose_commit_keeps_failing_reports_failed(aws: None) -> None:
    store = _store()
    app = dormant.App(store=store)
    rest = app.handler.rest(agent=app.agent(
        name="echo", model=None, hooks=[dormant.Hook(before_agent=lambda ctx: "hi")]))
    FaultInjector(store._client).fail(
        "PutItem", *[client_error("ValidationException") for _ in range(10)])
    response = rest({"session_id": "failing", "input": {"message": "hello"}})
    assert response.commit_status == "failed" and response.status == "error"
    assert store.load("session_failing") is None


# --- TTL -----------------------------------------------------------------------------------------


def test_an_idle_session_expires_and_its_id_can_be_reused(aws: None) -> None:
    clock = Clock()
    store = _store(ttl_seconds=100, clock=clock)
    app = dormant.App(store=store)
    session = app.sessions.create("idle", principal="alice")
    session.input.message("hello")
    assert app.sessions.commit(session).ok
    # Read as expired at ``lx``; deleted by TTL a quarter of the TTL later (so the items a
    # live head is rebuilt from outlive it, see the layout).
    assert all((int(item["lx"]["N"]), int(item["expires_at"]["N"]))
               == (int(clock.now) + 100, int(clock.now) + 126) for item in _items("session_idle"))
    clock.now += 99
    assert store.load("session_idle") is not None
    clock.now += 1
    assert store.load("session_idle") is None
    assert app.sessions.list(principal="alice") == []
    again = app.sessions.create("idle")
    assert again.version == 1
    # The old ledger is gone; the new session's items are numbered after the old one's.
    assert [item["sk"]["S"] for item in _items("session_idle")] == ["e#v0000000003"]
    again.input.message("new life")
    assert app.sessions.commit(again).ok
    loaded = app.sessions.get("idle")
    assert loaded is not None and loaded.version == 2
    assert [e.text for e in loaded.events if isinstance(e, UserEvent)] == ["new life"]


def test_history_older_than_the_ttl_ages_out_of_a_live_session(aws: None) -> None:
    clock = Clock()
    store = _store(ttl_seconds=100, clock=clock)
    app = dormant.App(store=store)
    session = app.sessions.create("aging")
    for text in ("old", "older"):
        session.input.message(text)
    assert app.sessions.commit(session).ok
    clock.now += 80
    session.input.message("recent")
    assert app.sessions.commit(session).ok
    clock.now += 30
    loaded = app.sessions.get("aging")
    assert loaded is not None and loaded.version == 3
    assert [e.text for e in loaded.events if isinstance(e, UserEvent)] == ["recent"]
    assert loaded.first_seq == 2


# --- reads are sized to the window ---------------------------------------------------------------


def _chatty(store: DynamoDBStore, turns: int) -> dormant.App:
    app = dormant.App(store=store)
    session = app.sessions.create("chatty")
    for turn in range(turns):
        session.input.message(f"turn {turn}")
        assert app.sessions.commit(session).ok
    return app


def test_a_windowed_load_is_one_query_once_the_window_is_learned(aws: None) -> None:
    store = _store()
    _chatty(store, 60)
    first = store.load("session_chatty", turns=3)
    calls = Calls(store._client)
    again = store.load("session_chatty", turns=3)
    assert first is not None and again is not None
    assert [e.text for e in again.events if isinstance(e, UserEvent)] == [
        "turn 57", "turn 58", "turn 59"]
    assert again.first_seq == 57
    assert calls.operations == ["Query"]


def test_a_window_larger_than_the_guess_pages_until_complete(aws: None) -> None:
    store = _store()
    app = dormant.App(store=store)
    session = app.sessions.create("wide")
    for turn in range(6):
        session.input.message(f"turn {turn}")
        assert app.sessions.commit(session).ok
        for step in range(12):  # twelve more commits inside the same turn (tool results)
            session.add_event(ToolResult(call_id=f"c{turn}.{step}", name="t", result=step))
            assert app.sessions.commit(session).ok
    calls = Calls(store._client)
    loaded = store.load("session_wide", turns=2)
    assert loaded is not None and loaded.first_seq == 52 and len(loaded.events) == 26
    assert calls.operations.count("Query") == 2


# --- over HTTP -----------------------------------------------------------------------------------


@pytest.fixture
def http(monkeypatch: pytest.MonkeyPatch) -> MotoServer:
    aws_env(monkeypatch)
    server = shared_moto_server()
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", server.url)
    return server


def test_over_http_the_endpoint_comes_from_the_environment(http: MotoServer) -> None:
    store = DynamoDBStore("dormant-http-unit")
    assert store._client.meta.endpoint_url == http.url
    store.ensure_table()
    try:
        app, sid = _big_tool_turn(store, ONE_MB)
        assert _result_of(app, sid) == _noise(ONE_MB)
    finally:
        http.client("dynamodb").delete_table(TableName=store.table_name)


# --- deterministic failures are not retried ---------------------------------------------------


def test_an_oversized_turn_with_no_bucket_fails_once_and_says_retrying_will_not_help(
        aws: None) -> None:
    store = _store()  # no bucket: a slice over the transaction limit cannot be written
    app = dormant.App(name="big", store=store)
    fetch = app.tool(name="fetch", description="Fetch", schema=Ref,
                     execute=lambda ctx: "x" * 5_000_000)
    agent = app.agent(name="reader", tools=[fetch], model=ScriptedModel(
        [{"tool_calls": [{"name": "fetch", "args": {"ref": "doc"}}]}, "Read it."]))
    reply = app.handler.rest(agent=agent)({"session_id": "nobucket",
                                           "input": {"message": "read the doc"}})

    assert reply.commit_status == "failed" and reply.code == "store_error"
    assert reply.retryable is False
    assert "DORMANT_BUCKET" in (reply.error or "") and "retry the request" not in reply.error
    # The tool step's call landed before the tool ran (a small write); the slice with its
    # result was refused before any request (no transaction tried it), and the invocation
    # then ended failed where it landed: nobody takes it over only to be refused again.
    stored = store.load("session_nobucket")
    assert stored is not None and stored.head.version == 2
    assert [e.type for e in stored.events] == [
        "invocation_start", "user", "tool_call", "invocation_failed"]
    failed = stored.events[-1]
    assert failed.code == "store_error" and not failed.retryable  # type: ignore[union-attr]
    assert stored.head.failed and not stored.head.running


def test_access_denied_is_not_retried(aws: None) -> None:
    store = _store()
    app = dormant.App(name="denied", store=store)
    rest = app.handler.rest(agent=app.agent(
        name="echo", hooks=[dormant.Hook(before_agent=lambda ctx: "hi")]))
    faults = FaultInjector(store._client).fail(
        "PutItem", *[client_error("AccessDeniedException", status=400) for _ in range(5)])

    reply = rest({"session_id": "denied", "input": {"message": "hello"}})

    assert reply.commit_status == "failed" and reply.retryable is False
    assert [op for op, _ in faults.sent].count("PutItem") == 1


def test_a_transaction_that_landed_before_a_read_timeout_is_reported_committed(
        aws: None) -> None:
    """The write lands, a rival commits, then the client times out: the policy asks the
    table whether its slice landed (it did) and says so, instead of "superseded"."""
    from botocore.exceptions import ReadTimeoutError

    store = _store()
    ticks = iter(range(1_700_000_000_000, 1_700_000_001_000))
    app = dormant.App(name="ambiguous", store=store, clock=lambda: next(ticks))
    app.sessions.create("ambiguous")
    rival = dormant.App(name="rival", store=store)
    armed = [True]

    def lands_then_times_out(**_: Any) -> None:
        if not armed[0]:
            return
        armed[0] = False
        session = rival.sessions.get("ambiguous")
        assert session is not None
        session.input.message("a newer message from elsewhere")
        assert rival.sessions.commit(session).ok
        raise ReadTimeoutError(endpoint_url="https://dynamodb.us-east-1.amazonaws.com")

    store._client.meta.events.register("after-call.dynamodb.TransactWriteItems",
                                       lands_then_times_out)
    rest = app.handler.rest(agent=app.agent(
        name="echo", hooks=[dormant.Hook(before_agent=lambda ctx: "hi")]))

    reply = rest({"session_id": "ambiguous", "input": {"message": "mine", "message_id": "m"}})

    assert reply.commit_status == "committed" and reply.status == "completed"
    session = app.sessions.get("ambiguous")
    assert session is not None and session.version == 3
    assert [e.text for e in session.events if isinstance(e, UserEvent)] == [
        "mine", "a newer message from elsewhere"]
