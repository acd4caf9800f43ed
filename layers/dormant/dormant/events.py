"""The ledger: every event a session records, and the stream-only events a turn emits.

Event tags (the ``type`` field) and field names are a permanent wire format: ledgers written
by any released version must keep loading (see ``tests/fixtures/ledger/``). Add new event
types and new optional fields; never rename or repurpose one.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Discriminator, Field, TypeAdapter
from pydantic.alias_generators import to_camel

from dormant._ids import new_id, now_ms

__all__ = [
    "LEDGER_FORMAT", "STREAM_ONLY_TYPES", "AppEvent", "ApprovalDecided", "ApprovalRequested",
    "AssistantDelta", "AssistantEvent", "AudioDelta", "CallTiming", "CompactionEvent", "ErrorEvent",
    "Event", "HandoffEvent", "InputRequested", "InputResponse", "InterruptEvent", "InvocationEnd",
    "InvocationFailed", "InvocationResume", "InvocationStart", "InvocationYield", "ModelEnd",
    "ModelStart", "PauseEvent", "PhaseTiming", "QueueEdit", "QueueMove", "QueueRemove",
    "QueueSendNow", "QueuedEvent", "ReasoningEvent", "ResumeEvent", "RetryEvent", "Scope",
    "SeedEvent", "SpanRef", "StateDelta", "SteerEvent", "StopRequested", "StreamEvent",
    "ThoughtDelta", "TimerCancelled", "TimerFired", "TimerSet", "ToolCall", "ToolCallDraft",
    "ToolDeferred", "ToolInput", "ToolResult", "ToolTiming", "ToolYield", "TurnTiming", "Usage",
    "UserEvent", "dump_events", "dump_ledger", "load_event", "load_events", "load_ledger",
]

#: Version of the stored ledger format. Bump it only with a loader for the older format.
LEDGER_FORMAT = 1


class Usage(BaseModel):
    """Token usage of one model call, or summed over a turn (camelCase in REST bodies)."""

    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    input_tokens: int = Field(default=0, description="Tokens read, the cached ones included.")
    output_tokens: int = Field(default=0, description="Tokens written, reasoning included.")
    cached_tokens: int = Field(default=0, description="Of the input, tokens read from the "
                                                      "provider's prompt cache.")
    reasoning_tokens: int = Field(default=0, description="Of the output, tokens the model "
                                                         "spent reasoning.")
    cost: float | None = Field(
        default=None, description="What the tokens cost, by the app's price table (``App("
                                  "prices=...)``; None: no call it covers had a price).")

    def __add__(self, other: Usage) -> Usage:
        if other is NO_USAGE and self.cost is None:  # (a call that reported nothing)
            return self
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            cost=sum_cost(self.cost, other.cost),
        )


def sum_cost(a: float | None, b: float | None) -> float | None:
    """Two costs summed (None: neither had a price), rounded off to ten places."""
    cost = a if b is None else b if a is None else a + b
    return None if cost is None else round(cost, 10)


#: No tokens (frozen: one instance serves every default).
NO_USAGE = Usage()

class SpanRef(BaseModel):
    """An OpenTelemetry span, by its W3C ids (hex): what a later span links to."""

    model_config = ConfigDict(frozen=True)

    trace_id: str = Field(description="32 hex digits.")
    span_id: str = Field(description="16 hex digits.")


class PhaseTiming(BaseModel):
    """A store phase of a request: ``load`` (the session read), ``claim`` (the write that
    lands before anything runs), ``write_ahead`` (a step's calls written before its tools
    run). ``requests`` and ``capacity`` (DynamoDB's consumed capacity units) when the store
    reports them."""

    model_config = ConfigDict(frozen=True)

    name: str
    start_ms: int = Field(description="Milliseconds from the request's start.")
    duration_ms: int
    requests: int | None = None
    capacity: float | None = None


class CallTiming(BaseModel):
    """One model call: when it started (from the request's start), how long until its first
    chunk and its end, what it used and cost, and what the provider said of it."""

    model_config = ConfigDict(frozen=True)

    step: int
    provider: str = ""
    model: str = Field(default="", description="The model the request named.")
    response_model: str | None = None
    response_id: str | None = None
    finish_reason: str | None = None
    start_ms: int
    first_token_ms: int | None = Field(
        default=None, description="Milliseconds from the call's start to its first chunk.")
    duration_ms: int
    usage: Usage = NO_USAGE
    error: str | None = Field(default=None, description="The code of a call that failed.")


class ToolTiming(BaseModel):
    """One tool call's run: when it started, how long it took, what came of it (``result``,
    ``error``, ``yielded``, ``approval``: it waits for a decision, ``denied``,
    ``deferred``)."""

    model_config = ConfigDict(frozen=True)

    call_id: str
    name: str
    start_ms: int
    duration_ms: int
    outcome: str = "result"
    error_type: str | None = None


class TurnTiming(BaseModel):
    """What one request's turn took, kept on the event that ends it (``invocation_end``,
    ``invocation_yield``, ``invocation_failed``, a ``pause`` at a step boundary): its store
    phases, each model call and tool, the tokens and cost, and its trace span (when
    OpenTelemetry traced it: a later request that carries the invocation on links to it).
    The commit comes after ``elapsed_ms``; its own time is in the trace."""

    model_config = ConfigDict(frozen=True)

    started: int = Field(description="When the request began, epoch milliseconds.")
    elapsed_ms: int = Field(description="Milliseconds from the request's start to this event.")
    phases: list[PhaseTiming] = Field(default_factory=list)
    model_calls: list[CallTiming] = Field(default_factory=list)
    tools: list[ToolTiming] = Field(default_factory=list)
    usage: Usage = NO_USAGE
    span: SpanRef | None = None



class Scope(BaseModel):
    """Where a sub-agent's event belongs: the agent that wrote it and the parent's call it
    runs for (an agent used as a tool, ``Agent.as_tool``). ``path`` names the agents from
    the session's agent down to this one (``"concierge/billing"``)."""

    model_config = ConfigDict(frozen=True)

    agent: str = Field(description="The sub-agent that wrote the event.")
    call_id: str = Field(description="The parent's tool call the sub-agent runs for.")
    path: str = Field(description="The agents from the session's down to this one, "
                                  "joined by ``/``.")


