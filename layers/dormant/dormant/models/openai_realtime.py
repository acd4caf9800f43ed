"""``OpenAIRealtimeModel``: OpenAI's Realtime API over its WebSocket, text and audio, through
the official client (``client.realtime.connect``).

Needs the ``realtime`` extra (``pip install 'dormant[realtime]'``: ``openai`` and
``websockets``). This module is imported on first use of ``dormant.models.OpenAIRealtimeModel``,
the ``openai`` package and ``websockets`` only by the first model call.
"""

from __future__ import annotations

import array
import base64
import contextlib
import importlib.util
import io
import json
import queue
import sys
import threading
import time
import wave
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dormant.errors import ConfigError
from dormant.events import Usage
from dormant.models._base import (
    AssistantMessage,
    AudioChunk,
    ModelChunk,
    ModelError,
    ModelRequest,
    ResponseInfo,
    TextDelta,
    ToolCallChunk,
    UsageChunk,
    UserMessage,
)
from dormant.models._openai_client import LazyClient
from dormant.models._openai_errors import API_CODES, classify
from dormant.models._openai_key import deployment_key
from dormant.settings import Settings
from dormant.tools import Aborted, Signal

if TYPE_CHECKING:
    import openai

__all__ = ["OpenAIRealtimeModel"]

_MISSING = ("dormant.models.OpenAIRealtimeModel needs the openai package with its realtime "
            "support: pip install 'dormant[realtime]'")

#: The audio the model speaks and hears: 16-bit mono PCM at this rate (the API's ``audio/pcm``).
RATE = 24000
#: How often a model call that waits for the server looks at the turn's signal (seconds).
_POLL = 0.05
#: Raw audio bytes per ``input_audio_buffer.append`` (the API takes events up to 15 MiB).
_APPEND = 256 * 1024
#: Backoff between connection attempts: first delay, cap (seconds).
_BACKOFF = 0.5
_BACKOFF_CAP = 4.0

#: Input audio the Realtime API takes as it is: format -> its ``audio.input.format``.
_RAW_INPUT: dict[str, dict[str, Any]] = {
    "pcm16": {"type": "audio/pcm", "rate": RATE},
    "pcm": {"type": "audio/pcm", "rate": RATE},
    "g711_ulaw": {"type": "audio/pcmu"},
    "pcmu": {"type": "audio/pcmu"},
    "g711_alaw": {"type": "audio/pcma"},
    "pcma": {"type": "audio/pcma"},
}
_TEXT_DELTAS = frozenset({
    "response.output_text.delta", "response.output_audio_transcript.delta",
    "response.text.delta", "response.audio_transcript.delta",  # the beta interface's names
})
_AUDIO_DELTAS = frozenset({"response.output_audio.delta", "response.audio.delta"})


def _sdk() -> Any:
    try:
        import openai
    except ImportError as missing:
        raise ImportError(_MISSING) from missing
    return openai


