"""A model call's messages as the GenAI conventions record them on a ``chat`` span.

Only when the app opts into content capture
(``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``): the span then carries
``gen_ai.system_instructions``, ``gen_ai.input.messages`` and ``gen_ai.output.messages`` as
JSON text, each message a ``role`` with ``parts`` (``text``, ``tool_call``,
``tool_call_response``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from dormant.models._base import (
    AssistantMessage,
    Message,
    ModelRequest,
    ToolMessage,
)

__all__ = ["output_content", "request_content"]


def request_content(request: ModelRequest) -> dict[str, str]:
    """The call's system instructions and input messages."""
    return {
        "gen_ai.system_instructions": _json([{"type": "text", "content": text}
                                             for text in request.system]),
        "gen_ai.input.messages": _json([_message(message) for message in request.messages]),
    }


def output_content(text: str, calls: Sequence[Any], finish_reason: str | None) -> dict[str, str]:
    """The call's answer: its text and tool calls (each with ``call_id``, ``name``,
    ``args``)."""
    parts: list[dict[str, Any]] = [{"type": "text", "content": text}] if text else []
    parts += [{"type": "tool_call", "id": call.call_id, "name": call.name,
               "arguments": call.args} for call in calls]
    message: dict[str, Any] = {"role": "assistant", "parts": parts}
    if finish_reason:
        message["finish_reason"] = finish_reason
    return {"gen_ai.output.messages": _json([message])}


def _message(message: Message) -> dict[str, Any]:
    if isinstance(message, AssistantMessage):
        parts: list[dict[str, Any]] = [{"type": "text", "content": message.text}] \
            if message.text else []
        parts += [{"type": "tool_call", "id": call.call_id, "name": call.name,
                   "arguments": call.args} for call in message.tool_calls]
        return {"role": "assistant", "parts": parts}
    if isinstance(message, ToolMessage):
        return {"role": "tool", "parts": [{"type": "tool_call_response", "id": message.call_id,
                                           "response": message.content}]}
    return {"role": message.role, "parts": [{"type": "text", "content": message.text}]}


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
