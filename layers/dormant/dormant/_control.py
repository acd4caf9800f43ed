"""Turn control across requests: stop, steer, pause, resume, interrupt, the inbox.

Two kinds of input live here:

- what the **ledger** can take at once — a message queued in the inbox, an inbox edit, an
  interrupt, a stop of a *waiting* response, a resume, an answer to an input request, a seed —
  is appended to the session's slice and committed like any turn;
- what only the **running turn** can do — stop it, steer it, pause it at its next step
  boundary — is an :class:`Ask`, written to the session's small *control record* with a
  conditional write (the head must still be at the version the decision was made on). The
  running turn polls that record (:class:`ControlWatch`, default every second) and acts on it;
  a turn that starts later takes up what is still pending (:func:`take_pending`).

Which one a request gets is decided from the head: an invocation the head knows ended cannot
be stopped (409 ``not_running``, nothing written); an invocation it does not know may be running
in another process right now (its first commit comes at its end), so the stop goes to the
control record.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from dormant._ids import new_id, now_ms
from dormant._patch import to_json_value
from dormant._turn_wire import CommitStatus, Input, QueuedRef, TurnStatus
from dormant.errors import (
    DuplicateMessage,
    InputError,
    NotPending,
    NotRunning,
    PendingInputError,
    SessionFailed,
    SessionMoved,
    SessionPaused,
    SessionRunning,
    StoreError,
)
from dormant.events import (
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
    SeedEvent,
    StopRequested,
    ToolResult,
)
from dormant.types import Control, ControlSteer, ControlStop

if TYPE_CHECKING:
    from dormant._commit import CommitPolicy
    from dormant.session import Session
    from dormant.stores._base import Store
    from dormant.tools import Signal

__all__ = [
    "DEFAULT_POLL_INTERVAL",
    "Ask",
    "ControlWatch",
    "Plan",
    "interrupt",
    "message",
    "pause",
    "plan",
    "queue_op",
    "record",
    "request_input",
    "respond",
    "resume",
    "seed",
    "steer",
    "stop",
    "take_pending",
    "write_asks",
]

log = logging.getLogger("dormant")

#: Seconds between two reads of the control record by a running turn (0: never).
DEFAULT_POLL_INTERVAL = 1.0
#: Steers a control record holds at most (the oldest pending ones are kept).
MAX_STEERS = 8
#: Conditional writes of the control record before giving up (each lost one is a commit).
WRITE_ATTEMPTS = 8

STOPPED: Literal["stopped"] = "stopped"
INTERRUPTED: Literal["interrupted"] = "interrupted"


@dataclass(frozen=True)
class Ask:
    """A control for the turn running now, waiting to be written to the control record."""

    kind: Literal["stop", "steer", "pause", "unpause"]
    invocation_id: str | None = None
    seen: int | None = None
    id: str | None = None
    text: str | None = None


# --- deciding ------------------------------------------------------------------------------------


def running(session: Session, invocation_id: str, *, resumable: bool = False) -> bool:
    """Whether ``invocation_id`` may be running now, as far as the head can tell: it is the
    open invocation and neither parked, failed nor paused — or the head has never seen it
    (a new invocation writes nothing until it ends). ``resumable``: count an invocation
    parked on a message yield as possibly running (a message may be resuming it elsewhere)."""
    head = session.head
    if head.open_invocation == invocation_id:
        parked_ok = head.parked is None or (resumable and head.parked == "message")
        return parked_ok and not head.failed and not head.paused
    return not head.knows_invocation(invocation_id)


def stop(session: Session, invocation_id: str, seen: int | None = None
         ) -> Literal["stopped", "accepted"]:
    """Stop ``invocation_id``. A waiting (parked or paused) one ends now, in the slice; one
    that may be running elsewhere gets an :class:`Ask`; anything else is refused."""
    head = session.head
    if head.open_invocation == invocation_id:
        if head.failed:
            raise NotRunning(head.session_id, invocation_id,
                             "it failed; retry it (input.retry) or interrupt it")
        if head.parked == "tool" or head.paused:  # it waits on people: end it now
            end_waiting(session, STOPPED, seen=seen)
            return "stopped"
        # parked on a message yield: a message may be resuming it in another process right
        # now (that writes nothing until it ends), so the stop is asked of that turn
    elif head.knows_invocation(invocation_id):
        raise NotRunning(head.session_id, invocation_id)
    session.control_asks.append(Ask("stop", invocation_id, seen=seen))
    return "accepted"


def end_waiting(session: Session, status: Literal["stopped", "interrupted"], *,
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
                                         name=call.name, error=status))
    if status == STOPPED:  # the same shape as a running turn's stop
        session.add_event(StopRequested(invocation_id=invocation, seen=seen))
    session.add_event(InvocationEnd(invocation_id=invocation, status=status))


def steer(session: Session, text: str, invocation_id: str, id: str | None = None,
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


def message(session: Session, text: str, message_id: str,
            if_busy: Literal["queue", "reject", "interrupt"] | None = None
            ) -> tuple[str, QueuedEvent | None]:
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
                        invocation_id=None)
    session.add_event(event)
    return "queued", event


def _busy_error(session: Session, busy: str) -> InputError:
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


def interrupt(session: Session, owner: str) -> None:
    """End what the session waits on, named by exactly one id (see :class:`InterruptEvent`)."""
    head = session.head
    if head.pending_input(owner) is not None:
        session.add_event(InterruptEvent(invocation_id=None, owner=owner))
        return
    end_waiting(session, INTERRUPTED, owner=owner)


def interrupt_all(session: Session) -> None:
    """End everything the session waits on (``if_busy="interrupt"``, ``queue_send_now``)."""
    head = session.head
    for item in list(head.inputs):
        interrupt(session, item["input_id"])
    if head.failed and head.open_invocation is not None:
        interrupt(session, head.open_invocation)
    elif head.parked == "tool" and head.unresolved():
        first = head.unresolved()[0]
        interrupt(session, first.approval_id or first.call_id)


def pause(session: Session) -> Literal["paused", "accepted"]:
    """Pause the session: the running turn (if any) stops at its next step boundary; until
    then, and whenever no turn runs, the pause waits in the control record and the next
    request takes it up. Already paused: nothing to do."""
    if session.head.paused or session.pause_pending:
        return "paused"
    session.control_asks.append(Ask("pause"))
    return "accepted"


def resume(session: Session) -> Literal["continue", "resumed"]:
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


def queue_op(session: Session, op: str, message_id: str, *, text: str | None = None,
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


def request_input(session: Session, input_id: str, schema: Any, prompt: str | None) -> None:
    """Ask a person for input (trusted code): the session waits until ``respond``."""
    if not isinstance(input_id, str) or not input_id or len(input_id) > 128:
        raise InputError("an input request needs an input_id of 1-128 characters")
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        schema = schema.model_json_schema()
    if not isinstance(schema, dict):
        raise InputError(f"input {input_id}: schema must be a JSON Schema dict or a "
                         "pydantic model class")
    session._record(InputRequested(input_id=input_id, input_schema=schema, prompt=prompt,
                                   invocation_id=session.head.open_invocation))


def respond(session: Session, input_id: str, value: Any) -> None:
    """Answer an input request, validated against its schema (nothing written if invalid)."""
    head = session.head
    item = head.pending_input(input_id)
    if item is not None:
        problems = schema_errors(value, item.get("schema") or {})
        if problems:
            raise InputError(f"input {input_id} does not fit its schema: "
                             + "; ".join(problems))
    session.add_event(InputResponse(input_id=input_id, value=to_json_value(value)))


def seed(session: Session, text: str, role: Literal["user", "system"] = "user",
         id: str | None = None) -> SeedEvent:
    """A passive message: part of the conversation, no turn started."""
    if not isinstance(text, str) or not text:
        raise InputError("a seed needs a non-empty text")
    if role not in ("user", "system"):
        raise InputError(f"seed role must be 'user' or 'system', got {role!r}")
    event = SeedEvent(text=text, role=role, message_id=id or new_id("msg"))
    session.add_event(event)
    return event


def take_pending(session: Session) -> list[ControlSteer]:
    """What a turn starting now takes up from the control record: a pause nobody took
    (applied first, so the request's message queues), and steers whose invocation ended
    without taking them (returned: the turn runs them as ordinary messages first)."""
    control = session.control
    if control is None:
        return []
    head = session.head
    if session.pause_pending:
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

    @property
    def run(self) -> bool:
        return self.status is None

    def finish(self, status: TurnStatus, queued: QueuedEvent | None = None) -> Plan:
        self.status = status
        if queued is not None:
            self.queued = QueuedRef(id=queued.message_id, position=queued.position)
        return self


def plan(session: Session, given: Input, *, holds: Callable[[str], bool]) -> Plan:
    """Apply a request's turn-control inputs to ``session`` (answers and decisions are
    already in its slice) and decide what the request does. ``holds(message_id)``: whether
    the session ever took that message id (the store's word beyond the head's window). The
    one decision the handlers and the test kit's in-process driver share."""
    result = Plan()
    controls = False
    if given.seed is not None:
        seed(session, given.seed.text, given.seed.role, given.seed.id)
        controls = True
    for answer in given.inputs or ():
        respond(session, answer.input_id, answer.value)
        controls = True
    for op in given.queue or ():
        queue_op(session, op.op, op.id, text=op.text, position=op.position)
        controls = True
    status: TurnStatus = "recorded"
    if given.interrupt is not None:
        interrupt(session, given.interrupt.owner)
        controls, status = True, "interrupted"
    if given.stop is not None:
        status = stop(session, given.stop.invocation_id, given.stop.seen)
        controls = True
        if status == "stopped":
            result.stopped = given.stop.invocation_id
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
        _, queued = message(session, text, message_id or new_id("msg"), given.if_busy)
        if queued is not None:
            return result.finish("queued", queued)
        result.message, result.message_id = text, message_id
        if message_id is not None and message_id != given.message_id:  # a steer's id
            result.invocation_key = message_id
        return result
    if (head.paused or session.pause_pending) and (given.tools or given.approvals
                                                   or not controls):
        if given.retry is not None:  # a retry is a run: it waits for no one
            raise SessionPaused(head.session_id)
        return result.finish("paused")  # answers and decisions are recorded; nothing runs
    free = head.queue and head.free and not session.pause_pending
    if not controls:  # an ordinary request (answers, decisions, a retry, an empty drain)
        if free and given.retry is None and not given.tools and not given.approvals:
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

