"""What a request brings: the inputs of one turn, as wire types (no result types here, so
the rooms that decide what an input does need nothing above them)."""

from __future__ import annotations

import base64
import binascii
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator
from pydantic.alias_generators import to_camel

__all__ = [
    "AUDIO_FORMATS",
    "AppEventInput",
    "ApprovalDecision",
    "AudioFormat",
    "AudioInput",
    "ClientContext",
    "ClientTool",
    "CommitStatus",
    "Delegated",
    "HandlerInput",
    "IfBusy",
    "Input",
    "InputAnswer",
    "InterruptRequest",
    "QueueOp",
    "QueuedRef",
    "ResponseOptions",
    "RetryRequest",
    "SeedRequest",
    "SteerRequest",
    "StopRequest",
    "TimerRef",
    "ToolAnswer",
    "ToolResultInput",
    "TurnStatus",
    "landed",
    "message_text",
]

CommitStatus = Literal["committed", "merged", "superseded", "failed"]


def landed(commit_status: CommitStatus | None, version: int | None) -> bool:
    """Whether a turn with this outcome put its input in the session (a superseded turn
    did when its ran tools were kept: then it carries the version it wrote)."""
    return commit_status in ("committed", "merged") or (
        commit_status == "superseded" and version is not None)


class _In(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid",
                              defer_build=True)


class ToolAnswer(_In):
    """The answer to one yielded call: ``{call_id, input}``.

    ``input`` is required: an entry without it is refused as invalid before anything is
    read or written, so a client's bug cannot use up the question. An explicit ``None`` is
    an answer here (trusted code may give up on a call that way, and an AG-UI ``cancelled``
    resume does: the tool's ``yield_schema`` refuses it and the model reads ``Invalid
    input``); the public HTTP API refuses it too (``dormant.http.CallAnswer``)."""

    call_id: str = Field(min_length=1)
    input: Any = Field(description="The answer (JSON), validated against the tool's "
                                    "yield_schema when the run resumes.")


class ApprovalDecision(_In):
    """A decision on one pending approval request. ``approved`` is a JSON boolean and nothing
    else: a gate on a side effect must not read ``"yes"``, ``"on"``, ``"1"`` or ``1`` as
    consent (pydantic's lax mode would), so any other value is refused before anything is
    written."""

    approval_id: str = Field(min_length=1)
    approved: StrictBool
    reason: str | None = None


class RetryRequest(_In):
    """Rerun the failed invocation's failed model call: ``{"retry_id": ...}``. A fresh id
    per retry; resending one id lands once."""

    retry_id: str = Field(min_length=1, max_length=128)


class StopRequest(_In):
    """Stop the running (or waiting) invocation ``invocation_id``; ``seen``: how many of its
    stream events the client had received (the frontier its rendering shows)."""

    invocation_id: str = Field(min_length=1, max_length=128)
    seen: int | None = Field(default=None, ge=0)


class SteerRequest(_In):
    """Give the running invocation a message it takes at its next step boundary."""

    text: str = Field(min_length=1)
    invocation_id: str = Field(min_length=1, max_length=128)
    id: str | None = Field(default=None, min_length=1, max_length=128)


class InterruptRequest(_In):
    """End a waiting or failed response; ``owner`` is exactly one id: a pending call,
    approval or input id, or the failed invocation's id."""

    owner: str = Field(min_length=1, max_length=128)


class QueueOp(_In):
    """One inbox operation: ``edit`` (``text``), ``move`` (``position``), ``remove``,
    ``send_now``, on the queued message ``id``."""

    op: Literal["edit", "move", "remove", "send_now"]
    id: str = Field(min_length=1, max_length=128)
    text: str | None = Field(default=None, min_length=1)
    position: int | None = Field(default=None, ge=0)


class InputAnswer(_In):
    """The response to an input request."""

    input_id: str = Field(min_length=1, max_length=128)
    value: Any = None


class SeedRequest(_In):
    """A passive message: added to the conversation, no turn started (``role`` other than
    ``user`` is for trusted server code)."""

    text: str = Field(min_length=1)
    role: Literal["user", "system"] = "user"
    id: str | None = Field(default=None, min_length=1, max_length=128)


#: What a message does when the session cannot take it now (it waits on a call, failed, or is
#: paused): queue it in the inbox (the default), refuse it, or end what the session waits on.
IfBusy = Literal["queue", "reject", "interrupt"]

