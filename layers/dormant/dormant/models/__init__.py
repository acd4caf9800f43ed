"""Models: the contract, the scripted model, and (with the ``openai`` extra) OpenAI.

``OpenAIModel`` and ``ScriptedModel`` are imported on first use: the Lambda path loads
neither module until it is asked for, and the ``openai`` package (~300 ms) only when a model
call needs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dormant.models._base import (
    AssistantMessage,
    Message,
    Model,
    ModelChunk,
    ModelError,
    ModelRequest,
    TextDelta,
    ThoughtDelta,
    ToolCallChunk,
    ToolCallPart,
    ToolMessage,
    ToolSpec,
    UsageChunk,
    UserMessage,
)

if TYPE_CHECKING:
    from dormant.models.openai import OpenAIModel
    from dormant.models.scripted import ScriptedModel, ScriptError

__all__ = [
    "AssistantMessage",
    "Message",
    "Model",
    "ModelChunk",
    "ModelError",
    "ModelRequest",
    "OpenAIModel",
    "ScriptError",
    "ScriptedModel",
    "TextDelta",
    "ThoughtDelta",
    "ToolCallChunk",
    "ToolCallPart",
    "ToolMessage",
    "ToolSpec",
    "UsageChunk",
    "UserMessage",
]


def __getattr__(name: str) -> Any:
    if name == "OpenAIModel":
        from dormant.models.openai import OpenAIModel

        return OpenAIModel
    if name in ("ScriptedModel", "ScriptError"):  # tests' model: not on the Lambda path
        from dormant.models import scripted

        return getattr(scripted, name)
    raise AttributeError(f"module 'dormant.models' has no attribute {name!r}")
