"""Turn control across requests, with real threads, on every store that runs beside a second
thread (SQLite; DynamoDB through moto's HTTP server and DynamoDB Local; memory): the running
turn in one thread, the control request — stop, steer, pause, resume, interrupt, the inbox —
in another, meeting only through the store."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant.events import AssistantEvent, InvocationEnd, ToolResult, UserEvent
from dormant.handlers import HandlerInput, TurnResult, TurnStream
from dormant.models import ScriptedModel
from dormant.stores import Store

from ._ledger import ledger as _ledger
from ._ledger import types as _types
from .conftest import STORE_FACTORIES

WAIT = 10  # seconds a thread may take before the test fails instead of hanging
POLL = 0.05  # the running turn reads the control record this often
STORY = " ".join(f"word{i}" for i in range(400))


@pytest.fixture(params=[name for name in sorted(STORE_FACTORIES) if name != "dynamodb-moto"])
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    _, factory = STORE_FACTORIES[request.param]
    yield from factory()


class Question(BaseModel):
    q: str


class Answer(BaseModel):
    answer: str


class Slow(BaseModel):
    seconds: float




class Running:
    """A turn streaming in its own thread: what it streamed so far, and its result."""

    def __init__(self, stream: TurnStream) -> None:
        self.stream = stream
        self.seen: list[Any] = []
        self.result: TurnResult | None = None
        self.thread = threading.Thread(target=self._consume, daemon=True)
        self.thread.start()

    def _consume(self) -> None:
        for event in self.stream:
            self.seen.append(event)
        self.result = self.stream.result

    def wait_for(self, predicate: Callable[[list[Any]], bool]) -> None:
        deadline = time.monotonic() + WAIT
        while not predicate(list(self.seen)):
            assert time.monotonic() < deadline, "the turn never got there"
            time.sleep(0.01)

    def join(self) -> TurnResult:
        self.thread.join(WAIT)
        assert not self.thread.is_alive(), "the turn did not end"
        assert self.result is not None
        return self.result


def _deltas(seen: list[Any]) -> int:
    return sum(1 for e in seen if e.type == "assistant_delta")


def _app(store: Store, replies: list[Any], *, tools: list[dormant.Tool] | None = None,
         delay: float = 0.01) -> tuple[dormant.App, dormant.Agent, ScriptedModel]:
    app = dormant.App(name="control", store=store)
    model = ScriptedModel(replies, delay=delay)
    agent = app.agent(name="teller", model=model, tools=tools or [])
    return app, agent, model


def _slow_tool(app: dormant.App, started: threading.Event, ran: list[str]) -> dormant.Tool:
    def execute(ctx: dormant.ToolContext) -> dict[str, Any]:
        started.set()
        if ctx.signal.wait(ctx.args.seconds):
            ran.append("cut")
            raise dormant.Aborted("stopped while working")
        ran.append("done")
        return {"slept": ctx.args.seconds}

    return app.tool(name="work", description="slow work", schema=Slow, execute=execute)


# --- stop ----------------------------------------------------------------------------------------


def test_a_stop_from_another_request_lands_within_two_seconds_keeping_what_was_seen(
        store: Store) -> None:
    app, agent, _ = _app(store, [STORY])
    stream = app.handler.turn(agent=agent, poll_interval=POLL)(
        {"session_id": "st", "input": {"message": "tell me a long story", "message_id": "m-1"}})
    running = Running(stream)
    running.wait_for(lambda seen: _deltas(seen) >= 10)
    seen = len(running.seen)
    shown = "".join(e.delta for e in running.seen[:seen] if e.type == "assistant_delta")

    sent = time.monotonic()
    stop = app.handler.rest(agent=agent)({"session_id": "st", "input": {
        "stop": {"invocation_id": stream.invocation_id, "seen": seen}}})
    result = running.join()
    took = time.monotonic() - sent

    assert stop.status == "accepted"
    assert took < 2.0
    assert (result.status, result.commit_status) == ("stopped", "committed")
    ledger = _ledger(app, "st")
    assert _types(ledger) == ["invocation_start", "user", "assistant", "stop_requested",
                              "invocation_end"]
    reply = ledger[2]
    assert isinstance(reply, AssistantEvent) and reply.text == shown  # the frontier, exactly
    end = ledger[-1]
    assert isinstance(end, InvocationEnd) and end.status == "stopped"
    assert [e.seq for e in running.seen] == list(range(1, len(running.seen) + 1))


def test_a_stop_for_an_ended_or_older_invocation_is_refused_and_writes_nothing(
        store: Store) -> None:
    app, agent, _ = _app(store, ["first answer", STORY], delay=0.01)
    rest = app.handler.rest(agent=agent, poll_interval=POLL)
    first = app.handler.turn(agent=agent)({"session_id": "old", "input": {"message": "one"}})
    assert first.run().status == "completed"
    before = app.sessions.get("old")
    assert before is not None

    late = rest({"session_id": "old", "input": {"stop": {"invocation_id": first.invocation_id}}})
    assert (late.status, late.code) == ("error", "not_running")
    assert app.sessions.get("old").version == before.version  # type: ignore[union-attr]
    control = store.read_control("session_old")  # the first turn's announcement alone
    assert control is None or (control.stop is None and control.rev == 1)

    # While a newer invocation runs, a stop naming the older one cannot touch it.
    stream = app.handler.turn(agent=agent, poll_interval=POLL)(
        {"session_id": "old", "input": {"message": "two"}})
    running = Running(stream)
    running.wait_for(lambda seen: _deltas(seen) >= 3)
    older = rest({"session_id": "old", "input": {"stop": {"invocation_id": first.invocation_id}}})
    assert older.code == "not_running"
    result = running.join()
    assert result.status == "completed"


def test_a_stop_while_a_tool_runs_aborts_it_and_marks_it_stopped(store: Store) -> None:
    started, ran = threading.Event(), []
    app = dormant.App(name="control", store=store)
    model = ScriptedModel([{"text": "working on it", "tool_calls": [
        {"name": "work", "args": {"seconds": 30}, "id": "call_w"}]}])
    agent = app.agent(name="worker", model=model, tools=[_slow_tool(app, started, ran)])
    stream = app.handler.turn(agent=agent, poll_interval=POLL)(
        {"session_id": "tool", "input": {"message": "do the work"}})
    running = Running(stream)
    assert started.wait(WAIT)

    stop = app.handler.rest(agent=agent)({"session_id": "tool", "input": {
        "stop": {"invocation_id": stream.invocation_id}}})
    result = running.join()

    assert stop.status == "accepted" and result.status == "stopped"
    assert ran == ["cut"]
    ledger = _ledger(app, "tool")
    assert _types(ledger) == ["invocation_start", "user", "assistant", "tool_call",
                              "tool_result", "stop_requested", "invocation_end"]
    settled = ledger[4]
    assert isinstance(settled, ToolResult) and settled.error == "stopped"


def test_a_stop_for_a_waiting_response_ends_it(store: Store) -> None:
    app = dormant.App(name="control", store=store)
    ask = app.tool(name="ask_guest", description="ask", schema=Question, yield_schema=Answer)
    agent = app.agent(name="c", model=ScriptedModel([{"tool_calls": [
        {"name": "ask_guest", "args": {"q": "Which night?"}, "id": "call_q"}]}]), tools=[ask])
    rest = app.handler.rest(agent=agent)
    parked = rest({"session_id": "wait", "input": {"message": "book me in"}})
    assert parked.status == "yielded_tool"
    invocation = app.sessions.get("wait").open_invocation  # type: ignore[union-attr]
    assert invocation is not None

    stopped = rest({"session_id": "wait", "input": {"stop": {"invocation_id": invocation}}})

    assert stopped.status == "stopped"
    session = app.sessions.get("wait")
    assert session is not None and session.status == "active" and not session.yielded_tools
    assert _types(session.events)[-3:] == ["tool_result", "stop_requested", "invocation_end"]


# --- steer ---------------------------------------------------------------------------------------


def test_a_steer_joins_the_running_invocation_at_its_next_step_boundary(store: Store) -> None:
    started, ran = threading.Event(), []
    app = dormant.App(name="control", store=store)
    model = ScriptedModel([
        {"text": "Let me check.", "tool_calls": [{"name": "work", "args": {"seconds": 0.5}}]},
        "Shorter it is: done."], delay=0.01)
    agent = app.agent(name="worker", model=model, tools=[_slow_tool(app, started, ran)])
    stream = app.handler.turn(agent=agent, poll_interval=POLL)(
        {"session_id": "steer", "input": {"message": "do the work"}})
    running = Running(stream)
    assert started.wait(WAIT)

    steer = app.handler.rest(agent=agent)({"session_id": "steer", "input": {"steer": {
        "text": "make it shorter", "invocation_id": stream.invocation_id, "id": "st-1"}}})
    result = running.join()

    assert steer.status == "accepted"
    assert result.status == "completed" and result.output.text == "Shorter it is: done."
    ledger = _ledger(app, "steer")
    assert _types(ledger) == ["invocation_start", "user", "assistant", "tool_call",
                              "tool_result", "steer", "user", "assistant", "invocation_end"]
    steered = ledger[6]
    assert isinstance(steered, UserEvent) and steered.steer and steered.text == "make it shorter"
    assert steered.invocation_id == stream.invocation_id and steered.message_id == "st-1"
    second = model.requests[1].messages
    assert any("make it shorter" in str(m) for m in second)
    # It landed once: the same steer again is a duplicate.
    again = app.handler.rest(agent=agent)({"session_id": "steer", "input": {"steer": {
        "text": "make it shorter", "invocation_id": stream.invocation_id, "id": "st-1"}}})
    assert again.code == "duplicate_message"


def test_a_steer_for_an_ended_invocation_is_an_ordinary_message(store: Store) -> None:
    app, agent, _ = _app(store, ["first", "second"])
    rest = app.handler.rest(agent=agent)
    first = app.handler.turn(agent=agent)({"session_id": "late", "input": {"message": "a"}})
    first.run()

    steered = rest({"session_id": "late", "input": {"steer": {
        "text": "and another thing", "invocation_id": first.invocation_id, "id": "st-9"}}})

    assert steered.status == "completed" and steered.output.text == "second"
    users = [e for e in _ledger(app, "late") if isinstance(e, UserEvent)]
    assert [(u.text, u.steer) for u in users] == [("a", False), ("and another thing", False)]


# --- pause / resume ------------------------------------------------------------------------------


def test_pause_stops_at_the_step_boundary_and_resume_continues_then_drains_the_inbox(
        store: Store) -> None:
    started, ran = threading.Event(), []
    app = dormant.App(name="control", store=store)
    model = ScriptedModel([
        {"text": "Step one.", "tool_calls": [{"name": "work", "args": {"seconds": 0.3}}]},
        "Step two, after the pause.", "And the queued one."], delay=0.0)
    agent = app.agent(name="worker", model=model, tools=[_slow_tool(app, started, ran)])
    rest = app.handler.rest(agent=agent, poll_interval=POLL)
    stream = app.handler.turn(agent=agent, poll_interval=POLL)(
        {"session_id": "p", "input": {"message": "two steps please"}})
    running = Running(stream)
    assert started.wait(WAIT)

    paused = rest({"session_id": "p", "input": {"pause": True}})
    result = running.join()

    assert paused.status == "paused" and result.status == "paused"
    assert ran == ["done"]  # the tool finished: a pause waits for the step boundary
    session = app.sessions.get("p")
    assert session is not None and session.status == "paused"
    assert _types(session.events)[-1] == "pause"

    queued = rest({"session_id": "p", "input": {"message": "queued while paused",
                                                "message_id": "q-1"}})
    assert queued.status == "queued" and queued.queued is not None
    assert (queued.queued.id, queued.queued.position) == ("q-1", 0)

    resumed = rest({"session_id": "p", "input": {"resume": True}})

    assert resumed.status == "completed" and resumed.output.text == "Step two, after the pause."
    assert resumed.drained == ["q-1"]
    session = app.sessions.get("p")
    assert session is not None and session.status == "active" and session.inbox == []
    types = _types(session.events)
    assert types[types.index("pause"):] == [
        "pause", "queued", "resume", "assistant", "invocation_end",
        "invocation_start", "user", "assistant", "invocation_end"]


# --- interrupt -----------------------------------------------------------------------------------


def test_interrupt_takes_exactly_one_owner_then_the_inbox_drains(store: Store) -> None:
    app = dormant.App(name="control", store=store)
    ask = app.tool(name="ask_guest", description="ask", schema=Question, yield_schema=Answer)
    agent = app.agent(name="c", model=ScriptedModel([
        {"tool_calls": [{"name": "ask_guest", "args": {"q": "Which night?"}, "id": "call_q"}]},
        "Hello again."]), tools=[ask])
    rest = app.handler.rest(agent=agent)
    rest({"session_id": "i", "input": {"message": "book me in"}})
    queued = rest({"session_id": "i", "input": {"message": "actually, just say hi"}})
    assert queued.status == "queued"
    before = app.sessions.get("i")
    assert before is not None

    wrong = rest({"session_id": "i", "input": {"interrupt": {"owner": "call_other"}}})
    assert (wrong.status, wrong.code) == ("error", "not_pending")
    assert app.sessions.get("i").version == before.version  # type: ignore[union-attr]

    done = rest({"session_id": "i", "input": {"interrupt": {"owner": "call_q"}}})

    assert done.status == "completed" and done.output.text == "Hello again."
    session = app.sessions.get("i")
    assert session is not None and session.inbox == [] and session.status == "active"
    ledger = session.events
    cut = next(e for e in ledger if isinstance(e, ToolResult))
    assert cut.error == "interrupted"
    ends = [e.status for e in ledger if isinstance(e, InvocationEnd)]
    assert ends == ["interrupted", "completed"]


# --- the inbox -----------------------------------------------------------------------------------


def test_the_inbox_is_editable_and_drains_in_order_after_the_answer(store: Store) -> None:
    app = dormant.App(name="control", store=store)
    ask = app.tool(name="ask_guest", description="ask", schema=Question, yield_schema=Answer)
    model = ScriptedModel([
        {"tool_calls": [{"name": "ask_guest", "args": {"q": "Which night?"}, "id": "call_q"}]},
        "Booked.", "reply to C", "reply to A"])
    agent = app.agent(name="c", model=model, tools=[ask])
    rest = app.handler.rest(agent=agent)
    rest({"session_id": "q", "input": {"message": "book me in"}})
    for mid, text in [("a", "A"), ("b", "B"), ("c", "C")]:
        sent = rest({"session_id": "q", "input": {"message": text, "message_id": mid}})
        assert sent.status == "queued"
    rest({"session_id": "q", "input": {"queue": [
        {"op": "remove", "id": "b"}, {"op": "move", "id": "c", "position": 0},
        {"op": "edit", "id": "c", "text": "C, edited"}]}})
    session = app.sessions.get("q")
    assert session is not None
    assert [(m.id, m.text) for m in session.inbox] == [("c", "C, edited"), ("a", "A")]

    answered = rest({"session_id": "q", "input": {"tools": [
        {"call_id": "call_q", "input": {"answer": "Friday"}}]}})

    assert answered.status == "completed" and answered.drained == ["c", "a"]
    session = app.sessions.get("q")
    assert session is not None and session.inbox == []
    users = [e.text for e in session.events if isinstance(e, UserEvent)]
    assert users == ["book me in", "C, edited", "A"]
    model.assert_consumed()
    # every drained message was its own claim (its start) and commit: two versions each
    assert session.version == answered.version + 4  # type: ignore[operator]


def test_the_rest_of_the_inbox_is_handed_on_when_time_runs_short(store: Store) -> None:
    app = dormant.App(name="control", store=store)
    ask = app.tool(name="ask_guest", description="ask", schema=Question, yield_schema=Answer)
    agent = app.agent(name="c", model=ScriptedModel([
        {"tool_calls": [{"name": "ask_guest", "args": {"q": "?"}, "id": "call_q"}]},
        "Booked.", "one", "two"]), tools=[ask])
    handed: list[HandlerInput] = []
    app.hand_on = handed.append
    rest = app.handler.rest(agent=agent, drain_budget=30.0)
    rest({"session_id": "h", "input": {"message": "book"}})
    rest({"session_id": "h", "input": {"message": "first queued", "message_id": "x"}})
    rest({"session_id": "h", "input": {"message": "second queued", "message_id": "y"}})

    short = rest({"session_id": "h", "input": {"tools": [
        {"call_id": "call_q", "input": {"answer": "Friday"}}]}}, remaining_time=20.0)

    assert short.status == "completed" and short.handed_on is True and not short.drained
    assert [(h.session_id, h.input.message, h.input.retry) for h in handed] == [
        ("session_h", None, None)]
    # The hand-on is an ordinary request: it runs the queue's next message, then the rest.
    carried = rest(handed[0])
    assert carried.status == "completed" and carried.output.text == "one"
    assert carried.drained == ["y"]
    assert app.sessions.get("h").inbox == []  # type: ignore[union-attr]


# --- the deadline --------------------------------------------------------------------------------


def test_a_turn_cut_by_the_deadline_is_handed_on_as_a_retry_and_carries_on(
        store: Store) -> None:
    app = dormant.App(name="control", store=store)
    calls: list[str] = []
    clock = app.tool(name="tick", description="tick", schema=Slow,
                     execute=lambda ctx: calls.append(ctx.call_id) or {"ok": True})
    model = ScriptedModel([
        {"tool_calls": [{"name": "tick", "args": {"seconds": 0}}]},
        " ".join(f"slow{i}" for i in range(200)), "finished after the hand-on"], delay=0.02)
    agent = app.agent(name="long", model=model, tools=[clock])
    handed: list[HandlerInput] = []
    app.hand_on = handed.append
    rest = app.handler.rest(agent=agent, deadline_margin=0.0)

    cut = rest({"session_id": "d", "input": {"message": "a long job"}}, remaining_time=1.0)

    assert (cut.status, cut.code, cut.handed_on) == ("error", "deadline", True)
    assert app.sessions.get("d").status == "failed"  # type: ignore[union-attr]
    assert len(handed) == 1 and handed[0].input.retry is not None
    carried = rest(handed[0])
    assert carried.status == "completed" and carried.output.text == "finished after the hand-on"
    assert len(calls) == 1  # the tool that ran before the deadline is not run again
    again = rest(handed[0])  # a redelivered hand-on lands once
    assert again.code == "duplicate_retry"


# --- input requests and seeds --------------------------------------------------------------------


def test_an_input_request_waits_for_its_response_then_the_inbox_drains(store: Store) -> None:
    app, agent, _ = _app(store, ["after the form"])
    session = app.sessions.create("form")
    session.request_input("budget", {"type": "object", "properties": {
        "amount": {"type": "integer", "minimum": 1}}, "required": ["amount"]}, "Your budget?")
    app.sessions.commit(session)
    rest = app.handler.rest(agent=agent)
    waiting = app.sessions.get("form")
    assert waiting is not None and waiting.status == "awaiting_input"
    assert [(i.input_id, i.prompt) for i in waiting.pending_inputs] == [("budget", "Your budget?")]
    assert rest({"session_id": "form", "input": {"message": "hi"}}).status == "queued"

    bad = rest({"session_id": "form", "input": {"inputs": [
        {"input_id": "budget", "value": {"amount": 0}}]}})
    assert (bad.status, bad.code) == ("error", "invalid_input") and "amount" in (bad.error or "")

    good = rest({"session_id": "form", "input": {"inputs": [
        {"input_id": "budget", "value": {"amount": 300}}]}})

    assert good.status == "completed" and good.output.text == "after the form"
    done = app.sessions.get("form")
    assert done is not None and done.pending_inputs == [] and done.inbox == []
    assert done.input_values == {"budget": {"amount": 300}}
    assert rest({"session_id": "form", "input": {"inputs": [
        {"input_id": "budget", "value": {"amount": 5}}]}}).code == "already_answered"


def test_a_seed_joins_the_conversation_without_running_a_turn(store: Store) -> None:
    app, agent, model = _app(store, ["I know you prefer Fridays."])
    rest = app.handler.rest(agent=agent)
    seeded = rest({"session_id": "seed", "input": {"seed": {
        "text": "The guest prefers Fridays.", "id": "seed-1"}}})
    assert seeded.status == "recorded" and not model.requests

    reply = rest({"session_id": "seed", "input": {"message": "what do I like?"}})

    assert reply.output.text == "I know you prefer Fridays."
    assert any("prefers Fridays" in str(m) for m in model.requests[0].messages)
    again = rest({"session_id": "seed", "input": {"seed": {
        "text": "The guest prefers Fridays.", "id": "seed-1"}}})
    assert again.code == "duplicate_message"


def test_if_busy_interrupt_and_send_now_end_the_waiting_response_and_run_the_message(
        store: Store) -> None:
    app = dormant.App(name="control", store=store)
    ask = app.tool(name="ask_guest", description="ask", schema=Question, yield_schema=Answer)
    model = ScriptedModel([
        {"tool_calls": [{"name": "ask_guest", "args": {"q": "Which night?"}, "id": "call_1"}]},
        "Forget the booking: hello!",
        {"tool_calls": [{"name": "ask_guest", "args": {"q": "Which room?"}, "id": "call_2"}]},
        "Sent now."])
    agent = app.agent(name="c", model=model, tools=[ask])
    rest = app.handler.rest(agent=agent)
    rest({"session_id": "now", "input": {"message": "book"}})

    now = rest({"session_id": "now", "input": {"message": "just say hello",
                                               "if_busy": "interrupt"}})

    assert now.status == "completed" and now.output.text == "Forget the booking: hello!"
    rest({"session_id": "now", "input": {"message": "book a room"}})
    assert rest({"session_id": "now", "input": {"message": "urgent",
                                                "message_id": "u-1"}}).status == "queued"
    sent = rest({"session_id": "now", "input": {"queue": [{"op": "send_now", "id": "u-1"}]}})

    assert sent.status == "completed" and sent.output.text == "Sent now."
    session = app.sessions.get("now")
    assert session is not None and session.inbox == [] and session.status == "active"
    assert [e.status for e in session.events if isinstance(e, InvocationEnd)] == [
        "interrupted", "completed", "interrupted", "completed"]
    model.assert_consumed()


def test_a_stop_for_an_invocation_a_message_is_resuming_reaches_that_turn(
        store: Store) -> None:
    app = dormant.App(name="control", store=store)
    model = ScriptedModel(["Which date?", STORY], delay=0.01)
    agent = app.agent(name="intake", model=model, yields=True)
    rest = app.handler.rest(agent=agent, poll_interval=POLL)
    first = rest({"session_id": "res", "input": {"message": "book"}})
    assert first.status == "yielded_message"
    stream = app.handler.turn(agent=agent, poll_interval=POLL)(
        {"session_id": "res", "input": {"message": "Tuesday"}})
    running = Running(stream)
    running.wait_for(lambda seen: _deltas(seen) >= 5)

    stop = rest({"session_id": "res", "input": {"stop": {"invocation_id": stream.invocation_id}}})
    result = running.join()

    assert stop.status == "accepted"
    assert (result.status, result.commit_status) == ("stopped", "committed")
    users = [e.text for e in _ledger(app, "res") if isinstance(e, UserEvent)]
    assert users == ["book", "Tuesday"]  # the message that resumed it is kept


def test_a_control_request_never_runs_the_inbox_beside_a_running_turn(store: Store) -> None:
    started, ran = threading.Event(), []
    app = dormant.App(name="control", store=store)

    def execute(ctx: dormant.ToolContext) -> dict[str, Any]:
        started.set()
        ctx.signal.wait(0.5)
        ran.append(ctx.call_id)
        return {"booked": ctx.input.answer}

    ask = app.tool(name="ask_guest", description="ask", schema=Question, yield_schema=Answer,
                   execute=execute)
    model = ScriptedModel([
        {"tool_calls": [{"name": "ask_guest", "args": {"q": "Which night?"}, "id": "call_q"}]},
        STORY, "the queued reply"], delay=0.01)
    agent = app.agent(name="c", model=model, tools=[ask])
    rest = app.handler.rest(agent=agent, poll_interval=POLL)
    rest({"session_id": "busy", "input": {"message": "book"}})
    assert rest({"session_id": "busy", "input": {"message": "late checkout?"}}).status == "queued"
    answer = app.handler.turn(agent=agent, poll_interval=POLL)({"session_id": "busy", "input": {
        "tools": [{"call_id": "call_q", "input": {"answer": "Friday"}}]}})
    running = Running(answer)
    assert started.wait(WAIT)
    running.wait_for(lambda seen: _deltas(seen) >= 3)

    stop = rest({"session_id": "busy", "input": {"stop": {"invocation_id": answer.invocation_id}}})
    result = running.join()

    assert stop.status == "accepted"  # it did not run the queued message itself
    assert result.status == "stopped" and result.drained is not None
    assert len(result.drained) == 1  # the stopped turn's request ran the inbox, once
    session = app.sessions.get("busy")
    assert session is not None and session.inbox == []
    ends = [e.status for e in session.events if isinstance(e, InvocationEnd)]
    assert ends == ["stopped", "completed"] and ran == ["call_q"]
    users = [e.text for e in session.events if isinstance(e, UserEvent)]
    assert users == ["book", "late checkout?"]


def test_a_message_while_a_resumed_invocation_runs_waits_in_the_inbox(store: Store) -> None:
    started, release = threading.Event(), threading.Event()
    app = dormant.App(name="control", store=store)

    def execute(ctx: dormant.ToolContext) -> dict[str, Any]:
        started.set()
        assert release.wait(WAIT)
        return {"booked": ctx.input.answer}

    ask = app.tool(name="ask_guest", description="ask", schema=Question, yield_schema=Answer,
                   execute=execute)
    model = ScriptedModel([
        {"tool_calls": [{"name": "ask_guest", "args": {"q": "Which night?"}, "id": "call_q"}]},
        "Booked.", "Breakfast is at eight."])
    agent = app.agent(name="c", model=model, tools=[ask])
    rest = app.handler.rest(agent=agent, poll_interval=POLL)
    rest({"session_id": "run", "input": {"message": "book"}})
    answer = app.handler.turn(agent=agent, poll_interval=POLL)({"session_id": "run", "input": {
        "tools": [{"call_id": "call_q", "input": {"answer": "Friday"}}]}})
    running = Running(answer)
    assert started.wait(WAIT)  # the answer is claimed: the invocation runs in the other thread

    meanwhile = rest({"session_id": "run", "input": {"message": "breakfast?", "message_id": "b"}})
    rejected = rest({"session_id": "run", "input": {"message": "now!", "if_busy": "reject"}})
    release.set()
    result = running.join()

    assert meanwhile.status == "queued" and rejected.code == "session_running"
    assert result.status == "completed" and result.drained == ["b"]
    session = app.sessions.get("run")
    assert session is not None and session.inbox == []
    assert [e.text for e in session.events if isinstance(e, UserEvent)] == ["book", "breakfast?"]


class _Stranding:
    """An app whose ``ask_guest`` call parks session ``dead``; ``ran`` gets each real run of
    the tool (its call id). :meth:`die_after_the_claim` lands the answer's claim as a request
    would and dies before the turn commits."""

    def __init__(self, store: Store, *replies: str) -> None:
        self.app = app = dormant.App(name="control", store=store)
        self.ran: list[str] = []
        ask = app.tool(name="ask_guest", description="ask", schema=Question,
                       yield_schema=Answer, execute=lambda ctx: self.ran.append(ctx.call_id)
                       or {"booked": ctx.input.answer})
        self.model = ScriptedModel([
            {"tool_calls": [{"name": "ask_guest", "args": {"q": "?"}, "id": "call_q"}]},
            *replies])
        self.rest = app.handler.rest(agent=app.agent(name="c", model=self.model, tools=[ask]))

    def die_after_the_claim(self, lease_left_ms: int = -1) -> str:
        """The invocation, claimed with ``lease_left_ms`` of its lease left (the default: run
        out, so it is stranded)."""
        app = self.app
        self.rest({"session_id": "dead", "input": {"message": "book"}})
        session = app.sessions.load("session_dead", turns=None)
        assert session is not None
        invocation = session.open_invocation
        assert invocation is not None
        session.input.tool(call_id="call_q", input={"answer": "Friday"})
        session.add_event(dormant.events.InvocationResume(invocation_id=invocation))
        session.head.lease = app.clock() + lease_left_ms
        assert app.sessions.policy.claim(session).status == "committed"
        return invocation

    def ends(self) -> list[str]:
        return [e.status for e in _ledger(self.app, "dead") if isinstance(e, InvocationEnd)]


def test_a_stranded_invocation_is_taken_over_by_the_next_request(store: Store) -> None:
    dead = _Stranding(store, "Booked for Friday.", "Hello again.")
    dead.die_after_the_claim()
    stranded = dead.app.sessions.get("dead")
    assert stranded is not None and stranded.head.stranded(dead.app.clock())

    done = dead.rest({"session_id": "dead",
                      "input": {"message": "hello?", "message_id": "m-2"}})

    # the message waits behind the stranded invocation, which this request takes over first
    # (the claimed tool runs, under its call id), then the inbox drains
    assert (done.status, done.drained) == ("queued", ["m-2"])
    assert dead.ran == ["call_q"]
    dead.model.assert_consumed()
    assert dead.ends() == ["completed", "completed"]
    session = dead.app.sessions.get("dead")
    assert session is not None and session.inbox == [] and session.status == "active"
    assert not session.head.running


def test_a_stranded_invocation_can_be_interrupted(store: Store) -> None:
    dead = _Stranding(store)
    invocation = dead.die_after_the_claim()

    done = dead.rest({"session_id": "dead", "input": {"interrupt": {"owner": invocation}}})

    assert done.status == "interrupted"
    assert dead.ends() == ["interrupted"]


def test_a_stop_that_finds_a_stranded_invocation_ends_it_in_the_same_request(
        store: Store) -> None:
    dead = _Stranding(store)
    invocation = dead.die_after_the_claim()

    done = dead.rest({"session_id": "dead", "input": {"stop": {"invocation_id": invocation}}})

    assert (done.status, done.commit_status) == ("stopped", "committed")
    assert dead.ends() == ["stopped"]


def test_a_live_claimed_invocation_is_not_interrupted(store: Store) -> None:
    live = _Stranding(store)
    invocation = live.die_after_the_claim(lease_left_ms=60_000)  # its claimer is within it

    done = live.rest({"session_id": "dead", "input": {"interrupt": {"owner": invocation}}})

    assert (done.status, done.code) == ("error", "session_running")
    assert live.ends() == []


def test_a_turn_whose_redelivery_was_queued_meanwhile_runs_it_once_from_the_inbox(
        store: Store) -> None:
    app = dormant.App(name="control", store=store)
    ran: list[str] = []
    work = app.tool(name="work", description="work", schema=Slow,
                    execute=lambda ctx: ran.append(ctx.call_id) or {"done": True})
    ask = app.tool(name="ask_guest", description="ask", schema=Question, yield_schema=Answer)

    class ByMessage:  # the reply depends on the last user message: one script for both turns
        def stream(self, request: Any, *, signal: Any) -> Iterator[Any]:
            from dormant.models._base import TextDelta, ToolCallChunk, ToolMessage, UserMessage
            last = next(m.text for m in reversed(request.messages)
                        if isinstance(m, UserMessage))
            if isinstance(request.messages[-1], ToolMessage):
                yield TextDelta("done")
            elif last.startswith("work"):
                yield ToolCallChunk(call_id="", name="work", args={"seconds": 0})
            else:
                yield ToolCallChunk(call_id="", name="ask_guest", args={"q": "?"})

    agent = app.agent(name="c", model=ByMessage(), tools=[work, ask])
    turn = app.handler.turn(agent=agent)
    first = turn({"session_id": "dup", "input": {"message": "work please", "message_id": "w"}})
    next(first)  # it read the session while it was idle, and runs
    assert turn({"session_id": "dup", "input": {"message": "ask me"}}).run().status \
        == "yielded_tool"
    redelivered = turn({"session_id": "dup", "input": {"message": "work please",
                                                       "message_id": "w"}}).run()
    assert redelivered.status == "queued"  # the session waits: the redelivery is queued

    result = first.run()

    # Its call's write-ahead found a newer message: its tool did not run, nothing landed,
    # and the redelivery waits in the inbox to run the message once the session is free.
    assert result.commit_status == "superseded" and not result.landed
    assert ran == []
    session = app.sessions.get("dup")
    assert session is not None and [q.id for q in session.inbox] == ["w"]
    (asked,) = session.yielded_tools
    answered = turn({"session_id": "dup", "input": {"tools": [
        {"call_id": asked.call_id, "input": {"answer": "yes"}}]}}).run()
    assert answered.status == "completed"
    session = app.sessions.get("dup")
    assert session is not None and session.inbox == []
    results = [e.call_id for e in session.events if isinstance(e, ToolResult)
               and e.name == "work"]
    assert ran == results == [ran[0]]  # the tool ran once and is recorded once
