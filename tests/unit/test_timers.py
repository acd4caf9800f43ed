"""SPEC §7 / seed 003: timers a turn asks for, set only if it commits, delivered once."""

from __future__ import annotations

import itertools
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant.models import ScriptedModel
from dormant.schedulers import RecordingScheduler, TimerDelivery, is_lease_timer, parse_delay


class Reminder(BaseModel):
    delay_seconds: int
    reminder: str


class Answer(BaseModel):
    answer: str


def set_reminder(ctx: dormant.ToolContext) -> dict[str, Any]:
    hctx = dormant.handler_context()  # as the seed does: the running tool's context
    hctx.session.schedule(f"reminder:{ctx.call_id}", delay=f"{ctx.args.delay_seconds}s",
                          message=f"Reminder: {ctx.args.reminder}")
    return {"scheduled": True, "delaySeconds": ctx.args.delay_seconds}


REMIND = {"name": "set_reminder", "args": {"delay_seconds": 90, "reminder": "call Ana"},
          "id": "call_r1"}


def _timers(scheduler: RecordingScheduler) -> list[TimerDelivery]:
    """The timers turns asked for: not the lease's wake-up a turn that ran a tool arms (it
    takes the turn over if its process dies before the turn ends)."""
    return [t for t in scheduler.timers.values() if not is_lease_timer(t.name)]


def _calls(scheduler: RecordingScheduler) -> list[str]:
    return [call[0] for call in scheduler.calls if not is_lease_timer(call[2])]


@pytest.fixture()
def scheduler() -> RecordingScheduler:
    return RecordingScheduler()


@pytest.fixture()
def app(scheduler: RecordingScheduler) -> dormant.App:
    return dormant.App(name="timers", scheduler=scheduler)


def _agent(app: dormant.App, replies: list[Any], **extra: Any) -> dormant.Agent:
    tool = app.tool(name="set_reminder", description="Set a reminder", schema=Reminder,
                    execute=set_reminder)
    return app.agent(name="assistant", tools=[tool], model=ScriptedModel(replies), **extra)


def test_a_committed_turn_hands_its_timer_to_the_scheduler(
        app: dormant.App, scheduler: RecordingScheduler) -> None:
    rest = app.handler.rest(agent=_agent(app, [{"tool_calls": [REMIND]}, "I'll remind you."]))
    before = datetime.now(UTC)
    reply = rest({"session_id": "s1", "input": {"message": "remind me in 90s to call Ana"}})

    assert reply.status == "completed"
    (timer,) = _timers(scheduler)
    assert (timer.session_id, timer.name) == ("session_s1", "reminder:call_r1")
    assert timer.message == "Reminder: call Ana"
    assert timer.message_id == f"timer:reminder:call_r1:{timer.fire_at}"
    expected = before + timedelta(seconds=90)
    assert abs(timer.fire_at - expected.timestamp() * 1000) < 5_000
    session = app.sessions.get("s1")
    assert session is not None
    types = [e.type for e in session.events]
    assert types.index("timer_set") == types.index("tool_result") + 1
    assert [t.name for t in session.timers] == ["reminder:call_r1"]


def test_a_timer_set_by_a_tool_that_ran_is_kept_when_the_turn_then_fails(
        app: dormant.App, scheduler: RecordingScheduler) -> None:
    def broken(ctx: dormant.HookContext) -> None:
        raise RuntimeError("provider down")

    agent = _agent(app, [{"tool_calls": [REMIND]}, "never"],
                   hooks=[dormant.Hook(after_tool=lambda ctx: None,
                                       before_model=lambda ctx: broken(ctx)
                                       if ctx.request and ctx.request.step == 2 else None)])
    reply = app.handler.rest(agent=agent)({"session_id": "s2", "input": {"message": "remind"}})

    # The tool ran (what changed the world is kept), so its timer is committed and set.
    assert reply.status == "error" and reply.commit_status == "committed"
    assert _calls(scheduler) == ["set"]
    session = app.sessions.get("s2")
    assert session is not None and session.status == "failed"
    assert [t.name for t in session.timers] == ["reminder:call_r1"]


