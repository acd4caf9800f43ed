"""Opening a request: load its session, apply its inputs, decide what it does, and claim
what must land before anything runs (see the package's docstring)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydantic import ValidationError

from dormant import _decide
from dormant._commit import LostClaim
from dormant._decide import Plan, plan, take_pending
from dormant._head import Head
from dormant._ids import BOOT, new_id
from dormant._inputs import CommitStatus, HandlerInput, Input
from dormant._request.host import Host, RequestRules, derive_invocation
from dormant._request.invocation import TurnInput, open_invocation, open_turn
from dormant._run import Start
from dormant._timing import Recorder
from dormant.errors import (
    DuplicateMessage,
    InputError,
    ServerOnly,
    SessionNotFound,
    StoreError,
    describe_validation,
)
from dormant.events import (
    Event,
    InterruptEvent,
    InvocationEnd,
    InvocationResume,
    QueueEdit,
    QueueMove,
    QueueRemove,
    QueueSendNow,
    ResumeEvent,
    RetryEvent,
    SpanRef,
    StopRequested,
    TimerFired,
    ToolResult,
)
from dormant.schedulers import LEASE_GRACE_MS, is_lease_timer, lease_timer
from dormant.session import Session, mint_session_id, normalize_session_id

if TYPE_CHECKING:
    from dormant.agent import Agent

__all__ = ["CLAIM_ATTEMPTS", "Opened", "claim_lease", "load_turns", "open_request"]

#: Decisions one request makes at most while other writers keep landing first.
CLAIM_ATTEMPTS = 16

#: What ends or reopens a response: a slice holding one is claimed before anything runs.
_ENDINGS = (InterruptEvent, InvocationEnd, InvocationResume, QueueSendNow, ResumeEvent,
            RetryEvent, StopRequested, ToolResult)
#: Inbox ops are claimed too (they run nothing, and cost the one write they would anyway):
#: one that loses to the drain starting its message decides again, and is refused naming
#: what happened (``not_pending``: it is no longer queued), not told to send it again.
_CLAIMED = (*_ENDINGS, QueueEdit, QueueMove, QueueRemove)


@dataclass
class Opened:
    """A request, opened: its ``session`` (inputs applied, claim committed, the turn's
    invocation opened in its slice), the ``plan`` (what it does), where the turn carries on
    (``start``; None: no turn runs, ``plan.status`` says what the request ended as), the
    events its claim committed (``claimed``) and the opening it wrote after (``opening``,
    uncommitted), what the claim wrote, the invocation it runs on, stopped or continues,
    whether it takes a stranded invocation over, and the queued message it starts."""

    session: Session
    plan: Plan
    turn: TurnInput | None = None
    start: Start | None = None
    claimed: list[Event] = field(default_factory=list)
    opening: list[Event] = field(default_factory=list)
    commit: CommitStatus | None = None
    version: int | None = None
    invocation_id: str | None = None
    recovering: bool = False
    #: The queued message the claim started (the inbox's next one), if any.
    dequeued: str | None = None
    #: The lease wake-up its claim armed (:func:`~dormant.schedulers.lease_timer`), if any.
    armed: str | None = None
    #: Claims another writer's progress refused before this one was decided.
    lost_claims: int = 0

    @property
    def shown(self) -> list[Event]:
        """What a stream shows before the run's own events: what the claim committed, the
        application events the request brought, then the opening, in ledger order."""
        brought = [e for e in self.session.new_events if e.type == "app_event"]
        return [*self.claimed, *brought, *self.opening] if brought or self.claimed \
            else self.opening


def open_request(host: Host, agent: Agent, request: HandlerInput, rules: RequestRules,
                 recorder: Recorder, *, lease: float | None = None,
                 invocation_id: str | None = None,
                 on_start: Callable[[Head], None] | None = None) -> Opened:
    """Open ``request``: decide what it does from the head, claim what must land first,
    then open the turn's invocation (:func:`~dormant._request.invocation.open_turn`).

    ``lease``: seconds the request has left (None: :attr:`RequestRules.lease`);
    ``invocation_id``: the id a fresh invocation gets (None: one is minted);
    ``on_start``: given a copy of the head as the request found it (answers and decisions
    applied), before anything is decided (so a refused request can still show it). Raises
    :class:`~dormant.errors.DormantError` for a refused request (nothing written, or only
    its claim) and :class:`pydantic.ValidationError` for a state that does not fit the
    schema. ``recorder``: times the load and the claim."""
    sid = (normalize_session_id(request.session_id) if request.session_id is not None
           else mint_session_id())
    if request.public:
        _refuse_server_only(request.input)
    if request.input.audio is not None:
        raise InputError("input.audio is for app.handler.voice (POST /voice), which "
                         "transcribes it; this handler takes a text message")
    for attempt in range(CLAIM_ATTEMPTS):
        with recorder.phase("load"):
            session = _load(host, agent, sid, request, rules)
        opened = _decided(host, agent, session, request, on_start, invocation_id,
                          recorder.span_ref())
        opened.lost_claims = attempt
        if _claims(opened):
            try:
                with recorder.phase("claim") as phase:
                    _claim(host, opened, rules.lease if lease is None else lease,
                           rules.heartbeat)
                    phase.attributes["dormant.commit.status"] = opened.commit
            except LostClaim:
                continue  # somebody's progress: decide again from the newer head
        if opened.turn is not None:
            before = len(session.new_events)
            opened.start = open_turn(agent, session, opened.turn, clock=host.clock)
            opened.opening = session.new_events[before:]
            opened.invocation_id = opened.start.invocation_id
        return opened
    raise StoreError(f"session {sid}: other requests kept landing first ({CLAIM_ATTEMPTS} "
                     "times); try again", retryable=True)


# --- loading ---------------------------------------------------------------------------------


def _load(host: Host, agent: Agent, sid: str, request: HandlerInput,
          rules: RequestRules) -> Session:
    session = host.sessions.load(sid, turns=load_turns(agent),
                                 compacted=agent.compaction is not None)
    if session is None:
        session = host.sessions.bind(Session.new(
            sid, state=_initial_state(rules, request.input.initial_state),
            principal=request.principal))
        given = request.input
        if given.stop is not None or given.pause or given.steer is not None:
            # A session's first turn is in its control record alone until it commits: what
            # asks a running turn for something reads it (one read, only for these).
            session.control = host.store.read_control(session.session_id)
    elif not session.head.visible_to(request.principal):
        raise SessionNotFound(sid)
    elif host.sole and session.head.running and session.head.holder != BOOT:
        # The only process serving this store did not write this claim: its holder was an
        # earlier run of it, killed before it committed. Its lease is not waited out.
        session.head.lease = 0
    if agent.app_events is not None:  # the agent's app's contract (``app.event``)
        session.event_types = agent.app_events
    if request.public and request.input.state:
        _check_client_state(rules, session, request.input.state)
    if request.public:
        _refuse_deferred_answers(session, request.input)
    return session


def load_turns(agent: Agent) -> int | None:
    """How many recent turns a request of ``agent`` loads: its history's, and at least the
    latest when it uses agents as tools. A sub-agent's model reads its own events, which sit
    after its caller's call in the open invocation (a decision or an answer that resumes it
    must find them loaded, whatever history its caller's recipe keeps); the latest turn's
    start is before them (nothing starts a turn while a step is parked on its tools)."""
    turns = agent.history_turns
    if turns is not None and turns < 1 and any(
            tool.agent is not None for tool in agent.tools.values()):
        return 1
    return turns


def _initial_state(rules: RequestRules, initial: dict[str, object] | None
                   ) -> dict[str, object]:
    if rules.schema is None:
        return dict(initial or {})
    try:
        return rules.schema.model_validate(initial or {}).model_dump(mode="json")
    except ValidationError as error:
        raise InputError(f"initial_state does not fit the state schema: "
                         f"{describe_validation(error)}") from error


def _check_client_state(rules: RequestRules, session: Session,
                        state: dict[str, object]) -> None:
    """A public request may change only the ``client_state`` keys; a key it sends back
    unchanged (AG-UI clients echo the state they were shown) is not a write."""
    current = session.state
    refused = sorted(key for key, value in state.items()
                     if key not in rules.client_state
                     and (key not in current or current[key] != value))
    if refused:
        allowed = sorted(rules.client_state)
        raise ServerOnly(
            f"state key(s) {', '.join(map(repr, refused))} may not be written by a client: "
            f"the handler lets clients write {allowed or 'no state keys'} "
            "(client_state=[...]); server code writes the rest")


def _refuse_server_only(given: Input) -> None:
    """What only trusted server code may send, refused from a public request (nothing read or
    written yet). The public wire types cannot carry these; this holds for any other path."""
    named = [name for name, value in (("initial_state", given.initial_state),
                                      ("timer", given.timer),
                                      ("tool_results (deferred tool results)",
                                       given.tool_results),
                                      ("events (application events)", given.events))
             if value is not None]
    if given.seed is not None and given.seed.role != "user":
        named.append(f"seed role {given.seed.role!r} (a client seeds role 'user' only)")
    if named:
        raise ServerOnly(f"{', '.join(named)}: for trusted server code (app.sessions or the "
                         "handlers in Python), not a public client")


def _refuse_deferred_answers(session: Session, given: Input) -> None:
    """A public answer (``tools``, an AG-UI resume) naming a deferred call would supply its
    result: only trusted server code may (nothing written)."""
    deferred = [a.call_id for a in given.tools or ()
                if (call := session.head.call(a.call_id)) is not None and call.deferred]
    if deferred:
        raise ServerOnly(f"call(s) {', '.join(deferred)} are deferred: their result comes "
                         "from trusted server code (input.tool_result / tool_results), not "
                         "a public client")


# --- deciding --------------------------------------------------------------------------------


def _decided(host: Host, agent: Agent, session: Session, request: HandlerInput,
             on_start: Callable[[Head], None] | None, fresh: str | None,
             span: SpanRef | None) -> Opened:
    """Apply the request's inputs to ``session`` and decide what runs (nothing written).
    ``span``: the request's trace span, kept on a reopening its claim writes."""
    given = request.input
    sessions = host.sessions
    wake_up = given.timer is not None and is_lease_timer(given.timer.name)
    if given.timer is not None and not wake_up:  # a wake delivery: consume the firing first
        session.add_event(TimerFired(name=given.timer.name, fire_at=given.timer.fire_at))
    if given.message_id is not None and sessions.holds_message(session, given.message_id):
        raise DuplicateMessage(session.session_id, given.message_id)  # nothing runs again
    # (an empty request — a drain, a hand-on — leaves a waiting pause in the record: taking
    # it up would write a version that runs nothing; the session reads paused either way)
    first = tuple((s.id, s.text) for s in take_pending(session, take_pause=not _empty(given))
                  if s.id != given.message_id)  # the request's own message runs once
    for decision in given.approvals or ():
        session.input.approval(decision.approval_id, approved=decision.approved,
                               reason=decision.reason)
    for answer in given.tools or ():
        session.input.tool(call_id=answer.call_id, input=answer.input)
    for supplied in given.tool_results or ():
        session.input.tool_result(supplied.call_id, supplied.result, supplied.is_error)
    if on_start is not None:
        on_start(session.head.model_copy(deep=True))
    # the clock is read only when a claimed invocation runs (an ordinary turn reads it once,
    # for its message's stamp)
    now = host.clock() if session.head.running else None
    stranded = now is not None and session.head.stranded(now)
    if stranded and _empty(given):
        # its claimer died: this request takes the invocation over (before anything else,
        # a pause waiting in the record included: the taken-over turn pauses at a boundary)
        head = session.head
        return Opened(session, Plan(), recovering=True,
                      invocation_id=head.open_invocation,
                      turn=TurnInput(claimed="recover", invocation_id=head.open_invocation))
    decided = plan(session, given, now=now,
                   holds=lambda mid: sessions.holds_message(session, mid))
    opened = Opened(session, decided, invocation_id=decided.stopped)
    if decided.invocation_key is not None:
        opened.invocation_id = derive_invocation(session.session_id, decided.invocation_key)
    head = session.head
    if wake_up and not stranded and not (head.queue and head.free):
        decided.finish("recorded")  # a lease's wake-up, its claim long committed: no-op
        if now is not None and head.running:  # its claimer is alive (its heartbeat says)
            # the same wake-up again, later (its claimer cancels it once it commits)
            assert given.timer is not None
            host.sessions.arm(session.session_id, given.timer.name,
                              head.lease + LEASE_GRACE_MS)
    if decided.run:
        _what_runs(host, agent, opened, given, first, fresh, span)
    return opened


