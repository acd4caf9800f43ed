"""The DynamoDB cost promise, counted on the wire through ``app.handler.rest``.

- an ordinary turn (a message in, the model answers): one ``Query`` and one conditional
  ``PutItem`` of one item, at most 2 write units by DynamoDB's arithmetic
  (``bench/_capacity.py``); with a client's message id, one ``TransactWriteItems`` (the id's
  guard item rides with the version item);
- a resumed turn that unlocks a tool (an approval decision, or an answer to a yielded tool
  that has ``execute``): one ``Query`` and two writes: the decision or answer is claimed
  first, then the tool runs, then the turn commits;
- an answer to a yielded tool without ``execute``: one ``Query`` and one write;
- a redelivered message older than the head's 32-id window: refused (``duplicate_message``)
  after one ``Query`` and one ``GetItem`` (the guard), nothing written, the model not called;
- the session's control record costs an ordinary turn nothing more (``load``'s one ``Query``
  reads it second, after the head), and a running turn's poll of it (``read_control``) is one
  strongly consistent ``GetItem`` of an item under 1 KB (one read unit); each step boundary
  (tools ran, the model is called again) reads it once more, one ``GetItem``, so a pause or
  steer sent while the tools ran comes before the next step.

Every assertion is an exact list of operations (moto in-process; a ``before-send`` hook on
the store's client records each request in order, interleaved with what the tools did).
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from bench._capacity import item_bytes, write_units
from dormant._head import MESSAGE_ID_WINDOW
from dormant._ids import new_id, now_ms
from dormant.models import ScriptedModel
from dormant.stores import DynamoDBStore
from dormant.stores._dynamodb import codec, layout
from dormant.types import Control, ControlSteer, ControlStop
from tests._moto import aws_env, in_process_aws

TABLE = "dormant-cost"
SID = "session_cost"
TOOL_RAN = "tool ran"
ONE_READ_ONE_WRITE = ["Query", "PutItem"]
ONE_READ_ONE_TRANSACTION = ["Query", "TransactWriteItems"]


class Ticket(BaseModel):
    ticket_id: str


class Answer(BaseModel):
    answer: str


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    aws_env(monkeypatch)
    with in_process_aws():
        yield


@pytest.fixture
def store(aws: None) -> DynamoDBStore:
    store = DynamoDBStore(TABLE)
    store.ensure_table()
    return store


class Wire:
    """The DynamoDB requests a client sends, in order, on a timeline tools append to too."""

    def __init__(self, client: Any) -> None:
        self.timeline: list[str] = []
        #: For each write (PutItem, TransactWriteItems): the types of the events it writes.
        self.written: list[list[str]] = []
        #: Each write's operation and parameters (the request body).
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self._on = False
        client.meta.events.register_first("before-send.dynamodb", self._record)

    def start(self) -> Wire:
        self.timeline.clear()
        self.written.clear()
        self.requests.clear()
        self._on = True
        return self

    @property
    def operations(self) -> list[str]:
        return [entry for entry in self.timeline if entry != TOOL_RAN]

    def tool_ran(self) -> None:
        self.timeline.append(TOOL_RAN)

    def _record(self, request: Any, **_: Any) -> None:
        if not self._on:
            return
        target = request.headers.get("X-Amz-Target", b"")
        operation = (target.decode() if isinstance(target, bytes) else str(target)
                     ).rpartition(".")[2]
        self.timeline.append(operation)
        if operation in ("PutItem", "TransactWriteItems"):
            body = request.body if isinstance(request.body, bytes) else request.body.encode()
            params = json.loads(body)
            self.requests.append((operation, params))
            puts = ([params] if operation == "PutItem" else
                    [a["Put"] for a in params["TransactItems"] if "Put" in a])
            types: list[str] = []
            for put in puts:
                item = put["Item"]
                if item[layout.SK]["S"].startswith(layout.VERSION_PREFIX) and "#" not in \
                        item[layout.SK]["S"][len(layout.VERSION_PREFIX):]:
                    doc = codec.unpack(base64.b64decode(item[layout.PAYLOAD]["B"]))
                    types += [event["type"] for event in doc["ev"]]
            self.written.append(types)


def _items(store: DynamoDBStore, session_id: str) -> list[dict[str, Any]]:
    return list(store._client.query(
        TableName=store.table_name, KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": session_id}})["Items"])


MESSAGE = "Can you check my booking for the weekend, and the late check-out? " * 2
REPLY = "Your booking is confirmed for Friday and Saturday; late check-out is at 1 pm. " * 2


class Chat:
    """A text agent on ``store`` answering from ``replies``, one session, counted."""

    def __init__(self, store: DynamoDBStore, replies: list[Any],
                 history: int | None = None) -> None:
        self.app = dormant.App(name="cost", store=store)
        self.model = ScriptedModel(replies)
        self.wire = Wire(store._client)
        context = [] if history is None else [self.app.context.history(history)]
        self._rest = self.app.handler.rest(agent=self.app.agent(
            name="cost", model=self.model, **({"context": context} if context else {})))

    def __call__(self, **given: Any) -> Any:
        return self._rest({"session_id": "cost", "input": given})


# --- (a) an ordinary turn ------------------------------------------------------------------------


@pytest.mark.parametrize("message_id", [None, "m-2"], ids=["no-message-id", "client-message-id"])
def test_an_ordinary_turn_is_one_query_and_one_write(
        store: DynamoDBStore, message_id: str | None) -> None:
    """One read and one write request (the README's guarantees table names this test): the
    write is a single ``PutItem``, or a ``TransactWriteItems`` when a client's message id
    brings its guard item."""
    chat = Chat(store, ["Hello.", "Three nights."])
    model, wire = chat.model, chat.wire
    assert chat(message="hi", messageId="m-1").status == "completed"

    wire.start()
    given: dict[str, Any] = {"message": "How long is my stay?"}
    if message_id is not None:
        given["messageId"] = message_id
    response = chat(**given)

    assert (response.status, response.commit_status) == ("completed", "committed")
    assert wire.operations == (ONE_READ_ONE_WRITE if message_id is None
                               else ONE_READ_ONE_TRANSACTION)
    assert wire.written == [["invocation_start", "user", "assistant", "invocation_end"]]
    assert model.remaining == 0


def test_a_tool_turn_is_two_reads_and_two_writes(store: DynamoDBStore) -> None:
    """A message, one tool step, the answer: the ``Query``, the step's write-ahead before its
    tool runs, the control record's ``GetItem`` at the step boundary (before the model is
    called again), and the turn's own ``PutItem``: four requests (docs/stores.md's table)."""
    app, wire, tool = _closing(store)
    model = ScriptedModel(["Hello.", {"tool_calls": [CLOSE]}, "Closed T-7."])
    rest = app.handler.rest(agent=app.agent(name="support", model=model, tools=[tool]))
    assert rest({"session_id": "cost", "input": {"message": "hi"}}).status == "completed"

    wire.start()
    done = rest({"session_id": "cost", "input": {"message": "close T-7"}})

    assert (done.status, done.commit_status) == ("completed", "committed")
    assert wire.timeline == ["Query", "PutItem", TOOL_RAN, "GetItem", "PutItem"]
    ahead, turn = wire.written
    assert ahead[-1] == "tool_call" and "tool_result" in turn
    model.assert_consumed()


def test_an_ordinary_turn_writes_one_item_of_at_most_two_write_units(
        store: DynamoDBStore) -> None:
    """The cost target: one item written (the version item: events and head), priced by
    DynamoDB's rules at no more than 2 write units, at turn 3 and at turn 40 alike."""
    chat = Chat(store, [REPLY] * 41, history=5)
    wire = chat.wire
    assert chat(message=MESSAGE).commit_status == "committed"  # the first: see below
    for n in range(40):
        wire.start()
        assert chat(message=f"{n}: {MESSAGE}").commit_status == "committed"
        ((operation, params),) = wire.requests
        assert operation == "PutItem" and params["Item"][layout.SK]["S"].startswith("e#v")
        units = write_units(operation, params)
        assert units <= 2, (n, units, item_bytes(params["Item"]))
    # With no message id there is no guard item: the id was minted by the turn itself.
    assert not [i for i in _items(store, SID) if i[layout.SK]["S"].startswith("#o#")]


