"""The request room: what one request does to its session before a turn runs.

:func:`open_request` loads the session, applies the request's inputs (the decisions are
:mod:`dormant._decide`'s), and **claims** what must land before anything runs. Both the
handlers' :class:`~dormant._turn.TurnStream` and the test kit's in-process driver call it, so
the kit behaves like production.

A claim is one conditional write at the version the request read (``CommitPolicy.claim``),
never merged: of two requests racing to end or reopen one response, one lands; the other
decides again from the newer head, where its input either still applies (it claims again)
or is refused by the decision itself (409 naming what happened). Claimed are: a decision or
an answer that lets a tool run or settles a step, an ending (interrupt, a stop of a waiting
response, send-now), a reopening (a retry, a resume of a paused invocation), the start of
the inbox's next message, and the takeover of a stranded invocation.

A claim that lets a turn run carries a **lease**: the epoch ms its request promised to
commit by (``Head.lease``), and a wake-up timer (:data:`LEASE_TIMER`) armed just after it.
When the claimer dies first, the next request on the session, the inbox's hand-on or that
timer finds the invocation stranded and takes it over: it re-runs the unfinished step with
the same call ids (the tools' idempotency key) and drains the inbox.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel, ValidationError

from dormant._commit import CommitPolicy, LostClaim
from dormant._control import write_asks
from dormant._decide import Plan, plan, take_pending
from dormant._head import Head
from dormant._ids import new_id
from dormant._inputs import CommitStatus, HandlerInput, Input
from dormant._run import TurnInput
from dormant.errors import (
    DuplicateMessage,
    InputError,
    RetryRefused,
    ServerOnly,
    SessionMoved,
    SessionNotFound,
    StoreError,
    describe_validation,
)
from dormant.events import (
    Event,
    InterruptEvent,
    InvocationEnd,
    InvocationResume,
    InvocationStart,
    QueueEdit,
    QueueMove,
    QueueRemove,
    QueueSendNow,
    ResumeEvent,
    RetryEvent,
    StopRequested,
    TimerFired,
    ToolResult,
    UserEvent,
)
from dormant.schedulers import LEASE_GRACE_MS, LEASE_TIMER
from dormant.session import Session, mint_session_id, normalize_session_id

if TYPE_CHECKING:
    from dormant.agent import Agent
    from dormant.stores._base import Store

__all__ = [
    "DEFAULT_LEASE",
    "LEASE_GRACE_MS",
    "LEASE_TIMER",
    "Host",
    "Opened",
    "RequestRules",
    "SessionsPort",
    "derive_invocation",
    "finish_request",
    "open_request",
]

#: Seconds a claim's lease lasts when the request has no deadline of its own (a Lambda's
#: remaining time or the handler's ``timeout`` set one).
DEFAULT_LEASE = 120.0
#: Decisions one request makes at most while other writers keep landing first.
CLAIM_ATTEMPTS = 16

#: What ends or reopens a response: a slice holding one is claimed before anything runs.
_ENDINGS = (InterruptEvent, InvocationEnd, InvocationResume, QueueSendNow, ResumeEvent,
            RetryEvent, StopRequested, ToolResult)
#: Inbox ops are claimed too (they run nothing, and cost the one write they would anyway):
#: one that loses to the drain starting its message decides again, and is refused naming
#: what happened (``not_pending``: it is no longer queued), not told to send it again.
_CLAIMED = (*_ENDINGS, QueueEdit, QueueMove, QueueRemove)


class SessionsPort(Protocol):
    """What a request needs of ``app.sessions``."""

    policy: CommitPolicy

    def load(self, session_id: str, *, turns: int | None,
             compacted: bool = False) -> Session | None: ...

    def holds_message(self, session: Session, message_id: str) -> bool: ...

    def arm(self, session_id: str, name: str, fire_at: int) -> None: ...

    def bind(self, session: Session) -> Session: ...


class Host(Protocol):
    """What the request room and :class:`~dormant._turn.TurnStream` see of the app: its
    sessions, store and clock, and where work that does not fit one request is handed on."""

    @property
    def sessions(self) -> SessionsPort: ...

    @property
    def store(self) -> Store: ...

    @property
    def clock(self) -> Callable[[], int]: ...

    @property
    def hand_on(self) -> Callable[[HandlerInput], None] | None: ...


@dataclass(frozen=True)
class RequestRules:
    """A handler's rules for its requests: the state schema, the state keys public clients
    may write, and the claim's lease when the request has no deadline."""

    schema: type[BaseModel] | None = None
    client_state: frozenset[str] = frozenset()
    lease: float = DEFAULT_LEASE


