"""The simulator's world: one app and agent, the sessions a schedule starts from, the inputs
a request may bring, and the invariants checked after every schedule.

A schedule (:func:`run_schedule`) builds its starting session on a store, runs its requests
under the engine's scheduler (:mod:`.sim_engine`), lets the simulated clock pass every lease,
sends one empty request that recovers the session (and a resume if it is paused), then checks
every invariant (:func:`check`). A failure names the seed or the schedule's choices, which
replay it exactly.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

import dormant
from dormant._fold import apply, apply_detached
from dormant._head import Head
from dormant._request.host import derive_invocation
from dormant._resume import validate_resume_state
from dormant.errors import DormantError
from dormant.events import (
    ApprovalDecided,
    Event,
    HandoffEvent,
    InvocationEnd,
    InvocationStart,
    PauseEvent,
    QueuedEvent,
    ResumeEvent,
    ToolCall,
    ToolResult,
    UserEvent,
)
from dormant.handlers import TurnResult
from dormant.models._base import (
    ModelError,
    ModelRequest,
    TextDelta,
    ToolCallChunk,
    ToolMessage,
    UserMessage,
)
from dormant.schedulers import RecordingScheduler, TimerDelivery
from dormant.tools import Signal

from .sim_engine import CURRENT, Chooser, Request, Sim, SimStore

__all__ = ["HAND_INPUTS", "INPUTS", "SETUPS", "SUBAGENT_SETUPS", "Outcome", "check",
           "describe", "forget",
           "run_schedule"]

START_MS = 1_700_000_000_000
LEASE = 60.0
LEASE_MS = int(LEASE * 1000)
FIRE_AT = datetime(2030, 1, 4, 9, tzinfo=UTC)
#: The tools with a side effect: each execution is recorded under its call id.
EFFECTS = ("work", "ask", "risky", "lookup")
#: What a request gets back that says its input was taken (a 2xx).
TAKEN = frozenset({"completed", "yielded_tool", "yielded_message", "queued", "accepted",
                   "stopped", "paused", "interrupted", "recorded"})


class Tag(BaseModel):
    tag: str


class Answer(BaseModel):
    value: str


class Ping(BaseModel):
    n: int = 0


class KindModel:
    """Deterministic: what it does depends on the last user message's first word.

    ``work``: call ``work``, then ``work`` again, then reply (two steps with a boundary
    between: where a pause, a steer or a stop lands). ``wait``: one step calling the yielding
    ``ask``, the approval-gated ``risky`` and the deferred ``lookup`` at once. ``fail``: call
    ``work``, then fail once per text (a failure after a tool ran). ``flaky``: fail once per
    text before any tool. Else: plain text.
    """

    def __init__(self) -> None:
        self.failed_once: set[str] = set()

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[Any]:
        messages = request.messages
        text = next(m.text for m in reversed(messages) if isinstance(m, UserMessage))
        kind = text.split()[0]
        since = 0
        for m in reversed(messages):
            if isinstance(m, UserMessage):
                break
            since += isinstance(m, ToolMessage)
        if kind == "flaky" and text not in self.failed_once:
            self.failed_once.add(text)
            raise ModelError("down")
        if kind == "work" and since < 2:
            yield ToolCallChunk(call_id="", name="work", args={"tag": f"{text}/{since}"})
        elif kind == "fail" and since == 0:
            yield ToolCallChunk(call_id="", name="work", args={"tag": text})
        elif kind == "fail" and text not in self.failed_once:
            self.failed_once.add(text)
            raise ModelError("down")
        elif kind == "sub" and since == 0:  # (an agent used as a tool: see SUBAGENT_SETUPS)
            yield ToolCallChunk(call_id="", name="clerk", args={"input": f"clerk {text}"})
        elif kind == "clerk" and since < 2:  # the sub-agent: a plain tool, then an approval
            name = "work" if since == 0 else "risky"
            yield ToolCallChunk(call_id="", name=name, args={"tag": f"{text}/{since}"})
        elif kind == "wait" and since == 0:
            yield ToolCallChunk(call_id="", name="ask", args={"tag": text})
            yield ToolCallChunk(call_id="", name="risky", args={"tag": text})
            yield ToolCallChunk(call_id="", name="lookup", args={"tag": text})
        else:
            yield TextDelta(f"done: {text}")


@dataclass
class World:
    """One schedule's app, and what its tools did."""

    store: SimStore
    sim: Sim
    session_id: str
    app: dormant.App = field(init=False)
    #: (call id, invocation id, the request that ran it) of every side effect.
    executed: list[tuple[str, str | None, str]] = field(default_factory=list)
    timer: TimerDelivery | None = None
    #: Forks made during the schedule: (fork id, its version, what it was forked from).
    forks: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    expected_forks: dict[str, list[str]] = field(default_factory=dict)
    #: Calls run in, and requests that read, an incarnation of the session since deleted.
    gone_calls: set[str] = field(default_factory=set)
    gone_requests: set[str] = field(default_factory=set)
    waiting_on: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.app = app = dormant.App(name="sim", store=self.store, clock=self.sim.clock,
                                     scheduler=RecordingScheduler())
        app.event("ping", Ping)

        def run(ctx: dormant.ToolContext) -> dict[str, str]:
            request = CURRENT.get()
            self.executed.append((ctx.call_id, ctx.invocation_id,
                                  request.name if request is not None else "-"))
            return {"ran": ctx.call_id}

        tools = [
            app.tool(name="work", description="a side effect", schema=Tag, execute=run),
            app.tool(name="ask", description="asks, then acts", schema=Tag,
                     yield_schema=Answer, execute=run),
            app.tool(name="risky", description="acts once approved", schema=Tag, execute=run),
            app.tool(name="lookup", description="its result comes later", schema=Tag,
                     deferred=True),
        ]
        clerk = app.agent(name="clerk", model=KindModel(), tools=tools[:3],
                          tool_approval={"risky": "user-approval"})
        self.agent = app.agent(name="sim", model=KindModel(), tools=[*tools, clerk.as_tool()],
                               tool_approval={"risky": "user-approval"})
        self.agent = _with_desk(app, self.agent, tools)  # hand-offs: see below
        # The control record is read at the turn's step boundaries, on the request's thread;
        # the background poll (by wall-clock time) is pushed out of any schedule's reach.
        self.turn = app.handler.turn(agent=self.agent, lease=LEASE, poll_interval=3600.0)
        self.wake = app.handler.wake(agent=self.agent, lease=LEASE, poll_interval=3600.0)

    def observe(self, request: Request) -> None:
        """Before a request's first store call: whether the session could be running a turn
        nobody knows of yet (no ledger, or free), which a stop for an unknown invocation
        cannot rule out."""
        if request.ops:
            return
        stored = self.store.unwrapped.load(self.session_id, turns=0)
        request.seen = stored is None or (stored.head.free and not stored.head.paused)

    def fork(self, index: int) -> dormant.Session:
        """Fork the session as it is now (trusted code, beside the requests)."""
        fork = self.app.sessions.fork(self.session_id,
                                      new_session_id=f"{self.session_id}-f{index}")
        fork_of = fork.head.fork_of or {}
        self.forks.append((fork.session_id, fork.version, fork_of))
        source = self.store.unwrapped.load(self.session_id)  # (no interleaving point)
        if source is not None:
            self.expected_forks[fork.session_id] = [
                e.id for e in source.events[:int(fork_of.get("seq", 0))]]
        return fork

    def delete(self) -> bool:
        """Delete the session (trusted code, beside the requests). What the requests that
        read it before ran belongs to the incarnation deleted: it is not checked."""
        deleted = self.app.sessions.delete(self.session_id)
        if deleted:
            self.gone_calls |= {call for call, _, _ in self.executed}
            self.gone_requests |= {r.name for r in self.sim.requests if r.ops}
        return deleted

    def send(self, given: dict[str, Any]) -> TurnResult:
        stream = self.turn({"session_id": self.session_id, "input": given})
        return stream.run()