def _unscoped(scope: Scope | None) -> bool:
    return scope is None


def _absent(value: object) -> bool:
    return value is None


class _Base(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)

    id: str = Field(default_factory=lambda: new_id("evt"), description="Unique event id.")
    invocation_id: str | None = Field(
        default=None, description="The invocation this event belongs to (None for appends)."
    )
    ts: int = Field(default_factory=now_ms, description="Creation time, epoch milliseconds.")
    seq: int | None = Field(
        default=None, exclude=True,
        description="1-based position in the stream of its invocation (stream events only; "
                    "never stored). A stop's ``seen`` counts these.")
    scope: Scope | None = Field(
        default=None, exclude_if=_unscoped,
        description="A sub-agent's event: which agent, for which call of its parent (None, "
                    "and left out of the JSON: the session's own agent).")


class InvocationStart(_Base):
    """An invocation (one agent run, possibly spanning several pauses) begins."""

    type: Literal["invocation_start"] = "invocation_start"
    agent: str = Field(default="", description="Name of the agent that runs the invocation.")


class UserEvent(_Base):
    """A user message."""

    type: Literal["user"] = "user"
    text: str = Field(description="What the user said.")
    message_id: str = Field(
        default_factory=lambda: new_id("msg"),
        description="Stable id of the message; a redelivered message with a known id lands once.",
    )
    steer: bool = Field(
        default=False, description="True when a steer gave it to the running invocation.")
    queued: bool = Field(
        default=False, description="True when it ran from the inbox (its id landed when it "
                                   "was queued).")
    audio: bool = Field(
        default=False, description="True when it was spoken: the voice handler's transcript "
                                   "of audio it heard (the audio itself is not kept).")


