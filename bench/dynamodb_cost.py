"""DynamoDB cost per turn: requests, write units, read bytes and read units, at turn 10, 100
and 500.

Drives turns through the real handler (``app.handler.rest``) on a ``DynamoDBStore`` against
moto in-process, recording every request of the store's DynamoDB client with botocore event
hooks (``before-send``: the operation and its body; ``after-call``: the items it returned) and
pricing each with DynamoDB's capacity rules (``bench/_capacity.py``):

- **write units**: per request, from the sizes of the items it writes (attribute names and
  values): ``PutItem`` 1 unit per started KB, a transaction 2 per started KB of *each* item;
- **index write units**, shown apart: the ``by_owner`` index pays a write for every item that
  carries its key (``own``, ``ua``): 1 per started KB of the entry (keys, projected
  attributes, 100 bytes), 2 when a write moves an existing entry (an old-layout head);
- **read bytes**: the DynamoDB size of the items the turn's reads returned (what read units
  are charged on), and the response bytes on the wire (moto's JSON, as DynamoDB's protocol;
  binary attributes travel base64, a third larger);
- **read units**: per read, 1 per started 4 KB of the items it returned (a ``Query`` rounds
  their sum once), halved when eventually consistent.

Ordinary text turns (a message in, the model answers; no message id) for two agents: one
whose context is ``history(limit=5)`` and one with the full history. Expected: 1 read + 1
write request per turn for both; write units flat; read bytes flat for the windowed agent,
growing with the ledger for the full-history one.

Resumed turns, on the same session, by a ``history(limit=5)`` agent whose tool needs
``user-approval``: a message whose answer is a tool call that waits for a decision (an
ordinary turn: 1 read + 1 write), then the approval (approval -> tool -> reply). Expected for
the approval: 1 read + 2 writes (the decision is claimed before the tool runs, then the turn
commits). And a message whose answer is a tool call that runs at once (message -> tool ->
reply): 1 read + 2 writes (the tool step's calls land before the tool runs, then the turn).

Turn control polling: a running turn reads the session's control record (stop / steer / pause
asked by other requests) every poll interval (default 1 s), one strongly consistent
``GetItem`` each. Measured: the ``GetItem`` requests during a turn whose tool runs for a few
seconds (default interval, and polling disabled), during as long an idle stretch, and the
bytes of one poll of a realistic record (a stop, a pause, one short steer; and a full one).
Expected: 1 / interval reads per second while a turn runs (1 read unit each: the item is far
under 4 KB), none when idle or with polling disabled.

S3 reads (``bench/_offload_reads.py``): on a session holding one offloaded event, the
``GetObject`` calls of a pause, a queued message, a resume and a message, each in a new process
and in a warm one, deferred (what the app loads) beside eager. Expected: none for the requests
that run no model; one for a model turn in a new process, none in a warm one.

Long sessions (``bench/_long_sessions.py``): read bytes per turn of a compacted session at
turns 10, 100, 1,000 and 2,000 (flat), beside a full-history agent on the same session
(growing), and the writes of a fork of that session at each (independent of its length).

    python bench/dynamodb_cost.py            # turns 10, 100, 500 (a few minutes)
    python bench/dynamodb_cost.py --checkpoints 10,100   # a shorter run
    python bench/dynamodb_cost.py --json cost.json       # the figures as JSON too
    python bench/dynamodb_cost.py --smoke    # one tiny iteration (CI keeps it from rotting)

Not a test: the numbers are printed, not asserted. The bench uses only the store's public
behaviour and the wire, so it prices any release's layout the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# Run as a script (python bench/dynamodb_cost.py): the repository root holds bench._capacity.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._capacity import index_write_units, item_bytes, read_units, write_units
from bench._long_sessions import CYCLE, fork_table, long_table, measure_long
from bench._offload_reads import measure_offload, offload_table

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


#: The ``by_owner`` index: its key attributes (index key, then the table's) and projection.
INDEX_KEYS = ("own", "ua", "pk", "sk")
INDEX_PROJECTED = ("ver", "st", "expires_at")
WRITES = ("PutItem", "TransactWriteItems", "UpdateItem", "DeleteItem", "BatchWriteItem")


@dataclass
class Wire:
    """Requests a DynamoDB client sent, what they cost, what they returned."""

    requests: Counter[str] = field(default_factory=Counter)
    sent: Counter[str] = field(default_factory=Counter)
    received: Counter[str] = field(default_factory=Counter)
    #: Write units by operation (DynamoDB's arithmetic on the items written).
    units: Counter[str] = field(default_factory=Counter)
    #: Index write units, items written, and the DynamoDB size of the items reads returned.
    index_units: Counter[str] = field(default_factory=Counter)
    written: Counter[str] = field(default_factory=Counter)
    read_items: Counter[str] = field(default_factory=Counter)
    read_units: Counter[str] = field(default_factory=Counter)
    _consistent: list[bool] = field(default_factory=list)

    def attach(self, client: Any) -> None:
        client.meta.events.register_first("before-send.dynamodb", self._before_send)
        client.meta.events.register("after-call.dynamodb", self._after_call)

    def _counters(self) -> tuple[Counter[str], ...]:
        return (self.requests, self.sent, self.received, self.units, self.index_units,
                self.written, self.read_items, self.read_units)

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
        params = json.loads(body) if body else {}
        self._consistent.append(bool(params.get("ConsistentRead")))
        if operation not in WRITES:
            return
        self.units[operation] += write_units(operation, params)
        puts = ([params] if operation == "PutItem" else
                [a["Put"] for a in params.get("TransactItems", []) if "Put" in a])
        for put in puts:
            item = put["Item"]
            self.written["items"] += 1
            # An old-layout head is rewritten in place: its index entry moves (2 writes).
            moved = item["sk"]["S"] == "~head"
            self.index_units["by_owner"] += index_write_units(item, INDEX_KEYS, INDEX_PROJECTED,
                                                              moved=moved)
            if moved and "own" not in item:
                self.index_units["by_owner"] += 1  # the tombstone removes the old entry

    def _after_call(self, http_response: Any, model: Any, parsed: Any, **_: Any) -> None:
        self.received[model.name] += len(http_response.content or b"")
        consistent = self._consistent.pop() if self._consistent else False
        items = list(parsed.get("Items", [])) + ([parsed["Item"]] if "Item" in parsed else [])
        if model.name in ("Query", "GetItem", "Scan"):
            size = sum(item_bytes(item) for item in items)
            self.read_items[model.name] += size
            self.read_units[model.name] += read_units(size, consistent)


def _operation(request: Any) -> str:
    target = request.headers.get("X-Amz-Target", b"")
    target = target.decode() if isinstance(target, bytes) else str(target)
    return target.rpartition(".")[2]


TEXT_TURN = "text turn"
PAUSE_TURN = "message -> approval request"
RESUMED_TURN = "approval -> tool -> reply"
TOOL_TURN = "message -> tool -> reply"


@dataclass
class Row:
    kind: str
    agent: str
    turn: int
    reads: float
    writes: float
    other: float
    items_written: float
    write_units: float
    index_write_units: float
    write_bytes: float
    read_bytes: float
    read_units: float
    wire_read_bytes: float
    #: Calls to the app's scheduler (a claim's lease wake-up set, then cancelled), and the
    #: wake-ups still armed after the turn: each would fire once, one wake invocation.
    scheduler_calls: float = 0.0
    wake_ups_left: float = 0.0


def measure(checkpoints: list[int], samples: int) -> list[Row]:
    """Run one session up to each checkpoint, then average the wire counts of ``samples``
    turns of each agent there. All agents write the same ledger, so they share the session
    (moto copies every table on each transaction: seeding twice would double the run)."""
    from moto import mock_aws
    from pydantic import BaseModel

    import dormant
    from dormant.models import ScriptedModel
    from dormant.schedulers import RecordingScheduler, is_lease_timer
    from dormant.stores import DynamoDBStore

    class Stay(BaseModel):
        nights: int

    rows: list[Row] = []
    with mock_aws():
        store = DynamoDBStore("bench")
        store.ensure_table()
        wire = Wire()
        wire.attach(store._client)
        scheduler = RecordingScheduler()
        app = dormant.App(name="bench", store=store, scheduler=scheduler)

        def timers(row: Row, since: int) -> Row:
            """``row`` with the scheduler's calls since ``since`` and the wake-ups left."""
            row.scheduler_calls = (len(scheduler.calls) - since) / samples
            row.wake_ups_left = sum(is_lease_timer(t.name) for t in scheduler.timers.values())
            return row
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
        doer = app.handler.rest(agent=app.agent(
            name="doer", model=model, context=[app.context.history(WINDOW)], tools=[extend]))
        doer_label = f"history(limit={WINDOW}), a tool"
        seed = handlers[next(iter(handlers))]
        turn = 0
        for checkpoint in checkpoints:
            while turn < checkpoint - 1:
                turn += 1
                _turn(seed, turn)
            for label, rest in handlers.items():
                wire.reset()
                since = len(scheduler.calls)
                for _ in range(samples):
                    turn += 1
                    _turn(rest, turn)
                rows.append(timers(_row(TEXT_TURN, label, checkpoint, wire, samples), since))
            paused, resumed = Wire(), Wire()
            pausing = resuming = 0
            for _ in range(samples):
                turn += 1
                wire.reset()
                since = len(scheduler.calls)
                approval_id = _pause(approver, model, turn)
                paused.add(wire)
                pausing += len(scheduler.calls) - since
                wire.reset()
                since = len(scheduler.calls)
                _approve(approver, model, approval_id, turn)
                resumed.add(wire)
                resuming += len(scheduler.calls) - since
            rows.append(timers(_row(PAUSE_TURN, approver_label, checkpoint, paused, samples),
                               len(scheduler.calls) - pausing))
            rows.append(timers(_row(RESUMED_TURN, approver_label, checkpoint, resumed, samples),
                               len(scheduler.calls) - resuming))
            wire.reset()
            since = len(scheduler.calls)
            for _ in range(samples):
                turn += 1
                _tool_turn(doer, model, turn)
            rows.append(timers(_row(TOOL_TURN, doer_label, checkpoint, wire, samples), since))
    return rows


