"""A local stand-in for Amazon Bedrock Runtime's ConverseStream: a real HTTP server on
127.0.0.1 that answers ``POST /model/{modelId}/converse-stream`` with the AWS event-stream
wire format (binary frames: prelude, CRCs, string headers, JSON payloads), errors as AWS
sends them (``x-amzn-ErrorType`` and a JSON ``message``), replays scripted replies and records
what it was sent.

What it sends is checked against botocore's own service model (every event payload is
validated against its ConverseStream event shape), and what it receives must pass both that
model's request shape and the rules Bedrock enforces on top of it (roles alternate, the user
speaks first, each tool result answers a tool use of the message before): a request breaking
them is answered as Bedrock would, with a ValidationException, so the fake cannot drift from
what the real service takes.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import botocore.session
from botocore.validate import ParamValidator

from tests._fake_server import ScriptedHandler, ScriptedServer

__all__ = [
    "MODEL",
    "Call",
    "FakeBedrock",
    "Recorded",
    "Reply",
    "Served",
    "converse_stream",
    "error",
    "fake_bedrock",
    "frame",
    "stream_exception",
]

MODEL = "anthropic.claude-sonnet-4-5-20250929-v1:0"
_SERVICE = botocore.session.get_session().get_service_model("bedrock-runtime")
_OPERATION = _SERVICE.operation_model("ConverseStream")
_OUTPUT: Any = _SERVICE.shape_for("ConverseStreamOutput")  # a StructureShape
_EVENTS: dict[str, Any] = _OUTPUT.members
_ERROR_NAMESPACE = "http://internal.amazon.com/coral/com.amazon.bedrock/"


# --- event-stream frames ----------------------------------------------------------------------


def frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message: prelude (total length, headers length, their CRC32), string
    headers (type 7), the payload, then the CRC32 of everything before it."""
    encoded = b"".join(
        bytes([len(name)]) + name.encode() + b"\x07" + struct.pack(">H", len(value.encode()))
        + value.encode()
        for name, value in headers.items())
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack(">II", total, len(encoded))
    message = prelude + struct.pack(">I", binascii.crc32(prelude)) + encoded + payload
    return message + struct.pack(">I", binascii.crc32(message))


def _event(kind: str, payload: dict[str, Any]) -> bytes:
    errors = ParamValidator().validate(payload, _EVENTS[kind])
    assert not errors.has_errors(), f"{kind} is not a ConverseStream event: " \
                                    f"{errors.generate_report()}"
    return frame({":event-type": kind, ":content-type": "application/json",
                  ":message-type": "event"}, json.dumps(payload).encode())


def stream_exception(kind: str, message: str) -> bytes:
    """An exception inside the stream (``kind`` as Bedrock names the event, e.g.
    ``modelStreamErrorException``, ``throttlingException``)."""
    assert kind in _EVENTS, f"{kind} is not a ConverseStream exception event"
    return frame({":exception-type": kind, ":content-type": "application/json",
                  ":message-type": "exception"}, json.dumps({"message": message}).encode())


# --- replies ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """A tool call the fake model makes."""

    name: str
    args: dict[str, Any]
    call_id: str


@dataclass(frozen=True)
class Served:
    """A call Bedrock runs itself (a system tool's): its ``toolUse`` (``type``
    ``server_tool_use``) and then its ``toolResult`` block (``content`` as Converse's
    result blocks, streamed as ``toolResult`` deltas), in the same reply."""

    call: Call
    content: tuple[dict[str, Any], ...] = ({"text": "result"},)
    type: str | None = "nova_grounding_results"
    status: str | None = None


@dataclass
class Reply:
    """One scripted HTTP response: an event stream (``frames``) or an error body."""

    status: int = 200
    frames: list[bytes] = field(default_factory=list)
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    #: Drop the connection after this many frames, mid-body (no final chunk).
    cut_after: int | None = None
    #: Pause after this many frames until ``release`` is set (abort tests); then keep sending
    #: empty text deltas until the client hangs up (5 s at most).
    pause_after: int | None = None
    release: threading.Event = field(default_factory=threading.Event)
    paused: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)
    disconnected: bool = False