#: The audio formats a voice request may carry (what the transcription APIs read).
AudioFormat = Literal["wav", "mp3", "ogg", "webm", "flac", "m4a"]
AUDIO_FORMATS: tuple[str, ...] = ("wav", "mp3", "ogg", "webm", "flac", "m4a")


class AudioInput(_In):
    """Spoken input for ``app.handler.voice``: ``{"data": bytes or base64 text, "format"}``.

    Only the voice handler takes it (it transcribes it into the turn's message); the audio
    itself is never stored."""

    data: bytes = Field(min_length=1, description="The audio: bytes, or base64 text.")
    format: AudioFormat = Field(description="The container/codec of ``data``.")

    @field_validator("data", mode="before")
    @classmethod
    def _decoded(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError) as error:
                raise ValueError("audio data given as text must be base64") from error
        return value

    @model_validator(mode="after")
    def _is_its_format(self) -> AudioInput:
        """Bytes that cannot be ``format`` (the first bytes every such file starts with) are
        the caller's mistake, told as one, not sent on to a transcriber that would fail."""
        if not _looks_like(self.format, self.data):
            raise ValueError(f"audio data is not {self.format} audio: it does not start as "
                             f"{self.format} audio does")
        return self


def _looks_like(format: str, data: bytes) -> bool:
    """Whether ``data`` starts as a ``format`` file does (a signature check, not a decode)."""
    if format == "wav":
        return data[:4] in (b"RIFF", b"RF64") and data[8:12] == b"WAVE"
    if format == "mp3":  # an ID3 tag, or an MPEG audio frame's sync bits
        return data[:3] == b"ID3" or (len(data) > 1 and data[0] == 0xFF
                                       and data[1] & 0xE0 == 0xE0)
    if format == "ogg":
        return data[:4] == b"OggS"
    if format == "webm":  # an EBML header
        return data[:4] == b"\x1a\x45\xdf\xa3"
    if format == "flac":
        return data[:4] == b"fLaC" or data[:3] == b"ID3"
    return data[4:8] == b"ftyp"  # m4a: an ISO base media file


class AppEventInput(_In):
    """An application event from trusted server code: ``{name, data, id?}``, validated
    against the schema ``app.event(name, schema)`` declared. ``id`` lands once per session.
    Public clients cannot send it (422 ``server_only``)."""

    name: str = Field(min_length=1, max_length=200)
    data: Any = None
    id: str | None = Field(default=None, min_length=1, max_length=128)


class Delegated(_In):
    """Whose child a new session is (``Agent.as_delegate``), from trusted server code: the
    parent's ``session`` and ``call_id`` (the call the child's end answers) and the ``agent``
    that runs it. Public clients cannot send it (422 ``server_only``)."""

    session: str = Field(min_length=1, max_length=128)
    call_id: str = Field(min_length=1, max_length=128)
    agent: str = Field(min_length=1, max_length=128)


class ToolResultInput(_In):
    """The result of a deferred call, from trusted server code: ``{call_id, result,
    is_error}``. ``is_error``: ``result`` is the error the model reads (text, or JSON that is
    turned into text). Public clients cannot send it (422 ``server_only``)."""

    call_id: str = Field(min_length=1, max_length=128)
    result: Any = None
    is_error: bool = False


#: What every model provider accepts as a tool name (OpenAI's and Bedrock's rule alike): the
#: one statement of it (``dormant.tools.TOOL_NAME`` compiles it).
TOOL_NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"
#: A character no tool name may hold.
NOT_IN_TOOL_NAME = r"[^a-zA-Z0-9_-]"


class ClientTool(_In):
    """A tool the client offers for one run (an AG-UI front-end tool: a CopilotKit frontend
    action): ``{name, description, parameters}`` (``parameters``: the arguments' JSON Schema).
    The model may call it beside the agent's own tools; the call parks the session as a yield
    the client answers (its ``tool`` message, or an answer by call id), and the answer is the
    call's result."""

    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str = Field(default="", max_length=10_000)
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}})


class ClientContext(_In):
    """A piece of context the client gives a run (AG-UI ``context``: ``{description,
    value}``). The model reads it through the agent's context recipe (see
    ``app.context.client``)."""

    description: str = Field(max_length=10_000)
    value: str = Field(max_length=100_000)


class TimerRef(_In):
    """Which timer firing a wake request delivers (server-only: never from a public body)."""

    name: str = Field(min_length=1)
    fire_at: int