class AssistantEvent(_Base):
    """A complete assistant reply (the concatenation of its deltas)."""

    type: Literal["assistant"] = "assistant"
    text: str = Field(description="What the assistant said.")


class ToolCall(_Base):
    """The model asked for a tool."""

    type: Literal["tool_call"] = "tool_call"
    call_id: str = Field(description="Id of the call; the idempotency key for side effects.")
    name: str = Field(description="Tool name as the model gave it.")
    args: Any = Field(default=None, description="Arguments as the model gave them (JSON).")
    dynamic: bool = Field(
        default=False, description="A tool the agent does not define, offered for one run "
                                   "(an AG-UI client's front-end tool): its answer comes from "
                                   "the client that offered it.")
    provider_executed: bool = Field(
        default=False, description="The model's provider ran the tool (a Bedrock server "
                                   "tool): its result comes in the model's response, not "
                                   "from a local run.")
    provider_metadata: dict[str, Any] | None = Field(
        default=None, description="The provider's own fields for the call, as returned (sent "
                                  "back with it where the provider wants them).")
    tool_metadata: dict[str, Any] | None = Field(
        default=None, description="The tool's metadata as its definition declared it.")


class ToolYield(_Base):
    """A yielding tool paused the run and waits for input."""

    type: Literal["tool_yield"] = "tool_yield"
    call_id: str = Field(description="The call that waits; answer it by this id.")
    name: str = Field(description="Tool name.")
    args: Any = Field(default=None, description="What the tool's prepare returned (JSON).")
    input_schema: dict[str, Any] | None = Field(
        default=None,
        description="JSON Schema of the answer the call waits for (its tool's "
                    "``yield_schema``), so a reader of the ledger knows what to send without "
                    "the app's code. None in ledgers written before it was recorded.")


class ToolDeferred(_Base):
    """A deferred tool's call parked the run: its result comes from outside the turn (a
    provider-executed tool, a long job, a callback), supplied by trusted code as a
    ``tool_result`` with ``deferred=True``."""

    type: Literal["tool_deferred"] = "tool_deferred"
    call_id: str = Field(description="The call that waits; supply its result by this id.")
    name: str = Field(description="Tool name.")
    args: Any = Field(default=None, description="The validated arguments (JSON).")
    delegate: str | None = Field(
        default=None, exclude_if=_absent,
        description="A delegation's call (``Agent.as_delegate``): the child session that "
                    "runs it, whose end supplies the result (None, and left out of the JSON: "
                    "an ordinary deferred call).")


class ToolCallDraft(_Base):
    """A tool call whose arguments were still streaming when the invocation was stopped: it
    never became a call (no ``tool_call``), but the text the model had streamed is kept here.
    Not part of the conversation: no model prompt includes it."""

    type: Literal["tool_call_draft"] = "tool_call_draft"
    call_id: str | None = Field(default=None, description="The call id the model had given "
                                                          "it, if any.")
    name: str = Field(default="", description="Tool name, as far as it had streamed.")
    args_text: str = Field(default="", description="The argument text streamed so far.")


class InvocationYield(_Base):
    """The invocation parked: it waits for tool input or for the next user message."""

    type: Literal["invocation_yield"] = "invocation_yield"
    reason: Literal["tool", "message"] = Field(description="What the invocation waits for.")
    timing: TurnTiming | None = Field(
        default=None, description="What the request's turn took (None: not recorded).")


class ToolInput(_Base):
    """The answer to a yielded call arrived (validated only when the run resumes)."""

    type: Literal["tool_input"] = "tool_input"
    call_id: str = Field(description="The yielded call this answers.")
    input: Any = Field(default=None, description="The answer, as supplied (JSON).")


class InvocationResume(_Base):
    """A parked invocation reopens."""

    type: Literal["invocation_resume"] = "invocation_resume"
    span: SpanRef | None = Field(
        default=None, description="The trace span of the request whose claim reopened it "
                                  "(when OpenTelemetry traced it): a request that takes the "
                                  "invocation over links to it.")


