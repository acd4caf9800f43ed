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

Honest scheduling. :meth:`EventBridgeScheduler.check` runs when a turn asks for a timer,
before anything is committed: it validates the ``CreateSchedule`` request offline (botocore's
own parameter rules for the API, the role ARN's pattern, ``max_delay``), so a timer
EventBridge would reject for good is refused to the tool that asked (an error result), never
reported as set. After the commit, :meth:`~EventBridgeScheduler.set` creates the schedule; a
refusal for good (``ValidationException``, access denied, a missing group, a quota) raises
``SchedulerError(retryable=False)`` and is not retried, while throttling, server errors and
timeouts are retried with the same schedule name and time (``ConflictException`` on a
retried create means the first attempt landed: the schedule is updated to the same values).
"""

from __future__ import annotations

import functools
import hashlib
import re
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from dormant.errors import ConfigError, SchedulerError, TimerRefused
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
#: Error codes EventBridge Scheduler returns for a request that can never succeed as sent.
DETERMINISTIC = frozenset({"ValidationException", "AccessDeniedException",
                           "ResourceNotFoundException", "ServiceQuotaExceededException"})
_ROLE_ARN = re.compile(r"arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+")
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
                 clock: Callable[[], int] | None = None,
                 max_delay: timedelta | None = None) -> None:
        if not target_arn or not role_arn:
            raise ConfigError("EventBridgeScheduler needs the wake target's ARN and the role "
                              "EventBridge Scheduler assumes to invoke it")
        self.target_arn = target_arn
        self.role_arn = role_arn
        self.group_name = group_name
        self.dead_letter_arn = dead_letter_arn
        self.retry = dict(retry) if retry is not None else None
        self.min_lead_seconds = min_lead_seconds
        #: The furthest ahead a timer may be set (None: no limit of dormant's own): a timer
        #: beyond it is refused when asked for (:meth:`check`).
        self.max_delay = max_delay
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
        """The ``scheduler`` client (built on first use: nothing at cold start)."""
        if self._client is None:
            from dormant._clients import aws_client

            self._client = aws_client("scheduler",
                                      retries={"mode": "standard", "max_attempts": 5})
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

    def check(self, delivery: TimerDelivery) -> None:
        """Refuse (:class:`~dormant.errors.TimerRefused`) a timer EventBridge Scheduler would
        reject for good, before it is recorded: a time beyond :attr:`max_delay`, a request
        that breaks the API's parameter rules (botocore's model, offline: no AWS call), a role
        ARN that is not one."""
        now = self._clock()
        if self.max_delay is not None and \
                delivery.fire_at - now > self.max_delay.total_seconds() * 1000:
            raise TimerRefused(
                f"timer {delivery.name!r} was not set: it is due "
                f"{(delivery.fire_at - now) / 1000:.0f}s from now, beyond this scheduler's "
                f"limit of {self.max_delay.total_seconds():.0f}s")
        try:
            params = self.request(delivery)
        except (OverflowError, OSError, ValueError) as error:  # a time datetime cannot hold
            raise TimerRefused(f"timer {delivery.name!r} was not set: its time cannot be "
                               f"scheduled ({error})") from error
        if not _ROLE_ARN.fullmatch(self.role_arn):
            raise TimerRefused(f"timer {delivery.name!r} was not set: the scheduler's role "
                               f"{self.role_arn!r} is not an IAM role ARN")
        problems = _param_problems(params)
        if problems:
            raise TimerRefused(f"timer {delivery.name!r} was not set: EventBridge Scheduler "
                               f"would reject it ({problems})")

    def set(self, delivery: TimerDelivery) -> None:
        """Create the timer's schedule, or update it if the name exists (converges).

        Raises :class:`~dormant.errors.SchedulerError`: ``retryable=False`` for a refusal for
        good (:data:`DETERMINISTIC` codes, bad parameters), True for anything else
        (throttling, server errors, timeouts), which the hand-over retries as it is."""
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
                f"(schedule {params['Name']} in group {self.group_name}): {error}",
                retryable=not _deterministic(error)) from error

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


def _deterministic(error: Exception) -> bool:
    """Whether a failed call can never succeed as sent (not worth the same call again)."""
    if type(error).__name__ == "ParamValidationError":
        return True
    response = getattr(error, "response", None)
    code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
    return code in DETERMINISTIC


@functools.cache
def _create_shape() -> Any:
    import botocore.session

    model = botocore.session.get_session().get_service_model("scheduler")
    return model.operation_model("CreateSchedule").input_shape


def _param_problems(params: dict[str, Any]) -> str:
    """What the API model of ``CreateSchedule`` finds wrong ('' if nothing): botocore's own
    client-side checks (types, required members, minimum lengths) and the maximum lengths and
    patterns the service enforces, read from the same model."""
    from botocore.validate import ParamValidator

    shape = _create_shape()
    report = ParamValidator().validate(params, shape)
    problems = [report.generate_report()] if report.has_errors() else []
    problems += _limits(params, shape, "")
    return "; ".join(problems)


def _limits(value: Any, shape: Any, where: str) -> list[str]:
    """Maximum lengths and patterns of the string members of ``value`` (botocore checks
    neither: the service does, with a ``ValidationException``)."""
    problems: list[str] = []
    if shape.type_name == "structure" and isinstance(value, dict):
        for name, member in shape.members.items():
            if name in value:
                problems += _limits(value[name], member, f"{where}.{name}" if where else name)
    elif shape.type_name == "string" and isinstance(value, str):
        limit = shape.metadata.get("max")
        if limit is not None and len(value) > limit:
            problems.append(f"{where}: longer than {limit} characters")
        pattern = shape.metadata.get("pattern")
        if pattern is not None and re.fullmatch(pattern, value, re.DOTALL) is None:
            problems.append(f"{where}: does not match {pattern}")
    return problems