# --- hand-offs -----------------------------------------------------------------------------------
# A ``hand`` message makes the session's agent hand the conversation to the other one (``sim``
# to ``desk``, ``desk`` back to ``sim``): the same turn goes on with it, and later requests
# run it. Both have the same tools and behave as :class:`KindModel` otherwise, so every other
# input runs as ever, on whichever agent has the session.

#: The inputs only the hand-off schedules draw (the others' seeds keep their meaning).
HAND_INPUTS = ("hand",)


class HandModel:
    """:class:`KindModel`, except that a ``hand`` message's first step hands over to
    ``other`` (``transfer_to_<other>``); the step after it (the other agent's) replies."""

    def __init__(self, other: str) -> None:
        self.other = other
        self.kind = KindModel()

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[Any]:
        messages = request.messages
        text = next(m.text for m in reversed(messages) if isinstance(m, UserMessage))
        if text.split()[0] == "hand" and isinstance(messages[-1], UserMessage):
            yield ToolCallChunk(call_id="", name=f"transfer_to_{self.other}",
                                args={"reason": text})
            return
        yield from self.kind.stream(request, signal=signal)


def _with_desk(app: dormant.App, sim: dormant.Agent, tools: list[Any]) -> dormant.Agent:
    """The ``sim`` agent, handing over to a ``desk`` agent that hands back."""
    app.agent(name="desk", model=HandModel("sim"), tools=tools,
              tool_approval={"risky": "user-approval"}, handoffs=["sim"])
    return replace(sim, model=HandModel("desk"), handoffs=("desk",))