class ToolResult(_Base):
    """The outcome of a tool call: a result or an error the model reads."""

    type: Literal["tool_result"] = "tool_result"
    call_id: str = Field(description="The call this settles.")
    name: str = Field(description="Tool name.")
    result: Any = Field(default=None, description="The tool's return value (JSON).")
    error: str | None = Field(default=None, description="Why the call failed, if it did.")
    denied: bool = Field(default=False, description="True when a human denied the call.")
    preliminary: bool = Field(
        default=False, description="A generator tool's progress output; the call is still "
                                   "running and its final result follows.")
    deferred: bool = Field(
        default=False, description="Supplied from outside the turn by trusted code, for a "
                                   "deferred call (``tool_deferred``) that waits for it.")
    provider_executed: bool = Field(
        default=False, description="The model's provider ran the call and returned this in "
                                   "its response.")
    provider_metadata: dict[str, Any] | None = Field(
        default=None, description="The provider's own fields for the result, as returned.")


class ApprovalRequested(_Base):
    """A call under a ``"user-approval"`` policy waits for a human decision instead of running."""

    type: Literal["approval_requested"] = "approval_requested"
    approval_id: str = Field(description="Id of this request: decide it by this id, once.")
    call_id: str = Field(description="The call it would authorise (one call, one model step).")
    name: str = Field(description="Tool name.")
    args: Any = Field(default=None, description="The validated arguments (JSON).")


class ApprovalDecided(_Base):
    """A human approved or denied a pending approval request."""

    type: Literal["approval_decided"] = "approval_decided"
    approval_id: str = Field(description="The request decided.")
    call_id: str = Field(default="", description="The call it authorises or refuses.")
    approved: bool = Field(description="True: the tool runs. False: the model reads a denial.")
    reason: str | None = Field(default=None, description="Why (shown to the model on denial).")


class TimerSet(_Base):
    """A timer asked for by this turn (it takes effect only if the turn commits).

    Setting a name again replaces that timer: a retried turn converges on one timer."""

    type: Literal["timer_set"] = "timer_set"
    name: str = Field(description="The timer's name, unique within the session.")
    fire_at: int = Field(description="When it fires, epoch milliseconds.")
    message: str | None = Field(default=None, description="A user message it delivers...")
    message_id: str | None = Field(
        default=None, description="...with this stable id, so a redelivery lands once.")
    tool_input: dict[str, Any] | None = Field(
        default=None, description="...or an answer it delivers: {call_id, input}.")


class TimerCancelled(_Base):
    """A timer cancelled by this turn."""

    type: Literal["timer_cancelled"] = "timer_cancelled"
    name: str = Field(description="The timer cancelled.")


class TimerFired(_Base):
    """A timer was delivered (what it delivers follows: a user message or a tool input)."""

    type: Literal["timer_fired"] = "timer_fired"
    name: str = Field(description="The timer delivered.")
    fire_at: int = Field(description="The firing it delivers (a stale one is refused).")


class StateDelta(_Base):
    """A change to the session state, as an RFC 6902 JSON Patch."""

    type: Literal["state_delta"] = "state_delta"
    patch: list[dict[str, Any]] = Field(description="RFC 6902 operations, applied in order.")


class ErrorEvent(_Base):
    """The run failed in a way the ledger should remember (e.g. the step limit)."""

    type: Literal["error"] = "error"
    message: str = Field(description="Human-readable reason.")
    code: str = Field(default="run_error", description="Stable machine-readable code.")


class InvocationEnd(_Base):
    """The invocation finished; nothing of it is pending."""

    type: Literal["invocation_end"] = "invocation_end"
    status: Literal["completed", "error", "superseded", "stopped", "interrupted"] = Field(
        default="completed",
        description="How the invocation ended (``superseded``: a newer message overtook it "
                    "after its tools ran; what they did is kept, its reply was dropped; "
                    "``stopped``: a stop rewound it to what the client saw; ``interrupted``: "
                    "an interrupt ended it while it waited or had failed).",
    )
    timing: TurnTiming | None = Field(
        default=None, description="What the request's turn took (None: not recorded).")