def test_a_sessions_first_turn_also_names_itself_in_the_control_record(
        store: DynamoDBStore) -> None:
    """A session exists to readers from its first request: its first turn writes the control
    record's announcement as it starts (one conditional write), then commits as any turn."""
    chat = Chat(store, [REPLY])
    wire = chat.wire.start()
    assert chat(message=MESSAGE).commit_status == "committed"
    assert wire.operations == ["Query", "TransactWriteItems", "PutItem"]


# --- (b) an approval turn ------------------------------------------------------------------------


CLOSE = {"name": "close_ticket", "args": {"ticket_id": "T-7"}, "id": "call_close"}


def _closing(store: DynamoDBStore) -> tuple[dormant.App, Wire, dormant.Tool]:
    """An app on ``store``, its wire, and a ``close_ticket`` tool that marks on the wire when
    it runs."""
    app = dormant.App(name="cost", store=store)
    wire = Wire(store._client)

    def close_ticket(ctx: dormant.ToolContext) -> dict[str, Any]:
        wire.tool_ran()
        return {"ticket_id": ctx.args.ticket_id, "closed": True}

    return app, wire, app.tool(name="close_ticket", description="Close a ticket",
                               schema=Ticket, execute=close_ticket)


def test_an_approval_turn_claims_the_decision_before_the_tool_runs(store: DynamoDBStore) -> None:
    app, wire, tool = _closing(store)
    model = ScriptedModel([{"tool_calls": [CLOSE]}, "Closed T-7."])
    rest = app.handler.rest(agent=app.agent(name="support", model=model, tools=[tool],
                                            tool_approval={"close_ticket": "user-approval"}))
    paused = rest({"session_id": "cost", "input": {"message": "close T-7"}})
    assert paused.status == "yielded_tool" and wire.timeline == []
    assert paused.pending_approvals is not None
    (pending,) = paused.pending_approvals

    wire.start()
    done = rest({"session_id": "cost", "input": {"approvals": [
        {"approval_id": pending.approval_id, "approved": True}]}})

    assert (done.status, done.commit_status, done.output.text) == ("completed", "committed",
                                                              "Closed T-7.")
    assert wire.timeline == ["Query", "PutItem", TOOL_RAN, "PutItem"]
    claim, commit = wire.written
    assert claim == ["approval_decided", "invocation_resume"]  # the decision, and the reopening
    assert "tool_result" in commit and "approval_decided" not in commit
    assert commit[-2:] == ["assistant", "invocation_end"]