def message_text(value: str | None) -> str | None:
    """A request's message, refused when it is whitespace only: a model provider may refuse
    a blank message (Bedrock does), and a turn on one says nothing. Checked at the boundary
    (``Input``, the HTTP body), before anything is written."""
    if value is not None and not value.strip():
        raise ValueError("a message must have text in it, not only whitespace")
    return value


class Input(_In):
    """What a request brings: a message, answers to yields, decisions, state.

    ``initial_state``, ``timer`` and ``tool_results`` are for trusted server code; the HTTP
    and AG-UI APIs refuse them."""

    message: str | None = Field(default=None, min_length=1)
    message_id: str | None = Field(default=None, min_length=1, max_length=128)
    tools: list[ToolAnswer] | None = None
    approvals: list[ApprovalDecision] | None = None
    state: dict[str, Any] | None = None
    initial_state: dict[str, Any] | None = None
    timer: TimerRef | None = None
    retry: RetryRequest | None = None
    stop: StopRequest | None = None
    steer: SteerRequest | None = None
    pause: bool | None = None
    resume: bool | None = None
    interrupt: InterruptRequest | None = None
    queue: list[QueueOp] | None = None
    inputs: list[InputAnswer] | None = None
    seed: SeedRequest | None = None
    #: Results of deferred calls (trusted server code only; public requests are refused).
    tool_results: list[ToolResultInput] | None = None
    #: Application events (trusted server code only; public requests are refused).
    events: list[AppEventInput] | None = None
    #: The session is a delegated call's child: its parent, recorded when the request creates
    #: it (trusted server code only; public requests are refused).
    delegated: Delegated | None = None
    #: Audio to transcribe into ``message`` (``app.handler.voice`` only; other handlers
    #: refuse it).
    audio: AudioInput | None = None
    #: The message is the transcript of audio (set by the voice handler): its ``user`` event
    #: records ``audio=True``.
    spoken: bool | None = None
    #: What a message does when the session cannot take it now (it waits, failed, or is
    #: paused): ``queue`` (default: the inbox), ``reject`` (409), ``interrupt`` (end the
    #: waiting response and run this message).
    if_busy: IfBusy | None = None
    #: Tools the client offers this run (AG-UI front-end tools). Not kept: each request
    #: offers its own; a call already parked on one is answered by call id.
    client_tools: list[ClientTool] | None = Field(default=None, max_length=128)
    #: Context the client gives this run (AG-UI ``context``); not kept either.
    context: list[ClientContext] | None = Field(default=None, max_length=128)

    @field_validator("client_tools")
    @classmethod
    def _one_of_each(cls, tools: list[ClientTool] | None) -> list[ClientTool] | None:
        names = [tool.name for tool in tools or ()]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"two client tools are named {twice[0]!r}")
        return tools

    @field_validator("message")
    @classmethod
    def _message_has_text(cls, value: str | None) -> str | None:
        return message_text(value)


class HandlerInput(_In):
    """One request: ``session_id`` (minted when absent) and its ``input``.

    ``principal`` scopes the request: the session's owner must be that principal (a session
    with no owner is reachable by no principal; ``None`` is trusted server code, unscoped). A
    new session is created owned by it. ``public`` marks a request from a public client (the
    HTTP and AG-UI layers set it): its ``state`` may change only the handler's
    ``client_state`` keys, and server-only inputs are refused. Both are server-side only:
    HTTP layers set them from the authorizer and the route, never from the body.
    """

    session_id: str | None = None
    input: Input = Field(default_factory=Input)
    principal: str | None = None
    public: bool = False


class ResponseOptions(_In):
    """Opt-in parts of a REST response."""

    events: bool = False
    usage: bool = False
    state: bool = False


class QueuedRef(BaseModel):
    """Where a queued message sits in the inbox."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, defer_build=True)

    id: str
    position: int


#: What a turn request ended as. Beyond a run's own statuses: ``queued`` (the message went to
#: the inbox), ``accepted`` (a stop or steer was written for the invocation running
#: elsewhere: it takes it within a poll interval), ``stopped``, ``paused`` (the session is
#: paused, or will be at the running turn's next step boundary), ``interrupted``,
#: ``recorded`` (inputs recorded with no turn to run: a seed, an inbox edit).
TurnStatus = Literal["completed", "yielded_tool", "yielded_message", "error", "queued",
                     "accepted", "stopped", "paused", "interrupted", "recorded"]
