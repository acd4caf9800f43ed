"""A local stand-in for OpenAI's Realtime API: a real WebSocket server on 127.0.0.1 (the
``websockets`` package, on a thread) that speaks the Realtime event protocol, replays one
scripted session per connection and records what each connection was sent.

It greets with ``session.created``, records ``session.update``, ``conversation.item.create``,
``input_audio_buffer.append`` / ``commit``, ``response.create`` and ``response.cancel``, and
answers a ``response.create`` (or an ``input_audio_buffer.commit``) with the session's script.
Every server event the builders produce is validated against the ``openai`` package's own
``RealtimeServerEvent`` union, so the fake cannot drift from the shapes the real client parses.
"""

from __future__ import annotations

import base64
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from openai.types.realtime import RealtimeServerEvent
from pydantic import TypeAdapter
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response
from websockets.sync.server import Server, ServerConnection, serve

__all__ = ["Call", "FakeRealtime", "Script", "audio_reply", "error_event", "reply",
           "transcription"]

_SERVER_EVENT: TypeAdapter[Any] = TypeAdapter(RealtimeServerEvent)
_TRIGGERS = ("response.create", "input_audio_buffer.commit")


def _checked(event: dict[str, Any]) -> dict[str, Any]:
    _SERVER_EVENT.validate_python(event)
    return event


@dataclass(frozen=True)
class Call:
    """A function call the fake model makes."""

    name: str
    args: dict[str, Any]
    call_id: str


@dataclass
class Script:
    """One connection's session: ``events`` answer its trigger (``response.create``, or
    ``input_audio_buffer.commit`` for a transcription)."""

    events: list[dict[str, Any]] = field(default_factory=list)
    #: Refuse the WebSocket upgrade with this HTTP status (and ``events`` unsent).
    refuse: int | None = None
    #: Stop after this many events until ``release`` is set or the client cancels (stop tests).
    pause_after: int | None = None
    release: threading.Event = field(default_factory=threading.Event)
    paused: threading.Event = field(default_factory=threading.Event)
    #: What this connection received (client events, parsed), its path and headers.
    received: list[dict[str, Any]] = field(default_factory=list)
    path: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    closed: threading.Event = field(default_factory=threading.Event)

    def sent(self, kind: str) -> list[dict[str, Any]]:
        return [event for event in self.received if event.get("type") == kind]

    @property
    def session(self) -> dict[str, Any]:
        """The (last) ``session.update``'s session."""
        return self.sent("session.update")[-1]["session"]  # type: ignore[no-any-return]

    @property
    def items(self) -> list[dict[str, Any]]:
        return [event["item"] for event in self.sent("conversation.item.create")]


class FakeRealtime:
    """Start with ``FakeRealtime()``; ``base_url`` for the client; ``script(...)`` sessions,
    one per connection, in order; ``close()`` stops the server."""

    def __init__(self) -> None:
        self._scripts: list[Script] = []
        self.connections: list[Script] = []
        self._lock = threading.Lock()
        self._server: Server = serve(self._handle, "127.0.0.1", 0,
                                     process_request=self._refuse)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        host, port = self._server.socket.getsockname()[:2]
        return f"http://{host}:{port}/v1"

    def script(self, *scripts: Script) -> None:
        with self._lock:
            self._scripts.extend(scripts)

    @property
    def unused(self) -> int:
        return len(self._scripts)

    def close(self) -> None:
        self._server.shutdown()

    def _refuse(self, ws: ServerConnection, request: Request) -> Response | None:
        """The next session's ``refuse``: the upgrade answered with that status instead."""
        with self._lock:
            if not self._scripts or self._scripts[0].refuse is None:
                return None
            script = self._scripts.pop(0)
            self.connections.append(script)
        script.path = request.path
        script.closed.set()
        assert script.refuse is not None
        return ws.respond(script.refuse, "Incorrect API key provided.")

    def _handle(self, ws: ServerConnection) -> None:
        with self._lock:
            script = self._scripts.pop(0) if self._scripts else Script(
                [error_event("the fake server has no scripted session", code="unscripted")])
            self.connections.append(script)
        assert ws.request is not None
        script.path = ws.request.path
        script.headers = {k.lower(): v for k, v in ws.request.headers.raw_items()}
        try:
            ws.send(json.dumps(_checked({"type": "session.created", "event_id": "evt_0",
                                         "session": {"type": "realtime", "id": "sess_fake",
                                                     "object": "realtime.session"}})))
            for message in ws:
                event = json.loads(message)
                script.received.append(event)
                if event.get("type") in _TRIGGERS:
                    self._answer(ws, script)
        except ConnectionClosed:
            pass
        finally:
            script.closed.set()

    def _answer(self, ws: ServerConnection, script: Script) -> None:
        for index, event in enumerate(script.events):
            if script.pause_after is not None and index == script.pause_after:
                script.paused.set()
                if self._wait(ws, script):  # the client cancelled: the response ends there
                    ws.send(json.dumps(_done("cancelled", [], None,
                                             reason="client_cancelled")))
                    return
            ws.send(json.dumps(event))

    def _wait(self, ws: ServerConnection, script: Script) -> bool:
        """Hold the response until ``release``, reading what the client sends meanwhile;
        True if it cancelled."""
        while not script.release.is_set():
            try:
                message = ws.recv(timeout=0.02)
            except TimeoutError:
                continue
            event = json.loads(message)
            script.received.append(event)
            if event.get("type") == "response.cancel":
                return True
        return False


