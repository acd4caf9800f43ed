"""Voice: what turns audio into text (:class:`Transcriber`) and text into audio
(:class:`Speaker`), the two halves ``app.handler.voice`` puts around a turn.

Small and free of any provider package: the OpenAI implementations live in
:mod:`dormant.models.openai_audio`, imported on first use of ``dormant.models.OpenAITranscriber``
or ``OpenAISpeaker``. A realtime model (``realtime = True``) that has ``transcribe`` serves as its
own transcriber.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["Speaker", "Transcriber"]


@runtime_checkable
class Transcriber(Protocol):
    """Anything with ``transcribe(audio, format) -> str``: the words spoken in ``audio`` (raw
    bytes in ``format``: ``wav``, ``mp3``, ``ogg``, ``webm``, ``flac`` or ``m4a``). Raise
    :class:`~dormant.models.ModelError` when it cannot."""

    def transcribe(self, audio: bytes, format: str) -> str: ...


@runtime_checkable
class Speaker(Protocol):
    """Anything with ``speak(text) -> (audio bytes, format)``: ``text`` read aloud, and the
    format the bytes are in (``wav``, ``mp3``...). Raise :class:`~dormant.models.ModelError`
    when it cannot."""

    def speak(self, text: str) -> tuple[bytes, str]: ...
