"""The model's view of a session: ledger events translated into neutral messages.

A long session's ledger holds thousands of events; translating them all on every model call
would make a full-history turn cost what the history costs. :func:`history_messages` keeps,
per session, the translation of the *committed* ledger it last saw (a :class:`_Fold`: the
messages so far and the half-built assistant message at its end) and translates only what was
appended since. Committed positions never change — a commit is a conditional write at the
next position — so a fold is reused when its window starts where it did and the event at its
end is still the event it ended on; anything else (another session reusing the id after a
delete, a shorter ledger, another window) translates afresh.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from dormant._lru import Lru
from dormant.events import (
    AppEvent,
    AssistantEvent,
    CompactionEvent,
    Event,
    ReasoningEvent,
    SeedEvent,
    ToolCall,
    ToolCallDraft,
    ToolResult,
    UserEvent,
)
from dormant.models._base import (
    AssistantMessage,
    Message,
    ToolCallPart,
    ToolMessage,
    UserMessage,
)
from dormant.session import Session

__all__ = ["app_event_note", "history_messages", "latest_summary", "scoped_messages",
           "summary_message", "to_messages"]

#: How a history shows application events: False (not at all), True (:func:`app_event_note`)
#: or a function of the event returning the note's text (None: skipped).
AppEventView = bool | Callable[[AppEvent], str | None]


def app_event_note(event: AppEvent) -> str:
    """The system note an application event becomes for a history that asks for them."""
    data = json.dumps(event.data, ensure_ascii=False, sort_keys=True)
    return f"Application event {event.name}: {data}"

#: Sessions whose committed translation is kept (least recently used dropped first).
FOLD_SESSIONS = 256


class _Fold:
    """Ledger events ``start`` … ``end - 1`` translated: the finished messages, and the
    assistant text and tool calls not yet flushed into a message.

    ``messages[:size]`` are this fold's messages. A cached fold extended with what was
    committed since (:meth:`grown`) hands its list on to the longer fold, which appends to
    it: the list only ever grows, so the shorter fold's prefix stays what it was, and a
    long history is not copied on every commit."""

    __slots__ = ("calls", "end", "last", "messages", "reasoning", "scope", "size", "start",
                 "text", "view")

    def __init__(self, start: int, view: AppEventView = False, scope: str | None = None
                 ) -> None:
        self.start = start
        self.view = view
        #: Whose events it translates: the session's agent's (None), or those of the
        #: sub-agent running for the call of this id.
        self.scope = scope
        self.end = start
        #: The last event translated (None: none yet): what says whether a ledger read
        #: later still holds this fold's events (:func:`_fold`).
        self.last: Event | None = None
        self.messages: list[Message] = []
        self.size = 0
        self.text: str | None = None
        self.calls: list[ToolCallPart] = []
        self.reasoning: list[dict[str, Any]] = []

    def copy(self) -> _Fold:
        return self._like(self.messages[:self.size])

    def _like(self, messages: list[Message]) -> _Fold:
        fold = _Fold(self.start, self.view, self.scope)
        fold.end, fold.last, fold.text = self.end, self.last, self.text
        fold.messages, fold.size = messages, self.size
        fold.calls, fold.reasoning = self.calls.copy(), self.reasoning.copy()
        return fold

    def grown(self, events: Sequence[Event]) -> _Fold:
        """A new fold: this one and ``events``, appended to this fold's list when nothing
        was appended to it since (else to a copy of this fold's part)."""
        with _GROWING:  # (two turns of one session growing the same fold)
            if len(self.messages) == self.size:
                return self._like(self.messages).add(events)
        return self.copy().add(events)

    def pending(self) -> AssistantMessage | None:
        """The assistant message being built (None: nothing since the last flush)."""
        if self.text is None and not self.calls and not self.reasoning:
            return None
        return AssistantMessage(text=self.text or "", tool_calls=tuple(self.calls),
                                reasoning=tuple(self.reasoning))

    def flush(self) -> None:
        message = self.pending()
        if message is not None:
            self.messages.append(message)
        self.text = None
        self.calls = []
        self.reasoning = []

    def add(self, events: Sequence[Event]) -> _Fold:
        messages = self.messages
        for event in events:
            if type(event) not in _SPOKEN:
                continue  # (most of a turn's events: no pattern below to try in turn)
            scope = event.scope
            if (scope.call_id if scope is not None else None) != self.scope:
                continue  # another agent's (a sub-agent's, or its caller's)
            match event:
                case ReasoningEvent():
                    if self.calls or self.text is not None:
                        self.flush()  # a new step's reasoning: the last step is complete
                    self.reasoning.extend(event.items)
                case AssistantEvent():
                    if self.calls:
                        self.flush()
                    self.text = event.text if self.text is None else self.text + event.text
                case ToolCall():
                    self.calls.append(ToolCallPart(
                        event.call_id, event.name, event.args,
                        provider_executed=event.provider_executed,
                        provider_metadata=event.provider_metadata,
                        tool_metadata=event.tool_metadata, dynamic=event.dynamic))
                case UserEvent():
                    self.flush()
                    messages.append(UserMessage(event.text))
                case SeedEvent():
                    self.flush()
                    messages.append(UserMessage(event.text, role=event.role))
                case AppEvent() if self.view:
                    note = app_event_note(event) if self.view is True else self.view(event)
                    if note:
                        self.flush()
                        messages.append(UserMessage(note, role="system"))
                case ToolResult(preliminary=True):
                    pass  # a generator tool's progress: not the call's result
                case ToolCallDraft():
                    pass  # a stopped call's streamed arguments: never part of the conversation
                case ToolResult():
                    self.flush()
                    failed = event.error is not None
                    content = event.error if event.error is not None \
                        else json.dumps(event.result, ensure_ascii=False)
                    messages.append(ToolMessage(
                        event.call_id, event.name, content, failed,
                        provider_executed=event.provider_executed,
                        provider_metadata=event.provider_metadata))
        if events:
            self.end += len(events)
            self.last = events[-1]
        self.size = len(messages)
        return self

    def finished(self) -> list[Message]:
        """The messages, with the trailing assistant message flushed (the fold unchanged)."""
        message = self.pending()
        mine = self.messages[:self.size]
        if message is not None:
            mine.append(message)
        return mine

    def taken(self) -> list[Message]:
        """:meth:`finished`, from a fold nobody else holds: its own list, not a copy."""
        self.flush()
        return self.messages


#: The events the conversation is made of (every other kind is the ledger's bookkeeping).
_SPOKEN = frozenset({ReasoningEvent, AssistantEvent, ToolCall, UserEvent, SeedEvent, AppEvent,
                     ToolResult, ToolCallDraft})
_FOLDS: Lru[_Fold] = Lru(FOLD_SESSIONS)
_GROWING = threading.Lock()


def history_messages(session: Session, turns: int | None, until: int,
                     compacted: bool = False, app_events: AppEventView = False
                     ) -> list[Message]:
    """The model's messages for the last ``turns`` turns (all for None) up to ledger position
    ``until``: the session's committed part translated once per process and extended, the
    turn's own uncommitted events translated on top. ``compacted``: the latest compaction's
    summary first (a system message), then what follows the part it summarised.
    ``app_events``: how application events are shown (default: not at all)."""
    first = session.first_seq
    start = max(session.head.window_start(turns, compacted=compacted), first)
    messages = _fold(session, start, until, app_events)
    if compacted and session.head.compacted_to:
        summary = latest_summary(session, until)
        if summary is not None:
            return [summary_message(summary.summary), *messages]
    return messages


def summary_message(summary: str) -> Message:
    """How a compaction's summary is put before the turns that follow it."""
    return UserMessage(f"{SUMMARY_PREFIX}\n{summary}", role="system")


#: What a summary sent to the model starts with.
SUMMARY_PREFIX = "Summary of the earlier conversation (older turns were compacted):"


def latest_summary(session: Session, until: int) -> CompactionEvent | None:
    """The compaction in force at ledger position ``until`` (its tail is where the head says
    the latest starts), from what the session loaded and what the turn added."""
    tail = session.head.compacted_to
    first = session.first_seq
    added = session.new_events[:max(until - session.base_seq, 0)]
    loaded = session.loaded_events[:max(min(until, session.base_seq) - first, 0)]
    for events in (added, loaded):
        for event in reversed(events):
            if isinstance(event, CompactionEvent) and event.tail_start == tail:
                return event
    return None


def _fold(session: Session, start: int, until: int, view: AppEventView = False
          ) -> list[Message]:
    """The messages of positions ``start`` … ``until - 1``, from the session's cached fold
    extended in place with what was added since: each event is translated once, whether it
    was committed or is the turn's own (the next model call of the turn, and the next
    request, find it translated).

    The cached fold holds if the ledger read now still has its last event where it left
    off: a committed one by id (a request that read the session anew holds other objects),
    one of the turn's uncommitted by identity (only this request's slice holds that
    object: another request's turn, or this one's rewound after a failure, never does).
    Else it is made anew from ``start``."""
    first = session.first_seq
    base = session.base_seq
    loaded = session.loaded_events
    added = session.new_events
    fold = _FOLDS.get(session.session_id)
    if fold is None or fold.start != start or fold.view is not view \
            or not start < fold.end <= until or not _holds(fold, loaded, added, first, base):
        fold = _Fold(start, view)
    if fold.end < until:
        events = [*loaded[fold.end - first:min(base, until) - first],
                  *added[max(fold.end - base, 0):until - base]]
        fold = fold.grown(events)
        _FOLDS.put(session.session_id, fold)
    return fold.finished()


def _holds(fold: _Fold, loaded: Sequence[Event], added: Sequence[Event], first: int,
           base: int) -> bool:
    """Whether the ledger read now has ``fold``'s last event at its last position."""
    at = fold.end - 1
    if at < base:
        return fold.last is not None and loaded[at - first].id == fold.last.id
    return 0 <= at - base < len(added) and added[at - base] is fold.last


def scoped_messages(session: Session, call_id: str, task: str, until: int) -> list[Message]:
    """A sub-agent's messages (an agent used as a tool, running for its caller's call
    ``call_id``): its task as the user's message, then the events it wrote, up to ledger
    position ``until``. They all sit after the call in the open invocation: the loaded
    window holds them (it starts at the latest user message or earlier)."""
    first = session.first_seq
    committed = min(session.base_seq, until)
    events = [*session.loaded_events[:max(committed - first, 0)],
              *session.new_events[:max(until - session.base_seq, 0)]]
    return [UserMessage(task), *_Fold(0, scope=call_id).add(events).taken()]


def to_messages(events: Iterable[Event]) -> list[Message]:
    """Translate ledger events into the neutral messages a model adapter maps to its API."""
    return _Fold(0).add(list(events)).taken()