def test_a_superseded_turn_keeps_the_timer_its_tool_set_and_drops_its_reply(
        scheduler: RecordingScheduler) -> None:
    """In process (trusted code: nothing of the turn lands before its commit) a newer
    message overtakes a turn whose tool ran. (Through a handler the tool step's calls land
    before the tool runs, and the newer message queues behind the turn instead.)"""
    ticks = itertools.count(1_700_000_000_000)  # each user message strictly newer
    app = dormant.App(name="timers", scheduler=scheduler, clock=lambda: next(ticks))
    slow_agent = _agent(app, [{"tool_calls": [REMIND]}, "later"])
    fast_agent = app.agent(name="fast", hooks=[dormant.Hook(before_agent=lambda c: "ok")])
    ran = app.run(slow_agent, session=app.sessions.create("s3"), message="remind me")
    app.handler.rest(agent=fast_agent)({"session_id": "s3", "input": {"message": "newer"}})

    outcome = app.sessions.policy.commit(ran.session)

    # The reminder tool ran before a newer message overtook the turn: what changed the world
    # (its result and its timer) is kept, the reply "later" is dropped.
    assert outcome.status == "superseded" and outcome.version is not None
    assert _calls(scheduler) == ["set"]
    session = app.sessions.get("s3")
    assert session is not None
    kept = [e.type for e in session.events if e.type != "state_delta"]
    assert kept[-4:] == ["tool_call", "tool_result", "timer_set", "invocation_end"]
    assert [e.text for e in session.events if e.type == "assistant"] == ["ok"]
    ends = [e for e in session.events if e.type == "invocation_end"]
    assert [e.status for e in ends] == ["completed", "superseded"]


def test_a_superseded_turn_that_ran_no_tool_sets_no_timer(
        scheduler: RecordingScheduler) -> None:
    ticks = itertools.count(1_700_000_000_000)
    app = dormant.App(name="timers", scheduler=scheduler, clock=lambda: next(ticks))
    thinking, release = threading.Event(), threading.Event()

    def schedule_then_wait(ctx: dormant.HookContext) -> str:
        ctx.session.schedule("nudge", delay="1h", message="nudge")
        thinking.set()
        assert release.wait(10)
        return "the slow answer"

    slow_agent = app.agent(name="slow", hooks=[dormant.Hook(before_agent=schedule_then_wait)])
    fast_agent = app.agent(name="fast", hooks=[dormant.Hook(before_agent=lambda c: "ok")])
    outcome: list[Any] = []
    worker = threading.Thread(target=lambda: outcome.append(app.handler.rest(
        agent=slow_agent)({"session_id": "s3b", "input": {"message": "first"}})))
    worker.start()
    assert thinking.wait(10)
    app.handler.rest(agent=fast_agent)({"session_id": "s3b", "input": {"message": "newer"}})
    release.set()
    worker.join(10)

    assert outcome[0].commit_status == "superseded"
    assert scheduler.calls == []
    session = app.sessions.get("s3b")
    assert session is not None and session.timers == []


def test_a_fired_timer_lands_its_message_once_and_runs_a_turn(
        app: dormant.App, scheduler: RecordingScheduler) -> None:
    agent = _agent(app, [{"tool_calls": [REMIND]}, "I'll remind you.", "Time to call Ana!"])
    app.handler.rest(agent=agent)({"session_id": "s4", "input": {"message": "remind me"}})
    (delivery,) = _timers(scheduler)
    wake = app.handler.wake(agent=agent)

    woke = wake(delivery.model_dump(by_alias=True))   # the scheduler's JSON payload
    again = wake(delivery)                            # at-least-once delivery

    assert woke.status == "completed" and woke.output.text == "Time to call Ana!"
    assert again.status == "error" and again.code == "stale_timer"
    session = app.sessions.get("s4")
    assert session is not None
    assert [e.text for e in session.events if e.type == "user"] == [
        "remind me", "Reminder: call Ana"]
    assert session.timers == []
    assert session.version == 3  # the first turn's tool step, its end, the timer's turn