def _handoffs_hold(session: dormant.Session, events: list[Event]) -> list[str]:
    """Each hand-off call has one result, ``Handed over`` exactly when a ``handoff`` event
    names it; the stored head's agent is the one the last start or hand-off left in charge."""
    broken: list[str] = []
    moves = {e.call_id: e for e in events if isinstance(e, HandoffEvent)}
    results = [e for e in events if isinstance(e, ToolResult)
               and e.name.startswith("transfer_to_")]
    for result in results:
        handed = result.error is None
        if handed != (result.call_id in moves):
            said = result.result if handed else result.error
            broken.append(f"hand-off call {result.call_id}: result {said!r}, handoff event "
                          f"{'present' if result.call_id in moves else 'absent'}")
    unsettled = set(moves) - {r.call_id for r in results}
    if unsettled:
        broken.append(f"handoff events without their call's result: {sorted(unsettled)}")
    last = next((e for e in reversed(events) if isinstance(e, InvocationStart | HandoffEvent)),
                None)
    expected = last.agent if isinstance(last, InvocationStart) else \
        last.to_agent if last is not None else ""
    if last is not None and expected and session.head.agent != expected:
        broken.append(f"the head says agent {session.head.agent!r}, the ledger {expected!r}")
    return broken


# --- where a schedule starts -------------------------------------------------------------------


def _fresh(world: World) -> None:
    """No session yet."""


def _waiting(world: World) -> None:
    """A session waiting on people: a turn done, then a step that yielded a call, asked for
    an approval and deferred a call; an input request; a message in the inbox; a timer."""
    assert world.send({"message": "hello 0", "message_id": "seed-0"}).status == "completed"
    waiting = world.send({"message": "wait 1", "message_id": "seed-1"})
    assert waiting.status == "yielded_tool", waiting
    session = world.app.sessions.get(world.session_id)
    assert session is not None
    session.request_input("budget", {"type": "object"}, "Your budget?")
    world.timer = TimerDelivery.model_validate(
        {"session_id": world.session_id, **_timer(session)})
    assert world.app.sessions.commit(session).ok
    assert world.send({"message": "hello 2", "message_id": "seed-2"}).status == "queued"
    session = world.app.sessions.get(world.session_id)
    assert session is not None
    world.waiting_on = {
        "yield": session.yielded_tools[0].call_id,
        "approval": session.pending_approvals[0].approval_id,
        "deferred": session.deferred_tools[0].call_id,
        "invocation": session.head.open_invocation or "",
    }


def _timer(session: dormant.Session) -> dict[str, Any]:
    timer = session.schedule("nudge", at=FIRE_AT, message="hello from a timer")
    return {"name": timer.name, "fire_at": timer.fire_at, "message": timer.message,
            "message_id": timer.message_id}


def _failed(world: World) -> None:
    """A session whose turn failed after its tool ran: failed, retryable."""
    failed = world.send({"message": "fail 0", "message_id": "seed-0"})
    assert failed.status == "error" and failed.landed, failed
    session = world.app.sessions.get(world.session_id)
    assert session is not None and session.head.failed
    world.waiting_on = {"invocation": session.head.open_invocation or ""}


