"""``OpenAITranscriber`` and ``OpenAISpeaker``: OpenAI's audio transcriptions and speech APIs,
through the official client.

Needs the ``openai`` extra. This module is imported on first use of
``dormant.models.OpenAITranscriber`` / ``OpenAISpeaker``; the ``openai`` package itself only when
the first call needs its client, so a Lambda function builds them at cold start for free.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from dormant.errors import ConfigError
from dormant.models._base import ModelError
from dormant.models._openai_client import LazyClient
from dormant.models._openai_errors import classify, redact
from dormant.models._openai_key import deployment_key
from dormant.settings import Settings

if TYPE_CHECKING:
    import openai

__all__ = ["MIME_TYPES", "OpenAISpeaker", "OpenAITranscriber"]

#: The media type of each audio format dormant passes around.
MIME_TYPES = {"wav": "audio/wav", "mp3": "audio/mpeg", "ogg": "audio/ogg", "webm": "audio/webm",
              "flac": "audio/flac", "m4a": "audio/mp4", "opus": "audio/ogg", "aac": "audio/aac",
              "pcm": "audio/pcm"}
#: The formats the speech API can answer in.
_SPEECH_FORMATS = ("wav", "mp3", "opus", "aac", "flac", "pcm")
_MISSING = "dormant.models.{} needs the openai package: pip install 'dormant[openai]'"


def _unbuilt(reason: str) -> ModelError:
    return ModelError(f"{reason}; check the API key (OPENAI_API_KEY)", code="auth_failed",
                      retryable=False)


class _OpenAIAudio:
    """What both share: the client (given, or built on first call from ``api_key`` /
    ``base_url`` or the standard ``OPENAI_*`` environment variables) and error translation."""

    _what = "audio"

    def __init__(self, model: str, *, client: openai.OpenAI | None = None,
                 api_key: str | Callable[[], str] | None = None, base_url: str | None = None,
                 timeout: float | None = 60.0, max_retries: int = 2, **settings: Any) -> None:
        name = type(self).__name__
        if client is None and importlib.util.find_spec("openai") is None:
            raise ImportError(_MISSING.format(name))
        if not model or not isinstance(model, str):
            raise ConfigError(f"{name} needs a model name")
        if client is not None and (api_key is not None or base_url is not None):
            raise ConfigError(f"{name} takes a client or api_key/base_url, not both")
        self.model = model
        self.timeout = timeout
        self.max_retries = max_retries
        self.settings = settings
        self._client = LazyClient(client, api_key=api_key, base_url=base_url,
                                  max_retries=max_retries)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model!r})"

    def _openai(self) -> openai.OpenAI:
        try:
            import openai
        except ImportError as missing:
            raise ImportError(_MISSING.format(type(self).__name__)) from missing
        client: openai.OpenAI = self._client.get(openai, _unbuilt)
        return client

    def _call(self, make: Callable[[openai.OpenAI], Any]) -> Any:
        import openai

        client = self._openai()
        try:
            return make(client)
        except openai.APIError as error:
            raise self._error(error) from error

    def _error(self, error: openai.APIError) -> ModelError:
        import openai

        status = getattr(error, "status_code", None)
        if isinstance(error, openai.APITimeoutError):
            code, retryable, status = "timeout", True, None
        elif isinstance(error, openai.APIConnectionError):
            code, retryable = "connection_error", True
        else:
            code, retryable = classify(status, getattr(error, "code", None))
        text = (f"OpenAI {self._what} call for model {self.model!r} failed "
                f"({status or code}): {error.message}")
        return ModelError(redact(text), code=code, status=status, retryable=retryable)


class OpenAITranscriber(_OpenAIAudio):
    """A :class:`~dormant.models.Transcriber` on OpenAI's audio transcriptions API
    (``client.audio.transcriptions.create``), or any server that speaks it.

    ``model``: ``gpt-4o-mini-transcribe`` by default (``whisper-1``, ``gpt-4o-transcribe``...).
    ``client``, or ``api_key`` (a string or a callable asked before each request) and
    ``base_url``; otherwise ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``. Other ``settings``
    (``language``, ``prompt``, ``temperature``) go to the call as they are. Failures raise
    :class:`~dormant.models.ModelError` (``auth_failed``, ``rate_limited``, ``server_error``...).
    """

    _what = "transcription"

    def __init__(self, model: str = "gpt-4o-mini-transcribe", **options: Any) -> None:
        super().__init__(model, **options)

    @classmethod
    def from_settings(cls, settings: Settings | None = None, **options: Any
                      ) -> OpenAITranscriber:
        """The deployment's transcriber: its key as :meth:`OpenAIModel.from_settings` reads
        it (Secrets Manager / SSM when configured, else ``OPENAI_API_KEY``)."""
        deployment_key(settings, options)
        return cls(**options)

    def transcribe(self, audio: bytes, format: str) -> str:
        """The words in ``audio`` (bytes in ``format``)."""
        if not audio:
            raise ModelError("there is no audio to transcribe", code="invalid_request",
                             retryable=False)
        file = (f"audio.{format}", bytes(audio), MIME_TYPES.get(format, "application/octet-stream"))
        reply = self._call(lambda client: cast(Any, client.audio.transcriptions.create)(
            model=self.model, file=file, timeout=self.timeout, **self.settings))
        text = reply if isinstance(reply, str) else getattr(reply, "text", None)
        if not isinstance(text, str):
            raise ModelError(f"OpenAI transcription for model {self.model!r} answered no "
                             "text", code="model_error", retryable=False)
        return text.strip()


class OpenAISpeaker(_OpenAIAudio):
    """A :class:`~dormant.models.Speaker` on OpenAI's speech API (``client.audio.speech.create``),
    or any server that speaks it.

    ``model``: ``gpt-4o-mini-tts`` by default; ``voice``: ``alloy``; ``format``: ``wav`` (every
    browser plays it, and it is what a realtime model's audio is wrapped in; ``mp3`` or
    ``opus`` are a fraction of its size). Key and client as :class:`OpenAITranscriber`; other
    ``settings`` (``instructions``, ``speed``) go to the call as they are.
    """

    _what = "speech"

    def __init__(self, model: str = "gpt-4o-mini-tts", *, voice: str = "alloy",
                 format: str = "wav", **options: Any) -> None:
        if format not in _SPEECH_FORMATS:
            raise ConfigError(f"OpenAISpeaker format must be one of {_SPEECH_FORMATS}, "
                              f"got {format!r}")
        super().__init__(model, **options)
        self.voice = voice
        self.format = format

    @classmethod
    def from_settings(cls, settings: Settings | None = None, **options: Any) -> OpenAISpeaker:
        """The deployment's speaker (its key read as :meth:`OpenAITranscriber.from_settings`
        reads it)."""
        deployment_key(settings, options)
        return cls(**options)

    def speak(self, text: str) -> tuple[bytes, str]:
        """``text`` read aloud: ``(audio bytes, format)``."""
        reply = self._call(lambda client: cast(Any, client.audio.speech.create)(
            model=self.model, voice=self.voice, input=text, response_format=self.format,
            timeout=self.timeout, **self.settings))
        data = reply.read() if hasattr(reply, "read") else getattr(reply, "content", reply)
        if not isinstance(data, bytes | bytearray) or not data:
            raise ModelError(f"OpenAI speech for model {self.model!r} answered no audio",
                             code="model_error", retryable=True)
        return bytes(data), self.format
