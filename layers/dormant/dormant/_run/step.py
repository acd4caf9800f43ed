"""One model step's stream, read: :class:`ModelStep` turns each chunk a model streams into the
event the turn yields for it, and the finished stream into the step's ledger events and calls.

Not a generator: the loop that reads the model's stream (the general one's ``_model_step``
or the ordinary turn's flat loop, :mod:`dormant._run.loop`) hands each chunk to
:meth:`ModelStep.take` and yields what comes back, so a chunk's rules live here once and
an event passes through no generator of this room's own.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from dormant._ids import new_id
from dormant._patch import to_json_value
from dormant._run.state import RunState
from dormant._run.tools import Call
from dormant._timing import CallRecorder
from dormant.events import (
    NO_USAGE,
    AssistantDelta,
    AssistantEvent,
    AudioDelta,
    Event,
    ModelEnd,
    ReasoningEvent,
    StreamEvent,
    ToolCall,
    ToolResult,
    Usage,
)
from dormant.events import ThoughtDelta as ThoughtDeltaEvent
from dormant.models._base import (
    AudioChunk,
    Model,
    ModelError,
    ModelRequest,
    ReasoningChunk,
    ResponseInfo,
    TextDelta,
    ThoughtDelta,
    ToolCallChunk,
    ToolCallDelta,
    ToolResultChunk,
    UsageChunk,
    identify,
)
from dormant.tools import Aborted

__all__ = ["ModelStep", "counts", "derive_call_id"]


class ModelStep:
    """What one model call has streamed so far, and what it comes to.

    Made as the call starts (it mints the step's reply id and starts the call's timing);
    :meth:`take` each chunk; :meth:`failed` if the stream raised; else :meth:`ended` (the
    ``model_end`` event), then :meth:`settled` (the ledger events the step adds, in order)."""

    __slots__ = ("calls", "parts", "provided", "provider", "reasoning", "reply_id", "run",
                 "step", "thought_id", "timed", "usage")

    def __init__(self, run: RunState, step: int, model: Model, request: ModelRequest) -> None:
        self.run = run
        self.step = step
        self.reply_id = new_id("evt")
        self.thought_id = new_id("thought")
        run.deltas = []
        run.deltas_id = self.reply_id
        run.drafts = {}
        self.parts: list[str] = []
        self.calls: list[Call] = []
        self.provided: dict[str, ToolResultChunk] = {}
        self.reasoning: list[dict[str, Any]] = []
        self.provider = ""
        self.usage = NO_USAGE
        self.timed = _timed(run, model, step, request)

    def take(self, chunk: Any) -> StreamEvent | None:
        """One chunk of the model's stream: the stream event it makes (None: none)."""
        run = self.run
        if run.signal.aborted:
            raise Aborted("the turn was aborted")
        timed = self.timed
        if timed is not None and timed.first is None:
            timed.chunk()
        if isinstance(chunk, TextDelta):
            if chunk.text:
                self.parts.append(chunk.text)
                delta = AssistantDelta(invocation_id=run.invocation_id,
                                       message_id=self.reply_id, delta=chunk.text,
                                       scope=run.scope)
                run.deltas.append(delta)
                return delta
        elif isinstance(chunk, ToolCallChunk):
            _drafted(run, chunk)
            self.calls.append(_parse_call(chunk))
        elif isinstance(chunk, UsageChunk):
            if counts(chunk.usage):
                self.usage = self.usage + chunk.usage
        elif isinstance(chunk, ThoughtDelta):
            return ThoughtDeltaEvent(invocation_id=run.invocation_id,
                                     message_id=self.thought_id, delta=chunk.text,
                                     scope=run.scope)
        elif isinstance(chunk, AudioChunk):
            if chunk.data:  # stream-only: the ledger keeps the transcript, not the audio
                return AudioDelta(invocation_id=run.invocation_id, message_id=self.reply_id,
                                  data=base64.b64encode(chunk.data).decode("ascii"),
                                  format=chunk.format, rate=chunk.rate, scope=run.scope)
        elif isinstance(chunk, ToolCallDelta):
            _draft(run, chunk)
        elif isinstance(chunk, ToolResultChunk):
            self.provided[chunk.call_id] = chunk
        elif isinstance(chunk, ReasoningChunk):
            self.reasoning.append(chunk.item)
            self.provider = chunk.provider
        elif isinstance(chunk, ResponseInfo) and timed is not None:
            timed.response(model=chunk.model, response_id=chunk.response_id,
                           finish_reason=chunk.finish_reason)
        return None

    def failed(self, error: BaseException) -> None:
        """The stream raised ``error``: the call's timing ends with it."""
        if self.timed is not None:
            self.timed.end(self.usage, error=_error_code(self.run, error))

    def ended(self) -> ModelEnd:
        """The stream finished: its ``model_end`` (the turn's usage counts the call's)."""
        run = self.run
        if run.signal.aborted:  # the model stopped early because the turn was stopped
            raise Aborted("the turn was aborted")
        usage = self.usage
        timed = self.timed
        if timed is not None:
            if timed.recorder.content:  # (before the end: an ended span takes no more)
                from dormant._run.content import output_content  # (content capture only)

                timed.content(output_content(self.text, self.calls, timed.finish_reason))
            usage = timed.end(usage)
        if counts(usage):
            run.usage = run.usage + usage
        run.deltas = []
        run.drafts = {}
        return ModelEnd(invocation_id=run.invocation_id, step=self.step, usage=usage,
                        scope=run.scope)

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def settled(self) -> tuple[list[Event], list[Call]]:
        """The ledger events the finished step adds (its reasoning, its text, its calls,
        the results its provider ran), for the caller to emit in order; and the calls the
        tool phase runs."""
        run = self.run
        invocation_id = run.invocation_id
        events: list[Event] = []
        if self.reasoning:
            events.append(ReasoningEvent(invocation_id=invocation_id, items=self.reasoning,
                                         provider=self.provider))
        text = self.text
        if text:
            run.said.append(text)
            events.append(AssistantEvent(id=self.reply_id, invocation_id=invocation_id,
                                         text=text))
        calls = self.calls
        if not calls:
            return events, calls
        position = run.session.head.calls
        tools = run.agent.toolset().tools
        ran_there: list[tuple[Call, ToolResultChunk]] = []
        for index, call in enumerate(calls):
            if not call.call_id:
                call.call_id = derive_call_id(invocation_id, position, index)
            if call.provider_executed:
                result = self.provided.get(call.call_id)
                if result is not None:
                    ran_there.append((call, result))
                else:
                    _unprovided(run, call)
            tool = tools.get(call.name)
            call.dynamic = tool is None and call.name in run.client_tools \
                and not call.provider_executed
            events.append(ToolCall(invocation_id=invocation_id, call_id=call.call_id,
                                   name=call.name, args=call.args, dynamic=call.dynamic,
                                   provider_executed=call.provider_executed,
                                   provider_metadata=call.provider_metadata,
                                   tool_metadata=tool.metadata if tool is not None else None))
        # The provider's results land with the calls, before any tool of the step runs (or
        # is written ahead): those calls are settled, and the step's join waits only for
        # the rest.
        events.extend(_provider_result(run, call, result) for call, result in ran_there)
        return events, [call for call in calls if all(call is not done for done, _ in ran_there)]