SETUPS = {"fresh": _fresh, "waiting": _waiting, "failed": _failed}


# --- where a schedule starts: an agent used as a tool ------------------------------------------


def _sub_waiting(world: World) -> None:
    """A session whose step called the agent ``clerk`` as a tool; the sub-agent ran its own
    ``work`` (written ahead), then asked for an approval of its ``risky``: the session waits
    on the sub-agent's approval, and its caller's call has no result yet. A message in the
    inbox behind it."""
    assert world.send({"message": "hello 0", "message_id": "seed-0"}).status == "completed"
    waiting = world.send({"message": "sub 1", "message_id": "seed-1"})
    assert waiting.status == "yielded_tool", waiting
    assert world.send({"message": "hello 2", "message_id": "seed-2"}).status == "queued"
    session = world.app.sessions.get(world.session_id)
    assert session is not None
    [approval] = session.pending_approvals
    assert approval.agent == "sim/clerk", approval
    world.waiting_on = {"approval": approval.approval_id,
                        "invocation": session.head.open_invocation or ""}


#: Setups of sub-agent scenarios: kept out of :data:`SETUPS` so the random schedules' seeds
#: (and the found ones) still pick what they picked; ``test_sim_subagents`` runs them.
SUBAGENT_SETUPS = {"sub-waiting": _sub_waiting}


# --- what a request may bring -----------------------------------------------------------------


@dataclass(frozen=True)
class Input:
    """One request of a schedule: its kind, and the kind of the other requests (a stop names
    the invocation a message beside it starts)."""

    kind: str
    index: int

    def given(self, world: World, others: Sequence[str]) -> dict[str, Any] | None:
        """The request's input (None: a timer delivery, sent through the wake handler)."""
        w, i = world.waiting_on, self.index
        target = _target(world, others)
        match self.kind:
            case "message":
                return {"message": f"work {i}", "message_id": f"m-{i}"}
            case "redelivered":
                return {"message": "work 0", "message_id": "m-0"}
            case "answer":
                return {"tools": [{"call_id": w.get("yield", "call_none"),
                                   "input": {"value": "yes"}}]}
            case "approve" | "deny":
                return {"approvals": [{"approval_id": w.get("approval", "appr_none"),
                                       "approved": self.kind == "approve"}]}
            case "input":
                return {"inputs": [{"input_id": "budget", "value": {"eur": 5}}]}
            case "stop":
                return {"stop": {"invocation_id": target}}
            case "steer":
                return {"steer": {"text": f"hello steer {i}", "invocation_id": target,
                                  "id": f"s-{i}"}}
            case "pause":
                return {"pause": True}
            case "resume":
                return {"resume": True}
            case "interrupt":
                owner = w.get("yield") or w.get("invocation") or "call_none"
                return {"interrupt": {"owner": owner}}
            case "retry":
                return {"retry": {"retry_id": "r-1"}}
            case "edit":
                return {"queue": [{"op": "edit", "id": "seed-2", "text": f"hello edit {i}"}]}
            case "move":
                return {"queue": [{"op": "move", "id": "seed-2", "position": 0}]}
            case "remove":
                return {"queue": [{"op": "remove", "id": "seed-2"}]}
            case "send_now":
                return {"queue": [{"op": "send_now", "id": "seed-2"}]}
            case "deferred":
                return {"tool_results": [{"call_id": w.get("deferred", "call_none"),
                                          "result": {"found": 1}}]}
            case "event":
                return {"events": [{"name": "ping", "data": {"n": i}, "id": "e-1"}]}
            case "nudge":
                return {}
            case "hand":
                return {"message": f"hand {i}", "message_id": f"h-{i}"}
            case "timer" | "fork" | "delete":
                return None
        raise ValueError(f"no input kind {self.kind!r}")


def _target(world: World, others: Sequence[str]) -> str:
    """The invocation a stop or steer names: the one a message beside it starts, else the
    session's open one, else one that never existed."""
    for index, kind in enumerate(others):
        if kind in ("message", "redelivered"):
            key = f"m-{index}" if kind == "message" else "m-0"
            return derive_invocation(world.session_id, key)
    return world.waiting_on.get("invocation") or "inv_never"


