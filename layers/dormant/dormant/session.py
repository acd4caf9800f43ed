"""Sessions: a ledger, the head it folds to, and the slice a turn has not committed yet."""

from __future__ import annotations

import copy
import functools
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

from dormant import _decide
from dormant._decide import Ask, EventType
from dormant._head import COMMIT_WINDOW, Head, apply, apply_detached, status_of
from dormant._ids import new_id, now_ms
from dormant._inputs import IfBusy
from dormant._patch import to_json_value
from dormant.errors import InputError
from dormant.events import (
    AppEvent,
    ApprovalDecided,
    CompactionEvent,
    Event,
    InputResponse,
    QueuedEvent,
    SeedEvent,
    SteerEvent,
    TimerCancelled,
    TimerSet,
    ToolInput,
    ToolResult,
    UserEvent,
)
from dormant.schedulers import MAX_TIMER_NAME, TimerDelivery, fire_at_ms
from dormant.types import (
    CommitResult,
    Control,
    PendingApproval,
    PendingInput,
    QueuedMessage,
    SessionSummary,
    StoredSession,
    YieldedTool,
)

__all__ = [
    "CommitResult",
    "PendingApproval",
    "Session",
    "SessionInput",
    "SessionSummary",
    "StoredSession",
    "YieldedTool",
    "normalize_session_id",
]

_PREFIX = "session_"
_ID_CHARS = re.compile(r"[A-Za-z0-9._:-]{1,128}")
MAX_SESSION_ID = 128


def normalize_session_id(session_id: str) -> str:
    """The canonical form of a session id: ``thread-42`` and ``session_thread-42`` are one.

    Raises :class:`InputError` for an id that is empty, too long or uses characters outside
    ``A-Z a-z 0-9 . _ : -``.
    """
    if not isinstance(session_id, str):
        raise InputError(f"session id must be a string, got {type(session_id).__name__}")
    return _normalized(session_id)


@functools.lru_cache(maxsize=4096)
def _normalized(session_id: str) -> str:
    """(Kept for the ids a process saw last: a request's id is checked twice per turn, and
    one session's requests follow each other. A refused id raises, and is not kept.)"""
    bare = session_id.removeprefix(_PREFIX)
    if not bare or not _ID_CHARS.fullmatch(bare) or len(_PREFIX) + len(bare) > MAX_SESSION_ID:
        raise InputError(
            f"invalid session id {session_id!r}: use 1-{MAX_SESSION_ID - len(_PREFIX)} characters "
            "from A-Z a-z 0-9 . _ : -"
        )
    return _PREFIX + bare


def mint_session_id() -> str:
    return new_id("session")


