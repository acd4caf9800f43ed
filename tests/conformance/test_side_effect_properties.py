"""Stateful properties of one session under interleaved writers, on every conformance store.

Several writers share one session. A writer's turn is a lazy :class:`TurnStream`: ``start``
pulls its first event (the session is read, and whatever ends or reopens a response is
claimed), and ``finish`` drains it (tools run, the model answers, the slice is committed).
Other writers start and finish in between, so reads and commits interleave deterministically
in one thread and every lost race the commit policy knows is reachable: merged, superseded,
``duplicate_message``, ``already_decided``, ``already_answered``, ``duplicate_retry``, a lost
claim... The writers send messages (``if_busy`` too), answer, decide, retry, interrupt, stop,
steer, pause and resume, edit, move, remove and send-now queued messages, and crash: a started
stream whose claim landed is abandoned (nothing more of it is committed, as if its process
died) and the app clock jumps past the claim's lease, so the next request finds the
invocation stranded and takes it over.

After every step the machine checks:

1. the session's version never goes back, every successful store write takes the next
   version (never two commits at one version) and the ledger is exactly the slices written;
2. every message id a caller was told landed is in the ledger exactly once, and no message id
   is in the ledger twice;
3. a side-effecting tool ran iff its result is in the ledger, compared as sets of call ids
   (the call id is the idempotency key: two deliveries of one message may both run a tool,
   but under one call id, and that call's result lands once);
4. no approval is both denied and executed;
5. each invocation ends at most once, each call has at most one final result, and each
   message id runs (a ``user`` event, from the inbox or not) at most once;
6. the head is parked, failed or in a step only while an invocation is open;

plus: a refused request writes nothing (and a ``duplicate_message`` refusal names a message
that is in the ledger), and a reply that landed reports the version it wrote.

At the end (teardown) every started stream is finished, the clock passes every lease and one
empty request recovers the session; then nothing is left stranded, the inbox is not left
waiting behind nothing, and every call a decision or an answer let run has its final result
(unless its step is still parked).
"""

from __future__ import annotations

import itertools
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

import pytest
from hypothesis import HealthCheck, Phase, currently_in_test_context, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from pydantic import BaseModel

import dormant
from dormant._turn import MAX_DRAIN
from dormant.events import (
    ApprovalDecided,
    ApprovalRequested,
    Event,
    InvocationEnd,
    InvocationResume,
    InvocationStart,
    QueuedEvent,
    ToolCall,
    ToolInput,
    ToolResult,
    UserEvent,
)
from dormant.handlers import TurnResult, TurnStream
from dormant.models._base import (
    ModelError,
    ModelRequest,
    TextDelta,
    ToolCallChunk,
    ToolMessage,
    UserMessage,
)
from dormant.session import Session
from dormant.stores import Store
from dormant.tools import Signal
from dormant.types import CommitResult

from .conftest import STORE_FACTORIES, StoreFactory

SESSION = "props"
WRITERS = 3
#: Message kinds: what the model does for a message starting with the word.
KINDS = ("hello", "work", "ask", "risky", "fail")
#: The tools with a side effect (each records the call id it ran under).
TOOLS = ("work", "ask", "risky")
#: Codes of a request the session refused: such a request writes nothing.
REFUSALS = frozenset({
    "duplicate_message", "already_decided", "already_answered", "session_failed",
    "nothing_to_retry", "duplicate_retry", "awaiting_input", "invalid_input", "not_pending",
    "not_running", "session_running", "session_paused", "conflict",
})
#: The handler's lease (seconds) on what a claim lets run. The app clock ticks 1 ms per read,
#: so no run of steps outlives a lease by ticking alone: only a crash's jump of the clock (and
#: the teardown's) runs leases out, and which claims it overtook is known.
LEASE = 60.0
LEASE_MS = int(LEASE * 1000)
START_MS = 1_700_000_000_000


class Tag(BaseModel):
    tag: str


class Answer(BaseModel):
    value: str


class KindModel:
    """Deterministic: the reply depends on the last user message's first word.

    ``work``/``fail``: call ``work``, then reply (``fail``: the step after the tool raises
    once per message text: a failure after a tool ran). ``ask``: call the yielding ``ask``.
    ``risky``: call ``risky`` (under user approval). Else: plain text. ``outages``: how many
    of the next model calls raise, whatever they are asked.
    """

    def __init__(self) -> None:
        self.outages = 0
        self.failed_once: set[str] = set()

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[Any]:
        if self.outages:
            self.outages -= 1
            raise ModelError("down")
        messages = request.messages
        text = next(m.text for m in reversed(messages) if isinstance(m, UserMessage))
        kind = text.split()[0]
        if isinstance(messages[-1], ToolMessage):
            if kind == "fail" and text not in self.failed_once:
                self.failed_once.add(text)
                raise ModelError("down")
            yield TextDelta(f"{messages[-1].name} settled")
            return
        tool = {"work": "work", "fail": "work", "ask": "ask", "risky": "risky"}.get(kind)
        if tool is None:
            yield TextDelta("noted")
        else:
            yield ToolCallChunk(call_id="", name=tool, args={"tag": text})