def _what_runs(host: Host, agent: Agent, opened: Opened, given: Input,
               first: tuple[tuple[str, str], ...], fresh: str | None,
               span: SpanRef | None) -> None:
    """The turn a request that runs one runs (``opened.turn``), and what its claim opens
    first: a retry, a settled step reopened, a queued message's start, a message after the
    ending it asked for; else a fresh turn, which writes nothing until it ends."""
    session, decided = opened.session, opened.plan
    head = session.head
    retry = given.retry.retry_id if given.retry is not None else None
    if head.paused or session.pause_pending:
        # (what it claimed lands; then ``open_turn`` refuses the turn: the session is paused)
        opened.turn = _turn(decided, given, opened.invocation_id or fresh, first)
    elif decided.continue_paused:
        opened.invocation_id = head.open_invocation
        opened.turn = TurnInput(claimed="continue", invocation_id=head.open_invocation,
                                state=given.state)
    elif retry is not None:
        retried = _decide.retry(session, retry, landed=lambda retry_id: host.store.has_once(
            session.session_id, "r:" + retry_id))
        if span is not None:
            retried = retried.model_copy(update={"span": span})
        session.add_event(retried)
        opened.claimed.append(retried)
        opened.invocation_id = head.open_invocation
        opened.turn = TurnInput(claimed="retry", invocation_id=head.open_invocation,
                                state=given.state, retry_id=retry)
    elif _settling(head):
        # the step is settled: the claim reopens the invocation; only the request that
        # landed the reopening runs the step's tools, never a second one beside it
        resumed = InvocationResume(invocation_id=head.open_invocation, span=span)
        session.add_event(resumed)
        opened.claimed.append(resumed)
        opened.invocation_id = head.open_invocation
        opened.turn = TurnInput(claimed="resume", invocation_id=head.open_invocation,
                                state=given.state)
    elif decided.message is None and head.queue and head.free:
        # the inbox's next message starts under a claim: it runs once
        queued = head.queue[0]
        invocation = opened.invocation_id or derive_invocation(session.session_id,
                                                               queued["id"])
        _start(session, opened, agent, invocation, first, host.clock, queued["text"],
               queued["id"], queued=True, audio=bool(queued.get("audio")))
        opened.dequeued = queued["id"]
        opened.turn = TurnInput(claimed="start", invocation_id=invocation, state=given.state)
    elif decided.message is not None and head.parked != "message" and any(
            isinstance(event, _ENDINGS) for event in session.new_events):
        # the message runs after an ending it asked for (if_busy="interrupt"): the ending
        # and the message's start are claimed together, so a redelivery of the message
        # cannot run it beside this request once the ending landed
        message_id = decided.message_id or new_id("msg")
        invocation = opened.invocation_id or (
            fresh if fresh is not None and message_id == given.message_id
            else derive_invocation(session.session_id, message_id))
        _start(session, opened, agent, invocation, first, host.clock, decided.message,
               message_id, audio=bool(given.spoken))
        opened.turn = TurnInput(claimed="start", invocation_id=invocation, state=given.state)
    else:
        opened.turn = _turn(decided, given, opened.invocation_id or fresh, first)


