"""DynamoDB cost per turn: requests and bytes, counted on the wire, at turn 10, 100 and 1,000.

Drives turns through the real handler (``app.handler.rest``) on a ``DynamoDBStore`` against
moto in-process, counting every botocore request of the DynamoDB client with event hooks
(``before-send``: operation and request body bytes; ``after-call``: response body bytes).

Ordinary text turns (a message in, the model answers) for two agents: one whose context is
``history(limit=5)`` and one with the full history. Expected: 1 read + 1 write request per
turn for both; write bytes flat (the new events only); read bytes flat for the windowed agent,
growing with the ledger for the full-history one.

Resumed turns, on the same session, by a ``history(limit=5)`` agent whose tool needs
``user-approval``: a message whose answer is a tool call that waits for a decision (an
ordinary turn: 1 read + 1 write), then the approval (approval -> tool -> reply). Expected for
the approval: 1 read + 2 writes (the decision is claimed before the tool runs, then the turn
commits).

Turn control polling: a running turn reads the session's control record (stop / steer / pause
asked by other requests) every poll interval (default 1 s), one strongly consistent
``GetItem`` each. Measured: the ``GetItem`` requests during a turn whose tool runs for a few
seconds (default interval, and polling disabled), during as long an idle stretch, and the
bytes of one poll of a realistic record (a stop, a pause, one short steer; and a full one).
Expected: 1 / interval reads per second while a turn runs (1 read unit each: the item is far
under 4 KB), none when idle or with polling disabled.

    python bench/dynamodb_cost.py            # turns 10, 100, 1,000 (a few minutes: moto
                                             # copies its tables on every transaction)
    python bench/dynamodb_cost.py --checkpoints 10,100   # a shorter run
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
    #: Of the TransactWriteItems bodies: bytes of the event items, the head item and the
    #: once-only guards (one per message id).
    items: Counter[str] = field(default_factory=Counter)

    def attach(self, client: Any) -> None:
        client.meta.events.register_first("before-send.dynamodb", self._before_send)
        client.meta.events.register("after-call.dynamodb", self._after_call)

    def _counters(self) -> tuple[Counter[str], ...]:
        return self.requests, self.sent, self.received, self.items

    def reset(self) -> None:
        for counter in self._counters():
            counter.clear()

    def add(self, other: Wire) -> None:
        for mine, theirs in zip(self._counters(), other._counters(), strict=True):
            mine.update(theirs)

    def _before_send(self, request: Any, **_: Any) -> None:
        operation = _operation(request)
        body = request.body or b""
        body = body if isinstance(body, bytes) else body.encode()
        self.requests[operation] += 1
        self.sent[operation] += len(body)
        if operation == "TransactWriteItems":
            for action in json.loads(body)["TransactItems"]:
                if "Put" not in action:
                    continue  # a control write's ConditionCheck on the head
                item = action["Put"]["Item"]
                sk = item["sk"]["S"]
                kind = ("head" if sk == "~head" else "control" if sk == "~ctl"
                        else "events" if sk.startswith("e#") else "guards")
                self.items[kind] += len(json.dumps(item, separators=(",", ":")))

    def _after_call(self, http_response: Any, model: Any, **_: Any) -> None:
        self.received[model.name] += len(http_response.content or b"")


def _operation(request: Any) -> str:
    target = request.headers.get("X-Amz-Target", b"")
    target = target.decode() if isinstance(target, bytes) else str(target)
    return target.rpartition(".")[2]


TEXT_TURN = "text turn"
PAUSE_TURN = "message -> approval request"
RESUMED_TURN = "approval -> tool -> reply"


@dataclass
class Row:
    kind: str
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
    turns of each agent there. All agents write the same ledger, so they share the session
    (moto copies every table on each transaction: seeding twice would double the run)."""
    from moto import mock_aws
    from pydantic import BaseModel

    import dormant
    from dormant.models import ScriptedModel
    from dormant.stores import DynamoDBStore

    class Stay(BaseModel):
        nights: int

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
        extend = app.tool(name="extend_stay", description="Extend the booking", schema=Stay,
                          execute=lambda ctx: {"nights": 2 + ctx.args.nights, "ok": True})
        model = ScriptedModel()
        approver = app.handler.rest(agent=app.agent(
            name="approver", model=model, context=[app.context.history(WINDOW)],
            tools=[extend], tool_approval={"extend_stay": "user-approval"}))
        approver_label = f"history(limit={WINDOW}), a tool under user-approval"
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
                rows.append(_row(TEXT_TURN, label, checkpoint, wire, samples))
            paused, resumed = Wire(), Wire()
            for _ in range(samples):
                turn += 1
                wire.reset()
                approval_id = _pause(approver, model, turn)
                paused.add(wire)
                wire.reset()
                _approve(approver, model, approval_id, turn)
                resumed.add(wire)
            rows.append(_row(PAUSE_TURN, approver_label, checkpoint, paused, samples))
            rows.append(_row(RESUMED_TURN, approver_label, checkpoint, resumed, samples))
    return rows