@dataclass
class Done:
    """A finished request: what was asked, what came back, what its stream wrote (the
    versions, and each write's event ids)."""

    serial: int
    input: dict[str, Any]
    result: TurnResult
    wrote: list[int] = field(default_factory=list)
    slices: list[list[str]] = field(default_factory=list)


class SideEffectMachine(RuleBasedStateMachine):
    factory: ClassVar[StoreFactory]

    def __init__(self) -> None:
        super().__init__()
        self._store_gen = type(self).factory()
        store = next(self._store_gen)
        #: Every successful store write: (stream serial or None, version, event ids).
        self.writes: list[tuple[int | None, int, list[str]]] = []
        self.actor: int | None = None
        self._spy(store)
        #: The app clock (epoch ms): each read ticks 1 ms (event times stay ordered); a crash
        #: jumps it past the leases (see LEASE).
        self.now = START_MS
        self.app = dormant.App(name="props", store=store, clock=self._clock)
        self.model = KindModel()
        #: (stream serial, tool, call id) of every execution of a side-effecting tool, and
        #: the invocation each call id ran in.
        self.executed: list[tuple[int | None, str, str]] = []
        self.ran_in: dict[str, str | None] = {}

        def run(ctx: dormant.ToolContext) -> dict[str, str]:
            self.executed.append((self.actor, ctx.tool, ctx.call_id))
            self.ran_in[ctx.call_id] = ctx.invocation_id
            return {"ran": ctx.call_id}

        app = self.app
        tools = [
            app.tool(name="work", description="a side effect", schema=Tag, execute=run),
            app.tool(name="ask", description="asks, then acts", schema=Tag,
                     yield_schema=Answer, execute=run),
            app.tool(name="risky", description="acts once approved", schema=Tag, execute=run),
        ]
        agent = app.agent(name="props", model=self.model, tools=tools,
                          context=[app.context.history(limit=2)],
                          tool_approval={"risky": "user-approval"})
        # The control record (stops, steers, pauses asked of a running turn) is read at the
        # turn's step boundaries, on its own thread: deterministic. The background poll (by
        # wall-clock time) would make a slow store's examples differ run to run: it is
        # pushed out of any example's reach.
        self.handler = app.handler.turn(agent=agent, lease=LEASE, poll_interval=3600.0)
        self.streams: dict[int, tuple[int, dict[str, Any], TurnStream]] = {}
        self.done: list[Done] = []
        self.serials = itertools.count(1)
        self.fresh = itertools.count(1)
        self.sent: dict[str, str] = {}  # message id -> text
        self.steer_ids: set[str] = set()
        self.retry_ids: list[str] = []
        self.yields_seen: list[str] = []
        self.approvals_seen: list[str] = []
        #: Ids an interrupt may name that the session waited on at some point (call,
        #: approval and invocation ids), and every invocation id the ledger started.
        self.owners_seen: list[str] = []
        self.invocations_seen: list[str] = []
        #: Streams abandoned after their claim landed (their process died), and live streams
        #: whose claim's lease a crash's clock jump ran out (slow claimers, taken for dead).
        self.crashed: set[int] = set()
        self.overrun: set[int] = set()
        self.last_version = 0
        #: The session after the last step (what preconditions and draws look at).
        self.session: Session | None = None
        self.status = "new"

    def _clock(self) -> int:
        self.now += 1
        return self.now

    def _spy(self, store: Store) -> None:
        append = store.append

        def spied(head: Any, events: Any, *, expected_version: int) -> CommitResult:
            result = append(head, events, expected_version=expected_version)
            if result.ok:
                assert result.version is not None
                self.writes.append((self.actor, result.version, [e.id for e in events]))
            return result

        store.append = spied  # type: ignore[method-assign]

    def teardown(self) -> None:
        try:
            # teardown runs in a finally: after a failed step, that failure is the report
            if sys.exc_info()[1] is None:
                self._recover_and_check()
        finally:
            for _, _, stream in self.streams.values():  # (only after a failure)
                stream.close()
            self.streams.clear()
            next(self._store_gen, None)  # the factory's teardown

    # --- writers -----------------------------------------------------------------------------

    def _start(self, writer: int, given: dict[str, Any]) -> None:
        if writer in self.streams:
            self._finish(writer)
        serial = next(self.serials)
        stream = self.handler({"session_id": SESSION, "input": given})
        self.actor = serial
        try:
            next(stream)
        except StopIteration:
            self._record(serial, given, stream)
            return
        finally:
            self.actor = None
        self.streams[writer] = (serial, given, stream)

    def _finish(self, writer: int) -> None:
        serial, given, stream = self.streams.pop(writer)
        self.actor = serial
        try:
            for _ in stream:
                pass
        finally:
            self.actor = None
        self._record(serial, given, stream)

    def _record(self, serial: int, given: dict[str, Any], stream: TurnStream) -> None:
        result = stream.result
        assert result is not None
        asked = next((k for k in ("message", "steer", "stop", "interrupt", "pause", "resume",
                                  "tools", "approvals", "retry") if k in given), "nudge")
        if "queue" in given:
            asked = "queue " + given["queue"][0]["op"]
        if currently_in_test_context():  # (not in a replay of a found sequence)
            event(f"{asked}: {result.status}/{result.commit_status}/{result.code}")
        mine = [(v, ids) for actor, v, ids in self.writes if actor == serial]
        self.done.append(Done(serial, given, result, [v for v, _ in mine],
                              [ids for _, ids in mine]))

    def _claimed(self, serial: int) -> bool:
        """Whether the stream ``serial`` wrote anything (started streams write only claims)."""
        return any(actor == serial for actor, _, _ in self.writes)

    def _pick(self, data: st.DataObject, current: list[str], stale: list[str],
              label: str) -> str:
        """An id the session names now, or (sometimes) one it named before."""
        pool = current
        if not current or (bool(stale) and data.draw(st.booleans(), label=f"{label} is stale")):
            pool = stale
        return data.draw(st.sampled_from(pool), label=label)

    def _current_owners(self) -> list[str]:
        """What an interrupt may name now: the step's unresolved calls and approvals, and
        the open invocation (failed or running ones may be ended; a parked one refuses)."""
        if self.session is None:
            return []
        head = self.session.head
        owners = [c.call_id for c in head.unresolved()]
        owners += [c.approval_id for c in head.unresolved() if c.approval_id is not None]
        if head.open_invocation is not None:
            owners.append(head.open_invocation)
        return owners

    def _current_invocations(self) -> list[str]:
        """What a stop or steer may name now: the open invocation and those the started
        streams run (a fresh one writes nothing until it ends)."""
        ids = [stream.invocation_id for _, _, stream in self.streams.values()]
        if self.session is not None and self.session.head.open_invocation is not None:
            ids.append(self.session.head.open_invocation)
        return sorted(set(ids))

    def _queued_ids(self) -> list[str]:
        return [] if self.session is None else [q["id"] for q in self.session.head.queue]

    def _message(self, kind: str) -> tuple[str, str]:
        n = next(self.fresh)
        message_id, text = f"m{n}", f"{kind} {n}"
        self.sent[message_id] = text
        return message_id, text

    # --- rules -------------------------------------------------------------------------------

    @rule(writer=st.integers(0, WRITERS - 1), kind=st.sampled_from(KINDS),
          if_busy=st.sampled_from(["", "", "reject", "interrupt"]))
    def send(self, writer: int, kind: str, if_busy: str) -> None:
        """A new message; what it does if the session cannot take it now: queue (default),
        reject (409), interrupt (end the waiting response and run)."""
        message_id, text = self._message(kind)
        given: dict[str, Any] = {"message": text, "message_id": message_id}
        if if_busy:
            given["if_busy"] = if_busy
        self._start(writer, given)

    @precondition(lambda self: self.sent)
    @rule(writer=st.integers(0, WRITERS - 1), data=st.data())
    def resend(self, writer: int, data: st.DataObject) -> None:
        """A duplicate delivery of an earlier message (same id, same text), or of a steer as a
        message (a steer's id is a message id: it lands once)."""
        message_id = data.draw(st.sampled_from(list(self.sent)), label="message_id")
        self._start(writer, {"message": self.sent[message_id], "message_id": message_id})

    @precondition(lambda self: self.yields_seen)
    @rule(writer=st.integers(0, WRITERS - 1), data=st.data())
    def answer(self, writer: int, data: st.DataObject) -> None:
        call_id = data.draw(st.sampled_from(self.yields_seen[::-1]), label="call_id")
        self._start(writer, {"tools": [{"call_id": call_id, "input": {"value": "yes"}}]})

    @precondition(lambda self: self.approvals_seen)
    @rule(writer=st.integers(0, WRITERS - 1), approved=st.booleans(), data=st.data())
    def decide(self, writer: int, approved: bool, data: st.DataObject) -> None:
        approval_id = data.draw(st.sampled_from(self.approvals_seen[::-1]), label="approval_id")
        self._start(writer, {"approvals": [{"approval_id": approval_id,
                                            "approved": approved}]})

    @precondition(lambda self: self.status == "failed")
    @rule(writer=st.integers(0, WRITERS - 1), data=st.data())
    def retry(self, writer: int, data: st.DataObject) -> None:
        """Retry the failed invocation, with a fresh retry id or one sent before."""
        if bool(self.retry_ids) and data.draw(st.booleans(), label="reuse"):
            retry_id = data.draw(st.sampled_from(self.retry_ids[::-1]), label="retry_id")
        else:
            retry_id = f"r{next(self.fresh)}"
            self.retry_ids.append(retry_id)
        self._start(writer, {"retry": {"retry_id": retry_id}})

    @precondition(lambda self: self.retry_ids and self.status != "failed")
    @rule(writer=st.integers(0, WRITERS - 1), data=st.data())
    def stray_retry(self, writer: int, data: st.DataObject) -> None:
        """A late duplicate of a retry (or one racing a retry that landed)."""
        retry_id = data.draw(st.sampled_from(self.retry_ids[::-1]), label="retry_id")
        self._start(writer, {"retry": {"retry_id": retry_id}})

    @precondition(lambda self: self.status == "awaiting_input" or (
        self.session is not None and (self.session.head.running or self.session.head.queue)))
    @rule(writer=st.integers(0, WRITERS - 1))
    def nudge(self, writer: int) -> None:
        """An empty request: resumes a parked step whose inputs all landed, takes a stranded
        invocation over, runs the inbox (else a no-op)."""
        self._start(writer, {})

    @precondition(lambda self: self.owners_seen or self._current_owners())
    @rule(writer=st.integers(0, WRITERS - 1), data=st.data())
    def interrupt(self, writer: int, data: st.DataObject) -> None:
        """End what the session waits on, named by one id, or by one it no longer waits on
        (refused: a delayed interrupt cannot end later work)."""
        current = self._current_owners()
        stale = [o for o in self.owners_seen if o not in current]
        owner = self._pick(data, current, stale, "owner")
        self._start(writer, {"interrupt": {"owner": owner}})

    @precondition(lambda self: self.invocations_seen or self._current_invocations())
    @rule(writer=st.integers(0, WRITERS - 1), data=st.data())
    def stop(self, writer: int, data: st.DataObject) -> None:
        """Stop an invocation: the open one, one a started stream runs, or one that ended."""
        current = self._current_invocations()
        stale = [i for i in self.invocations_seen if i not in current]
        invocation = self._pick(data, current, stale, "invocation_id")
        self._start(writer, {"stop": {"invocation_id": invocation}})

    @precondition(lambda self: self.invocations_seen or self._current_invocations())
    @rule(writer=st.integers(0, WRITERS - 1), kind=st.sampled_from(KINDS), data=st.data())
    def steer(self, writer: int, kind: str, data: st.DataObject) -> None:
        """Steer an invocation (not running: the steer is an ordinary message at once)."""
        current = self._current_invocations()
        stale = [i for i in self.invocations_seen if i not in current]
        invocation = self._pick(data, current, stale, "invocation_id")
        message_id, text = self._message(kind)
        self.steer_ids.add(message_id)
        self._start(writer, {"steer": {"text": text, "invocation_id": invocation,
                                       "id": message_id}})

    @rule(writer=st.integers(0, WRITERS - 1))
    def pause(self, writer: int) -> None:
        self._start(writer, {"pause": True})

    @rule(writer=st.integers(0, WRITERS - 1))
    def resume(self, writer: int) -> None:
        self._start(writer, {"resume": True})

    @precondition(lambda self: self.sent)
    @rule(writer=st.integers(0, WRITERS - 1), op=st.sampled_from(["edit", "move", "remove"]),
          kind=st.sampled_from(KINDS), position=st.integers(0, 3), data=st.data())
    def queue_op(self, writer: int, op: str, kind: str, position: int,
                 data: st.DataObject) -> None:
        """Edit, move or remove a queued message (or one that left the inbox)."""
        current = self._queued_ids()
        message_id = self._pick(data, current, [m for m in self.sent if m not in current],
                                "message_id")
        given: dict[str, Any] = {"op": op, "id": message_id}
        if op == "edit":
            given["text"] = f"{kind} {next(self.fresh)}"
        elif op == "move":
            given["position"] = position
        self._start(writer, {"queue": [given]})

    @precondition(lambda self: self.sent)
    @rule(writer=st.integers(0, WRITERS - 1), data=st.data())
    def send_now(self, writer: int, data: st.DataObject) -> None:
        """Interrupt what the session waits on and run a queued message now."""
        current = self._queued_ids()
        message_id = self._pick(data, current, [m for m in self.sent if m not in current],
                                "message_id")
        self._start(writer, {"queue": [{"op": "send_now", "id": message_id}]})

    @rule(writer=st.integers(0, WRITERS - 1))
    def finish(self, writer: int) -> None:
        if writer in self.streams:
            self._finish(writer)

    @precondition(lambda self: any(self._claimed(s) for s, _, _ in self.streams.values()))
    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        """A started stream whose claim landed dies: nothing more of it is committed, and
        the clock passes its lease (and any other live claimer's of the running invocation:
        that one becomes a slow claimer, taken for dead)."""
        writers = sorted(w for w, (s, _, _) in self.streams.items() if self._claimed(s))
        writer = data.draw(st.sampled_from(writers), label="writer")
        serial, _, stream = self.streams.pop(writer)
        stream.close()
        self.crashed.add(serial)
        head = self.session.head if self.session is not None else None
        if head is not None and head.running:
            self.overrun.update(s for s, _, other in self.streams.values()
                                if self._claimed(s) and other.invocation_id == head.open_invocation)
        self.now += 2 * LEASE_MS

    @rule()
    def outage(self) -> None:
        """The next model call fails, whoever makes it."""
        self.model.outages = 1

    # --- properties ----------------------------------------------------------------------------

    def _ledger(self) -> tuple[int, list[Event]]:
        session = self.app.sessions.get(SESSION)
        self.session = session
        if session is None:
            return 0, []
        self.status = session.status
        for tool in session.yielded_tools:
            if tool.call_id not in self.yields_seen:
                self.yields_seen.append(tool.call_id)
        for pending in session.pending_approvals:
            if pending.approval_id not in self.approvals_seen:
                self.approvals_seen.append(pending.approval_id)
        for owner in self._current_owners():
            if owner not in self.owners_seen:
                self.owners_seen.append(owner)
        for e in session.events:
            if isinstance(e, InvocationStart) and e.invocation_id is not None \
                    and e.invocation_id not in self.invocations_seen:
                self.invocations_seen.append(e.invocation_id)
        return session.version, session.events

    @invariant()
    def properties(self) -> None:
        version, events = self._ledger()
        self._versions(version, events)
        self._messages(events)
        self._side_effects(events)
        self._approvals(events)
        self._once(events)
        self._consistent()
        self._refusals_write_nothing()

    def _versions(self, version: int, events: list[Event]) -> None:
        """1. The version never goes back; every write takes the next version, once."""
        assert version >= self.last_version, f"version went back {self.last_version} -> {version}"
        self.last_version = version
        written = [v for _, v, _ in self.writes]
        assert written == list(range(1, len(written) + 1)), f"writes at versions {written}"
        assert version == len(written), f"session at v{version} after {len(written)} writes"
        assert [e.id for e in events] == [i for _, _, ids in self.writes for i in ids], \
            "the ledger is not the slices written, in order"
        runs = Counter(e.message_id for e in events if isinstance(e, UserEvent))
        by_id = {e.id: e for e in events}
        for done in self.done:
            for queued in done.result.drained or ():
                assert runs[queued] == 1, (
                    f"request {done.input} reported {queued} drained (run from the inbox), "
                    f"but it ran {runs[queued]} times")
            if done.wrote and done.result.landed:
                # Its own turn's version: the last it wrote before the request went on to the
                # inbox. Each turn run after it is a claim and a commit (one request, one
                # thread: nobody races them): a queued message's start (``drained`` names
                # it), or the takeover of an invocation found stranded, whose claim moves
                # only the lease (it writes no event; ``drained`` does not name it).
                assert done.result.version in done.wrote, (
                    f"request {done.input} reported v{done.result.version}, "
                    f"wrote {done.wrote}")
                # Each tool step of those turns writes once more, before its tools run:
                # a slice that ends with the step's calls (the write-ahead).
                after = done.wrote.index(done.result.version) + 1
                takeovers = sum(1 for ids in done.slices[after:] if not ids)
                drained = len(done.result.drained or ())
                ahead = sum(1 for ids in done.slices[after:]
                            if ids and isinstance(by_id.get(ids[-1]), ToolCall))
                assert len(done.wrote) - after == 2 * (drained + takeovers) + ahead, (
                    f"request {done.input} reported v{done.result.version}, wrote "
                    f"{done.wrote} ({done.slices}), drained {done.result.drained}")

    def _messages(self, events: list[Event]) -> None:
        """2. A message id the caller was told landed is in the ledger once; none twice. A
        message that waited in the inbox lands with its ``queued`` event; the ``user`` event
        it runs as later (``queued=True``) is the same message, not a second landing."""
        held = Counter(e.message_id for e in events
                       if (isinstance(e, UserEvent) and not e.queued)
                       or isinstance(e, QueuedEvent))
        twice = {m: n for m, n in held.items() if n > 1}
        assert not twice, f"message ids in the ledger more than once: {twice}"
        for done in self.done:
            message_id = done.input.get("message_id") or done.input.get("steer", {}).get("id")
            if message_id is None:
                # A request without a message of its own may run one: a steer that missed its
                # invocation (a turn starting now runs those first). A racing turn may land
                # that steer first: the duplicate named is then that steer, in the ledger.
                assert done.result.code != "duplicate_message" or any(
                    held[s] == 1 and f"message {s} is already in" in (done.result.error or "")
                    for s in self.steer_ids), (
                    f"request {done.input} carries no message, yet was refused as a duplicate "
                    f"message: {done.result.error}")
                continue
            if "steer" in done.input and done.result.status == "accepted":
                continue  # in the control record, for the running turn (what it committed, if
                # anything, is a pause it took up)
            if done.result.landed:
                assert held[message_id] == 1, (
                    f"{message_id} reported {done.result.commit_status} "
                    f"(v{done.result.version}) but is in the ledger {held[message_id]} times")
            if done.result.code == "duplicate_message":
                assert held[message_id] == 1, f"{message_id} refused as a duplicate of nothing"

    def _side_effects(self, events: list[Event]) -> None:
        """3. A tool ran iff its result is in the ledger (call ids as sets).

        Not for an invocation a started stream runs (it commits at its end), nor a stream
        that died after running a tool (its result died with it: the takeover reruns the
        call under its id, unless the invocation is ended first), nor a slow claimer whose
        lease ran out while it lived (the session took it for dead: its invocation may have
        been taken over or ended meanwhile); the teardown checks those calls ended with a
        final result. The ledger side holds for every stream: no result of a tool that never
        ran."""
        settled = [e.call_id for e in events if isinstance(e, ToolResult) and e.name in TOOLS
                   and not e.denied and e.error is None]
        again = {c: n for c, n in Counter(settled).items() if n > 1}
        assert not again, f"call ids settled more than once: {again}"
        ran = {call_id for _, _, call_id in self.executed}
        excused = self.crashed | self.overrun
        # A started stream commits what it ran when it finishes (a takeover runs the
        # stranded step's tools before its first event), and the calls of an invocation a
        # started stream runs are its to record: a redelivery refused as a duplicate ran them
        # under the same call ids as the message's other run, from the inbox, which is live.
        # So are a claimed invocation's whose claimer died: its takeover reruns them.
        live: set[str | None] = {stream.invocation_id for _, _, stream in self.streams.values()}
        if self.session is not None and self.session.head.running:
            live.add(self.session.head.open_invocation)
        lost = [(tool, call_id, self._request(serial)) for serial, tool, call_id
                in self.executed if call_id not in settled and serial not in excused
                and self.ran_in[call_id] not in live]
        assert not lost, f"tools ran but their results are not in the ledger: {lost}"
        assert set(settled) - ran == set(), \
            f"results in the ledger of tools that never ran: {sorted(set(settled) - ran)}"

    def _approvals(self, events: list[Event]) -> None:
        """4. No approval is both denied and executed (and none is decided twice)."""
        calls = {e.approval_id: e.call_id for e in events if isinstance(e, ApprovalRequested)}
        decided = Counter(e.approval_id for e in events if isinstance(e, ApprovalDecided))
        twice = {a: n for a, n in decided.items() if n > 1}
        assert not twice, f"approvals decided more than once: {twice}"
        ran = {call_id for _, _, call_id in self.executed}
        for decision in events:
            if isinstance(decision, ApprovalDecided) and not decision.approved:
                call_id = calls.get(decision.approval_id, decision.call_id)
                assert call_id not in ran, f"approval {decision.approval_id} denied, yet it ran"

    def _once(self, events: list[Event]) -> None:
        """5. An invocation ends once; a call has one final result; a message runs once."""
        ends = Counter(e.invocation_id for e in events if isinstance(e, InvocationEnd))
        twice = {i: n for i, n in ends.items() if n > 1}
        assert not twice, f"invocations ended more than once: {twice}"
        finals = Counter(e.call_id for e in events
                         if isinstance(e, ToolResult) and not e.preliminary)
        twice = {c: n for c, n in finals.items() if n > 1}
        assert not twice, f"calls with more than one final result: {twice}"
        runs = Counter(e.message_id for e in events if isinstance(e, UserEvent))
        twice = {m: n for m, n in runs.items() if n > 1}
        assert not twice, f"messages that ran more than once: {twice}"

    def _consistent(self) -> None:
        """6. The head is parked, failed or in a step only with an open invocation: a slice of
        an invocation that ended meanwhile does not carry it on after its end."""
        if self.session is None:
            return
        head = self.session.head
        assert head.open_invocation is not None or not (
            head.parked or head.failed or head.step), (
            f"no open invocation, yet the head is parked={head.parked} failed={head.failed} "
            f"with step {[c.call_id for c in head.step]}")

    def _request(self, serial: int | None) -> str:
        """What a stream was asked and told (for failure messages)."""
        for done in self.done:
            if done.serial == serial:
                result = done.result
                return (f"{done.input} -> {result.status}/{result.commit_status}"
                        f"@v{result.version} {result.code or ''}".rstrip())
        if serial in self.crashed:
            return f"stream {serial} (crashed)"
        return f"stream {serial} (not finished)"

    def _refusals_write_nothing(self) -> None:
        """A request the session refused wrote nothing (not even a claim) but, refused as a
        duplicate after its tools ran, the record of those tools: one closed invocation,
        ended ``superseded``."""
        for done in self.done:
            if done.result.code in REFUSALS:
                wrote = done.wrote
                if done.result.code in ("duplicate_message", "duplicate_retry") \
                        and len(done.slices) == 1 and _kept_record(done.slices[0], self):
                    wrote = []
                assert not wrote, (
                    f"request {done.input} was refused ({done.result.code}) yet wrote "
                    f"versions {done.wrote}")

    # --- the end -------------------------------------------------------------------------------

    def _recover_and_check(self) -> None:
        """The writers stop: every started stream finishes, the clock passes every lease and
        one empty request recovers the session (takes a stranded invocation over, settles a
        parked step whose inputs all landed, drains the inbox). Then nothing is left behind."""
        for writer in sorted(self.streams):
            self._finish(writer)
        self.properties()
        self.now += 2 * LEASE_MS
        self._start(0, {})
        if 0 in self.streams:
            self._finish(0)
        recovery = self.done[-1]
        self.properties()
        session = self.session
        if session is None:
            return
        head, events = session.head, session.events
        assert not head.stranded(self.now), (
            f"left stranded after the recovery request {self._request(recovery.serial)}: "
            f"{head.open_invocation} runs under a lease that ran out")
        # The inbox waits only behind something: a pause, a failure, a step waiting on
        # people, a running turn (or the one request's drain limit).
        waiting = (session.status in ("paused", "failed") or head.busy() in ("tool", "input")
                   or head.running
                   or len(recovery.result.drained or ()) >= MAX_DRAIN)
        assert waiting or not head.queue, (
            f"inbox {[q['id'] for q in head.queue]} left waiting behind nothing after the "
            f"recovery request {self._request(recovery.serial)}")
        # A call that a decision or an answer let run has its final result, unless its step
        # is still parked: on other calls (its step: the calls the open invocation made since
        # it last started or resumed; the head's step may still hold an older step's
        # unsettled calls beside a newer one's), or on a pause (a resume carries the step on).
        requested = {e.approval_id: e.call_id for e in events
                     if isinstance(e, ApprovalRequested)}
        claimed = [requested.get(e.approval_id, e.call_id) for e in events
                   if isinstance(e, ApprovalDecided) and e.approved]
        claimed += [e.call_id for e in events if isinstance(e, ToolInput)]
        final = {e.call_id for e in events if isinstance(e, ToolResult) and not e.preliminary}
        parked: set[str] = set()
        if head.open_invocation is not None and session.status == "paused":
            parked = {c.call_id for c in head.step}
        elif head.open_invocation is not None and head.parked == "tool" and head.unresolved():
            for e in events:
                if e.invocation_id != head.open_invocation:
                    continue
                if isinstance(e, InvocationStart | InvocationResume):
                    parked = set()
                elif isinstance(e, ToolCall):
                    parked.add(e.call_id)
        unsettled = sorted(set(claimed) - final - parked)
        assert not unsettled, (
            f"calls a decision or answer let run have no final result: {unsettled} "
            f"(recovery: {self._request(recovery.serial)})")
        # every tool that ran (a dead stream's too) ended with a final result of its call
        orphans = sorted({c for _, _, c in self.executed} - final)
        assert not orphans, f"tools ran but their calls have no final result: {orphans}"


