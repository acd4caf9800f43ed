"""The ``wake`` function, driven by events/wake-timer.json against moto, and the timer path of
the deployment: a committed turn -> an EventBridge schedule -> its input -> the wake function."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant.schedulers import EventBridgeScheduler, TimerDelivery
from dormant.stores import DynamoDBStore
from tests._moto import FaultInjector, server_error
from tests.functions.conftest import (
    SCHEDULER_ROLE_ARN,
    WAKE_ARN,
    WAKE_DLQ_ARN,
    Deployment,
    FakeLambdaContext,
    load_event,
    seed_wake_timer,
)

EVENT = "wake-timer.json"


def _user_texts(deployed: Deployment, session_id: str) -> list[str]:
    session = deployed.session(session_id)
    assert session is not None
    return [e.text for e in session.events if e.type == "user"]


def test_the_sample_event_is_a_timer_delivery() -> None:
    event = load_event(EVENT)
    delivery = TimerDelivery.model_validate(event)
    assert delivery.message_id == f"timer:{delivery.name}:{delivery.fire_at}"


def test_a_firing_lands_its_message_once_and_a_repeat_is_a_success(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    event = load_event(EVENT)
    seed_wake_timer(deployed, event)
    wake = deployed.cold_start("wake")

    first = wake.handler(event, context)
    version = deployed.session(event["sessionId"]).version
    again = wake.handler(event, FakeLambdaContext())  # Scheduler delivers at least once

    assert first["commitStatus"] == "committed"
    assert (again["status"], again["code"], again["commitStatus"]) == (
        "error", "stale_timer", None)
    assert _user_texts(deployed, event["sessionId"]) == [event["message"]]
    session = deployed.session(event["sessionId"])
    assert session.version == version  # the repeat wrote nothing
    assert session.timers == []


def test_two_deliveries_of_one_firing_at_once_land_it_once_and_neither_raises(
        deployed: Deployment, context: FakeLambdaContext,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Scheduler delivers one firing twice, to two execution environments at once: both read
    the timer pending, the other one commits first. The one that loses wrote nothing and
    answers the stale summary; raising would cost a Lambda retry and a dead-letter entry."""
    event = load_event(EVENT)
    seed_wake_timer(deployed, event)
    version = deployed.session(event["sessionId"]).version
    losing, winning = deployed.cold_start("wake"), deployed.cold_start("wake")
    store = losing.app.store
    load = store.load
    won: list[dict[str, Any]] = []

    def read_then_lose(session_id: str, **options: Any) -> Any:
        read = load(session_id, **options)
        monkeypatch.setattr(store, "load", load)
        won.append(winning.handler(event, FakeLambdaContext()))  # lands while this one runs
        return read

    monkeypatch.setattr(store, "load", read_then_lose)
    lost = losing.handler(event, context)

    assert [summary["commitStatus"] for summary in won] == ["committed"]
    assert (lost["status"], lost["code"], lost["commitStatus"]) == ("error", "stale_timer", None)
    assert _user_texts(deployed, event["sessionId"]) == [event["message"]]
    session = deployed.session(event["sessionId"])
    assert session.version == version + 1  # one delivery wrote, once
    assert [e.type for e in session.events].count("timer_fired") == 1
    assert session.timers == []


