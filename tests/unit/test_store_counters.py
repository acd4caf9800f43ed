"""``DynamoDBStore.counters``: the requests a store made on the calling thread and the
capacity DynamoDB said they consumed, which a turn's timing records per phase (and its spans
carry as ``dormant.store.requests`` and ``aws.dynamodb.consumed_capacity``).

Runs on moto in-process and, where it can run, Amazon's DynamoDB Local: both report the
consumed capacity of a ``Query``, ``GetItem`` or ``PutItem`` asked for it (moto reports an
empty list for a transaction)."""

from __future__ import annotations

import contextlib
import importlib
import json
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from botocore.stub import Stubber

import dormant
from dormant._clients import aws_client
from dormant.events import InvocationEnd, SpanRef
from dormant.models import ScriptedModel
from dormant.session import Session
from dormant.stores import DynamoDBStore, MemoryStore, SqliteStore
from tests import _dynamodb_local
from tests._moto import aws_env, dynamodb_engine

TABLE = "dormant-counters"
BUCKET = "dormant-counters-ledger"
ENGINES = ["moto", *(["dynamodb-local"] if _dynamodb_local.unavailable() is None else [])]


@pytest.fixture(params=ENGINES)
def store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
          ) -> Iterator[DynamoDBStore]:
    with dynamodb_engine(request.param, monkeypatch, table=TABLE, bucket=BUCKET):
        store = DynamoDBStore(TABLE)
        store.ensure_table()
        yield store