def error(code: str, message: str, status: int = 400,
          headers: dict[str, str] | None = None) -> Reply:
    """An error before the stream, as Bedrock sends it: the status, ``x-amzn-ErrorType`` and
    ``{"message": ...}`` (botocore raises a ``ClientError`` with ``Error.Code`` = ``code``)."""
    return Reply(status=status, body={"message": message},
                 headers={"x-amzn-ErrorType": f"{code}:{_ERROR_NAMESPACE}", **(headers or {})})


def _pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def converse_stream(text: str = "", calls: list[Call] | tuple[Call, ...] = (), *,
                    served: list[Served] | tuple[Served, ...] = (),
                    reasoning: str = "", signature: str = "", redacted: bytes = b"",
                    stop: str | None = None, usage: tuple[int, int, int] = (12, 5, 0),
                    metadata: bool = True) -> Reply:
    """A ConverseStream reply as Bedrock streams it: messageStart; a reasoning block (its
    text in pieces, then its ``signature``; or ``redacted`` content); the text in pieces;
    each tool use (contentBlockStart with id and name, its input JSON in pieces); a
    contentBlockStop after each block; ``served`` calls (Bedrock's own, each a toolUse then
    its toolResult block) come before the text, as a search comes before its answer;
    messageStop (``stop``, default ``tool_use`` with calls
    else ``end_turn``); metadata with ``usage`` (input, output, cache-read tokens)."""
    frames = [_event("messageStart", {"role": "assistant"})]
    index = 0

    def delta(value: dict[str, Any]) -> None:
        frames.append(_event("contentBlockDelta",
                             {"contentBlockIndex": index, "delta": value}))

    def close_block() -> None:
        nonlocal index
        frames.append(_event("contentBlockStop", {"contentBlockIndex": index}))
        index += 1

    if reasoning or redacted:
        for piece in _pieces(reasoning, 6):
            delta({"reasoningContent": {"text": piece}})
        if signature:
            delta({"reasoningContent": {"signature": signature}})
        if redacted:
            delta({"reasoningContent": {"redactedContent": base64.b64encode(redacted).decode()}})
        close_block()
    for done in served:
        frames.append(_event("contentBlockStart", {
            "contentBlockIndex": index,
            "start": {"toolUse": {"toolUseId": done.call.call_id, "name": done.call.name,
                                  "type": "server_tool_use"}}}))
        for piece in _pieces(json.dumps(done.call.args), 7):
            delta({"toolUse": {"input": piece}})
        close_block()
        began: dict[str, Any] = {"toolUseId": done.call.call_id}
        if done.type:
            began["type"] = done.type
        if done.status:
            began["status"] = done.status
        frames.append(_event("contentBlockStart",
                             {"contentBlockIndex": index, "start": {"toolResult": began}}))
        for content in done.content:
            if "text" in content:  # text streams in pieces, a JSON value whole
                for piece in _pieces(content["text"], 9):
                    delta({"toolResult": [{"text": piece}]})
            else:
                delta({"toolResult": [content]})
        close_block()
    if text:
        for piece in _pieces(text, 5):
            delta({"text": piece})
        close_block()
    for call in calls:
        frames.append(_event("contentBlockStart", {
            "contentBlockIndex": index,
            "start": {"toolUse": {"toolUseId": call.call_id, "name": call.name}}}))
        for piece in _pieces(json.dumps(call.args), 7):
            delta({"toolUse": {"input": piece}})
        close_block()
    frames.append(_event("messageStop",
                         {"stopReason": stop or ("tool_use" if calls else "end_turn")}))
    if metadata:
        inputs, outputs, cached = usage
        tokens = {"inputTokens": inputs, "outputTokens": outputs,
                  "totalTokens": inputs + outputs + cached}
        if cached:
            tokens["cacheReadInputTokens"] = cached
        frames.append(_event("metadata", {"usage": tokens, "metrics": {"latencyMs": 120}}))
    return Reply(frames=frames)


# --- requests ---------------------------------------------------------------------------------


@dataclass
class Recorded:
    """A request as it arrived: the model id from the path, headers, the JSON body."""

    model_id: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", []))

    def blocks(self, kind: str) -> list[dict[str, Any]]:
        """Every ``kind`` content block (``toolResult``, ``toolUse``, ``reasoningContent``...)
        in the messages, in order."""
        return [block[kind] for message in self.messages for block in message["content"]
                if kind in block]


