"""AG-UI runs for turn control: every new turn status ends the run in a way the protocol's
validator accepts (stopped, paused, queued, accepted, interrupted, recorded, failed), steers
and preliminary tool results mid-run, the invocation id a stop needs, and a client that hangs
up aborting the turn.

Most streams are synthetic (dormant events fed to the adapter, or a stand-in turn fed to
:class:`~dormant.agui.AgUIRun`): they pin the translation whatever the handler produces.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from ag_ui.core import BaseEvent
from ag_ui_validate.pytest_plugin import assert_valid_agui
from pydantic import BaseModel

import dormant
from dormant._inputs import QueuedRef
from dormant._turn_wire import TurnResult
from dormant.agui import (
    CONTROL_ACCEPTED,
    QUEUED,
    TOOL_PROGRESS,
    AgUIAdapter,
    AgUIRun,
    encode_sse,
    to_agui_messages,
)
from dormant.events import (
    AssistantDelta,
    AssistantEvent,
    InputRequested,
    InputResponse,
    InterruptEvent,
    InvocationEnd,
    InvocationFailed,
    InvocationResume,
    InvocationStart,
    ModelEnd,
    ModelStart,
    PauseEvent,
    QueuedEvent,
    QueueEdit,
    QueueMove,
    QueueRemove,
    QueueSendNow,
    ResumeEvent,
    SeedEvent,
    SteerEvent,
    StopRequested,
    StreamEvent,
    ThoughtDelta,
    ToolCall,
    ToolResult,
    UserEvent,
)
from dormant.models import ScriptedModel
from dormant.models._base import ModelChunk, ModelRequest, TextDelta
from dormant.tools import Signal

INV = "inv_running"
SID = "session_t"

# --- helpers ---------------------------------------------------------------------------------


def wire(events: list[BaseEvent]) -> list[dict[str, Any]]:
    return [json.loads(event.model_dump_json(by_alias=True)) for event in events]


def conformant(events: list[BaseEvent]) -> list[dict[str, Any]]:
    """Assert ag-ui-validate finds no error and no warning; return the events' JSON."""
    data = wire(events)
    assert_valid_agui(data, max_warnings=0)
    return data


def kinds(data: list[dict[str, Any]]) -> list[str]:
    """Event types, a CUSTOM event as ``CUSTOM:<name>``, runs of one ``*_CONTENT`` once."""
    out: list[str] = []
    for event in data:
        kind = event["type"] + (f":{event['name']}" if event["type"] == "CUSTOM" else "")
        if not out or out[-1] != kind or not kind.endswith("_CONTENT"):
            out.append(kind)
    return out


def result(status: Any, **fields: Any) -> TurnResult:
    fields.setdefault("commit_status", "committed")
    fields.setdefault("invocation_id", INV)
    return TurnResult(session_id=SID, status=status, **fields)


def drive(events: Sequence[Any], ending: TurnResult, **options: Any) -> list[BaseEvent]:
    """What ``app.handler.agui`` does with a turn: open, translate, end."""
    adapter = AgUIAdapter(SID, INV, **options)
    out: list[BaseEvent] = [adapter.run_started(), adapter.state_snapshot({})]
    for event in events:
        out.extend(adapter.transform(event))
    out.extend(adapter.finish(ending))
    return out


def text(reply: str, words: list[str], step: int = 1) -> list[Any]:
    """A model step that streams ``words`` as reply ``reply``."""
    return [ModelStart(invocation_id=INV, step=step),
            *(AssistantDelta(invocation_id=INV, message_id=reply, delta=w) for w in words)]


def call(call_id: str = "call_1", name: str = "lookup") -> ToolCall:
    return ToolCall(invocation_id=INV, call_id=call_id, name=name, args={"q": "x"})


STOP = [StopRequested(invocation_id=INV, seen=4),
        InvocationEnd(invocation_id=INV, status="stopped")]


# --- stopped ---------------------------------------------------------------------------------


