"""Deprecated: import from :mod:`dormant.schedulers` instead (the same names live there).

Kept so ``from dormant.scheduling import LocalScheduler`` and the like keep working. It only
re-exports :mod:`dormant.schedulers`; nothing in the library imports it. The backends stay
lazy here too: ``EventBridgeScheduler`` (boto3) and ``LocalScheduler`` load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import dormant.schedulers as _schedulers
from dormant.schedulers import (
    MAX_TIMER_NAME,
    RecordingScheduler,
    Scheduler,
    TimerDelivery,
    fire_at_ms,
    hand_over,
    parse_delay,
)

if TYPE_CHECKING:
    from dormant.schedulers import EventBridgeScheduler, LocalScheduler

__all__ = [
    "MAX_TIMER_NAME",
    "EventBridgeScheduler",
    "LocalScheduler",
    "RecordingScheduler",
    "Scheduler",
    "TimerDelivery",
    "fire_at_ms",
    "hand_over",
    "parse_delay",
]


def __getattr__(name: str) -> Any:
    if name in ("EventBridgeScheduler", "LocalScheduler"):
        return getattr(_schedulers, name)
    raise AttributeError(f"module 'dormant.scheduling' has no attribute {name!r}")
