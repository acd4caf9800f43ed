"""Long sessions on DynamoDB, for ``bench/dynamodb_cost.py``: what a compacted session reads
per turn as it grows (flat), beside a full-history agent on the same session (growing), and
what a fork writes and reads (independent of the history it inherits).

One session grows to each checkpoint through a compacting agent (``history(compact=
Compaction(max_turns=8, keep_last=4))``, summarised by a function: the bench prices the store,
not a model). At each checkpoint, 24 turns of each agent are counted on the wire (the mean, and the
largest turn): what a turn reads varies within a compaction cycle (5 turns here: the window
grows from 4 turns after a summary to 8, and the 9th makes the next summary) and with how far
the head's last checkpoint is (DynamoDBStore writes the whole head every 24 versions, a delta
in between, and a read goes back to the checkpoint), not with the session's age — and the
session is forked once, as ``POST /sessions/{id}/fork`` forks it (``history=False``: the
fork's head is the source's, copied; its history is read on its next load): the fork's write
requests, write units and request bytes, and what it read of its source (its head).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["CYCLE", "ForkRow", "LongRow", "fork_table", "long_table", "measure_long"]

MAX_TURNS = 8
KEEP_LAST = 4
#: Turns counted per agent at each checkpoint: the store's checkpoint period (24 versions),
#: nearly five compaction cycles.
CYCLE = 24


@dataclass
class LongRow:
    agent: str
    turn: int
    reads: float
    writes: float
    write_units: float
    read_bytes: float
    max_read_bytes: float
    read_units: float


@dataclass
class ForkRow:
    turn: int
    writes: int
    items_written: int
    write_units: int
    write_bytes: int
    read_requests: int
    read_bytes: int


class _Answer:
    """A model that answers every call at once (the store is what is measured)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def stream(self, request: Any, *, signal: Any = None) -> Iterator[Any]:
        from dormant.models import TextDelta

        yield TextDelta(self.text)


def measure_long(checkpoints: list[int], wire_type: Any, message: str,
                 reply: str) -> tuple[list[LongRow], list[ForkRow]]:
    from moto import mock_aws

    import dormant
    from dormant.stores import DynamoDBStore

    rows: list[LongRow] = []
    forks: list[ForkRow] = []
    with mock_aws():
        store = DynamoDBStore("bench-long")
        store.ensure_table()
        wire = wire_type()
        wire.attach(store._client)
        app = dormant.App(name="bench-long", store=store)
        compact = dormant.Compaction(max_turns=MAX_TURNS, keep_last=KEEP_LAST,
                                     summarize=lambda messages: f"{len(messages)} messages: "
                                     + reply[:120])
        agents = {
            f"history(compact=Compaction(max_turns={MAX_TURNS}, keep_last={KEEP_LAST}))":
                app.agent(name="compacted", model=_Answer(reply),
                          context=[app.context.history(compact=compact)]),
            "history() (all), same session": app.agent(
                name="full", model=_Answer(reply), context=[app.context.history()]),
        }
        handlers = {label: app.handler.rest(agent=agent) for label, agent in agents.items()}
        grow = handlers[next(iter(handlers))]
        turn = 0
        for checkpoint in checkpoints:
            while turn < checkpoint - 1:
                turn += 1
                _turn(grow, turn, message)
            for label, rest in handlers.items():
                cycle = wire_type()
                largest = 0
                for _ in range(CYCLE):
                    turn += 1
                    wire.reset()
                    _turn(rest, turn, message)
                    largest = max(largest, wire.read_items["Query"])
                    cycle.add(wire)
                reads = cycle.requests["Query"] + cycle.requests["GetItem"]
                rows.append(LongRow(
                    agent=label, turn=checkpoint, reads=reads / CYCLE,
                    writes=sum(cycle.requests[op] for op in _writes()) / CYCLE,
                    write_units=sum(cycle.units.values()) / CYCLE,
                    read_bytes=cycle.read_items["Query"] / CYCLE, max_read_bytes=largest,
                    read_units=cycle.read_units["Query"] / CYCLE))
            wire.reset()
            read_before = dict(wire.read_items)
            app.sessions.fork("bench", new_session_id=f"fork-{checkpoint}", history=False)
            forks.append(ForkRow(
                turn=checkpoint,
                writes=sum(wire.requests[op] for op in _writes()),
                items_written=wire.written["items"],
                write_units=int(sum(wire.units.values())),
                write_bytes=sum(wire.sent[op] for op in _writes()),
                read_requests=wire.requests["Query"] + wire.requests["GetItem"],
                read_bytes=sum(wire.read_items.values()) - sum(read_before.values())))
    return rows, forks


def _writes() -> tuple[str, ...]:
    return ("PutItem", "TransactWriteItems", "UpdateItem", "DeleteItem", "BatchWriteItem")


def _turn(rest: Any, n: int, message: str) -> None:
    response = rest({"session_id": "bench", "input": {"message": f"{n}: {message}"}})
    if response.status != "completed" or response.commit_status != "committed":
        raise SystemExit(f"turn {n} did not commit cleanly: {response}")


def long_table(rows: list[LongRow]) -> str:
    lines = ["| agent | turn | read requests | write requests | write units | read bytes "
             "(items), mean | read bytes, largest turn | read units, mean |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        lines.append(f"| {row.agent} | {row.turn:,} | {row.reads:g} | {row.writes:g} | "
                     f"{row.write_units:g} | {row.read_bytes:,.0f} | "
                     f"{row.max_read_bytes:,.0f} | {row.read_units:g} |")
    return "\n".join(lines)


def fork_table(rows: list[ForkRow]) -> str:
    lines = ["| fork of the session at turn | write requests | items written | write units "
             "| write bytes (request) | read requests | read bytes (items: the source's head) |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        lines.append(f"| {row.turn:,} | {row.writes} | {row.items_written} | "
                     f"{row.write_units} | {row.write_bytes:,} | {row.read_requests} | "
                     f"{row.read_bytes:,} |")
    return "\n".join(lines)