def test_a_stop_mid_text_closes_the_message_and_finishes_the_run_stopped() -> None:
    events = [*text("reply_1", ["Half ", "a "]),
              AssistantEvent(id="reply_1", invocation_id=INV, text="Half a "), *STOP]

    data = conformant(drive(events, result("stopped")))

    assert kinds(data) == [
        "RUN_STARTED", "STATE_SNAPSHOT",
        "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
        "CUSTOM:dormant.stop_requested", "RUN_FINISHED"]
    assert data[-1]["result"] == {"commitStatus": "committed", "status": "stopped"}
    assert data[-2]["value"]["seen"] == 4
    assert not [e for e in data if e["type"] == "RUN_ERROR"]


@pytest.mark.parametrize("cut", ["text", "thought"])
def test_a_stream_cut_mid_message_still_closes_it_before_run_finished(cut: str) -> None:
    last: StreamEvent = (AssistantDelta(invocation_id=INV, message_id="r", delta="and the")
                         if cut == "text" else
                         ThoughtDelta(invocation_id=INV, message_id="t", delta="hmm"))
    events = [ModelStart(invocation_id=INV, step=1), last]  # and nothing after: cut there

    data = conformant(drive(events, result("stopped"), include_steps=True))

    closing = kinds(data)[-4:]
    if cut == "text":
        assert closing == ["TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "STEP_FINISHED",
                           "RUN_FINISHED"]
    else:
        assert closing == ["REASONING_MESSAGE_END", "REASONING_END", "STEP_FINISHED",
                           "RUN_FINISHED"]
    assert data[-1]["result"]["status"] == "stopped"


def test_a_stop_mid_tool_call_settles_the_call_and_closes_the_step() -> None:
    events = [*text("r", ["Looking "]), call(),
              ToolResult(invocation_id=INV, call_id="call_1", name="lookup", error="stopped"),
              *STOP]

    data = conformant(drive(events, result("stopped"), include_steps=True))

    assert kinds(data) == [
        "RUN_STARTED", "STATE_SNAPSHOT", "STEP_STARTED",
        "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
        "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT",
        "CUSTOM:dormant.stop_requested", "STEP_FINISHED", "RUN_FINISHED"]
    assert [e["content"] for e in data if e["type"] == "TOOL_CALL_RESULT"] == ["stopped"]
    assert data[-1]["result"]["status"] == "stopped"


def test_a_stop_before_the_call_settles_leaves_no_tool_call_open() -> None:
    events = [ModelStart(invocation_id=INV, step=1), call(),
              ToolResult(invocation_id=INV, call_id="call_1", name="lookup", result={"n": 1},
                         preliminary=True)]

    data = conformant(drive(events, result("stopped"), include_steps=True))

    assert kinds(data)[-4:] == ["TOOL_CALL_END", f"CUSTOM:{TOOL_PROGRESS}", "STEP_FINISHED",
                                "RUN_FINISHED"]


# --- paused, interrupted, recorded -----------------------------------------------------------


def test_a_pause_at_a_step_boundary_finishes_the_run_paused() -> None:
    events = [*text("r", ["Step ", "one."]), ModelEnd(invocation_id=INV, step=1),
              AssistantEvent(id="r", invocation_id=INV, text="Step one."),
              PauseEvent(invocation_id=INV, rev=3)]

    data = conformant(drive(events, result("paused")))

    assert kinds(data)[-4:] == ["TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
                                "CUSTOM:dormant.pause", "RUN_FINISHED"]
    assert data[-2]["value"]["rev"] == 3 and data[-2]["value"]["invocation_id"] == INV
    assert data[-1]["result"] == {"commitStatus": "committed", "status": "paused"}


@pytest.mark.parametrize("status", ["interrupted", "recorded", "paused", "stopped",
                                    "completed", "yielded_message"])
def test_a_run_that_ends_without_a_reply_finishes_with_its_status(status: str) -> None:
    data = conformant(drive([], result(status)))

    assert kinds(data) == ["RUN_STARTED", "STATE_SNAPSHOT", "RUN_FINISHED"]
    assert data[-1]["result"] == {"commitStatus": "committed", "status": status}