class InvocationFailed(_Base):
    """The invocation failed after a tool ran: its finished steps are kept, the failed model
    call (or tool phase) is not. The session is ``failed`` until it is retried."""

    type: Literal["invocation_failed"] = "invocation_failed"
    code: str = Field(description="Stable machine-readable reason (model_error, deadline, ...).")
    message: str = Field(description="Human-readable reason.")
    retryable: bool = Field(default=True, description="Whether a retry can succeed.")
    timing: TurnTiming | None = Field(
        default=None, description="What the request's turn took (None: not recorded).")


class RetryEvent(_Base):
    """A retry of the failed invocation: it reopens, and the failed model call runs again."""

    type: Literal["retry"] = "retry"
    retry_id: str = Field(description="Id of this retry: a resent retry lands once.")
    span: SpanRef | None = Field(
        default=None, description="The trace span of the request whose claim reopened it "
                                  "(when OpenTelemetry traced it): a request that takes the "
                                  "invocation over links to it.")


class StopRequested(_Base):
    """A stop took effect: the invocation (``invocation_id``) was rewound to what the client
    had seen and ends ``stopped`` right after."""

    type: Literal["stop_requested"] = "stop_requested"
    seen: int | None = Field(
        default=None, description="Stream events of the invocation the client had received.")
    rev: int = Field(default=0, description="The control record revision it came from.")


class SteerEvent(_Base):
    """A steer was taken by the running invocation at a step boundary; the ``user`` event
    (``steer=True``) with its text follows."""

    type: Literal["steer"] = "steer"
    message_id: str = Field(description="The steer's id (lands once, like a message id).")
    rev: int = Field(default=0, description="The control record revision it came from.")


class PauseEvent(_Base):
    """The session paused: no turn runs, messages and timer deliveries queue in the inbox.
    ``invocation_id`` is the invocation it paused at a step boundary (None: none ran)."""

    type: Literal["pause"] = "pause"
    rev: int = Field(default=0, description="The control record revision it came from "
                                            "(0: applied directly).")
    timing: TurnTiming | None = Field(
        default=None, description="What the request's turn took (None: not recorded).")


class ResumeEvent(_Base):
    """The session resumed: a paused invocation continues, then the inbox drains."""

    type: Literal["resume"] = "resume"
    rev: int = Field(default=0, description="The control record revision it saw: a pause "
                                            "asked at or before it is over.")


class InterruptEvent(_Base):
    """An interrupt ended a waiting or failed response (``owner``: the one id it named)."""

    type: Literal["interrupt"] = "interrupt"
    owner: str = Field(description="The pending call / approval / input id, or the failed "
                                   "invocation id, the interrupt named.")


class QueuedEvent(_Base):
    """A user message that could not run now went to the inbox."""

    type: Literal["queued"] = "queued"
    message_id: str = Field(description="The message id (lands once for the session's life).")
    text: str = Field(description="What the user said.")
    position: int = Field(description="0-based position in the inbox.")
    audio: bool = Field(default=False, description="True when it was spoken (the voice "
                        "handler's transcript): its user event says so when it runs.")


class QueueEdit(_Base):
    """A queued message's text changed."""

    type: Literal["queue_edit"] = "queue_edit"
    message_id: str
    text: str


class QueueMove(_Base):
    """A queued message moved to another position (0-based)."""

    type: Literal["queue_move"] = "queue_move"
    message_id: str
    position: int


class QueueRemove(_Base):
    """A queued message was removed from the inbox (it never runs)."""

    type: Literal["queue_remove"] = "queue_remove"
    message_id: str


class QueueSendNow(_Base):
    """A queued message is to run now: it moves to the front, and the waiting response it
    queued behind is interrupted."""

    type: Literal["queue_send_now"] = "queue_send_now"
    message_id: str


