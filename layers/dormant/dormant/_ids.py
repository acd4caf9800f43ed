"""Ids and clocks: small, fast, and in one place."""

from __future__ import annotations

import itertools
import os
import threading
import time

__all__ = ["birth_ms", "new_id", "now_ms", "register_snapshot_restore_hook", "restart"]

# 64 random bits per process plus a counter: unique across processes, cheap per id (the
# turn path mints about ten). Re-seeded in a forked child so parent and child never collide,
# and after a Lambda SnapStart restore: every environment restored from one snapshot would
# otherwise start from the snapshot's seed and counter and mint the same ids.
_seed = os.urandom(8).hex()
_counter = itertools.count(1)


def _reseed() -> None:
    global _seed, _counter
    _seed = os.urandom(8).hex()
    _counter = itertools.count(1)


def restart(seed: str) -> None:
    """Mint ids from ``seed`` and stamp births from nothing, as a fresh process whose random
    bits were ``seed`` would: two runs of one script restarted alike mint the same ids (the
    tests that compare two runs' ledgers byte for byte; never the library)."""
    global _seed, _counter
    _seed = seed
    _counter = itertools.count(1)
    _births[0] = 0


def register_snapshot_restore_hook() -> bool:
    """Re-seed after a SnapStart restore, through the Lambda runtime's ``snapshot_restore_py``
    (``register_after_restore``); True if registered. Elsewhere the module does not exist and
    nothing happens. Called once, at import."""
    try:
        from snapshot_restore_py import register_after_restore
    except ImportError:
        return False
    register_after_restore(_reseed)
    return True


os.register_at_fork(after_in_child=_reseed)
register_snapshot_restore_hook()


def new_id(prefix: str) -> str:
    """A unique id such as ``call_3f9a0c1d2e4b5a69_1f``."""
    return f"{prefix}_{_seed}_{next(_counter):x}"


def now_ms() -> int:
    """Wall-clock time in epoch milliseconds (the ledger's timestamp unit)."""
    return time.time_ns() // 1_000_000


_births = [0]
_births_lock = threading.Lock()


def birth_ms() -> int:
    """:func:`now_ms` for a new session's ``created_at``, never the same twice in this
    process: it names the session's incarnation (a session deleted and made again under its
    id is another one, and a write made on the first is refused on the second), so two
    sessions made under one id within a millisecond (two first requests racing, one of them
    landing after a delete) must not share it."""
    with _births_lock:
        _births[0] = stamp = max(now_ms(), _births[0] + 1)
    return stamp


#: This process's boot id: a claim names the process that holds it (``Head.holder``), so a
#: process that is the only one serving its store (``dormant dev``) knows a claim another
#: boot holds is dead, without waiting for its lease. Its own random bits, not a
#: :func:`new_id`: the ids a process mints count from 1, as its first turn's show.
BOOT = "boot_" + os.urandom(8).hex()
