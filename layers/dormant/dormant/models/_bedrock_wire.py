"""Translation between dormant's neutral model request/chunks and Amazon Bedrock's Converse
wire format (the ``converse_stream`` parameters and the events its stream yields, as boto3
parses them into dicts).

Pure functions over plain dicts: the boto3 client and its errors stay in
:mod:`dormant.models.bedrock`.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from dormant.events import Usage
from dormant.models._base import (
    AssistantMessage,
    Message,
    ModelChunk,
    ModelError,
    ModelRequest,
    ReasoningChunk,
    ResponseInfo,
    TextDelta,
    ThoughtDelta,
    ToolCallChunk,
    ToolCallDelta,
    ToolMessage,
    ToolResultChunk,
    UsageChunk,
)
from dormant.tools import TOOL_NAME

__all__ = [
    "PROVIDER",
    "REASONING",
    "SERVER_TOOL_USE",
    "StreamFailed",
    "cache_points",
    "converse_chunks",
    "converse_request",
]

log = logging.getLogger("dormant")

#: :attr:`ReasoningChunk.provider` of Bedrock's reasoning items.
PROVIDER = "bedrock"
#: The ``type`` of a Bedrock reasoning item. Not OpenAI's ``"reasoning"``: a session that
#: switches models keeps both kinds in its ledger, and each adapter sends back only its own.
REASONING = "bedrock_reasoning"
#: What a trusted note in the middle of the conversation (``UserMessage(role="system")``)
#: reads as: Converse takes system prompts only at the top.
SYSTEM_NOTE = "[system note] "
#: The user turn put before a conversation that starts with the assistant (a history cut
#: to its last messages): Converse requires the user to speak first.
_OPENING = "(earlier conversation omitted)"
#: ``toolUse.type`` of a call Bedrock ran itself (a system tool's), whose ``toolResult``
#: comes in the same reply and goes back in the same assistant message.
SERVER_TOOL_USE = "server_tool_use"
_CACHE_POINT = {"cachePoint": {"type": "default"}}
#: Model ids (or inference profile ids: ``us.anthropic...``, ARNs) with prompt caching, and
#: where: Claude caches system prompts and tool specs, Nova system prompts only. The Claude
#: models from before caching (3 Haiku/Sonnet/Opus, 3.5 Sonnet v1, 2.x, Instant) are left out.
_CLAUDE = re.compile(r"anthropic\.claude-")
_CLAUDE_UNCACHED = re.compile(
    r"anthropic\.claude-(v2|instant|3-(haiku|sonnet|opus)-|3-5-sonnet-20240620)")
_NOVA = re.compile(r"amazon\.nova-(micro|lite|pro|premier|2)")


def cache_points(model_id: str) -> frozenset[str]:
    """Where ``model_id`` takes ``cachePoint`` blocks: ``system``, ``tools``, or nowhere."""
    if _CLAUDE.search(model_id) and not _CLAUDE_UNCACHED.search(model_id):
        return frozenset({"system", "tools"})
    if _NOVA.search(model_id):
        return frozenset({"system"})
    return frozenset()


# --- requests ---------------------------------------------------------------------------------


def converse_request(request: ModelRequest, *, cache: frozenset[str] = frozenset(),
                     system_tools: tuple[str, ...] = ()) -> dict[str, Any]:
    """The ``converse_stream`` parameters (without ``modelId`` and inference settings):
    ``messages``, ``system`` and ``toolConfig``, with a ``cachePoint`` after the system
    prompts and after the tool specs where ``cache`` names them.

    Converse wants roles to alternate and tool results in user messages, so consecutive
    blocks of one role are merged into one message; the result of a call Bedrock ran
    itself stays in the assistant's message, beside its call. ``system_tools``: the names of
    Bedrock's own tools offered (``{"systemTool": {"name": ...}}``). A tool name Bedrock
    cannot take is a :class:`ModelError` (``invalid_request``, not retryable) before
    anything is sent.
    """
    offered = bool(request.tools or system_tools)
    body: dict[str, Any] = {"messages": _messages(request.messages, as_text=not offered)}
    system: list[dict[str, Any]] = [{"text": text} for text in request.system if text]
    if system:
        body["system"] = [*system, _CACHE_POINT] if "system" in cache else system
    if offered:
        tools: list[dict[str, Any]] = [{"systemTool": {"name": name}} for name in system_tools]
        for spec in request.tools:
            if not TOOL_NAME.fullmatch(spec.name):
                raise ModelError(f"Bedrock cannot take the tool name {spec.name!r}: tool names "
                                 f"must be 1-64 letters, digits, '_' or '-'; rename the tool",
                                 code="invalid_request", retryable=False)
            tool: dict[str, Any] = {"name": spec.name,
                                    "inputSchema": {"json": spec.parameters}}
            if spec.description:
                tool["description"] = spec.description
            tools.append({"toolSpec": tool})
        body["toolConfig"] = {"tools": [*tools, _CACHE_POINT] if "tools" in cache else tools}
    return body


def _messages(messages: list[Message], *, as_text: bool = False) -> list[dict[str, Any]]:
    """The conversation as Converse messages. ``as_text``: the request has no tools, and
    Converse refuses tool blocks without a ``toolConfig`` (an agent whose tools were taken
    away, with calls in its history): its calls and results are told as text instead."""
    merged: list[dict[str, Any]] = []
    ran_there = {m.call_id for m in messages if isinstance(m, ToolMessage) and m.provider_executed}
    for message in messages:
        ours = isinstance(message, AssistantMessage) or (
            isinstance(message, ToolMessage) and message.provider_executed)
        role = "assistant" if ours else "user"
        blocks = _blocks(message, ran_there)
        if as_text:
            blocks = [_told(block) for block in blocks]
        if not blocks:
            continue
        if merged and merged[-1]["role"] == role:
            if role == "assistant" and isinstance(message, ToolMessage) and not as_text:
                _beside_its_call(merged[-1]["content"], blocks[0])
            else:
                merged[-1]["content"].extend(blocks)
        else:
            merged.append({"role": role, "content": blocks})
    if merged and merged[0]["role"] == "assistant":
        merged.insert(0, {"role": "user", "content": [{"text": _OPENING}]})
    return merged


def _beside_its_call(content: list[dict[str, Any]], result: dict[str, Any]) -> None:
    """Put a server tool's ``toolResult`` right after its ``toolUse`` (the ledger keeps the
    step's calls together, then their results), as Bedrock returned the pair."""
    call_id = result["toolResult"]["toolUseId"]
    at = next((i for i, block in enumerate(content)
               if block.get("toolUse", {}).get("toolUseId") == call_id), len(content) - 1)
    content.insert(at + 1, result)