class InputRequested(_Base):
    """Trusted code asked a person for application-defined input; the session waits."""

    type: Literal["input_requested"] = "input_requested"
    input_id: str = Field(description="Answer it by this id, once.")
    input_schema: dict[str, Any] = Field(
        default_factory=dict, description="JSON Schema the answer must fit.")
    prompt: str | None = Field(default=None, description="What to ask the person.")


class InputResponse(_Base):
    """The answer to an input request (validated against its schema)."""

    type: Literal["input_response"] = "input_response"
    input_id: str
    value: Any = None


class SeedEvent(_Base):
    """A passive message: part of the conversation, no turn started for it."""

    type: Literal["seed"] = "seed"
    text: str
    role: Literal["user", "system"] = "user"
    message_id: str = Field(default_factory=lambda: new_id("msg"))


class AppEvent(_Base):
    """An application event: one of the app's own declared event types (``app.event(name,
    schema)``), appended by trusted code and validated against its schema. Not part of the
    conversation: the model sees it only through a context that asks for it
    (``app.context.history(app_events=True)``)."""

    type: Literal["app_event"] = "app_event"
    name: str = Field(description="The declared event type (e.g. ``crm.ticket_updated``).")
    data: Any = Field(default=None, description="The event's data (JSON), as validated.")
    event_id: str | None = Field(
        default=None, description="The id trusted code gave it: an id lands once per session "
                                  "(None: none given, not deduplicated).")


class ReasoningEvent(_Base):
    """A reasoning model's reasoning, kept as the provider returned it (opaque items, with
    their encrypted content when the provider does not store responses), so the next step and
    the next turn hand the model its own chain back. Never shown as chat."""

    type: Literal["reasoning"] = "reasoning"
    items: list[dict[str, Any]] = Field(
        description="The provider's reasoning items, as returned (JSON objects).")
    provider: str = Field(default="openai", description="Whose wire format ``items`` are in.")


class CompactionEvent(_Base):
    """Older conversation folded into a summary. A history that compacts sends the latest
    summary in place of the events before ``tail_start``; nothing is deleted."""

    type: Literal["compaction"] = "compaction"
    summary: str = Field(description="What the conversation before ``tail_start`` came to.")
    tail_start: int = Field(
        description="Ledger position of the first event kept as it is (the summary stands "
                    "for everything before it).")
    covered_from: int = Field(
        default=0, description="Ledger position the summarised part began at (the previous "
                               "compaction's ``tail_start``; its summary was folded in).")
    turns: int = Field(default=0, description="Turns the summary stands for, this time.")
    estimated_tokens: int = Field(
        default=0, description="Estimated tokens of what was summarised (the budget's "
                               "measure).")


class HandoffEvent(_Base):
    """The session's agent handed the conversation to another agent (the model called
    ``transfer_to_<agent>``): the rest of the turn, and later requests, run ``to_agent``
    until it hands back or on."""

    type: Literal["handoff"] = "handoff"
    from_agent: str = Field(description="The agent that handed over.")
    to_agent: str = Field(description="The agent that answers from here on.")
    call_id: str = Field(description="The hand-off tool call (``transfer_to_<agent>``).")
    reason: str | None = Field(default=None, description="Why, as the model said it.")


LedgerEvent = (
    InvocationStart
    | UserEvent
    | AssistantEvent
    | ToolCall
    | ToolYield
    | InvocationYield
    | ToolInput
    | InvocationResume
    | ToolResult
    | StateDelta
    | ErrorEvent
    | InvocationEnd
    | ApprovalRequested
    | ApprovalDecided
    | TimerSet
    | TimerCancelled
    | TimerFired
    | InvocationFailed
    | RetryEvent
    | StopRequested
    | SteerEvent
    | PauseEvent
    | ResumeEvent
    | InterruptEvent
    | QueuedEvent
    | QueueEdit
    | QueueMove
    | QueueRemove
    | QueueSendNow
    | InputRequested
    | InputResponse
    | SeedEvent
    | ReasoningEvent
    | CompactionEvent
    | ToolDeferred
    | ToolCallDraft
    | AppEvent
    | HandoffEvent
)

