"""The ordinary turn's fast path changes nothing but its speed: the same runs with it forced
off and forced on write the same ledgers, byte for byte.

- every pair of the simulator's inputs on every setup, under every schedule of their store
  calls (``test_sim``'s exhaustive pairs), each schedule run with the fast path off and on;
- the golden ledgers' scripts (``tests/fixtures/make_ledgers.py``) through the test kit;
- the conformance suite's fast loop, run three times (off, off again, on) with every ledger
  its tests write captured (``_capture``): times and random ids taken out, each test's
  ledgers must be the same (races aside, which are told apart by running them again).

The simulator's and the scripts' runs start as a fresh process would, on a clock that moves
only when read: ids minted from one seed (:func:`dormant._ids.restart`) and the wall clock
a counter, so two runs of the same schedule mint the same ids and stamps, byte for byte.
"""

from __future__ import annotations

import difflib
import itertools
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import dormant._ids
import dormant._run.loop as loop
from dormant.stores import MemoryStore
from dormant.testing import run_test
from tests.fixtures.make_ledgers import cases

from . import sim_world
from ._capture import ENV, canonical
from .sim_engine import Exhaustive
from .sim_world import INPUTS, SETUPS, check, forget, run_schedule

pytestmark = pytest.mark.slow  # every schedule twice: the whole suite's (test_sim runs one)

ROOT = Path(__file__).resolve().parents[2]


class _Wall:
    """``time`` as :mod:`dormant._ids` reads it: ``time_ns`` a millisecond later each read."""

    def __init__(self) -> None:
        self.ns = 1_800_000_000_000 * 1_000_000

    def time_ns(self) -> int:
        self.ns += 1_000_000
        return self.ns


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[bool], None]]:
    """Restart ids, births, the wall clock and the simulator's session serials, then set
    the fast path: call it before each run."""
    logging.disable(logging.CRITICAL)  # (every refusal and lost race is logged)

    def restart(fast: bool) -> None:
        dormant._ids.restart("0" * 16)
        monkeypatch.setattr(dormant._ids, "time", _Wall())
        monkeypatch.setattr(sim_world, "_serials", itertools.count(1))
        monkeypatch.setattr(loop, "FAST_PATH", fast)

    yield restart
    logging.disable(logging.NOTSET)


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """How many turns the fast path took (and how many it was asked about)."""
    counter = Counter()
    decide = loop.ordinary

    def counted(run: Any, start: Any) -> bool:
        chosen = decide(run, start)
        counter.asked += 1
        counter.taken += chosen
        return chosen

    monkeypatch.setattr(loop, "ordinary", counted)
    return counter


class Counter:
    asked = 0
    taken = 0


def _schedules(setup: str, kinds: list[str], restart: Callable[[bool], None], fast: bool
               ) -> list[list[str]]:
    """Every schedule of ``kinds`` on ``setup`` without a crash: each one's ledger, dumped
    event by event (and its broken invariants, if any, as its last line)."""
    explorer = Exhaustive(crashes=0)
    ledgers: list[list[str]] = []
    while True:
        explorer.reset()
        restart(fast)
        outcome = run_schedule(MemoryStore(), setup, kinds, explorer)
        session = outcome.world.app.sessions.get(outcome.world.session_id)
        dumped = [event.model_dump_json() for event in session.events] if session else []
        ledgers.append(dumped + [f"broken: {broken}" for broken in check(outcome)])
        forget(outcome)
        if not explorer.advance():
            return ledgers


def _differ(off: list[list[str]], on: list[list[str]]) -> str:
    """Where two runs' ledgers first differ, as a diff ('' when they do not)."""
    if len(off) != len(on):
        return f"{len(off)} schedules with the fast path off, {len(on)} with it on"
    for index, (a, b) in enumerate(zip(off, on, strict=True)):
        if a != b:
            diff = difflib.unified_diff(a, b, "fast path off", "fast path on", lineterm="")
            return f"schedule {index}:\n" + "\n".join(itertools.islice(diff, 40))
    return ""


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_every_pair_writes_the_same_ledgers_with_the_fast_path_off_and_on(
        setup: str, fresh: Callable[[bool], None], taken: Counter,
        record_property: Any) -> None:
    runs, failures = 0, []
    for i, first in enumerate(INPUTS):
        for second in INPUTS[i:]:
            kinds = [first, second]
            before = taken.taken
            off = _schedules(setup, kinds, fresh, fast=False)
            assert taken.taken == before  # (off is off)
            on = _schedules(setup, kinds, fresh, fast=True)
            runs += len(on)
            differ = _differ(off, on)
            if differ:
                failures.append(f"{setup}/{first},{second}: {differ}")
            failures += [f"{setup}/{first},{second}: {line}" for ledger in on
                         for line in ledger if line.startswith("broken: ")][:1]
    record_property("sim", f"pairs on memory/{setup}, fast path off and on: {runs} schedules "
                           f"each, {taken.taken} of {taken.asked} turns took it")
    assert runs > 500
    assert taken.taken > 0, "no turn took the fast path: the comparison compared nothing"
    assert not failures, "\n\n".join(failures)


