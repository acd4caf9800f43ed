"""Translation between dormant's neutral model request/chunks and OpenAI's two wire formats.

Pure functions over plain dicts (requests) and the ``openai`` package's response objects
(read by attribute, so OpenAI-compatible servers that add or omit fields still parse). The
``openai`` import itself stays in :mod:`dormant.models.openai`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

from dormant._ids import new_id
from dormant.events import Usage
from dormant.models._base import (
    AssistantMessage,
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
    ToolSpec,
    UsageChunk,
    UserMessage,
)
from dormant.models._openai_schema import strict_schema

__all__ = [
    "chat_chunks",
    "chat_request",
    "chat_result_chunks",
    "responses_chunks",
    "responses_request",
    "responses_result_chunks",
]


def _arguments(args: Any) -> str:
    """Tool-call arguments as the JSON text both APIs carry (a raw string is kept as is)."""
    return args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)


def _tool_parameters(spec: ToolSpec, strict: bool) -> tuple[dict[str, Any], bool]:
    if strict:
        converted = strict_schema(spec.parameters)
        if converted is not None:
            return converted, True
    return spec.parameters, False


# --- requests ---------------------------------------------------------------------------------


def _ran_there(request: ModelRequest) -> dict[str, str]:
    """The calls another provider ran itself (a Bedrock server tool, in a session that
    switched models) whose result came with them, each as the text that tells it: neither
    API can take such a pair as a function call (no such function, no output of ours), so it
    is told in the text of the assistant message that made it."""
    return {m.call_id: f"[{m.name} ran on the model provider's side and "
                       f"{'failed' if m.is_error else 'returned'}: {m.content}]"
            for m in request.messages if isinstance(m, ToolMessage) and m.provider_executed}


def _split(message: AssistantMessage, ran_there: dict[str, str]
           ) -> tuple[str, list[ToolCallPart]]:
    """An assistant message's text (with its provider-run calls told in it) and its own
    calls."""
    notes = [ran_there[c.call_id] for c in message.tool_calls if c.call_id in ran_there]
    text = "\n".join([message.text, *notes]) if message.text and notes \
        else message.text or "\n".join(notes)
    return text, [c for c in message.tool_calls if c.call_id not in ran_there]


def responses_request(request: ModelRequest, *, strict: bool) -> dict[str, Any]:
    """The Responses API body (without ``model``/``stream``): instructions, input items, tools.

    The whole conversation is sent each call (dormant's ledger is the state; no
    ``previous_response_id``), so a session survives any number of deploys and model swaps.
    An assistant message's reasoning items go back just before it, so a reasoning model keeps
    its chain of thought across tool calls and turns.
    """
    items: list[dict[str, Any]] = []
    ran_there = _ran_there(request)
    for message in request.messages:
        if isinstance(message, UserMessage):
            items.append({"role": message.role, "content": message.text})
        elif isinstance(message, AssistantMessage):
            text, calls = _split(message, ran_there)
            if text or calls:
                # The API rejects a reasoning item that no output item follows, and one with
                # a null field (``"status": null`` as some servers echo it).
                items.extend({key: value for key, value in item.items() if value is not None}
                             for item in message.reasoning
                             if isinstance(item, dict) and item.get("type") == "reasoning")
            if text:
                items.append({"role": "assistant", "content": text})
            items.extend({"type": "function_call", "call_id": call.call_id, "name": call.name,
                          "arguments": _arguments(call.args)} for call in calls)
        elif message.call_id not in ran_there:  # (a provider-run call's: told above)
            items.append({"type": "function_call_output", "call_id": message.call_id,
                          "output": message.content})
    body: dict[str, Any] = {"input": items}
    if request.system:
        body["instructions"] = "\n\n".join(request.system)
    if request.tools:
        tools = []
        for spec in request.tools:
            parameters, is_strict = _tool_parameters(spec, strict)
            tool: dict[str, Any] = {"type": "function", "name": spec.name,
                                    "parameters": parameters, "strict": is_strict}
            if spec.description:
                tool["description"] = spec.description
            tools.append(tool)
        body["tools"] = tools
    return body


def chat_request(request: ModelRequest, *, strict: bool) -> dict[str, Any]:
    """The Chat Completions body (without ``model``/``stream``): messages and tools."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": text}
                                      for text in request.system]
    ran_there = _ran_there(request)
    for message in request.messages:
        if isinstance(message, UserMessage):
            messages.append({"role": message.role, "content": message.text})
        elif isinstance(message, AssistantMessage):
            text, calls = _split(message, ran_there)
            entry: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                entry["tool_calls"] = [
                    {"id": call.call_id, "type": "function",
                     "function": {"name": call.name, "arguments": _arguments(call.args)}}
                    for call in calls
                ]
            elif entry["content"] is None:
                entry["content"] = ""
            messages.append(entry)
        elif message.call_id not in ran_there:  # (a provider-run call's: told above)
            messages.append({"role": "tool", "tool_call_id": message.call_id,
                             "content": message.content})
    body: dict[str, Any] = {"messages": messages}
    if request.tools:
        tools = []
        for spec in request.tools:
            parameters, is_strict = _tool_parameters(spec, strict)
            function: dict[str, Any] = {"name": spec.name, "parameters": parameters,
                                        "strict": is_strict}
            if spec.description:
                function["description"] = spec.description
            tools.append({"type": "function", "function": function})
        body["tools"] = tools
    return body