def record(policy: CommitPolicy, session: Session, reload: Callable[[], Session | None]
           ) -> tuple[CommitStatus | None, int | None]:
    """A request that runs no turn: commit what its inputs recorded (if anything), then write
    what it asks of the running turn. Returns the commit status (None: nothing to commit) and
    the session's version. Raises :class:`StoreError` when the store could not be written and
    :class:`SessionMoved` when the inputs no longer fit a newer head."""
    commit: CommitStatus | None = None
    version: int | None = session.version
    if session.dirty:
        outcome = policy.commit(session)
        if outcome.status == "failed":
            raise outcome.error or StoreError(f"session {session.session_id} could not be "
                                              "written")
        if outcome.status == "superseded":
            raise SessionMoved(session.session_id)
        commit, version = outcome.status, outcome.version
    if session.control_asks:
        write_asks(policy.store, session, reload)
    return commit, version


# --- writing the control record ------------------------------------------------------------------


def write_asks(store: Store, session: Session, reload: Callable[[], Session | None]) -> int:
    """Write the session's asks to its control record, conditionally on the head version the
    decision was made on. A lost race re-reads and decides again (a stop for an invocation
    that has ended meanwhile is refused: :class:`NotRunning`). Returns the revision written."""
    asks = list(session.control_asks)
    current = session
    for _ in range(WRITE_ATTEMPTS):
        base = current.control or Control()
        record = _with(base, asks, current)
        if store.write_control(current.session_id, record, head_version=current.version):
            session.control = record
            session.control_asks = []
            return record.rev
        fresh = reload()
        if fresh is None:  # no head yet (its first turn may be running): the record alone
            fresh = type(session).new(session.session_id, principal=session.principal)
            fresh.control = store.read_control(session.session_id)
        current = fresh
        for ask in asks:
            if ask.kind in ("stop", "steer") and ask.invocation_id is not None \
                    and not running(current, ask.invocation_id, resumable=ask.kind == "stop"):
                raise NotRunning(current.session_id, ask.invocation_id)
    raise StoreError(f"session {session.session_id}: the control record kept changing; "
                     "try again")