# --- builders ---------------------------------------------------------------------------------


def _ids() -> dict[str, Any]:
    return {"event_id": "evt_fake", "response_id": "resp_fake"}


def _done(status: str, output: list[dict[str, Any]], usage: tuple[int, int, int] | None, *,
          modality: str = "text", reason: str | None = None,
          error: dict[str, Any] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"id": "resp_fake", "object": "realtime.response",
                                "status": status, "output": output,
                                "output_modalities": [modality]}
    if usage is not None:
        inputs, outputs, cached = usage
        response["usage"] = {"input_tokens": inputs, "output_tokens": outputs,
                             "total_tokens": inputs + outputs,
                             "input_token_details": {"cached_tokens": cached}}
    if reason is not None or error is not None:
        response["status_details"] = {"type": status, "reason": reason, "error": error}
    return _checked({"type": "response.done", "event_id": "evt_done", "response": response})


def _pieces(text: str, size: int = 6) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def _calls(calls: list[Call], first: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    events: list[dict[str, Any]] = []
    output: list[dict[str, Any]] = []
    for offset, call in enumerate(calls):
        index = first + offset
        arguments = json.dumps(call.args)
        item = {"id": f"item_{call.call_id}", "type": "function_call", "object": "realtime.item",
                "status": "completed", "call_id": call.call_id, "name": call.name,
                "arguments": arguments}
        events.append(_checked({"type": "response.output_item.added", **_ids(),
                                "output_index": index, "item": {**item, "arguments": "",
                                                                "status": "in_progress"}}))
        for piece in _pieces(arguments, 10):
            events.append(_checked({"type": "response.function_call_arguments.delta",
                                    **_ids(), "item_id": item["id"], "output_index": index,
                                    "call_id": call.call_id, "delta": piece}))
        events.append(_checked({"type": "response.function_call_arguments.done", **_ids(),
                                "item_id": item["id"], "output_index": index,
                                "call_id": call.call_id, "name": call.name,
                                "arguments": arguments}))
        events.append(_checked({"type": "response.output_item.done", **_ids(),
                                "output_index": index, "item": item}))
        output.append(item)
    return events, output


def reply(text: str = "", calls: list[Call] | None = None, *,
          usage: tuple[int, int, int] | None = (10, 5, 0)) -> Script:
    """A text response: its text in deltas, then its function calls, then ``response.done``."""
    events = [_checked({"type": "response.created", "event_id": "evt_created",
                        "response": {"id": "resp_fake", "object": "realtime.response",
                                     "status": "in_progress", "output": []}})]
    output: list[dict[str, Any]] = []
    if text:
        item = {"id": "item_msg", "type": "message", "role": "assistant",
                "object": "realtime.item", "status": "completed",
                "content": [{"type": "output_text", "text": text}]}
        events += [_checked({"type": "response.output_text.delta", **_ids(),
                             "item_id": "item_msg", "output_index": 0, "content_index": 0,
                             "delta": piece}) for piece in _pieces(text)]
        events.append(_checked({"type": "response.output_text.done", **_ids(),
                                "item_id": "item_msg", "output_index": 0, "content_index": 0,
                                "text": text}))
        output.append(item)
    call_events, call_items = _calls(calls or [], len(output))
    events += call_events
    events.append(_done("completed", output + call_items, usage))
    return Script(events)


def audio_reply(transcript: str, audio: list[bytes], *,
                usage: tuple[int, int, int] | None = (12, 40, 0)) -> Script:
    """A spoken response: audio deltas (base64 pcm16) interleaved with transcript deltas."""
    pieces = _pieces(transcript)
    events = [_checked({"type": "response.created", "event_id": "evt_created",
                        "response": {"id": "resp_fake", "status": "in_progress"}})]
    for index in range(max(len(pieces), len(audio))):
        if index < len(audio):
            events.append(_checked({"type": "response.output_audio.delta", **_ids(),
                                    "item_id": "item_msg", "output_index": 0,
                                    "content_index": 0,
                                    "delta": base64.b64encode(audio[index]).decode()}))
        if index < len(pieces):
            events.append(_checked({"type": "response.output_audio_transcript.delta",
                                    **_ids(), "item_id": "item_msg", "output_index": 0,
                                    "content_index": 0, "delta": pieces[index]}))
    events.append(_checked({"type": "response.output_audio.done", **_ids(),
                            "item_id": "item_msg", "output_index": 0, "content_index": 0}))
    item = {"id": "item_msg", "type": "message", "role": "assistant", "object": "realtime.item",
            "status": "completed",
            "content": [{"type": "output_audio", "transcript": transcript}]}
    events.append(_done("completed", [item], usage, modality="audio"))
    return Script(events)


def error_event(message: str, *, code: str | None = None,
                kind: str = "invalid_request_error") -> dict[str, Any]:
    return _checked({"type": "error", "event_id": "evt_error",
                     "error": {"type": kind, "code": code, "message": message}})


def transcription(transcript: str) -> Script:
    """The answer to a committed input audio buffer: its transcription."""
    return Script([
        _checked({"type": "input_audio_buffer.committed", "event_id": "evt_c",
                  "item_id": "item_in", "previous_item_id": None}),
        _checked({"type": "conversation.item.input_audio_transcription.completed",
                  "event_id": "evt_t", "item_id": "item_in", "content_index": 0,
                  "transcript": transcript,
                  "usage": {"type": "duration", "seconds": 1.5}}),
    ])