@dataclass
class Opened:
    """A request, opened: its ``session`` (inputs applied, claim committed), the ``plan``
    (what it does), the ``turn`` to run (None: none runs; ``plan.status`` says what it
    ended as), the events its claim committed (a stream shows them first), what the claim
    wrote, the invocation it runs on, stopped or continues (None: a fresh one), whether it
    takes a stranded invocation over, and the queued message it starts."""

    session: Session
    plan: Plan
    turn: TurnInput | None = None
    claimed: list[Event] = field(default_factory=list)
    commit: CommitStatus | None = None
    version: int | None = None
    invocation_id: str | None = None
    recovering: bool = False
    #: The queued message the claim started (the inbox's next one), if any.
    dequeued: str | None = None


def open_request(host: Host, agent: Agent, request: HandlerInput, rules: RequestRules, *,
                 lease: float | None = None, invocation_id: str | None = None,
                 on_start: Callable[[Head], None] | None = None) -> Opened:
    """Open ``request``: decide what it does from the head, claim what must land first.

    ``lease``: seconds the request has left (None: :attr:`RequestRules.lease`);
    ``invocation_id``: the id a fresh invocation gets (None: the run mints one);
    ``on_start``: given a copy of the head as the request found it (answers and decisions
    applied), before anything is decided (so a refused request can still show it). Raises
    :class:`~dormant.errors.DormantError` for a refused request (nothing written) and
    :class:`pydantic.ValidationError` for a state that does not fit the schema."""
    sid = (normalize_session_id(request.session_id) if request.session_id is not None
           else mint_session_id())
    if request.public:
        _refuse_server_only(request.input)
    if request.input.audio is not None:
        raise InputError("input.audio is for app.handler.voice (POST /voice), which "
                         "transcribes it; this handler takes a text message")
    for _ in range(CLAIM_ATTEMPTS):
        session = _load(host, agent, sid, request, rules)
        opened = _decide(host, agent, session, request, on_start, invocation_id)
        if not _claims(opened):
            return opened
        try:
            _claim(host, opened, rules.lease if lease is None else lease)
        except LostClaim:
            continue  # somebody's progress: decide again from the newer head
        return opened
    raise StoreError(f"session {sid}: other requests kept landing first ({CLAIM_ATTEMPTS} "
                     "times); try again", retryable=True)


def finish_request(host: Host, opened: Opened, reload: Callable[[], Session | None]
                   ) -> tuple[CommitStatus | None, int | None]:
    """A request that runs no turn: commit what its inputs recorded that its claim did not
    (if anything), then write what it asks of the running turn. Returns how it was written
    (None: nothing to write) and the session's version. Raises :class:`StoreError` when the
    store could not be written and :class:`SessionMoved` when the inputs no longer fit a
    newer head."""
    session = opened.session
    commit, version = opened.commit, opened.version if opened.commit else session.version
    if session.dirty:
        outcome = host.sessions.policy.commit(session)
        if outcome.status == "failed":
            raise outcome.error or StoreError(f"session {session.session_id} could not be "
                                              "written")
        if outcome.status == "superseded":
            raise SessionMoved(session.session_id)
        commit, version = outcome.status, outcome.version
    if session.control_asks:
        write_asks(host.store, session, reload)
    return commit, version


def derive_invocation(session_id: str, key: str) -> str:
    """An invocation id derived from the session and a message id (a redelivery, or the run
    of a queued message, gets the same id and so the same derived call ids)."""
    seed = f"{session_id.removeprefix('session_')}|{key}".encode()
    return "inv_" + hashlib.blake2b(seed, digest_size=8).hexdigest()


# --- loading ---------------------------------------------------------------------------------


def _load(host: Host, agent: Agent, sid: str, request: HandlerInput,
          rules: RequestRules) -> Session:
    session = host.sessions.load(sid, turns=agent.history_turns,
                                 compacted=agent.compaction is not None)
    if session is None:
        session = host.sessions.bind(Session.new(
            sid, state=_initial_state(rules, request.input.initial_state),
            principal=request.principal))
    elif not session.head.visible_to(request.principal):
        raise SessionNotFound(sid)
    if agent.app_events is not None:  # the agent's app's contract (``app.event``)
        session.event_types = agent.app_events
    if request.public and request.input.state:
        _check_client_state(rules, session, request.input.state)
    if request.public:
        _refuse_deferred_answers(session, request.input)
    retry = request.input.retry
    if retry is not None and session.head.failed and not session.head.knows_every_message \
            and host.store.has_once(sid, "r:" + retry.retry_id):
        raise RetryRefused(sid, retry.retry_id, duplicate=True)
    return session


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


