"""The tool phase: the tool lane, concurrency without a shared cap, generator tools'
preliminary outputs, the triggering event, and what a stop leaves as a call's error."""

from __future__ import annotations

import threading
import time
from collections.abc import Generator, Iterator
from dataclasses import replace
from typing import Any, cast

import pytest
from pydantic import BaseModel

import dormant
from dormant._context import to_messages
from dormant._ids import now_ms
from dormant._request import TurnInput, open_turn
from dormant._run import run_turn
from dormant._run.state import RunState
from dormant._run.tools import Call, _context, run_tools
from dormant.agent import History
from dormant.errors import ConfigError, DormantError
from dormant.events import Event, ToolResult, UserEvent
from dormant.models import ScriptedModel
from dormant.models._base import ToolMessage
from dormant.session import Session, mint_session_id
from dormant.testing import get_tool_results, model, run_test, user

WAIT = 10.0  # seconds: a barrier or event that is not met by then fails the test, never hangs


class Ref(BaseModel):
    ref: str


@pytest.fixture()
def app() -> dormant.App:
    return dormant.App(name="tool-phase")


def laned(agent: dormant.Agent) -> dormant.Agent:
    return replace(agent, tool_lane="tools")


def two_calls(name: str) -> dict[str, Any]:
    """A model reply calling ``name`` twice (refs "first" and "second")."""
    return {"tool_calls": [{"name": name, "args": {"ref": "first"}},
                           {"name": name, "args": {"ref": "second"}}]}


def both(name: str) -> Any:
    return model(**two_calls(name))


def stream(agent: dormant.Agent, message: str = "go",
           signal: dormant.Signal | None = None) -> Iterator[Any]:
    """The turn's stream, event by event (a turn the stop fails ends the iteration)."""
    session = Session.new(mint_session_id())
    start = open_turn(agent, session, TurnInput(message=message), clock=now_ms)
    yield from session.new_events  # the opening, as a request's stream shows it first
    turn = run_turn(agent, session, start, signal=signal)
    try:
        yield from turn
    except DormantError:
        return


def tool_results(events: list[Any]) -> list[tuple[str, Any, str | None, bool]]:
    return [(e.name, e.result, e.error, e.preliminary) for e in events
            if isinstance(e, ToolResult)]


# --- the tool lane -------------------------------------------------------------------------------


