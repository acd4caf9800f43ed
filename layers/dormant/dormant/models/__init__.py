"""Models: the contract (:class:`Model`), the scripted and rule-based models, (with the
``openai`` extra) OpenAI, and (with boto3) Amazon Bedrock.

``OpenAIModel``, ``OpenAIRealtimeModel``, ``BedrockModel``, ``ScriptedModel`` and ``RuleModel``
are imported on first use: the Lambda path loads none of their modules until it is asked for,
and the ``openai`` package (~300 ms; ``websockets`` for the realtime model) or boto3 only when
a model call needs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dormant.models._base import (
    AssistantMessage,
    AudioChunk,
    Message,
    Model,
    ModelChunk,
    ModelError,
    ModelRequest,
    ReasoningChunk,
    ResponseInfo,
    TextDelta,
    ThoughtDelta,
    ToolCallChunk,
    ToolCallDelta,
    ToolCallPart,
    ToolMessage,
    ToolResultChunk,
    ToolSpec,
    UsageChunk,
    UserMessage,
)
from dormant.models.audio import Speaker, Transcriber

if TYPE_CHECKING:
    from dormant.models.bedrock import BedrockModel
    from dormant.models.openai import OpenAIModel
    from dormant.models.openai_audio import OpenAISpeaker, OpenAITranscriber
    from dormant.models.openai_realtime import OpenAIRealtimeModel
    from dormant.models.rules import RuleModel
    from dormant.models.scripted import ScriptedModel, ScriptError

__all__ = [
    "AssistantMessage",
    "AudioChunk",
    "BedrockModel",
    "Message",
    "Model",
    "ModelChunk",
    "ModelError",
    "ModelRequest",
    "OpenAIModel",
    "OpenAIRealtimeModel",
    "OpenAISpeaker",
    "OpenAITranscriber",
    "ReasoningChunk",
    "ResponseInfo",
    "RuleModel",
    "ScriptError",
    "ScriptedModel",
    "Speaker",
    "TextDelta",
    "ThoughtDelta",
    "ToolCallChunk",
    "ToolCallDelta",
    "ToolCallPart",
    "ToolMessage",
    "ToolResultChunk",
    "ToolSpec",
    "Transcriber",
    "UsageChunk",
    "UserMessage",
]


def __getattr__(name: str) -> Any:
    if name == "OpenAIModel":
        from dormant.models.openai import OpenAIModel

        return OpenAIModel
    if name == "BedrockModel":
        from dormant.models.bedrock import BedrockModel

        return BedrockModel
    if name == "OpenAIRealtimeModel":
        from dormant.models.openai_realtime import OpenAIRealtimeModel

        return OpenAIRealtimeModel
    if name in ("OpenAITranscriber", "OpenAISpeaker"):
        from dormant.models import openai_audio

        return getattr(openai_audio, name)
    if name in ("ScriptedModel", "ScriptError"):  # tests' model: not on the Lambda path
        from dormant.models import scripted

        return getattr(scripted, name)
    if name == "RuleModel":
        from dormant.models.rules import RuleModel

        return RuleModel
    raise AttributeError(f"module 'dormant.models' has no attribute {name!r}")
