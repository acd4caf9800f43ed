"""``OpenAIModel``: OpenAI's Responses API or Chat Completions, through the official client.

Needs the ``openai`` extra (``pip install 'dormant[openai]'``). This module is imported on
first use of ``dormant.models.OpenAIModel``; the ``openai`` package itself (~300 ms) only when
the first model call needs its client, so a Lambda function builds its model at cold start
for free.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, cast

from dormant.errors import ConfigError
from dormant.models._base import ModelChunk, ModelError, ModelRequest
from dormant.models._hints import HINTS
from dormant.models._openai_client import LazyClient
from dormant.models._openai_errors import classify, redact
from dormant.models._openai_key import deployment_key, openai_api_key_from_settings
from dormant.models._retry import RETRY_AFTER_CAP, Verdict, attempts, with_retries
from dormant.settings import ENV, Settings
from dormant.tools import Aborted, Signal

if TYPE_CHECKING:
    import openai

__all__ = ["RETRY_AFTER_CAP", "OpenAIModel", "openai_api_key_from_settings"]

Api = Literal["responses", "chat_completions"]
_APIS: tuple[Api, ...] = ("responses", "chat_completions")

#: What compatible servers (vLLM, LiteLLM, llama.cpp...) say in a 400 when the conversation is
#: too long, whatever ``code`` they send with it.
_CONTEXT_TEXT = re.compile(r"context[ _-]?(window|length)|too many tokens", re.IGNORECASE)
_HINTS = {
    **HINTS,
    "auth_failed": "check the API key (OPENAI_API_KEY, or the secret named by "
                   f"{ENV.OPENAI_SECRET} / {ENV.OPENAI_PARAMETER})",
    "insufficient_quota": "the OpenAI account has no quota left; check its plan and billing",
    "model_not_found": "check the model name and that the key may use it",
    "rate_limited": "lower the request rate or raise the account's limits",
    "stream_expected": "the server does not stream (a gateway or a mock such as Prism); if it "
                       "serves whole responses, use OpenAIModel(..., stream=False)",
}

#: How much of an error body that is not OpenAI-shaped is kept in the message.
_BODY_TEXT = 500


_MISSING = ("dormant.models.OpenAIModel needs the openai package: pip install "
            "'dormant[openai]'")


def _sdk() -> ModuleType:
    """The ``openai`` package, imported on the first call that needs it."""
    try:
        import openai
    except ImportError as missing:
        raise ImportError(_MISSING) from missing
    return openai


def _unbuilt(reason: str) -> ModelError:
    return ModelError(f"{reason}; {_HINTS['auth_failed']}", code="auth_failed", retryable=False)


class OpenAIModel:
    """A dormant model backed by OpenAI (or any OpenAI-compatible server).

    ``api="responses"`` (the default) is OpenAI's current API: reasoning models stream their
    reasoning summaries there (``thought_delta`` events; ask for them with
    ``reasoning={"summary": "auto"}``) and it is where new OpenAI features land. Use
    ``api="chat_completions"`` for OpenAI-compatible servers (vLLM, Ollama, LiteLLM,
    Bedrock's compatible endpoint), which implement Chat Completions.

    ``client``: an ``openai.OpenAI`` to use; otherwise one is built on first call from
    ``api_key`` / ``base_url`` or the standard ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``
    environment variables. ``api_key`` may be a callable, asked before every request (how
    :meth:`from_settings` reads a key from Secrets Manager or SSM).

    ``stream=False`` asks for whole responses instead of server-sent events (the chunks the
    runtime sees are the same, just fewer). ``strict_tools`` sends tool schemas in strict
    mode where they can be strict without changing what the tool accepts, and as written
    otherwise; set it False for servers that reject ``strict``. Rate limits (429), 408/409
    and 5xx responses and connection errors are retried up to ``max_retries`` times with
    backoff, within the turn's time budget; the client's own retries are turned off so the
    budget holds. A ``Retry-After`` longer than :data:`RETRY_AFTER_CAP` (or than the time left)
    is not waited out, and a request timeout is retried once at most. ``timeout`` caps each
    request (seconds; default the client's); a request never outlives the turn's deadline
    either way. Other ``settings`` (``temperature``, ``reasoning``, ``max_output_tokens``,
    ``store``, ``parallel_tool_calls``...) are passed to the API call as they are; with
    ``store=False`` the Responses API is asked for ``include=["reasoning.encrypted_content"]``
    (unless ``include`` is given) so reasoning items can be sent back on the next calls.

    Failures raise :class:`~dormant.models.ModelError` with a ``code`` (``auth_failed``,
    ``context_overflow``, ``invalid_request``, ``rate_limited``, ``server_error``,
    ``stream_incomplete``...) and the HTTP ``status``; the turn then ends in an ``error``
    result and nothing is committed.
    """

    #: The provider, as traces name it (the GenAI conventions' ``gen_ai.provider.name``).
    provider = "openai"

    def __init__(
        self,
        model: str,
        *,
        client: openai.OpenAI | None = None,
        api: Api = "responses",
        api_key: str | Callable[[], str] | None = None,
        base_url: str | None = None,
        stream: bool = True,
        strict_tools: bool = True,
        max_retries: int = 3,
        timeout: float | None = None,
        **settings: Any,
    ) -> None:
        if client is None and importlib.util.find_spec("openai") is None:
            raise ImportError(_MISSING)  # now, not at the first call (looked up, not imported)
        if not model or not isinstance(model, str):
            raise ConfigError("OpenAIModel needs a model name, e.g. OpenAIModel('gpt-5.6-luna')")
        if api not in _APIS:
            raise ConfigError(f"OpenAIModel api must be one of {_APIS}, got {api!r}")
        if client is not None and (api_key is not None or base_url is not None):
            raise ConfigError("OpenAIModel takes a client or api_key/base_url, not both")
        if max_retries < 0:
            raise ConfigError("OpenAIModel max_retries must be >= 0")
        if {"input", "messages", "instructions", "tools"} & set(settings):
            raise ConfigError("OpenAIModel builds input/messages/instructions/tools from the "
                              "agent's context and tools; pass those there")
        self.model = model
        self.api: Api = api
        self.streaming = stream
        self.strict_tools = strict_tools
        self.max_retries = max_retries
        self.timeout = timeout
        self.settings = settings
        self._client = LazyClient(client, own_retries=True, api_key=api_key, base_url=base_url,
                                  max_retries=0)

    def __repr__(self) -> str:
        return f"OpenAIModel({self.model!r}, api={self.api!r})"

    @classmethod
    def from_settings(cls, settings: Settings | None = None, **options: Any) -> OpenAIModel:
        """The deployment's model: ``DORMANT_OPENAI_MODEL``, with the key read from the
        Secrets Manager secret (``DORMANT_OPENAI_SECRET``) or SSM parameter
        (``DORMANT_OPENAI_PARAMETER``) when one is configured, else ``OPENAI_API_KEY``.

        The key is fetched on the first request, not at import, and cached across warm
        invocations by Powertools parameters (``POWERTOOLS_PARAMETERS_MAX_AGE``, default 5
        minutes), so a rotated key is picked up without a redeploy.
        """
        settings = deployment_key(settings, options)
        return cls(settings.openai_model, **options)

    # --- the model call -------------------------------------------------------------------------

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[ModelChunk]:
        """Call the API and yield its reply as chunks (see :mod:`dormant.models._base`)."""
        # The wire translation loads with the first call, as the openai package does.
        from dormant.models._openai_wire import (
            chat_chunks,
            chat_result_chunks,
            responses_chunks,
            responses_result_chunks,
        )

        body = self._body(request)
        reply, made = self._call(body, signal)
        if not self.streaming:
            whole = (responses_result_chunks(reply) if self.api == "responses"
                     else chat_result_chunks(reply))
            yield from self._translated(whole, signal, made)
            return
        try:
            unstreamed = self._unstreamed(reply)
            if unstreamed is not None:  # a server that ignored stream=true
                whole = (responses_result_chunks(unstreamed) if self.api == "responses"
                         else chat_result_chunks(unstreamed))
                yield from self._translated(whole, signal, made)
                return
            _drop_empty_events(reply)
            events = _Abortable(reply, signal)
            parts = responses_chunks(events) if self.api == "responses" else chat_chunks(events)
            yield from self._translated(parts, signal, made, events)
        finally:
            reply.close()  # a consumer that stops early (abort, error) frees the connection

    def _unstreamed(self, reply: Any) -> Any:
        """The whole response when a streamed request was answered with a JSON body (Prism and
        some gateways ignore ``stream``), parsed as the client parses an unstreamed one; None
        for a real event stream. Iterating such a body as events would find none and pass for
        an empty answer."""
        response = getattr(reply, "response", None)
        if response is None:
            return None
        kind = str(response.headers.get("content-type", ""))
        if "json" not in kind.split(";")[0].lower():
            return None
        try:
            data = json.loads(response.read())
        except ValueError as error:
            raise self._error(None, "stream_expected", f"the server answered a streamed "
                              f"request with {kind} that is not JSON") from error
        except Exception as error:  # the transport's own types (which httpx the client runs on)
            raise self._error(None, "connection_error", f"reading the response failed "
                              f"({type(error).__name__}: {error})") from error
        from openai.types.chat import ChatCompletion
        from openai.types.responses import Response

        shape, field = ((Response, "output") if self.api == "responses"
                        else (ChatCompletion, "choices"))
        if not isinstance(data, dict) or not isinstance(data.get(field), list):
            failure = data.get("error") if isinstance(data, dict) else None
            message = (failure.get("message") if isinstance(failure, dict) else failure)
            raise self._error(None, "stream_expected", "the server ignored stream=true and "
                              "answered with a JSON body that is not a response"
                              + (f": {message}" if message else ""))
        # construct: no validation, as the client parses replies (compatible servers vary)
        return shape.construct(**data)

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        from dormant.models._openai_wire import chat_request, responses_request

        if self.api == "responses":
            body = responses_request(request, strict=self.strict_tools)
        else:
            body = chat_request(request, strict=self.strict_tools)
        body.update(self.settings)
        body.update(request.settings)
        body["model"] = self.model
        body["stream"] = self.streaming
        if self.api == "chat_completions" and self.streaming:  # usage arrives only if asked
            body["stream_options"] = {**body.get("stream_options", {}), "include_usage": True}
        if self.api == "responses" and body.get("store") is False and "include" not in body:
            # Unstored reasoning can only be sent back encrypted: ask for it.
            body["include"] = ["reasoning.encrypted_content"]
        return body

    def _translated(self, chunks: Iterator[ModelChunk], signal: Signal, made: int,
                    events: _Abortable | None = None) -> Iterator[ModelChunk]:
        from dormant.models._openai_wire import StreamFailed

        openai = _sdk()
        try:
            yield from chunks
        except StreamFailed as error:
            note = (f"reported inside the reply, after {attempts(made)}; not retried"
                    if error.code != "stream_incomplete" else "")
            raise self._error(None, error.code, str(error), note) from error
        except openai.APIError as error:
            if signal.aborted:  # a read cut short by the turn's deadline
                raise Aborted("the turn was aborted") from error
            if events is not None and isinstance(error, openai.APITimeoutError):
                raise self._error(None, "timeout", f"the stream stalled past the request "
                                  f"timeout after {events.count} events") from error
            if events is not None and isinstance(error, openai.APIConnectionError):
                # connected and streaming, then cut: not the same as an unreachable API
                raise self._error(None, "stream_incomplete", f"the connection closed "
                                  f"mid-stream after {events.count} events") from error
            raise self._api_error(error) from error

    def _call(self, body: dict[str, Any], signal: Signal) -> tuple[Any, int]:
        """One API call, retried on transient failures within the turn's time budget: the
        reply, and how many attempts it took."""
        client = self._openai()
        openai = _sdk()
        create = cast(Any, client.responses.create if self.api == "responses"
                      else client.chat.completions.create)

        def judge(failure: Exception) -> Verdict | None:
            if not isinstance(failure, openai.APIError):
                return None
            return Verdict(_retryable(failure), isinstance(failure, openai.APITimeoutError),
                           _retry_after(failure))

        def fail(failure: Exception, note: str) -> ModelError:
            assert isinstance(failure, openai.APIError)  # what judge let through
            return self._api_error(failure, note)

        return with_retries(lambda: create(**body, **self._timeout(signal)), signal=signal,
                            max_retries=self.max_retries, judge=judge, fail=fail)

    def _timeout(self, signal: Signal) -> dict[str, float]:
        """The request timeout: the turn's remaining time, the model's own, or (neither set)
        nothing, leaving the client's default (``None`` would mean no timeout at all)."""
        limits = [t for t in (signal.remaining(), self.timeout) if t is not None]
        return {"timeout": min(limits)} if limits else {}

    def _openai(self) -> openai.OpenAI:
        client: openai.OpenAI = self._client.get(_sdk(), _unbuilt)
        return client

    # --- errors ---------------------------------------------------------------------------------

    def _api_error(self, error: openai.APIError, note: str = "") -> ModelError:
        openai = _sdk()
        status = getattr(error, "status_code", None)
        message = _explanation(error)
        if isinstance(error, openai.APITimeoutError):
            return self._error(None, "timeout", "the request timed out", note)
        if isinstance(error, openai.APIConnectionError):
            return self._error(None, "connection_error", f"cannot reach the API ({message})",
                               note)
        code = None if error.code == str(status) else error.code  # vLLM sends the status
        return self._error(status, code, message, note)

    def _error(self, status: int | None, api_code: str | None, message: str,
               note: str = "") -> ModelError:
        code, retryable = _classify(status, api_code, message)
        where = "Responses API" if self.api == "responses" else "Chat Completions"
        detail = f"{status} {api_code or code}" if status else (api_code or code)
        text = f"OpenAI {where} call for model {self.model!r} failed ({detail}): {message}"
        if note:
            text += f" ({note})"
        hint = _HINTS.get(code)
        if hint:
            text += f" — {hint}"
        return ModelError(redact(text), code=code, status=status, retryable=retryable)


def _classify(status: int | None, api_code: str | None, message: str = ""
              ) -> tuple[str, bool]:
    if status == 400 and _CONTEXT_TEXT.search(message):
        return "context_overflow", False
    return classify(status, api_code)


def _retryable(error: openai.APIError) -> bool:
    openai = _sdk()
    if isinstance(error, openai.APIConnectionError):
        return True
    if not isinstance(error, openai.APIStatusError):
        return False
    return _classify(error.status_code, error.code)[1]


def _explanation(error: openai.APIError) -> str:
    """What the server said went wrong: OpenAI's ``message``, else a problem+json
    ``title``/``detail`` or a ``{"detail": ...}`` body (FastAPI, gateways), else the body's
    text; the client's own message (``Error code: 400``) only when the body says nothing."""
    body = error.body
    if isinstance(body, dict):
        if isinstance(body.get("message"), str) and body["message"]:
            return str(body["message"])
        parts = [part if isinstance(part, str) else json.dumps(part, ensure_ascii=False)
                 for part in (body.get("title"), body.get("detail")) if part]
        if parts:
            return _clipped(": ".join(parts))
    elif isinstance(body, str) and body.strip():
        return _clipped(body)
    return str(error.message)


def _clipped(text: str) -> str:
    text = " ".join(text.split())  # an HTML error page on one line
    return text if len(text) <= _BODY_TEXT else text[:_BODY_TEXT] + "…"


def _retry_after(error: openai.APIError) -> float | None:
    """The seconds the server's ``Retry-After`` (or ``retry-after-ms``) asks for, if any."""
    response = getattr(error, "response", None)
    headers = response.headers if response is not None else {}
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value:
            try:
                return max(0.0, float(value) * scale)
            except ValueError:
                pass  # an HTTP date: rare from these APIs; backoff instead
    return None


def _drop_empty_events(reply: Any) -> None:
    """Read ``reply`` (an ``openai.Stream`` not yet iterated) the way the SSE spec does.

    The ``openai`` package's decoder (``openai/_streaming.py``, ``SSEDecoder.decode``)
    dispatches an event at a blank line whenever a ``retry:`` field came before it (or an
    ``id:`` ever did: it keeps the last id), even with no ``data:`` line; the spec dispatches
    no event when the data buffer is empty. ``Stream.__stream__`` then parses that empty data
    as JSON and fails, so a server that sends ``retry: 3000`` (legal, and common) failed every
    attempt as ``stream_incomplete``. The stream reads its decoder on the first iteration:
    wrapped here, the events with empty data are dropped before the stream sees them. A
    client whose stream has no such decoder is left as it is."""
    decoder = getattr(reply, "_decoder", None)
    if decoder is not None and callable(getattr(decoder, "iter_bytes", None)):
        reply._decoder = _SpecDecoder(decoder)


class _SpecDecoder:
    """An SSE decoder that dispatches no event with empty data (see
    :func:`_drop_empty_events`), around the client's own."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def iter_bytes(self, iterator: Iterator[bytes]) -> Iterator[Any]:
        return (sse for sse in self._inner.iter_bytes(iterator) if sse.data != "")

    async def aiter_bytes(self, iterator: Any) -> Any:  # the protocol's; sync models only
        async for sse in self._inner.aiter_bytes(iterator):
            if sse.data != "":
                yield sse


class _Abortable:
    """Iterates a streamed reply, stopping (and closing the HTTP stream) on abort."""

    def __init__(self, reply: Any, signal: Signal) -> None:
        self._reply = reply
        self._signal = signal
        #: Events read so far (what a cut stream's error reports).
        self.count = 0

    def __iter__(self) -> Iterator[Any]:
        from dormant.models._openai_wire import StreamFailed

        events = iter(self._reply)
        while True:
            self._check()  # before blocking on the next read, and again after it
            try:
                event = next(events)
            except StopIteration:
                return
            except json.JSONDecodeError as error:  # the client parses each event's data
                raise StreamFailed(f"event {self.count + 1} of the stream was not JSON "
                                   f"({error.msg} at {error.pos})",
                                   code="stream_incomplete") from error
            self._check()
            self.count += 1
            yield event

    def _check(self) -> None:
        if self._signal.aborted:
            self._reply.close()
            raise Aborted("the turn was aborted")