class Overlap:
    """Counts the calls running at once; remembers the most there ever were, and the order
    the calls started and ended in."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0
        self.log: list[str] = []

    def tool(self, ctx: dormant.ToolContext) -> str:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.log.append(f"start {ctx.args.ref}")
        time.sleep(0.2)
        with self.lock:
            self.now -= 1
            self.log.append(f"end {ctx.args.ref}")
        return str(ctx.args.ref)


def test_on_the_tool_lane_tools_run_one_at_a_time_in_call_order(app: dormant.App) -> None:
    overlap = Overlap()
    tool = app.tool(name="work", description="d", schema=Ref, execute=overlap.tool)
    run = run_test(laned(app.agent(name="a", tools=[tool])), [
        user("go"), both("work"), model("done")])
    assert overlap.most == 1
    assert overlap.log == ["start first", "end first", "start second", "end second"]
    assert [r.result for r in get_tool_results(run.events)] == ["first", "second"]


def test_on_the_tool_lane_a_tool_sees_the_state_the_previous_one_wrote(app: dormant.App) -> None:
    def count(ctx: dormant.ToolContext) -> int:
        ctx.state["n"] = ctx.state.get("n", 0) + 1
        return int(ctx.state["n"])

    tool = app.tool(name="count", description="d", schema=Ref, execute=count)
    run = run_test(laned(app.agent(name="a", tools=[tool])), [
        user("go"), both("count"), model("done")])
    assert [r.result for r in get_tool_results(run.events)] == [1, 2]
    assert run.session.state == {"n": 2}


def test_without_a_lane_independent_tools_run_concurrently(app: dormant.App) -> None:
    overlap = Overlap()
    barrier = threading.Barrier(2, timeout=WAIT)

    def meet(ctx: dormant.ToolContext) -> str:
        barrier.wait()  # times out (a tool error) unless both calls run at once
        return overlap.tool(ctx)

    tool = app.tool(name="meet", description="d", schema=Ref, execute=meet)
    run = run_test(app.agent(name="a", tools=[tool]), [user("go"), both("meet"), model("ok")])
    assert [(r.result, r.error) for r in get_tool_results(run.events)] == [
        ("first", None), ("second", None)]
    assert overlap.most == 2


def test_tool_lane_is_validated(app: dormant.App) -> None:
    agent = app.agent(name="a")
    assert agent.tool_lane is None
    assert laned(agent).tool_lane == "tools"
    for bad in ("tool", "", 1, ["tools"]):
        with pytest.raises(ConfigError, match="tool_lane"):
            replace(agent, tool_lane=cast(Any, bad))
    with pytest.raises(ConfigError, match="tool_lane"):
        dormant.Agent(name="b", model=None, context=[History()], tools={}, tool_lane="lane")


def test_concurrent_turns_share_no_cap_on_running_tools(app: dormant.App) -> None:
    """10 turns at once, 2 calls each: all 20 calls must be running together to pass the
    barrier (a pool of 8 threads shared by every turn could never get there)."""
    turns = 10
    barrier = threading.Barrier(2 * turns, timeout=WAIT)

    def meet(ctx: dormant.ToolContext) -> str:
        barrier.wait()
        return str(ctx.args.ref)

    tool = app.tool(name="meet", description="d", schema=Ref, execute=meet)
    agent = app.agent(name="a", tools=[tool])
    outcomes: list[list[tuple[Any, str | None]]] = []
    failures: list[BaseException] = []

    def one_turn() -> None:
        try:
            scripted = ScriptedModel([two_calls("meet"), "ok"])
            result = app.run(replace(agent, model=scripted), message="go")
            outcomes.append([(r.result, r.error) for r in get_tool_results(result.session.events)])
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=one_turn, daemon=True) for _ in range(turns)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(3 * WAIT)
    assert not any(thread.is_alive() for thread in threads)
    assert failures == []
    assert outcomes == [[("first", None), ("second", None)]] * turns


def test_the_tool_threads_of_a_step_end_with_the_step(app: dormant.App) -> None:
    tool = app.tool(name="echo", description="d", schema=Ref, execute=lambda ctx: ctx.args.ref)
    before = threading.active_count()
    run_test(app.agent(name="a", tools=[tool]), [user("go"), both("echo"), model("ok")])
    assert threading.active_count() == before


# --- generator tools -----------------------------------------------------------------------------


def test_a_generator_tool_emits_preliminary_results_in_order_then_its_result(
        app: dormant.App) -> None:
    @app.tool
    def progress(steps: int) -> Generator[dict[str, int], None, dict[str, int]]:
        """Count up, reporting each step."""
        for done in range(1, steps + 1):
            yield {"done": done}
        return {"total": steps}

    assert progress.parameters()["required"] == ["steps"]
    run = run_test(app.agent(name="a", tools=[progress]), [
        user("go"),
        model(tool_calls=[{"name": "progress", "args": {"steps": 3}}]),
        model("All three done."),
    ])
    assert tool_results(run.events) == [
        ("progress", {"done": 1}, None, True),
        ("progress", {"done": 2}, None, True),
        ("progress", {"done": 3}, None, True),
        ("progress", {"total": 3}, None, False),
    ]
    assert run.status == "completed"
    # The model reads the call's result once: the final one, not the progress.
    tool_messages = [m for m in run.model.requests[1].messages if isinstance(m, ToolMessage)]
    assert [m.content for m in tool_messages] == ['{"total": 3}']


def test_explicit_generator_execute_and_generator_annotations(app: dormant.App) -> None:
    def execute(ctx: dormant.ToolContext) -> Generator[str, None, str]:
        yield f"looking up {ctx.args.ref}"
        return f"found {ctx.args.ref}"

    explicit = app.tool(name="lookup", description="d", schema=Ref, execute=execute)

    @app.tool
    def typed(ref: str, ctx: dormant.ToolContext) -> Generator[str, None, str]:
        yield ctx.call_id
        return ref

    assert typed.parameters()["required"] == ["ref"]
    run = run_test(app.agent(name="a", tools=[explicit, typed]), [
        user("go"),
        model(tool_calls=[{"name": "lookup", "args": {"ref": "B-1"}},
                          {"name": "typed", "args": {"ref": "x"}, "id": "call_t"}]),
        model("ok"),
    ])
    results = tool_results(run.events)
    assert [r for r in results if r[0] == "lookup"] == [
        ("lookup", "looking up B-1", None, True), ("lookup", "found B-1", None, False)]
    assert [r for r in results if r[0] == "typed"] == [
        ("typed", "call_t", None, True), ("typed", "x", None, False)]
    # Final results land in call order, after every preliminary output.
    assert [r[1] for r in results if not r[3]] == ["found B-1", "x"]


def test_a_return_annotation_imported_for_type_checking_only_does_not_break_inference() -> None:
    namespace: dict[str, Any] = {}
    exec(  # a module whose Iterator exists for the type checker only
        "from __future__ import annotations\n"
        "def progress(n: int) -> Iterator[dict]:\n"
        "    yield {'n': n}\n", namespace)
    tool = dormant.App(name="x").tool(namespace["progress"])
    assert tool.parameters()["required"] == ["n"]


def test_prepare_or_finalize_cannot_be_generators(app: dormant.App) -> None:
    def gen(ctx: dormant.ToolContext) -> Iterator[int]:
        yield 1

    with pytest.raises(ConfigError, match="prepare cannot be a generator"):
        app.tool(name="t", schema=Ref, execute=lambda ctx: 1, prepare=gen)
    with pytest.raises(ConfigError, match="finalize cannot be a generator"):
        app.tool(name="t", schema=Ref, execute=lambda ctx: 1, finalize=gen)


def test_preliminary_results_are_not_in_the_models_messages() -> None:
    events: list[Event] = [
        UserEvent(text="go", message_id="m1"),
        ToolResult(call_id="c1", name="t", result={"p": 1}, preliminary=True),
        ToolResult(call_id="c1", name="t", result={"final": 1}),
    ]
    messages = to_messages(events)
    assert [type(m).__name__ for m in messages] == ["UserMessage", "ToolMessage"]
    assert messages[1].content == '{"final": 1}'  # type: ignore[union-attr]


def test_preliminary_outputs_are_emitted_while_the_tool_runs(app: dormant.App) -> None:
    """Each call waits until the turn's stream has delivered its first output: with two
    concurrent calls, the turn's thread must drain their outputs while they run."""
    delivered = {"first": threading.Event(), "second": threading.Event()}

    def report(ctx: dormant.ToolContext) -> Generator[str, None, str]:
        yield f"{ctx.args.ref} started"
        if not delivered[ctx.args.ref].wait(WAIT):
            raise RuntimeError("the first output was not delivered while the tool ran")
        return f"{ctx.args.ref} done"

    tool = app.tool(name="report", description="d", schema=Ref, execute=report)
    for agent in (app.agent(name="a", tools=[tool]), laned(app.agent(name="b", tools=[tool]))):
        for flag in delivered.values():
            flag.clear()
        scripted = ScriptedModel([two_calls("report"), "ok"])
        seen: list[Any] = []
        for event in stream(replace(agent, model=scripted)):
            if isinstance(event, ToolResult):
                seen.append(event)
                if event.preliminary:
                    delivered[event.result.split()[0]].set()
        finals = [(e.result, e.error) for e in seen if not e.preliminary]
        assert finals == [("first done", None), ("second done", None)]
        assert sorted(e.result for e in seen if e.preliminary) == [
            "first started", "second started"]


