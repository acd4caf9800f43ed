"""Framework overhead per turn: dormant's handler with a scripted model, on MemoryStore or SQLite.

Measures, side by side in one run, microseconds per turn for
  - a text turn (message in, text out),
  - a tool turn (model calls a tool, reads its result, answers),
  - a pause + resume (a yielding tool parks the turn; a second request answers it),
at history 1, 100 and 1,000 turns, through ``app.handler.rest`` (load, run, commit), and a
hand-rolled ledger (a dict of lists with a version check) as the floor. The model reads the
messages it is sent (as a real one does), so a full-history agent pays for its history.

    python bench/overhead.py                  # full run, MemoryStore
    python bench/overhead.py --store sqlite   # the same on SqliteStore (a file in a temp dir)
    python bench/overhead.py --limit 10       # a history(limit=10) agent
    python bench/overhead.py --json out.json  # also write the figures (scenario -> history -> µs)
    python bench/overhead.py --smoke          # one tiny iteration (CI keeps it from rotting)
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import dormant
from dormant.models import ModelChunk, ModelRequest, ScriptedModel
from dormant.stores import SqliteStore
from dormant.tools import Signal

#: Where the seeded sessions live: "memory" or "sqlite" (set from the command line).
STORE = "memory"


class ReadingModel(ScriptedModel):
    """A scripted model that reads its request's messages first, as a real model does."""

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[ModelChunk]:
        self.read = len(request.messages)
        self.requests.clear()  # keep no request alive: each holds its session
        return super().stream(request, signal=signal)


class Ref(BaseModel):
    ref: str


class Answer(BaseModel):
    answer: str


def _agent(app: dormant.App, replies: list[Any], limit: int | None) -> dormant.Agent:
    lookup = app.tool(name="lookup_stay", description="Look up a booking", schema=Ref,
                      execute=lambda ctx: {"ref": ctx.args.ref, "nights": 3})
    ask = app.tool(name="ask_guest", description="Ask the guest", schema=Ref, yield_schema=Answer)
    return app.agent(name="bench", model=ReadingModel(replies),
                     context=[app.context.system("Answer booking questions."),
                              app.context.history(limit)],
                     tools=[lookup, ask])


def _seed(history: int, limit: int | None, replies: list[Any]) -> tuple[Any, str]:
    store = SqliteStore(Path(tempfile.mkdtemp()) / "bench.db") if STORE == "sqlite" else None
    app = dormant.App(name="bench", store=store)
    agent = _agent(app, ["ok"] * history + replies, limit)
    rest = app.handler.rest(agent=agent)
    for n in range(history):
        rest({"session_id": "bench", "input": {"message": f"turn {n}"}})
    # The seeded ledger lives in this process only because MemoryStore keeps it here (a
    # Lambda reads it from DynamoDB): move it out of the cyclic GC's way, so what is measured
    # is the turn, not collections of a heap the benchmark built.
    gc.collect()
    gc.freeze()
    return rest, "session_bench"


def _timed_questions(history: int, turns: int, limit: int | None, replies: list[Any]) -> float:
    """Seconds per request asking the same question ``turns`` times (after seeding)."""
    rest, sid = _seed(history, limit, replies)
    start = time.perf_counter()
    for _ in range(turns):
        response = rest({"session_id": sid, "input": {"message": "How long is my stay?"}})
    elapsed = time.perf_counter() - start
    assert response.status == "completed", response
    return elapsed / turns


def text_turn(history: int, turns: int, limit: int | None) -> float:
    return _timed_questions(history, turns, limit, ["Three nights."] * turns)


def tool_turn(history: int, turns: int, limit: int | None) -> float:
    lookup = {"tool_calls": [{"name": "lookup_stay", "args": {"ref": "B-1"}}]}
    return _timed_questions(history, turns, limit, [lookup, "Three nights."] * turns)


def pause_resume(history: int, turns: int, limit: int | None) -> float:
    replies: list[Any] = []
    for n in range(turns):
        replies += [{"tool_calls": [{"name": "ask_guest", "args": {"ref": "night"},
                                     "id": f"call_{n}"}]}, "Booked for Friday."]
    rest, sid = _seed(history, limit, replies)
    start = time.perf_counter()
    for n in range(turns):
        rest({"session_id": sid, "input": {"message": "Book me in"}})
        response = rest({"session_id": sid, "input": {
            "tools": [{"call_id": f"call_{n}", "input": {"answer": "Friday"}}]}})
    elapsed = time.perf_counter() - start
    assert response.status == "completed", response
    return elapsed / turns


def hand_rolled(history: int, turns: int, limit: int | None) -> float:
    """The floor: append two dicts to a list under a version check, no framework at all."""
    rows: dict[str, dict[str, Any]] = {"s": {"version": history,
                                             "events": [{"type": "user"}] * history}}
    start = time.perf_counter()
    for n in range(turns):
        row = rows["s"]
        version = row["version"]
        new = [{"type": "user", "text": "How long is my stay?", "ts": time.time()},
               {"type": "assistant", "text": "Three nights.", "ts": time.time()}]
        if rows["s"]["version"] != version:
            raise RuntimeError("conflict")
        row["events"].extend(new)
        row["version"] = version + 1 + n * 0
    return (time.perf_counter() - start) / turns


SCENARIOS: dict[str, Callable[[int, int, int | None], float]] = {
    "hand-rolled ledger": hand_rolled,
    "text turn": text_turn,
    "tool turn": tool_turn,
    "pause + resume": pause_resume,
}


def measure(fn: Callable[[int, int, int | None], float], history: int, turns: int,
            repeats: int, limit: int | None) -> float:
    samples = []
    for _ in range(repeats):
        gc.unfreeze()
        gc.collect()
        samples.append(fn(history, turns, limit))
    return statistics.median(samples) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="one tiny iteration")
    parser.add_argument("--turns", type=int, default=300, help="turns per sample")
    parser.add_argument("--repeats", type=int, default=5, help="samples (median is reported)")
    parser.add_argument("--limit", type=int, default=None,
                        help="use history(limit=N) instead of the whole history")
    parser.add_argument("--store", choices=["memory", "sqlite"], default="memory")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    global STORE
    STORE = args.store
    histories = [1] if args.smoke else [1, 100, 1000]
    turns, repeats = (1, 1) if args.smoke else (args.turns, args.repeats)

    print(f"dormant {dormant.__version__}: µs per turn (median of {repeats} x {turns} turns), "
          f"history({args.limit if args.limit else ''}), {args.store} store")
    header = f"{'scenario':<20}" + "".join(f"{f'history {h}':>14}" for h in histories)
    print(header)
    print("-" * len(header))
    table: dict[str, list[float]] = {}
    for name, fn in SCENARIOS.items():
        table[name] = [measure(fn, h, turns, repeats, args.limit) for h in histories]
        print(f"{name:<20}" + "".join(f"{v:>14.1f}" for v in table[name]))
    floor = table["hand-rolled ledger"]
    print()
    print("ratio of a text turn to the hand-rolled ledger: " + ", ".join(
        f"history {h}: {t / f:.0f}x" for h, t, f in zip(histories, table["text turn"], floor,
                                                         strict=True)))
    if args.json is not None:
        args.json.write_text(json.dumps(
            {"store": args.store, "limit": args.limit, "unit": "µs per turn",
             "figures": {name: dict(zip(map(str, histories), values, strict=True))
                         for name, values in table.items()}}, indent=2))


if __name__ == "__main__":
    main()