INPUTS = ("message", "redelivered", "answer", "approve", "deny", "input", "stop", "steer",
          "pause", "resume", "interrupt", "retry", "edit", "move", "remove", "send_now",
          "timer", "deferred", "event", "fork", "delete")


# --- one schedule ------------------------------------------------------------------------------


@dataclass
class Outcome:
    """A schedule's world and what each request came to."""

    world: World
    inputs: list[tuple[str, dict[str, Any] | None]]
    requests: list[Request]
    recovery: list[TurnResult]
    trace: list[str]


_serials = itertools.count(1)


def run_schedule(store: Any, setup: str, kinds: Sequence[str], chooser: Chooser) -> Outcome:
    """Build ``setup`` on ``store`` (a fresh session id each time), run one request per kind
    in the order ``chooser`` picks, then recover (the clock past every lease, one empty
    request, a resume if paused)."""
    sim = Sim(chooser, start_ms=START_MS, lease_ms=LEASE_MS)
    proxy = SimStore(store)
    world = World(proxy, sim, f"sim-{setup}-{next(_serials)}")
    sim.observe = world.observe
    (SETUPS.get(setup) or SUBAGENT_SETUPS[setup])(world)
    proxy.sim = sim
    proxy.writes.clear()
    inputs: list[tuple[str, dict[str, Any] | None]] = []
    requests = []
    for index, kind in enumerate(kinds):
        given = Input(kind, index).given(world, kinds)
        inputs.append((kind, given))
        requests.append(Request(f"{index}:{kind}", _caller(world, given, kind, index)))
    sim.run(requests)
    sim.now += 2 * LEASE_MS + 1
    # A caller that got no answer sends again (a client retries, the queue redelivers): the
    # same input, the same ids. Then one empty request, as the next request on the session.
    recovery = [_caller(world, given, kind, index)()
                for index, ((kind, given), request) in enumerate(zip(inputs, requests,
                                                                     strict=True))
                if request.crashed and kind not in ("fork", "delete")]
    recovery.append(world.send({}))
    session = world.app.sessions.get(world.session_id)
    if session is not None and session.status == "paused":
        recovery.append(world.send({"resume": True}))
    return Outcome(world, inputs, requests, recovery, sim.trace)


def _caller(world: World, given: dict[str, Any] | None, kind: str = "", index: int = 0
            ) -> Any:
    if kind == "fork":
        return lambda: _refused(lambda: world.fork(index))
    if kind == "delete":
        return lambda: _refused(world.delete)
    if given is None:
        delivery = world.timer or TimerDelivery(
            session_id=world.session_id, name="nudge", fire_at=int(FIRE_AT.timestamp() * 1000),
            message="hello from a timer", message_id="timer-none")
        return lambda: world.wake(delivery)
    return lambda: world.send(given)


def _refused(call: Any) -> Any:
    """What trusted code's call returned, or the library's refusal it raised."""
    try:
        return call()
    except DormantError as error:
        return error


# --- the invariants ----------------------------------------------------------------------------


def check(outcome: Outcome) -> list[str]:
    """Every invariant the schedule broke, in words (empty: it kept them all)."""
    world = outcome.world
    broken: list[str] = []
    if world.sim.stray:
        broken.append(f"store calls outside the schedule: {world.sim.stray}")
    for request in outcome.requests:
        if request.error is not None:
            broken.append(f"request {request.name} raised {request.error!r}")
    broken += _forks_whole(world)
    session = world.app.sessions.get(world.session_id)
    if session is None:
        return broken
    events = session.events
    broken += _tools_once(world, events)
    broken += _answered_inputs_land(outcome, events)
    broken += _ends_once(events)
    broken += _paused_runs_nothing(events)
    broken += _nobody_left_waiting(session, world.sim.now)
    broken += _folds_cleanly(session, events)
    broken += _handoffs_hold(session, events)
    return broken


