"""Ledger events as AG-UI messages, for the ``MESSAGES_SNAPSHOT`` a resumed run opens with.

Message ids agree with the live stream's: an assistant message is its ``assistant`` event's id
(the id its text deltas carried); tool calls of a model step hang under that message, or, when
the step said nothing, under the id of the step's first ``tool_call`` event; a tool message is
its ``tool_result`` event's id (a generator tool's preliminary results are progress, not
messages); a user message (a steer's too) or a seed is its ``message_id``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from ag_ui.core import (
    AssistantMessage,
    FunctionCall,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)

import dormant.events as dormant_events
from dormant.events import AssistantEvent, Event, SeedEvent, ToolResult, UserEvent

__all__ = ["CallLike", "args_json", "result_text", "to_agui_messages"]


class CallLike(Protocol):
    """A tool call as the session head keeps it (``PendingCall``) or a ledger ``tool_call``."""

    @property
    def call_id(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def args(self) -> Any: ...


def args_json(args: Any) -> str:
    """Tool-call arguments as the JSON text AG-UI carries (``{}`` when there are none)."""
    return json.dumps({} if args is None else args, ensure_ascii=False)


def result_text(result: Any, error: str | None) -> str:
    """A tool result as AG-UI tool-message content: the error, a string, or JSON."""
    if error is not None:
        return error
    if isinstance(result, str):
        return result
    return json.dumps(result, ensure_ascii=False)


def _call(call: CallLike) -> ToolCall:
    return ToolCall(id=call.call_id, function=FunctionCall(name=call.name,
                                                           arguments=args_json(call.args)))


def _own(item: Any) -> bool:
    """Whether an event or pending call is the session agent's (not a sub-agent's)."""
    return getattr(item, "scope", None) is None


def to_agui_messages(events: Iterable[Event], calls: Sequence[CallLike] = ()) -> list[Message]:
    """The conversation in ``events`` as AG-UI messages.

    ``calls`` (the parked step's calls) are added as one assistant message when ``events``
    does not reach back to them, so every call a resumed run settles is known to the client.

    The conversation is the session agent's: a sub-agent's events and calls (an agent used
    as a tool; they carry a ``scope``) are left out, as its caller's model never sees them —
    the caller's call of the sub-agent and its result stand for them.
    """
    messages: list[Message] = []
    holder: AssistantMessage | None = None  # the message this step's tool calls hang under
    seen: set[str] = set()
    for event in events:
        if not _own(event):
            continue
        match event:
            case UserEvent():
                holder = None
                messages.append(UserMessage(id=event.message_id, content=event.text))
            case SeedEvent():
                holder = None
                messages.append(UserMessage(id=event.message_id, content=event.text)
                                if event.role == "user"
                                else SystemMessage(id=event.message_id, content=event.text))
            case AssistantEvent():
                holder = AssistantMessage(id=event.id, content=event.text)
                messages.append(holder)
            case dormant_events.ToolCall():
                if holder is None:
                    holder = AssistantMessage(id=event.id)
                    messages.append(holder)
                holder.tool_calls = [*(holder.tool_calls or []), _call(event)]
                seen.add(event.call_id)
            case ToolResult() if not event.preliminary:
                holder = None
                messages.append(ToolMessage(id=event.id, tool_call_id=event.call_id,
                                            content=result_text(event.result, event.error),
                                            error=event.error))
            case _:
                pass
    missing = [call for call in calls if call.call_id not in seen and _own(call)]
    if missing:
        messages.append(AssistantMessage(id=f"{missing[0].call_id}.message",
                                         tool_calls=[_call(call) for call in missing]))
    return messages