Event = Annotated[LedgerEvent, Discriminator("type")]
"""A persisted ledger event."""


# --- stream-only events: emitted by a turn, never persisted ---------------------------------


class ModelStart(_Base):
    """A model call begins."""

    type: Literal["model_start"] = "model_start"
    step: int = Field(description="1-based step number within the invocation's turn.")


class AssistantDelta(_Base):
    """A fragment of assistant text as the model streams it."""

    type: Literal["assistant_delta"] = "assistant_delta"
    message_id: str = Field(description="Id of the assistant event this fragment builds.")
    delta: str = Field(description="The new text.")


class ThoughtDelta(_Base):
    """A fragment of the model's reasoning summary."""

    type: Literal["thought_delta"] = "thought_delta"
    message_id: str = Field(description="Groups the fragments of one reasoning block.")
    delta: str = Field(description="The new text.")


class AudioDelta(_Base):
    """A piece of the reply as audio, as a realtime model speaks it (stream-only: the audio is
    never stored; its transcript streams as ``assistant_delta`` and lands as ``assistant``)."""

    type: Literal["audio_delta"] = "audio_delta"
    message_id: str = Field(description="Id of the assistant event whose words this speaks.")
    data: str = Field(description="The audio, base64.")
    format: str = Field(default="pcm16", description="``pcm16``: 16-bit little-endian mono "
                                                     "PCM.")
    rate: int = Field(default=24000, description="Samples a second.")


class ModelEnd(_Base):
    """A model call ended."""

    type: Literal["model_end"] = "model_end"
    step: int = Field(description="1-based step number.")
    usage: Usage = Field(default=NO_USAGE, description="Tokens used by this call.")


StreamEvent = Annotated[
    LedgerEvent | ModelStart | AssistantDelta | ThoughtDelta | AudioDelta | ModelEnd,
    Discriminator("type"),
]
"""Anything a turn stream yields: ledger events and the stream-only ones."""

STREAM_ONLY_TYPES = frozenset({"model_start", "assistant_delta", "thought_delta", "audio_delta",
                               "model_end"})

@functools.cache
def _events() -> TypeAdapter[list[Event]]:
    """Built on first use, not at import (a new session's first turn loads no events)."""
    return TypeAdapter(list[Event])


@functools.cache
def _event() -> TypeAdapter[Event]:
    return TypeAdapter(Event)


@functools.cache
def _classes() -> dict[str, type[BaseModel]]:
    return {cls.model_fields["type"].default: cls for cls in get_args(LedgerEvent)}


def event_class(kind: str) -> type[BaseModel] | None:
    """The ledger event class whose ``type`` is ``kind`` (None: no such event)."""
    return _classes().get(kind)


def load_events(data: Any) -> list[Event]:
    """Validate a JSON-shaped list (or JSON text) into ledger events."""
    if isinstance(data, str | bytes):
        return _events().validate_json(data)
    return _events().validate_python(data)


def load_event(data: Any) -> Event:
    """Validate one JSON-shaped event."""
    if isinstance(data, str | bytes):
        return _event().validate_json(data)
    return _event().validate_python(data)


def dump_events(events: list[Event]) -> list[dict[str, Any]]:
    """The JSON form of ledger events (what stores write)."""
    return [event.model_dump(mode="json") for event in events]


def dump_ledger(events: list[Event]) -> dict[str, Any]:
    """A self-describing stored ledger: ``{"format": LEDGER_FORMAT, "events": [...]}``."""
    return {"format": LEDGER_FORMAT, "events": dump_events(events)}


def load_ledger(data: dict[str, Any]) -> list[Event]:
    """Load a stored ledger written by this or any earlier format version."""
    version = data.get("format")
    if not isinstance(version, int) or not 1 <= version <= LEDGER_FORMAT:
        raise ValueError(
            f"unsupported ledger format {version!r}: this dormant reads formats 1-{LEDGER_FORMAT}"
        )
    return load_events(data["events"])
