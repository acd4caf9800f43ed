"""What each input does to a session, decided from its head alone; nothing here writes.

A request's inputs — a message, an interrupt, a stop, a steer, a pause or resume, the inbox
ops, an input response, a seed — are appended to the session's uncommitted slice, where the
head fold checks them, or become an :class:`Ask` for the turn running now (stop, steer,
pause), which the control room (:mod:`dormant._control`) writes to the control record.
:func:`plan` is the one decision: what the request does once its inputs are applied. The
request room (:mod:`dormant._request`) commits what it decided; the commit policy re-checks
it against the head it lands on.

An invocation the head knows ended cannot be stopped (409 ``not_running``); one it does not
know may be running in another process right now (its first commit comes at its end), so the
stop is an :class:`Ask`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ValidationError

from dormant._head import Head, call_scope
from dormant._ids import new_id
from dormant._inputs import IfBusy, Input, QueuedRef, TurnStatus
from dormant._patch import to_json_value
from dormant._schema import schema_errors
from dormant.errors import (
    DormantError,
    DuplicateMessage,
    EventRefused,
    InputError,
    NotPending,
    NotRunning,
    PendingInputError,
    RetryRefused,
    SessionFailed,
    SessionNotFound,
    SessionPaused,
    SessionRunning,
)
from dormant.events import (
    AppEvent,
    ApprovalDecided,
    Event,
    InputRequested,
    InputResponse,
    InterruptEvent,
    InvocationEnd,
    PauseEvent,
    QueuedEvent,
    QueueEdit,
    QueueMove,
    QueueRemove,
    QueueSendNow,
    ResumeEvent,
    RetryEvent,
    SeedEvent,
    StopRequested,
    ToolInput,
    ToolResult,
)
from dormant.types import Control, ControlRunning, ControlSteer, ControlStop

__all__ = [
    "Ask",
    "EventType",
    "Plan",
    "Slice",
    "app_event",
    "approval",
    "interrupt",
    "message",
    "pause",
    "pending_stop",
    "plan",
    "queue_op",
    "request_input",
    "respond",
    "resume",
    "retry",
    "running",
    "seed",
    "stale_stop",
    "steer",
    "stop",
    "take_pending",
    "tool",
    "tool_result",
]

#: How long (ms) a stop that matches nothing the session knows of waits for its invocation
#: to run: the session shows it as pending meanwhile, and a turn of that invocation that
#: starts later ignores it.
PENDING_STOP_MS = 60_000

STOPPED: Literal["stopped"] = "stopped"
INTERRUPTED: Literal["interrupted"] = "interrupted"


class Slice(Protocol):
    """What a decision sees of a session: its head, its control record as loaded, and the
    uncommitted slice it appends to (:class:`dormant.session.Session` is one)."""

    @property
    def head(self) -> Head: ...

    @property
    def pause_pending(self) -> bool: ...

    control: Control | None
    control_asks: list[Ask]
    #: The app's declared event types (``app.event``), by name; None: not bound to an app.
    event_types: dict[str, EventType] | None

    def add_event(self, event: Event) -> None: ...

    def record(self, event: Event) -> None: ...


@dataclass(frozen=True)
class Ask:
    """A control for the turn running now, waiting to be written to the control record."""

    kind: Literal["stop", "steer", "pause", "unpause"]
    invocation_id: str | None = None
    seen: int | None = None
    id: str | None = None
    text: str | None = None


# --- deciding ------------------------------------------------------------------------------------


def running(session: Slice, invocation_id: str, *, resumable: bool = False) -> bool:
    """Whether ``invocation_id`` may be running now, as far as the head can tell: it is the
    open invocation and neither parked, failed nor paused — or the head has never seen it
    (a new invocation writes nothing until it ends). ``resumable``: count an invocation
    parked on a message yield as possibly running (a message may be resuming it elsewhere)."""
    head = session.head
    if head.open_invocation == invocation_id:
        parked_ok = head.parked is None or (resumable and head.parked == "message")
        return parked_ok and not head.failed and not head.paused
    return not head.knows_invocation(invocation_id)


def announced(session: Slice, now: int | None = None) -> ControlRunning | None:
    """The turn the session's control record says runs now, while that can still be true.

    The record keeps an announcement until somebody rewrites it, so it is read against the
    head: live while the head is still at the version the turn started from (any commit,
    the turn's own end first of all, moves it) and the head does not know the invocation
    ended (:func:`running`). A turn whose process died without committing reads as running
    until the session's next commit, or, given ``now`` (epoch ms), until its heartbeat
    (:attr:`ControlRunning.until`) ran out."""
    control = session.control
    return live(control.running if control is not None else None, session, now)


def live(entry: ControlRunning | None, session: Slice,
         now: int | None = None) -> ControlRunning | None:
    """``entry`` if the turn it announces can still be running (see :func:`announced`)."""
    if entry is None or entry.version != session.head.version:
        return None
    if now is not None and 0 < entry.until <= now:
        return None  # its heartbeat ran out: its process died
    return entry if running(session, entry.invocation_id) else None


def _unmatched(session: Slice, invocation_id: str | None) -> DormantError | None:
    """Why a stop (of ``invocation_id``) or a pause (None) can match nothing, or None if it
    may match. A session with no ledger whose control record announces no turn of the
    caller's does not exist yet (404): a session's first turn announces itself as it starts.
    An invocation the head never saw cannot be running while the session waits on people,
    failed, is paused or runs another invocation (claimed, or announced): 409. On a free
    session a turn that has not announced itself yet may be running it: that stop is
    asked."""
    head = session.head
    entry = announced(session)
    if head.version == 0 and (entry is None or entry.principal != head.principal):
        return SessionNotFound(head.session_id)
    if invocation_id is None or head.knows_invocation(invocation_id) or (
            entry is not None and entry.invocation_id == invocation_id):
        return None
    busy = head.busy() or ("paused" if session.pause_pending else None)
    if busy is None and entry is None:
        return None
    now = head.open_invocation or (entry.invocation_id if entry is not None else None)
    return NotRunning(head.session_id, invocation_id, "the session never ran it"
                      + (f"; {now} is its open invocation" if now else ""))


def unmatched_stop(session: Slice, invocation_id: str) -> bool:
    """Whether a stop of ``invocation_id`` matches nothing the session knows of: it never ran
    that invocation and no turn announced it. On a free session a turn that has not
    announced itself yet (one running less than a poll interval) may still be it: the stop
    then waits in the control record, and says so."""
    entry = announced(session)
    return not session.head.knows_invocation(invocation_id) and (
        entry is None or entry.invocation_id != invocation_id)


def pending_stop(session: Slice, now: int) -> ControlStop | None:
    """The stop waiting in the control record for an invocation the session is not known to
    run (:func:`unmatched_stop`), unless it went stale (:func:`stale_stop`) by ``now`` (epoch
    ms, the wall clock the record is stamped with)."""
    control = session.control
    held = control.stop if control is not None else None
    if held is None or stale_stop(held, now) or not unmatched_stop(session, held.invocation_id):
        return None
    return held


def stale_stop(held: ControlStop, now: int) -> bool:
    """Whether ``held`` was sent more than :data:`PENDING_STOP_MS` before ``now``: a stop that
    matched nothing by then matches nothing later either (a turn that runs its invocation
    names itself within a poll interval). A turn that starts after that ignores it."""
    return 0 < held.at < now - PENDING_STOP_MS


def stop(session: Slice, invocation_id: str, seen: int | None = None,
         now: int | None = None) -> Literal["stopped", "accepted"]:
    """Stop ``invocation_id``. A waiting (parked or paused) one ends now, in the slice; one
    that may be running elsewhere gets an :class:`Ask`; anything else is refused, and so is
    a stop that can match nothing (:func:`_unmatched`)."""
    head = session.head
    unmatched = _unmatched(session, invocation_id)
    if unmatched is not None:
        raise unmatched
    if head.open_invocation == invocation_id:
        if head.failed:
            raise NotRunning(head.session_id, invocation_id,
                             "it failed; retry it (input.retry) or interrupt it")
        if head.parked == "tool" or head.paused or (now is not None and head.stranded(now)):
            # it waits on people, or its claimer died (``now`` is past its lease): nobody
            # would see an ask, so it ends now
            end_waiting(session, STOPPED, seen=seen)
            return "stopped"
        # parked on a message yield: a message may be resuming it in another process right
        # now (that writes nothing until it ends), so the stop is asked of that turn
    elif head.knows_invocation(invocation_id):
        raise NotRunning(head.session_id, invocation_id)
    session.control_asks.append(Ask("stop", invocation_id, seen=seen))
    return "accepted"


def end_waiting(session: Slice, status: Literal["stopped", "interrupted"], *,
                seen: int | None = None, owner: str | None = None) -> None:
    """End the open invocation while it waits (or failed): unsettled calls get an error
    result, then ``invocation_end``."""
    head = session.head
    invocation = head.open_invocation
    if status == INTERRUPTED:  # first: it checks the owner names what is waited on
        assert owner is not None
        session.add_event(InterruptEvent(invocation_id=invocation, owner=owner))
        if invocation is None or head.open_invocation != invocation:
            return  # it closed an input request only
    for call in list(head.step):
        if not call.settled:
            session.add_event(ToolResult(invocation_id=invocation, call_id=call.call_id,
                                         name=call.name, error=status,
                                         scope=call_scope(call)))
    if status == STOPPED:  # the same shape as a running turn's stop
        session.add_event(StopRequested(invocation_id=invocation, seen=seen))
    session.add_event(InvocationEnd(invocation_id=invocation, status=status))


def steer(session: Slice, text: str, invocation_id: str, id: str | None = None,
          *, holds: Callable[[str], bool] | None = None) -> tuple[str, QueuedEvent | None]:
    """Steer the running invocation (an :class:`Ask`: ``accepted``); if it is not running,
    the steer is an ordinary message at once: ``run`` or ``queued``."""
    message_id = id or new_id("msg")
    head = session.head
    if head.has_message(message_id) or (holds is not None and holds(message_id)):
        raise DuplicateMessage(head.session_id, message_id)
    if running(session, invocation_id):
        session.control_asks.append(Ask("steer", invocation_id, id=message_id, text=text))
        return "accepted", None
    return message(session, text, message_id)


def message(session: Slice, text: str, message_id: str,
            if_busy: IfBusy | None = None,
            *, audio: bool = False) -> tuple[str, QueuedEvent | None]:
    """What a user message does now: ``run`` (the session can take it), or ``queued`` (it
    went to the inbox, event returned). ``if_busy="reject"`` refuses instead; ``"interrupt"``
    ends the waiting response and runs it."""
    head = session.head
    busy = head.busy() or ("paused" if session.pause_pending else None)
    if busy is None:
        return "run", None
    if if_busy == "reject":
        raise _busy_error(session, busy)
    if if_busy == "interrupt" and busy not in ("paused", "running"):  # a live turn is not
        # interrupted by a message: it queues (steer it, or interrupt it by its id)
        interrupt_all(session)
        if session.head.busy() is None:
            return "run", None
    event = QueuedEvent(message_id=message_id, text=text, position=len(head.queue),
                        invocation_id=None, audio=audio)
    session.add_event(event)
    return "queued", event


def _busy_error(session: Slice, busy: str) -> InputError:
    head = session.head
    if busy == "paused":
        return SessionPaused(head.session_id)
    if busy == "failed":
        return SessionFailed(head.session_id, head.open_invocation)
    if busy == "running":
        return SessionRunning(head.session_id, head.open_invocation)
    pending = [(c.call_id, c.name) for c in head.unresolved()] + [
        (i["input_id"], "input request") for i in head.inputs]
    return PendingInputError(head.session_id, pending)


def interrupt(session: Slice, owner: str, now: int | None = None) -> None:
    """End what the session waits on, named by exactly one id (see :class:`InterruptEvent`).
    An invocation that runs under a live claim is not waiting: it is refused (stop it, by its
    id); one whose claimer died (``now`` is past its lease) may be ended."""
    head = session.head
    if now is not None and head.open_invocation == owner and head.running \
            and not head.stranded(now):
        raise SessionRunning(head.session_id, owner)
    if head.pending_input(owner) is not None:
        session.add_event(InterruptEvent(invocation_id=None, owner=owner))
        return
    end_waiting(session, INTERRUPTED, owner=owner)


def interrupt_all(session: Slice) -> None:
    """End everything the session waits on (``if_busy="interrupt"``, ``queue_send_now``)."""
    head = session.head
    for item in list(head.inputs):
        interrupt(session, item["input_id"])
    if head.failed and head.open_invocation is not None:
        interrupt(session, head.open_invocation)
    elif head.parked == "tool" and head.unresolved():
        first = head.unresolved()[0]
        interrupt(session, first.approval_id or first.call_id)


def pause(session: Slice) -> Literal["paused", "accepted"]:
    """Pause the session: the running turn (if any) stops at its next step boundary; until
    then, and whenever no turn runs, the pause waits in the control record and the next
    request takes it up. Already paused: nothing to do."""
    if session.head.paused or session.pause_pending:
        return "paused"
    unmatched = _unmatched(session, None)
    if unmatched is not None:
        raise unmatched
    session.control_asks.append(Ask("pause"))
    return "accepted"


def resume(session: Slice) -> Literal["continue", "resumed"]:
    """Resume: a pause not taken up yet is withdrawn; a paused session resumes
    (``continue``: its invocation was paused between steps and carries on)."""
    head = session.head
    if not head.paused and not session.pause_pending:
        raise NotPending(f"session {head.session_id} is not paused: nothing to resume")
    if session.pause_pending:
        session.control_asks.append(Ask("unpause"))
    if not head.paused:
        return "resumed"
    control = session.control
    rev = control.pause if control is not None and control.pause is not None else 0
    session.add_event(ResumeEvent(invocation_id=head.open_invocation, rev=rev))
    if head.open_invocation is not None and head.parked is None and not head.failed:
        return "continue"  # paused between steps: the invocation carries on
    return "resumed"


def queue_op(session: Slice, op: str, message_id: str, *, text: str | None = None,
             position: int | None = None) -> None:
    """An inbox operation: edit, move, remove or send_now (interrupt the waiting response,
    move the message to the front; the caller runs it)."""
    head = session.head
    if op == "edit":
        if not text:
            raise InputError(f"queue edit of {message_id} needs a non-empty text")
        session.add_event(QueueEdit(message_id=message_id, text=text))
    elif op == "move":
        if position is None:
            raise InputError(f"queue move of {message_id} needs a position")
        session.add_event(QueueMove(message_id=message_id, position=position))
    elif op == "remove":
        session.add_event(QueueRemove(message_id=message_id))
    elif op == "send_now":
        session.add_event(QueueSendNow(message_id=message_id))
        if not head.paused:
            interrupt_all(session)
    else:
        raise InputError(f"unknown queue op {op!r}: use edit, move, remove or send_now")


def request_input(session: Slice, input_id: str, schema: Any, prompt: str | None) -> None:
    """Ask a person for input (trusted code): the session waits until ``respond``."""
    if not isinstance(input_id, str) or not input_id or len(input_id) > 128:
        raise InputError("an input request needs an input_id of 1-128 characters")
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        schema = schema.model_json_schema()
    if not isinstance(schema, dict):
        raise InputError(f"input {input_id}: schema must be a JSON Schema dict or a "
                         "pydantic model class")
    session.record(InputRequested(input_id=input_id, input_schema=schema, prompt=prompt,
                                   invocation_id=session.head.open_invocation))


def respond(session: Slice, input_id: str, value: Any) -> None:
    """Answer an input request, validated against its schema (nothing written if invalid)."""
    head = session.head
    item = head.pending_input(input_id)
    if item is not None:
        problems = schema_errors(value, item.get("schema") or {})
        if problems:
            raise InputError(f"input {input_id} does not fit its schema: "
                             + "; ".join(problems))
    session.add_event(InputResponse(input_id=input_id, value=to_json_value(value)))


def tool(session: Slice, call_id: str, value: Any) -> ToolInput:
    """Answer a yielded call: checked by the fold, validated against the tool's
    ``yield_schema`` when the step resumes."""
    event = ToolInput(call_id=call_id, input=to_json_value(value),
                      invocation_id=session.head.open_invocation)
    session.add_event(event)
    return event


def approval(session: Slice, approval_id: str, approved: bool,
             reason: str | None = None) -> ApprovalDecided:
    """Decide a pending approval request (a JSON boolean only; the fold refuses an id that
    is not pending, or one decided already)."""
    if not isinstance(approved, bool):
        raise InputError(f"approval {approval_id}: approved must be true or false")
    head = session.head
    call = head.approval(approval_id)
    event = ApprovalDecided(approval_id=approval_id, approved=approved, reason=reason,
                            call_id=call.call_id if call is not None else "",
                            invocation_id=head.open_invocation)
    session.add_event(event)
    return event


def retry(session: Slice, retry_id: str, *,
          landed: Callable[[str], bool] | None = None) -> RetryEvent:
    """A retry of the failed invocation's failed model call: the event that reopens it (not
    appended: the request room claims it, ``session.input.retry`` leaves it to the next
    turn). Refused when the session is not failed, and as a duplicate when the retry id
    landed already: in the head, or (``landed``: the store's once-only keys, asked only when
    the head's window may not reach back to it) beyond it."""
    if not isinstance(retry_id, str) or not retry_id:
        raise InputError("a retry needs a non-empty retry_id")
    head = session.head
    if head.has_retry(retry_id) or (
            landed is not None and head.failed and not head.knows_every_message
            and landed(retry_id)):
        raise RetryRefused(head.session_id, retry_id, duplicate=True)
    if not head.failed or head.open_invocation is None:
        raise RetryRefused(head.session_id, retry_id)
    return RetryEvent(invocation_id=head.open_invocation, retry_id=retry_id)


def tool_result(session: Slice, call_id: str, result: Any, is_error: bool = False
                ) -> ToolResult:
    """The result of a deferred call, from trusted code: checked against the admitted call
    (it exists, is deferred and still waits: else 409 ``not_pending``; already resulted:
    409 ``already_answered``, by the fold) and landed once. With ``is_error`` the result is
    the error text the model reads."""
    if not isinstance(call_id, str) or not call_id:
        raise InputError("a tool result needs a call_id")
    head = session.head
    call = head.call(call_id)
    value = to_json_value(result)
    error: str | None = None
    if is_error:
        error = value if isinstance(value, str) else json.dumps(value)
        value = None
    # (a sub-agent's call: its result is in its agent's scope, where its model reads it)
    event = ToolResult(invocation_id=head.open_invocation, call_id=call_id,
                       name=call.name if call is not None else "", result=value, error=error,
                       deferred=True, scope=call_scope(call) if call is not None else None)
    session.add_event(event)
    return event


@dataclass(frozen=True)
class EventType:
    """An application event type, declared with ``app.event(name, schema)``: its data is
    checked against ``schema`` (a JSON Schema dict), or validated by ``model`` (a pydantic
    model class, whose JSON Schema ``schema`` then is)."""

    name: str
    schema: dict[str, Any]
    model: type[BaseModel] | None = None
    description: str = ""

    @classmethod
    def declare(cls, name: str, schema: Any, description: str = "") -> EventType:
        if not isinstance(name, str) or not name or len(name) > 200:
            raise InputError("an event type needs a name of 1-200 characters")
        if isinstance(schema, type) and issubclass(schema, BaseModel):
            return cls(name, schema.model_json_schema(), schema, description)
        if not isinstance(schema, dict):
            raise InputError(f"event {name!r}: schema must be a JSON Schema dict or a "
                             "pydantic model class")
        return cls(name, schema, None, description)

    def validate(self, data: Any) -> Any:
        """``data`` as JSON once it fits (raises :class:`EventRefused` naming what is wrong)."""
        if self.model is not None:
            try:
                return self.model.model_validate(data).model_dump(mode="json")
            except ValidationError as error:
                reasons = "; ".join(
                    f"{'.'.join(str(p) for p in e['loc']) or 'data'}: {e['msg']}"
                    for e in error.errors(include_url=False))
                raise EventRefused(f"event {self.name!r} does not fit its schema: "
                                   f"{reasons}") from None
        value = to_json_value(data)
        problems = schema_errors(value, self.schema, "data")
        if problems:
            raise EventRefused(f"event {self.name!r} does not fit its schema: "
                               + "; ".join(problems))
        return value


def app_event(session: Slice, name: str, data: Any = None, id: str | None = None
              ) -> AppEvent | None:
    """An application event from trusted code: checked against its declared type (an
    undeclared name or data that does not fit: :class:`EventRefused`, nothing written) and
    recorded once per id (an id the head already holds: None, nothing written)."""
    types = session.event_types
    if types is None:
        raise EventRefused(f"event {name!r}: this session is not bound to an app, so no "
                           "event type is declared for it (load it through app.sessions)")
    declared = types.get(name)
    if declared is None:
        known = ", ".join(sorted(types)) or "none"
        raise EventRefused(f"event {name!r} is not declared (app.event(name, schema)); "
                           f"declared: {known}")
    if id is not None and (not isinstance(id, str) or not id or len(id) > 128):
        raise InputError(f"event {name!r}: an id must be 1-128 characters")
    head = session.head
    if id is not None and head.has_event(id):
        return None  # a redelivery: it landed once already
    event = AppEvent(name=name, data=declared.validate(data), event_id=id,
                     invocation_id=head.open_invocation)
    session.record(event)
    return event


def seed(session: Slice, text: str, role: Literal["user", "system"] = "user",
         id: str | None = None) -> SeedEvent:
    """A passive message: part of the conversation, no turn started."""
    if not isinstance(text, str) or not text:
        raise InputError("a seed needs a non-empty text")
    if role not in ("user", "system"):
        raise InputError(f"seed role must be 'user' or 'system', got {role!r}")
    event = SeedEvent(text=text, role=role, message_id=id or new_id("msg"))
    session.add_event(event)
    return event


def take_pending(session: Slice, *, take_pause: bool = True) -> list[ControlSteer]:
    """What a turn starting now takes up from the control record: a pause nobody took
    (applied first, so the request's message queues), and steers whose invocation ended
    without taking them (returned: the turn runs them as ordinary messages first). A pause
    is not taken up while a claimed (or announced) invocation runs: that turn takes it at
    its next step boundary (taking it here would make a live invocation look like a waiting
    one)."""
    control = session.control
    if control is None:
        return []
    head = session.head
    if take_pause and session.pause_pending and not head.running and announced(session) is None:
        session.add_event(PauseEvent(invocation_id=None, rev=control.pause or 0))
    return [s for s in control.steers
            if not head.has_message(s.id) and not running(session, s.invocation_id)]



# --- what a request does -------------------------------------------------------------------------


@dataclass
class Plan:
    """What a request does once its turn-control inputs are applied: run a turn (``status``
    None: ``message``/``message_id`` to run, or ``continue_paused``), or finish with
    ``status`` (queued, accepted, stopped, paused, interrupted, recorded). ``invocation_key``:
    the message id the run's invocation id derives from, when it is not the request's own;
    ``stopped``: the waiting invocation a stop ended."""

    status: TurnStatus | None = None
    message: str | None = None
    message_id: str | None = None
    continue_paused: bool = False
    queued: QueuedRef | None = None
    invocation_key: str | None = None
    stopped: str | None = None
    #: What the caller should know of how it finished (a stop that matched nothing yet).
    note: str | None = None

    @property
    def run(self) -> bool:
        return self.status is None

    def finish(self, status: TurnStatus, queued: QueuedEvent | None = None) -> Plan:
        self.status = status
        if queued is not None:
            self.queued = QueuedRef(id=queued.message_id, position=queued.position)
        return self


def plan(session: Slice, given: Input, *, holds: Callable[[str], bool],
         now: int | None = None) -> Plan:
    """Apply a request's turn-control inputs to ``session`` (answers and decisions are
    already in its slice) and decide what the request does. ``holds(message_id)``: whether
    the session ever took that message id (the store's word beyond the head's window). The
    one decision the handlers and the test kit's in-process driver share."""
    result = Plan()
    controls = False
    if given.seed is not None:
        seed(session, given.seed.text, given.seed.role, given.seed.id)
        controls = True
    for given_event in given.events or ():
        app_event(session, given_event.name, given_event.data, given_event.id)
        controls = True
    for answer in given.inputs or ():
        respond(session, answer.input_id, answer.value)
        controls = True
    for op in given.queue or ():
        queue_op(session, op.op, op.id, text=op.text, position=op.position)
        controls = True
    status: TurnStatus = "recorded"
    if given.interrupt is not None:
        interrupt(session, given.interrupt.owner, now)
        controls, status = True, "interrupted"
    if given.stop is not None:
        status = stop(session, given.stop.invocation_id, given.stop.seen, now)
        controls = True
        if status == "stopped":
            result.stopped = given.stop.invocation_id
        elif unmatched_stop(session, given.stop.invocation_id):
            result.note = (
                f"no turn of session {session.head.session_id} is known to run invocation "
                f"{given.stop.invocation_id}: the stop waits in the session's control record "
                "(GET /sessions/{id}: pendingStop) and ends that invocation if it starts "
                f"within {PENDING_STOP_MS // 1000} s")
    if given.pause:
        pause(session)
        controls, status = True, "paused"
    if given.resume:
        if resume(session) == "continue":
            result.continue_paused = True
            return result
        controls = True
    text, message_id = given.message, given.message_id
    if given.steer is not None:
        outcome, queued = steer(session, given.steer.text, given.steer.invocation_id,
                                given.steer.id, holds=holds)
        if outcome != "run":
            return result.finish("accepted" if queued is None else "queued", queued)
        text, message_id = given.steer.text, given.steer.id
    head = session.head
    if text is not None:
        _, queued = message(session, text, message_id or new_id("msg"), given.if_busy,
                            audio=bool(given.spoken) and given.steer is None)
        if queued is not None:
            return result.finish("queued", queued)
        result.message, result.message_id = text, message_id
        if message_id is not None and message_id != given.message_id:  # a steer's id
            result.invocation_key = message_id
        return result
    if (head.paused or session.pause_pending) and (given.tools or given.approvals
                                                   or given.tool_results or not controls):
        if given.retry is not None:  # a retry is a run: it waits for no one
            raise SessionPaused(head.session_id)
        return result.finish("paused")  # answers and decisions are recorded; nothing runs
    free = head.queue and head.free and not session.pause_pending
    if not controls:  # an ordinary request (answers, decisions, a retry, an empty drain)
        if free and given.retry is None and not given.tools and not given.approvals \
                and not given.tool_results:
            # an empty request runs the inbox's next message, under the invocation id a
            # request sending that message would have had (so call ids match)
            result.invocation_key = head.queue[0]["id"]
        return result
    if free and status not in ("accepted", "paused"):
        result.invocation_key = head.queue[0]["id"]  # free again: its inbox runs now
        return result
    if status == "recorded" and given.resume and head.parked == "tool" \
            and not head.unresolved() and not head.paused:
        return result  # resumed onto a settled step: run it
    return result.finish(status)