def _with(base: Control, asks: list[Ask], session: Session) -> Control:
    """The next revision of ``base`` with ``asks`` added and what the ledger took up
    dropped."""
    head = session.head
    rev = base.rev + 1
    at = now_ms()
    stop = base.stop if base.stop is not None \
        and running(session, base.stop.invocation_id, resumable=True) else None
    pause_rev = base.pause if base.pause is not None and base.pause != head.control_rev else None
    steers = [s for s in base.steers if not head.has_message(s.id)]
    for ask in asks:
        if ask.kind == "stop":
            assert ask.invocation_id is not None
            stop = ControlStop(invocation_id=ask.invocation_id, seen=ask.seen, rev=rev, at=at)
        elif ask.kind == "steer":
            assert ask.invocation_id is not None and ask.id is not None and ask.text
            steers = [s for s in steers if s.id != ask.id]
            steers.append(ControlSteer(id=ask.id, text=ask.text,
                                       invocation_id=ask.invocation_id, rev=rev, at=at))
        elif ask.kind == "pause":
            pause_rev = rev
        elif ask.kind == "unpause":
            pause_rev = None
    if len(steers) > MAX_STEERS:
        raise InputError(f"session {session.session_id} already holds {MAX_STEERS} steers "
                         "the running turn has not taken; wait for it")
    return Control(rev=rev, stop=stop, pause=pause_rev, steers=steers)