def test_naming_a_timer_twice_converges_and_cancel_removes_it(
        app: dormant.App, scheduler: RecordingScheduler) -> None:
    session = app.sessions.create("s5")
    session.schedule("nudge", delay="5m", message="first")
    session.schedule("nudge", delay=timedelta(minutes=10), message="second")
    assert app.sessions.commit(session).ok
    assert [t.message for t in session.timers] == ["second"]

    stale = TimerDelivery(session_id="session_s5", name="nudge", fire_at=1, message="first")
    wake = app.handler.wake(agent=app.agent(name="a", hooks=[
        dormant.Hook(before_agent=lambda c: "ok")]))
    assert wake(stale).code == "stale_timer"

    session.cancel_schedule("nudge")
    assert app.sessions.commit(session).ok
    assert app.sessions.get("s5").timers == []  # type: ignore[union-attr]


@pytest.mark.parametrize("name", ["dormant.lease", "dormant.lease.7"])
def test_a_session_timer_cannot_take_a_lease_wake_up_s_name(
        app: dormant.App, scheduler: RecordingScheduler, name: str) -> None:
    """A claim's wake-up is named ``dormant.lease.<version>``: a session timer of that name
    would replace or cancel it, or be taken for one when it fires."""
    session = app.sessions.create("s5b")
    with pytest.raises(dormant.InputError, match="dormant's own wake-ups"):
        session.schedule(name, delay="5m", message="hello")
    with pytest.raises(dormant.InputError, match="dormant's own wake-ups"):
        session.cancel_schedule(name)
    session.schedule("dormant.leases", delay="5m", message="not a wake-up's name")
    assert app.sessions.commit(session).ok
    assert [t.name for t in session.timers] == ["dormant.leases"]


def test_a_timer_can_answer_a_yielded_tool(app: dormant.App,
                                           scheduler: RecordingScheduler) -> None:
    """'Wait until Friday': a resume that answers a yielded call at a time."""
    ask = app.tool(name="wait_until", description="Wait", schema=Answer, yield_schema=Answer)

    def schedule_answer(ctx: dormant.HookContext) -> None:
        (pending,) = ctx.session.yielded_tools
        ctx.session.schedule("friday", at=datetime(2030, 1, 4, 9, tzinfo=UTC),
                             tool_input={"call_id": pending.call_id,
                                         "input": {"answer": "it is Friday"}})

    agent = app.agent(name="a", tools=[ask], model=ScriptedModel([
        {"tool_calls": [{"name": "wait_until", "args": {"answer": "friday"}}]},
        "Friday came."]))
    rest = app.handler.rest(agent=agent)
    paused = rest({"session_id": "s6", "input": {"message": "wait until Friday"}})
    session = app.sessions.get("s6")
    assert paused.status == "yielded_tool" and session is not None
    schedule_answer(dormant.HookContext(agent=agent, session=session, invocation_id=None,
                                        state=session.state))
    assert app.sessions.commit(session).ok

    (timer,) = session.timers
    assert timer.fire_at == int(datetime(2030, 1, 4, 9, tzinfo=UTC).timestamp() * 1000)
    done = app.handler.wake(agent=agent)(timer)
    assert done.status == "completed" and done.output.text == "Friday came."


@pytest.mark.parametrize(("delay", "seconds"), [
    ("90s", 90), ("5m", 300), ("2h", 7200), ("1d", 86400), (12, 12), ("250ms", 0.25),
    (timedelta(minutes=1), 60)])
def test_delays_parse(delay: Any, seconds: float) -> None:
    assert parse_delay(delay).total_seconds() == seconds


@pytest.mark.parametrize("bad", ["soon", "-5s", "5 weeks", True])
def test_bad_delays_are_refused(bad: Any) -> None:
    with pytest.raises(dormant.InputError):
        parse_delay(bad)


def test_schedule_checks_its_arguments() -> None:
    session = dormant.Session.new("session_x")
    with pytest.raises(dormant.InputError, match="exactly one of at= and delay="):
        session.schedule("t", message="m")
    with pytest.raises(dormant.InputError, match="exactly one of message= and tool_input="):
        session.schedule("t", delay="1s")
    with pytest.raises(dormant.InputError, match="timezone-aware"):
        session.schedule("t", at=datetime(2030, 1, 1), message="m")
    assert session.new_events == []


