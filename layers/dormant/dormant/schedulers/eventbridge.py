"""Timers on Amazon EventBridge Scheduler: one one-time schedule per (session, timer name).

``set`` creates a schedule ``at(<fire time>)`` in UTC whose target is the wake function and
whose target input is the :class:`~dormant.schedulers.TimerDelivery` JSON: EventBridge
Scheduler passes that input to a Lambda target as the event, so the wake function receives
the delivery itself. The schedule deletes itself after it fires (``ActionAfterCompletion``
``DELETE``). The schedule name is derived from the session id and the timer name, so setting
the same timer again finds the same schedule and updates it (one timer, not two), and
cancelling deletes it (a schedule that already fired and deleted itself is not an error).

Times. ``at()`` has one-second resolution and EventBridge Scheduler fires within the minute it
names (60-second precision). A one-time schedule whose time has passed is not something to rely
on, so a timer due sooner than :data:`MIN_LEAD_SECONDS` from now is scheduled that far ahead
(never earlier than asked); the delivery keeps the timer's own ``fireAt``, which is what
identifies the firing to the wake path.

Delivery is at least once; the wake path refuses a firing it has already delivered (code
``stale_timer``), so a duplicate changes nothing.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from dormant.errors import ConfigError, SchedulerError
from dormant.schedulers._base import TimerDelivery

if TYPE_CHECKING:
    from dormant.settings import Settings

__all__ = ["DEFAULT_RETRY", "MIN_LEAD_SECONDS", "EventBridgeScheduler", "at_expression",
           "schedule_name"]

#: EventBridge Scheduler's own defaults: up to 185 retries within 24 hours, then the DLQ.
DEFAULT_RETRY: Mapping[str, int] = {"MaximumRetryAttempts": 185,
                                    "MaximumEventAgeInSeconds": 86_400}
#: The earliest a schedule is set for, from now (a timer already due fires about this late).
MIN_LEAD_SECONDS = 60
#: EventBridge Scheduler's schedule names: 1-64 characters of ``[0-9a-zA-Z-_.]``.
MAX_NAME = 64
_HASH_CHARS = 24  # 96 bits of sha256: distinct (session, timer) pairs never share a name
_UNSAFE = re.compile(r"[^0-9A-Za-z_.-]+")


def schedule_name(session_id: str, name: str) -> str:
    """The schedule's name for a session's timer: a readable prefix and a hash of both.

    Deterministic (the same timer always maps to the same schedule), at most 64 characters
    of ``[0-9a-zA-Z-_.]`` whatever the ids contain."""
    digest = hashlib.sha256(f"{session_id}\x00{name}".encode()).hexdigest()[:_HASH_CHARS]
    short_session = session_id.removeprefix("session_")
    readable = _UNSAFE.sub("_", f"{short_session}.{name}")
    room = MAX_NAME - _HASH_CHARS - 1
    return f"{readable[:room]}-{digest}"


def at_expression(fire_at_ms: int, *, now_ms: int,
                  min_lead_seconds: int = MIN_LEAD_SECONDS) -> str:
    """``at(yyyy-mm-ddThh:mm:ss)`` in UTC for a fire time, never sooner than the minimum lead
    from now (rounded up to the second: a timer never fires before it is due)."""
    seconds = max(-(-fire_at_ms // 1000), -(-now_ms // 1000) + min_lead_seconds)
    return f"at({datetime.fromtimestamp(seconds, UTC).strftime('%Y-%m-%dT%H:%M:%S')})"


class EventBridgeScheduler:
    """A :class:`~dormant.schedulers.Scheduler` on EventBridge Scheduler (one-time schedules).

    ``target_arn`` is the wake function's ARN, ``role_arn`` the role EventBridge Scheduler
    assumes to invoke it (the caller needs ``iam:PassRole`` on it), ``group_name`` the schedule
    group. ``dead_letter_arn`` (an SQS queue) receives deliveries Scheduler could not make
    after ``retry`` (``MaximumRetryAttempts`` / ``MaximumEventAgeInSeconds``). ``client`` is a
    boto3 ``scheduler`` client (built on first use when None); ``clock`` gives epoch ms.
    """

    def __init__(self, target_arn: str, role_arn: str, *, group_name: str = "default",
                 client: Any = None, dead_letter_arn: str | None = None,
                 retry: Mapping[str, int] | None = DEFAULT_RETRY,
                 min_lead_seconds: int = MIN_LEAD_SECONDS,
                 clock: Callable[[], int] | None = None) -> None:
        if not target_arn or not role_arn:
            raise ConfigError("EventBridgeScheduler needs the wake target's ARN and the role "
                              "EventBridge Scheduler assumes to invoke it")
        self.target_arn = target_arn
        self.role_arn = role_arn
        self.group_name = group_name
        self.dead_letter_arn = dead_letter_arn
        self.retry = dict(retry) if retry is not None else None
        self.min_lead_seconds = min_lead_seconds
        self._client = client
        self._clock = clock or (lambda: int(time.time() * 1000))

    @classmethod
    def from_settings(cls, settings: Settings, *, client: Any = None) -> EventBridgeScheduler:
        """From ``DORMANT_WAKE_TARGET_ARN``, ``DORMANT_SCHEDULER_ROLE_ARN``,
        ``DORMANT_SCHEDULE_GROUP`` and ``DORMANT_SCHEDULE_DLQ_ARN`` (see ``Settings``)."""
        if not settings.wake_target_arn or not settings.scheduler_role_arn:
            raise ConfigError("EventBridgeScheduler.from_settings needs DORMANT_WAKE_TARGET_ARN "
                              "and DORMANT_SCHEDULER_ROLE_ARN")
        return cls(settings.wake_target_arn, settings.scheduler_role_arn,
                   group_name=settings.schedule_group or "default", client=client,
                   dead_letter_arn=settings.schedule_dlq_arn)

    @property
    def client(self) -> Any:
        """The boto3 ``scheduler`` client (built on first use: nothing at cold start)."""
        if self._client is None:
            import boto3
            from botocore.config import Config

            self._client = boto3.client("scheduler", config=Config(
                retries={"mode": "standard", "max_attempts": 5}))
        return self._client

    def schedule_name(self, session_id: str, name: str) -> str:
        """The name of the schedule that holds this session's timer."""
        return schedule_name(session_id, name)

    def request(self, delivery: TimerDelivery) -> dict[str, Any]:
        """The ``CreateSchedule`` / ``UpdateSchedule`` parameters for a delivery."""
        target: dict[str, Any] = {
            "Arn": self.target_arn,
            "RoleArn": self.role_arn,
            "Input": delivery.model_dump_json(by_alias=True, exclude_none=True),
        }
        if self.retry is not None:
            target["RetryPolicy"] = self.retry
        if self.dead_letter_arn:
            target["DeadLetterConfig"] = {"Arn": self.dead_letter_arn}
        return {
            "Name": self.schedule_name(delivery.session_id, delivery.name),
            "GroupName": self.group_name,
            "ScheduleExpression": at_expression(delivery.fire_at, now_ms=self._clock(),
                                                min_lead_seconds=self.min_lead_seconds),
            "ScheduleExpressionTimezone": "UTC",
            "FlexibleTimeWindow": {"Mode": "OFF"},
            "ActionAfterCompletion": "DELETE",
            "Description": f"dormant timer {delivery.name[:200]} of {delivery.session_id}"[:512],
            "Target": target,
        }

    def set(self, delivery: TimerDelivery) -> None:
        """Create the timer's schedule, or update it if the name exists (converges)."""
        params = self.request(delivery)
        errors = self.client.exceptions
        try:
            try:
                self.client.create_schedule(**params)
            except errors.ConflictException:
                try:
                    self.client.update_schedule(**params)
                except errors.ResourceNotFoundException:  # it fired and deleted itself meanwhile
                    self.client.create_schedule(**params)
        except Exception as error:
            raise SchedulerError(
                f"could not set timer {delivery.name!r} of session {delivery.session_id} "
                f"(schedule {params['Name']} in group {self.group_name}): {error}") from error

    def cancel(self, session_id: str, name: str) -> None:
        """Delete the timer's schedule; one that is gone (fired, cancelled) is not an error."""
        schedule = self.schedule_name(session_id, name)
        try:
            self.client.delete_schedule(Name=schedule, GroupName=self.group_name)
        except self.client.exceptions.ResourceNotFoundException:
            return
        except Exception as error:
            raise SchedulerError(
                f"could not cancel timer {name!r} of session {session_id} (schedule "
                f"{schedule} in group {self.group_name}): {error}") from error
