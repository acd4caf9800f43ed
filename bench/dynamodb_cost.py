"""DynamoDB cost per turn: requests and bytes, counted on the wire, at turn 10, 100 and 1,000.

Drives text turns through the real handler (``app.handler.rest``) on a ``DynamoDBStore``
against moto in-process, counting every botocore request of the DynamoDB client with event
hooks (``before-send``: operation and request body bytes; ``after-call``: response body
bytes). Two agents: one whose context is ``history(limit=5)`` and one with the full history.
Expected: 1 read + 1 write request per turn for both; write bytes flat (the new events only);
read bytes flat for the windowed agent, growing with the ledger for the full-history one.

    python bench/dynamodb_cost.py            # turns 10, 100, 1,000 (a few minutes: moto
                                             # copies its tables on every transaction)
    python bench/dynamodb_cost.py --smoke    # one tiny iteration (CI keeps it from rotting)

Not a test: the numbers are printed, not asserted (the wire bytes are moto's JSON, which is
what DynamoDB's JSON protocol sends too).
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

#: Fake credentials for moto; set unconditionally so the bench can never reach a real account.
FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
MESSAGE = "Can you check my booking for the weekend, and the late check-out? " * 2
REPLY = "Your booking is confirmed for Friday and Saturday; late check-out is at 1 pm. " * 2
WINDOW = 5


@dataclass
class Wire:
    """Requests and bytes a DynamoDB client sent and received."""

    requests: Counter[str] = field(default_factory=Counter)
    sent: Counter[str] = field(default_factory=Counter)
    received: Counter[str] = field(default_factory=Counter)
    #: Of the TransactWriteItems bodies: bytes of the event items vs the head item.
    items: Counter[str] = field(default_factory=Counter)

    def attach(self, client: Any) -> None:
        client.meta.events.register_first("before-send.dynamodb", self._before_send)
        client.meta.events.register("after-call.dynamodb", self._after_call)

    def reset(self) -> None:
        for counter in (self.requests, self.sent, self.received, self.items):
            counter.clear()

    def _before_send(self, request: Any, **_: Any) -> None:
        operation = _operation(request)
        body = request.body or b""
        body = body if isinstance(body, bytes) else body.encode()
        self.requests[operation] += 1
        self.sent[operation] += len(body)
        if operation == "TransactWriteItems":
            for action in json.loads(body)["TransactItems"]:
                item = action["Put"]["Item"]
                kind = "head" if item["sk"]["S"] == "~head" else "events"
                self.items[kind] += len(json.dumps(item, separators=(",", ":")))

    def _after_call(self, http_response: Any, model: Any, **_: Any) -> None:
        self.received[model.name] += len(http_response.content or b"")


def _operation(request: Any) -> str:
    target = request.headers.get("X-Amz-Target", b"")
    target = target.decode() if isinstance(target, bytes) else str(target)
    return target.rpartition(".")[2]


@dataclass
class Row:
    agent: str
    turn: int
    reads: float
    writes: float
    other: float
    write_bytes: float
    event_bytes: float
    head_bytes: float
    read_bytes: float


def measure(checkpoints: list[int], samples: int) -> list[Row]:
    """Run one session up to each checkpoint, then average the wire counts of ``samples``
    turns of each agent there. Both agents write the same ledger, so they share the session
    (moto copies every table on each transaction: seeding twice would double the run)."""
    from moto import mock_aws

    import dormant
    from dormant.stores import DynamoDBStore

    rows: list[Row] = []
    with mock_aws():
        store = DynamoDBStore("bench")
        store.ensure_table()
        wire = Wire()
        wire.attach(store._client)
        app = dormant.App(name="bench", store=store)
        reply = dormant.Hook(before_agent=lambda ctx: REPLY)
        agents = {
            f"history(limit={WINDOW})": app.agent(
                name="windowed", model=None, context=[app.context.history(WINDOW)],
                hooks=[reply]),
            "history() (all)": app.agent(
                name="full", model=None, context=[app.context.history()], hooks=[reply]),
        }
        handlers = {label: app.handler.rest(agent=agent) for label, agent in agents.items()}
        seed = handlers[next(iter(handlers))]
        turn = 0
        for checkpoint in checkpoints:
            while turn < checkpoint - 1:
                turn += 1
                _turn(seed, turn)
            for label, rest in handlers.items():
                wire.reset()
                for _ in range(samples):
                    turn += 1
                    _turn(rest, turn)
                rows.append(_row(label, checkpoint, wire, samples))
    return rows


def _row(label: str, checkpoint: int, wire: Wire, samples: int) -> Row:
    reads = wire.requests["Query"] + wire.requests["GetItem"]
    writes = wire.requests["TransactWriteItems"] + wire.requests["PutItem"]
    return Row(
        agent=label,
        turn=checkpoint,
        reads=reads / samples,
        writes=writes / samples,
        other=(sum(wire.requests.values()) - reads - writes) / samples,
        write_bytes=wire.sent["TransactWriteItems"] / samples,
        event_bytes=wire.items["events"] / samples,
        head_bytes=wire.items["head"] / samples,
        read_bytes=wire.received["Query"] / samples,
    )


def _turn(rest: Any, n: int) -> None:
    response = rest({"session_id": "bench", "input": {"message": f"{n}: {MESSAGE}"}})
    if response.status != "completed" or response.commit_status != "committed":
        raise SystemExit(f"turn {n} did not commit cleanly: {response}")


def table(rows: list[Row]) -> str:
    lines = [
        "| agent | turn | read requests | write requests | other requests | write bytes "
        "(request) | of which event items | of which head item | read bytes (response) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row.agent} | {row.turn:,} | {row.reads:g} | {row.writes:g} | {row.other:g} | "
            f"{row.write_bytes:,.0f} | {row.event_bytes:,.0f} | {row.head_bytes:,.0f} | "
            f"{row.read_bytes:,.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="one tiny iteration")
    args = parser.parse_args(argv)
    os.environ.update(FAKE_AWS_ENV)
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB"):
        os.environ.pop(name, None)
    checkpoints, samples = ([3], 1) if args.smoke else ([10, 100, 1000], 3)
    rows = measure(checkpoints, samples)
    print("DynamoDBStore cost per ordinary text turn (moto in-process, counted on the wire; "
          f"mean of {samples} turn(s) per agent at each checkpoint)\n")
    print(table(rows))


if __name__ == "__main__":
    main()
