"""Stateful properties of one session under interleaved writers, on every conformance store.

Several writers share one session. A writer's turn is a lazy :class:`TurnStream`: ``start``
pulls its first event (the session is read, and a decision or an answer is claimed), and
``finish`` drains it (tools run, the model answers, the slice is committed). Other writers
start and finish in between, so reads and commits interleave deterministically in one thread
and every lost race the commit policy knows is reachable: merged, superseded,
``duplicate_message``, ``already_decided``, ``already_answered``, ``duplicate_retry``...

After every step the machine checks:

1. the session's version never goes back, every successful store write takes the next
   version (never two commits at one version) and the ledger is exactly the slices written;
2. every message id a caller was told landed is in the ledger exactly once, and no message id
   is in the ledger twice;
3. a side-effecting tool ran iff its result is in the ledger, compared as sets of call ids
   (the call id is the idempotency key: two deliveries of one message may both run a tool,
   but under one call id, and that call's result lands once);
4. no approval is both denied and executed;

plus: a refused request writes nothing (and a ``duplicate_message`` refusal names a message
that is in the ledger), and a reply that landed reports the version it wrote.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, Phase, event, settings
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
from dormant.events import (
    ApprovalDecided,
    ApprovalRequested,
    Event,
    QueuedEvent,
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
})


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
    """A finished request: what was asked, what came back, what its stream wrote."""

    serial: int
    input: dict[str, Any]
    result: TurnResult
    wrote: list[int] = field(default_factory=list)


class SideEffectMachine(RuleBasedStateMachine):
    factory: ClassVar[StoreFactory]

    def __init__(self) -> None:
        super().__init__()
        self._store_gen = self.factory()
        store = next(self._store_gen)
        #: Every successful store write: (stream serial or None, version, event ids).
        self.writes: list[tuple[int | None, int, list[str]]] = []
        self.actor: int | None = None
        self._spy(store)
        ticks = itertools.count(1_700_000_000_000)
        self.app = dormant.App(name="props", store=store, clock=lambda: next(ticks))
        self.model = KindModel()
        #: (stream serial, tool, call id) of every execution of a side-effecting tool.
        self.executed: list[tuple[int | None, str, str]] = []

        def run(ctx: dormant.ToolContext) -> dict[str, str]:
            self.executed.append((self.actor, ctx.tool, ctx.call_id))
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
        self.handler = app.handler.turn(agent=agent)
        self.streams: dict[int, tuple[int, dict[str, Any], TurnStream]] = {}
        self.done: list[Done] = []
        self.serials = itertools.count(1)
        self.fresh = itertools.count(1)
        self.sent: dict[str, str] = {}  # message id -> text
        self.retry_ids: list[str] = []
        self.yields_seen: list[str] = []
        self.approvals_seen: list[str] = []
        self.last_version = 0
        #: The session's status after the last step (what preconditions look at).
        self.status = "new"

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
        for _, _, stream in self.streams.values():  # started, never finished: abandon them
            stream.close()
        self._store_gen.close()

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
        asked = next((k for k in ("message", "tools", "approvals", "retry") if k in given),
                     "nudge")
        event(f"{asked}: {result.status}/{result.commit_status}/{result.code}")
        self.done.append(Done(serial, given, result,
                              [v for actor, v, _ in self.writes if actor == serial]))

    # --- rules -------------------------------------------------------------------------------

    @rule(writer=st.integers(0, WRITERS - 1), kind=st.sampled_from(KINDS))
    def send(self, writer: int, kind: str) -> None:
        n = next(self.fresh)
        message_id, text = f"m{n}", f"{kind} {n}"
        self.sent[message_id] = text
        self._start(writer, {"message": text, "message_id": message_id})

    @precondition(lambda self: self.sent)
    @rule(writer=st.integers(0, WRITERS - 1), data=st.data())
    def resend(self, writer: int, data: st.DataObject) -> None:
        """A duplicate delivery of an earlier message (same id, same text)."""
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
        if self.retry_ids and data.draw(st.booleans(), label="reuse"):
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

    @precondition(lambda self: self.status == "awaiting_input")
    @rule(writer=st.integers(0, WRITERS - 1))
    def nudge(self, writer: int) -> None:
        """An empty request: resumes a parked step whose inputs all landed (else a no-op)."""
        self._start(writer, {})

    @rule(writer=st.integers(0, WRITERS - 1))
    def finish(self, writer: int) -> None:
        if writer in self.streams:
            self._finish(writer)

    @rule()
    def outage(self) -> None:
        """The next model call fails, whoever makes it."""
        self.model.outages = 1

    # --- properties ----------------------------------------------------------------------------

    def _ledger(self) -> tuple[int, list[Event]]:
        session = self.app.sessions.get(SESSION)
        if session is None:
            return 0, []
        self.status = session.status
        for tool in session.yielded_tools:
            if tool.call_id not in self.yields_seen:
                self.yields_seen.append(tool.call_id)
        for pending in session.pending_approvals:
            if pending.approval_id not in self.approvals_seen:
                self.approvals_seen.append(pending.approval_id)
        return session.version, session.events

    @invariant()
    def properties(self) -> None:
        version, events = self._ledger()
        self._versions(version, events)
        self._messages(events)
        self._side_effects(events)
        self._approvals(events)
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
        for done in self.done:
            if done.wrote and done.result.landed:
                # its own turn's version: the last it wrote, or — when the request then ran
                # queued messages, each its own claim and commit — the last before those
                drained = len(done.result.drained or ())
                assert done.result.version == done.wrote[-1 - 2 * drained], (
                    f"request {done.input} reported v{done.result.version}, "
                    f"wrote {done.wrote}, drained {done.result.drained}")

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
            message_id = done.input.get("message_id")
            if message_id is None:
                assert done.result.code != "duplicate_message", (
                    f"request {done.input} carries no message, yet was refused as a duplicate "
                    f"message: {done.result.error}")
                continue
            if done.result.landed:
                assert held[message_id] == 1, (
                    f"{message_id} reported {done.result.commit_status} "
                    f"(v{done.result.version}) but is in the ledger {held[message_id]} times")
            if done.result.code == "duplicate_message":
                assert held[message_id] == 1, f"{message_id} refused as a duplicate of nothing"

    def _side_effects(self, events: list[Event]) -> None:
        """3. A tool ran iff its result is in the ledger (call ids as sets)."""
        settled = [e.call_id for e in events if isinstance(e, ToolResult) and e.name in TOOLS
                   and not e.denied and e.error is None]
        again = {c: n for c, n in Counter(settled).items() if n > 1}
        assert not again, f"call ids settled more than once: {again}"
        ran = {call_id for _, _, call_id in self.executed}
        lost = [(tool, call_id, self._request(serial)) for serial, tool, call_id
                in self.executed if call_id not in settled]
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

    def _request(self, serial: int | None) -> str:
        """What a stream was asked and told (for failure messages)."""
        for done in self.done:
            if done.serial == serial:
                result = done.result
                return (f"{done.input} -> {result.status}/{result.commit_status}"
                        f"@v{result.version} {result.code or ''}".rstrip())
        return f"stream {serial} (not finished)"

    def _refusals_write_nothing(self) -> None:
        """A request the session refused wrote nothing (not even a claim)."""
        for done in self.done:
            if done.result.code in REFUSALS:
                assert not done.wrote, (
                    f"request {done.input} was refused ({done.result.code}) yet wrote "
                    f"versions {done.wrote}")


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
