"""Two deliveries of one timer firing at once, on every conformance store: one lands, the
other is a clean no-op (the ``stale_timer`` refusal a later repeat gets), never a failure.

EventBridge Scheduler delivers at least once, so two wake deliveries of one firing may both
read the timer pending before either commits. The race is made deterministic in one thread
(moto is not thread-safe): the first delivery's read of the session runs the second delivery
to its end (:func:`_racing`), then the first goes on with the head it read, so it commits
second and loses. It must write nothing, land nothing twice, and answer what the wake paths
(the Lambda function, the local scheduler) count as done; a delivery that lost to something
else than its twin (a newer message) is still a failure, retried.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant.handlers import TurnResult
from dormant.models import ScriptedModel
from dormant.schedulers import RecordingScheduler, TimerDelivery
from dormant.schedulers.local import _problem
from dormant.stores import Store

from ._ledger import ledger as _ledger

FIRE_AT = datetime(2030, 1, 4, 9, tzinfo=UTC)


class Answer(BaseModel):
    answer: str


@dataclass
class Race:
    """The twin's result, and the session's version once it was done (the loser's baseline)."""

    twin: TurnResult | None = None
    version: int | None = None


@pytest.fixture
def app(store: Store) -> dormant.App:
    ticks = itertools.count(1_700_000_000_000)  # every event strictly newer than the last
    return dormant.App(name="redelivery", store=store, scheduler=RecordingScheduler(),
                       clock=lambda: next(ticks))


@pytest.fixture
def racing(app: dormant.App, monkeypatch: pytest.MonkeyPatch
           ) -> Callable[[Callable[[], Any]], Race]:
    """``racing(other)``: the next read of a session runs ``other()`` to its end before it
    returns what it read (stale by then)."""

    def arm(other: Callable[[], Any]) -> Race:
        store = app.store
        load = store.load
        race = Race()

        def read_then_lose(session_id: str, **options: Any) -> Any:
            read = load(session_id, **options)
            monkeypatch.setattr(store, "load", load)  # once: the rest of the turn reads fresh
            race.twin = other()
            after = load(session_id, turns=0)
            race.version = after.head.version if after is not None else None
            return read

        monkeypatch.setattr(store, "load", read_then_lose)
        return race

    return arm


def _hello(app: dormant.App) -> dormant.Agent:
    return app.agent(name="hello", hooks=[dormant.Hook(before_agent=lambda ctx: "on it")])


def _message_timer(app: dormant.App, session: dormant.Session) -> TimerDelivery:
    session.schedule("nudge", at=FIRE_AT, message="time to call Ana")
    assert app.sessions.commit(session).ok
    (timer,) = session.timers
    return timer



def _assert_a_clean_no_op(loser: TurnResult, race: Race, app: dormant.App,
                          session_id: str) -> None:
    """The loser is the refusal a repeat gets, counted done, and it wrote nothing."""
    assert (loser.status, loser.code, loser.commit_status) == ("error", "stale_timer", None)
    assert not loser.landed
    assert _problem(loser) is None  # the local scheduler's test: done, not retried
    session = app.sessions.get(session_id)
    assert session is not None and session.version == race.version
    assert session.timers == []


def test_two_deliveries_of_one_firing_land_its_message_once(
        app: dormant.App, racing: Callable[[Callable[[], Any]], Race]) -> None:
    timer = _message_timer(app, app.sessions.create("free"))
    wake = app.handler.wake(agent=_hello(app))
    race = racing(lambda: wake(timer))

    loser = wake(timer)

    assert race.twin is not None and race.twin.commit_status == "committed"
    _assert_a_clean_no_op(loser, race, app, "session_free")
    events = _ledger(app, "session_free")
    assert [e.message_id for e in events if e.type == "user"] == [timer.message_id]
    assert [e.type for e in events].count("timer_fired") == 1
    assert [e.text for e in events if e.type == "assistant"] == ["on it"]


def test_two_deliveries_to_a_session_waiting_on_a_tool_queue_the_message_once(
        app: dormant.App, racing: Callable[[Callable[[], Any]], Race]) -> None:
    ask = app.tool(name="ask", description="Ask the user", schema=Answer, yield_schema=Answer)
    agent = app.agent(name="asker", tools=[ask], model=ScriptedModel(
        [{"tool_calls": [{"name": "ask", "args": {"answer": "which day?"}}]}]))
    parked = app.handler.rest(agent=agent)({"session_id": "busy", "input": {"message": "go"}})
    assert parked.status == "yielded_tool"
    session = app.sessions.get("busy")
    assert session is not None
    timer = _message_timer(app, session)
    wake = app.handler.wake(agent=agent)
    race = racing(lambda: wake(timer))

    loser = wake(timer)

    assert race.twin is not None
    assert (race.twin.status, race.twin.commit_status) == ("queued", "committed")
    _assert_a_clean_no_op(loser, race, app, "session_busy")
    waiting = app.sessions.get("busy")
    assert waiting is not None and [q.text for q in waiting.inbox] == [timer.message]
    assert [e.type for e in _ledger(app, "session_busy")].count("timer_fired") == 1


def test_two_deliveries_of_a_timer_answering_a_yielded_call_answer_it_once(
        app: dormant.App, racing: Callable[[Callable[[], Any]], Race]) -> None:
    wait = app.tool(name="wait_until", description="Wait", schema=Answer, yield_schema=Answer)
    agent = app.agent(name="waiter", tools=[wait], model=ScriptedModel([
        {"tool_calls": [{"name": "wait_until", "args": {"answer": "friday"}}]},
        "Friday came.", "Friday came again."]))
    parked = app.handler.rest(agent=agent)({"session_id": "yield", "input": {"message": "go"}})
    assert parked.status == "yielded_tool"
    session = app.sessions.get("yield")
    assert session is not None
    (call,) = session.yielded_tools
    session.schedule("friday", at=FIRE_AT,
                     tool_input={"call_id": call.call_id, "input": {"answer": "it is Friday"}})
    assert app.sessions.commit(session).ok
    (timer,) = session.timers
    wake = app.handler.wake(agent=agent)
    race = racing(lambda: wake(timer))

    loser = wake(timer)

    assert race.twin is not None and race.twin.status == "completed"
    _assert_a_clean_no_op(loser, race, app, "session_yield")
    types = [e.type for e in _ledger(app, "session_yield")]
    assert (types.count("timer_fired"), types.count("tool_input")) == (1, 1)
    assert types.count("assistant") == 1


def test_a_delivery_overtaken_by_a_newer_message_is_still_a_failure_to_retry(
        app: dormant.App) -> None:
    """Not a twin: a user's message lands while the delivery runs. Nothing of the delivery
    is written and its timer is still pending, so it must be retried, not counted done."""
    timer = _message_timer(app, app.sessions.create("overtaken"))
    chat = app.handler.rest(agent=_hello(app))
    overtaken: list[Any] = []

    def meanwhile(ctx: dormant.HookContext) -> str:
        if not overtaken:  # the delivery's turn runs: a newer message commits first
            overtaken.append(chat({"session_id": "overtaken", "input": {"message": "hi"}}))
        return "on it"

    result = app.handler.wake(agent=app.agent(name="slow", hooks=[
        dormant.Hook(before_agent=meanwhile)]))(timer)

    assert overtaken and overtaken[0].commit_status == "committed"
    assert (result.commit_status, result.landed) == ("superseded", False)
    assert _problem(result) is not None
    session = app.sessions.get("overtaken")
    assert session is not None and session.timers == [timer]
    assert [e.text for e in session.events if e.type == "user"] == ["hi"]

