"""EventBridgeScheduler (SPEC §7) against moto's EventBridge Scheduler (CRUD only: moto never
fires a schedule, so the tests feed a schedule's target input to the wake handler themselves)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from pydantic import BaseModel

import dormant
from dormant.errors import ConfigError, SchedulerError
from dormant.models import ScriptedModel
from dormant.schedulers import EventBridgeScheduler, TimerDelivery, lease_timer
from dormant.schedulers.eventbridge import MIN_LEAD_SECONDS, at_expression, schedule_name
from dormant.settings import Settings
from tests._moto import aws_env, in_process_aws

GROUP = "dormant-timers"
WAKE_ARN = "arn:aws:lambda:us-east-1:123456789012:function:dormant-wake"
ROLE_ARN = "arn:aws:iam::123456789012:role/dormant-scheduler"
DLQ_ARN = "arn:aws:sqs:us-east-1:123456789012:dormant-wake-dlq"
NOW_MS = 1_800_000_000_000  # 2027-01-15T08:00:00Z
_NAME = re.compile(r"^[0-9a-zA-Z_.-]{1,64}$")


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    aws_env(monkeypatch)
    with in_process_aws():
        scheduler = boto3.client("scheduler")
        scheduler.create_schedule_group(Name=GROUP)
        yield scheduler


@pytest.fixture
def timers(client: Any) -> EventBridgeScheduler:
    return EventBridgeScheduler(WAKE_ARN, ROLE_ARN, group_name=GROUP, client=client,
                                dead_letter_arn=DLQ_ARN, clock=lambda: NOW_MS)


def delivery(name: str = "reminder:call_1", *, fire_at: int = NOW_MS + 90_000,
             message: str = "Reminder: call Ana", session_id: str = "session_s1") -> TimerDelivery:
    return TimerDelivery(session_id=session_id, name=name, fire_at=fire_at, message=message,
                         message_id=f"timer:{name}:{fire_at}")


def schedules(client: Any) -> list[dict[str, Any]]:
    summaries = client.list_schedules(GroupName=GROUP)["Schedules"]
    return [client.get_schedule(Name=s["Name"], GroupName=GROUP) for s in summaries]


def test_set_creates_a_one_time_utc_schedule_that_deletes_itself(
        client: Any, timers: EventBridgeScheduler) -> None:
    timer = delivery()
    timers.set(timer)

    (schedule,) = schedules(client)
    assert schedule["Name"] == schedule_name("session_s1", "reminder:call_1")
    assert schedule["ScheduleExpression"] == "at(2027-01-15T08:01:30)"
    assert schedule["ScheduleExpressionTimezone"] == "UTC"
    assert schedule["FlexibleTimeWindow"] == {"Mode": "OFF"}
    assert schedule["ActionAfterCompletion"] == "DELETE"
    target = schedule["Target"]
    assert (target["Arn"], target["RoleArn"]) == (WAKE_ARN, ROLE_ARN)
    assert target["DeadLetterConfig"] == {"Arn": DLQ_ARN}
    assert target["RetryPolicy"] == {"MaximumRetryAttempts": 185,
                                     "MaximumEventAgeInSeconds": 86_400}
    # The target input is the delivery itself, in its wire (camelCase) form.
    payload = json.loads(target["Input"])
    assert payload["sessionId"] == "session_s1" and payload["fireAt"] == timer.fire_at
    assert TimerDelivery.model_validate(payload) == timer


def test_a_tool_input_timer_round_trips_too(client: Any, timers: EventBridgeScheduler) -> None:
    timer = TimerDelivery(session_id="session_s2", name="friday", fire_at=NOW_MS + 3_600_000,
                          tool_input={"call_id": "call_9", "input": {"answer": "Friday"}})
    timers.set(timer)
    (schedule,) = schedules(client)
    assert TimerDelivery.model_validate_json(schedule["Target"]["Input"]) == timer


def test_setting_a_timer_again_converges_on_one_schedule(
        client: Any, timers: EventBridgeScheduler) -> None:
    timers.set(delivery(message="first"))
    later = delivery(message="second", fire_at=NOW_MS + 600_000)
    timers.set(later)
    timers.set(later)  # a retried hand-off

    (schedule,) = schedules(client)
    assert TimerDelivery.model_validate_json(schedule["Target"]["Input"]) == later
    assert schedule["ScheduleExpression"] == "at(2027-01-15T08:10:00)"


def test_different_timers_and_sessions_get_their_own_schedules(
        client: Any, timers: EventBridgeScheduler) -> None:
    timers.set(delivery("a"))
    timers.set(delivery("b"))
    timers.set(delivery("a", session_id="session_s9"))
    assert len(schedules(client)) == 3


def test_cancel_deletes_the_schedule_and_is_idempotent(
        client: Any, timers: EventBridgeScheduler) -> None:
    timers.set(delivery("a"))
    timers.set(delivery("b"))

    timers.cancel("session_s1", "a")
    timers.cancel("session_s1", "a")          # already gone
    timers.cancel("session_s1", "never-set")  # never there (or fired and deleted itself)

    assert [json.loads(s["Target"]["Input"])["name"] for s in schedules(client)] == ["b"]


@pytest.mark.parametrize(("session_id", "name"), [
    ("session_s1", "reminder:call_1"),
    ("session_" + "x" * 120, "y" * 200),
    ("session_thread-42", "rappel: appeler Zoë / 明天 ☎"),
    ("s", "."),
    ("session_a.b", "c"),
])
def test_schedule_names_fit_eventbridge_whatever_the_ids(session_id: str, name: str) -> None:
    derived = schedule_name(session_id, name)
    assert _NAME.match(derived), derived
    assert schedule_name(session_id, name) == derived  # deterministic


def test_schedule_names_differ_when_the_readable_part_collides() -> None:
    names = {schedule_name("session_s1", "a:b"), schedule_name("session_s1", "a/b"),
             schedule_name("session_s1.a", "b"), schedule_name("session_" + "x" * 100, "1"),
             schedule_name("session_" + "x" * 100, "2")}
    assert len(names) == 5
    assert schedule_name("session_s1", "reminder").startswith("s1.reminder-")


def test_odd_ids_make_valid_schedules(client: Any, timers: EventBridgeScheduler) -> None:
    timers.set(delivery("y" * 190 + " ☎/明天", session_id="session_" + "x" * 120))
    (schedule,) = schedules(client)
    assert _NAME.match(schedule["Name"])


def test_at_rounds_up_to_the_second_and_never_asks_for_the_past() -> None:
    assert at_expression(NOW_MS + 90_001, now_ms=NOW_MS) == "at(2027-01-15T08:01:31)"
    soon = f"at(2027-01-15T08:0{MIN_LEAD_SECONDS // 60}:00)"
    assert at_expression(NOW_MS - 3_600_000, now_ms=NOW_MS) == soon   # already due
    assert at_expression(NOW_MS + 5_000, now_ms=NOW_MS) == soon       # due too soon
    assert at_expression(NOW_MS + 5_000, now_ms=NOW_MS, min_lead_seconds=0) == (
        "at(2027-01-15T08:00:05)")
    year_2030 = int(datetime(2030, 1, 4, 9, tzinfo=UTC).timestamp() * 1000)
    assert at_expression(year_2030, now_ms=NOW_MS) == "at(2030-01-04T09:00:00)"


def test_a_due_timer_keeps_its_own_fire_at_in_the_delivery(
        client: Any, timers: EventBridgeScheduler) -> None:
    overdue = delivery(fire_at=NOW_MS - 10_000)
    timers.set(overdue)
    (schedule,) = schedules(client)
    assert schedule["ScheduleExpression"] == "at(2027-01-15T08:01:00)"
    assert TimerDelivery.model_validate_json(schedule["Target"]["Input"]).fire_at == (
        NOW_MS - 10_000)


def test_other_failures_raise_a_scheduler_error_naming_the_timer() -> None:
    client = boto3.client("scheduler", region_name="us-east-1", aws_access_key_id="x",
                          aws_secret_access_key="x")
    timers = EventBridgeScheduler(WAKE_ARN, ROLE_ARN, group_name=GROUP, client=client)
    with Stubber(client) as stub:
        stub.add_client_error("create_schedule", service_error_code="ValidationException",
                              service_message="The target is invalid", http_status_code=400)
        stub.add_client_error("delete_schedule", service_error_code="AccessDeniedException",
                              http_status_code=403)
        with pytest.raises(SchedulerError, match=r"timer 'reminder:call_1' of session "
                                                  r"session_s1 .*ValidationException"):
            timers.set(delivery())
        with pytest.raises(SchedulerError, match="could not cancel timer 'x'"):
            timers.cancel("session_s1", "x")
    assert SchedulerError.code == "scheduler_error"


def test_a_schedule_that_fired_between_conflict_and_update_is_created_again() -> None:
    client = boto3.client("scheduler", region_name="us-east-1", aws_access_key_id="x",
                          aws_secret_access_key="x")
    timers = EventBridgeScheduler(WAKE_ARN, ROLE_ARN, group_name=GROUP, client=client,
                                  clock=lambda: NOW_MS)
    arn = {"ScheduleArn": f"arn:aws:scheduler:us-east-1:123456789012:schedule/{GROUP}/x"}
    with Stubber(client) as stub:
        stub.add_client_error("create_schedule", service_error_code="ConflictException",
                              http_status_code=409)
        stub.add_client_error("update_schedule", service_error_code="ResourceNotFoundException",
                              http_status_code=404)
        stub.add_response("create_schedule", arn, timers.request(delivery()))
        timers.set(delivery())
        stub.assert_no_pending_responses()


def test_from_settings_reads_the_environment_names() -> None:
    settings = Settings.from_env({"DORMANT_SCHEDULE_GROUP": GROUP,
                                  "DORMANT_WAKE_TARGET_ARN": WAKE_ARN,
                                  "DORMANT_SCHEDULER_ROLE_ARN": ROLE_ARN,
                                  "DORMANT_SCHEDULE_DLQ_ARN": DLQ_ARN})
    timers = EventBridgeScheduler.from_settings(settings, client=object())
    assert (timers.target_arn, timers.role_arn, timers.group_name, timers.dead_letter_arn) == (
        WAKE_ARN, ROLE_ARN, GROUP, DLQ_ARN)
    with pytest.raises(ConfigError, match="DORMANT_WAKE_TARGET_ARN"):
        EventBridgeScheduler.from_settings(Settings.from_env({}))


@pytest.mark.parametrize("module", ["dormant.schedulers", "dormant.scheduling"])
def test_importing_the_schedulers_package_does_not_import_a_backend(module: str) -> None:
    # dormant.scheduling is the deprecated shim: it must stay as lazy as the package.
    code = (f"import sys, dormant, {module}\n"
            "assert 'dormant.schedulers.eventbridge' not in sys.modules\n"
            "assert 'dormant.schedulers.local' not in sys.modules\n"
            f"timers = {module}.EventBridgeScheduler('arn:t', 'arn:r')\n"
            "assert 'boto3' not in sys.modules, 'boto3 imported before the first call'\n"
            "assert 'dormant.schedulers.local' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


# --- a committed turn, through the handlers, to a schedule, to the wake handler -------------------


class Reminder(BaseModel):
    delay_seconds: int
    reminder: str


def _set_reminder(ctx: dormant.ToolContext) -> dict[str, Any]:
    dormant.handler_context().session.schedule(
        f"reminder:{ctx.call_id}", delay=f"{ctx.args.delay_seconds}s",
        message=f"Reminder: {ctx.args.reminder}")
    return {"scheduled": True}


def test_a_committed_turn_leaves_one_schedule_whose_input_wakes_the_session_once(
        client: Any) -> None:
    timers = EventBridgeScheduler(WAKE_ARN, ROLE_ARN, group_name=GROUP, client=client)
    app = dormant.App(name="timers", scheduler=timers)
    tool = app.tool(name="set_reminder", description="Set a reminder", schema=Reminder,
                    execute=_set_reminder)
    call = {"name": "set_reminder", "args": {"delay_seconds": 90, "reminder": "call Ana"},
            "id": "call_r1"}
    agent = app.agent(name="assistant", tools=[tool], model=ScriptedModel(
        [{"tool_calls": [call]}, "I'll remind you.", "Time to call Ana!"]))

    deleted: list[dict[str, Any]] = []
    client.meta.events.register("provide-client-params.scheduler.DeleteSchedule",
                                lambda params, **_: deleted.append(dict(params)))
    reply = app.handler.rest(agent=agent)(
        {"session_id": "s1", "input": {"message": "remind me in 90s to call Ana"}})
    assert reply.status == "completed" and reply.commit_status == "committed"

    # the tool step's write-ahead armed its lease's wake-up, and the turn's end cancelled it
    (schedule,) = schedules(client)
    assert lease_timer(1) == "dormant.lease.1"
    assert [c["Name"] for c in deleted] == [schedule_name("session_s1", lease_timer(1))]
    assert schedule["Name"] == schedule_name("session_s1", "reminder:call_r1")
    event = json.loads(schedule["Target"]["Input"])  # what Scheduler hands the wake function
    wake = app.handler.wake(agent=agent)
    woke = wake(event)
    again = wake(event)  # at-least-once delivery

    assert woke.status == "completed" and woke.output.text == "Time to call Ana!"
    assert (again.status, again.code) == ("error", "stale_timer")
    session = app.sessions.get("s1")
    assert session is not None
    assert [e.text for e in session.events if e.type == "user"] == [
        "remind me in 90s to call Ana", "Reminder: call Ana"]
    assert session.timers == []