def rule_broken(body: dict[str, Any]) -> str | None:
    """What Bedrock would refuse in ``body`` (beyond its shape), or None."""
    shape: Any = _OPERATION.input_shape
    errors = ParamValidator().validate({**body, "modelId": "m"}, shape)
    if errors.has_errors():
        return str(errors.generate_report())
    messages = body.get("messages", [])
    if not messages or messages[0]["role"] != "user":
        return "A conversation must start with a user message."
    previous: dict[str, Any] | None = None
    for message in messages:
        if previous is not None and previous["role"] == message["role"]:
            return "A conversation must alternate between user and assistant roles."
        for block in message["content"]:
            if "text" in block and not block["text"].strip():
                return "The text field in the ContentBlock object is blank."
            if ("toolUse" in block or "toolResult" in block) and "toolConfig" not in body:
                return ("The toolConfig field must be defined when using toolUse and "
                        "toolResult content blocks.")
            if "toolResult" in block and message["role"] == "assistant":
                # Bedrock's own tool: its result sits in the assistant's message, after it
                if block["toolResult"]["toolUseId"] not in _served(message):
                    return ("A toolResult in an assistant message must answer a "
                            "server_tool_use toolUse of that message.")
            elif "toolResult" in block:
                asked = {b["toolUse"]["toolUseId"] for b in (previous or {}).get("content", [])
                         if "toolUse" in b} - _served(previous or {})
                if message["role"] != "user" or block["toolResult"]["toolUseId"] not in asked:
                    return "The toolResult blocks must answer toolUse blocks of the previous turn."
        answered = {b["toolResult"]["toolUseId"] for b in message["content"] if "toolResult" in b}
        if message["role"] == "assistant" and not _served(message) <= answered:
            return "A server_tool_use toolUse needs its toolResult in the same message."
        previous = message
    return None


def _served(message: dict[str, Any]) -> set[str]:
    """The ids of the ``server_tool_use`` calls in ``message``."""
    return {b["toolUse"]["toolUseId"] for b in message.get("content", [])
            if "toolUse" in b and b["toolUse"].get("type") == "server_tool_use"}


# --- the server -------------------------------------------------------------------------------


class FakeBedrock(ScriptedServer[Reply, Recorded]):
    """Start with ``FakeBedrock()``; ``url`` for boto3's ``endpoint_url``; ``script(...)``
    replies; ``requests`` holds what arrived; ``close()`` stops the server."""

    def __init__(self) -> None:
        super().__init__(_Handler)

    @property
    def url(self) -> str:
        return self.origin


@contextmanager
def fake_bedrock() -> Iterator[FakeBedrock]:
    """A running fake, closed afterwards; every scripted reply must have been used."""
    server = FakeBedrock()
    try:
        yield server
    finally:
        server.close()
    assert server.unused == 0, "scripted replies were left unused"


class _Handler(ScriptedHandler):
    owner: FakeBedrock

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        parts = self.path.split("/")
        if len(parts) != 4 or parts[1] != "model" or parts[3] != "converse-stream":
            self._error(error("UnknownOperationException", f"no route for {self.path}", 404))
            return
        recorded = Recorded(unquote(parts[2]), {k.lower(): v for k, v in self.headers.items()},
                            body)
        reply = self.owner.next_reply(recorded)
        broken = rule_broken(body)
        if broken is not None:
            self._error(error("ValidationException", broken))
        elif reply is None:
            self._error(error("InternalServerException",
                              "the fake server has no scripted reply for this request", 500))
        elif reply.body is not None:
            self._error(reply)
        else:
            self._stream(reply)
        if reply is not None:
            reply.finished.set()

    def _error(self, reply: Reply) -> None:
        self.send_whole(reply.status, "application/json", json.dumps(reply.body).encode(),
                        reply.headers)

    def _stream(self, reply: Reply) -> None:
        keep_alive = _event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": ""}})
        self.send_chunked(reply.frames, reply, keep_alive=keep_alive, headers={
            "content-type": "application/vnd.amazon.eventstream",
            "x-amzn-requestid": "fake-request-id"})