def test_a_cancelled_timer_firing_late_is_a_success_that_writes_nothing(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    event = load_event(EVENT)
    seed_wake_timer(deployed, event)
    app = dormant.App(store=DynamoDBStore(deployed.table, bucket=deployed.bucket))
    session = app.sessions.get(event["sessionId"])
    assert session is not None
    session.cancel_schedule(event["name"])
    assert app.sessions.commit(session).ok
    version = deployed.session(event["sessionId"]).version

    reply = deployed.cold_start("wake").handler(event, context)

    assert reply["code"] == "stale_timer"
    assert deployed.session(event["sessionId"]).version == version


def test_a_malformed_event_raises_and_writes_nothing(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    wake = deployed.cold_start("wake")
    event = load_event(EVENT)
    del event["fireAt"]
    with pytest.raises(wake.InvalidTimerEvent, match="fireAt"):
        wake.handler(event, context)
    with pytest.raises(wake.InvalidTimerEvent):
        wake.handler({"Records": []}, context)  # not from a dormant schedule at all
    assert deployed.session(event["sessionId"]) is None


def test_a_firing_for_a_session_waiting_on_a_tool_queues_its_reminder(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    """The session cannot take a message now: the reminder waits in its inbox (it runs when
    the tool is answered). The firing is delivered; a repeat of it is stale."""
    api = deployed.cold_start("api")
    paused = api.handler(load_event("api_post_turn.json"), context)
    assert json.loads(paused["body"])["status"] == "yielded_tool"
    event = load_event(EVENT)
    event["sessionId"] = "session_thread-42"
    seed_wake_timer(deployed, event)

    wake = deployed.cold_start("wake")
    summary = wake.handler(event, FakeLambdaContext())

    assert (summary["status"], summary["commitStatus"]) == ("queued", "committed")
    session = deployed.session("thread-42")
    assert session.status == "awaiting_input"
    assert [q.text for q in session.inbox] == [event["message"]]
    assert session.timers == []
    assert wake.handler(event, FakeLambdaContext())["code"] == "stale_timer"


def test_a_firing_that_cannot_land_raises_so_lambda_retries_it(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    """The store keeps failing: the function raises (Lambda retries it, then dead-letters it)
    and the timer stays pending."""
    event = load_event(EVENT)
    seed_wake_timer(deployed, event)
    version = deployed.session(event["sessionId"]).version
    wake = deployed.cold_start("wake")
    FaultInjector(wake.app.store._client).fail("TransactWriteItems",
                                               *[server_error() for _ in range(50)])

    with pytest.raises(wake.TimerNotDelivered, match="did not land: store_error"):
        wake.handler(event, context)

    session = deployed.session(event["sessionId"])
    assert session.version == version
    assert [t.name for t in session.timers] == [event["name"]]


# --- the deployment's timer path ---------------------------------------------------------------


class Reminder(BaseModel):
    seconds: int
    text: str


def _remind(ctx: dormant.ToolContext) -> dict[str, Any]:
    dormant.handler_context().session.schedule(
        f"reminder:{ctx.call_id}", delay=ctx.args.seconds, message=f"Reminder: {ctx.args.text}")
    return {"scheduled": True}


def test_a_committed_turn_schedules_the_wake_function_which_delivers_once(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    api = deployed.cold_start("api")
    app = api.app
    assert isinstance(app.scheduler, EventBridgeScheduler)
    tool = app.tool(name="remind", description="Set a reminder", schema=Reminder,
                    execute=_remind)
    agent = app.agent(name="reminders", tools=[tool], model=dormant.models.ScriptedModel([
        {"tool_calls": [{"name": "remind", "args": {"seconds": 3600, "text": "check out"},
                         "id": "call_1"}]}, "I'll remind you."]))

    reply = app.handler.rest(agent=agent)(
        {"session_id": "guest-7", "input": {"message": "remind me in an hour to check out"}})
    assert reply.commit_status == "committed"

    # the reminder (the wake-up of the lease the tool step's write-ahead held: cancelled
    # once the turn committed)
    (schedule,) = deployed.schedules()
    assert schedule["ScheduleExpression"].startswith("at(")
    assert schedule["ActionAfterCompletion"] == "DELETE"
    target = schedule["Target"]
    assert (target["Arn"], target["RoleArn"], target["DeadLetterConfig"]["Arn"]) == (
        WAKE_ARN, SCHEDULER_ROLE_ARN, WAKE_DLQ_ARN)

    wake = deployed.cold_start("wake")
    event = json.loads(target["Input"])  # EventBridge Scheduler's event for the function
    assert wake.handler(event, context)["commitStatus"] == "committed"
    assert wake.handler(event, FakeLambdaContext())["code"] == "stale_timer"
    assert _user_texts(deployed, "guest-7") == [
        "remind me in an hour to check out", "Reminder: check out"]


def test_without_the_timer_settings_the_functions_set_no_schedules(
        deployed: Deployment, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DORMANT_WAKE_TARGET_ARN")
    assert deployed.cold_start("api").app.scheduler is None
