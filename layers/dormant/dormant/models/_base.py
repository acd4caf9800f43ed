"""The model contract: one method, ``stream``, yielding chunks.

A model sees a neutral :class:`ModelRequest` (system prompts, messages, tool specs) and yields
:data:`ModelChunk` values; the runtime turns those into ledger and stream events. Adapters for
real APIs translate the request to their wire format.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from dormant.events import NO_USAGE, Usage
from dormant.tools import Signal

__all__ = [
    "DENIED",
    "AssistantMessage",
    "AudioChunk",
    "Message",
    "Model",
    "ModelChunk",
    "ModelError",
    "ModelRequest",
    "ReasoningChunk",
    "ResponseInfo",
    "TextDelta",
    "ThoughtDelta",
    "ToolCallChunk",
    "ToolCallDelta",
    "ToolCallPart",
    "ToolMessage",
    "ToolResultChunk",
    "ToolSpec",
    "UsageChunk",
    "UserMessage",
    "identify",
]


# --- what a model is sent ---------------------------------------------------------------------


@dataclass(frozen=True)
class UserMessage:
    """A user message; ``role="system"`` for a trusted passive note (a system seed) that
    sits at its place in the conversation."""

    text: str
    role: Literal["user", "system"] = "user"


@dataclass(frozen=True)
class ToolCallPart:
    """A call the assistant made, as the ledger's ``tool_call`` recorded it.

    ``provider_executed``: the provider ran it (a Bedrock server tool) and its result is a
    :class:`ToolMessage` with ``provider_executed`` too, which belongs in the assistant's
    message (adapters that cannot send such a pair tell it as text or leave it out).
    ``provider_metadata``: the provider's own fields for the call (for Bedrock, the
    ``toolUse.type``), sent back where the provider wants them. ``tool_metadata``: the tool's
    ``metadata=`` as declared; ``dynamic``: a tool offered for one run by a client."""

    call_id: str
    name: str
    args: Any
    provider_executed: bool = False
    provider_metadata: dict[str, Any] | None = None
    tool_metadata: dict[str, Any] | None = None
    dynamic: bool = False


@dataclass(frozen=True)
class AssistantMessage:
    """What the assistant said and called. ``reasoning``: the provider's opaque reasoning
    items that came before it (a :class:`ReasoningChunk`'s), for adapters that send them back."""

    text: str
    tool_calls: tuple[ToolCallPart, ...] = ()
    role: Literal["assistant"] = "assistant"
    reasoning: tuple[dict[str, Any], ...] = ()


#: How the result of a call a person denied reads (to every model, and in the ledger's
#: ``tool_result.error``): this, then ``: <reason>`` when the decision gave one.
DENIED = "Denied by the user"


@dataclass(frozen=True)
class ToolMessage:
    """A tool's outcome. ``content`` is the result as JSON text, or the error text.
    ``provider_executed``: the provider ran the call and returned this in its response (it
    belongs to the assistant's message, beside its call); ``provider_metadata``: the
    provider's own fields for it, as returned."""

    call_id: str
    name: str
    content: str
    is_error: bool = False
    role: Literal["tool"] = "tool"
    provider_executed: bool = False
    provider_metadata: dict[str, Any] | None = None


Message = UserMessage | AssistantMessage | ToolMessage


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]


class ModelRequest:
    """What one model call is given. ``messages`` is built on first access, so a model that
    never reads history (a scripted one) costs nothing per turn for it."""

    def __init__(
        self,
        *,
        system: list[str],
        tools: list[ToolSpec],
        messages: Callable[[], list[Message]] | list[Message],
        step: int = 1,
        settings: dict[str, Any] | None = None,
    ) -> None:
        self.system = system
        self.tools = tools
        self.step = step
        self.settings = settings or {}
        self._messages = messages

    @property
    def messages(self) -> list[Message]:
        if callable(self._messages):
            self._messages = self._messages()
        return self._messages


# --- what a model yields ----------------------------------------------------------------------


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ThoughtDelta:
    text: str


@dataclass(frozen=True)
class ToolCallChunk:
    """A complete tool call (adapters assemble streamed argument fragments first).
    ``args`` is a dict, or JSON text the runtime parses (bad JSON reaches the model as a
    tool error). An empty ``call_id`` asks the runtime to derive one from the invocation and
    the call's position, so a rerun of the same step gets the same ids.

    ``provider_executed``: the provider ran the call itself (a Bedrock server tool); the
    runtime records it and never runs it, and its :class:`ToolResultChunk` is the result.
    ``provider_metadata``: the provider's own fields for the call (a JSON object), kept on
    the ledger's ``tool_call`` and handed back with the call on later requests."""

    call_id: str
    name: str
    args: Any
    provider_executed: bool = False
    provider_metadata: dict[str, Any] | None = None


@dataclass(frozen=True)
class ToolResultChunk:
    """The result of a provider-executed call (:attr:`ToolCallChunk.provider_executed`), as
    the provider returned it in its response: ``result`` a JSON value (or, with
    ``is_error``, the error text); ``provider_metadata`` the provider's own fields for it.
    Recorded as the call's ``tool_result`` with ``provider_executed``."""

    call_id: str
    result: Any
    is_error: bool = False
    provider_metadata: dict[str, Any] | None = None


