"""The test kit drives what goes wrong (SPEC §3): a failing model call, a lost race, an input
delivered twice, a retry — and turn control: stop, steer, pause and resume, the inbox,
interrupts, input requests and timers — in process and through the REST handler, on any
store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant.events import InvocationEnd, StopRequested, UserEvent
from dormant.models import UserMessage
from dormant.stores import MemoryStore, SqliteStore, Store
from dormant.testing import (
    ScriptError,
    approval,
    conflict,
    crash,
    get_tool_results,
    interrupt,
    message,
    model,
    model_error,
    pause,
    redeliver,
    respond,
    resume,
    retry,
    run_test,
    steer,
    stop,
    timer,
    tool_input,
    user,
)

THROUGH = ["run", "handlers"]


class Ref(BaseModel):
    ref: str


class Night(BaseModel):
    answer: str


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
    else:
        sqlite = SqliteStore(tmp_path / "kit.db")
        yield sqlite
        sqlite.close()


@pytest.fixture()
def ran() -> list[str]:
    return []


@pytest.fixture()
def agent(ran: list[str]) -> dormant.Agent:
    app = dormant.App(name="kit")

    def lookup(ctx: dormant.ToolContext) -> dict[str, Any]:
        ran.append(ctx.call_id)
        return {"ref": ctx.args.ref, "nights": 3}

    def book(ctx: dormant.ToolContext) -> str:
        ran.append(ctx.call_id)
        return f"booked {ctx.input.answer}"

    stay = app.tool(name="lookup_stay", description="d", schema=Ref, execute=lookup)
    ask = app.tool(name="ask_guest", description="d", schema=Ref, yield_schema=Night,
                   execute=book)
    return app.agent(name="concierge", tools=[stay, ask])


LOOKUP = {"name": "lookup_stay", "args": {"ref": "BK-1"}}
ASK = {"name": "ask_guest", "args": {"ref": "night"}}


@pytest.mark.parametrize("through", THROUGH)
def test_a_model_error_after_a_tool_ran_keeps_it_and_retry_finishes_without_rerunning_it(
        agent: dormant.Agent, store: Store, ran: list[str], through: Any) -> None:
    run = run_test(agent, [
        user("how long is my stay?"),
        model(tool_calls=[LOOKUP]),
        model_error("provider down"),
        retry("r-1"),
        model("Three nights."),
    ], store=store, through=through)

    failed, retried = run.results
    assert retried is run.result
    assert failed.status == "error" and failed.code == "model_error"
    assert run.status == "completed" and run.result.output.text == "Three nights."
    assert len(ran) == 1
    assert [r.call_id for r in get_tool_results(run.events)] == ran
    assert [e.type for e in run.events] == [
        "invocation_start", "user", "tool_call", "tool_result", "invocation_failed", "retry",
        "assistant", "invocation_end"]


@pytest.mark.parametrize("through", THROUGH)
def test_a_model_error_before_any_tool_ran_writes_nothing(
        agent: dormant.Agent, store: Store, through: Any) -> None:
    run = run_test(agent, [user("hi"), model_error("provider down", retryable=False)],
                   store=store, through=through)
    assert run.status == "error" and run.result.code == "model_error"
    assert run.events == [] and run.session.version == 0


@pytest.mark.parametrize("through", THROUGH)
def test_a_redelivered_message_lands_once(agent: dormant.Agent, store: Store,
                                          through: Any) -> None:
    run = run_test(agent, [user("hi", id="m-1"), model("hello"), redeliver()],
                   store=store, through=through)
    first, again = run.results
    assert first.status == "completed"
    assert again.status == "error" and again.code == "duplicate_message"
    assert [e.type for e in run.events].count("user") == 1


@pytest.mark.parametrize("through", THROUGH)
def test_a_message_without_an_id_is_redelivered_with_the_id_it_got(
        agent: dormant.Agent, store: Store, through: Any) -> None:
    run = run_test(agent, [user("hi"), model("hello"), redeliver()], store=store,
                   through=through)
    assert run.result.code == "duplicate_message"
    assert run.session.version == 1


@pytest.mark.parametrize("through", THROUGH)
def test_a_redelivered_answer_runs_nothing_twice(agent: dormant.Agent, store: Store,
                                                 ran: list[str], through: Any) -> None:
    run = run_test(agent, [
        user("book me in"), model(tool_calls=[ASK]),
        tool_input({"ask_guest": {"answer": "Friday"}}), model("Booked for Friday."),
        redeliver(),
    ], store=store, through=through)
    assert [r.status for r in run.results] == ["yielded_tool", "completed", "error"]
    assert run.result.code == "already_answered"
    assert len(ran) == 1


@pytest.mark.parametrize("through", THROUGH)
def test_a_redelivered_retry_lands_once(agent: dormant.Agent, store: Store, ran: list[str],
                                        through: Any) -> None:
    run = run_test(agent, [
        user("how long?"), model(tool_calls=[LOOKUP]), model_error(),
        retry("r-1"), model("Three nights."), redeliver(),
    ], store=store, through=through)
    assert run.result.status == "error" and run.result.code == "duplicate_retry"
    assert [e.type for e in run.events].count("retry") == 1 and len(ran) == 1


@pytest.mark.parametrize("through", THROUGH)
def test_a_conflict_makes_the_commit_merge_onto_the_newer_head(
        agent: dormant.Agent, store: Store, through: Any) -> None:
    run = run_test(agent, [user("one"), model("first"), conflict(), user("two"),
                           model("second")], store=store, through=through)
    assert run.status == "completed"
    # The other writer's commit moved the version: the turn landed one past it.
    assert run.session.version == 3
    assert [e.text for e in run.events if e.type == "user"] == ["one", "two"]
    if through == "handlers":
        assert run.result.commit_status == "merged"


def test_an_unreached_model_error_fails_the_script(agent: dormant.Agent) -> None:
    with pytest.raises(ScriptError, match="model_error"):
        run_test(agent, [user("hi"), model("hello"), model_error()])


def test_an_unknown_through_is_refused(agent: dormant.Agent) -> None:
    with pytest.raises(ValueError, match="through"):
        run_test(agent, [user("hi"), model("hello")], through="rest")  # type: ignore[arg-type]


# --- turn control --------------------------------------------------------------------------------


def _types(run: Any) -> list[str]:
    return [e.type for e in run.events]


def _ends(run: Any) -> list[str]:
    return [e.status for e in run.events if isinstance(e, InvocationEnd)]


@pytest.mark.parametrize("through", THROUGH)
def test_a_stop_while_the_reply_streams_keeps_the_pieces_the_client_saw(
        agent: dormant.Agent, store: Store, through: Any) -> None:
    run = run_test(agent, [
        user("tell me a story"),
        stop(after=3, seen=2),
        model("Once upon a time there was a guest."),
    ], store=store, through=through)

    assert run.status == "stopped"
    assert [c.status for c in run.controls] == ["accepted"]
    assert _types(run)[-2:] == ["stop_requested", "invocation_end"]
    assert _ends(run) == ["stopped"]
    assert [e.text for e in run.events if e.type == "assistant"] == ["Once upon "]
    [stopped] = [e for e in run.events if isinstance(e, StopRequested)]
    assert stopped.rev >= 1  # it came through the session's control record
    assert run.session.status == "active" and run.session.open_invocation is None


@pytest.mark.parametrize("through", THROUGH)
def test_a_stop_without_seen_keeps_everything_streamed_and_runs_no_tool(
        agent: dormant.Agent, ran: list[str], through: Any) -> None:
    run = run_test(agent, [
        user("how long is my stay?"),
        stop(after=2),
        model("Looking it up now.", tool_calls=[LOOKUP]),
    ], through=through)

    assert run.status == "stopped"
    assert [e.text for e in run.events if e.type == "assistant"] == ["Looking it "]
    assert ran == [] and "tool_call" not in _types(run)  # the call never finished streaming


@pytest.mark.parametrize("through", THROUGH)
def test_a_stop_before_the_first_piece_keeps_no_text(agent: dormant.Agent,
                                                     through: Any) -> None:
    run = run_test(agent, [user("hi"), stop(), model("hello there")], through=through)
    assert run.status == "stopped"
    assert _types(run) == ["invocation_start", "user", "stop_requested", "invocation_end"]


@pytest.mark.parametrize("through", THROUGH)
def test_a_steer_joins_the_running_invocation_at_the_next_step_boundary(
        agent: dormant.Agent, store: Store, through: Any) -> None:
    run = run_test(agent, [
        user("how long is my stay?"),
        steer("only the nights, please", after=1, id="s-1"),
        model("Let me check that."),
        model("Three nights."),
    ], store=store, through=through)

    assert run.status == "completed" and run.result.output.text == "Three nights."
    assert [c.status for c in run.controls] == ["accepted"]
    assert _types(run) == ["invocation_start", "user", "assistant", "steer", "user",
                           "assistant", "invocation_end"]
    users = [e for e in run.events if isinstance(e, UserEvent)]
    assert [(u.text, u.steer, u.message_id) for u in users] == [
        ("how long is my stay?", False, users[0].message_id),
        ("only the nights, please", True, "s-1")]
    assert users[1].invocation_id == users[0].invocation_id
    first, second = run.model.requests
    assert "only the nights, please" not in [m.text for m in first.messages
                                             if isinstance(m, UserMessage)]
    assert [m.text for m in second.messages if isinstance(m, UserMessage)][-1] == (
        "only the nights, please")


@pytest.mark.parametrize("through", THROUGH)
def test_a_steer_during_a_tool_step_joins_after_the_tools(
        agent: dormant.Agent, ran: list[str], through: Any) -> None:
    run = run_test(agent, [
        user("how long is my stay?"),
        steer("and say it in French"),
        model(tool_calls=[LOOKUP]),
        model("Trois nuits."),
    ], through=through)

    assert run.result.output.text == "Trois nuits." and len(ran) == 1
    assert _types(run) == ["invocation_start", "user", "tool_call", "tool_result", "steer",
                           "user", "assistant", "invocation_end"]


@pytest.mark.parametrize("through", THROUGH)
def test_a_pause_while_the_reply_streams_stops_at_the_boundary_and_resume_continues(
        agent: dormant.Agent, store: Store, ran: list[str], through: Any) -> None:
    paused = run_test(agent, [
        user("how long is my stay?"), pause(after=0), model(tool_calls=[LOOKUP]),
    ], store=store, through=through, session_id="paused")

    assert paused.status == "paused" and len(ran) == 1  # the step's tool finished first
    assert paused.session.status == "paused" and _types(paused)[-1] == "pause"
    assert paused.session.open_invocation is not None

    resumed = run_test(agent, [
        user("how long is my stay?"), pause(after=0), model(tool_calls=[LOOKUP]),
        resume(), model("Three nights."),
    ], through=through)

    assert [r.status for r in resumed.results] == ["paused", "completed"]
    assert resumed.result.output.text == "Three nights." and len(ran) == 2
    assert _types(resumed) == ["invocation_start", "user", "tool_call", "tool_result",
                               "pause", "resume", "assistant", "invocation_end"]
    assert len({e.invocation_id for e in resumed.events if e.invocation_id}) == 1
    assert resumed.session.status == "active"


@pytest.mark.parametrize("through", THROUGH)
def test_a_pause_between_steps_queues_messages_until_resume(agent: dormant.Agent,
                                                             through: Any) -> None:
    run = run_test(agent, [
        user("hi"), model("hello"),
        pause(),
        message("are you there?", id="m-2"),
        resume(),
        model("Still here."),
    ], through=through)

    assert [r.status for r in run.results] == ["completed", "paused", "queued", "completed"]
    assert run.results[2].queued.id == "m-2"
    assert run.result.output.text == "Still here."
    assert _types(run)[4:] == ["pause", "queued", "resume", "invocation_start", "user",
                               "assistant", "invocation_end"]
    assert run.session.status == "active" and run.session.inbox == []


@pytest.mark.parametrize("through", THROUGH)
def test_a_message_while_waiting_lands_in_the_inbox(agent: dormant.Agent, store: Store,
                                                    through: Any) -> None:
    run = run_test(agent, [
        user("book me in"), model(tool_calls=[ASK]),
        message("late checkout too?", id="m-2"),
    ], store=store, through=through)

    assert [r.status for r in run.results] == ["yielded_tool", "queued"]
    assert [(q.id, q.text) for q in run.session.inbox] == [("m-2", "late checkout too?")]
    assert run.session.status == "awaiting_input"


@pytest.mark.parametrize("through", THROUGH)
def test_the_inbox_drains_after_the_answer_frees_the_session(
        agent: dormant.Agent, store: Store, through: Any) -> None:
    run = run_test(agent, [
        user("book me in"), model(tool_calls=[ASK]),
        message("late checkout too?", id="m-2"),
        tool_input({"ask_guest": {"answer": "Friday"}}),
        model("Booked for Friday."),
        model("Late checkout is fine."),  # the queued message's turn
    ], store=store, through=through)

    assert [r.status for r in run.results] == ["yielded_tool", "queued", "completed"]
    assert run.result.output.text == "Booked for Friday."
    assert run.session.inbox == [] and run.session.status == "active"
    assert [e.text for e in run.events if e.type == "assistant"] == [
        "Booked for Friday.", "Late checkout is fine."]
    dequeued = [e for e in run.events if isinstance(e, UserEvent) and e.queued]
    assert [(e.message_id, e.text) for e in dequeued] == [("m-2", "late checkout too?")]
    if through == "handlers":
        assert run.result.drained == ["m-2"]


@pytest.mark.parametrize("through", THROUGH)
def test_a_message_that_must_not_wait_is_refused(agent: dormant.Agent, through: Any) -> None:
    run = run_test(agent, [
        user("book me in"), model(tool_calls=[ASK]),
        message("now or never", if_busy="reject"),
    ], through=through)

    assert run.status == "error" and run.result.code == "awaiting_input"
    assert run.session.inbox == [] and run.session.version == 1


@pytest.mark.parametrize("through", THROUGH)
def test_interrupt_ends_what_the_session_waits_on(agent: dormant.Agent,
                                                  through: Any) -> None:
    run = run_test(agent, [user("book me in"), model(tool_calls=[ASK]), interrupt()],
                   through=through)

    assert run.status == "interrupted"
    assert _types(run)[-3:] == ["interrupt", "tool_result", "invocation_end"]
    assert [r.error for r in get_tool_results(run.events)] == ["interrupted"]
    assert _ends(run) == ["interrupted"] and run.session.status == "active"


@pytest.mark.parametrize("through", THROUGH)
def test_interrupt_then_the_inbox_runs(agent: dormant.Agent, through: Any) -> None:
    run = run_test(agent, [
        user("book me in"), model(tool_calls=[ASK]),
        message("never mind, just say hi"),
        interrupt(),
        model("Hi!"),
    ], through=through)

    assert [r.status for r in run.results] == ["yielded_tool", "queued", "completed"]
    assert run.result.output.text == "Hi!"
    assert _ends(run) == ["interrupted", "completed"]


@pytest.mark.parametrize("through", THROUGH)
def test_interrupt_a_failed_invocation_by_default_and_a_wrong_owner_is_refused(
        agent: dormant.Agent, through: Any) -> None:
    run = run_test(agent, [
        user("how long?"), model(tool_calls=[LOOKUP]), model_error("provider down"),
        interrupt("call_nobody"),
        interrupt(),
    ], through=through)

    failed, wrong, ended = run.results
    assert failed.status == "error" and wrong.code == "not_pending"
    assert ended.status == "interrupted" and _ends(run) == ["interrupted"]
    assert run.session.status == "active"


def test_interrupt_with_nothing_waited_on_is_a_script_error(agent: dormant.Agent) -> None:
    with pytest.raises(ScriptError, match="waits on nothing"):
        run_test(agent, [user("hi"), model("hello"), interrupt()])


@pytest.mark.parametrize("through", THROUGH)
def test_respond_answers_an_input_request_then_the_inbox_drains(
        agent: dormant.Agent, store: Store, through: Any) -> None:
    app = dormant.App(name="form", store=store)
    session = app.sessions.create("form")
    session.request_input("budget", {"type": "object", "properties": {
        "amount": {"type": "integer", "minimum": 1}}, "required": ["amount"]}, "Your budget?")
    app.sessions.commit(session)

    run = run_test(agent, [
        message("hi", id="m-1"),
        respond("budget", {"amount": 0}),
        respond("budget", {"amount": 300}),
        model("Thanks, 300 it is."),
    ], store=store, session_id="form", through=through)

    queued, invalid, answered = run.results
    assert queued.status == "queued"
    assert (invalid.status, invalid.code) == ("error", "invalid_input")
    assert answered.status == "completed" and answered.output.text == "Thanks, 300 it is."
    assert run.session.pending_inputs == [] and run.session.inbox == []
    assert run.session.input_values == {"budget": {"amount": 300}}


class Nudge(BaseModel):
    minutes: int


@pytest.fixture()
def reminder() -> dormant.Agent:
    app = dormant.App(name="kit")

    def remind(ctx: dormant.ToolContext) -> str:
        ctx.session.schedule("nudge", delay=f"{ctx.args.minutes}m", message="Time to check out")
        return "scheduled"

    return app.agent(name="reminder", tools=[
        app.tool(name="remind", description="d", schema=Nudge, execute=remind)])


REMIND = {"name": "remind", "args": {"minutes": 30}}


@pytest.mark.parametrize("through", THROUGH)
def test_a_timer_fires_now_and_its_message_runs_once(reminder: dormant.Agent,
                                                     through: Any) -> None:
    run = run_test(reminder, [
        user("remind me in 30 minutes"), model(tool_calls=[REMIND]), model("Will do."),
        timer("nudge"), model("Reminder: time to check out."),
        redeliver(),
    ], through=through)

    set_up, fired, again = run.results
    assert set_up.status == "completed"
    assert fired.status == "completed" and fired.output.text == "Reminder: time to check out."
    assert again.status == "error" and again.code == "stale_timer"
    assert "timer_fired" in _types(run) and run.session.timers == []
    assert [e.text for e in run.events if e.type == "user"] == [
        "remind me in 30 minutes", "Time to check out"]


def test_a_timer_that_is_not_pending_names_what_is(reminder: dormant.Agent) -> None:
    with pytest.raises(ScriptError, match=r"'later'.*pending: nudge"):
        run_test(reminder, [user("remind me"), model(tool_calls=[REMIND]), model("Will do."),
                            timer("later")])


@pytest.mark.parametrize(("steps", "match"), [
    ([user("hi"), model("hello"), stop()], "needs a model"),
    ([user("hi"), stop(after=5), model("two words")], "only 2 pieces"),
    ([user("hi"), steer("x"), model_error(), model("ok")], "model_error"),
])
def test_a_control_that_cannot_act_is_a_script_error(agent: dormant.Agent, steps: list[Any],
                                                     match: str) -> None:
    with pytest.raises(ScriptError, match=match):
        run_test(agent, steps)


def test_a_stop_cannot_have_seen_more_than_was_streamed() -> None:
    with pytest.raises(ScriptError, match="seen"):
        stop(after=1, seen=2)


# --- crash(): a process that dies between its claim and its commit --------------------------------


@pytest.fixture()
def guarded(ran: list[str]) -> dormant.Agent:
    """``lookup_stay`` waits for a human's approval before it runs."""
    app = dormant.App(name="kit")

    def lookup(ctx: dormant.ToolContext) -> dict[str, Any]:
        ran.append(ctx.call_id)  # the call id: the side effect's idempotency key
        return {"ref": ctx.args.ref, "nights": 3}

    stay = app.tool(name="lookup_stay", description="d", schema=Ref, execute=lookup)
    return app.agent(name="concierge", tools=[stay],
                     tool_approval={"lookup_stay": "user-approval"})