def _decide(host: Host, agent: Agent, session: Session, request: HandlerInput,
            on_start: Callable[[Head], None] | None, fresh: str | None) -> Opened:
    """Apply the request's inputs to ``session`` and decide what runs (nothing written)."""
    given = request.input
    sessions = host.sessions
    wake_up = given.timer is not None and given.timer.name == LEASE_TIMER
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
    if decided.run:
        _what_runs(host, agent, opened, given, first, fresh)
    return opened


def _what_runs(host: Host, agent: Agent, opened: Opened, given: Input,
               first: tuple[tuple[str, str], ...], fresh: str | None) -> None:
    """The turn a request that runs one runs (``opened.turn``), and what its claim opens
    first: a retry, a settled step reopened, a queued message's start, a message after the
    ending it asked for; else a fresh turn, which writes nothing until it ends."""
    session, decided = opened.session, opened.plan
    head = session.head
    retry = given.retry.retry_id if given.retry is not None else None
    if head.paused or session.pause_pending:
        opened.turn = _turn(decided, given, opened.invocation_id or fresh, first)  # refused
    elif decided.continue_paused:
        opened.invocation_id = head.open_invocation
        opened.turn = TurnInput(claimed="continue", invocation_id=head.open_invocation,
                                state=given.state)
    elif retry is not None:
        if head.has_retry(retry):
            raise RetryRefused(head.session_id, retry, duplicate=True)
        if not head.failed or head.open_invocation is None:
            raise RetryRefused(head.session_id, retry)
        retried = RetryEvent(invocation_id=head.open_invocation, retry_id=retry)
        session.add_event(retried)
        opened.claimed.append(retried)
        opened.invocation_id = head.open_invocation
        opened.turn = TurnInput(claimed="retry", invocation_id=head.open_invocation,
                                state=given.state, retry_id=retry)
    elif _settling(head):
        # the step is settled: the claim reopens the invocation; only the request that
        # landed the reopening runs the step's tools, never a second one beside it
        resumed = InvocationResume(invocation_id=head.open_invocation)
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
        _start(session, opened, agent, invocation, first, host.clock,
               UserEvent(text=queued["text"], message_id=queued["id"], queued=True,
                         invocation_id=invocation, ts=host.clock(),
                         audio=bool(queued.get("audio"))))
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
        _start(session, opened, agent, invocation, first, host.clock,
               UserEvent(text=decided.message, message_id=message_id, invocation_id=invocation,
                         ts=host.clock(), audio=bool(given.spoken)))
        opened.turn = TurnInput(claimed="start", invocation_id=invocation, state=given.state)
    else:
        opened.turn = _turn(decided, given, opened.invocation_id or fresh, first)


def _start(session: Session, opened: Opened, agent: Agent, invocation: str,
           first: tuple[tuple[str, str], ...], clock: Callable[[], int],
           user: UserEvent) -> None:
    """Open ``invocation`` in the slice for ``user`` (after the steers that missed theirs):
    what a claimed start commits."""
    opened.claimed.append(InvocationStart(invocation_id=invocation, agent=agent.name))
    for message_id, text in first:
        opened.claimed.append(UserEvent(text=text, message_id=message_id,
                                        invocation_id=invocation, ts=clock()))
    opened.claimed.append(user)
    for event in opened.claimed[-(len(first) + 2):]:
        session.add_event(event)
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


def _claim(host: Host, opened: Opened, lease: float) -> None:
    """Write the claim. One that lets a turn run holds a lease until ``lease`` seconds from
    now and arms the wake-up timer that takes the invocation over if nobody commits it."""
    session = opened.session
    until = 0
    if opened.turn is not None and session.head.running:
        until = host.clock() + max(int(lease * 1000), 1)
        session.head.lease = until
        if opened.recovering:
            session.head.takeovers += 1
    outcome = host.sessions.policy.claim(session)
    opened.commit, opened.version = outcome.status, outcome.version
    if until:
        host.sessions.arm(session.session_id, LEASE_TIMER, until + LEASE_GRACE_MS)

