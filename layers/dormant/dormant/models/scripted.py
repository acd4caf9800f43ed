"""A model that plays back a script: for tests, demos and serving with no key."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from dormant.events import Usage
from dormant.models._base import (
    ModelChunk,
    ModelError,
    ModelRequest,
    TextDelta,
    ThoughtDelta,
    ToolCallChunk,
    ToolCallDelta,
    ToolResultChunk,
    UsageChunk,
)
from dormant.tools import Signal

__all__ = ["ARG_PIECE", "ScriptError", "ScriptedModel", "arg_pieces"]

_WORDS = re.compile(r"\S+\s*|\s+")
#: Characters of argument text per streamed piece (a tool call with ``"stream_args": True``).
ARG_PIECE = 8


def arg_pieces(call: dict[str, Any]) -> int:
    """How many pieces a scripted tool call's arguments stream in (0 unless ``stream_args``)."""
    if not call.get("stream_args"):
        return 0
    return -(-len(json.dumps(call.get("args", {}))) // ARG_PIECE)


class ScriptError(AssertionError):
    """The script and the run disagree: a call nobody scripted, or replies left unused."""


class ScriptedModel:
    """Each model call consumes the next reply, streaming its text as deltas.

    ``delay``: seconds between streamed pieces (0: instant), for demos and tests of stop
    and steer. A reply is a ``str`` (text) or a dict ``{"text": ..., "tool_calls": [{"name": ...,
    "args": {...}, "id": optional, "stream_args": optional}], "thought": optional}``
    (``stream_args``: the call's arguments stream as JSON text, a piece per ``delay``, the way
    a real model's do, so a stop can land while they stream). A call may carry
    ``"provider_metadata"`` (a dict), and ``"provider_executed": True`` with a ``"result"``
    (and ``"is_error"``) for a call the provider ran, played as a :class:`ToolResultChunk`
    after the calls (no ``"result"``: the provider's result never came). The requests the
    model was sent are kept in ``requests``. A reply's ``"usage"`` is what the call reports
    using (``{"input_tokens": 12, "output_tokens": 3}``; also ``cached_tokens``,
    ``reasoning_tokens``): the turn's tokens, and its cost by the app's price table under the
    model name ``scripted``, with no network. A call with no reply left raises
    :class:`ScriptError` (a test's script is wrong); with ``strict=False`` it is a failed
    model call instead (:class:`~dormant.models.ModelError` ``script_exhausted``, not
    retryable), for serving a script (``dormant dev --model scripted:FILE``), where running
    out is news for the client, not a crash. :meth:`assert_consumed` raises if replies are
    left over.
    """

    #: How traces and the price table name it (:func:`~dormant.models._base.identify`).
    provider = "dormant"
    model = "scripted"

    def __init__(self, replies: Sequence[str | dict[str, Any]] = (), *,
                 delay: float = 0.0, strict: bool = True) -> None:
        for index, reply in enumerate(replies):
            _check_reply(index, reply)
        if delay < 0:
            raise ValueError("delay must be >= 0 seconds")
        #: Seconds between two streamed pieces (a slow model, to try stop and steer on);
        #: the wait ends early when the turn is stopped or aborted.
        self.delay = delay
        self.strict = strict
        self._replies = list(replies)
        self._next = 0
        self._lock = threading.Lock()
        self.requests: list[ModelRequest] = []

    @property
    def remaining(self) -> int:
        return len(self._replies) - self._next

    def add(self, reply: str | dict[str, Any]) -> None:
        """Append a reply to the script."""
        _check_reply(len(self._replies), reply)
        with self._lock:
            self._replies.append(reply)

    def assert_consumed(self) -> None:
        if self.remaining:
            left = self._replies[self._next:]
            raise ScriptError(f"{self.remaining} scripted model replies were never used: {left!r}")

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[ModelChunk]:
        with self._lock:
            self.requests.append(request)
            if self._next >= len(self._replies):
                message = (f"unexpected model call #{len(self.requests)}: the script has "
                           f"{len(self._replies)} replies and all were used")
                if self.strict:
                    raise ScriptError(message)
                raise ModelError(message, code="script_exhausted", retryable=False)
            reply = self._replies[self._next]
            self._next += 1
        return _play(reply, self.delay, signal)


def _play(reply: str | dict[str, Any], delay: float = 0.0,
          signal: Signal | None = None) -> Iterator[ModelChunk]:
    if isinstance(reply, str):
        reply = {"text": reply}
    thought = reply.get("thought")
    if thought:
        yield ThoughtDelta(thought)
    text = reply.get("text") or ""
    for index, piece in enumerate(_WORDS.findall(text)):
        if delay and index and signal is not None and signal.wait(delay):
            return  # stopped or aborted: the run loop sees the signal
        yield TextDelta(piece)
    for index, call in enumerate(reply.get("tool_calls") or ()):
        if call.get("stream_args"):  # the arguments stream as JSON text, a piece per delay
            text = json.dumps(call.get("args", {}))
            for start in range(0, len(text), ARG_PIECE):
                if delay and signal is not None and signal.wait(delay):
                    return  # stopped mid-arguments: the run keeps what streamed as a draft
                yield ToolCallDelta(index=index, call_id=call.get("id") or "",
                                    name=call["name"], args=text[start:start + ARG_PIECE])
        yield ToolCallChunk(call_id=call.get("id") or "", name=call["name"],
                            args=call.get("args", {}),
                            provider_executed=bool(call.get("provider_executed")),
                            provider_metadata=call.get("provider_metadata"))
    for call in reply.get("tool_calls") or ():
        if call.get("provider_executed") and "result" in call:
            yield ToolResultChunk(call.get("id") or "", call["result"],
                                  is_error=bool(call.get("is_error")))
    usage = reply.get("usage")
    yield UsageChunk(Usage(**usage)) if usage else UsageChunk()


#: What a reply's ``usage`` may say.
_TOKENS = frozenset({"input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens"})


def _check_reply(index: int, reply: Any) -> None:
    if isinstance(reply, str):
        return
    if not isinstance(reply, dict) or not set(reply) <= {"text", "tool_calls", "thought",
                                                          "usage"}:
        raise ScriptError(f"reply #{index + 1} must be a str or a dict with text/tool_calls, "
                          f"got {reply!r}")
    usage = reply.get("usage")
    if usage is not None and not (
            isinstance(usage, dict) and set(usage) <= _TOKENS
            and all(type(n) is int and n >= 0 for n in usage.values())):
        raise ScriptError(f"reply #{index + 1}: usage must map {', '.join(sorted(_TOKENS))} "
                          f"to counts (whole numbers, 0 or more), got {usage!r}")
    for call in reply.get("tool_calls") or ():
        if not isinstance(call, dict) or "name" not in call:
            raise ScriptError(f"reply #{index + 1}: each tool call needs a name, got {call!r}")