@pytest.mark.parametrize("through", THROUGH)
def test_a_crash_after_an_approval_claim_is_taken_over_by_the_next_request(
        guarded: dormant.Agent, store: Store, ran: list[str], through: Any) -> None:
    run = run_test(guarded, [
        user("how long is my stay?", id="m-1"), model(tool_calls=[LOOKUP]),
        crash(),
        approval({"lookup_stay": True}),        # claimed; the tool runs; the process dies
        message("and breakfast?", id="m-2"),    # queued: the takeover and the drain run here
        model("Three nights."),                 # the taken-over step's reply
        model("Breakfast is at eight."),        # the queued message's turn
    ], store=store, through=through)

    waiting, died, queued = run.results
    assert waiting.status == "yielded_tool"
    assert (died.status, died.code) == ("error", "crashed")
    assert "claim committed" in died.error and "stranded" in died.error
    assert queued.status == "queued" and run.result is queued
    # The approved tool ran before the crash and again in the takeover, under one call id;
    # its result is in the ledger once.
    (call,) = [e for e in run.events if e.type == "tool_call"]
    assert ran == [call.call_id, call.call_id]
    assert [r.call_id for r in get_tool_results(run.events)] == [call.call_id]
    # The taken-over invocation ends once, then the inbox's message runs.
    ends = [(e.invocation_id, e.status) for e in run.events if isinstance(e, InvocationEnd)]
    assert ends[0] == (call.invocation_id, "completed") and len(ends) == 2
    assert [e.invocation_id for e in run.events if e.type == "invocation_start"] == [
        call.invocation_id, ends[1][0]]
    assert _types(run) == [
        "invocation_start", "user", "tool_call", "approval_requested", "invocation_yield",
        "approval_decided", "invocation_resume",       # the dead request's claim
        "queued",                                       # the next request's message
        "tool_result", "assistant", "invocation_end",   # the takeover
        "invocation_start", "user", "assistant", "invocation_end"]  # the drain
    dequeued = [e for e in run.events if isinstance(e, UserEvent) and e.queued]
    assert [(e.message_id, e.text) for e in dequeued] == [("m-2", "and breakfast?")]
    assert [e.text for e in run.events if e.type == "assistant"] == [
        "Three nights.", "Breakfast is at eight."]
    assert run.session.inbox == [] and run.session.status == "active"
    assert run.session.open_invocation is None
    if through == "handlers":
        assert run.result.drained == ["m-2"]