# --- the running turn's side ---------------------------------------------------------------------


class ControlWatch:
    """Polls the session's control record for the running turn.

    A stop for the running invocation sets the turn's :class:`~dormant.tools.Signal` (tools
    and model calls see it at once); a pause and steers wait for the run loop's next step
    boundary (:meth:`take_steers`, :attr:`pause_rev`). The first read happens one interval in:
    a turn that ends sooner never reads. The reads run on the process's one control thread
    (:class:`_Poller`): starting a turn costs a heap push, not a thread.
    """

    def __init__(self, store: Store, session_id: str, invocation: Callable[[], str | None],
                 signal: Signal, *, interval: float, control_rev: int) -> None:
        self._store = store
        self._session_id = session_id
        self._invocation = invocation
        self._signal = signal
        self._interval = interval
        self._control_rev = control_rev
        self._lock = threading.Lock()
        #: Held while a read is in progress, so :meth:`close` can wait for it.
        self._reading = threading.Lock()
        self._steers: dict[str, ControlSteer] = {}
        self._taken: set[str] = set()
        self._closed = False
        #: The revision of a pause the turn has not taken yet (None: none asked).
        self.pause_rev: int | None = None

    @property
    def closed(self) -> bool:
        return self._closed

    def start(self) -> ControlWatch:
        if self._interval > 0:
            _POLLER.add(self, time.monotonic() + self._interval)
        return self

    def close(self) -> None:
        """Stop polling; returns once a read in progress has finished (so the caller may
        close the store)."""
        self._closed = True
        if not _POLLER.is_current() and self._reading.acquire(timeout=5.0):
            self._reading.release()

    def tick(self) -> float | None:
        """One scheduled read (on the control thread): when to read next, None to stop."""
        with self._reading:
            if self._closed or not self.poll():
                return None
        return time.monotonic() + self._interval

    def poll(self) -> bool:
        """Read the control record once and act on what concerns this turn. False when
        polling should end: the turn is gone, or the store refuses for good."""
        if self._invocation() is None:
            return False  # the turn was dropped before it ended (its stream abandoned)
        try:
            control = self._store.read_control(self._session_id)
        except StoreError as error:
            log.warning("could not read the control record: %s", error,
                        extra={"session_id": self._session_id})
            return error.retryable
        self.apply(control)
        return True

    def apply(self, control: Control | None) -> None:
        if control is None:
            return
        invocation = self._invocation()
        if control.stop is not None and invocation is not None \
                and control.stop.invocation_id == invocation and not self._signal.stopped:
            self._signal.stop(control.stop.seen, control.stop.rev)
        with self._lock:
            if control.pause is not None and control.pause != self._control_rev:
                self.pause_rev = control.pause
            for item in control.steers:
                if item.invocation_id == invocation and item.id not in self._taken:
                    self._steers.setdefault(item.id, item)

    def take_steers(self) -> list[ControlSteer]:
        """The steers seen since the last call, oldest first (each is taken once)."""
        with self._lock:
            taken = sorted(self._steers.values(), key=lambda s: s.rev)
            self._steers.clear()
            self._taken.update(s.id for s in taken)
        return taken


