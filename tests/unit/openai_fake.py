"""A local stand-in for the OpenAI API: a real HTTP server on 127.0.0.1 that speaks the wire
formats of the Responses API and Chat Completions (server-sent events over chunked HTTP/1.1,
JSON bodies, error envelopes), replays scripted replies and records what it was sent.

Every payload the builders produce is validated against the ``openai`` package's own types
(``ResponseStreamEvent`` members, ``ChatCompletionChunk``, ``Response``, ``ChatCompletion``),
so the fake cannot drift from the shapes the real client parses.
"""

from __future__ import annotations

import json
import threading
import typing
from dataclasses import dataclass, field
from typing import Any

from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import BaseModel

from tests._fake_server import ScriptedHandler, ScriptedServer

__all__ = [
    "Call",
    "FakeOpenAI",
    "Reply",
    "chat_json",
    "chat_stream",
    "error",
    "raw",
    "responses_json",
    "responses_stream",
]

CREATED = 1764460800
MODEL = "gpt-5.6-luna"


def _event_classes() -> dict[str, type[BaseModel]]:
    union = typing.get_args(ResponseStreamEvent)[0]
    classes: dict[str, type[BaseModel]] = {}
    for cls in typing.get_args(union):
        (name,) = typing.get_args(cls.model_fields["type"].annotation)
        classes[name] = cls
    return classes


_EVENTS = _event_classes()


def _checked_event(payload: dict[str, Any]) -> dict[str, Any]:
    _EVENTS[payload["type"]].model_validate(payload)
    return payload


@dataclass(frozen=True)
class Call:
    """A tool call the fake model makes."""

    name: str
    args: dict[str, Any] | str
    call_id: str

    @property
    def arguments(self) -> str:
        return self.args if isinstance(self.args, str) else json.dumps(self.args)


@dataclass
class Reply:
    """One scripted HTTP response: an SSE stream (``events``) or a body (JSON, or a ``str``
    sent as it is with ``content_type``)."""

    status: int = 200
    body: Any = None
    #: (event name, data): data as JSON, or a ``str`` sent as it is (a malformed frame).
    events: list[tuple[str | None, dict[str, Any] | str]] | None = None
    done_marker: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"
    #: Drop the connection after this many SSE frames, mid-body (no final chunk).
    cut_after: int | None = None
    #: An SSE ``retry:`` field (milliseconds) in a block of its own, before the first event
    #: (as many servers send it); ``retry_between``: after every event too.
    retry: int | None = None
    retry_between: bool = False
    #: Seconds to stay silent before answering at all, or until ``release`` (timeout tests).
    stall: float = 0.0
    #: Pause after this many events until ``release`` is set (abort tests).
    pause_after: int | None = None
    release: threading.Event = field(default_factory=threading.Event)
    paused: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)
    disconnected: bool = False


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class FakeOpenAI(ScriptedServer[Reply, Recorded]):
    """Start with ``FakeOpenAI()``; ``base_url`` for the client; ``script(...)`` replies;
    ``requests`` holds what arrived; ``close()`` stops the server."""

    def __init__(self) -> None:
        super().__init__(_Handler)

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"


class _Handler(ScriptedHandler):
    owner: FakeOpenAI

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        recorded = Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        reply = self.owner.next_reply(recorded)
        if reply is None:
            reply = error(500, "the fake server has no scripted reply for this request",
                          code="unscripted")
        if reply.stall:
            reply.paused.set()
            reply.release.wait(reply.stall)
        if reply.events is None:
            self._json(reply)
        else:
            self._sse(reply)
        reply.finished.set()

    def _json(self, reply: Reply) -> None:
        text = reply.body if isinstance(reply.body, str) else json.dumps(reply.body)
        self.send_whole(reply.status, reply.content_type, text.encode(), reply.headers)

    def _sse(self, reply: Reply) -> None:
        assert reply.events is not None
        frames = [(f"event: {name}\n" if name else "")
                  + f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"
                  for name, data in reply.events]
        if reply.done_marker:
            frames.append("data: [DONE]\n\n")
        if reply.retry is not None:  # legal SSE: sets the reconnection time, no event
            block = f"retry: {reply.retry}\n\n"
            frames = [block, *(f + block for f in frames)] if reply.retry_between \
                else [block, *frames]
        self.send_chunked([frame.encode() for frame in frames], reply,
                          keep_alive=b": keep-alive\n\n", headers={
                              "content-type": "text/event-stream; charset=utf-8",
                              "cache-control": "no-cache"})


# --- error envelopes --------------------------------------------------------------------------


def error(status: int, message: str, *, code: str | None = None,
          kind: str = "invalid_request_error", param: str | None = None,
          headers: dict[str, str] | None = None) -> Reply:
    """An error response as OpenAI sends it: ``{"error": {message, type, param, code}}``."""
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return Reply(status=status, body=body, headers=headers or {})


def raw(status: int, body: Any, content_type: str = "application/json") -> Reply:
    """A response that is not OpenAI-shaped: a gateway's or framework's own error body
    (problem+json, ``{"detail": ...}``, plain text, HTML)."""
    return Reply(status=status, body=body, content_type=content_type)