@pytest.mark.parametrize("through", THROUGH)
def test_a_takeover_that_crashes_too_is_taken_over_again(
        guarded: dormant.Agent, store: Store, ran: list[str], through: Any) -> None:
    run = run_test(guarded, [
        user("how long is my stay?"), model(tool_calls=[LOOKUP]),
        crash(), approval({"lookup_stay": True}),
        crash(), message("hello?", id="m-2"),   # queued; its takeover dies at the model call
        message("anyone?", id="m-3"),           # queued; this one's takeover finishes
        model("Three nights."), model("Hello!"), model("Still here."),
    ], store=store, through=through)

    assert [(r.status, getattr(r, "code", None)) for r in run.results] == [
        ("yielded_tool", None), ("error", "crashed"), ("error", "crashed"), ("queued", None)]
    (call,) = [e for e in run.events if e.type == "tool_call"]
    assert ran == [call.call_id] * 3
    assert len(get_tool_results(run.events)) == 1
    assert _ends(run) == ["completed"] * 3
    assert [e.message_id for e in run.events if isinstance(e, UserEvent) and e.queued] == [
        "m-2", "m-3"]
    assert run.session.inbox == [] and run.session.open_invocation is None


@pytest.mark.parametrize("through", THROUGH)
def test_a_crash_before_any_claim_writes_nothing_and_the_message_can_be_resent(
        agent: dormant.Agent, store: Store, ran: list[str], through: Any) -> None:
    run = run_test(agent, [
        crash(), user("how long is my stay?", id="m-1"),  # a fresh turn: no claim
        redeliver(), model(tool_calls=[LOOKUP]), model("Three nights."),
    ], store=store, through=through)

    died, done = run.results
    assert (died.status, died.code) == ("error", "crashed")
    assert "before writing anything" in died.error
    assert done.status == "completed" and len(ran) == 1
    assert [e.message_id for e in run.events if isinstance(e, UserEvent)] == ["m-1"]
    assert _ends(run) == ["completed"]


@pytest.mark.parametrize("through", THROUGH)
def test_a_crash_after_a_retry_claim_reruns_the_failed_model_call_once(
        agent: dormant.Agent, ran: list[str], through: Any) -> None:
    run = run_test(agent, [
        user("how long?"), model(tool_calls=[LOOKUP]), model_error("provider down"),
        crash(), retry("r-1"),
        message("hello?", id="m-2"), model("Three nights."), model("Hi."),
    ], through=through)

    assert [r.status for r in run.results] == ["error", "error", "queued"]
    assert run.results[1].code == "crashed"
    assert len(ran) == 1  # the finished tool is not run again: only the model call is
    assert _types(run).count("retry") == 1 and _ends(run) == ["completed", "completed"]
    assert run.session.inbox == []


def test_a_crash_before_a_step_that_calls_no_model_is_a_script_error(
        agent: dormant.Agent) -> None:
    with pytest.raises(ScriptError, match=r"crash\(\).*called no model"):
        run_test(agent, [user("hi"), model("hello"), crash(), pause()])