def _row(kind: str, label: str, checkpoint: int, wire: Wire, samples: int) -> Row:
    reads = wire.requests["Query"] + wire.requests["GetItem"]
    writes = sum(wire.requests[op] for op in WRITES)
    return Row(
        kind=kind,
        agent=label,
        turn=checkpoint,
        reads=reads / samples,
        writes=writes / samples,
        other=(sum(wire.requests.values()) - reads - writes) / samples,
        items_written=wire.written["items"] / samples,
        write_units=sum(wire.units.values()) / samples,
        index_write_units=sum(wire.index_units.values()) / samples,
        write_bytes=sum(wire.sent[op] for op in WRITES) / samples,
        read_bytes=wire.read_items["Query"] / samples,
        read_units=wire.read_units["Query"] / samples,
        wire_read_bytes=wire.received["Query"] / samples,
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


def _tool_turn(rest: Any, model: Any, n: int) -> None:
    """A message whose answer is a tool call that runs at once, then the reply: the tool
    step's calls land before the tool runs (its write-ahead), then the turn."""
    model.add({"tool_calls": [{"name": "extend_stay", "args": {"nights": 1}}]})
    model.add(REPLY)
    response = rest({"session_id": "bench", "input": {"message": f"{n}: Extend my stay."}})
    if response.status != "completed" or response.commit_status != "committed":
        raise SystemExit(f"turn {n} did not commit cleanly: {response}")


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
        # The polled turns ran past their first poll, so the record holds their announcement
        # already: the records below are its next revisions, as a real writer's would be.
        held = store.read_control("session_polled") or Control()
        first = held.rev + 1
        busy = [held.model_copy(update={
            "rev": first, "stop": ControlStop(invocation_id=running, rev=first, at=at)})]
        busy.append(busy[-1].model_copy(update={"rev": first + 1, "pause": first + 1}))
        for n in range(MAX_STEERS):
            rev = first + 2 + n
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
        "| turn kind | agent | turn | read requests | write requests | other | items "
        "written | write units | index write units | write bytes (request) | read bytes "
        "(items) | read units | read bytes (wire) | scheduler calls | wake-ups left |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row.kind} | {row.agent} | {row.turn:,} | {row.reads:g} | {row.writes:g} | "
            f"{row.other:g} | {row.items_written:g} | {row.write_units:g} | "
            f"{row.index_write_units:g} | {row.write_bytes:,.0f} | {row.read_bytes:,.0f} | "
            f"{row.read_units:g} | {row.wire_read_bytes:,.0f} | {row.scheduler_calls:g} | "
            f"{row.wake_ups_left:g} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="one tiny iteration")
    parser.add_argument("--checkpoints", default="10,100,500",
                        help="comma-separated turns to measure at (default 10,100,500)")
    parser.add_argument("--json", metavar="PATH", default=None,
                        help="also write the figures as JSON to PATH")
    parser.add_argument("--samples", type=int, default=3,
                        help="turns of each kind averaged at each checkpoint")
    parser.add_argument("--long-checkpoints", default="10,100,1000,2000",
                        help="turns of the long (compacted) session to measure at")
    parser.add_argument("--poll-interval", type=float, default=None,
                        help="control polling interval of the polled turn (default: the "
                             "framework's)")
    args = parser.parse_args(argv)
    os.environ.update(FAKE_AWS_ENV)
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB"):
        os.environ.pop(name, None)
    interval, turn_seconds = args.poll_interval, RUNNING_TURN_SECONDS
    if args.smoke:
        checkpoints, samples, long_checkpoints = [3], 1, [3, 14]
        interval, turn_seconds = interval or 0.1, 0.35
    else:
        checkpoints = sorted(int(c) for c in args.checkpoints.split(",") if c.strip())
        long_checkpoints = sorted(int(c) for c in args.long_checkpoints.split(",")
                                  if c.strip())
        samples = args.samples
    if not checkpoints or checkpoints[0] < 1 or samples < 1:
        parser.error("checkpoints and samples must be positive")
    if interval is not None and interval <= 0:
        parser.error("--poll-interval must be positive")
    rows = measure(checkpoints, samples)
    print("DynamoDBStore cost per turn (moto in-process, counted on the wire and priced by "
          f"DynamoDB's capacity rules, bench/_capacity.py; mean of {samples} turn(s) of each "
          "kind at each checkpoint; a turn's writes add up)\n")
    print(table(rows))
    long_rows, fork_rows = measure_long(long_checkpoints, Wire, MESSAGE, REPLY)
    print("\nLong sessions: a compacted session's turns, and the same session's turns by a "
          f"full-history agent ({CYCLE} turns of each at each checkpoint: the mean, and the "
          "largest)\n")
    print(long_table(long_rows))
    print("\nA fork of that session at each checkpoint: what it writes (one transaction: its "
          "first version item, a reference item and a fork mark in the source), and what it "
          "read\n")
    print(fork_table(fork_rows))
    polls, records = measure_polling(interval, turn_seconds)
    print("\nTurn control polling (a running turn reads its control record every poll "
          "interval: one strongly consistent GetItem; counted on the wire)\n")
    print(polling_table(polls, records))
    offloaded = measure_offload()
    print("\nA session holding one offloaded event (a 50 KB tool result in S3): S3 reads of "
          "each request after it, each in a new process and in a warm one. Deferred: what "
          "the app's sessions load (the body is read when something reads the event); eager: "
          "the store's plain load, side by side. A warm process keeps what it read or wrote.\n")
    print(offload_table(offloaded))
    if args.json:
        figures = {
            "samples": samples,
            "turns": [asdict(row) for row in rows],
            "long_session": [asdict(row) for row in long_rows],
            "forks": [asdict(row) for row in fork_rows],
            "polling": [{"case": p.case, "interval": p.interval, "seconds": p.seconds,
                         "reads": p.reads, "reads_per_second": p.per_second} for p in polls],
            "control_record": [asdict(r) | {"read_units": r.read_units} for r in records],
            "offloaded_reads": [asdict(row) for row in offloaded],
        }
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