def _forks_whole(world: World) -> list[str]:
    """A fork reads exactly its source's ledger up to the version it was forked at, whatever
    the source did next (more commits, a delete)."""
    broken = []
    for fork_id, _, fork_of in world.forks:
        fork = world.app.sessions.get(fork_id)
        if fork is None:
            broken.append(f"fork {fork_id} is gone")
            continue
        seq = int(fork_of.get("seq", 0))
        if len(fork.events) != seq:
            broken.append(f"fork {fork_id} reads {len(fork.events)} events, forked at {seq}")
        elif world.expected_forks.get(fork_id) not in (None, [e.id for e in fork.events]):
            broken.append(f"fork {fork_id} reads other events than its source had")
    return broken


def _tools_once(world: World, events: list[Event]) -> list[str]:
    """A tool executed ⇔ exactly one final result of its call in the ledger."""
    finals = Counter(e.call_id for e in events if isinstance(e, ToolResult) and not e.preliminary)
    broken = [f"call {c} has {n} final results" for c, n in finals.items() if n > 1]
    ran = {call for call, _, _ in world.executed}
    lost = sorted({call for call, _, name in world.executed if call not in world.gone_calls
                   and name not in world.gone_requests} - set(finals))
    if lost:
        broken.append(f"tools ran but their calls have no result in the ledger: {lost}")
    ok = {e.call_id for e in events if isinstance(e, ToolResult) and not e.preliminary
          and e.name in EFFECTS and e.error is None and not e.denied and e.name != "lookup"}
    never = sorted(ok - ran)
    if never:
        broken.append(f"results in the ledger of tools that never ran: {never}")
    return broken


def _answered_inputs_land(outcome: Outcome, events: list[Event]) -> list[str]:
    """Every input whose caller was answered 2xx landed, waits in the inbox, or was
    superseded as the answer said; a refused one wrote nothing of itself."""
    held = Counter(e.message_id for e in events
                   if (isinstance(e, UserEvent) and not e.queued) or isinstance(e, QueuedEvent))
    broken = [f"message {m} is in the ledger {n} times" for m, n in held.items() if n > 1]
    runs = Counter(e.message_id for e in events if isinstance(e, UserEvent))
    broken += [f"message {m} ran {n} times" for m, n in runs.items() if n > 1]
    decided = {e.approval_id for e in events if isinstance(e, ApprovalDecided)}
    for (kind, given), request in zip(outcome.inputs, outcome.requests, strict=True):
        result = request.result
        if request.crashed or not isinstance(result, TurnResult) or given is None \
                or request.name in outcome.world.gone_requests:  # (deleted with its session)
            continue
        said_superseded = result.commit_status == "superseded" and not result.landed
        taken = (result.status in TAKEN or result.landed) and not said_superseded
        message_id = given.get("message_id")
        if message_id is not None and taken and held[message_id] != 1:
            broken.append(f"request {request.name} was told {result.status}/"
                          f"{result.commit_status} but its message {message_id} is in the "
                          f"ledger {held[message_id]} times")
        if message_id is not None and result.code == "duplicate_message" \
                and held[message_id] != 1:
            broken.append(f"request {request.name} was refused as a duplicate of nothing")
        if kind in ("approve", "deny") and taken:
            approval = given["approvals"][0]["approval_id"]
            if approval not in decided:
                broken.append(f"request {request.name} was told {result.status} but its "
                              f"decision is not in the ledger")
        if kind == "stop" and result.status == "accepted" and not request.seen:
            target = given["stop"]["invocation_id"]
            if not any(isinstance(e, InvocationStart) and e.invocation_id == target
                       for e in events):
                broken.append(f"request {request.name} was accepted for invocation {target}, "
                              f"which never ran")
    return broken


def _ends_once(events: list[Event]) -> list[str]:
    ends = Counter(e.invocation_id for e in events if isinstance(e, InvocationEnd))
    return [f"invocation {i} ended {n} times" for i, n in ends.items() if n > 1]


def _paused_runs_nothing(events: list[Event]) -> list[str]:
    """Between a pause and its resume the paused invocation runs no step, nothing new starts,
    and no pause lands on an invocation that already ended."""
    broken: list[str] = []
    # A superseded turn's kept tools ran before it saw the pause: a record beside it.
    beside = {e.invocation_id for e in events
              if isinstance(e, InvocationEnd) and e.status == "superseded"}
    paused: str | None = None
    is_paused = False
    ended: set[str | None] = set()
    for event in events:
        if isinstance(event, PauseEvent):
            if event.invocation_id is not None and event.invocation_id in ended:
                broken.append(f"pause of {event.invocation_id} after its end")
            paused, is_paused = event.invocation_id, True
        elif isinstance(event, ResumeEvent):
            is_paused = False
        elif isinstance(event, InvocationEnd):
            ended.add(event.invocation_id)
        elif is_paused and isinstance(event, ToolCall | InvocationStart) \
                and event.invocation_id not in beside:
            broken.append(f"{event.type} of {event.invocation_id} while the session was "
                          f"paused (at {paused})")
    return broken