@dataclass(frozen=True)
class ToolCallDelta:
    """A fragment of a tool call as it streams, before its :class:`ToolCallChunk` (optional:
    adapters that see the call streaming yield these). ``index`` tells parallel calls apart;
    ``call_id`` and ``name`` may come with any fragment, ``args`` is the next piece of the
    argument text. The runtime keeps them only when the turn is stopped before the whole
    call arrived: a ``tool_call_draft`` ledger event, never part of the conversation."""

    index: int
    args: str = ""
    call_id: str = ""
    name: str = ""


@dataclass(frozen=True)
class ReasoningChunk:
    """One opaque reasoning item as the provider returned it (for the OpenAI Responses API a
    ``{"type": "reasoning", "id", "summary", "encrypted_content"?}`` object; for Bedrock,
    ``provider="bedrock"``, a ``{"type": "bedrock_reasoning", ...}`` object). It is kept in the
    ledger and handed back on the following calls (:attr:`AssistantMessage.reasoning`)."""

    item: dict[str, Any]
    provider: str = "openai"


@dataclass(frozen=True)
class UsageChunk:
    #: (Usage is frozen: the one empty usage is shared, not built per chunk.)
    usage: Usage = NO_USAGE


@dataclass(frozen=True)
class ResponseInfo:
    """What the provider said of its response, for traces and the turn's timing: the model
    that answered (``model``), the response's id, and why it finished (``finish_reason``,
    the provider's own word: ``stop``, ``tool_calls``, ``length``, ``end_turn``, …)."""

    model: str | None = None
    response_id: str | None = None
    finish_reason: str | None = None


@dataclass(frozen=True)
class AudioChunk:
    """A piece of the reply as audio (a realtime model's voice): raw bytes in ``format``
    (``pcm16``: 16-bit little-endian mono PCM) at ``rate`` samples a second. Streamed to
    clients as ``audio_delta`` events and never kept: what the audio says comes as
    :class:`TextDelta` (its transcript), which the ledger records."""

    data: bytes
    format: str = "pcm16"
    rate: int = 24000


ModelChunk = (TextDelta | ThoughtDelta | ToolCallChunk | ToolCallDelta | UsageChunk
              | ReasoningChunk | AudioChunk | ToolResultChunk | ResponseInfo)


class ModelError(Exception):
    """A model call failed for good (after any retries the adapter makes).

    ``code``: one of :data:`dormant.errors.MODEL_ERROR_CODES` (``rate_limited``,
    ``context_overflow``…) or ``model_error``; a turn that fails on it answers with that code
    and ``retryable`` (REST ``error.code``, AG-UI ``RUN_ERROR.code``), a 502. A code of a
    model's own is recorded in the ledger as given and answered as ``model_error``."""

    def __init__(self, message: str, *, code: str = "model_error", status: int | None = None,
                 retryable: bool = True):
        super().__init__(message)
        self.code = code
        self.status = status
        #: Whether calling again can succeed (a 4xx from the provider usually cannot).
        self.retryable = retryable


@runtime_checkable
class Model(Protocol):
    """What serves an agent: anything with ``stream(request, *, signal)``.

    ``stream`` is called once per step of a turn with a :class:`ModelRequest` (``system``
    prompts, ``tools`` as :class:`ToolSpec` with JSON Schema ``parameters``, ``messages``: the
    conversation as :class:`UserMessage` / :class:`AssistantMessage` / :class:`ToolMessage`,
    ``step``: 1 for the turn's first call, ``settings``) and returns an iterator of chunks:
    :class:`TextDelta` (streamed text, shown to clients as it arrives), :class:`ThoughtDelta`
    (reasoning, streamed but not kept), :class:`ToolCallChunk` (one whole tool call; an empty
    ``call_id`` lets the runtime derive a stable one; ``provider_executed`` for one the
    provider ran, whose :class:`ToolResultChunk` follows), optionally one :class:`UsageChunk`
    and one :class:`ResponseInfo` (the response's id, model and finish reason, for traces),
    and for a model that speaks, :class:`AudioChunk` (streamed, not kept; its transcript comes
    as text). A model with a true ``realtime`` attribute makes its agents yield for the next
    message by default (``yields=None``).
    A step that yields tool calls is followed by another step with their results; a step with
    text only ends the turn. ``signal`` is set when the turn is stopped or cut short: a slow
    model waits on it (``signal.wait(seconds)``) and returns early. Raise :class:`ModelError`
    for a failed call (``retryable`` says whether the same call can succeed later).

    Optional attributes name it in traces and the price table: ``provider`` (``openai``,
    ``aws.bedrock``, …) and ``model`` (see :func:`identify`).

    The models that ship: ``OpenAIModel`` (and compatible servers), ``OpenAIRealtimeModel``
    (the Realtime API, text and audio), ``BedrockModel`` (Amazon Bedrock's Converse API,
    through boto3), ``ScriptedModel`` (plays
    back replies, for tests and demos) and ``RuleModel`` (rules instead of a network, to run
    your own agent locally with no key).
    """

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[ModelChunk]: ...


def identify(model: object) -> tuple[str, str]:
    """A model's provider and name, for traces and the price table: its ``provider``
    attribute (the conventions' ``gen_ai.provider.name``: ``openai``, ``aws.bedrock``, …;
    "" if it has none) and its ``model`` or ``model_id`` (else its class name)."""
    provider = getattr(model, "provider", "")
    name = getattr(model, "model", None) or getattr(model, "model_id", None)
    return (provider if isinstance(provider, str) else "",
            name if isinstance(name, str) else type(model).__name__)