def test_an_interrupt_ends_the_waiting_invocation_and_finishes_the_run() -> None:
    events = [InterruptEvent(invocation_id=INV, owner="call_1"),
              InvocationEnd(invocation_id=INV, status="interrupted")]

    data = conformant(drive(events, result("interrupted")))

    assert kinds(data) == ["RUN_STARTED", "STATE_SNAPSHOT", "CUSTOM:dormant.interrupt",
                           "RUN_FINISHED"]
    assert data[2]["value"]["owner"] == "call_1"
    assert data[-1]["result"]["status"] == "interrupted"


# --- queued and accepted ---------------------------------------------------------------------


def test_a_queued_message_is_a_run_that_says_where_it_waits() -> None:
    ending = result("queued", queued=QueuedRef(id="msg_later", position=1))

    data = conformant(drive([], ending))

    assert kinds(data) == ["RUN_STARTED", "STATE_SNAPSHOT", f"CUSTOM:{QUEUED}", "RUN_FINISHED"]
    assert data[2]["value"] == {"id": "msg_later", "position": 1}
    assert data[-1]["result"] == {"commitStatus": "committed", "status": "queued",
                                  "queued": {"id": "msg_later", "position": 1}}


def test_a_queued_event_in_the_stream_is_announced_once() -> None:
    events = [QueuedEvent(message_id="msg_later", text="and a taxi", position=0)]
    ending = result("queued", queued=QueuedRef(id="msg_later", position=0))

    data = conformant(drive(events, ending))

    assert [e for e in data if e["type"] == "CUSTOM"] == [
        {"type": "CUSTOM", "timestamp": data[2]["timestamp"], "name": QUEUED,
         "value": {"id": "msg_later", "position": 0}}]
    assert data[-1]["result"]["status"] == "queued"


def test_a_control_for_an_invocation_running_elsewhere_is_accepted() -> None:
    ending = result("accepted", commit_status=None, invocation_id="inv_elsewhere")

    data = conformant(drive([], ending))

    assert kinds(data) == ["RUN_STARTED", "STATE_SNAPSHOT", f"CUSTOM:{CONTROL_ACCEPTED}",
                           "RUN_FINISHED"]
    assert data[2]["value"] == {"invocationId": "inv_elsewhere"}
    assert data[-1]["result"] == {"commitStatus": None, "status": "accepted"}


# --- failed ----------------------------------------------------------------------------------


def test_a_failed_turn_ends_with_run_error_and_never_run_finished() -> None:
    events = [*text("r", ["Half ", "a "]),
              InvocationFailed(invocation_id=INV, code="model_error", message="boom")]
    ending = result("error", error="boom", code="model_error", retryable=True)

    data = conformant(drive(events, ending, include_steps=True))

    assert kinds(data)[-4:] == ["TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "STEP_FINISHED",
                                "RUN_ERROR"]
    assert data[-1]["code"] == "model_error"
    assert data[-1]["message"] == "the model provider failed; the details are in the server log"
    assert "RUN_FINISHED" not in kinds(data)


# --- mid-run: steers, preliminary results, control events ------------------------------------


def test_a_steer_mid_run_is_a_user_message_between_the_two_replies() -> None:
    events = [
        InvocationStart(invocation_id=INV, agent="a"),
        UserEvent(invocation_id=INV, text="book a room", message_id="m_first"),
        *text("r1", ["Looking."]), ModelEnd(invocation_id=INV, step=1),
        AssistantEvent(id="r1", invocation_id=INV, text="Looking."),
        SteerEvent(invocation_id=INV, message_id="steer_1"),
        UserEvent(invocation_id=INV, text="make it two nights", message_id="steer_1",
                  steer=True),
        *text("r2", ["Two ", "nights."], step=2), ModelEnd(invocation_id=INV, step=2),
        AssistantEvent(id="r2", invocation_id=INV, text="Two nights."),
        InvocationEnd(invocation_id=INV),
    ]

    data = conformant(drive(events, result("completed")))

    starts = [(e["messageId"], e["role"]) for e in data if e["type"] == "TEXT_MESSAGE_START"]
    assert starts == [("r1", "assistant"), ("steer_1", "user"), ("r2", "assistant")]
    said = [e["delta"] for e in data
            if e["type"] == "TEXT_MESSAGE_CONTENT" and e["messageId"] == "steer_1"]
    assert said == ["make it two nights"]
    assert "m_first" not in json.dumps(data)  # the run's own message is the client's already