# --- replies ----------------------------------------------------------------------------------


@dataclass
class _Call:
    """A tool call being assembled from streamed fragments."""

    call_id: str = ""
    name: str = ""
    parts: list[str] = field(default_factory=list)
    final: str | None = None

    def chunk(self) -> ToolCallChunk:
        args = self.final if self.final is not None else "".join(self.parts)
        return ToolCallChunk(call_id=self.call_id or new_id("call"), name=self.name, args=args)


def _usage(usage: Any, inputs: str, outputs: str, api: str) -> Usage | None:
    """Token counts from either API's usage object (they name the same fields differently:
    ``api`` is ``input``/``output`` or ``prompt``/``completion`` in the details' names). Both
    count the cached tokens in the input and the reasoning tokens in the output, as
    :class:`Usage` does."""
    if usage is None:
        return None
    read, written = ("input", "output") if api == "responses" else ("prompt", "completion")
    return Usage(input_tokens=getattr(usage, inputs, 0) or 0,
                 output_tokens=getattr(usage, outputs, 0) or 0,
                 cached_tokens=_detail(usage, f"{read}_tokens_details", "cached_tokens"),
                 reasoning_tokens=_detail(usage, f"{written}_tokens_details",
                                          "reasoning_tokens"))


def _detail(usage: Any, details: str, name: str) -> int:
    count = getattr(getattr(usage, details, None), name, 0)
    return count if isinstance(count, int) else 0


def _usage_of_response(usage: Any) -> Usage | None:
    return _usage(usage, "input_tokens", "output_tokens", "responses")


def _usage_of_chat(usage: Any) -> Usage | None:
    return _usage(usage, "prompt_tokens", "completion_tokens", "chat")


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _info_of_response(response: Any) -> ResponseInfo:
    """A Responses API result's id, model and how it finished: its ``status``, or for an
    incomplete one the reason (``max_output_tokens``, ``content_filter``)."""
    status = _text(getattr(response, "status", None))
    if status == "incomplete":
        status = _text(getattr(getattr(response, "incomplete_details", None), "reason",
                               None)) or status
    return ResponseInfo(model=_text(getattr(response, "model", None)),
                        response_id=_text(getattr(response, "id", None)),
                        finish_reason=status)


def _info_of_chat(reply: Any, finish_reason: Any) -> ResponseInfo:
    """A Chat Completions reply's (or stream chunk's) id and model, and its first choice's
    ``finish_reason`` (``stop``, ``tool_calls``, ``length``, ``content_filter``)."""
    return ResponseInfo(model=_text(getattr(reply, "model", None)),
                        response_id=_text(getattr(reply, "id", None)),
                        finish_reason=_text(finish_reason))


