"""Timers: what a session asks for, and what every scheduler backend shares.

``session.schedule(...)`` records a ``timer_set`` event in the turn's slice; only when that
turn commits does the handler hand the timer to the app's :class:`Scheduler` (an outbox: a
turn that is aborted, superseded or fails never sets a timer). When the timer fires, the
backend delivers a :class:`TimerDelivery` to the wake path (``app.handler.wake`` / the
``wake`` Lambda function), which appends its message or tool input and runs a turn. A
delivery for a timer that was cancelled, replaced or already delivered is refused
(:class:`dormant.errors.StaleTimer`) and changes nothing, so at-least-once delivery is safe.

This module holds the :class:`Scheduler` protocol and what it carries; the backends
(``local``, ``eventbridge``) import from here, and :mod:`dormant.schedulers` re-exports it.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from dormant.errors import InputError, SchedulerError, TimerRefused
from dormant.events import TimerCancelled, TimerSet

__all__ = [
    "MAX_TIMER_NAME",
    "RecordingScheduler",
    "Scheduler",
    "TimerDelivery",
    "check_timer",
    "fire_at_ms",
    "hand_over",
    "parse_delay",
]

MAX_TIMER_NAME = 200
HAND_OVER_ATTEMPTS = 3
HAND_OVER_BACKOFF = 0.05
log = logging.getLogger("dormant.scheduling")
_DELAY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


#: The wake-up timer a claim arms (:mod:`dormant._request`): it fires just after the claim's
#: lease and takes a stranded invocation over (or, the claim long committed, does nothing).
#: It is set outside the session's ledger, so it is not among ``session.timers``. Each claim
#: names its own (:func:`lease_timer`), which its request cancels once the turn it claimed
#: committed; the name alone is a wake-up's too.
LEASE_TIMER = "dormant.lease"
#: Milliseconds past the lease the wake-up timer fires.
LEASE_GRACE_MS = 2_000


def lease_timer(version: int) -> str:
    """The name of the wake-up a claim that landed at ``version`` arms: one per claim, so a
    request cancelling its own never cancels a later claim's."""
    return f"{LEASE_TIMER}.{version}"


def is_lease_timer(name: str) -> bool:
    """Whether ``name`` is a claim's wake-up (:data:`LEASE_TIMER`) rather than a session's
    timer."""
    return name == LEASE_TIMER or name.startswith(f"{LEASE_TIMER}.")


class TimerDelivery(BaseModel):
    """What a fired timer delivers to the wake path (the scheduler's target input)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid",
                              defer_build=True)

    session_id: str = Field(min_length=1)
    name: str = Field(min_length=1, max_length=MAX_TIMER_NAME)
    fire_at: int = Field(description="Epoch milliseconds; identifies this firing.")
    message: str | None = None
    message_id: str | None = None
    tool_input: dict[str, Any] | None = None

    @classmethod
    def of(cls, session_id: str, timer: dict[str, Any]) -> TimerDelivery:
        """The delivery for a timer as the session head keeps it."""
        return cls(session_id=session_id, **timer)


@runtime_checkable
class Scheduler(Protocol):
    """Where committed timers go. Both calls must be idempotent: setting a name again
    replaces that timer; cancelling one that is gone is not an error.

    A backend may also have ``check(delivery)``: called when a turn asks for the timer
    (before anything is committed), it raises :class:`~dormant.errors.TimerRefused` for a
    timer it would reject for good (validation, a time beyond its limit), so the tool that
    asked gets an error instead of a success while nothing will fire. ``set`` raises
    :class:`~dormant.errors.SchedulerError` with ``retryable=False`` for such a refusal and
    ``retryable=True`` (the default) for a transient or ambiguous failure, which the hand-over
    retries with the same timer (same name, same time)."""

    def set(self, delivery: TimerDelivery) -> None: ...

    def cancel(self, session_id: str, name: str) -> None: ...


class RecordingScheduler:
    """Keeps timers in memory and fires nothing: for tests and for apps that poll
    ``due(now)`` themselves."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.timers: dict[tuple[str, str], TimerDelivery] = {}
        self.calls: list[tuple[str, str, str]] = []

    def set(self, delivery: TimerDelivery) -> None:
        with self._lock:
            self.timers[(delivery.session_id, delivery.name)] = delivery
            self.calls.append(("set", delivery.session_id, delivery.name))

    def cancel(self, session_id: str, name: str) -> None:
        with self._lock:
            self.timers.pop((session_id, name), None)
            self.calls.append(("cancel", session_id, name))

    def due(self, now_ms: int) -> list[TimerDelivery]:
        """Timers whose time has come, earliest first (they stay until cancelled)."""
        with self._lock:
            return sorted((t for t in self.timers.values() if t.fire_at <= now_ms),
                          key=lambda t: t.fire_at)


