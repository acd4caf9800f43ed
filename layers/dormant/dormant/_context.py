"""The model's view of a session: ledger events translated into neutral messages."""

from __future__ import annotations

import json
from collections.abc import Iterable

from dormant.events import AssistantEvent, Event, SeedEvent, ToolCall, ToolResult, UserEvent
from dormant.models._base import (
    AssistantMessage,
    Message,
    ToolCallPart,
    ToolMessage,
    UserMessage,
)
from dormant.session import Session

__all__ = ["history_window", "to_messages"]


def history_window(session: Session, turns: int | None, until: int) -> list[Event]:
    """The ledger events of the last ``turns`` turns (all for None), up to position ``until``."""
    events = session.events[: until - session.first_seq]
    if turns is None:
        return events
    start = session.head.window_start(turns) - session.first_seq
    return events[max(start, 0):]


def to_messages(events: Iterable[Event]) -> list[Message]:
    """Translate ledger events into the neutral messages a model adapter maps to its API."""
    messages: list[Message] = []
    pending_text: str | None = None
    pending_calls: list[ToolCallPart] = []

    def flush() -> None:
        nonlocal pending_text
        if pending_text is not None or pending_calls:
            messages.append(AssistantMessage(text=pending_text or "",
                                             tool_calls=tuple(pending_calls)))
        pending_text = None
        pending_calls.clear()

    for event in events:
        match event:
            case AssistantEvent():
                if pending_calls:
                    flush()
                pending_text = event.text if pending_text is None else pending_text + event.text
            case ToolCall():
                pending_calls.append(ToolCallPart(event.call_id, event.name, event.args))
            case UserEvent():
                flush()
                messages.append(UserMessage(event.text))
            case SeedEvent():
                flush()
                messages.append(UserMessage(event.text, role=event.role))
            case ToolResult(preliminary=True):
                pass  # a generator tool's progress: not the call's result
            case ToolResult():
                flush()
                if event.error is not None:
                    messages.append(ToolMessage(event.call_id, event.name, event.error, True))
                else:
                    messages.append(ToolMessage(event.call_id, event.name,
                                                json.dumps(event.result, ensure_ascii=False)))
    flush()
    return messages