class OpenAIRealtimeModel:
    """A dormant model backed by OpenAI's Realtime API (``gpt-realtime`` and its kin).

    Each model call opens a WebSocket (``client.realtime.connect``), configures the session
    (``session.update``: the agent's system prompts as ``instructions``, its tools as function
    tools, the output modalities), sends the conversation as ``conversation.item.create``
    items, asks for a response and streams it back as chunks. dormant's ledger stays the
    conversation: nothing depends on what the server remembers, so a connection is never
    reused (a reused session would hold the previous call's items twice).

    ``realtime = True``: an agent over this model yields for the next message after each
    reply by default (``app.agent(..., yields=None)``), as a conversation does.

    ``audio=True`` asks for spoken replies too (``voice``: one of the API's voices): the
    audio arrives as :class:`~dormant.models.AudioChunk` (pcm16, 24 kHz; streamed as
    ``audio_delta`` events, never stored) and its transcript as text, which the ledger
    records. :meth:`transcribe` turns speech into text with the session's input audio
    transcription (``transcription_model``).

    ``client``: an ``openai.OpenAI`` to use; otherwise one is built on first call from
    ``api_key`` (a str, or a callable asked before each connection), ``base_url`` and
    ``websocket_base_url``, or the standard ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL`` variables.
    ``timeout``: the longest wait for the server's next event (seconds); the turn's deadline
    bounds every call too. Connections refused for a retryable reason (429, 5xx, unreachable)
    are tried up to ``max_retries`` more times within the turn's time. Other ``settings``
    (``max_output_tokens``, ``tool_choice``, ``truncation``...) go into the session as they
    are. Failures raise :class:`~dormant.models.ModelError`; a stop or the deadline cancels
    the response in flight (``response.cancel``) and closes the connection.
    """

    realtime = True

    #: The provider, as traces name it (the GenAI conventions' ``gen_ai.provider.name``).
    provider = "openai"

    def __init__(
        self,
        model: str = "gpt-realtime",
        *,
        client: openai.OpenAI | None = None,
        api_key: str | Callable[[], str] | None = None,
        base_url: str | None = None,
        websocket_base_url: str | None = None,
        audio: bool = False,
        voice: str | None = None,
        transcription_model: str = "gpt-4o-transcribe",
        max_retries: int = 2,
        timeout: float | None = 60.0,
        **settings: Any,
    ) -> None:
        if client is None and importlib.util.find_spec("openai") is None:
            raise ImportError(_MISSING)  # now, not at the first call (looked up, not imported)
        if importlib.util.find_spec("websockets") is None:
            raise ImportError(_MISSING)
        if not model or not isinstance(model, str):
            raise ConfigError("OpenAIRealtimeModel needs a model name, e.g. "
                              "OpenAIRealtimeModel('gpt-realtime')")
        if client is not None and (api_key is not None or base_url is not None
                                   or websocket_base_url is not None):
            raise ConfigError("OpenAIRealtimeModel takes a client or api_key/base_url/"
                              "websocket_base_url, not both")
        if voice is not None and not audio:
            raise ConfigError("OpenAIRealtimeModel(voice=...) is for spoken replies: pass "
                              "audio=True too")
        if max_retries < 0:
            raise ConfigError("OpenAIRealtimeModel max_retries must be >= 0")
        if timeout is not None and timeout <= 0:
            raise ConfigError("OpenAIRealtimeModel timeout must be positive seconds or None")
        taken = {"type", "instructions", "tools", "output_modalities", "modalities", "audio",
                 "model"} & set(settings)
        if taken:
            raise ConfigError(f"OpenAIRealtimeModel sets {', '.join(sorted(taken))} itself "
                              "(from the agent's context and tools, audio= and voice=)")
        self.model = model
        self.audio = audio
        self.voice = voice
        self.transcription_model = transcription_model
        self.max_retries = max_retries
        self.timeout = timeout
        self.settings = settings
        self._client = LazyClient(client, api_key=api_key, base_url=base_url,
                                  websocket_base_url=websocket_base_url, max_retries=0)

    def __repr__(self) -> str:
        return f"OpenAIRealtimeModel({self.model!r}, audio={self.audio!r})"

    @classmethod
    def from_settings(cls, settings: Settings | None = None, *, model: str = "gpt-realtime",
                      **options: Any) -> OpenAIRealtimeModel:
        """``model`` with the deployment's key: the Secrets Manager secret
        (``DORMANT_OPENAI_SECRET``) or SSM parameter (``DORMANT_OPENAI_PARAMETER``) when one is
        configured (read on the first connection, cached by Powertools), else
        ``OPENAI_API_KEY``."""
        settings = deployment_key(settings, options)
        return cls(model, **options)

    # --- the model call -------------------------------------------------------------------------

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[ModelChunk]:
        """One response: connect, configure, send the conversation, ``response.create``, and
        yield the reply as chunks (see :mod:`dormant.models._base`)."""
        socket = self._connect(signal)
        try:
            socket.send({"type": "session.update", "session": self._session(request)})
            for item in conversation_items(request):
                socket.send({"type": "conversation.item.create", "item": item})
            socket.send({"type": "response.create"})
            yield from self._response(socket, signal)
        finally:
            socket.close()

    def _session(self, request: ModelRequest) -> dict[str, Any]:
        session: dict[str, Any] = {
            "type": "realtime",
            "output_modalities": ["audio"] if self.audio else ["text"],
            # dormant asks for each response: no voice activity detection answering by itself
            "audio": {"input": {"turn_detection": None}},
            "tools": [{"type": "function", "name": spec.name, "parameters": spec.parameters,
                       **({"description": spec.description} if spec.description else {})}
                      for spec in request.tools],
        }
        if self.audio:
            session["audio"]["output"] = {"format": {"type": "audio/pcm", "rate": RATE},
                                          **({"voice": self.voice} if self.voice else {})}
        if request.system:
            session["instructions"] = "\n\n".join(request.system)
        session.update(self.settings)
        session.update(request.settings)
        return session

    def _response(self, socket: _Socket, signal: Signal) -> Iterator[ModelChunk]:
        calls: dict[str, tuple[int, str, str]] = {}  # call_id -> (output index, name, args)
        said = False
        while True:
            try:
                event = socket.next(signal, self.timeout)
            except Aborted:
                socket.send_quietly({"type": "response.cancel"})
                raise
            kind = getattr(event, "type", None)
            if kind in _TEXT_DELTAS:
                if event.delta:
                    said = True
                    yield TextDelta(event.delta)
            elif kind in _AUDIO_DELTAS:
                if event.delta:
                    yield AudioChunk(base64.b64decode(event.delta), "pcm16", RATE)
            elif kind == "response.function_call_arguments.done":
                calls[event.call_id] = (event.output_index, event.name, event.arguments)
            elif kind == "response.output_item.done":
                _call_of(event.item, event.output_index, calls)
            elif kind == "error":
                raise self._error(getattr(event, "error", None), "the model call failed")
            elif kind == "response.done":
                yield from self._done(event.response, calls, said, signal)
                return

    def _done(self, response: Any, calls: dict[str, tuple[int, str, str]], said: bool,
              signal: Signal) -> Iterator[ModelChunk]:
        status = getattr(response, "status", None)
        if status == "failed":
            details = getattr(response, "status_details", None)
            raise self._error(getattr(details, "error", None), "the response failed")
        if status == "cancelled":
            if signal.aborted:
                raise Aborted("the turn was aborted")
            reason = getattr(getattr(response, "status_details", None), "reason", None)
            raise ModelError(self._text(f"the response was cancelled ({reason or 'no reason'})"),
                             code="cancelled", retryable=True)
        for index, item in enumerate(getattr(response, "output", None) or ()):
            _call_of(item, index, calls)
            if not said:  # a server that sent no deltas: the words are in the whole reply
                for part in getattr(item, "content", None) or ():
                    text = getattr(part, "text", None) or getattr(part, "transcript", None)
                    if text and getattr(item, "role", None) == "assistant":
                        yield TextDelta(text)
        for call_id, (_, name, arguments) in sorted(calls.items(), key=lambda c: c[1][0]):
            yield ToolCallChunk(call_id=call_id, name=name, args=arguments)
        usage = getattr(response, "usage", None)
        if usage is not None:
            details = getattr(usage, "input_token_details", None)
            yield UsageChunk(Usage(input_tokens=getattr(usage, "input_tokens", 0) or 0,
                                   output_tokens=getattr(usage, "output_tokens", 0) or 0,
                                   cached_tokens=getattr(details, "cached_tokens", 0) or 0))
        if status == "incomplete":  # (cut short: max_output_tokens, content_filter, ...)
            status = getattr(getattr(response, "status_details", None), "reason",
                             None) or status
        response_id = getattr(response, "id", None)
        yield ResponseInfo(response_id=response_id if isinstance(response_id, str) else None,
                           finish_reason=status if isinstance(status, str) else None)

    # --- transcription --------------------------------------------------------------------------

    def transcribe(self, audio: bytes, format: str, *, signal: Signal | None = None) -> str:
        """The words spoken in ``audio``: sent to a session as input audio with input audio
        transcription on (``transcription_model``), and the transcript the server returns.
        ``format``: ``wav`` (16-bit PCM, any rate, mono or stereo: sent as 24 kHz mono),
        ``pcm16`` (raw, 24 kHz mono), ``g711_ulaw`` or ``g711_alaw``. The Realtime API takes no
        compressed audio (mp3, ogg, webm...): give the voice handler a ``transcriber``
        (``OpenAITranscriber``) for those. Raises :class:`~dormant.models.ModelError`."""
        data, input_format = _input_audio(audio, format, self.model)
        signal = signal or Signal()
        socket = self._connect(signal)
        try:
            socket.send({"type": "session.update", "session": {
                "type": "realtime", "output_modalities": ["text"],
                "audio": {"input": {"format": input_format, "turn_detection": None,
                                    "transcription": {"model": self.transcription_model}}}}})
            for start in range(0, len(data), _APPEND):
                socket.send({"type": "input_audio_buffer.append",
                             "audio": base64.b64encode(data[start:start + _APPEND]).decode()})
            socket.send({"type": "input_audio_buffer.commit"})
            while True:
                event = socket.next(signal, self.timeout)
                kind = getattr(event, "type", None)
                if kind == "conversation.item.input_audio_transcription.completed":
                    return str(event.transcript or "")
                if kind == "conversation.item.input_audio_transcription.failed":
                    raise self._error(getattr(event, "error", None), "the transcription failed")
                if kind == "error":
                    raise self._error(getattr(event, "error", None), "the transcription failed")
        finally:
            socket.close()

    # --- connections ----------------------------------------------------------------------------

    def _connect(self, signal: Signal) -> _Socket:
        """A connection, retried on retryable refusals within the turn's time."""
        client = self._openai()
        attempt = 0
        while True:
            signal.raise_if_aborted()
            try:
                return _Socket(self._open(client, signal))
            except ModelError as failure:
                if not failure.retryable or attempt >= self.max_retries:
                    raise
                delay = min(_BACKOFF_CAP, _BACKOFF * 2 ** attempt)
                remaining = signal.remaining()
                if remaining is not None and delay >= remaining:
                    raise
                if signal.wait(delay):
                    raise Aborted("the turn was aborted") from failure
                attempt += 1

    def _open(self, client: openai.OpenAI, signal: Signal) -> Any:
        from websockets.exceptions import InvalidHandshake, InvalidStatus

        openai = _sdk()
        limits = [t for t in (signal.remaining(), self.timeout) if t is not None]
        # a stop closes the connection: a server slow to answer the close does not hold it
        options: dict[str, Any] = {"close_timeout": 1.0}
        if limits:
            options["open_timeout"] = min(limits)
        try:
            return client.realtime.connect(
                model=self.model, websocket_connection_options=options,  # type: ignore[arg-type]
            ).enter()
        except InvalidStatus as refused:
            status = refused.response.status_code
            code, retryable = classify(status)
            body = bytes(refused.response.body or b"").decode(errors="replace")[:300]
            raise ModelError(self._text(f"the WebSocket upgrade was refused ({status}"
                                        f"{': ' + body if body else ''})"),
                             code=code, status=status, retryable=retryable) from refused
        except (OSError, InvalidHandshake) as failure:  # refused, unreachable, timed out
            raise ModelError(self._text(f"cannot reach the Realtime API "
                                        f"({type(failure).__name__}: {failure})"),
                             code="connection_error", retryable=True) from failure
        except openai.OpenAIError as failure:  # no key, no websockets
            raise ModelError(self._text(str(failure)), code="auth_failed",
                             retryable=False) from failure

    def _openai(self) -> openai.OpenAI:
        client: openai.OpenAI = self._client.get(
            _sdk(), lambda reason: ModelError(self._text(reason), code="auth_failed",
                                              retryable=False))
        return client

    # --- errors ---------------------------------------------------------------------------------

    def _error(self, error: Any, fallback: str) -> ModelError:
        message = getattr(error, "message", None) or fallback
        api_code = getattr(error, "code", None)
        kind = getattr(error, "type", None)
        known = api_code if api_code in API_CODES else kind if kind in API_CODES else None
        code, retryable = classify(None, known or api_code)
        detail = api_code or kind or code
        return ModelError(f"OpenAI Realtime API call for model {self.model!r} failed ({detail}): "
                          f"{message}", code=code, retryable=retryable)

    def _text(self, what: str) -> str:
        return f"OpenAI Realtime API call for model {self.model!r} failed: {what}"


