"""Ids and clocks: small, fast, and in one place."""

from __future__ import annotations

import itertools
import os
import time

__all__ = ["new_id", "now_ms"]

# 64 random bits per process plus a counter: unique across processes, cheap per id (the
# turn path mints about ten). Re-seeded in a forked child so parent and child never collide.
_seed = os.urandom(8).hex()
_counter = itertools.count(1)


def _reseed() -> None:
    global _seed, _counter
    _seed = os.urandom(8).hex()
    _counter = itertools.count(1)


os.register_at_fork(after_in_child=_reseed)


def new_id(prefix: str) -> str:
    """A unique id such as ``call_3f9a0c1d2e4b5a69_1f``."""
    return f"{prefix}_{_seed}_{next(_counter):x}"


def now_ms() -> int:
    """Wall-clock time in epoch milliseconds (the ledger's timestamp unit)."""
    return time.time_ns() // 1_000_000