# --- Responses API ----------------------------------------------------------------------------


#: A reply's usage: input, output and cached tokens, and optionally the reasoning tokens (of
#: the output).
Tokens = tuple[int, int, int] | tuple[int, int, int, int]


def _usage(usage: Tokens) -> dict[str, Any]:
    prompt, completion, cached, *reasoning = usage
    return {"input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": sum(reasoning)},
            "total_tokens": prompt + completion}


def _response(status: str, output: list[dict[str, Any]],
              usage: dict[str, Any] | None) -> dict[str, Any]:
    incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
    body = {
        "id": "resp_fake", "object": "response", "created_at": CREATED, "status": status,
        "model": MODEL, "output": output, "parallel_tool_calls": True, "tool_choice": "auto",
        "tools": [], "error": None, "incomplete_details": incomplete, "instructions": None,
        "metadata": {}, "temperature": 1.0, "top_p": 1.0, "usage": usage,
        "text": {"format": {"type": "text"}}, "truncation": "disabled",
    }
    Response.model_validate(body)
    return body


def _pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def _output_items(text: str, calls: list[Call], summary: list[str],
                  encrypted: str | None = None, reasoning_id: str = "rs_1"
                  ) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if summary or encrypted is not None:
        reasoning: dict[str, Any] = {
            "id": reasoning_id, "type": "reasoning", "status": "completed",
            "summary": [{"type": "summary_text", "text": s} for s in summary]}
        if encrypted is not None:
            reasoning["encrypted_content"] = encrypted
        items.append(reasoning)
    if text:
        items.append({"id": "msg_1", "type": "message", "role": "assistant",
                      "status": "completed",
                      "content": [{"type": "output_text", "text": text, "annotations": [],
                                   "logprobs": []}]})
    items.extend({"id": f"fc_{c.call_id}", "type": "function_call", "status": "completed",
                  "call_id": c.call_id, "name": c.name, "arguments": c.arguments}
                 for c in calls)
    return items


def responses_stream(text: str = "", calls: list[Call] | tuple[Call, ...] = (), *,
                     summary: list[str] | tuple[str, ...] = (),
                     encrypted: str | None = None, reasoning_id: str = "rs_1",
                     usage: Tokens = (12, 5, 4),
                     interleave: bool = False, final: str | None = "response.completed"
                     ) -> Reply:
    """A Responses API stream: created, in_progress, a reasoning item (its summary parts;
    ``encrypted`` its ``encrypted_content``, as sent when asked for with ``include``), message
    text deltas, function calls (argument deltas; ``interleave`` mixes parallel calls'
    deltas), then ``final`` (completed / incomplete; None: the stream just ends) carrying the
    usage."""
    calls = list(calls)
    items = _output_items(text, calls, list(summary), encrypted, reasoning_id)
    seq = iter(range(10_000))
    events: list[dict[str, Any]] = []

    def emit(kind: str, **fields: Any) -> None:
        events.append(_checked_event({"type": kind, "sequence_number": next(seq), **fields}))

    emit("response.created", response=_response("in_progress", [], None))
    emit("response.in_progress", response=_response("in_progress", [], None))
    pending_args: list[tuple[int, str, list[str]]] = []
    for index, item in enumerate(items):
        if item["type"] == "reasoning":
            started = {k: v for k, v in item.items() if k != "encrypted_content"}
            emit("response.output_item.added", output_index=index,
                 item={**started, "summary": [], "status": "in_progress"})
            for part_index, part in enumerate(item["summary"]):
                emit("response.reasoning_summary_part.added", item_id=item["id"],
                     output_index=index, summary_index=part_index,
                     part={"type": "summary_text", "text": ""})
                for piece in _pieces(part["text"], 6):
                    emit("response.reasoning_summary_text.delta", item_id=item["id"],
                         output_index=index, summary_index=part_index, delta=piece)
                emit("response.reasoning_summary_text.done", item_id=item["id"],
                     output_index=index, summary_index=part_index, text=part["text"])
                emit("response.reasoning_summary_part.done", item_id=item["id"],
                     output_index=index, summary_index=part_index, part=part)
            emit("response.output_item.done", output_index=index, item=item)
        elif item["type"] == "message":
            emit("response.output_item.added", output_index=index,
                 item={**item, "content": [], "status": "in_progress"})
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            emit("response.content_part.added", item_id=item["id"], output_index=index,
                 content_index=0, part=part)
            for piece in _pieces(text, 5):
                emit("response.output_text.delta", item_id=item["id"], output_index=index,
                     content_index=0, delta=piece, logprobs=[])
            emit("response.output_text.done", item_id=item["id"], output_index=index,
                 content_index=0, text=text, logprobs=[])
            emit("response.content_part.done", item_id=item["id"], output_index=index,
                 content_index=0, part=item["content"][0])
            emit("response.output_item.done", output_index=index, item=item)
        else:
            emit("response.output_item.added", output_index=index,
                 item={**item, "arguments": "", "status": "in_progress"})
            pending_args.append((index, item["id"], _pieces(item["arguments"], 7)))
            if not interleave:
                _flush_args(emit, pending_args, items)
    _flush_args(emit, pending_args, items)
    if final is not None:
        status = "completed" if final == "response.completed" else "incomplete"
        emit(final, response=_response(status, items, _usage(usage)))
    return Reply(events=[(e["type"], e) for e in events])


