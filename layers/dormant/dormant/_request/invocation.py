"""An invocation's opening: what a turn writes into the session's slice before the run loop
carries it on, and the checks that refuse a turn before anything is written.

:func:`open_turn` is the one place a turn's invocation is opened. A new message starts one
(``invocation_start``, the steers that missed theirs, the message), a message to an
invocation parked on a message yield or an answered step resumes one (``invocation_resume``),
a retry reopens the failed one (``retry``). A claim (:mod:`dormant._request.opening`) commits
the same opening before anything runs; then :func:`open_turn` only says where the run carries
on. Either way it returns a :class:`~dormant._run.Start` and the run loop only continues.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from dormant import _decide
from dormant._ids import new_id
from dormant._run import Start
from dormant.errors import (
    DuplicateMessage,
    InputError,
    NotPending,
    PendingInputError,
    SessionFailed,
    SessionPaused,
)
from dormant.events import AppEvent, Event, InvocationResume, InvocationStart, UserEvent

if TYPE_CHECKING:
    from dormant._head import Head
    from dormant.agent import Agent
    from dormant.session import Session

__all__ = ["TurnInput", "open_invocation", "open_turn"]


@dataclass
class TurnInput:
    """What starts or resumes a turn (already applied answers live in the session)."""

    message: str | None = None
    message_id: str | None = None
    state: dict[str, Any] | None = None
    invocation_id: str | None = None
    #: Rerun the failed invocation's failed model call; lands once per id.
    retry_id: str | None = None
    #: The message comes from the session's inbox (its id landed when it was queued).
    dequeued: bool = False
    #: Steers whose invocation ended without taking them: ``(id, text)``, run first as
    #: ordinary messages.
    first: tuple[tuple[str, str], ...] = ()
    #: ``message`` is a transcript of audio (the voice handler's): its event says so.
    spoken: bool = False
    #: A claim committed the invocation's opening; the run carries on from there: ``start``
    #: (a queued message's start), ``resume`` (a settled step reopened: run its tools),
    #: ``retry`` (the retry is committed: rerun the failed model call), ``continue`` (a
    #: paused invocation resumed), ``recover`` (a stranded invocation taken over: run what
    #: its step left unfinished, under the same call ids, then carry on).
    claimed: Literal["start", "resume", "retry", "continue", "recover"] | None = None


def open_turn(agent: Agent, session: Session, turn: TurnInput, *,
              clock: Callable[[], int]) -> Start:
    """Open ``turn``'s invocation in ``session``'s slice (nothing is written to a store) and
    say where the run carries on. Raises, adding nothing, for a turn that cannot run: a
    redelivered message, a session that waits, failed or is paused, nothing to run.

    A retry asked for with ``session.input.retry(retry_id)`` runs when the turn names none."""
    if agent.app_events is not None:  # the agent's app's contract (``app.event``)
        session.event_types = agent.app_events
    if turn.retry_id is None and session.pending_retry is not None:
        turn = replace(turn, retry_id=session.pending_retry)
    session.pending_retry = None
    trigger = _trigger(session.new_events)
    head = session.head
    if turn.claimed is not None:  # the claim committed the opening: carry on from there
        if trigger is None and session.loaded_events:  # the last event the claim committed
            trigger = session.loaded_events[-1]
        return Start(head.open_invocation,
                     "tools" if turn.claimed in ("resume", "recover", "retry")
                     and _unsettled(head) else "model",
                     hooks=turn.claimed in ("start", "resume"), state=turn.state,
                     trigger=trigger)
    if turn.message is None and turn.retry_id is None and head.queue and head.free:
        first = head.queue[0]  # the inbox's next message
        turn = replace(turn, message=first["text"], message_id=first["id"], dequeued=True,
                       spoken=bool(first.get("audio")))
    if turn.message is None and turn.first:
        (message_id, text), *rest = turn.first
        turn = replace(turn, message=text, message_id=message_id, first=tuple(rest))
    if turn.retry_id is not None:
        retried = _decide.retry(session, turn.retry_id)
        session.add_event(retried)
        return Start(retried.invocation_id, "tools" if _unsettled(head) else "model",
                     hooks=False, trigger=retried)
    if turn.message is not None:
        return _open_for_message(agent, session, turn, clock, trigger)
    if head.parked != "tool":
        if head.failed:
            raise SessionFailed(head.session_id, head.open_invocation)
        if head.paused:
            raise SessionPaused(head.session_id)
        if head.inbox == 0:
            raise NotPending(f"nothing to run in session {head.session_id}: send a message"
                             + (" (the session waits for one)" if head.parked == "message"
                                else ""))
    elif head.unresolved():
        return Start(head.open_invocation, "wait")  # some calls still wait for answers
    if head.parked is not None:  # an answered step (its tools run first), or a message yield
        invocation, parked = head.open_invocation, head.parked
        session.add_event(InvocationResume(invocation_id=invocation))  # (the head moves on)
        return Start(invocation, "tools" if parked == "tool" else "model", state=turn.state,
                     trigger=trigger)
    invocation = turn.invocation_id or new_id("inv")
    session.add_event(InvocationStart(invocation_id=invocation, agent=agent.name))
    return Start(invocation, state=turn.state, trigger=trigger)


def _open_for_message(agent: Agent, session: Session, turn: TurnInput,
                      clock: Callable[[], int], trigger: Event | None) -> Start:
    """A message's turn: a new invocation, or the one parked on a message yield resumed."""
    head = session.head
    message = turn.message
    # A message already in the session is a redelivery, whatever the session does now
    # (e.g. it parked on a tool the message led to): say so before anything else.
    if turn.message_id is not None and head.has_message(turn.message_id) \
            and not turn.dequeued:
        raise DuplicateMessage(head.session_id, turn.message_id)
    if head.paused:
        raise SessionPaused(head.session_id)
    if head.parked == "tool":
        raise PendingInputError(head.session_id,
                                [(c.call_id, c.name) for c in head.unresolved()])
    if head.failed:
        raise SessionFailed(head.session_id, head.open_invocation)
    if not isinstance(message, str) or not message:
        raise InputError("a message must be a non-empty string")
    message_id = turn.message_id or new_id("msg")
    first = turn.first
    if first:
        session.spare_ids.update(message_id for message_id, _ in first)
    if head.parked == "message":
        invocation = head.open_invocation
        assert invocation is not None
        opening = open_invocation(session, None, invocation, first, clock, message,
                                  message_id, queued=turn.dequeued, audio=turn.spoken)
        session.add_event(InvocationResume(invocation_id=invocation))
    else:
        invocation = turn.invocation_id or new_id("inv")
        opening = open_invocation(session, agent, invocation, first, clock, message,
                                  message_id, queued=turn.dequeued, audio=turn.spoken)
    # a turn an application event started: that is its trigger, else the message
    return Start(invocation, state=turn.state,
                 trigger=trigger if isinstance(trigger, AppEvent) else opening[-1])