# --- (c, d) answers to yielded tools -------------------------------------------------------------


def _yielding(store: DynamoDBStore, *, execute: bool) -> tuple[Any, Wire, str]:
    app = dormant.App(name="cost", store=store)
    wire = Wire(store._client)

    def use_answer(ctx: dormant.ToolContext) -> dict[str, Any]:
        wire.tool_ran()
        return {"booked": ctx.input.answer}

    ask = app.tool(name="ask_guest", description="Ask the guest which night", schema=Ticket,
                   yield_schema=Answer, execute=use_answer if execute else None)
    model = ScriptedModel([
        {"tool_calls": [{"name": "ask_guest", "args": {"ticket_id": "B-1"}, "id": "call_ask"}]},
        "Booked for Friday."])
    rest = app.handler.rest(agent=app.agent(name="booking", model=model, tools=[ask]))
    paused = rest({"session_id": "cost", "input": {"message": "Book me in"}})
    assert paused.status == "yielded_tool" and wire.timeline == []
    assert paused.yielded_tools is not None
    (yielded,) = paused.yielded_tools
    wire.start()
    done = rest({"session_id": "cost", "input": {"tools": [
        {"call_id": yielded.call_id, "input": {"answer": "Friday"}}]}})
    assert (done.status, done.commit_status, done.output.text) == ("completed", "committed",
                                                              "Booked for Friday.")
    return done, wire, yielded.call_id