class StreamFailed(ModelError):
    """The API reported a failure inside an otherwise successful stream, or the stream ended
    before its terminal event (code ``stream_incomplete``)."""


def _failure(error: Any, default: str) -> StreamFailed:
    code = str(getattr(error, "code", None) or default)
    message = getattr(error, "message", None) or "the model call failed"
    return StreamFailed(str(message), code=code)


def _incomplete(what: str, events: int) -> StreamFailed:
    return StreamFailed(f"the stream ended {what}, after {events} events",
                        code="stream_incomplete")


def _item(item: Any) -> dict[str, Any]:
    """A response output item as the JSON object the API sent (fields it left out stay
    out), ready to be sent back as an input item."""
    if isinstance(item, dict):
        return dict(item)
    as_dict = getattr(item, "to_dict", None)
    if callable(as_dict):
        return cast(dict[str, Any], as_dict(mode="json"))
    return dict(vars(item))


def responses_chunks(events: Iterable[Any]) -> Iterator[ModelChunk]:
    """Responses API stream events → chunks. Reasoning items and tool calls are collected per
    output item and yielded in output order once the response is complete; a stream that ends
    without ``response.completed`` (or ``response.incomplete``) raises ``stream_incomplete``
    so a cut reply is never taken for a whole one."""
    calls: dict[int, _Call] = {}
    reasoning: dict[int, dict[str, Any]] = {}
    summary_at: tuple[str, int] | None = None
    seen = 0
    ended = False
    for event in events:
        seen += 1
        kind = getattr(event, "type", None)
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            yield TextDelta(event.delta)
        elif kind == "response.reasoning_summary_text.delta":
            part = (event.item_id, event.summary_index)
            if summary_at is not None and summary_at != part:
                yield ThoughtDelta("\n\n")  # a new summary part reads as a new paragraph
            summary_at = part
            yield ThoughtDelta(event.delta)
        elif kind == "response.reasoning_text.delta":
            yield ThoughtDelta(event.delta)
        elif kind in ("response.output_item.added", "response.output_item.done"):
            item = event.item
            if getattr(item, "type", None) == "reasoning":
                if kind == "response.output_item.done":
                    reasoning[event.output_index] = _item(item)
            elif getattr(item, "type", None) == "function_call":
                call = calls.setdefault(event.output_index, _Call())
                call.call_id, call.name = item.call_id, item.name
                if kind == "response.output_item.done":
                    call.final = item.arguments
        elif kind == "response.function_call_arguments.delta":
            call = calls.setdefault(event.output_index, _Call())
            call.parts.append(event.delta)
            yield ToolCallDelta(index=event.output_index, args=event.delta,
                                call_id=call.call_id, name=call.name)
        elif kind == "response.function_call_arguments.done":
            calls.setdefault(event.output_index, _Call()).final = event.arguments
        elif kind in ("response.completed", "response.incomplete"):
            ended = True
            usage = _usage_of_response(getattr(event.response, "usage", None))
            for index in sorted(reasoning):
                yield ReasoningChunk(reasoning[index])
            reasoning.clear()
            for index in sorted(calls):
                yield calls[index].chunk()
            calls.clear()
            if usage is not None:
                yield UsageChunk(usage)
            yield _info_of_response(event.response)
        elif kind == "response.failed":
            raise _failure(getattr(event.response, "error", None), "response_failed")
        elif kind == "error":
            raise _failure(event, "stream_error")
    if not ended:  # the calls seen so far may be cut mid-argument: none is yielded
        raise _incomplete("before response.completed", seen)