def open_invocation(session: Session, agent: Agent | None, invocation: str,
                    first: Sequence[tuple[str, str]], clock: Callable[[], int], text: str,
                    message_id: str, *, queued: bool = False, audio: bool = False
                    ) -> list[Event]:
    """Append an invocation's opening to the slice: its start (``agent``'s; None: it is open
    already), the steers that missed theirs (``first``: ``(id, text)``), then the user
    message ``text``. Returns the events appended."""
    opening: list[Event] = []
    if agent is not None:
        opening.append(InvocationStart(invocation_id=invocation, agent=agent.name))
    for steer_id, steer_text in first:
        opening.append(UserEvent(text=steer_text, message_id=steer_id,
                                 invocation_id=invocation, ts=clock()))
    opening.append(UserEvent(text=text, message_id=message_id, invocation_id=invocation,
                             ts=clock(), queued=queued, audio=audio))
    add = session.add_event
    for event in opening:
        add(event)
    return opening


def _unsettled(head: Head) -> bool:
    """Whether the open step has calls without a result: a settled step's held calls, or
    calls that landed before their tools ran and whose request then ended (a crash, a
    deadline): the turn runs them first (``tools``), under the same call ids."""
    return any(not call.settled for call in head.step)


def _trigger(slice_: list[Event]) -> Event | None:
    """What started the turn, as far as the slice tells before its opening: the last
    application event the request brought, else the slice's last event."""
    for event in reversed(slice_):
        if isinstance(event, AppEvent):
            return event
    return slice_[-1] if slice_ else None