def conversation_items(request: ModelRequest) -> list[dict[str, Any]]:
    """The conversation as Realtime ``conversation.item.create`` items: user, system and
    assistant messages, function calls and their outputs (reasoning items are not sent)."""
    items: list[dict[str, Any]] = []
    for message in request.messages:
        if isinstance(message, UserMessage):
            items.append({"type": "message", "role": message.role,
                          "content": [{"type": "input_text", "text": message.text}]})
        elif isinstance(message, AssistantMessage):
            if message.text:
                items.append({"type": "message", "role": "assistant",
                              "content": [{"type": "output_text", "text": message.text}]})
            for call in message.tool_calls:
                arguments = call.args if isinstance(call.args, str) else _json(call.args)
                items.append({"type": "function_call", "call_id": call.call_id,
                              "name": call.name, "arguments": arguments})
        else:
            items.append({"type": "function_call_output", "call_id": message.call_id,
                          "output": message.content})
    return items


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _call_of(item: Any, index: int, calls: dict[str, tuple[int, str, str]]) -> None:
    """Record ``item`` if it is a finished function call not seen yet."""
    if getattr(item, "type", None) != "function_call":
        return
    call_id = getattr(item, "call_id", None) or ""
    if call_id and call_id not in calls:
        calls[call_id] = (index, getattr(item, "name", "") or "",
                          getattr(item, "arguments", "") or "")