def _start(session: Session, opened: Opened, agent: Agent, invocation: str,
           first: tuple[tuple[str, str], ...], clock: Callable[[], int], text: str,
           message_id: str, *, queued: bool = False, audio: bool = False) -> None:
    """Open ``invocation`` in the slice for the user message (after the steers that missed
    theirs): what a claimed start commits."""
    opened.claimed.extend(open_invocation(session, agent, invocation, first, clock, text,
                                          message_id, queued=queued, audio=audio))
    opened.invocation_id = invocation


def _turn(decided: Plan, given: Input, invocation_id: str | None,
          first: tuple[tuple[str, str], ...]) -> TurnInput:
    retry = given.retry.retry_id if given.retry is not None else None
    return TurnInput(message=decided.message, message_id=decided.message_id,
                     state=given.state, invocation_id=invocation_id, retry_id=retry,
                     first=first, spoken=bool(given.spoken) and decided.message is not None)


def _empty(given: Input) -> bool:
    """A request that brings nothing: a drain, a hand-on, a lease's wake-up."""
    return (given.message is None and given.retry is None and not given.tools
            and not given.tool_results and not given.events
            and not given.approvals and given.steer is None and not given.queue
            and given.interrupt is None and given.stop is None and not given.pause
            and not given.resume and not given.inputs and given.seed is None)