def test_preliminary_tool_results_are_progress_and_the_final_result_comes_once() -> None:
    events = [ModelStart(invocation_id=INV, step=1), call(),
              *(ToolResult(invocation_id=INV, call_id="call_1", name="lookup",
                           result={"done": n}, preliminary=True) for n in (1, 2)),
              ToolResult(invocation_id=INV, call_id="call_1", name="lookup", result="found")]

    data = conformant(drive(events, result("completed")))

    progress = [e["value"] for e in data if e["type"] == "CUSTOM"]
    assert progress == [{"toolCallId": "call_1", "toolCallName": "lookup",
                         "content": json.dumps({"done": n})} for n in (1, 2)]
    assert [(e["toolCallId"], e["content"]) for e in data
            if e["type"] == "TOOL_CALL_RESULT"] == [("call_1", "found")]


def test_a_messages_snapshot_leaves_preliminary_results_out() -> None:
    ledger: list[Any] = [UserEvent(text="look", message_id="m1"), call(),
              ToolResult(call_id="call_1", name="lookup", result=1, preliminary=True),
              ToolResult(id="res_1", call_id="call_1", name="lookup", result="found"),
              SeedEvent(text="(the guest is a VIP)", role="system", message_id="seed_1")]

    messages = [m.model_dump(by_alias=True, exclude_none=True)
                for m in to_agui_messages(ledger)]

    assert [(m["role"], m["id"]) for m in messages] == [
        ("user", "m1"), ("assistant", messages[1]["id"]), ("tool", "res_1"),
        ("system", "seed_1")]


CONTROL_EVENTS: list[Any] = [
    QueueEdit(message_id="q1", text="new text"), QueueMove(message_id="q1", position=0),
    QueueRemove(message_id="q1"), QueueSendNow(message_id="q2"),
    InputRequested(input_id="inp_1", prompt="Which card?", input_schema={"type": "string"}),
    InputResponse(input_id="inp_1", value="visa"), ResumeEvent(invocation_id=INV),
]


@pytest.mark.parametrize("event", CONTROL_EVENTS, ids=lambda e: e.type)
def test_a_control_event_with_no_ag_ui_counterpart_is_a_custom_event_with_its_json(
        event: Any) -> None:
    events = [*text("r", ["Working"]), event]

    data = conformant(drive(events, result("recorded")))

    custom = next(e for e in data if e["type"] == "CUSTOM")
    assert custom["name"] == f"dormant.{event.type}"
    assert custom["value"] == event.model_dump(mode="json")
    assert kinds(data)[-3:] == ["TEXT_MESSAGE_END", f"CUSTOM:dormant.{event.type}",
                                "RUN_FINISHED"]


@pytest.mark.parametrize("role", ["user", "system"])
def test_a_seed_is_a_text_message_of_its_role(role: str) -> None:
    events = [SeedEvent(text="Ada joined the chat", role=role, message_id="seed_1")]

    data = conformant(drive(events, result("recorded")))

    assert kinds(data) == ["RUN_STARTED", "STATE_SNAPSHOT", "TEXT_MESSAGE_START",
                           "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_FINISHED"]
    assert (data[2]["messageId"], data[2]["role"]) == ("seed_1", role)
    assert data[-1]["result"]["status"] == "recorded"


# --- the protocol's own command line ---------------------------------------------------------


def _streams() -> dict[str, list[BaseEvent]]:
    return {
        "stopped_mid_text": drive([*text("r", ["Half ", "a "]), *STOP], result("stopped")),
        "stopped_mid_call": drive([ModelStart(invocation_id=INV, step=1), call(),
                                   ToolResult(invocation_id=INV, call_id="call_1",
                                              name="lookup", error="stopped"), *STOP],
                                  result("stopped"), include_steps=True),
        "paused": drive([PauseEvent(invocation_id=INV)], result("paused")),
        "queued": drive([], result("queued", queued=QueuedRef(id="m", position=0))),
        "accepted": drive([], result("accepted")),
        "failed": drive(text("r", ["Half"]), result("error", error="boom", code="run_error")),
        "steered": drive([UserEvent(invocation_id=INV, text="faster", message_id="s1",
                                    steer=True)], result("completed")),
        "progress": drive([call(), ToolResult(invocation_id=INV, call_id="call_1",
                                              name="lookup", result=1, preliminary=True),
                           ToolResult(invocation_id=INV, call_id="call_1", name="lookup",
                                      result=2)], result("completed")),
    }