#: Examples per store (each example enters the store factory afresh: a DynamoDB example creates
#: a table, so those get few). A failure found on memory is shrunk; on the slower stores it
#: is reported as found (shrinking there would take minutes, and the commit policy under test
#: is the same code for every store).
EXAMPLES = {"memory": 300, "sqlite": 150, "dynamodb-moto": 20, "dynamodb-server": 15,
            "dynamodb-local": 15}
SHRUNK = frozenset({"memory"})


@pytest.mark.parametrize("store_name", sorted(STORE_FACTORIES))
def test_side_effects_land_once_under_interleaved_writers(store_name: str) -> None:
    _, factory = STORE_FACTORIES[store_name]
    machine = type(f"SideEffects_{store_name.replace('-', '_')}", (SideEffectMachine,),
                   {"factory": staticmethod(factory)})
    phases = [Phase.explicit, Phase.reuse, Phase.generate]
    if store_name in SHRUNK:
        phases.append(Phase.shrink)
    run_state_machine_as_test(machine, settings=settings(
        max_examples=EXAMPLES[store_name], stateful_step_count=25, deadline=None,
        phases=phases, suppress_health_check=[HealthCheck.too_slow]))


def _kept_record(ids: list[str], machine: SideEffectMachine) -> bool:
    """Whether the slice of event ids ``ids`` is a refused turn's record of its tools."""
    session = machine.session
    if session is None:
        return False
    events = {e.id: e for e in session.events}
    kinds = [events[i].type for i in ids if i in events]
    return (len(kinds) == len(ids) and kinds[0] == "invocation_start"
            and kinds[-1] == "invocation_end"
            and set(kinds[1:-1]) <= {"tool_call", "tool_result"})