def _row(kind: str, label: str, checkpoint: int, wire: Wire, samples: int) -> Row:
    reads = wire.requests["Query"] + wire.requests["GetItem"]
    writes = wire.requests["TransactWriteItems"] + wire.requests["PutItem"]
    return Row(
        kind=kind,
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


def _pause(rest: Any, model: Any, n: int) -> str:
    """A message whose answer is a tool call under approval: the turn parks. Returns the
    approval id."""
    model.add({"tool_calls": [{"name": "extend_stay", "args": {"nights": 1}}]})
    response = rest({"session_id": "bench", "input": {"message": f"{n}: Extend my stay?"}})
    if response.status != "yielded_tool" or response.commit_status != "committed" \
            or not response.pending_approvals:
        raise SystemExit(f"turn {n} did not park on an approval: {response}")
    return str(response.pending_approvals[0].approval_id)


def _approve(rest: Any, model: Any, approval_id: str, n: int) -> None:
    model.add(REPLY)
    response = rest({"session_id": "bench", "input": {
        "approvals": [{"approval_id": approval_id, "approved": True}]}})
    if response.status != "completed" or response.commit_status != "committed":
        raise SystemExit(f"the approval of turn {n} did not commit cleanly: {response}")


# --- turn control polling ------------------------------------------------------------------------

#: How long the polled turn's tool runs (seconds): a few poll intervals.
RUNNING_TURN_SECONDS = 5.0
STEER_TEXT = "Actually, make it two nights."


@dataclass
class PollRow:
    case: str
    interval: float
    seconds: float
    reads: int
    #: When each GetItem was sent (seconds, perf_counter).
    sent_at: list[float] = field(default_factory=list)

    @property
    def per_second(self) -> float:
        """Reads per second over the whole turn (the first poll comes one interval in)."""
        return self.reads / self.seconds if self.seconds else 0.0

    @property
    def gap(self) -> float | None:
        """Mean seconds between two polls (None: fewer than two)."""
        if len(self.sent_at) < 2:
            return None
        return (self.sent_at[-1] - self.sent_at[0]) / (len(self.sent_at) - 1)


@dataclass
class RecordRow:
    record: str
    item_bytes: int
    response_bytes: int

    @property
    def read_units(self) -> int:
        """Read units of one strongly consistent GetItem: one per 4 KB (rounded up)."""
        return max(1, -(-self.item_bytes // 4096))


def measure_polling(interval: float | None, turn_seconds: float) -> tuple[list[PollRow],
                                                                           list[RecordRow]]:
    """``GetItem`` requests while a turn runs (polling at ``interval``, default: the
    framework's), with polling disabled, and while idle; and the bytes of one poll."""
    import time

    from moto import mock_aws
    from pydantic import BaseModel

    import dormant
    from dormant._control import DEFAULT_POLL_INTERVAL, MAX_STEERS
    from dormant._ids import new_id, now_ms
    from dormant.models import ScriptedModel
    from dormant.stores import DynamoDBStore
    from dormant.stores._dynamodb import layout
    from dormant.types import Control, ControlSteer, ControlStop

    class Work(BaseModel):
        task: str

    every = DEFAULT_POLL_INTERVAL if interval is None else interval
    polls: list[PollRow] = []
    records: list[RecordRow] = []
    sent_at: list[float] = []
    with mock_aws():
        store = DynamoDBStore("bench-control")
        store.ensure_table()
        wire = Wire()
        wire.attach(store._client)
        store._client.meta.events.register(
            "before-send.dynamodb.GetItem", lambda **_: sent_at.append(time.perf_counter()))
        app = dormant.App(name="bench", store=store)

        def work(ctx: Any) -> dict[str, Any]:
            time.sleep(turn_seconds)
            return {"done": True}

        slow = app.tool(name="long_task", description="Work for a while", schema=Work,
                        execute=work)
        model = ScriptedModel()
        label = " (the default)" if interval is None else ""
        for case, poll in ((f"a running turn, polling every {every:g} s{label}", every),
                           ("a running turn, polling disabled (poll_interval=0)", 0.0)):
            rest = app.handler.rest(agent=app.agent(name="worker", model=model, tools=[slow]),
                                    poll_interval=poll)
            model.add({"tool_calls": [{"name": "long_task", "args": {"task": "report"}}]})
            model.add("Done.")
            wire.reset()
            sent_at.clear()
            started = time.perf_counter()
            response = rest({"session_id": "polled", "input": {"message": "Write the report"}})
            seconds = time.perf_counter() - started
            if response.status != "completed" or response.commit_status != "committed":
                raise SystemExit(f"the polled turn did not commit cleanly: {response}")
            polls.append(PollRow(case, poll, seconds, wire.requests["GetItem"], list(sent_at)))
        wire.reset()
        sent_at.clear()
        time.sleep(turn_seconds)  # nothing runs: nobody polls
        polls.append(PollRow("idle (no turn running)", 0.0, turn_seconds,
                             wire.requests["GetItem"], list(sent_at)))

        stored = store.load("session_polled", turns=0)
        if stored is None:
            raise SystemExit("the polled session is missing")
        running, at = new_id("inv"), now_ms()
        busy = [Control(rev=1, stop=ControlStop(invocation_id=running, rev=1, at=at))]
        busy.append(busy[-1].model_copy(update={"rev": 2, "pause": 2}))
        for n in range(MAX_STEERS):
            rev = 3 + n
            steer = ControlSteer(id=new_id("steer"), text=STEER_TEXT, invocation_id=running,
                                 rev=rev, at=at)
            busy.append(busy[-1].model_copy(update={"rev": rev,
                                                    "steers": [*busy[-1].steers, steer]}))
        shown = {2: "a stop, a pause, one short steer",
                 len(busy) - 1: f"a stop, a pause, {MAX_STEERS} short steers (the most kept)"}
        for index, control in enumerate(busy):
            if not store.write_control("session_polled", control,
                                       head_version=stored.head.version):
                raise SystemExit(f"could not write control revision {control.rev}")
            if index not in shown:
                continue
            wire.reset()
            if store.read_control("session_polled") != control:
                raise SystemExit("the control record did not read back")
            response_bytes = wire.received["GetItem"]
            item = store._client.get_item(
                TableName=store.table_name, ConsistentRead=True,
                Key={layout.PK: {"S": "session_polled"}, layout.SK: {"S": layout.CONTROL_SK}},
            )["Item"]
            records.append(RecordRow(shown[index], layout.item_size(item), response_bytes))
    return polls, records


def polling_table(polls: list[PollRow], records: list[RecordRow]) -> str:
    units = records[0].read_units if records else 1
    lines = [
        "| while | poll interval (s) | seconds | GetItem requests | reads/s over the turn | "
        "s between polls | reads/s while polling (expected: 1 / interval) | read units/s "
        "while polling (strongly consistent) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in polls:
        interval = f"{row.interval:g}" if row.interval else "-"
        expected = 1 / row.interval if row.interval else 0.0
        rate = 1 / row.gap if row.gap else row.per_second
        gap = f"{row.gap:.3f}" if row.gap else "-"
        lines.append(f"| {row.case} | {interval} | {row.seconds:.2f} | {row.reads} | "
                     f"{row.per_second:.2f} | {gap} | {rate:.2f} ({expected:g}) | "
                     f"{rate * units:.2f} |")
    lines += [
        "",
        "| control record | item bytes (DynamoDB size) | GetItem response bytes | read units "
        "per poll |",
        "|---|---:|---:|---:|",
    ]
    lines += [f"| {r.record} | {r.item_bytes:,} | {r.response_bytes:,} | {r.read_units} |"
              for r in records]
    return "\n".join(lines)


def table(rows: list[Row]) -> str:
    lines = [
        "| turn kind | agent | turn | read requests | write requests | other requests | write "
        "bytes (request) | of which event items | of which head item | read bytes (response) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row.kind} | {row.agent} | {row.turn:,} | {row.reads:g} | {row.writes:g} | "
            f"{row.other:g} | "
            f"{row.write_bytes:,.0f} | {row.event_bytes:,.0f} | {row.head_bytes:,.0f} | "
            f"{row.read_bytes:,.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="one tiny iteration")
    parser.add_argument("--checkpoints", default="10,100,1000",
                        help="comma-separated turns to measure at (default 10,100,1000)")
    parser.add_argument("--samples", type=int, default=3,
                        help="turns of each kind averaged at each checkpoint")
    parser.add_argument("--poll-interval", type=float, default=None,
                        help="control polling interval of the polled turn (default: the "
                             "framework's)")
    args = parser.parse_args(argv)
    os.environ.update(FAKE_AWS_ENV)
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB"):
        os.environ.pop(name, None)
    interval, turn_seconds = args.poll_interval, RUNNING_TURN_SECONDS
    if args.smoke:
        checkpoints, samples = [3], 1
        interval, turn_seconds = interval or 0.1, 0.35
    else:
        checkpoints = sorted(int(c) for c in args.checkpoints.split(",") if c.strip())
        samples = args.samples
    if not checkpoints or checkpoints[0] < 1 or samples < 1:
        parser.error("checkpoints and samples must be positive")
    if interval is not None and interval <= 0:
        parser.error("--poll-interval must be positive")
    rows = measure(checkpoints, samples)
    print("DynamoDBStore cost per turn (moto in-process, counted on the wire; mean of "
          f"{samples} turn(s) of each kind at each checkpoint; write bytes add up every "
          "write of the turn)\n")
    print(table(rows))
    polls, records = measure_polling(interval, turn_seconds)
    print("\nTurn control polling (a running turn reads its control record every poll "
          "interval: one strongly consistent GetItem; counted on the wire)\n")
    print(polling_table(polls, records))


if __name__ == "__main__":
    main()