def test_an_answer_to_a_yielded_tool_with_execute_is_claimed_before_it_runs(
        store: DynamoDBStore) -> None:
    _, wire, _ = _yielding(store, execute=True)

    assert wire.timeline == ["Query", "PutItem", TOOL_RAN, "PutItem"]
    claim, commit = wire.written
    assert claim == ["tool_input", "invocation_resume"]
    assert "tool_result" in commit and "tool_input" not in commit


def test_an_answer_that_settles_a_step_is_claimed_before_the_model_runs(
        store: DynamoDBStore) -> None:
    """Even with no ``execute``: the answer reopens the invocation, and only the request that
    landed the reopening may run what follows (two racing answers would both call the model
    and run its next tools)."""
    _, wire, _ = _yielding(store, execute=False)

    assert wire.timeline == ["Query", "PutItem", "PutItem"]
    claim, commit = wire.written
    assert claim == ["tool_input", "invocation_resume"]
    assert commit[0] == "tool_result" and commit[-2:] == ["assistant", "invocation_end"]


# --- (e) redelivered message ids -----------------------------------------------------------------


def test_message_ids_past_the_head_window_cost_one_guard_read(store: DynamoDBStore) -> None:
    window = MESSAGE_ID_WINDOW
    chat = Chat(store, ["ok"] * (window + 1))
    model, wire = chat.model, chat.wire
    for n in range(window - 1):
        assert chat(message=f"turn {n}", messageId=f"m-{n}").status == "completed"

    # Up to and including the window's worth of messages, the head holds every id the session
    # ever had: a fresh id is checked against it alone (no GetItem).
    wire.start()
    assert chat(message="32nd", messageId=f"m-{window - 1}").status == "completed"
    assert wire.operations == ONE_READ_ONE_TRANSACTION
    wire.start()
    again = chat(message="turn 0", messageId="m-0")
    assert again.code == "duplicate_message" and wire.operations == ["Query"]
    wire.start()
    assert chat(message="33rd", messageId=f"m-{window}").status == "completed"
    assert wire.operations == ONE_READ_ONE_TRANSACTION
    assert model.remaining == 0
    session = chat.app.sessions.get(SID)
    assert session is not None and session.head.messages == window + 1

    # Now m-0 has left the head's window: a redelivery of it is refused by its guard item
    # (one GetItem); the model (no reply left: it would raise) is not called, nothing is
    # written.
    calls = len(model.requests)
    wire.start()
    redelivered = chat(message="turn 0", messageId="m-0")
    assert (redelivered.status, redelivered.code) == ("error", "duplicate_message")
    assert wire.operations == ["Query", "GetItem"]
    assert len(model.requests) == calls and model.remaining == 0

    # An id still inside the window needs no guard read.
    wire.start()
    recent = chat(message="33rd", messageId=f"m-{window}")
    assert recent.code == "duplicate_message" and wire.operations == ["Query"]

    # Past the window, a fresh client id costs the guard read too (the head cannot vouch
    # for it); a message without an id has nothing to look up and stays 1 + 1.
    model.add("ok")
    wire.start()
    assert chat(message="34th", messageId=f"m-{window + 1}").status == "completed"
    assert wire.operations == ["Query", "GetItem", "TransactWriteItems"]
    model.add("ok")
    wire.start()
    assert chat(message="no id").status == "completed"
    assert wire.operations == ONE_READ_ONE_WRITE


# --- (f) the control record ----------------------------------------------------------------------


def _realistic_controls() -> list[Control]:
    """What a busy record goes through: a stop (revision 1), a pause (2), one short steer (3)."""
    running = new_id("inv")
    at = now_ms()
    stop = Control(rev=1, stop=ControlStop(invocation_id=running, rev=1, at=at))
    pause = stop.model_copy(update={"rev": 2, "pause": 2})
    steer = pause.model_copy(update={"rev": 3, "steers": [ControlSteer(
        id=new_id("steer"), text="Actually, make it two nights.", invocation_id=running,
        rev=3, at=at)]})
    return [stop, pause, steer]