def check_timer(scheduler: Scheduler | None, delivery: TimerDelivery, *,
                in_turn: bool = True) -> None:
    """Whether ``scheduler`` will set ``delivery``: raises :class:`TimerRefused` when its
    ``check`` rejects the timer for good, or when there is no scheduler and the timer is asked
    for in a turn (a tool would be told "set" while nothing fires). Trusted code outside a turn
    may record a timer on an app with no scheduler (it delivers the timer itself, say, from
    ``session.timers``); the hand-over logs that nothing was set."""
    if scheduler is None:
        if not in_turn:
            return
        raise TimerRefused(
            f"timer {delivery.name!r} was not set: this app has no scheduler "
            "(dormant.App(scheduler=...); dormant dev and the AWS functions set one), so "
            "nothing would fire")
    check = getattr(scheduler, "check", None)
    if check is None:
        return
    try:
        check(delivery)
    except TimerRefused:
        raise
    except (SchedulerError, InputError, ValueError) as error:
        raise TimerRefused(f"timer {delivery.name!r} was not set: the scheduler refused it "
                           f"({error})") from error


def hand_over(scheduler: Scheduler | None, session_id: str,
              events: list[TimerSet | TimerCancelled]) -> None:
    """The outbox step: timers of a committed slice go to the scheduler, in ledger order.

    Bounded retries with backoff, each with the same timer (same name and time: setting it is
    idempotent, so a retry after an ambiguous failure converges on one timer); a refusal for
    good (``SchedulerError.retryable`` False) is not retried. A timer that still cannot be
    handed over stays listed in the session (``session.timers``) and is logged."""
    if scheduler is None:
        log.warning("session %s asked for timers but the app has no scheduler: they are "
                    "recorded in the session, not set", session_id)
        return
    for event in events:
        for attempt in range(1, HAND_OVER_ATTEMPTS + 1):
            try:
                if isinstance(event, TimerSet):
                    scheduler.set(TimerDelivery(session_id=session_id, name=event.name,
                                                fire_at=event.fire_at, message=event.message,
                                                message_id=event.message_id,
                                                tool_input=event.tool_input))
                else:
                    scheduler.cancel(session_id, event.name)
                break
            except Exception as error:
                if isinstance(error, SchedulerError) and not error.retryable:
                    log.error("the scheduler refused timer %r of session %s for good (%s); it "
                              "stays listed in the session", event.name, session_id, error)
                    break
                if attempt == HAND_OVER_ATTEMPTS:
                    log.exception("could not hand timer %r of session %s to the scheduler; it "
                                  "stays listed in the session", event.name, session_id)
                else:
                    time.sleep(HAND_OVER_BACKOFF * 2 ** (attempt - 1))


def parse_delay(delay: timedelta | str | float) -> timedelta:
    """``timedelta``, seconds, or text such as ``"90s"``, ``"5m"``, ``"2h"``, ``"1d"``."""
    if isinstance(delay, timedelta):
        seconds = delay.total_seconds()
    elif isinstance(delay, int | float) and not isinstance(delay, bool):
        seconds = float(delay)
    elif isinstance(delay, str) and (match := _DELAY.match(delay)):
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    else:
        raise InputError(f"invalid delay {delay!r}: use a timedelta, seconds, or text like "
                         "'90s', '5m', '2h', '1d'")
    if seconds < 0:
        raise InputError(f"invalid delay {delay!r}: it must not be negative")
    return timedelta(seconds=seconds)


def fire_at_ms(*, at: datetime | None, delay: timedelta | str | float | None,
               now_ms: int) -> int:
    """When a timer fires, from exactly one of ``at`` (aware datetime) and ``delay``."""
    if (at is None) == (delay is None):
        raise InputError("schedule needs exactly one of at= and delay=")
    if at is not None:
        if at.tzinfo is None:
            raise InputError("schedule(at=...) needs a timezone-aware datetime "
                             "(e.g. datetime.now(timezone.utc) + timedelta(days=1))")
        return int(at.astimezone(UTC).timestamp() * 1000)
    assert delay is not None
    return now_ms + int(parse_delay(delay).total_seconds() * 1000)