@dataclass(frozen=True)
class _Closed:
    """The reading thread's last word: the connection ended (``error`` None: cleanly)."""

    error: BaseException | None


class _Socket:
    """One Realtime connection. Its events are read on a thread of their own into a queue, so
    a model call waiting for the server looks at the turn's signal every :data:`_POLL`
    seconds (a blocking read would not see a stop)."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        self._events: queue.Queue[Any] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name="dormant-realtime",
                                        daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            for event in self._connection:
                self._events.put(event)
        except BaseException as error:  # the connection was cut or closed under the read
            self._events.put(_Closed(error))
        else:
            self._events.put(_Closed(None))

    def send(self, event: dict[str, Any]) -> None:
        try:
            self._connection.send(event)
        except Exception as failure:
            raise ModelError(f"OpenAI Realtime API: sending {event.get('type')} failed "
                             f"({type(failure).__name__}: {failure})", code="connection_error",
                             retryable=True) from failure

    def send_quietly(self, event: dict[str, Any]) -> None:
        with contextlib.suppress(Exception):  # best effort: the connection closes next anyway
            self._connection.send(event)

    def next(self, signal: Signal, timeout: float | None) -> Any:
        """The server's next event; raises :class:`Aborted` on the turn's stop or deadline,
        :class:`ModelError` when the connection ends or ``timeout`` passes in silence."""
        quiet_until = None if timeout is None else time.monotonic() + timeout
        while True:
            if signal.aborted:
                raise Aborted("the turn was aborted")
            wait = _POLL
            if quiet_until is not None:
                left = quiet_until - time.monotonic()
                if left <= 0:
                    raise ModelError(f"OpenAI Realtime API: no event from the server in "
                                     f"{timeout:g} s", code="timeout", retryable=True)
                wait = min(wait, left)
            try:
                event = self._events.get(timeout=wait)
            except queue.Empty:
                continue
            if isinstance(event, _Closed):
                self._events.put(event)  # every later read sees the end too
                cause = event.error
                why = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
                raise ModelError(f"OpenAI Realtime API: the connection closed before the "
                                 f"response was done{why}", code="stream_incomplete",
                                 retryable=True) from cause
            return event

    def close(self) -> None:
        with contextlib.suppress(Exception):  # already closed or cut: nothing left to free
            self._connection.close()
        self._reader.join(timeout=1.0)


def _input_audio(audio: bytes, format: str, model: str) -> tuple[bytes, dict[str, Any]]:
    """``audio`` as the Realtime API takes it, with its ``audio.input.format``."""
    kind = (format or "").lower().lstrip(".")
    if not audio:
        raise ModelError("OpenAI Realtime API: there is no audio to transcribe",
                         code="invalid_request", retryable=False)
    if kind in _RAW_INPUT:
        return bytes(audio), _RAW_INPUT[kind]
    if kind in ("wav", "wave", "audio/wav", "audio/x-wav"):
        return _wav_as_pcm16(audio), _RAW_INPUT["pcm16"]
    raise ModelError(f"OpenAI Realtime API ({model!r}) takes wav, pcm16, g711_ulaw or "
                     f"g711_alaw audio, not {format!r}; give the voice handler a transcriber "
                     "(dormant.models.OpenAITranscriber) for compressed audio",
                     code="unsupported_audio_format", retryable=False)


def _wav_as_pcm16(data: bytes) -> bytes:
    """A WAV file's 16-bit PCM as 24 kHz mono (channels averaged, linearly resampled)."""
    try:
        with wave.open(io.BytesIO(data), "rb") as file:
            channels, width, rate = file.getnchannels(), file.getsampwidth(), file.getframerate()
            frames = file.readframes(file.getnframes())
    except (wave.Error, EOFError) as error:
        raise ModelError(f"OpenAI Realtime API: the audio is not a readable WAV file ({error})",
                         code="invalid_request", retryable=False) from error
    if width != 2:
        raise ModelError(f"OpenAI Realtime API: the WAV file holds {8 * width}-bit samples; "
                         "send 16-bit PCM", code="unsupported_audio_format", retryable=False)
    samples = array.array("h", frames)
    if sys.byteorder == "big":
        samples.byteswap()
    if channels > 1:
        samples = array.array("h", (sum(samples[i:i + channels]) // channels
                                    for i in range(0, len(samples) - channels + 1, channels)))
    if rate != RATE and samples:
        count = max(1, len(samples) * RATE // rate)
        step = (len(samples) - 1) / max(1, count - 1) if count > 1 else 0.0
        last = len(samples) - 1
        resampled = array.array("h", bytes(2 * count))
        for i in range(count):
            at = i * step
            low = int(at)
            high = min(low + 1, last)
            resampled[i] = int(samples[low] + (samples[high] - samples[low]) * (at - low))
        samples = resampled
    if sys.byteorder == "big":
        samples.byteswap()
    return samples.tobytes()
