"""An offloaded event's body is read from S3 only when something reads the event.

A session with one large tool result in S3: each request runs in a new process (a new store,
as a cold Lambda has) through the real REST handler, and the S3 client's ``GetObject`` calls
are counted as botocore sends them (``before-call``). A request that reads no event body (a
pause, a message that queues behind it, a look at the session's head) reads nothing from S3;
a turn whose model reads the history reads the body once, and a warm process's next turn
reads it from memory.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from pydantic import BaseModel

import dormant
from dormant.events import ToolResult
from dormant.models import ScriptedModel
from dormant.stores import DynamoDBStore
from tests._moto import dynamodb_engine

TABLE = "dormant-offload"
BUCKET = "dormant-offload-ledger"
SID = "session_big"
BIG = "x" * 50_000


class Ref(BaseModel):
    ref: str


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with dynamodb_engine("moto", monkeypatch, table=TABLE, bucket=BUCKET):
        DynamoDBStore(TABLE).ensure_table()
        yield


class Process:
    """One process: its own store and S3 client (what it fetched, it may keep), an app, and
    the ``GetObject`` calls its S3 client sent."""

    def __init__(self, replies: list[Any]) -> None:
        self.s3 = boto3.client("s3")
        self.calls: Counter[str] = Counter()
        self.s3.meta.events.register("before-call.s3.*", self._count)
        store = DynamoDBStore(TABLE, bucket=BUCKET, s3_client=self.s3, offload_above=10_000)
        self.app = dormant.App(name="big", store=store)
        fetch = self.app.tool(name="fetch", description="Fetch a document", schema=Ref,
                              execute=lambda ctx: BIG)
        self.model = ScriptedModel(replies)
        #: The messages of each model request, as JSON text.
        self.asked: list[str] = []
        stream = self.model.stream

        def seen(request: Any, **kwargs: Any) -> Any:
            self.asked.append(repr(request.messages))
            return stream(request, **kwargs)
        self.model.stream = seen  # type: ignore[method-assign]
        agent = self.app.agent(name="reader", model=self.model, tools=[fetch])
        self.rest = self.app.handler.rest(agent=agent)

    def _count(self, model: Any, **_: Any) -> None:
        self.calls[model.name] += 1

    def send(self, body: dict[str, Any]) -> Any:
        return self.rest({"session_id": SID, **body})

    @property
    def gets(self) -> int:
        return self.calls["GetObject"]


def _result(app: dormant.App) -> Any:
    session = app.sessions.get(SID)
    assert session is not None
    return next(e.result for e in session.events if isinstance(e, ToolResult))


def test_a_request_that_reads_no_event_reads_nothing_from_s3(aws: None) -> None:
    first = Process([{"tool_calls": [{"name": "fetch", "args": {"ref": "doc"}}]}, "Read it."])
    done = first.send({"input": {"message": "read the doc"}})
    assert done.status == "completed" and done.commit_status == "committed"
    assert first.calls["PutObject"] == 1 and first.gets == 0
    assert len(boto3.client("s3").list_objects_v2(Bucket=BUCKET)["Contents"]) == 1

    pausing = Process([])
    paused = pausing.send({"input": {"pause": True}})
    assert paused.status == "paused"
    assert pausing.gets == 0

    queueing = Process([])
    queued = queueing.send({"input": {"message": "and the next one?"}})
    assert queued.status == "queued" and queued.version > done.version
    assert queueing.gets == 0

    looking = Process([])
    session = looking.app.sessions.load(SID, turns=None)
    assert session is not None and session.status == "paused" and session.inbox
    assert looking.gets == 0
    assert _result(looking.app) == BIG  # a reader reads it, once
    assert looking.gets == 1


def test_a_turn_whose_model_reads_the_history_reads_the_body_once(aws: None) -> None:
    first = Process([{"tool_calls": [{"name": "fetch", "args": {"ref": "doc"}}]}, "Read it."])
    assert first.send({"input": {"message": "read the doc"}}).status == "completed"

    cold = Process(["Still here.", "Again."])
    answered = cold.send({"input": {"message": "what did it say?"}})
    assert answered.status == "completed" and answered.commit_status == "committed"
    assert cold.gets == 1
    assert BIG in cold.asked[-1]

    again = cold.send({"input": {"message": "and now?"}})  # the same warm process
    assert again.status == "completed" and cold.gets == 1
    assert BIG in cold.asked[-1]


def test_a_stub_names_the_event_it_stands_for_and_a_pointer_without_one_still_reads(
        aws: None) -> None:
    """New pointers carry the event's type and id; a pointer written before stubs (no type,
    no id) is read at once, as it always was."""
    from dormant.stores._dynamodb import reads

    first = Process([{"tool_calls": [{"name": "fetch", "args": {"ref": "doc"}}]}, "Read it."])
    assert first.send({"input": {"message": "read the doc"}}).status == "completed"
    items = boto3.client("dynamodb").query(
        TableName=TABLE, KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": SID}})["Items"]
    versions = reads.versions_of(items)
    pointers = [e for v in versions if v.item is not None for e in v.events()
                if reads.is_pointer(e)]
    assert len(pointers) == 1
    assert pointers[0]["t"] == "tool_result" and pointers[0]["i"].startswith("evt_")
    fetched: list[Any] = []

    def fetch(pointer: dict[str, Any]) -> Any:
        fetched.append(pointer)
        return {"type": "tool_result", "id": pointers[0]["i"], "ts": 1, "call_id": "c",
                "name": "fetch", "result": "body"}

    events, later = reads.realise([pointers[0]], fetch, defer=True)
    assert fetched == [] and list(later) == [0] and events[0].id == pointers[0]["i"]
    assert later[0]().result == "body" and len(fetched) == 1  # type: ignore[union-attr]
    old = {key: value for key, value in pointers[0].items() if key not in ("t", "i")}
    events, later = reads.realise([old], fetch, defer=True)
    assert later == {} and events[0].result == "body"  # type: ignore[union-attr]


def test_a_store_that_overrides_load_is_loaded_with_it(aws: None) -> None:
    """The app's sessions use ``load_deferred`` only where the class whose ``load`` runs
    offers it too: a subclass or a wrapper that changes ``load`` is not bypassed."""
    loads: list[str] = []

    class Audited(DynamoDBStore):
        def load(self, session_id: str, **kwargs: Any) -> Any:
            loads.append(session_id)
            return super().load(session_id, **kwargs)

    class Forwarding:
        def __init__(self, inner: DynamoDBStore) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def load(self, session_id: str, **kwargs: Any) -> Any:
            loads.append(session_id)
            return self.inner.load(session_id, **kwargs)

    plain = DynamoDBStore(TABLE)
    for store in (Audited(TABLE), Forwarding(plain)):
        app = dormant.App(name="audit", store=store)  # type: ignore[arg-type]
        app.sessions.create("audited")
        loads.clear()
        assert app.sessions.load("audited", turns=None) is not None
        assert loads == ["session_audited"]
        app.sessions.delete("audited")  # (it reads the head too: a parent's children go)
    loads.clear()
    app = dormant.App(name="audit", store=plain)
    app.sessions.create("plain")
    assert app.sessions.load("plain", turns=None) is not None and loads == []


def test_a_load_patched_on_the_store_itself_is_used(aws: None) -> None:
    store = DynamoDBStore(TABLE)
    loads: list[str] = []
    inner = store.load

    def load(session_id: str, **kwargs: Any) -> Any:
        loads.append(session_id)
        return inner(session_id, **kwargs)

    store.load = load  # type: ignore[method-assign]
    app = dormant.App(name="patched", store=store)
    app.sessions.create("patched")
    loads.clear()
    assert app.sessions.load("patched", turns=None) is not None
    assert loads == ["session_patched"]