class Span:
    """A span as the fake sink keeps it: its name, attributes and children."""

    def __init__(self, name: str, attributes: Mapping[str, Any]) -> None:
        self.name = name
        self.attributes = dict(attributes)
        self.children: list[Span] = []

    def child(self, name: str, attributes: Mapping[str, Any], *,
              client: bool = False) -> Span:
        span = Span(name, attributes)
        self.children.append(span)
        return span

    def set(self, attributes: Mapping[str, Any]) -> None:
        self.attributes.update(attributes)

    def link(self, ref: SpanRef) -> None:
        pass

    def ref(self) -> SpanRef | None:
        return None

    def current(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def end(self, error: str | None = None) -> None:
        pass


class Sink:
    """The :class:`dormant._timing.Sink` protocol, keeping the turns' spans."""

    content = False

    def __init__(self) -> None:
        self.turns: list[Span] = []

    def turn(self, agent: str, attributes: Mapping[str, Any]) -> Span:
        self.turns.append(Span(f"invoke_agent {agent}", attributes))
        return self.turns[-1]

    def call_done(self, call: Any, seconds: float) -> None:
        pass

    def turn_done(self, agent: str, outcome: str, seconds: float) -> None:
        pass


def _app(store: DynamoDBStore) -> tuple[dormant.App, Any]:
    app = dormant.App(store=store)

    @app.tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    agent = app.agent("calc", model=ScriptedModel(
        [{"tool_calls": [{"name": "add", "args": {"a": 1, "b": 2}}]}, "3", "4"]), tools=[add])
    return app, agent


def test_a_turns_phases_and_spans_record_the_store_requests_and_capacity(
        store: DynamoDBStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two turns: one with a tool step, then a text turn (whose load finds items: DynamoDB
    Local reports no capacity for a ``Query`` that found nothing)."""
    sink = Sink()
    monkeypatch.setattr(importlib.import_module("dormant._request.serve"), "otel_sink",
                        lambda: sink)
    app, agent = _app(store)
    handler = app.handler.rest(agent=agent)
    for message in ("add", "again"):
        handler({"session_id": "s1", "input": {"message": message}})

    loaded = app.sessions.load("s1", turns=None)
    assert loaded is not None
    tool_turn, text_turn = [{phase.name: phase for phase in e.timing.phases}
                            for e in loaded.loaded_events
                            if isinstance(e, InvocationEnd) and e.timing is not None]
    # one Query reads the session; the tool step's write-ahead is one PutItem
    assert tool_turn["load"].requests == 1
    assert tool_turn["write_ahead"].requests == 1
    assert tool_turn["write_ahead"].capacity is not None
    assert tool_turn["write_ahead"].capacity >= 1
    assert text_turn["load"].requests == 1
    assert text_turn["load"].capacity is not None and text_turn["load"].capacity > 0
    assert "write_ahead" not in text_turn

    first, second = ({span.name: span.attributes for span in turn.children}
                     for turn in sink.turns)
    assert first["dormant.commit"]["dormant.store.requests"] == 1  # one PutItem
    assert first["dormant.commit"]["aws.dynamodb.consumed_capacity"] >= 1
    assert second["dormant.load"]["dormant.store.requests"] == 1
    assert second["dormant.commit"]["dormant.store.requests"] == 1
    assert second["dormant.load"]["aws.dynamodb.consumed_capacity"] == \
        text_turn["load"].capacity


def test_counters_count_the_calling_threads_requests_only(store: DynamoDBStore) -> None:
    before = store.counters()
    seen: list[tuple[int, float]] = []

    def elsewhere() -> None:
        start = store.counters()
        store.load("nobody")
        store.read_control("nobody")
        end = store.counters()
        seen.append((end[0] - start[0], end[1] - start[1]))

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    (requests, capacity), = seen
    assert requests == 2 and capacity > 0
    assert store.counters() == before  # the other thread's requests are not this one's

    store.read_control("nobody")  # a GetItem reports what it read even when it found none
    after = store.counters()
    assert after[0] == before[0] + 1 and after[1] > before[1]


def test_the_store_asks_for_capacity_unless_the_caller_chose(store: DynamoDBStore) -> None:
    asked: list[tuple[str, str | None]] = []

    def record(request: Any, **_: Any) -> None:
        target = request.headers["X-Amz-Target"]
        operation = (target.decode() if isinstance(target, bytes) else target).rpartition(".")[2]
        asked.append((operation, json.loads(request.body).get("ReturnConsumedCapacity")))

    store._client.meta.events.register_first("before-send.dynamodb", record)
    app, agent = _app(store)
    app.handler.rest(agent=agent)({"session_id": "s2", "input": {"message": "hi"}})
    assert asked and all(choice == "TOTAL" for _, choice in asked), asked

    asked.clear()
    before = store.counters()
    store._client.query(TableName=TABLE, KeyConditionExpression="pk = :pk",
                        ExpressionAttributeValues={":pk": {"S": "s2"}},
                        ReturnConsumedCapacity="NONE")
    assert asked == [("Query", "NONE")]
    assert store.counters() == (before[0] + 1, before[1])  # counted, no capacity reported


def test_lists_of_capacities_add_up_and_failed_calls_count(
        monkeypatch: pytest.MonkeyPatch) -> None:
    aws_env(monkeypatch)
    client = aws_client("dynamodb", region_name="us-east-1")
    store = DynamoDBStore(TABLE, client)
    key = {"pk": {"S": "s"}, "sk": {"S": "x"}}
    with Stubber(client) as stub:
        stub.add_response("batch_get_item", {"Responses": {}, "ConsumedCapacity": [
            {"TableName": TABLE, "CapacityUnits": 2.0},
            {"TableName": "other", "CapacityUnits": 1.5}]})
        stub.add_client_error("put_item", "ConditionalCheckFailedException",
                              http_status_code=400)
        client.batch_get_item(RequestItems={TABLE: {"Keys": [key]}})
        assert store.counters() == (1, 3.5)
        with pytest.raises(client.exceptions.ConditionalCheckFailedException):
            client.put_item(TableName=TABLE, Item=key)
    assert store.counters() == (2, 3.5)
    # another store on the same client shares its meter: no second count
    assert DynamoDBStore(TABLE, client).counters() == (2, 3.5)


def test_memory_and_sqlite_stores_report_no_counters(tmp_path: Any) -> None:
    """They send no requests: a turn on them records none (see docs/stores.md)."""
    sqlite = SqliteStore(str(tmp_path / "s.db"))
    try:
        assert not hasattr(MemoryStore(), "counters") and not hasattr(sqlite, "counters")
    finally:
        sqlite.close()


def test_s3_requests_for_offloaded_events_count_as_requests(store: DynamoDBStore) -> None:
    offloading = DynamoDBStore(TABLE, bucket=BUCKET, offload_above=1_000)
    dynamodb_calls: list[str] = []
    offloading._client.meta.events.register(
        "before-call.dynamodb", lambda model, **_: dynamodb_calls.append(model.name))
    session = Session.new("s3")
    session.input.message("x" * 5_000)
    before = offloading.counters()
    assert offloading.append(session.head, session.new_events, expected_version=0).ok
    after = offloading.counters()
    assert dynamodb_calls and after[0] - before[0] == len(dynamodb_calls) + 1  # + PutObject