@pytest.mark.parametrize("history", [None, 2], ids=["full-history", "history-2"])
def test_an_ordinary_turn_with_a_control_record_is_still_one_query_and_one_write(
        store: DynamoDBStore, history: int | None) -> None:
    turns = 6
    chat = Chat(store, [f"reply {n}" for n in range(turns + 1)], history=history)
    for n in range(turns):
        assert chat(message=f"turn {n}").status == "completed"
    stored = store.load(SID)
    assert stored is not None
    # A record with nothing pending (the first turn's announcement, long past): the turn has
    # nothing to take up, only to read past it.
    control = Control(rev=(store.read_control(SID) or Control()).rev + 1)
    assert store.write_control(SID, control, head_version=stored.head.version)

    wire = chat.wire.start()
    response = chat(message="How long is my stay?")
    assert (response.status, response.commit_status) == ("completed", "committed")
    assert wire.operations == ONE_READ_ONE_WRITE
    assert store.read_control(SID) == control  # the commit did not touch it

    # The store's own read: one Query returns the control record, the head and the window.
    for window in (None, 0, 1, history or 3):
        wire.start()
        loaded = store.load(SID, turns=window)
        assert loaded is not None and loaded.control == control
        assert wire.operations == ["Query"], window


def test_polling_the_control_record_is_one_strongly_consistent_read_of_under_1_kb(
        store: DynamoDBStore) -> None:
    chat = Chat(store, ["Hello."])
    assert chat(message="hi").status == "completed"
    stored = store.load(SID, turns=0)
    assert stored is not None
    base = (store.read_control(SID) or Control()).rev  # (the first turn's announcement)
    for control in _realistic_controls():
        control = control.model_copy(update={"rev": control.rev + base})
        assert store.write_control(SID, control, head_version=stored.head.version)
    sent: list[dict[str, Any]] = []
    items: list[dict[str, Any]] = []

    def request(request: Any, **_: Any) -> None:
        body = request.body if isinstance(request.body, bytes) else request.body.encode()
        sent.append(json.loads(body))

    def response(parsed: dict[str, Any], **_: Any) -> None:
        items.append(parsed.get("Item", {}))

    client = store._client.meta.events
    client.register("before-send.dynamodb.GetItem", request)
    client.register("after-call.dynamodb.GetItem", response)
    wire = chat.wire.start()
    try:
        assert store.read_control(SID) == control
    finally:
        client.unregister("before-send.dynamodb.GetItem", request)
        client.unregister("after-call.dynamodb.GetItem", response)

    assert wire.operations == ["GetItem"]
    (body,) = sent
    assert body["ConsistentRead"] is True
    assert body["Key"] == {layout.PK: {"S": SID}, layout.SK: {"S": layout.CONTROL_SK}}
    (item,) = items
    size = layout.item_size(item)
    assert size <= 1024, size
    assert math.ceil(size / 4096) == 1  # one read unit per strongly consistent poll


@pytest.mark.parametrize(("poll_interval", "boundary"), [(None, ["GetItem"]), (0.0, [])],
                         ids=["default-polling", "polling-off"])
def test_each_step_boundary_reads_the_control_record_once(
        store: DynamoDBStore, poll_interval: float | None, boundary: list[str]) -> None:
    """Two tool steps, then the answer: one ``GetItem`` at each of the two boundaries (the
    turn ends well within the poll interval, so the background poller never reads), and
    nothing else beyond one read, one write per tool step before its tool runs (the
    write-ahead) and the turn's own write; with polling off, no ``GetItem``."""
    app, wire, tool = _closing(store)
    model = ScriptedModel([{"tool_calls": [CLOSE]},
                           {"tool_calls": [{**CLOSE, "id": "call_close_2"}]}, "Closed T-7."])
    options = {} if poll_interval is None else {"poll_interval": poll_interval}
    rest = app.handler.rest(agent=app.agent(name="support", model=model, tools=[tool]),
                            **options)

    wire.start()
    done = rest({"session_id": "cost", "input": {"message": "close T-7"}})

    assert (done.status, done.commit_status) == ("completed", "committed")
    announce = ["TransactWriteItems"] if boundary else []  # a session's first turn's
    assert wire.timeline == ["Query", *announce, "PutItem", TOOL_RAN, *boundary,
                             "PutItem", TOOL_RAN, *boundary, "PutItem"]
    model.assert_consumed()