def _settling(head: Head) -> bool:
    """A parked step with nothing left to wait for: it settles before the inbox runs."""
    return head.parked == "tool" and not head.unresolved()


def _claims(opened: Opened) -> bool:
    """Whether what the request decided must land before anything runs: it ends or reopens
    a response, starts a queued message, takes a stranded invocation over, or lets a tool
    run (a decision, or an answer the step's tools act on)."""
    if opened.claimed or opened.recovering:
        return True
    turn = opened.turn
    if turn is not None and turn.claimed is not None:
        return True
    return any(isinstance(event, _CLAIMED) for event in opened.session.new_events)


def _claim(host: Host, opened: Opened, lease: float, heartbeat: float) -> None:
    """Write the claim. One that lets a turn run holds a lease until ``lease`` seconds from
    now, or with a ``heartbeat`` only that many (the running turn renews it, see
    :class:`~dormant._control.ControlWatch`), and arms the wake-up timer that takes the
    invocation over if nobody commits it by the end of ``lease``."""
    session = opened.session
    until = 0
    if opened.turn is not None and session.head.running:
        until, session.head.lease = claim_lease(host, lease, heartbeat)
        session.head.holder = BOOT
        if opened.recovering:
            session.head.takeovers += 1
    outcome = host.sessions.policy.claim(session)
    opened.commit, opened.version = outcome.status, outcome.version
    if until:
        opened.armed = lease_timer(session.version)
        host.sessions.arm(session.session_id, opened.armed, until + LEASE_GRACE_MS)



def claim_lease(host: Host, lease: float, heartbeat: float) -> tuple[int, int]:
    """A claim made now: when its request ends (``lease`` seconds from now, where the
    wake-up timer is armed) and the lease its head holds (one ``heartbeat`` from now when
    the running turn renews it, else the same), in epoch ms."""
    now = host.clock()
    until = now + max(int(lease * 1000), 1)
    return until, min(until, now + int(heartbeat * 1000)) if heartbeat else until