def _blocks(message: Message, ran_there: frozenset[str] | set[str] = frozenset()
            ) -> list[dict[str, Any]]:
    if isinstance(message, AssistantMessage):
        blocks: list[dict[str, Any]] = []
        if message.text.strip() or message.tool_calls:  # Converse rejects blank text
            # Reasoning goes first, and only before something it led to.
            blocks.extend(block for item in message.reasoning
                          if (block := _reasoning_block(item)) is not None)
        if message.text.strip():
            blocks.append({"text": message.text})
        for call in message.tool_calls:
            use: dict[str, Any] = {"toolUseId": call.call_id, "name": call.name,
                                   "input": _tool_input(call.args)}
            if call.provider_executed and call.call_id in ran_there:
                use["type"] = (call.provider_metadata or {}).get("type") or SERVER_TOOL_USE
            blocks.append({"toolUse": use})
        return blocks
    if isinstance(message, ToolMessage):
        if message.provider_executed:
            return [_server_result(message)]
        return [{"toolResult": {"toolUseId": message.call_id,
                                "content": [_result_content(message)],
                                "status": "error" if message.is_error else "success"}}]
    if not message.text.strip():  # Converse rejects a blank text block (an old ledger's)
        return []
    text = SYSTEM_NOTE + message.text if message.role == "system" else message.text
    return [{"text": text}]


def _server_result(message: ToolMessage) -> dict[str, Any]:
    """A server tool's result as Bedrock returned it: its content blocks (what the ledger
    keeps as the result), ``type`` and ``status`` from its provider metadata."""
    content: Any = None
    if not message.is_error:
        try:
            content = json.loads(message.content)
        except ValueError:
            content = None
    if not (isinstance(content, list) and content and all(isinstance(b, dict) for b in content)):
        content = [{"text": message.content or "(no output)"}]
    result: dict[str, Any] = {"toolUseId": message.call_id, "content": content}
    metadata = message.provider_metadata or {}
    if isinstance(metadata.get("type"), str):
        result["type"] = metadata["type"]
    if message.is_error:
        result["status"] = "error"
    elif metadata.get("status") in ("success", "error"):
        result["status"] = metadata["status"]
    return {"toolResult": result}


def _told(block: dict[str, Any]) -> dict[str, Any]:
    """A tool block as the text that says what it held; any other block as it is."""
    if "toolUse" in block:
        use = block["toolUse"]
        return {"text": f"[called {use['name']} ({use['toolUseId']}) with "
                        f"{json.dumps(use['input'], ensure_ascii=False)}]"}
    if "toolResult" in block:
        result = block["toolResult"]
        told = " ".join(content["text"] if "text" in content and len(content) == 1
                        else json.dumps(content.get("json", content), ensure_ascii=False)
                        for content in result["content"])
        outcome = "failed" if result.get("status") == "error" else "returned"
        return {"text": f"[{result['toolUseId']} {outcome}: {told}]"}
    return block


