"""The simulator over an agent used as a tool: a session waiting on an approval asked by a
sub-agent (``sim_world.SUBAGENT_SETUPS``), with the pairs of inputs that race over it under
every schedule of their store calls (a crash anywhere, on memory), and random schedules of any
inputs with crashes and with stalls. The invariants are the simulator's
(docs/guarantees.md): a tool that ran (the sub-agent's too) has exactly one result, no
answered input is silently dropped, every invocation ends once, nobody is left waiting, the
ledger folds to the stored head.
"""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from dormant.stores import MemoryStore

from .sim_engine import Random
from .sim_world import INPUTS, SUBAGENT_SETUPS, check, describe, forget, run_schedule
from .test_sim import STALL_RATE, _quiet, pair_schedules

__all__ = ["_quiet"]

#: Random schedules per run over each sub-agent setup (with crashes, then with stalls).
SUB_SEEDS = 200


#: The races over a sub-agent's approval, each under every schedule with a crash anywhere:
#: two decisions, a decision and a stop, a decision and an empty request (the takeover once
#: a crash left it running).
PAIRS = [("approve", "approve"), ("approve", "deny"), ("approve", "stop"),
         ("approve", "nudge")]


@pytest.mark.parametrize("setup", sorted(SUBAGENT_SETUPS))
def test_the_races_over_a_sub_agents_approval_keep_the_invariants(
        setup: str, record_property: Any) -> None:
    started = time.monotonic()
    runs, failures = 0, []
    for first, second in PAIRS:
        for choices, broken, description in pair_schedules(MemoryStore(), setup,
                                                           [first, second]):
            runs += 1
            if broken:
                replay = f"{setup}/{first},{second}/{'.'.join(map(str, choices))}"
                failures.append(f"--sim-seed={replay}\n  " + "\n  ".join(broken)
                                + "\n" + description)
                break
    record_property("sim", f"sub-agent pairs on memory/{setup}, a crash anywhere: {runs} "
                           f"schedules in {time.monotonic() - started:.1f} s")
    assert runs > 500
    assert not failures, "\n\n".join(failures)


@pytest.mark.parametrize("stalls", [False, True], ids=["crashes", "stalls"])
@pytest.mark.parametrize("setup", sorted(SUBAGENT_SETUPS))
def test_random_schedules_over_a_sub_agents_approval_keep_the_invariants(
        setup: str, stalls: bool) -> None:
    store = MemoryStore()
    failures = []
    for seed in range(SUB_SEEDS):
        rng = random.Random(seed)
        kinds = [rng.choice(INPUTS) for _ in range(rng.randint(3, 6))]
        outcome = run_schedule(store, setup, kinds, Random(
            seed, crash_rate=0.05, stall_rate=STALL_RATE if stalls else 0.0))
        broken = check(outcome)
        if broken:
            failures.append(f"seed {seed} ({', '.join(kinds)}):\n  " + "\n  ".join(broken)
                            + "\n" + describe(outcome))
        forget(outcome)
    assert not failures, "\n\n".join(failures[:3])
