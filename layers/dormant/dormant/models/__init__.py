"""Models: the contract, the scripted model, and (with the ``openai`` extra) OpenAI.

``OpenAIModel`` is imported on first use: the ``openai`` package costs ~300 ms to import and
the Lambda path should pay that only when a model call needs it.
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
from dormant.models.scripted import ScriptedModel, ScriptError

if TYPE_CHECKING:
    from dormant.models.openai import OpenAIModel

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
    raise AttributeError(f"module 'dormant.models' has no attribute {name!r}")
