"""Timers: one :class:`Scheduler` protocol, several backends.

The protocol, :class:`TimerDelivery`, :class:`RecordingScheduler` and the helpers sessions and
handlers use (``hand_over``, ``fire_at_ms``, ``parse_delay``) are importable at no cost. The
backends are imported on first use so the Lambda import path loads only its own:
``LocalScheduler`` (a thread, for ``dormant dev``) and ``EventBridgeScheduler`` (AWS, boto3).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dormant.schedulers._base import (
    LEASE_GRACE_MS,
    LEASE_TIMER,
    MAX_TIMER_NAME,
    RecordingScheduler,
    Scheduler,
    TimerDelivery,
    check_timer,
    fire_at_ms,
    hand_over,
    is_lease_timer,
    lease_timer,
    parse_delay,
)

if TYPE_CHECKING:
    from dormant.schedulers.eventbridge import EventBridgeScheduler
    from dormant.schedulers.local import LocalScheduler

__all__ = [
    "LEASE_GRACE_MS",
    "LEASE_TIMER",
    "MAX_TIMER_NAME",
    "EventBridgeScheduler",
    "LocalScheduler",
    "RecordingScheduler",
    "Scheduler",
    "TimerDelivery",
    "check_timer",
    "fire_at_ms",
    "hand_over",
    "is_lease_timer",
    "lease_timer",
    "parse_delay",
]


def __getattr__(name: str) -> Any:
    if name == "EventBridgeScheduler":
        from dormant.schedulers.eventbridge import EventBridgeScheduler

        return EventBridgeScheduler
    if name == "LocalScheduler":
        from dormant.schedulers.local import LocalScheduler

        return LocalScheduler
    raise AttributeError(f"module 'dormant.schedulers' has no attribute {name!r}")
