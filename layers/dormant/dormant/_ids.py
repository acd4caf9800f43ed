"""Ids and clocks: small, fast, and in one place."""

from __future__ import annotations

import os
import time

__all__ = ["new_id", "now_ms"]


def new_id(prefix: str) -> str:
    """A random id such as ``call_3f9a0c1d2e4b5a69`` (64 random bits: unique per session)."""
    return f"{prefix}_{os.urandom(8).hex()}"


def now_ms() -> int:
    """Wall-clock time in epoch milliseconds (the ledger's timestamp unit)."""
    return time.time_ns() // 1_000_000