def _timed(run: RunState, model: Model, step: int, request: ModelRequest
           ) -> CallRecorder | None:
    """The step's model call, timed (None: the turn has no recorder)."""
    recorder = run.recorder
    if recorder is None:
        return None
    provider, name = identify(model)
    timed = recorder.call(step, provider=provider, model=name)
    if recorder.content:
        from dormant._run.content import request_content  # (content capture only)

        timed.content(request_content(request))
    return timed


def _error_code(run: RunState, error: BaseException) -> str:
    """A failed model call's code, as its timing and span keep it."""
    if isinstance(error, ModelError):
        return error.code
    if isinstance(error, Aborted):
        signal = run.signal
        return "stopped" if signal.stopped else "deadline" if signal.expired else "aborted"
    return type(error).__name__


def _unprovided(run: RunState, call: Call) -> None:
    """A call the provider ran whose result did not come in the response: it waits as a
    deferred call when the agent declares a deferred tool of its name (trusted code supplies
    the result), else its result is an error the model reads on the next step."""
    tool = run.agent.toolset().tools.get(call.name)
    if tool is None or not tool.deferred:
        call.error = (f"{call.name} ran on the model's provider, but its result did not come "
                      "in the response")


def _provider_result(run: RunState, call: Call, result: ToolResultChunk) -> ToolResult:
    """A provider-executed call's ``tool_result``, as the provider returned it."""
    metadata = to_json_value(result.provider_metadata) if result.provider_metadata else None
    if result.is_error:
        return ToolResult(invocation_id=run.invocation_id, call_id=call.call_id,
                          name=call.name, error=str(result.result) or "(no output)",
                          provider_executed=True, provider_metadata=metadata)
    return ToolResult(invocation_id=run.invocation_id, call_id=call.call_id, name=call.name,
                      result=to_json_value(result.result), provider_executed=True,
                      provider_metadata=metadata)


def derive_call_id(invocation_id: str | None, position: int, index: int) -> str:
    """A call id from where the call sits: the invocation, the number of calls the invocation
    made before this step (``position``) and its index in the step. A rerun of the same step
    (a retry resent, a redelivered message: same invocation, same committed calls) gets the
    same ids, so side effects keyed by call id run once."""
    seed = f"{invocation_id}|{position}|{index}".encode()
    return "call_" + hashlib.blake2b(seed, digest_size=8).hexdigest()


def _draft(run: RunState, chunk: ToolCallDelta) -> None:
    """A fragment of a call still streaming: kept until its whole call arrives."""
    draft = run.drafts.setdefault(chunk.index, {"call_id": "", "name": "", "args": []})
    draft["call_id"] = draft["call_id"] or chunk.call_id
    draft["name"] = draft["name"] or chunk.name
    if chunk.args:
        draft["args"].append(chunk.args)


def _drafted(run: RunState, chunk: ToolCallChunk) -> None:
    """A whole call arrived: its draft (same call id, else the oldest) is no draft now."""
    drafts = run.drafts
    if not drafts:
        return
    index = next((i for i, d in drafts.items() if chunk.call_id and d["call_id"] == chunk.call_id),
                 next(iter(drafts)))
    del drafts[index]


def _parse_call(chunk: ToolCallChunk) -> Call:
    args = chunk.args
    error: str | None = None
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as bad:
            error = f"Invalid arguments for {chunk.name}: not JSON ({bad.msg})"
    if error is None:
        args = to_json_value(args)
    metadata = to_json_value(chunk.provider_metadata) if chunk.provider_metadata else None
    return Call(chunk.call_id, chunk.name, args, error=error,
                provider_executed=chunk.provider_executed, provider_metadata=metadata)


def counts(usage: Usage) -> bool:
    """Whether ``usage`` counts anything (a model that reports none adds nothing)."""
    return bool(usage.input_tokens or usage.output_tokens or usage.cached_tokens)
