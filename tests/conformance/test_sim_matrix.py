"""The simulator in the whole suite: every pair of inputs with a crash anywhere on memory (and
SQLite, but for two first turns at once: there without a crash), a sample of pairs on
DynamoDB (moto, in process), and random schedules on all three (``test_sim``, in the fast
loop, runs a slice on memory).

Each schedule uses a session of its own on one store, so a store is set up once per test (on
DynamoDB once per pair).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

from dormant.stores import MemoryStore, Store

from .conftest import STORE_FACTORIES
from .sim_world import SETUPS
from .test_sim import (
    RANDOM_SEEDS,
    STALL_SEEDS,
    _quiet,
    every_pair,
    random_seeds,
    strided_schedules,
)

__all__ = ["_quiet"]

#: Pairs run on DynamoDB (moto answers a schedule in 0.2-0.6 s, so a sample): per setup,
#: the races its store calls decide (the conditional writes and the reads they are decided
#: on), every schedule without a crash (a crash anywhere is a fault of no store: memory and
#: SQLite run those, and the random schedules below crash on moto too). Two first turns at
#: once (message and message, message and its redelivery) run on memory and SQLite only.
#: A first turn's pairs, about 500 schedules each (a tool step writes ahead), are sampled:
#: every :data:`DYNAMODB_STRIDE`-th schedule of the walk.
DYNAMODB_PAIRS = {
    "fresh": [("message", "stop"), ("message", "pause")],
    "waiting": [("answer", "approve"), ("approve", "deny"), ("send_now", "approve"),
                ("message", "interrupt"), ("timer", "deferred")],
    "failed": [("retry", "retry"), ("retry", "interrupt"), ("redelivered", "retry")],
}
DYNAMODB_STRIDE = {"fresh": 4}


@pytest.fixture
def sqlite() -> Iterator[Store]:
    yield from STORE_FACTORIES["sqlite"][1]()


@contextlib.contextmanager
def _dynamodb() -> Iterator[Store]:
    """A fresh table on moto: each pair gets its own, as moto copies the whole table for
    every transaction it runs (a table that kept growing slowed each schedule down)."""
    made = STORE_FACTORIES["dynamodb-moto"][1]()
    try:
        yield next(made)
    finally:
        next(made, None)


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_every_pair_with_a_crash_anywhere_on_memory(setup: str, record_property: Any) -> None:
    started = time.monotonic()
    runs, failures = every_pair(MemoryStore(), setup)
    record_property("sim", f"pairs on memory/{setup}, a crash anywhere: {runs} schedules in "
                           f"{time.monotonic() - started:.1f} s")
    assert runs > 2000
    assert not failures, "\n\n".join(failures)


def test_more_random_schedules_on_memory(record_property: Any) -> None:
    seeds = range(RANDOM_SEEDS, RANDOM_SEEDS + 3000)
    started = time.monotonic()
    failures = random_seeds(MemoryStore(), seeds)
    record_property("sim", f"random on memory: {len(seeds)} more seeds in "
                           f"{time.monotonic() - started:.1f} s")
    assert not failures, "\n\n".join(failures)


def test_more_random_schedules_with_stalls_on_memory(record_property: Any) -> None:
    seeds = range(STALL_SEEDS, STALL_SEEDS + 3000)
    started = time.monotonic()
    failures = random_seeds(MemoryStore(), seeds, stalls=True)
    record_property("sim", f"random with stalls on memory: {len(seeds)} more seeds in "
                           f"{time.monotonic() - started:.1f} s")
    assert not failures, "\n\n".join(failures)


#: Crashes per pair schedule on SQLite, by setup. Two first turns at once with a crash
#: anywhere (every tool step writes ahead: about 94,000 schedules, 9 minutes on memory) run
#: on memory only; on SQLite the fresh pairs run every schedule without a crash, and its
#: crashes come from the random schedules below.
SQLITE_CRASHES = {"fresh": 0, "waiting": 1, "failed": 1}


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_every_pair_on_sqlite(sqlite: Store, setup: str,
                              record_property: Any) -> None:
    started = time.monotonic()
    crashes = SQLITE_CRASHES[setup]
    runs, failures = every_pair(sqlite, setup, crashes=crashes)
    record_property("sim", f"pairs on sqlite/{setup}, "
                           f"{'a crash anywhere' if crashes else 'no crash'}: {runs} schedules "
                           f"in {time.monotonic() - started:.1f} s")
    assert not failures, "\n\n".join(failures)


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_a_sample_of_pairs_on_dynamodb(setup: str, record_property: Any) -> None:
    started, runs, failures = time.monotonic(), 0, []
    every = DYNAMODB_STRIDE.get(setup, 1)
    for kinds in DYNAMODB_PAIRS[setup]:
        with _dynamodb() as dynamodb:
            schedules = strided_schedules(dynamodb, setup, list(kinds), every=every)
            for choices, broken, description in schedules:
                runs += 1
                if broken:
                    failures.append(f"--sim-seed={setup}/{','.join(kinds)}/"
                                    f"{'.'.join(map(str, choices))}\n  "
                                    + "\n  ".join(broken) + "\n" + description)
                    break
    record_property("sim", f"pairs on dynamodb-moto/{setup}"
                           f"{f', every {every}th' if every > 1 else ''}: {runs} schedules in "
                           f"{time.monotonic() - started:.1f} s")
    assert runs >= 5 * len(DYNAMODB_PAIRS[setup])
    assert not failures, "\n\n".join(failures)


@pytest.mark.parametrize("store_name", ["sqlite", "dynamodb-moto"])
def test_random_schedules_on_the_other_stores(store_name: str,
                                              record_property: Any) -> None:
    seeds = range(10_000, 10_400 if store_name == "sqlite" else 10_060)
    started = time.monotonic()
    with pytest.MonkeyPatch.context():
        store_gen = STORE_FACTORIES[store_name][1]()
        store = next(store_gen)
        try:
            failures = random_seeds(store, seeds)
        finally:
            next(store_gen, None)
    record_property("sim", f"random on {store_name}: {len(seeds)} seeds in "
              f"{time.monotonic() - started:.1f} s")
    assert not failures, "\n\n".join(failures)