class _Poller:
    """The process's one control thread: reads each running turn's control record when due.

    A heap of ``(due, n, watch)``; a closed watch is dropped when it comes up. The thread is
    started on first use (and again in a forked child, where it does not exist) and waits
    without polling while no turn runs.
    """

    def __init__(self) -> None:
        self._wake = threading.Condition()
        self._due: list[tuple[float, int, ControlWatch]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def add(self, watch: ControlWatch, due: float) -> None:
        with self._wake:
            heapq.heappush(self._due, (due, next(self._order), watch))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="dormant-control")
                self._thread.start()
            else:
                self._wake.notify()

    def is_current(self) -> bool:
        return threading.current_thread() is self._thread

    def _next(self) -> ControlWatch:
        with self._wake:
            while True:
                while self._due and self._due[0][2].closed:
                    heapq.heappop(self._due)
                if not self._due:
                    self._wake.wait()
                    continue
                delay = self._due[0][0] - time.monotonic()
                if delay <= 0:
                    return heapq.heappop(self._due)[2]
                self._wake.wait(delay)

    def _run(self) -> None:
        while True:
            watch = self._next()
            try:
                due = watch.tick()
            except Exception:  # one turn's failed read must not end the thread
                log.exception("control poll failed", extra={"session_id": watch._session_id})
                due = None
            if due is not None:
                self.add(watch, due)


_POLLER = _Poller()


def schema_errors(value: Any, schema: dict[str, Any], where: str = "value") -> list[str]:
    """Why ``value`` does not fit ``schema`` (a JSON Schema subset: ``type``, ``enum``,
    ``const``, ``properties``, ``required``, ``additionalProperties: false``, ``items``,
    ``minLength``/``maxLength``, ``minimum``/``maximum``, ``minItems``/``maxItems``)."""
    problems: list[str] = []
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind else []
    if kinds and not any(_is(value, k) for k in kinds):
        return [f"{where}: expected {' or '.join(str(k) for k in kinds)}, got "
                f"{type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{where}: must be one of {schema['enum']}")
    if "const" in schema and value != schema["const"]:
        problems.append(f"{where}: must be {schema['const']!r}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            problems.append(f"{where}: shorter than {schema['minLength']}")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            problems.append(f"{where}: longer than {schema['maxLength']}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            problems.append(f"{where}: below {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            problems.append(f"{where}: above {schema['maximum']}")
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        for name in schema.get("required") or []:
            if name not in value:
                problems.append(f"{where}.{name}: required")
        for name, item in value.items():
            if name in properties:
                problems += schema_errors(item, properties[name], f"{where}.{name}")
            elif schema.get("additionalProperties") is False:
                problems.append(f"{where}.{name}: not allowed")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            problems.append(f"{where}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            problems.append(f"{where}: more than {schema['maxItems']} items")
        if isinstance(schema.get("items"), dict):
            for index, item in enumerate(value):
                problems += schema_errors(item, schema["items"], f"{where}[{index}]")
    return problems


def _is(value: Any, kind: Any) -> bool:
    match kind:
        case "object":
            return isinstance(value, dict)
        case "array":
            return isinstance(value, list)
        case "string":
            return isinstance(value, str)
        case "integer":
            return isinstance(value, int) and not isinstance(value, bool)
        case "number":
            return isinstance(value, int | float) and not isinstance(value, bool)
        case "boolean":
            return isinstance(value, bool)
        case "null":
            return value is None
    return True
