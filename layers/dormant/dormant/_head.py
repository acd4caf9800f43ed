"""The session head: what the ledger folds to, kept beside it so no turn replays history.

Every event passes through :func:`apply` exactly once on its way into a session, and again
when a refused commit is merged onto a newer head: that second pass is where an input that is
no longer valid (an answer to a call somebody else answered) is caught.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import TypeAdapter

from dormant._patch import apply_patch, json_copy
from dormant.errors import (
    AlreadyAnswered,
    AlreadyDecided,
    DuplicateMessage,
    InputError,
    NotPending,
    NotRunning,
    PendingInputError,
    ResumeError,
    RetryRefused,
    SessionFailed,
    SessionRunning,
    StaleTimer,
)
from dormant.events import (
    LEDGER_FORMAT,
    AppEvent,
    ApprovalDecided,
    ApprovalRequested,
    AssistantEvent,
    CompactionEvent,
    Event,
    InputRequested,
    InputResponse,
    InterruptEvent,
    InvocationEnd,
    InvocationFailed,
    InvocationResume,
    InvocationStart,
    InvocationYield,
    PauseEvent,
    QueuedEvent,
    QueueEdit,
    QueueMove,
    QueueRemove,
    QueueSendNow,
    ResumeEvent,
    RetryEvent,
    SeedEvent,
    StateDelta,
    SteerEvent,
    StopRequested,
    TimerCancelled,
    TimerFired,
    TimerSet,
    ToolCall,
    ToolDeferred,
    ToolInput,
    ToolResult,
    ToolYield,
    UserEvent,
)

__all__ = ["COMMIT_WINDOW", "PREVIEW_CHARS", "TURN_INDEX_SIZE", "Head", "PendingCall",
           "SessionStatus", "apply", "apply_detached", "preview_of", "status_of"]

#: How many recent turn starts (user-event positions) the head remembers for windowed reads.
TURN_INDEX_SIZE = 64
#: The longest preview of a session's first message the head keeps (``Head.preview``).
PREVIEW_CHARS = 100
#: How many recent message ids the head remembers to land a redelivered message once.
MESSAGE_ID_WINDOW = 32
#: How many recent commits' starting positions the head remembers (``events?after=VERSION``).
COMMIT_WINDOW = 32
#: How many recent invocation ids the head remembers (a stop for one of them is refused).
INVOCATION_WINDOW = 16


@dataclass(slots=True)
class PendingCall:
    """One tool call of the step the invocation is in."""

    call_id: str
    name: str
    args: Any = None
    yielded: bool = False
    prepared: Any = None
    answered: bool = False
    input: Any = None
    settled: bool = False
    #: Set when the call waits for a human decision (a ``"user-approval"`` policy).
    approval_id: str | None = None
    decided: bool = False
    approved: bool = False
    reason: str | None = None
    #: A deferred tool's call: it waits for a result trusted code supplies from outside.
    deferred: bool = False


@dataclass(slots=True)
class Head:
    """A session's current fold. Stored with every commit; versioned with the ledger format.

    A slotted dataclass, not a pydantic model: the fold sets a few attributes per event on
    the hot path. JSON goes through one pydantic ``TypeAdapter``; the ``model_*`` methods
    keep pydantic's names so stores read and write it like any other wire type.
    """

    session_id: str
    format: int = LEDGER_FORMAT
    version: int = 0
    #: Events in the ledger (the next event's position).
    seq: int = 0
    state: dict[str, Any] = field(default_factory=dict)
    #: The session's owner (every session has one; None: reachable by no principal).
    principal: str | None = None
    created_at: int = 0
    updated_at: int = 0
    open_invocation: str | None = None
    agent: str | None = None
    parked: Literal["tool", "message"] | None = None
    step: list[PendingCall] = field(default_factory=list)
    #: User messages not yet taken up by a run.
    inbox: int = 0
    last_user_ts: int = 0
    turn_starts: list[int] = field(default_factory=list)
    #: Short digests of the most recent message ids (the head is rewritten on every commit:
    #: digests keep it small whatever ids clients choose).
    message_ids: list[str] = field(default_factory=list)
    #: Id of the ledger's last event (detects a commit that landed after all).
    last_event: str | None = None
    #: Timers set and not yet fired or cancelled: name -> the ``timer_set`` event's JSON.
    timers: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: True after ``invocation_failed`` until a ``retry`` reopens the invocation.
    failed: bool = False
    #: Once-only ids (message and retry ids) ever landed (-1: unknown, a head written before
    #: they were counted). While it is at most the digest window, ``message_ids`` is complete
    #: and no store read is needed to tell a redelivery.
    messages: int = -1
    #: Digests of the most recently decided approval ids and answered call ids: a late
    #: decision for one the step has moved past is told "already decided", not "unknown".
    settled_ids: list[str] = field(default_factory=list)
    #: Retries of the open invocation (``ToolContext.attempt`` is this plus one).
    retries: int = 0
    #: Tool calls the open invocation made so far (derived call ids count from here).
    calls: int = 0
    #: True while the session is paused (nothing runs; messages queue in the inbox).
    paused: bool = False
    #: The inbox: user messages waiting to run, in order: ``{"id", "text", "queued_at"}``.
    queue: list[dict[str, Any]] = field(default_factory=list)
    #: Input requests awaiting a response: ``{"input_id", "schema", "prompt"}``.
    inputs: list[dict[str, Any]] = field(default_factory=list)
    #: The revision of the last pause the ledger took up from the control record (or ended
    #: with a resume): the record's pause is pending while it names another revision (an
    #: identity, not an order: a record that expired starts its revisions again).
    control_rev: int = 0
    #: Digests of the most recent invocation ids (a stop naming one that ended is refused).
    invocations: list[str] = field(default_factory=list)
    #: Ledger positions where the most recent commits began (the last is this version's).
    commit_seqs: list[int] = field(default_factory=list)
    #: A fork's inherited history, oldest first: each segment ``{"session", "created_at",
    #: "version", "end"}`` says that the ledger positions from the previous segment's ``end``
    #: (0 for the first) up to ``end`` are the events of session ``session`` (the incarnation
    #: created at ``created_at``) as of its ``version``; positions from the last ``end`` on are
    #: this session's own. Empty for a session that is not a fork. Stores may add keys.
    lineage: list[dict[str, Any]] = field(default_factory=list)
    #: What this session was forked from: ``{"session", "version", "seq"}`` (None: not a
    #: fork). ``lineage`` is what reads need; this is what people are shown.
    fork_of: dict[str, Any] | None = None
    #: Ledger position where the latest compaction's tail starts (0: never compacted). The
    #: ``compaction`` event sits at or after it, so a compacting read from here finds it.
    compacted_to: int = 0
    #: Compactions the session has made (its own and, for a fork, its history's).
    compactions: int = 0
    #: While a claimed invocation runs (its claim committed, its end not yet): the epoch ms
    #: its claimer promised to commit by. Past it, the claimer is taken to have died and the
    #: next request takes the invocation over (:func:`stranded`). 0: no lease held.
    lease: int = 0
    #: Times the open invocation was taken over after its claimer died (0: never).
    takeovers: int = 0
    #: The session's first user message, shortened (:func:`preview_of`), for lists of
    #: sessions (None: no message yet). Set once: later messages leave it as it is.
    preview: str | None = None

    # --- JSON (pydantic-compatible names) ----------------------------------------------------

    @classmethod
    def model_validate_json(cls, data: str | bytes) -> Head:
        return _adapter().validate_json(data)

    @classmethod
    def model_validate(cls, data: Any) -> Head:
        return _adapter().validate_python(data)

    def model_dump_json(self) -> str:
        return _adapter().dump_json(self).decode()

    def model_dump(self, *, mode: Literal["json", "python"] = "python") -> dict[str, Any]:
        return _adapter().dump_python(self, mode=mode)  # type: ignore[no-any-return]

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> Head:
        copied = self.clone() if deep else self._copy(self.state, self.step, self.turn_starts,
                                                      self.message_ids)
        for key, value in (update or {}).items():
            setattr(copied, key, value)
        return copied

    def clone(self) -> Head:
        """An independent copy (what a fold may mutate is copied; strings are shared)."""
        return self._copy(
            json_copy(self.state) if self.state else {},
            [PendingCall(c.call_id, c.name, json_copy(c.args), c.yielded,
                         json_copy(c.prepared), c.answered, json_copy(c.input),
                         c.settled, c.approval_id, c.decided, c.approved, c.reason,
                         c.deferred)
             for c in self.step] if self.step else [],
            list(self.turn_starts),
            list(self.message_ids),
        )

    def _copy(self, state: dict[str, Any], step: list[PendingCall], turn_starts: list[int],
              message_ids: list[str]) -> Head:
        # Spelled out: dataclasses.replace re-inspects the fields on every call (hot path);
        # an empty container is not given a comprehension (each is a call of its own).
        return Head(self.session_id, self.format, self.version, self.seq, state, self.principal,
                    self.created_at, self.updated_at, self.open_invocation, self.agent,
                    self.parked, step, self.inbox, self.last_user_ts, turn_starts,
                    message_ids, self.last_event,
                    {name: dict(timer) for name, timer in self.timers.items()}
                    if self.timers else {},
                    self.failed, self.messages, list(self.settled_ids), self.retries,
                    self.calls, self.paused,
                    [dict(q) for q in self.queue] if self.queue else [],
                    [dict(i) for i in self.inputs] if self.inputs else [],
                    self.control_rev, list(self.invocations), list(self.commit_seqs),
                    [dict(s) for s in self.lineage] if self.lineage else [],
                    dict(self.fork_of) if self.fork_of else None, self.compacted_to,
                    self.compactions, self.lease, self.takeovers, self.preview)

    # --- reading -------------------------------------------------------------------------------

    def visible_to(self, principal: str | None) -> bool:
        """Whether a request scoped to ``principal`` may see this session: only its owner's
        may (an ownerless session is nobody's); ``None`` is trusted server code, unscoped."""
        return principal is None or self.principal == principal

    def window_start(self, turns: int | None, *, compacted: bool = False) -> int:
        """Position of the first event a ``turns``-turn history window needs (0: everything).
        ``compacted``: a compacting history's window, which starts no earlier than the latest
        compaction's tail (the summary stands for what is before it)."""
        if turns is None or turns > len(self.turn_starts):
            start = 0
        elif turns <= 0:
            return self.seq
        else:
            start = self.turn_starts[-turns]
        return max(start, self.compacted_to) if compacted else start

    @property
    def fork_point(self) -> int:
        """Where this session's own events begin (0: not a fork)."""
        return int(self.lineage[-1]["end"]) if self.lineage else 0

    def turns_since(self, position: int) -> int | None:
        """Turns that started at or after ledger position ``position`` (None: more than the
        head's turn index remembers)."""
        starts = self.turn_starts
        if starts and starts[0] >= position and len(starts) >= TURN_INDEX_SIZE:
            return None
        return sum(1 for start in starts if start >= position)

    def has_message(self, message_id: str) -> bool:
        """Whether a recent message carried ``message_id`` (the redelivery window)."""
        return message_digest(message_id) in self.message_ids

    def has_event(self, event_id: str) -> bool:
        """Whether a recent application event carried ``event_id`` (the redelivery window)."""
        return message_digest(_EVENT + event_id) in self.message_ids

    def has_retry(self, retry_id: str) -> bool:
        """Whether a recent retry carried ``retry_id``."""
        return message_digest(_RETRY + retry_id) in self.message_ids

    @property
    def knows_every_message(self) -> bool:
        """True while the digest window holds every message id the session ever had: then
        ``has_message`` is the whole truth and a redelivery check needs no store read."""
        return 0 <= self.messages <= MESSAGE_ID_WINDOW

    def pending_yields(self) -> list[PendingCall]:
        """Yielded calls that have no input yet, in call order."""
        return [c for c in self.step if c.yielded and not c.answered and not c.settled]

    def pending_deferred(self) -> list[PendingCall]:
        """Deferred calls whose result has not arrived yet, in call order."""
        return [c for c in self.step if c.deferred and not c.settled]

    def pending_approvals(self) -> list[PendingCall]:
        """Calls whose approval request has no decision yet, in call order."""
        return [c for c in self.step
                if c.approval_id is not None and not c.decided and not c.settled]

    def unresolved(self) -> list[PendingCall]:
        """Everything the parked step waits for: unanswered yields, undecided approvals and
        deferred calls with no result yet."""
        return [c for c in self.step if not c.settled and (
            (c.yielded and not c.answered) or (c.approval_id is not None and not c.decided)
            or c.deferred)]

    def busy(self) -> str | None:
        """Why a user message cannot run now (it goes to the inbox), or None: ``paused``,
        ``failed``, ``tool`` (parked on yields or approvals), ``input`` (an input request
        is open), ``running`` (a resumed invocation is running: its claim is committed)."""
        if self.paused:
            return "paused"
        if self.failed:
            return "failed"
        if self.parked == "tool" and self.unresolved():
            return "tool"
        if self.inputs:
            return "input"
        if self.open_invocation is not None and self.parked is None:
            return "running"
        return None

    @property
    def running(self) -> bool:
        """Whether the open invocation was claimed and runs now (in some request): neither
        parked, failed nor paused. A turn that started fresh writes nothing until it ends, so
        the head shows only claimed runs."""
        return (self.open_invocation is not None and self.parked is None and not self.failed
                and not self.paused)

    def stranded(self, now: int) -> bool:
        """Whether the open invocation runs under a claim whose lease ran out at ``now``
        (epoch ms): its claimer died before committing, and the invocation is there to be
        taken over (a claim written before leases existed counts as run out)."""
        return self.running and self.lease <= now

    @property
    def free(self) -> bool:
        """Whether a queued message can run now: nothing is waited on, failed or paused,
        and no parked step is left to settle."""
        return self.busy() is None and (self.open_invocation is None
                                        or self.parked == "message")

    def knows_invocation(self, invocation_id: str) -> bool:
        """Whether ``invocation_id`` is one of the session's recent invocations."""
        return message_digest(invocation_id) in self.invocations

    def queued(self, message_id: str) -> int | None:
        """Position of a queued message in the inbox (None: not queued)."""
        for index, item in enumerate(self.queue):
            if item["id"] == message_id:
                return index
        return None

    def pending_input(self, input_id: str) -> dict[str, Any] | None:
        for item in self.inputs:
            if item["input_id"] == input_id:
                return item
        return None

    def approval(self, approval_id: str) -> PendingCall | None:
        for candidate in self.step:
            if candidate.approval_id == approval_id:
                return candidate
        return None

    def call(self, call_id: str) -> PendingCall | None:
        for candidate in self.step:
            if candidate.call_id == call_id:
                return candidate
        return None


@functools.cache
def _adapter() -> TypeAdapter[Head]:
    """Built on first use, not at import (a cold start that never reads JSON skips it)."""
    return TypeAdapter(Head)

SessionStatus = Literal["active", "awaiting_input", "failed", "paused"]


def status_of(head: Head) -> SessionStatus:
    """A session's status: ``paused``, ``failed``, ``awaiting_input`` (parked on a yield, an
    approval or a message yield, or an input request is open) or ``active``."""
    if head.paused:
        return "paused"
    if head.failed:
        return "failed"
    return "awaiting_input" if head.parked is not None or head.inputs else "active"


_RETRY = "\x00retry:"
_DECIDED = "\x00decided:"
_ANSWERED = "\x00answered:"
_INPUT = "\x00input:"
_EVENT = "\x00event:"


def message_digest(message_id: str) -> str:
    """A 48-bit digest of a message id: a false match within a 32-id window has odds of about
    one in 10^13, and the head (rewritten on every commit) stays small."""
    return hashlib.blake2b(message_id.encode(), digest_size=6).hexdigest()


def apply(head: Head, event: Event) -> None:
    """Fold ``event`` into ``head`` in place, refusing transitions the ledger cannot make."""
    # (the cases a turn meets most come first: each case is an isinstance check)
    match event:
        case UserEvent():
            _user(head, event)
        case AssistantEvent():
            pass  # the reply changes nothing the head keeps
        case InvocationStart():
            _refuse_if_parked_on_tools(head)
            _refuse_if_failed(head)
            _refuse_if_running(head)
            if event.invocation_id is not None:
                _remember_invocation(head, event.invocation_id)
            head.open_invocation = event.invocation_id
            head.lease = 0
            head.takeovers = 0
            head.retries = 0
            head.calls = 0
            head.agent = event.agent or head.agent
            head.parked = None
            head.step = []
            head.inbox = 0
        case InvocationEnd():
            if event.invocation_id is not None and event.invocation_id != head.open_invocation:
                # an invocation ends once: a second ending (two requests raced to end it)
                # is refused, never appended after the first
                raise NotRunning(head.session_id, event.invocation_id)
            head.lease = 0
            head.open_invocation = None
            head.parked = None
            head.step = []
            head.failed = False
        case ToolCall():
            head.calls += 1
            if all(c.settled for c in head.step):
                head.step = []
            head.step.append(PendingCall(call_id=event.call_id, name=event.name, args=event.args))
        case ToolYield():
            call = _known_call(head, event.call_id)
            call.yielded = True
            call.prepared = event.args
        case ToolDeferred():
            _known_call(head, event.call_id).deferred = True
        case InvocationYield():
            head.parked = event.reason
            head.lease = 0
        case ToolInput():
            _tool_input(head, event)
        case ApprovalRequested():
            _known_call(head, event.call_id).approval_id = event.approval_id
        case ApprovalDecided():
            _decide(head, event)
        case TimerSet():
            head.timers[event.name] = event.model_dump(
                mode="json", include={"name", "fire_at", "message", "message_id", "tool_input"})
        case TimerCancelled():
            head.timers.pop(event.name, None)
        case TimerFired():
            _fire(head, event)
        case InvocationResume():
            _resume(head, event)
        case ToolResult():
            settled = head.call(event.call_id)
            if event.deferred:
                _deferred_result(head, event, settled)
            if settled is not None and settled.settled and not event.preliminary:
                raise AlreadyAnswered(head.session_id, event.call_id)  # one final result
            if settled is not None and not event.preliminary:
                if (settled.yielded and not settled.answered) or settled.deferred:
                    # Ended with no answer (a stop, an interrupt): a late answer is told
                    # "already answered" once the step is gone, not "not awaiting input".
                    _settle(head, message_digest(_ANSWERED + event.call_id))
                if settled.approval_id is not None and not settled.decided:
                    _settle(head, message_digest(_DECIDED + settled.approval_id))  # likewise
                settled.settled = True
        case StateDelta():
            apply_patch(head.state, event.patch)
        case InvocationFailed():
            head.failed = True
            head.parked = None
            head.lease = 0
        case RetryEvent():
            _retry(head, event)
        case QueuedEvent():
            _remember_once(head, event.message_id)
            item = {"id": event.message_id, "text": event.text, "queued_at": event.ts}
            if event.audio:
                item["audio"] = True
            head.queue.insert(max(0, min(event.position, len(head.queue))), item)
        case QueueEdit():
            head.queue[_queued(head, event.message_id)]["text"] = event.text
        case QueueMove():
            moved = head.queue.pop(_queued(head, event.message_id))
            head.queue.insert(max(0, min(event.position, len(head.queue))), moved)
        case QueueRemove():
            del head.queue[_queued(head, event.message_id)]
        case QueueSendNow():
            head.queue.insert(0, head.queue.pop(_queued(head, event.message_id)))
        case SeedEvent():
            _remember_once(head, event.message_id)
        case AppEvent():
            if event.event_id is not None:  # an id lands once, like a message id
                digest = message_digest(_EVENT + event.event_id)
                if digest in head.message_ids:
                    raise DuplicateMessage(head.session_id, event.event_id)
                _remember(head, digest)
        case CompactionEvent():
            if not 0 <= event.tail_start <= head.seq:
                raise InputError(f"a compaction's tail starts at {event.tail_start}, outside "
                                 f"the ledger of session {head.session_id}")
            # merged after a newer one (two turns raced): the newer summary stays in force
            head.compacted_to = max(head.compacted_to, event.tail_start)
            head.compactions += 1
        case InputRequested():
            if head.pending_input(event.input_id) is not None:
                raise InputError(f"input {event.input_id} is already requested in session "
                                 f"{head.session_id}")
            head.inputs.append({"input_id": event.input_id, "schema": event.input_schema,
                                "prompt": event.prompt})
        case InputResponse():
            _respond(head, event.input_id)
        case PauseEvent():
            head.paused = True
            head.lease = 0
            if event.rev:
                head.control_rev = event.rev  # the control record's pause is taken up
        case ResumeEvent():
            if not head.paused:
                raise NotPending(f"session {head.session_id} is not paused: nothing to resume")
            head.paused = False
            if event.rev:
                head.control_rev = event.rev  # a pause asked in the record is over
        case InterruptEvent():
            _interrupt(head, event.owner)
        case StopRequested():
            if event.invocation_id is None or head.open_invocation != event.invocation_id:
                raise NotRunning(head.session_id, str(event.invocation_id))
            head.parked = None
        case SteerEvent():
            if event.invocation_id is None or head.open_invocation != event.invocation_id:
                raise NotRunning(head.session_id, str(event.invocation_id),
                                 "a steer joins only the invocation it names")
    head.seq += 1
    head.last_event = event.id


def apply_detached(head: Head, event: Event) -> None:
    """Fold ``event`` as a record of a closed invocation that lands beside the head's own
    (a superseded turn's kept tool results): it moves the ledger position, lands its message
    ids once, applies its state and timer changes, and leaves the head's open invocation, its
    step and its parking alone."""
    match event:
        case UserEvent():
            position = head.queued(event.message_id) if event.queued else None
            if position is not None:
                del head.queue[position]
            elif not event.queued:
                digest = message_digest(event.message_id)
                if digest in head.message_ids:
                    raise DuplicateMessage(head.session_id, event.message_id)
                _remember(head, digest)
            head.turn_starts.append(head.seq)
            del head.turn_starts[:-TURN_INDEX_SIZE]
            head.last_user_ts = max(head.last_user_ts, event.ts)
        case StateDelta():
            apply_patch(head.state, event.patch)
        case TimerSet():
            head.timers[event.name] = event.model_dump(
                mode="json", include={"name", "fire_at", "message", "message_id", "tool_input"})
        case TimerCancelled() | TimerFired():
            head.timers.pop(event.name, None)
    head.seq += 1
    head.last_event = event.id


def _refuse_if_parked_on_tools(head: Head) -> None:
    if head.parked == "tool":
        pending = [(c.call_id, c.name) for c in head.unresolved()]
        raise PendingInputError(head.session_id, pending)


def _remember_invocation(head: Head, invocation_id: str) -> None:
    head.invocations.append(message_digest(invocation_id))
    del head.invocations[:-INVOCATION_WINDOW]


def _remember_once(head: Head, message_id: str) -> None:
    digest = message_digest(message_id)
    if digest in head.message_ids:
        raise DuplicateMessage(head.session_id, message_id)
    _remember(head, digest)


def _queued(head: Head, message_id: str) -> int:
    position = head.queued(message_id)
    if position is None:
        raise NotPending(f"message {message_id} is not queued in session {head.session_id}"
                         + (" (inbox: " + ", ".join(q["id"] for q in head.queue) + ")"
                            if head.queue else " (the inbox is empty)"))
    return position


def _respond(head: Head, input_id: str) -> None:
    answered = message_digest(_INPUT + input_id)
    item = head.pending_input(input_id)
    if item is None:
        if answered in head.settled_ids:
            raise AlreadyAnswered(head.session_id, input_id)
        raise NotPending(f"input {input_id} is not requested in session {head.session_id}"
                         + (" (pending: " + ", ".join(i["input_id"] for i in head.inputs) + ")"
                            if head.inputs else " (no input request is open)"))
    head.inputs.remove(item)
    _settle(head, answered)


def _interrupt(head: Head, owner: str) -> None:
    """Check that ``owner`` names what the session waits on now (one id, so a delayed
    interrupt cannot end later work); an input request it names is closed here, a waiting
    or failed invocation is ended by the events that follow."""
    if head.pending_input(owner) is not None:
        head.inputs = [i for i in head.inputs if i["input_id"] != owner]
        _settle(head, message_digest(_INPUT + owner))
        return
    if head.open_invocation == owner and (head.failed or head.parked is None):
        return  # a failed invocation, or one left running (its turn may have died)
    if head.parked == "tool" and any(
            owner in (c.call_id, c.approval_id) for c in head.unresolved()):
        return
    waiting = [c.call_id for c in head.unresolved()] + [
        c.approval_id for c in head.unresolved() if c.approval_id] + [
        i["input_id"] for i in head.inputs] + (
        [head.open_invocation] if head.open_invocation and (head.failed or head.parked is None)
        else [])
    raise NotPending(f"interrupt {owner} refused in session {head.session_id}: it is not what "
                     "the session waits on" + (f" (waiting on: {', '.join(waiting)})"
                                               if waiting else " (nothing is waiting)"))


def _refuse_if_running(head: Head) -> None:
    """Another invocation is running (its claim committed): a new one cannot start beside it.
    A request that read the session before that claim and merges onto it lands here: its
    turn is superseded, its message not run beside the other."""
    if head.open_invocation is not None and head.parked is None and not head.paused:
        raise SessionRunning(head.session_id, head.open_invocation)


def _refuse_if_failed(head: Head) -> None:
    if head.failed:
        raise SessionFailed(head.session_id, head.open_invocation)


def _user(head: Head, event: UserEvent) -> None:
    if event.steer:  # taken by the running invocation at a step boundary
        if head.open_invocation is None or head.open_invocation != event.invocation_id:
            raise NotRunning(head.session_id, str(event.invocation_id),
                             "a steer joins only the invocation it names")
        _remember_once(head, event.message_id)
        head.turn_starts.append(head.seq)
        del head.turn_starts[:-TURN_INDEX_SIZE]
        head.last_user_ts = max(head.last_user_ts, event.ts)
        return
    _refuse_if_parked_on_tools(head)
    if event.queued:  # it leaves the inbox (its id landed when it was queued)
        position = head.queued(event.message_id)
        if position is None:
            raise NotPending(f"message {event.message_id} is no longer queued in session "
                             f"{head.session_id} (it ran, or was removed)")
        _refuse_if_failed(head)
        del head.queue[position]
    else:
        digest = message_digest(event.message_id)
        if digest in head.message_ids:
            raise DuplicateMessage(head.session_id, event.message_id)
        _refuse_if_failed(head)
        _remember(head, digest)
    head.turn_starts.append(head.seq)
    del head.turn_starts[:-TURN_INDEX_SIZE]
    head.last_user_ts = max(head.last_user_ts, event.ts)
    if head.preview is None:
        head.preview = preview_of(event.text)
    if head.open_invocation is None or head.parked == "message":
        head.inbox += 1


def preview_of(text: str) -> str:
    """``text`` on one line, cut to :data:`PREVIEW_CHARS` characters (ending in "…" when cut)."""
    line = " ".join(text.split())
    if len(line) <= PREVIEW_CHARS:
        return line
    return line[:PREVIEW_CHARS - 1].rstrip() + "…"


def _settle(head: Head, digest: str) -> None:
    head.settled_ids.append(digest)
    del head.settled_ids[:-MESSAGE_ID_WINDOW]


def _remember(head: Head, digest: str) -> None:
    head.message_ids.append(digest)
    del head.message_ids[:-MESSAGE_ID_WINDOW]
    if head.messages >= 0:
        head.messages += 1


def _retry(head: Head, event: RetryEvent) -> None:
    digest = message_digest(_RETRY + event.retry_id)
    if digest in head.message_ids:
        raise RetryRefused(head.session_id, event.retry_id, duplicate=True)
    if not head.failed or head.open_invocation != event.invocation_id:
        raise RetryRefused(head.session_id, event.retry_id)
    _remember(head, digest)
    head.failed = False
    head.retries += 1


def _tool_input(head: Head, event: ToolInput) -> None:
    call = head.call(event.call_id)
    answered = message_digest(_ANSWERED + event.call_id)
    if (call is not None and call.yielded and (call.answered or call.settled)) or (
            call is None and answered in head.settled_ids):
        raise AlreadyAnswered(head.session_id, event.call_id)
    if call is not None and call.deferred:
        raise NotPending(f"call {event.call_id} ({call.name}) is deferred: its result comes "
                         "from trusted server code (input.tool_result), not a tool input")
    if call is None or not call.yielded or call.settled:
        raise NotPending(
            f"call {event.call_id} is not awaiting input in session {head.session_id}"
            + _awaiting(head)
        )
    call.answered = True
    call.input = event.input
    _settle(head, answered)


def _deferred_result(head: Head, event: ToolResult, call: PendingCall | None) -> None:
    """A result supplied from outside lands only on a deferred call that still waits for it:
    once (a redelivery is told "already answered", also after the step moved on)."""
    if (call is not None and call.deferred and call.settled) or (
            call is None and message_digest(_ANSWERED + event.call_id) in head.settled_ids):
        raise AlreadyAnswered(head.session_id, event.call_id)
    if call is None or not call.deferred or head.parked != "tool" or event.preliminary:
        waiting = ", ".join(f"{c.name} {c.call_id}" for c in head.pending_deferred())
        raise NotPending(
            f"call {event.call_id} is not a deferred call waiting for its result in session "
            f"{head.session_id}" + (f" (waiting: {waiting})" if waiting
                                    else " (no deferred call is waiting)"))


def _decide(head: Head, event: ApprovalDecided) -> None:
    call = head.approval(event.approval_id)
    decided = message_digest(_DECIDED + event.approval_id)
    if (call is not None and (call.decided or call.settled)) or (
            call is None and decided in head.settled_ids):
        raise AlreadyDecided(head.session_id, event.approval_id)
    if call is None:
        pending = ", ".join(f"{c.approval_id} ({c.name})" for c in head.pending_approvals())
        raise NotPending(
            f"approval {event.approval_id} is not pending in session {head.session_id}"
            + (f" (pending: {pending})" if pending else " (no approval is pending)")
        )
    call.decided = True
    call.approved = event.approved
    call.reason = event.reason
    _settle(head, decided)


def _fire(head: Head, event: TimerFired) -> None:
    timer = head.timers.get(event.name)
    if timer is None or timer["fire_at"] != event.fire_at:
        raise StaleTimer(head.session_id, event.name)
    del head.timers[event.name]


def _resume(head: Head, event: InvocationResume) -> None:
    if head.parked is None or head.open_invocation != event.invocation_id:
        raise ResumeError(
            f"invocation {event.invocation_id} of session {head.session_id} is not parked"
        )
    if head.parked == "tool" and head.unresolved():
        names = ", ".join(c.call_id for c in head.unresolved())
        raise ResumeError(f"session {head.session_id} still awaits input for {names}")
    head.parked = None
    head.inbox = 0


def _known_call(head: Head, call_id: str) -> PendingCall:
    call = head.call(call_id)
    if call is None:
        raise InputError(f"call {call_id} is not part of the open step of {head.session_id}")
    return call


def _awaiting(head: Head) -> str:
    pending = head.pending_yields()
    if not pending:
        return " (nothing is awaiting input)"
    return " (awaiting: " + ", ".join(f"{c.name} {c.call_id}" for c in pending) + ")"
