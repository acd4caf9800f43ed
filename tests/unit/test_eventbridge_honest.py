"""Honest scheduling on EventBridge Scheduler (moto, and botocore's Stubber for the failures
moto cannot make): a timer EventBridge would reject for good is a tool error before anything
is committed, a rejection after the commit is not retried, and a transient failure is retried
with the same schedule name and time (a ConflictException on the retry means the first create
landed: the schedule is updated to the same values)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from pydantic import BaseModel

import dormant
from dormant.errors import SchedulerError, TimerRefused
from dormant.models import ScriptedModel, ToolMessage
from dormant.schedulers import EventBridgeScheduler, TimerDelivery
from tests._moto import aws_env, in_process_aws

GROUP = "dormant-timers"
WAKE_ARN = "arn:aws:lambda:us-east-1:123456789012:function:dormant-wake"
ROLE_ARN = "arn:aws:iam::123456789012:role/dormant-scheduler"
NOW_MS = 1_800_000_000_000


class Nudge(BaseModel):
    days: int


def _remind(ctx: dormant.ToolContext) -> dict[str, Any]:
    dormant.handler_context().session.schedule(
        "nudge", delay=f"{ctx.args.days}d", message="Time to renew")
    return {"status": "set"}


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    aws_env(monkeypatch)
    with in_process_aws():
        scheduler = boto3.client("scheduler")
        scheduler.create_schedule_group(Name=GROUP)
        yield scheduler


def _turn(timers: EventBridgeScheduler, days: int) -> tuple[dormant.App, ScriptedModel, Any]:
    app = dormant.App(name="renewals", scheduler=timers)
    scripted = ScriptedModel([{"tool_calls": [{"name": "remind", "args": {"days": days}}]},
                              "Done."])
    agent = app.agent(name="renewals", model=scripted, tools=[
        app.tool(name="remind", description="Remind me", schema=Nudge, execute=_remind)])
    reply = app.handler.rest(agent=agent)({"session_id": "s1",
                                           "input": {"message": "remind me"}})
    return app, scripted, reply


def test_a_timer_beyond_the_schedulers_limit_is_a_tool_error_and_nothing_is_created(
        client: Any) -> None:
    timers = EventBridgeScheduler(WAKE_ARN, ROLE_ARN, group_name=GROUP, client=client,
                                  max_delay=timedelta(days=365))

    app, scripted, reply = _turn(timers, days=400)

    assert reply.status == "completed" and reply.commit_status == "committed"
    (message,) = [m for m in scripted.requests[1].messages if isinstance(m, ToolMessage)]
    assert message.is_error and "beyond this scheduler's limit of 31536000s" in message.content
    session = app.sessions.get("s1")
    assert session is not None and session.timers == []
    assert not [e for e in session.events if e.type == "timer_set"]
    # (the only schedule is the lease's wake-up the tool step's claim armed)
    assert _timer_schedules(client) == []
    # within the limit the same tool sets one schedule
    _, _, fine = _turn(timers, days=30)
    assert fine.status == "completed"
    assert len(_timer_schedules(client)) == 1


def _timer_schedules(client: Any) -> list[str]:
    """The schedules of timers turns asked for (not a claim's lease wake-up)."""
    return [s["Name"] for s in client.list_schedules(GroupName=GROUP)["Schedules"]
            if ".dormant.lease-" not in s["Name"]]


def test_check_refuses_what_the_api_would_reject() -> None:
    bad_role = EventBridgeScheduler(WAKE_ARN, "not-a-role", clock=lambda: NOW_MS)
    timer = TimerDelivery(session_id="session_s1", name="x", fire_at=NOW_MS + 60_000,
                          message="hi")
    with pytest.raises(TimerRefused, match="not an IAM role ARN"):
        bad_role.check(timer)
    long_group = EventBridgeScheduler(WAKE_ARN, ROLE_ARN, group_name="g" * 100,
                                      clock=lambda: NOW_MS)
    with pytest.raises(TimerRefused, match=r"would reject it.*GroupName"):
        long_group.check(timer)
    EventBridgeScheduler(WAKE_ARN, ROLE_ARN, clock=lambda: NOW_MS).check(timer)  # fine


def _stubbed() -> tuple[EventBridgeScheduler, Any]:
    raw = boto3.client("scheduler", region_name="us-east-1", aws_access_key_id="x",
                       aws_secret_access_key="x")
    return EventBridgeScheduler(WAKE_ARN, ROLE_ARN, group_name=GROUP, client=raw,
                                clock=lambda: NOW_MS), raw


def _delivery() -> TimerDelivery:
    return TimerDelivery(session_id="session_s1", name="nudge", fire_at=NOW_MS + 90_000,
                         message="Time to renew", message_id=f"timer:nudge:{NOW_MS + 90_000}")


def test_a_validation_exception_is_a_refusal_for_good() -> None:
    timers, raw = _stubbed()
    with Stubber(raw) as stub:
        stub.add_client_error("create_schedule", service_error_code="ValidationException",
                              http_status_code=400)
        with pytest.raises(SchedulerError) as refused:
            timers.set(_delivery())
    assert refused.value.retryable is False


def test_a_transient_failure_is_retried_with_the_same_name_and_time() -> None:
    from dormant.events import TimerSet
    from dormant.schedulers import hand_over

    timers, raw = _stubbed()
    delivery = _delivery()
    params = timers.request(delivery)
    arn = {"ScheduleArn": f"arn:aws:scheduler:us-east-1:123456789012:schedule/{GROUP}/x"}
    with Stubber(raw) as stub:
        # throttled, then a create whose first attempt had landed after all: it converges
        stub.add_client_error("create_schedule", service_error_code="ThrottlingException",
                              http_status_code=400, expected_params=params)
        stub.add_client_error("create_schedule", service_error_code="ConflictException",
                              http_status_code=409, expected_params=params)
        stub.add_response("update_schedule", arn, params)
        hand_over(timers, "session_s1", [TimerSet(
            name=delivery.name, fire_at=delivery.fire_at, message=delivery.message,
            message_id=delivery.message_id)])
        stub.assert_no_pending_responses()