def responses_result_chunks(response: Any) -> Iterator[ModelChunk]:
    """An unstreamed Responses API result → chunks."""
    if getattr(response, "status", None) == "failed":
        raise _failure(getattr(response, "error", None), "response_failed")
    for item in getattr(response, "output", None) or ():
        kind = getattr(item, "type", None)
        if kind == "reasoning":
            summary = "\n\n".join(part.text for part in getattr(item, "summary", None) or ())
            if summary:
                yield ThoughtDelta(summary)
            yield ReasoningChunk(_item(item))
        elif kind == "message":
            for part in item.content:
                text = getattr(part, "text", None) or getattr(part, "refusal", None)
                if text:
                    yield TextDelta(text)
        elif kind == "function_call":
            yield ToolCallChunk(call_id=item.call_id, name=item.name, args=item.arguments)
    usage = _usage_of_response(getattr(response, "usage", None))
    if usage is not None:
        yield UsageChunk(usage)
    yield _info_of_response(response)


def _reasoning(delta: Any) -> str | None:
    """Reasoning text as compatible servers stream it (vLLM/DeepSeek: ``reasoning_content``,
    Ollama/OpenRouter: ``reasoning``); OpenAI itself sends none on Chat Completions."""
    for name in ("reasoning_content", "reasoning"):
        value = getattr(delta, name, None)
        if isinstance(value, str) and value:
            return value
    return None


def chat_chunks(chunks: Iterable[Any]) -> Iterator[ModelChunk]:
    """Chat Completions stream chunks → chunks. Tool-call fragments are keyed by their
    ``index`` (parallel calls interleave) and yielded in index order at the end. A stream that
    ends before any choice has a ``finish_reason`` was cut short: it raises
    ``stream_incomplete`` (the client hides whether ``[DONE]`` came; a finished choice is what
    every server sends)."""
    calls: dict[int, _Call] = {}
    usage: Usage | None = None
    seen = 0
    finished = False
    last: Any = None
    reason: Any = None
    for chunk in chunks:
        seen += 1
        last = chunk
        usage = _usage_of_chat(getattr(chunk, "usage", None)) or usage
        for choice in getattr(chunk, "choices", None) or ():
            finished = finished or getattr(choice, "finish_reason", None) is not None
            if getattr(choice, "index", 0) != 0:
                continue
            reason = getattr(choice, "finish_reason", None) or reason
            delta = choice.delta
            thought = _reasoning(delta)
            if thought:
                yield ThoughtDelta(thought)
            text = delta.content or getattr(delta, "refusal", None)
            if text:
                yield TextDelta(text)
            for fragment in delta.tool_calls or ():
                index = fragment.index if fragment.index is not None else len(calls)
                call = calls.setdefault(index, _Call())
                if fragment.id:
                    call.call_id = fragment.id
                function = fragment.function
                if function is not None:
                    if function.name and not call.name:
                        call.name = function.name
                    if function.arguments:
                        call.parts.append(function.arguments)
                        yield ToolCallDelta(index=index, args=function.arguments,
                                            call_id=call.call_id, name=call.name)
    if not finished:
        raise _incomplete("before any choice finished", seen)
    for index in sorted(calls):
        yield calls[index].chunk()
    if usage is not None:
        yield UsageChunk(usage)
    yield _info_of_chat(last, reason)


def chat_result_chunks(completion: Any) -> Iterator[ModelChunk]:
    """An unstreamed Chat Completions result → chunks."""
    choices = getattr(completion, "choices", None) or ()
    if choices:
        message = choices[0].message
        thought = _reasoning(message)
        if thought:
            yield ThoughtDelta(thought)
        reply = message.content or getattr(message, "refusal", None)
        if reply:
            yield TextDelta(reply)
        for call in message.tool_calls or ():
            function = getattr(call, "function", None)
            if function is not None:
                yield ToolCallChunk(call_id=call.id or new_id("call"), name=function.name,
                                    args=function.arguments)
    usage = _usage_of_chat(getattr(completion, "usage", None))
    if usage is not None:
        yield UsageChunk(usage)
    yield _info_of_chat(completion, getattr(choices[0], "finish_reason", None)
                        if choices else None)
