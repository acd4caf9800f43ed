"""Honest scheduling, through the public API on every store.

A tool that asks for a timer the app cannot set — no scheduler, or a scheduler that rejects it
for good — gets an ordinary tool error, which the model reads on its next step; the ledger
never records the timer as set. A transient failure after the commit is retried with the
same timer name and time, and converges on one timer.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel

import dormant
from dormant.errors import SchedulerError, TimerRefused
from dormant.models import ScriptedModel, ToolMessage
from dormant.schedulers import RecordingScheduler, TimerDelivery, is_lease_timer
from dormant.stores import Store


class Nudge(BaseModel):
    minutes: int


def _remind(ctx: dormant.ToolContext) -> dict[str, Any]:
    dormant.handler_context().session.schedule(
        "nudge", delay=f"{ctx.args.minutes}m", message="Time to check out")
    return {"status": "set", "minutes": ctx.args.minutes}


CALL = {"name": "remind", "args": {"minutes": 30}, "id": "call_r"}


def _app(store: Store, scheduler: Any) -> tuple[dormant.App, Any, ScriptedModel]:
    app = dormant.App(name="timers", store=store, scheduler=scheduler)
    scripted = ScriptedModel([{"tool_calls": [CALL]}, "Sorry, I could not set it.",
                              {"tool_calls": [CALL]}, "Will do."])
    agent = app.agent(name="reminder", model=scripted, tools=[
        app.tool(name="remind", description="Set a reminder", schema=Nudge,
                 execute=_remind)])
    return app, agent, scripted


class Refusing(RecordingScheduler):
    """Rejects any timer more than a week ahead, as a backend with a horizon would."""

    def check(self, delivery: TimerDelivery) -> None:
        if delivery.fire_at - int(time.time() * 1000) > 7 * 86_400_000:
            raise TimerRefused(f"timer {delivery.name!r} is beyond this scheduler's horizon")


class Flaky(RecordingScheduler):
    """Fails the first ``failures`` sets transiently (as a throttled or timed-out call)."""

    def __init__(self, failures: int, *, retryable: bool = True) -> None:
        super().__init__()
        self.failures = failures
        self.retryable = retryable
        self.attempts: list[TimerDelivery] = []

    def set(self, delivery: TimerDelivery) -> None:
        if is_lease_timer(delivery.name):  # (the wake-up a tool step's claim arms)
            super().set(delivery)
            return
        self.attempts.append(delivery)
        if len(self.attempts) <= self.failures:
            raise SchedulerError("throttled" if self.retryable else "ValidationException",
                                 retryable=self.retryable)
        super().set(delivery)


def _refused(app: dormant.App, agent: Any, scripted: ScriptedModel, expected: str) -> None:
    reply = app.handler.rest(agent=agent)({"session_id": "s1",
                                           "input": {"message": "remind me in 30 minutes"}})

    assert reply.status == "completed" and reply.output.text == "Sorry, I could not set it."
    (message,) = [m for m in scripted.requests[1].messages if isinstance(m, ToolMessage)]
    assert message.is_error and expected in message.content  # the model reads the refusal
    assert "remind failed" in message.content
    session = app.sessions.get("s1")
    assert session is not None
    assert session.timers == []
    assert not [e for e in session.events if e.type == "timer_set"]  # nothing says "set"
    (result,) = [e for e in session.events if e.type == "tool_result"]
    assert result.result is None and result.error is not None and expected in result.error


def test_a_tool_scheduling_on_an_app_with_no_scheduler_gets_a_tool_error(store: Store) -> None:
    app, agent, scripted = _app(store, None)
    _refused(app, agent, scripted, "this app has no scheduler")


def test_a_timer_the_scheduler_rejects_for_good_is_a_tool_error(store: Store) -> None:
    scheduler = Refusing()
    app, agent, scripted = _app(store, scheduler)
    scripted = ScriptedModel([{"tool_calls": [{**CALL, "args": {"minutes": 10_000_000}}]},
                              "Sorry, I could not set it."])
    agent = app.agent(name="reminder", model=scripted, tools=list(agent.tools.values()))

    _refused(app, agent, scripted, "beyond this scheduler's horizon")
    # nothing was handed over either (but the wake-up of the tool step's claim)
    assert [call for call in scheduler.calls if not is_lease_timer(call[2])] == []


def test_a_transient_failure_is_retried_with_the_same_name_and_time(store: Store) -> None:
    scheduler = Flaky(failures=2)
    app, agent, _ = _app(store, scheduler)
    agent = app.agent(name="reminder", tools=list(agent.tools.values()),
                      model=ScriptedModel([{"tool_calls": [CALL]}, "Will do."]))

    reply = app.handler.rest(agent=agent)({"session_id": "s1",
                                           "input": {"message": "remind me in 30 minutes"}})

    assert reply.status == "completed" and reply.commit_status == "committed"
    assert len(scheduler.attempts) == 3
    assert len({(a.name, a.fire_at, a.message_id) for a in scheduler.attempts}) == 1
    (timer,) = [t for t in scheduler.timers.values() if not is_lease_timer(t.name)]
    session = app.sessions.get("s1")
    assert session is not None
    assert [(t.name, t.fire_at) for t in session.timers] == [(timer.name, timer.fire_at)]


def test_a_refusal_for_good_after_the_commit_is_not_retried(store: Store) -> None:
    scheduler = Flaky(failures=5, retryable=False)
    app, agent, _ = _app(store, scheduler)
    agent = app.agent(name="reminder", tools=list(agent.tools.values()),
                      model=ScriptedModel([{"tool_calls": [CALL]}, "Will do."]))

    reply = app.handler.rest(agent=agent)({"session_id": "s1",
                                           "input": {"message": "remind me in 30 minutes"}})

    assert reply.commit_status == "committed"
    assert len(scheduler.attempts) == 1  # the same call cannot succeed: tried once
    assert list(scheduler.timers.values()) == []  # (the lease's wake-up: cancelled)
