"""An app clock a test moves, and the death of a process mid-turn, for tests of leases and
takeovers."""

from __future__ import annotations

__all__ = ["Clock", "Killed"]


class Killed(BaseException):
    """The process dies mid-turn: not an ``Exception``, so no handler catches it."""


class Clock:
    """The app's clock (epoch ms): ticks 1 ms per read; ``advance`` jumps ahead."""

    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        self.now += 1
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += int(seconds * 1000)