def test_ag_ui_validate_accepts_every_turn_control_stream(tmp_path: Path) -> None:
    found = shutil.which("ag-ui-validate", path=str(Path(sys.executable).parent))
    assert found, "ag-ui-validate is not installed (pip install -e '.[dev]')"
    for name, events in _streams().items():
        capture = tmp_path / f"{name}.sse"
        capture.write_text("".join(encode_sse(events)))
        done = subprocess.run([found, "--json", str(capture)], capture_output=True, text=True,
                              timeout=120)
        report = json.loads(done.stdout)
        assert done.returncode == 0, f"{name}: {done.stdout}{done.stderr}"
        assert report["summary"]["errors"] == 0, (name, report["diagnostics"])
        assert report["summary"]["warnings"] == 0, (name, report["diagnostics"])
        assert report["eventCount"] == len(events)


# --- the invocation id a stop needs ----------------------------------------------------------


class Question(BaseModel):
    q: str


class Answer(BaseModel):
    answer: str


ASK = {"name": "ask_guest", "args": {"q": "Which night?"}, "id": "call_ask"}


@pytest.fixture()
def app() -> dormant.App:
    return dormant.App(name="bookings")


def ui(app: dormant.App, agent: dormant.Agent) -> Callable[[dict[str, Any]], AgUIRun]:
    return cast("Callable[[dict[str, Any]], AgUIRun]", app.handler.agui(agent=agent))


def stored(app: dormant.App, session_id: str) -> dormant.Session:
    session = app.sessions.get(session_id)
    assert session is not None
    return session


def test_run_started_names_the_invocation_for_new_and_resumed_runs(app: dormant.App) -> None:
    ask = app.tool(name="ask_guest", description="Ask", schema=Question, yield_schema=Answer)
    concierge = app.agent("concierge", model=ScriptedModel([{"tool_calls": [ASK]}, "Booked."]),
                          context=[app.context.history()], tools=[ask])
    handle = ui(app, concierge)

    first = handle({"session_id": "s-ids", "input": {"message": "book"}})
    started = conformant(list(first))[0]
    second = handle({"session_id": "s-ids", "input": {
        "tools": [{"call_id": "call_ask", "input": {"answer": "Friday"}}]}})
    resumed = conformant(list(second))[0]

    assert first.result is not None and second.result is not None
    invocation = first.result.invocation_id
    assert started["runId"] == invocation == started["metadata"]["invocationId"]
    assert resumed["runId"] != invocation  # a new AG-UI run of the same invocation...
    assert resumed["metadata"] == {"invocationId": invocation}  # ...which it names
    assert second.result.invocation_id == invocation


class Fails:
    """Fails its second call (after a tool ran), then answers."""

    def __init__(self) -> None:
        self.calls = 0

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[ModelChunk]:
        self.calls += 1
        if self.calls == 1:
            return ScriptedModel([{"tool_calls": [{"name": "note", "args": {"q": "x"},
                                                   "id": "call_note"}]}]).stream(
                request, signal=signal)
        if self.calls == 2:
            raise RuntimeError("the model connection dropped")
        return iter([TextDelta("Recovered.")])