class SessionInput:
    """Appends inputs to a session's uncommitted slice (``session.input``)."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def tool(self, *, call_id: str, input: Any) -> ToolInput:
        """Answer a yielded call. Validated against the tool's ``yield_schema`` on resume."""
        return _decide.tool(self._session, call_id, input)

    def tool_result(self, call_id: str, result: Any = None, is_error: bool = False
                    ) -> ToolResult:
        """Supply the result of a deferred call (trusted server code only). Checked against
        the call: it must be a deferred call that still waits (else
        :class:`~dormant.errors.NotPending`); a second result for it raises
        :class:`~dormant.errors.AlreadyAnswered`, and nothing is written either way. Once
        committed, the next turn on the session resumes the parked step: the model reads
        the result. ``is_error``: ``result`` is an error the model reads."""
        return _decide.tool_result(self._session, call_id, result, is_error)

    def approval(self, approval_id: str, *, approved: bool,
                 reason: str | None = None) -> ApprovalDecided:
        """Decide a pending approval request. A decision for an id that is not pending (a
        stale click, a later step, one already decided) raises and writes nothing."""
        return _decide.approval(self._session, approval_id, approved, reason)

    def retry(self, retry_id: str) -> str:
        """Ask the next turn to rerun the failed invocation's failed model call.
        Finished steps and their tool results stay; a retry id lands once."""
        _decide.retry(self._session, retry_id)
        self._session.pending_retry = retry_id
        return retry_id

    def message(self, text: str, id: str | None = None,
                if_busy: IfBusy | None = None
                ) -> UserEvent | QueuedEvent:
        """Append a user message (``id``: a stable id, so a redelivery lands once). When
        the session cannot take it now (it waits on a yield, an approval or an input
        request, failed, or is paused) it goes to the inbox (a ``queued`` event) —
        ``if_busy="reject"`` raises instead, ``"interrupt"`` ends the waiting response."""
        if not isinstance(text, str) or not text:
            raise InputError("a message must be a non-empty string")
        message_id = id or new_id("msg")
        _, queued = _decide.message(self._session, text, message_id, if_busy)
        if queued is not None:
            return queued
        head = self._session._head
        event = UserEvent(
            text=text,
            message_id=message_id,
            invocation_id=head.open_invocation if head.parked == "message" else None,
        )
        self._session.add_event(event)
        return event

    # --- turn control (see dormant._decide) -- --------------------------------------------------

    def stop(self, invocation_id: str, seen: int | None = None) -> str:
        """Stop ``invocation_id``: a waiting response ends now (``"stopped"``); one running
        in another process is asked through the control record when the session is
        committed (``"accepted"``). ``seen``: stream events of it the client received."""
        return _decide.stop(self._session, invocation_id, seen)

    def steer(self, text: str, invocation_id: str, id: str | None = None) -> str:
        """Give the running invocation a message it takes at its next step boundary
        (``"accepted"``); if it is not running, this is an ordinary message (``"run"`` or
        ``"queued"``)."""
        outcome, _ = _decide.steer(self._session, text, invocation_id, id)
        if outcome == "run":
            self.message(text, id)
        return outcome

    def pause(self) -> str:
        """Pause the session (the running turn stops at its next step boundary)."""
        return _decide.pause(self._session)

    def resume(self) -> str:
        """Resume a paused session (``"continue"``: its invocation was paused between steps
        and the next turn carries it on)."""
        return _decide.resume(self._session)

    def interrupt(self, owner: str) -> None:
        """End the waiting or failed response ``owner`` names (a pending call, approval or
        input id, or the failed invocation id)."""
        _decide.interrupt(self._session, owner)

    def queue_edit(self, id: str, text: str) -> None:
        _decide.queue_op(self._session, "edit", id, text=text)

    def queue_move(self, id: str, position: int) -> None:
        _decide.queue_op(self._session, "move", id, position=position)

    def queue_remove(self, id: str) -> None:
        _decide.queue_op(self._session, "remove", id)

    def queue_send_now(self, id: str) -> None:
        """Interrupt the waiting response and put this queued message first (the next turn
        runs it)."""
        _decide.queue_op(self._session, "send_now", id)

    def respond(self, input_id: str, value: Any) -> None:
        """Answer an input request (validated against its schema)."""
        _decide.respond(self._session, input_id, value)

    def seed(self, text: str, role: Literal["user", "system"] = "user",
             id: str | None = None) -> SeedEvent:
        """A passive message: part of the conversation, no turn started."""
        return _decide.seed(self._session, text, role, id)