def _nobody_left_waiting(session: dormant.Session, now: int) -> list[str]:
    """Once the clock passed every lease and the recovery ran, no session is left active
    with nobody able to move it: no stranded invocation, no inbox behind nothing."""
    head = session.head
    broken = []
    if head.running:
        broken.append(f"invocation {head.open_invocation} left running after recovery")
    waiting = session.status in ("paused", "failed") or head.busy() in ("tool", "input")
    if head.queue and not waiting:
        broken.append(f"inbox {[q['id'] for q in head.queue]} left behind nothing")
    return broken


def _folds_cleanly(session: dormant.Session, events: list[Event]) -> list[str]:
    """The ledger folds from scratch to the head the store keeps, and the resume check over
    it agrees with the session view."""
    broken: list[str] = []
    # A superseded turn's kept tool results are a record beside the head's own invocation
    # (its invocation ends ``superseded``, or was ended by the request that superseded it):
    # the store folded them detached, and so does this fold.
    beside = {e.invocation_id for e in events
              if isinstance(e, InvocationEnd) and e.status == "superseded"}
    folded = Head(session_id=session.session_id)
    ended: set[str | None] = set()
    for event in events:
        try:
            if (event.invocation_id in beside and event.invocation_id != folded.open_invocation) \
                    or (event.invocation_id in ended and not isinstance(event, InvocationEnd)):
                apply_detached(folded, event)
            else:
                apply(folded, event)
        except Exception as error:  # the fold refused its own ledger
            return [f"the ledger does not fold at {event.type} of {event.invocation_id}: "
                    f"{error!r}"]
        if isinstance(event, InvocationEnd):
            ended.add(event.invocation_id)
    head = session.head
    for name in ("open_invocation", "parked", "failed", "paused"):
        if getattr(folded, name) != getattr(head, name):
            broken.append(f"folded {name}={getattr(folded, name)!r}, "
                          f"stored {getattr(head, name)!r}")
    if [q["id"] for q in folded.queue] != [q["id"] for q in head.queue]:
        broken.append("folded inbox differs from the stored one")
    unresolved = {u.call_id for u in validate_resume_state(events)}
    view = {t.call_id for t in session.yielded_tools} | {
        a.call_id for a in session.pending_approvals} | {
        t.call_id for t in session.deferred_tools} | {
        i.input_id for i in session.pending_inputs}
    if unresolved != view:
        broken.append(f"validate_resume_state says {sorted(unresolved)} wait, the session "
                      f"view {sorted(view)}")
    return broken


def describe(outcome: Outcome) -> str:
    lines = [f"  {r.name}: {_said(r)}" for r in outcome.requests]
    lines += [f"  recovery: {r.status}/{r.commit_status} {r.code or ''}"
              for r in outcome.recovery]
    lines.append("  trace: " + " ".join(outcome.trace))
    session = outcome.world.app.sessions.get(outcome.world.session_id)
    if session is not None:
        lines.append("  ledger: " + " ".join(
            f"{e.type}({getattr(e, 'invocation_id', '') or ''})" for e in session.events))
    return "\n".join(lines)


def _said(request: Request) -> str:
    if request.crashed:
        return "crashed"
    result = request.result
    if isinstance(result, TurnResult):
        return f"{result.status}/{result.commit_status}@{result.version} {result.code or ''}"
    return repr(request.error or result)


def forget(outcome: Outcome) -> None:
    """Delete what the schedule wrote (the session, its forks), once it was checked and
    described: a store that keeps every schedule's sessions slows down as they pile up (moto
    copies a whole table for each transaction it runs)."""
    world = outcome.world
    store = world.store.unwrapped
    for fork_id, _, _ in world.forks:
        store.delete(fork_id)
    store.delete(world.session_id)
