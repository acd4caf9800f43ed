"""Sessions: a ledger, the head it folds to, and the slice a turn has not committed yet."""

from __future__ import annotations

import copy
import functools
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

from dormant import _decide
from dormant._decide import Ask, EventType
from dormant._fold import apply
from dormant._head import Head, status_of
from dormant._ids import birth_ms, new_id, now_ms
from dormant._inputs import IfBusy
from dormant._patch import to_json_value
from dormant._window import Window
from dormant.errors import InputError
from dormant.events import (
    AppEvent,
    ApprovalDecided,
    Event,
    InputResponse,
    QueuedEvent,
    SeedEvent,
    TimerCancelled,
    TimerSet,
    ToolInput,
    ToolResult,
    UserEvent,
)
from dormant.schedulers import (
    LEASE_TIMER,
    MAX_TIMER_NAME,
    TimerDelivery,
    fire_at_ms,
    is_lease_timer,
)
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
    "child_session_id",
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


def child_session_id(parent: str, call_id: str) -> str:
    """The id of the child session a delegated call runs in (``Agent.as_delegate``): derived
    from the parent's id and the call's, so a start sent again finds the same session."""
    seed = f"{normalize_session_id(parent)}|{call_id}".encode()
    return _PREFIX + "child-" + hashlib.blake2b(seed, digest_size=10).hexdigest()


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
        if not isinstance(text, str) or not text.strip():
            raise InputError("a message must be a string with text in it (not empty or "
                             "whitespace only)")
        message_id = id or new_id("msg")
        _, queued = _decide.message(self._session, text, message_id, if_busy)
        if queued is not None:
            return queued
        head = self._session.head
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

    def __init__(self, head: Head, events: list[Event] | None = None, first_seq: int = 0,
                 later: Mapping[int, Callable[[], Event]] | None = None) -> None:
        #: The ledger window, its head and the uncommitted slice, as the engine moves them
        #: (the commit policy, the run loop): read the session's properties instead.
        self.window = Window(head, events, first_seq, later)
        #: A retry asked for with ``input.retry`` (run by the next turn).
        self.pending_retry: str | None = None
        #: True once a claim committed this session's inputs (decisions, answers): a turn
        #: that then fails keeps its progress like one whose tool ran.
        self.claimed = False
        #: The controls this session's requests ask of a running turn (written when it is
        #: committed).
        self.control_asks: list[Ask] = []
        #: The app's declared event types (``app.event``), set when the app loads the
        #: session (None: not bound to an app; ``append_event`` refuses).
        self.event_types: dict[str, EventType] | None = None
        #: Checks a timer before ``schedule`` records it (set by the app that loaded the
        #: session: no scheduler in a turn, or one that rejects the timer for good, raises
        #: :class:`~dormant.errors.TimerRefused`); called with the delivery and whether a turn
        #: is running. None: not bound to an app, no check.
        self.timer_check: Callable[[TimerDelivery, bool], None] | None = None

    @property
    def control(self) -> Control | None:
        """The session's control record as loaded (None: none)."""
        return self.window.control

    @control.setter
    def control(self, control: Control | None) -> None:
        self.window.control = control

    @property
    def spare_ids(self) -> set[str]:
        """Ids of messages this turn took up that are not its own (steers, and steers that
        missed their invocation, run first): dropped at the commit if another request
        landed them first."""
        return self.window.spare_ids

    @property
    def input(self) -> SessionInput:
        """What appends inputs to the slice (``session.input.message(...)``, ...). Made on
        each read, not kept: a session that held it would be a reference cycle, left for
        the garbage collector after every request instead of freed at once."""
        return SessionInput(self)

    @classmethod
    def new(cls, session_id: str, *, state: dict[str, Any] | None = None,
            principal: str | None = None) -> Session:
        stamp = birth_ms()
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
    def from_stored(cls, stored: StoredSession,
                    later: Mapping[int, Callable[[], Event]] | None = None) -> Session:
        """The session ``stored`` holds (``later``: events the store left where they live,
        read when the events are, see :meth:`dormant.stores.DynamoDBStore.load_deferred`)."""
        session = cls(stored.head, stored.events, stored.first_seq, later)
        control = session.control = stored.control
        head, entry = session.head, control.running if control is not None else None
        if entry is not None and entry.until > head.lease and head.running \
                and entry.invocation_id == head.open_invocation \
                and entry.version == head.version:
            head.lease = entry.until  # the claim's heartbeat renewed its lease
        return session

    @property
    def pause_pending(self) -> bool:
        """A pause is asked in the control record and the ledger has not taken it up yet."""
        control = self.control
        return (control is not None and control.pause is not None and not self.window.head.paused
                and control.pause != self.window.head.control_rev)

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
        return self.window.head.session_id

    @property
    def version(self) -> int:
        """The version this session was loaded at (the one its commit expects)."""
        return self.window.base_version

    @property
    def events(self) -> list[Event]:
        window = self.window
        return window.loaded + window.new

    @property
    def loaded_events(self) -> Sequence[Event]:
        """The committed ledger as loaded (positions ``first_seq`` … ``base_seq - 1``), not
        copied: read it, never change it."""
        return self.window.loaded

    @property
    def new_events(self) -> list[Event]:
        """The uncommitted slice."""
        return list(self.window.new)

    @property
    def first_seq(self) -> int:
        return self.window.first_seq

    @property
    def base_seq(self) -> int:
        """Ledger position of the slice's first event (where the store will put it)."""
        return self.window.base_seq

    @property
    def state(self) -> dict[str, Any]:
        return self.window.head.state

    @property
    def status(self) -> Literal["active", "awaiting_input", "failed", "paused"]:
        if self.pause_pending:
            return "paused"
        return self._status()

    def _status(self) -> Literal["active", "awaiting_input", "failed", "paused"]:
        """``paused`` while paused; ``failed`` after a failed turn (until retried or
        interrupted); ``awaiting_input`` while parked on a yield, an approval, an input
        request or a message yield; else ``active``."""
        return status_of(self.window.head)

    @property
    def inbox(self) -> list[QueuedMessage]:
        """User messages queued while the session could not take them, in the order they
        will run."""
        return [QueuedMessage(id=q["id"], text=q["text"], queued_at=q.get("queued_at", 0))
                for q in self.window.head.queue]

    @property
    def pending_inputs(self) -> list[PendingInput]:
        """Input requests (``request_input``) awaiting a response, oldest first."""
        return [PendingInput(input_id=i["input_id"], input_schema=i.get("schema") or {},
                             prompt=i.get("prompt")) for i in self.window.head.inputs]

    @property
    def open_invocation(self) -> str | None:
        """The invocation that is parked, failed, paused or (committed as) running."""
        return self.window.head.open_invocation

    @property
    def yielded_tools(self) -> list[YieldedTool]:
        """The unanswered yields, in call order."""
        return [YieldedTool(call_id=c.call_id, name=c.name, args=c.prepared, agent=c.path)
                for c in self.window.head.pending_yields()]

    @property
    def deferred_tools(self) -> list[YieldedTool]:
        """Deferred calls waiting for their result (``input.tool_result``), in call order."""
        return [YieldedTool(call_id=c.call_id, name=c.name, args=c.args, agent=c.path)
                for c in self.window.head.pending_deferred()]

    @property
    def pending_approvals(self) -> list[PendingApproval]:
        """Approval requests awaiting a decision, in call order."""
        return [PendingApproval(approval_id=c.approval_id, call_id=c.call_id, tool=c.name,
                                args=c.args, agent=c.path)
                for c in self.window.head.pending_approvals() if c.approval_id is not None]

    @property
    def owner(self) -> str | None:
        """The principal this session belongs to (None: reachable by no public principal)."""
        return self.window.head.principal

    @property
    def principal(self) -> str | None:
        """The owner, under its older name."""
        return self.window.head.principal

    @property
    def head(self) -> Head:
        return self.window.head

    @property
    def dirty(self) -> bool:
        return self.window.dirty

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
        _not_reserved(name)
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
                         invocation_id=self.window.head.open_invocation)
        if self.timer_check is not None:  # refused for good: raise, record nothing
            in_turn = self.window.in_turn
            self.timer_check(TimerDelivery(session_id=self.session_id, name=name,
                                           fire_at=fire_at, message=message,
                                           message_id=message_id,
                                           tool_input=event.tool_input), in_turn)
        self.record(event)
        return event

    def cancel_schedule(self, name: str) -> TimerCancelled:
        """Cancel a timer (no error if there is none; it takes effect when the turn commits)."""
        _not_reserved(name)
        event = TimerCancelled(name=name, invocation_id=self.window.head.open_invocation)
        self.record(event)
        return event

    @property
    def timers(self) -> list[TimerDelivery]:
        """Timers set and not yet delivered or cancelled, earliest first."""
        timers = self.window.head.timers.values()
        return sorted((TimerDelivery.of(self.session_id, t) for t in timers),
                      key=lambda t: t.fire_at)

    def record(self, event: Event) -> None:
        """Record ``event``: during a run (a tool calling ``schedule``) events wait for the
        runtime, which emits them in order after the tool phase; otherwise they are appended
        now."""
        self.window.record(event)

    def add_event(self, event: Event) -> None:
        """Append a ledger event to the uncommitted slice, folded into the head (raises, and
        adds nothing, if the session cannot take it). For trusted server code and handlers:
        e.g. the wake path's ``timer_fired``."""
        self.window.append(event)

    def __repr__(self) -> str:
        return (f"Session({self.session_id!r}, version={self.version}, status={self.status!r}, "
                f"events={self.window.loaded_count}+{len(self.window.new)})")


def _not_reserved(name: str) -> None:
    """Refuse a timer name the library's own wake-ups use (a claim's lease wake-up): the
    session's timer would replace or cancel one, or be taken for one when it fires."""
    if is_lease_timer(name):
        raise InputError(f"timer {name!r}: names {LEASE_TIMER!r} and {LEASE_TIMER}.* are "
                         "dormant's own wake-ups; choose another name")
