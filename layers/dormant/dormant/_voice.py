"""A voice turn's two ends: the audio heard becomes the turn's message, and the reply is
read aloud (``app.handler.voice``; the turn between them is ``rest``'s).

Who hears and who speaks, in order: the handler's ``transcriber`` / ``speaker``; for a realtime
agent model (``realtime = True``), the model itself (its ``transcribe``, and the
``audio_delta`` events its turn streams, pcm16 wrapped as WAV); else OpenAI's audio APIs
(:class:`~dormant.models.OpenAITranscriber` / ``OpenAISpeaker`` from the deployment's key),
built on first use. The audio is never stored: only the transcript, on a ``user`` event marked
``audio=True``.
"""

from __future__ import annotations

import base64
import io
import logging
import threading
import wave
from collections.abc import Iterable
from typing import Any

from dormant._inputs import HandlerInput
from dormant._turn_wire import RestResponse, VoiceAudio, VoiceResponse
from dormant.errors import InputError
from dormant.models import Model, ModelError
from dormant.models.audio import Speaker, Transcriber
from dormant.results import Output
from dormant.session import normalize_session_id

__all__ = ["Voice", "pcm16_wav"]

log = logging.getLogger("dormant")

#: The stream-only event type a realtime model's audio arrives in.
AUDIO_DELTA = "audio_delta"


class NoSpeech(InputError):
    """The audio was transcribed to nothing: there is no message to run."""

    code = "no_speech"


class Voice:
    """What a voice handler hears and speaks with (fixed when the handler is built)."""

    def __init__(self, model: Model | None, transcriber: Transcriber | None = None,
                 speaker: Speaker | None = None) -> None:
        for given, role, method in ((transcriber, "transcriber", "transcribe"),
                                    (speaker, "speaker", "speak")):
            if given is not None and not callable(getattr(given, method, None)):
                raise TypeError(f"voice {role} must have {method}(...), got {given!r}")
        realtime = bool(getattr(model, "realtime", False))
        if transcriber is None and realtime and callable(getattr(model, "transcribe", None)):
            transcriber = model  # type: ignore[assignment]  # a realtime model hears itself
        self._transcriber = transcriber
        self._speaker = speaker
        self.realtime = realtime
        self._lock = threading.Lock()

    def transcriber(self) -> Transcriber:
        with self._lock:
            if self._transcriber is None:
                self._transcriber = _default("OpenAITranscriber")
            return self._transcriber

    def speaker(self) -> Speaker:
        with self._lock:
            if self._speaker is None:
                self._speaker = _default("OpenAISpeaker")
            return self._speaker

    def hear(self, request: HandlerInput | dict[str, Any]) -> tuple[HandlerInput, str | None]:
        """The request with its audio replaced by the transcript (marked spoken), and the
        transcript (None: the request carried no audio). Raises :class:`ModelError` when the
        transcription fails and :class:`InputError` when it heard nothing; nothing is read or
        written either way."""
        given = (request if isinstance(request, HandlerInput)
                 else HandlerInput.model_validate(request))
        audio = given.input.audio
        if audio is None:
            return given, None
        if given.input.message is not None:
            raise InputError("a voice request carries audio or a text message, not both")
        text = self.transcriber().transcribe(audio.data, audio.format).strip()
        if not text:
            raise NoSpeech(f"no speech was heard in the {audio.format} audio "
                           f"({len(audio.data)} bytes)")
        spoken = given.input.model_copy(update={"audio": None, "message": text, "spoken": True})
        return given.model_copy(update={"input": spoken}), text

    def answer(self, reply: RestResponse, transcript: str | None,
               streamed: Iterable[Any] = ()) -> VoiceResponse:
        """``reply`` with the transcript and the reply read aloud: the realtime model's own
        audio when its turn streamed any, else the speaker's. A speech failure leaves the
        turn as it was committed and says so (``audio_error``)."""
        fields = {name: getattr(reply, name) for name in type(reply).model_fields}
        voiced = VoiceResponse(**fields, transcript=transcript)
        text = reply.output.text
        deltas = [e for e in streamed if getattr(e, "type", None) == AUDIO_DELTA]
        if deltas:
            voiced.audio = VoiceAudio(data=base64.b64encode(_wav_of(deltas)).decode(),
                                      format="wav")
            return voiced
        if not text or not text.strip() or (reply.status == "error" and not reply.landed):
            return voiced
        try:
            data, kind = self.speaker().speak(text)
        except ModelError as error:
            log.warning("speech failed after the turn committed: %s", error,
                        extra={"session_id": reply.session_id})
            voiced.audio_error, voiced.audio_code = str(error), error.code
            return voiced
        voiced.audio = VoiceAudio(data=base64.b64encode(data).decode(), format=kind)
        return voiced


def refused(request: HandlerInput | dict[str, Any], error: Exception) -> VoiceResponse:
    """The answer to a voice request refused before its turn (nothing read or written): a
    transcription that failed (``model_error``) or heard nothing, or a malformed request."""
    raw = (request.session_id if isinstance(request, HandlerInput)
           else request.get("session_id") or request.get("sessionId"))
    try:
        session_id = normalize_session_id(raw) if isinstance(raw, str) else ""
    except InputError:
        session_id = str(raw)
    if isinstance(error, ModelError):
        return VoiceResponse(session_id=session_id, status="error", output=Output(),
                             error=f"transcription failed: {error}", code="model_error",
                             retryable=error.retryable)
    return VoiceResponse(session_id=session_id, status="error", output=Output(),
                         error=str(error), code=getattr(error, "code", "invalid_input"))


def pcm16_wav(pcm: bytes, rate: int = 24000, channels: int = 1) -> bytes:
    """Raw 16-bit little-endian PCM as a WAV file."""
    out = io.BytesIO()
    with wave.open(out, "wb") as file:
        file.setnchannels(channels)
        file.setsampwidth(2)
        file.setframerate(rate)
        file.writeframes(pcm)
    return out.getvalue()


def _wav_of(deltas: list[Any]) -> bytes:
    """A realtime turn's ``audio_delta`` events (base64 pcm16 at one rate) as one WAV."""
    pcm = b"".join(base64.b64decode(getattr(e, "data", "") or "") for e in deltas)
    rate = int(getattr(deltas[0], "rate", 24000) or 24000)
    return pcm16_wav(pcm, rate)


def _default(name: str) -> Any:
    """OpenAI's transcriber or speaker, from the deployment's key (see the module doc)."""
    from dormant.models import openai_audio

    try:
        return getattr(openai_audio, name).from_settings()
    except ImportError as missing:  # the openai extra is not installed
        raise ModelError(f"{missing}; or give the voice handler transcriber= and speaker=",
                         code="model_error", retryable=False) from missing