def _reasoning_block(item: Any) -> dict[str, Any] | None:
    """A ledger reasoning item as the ``reasoningContent`` block it came from; None for
    another provider's item (a session that switched models)."""
    if not isinstance(item, dict) or item.get("type") != REASONING:
        return None
    text = item.get("reasoningText")
    if isinstance(text, dict) and isinstance(text.get("text"), str):
        reasoning: dict[str, Any] = {"text": text["text"]}
        if text.get("signature"):
            reasoning["signature"] = text["signature"]
        return {"reasoningContent": {"reasoningText": reasoning}}
    redacted = item.get("redactedContent")
    if isinstance(redacted, str):
        try:
            return {"reasoningContent": {"redactedContent": base64.b64decode(redacted)}}
        except (binascii.Error, ValueError):
            return None
    return None


def _tool_input(args: Any) -> Any:
    """A call's arguments as the JSON object ``toolUse.input`` carries (JSON text parsed;
    anything that is not an object wrapped, as Converse's models take objects only)."""
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            return {"input": args}
    return args if isinstance(args, dict) else {"input": args}


def _result_content(message: ToolMessage) -> dict[str, Any]:
    """A tool's result as ``json`` when it is a JSON object (what Converse's ``json`` takes),
    else as the text it is (error text, a list, a number...)."""
    if not message.is_error:
        try:
            value = json.loads(message.content)
        except ValueError:
            value = None
        if isinstance(value, dict):
            return {"json": value}
    return {"text": message.content or "(no output)"}


# --- replies ----------------------------------------------------------------------------------


class StreamFailed(ModelError):
    """The reply cannot be used: it ended before ``messageStop`` (``stream_incomplete``), or
    stopped on a malformed output (``model_error``)."""


#: Stop reasons after which the reply is used as is.
_NORMAL = frozenset({"end_turn", "tool_use", "stop_sequence"})
#: The reply ran out of room: its text is kept (a warning is logged).
_TRUNCATED = frozenset({"max_tokens", "model_context_window_exceeded"})
#: A guardrail or content filter stepped in: the text is kept (a guardrail's own blocked
#: message comes as text), tool calls are dropped, a warning is logged.
_FILTERED = frozenset({"guardrail_intervened", "content_filtered"})


@dataclass
class _Block:
    """A content block being assembled from streamed deltas."""

    call_id: str = ""
    name: str = ""
    tool: bool = False
    #: A call Bedrock runs itself (``toolUse.type`` ``server_tool_use``): its fields.
    server: dict[str, Any] | None = None
    #: A ``toolResult`` block (a server tool's result): its start's fields and content.
    result: dict[str, Any] | None = None
    content: list[dict[str, Any]] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    signature: str = ""
    redacted: bytes = b""

    def call(self) -> ToolCallChunk:
        if self.server is not None:
            return ToolCallChunk(call_id=self.call_id, name=self.name,
                                 args="".join(self.parts) or "{}", provider_executed=True,
                                 provider_metadata=self.server)
        return ToolCallChunk(call_id=self.call_id, name=self.name,
                             args="".join(self.parts) or "{}")

    def tool_result(self) -> ToolResultChunk:
        """A server tool's result: its content blocks as Bedrock streamed them (an error's
        text, for a ``status`` of ``error``)."""
        start = self.result or {}
        metadata = {key: start[key] for key in ("type", "status") if start.get(key)}
        if start.get("status") == "error":
            text = " ".join(b["text"] if "text" in b else json.dumps(b.get("json"))
                            for b in self.content)
            return ToolResultChunk(self.call_id, text or "(no output)", is_error=True,
                                   provider_metadata=metadata or None)
        return ToolResultChunk(self.call_id, self.content or [{"text": "(no output)"}],
                               provider_metadata=metadata or None)

    def reasoning_item(self) -> dict[str, Any] | None:
        if self.redacted:
            return {"type": REASONING,
                    "redactedContent": base64.b64encode(self.redacted).decode("ascii")}
        if self.reasoning or self.signature:
            text: dict[str, Any] = {"text": "".join(self.reasoning)}
            if self.signature:
                text["signature"] = self.signature
            return {"type": REASONING, "reasoningText": text}
        return None


def _usage(usage: Any) -> Usage | None:
    """Token counts: ``input_tokens`` counts every input token, cached ones too (Bedrock's
    ``inputTokens`` leaves out cache reads and writes), ``cached_tokens`` the cache reads."""
    if not isinstance(usage, dict):
        return None
    cached = usage.get("cacheReadInputTokens") or 0
    written = usage.get("cacheWriteInputTokens") or 0
    return Usage(input_tokens=(usage.get("inputTokens") or 0) + cached + written,
                 output_tokens=usage.get("outputTokens") or 0, cached_tokens=cached)