class Session:
    """A session as a turn sees it. ``events`` is the ledger as loaded plus what is uncommitted.

    Loaded by ``app.sessions.get`` it holds the whole ledger; the turn path loads only the head
    and the history window its agent asks for (``first_seq`` says where that window starts).
    """

    def __init__(self, head: Head, events: list[Event] | None = None, first_seq: int = 0) -> None:
        self._head = head
        self._loaded = events if events is not None else []
        self._first_seq = first_seq
        self._base_version = head.version
        self._base_seq = head.seq
        self._new: list[Event] = []
        #: How much of the slice changed the world (ends with the last ran tool's result),
        #: and the head as it stood there: what a failed or superseded turn keeps.
        self._effects: tuple[int, Head] | None = None
        #: A retry asked for with ``input.retry`` (run by the next turn).
        self.pending_retry: str | None = None
        #: True once a claim committed this session's inputs (decisions, answers): a turn
        #: that then fails keeps its progress like one whose tool ran.
        self.claimed = False
        #: Ids of messages this turn took up that are not its own (steers, and steers that
        #: missed their invocation, run first): another request may land one of them first,
        #: and then this turn drops it at its commit instead of being refused as a duplicate.
        self.spare_ids: set[str] = set()
        #: The session's control record as loaded (None: none), and the controls this
        #: session's requests ask of a running turn (written when it is committed).
        self.control: Control | None = None
        self.control_asks: list[Ask] = []
        #: The app's declared event types (``app.event``), set when the app loads the
        #: session (None: not bound to an app; ``append_event`` refuses).
        self.event_types: dict[str, EventType] | None = None
        #: Checks a timer before ``schedule`` records it (set by the app that loaded the
        #: session: no scheduler in a turn, or one that rejects the timer for good, raises
        #: :class:`~dormant.errors.TimerRefused`); called with the delivery and whether a turn
        #: is running. None: not bound to an app, no check.
        self.timer_check: Callable[[TimerDelivery, bool], None] | None = None
        self._lock = threading.Lock()
        #: Not None while a run is active: events recorded by tools wait here.
        self._deferred: list[Event] | None = None

    @property
    def input(self) -> SessionInput:
        """What appends inputs to the slice (``session.input.message(...)``, ...). Made on
        each read, not kept: a session that held it would be a reference cycle, left for
        the garbage collector after every request instead of freed at once."""
        return SessionInput(self)

    @classmethod
    def new(cls, session_id: str, *, state: dict[str, Any] | None = None,
            principal: str | None = None) -> Session:
        stamp = now_ms()
        head = Head(session_id=session_id, state=copy.deepcopy(state or {}),
                    principal=principal, created_at=stamp, updated_at=stamp, messages=0)
        return cls(head)

    @classmethod
    def from_events(cls, session_id: str, events: Iterable[Event], *, version: int = 0,
                    state: dict[str, Any] | None = None) -> Session:
        """Rebuild a session by folding a whole ledger (e.g. one exported or archived)."""
        head = Head(session_id=normalize_session_id(session_id),
                    state=copy.deepcopy(state or {}), messages=0)
        loaded = list(events)
        for event in loaded:
            apply(head, event)
        head.version = version
        return cls(head, loaded, 0)

    @classmethod
    def from_stored(cls, stored: StoredSession) -> Session:
        session = cls(stored.head, stored.events, stored.first_seq)
        session.control = stored.control
        return session

    @property
    def pause_pending(self) -> bool:
        """A pause is asked in the control record and the ledger has not taken it up yet."""
        control = self.control
        return (control is not None and control.pause is not None and not self._head.paused
                and control.pause != self._head.control_rev)

    def request_input(self, input_id: str, schema: Any, prompt: str | None = None) -> None:
        """Ask a person for application-defined input (trusted server code): it shows in
        ``pending_inputs``, the session waits (messages queue in the inbox) until
        ``input.respond(input_id, value)``, validated against ``schema`` (a JSON Schema dict
        or a pydantic model class). The value stays in the ledger; the model sees it only
        through a context builder that reads ``input_values``."""
        _decide.request_input(self, input_id, schema, prompt)

    def append_event(self, name: str, data: Any = None, *, id: str | None = None
                     ) -> AppEvent | None:
        """Append an application event (trusted server code): ``name`` must be declared with
        ``app.event(name, schema)`` and ``data`` fit its schema, else
        :class:`~dormant.errors.EventRefused` and nothing is recorded. ``id`` lands once per
        session: an id the session already holds returns None and records nothing. Called
        from a tool or hook it joins the running turn (after the tool phase); otherwise it
        is in the slice the next commit writes. No turn runs for it."""
        return _decide.app_event(self, name, data, id)

    @property
    def app_events(self) -> list[AppEvent]:
        """The application events in the loaded ledger (and the slice), oldest first."""
        return [e for e in self.events if isinstance(e, AppEvent)]

    @property
    def input_values(self) -> dict[str, Any]:
        """Responses to input requests in the loaded ledger: input id -> value."""
        return {e.input_id: e.value for e in self.events if isinstance(e, InputResponse)}

    def seed(self, text: str, role: Literal["user", "system"] = "user",
             id: str | None = None) -> SeedEvent:
        """A passive message (see ``input.seed``)."""
        return self.input.seed(text, role, id)

    # --- what callers read -------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return self._head.session_id

    @property
    def version(self) -> int:
        """The version this session was loaded at (the one its commit expects)."""
        return self._base_version

    @property
    def events(self) -> list[Event]:
        return self._loaded + self._new

    @property
    def loaded_events(self) -> Sequence[Event]:
        """The committed ledger as loaded (positions ``first_seq`` … ``base_seq - 1``), not
        copied: read it, never change it."""
        return self._loaded

    @property
    def new_events(self) -> list[Event]:
        """The uncommitted slice."""
        return list(self._new)

    @property
    def first_seq(self) -> int:
        return self._first_seq

    @property
    def base_seq(self) -> int:
        """Ledger position of the slice's first event (where the store will put it)."""
        return self._base_seq

    @property
    def effects_end(self) -> int:
        """Length of the slice prefix that changed the world (0: no tool ran)."""
        return self._effects[0] if self._effects is not None else 0

    @property
    def state(self) -> dict[str, Any]:
        return self._head.state

    @property
    def status(self) -> Literal["active", "awaiting_input", "failed", "paused"]:
        if self.pause_pending:
            return "paused"
        return self._status()

    def _status(self) -> Literal["active", "awaiting_input", "failed", "paused"]:
        """``paused`` while paused; ``failed`` after a failed turn (until retried or
        interrupted); ``awaiting_input`` while parked on a yield, an approval, an input
        request or a message yield; else ``active``."""
        return status_of(self._head)

    @property
    def inbox(self) -> list[QueuedMessage]:
        """User messages queued while the session could not take them, in the order they
        will run."""
        return [QueuedMessage(id=q["id"], text=q["text"], queued_at=q.get("queued_at", 0))
                for q in self._head.queue]

    @property
    def pending_inputs(self) -> list[PendingInput]:
        """Input requests (``request_input``) awaiting a response, oldest first."""
        return [PendingInput(input_id=i["input_id"], input_schema=i.get("schema") or {},
                             prompt=i.get("prompt")) for i in self._head.inputs]

    @property
    def open_invocation(self) -> str | None:
        """The invocation that is parked, failed, paused or (committed as) running."""
        return self._head.open_invocation

    @property
    def yielded_tools(self) -> list[YieldedTool]:
        """The unanswered yields, in call order."""
        return [YieldedTool(call_id=c.call_id, name=c.name, args=c.prepared)
                for c in self._head.pending_yields()]

    @property
    def deferred_tools(self) -> list[YieldedTool]:
        """Deferred calls waiting for their result (``input.tool_result``), in call order."""
        return [YieldedTool(call_id=c.call_id, name=c.name, args=c.args)
                for c in self._head.pending_deferred()]

    @property
    def pending_approvals(self) -> list[PendingApproval]:
        """Approval requests awaiting a decision, in call order."""
        return [PendingApproval(approval_id=c.approval_id, call_id=c.call_id, tool=c.name,
                                args=c.args)
                for c in self._head.pending_approvals() if c.approval_id is not None]

    @property
    def owner(self) -> str | None:
        """The principal this session belongs to (None: reachable by no public principal)."""
        return self._head.principal

    @property
    def principal(self) -> str | None:
        """The owner, under its older name."""
        return self._head.principal

    @property
    def head(self) -> Head:
        return self._head

    @property
    def dirty(self) -> bool:
        return bool(self._new) or self._base_seq != self._head.seq

    def append(self, text: str, *, id: str | None = None) -> UserEvent | QueuedEvent:
        """A server append: a user message from trusted code — a webhook, a job — with no
        turn run. ``id`` makes a redelivery land once. The next turn picks it up; while the
        session cannot take it (it waits, failed, or is paused) it goes to the inbox."""
        return self.input.message(text, id=id)

    # --- timers ----------------------------------------------------------------------

    def schedule(self, name: str, *, at: datetime | None = None,
                 delay: timedelta | str | float | None = None, message: str | None = None,
                 tool_input: dict[str, Any] | None = None,
                 message_id: str | None = None) -> TimerSet:
        """Ask for a timer that delivers ``message`` (a user message) or ``tool_input``
        (``{"call_id": ..., "input": ...}``: an answer to a yielded call) at ``at`` or after
        ``delay`` (``"90s"``, ``"5m"``, a ``timedelta``…).

        It takes effect only if this session's turn commits: the app's scheduler checks it
        here (a scheduler that rejects it for good, or, during a turn, an app with no
        scheduler, raises :class:`~dormant.errors.TimerRefused` and nothing is recorded: a
        tool that asked gets an error result) and sets it once the turn has committed,
        retrying a transient failure with the same name and time. Naming a timer again replaces it,
        so a retried turn converges on one timer; the message carries a stable id
        (``message_id``, default derived from the session, the name and the time) so a
        redelivered timer lands it once.
        """
        if not isinstance(name, str) or not name or len(name) > MAX_TIMER_NAME:
            raise InputError(f"a timer needs a name of 1-{MAX_TIMER_NAME} characters")
        if (message is None) == (tool_input is None):
            raise InputError(f"timer {name!r} needs exactly one of message= and tool_input=")
        if tool_input is not None and (not isinstance(tool_input, dict)
                                       or "call_id" not in tool_input):
            raise InputError(f"timer {name!r}: tool_input must be {{'call_id': ..., "
                             "'input': ...}")
        fire_at = fire_at_ms(at=at, delay=delay, now_ms=now_ms())
        if message is not None and message_id is None:
            message_id = f"timer:{name}:{fire_at}"
        event = TimerSet(name=name, fire_at=fire_at, message=message, message_id=message_id,
                         tool_input=to_json_value(tool_input) if tool_input else None,
                         invocation_id=self._head.open_invocation)
        if self.timer_check is not None:  # refused for good: raise, record nothing
            with self._lock:
                in_turn = self._deferred is not None
            self.timer_check(TimerDelivery(session_id=self.session_id, name=name,
                                           fire_at=fire_at, message=message,
                                           message_id=message_id,
                                           tool_input=event.tool_input), in_turn)
        self.record(event)
        return event

    def cancel_schedule(self, name: str) -> TimerCancelled:
        """Cancel a timer (no error if there is none; it takes effect when the turn commits)."""
        event = TimerCancelled(name=name, invocation_id=self._head.open_invocation)
        self.record(event)
        return event

    @property
    def timers(self) -> list[TimerDelivery]:
        """Timers set and not yet delivered or cancelled, earliest first."""
        return sorted((TimerDelivery.of(self.session_id, t) for t in self._head.timers.values()),
                      key=lambda t: t.fire_at)

    def record(self, event: Event) -> None:
        """Record ``event``: during a run (a tool calling ``schedule``) events wait for the
        runtime, which emits them in order after the tool phase; otherwise they are appended
        now."""
        with self._lock:
            if self._deferred is not None:
                self._deferred.append(event)
                return
        self._append(event)

    def defer_events(self) -> None:
        """A run starts: events tools record wait for it (:meth:`take_deferred`)."""
        with self._lock:
            self._deferred = []

    def stop_deferring(self) -> None:
        """The run is over: events are appended as they are recorded again."""
        with self._lock:
            self._deferred = None

    @property
    def has_deferred(self) -> bool:
        """Whether tools recorded events the run has not taken yet (read without the lock:
        a tool that records one later is taken at the next phase's end, as before)."""
        return bool(self._deferred)

    def take_deferred(self) -> list[Event]:
        """The events tools recorded since the last call (the run emits them in order)."""
        with self._lock:
            taken, self._deferred = self._deferred or [], []
        return taken

    def add_event(self, event: Event) -> None:
        """Append a ledger event to the uncommitted slice, folded into the head (raises, and
        adds nothing, if the session cannot take it). For trusted server code and handlers:
        e.g. the wake path's ``timer_fired``."""
        self._append(event)

    # --- internals ---------------------------------------------------------------------------

    def _append(self, event: Event) -> None:
        apply(self._head, event)
        self._new.append(event)

    def _extend(self, events: Iterable[Event]) -> None:
        for event in events:
            self._append(event)

    # --- what the commit policy (dormant._commit) and the run loop use ------------------------

    def mark_committed(self, version: int) -> None:
        """The slice landed at ``version``: it becomes part of the loaded ledger."""
        self._loaded.extend(self._new)  # _loaded is always this session's own list
        self._new = []
        starts = self._head.commit_seqs  # where this version began (as the store wrote it)
        self._head.commit_seqs = [*starts, self._base_seq][-COMMIT_WINDOW:]
        self._effects = None
        self._head.version = version
        self._base_version = version
        self._base_seq = self._head.seq

    def rebase(self, stored: StoredSession, *, events: list[Event] | None = None,
               detached: bool = False) -> None:
        """Put the uncommitted slice (or ``events`` in its place) on top of a newer head.

        Raises (and changes nothing) if it no longer fits: an answer to a call somebody else
        answered, a message the head already holds. ``detached``: ``events`` are a closed
        invocation recorded beside the head's own (see :func:`dormant._head.apply_detached`).

        A ``compaction`` the newer head already made (it compacted this range or a later one:
        ``compacted_to >= tail_start``) is dropped from the slice: a racing turn's summary
        landed first, and the ledger keeps one summary per range. Likewise a steer (or a
        missed steer this turn ran first, :attr:`spare_ids`) whose id the newer head already
        holds: it landed once, elsewhere. Here, because only here is each event met with the
        head it will land on."""
        head = stored.head
        given = self._new if events is None else list(events)
        fold = apply_detached if detached else apply
        pending: list[Event] = []
        dropped: list[int] = []
        landed = {e.message_id for e in given if isinstance(e, UserEvent)
                  and e.message_id in self.spare_ids and head.has_message(e.message_id)}
        for index, event in enumerate(given):
            if isinstance(event, CompactionEvent) and head.compacted_to >= event.tail_start:
                dropped.append(index)
                continue
            if isinstance(event, UserEvent | SteerEvent) and event.message_id in landed:
                dropped.append(index)  # a steer another request landed first: it is there
                continue
            fold(head, event)
            pending.append(event)
        self._head = head
        self._new = pending
        if events is not None:
            self._effects = None
        elif self._effects is not None and dropped:  # it still ends after the same event
            length, at = self._effects
            self._effects = (length - sum(1 for index in dropped if index < length), at)
        self._loaded = stored.events
        self._first_seq = stored.first_seq
        if stored.control is not None:
            self.control = stored.control
        self._base_version = head.version
        self._base_seq = head.seq - len(pending)

    def replace_new(self, old: Event, new: Event) -> None:
        """Put ``new`` in the uncommitted slice where ``old`` is (the commit policy, before it
        puts the slice on a newer head: an event must say something else there)."""
        self._new[self._new.index(old)] = new

    def mark_effects(self) -> None:
        """Tools ran: everything in the slice so far is what a failure must keep."""
        self._effects = (len(self._new), self._head.clone())

    def rewind_to_effects(self) -> None:
        """Drop what the slice gained after the last :meth:`mark_effects` (a failed step's
        uncommitted output)."""
        if self._effects is None:
            return
        length, head = self._effects
        if length < len(self._new):
            del self._new[length:]
            self._head = head.clone()

    def __repr__(self) -> str:
        return (f"Session({self.session_id!r}, version={self.version}, status={self.status!r}, "
                f"events={len(self._loaded)}+{len(self._new)})")
