"""What every scenario script shares (standard library only: it runs in each peer's venv).

A scenario script is run as ``python bench/peers/<peer>.py SCENARIO PARAMS_JSON`` and prints
one line ``BENCH-JSON {...}``: ``{"figures": {...}}``, or ``{"unsupported": "why"}`` when the
framework has no way to do the scenario. Figures are medians (a scenario may add its
samples' lowest and highest under ``"spread"``, at each figure's own key).
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import sys
import time
import urllib.request
from collections.abc import Callable
from typing import Any

PREFIX = "BENCH-JSON "
#: The message and reply of an ordinary text turn (the same size in every framework).
MESSAGE = "Can you check my booking for the weekend, and the late check-out? " * 2
REPLY = "Your booking is confirmed for Friday and Saturday; late check-out is at 1 pm. " * 2
#: Seconds the model "thinks" in the contention scenario: the window in which eight requests
#: on one session overlap (a real model call takes far longer).
CONTENTION_MODEL_SECONDS = 0.05
SESSION = "bench"

Figures = dict[str, Any]
Scenario = Callable[[dict[str, Any]], Figures]


class Unsupported(Exception):
    """The framework has no way to do this scenario (the message says why, in one line)."""


def samples_us(sample: Callable[[int], float], turns: int, repeats: int) -> list[float]:
    """µs per turn of each of ``repeats`` samples; ``sample(turns)`` returns seconds for that
    many turns (its own set-up excluded)."""
    values = []
    for _ in range(repeats):
        gc.collect()
        values.append(sample(turns) / turns * 1e6)
    return values


def median_us(sample: Callable[[int], float], turns: int, repeats: int) -> float:
    """Median over ``repeats`` samples of µs per turn (see :func:`samples_us`)."""
    return float(statistics.median(samples_us(sample, turns, repeats)))


def spread(values: list[float]) -> list[float]:
    """``[lowest, highest]`` of a figure's samples: shown beside its median, so a figure that
    moves from sample to sample says so."""
    return [min(values), max(values)]


def timed(fn: Callable[[], object], turns: int) -> float:
    """Seconds for ``turns`` calls of ``fn``."""
    start = time.perf_counter()
    for _ in range(turns):
        fn()
    return time.perf_counter() - start


def read_history(texts: list[str]) -> int:
    """What every fake model does with the history it is sent: read all of it."""
    return sum(len(text) for text in texts)


# --- the counting moto server ------------------------------------------------------------------


def endpoint() -> str:
    return os.environ["AWS_ENDPOINT_URL"]


def wire(reset: bool = False) -> dict[str, dict[str, float]]:
    url = f"{endpoint()}/__bench/{'reset' if reset else 'counters'}"
    request = urllib.request.Request(url, method="POST" if reset else "GET")
    with urllib.request.urlopen(request, timeout=30) as answer:
        result: dict[str, dict[str, float]] = json.loads(answer.read())
        return result


def per_turn(counters: dict[str, dict[str, float]], turns: int) -> Figures:
    """A wire snapshot (since the last reset) as figures per turn."""
    def total(name: str) -> float:
        return sum(counters.get(name, {}).values()) / turns

    reads = ("GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems")
    return {
        "requests": total("requests"),
        "requests_by_operation": {op: n / turns for op, n in counters["requests"].items()},
        "write_units": total("write_units"),
        "read_units": total("read_units"),
        "read_bytes": sum(v for op, v in counters["received"].items() if op in reads) / turns,
        "write_bytes": total("sent"),
    }


def dynamodb_checkpoints(turn: Callable[[int], None], checkpoints: list[int],
                         samples: int, seed: Callable[[int], None] | None = None) -> Figures:
    """Run one session's text turns up to each checkpoint; price ``samples`` turns there.
    ``seed``: writes turn n's messages without running the agent (where running hundreds of
    turns would take minutes); the priced turns always run."""
    figures: Figures = {}
    done = 0
    for checkpoint in checkpoints:
        while done < checkpoint - 1:
            done += 1
            (seed or turn)(done)
        wire(reset=True)
        for _ in range(samples):
            done += 1
            turn(done)
        figures[str(checkpoint)] = per_turn(wire(), samples)
    return figures


def contention_outcomes(results: list[str], stored_user_texts: list[str],
                        sent: list[str]) -> Figures:
    """Outcomes of N concurrent turns: each turn reported ``committed``, ``refused`` (the
    framework turned it away, the caller knows) or an error text (``failed``); the store
    then holds the messages that really landed. A committed turn whose message is missing
    was lost; a message stored twice was written twice."""
    committed = refused = lost = failed = 0
    for text, result in zip(sent, results, strict=True):
        if result == "committed":
            if text in stored_user_texts:
                committed += 1
            else:
                lost += 1
        elif result == "refused":
            refused += 1
        else:
            failed += 1
    duplicated = sum(max(0, stored_user_texts.count(text) - 1) for text in sent)
    return {"n": len(sent), "committed": committed, "refused": refused, "lost": lost,
            "failed": failed, "duplicated": duplicated,
            "errors": sorted({r for r in results
                              if r not in ("committed", "refused")})}


def run(scenarios: dict[str, Scenario]) -> None:
    """The command line of a scenario script."""
    name = sys.argv[1]
    params: dict[str, Any] = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    if name == "noop":
        print(PREFIX + json.dumps({"figures": {}}), flush=True)
        return
    if name not in scenarios:
        print(PREFIX + json.dumps({"unsupported": f"no scenario {name!r}"}), flush=True)
        return
    try:
        result: dict[str, Any] = {"figures": scenarios[name](params)}
    except Unsupported as why:
        result = {"unsupported": str(why)}
    print(PREFIX + json.dumps(result), flush=True)


def seeded_once(seed: Callable[[], Any]) -> Callable[[], Any]:
    """``seed`` on the first call, its result again on later ones: the SQLite scenario seeds
    its long session once and takes every sample from it (seeding 1,000 turns on disk per
    sample would take minutes in some frameworks)."""
    made: list[Any] = []

    def get() -> Any:
        if not made:
            made.append(seed())
        return made[0]

    return get