def converse_chunks(events: Iterable[dict[str, Any]], model_id: str = "",
                    request_id: str | None = None) -> Iterator[ModelChunk]:
    """ConverseStream events → chunks. Text and reasoning text stream as they come; tool
    input streams as :class:`ToolCallDelta`; whole tool calls, reasoning items and usage come
    once the stream has ended after ``messageStop``, then a :class:`ResponseInfo` (the
    ``stopReason``; Converse names no response, so its id is the call's ``request_id``).
    A stream with no ``messageStop`` raises ``stream_incomplete``, so a cut reply is never
    taken for a whole one."""
    blocks: dict[int, _Block] = {}
    stop: str | None = None
    usage: Usage | None = None
    seen = 0
    for event in events:
        seen += 1
        if "contentBlockStart" in event:
            start = event["contentBlockStart"]
            began = start.get("start") or {}
            tool = began.get("toolUse")
            index = start.get("contentBlockIndex", 0)
            if tool:
                block = blocks.setdefault(index, _Block())
                block.tool, block.call_id, block.name = True, tool["toolUseId"], tool["name"]
                if tool.get("type"):  # server_tool_use: Bedrock runs it, not us
                    block.server = {"type": tool["type"]}
                yield ToolCallDelta(index=index, call_id=block.call_id, name=block.name)
            elif began.get("toolResult"):
                block = blocks.setdefault(index, _Block())
                block.result = dict(began["toolResult"])
                block.call_id = block.result.get("toolUseId", "")
        elif "contentBlockDelta" in event:
            yield from _delta(event["contentBlockDelta"], blocks)
        elif "messageStop" in event:
            stop = event["messageStop"].get("stopReason") or "end_turn"
        elif "metadata" in event:
            usage = _usage(event["metadata"].get("usage")) or usage
    if stop is None:  # the calls seen so far may be cut mid-input: none is yielded
        raise StreamFailed(f"the stream ended before messageStop, after {seen} events",
                           code="stream_incomplete")
    if stop not in _NORMAL:
        _unusual(stop, model_id)
    for index in sorted(blocks):
        item = blocks[index].reasoning_item()
        if item is not None:
            yield ReasoningChunk(item, provider=PROVIDER)
    if stop not in _FILTERED:
        yield from (blocks[i].call() for i in sorted(blocks) if blocks[i].tool)
        yield from (blocks[i].tool_result() for i in sorted(blocks)
                    if blocks[i].result is not None)
    if usage is not None:
        yield UsageChunk(usage)
    yield ResponseInfo(response_id=request_id or None, finish_reason=stop)


def _delta(event: dict[str, Any], blocks: dict[int, _Block]) -> Iterator[ModelChunk]:
    index = event.get("contentBlockIndex", 0)
    delta = event.get("delta") or {}
    if delta.get("text"):
        yield TextDelta(delta["text"])
    tool = delta.get("toolUse")
    if tool is not None and tool.get("input"):
        block = blocks.setdefault(index, _Block(tool=True))
        block.parts.append(tool["input"])
        yield ToolCallDelta(index=index, args=tool["input"], call_id=block.call_id,
                            name=block.name)
    results = delta.get("toolResult")
    if results:
        block = blocks.setdefault(index, _Block(result={}))
        for piece in results:
            if "text" in piece and block.content and set(block.content[-1]) == {"text"}:
                block.content[-1]["text"] += piece["text"]
            elif "text" in piece:
                block.content.append({"text": piece["text"]})
            elif "json" in piece:
                block.content.append({"json": piece["json"]})
    reasoning = delta.get("reasoningContent")
    if reasoning is not None:
        block = blocks.setdefault(index, _Block())
        if reasoning.get("text"):
            block.reasoning.append(reasoning["text"])
            yield ThoughtDelta(reasoning["text"])
        if reasoning.get("signature"):
            block.signature += reasoning["signature"]
        if reasoning.get("redactedContent"):
            block.redacted += reasoning["redactedContent"]


def _unusual(stop: str, model_id: str) -> None:
    """A stop reason other than a normal end: fail on a malformed reply, else log it."""
    if stop in ("malformed_model_output", "malformed_tool_use"):
        raise StreamFailed(f"the model's reply was malformed (stopReason {stop}); nothing of "
                           f"it was kept", code="model_error")
    what = ("its text so far is kept" if stop in _TRUNCATED
            else "its text is kept and its tool calls dropped" if stop in _FILTERED
            else "it is kept")
    log.warning("Bedrock model %r stopped with stopReason %s: %s", model_id, stop, what)
