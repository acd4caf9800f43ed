"""Races between requests that end or reopen one waiting response, on every conformance store.

Everything that ends or reopens a response — an interrupt, ``send_now``, a decision or an
answer that settles a step, the inbox drain that starts the next queued message, the
takeover of a stranded invocation — is a **claim**: a conditional write at the version the
request read, committed before anything runs. Of two such requests one lands; the other
decides again from the newer head and is refused (409) or applies there if still valid.

The races run in one thread, deterministically: the *slow* request runs, and just before its
``at``-th store append (``at=1``: its claim, so both requests read the same head) the *fast*
request runs to completion (:class:`Race`). Every test then checks the promise on the
ledger (:func:`_assert_promises`):

* an invocation ends once; a call has at most one final ``tool_result``;
* a message id runs (is a ``user`` event) at most once;
* the counting tools ran exactly as often as the ledger's successful results say (the list
  of runs lives in the test, outside the store);

and each request either applied validly or was refused with a 409-class code.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant.events import (
    Event,
    InterruptEvent,
    InvocationEnd,
    ToolResult,
    UserEvent,
)
from dormant.handlers import TurnHandler, TurnResult
from dormant.models._base import ModelRequest, TextDelta, ToolCallChunk, ToolMessage, UserMessage
from dormant.session import Session
from dormant.stores import Store
from dormant.tools import Signal
from dormant.types import CommitResult
from tests._clock import Clock, Killed

SID = "race"
#: The refusals a request that lost a race may get (409 class, each naming what happened;
#: an inbox op is claimed too, so it is never the unnamed ``conflict``).
REFUSED = frozenset({"not_pending", "already_decided", "already_answered", "not_running",
                     "session_running"})
#: Seconds a claim's lease lasts in these tests (the app's clock is the test's).
LEASE = 5


class Ask(BaseModel):
    q: str


class Answer(BaseModel):
    answer: str


class ByText:
    """Deterministic whatever the interleaving: the reply depends on the last user message.

    After a tool result: a text reply. Else by the message's first word: ``ask2`` calls the
    yielding ``ask`` twice in one step; ``ask``, ``work`` and ``risky`` call that tool once;
    anything else is a plain reply."""

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[Any]:
        messages = request.messages
        text = next(m.text for m in reversed(messages) if isinstance(m, UserMessage))
        if isinstance(messages[-1], ToolMessage):
            yield TextDelta(f"settled: {text}")
            return
        kind = text.split()[0]
        if kind == "ask2":
            yield ToolCallChunk(call_id="", name="ask", args={"q": "first"})
            yield ToolCallChunk(call_id="", name="ask", args={"q": "second"})
        elif kind in ("ask", "work", "risky"):
            yield ToolCallChunk(call_id="", name=kind, args={"q": text})
        else:
            yield TextDelta("noted")


class Race:
    """A store proxy (on ``app.sessions.policy.store``, where every commit and claim writes)
    that runs ``rival`` once, just before the ``at``-th append made through it."""

    def __init__(self, inner: Store, at: int, rival: Callable[[], None]) -> None:
        self._inner = inner
        self._at = at
        self._rival: Callable[[], None] | None = rival
        self._appends = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def append(self, head: Any, events: Any, *, expected_version: int) -> CommitResult:
        self._appends += 1
        if self._rival is not None and self._appends == self._at:
            rival, self._rival = self._rival, None
            rival()  # it lands first: this append is at a version that moved
        return self._inner.append(head, events, expected_version=expected_version)

    @property
    def fired(self) -> bool:
        return self._rival is None


class Rig:
    """One app on the store under test, its counting tools and its clock.

    ``started``: every call id a tool started under; ``runs``: (tool, call id) of every run
    that finished (its side effect happened); both live here, outside the store. ``kill``:
    tools whose next run dies (:class:`Killed`) before its side effect."""

    def __init__(self, store: Store) -> None:
        self.clock = Clock()
        self.app = app = dormant.App(name="races", store=store, clock=self.clock)
        self.started: list[str] = []
        self.runs: list[tuple[str, str]] = []
        self.kill: set[str] = set()
        tools = [
            app.tool(name="ask", description="asks a person, then acts", schema=Ask,
                     yield_schema=Answer, execute=self._execute),
            app.tool(name="work", description="a side effect", schema=Ask,
                     execute=self._execute),
            app.tool(name="risky", description="acts once approved", schema=Ask,
                     execute=self._execute),
        ]
        agent = app.agent(name="racer", model=ByText(), tools=tools,
                          tool_approval={"risky": "user-approval"})
        self.handler: TurnHandler = app.handler.turn(agent=agent, lease=LEASE)

    def _execute(self, ctx: dormant.ToolContext) -> dict[str, str]:
        self.started.append(ctx.call_id)
        if ctx.tool in self.kill:
            self.kill.discard(ctx.tool)
            raise Killed(ctx.call_id)
        self.runs.append((ctx.tool, ctx.call_id))
        return {"ran": ctx.call_id}

    def send(self, given: dict[str, Any]) -> TurnResult:
        return self.handler({"session_id": SID, "input": given}).run()

    def race(self, slow: dict[str, Any], fast: dict[str, Any], *, at: int = 1
             ) -> tuple[TurnResult, TurnResult]:
        """Run ``slow``; just before its ``at``-th append, run ``fast`` to completion.
        Returns (slow's result, fast's)."""
        fast_result: list[TurnResult] = []
        policy = self.app.sessions.policy
        store = policy.store
        race = Race(store, at, lambda: fast_result.append(self.send(fast)))
        policy.store = race
        try:
            slow_result = self.send(slow)
        finally:
            policy.store = store
        assert race.fired, f"no race: the slow request wrote fewer than {at} times"
        return slow_result, fast_result[0]

    def session(self) -> Session:
        session = self.app.sessions.get(SID)
        assert session is not None
        return session

    def ran(self, tool: str) -> list[str]:
        """The call ids ``tool`` ran under, in order."""
        return [call_id for name, call_id in self.runs if name == tool]


# --- the promise ---------------------------------------------------------------------------------


def _assert_promises(rig: Rig) -> list[Event]:
    """Ends once, settles once, runs once, and the tools ran as the ledger says."""
    events = rig.session().events
    ends = Counter(e.invocation_id for e in events if isinstance(e, InvocationEnd))
    assert {i: n for i, n in ends.items() if n > 1} == {}, f"invocations ended twice: {ends}"
    finals = Counter(e.call_id for e in events
                     if isinstance(e, ToolResult) and not e.preliminary)
    assert {c: n for c, n in finals.items() if n > 1} == {}, f"calls settled twice: {finals}"
    users = Counter(e.message_id for e in events if isinstance(e, UserEvent))
    assert {m: n for m, n in users.items() if n > 1} == {}, f"messages ran twice: {users}"
    settled = Counter(e.call_id for e in events if isinstance(e, ToolResult)
                      and not e.preliminary and e.error is None and not e.denied)
    ran = Counter(call_id for _, call_id in rig.runs)
    assert ran == settled, f"the tools ran {dict(ran)}, the ledger says {dict(settled)}"
    return events


def _applied_or_refused(*results: TurnResult) -> list[TurnResult]:
    """Each result applied, or was refused with a 409-class code; returns those applied."""
    for result in results:
        if result.status == "error":
            assert result.code in REFUSED, f"{result.code}: {result.error}"
    return [r for r in results if r.status != "error"]


def _ran_once(rig: Rig, events: list[Event], message_ids: list[str]) -> None:
    """Each of ``message_ids`` ran exactly once, and the session is idle with an empty inbox."""
    users = Counter(e.message_id for e in events if isinstance(e, UserEvent))
    assert [users[m] for m in message_ids] == [1] * len(message_ids), users
    session = rig.session()
    assert session.inbox == [] and not session.head.running
    assert session.open_invocation is None


def _queue(rig: Rig, *texts: str) -> list[str]:
    """Send messages while the session waits: each is queued. Returns their ids."""
    ids = []
    for n, text in enumerate(texts, 1):
        message_id = f"q{n}"
        assert rig.send({"message": text, "message_id": message_id}).status == "queued"
        ids.append(message_id)
    return ids


def _waiting_on_two_calls(rig: Rig) -> tuple[str, list[str], list[str]]:
    """A response waiting on two yielded calls, three messages queued behind it."""
    parked = rig.send({"message": "ask2 both", "message_id": "m0"})
    assert parked.status == "yielded_tool" and parked.yielded_tools is not None
    calls = [t.call_id for t in parked.yielded_tools]
    assert len(calls) == 2
    invocation = rig.session().open_invocation
    assert invocation is not None
    return invocation, calls, _queue(rig, "work one", "work two", "work three")


def _ends(events: list[Event], invocation: str) -> list[str]:
    return [e.status for e in events if isinstance(e, InvocationEnd)
            and e.invocation_id == invocation]


# --- 1, 2: two interrupts at once ----------------------------------------------------------------


@pytest.mark.parametrize("at", [1, 2, 3])
def test_two_interrupts_naming_different_calls_end_the_response_once(
        store: Store, at: int) -> None:
    """``interrupt {owner: call_1}`` races ``interrupt {owner: call_2}`` on a response that
    waits on both calls, three messages queued: exactly one lands (at=1 both read the same
    head; later, the second arrives while the first one's request drains); the other is
    refused ``not_pending``; the inbox drains once: each queued message and its tool once."""
    rig = Rig(store)
    invocation, calls, queued = _waiting_on_two_calls(rig)

    slow, fast = rig.race({"interrupt": {"owner": calls[0]}},
                          {"interrupt": {"owner": calls[1]}}, at=at)

    (landed,) = _applied_or_refused(slow, fast)
    loser = fast if landed is slow else slow
    assert loser.code == "not_pending"
    events = _assert_promises(rig)
    assert sum(isinstance(e, InterruptEvent) for e in events) == 1
    assert _ends(events, invocation) == ["interrupted"]
    _ran_once(rig, events, queued)
    assert rig.ran("ask") == [] and len(set(rig.ran("work"))) == 3


@pytest.mark.parametrize("at", [1, 2, 3])
def test_two_interrupts_naming_the_same_call_end_the_response_once(
        store: Store, at: int) -> None:
    """Two deliveries of ``interrupt {owner: call_1}`` race: one lands, the other is refused
    ``not_pending``; the response ends once and its inbox drains once."""
    rig = Rig(store)
    invocation, calls, queued = _waiting_on_two_calls(rig)
    interrupt = {"interrupt": {"owner": calls[0]}}

    slow, fast = rig.race(interrupt, interrupt, at=at)

    (landed,) = _applied_or_refused(slow, fast)
    assert (fast if landed is slow else slow).code == "not_pending"
    events = _assert_promises(rig)
    assert sum(isinstance(e, InterruptEvent) for e in events) == 1
    assert _ends(events, invocation) == ["interrupted"]
    _ran_once(rig, events, queued)
    assert rig.ran("ask") == [] and len(set(rig.ran("work"))) == 3


# --- 3, 4: a decision racing an ending -----------------------------------------------------------


def _waiting_on_approval(rig: Rig) -> tuple[str, str, list[str]]:
    """A ``risky`` call parked on its approval, one message queued behind it."""
    parked = rig.send({"message": "risky move", "message_id": "m0"})
    assert parked.status == "yielded_tool" and parked.pending_approvals
    (pending,) = parked.pending_approvals
    invocation = rig.session().open_invocation
    assert invocation is not None
    return invocation, pending.approval_id, _queue(rig, "work queued")


def _approve(approval_id: str) -> dict[str, Any]:
    return {"approvals": [{"approval_id": approval_id, "approved": True}]}


def _race_named(rig: Rig, inputs: dict[str, dict[str, Any]], *, slow: str, at: int
                ) -> dict[str, TurnResult]:
    """Race the two named inputs (``slow`` the slow one, see :meth:`Rig.race`): their
    results by name."""
    (fast,) = set(inputs) - {slow}
    slow_result, fast_result = rig.race(inputs[slow], inputs[fast], at=at)
    return {slow: slow_result, fast: fast_result}


@pytest.mark.parametrize(("slow", "at"), [("approve", 1), ("approve", 2), ("approve", 3),
                                          ("send_now", 1), ("send_now", 2)])
def test_an_approval_racing_send_now_runs_the_tool_at_most_once(
        store: Store, slow: str, at: int) -> None:
    """The approval of a parked ``risky`` call races ``queue send_now`` of the message
    queued behind it (either one slow, the other landing before its ``at``-th write). The
    approved tool runs at most once (only if the approval landed before the ending), the
    invocation ends once, the queued message runs once."""
    rig = Rig(store)
    invocation, approval_id, queued = _waiting_on_approval(rig)
    send_now = {"queue": [{"op": "send_now", "id": queued[0]}]}

    results = _race_named(rig, {"approve": _approve(approval_id), "send_now": send_now},
                          slow=slow, at=at)

    _applied_or_refused(*results.values())
    events = _assert_promises(rig)
    assert len(rig.ran("risky")) <= 1
    ending = _ends(events, invocation)
    assert len(ending) == 1
    if rig.ran("risky"):  # the approval landed first: the response completed
        assert ending == ["completed"] and results["approve"].status != "error"
    else:  # send_now ended it first: the approval was refused
        assert ending == ["interrupted"] and results["approve"].status == "error"
    _ran_once(rig, events, queued)
    assert len(rig.ran("work")) == 1


@pytest.mark.parametrize(("slow", "at"), [("approve", 1), ("approve", 2), ("approve", 3),
                                          ("interrupt", 1), ("interrupt", 2)])
def test_an_approval_racing_an_interrupt_of_it_lands_one_of_them(
        store: Store, slow: str, at: int) -> None:
    """The approval of a parked call races ``interrupt {owner: <approval id>}``: exactly one
    lands. Approved first: the tool runs once, the response completes, the interrupt is
    refused. Interrupted first: the tool never runs, the approval is refused. Either way the
    invocation ends once and the queued message runs once."""
    rig = Rig(store)
    invocation, approval_id, queued = _waiting_on_approval(rig)

    interrupt = {"interrupt": {"owner": approval_id}}
    results = _race_named(rig, {"approve": _approve(approval_id), "interrupt": interrupt},
                          slow=slow, at=at)

    (landed,) = _applied_or_refused(*results.values())
    events = _assert_promises(rig)
    ending = _ends(events, invocation)
    if landed is results["approve"]:
        assert ending == ["completed"] and len(rig.ran("risky")) == 1
    else:
        assert ending == ["interrupted"] and rig.ran("risky") == []
    _ran_once(rig, events, queued)
    assert len(rig.ran("work")) == 1


# --- 5: inbox ops racing the drain ---------------------------------------------------------------


@pytest.mark.parametrize(("slow", "at"), [("answer", 1), ("answer", 2), ("answer", 3),
                                          ("answer", 5), ("op", 1)])
@pytest.mark.parametrize("op", ["remove", "edit"])
def test_an_inbox_op_racing_the_drain_never_runs_a_message_twice(
        store: Store, op: str, slow: str, at: int) -> None:
    """The answer that settles a parked call (its request completes the turn, then drains
    two queued messages, each a claim and a commit) races a ``remove`` or ``edit`` of the
    second queued message, landing before the other's ``at``-th write. Whichever lands first:
    a removed message never runs; an edited one runs once, with one text (the edit's if it
    landed, else the original); nothing runs twice."""
    rig = Rig(store)
    parked = rig.send({"message": "ask once", "message_id": "m0"})
    assert parked.yielded_tools is not None
    (call,) = parked.yielded_tools
    invocation = rig.session().open_invocation
    first_id, second_id = _queue(rig, "work first", "work second")
    answer = {"tools": [{"call_id": call.call_id, "input": {"answer": "yes"}}]}
    change = ({"op": "remove", "id": second_id} if op == "remove"
              else {"op": "edit", "id": second_id, "text": "work edited"})

    results = _race_named(rig, {"answer": answer, "op": {"queue": [change]}},
                          slow=slow, at=at)

    _applied_or_refused(*results.values())
    assert results["answer"].status != "error"  # the answer is always valid here
    events = _assert_promises(rig)
    assert invocation is not None and _ends(events, invocation) == ["completed"]
    assert rig.ran("ask") == [call.call_id]
    texts = {e.message_id: e.text for e in events if isinstance(e, UserEvent)}
    landed = results["op"].status != "error"
    if op == "remove" and landed:
        assert second_id not in texts, "a removed message ran"
        _ran_once(rig, events, [first_id])
        assert len(rig.ran("work")) == 1
    else:
        _ran_once(rig, events, [first_id, second_id])
        assert texts[second_id] == ("work edited" if op == "edit" and landed
                                    else "work second")
        assert len(rig.ran("work")) == 2


# --- 6: a request dies between its claim and its commit ------------------------------------------


#: The tool that dies, by the claim that let it run.
DIES_IN = {"answer": "ask", "approval": "risky", "queued-start": "work"}


def _kill_after_claim(rig: Rig, route: str) -> tuple[str, str]:
    """Park, queue a message, then send the input whose claim lets a tool run, and die in
    that tool (the claim landed; nothing after it did). ``queued-start``: the answer's own
    turn commits, then its drain claims the queued message's start and dies in that
    message's tool. Returns (the stranded invocation, the call id that died)."""
    if route == "approval":
        parked = rig.send({"message": "risky move", "message_id": "m0"})
        assert parked.pending_approvals
        given = _approve(parked.pending_approvals[0].approval_id)
    else:
        parked = rig.send({"message": "ask once", "message_id": "m0"})
        assert parked.yielded_tools
        given = {"tools": [{"call_id": parked.yielded_tools[0].call_id,
                            "input": {"answer": "yes"}}]}
    _queue(rig, "work queued")
    rig.kill.add(DIES_IN[route])
    with pytest.raises(Killed) as died:
        rig.send(given)
    session = rig.session()
    assert session.head.running and session.open_invocation is not None
    return session.open_invocation, str(died.value)


@pytest.mark.parametrize("reviver", ["empty", "message", "two-empties@1",
                                     "two-empties@2"])
@pytest.mark.parametrize("route", ["answer", "approval", "queued-start"])
def test_a_request_killed_after_its_claim_is_taken_over_once_its_lease_ran_out(
        store: Store, route: str, reviver: str) -> None:
    """A request's claim landed (an answer, an approval, or a drain's start of a queued
    message), then its process died in the tool it unlocked: the session runs under a lease.
    Within the lease nothing takes it over (an interrupt is refused ``session_running``).
    Past the lease, the next request — empty, a new message, or two empty ones racing (the
    second before the first's claim, or while its takeover runs: refused ``not_pending``) —
    takes the invocation over: the tool re-runs under the SAME call id, the invocation ends
    once, the inbox drains, and the session is left idle, not ``running``."""
    rig = Rig(store)
    invocation, died = _kill_after_claim(rig, route)

    early = rig.send({"interrupt": {"owner": invocation}})
    assert (early.status, early.code) == ("error", "session_running")
    _applied_or_refused(rig.send({}))  # within the lease: nothing to take over
    assert rig.session().head.running and _ends(rig.session().events, invocation) == []

    rig.clock.advance(LEASE + 1)
    assert rig.session().head.stranded(rig.clock())
    waiting = [m.id for m in rig.session().inbox]
    if reviver == "empty":
        revived = rig.send({})
        assert revived.status == "completed" and (revived.drained or []) == waiting
    elif reviver == "message":
        late = rig.send({"message": "hello again", "message_id": "m-late"})
        assert late.status == "queued" and late.drained == [*waiting, "m-late"]
    else:  # two takeovers: the second before the first's claim, or while it runs
        slow, fast = rig.race({}, {}, at=int(reviver[-1]))
        (landed,) = _applied_or_refused(slow, fast)
        assert (fast if landed is slow else slow).code == "not_pending"
        assert landed.status == "completed" and (landed.drained or []) == waiting
    events = _assert_promises(rig)
    assert rig.started.count(died) == 2  # it died once, re-ran once: under one call id
    assert rig.ran(DIES_IN[route]).count(died) == 1
    (result,) = [e for e in events if isinstance(e, ToolResult) and e.call_id == died]
    assert result.invocation_id == invocation and result.error is None
    assert _ends(events, invocation) == ["completed"]
    _ran_once(rig, events, ["m0", "q1", *(["m-late"] if reviver == "message" else [])])
    assert rig.session().status == "active"
