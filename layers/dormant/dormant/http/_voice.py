"""``POST /voice``'s wire: the JSON body, a raw audio body, and the audio answer.

A raw body (``Content-Type: audio/*``) reaches the route base64-encoded (API Gateway does so
for the API's ``BinaryMediaTypes``; the resolver does the same for ``dormant dev``), with the
session in ``?sessionId=``. ``Accept: audio/*`` answers the spoken reply itself, with what the
JSON answer would say in ``X-Dormant-*`` headers.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from dormant._inputs import AudioFormat, AudioInput, HandlerInput
from dormant.errors import InputError
from dormant.handlers import VoiceResponse
from dormant.http._wire import TurnRequest

__all__ = ["AUDIO", "HEADERS", "VoiceAudioIn", "VoiceRequest", "audio_answer",
           "format_of", "raw_voice_request", "wants_audio"]

AUDIO = "audio/"
#: The answer headers of ``Accept: audio/*`` (what a browser may read: CORS exposes them).
HEADERS = ("X-Dormant-Session-Id", "X-Dormant-Status", "X-Dormant-Transcript",
           "X-Dormant-Reply")
#: Request media type -> audio format.
_FORMATS: dict[str, AudioFormat] = {
    "audio/wav": "wav", "audio/x-wav": "wav", "audio/wave": "wav", "audio/vnd.wave": "wav",
    "audio/mpeg": "mp3", "audio/mp3": "mp3", "audio/ogg": "ogg", "audio/opus": "ogg",
    "audio/webm": "webm", "audio/flac": "flac", "audio/x-flac": "flac", "audio/mp4": "m4a",
    "audio/m4a": "m4a", "audio/x-m4a": "m4a", "audio/aac": "m4a",
}
#: Audio format -> answer media type.
_MEDIA = {"wav": "audio/wav", "mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac",
          "flac": "audio/flac", "pcm": "audio/pcm", "ogg": "audio/ogg", "webm": "audio/webm",
          "m4a": "audio/mp4"}
#: Longest header value of the transcript and reply (URL-encoded); the JSON answer has all.
_HEADER_TEXT = 4000


#: Standard base64 with its padding: what ``base64.b64decode(..., validate=True)`` takes.
_BASE64 = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


class VoiceAudioIn(BaseModel):
    """Audio in a JSON body: ``{data: base64, format}``."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid",
                              defer_build=True)

    data: str = Field(min_length=4, pattern=_BASE64, description="The audio, base64.",
                      json_schema_extra={"contentEncoding": "base64"})
    format: AudioFormat = Field(description="wav, mp3, ogg, webm, flac or m4a.")


class VoiceRequest(TurnRequest):
    """The JSON body of ``POST /voice``: everything ``POST /turns`` takes, plus ``audio``
    (transcribed into the message; send one or the other)."""

    audio: VoiceAudioIn | None = Field(
        default=None, description="What the user said: {data: base64, format}. Its transcript "
        "becomes the turn's message (the audio is not stored).")

    def to_handler_input(self, principal: str | None) -> HandlerInput:
        request = super().to_handler_input(principal)
        if self.audio is None:
            return request
        spoken = request.input.model_copy(update={"audio": _audio(self.audio.data,
                                                                   self.audio.format)})
        return request.model_copy(update={"input": spoken})


def _audio(data: bytes | str, format: AudioFormat) -> AudioInput:
    try:
        return AudioInput(data=data, format=format)
    except ValidationError as error:
        reasons = "; ".join(item["msg"].removeprefix("Value error, ")
                            for item in error.errors(include_url=False))
        raise InputError(f"audio.data: {reasons}") from error


def format_of(content_type: str) -> AudioFormat:
    """The audio format of a request's ``Content-Type`` (400 when it is not one)."""
    kind = content_type.split(";", 1)[0].strip().lower()
    found = _FORMATS.get(kind)
    if found is None:
        raise InputError(f"POST /voice reads audio as {', '.join(sorted(set(_FORMATS)))} "
                         f"(or a JSON body), not {content_type[:80]!r}")
    return found


def raw_voice_request(event: Mapping[str, Any], content_type: str, principal: str | None
                      ) -> HandlerInput:
    """A raw audio body's handler input: the session (and message id) from the query."""
    query = event.get("queryStringParameters") or {}
    body = event.get("body") or ""
    try:
        data = base64.b64decode(body, validate=True) if event.get("isBase64Encoded") \
            else str(body).encode()
    except (binascii.Error, ValueError) as error:
        raise InputError("the audio body is marked base64 but is not valid base64") from error
    if not data:
        raise InputError("POST /voice needs audio in the body (or a JSON body)")
    unknown = sorted(set(query) - {"sessionId", "messageId"})
    if unknown:
        raise InputError(f"unknown query parameters {', '.join(unknown)}: POST /voice takes "
                         "sessionId and messageId")
    wire = TurnRequest.model_validate({"sessionId": query.get("sessionId"),
                                       "messageId": query.get("messageId")})
    request = wire.to_handler_input(principal)
    spoken = request.input.model_copy(update={"audio": _audio(data, format_of(content_type))})
    return request.model_copy(update={"input": spoken})


def wants_audio(headers: Mapping[str, str] | None) -> bool:
    """Whether ``Accept`` names an audio type (``audio/*``, ``audio/wav``...) before JSON."""
    accept = next((v for k, v in (headers or {}).items() if k.lower() == "accept"), "")
    kinds = [part.split(";", 1)[0].strip().lower() for part in accept.split(",")]
    for kind in kinds:
        if kind.startswith(AUDIO):
            return True
        if kind in ("application/json", "*/*", "application/*"):
            return False
    return False


def audio_answer(reply: VoiceResponse) -> tuple[str, str, dict[str, str]]:
    """The spoken reply of ``reply`` (which has audio) as ``(base64 body, media type,
    headers)``."""
    assert reply.audio is not None
    headers = {"X-Dormant-Session-Id": reply.session_id, "X-Dormant-Status": reply.status,
               "X-Dormant-Transcript": quote((reply.transcript or "")[:_HEADER_TEXT]),
               "X-Dormant-Reply": quote(reply.output.text[:_HEADER_TEXT]),
               "Access-Control-Expose-Headers": ", ".join(HEADERS)}
    media = _MEDIA.get(reply.audio.format, "application/octet-stream")
    return reply.audio.data, media, headers