def _flush_args(emit: Any, pending: list[tuple[int, str, list[str]]],
                items: list[dict[str, Any]]) -> None:
    """Argument deltas of the pending calls, round-robin, then their done events."""
    while any(pieces for _, _, pieces in pending):
        for index, item_id, pieces in pending:
            if pieces:
                emit("response.function_call_arguments.delta", item_id=item_id,
                     output_index=index, delta=pieces.pop(0))
    for index, item_id, _ in pending:
        emit("response.function_call_arguments.done", item_id=item_id, output_index=index,
             arguments=items[index]["arguments"])
        emit("response.output_item.done", output_index=index, item=items[index])
    pending.clear()


def responses_json(text: str = "", calls: list[Call] | tuple[Call, ...] = (), *,
                   summary: list[str] | tuple[str, ...] = (), encrypted: str | None = None,
                   reasoning_id: str = "rs_1",
                   usage: Tokens = (12, 5, 4)) -> Reply:
    """An unstreamed Responses API result."""
    items = _output_items(text, list(calls), list(summary), encrypted, reasoning_id)
    return Reply(body=_response("completed", items, _usage(usage)))


# --- Chat Completions -------------------------------------------------------------------------


def _chat_usage(usage: Tokens) -> dict[str, Any]:
    prompt, completion, cached, *reasoning = usage
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": sum(reasoning), "audio_tokens": 0,
                                          "accepted_prediction_tokens": 0,
                                          "rejected_prediction_tokens": 0}}


def _chunk(choices: list[dict[str, Any]], usage: dict[str, Any] | None = None,
           include_usage: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                            "created": CREATED, "model": MODEL, "service_tier": "default",
                            "system_fingerprint": "fp_fake", "choices": choices}
    if include_usage:
        body["usage"] = usage
    ChatCompletionChunk.model_validate(body)
    return body


def chat_stream(text: str = "", calls: list[Call] | tuple[Call, ...] = (), *,
                usage: Tokens | None = (12, 5, 4), interleave: bool = False,
                reasoning: str = "", finish: bool = True) -> Reply:
    """A Chat Completions stream as OpenAI sends it with ``include_usage``: a role chunk,
    content deltas, tool-call fragments (the first carries id and name; ``interleave`` mixes
    parallel calls), a finish chunk, a usage chunk with no choices, then ``[DONE]``.
    ``reasoning`` adds ``reasoning_content`` deltas as vLLM and DeepSeek send them;
    ``finish=False`` ends the stream after the deltas (no finish chunk, usage or ``[DONE]``),
    as a cut stream does."""
    calls = list(calls)

    def choice(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}

    chunks = [_chunk([choice({"role": "assistant", "content": "", "refusal": None})])]
    for piece in _pieces(reasoning, 6) if reasoning else ():
        chunks.append(_chunk([choice({"reasoning_content": piece})]))
    for piece in _pieces(text, 5) if text else ():
        chunks.append(_chunk([choice({"content": piece})]))
    fragments: list[list[dict[str, Any]]] = []
    for index, call in enumerate(calls):
        first = {"index": index, "id": call.call_id, "type": "function",
                 "function": {"name": call.name, "arguments": ""}}
        rest = [{"index": index, "function": {"arguments": p}}
                for p in _pieces(call.arguments, 7)]
        fragments.append([first, *rest])
    order: list[dict[str, Any]] = []
    if interleave:
        while any(fragments):
            for queue in fragments:
                if queue:
                    order.append(queue.pop(0))
    else:
        order = [f for queue in fragments for f in queue]
    chunks.extend(_chunk([choice({"tool_calls": [f]})]) for f in order)
    if not finish:
        return Reply(events=[(None, c) for c in chunks])
    chunks.append(_chunk([choice({}, "tool_calls" if calls else "stop")]))
    if usage is not None:
        chunks.append(_chunk([], _chat_usage(usage)))
    return Reply(events=[(None, c) for c in chunks], done_marker=True)


def chat_json(text: str = "", calls: list[Call] | tuple[Call, ...] = (), *,
              usage: Tokens = (12, 5, 4)) -> Reply:
    """An unstreamed Chat Completions result."""
    message: dict[str, Any] = {"role": "assistant", "content": text or None, "refusal": None,
                               "annotations": []}
    if calls:
        message["tool_calls"] = [{"id": c.call_id, "type": "function",
                                  "function": {"name": c.name, "arguments": c.arguments}}
                                 for c in calls]
    body = {"id": "chatcmpl-fake", "object": "chat.completion", "created": CREATED,
            "model": MODEL, "system_fingerprint": "fp_fake", "service_tier": "default",
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": _chat_usage(usage)}
    ChatCompletion.model_validate(body)
    return Reply(body=body)