def test_a_manual_commit_hands_timers_over_too(app: dormant.App,
                                               scheduler: RecordingScheduler) -> None:
    result = app.run(_agent(app, [{"tool_calls": [REMIND]}, "Will do."]), session_id="m1",
                     message="remind me")
    assert scheduler.calls == []  # nothing is set before the commit
    assert app.sessions.commit(result.session).ok
    assert list(scheduler.timers) == [("session_m1", "reminder:call_r1")]


def test_a_commit_that_landed_despite_an_error_still_hands_its_timers_over(
        scheduler: RecordingScheduler) -> None:
    from dormant.stores import MemoryStore

    class LostReply(MemoryStore):
        """The write lands, then the response is lost (a timeout after the fact)."""

        def append(self, head: Any, events: Any, *, expected_version: int) -> Any:
            super().append(head, events, expected_version=expected_version)
            raise dormant.StoreError("connection reset after the write")

    app = dormant.App(name="timers", store=LostReply(), scheduler=scheduler)
    reply = app.handler.rest(agent=_agent(app, [{"tool_calls": [REMIND]}, "Will do."]))(
        {"session_id": "lost", "input": {"message": "remind me"}})

    assert reply.status == "completed" and reply.commit_status == "committed"
    assert [(t.session_id, t.name) for t in _timers(scheduler)] == [
        ("session_lost", "reminder:call_r1")]
    # the tool step's calls, then the turn's end: each landed once despite its lost reply
    assert app.sessions.get("lost").version == 2  # type: ignore[union-attr]


# --- the lease's wake-up: armed for a claim, cancelled once its turn committed ---------------


def _leases(scheduler: RecordingScheduler) -> list[tuple[str, str]]:
    return [(call[0], call[2]) for call in scheduler.calls if is_lease_timer(call[2])]


def test_a_tool_turn_that_committed_cancels_its_lease_wake_up(
        app: dormant.App, scheduler: RecordingScheduler) -> None:
    rest = app.handler.rest(agent=_agent(app, [{"tool_calls": [REMIND]}, "Done.",
                                               {"tool_calls": [REMIND]}, "Done again."]))
    assert rest({"session_id": "l1", "input": {"message": "remind me"}}).status == "completed"
    assert rest({"session_id": "l1", "input": {"message": "again"}}).status == "completed"

    # each request's write-ahead armed a wake-up of its own (named by the version it landed
    # at), and cancelled it once its turn committed: none is left to fire
    assert _leases(scheduler) == [("set", "dormant.lease.1"), ("cancel", "dormant.lease.1"),
                                  ("set", "dormant.lease.3"), ("cancel", "dormant.lease.3")]
    assert [t for t in scheduler.timers.values() if is_lease_timer(t.name)] == []


def test_a_turn_whose_end_cannot_be_written_keeps_its_lease_wake_up(
        scheduler: RecordingScheduler) -> None:
    """The tool ran under the write-ahead's claim, then the store refused the turn's end (as
    a process that died there): the wake-up stays, to take the invocation over."""
    from dormant.stores import MemoryStore

    class Refusing(MemoryStore):
        appends = 0

        def append(self, *args: Any, **kwargs: Any) -> Any:
            Refusing.appends += 1
            if Refusing.appends > 1:  # the write-ahead lands; nothing after it does
                raise dormant.errors.StoreError("the store is down", retryable=True)
            return super().append(*args, **kwargs)

    app = dormant.App(name="timers", store=Refusing(), scheduler=scheduler)
    app.sessions.policy.backoff = 0
    rest = app.handler.rest(agent=_agent(app, [{"tool_calls": [REMIND]}, "Done."]))
    reply = rest({"session_id": "l2", "input": {"message": "remind me"}})

    assert reply.status == "error" and reply.code == "store_error", reply
    assert _leases(scheduler) == [("set", "dormant.lease.1")]
    [wake_up] = [t for t in scheduler.timers.values() if is_lease_timer(t.name)]
    assert wake_up.session_id == "session_l2"
