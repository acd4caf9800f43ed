"""The session head: what the ledger folds to, kept beside it so no turn replays history.

Every event passes through :func:`apply` exactly once on its way into a session, and again
when a refused commit is merged onto a newer head: that second pass is where an input that is
no longer valid (an answer to a call somebody else answered) is caught.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from dormant._patch import apply_patch
from dormant.errors import InputError, PendingInputError, ResumeError
from dormant.events import (
    LEDGER_FORMAT,
    Event,
    InvocationEnd,
    InvocationResume,
    InvocationStart,
    InvocationYield,
    StateDelta,
    ToolCall,
    ToolInput,
    ToolResult,
    ToolYield,
    UserEvent,
)

__all__ = ["TURN_INDEX_SIZE", "Head", "PendingCall", "apply"]

#: How many recent turn starts (user-event positions) the head remembers for windowed reads.
TURN_INDEX_SIZE = 64
#: How many recent message ids the head remembers to land a redelivered message once.
MESSAGE_ID_WINDOW = 64


class PendingCall(BaseModel):
    """One tool call of the step the invocation is in."""

    call_id: str
    name: str
    args: Any = None
    yielded: bool = False
    prepared: Any = None
    answered: bool = False
    input: Any = None
    settled: bool = False


class Head(BaseModel):
    """A session's current fold. Stored with every commit; versioned with the ledger format."""

    format: int = LEDGER_FORMAT
    session_id: str
    version: int = 0
    seq: int = Field(default=0, description="Events in the ledger (the next event's position).")
    state: dict[str, Any] = Field(default_factory=dict)
    principal: str | None = None
    created_at: int = 0
    updated_at: int = 0
    open_invocation: str | None = None
    agent: str | None = None
    parked: Literal["tool", "message"] | None = None
    step: list[PendingCall] = Field(default_factory=list)
    inbox: int = Field(default=0, description="User messages not yet taken up by a run.")
    last_user_ts: int = 0
    turn_starts: list[int] = Field(default_factory=list)
    message_ids: list[str] = Field(default_factory=list)
    last_event: str | None = Field(
        default=None, description="Id of the ledger's last event (detects a commit that landed)."
    )

    def window_start(self, turns: int | None) -> int:
        """Position of the first event a ``turns``-turn history window needs (0: everything)."""
        if turns is None:
            return 0
        if turns <= 0:
            return self.seq
        if turns > len(self.turn_starts):
            return 0
        return self.turn_starts[-turns]

    def pending_yields(self) -> list[PendingCall]:
        """Yielded calls that have no input yet, in call order."""
        return [c for c in self.step if c.yielded and not c.answered and not c.settled]

    def call(self, call_id: str) -> PendingCall | None:
        for candidate in self.step:
            if candidate.call_id == call_id:
                return candidate
        return None


def apply(head: Head, event: Event) -> None:
    """Fold ``event`` into ``head`` in place, refusing transitions the ledger cannot make."""
    match event:
        case UserEvent():
            _user(head, event)
        case InvocationStart():
            _refuse_if_parked_on_tools(head)
            head.open_invocation = event.invocation_id
            head.agent = event.agent or head.agent
            head.parked = None
            head.step = []
            head.inbox = 0
        case ToolCall():
            if all(c.settled for c in head.step):
                head.step = []
            head.step.append(PendingCall(call_id=event.call_id, name=event.name, args=event.args))
        case ToolYield():
            call = _known_call(head, event.call_id)
            call.yielded = True
            call.prepared = event.args
        case InvocationYield():
            head.parked = event.reason
        case ToolInput():
            _tool_input(head, event)
        case InvocationResume():
            _resume(head, event)
        case ToolResult():
            settled = head.call(event.call_id)
            if settled is not None:
                settled.settled = True
        case StateDelta():
            apply_patch(head.state, event.patch)
        case InvocationEnd():
            head.open_invocation = None
            head.parked = None
            head.step = []
    head.seq += 1
    head.last_event = event.id


def _refuse_if_parked_on_tools(head: Head) -> None:
    if head.parked == "tool":
        pending = [(c.call_id, c.name) for c in head.pending_yields()]
        raise PendingInputError(head.session_id, pending)


def _user(head: Head, event: UserEvent) -> None:
    _refuse_if_parked_on_tools(head)
    if event.message_id in head.message_ids:
        raise InputError(f"message {event.message_id} is already in session {head.session_id}")
    head.message_ids.append(event.message_id)
    del head.message_ids[:-MESSAGE_ID_WINDOW]
    head.turn_starts.append(head.seq)
    del head.turn_starts[:-TURN_INDEX_SIZE]
    head.last_user_ts = max(head.last_user_ts, event.ts)
    if head.open_invocation is None or head.parked == "message":
        head.inbox += 1


def _tool_input(head: Head, event: ToolInput) -> None:
    call = head.call(event.call_id)
    if call is None or not call.yielded or call.settled:
        raise InputError(
            f"call {event.call_id} is not awaiting input in session {head.session_id}"
            + _awaiting(head)
        )
    if call.answered:
        raise InputError(f"call {event.call_id} in session {head.session_id} was already answered")
    call.answered = True
    call.input = event.input


def _resume(head: Head, event: InvocationResume) -> None:
    if head.parked is None or head.open_invocation != event.invocation_id:
        raise ResumeError(
            f"invocation {event.invocation_id} of session {head.session_id} is not parked"
        )
    if head.parked == "tool" and head.pending_yields():
        names = ", ".join(c.call_id for c in head.pending_yields())
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