def test_a_retry_is_a_child_run_of_the_failed_invocation_streamed_from_the_start(
        app: dormant.App) -> None:
    note = app.tool(name="note", description="Note", schema=Question,
                    execute=lambda ctx: "noted")
    model = Fails()
    concierge = app.agent("concierge", model=model, tools=[note])
    handle = ui(app, concierge)
    failed = handle({"session_id": "s-retry", "input": {"message": "go"}})
    first = conformant(list(failed))
    assert first[-1]["type"] == "RUN_ERROR" and stored(app, "s-retry").status == "failed"

    retry = handle({"session_id": "s-retry", "input": {"retry": {"retry_id": "r1"}}})
    opening = [next(retry), next(retry)]  # RUN_STARTED, STATE_SNAPSHOT
    assert model.calls == 2  # sent before the retried model call ran: streamed, not buffered
    data = conformant(opening + list(retry))

    invocation = first[0]["runId"]
    retry_event = next(e for e in stored(app, "s-retry").events if e.type == "retry")
    assert data[0]["runId"] == f"{invocation}:{retry_event.id}"
    assert data[0]["parentRunId"] == invocation
    assert data[0]["metadata"] == {"invocationId": invocation}
    assert data[-1]["result"]["status"] == "completed"


class Turn:
    """A stand-in for a TurnStream: streams ``events``, then ends with ``result``."""

    def __init__(self, events: Sequence[Any], ending: TurnResult, *,
                 open_invocation: str | None = None, parked: str | None = None,
                 ledger: list[Any] | None = None, recorded: list[Any] | None = None) -> None:
        self._events = iter(events)
        self._ending = ending
        self.invocation_id = "inv_minted"
        self.session_id = SID
        self.result: TurnResult | None = None
        self.capture_start = True
        self.aborted = False
        self.start_head = SimpleNamespace(open_invocation=open_invocation, parked=parked,
                                          state={}, seq=0, step=[])
        recorded = recorded or []
        self.session = SimpleNamespace(events=[*(ledger or []), *recorded],
                                       new_events=recorded, first_seq=0)

    def __iter__(self) -> Turn:
        return self

    def __next__(self) -> Any:
        if self.result is not None:
            raise StopIteration
        for event in self._events:
            if event.type == "invocation_resume" and event.invocation_id:
                self.invocation_id = event.invocation_id
            return event
        self.result = self._ending
        raise StopIteration

    def abort(self) -> None:
        self.aborted = True

    def stop(self, seen: int | None = None) -> None:
        self.stopped_at: int | None = seen
        self.stopped = True


def agui_run(app: dormant.App, turn: Turn) -> AgUIRun:
    run = ui(app, app.agent("a", model=ScriptedModel([])))({"input": {}})
    run.turn = turn  # type: ignore[assignment]
    return run


def test_a_paused_invocation_that_continues_is_a_child_run_named_by_its_resume(
        app: dormant.App) -> None:
    pause = PauseEvent(id="evt_pause", invocation_id=INV)
    earlier = [InvocationStart(invocation_id=INV), UserEvent(invocation_id=INV, text="go"),
               InvocationResume(id="evt_resume_1", invocation_id=INV), pause]
    resume = ResumeEvent(id="evt_resume_2", invocation_id=INV)  # recorded, not streamed
    turn = Turn([*text("r", ["On ", "we go."]), InvocationEnd(invocation_id=INV)],
                result("completed"), open_invocation=INV, ledger=earlier, recorded=[resume])

    data = conformant(list(agui_run(app, turn)))

    assert data[0]["runId"] == f"{INV}:evt_resume_2"
    assert data[0]["parentRunId"] == f"{INV}:evt_resume_1"
    assert data[0]["metadata"] == {"invocationId": INV}


def test_a_run_that_opens_nothing_belongs_to_the_invocation_it_concerns(app: dormant.App) -> None:
    ledger = [InvocationStart(invocation_id=INV), UserEvent(invocation_id=INV, text="go")]
    stopped = Turn([], result("stopped"), open_invocation=INV, parked="tool", ledger=ledger)
    accepted = Turn([], result("accepted", invocation_id="inv_elsewhere"))
    idle = Turn([], result("recorded", invocation_id="inv_minted"))

    runs = [conformant(list(agui_run(app, turn))) for turn in (stopped, accepted, idle)]

    (stop, *_), (accept, *_), (record, *_) = runs
    assert stop["runId"].startswith(f"{INV}:") and stop["parentRunId"] == INV
    assert stop["metadata"] == {"invocationId": INV}
    assert accept["runId"].startswith("inv_elsewhere:") and "parentRunId" not in accept
    assert accept["metadata"] == {"invocationId": "inv_elsewhere"}
    assert record["runId"] == "inv_minted" and "parentRunId" not in record
    assert [run[-1]["result"]["status"] for run in runs] == ["stopped", "accepted", "recorded"]