# --- the triggering event ------------------------------------------------------------------------


def test_the_tool_context_carries_the_turns_trigger(app: dormant.App) -> None:
    agent = app.agent(name="a")
    run = RunState(agent, Session.new(mint_session_id()), (), (), dormant.Signal(), lambda: 0)
    call = Call(call_id="c1", name="t", args={})
    assert _context(run, call, {}, None).event is None
    trigger = UserEvent(text="hi", message_id="m1")
    run.trigger = trigger
    ctx = _context(run, call, {}, None)
    assert ctx.event is trigger
    assert ctx.attempt == 1


def test_a_tool_sees_the_user_message_that_triggered_the_turn(app: dormant.App) -> None:
    seen: list[Any] = []
    tool = app.tool(name="see", description="d", schema=Ref,
                    execute=lambda ctx: seen.append(ctx.event))
    run_test(app.agent(name="a", tools=[tool]), [
        user("look", id="msg_look"),
        model(tool_calls=[{"name": "see", "args": {"ref": "x"}}]), model("ok")])
    assert [(type(e).__name__, e.text, e.message_id) for e in seen] == [
        ("UserEvent", "look", "msg_look")]


# --- a stop --------------------------------------------------------------------------------------


def test_a_stopped_call_says_stopped_and_later_calls_do_not_start(app: dormant.App) -> None:
    started: list[str] = []

    def halt(ctx: dormant.ToolContext) -> str:
        started.append(ctx.args.ref)
        ctx.signal.stop()
        ctx.signal.raise_if_aborted()
        return "not reached"

    tool = app.tool(name="halt", description="d", schema=Ref, execute=halt)
    agent = laned(app.agent(name="a", tools=[tool], model=ScriptedModel([two_calls("halt")])))
    events = list(stream(agent, signal=dormant.Signal()))
    assert tool_results(events) == [("halt", None, "stopped", False),
                                    ("halt", None, "stopped", False)]
    assert started == ["first"]