def test_the_golden_ledgers_scripts_write_the_same_ledgers_with_the_fast_path_off_and_on(
        fresh: Callable[[bool], None], taken: Counter) -> None:
    def ledgers(fast: bool) -> dict[str, list[str]]:
        written = {}
        for name, (agent, steps) in cases().items():
            restart = fresh
            restart(fast)
            result = run_test(agent, steps)
            written[name] = [event.model_dump_json() for event in result.events]
        return written

    off = ledgers(False)
    on = ledgers(True)
    assert taken.taken > 0
    for name in off:
        assert off[name] == on[name], f"{name}: " + _differ([off[name]], [on[name]])


def test_a_changed_ledger_is_told_apart() -> None:
    """The comparison can fail: one event's difference is found and shown."""
    same = [['{"type":"user"}', '{"type":"invocation_end"}']]
    changed = [['{"type":"user"}', '{"type":"invocation_end","status":"error"}']]
    assert _differ(same, same) == ""
    assert "status" in _differ(same, changed)
    assert "schedules" in _differ(same, same * 2)


#: The conformance suite's fast loop, less the simulator's runs (compared above, schedule by
#: schedule) and this module.
SUITE = ["tests/conformance", "-m", "not slow", "-k", "not sim and not fast_path"]
#: How often a test whose ledgers differ between the two paths runs again on each.
AGAIN = 4


def _suite(folder: Path, fast: bool, *args: str) -> dict[str, tuple[str, str]]:
    """Run conformance tests (``args``: which; the suite's fast loop by default) with the
    fast path ``fast``, their ledgers captured: {file: (test id, canonical ledgers)}."""
    folder.mkdir()
    env = {**os.environ, ENV: str(folder), "DORMANT_FAST_PATH": "1" if fast else "0"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         *(["-n", "0", *args] if args else ["-n", "2", *SUITE])],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, f"the conformance suite failed with the fast path " \
                                 f"{'on' if fast else 'off'}:\n{done.stdout[-3000:]}"
    captured = {}
    for path in folder.glob("*.json"):
        found = json.loads(path.read_text())
        captured[path.name] = (found["test"], canonical(found["landed"]))
    return captured


def test_the_conformance_suite_writes_the_same_ledgers_with_the_fast_path_off_and_on(
        tmp_path: Path, record_property: Any) -> None:
    """Every conformance test's ledgers, run with the fast path off, off again and on.

    A test whose two runs with it off already differ runs threads against each other (its
    ledgers depend on who wins); so may one whose ledgers differ only once, by chance. Those
    run again, :data:`AGAIN` times each way: a test with one outcome each way must have the
    same one; a test with several is a race, and not compared."""
    off = _suite(tmp_path / "off", fast=False)
    again = _suite(tmp_path / "off-again", fast=False)
    on = _suite(tmp_path / "on", fast=True)
    assert off.keys() == again.keys() == on.keys()
    differ = sorted(off[name][0] for name in off if not off[name][1] == again[name][1]
                    == on[name][1])
    races, wrong = [], []
    if differ:
        outcomes: dict[bool, dict[str, set[str]]] = {False: {}, True: {}}
        for run in range(AGAIN):
            for fast in (False, True):
                folder = tmp_path / f"again-{run}-{'on' if fast else 'off'}"
                for test, ledgers in _suite(folder, fast, *differ).values():
                    outcomes[fast].setdefault(test, set()).add(ledgers)
        for test in differ:
            seen_off, seen_on = outcomes[False][test], outcomes[True][test]
            if len(seen_off) > 1 or len(seen_on) > 1:
                races.append(test)
            elif seen_off != seen_on:
                wrong.append(test)
    compared = [name for name, (test, ledgers) in off.items()
                if test not in races and ledgers != "[]"]
    record_property("sim", f"conformance suite, fast path off and on: {len(compared)} tests' "
                           f"ledgers compared, {len(races)} races left out: {races}")
    assert len(compared) > 400, "the capture found too few ledgers: it captured nothing?"
    assert not wrong, f"these tests write other ledgers with the fast path on: {wrong}"