# --- found sequences -----------------------------------------------------------------------------
#
# Sequences the machine found, shrunk, replayed step by step on memory (with the checks after
# every step and the teardown's) so that they fail, or pass once fixed, whatever the search
# happens to draw. The commit policy they exercise is the same code on every store.

#: A scripted draw: a value, or a function of the machine giving one.
Draw = Any
Step = tuple[str, dict[str, Any], list[Draw] | None]


class _Script:
    """Stands in for hypothesis' ``data`` in a replay: each draw takes the next value."""

    def __init__(self, machine: SideEffectMachine, values: list[Draw]) -> None:
        self.machine = machine
        self.values = list(values)

    def draw(self, strategy: Any, label: str | None = None) -> Any:
        value = self.values.pop(0)
        return value(self.machine) if callable(value) else value


def _running(writer: int) -> Draw:
    """The invocation id writer ``writer``'s started stream runs."""
    return lambda machine: machine.streams[writer][2].invocation_id


def _open(machine: SideEffectMachine) -> str | None:
    return None if machine.session is None else machine.session.head.open_invocation


def _asked(machine: SideEffectMachine) -> str:
    return machine.yields_seen[-1]


FOUND: dict[str, list[Step]] = {
    # A turn took a steer at its step boundary (from the control record) while a resend
    # landed the steer's id as a message: the turn is refused as a duplicate of it, so its
    # own message (m1) is lost, and so is the result of the tool it ran.
    "steer_taken_while_its_id_landed_as_a_message": [
        ("send", {"writer": 1, "kind": "work", "if_busy": ""}, None),
        ("steer", {"writer": 0, "kind": "hello"}, [_running(1)]),
        ("resend", {"writer": 0}, ["m2"]),
    ],
    # Likewise, but the steer's id landed before the turn took it: taking it at the step
    # boundary fails the run after its tool ran, so the session is left failed and the
    # reply says duplicate_message though the turn's message (m1) landed.
    "steer_taken_after_its_id_landed": [
        ("send", {"writer": 1, "kind": "work", "if_busy": ""}, None),
        ("steer", {"writer": 0, "kind": "hello"}, [_running(1)]),
        ("resend", {"writer": 0}, ["m2"]),
        ("resend", {"writer": 0}, ["m1"]),
    ],
    # A steer missed its invocation; two turns started meanwhile each run it first; the one
    # that commits second is refused as a duplicate of the steer, and its own message (m3)
    # is lost though the caller is told it is a duplicate.
    "missed_steer_run_by_two_turns": [
        ("send", {"writer": 0, "kind": "hello", "if_busy": ""}, None),
        ("steer", {"writer": 1, "kind": "hello"}, [_running(0)]),
        ("finish", {"writer": 0}, None),
        ("send", {"writer": 0, "kind": "hello", "if_busy": ""}, None),
        ("send", {"writer": 1, "kind": "hello", "if_busy": ""}, None),
        ("finish", {"writer": 1}, None),
        ("finish", {"writer": 0}, None),
    ],
    # A message whose id is a steer's that missed its invocation: the turn runs the steer
    # first and then the message, one id twice, and refuses itself as a duplicate.
    "message_with_a_missed_steers_id": [
        ("send", {"writer": 0, "kind": "hello", "if_busy": ""}, None),
        ("steer", {"writer": 1, "kind": "hello"}, [_running(0)]),
        ("resend", {"writer": 0}, ["m2"]),
        ("finish", {"writer": 0}, None),
    ],
    # if_busy="interrupt" claims the interrupt alone; a redelivery of the message then runs
    # it first, and the first delivery is refused as a duplicate though it wrote the claim.
    "interrupting_message_redelivered": [
        ("send", {"writer": 0, "kind": "ask", "if_busy": ""}, None),
        ("finish", {"writer": 0}, None),
        ("send", {"writer": 1, "kind": "hello", "if_busy": "interrupt"}, None),
        ("resend", {"writer": 0}, ["m2"]),
        ("finish", {"writer": 0}, None),
        ("finish", {"writer": 1}, None),
    ],
    # After the answer's turn the inbox drains with the session as that turn read it: the
    # drained turn takes up the pause asked meanwhile and runs nothing, yet m2 is reported
    # drained (and it stays in the inbox).
    "drain_that_took_up_a_pause": [
        ("send", {"writer": 0, "kind": "ask", "if_busy": ""}, None),
        ("send", {"writer": 0, "kind": "hello", "if_busy": ""}, None),
        ("answer", {"writer": 0}, [_asked]),
        ("pause", {"writer": 1}, None),
        ("finish", {"writer": 0}, None),
    ],
    # A pause asked while an answer's claimed turn runs is taken up by the next request (a
    # stop), which then finds the invocation paused, so waiting, and ends it; the claimer's
    # tool result lands beside the stop's: two final results of one call.
    "stop_of_a_claimed_turn_while_a_pause_waits": [
        ("send", {"writer": 0, "kind": "ask", "if_busy": ""}, None),
        ("finish", {"writer": 0}, None),
        ("answer", {"writer": 0}, [_asked]),
        ("pause", {"writer": 1}, None),
        ("stop", {"writer": 1}, [_open]),
        ("finish", {"writer": 0}, None),
    ],
    # Likewise an interrupt ends the claimed start of a queued message while a pause waits;
    # that turn's slice (its call, its yield) is then merged after the invocation's end, and
    # the head is left parked with no open invocation.
    "claimed_start_interrupted_while_a_pause_waits": [
        ("send", {"writer": 0, "kind": "ask", "if_busy": ""}, None),
        ("send", {"writer": 0, "kind": "ask", "if_busy": ""}, None),
        ("interrupt", {"writer": 1}, [_asked]),
        ("pause", {"writer": 2}, None),
        ("interrupt", {"writer": 2}, [False, _open]),
        ("finish", {"writer": 1}, None),
    ],
    # An answer's claimer dies; a pause is taken up by the resume request, which then
    # carries the invocation on ("continue") without running the answered call: the model
    # is asked again and the answered call never gets a result.
    "stranded_claim_paused_and_resumed": [
        ("send", {"writer": 0, "kind": "ask", "if_busy": ""}, None),
        ("finish", {"writer": 0}, None),
        ("answer", {"writer": 0}, [_asked]),
        ("crash", {}, [0]),
        ("pause", {"writer": 0}, None),
        ("resume", {"writer": 0}, None),
    ],
    # A message's first delivery runs its tool; a redelivery queued meanwhile is started from
    # the inbox (by the interrupt) and fails before its tool; the first delivery is then
    # refused as a duplicate, and the result of the tool it ran is dropped.
    "duplicate_refused_after_the_other_run_failed": [
        ("send", {"writer": 1, "kind": "work", "if_busy": ""}, None),
        ("send", {"writer": 0, "kind": "ask", "if_busy": ""}, None),
        ("resend", {"writer": 0}, ["m1"]),
        ("outage", {}, None),
        ("interrupt", {"writer": 0}, [_asked]),
        ("finish", {"writer": 0}, None),
        ("finish", {"writer": 1}, None),
    ],
}


class _OnMemory(SideEffectMachine):
    factory = staticmethod(STORE_FACTORIES["memory"][1])


@pytest.mark.parametrize("name", sorted(FOUND))
def test_found_sequences_keep_the_properties(name: str) -> None:
    machine = _OnMemory()
    try:
        machine.properties()
        for rule_name, arguments, draws in FOUND[name]:
            if draws is not None:
                arguments = {**arguments, "data": cast(st.DataObject, _Script(machine, draws))}
            getattr(machine, rule_name)(**arguments)
            machine.properties()
    finally:
        machine.teardown()  # the recovery and the final checks (unless a step failed)