# --- a client that hangs up ------------------------------------------------------------------


class Slow:
    """Streams words with a pause before each but the first, and stops when aborted."""

    def __init__(self, words: list[str], pause: float = 10.0) -> None:
        self.words = words
        self.pause = pause
        self.waiting = threading.Event()  # set while it waits for its next word
        self.saw_abort = threading.Event()

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[ModelChunk]:
        for index, word in enumerate(self.words):
            if index:
                self.waiting.set()
                if signal.wait(self.pause):
                    self.saw_abort.set()
                    return
                self.waiting.clear()
            yield TextDelta(word)


def test_closing_the_run_mid_stream_stops_the_turn_keeping_what_was_sent(
        app: dormant.App) -> None:
    model = Slow(["one ", "two ", "three"])
    stream = ui(app, app.agent("a", model=model))(
        {"session_id": "s-gone", "input": {"message": "count"}})

    seen = []
    for event in stream:
        seen.append(event)
        if event.type.value == "TEXT_MESSAGE_CONTENT":
            break
    began = time.monotonic()
    stream.close()  # the client hung up: the write of that first word failed

    assert time.monotonic() - began < model.pause / 2  # the model saw the stop, no wait
    assert model.saw_abort.is_set()
    assert list(stream) == []
    assert stream.result is not None
    assert (stream.result.status, stream.result.commit_status) == ("stopped", "committed")
    kept = app.sessions.get("s-gone")
    assert kept is not None
    # the message is kept; the word whose write failed is not (the client never saw it)
    assert [e.type for e in kept.events] == [
        "invocation_start", "user", "stop_requested", "invocation_end"]
    assert kept.events[1].text == "count"


def test_closing_the_run_while_another_thread_streams_it_stops_the_turn(
        app: dormant.App) -> None:
    model = Slow(["one ", "two ", "three"])
    stream = ui(app, app.agent("a", model=model))(
        {"session_id": "s-gone-2", "input": {"message": "count"}})
    seen: list[BaseEvent] = []
    server = threading.Thread(target=lambda: seen.extend(stream))
    began = time.monotonic()
    server.start()
    assert model.waiting.wait(5)  # the server thread is inside the turn, the model waiting

    stream.close()  # the connection dropped: from the thread that noticed
    server.join(5)

    assert not server.is_alive()
    assert time.monotonic() - began < model.pause / 2
    assert model.saw_abort.is_set()
    data = conformant(seen)
    assert kinds(data)[-3:] == ["TEXT_MESSAGE_END", "CUSTOM:dormant.stop_requested",
                               "RUN_FINISHED"]
    kept = app.sessions.get("s-gone-2")
    assert kept is not None and kept.events[-1].status == "stopped"
    assert [e.type for e in kept.events][:2] == ["invocation_start", "user"]


def test_closing_calls_the_turns_stop_and_runs_it_to_its_end(app: dormant.App) -> None:
    turn = Turn([*text("r", ["One ", "two "]), InvocationEnd(invocation_id=INV)],
                result("stopped"))
    stream = agui_run(app, turn)
    next(stream), next(stream), next(stream)  # RUN_STARTED, STATE_SNAPSHOT, TEXT_MESSAGE_START

    stream.close()

    assert turn.stopped and not turn.aborted
    assert turn.result is not None  # drained: the turn ended as its handler decided
    assert list(stream) == []


def test_closing_a_run_never_iterated_runs_nothing(app: dormant.App) -> None:
    model = Slow(["never"])
    stream = ui(app, app.agent("a", model=model))(
        {"session_id": "s-never", "input": {"message": "hi"}})

    stream.close()

    assert list(stream) == []
    assert stream.result is None and not model.waiting.is_set()
    assert app.sessions.get("s-never") is None


# --- the real handler: stopped, paused, queued and failed runs pass the validator ---------------