def test_an_abort_that_is_not_a_stop_keeps_the_aborted_text(app: dormant.App) -> None:
    started: list[str] = []

    def halt(ctx: dormant.ToolContext) -> str:
        started.append(ctx.args.ref)
        ctx.signal.abort()
        ctx.signal.raise_if_aborted()
        return "not reached"

    tool = app.tool(name="halt", description="d", schema=Ref, execute=halt)
    agent = laned(app.agent(name="a", tools=[tool], model=ScriptedModel([two_calls("halt")])))
    events = list(stream(agent, signal=dormant.Signal()))
    aborted = "halt was aborted before it finished"
    assert tool_results(events) == [("halt", None, aborted, False),
                                    ("halt", None, aborted, False)]
    assert started == ["first"]


def test_a_stop_between_outputs_cuts_a_generator_tool(app: dormant.App) -> None:
    closed: list[bool] = []

    def ticker(ctx: dormant.ToolContext) -> Generator[int, None, int]:
        try:
            yield 1
            ctx.signal.stop()
            yield 2
            yield 3  # not reached: the stop cuts the call after the output it produced
        finally:
            closed.append(True)
        return 0

    tool = app.tool(name="ticker", description="d", schema=Ref, execute=ticker)
    agent = app.agent(name="a", tools=[tool], model=ScriptedModel([
        {"tool_calls": [{"name": "ticker", "args": {"ref": "x"}}]}]))
    events = list(stream(agent, signal=dormant.Signal()))
    assert tool_results(events) == [("ticker", 1, None, True), ("ticker", 2, None, True),
                                    ("ticker", None, "stopped", False)]
    assert closed == [True]


@pytest.mark.parametrize("lane", [None, "tools"])
@pytest.mark.parametrize(("halt", "error"), [
    ("stop", "stopped"), ("abort", "job was aborted before it finished")])
def test_calls_the_signal_reached_before_they_started_do_not_start(
        app: dormant.App, lane: str | None, halt: str, error: str) -> None:
    started: list[str] = []
    tool = app.tool(name="job", description="d", schema=Ref,
                    execute=lambda ctx: started.append(ctx.args.ref))
    agent = replace(app.agent(name="a", tools=[tool]), tool_lane=lane)
    signal = dormant.Signal()
    getattr(signal, halt)()
    run = RunState(agent, Session.new(mint_session_id()), (), (), signal, lambda: 0)
    calls = [Call(call_id=f"c{i}", name="job", args={"ref": ref})
             for i, ref in enumerate(["first", "second"])]
    events = list(run_tools(run, calls))
    assert tool_results(events) == [("job", None, error, False), ("job", None, error, False)]
    assert started == []
    assert not any(call.ran for call in calls)