def _served(app: dormant.App, agent: dormant.Agent) -> Callable[[dict[str, Any]], AgUIRun]:
    return cast("Callable[[dict[str, Any]], AgUIRun]",
                app.handler.agui(agent=agent, poll_interval=0.02))


def _stream_in_thread(run: AgUIRun) -> tuple[threading.Thread, list[BaseEvent]]:
    seen: list[BaseEvent] = []
    thread = threading.Thread(target=lambda: seen.extend(run), daemon=True)
    thread.start()
    return thread, seen


def _wait_for(seen: list[BaseEvent], kind: str) -> None:
    deadline = time.monotonic() + 5
    while not any(e.type.value == kind for e in list(seen)):
        assert time.monotonic() < deadline, f"no {kind} arrived"
        time.sleep(0.01)


def test_a_real_stopped_run_passes_the_validator(app: dormant.App) -> None:
    story = " ".join(f"w{i}" for i in range(300))
    agent = app.agent("teller", model=ScriptedModel([story], delay=0.01))
    run = _served(app, agent)({"session_id": "v-stop", "input": {"message": "a story"}})
    thread, seen = _stream_in_thread(run)
    _wait_for(seen, "TEXT_MESSAGE_CONTENT")
    invocation = seen[0].metadata["invocationId"]  # type: ignore[attr-defined]

    stop = app.handler.rest(agent=agent)({"session_id": "v-stop", "input": {
        "stop": {"invocation_id": invocation}}})
    thread.join(5)

    assert stop.status == "accepted" and not thread.is_alive()
    data = conformant(seen)
    assert data[-1]["type"] == "RUN_FINISHED" and data[-1]["result"]["status"] == "stopped"


def test_a_real_paused_run_passes_the_validator(app: dormant.App) -> None:
    started = threading.Event()

    def execute(ctx: dormant.ToolContext) -> dict[str, Any]:
        started.set()
        ctx.signal.wait(0.3)
        return {"ok": True}

    work = app.tool(name="work", description="w", schema=Question, execute=execute)
    agent = app.agent("worker", model=ScriptedModel([
        {"tool_calls": [{"name": "work", "args": {"q": "x"}}]}, "after"]), tools=[work])
    run = _served(app, agent)({"session_id": "v-pause", "input": {"message": "work"}})
    thread, seen = _stream_in_thread(run)
    assert started.wait(5)

    app.handler.rest(agent=agent)({"session_id": "v-pause", "input": {"pause": True}})
    thread.join(5)

    data = conformant(seen)
    assert data[-1]["type"] == "RUN_FINISHED" and data[-1]["result"]["status"] == "paused"


def test_real_queued_and_failed_runs_pass_the_validator(app: dormant.App) -> None:
    ask = app.tool(name="ask_guest", description="ask", schema=Question, yield_schema=Answer)
    tick = app.tool(name="tick", description="t", schema=Question, execute=lambda ctx: {"ok": 1})

    class Failing:
        def stream(self, request: Any, *, signal: Any) -> Iterator[Any]:
            from dormant.models._base import ModelError, ToolCallChunk, ToolMessage
            if isinstance(request.messages[-1], ToolMessage):
                raise ModelError("the provider is down")
            yield ToolCallChunk(call_id="", name="tick", args={"q": "x"})

    waiting = app.agent("asker", model=ScriptedModel([{"tool_calls": [ASK]}]), tools=[ask])
    list(_served(app, waiting)({"session_id": "v-queue2", "input": {"message": "book"}}))
    queued = conformant(list(_served(app, waiting)(
        {"session_id": "v-queue2", "input": {"message": "and breakfast?"}})))
    failing = app.agent("failer", model=Failing(), tools=[tick])
    failed = conformant(list(_served(app, failing)(
        {"session_id": "v-fail", "input": {"message": "go"}})))

    assert [e["name"] for e in queued if e["type"] == "CUSTOM"] == ["QUEUED"]
    assert queued[-1]["type"] == "RUN_FINISHED" and queued[-1]["result"]["status"] == "queued"
    assert failed[-1]["type"] == "RUN_ERROR"
    assert app.sessions.get("v-fail").status == "failed"  # type: ignore[union-attr]
