"""``BedrockModel``: Amazon Bedrock's Converse API, streamed (``ConverseStream``), through boto3.

This module is imported on first use of ``dormant.models.BedrockModel``; boto3 itself only
when the first model call builds its client, so a Lambda function builds its model at cold
start for free.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from dormant.errors import ConfigError
from dormant.models._base import ModelChunk, ModelError, ModelRequest
from dormant.models._hints import HINTS
from dormant.models._retry import Verdict, attempts, with_retries
from dormant.settings import ENV, Settings
from dormant.tools import TOOL_NAME, Aborted, Signal

__all__ = ["BedrockModel"]

#: Bedrock error code → (dormant error code, worth retrying); the codes are those of
#: :class:`~dormant.models.OpenAIModel`'s errors.
ERRORS: dict[str, tuple[str, bool]] = {
    "ThrottlingException": ("rate_limited", True),
    "ServiceUnavailableException": ("server_error", True),
    "InternalServerException": ("server_error", True),
    "ModelNotReadyException": ("model_not_ready", True),
    "ModelTimeoutException": ("timeout", True),
    "ModelStreamErrorException": ("stream_incomplete", True),
    "ModelErrorException": ("model_error", False),
    "ValidationException": ("invalid_request", False),
    "AccessDeniedException": ("permission_denied", False),
    "ResourceNotFoundException": ("model_not_found", False),
    "ServiceQuotaExceededException": ("insufficient_quota", False),
    "UnrecognizedClientException": ("auth_failed", False),
    "InvalidSignatureException": ("auth_failed", False),
    "ExpiredTokenException": ("auth_failed", False),
}
#: What a ValidationException says when the conversation does not fit the model.
_CONTEXT_TEXT = re.compile(r"too long|too many (input )?tokens|context[ _-]?(window|length)"
                           r"|exceeds? the maximum (number of )?(input )?tokens", re.IGNORECASE)
_HINTS = {
    **HINTS,
    "auth_failed": "check the AWS credentials (AWS_PROFILE, AWS_ACCESS_KEY_ID, or the "
                   "function's role)",
    "permission_denied": "grant bedrock:InvokeModelWithResponseStream on the model (or "
                         "inference profile) and enable model access in the Bedrock console",
    "model_not_found": "check the model id (or inference profile id) and the region",
    "model_not_ready": "the model is still being loaded; try again shortly",
    "rate_limited": "lower the request rate or raise the account's Bedrock quotas",
}
#: Connect timeout (seconds) of the client built here; reads wait ``timeout``.
_CONNECT_TIMEOUT = 10.0
_READ_TIMEOUT = 60.0
_MISSING = "dormant.models.BedrockModel needs boto3: pip install 'dormant[aws]'"


class BedrockModel:
    """A dormant model backed by Amazon Bedrock's Converse API (any model Converse serves:
    Anthropic Claude, Amazon Nova, Meta Llama, Mistral...), streamed.

    ``model_id``: a model id (``anthropic.claude-sonnet-4-5-20250929-v1:0``) or an inference
    profile id or ARN (``us.anthropic...``). ``client``: a boto3 ``bedrock-runtime`` client to
    use as it is; otherwise one is built on the first call (once per model, any thread) in
    ``region`` or the standard AWS environment (``AWS_REGION``, profiles; the endpoint from
    ``AWS_ENDPOINT_URL_BEDROCK_RUNTIME`` or ``AWS_ENDPOINT_URL`` when set), with boto3's own
    retries off and ``timeout`` (seconds, default 60) as its read timeout.

    ``inference_config`` is Converse's ``inferenceConfig`` (``maxTokens``, ``temperature``,
    ``topP``, ``stopSequences``); ``additional_fields`` its ``additionalModelRequestFields``
    (e.g. ``{"thinking": {"type": "enabled", "budget_tokens": 2048}}`` for Claude's extended
    thinking). A request's ``settings`` are further ``converse_stream`` parameters
    (``guardrailConfig``, ``performanceConfig``...), merged over these.

    ``cache``: prompt-caching points (``cachePoint`` blocks) after the system prompts and the
    tool specs. None (the default) turns them on for the models known to take them: Anthropic
    Claude from 3.5 Haiku / 3.5 Sonnet v2 / 3.7 on (system and tools) and Amazon Nova (system
    only); True asks for both on any model, False for none.

    Reasoning (``reasoningContent`` blocks) streams as thought deltas and is kept in the
    ledger as items ``{"type": "bedrock_reasoning", "reasoningText": {"text", "signature"}}``
    or ``{"type": "bedrock_reasoning", "redactedContent": <base64>}``, sent back before the
    text and tool calls they led to (other providers' items are left out). Usage counts every
    input token in ``input_tokens`` (cache reads and writes too) and the cache reads in
    ``cached_tokens``.

    ``system_tools``: names of Bedrock's own tools to offer (``{"systemTool": {"name": ...}}``
    in ``toolConfig``, e.g. Amazon Nova's ``nova_grounding``). Bedrock runs such a call
    itself: its ``toolUse`` (``type`` ``server_tool_use``) and ``toolResult`` come in the
    reply, are recorded as a ``tool_call`` and ``tool_result`` with ``provider_executed``
    (the ``type`` and ``status`` in ``provider_metadata``, the result as Bedrock's content
    blocks) and are never run locally; later requests send the pair back in the assistant's
    message. An approval policy cannot name one (Bedrock ran it before dormant saw it): the
    agent is refused when built.

    Stop reasons: ``max_tokens`` and ``model_context_window_exceeded`` keep the text so far;
    ``guardrail_intervened`` and ``content_filtered`` keep the text (a guardrail's blocked
    message) and drop tool calls; both log a warning. ``malformed_model_output`` and
    ``malformed_tool_use`` fail the step (``model_error``, retryable).

    Throttling, service unavailable, internal errors, a model not ready, connection errors
    and timeouts are retried up to ``max_retries`` times with backoff, within the turn's time
    budget (a timeout once at most). Failures raise :class:`~dormant.models.ModelError` with
    the codes :class:`~dormant.models.OpenAIModel` uses (``rate_limited``, ``server_error``,
    ``model_not_ready``, ``timeout``, ``context_overflow``, ``invalid_request``,
    ``permission_denied``, ``model_not_found``, ``auth_failed``, ``connection_error``,
    ``stream_incomplete``...); the turn then ends in an ``error`` result and nothing of the
    step is committed. A failure inside a stream that has started is not retried here (its
    text has already streamed to clients): it is raised, marked retryable.
    """

    #: The provider, as traces name it (the GenAI conventions' ``gen_ai.provider.name``).
    provider = "aws.bedrock"

    def __init__(
        self,
        model_id: str,
        *,
        client: Any = None,
        region: str | None = None,
        inference_config: dict[str, Any] | None = None,
        additional_fields: dict[str, Any] | None = None,
        cache: bool | None = None,
        max_retries: int = 3,
        timeout: float | None = None,
        system_tools: Sequence[str] = (),
    ) -> None:
        if not model_id or not isinstance(model_id, str):
            raise ConfigError("BedrockModel needs a model id, e.g. "
                              "BedrockModel('us.anthropic.claude-sonnet-4-5-20250929-v1:0')")
        if client is not None and region is not None:
            raise ConfigError("BedrockModel takes a client or a region, not both")
        if max_retries < 0:
            raise ConfigError("BedrockModel max_retries must be >= 0")
        if timeout is not None and timeout <= 0:
            raise ConfigError("BedrockModel timeout must be > 0 seconds")
        if isinstance(system_tools, str):
            system_tools = (system_tools,)
        for name in system_tools:
            if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
                raise ConfigError(f"BedrockModel system_tools: {name!r} is not a tool name "
                                  "Bedrock takes (1-64 letters, digits, '_' or '-')")
        #: Bedrock's own tools offered to the model (``systemTool``): Bedrock runs them.
        self.system_tools: tuple[str, ...] = tuple(dict.fromkeys(system_tools))
        self.model_id = model_id
        self.region = region
        self.inference_config = dict(inference_config or {})
        self.additional_fields = dict(additional_fields or {})
        self.cache = cache
        self.max_retries = max_retries
        self.timeout = timeout
        self._client: Any = client
        self._lock = threading.Lock()

    @property
    def model(self) -> str:
        """The model id (what ``dormant dev`` shows as the model served)."""
        return self.model_id

    def __repr__(self) -> str:
        return f"BedrockModel({self.model_id!r})"

    @classmethod
    def from_settings(cls, settings: Settings | None = None, **options: Any) -> BedrockModel:
        """The deployment's model: ``DORMANT_BEDROCK_MODEL``, in the standard AWS region."""
        settings = settings if settings is not None else Settings.from_env()
        if not settings.bedrock_model:
            raise ConfigError(f"BedrockModel.from_settings needs {ENV.BEDROCK_MODEL}: a Bedrock "
                              f"model or inference profile id")
        return cls(settings.bedrock_model, **options)

    # --- the model call -------------------------------------------------------------------------

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[ModelChunk]:
        """Call ConverseStream and yield its reply as chunks (see :mod:`dormant.models._base`)."""
        from dormant.models._bedrock_wire import converse_chunks

        body = self._body(request)
        reply, made = self._call(body, signal)
        events = reply["stream"]
        request_id = (reply.get("ResponseMetadata") or {}).get("RequestId")
        try:
            yield from self._translated(converse_chunks(self._read(events, signal),
                                                        self.model_id, request_id), made)
        finally:
            events.close()  # a consumer that stops early (abort, error) frees the connection

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        from dormant.models._bedrock_wire import cache_points, converse_request

        if self.cache is None:
            cache = cache_points(self.model_id)
        else:
            cache = frozenset({"system", "tools"} if self.cache else ())
        body = converse_request(request, cache=cache, system_tools=self.system_tools)
        body["modelId"] = self.model_id
        if self.inference_config:
            body["inferenceConfig"] = self.inference_config
        if self.additional_fields:
            body["additionalModelRequestFields"] = self.additional_fields
        body.update(request.settings)
        return body

    def _call(self, body: dict[str, Any], signal: Signal) -> tuple[Any, int]:
        """One ConverseStream call, retried on transient failures within the turn's time
        budget: the reply (its event stream not yet read), and how many attempts it took."""
        client = self._bedrock()
        from botocore.exceptions import BotoCoreError, ClientError, ReadTimeoutError

        def judge(failure: Exception) -> Verdict | None:
            if not isinstance(failure, BotoCoreError | ClientError):
                return None
            code, retryable = _classify(failure)
            return Verdict(retryable, isinstance(failure, ReadTimeoutError) or code == "timeout",
                           _retry_after(failure))

        return with_retries(lambda: client.converse_stream(**body), signal=signal,
                            max_retries=self.max_retries, judge=judge, fail=self._error)

    def _read(self, stream: Any, signal: Signal) -> Iterator[dict[str, Any]]:
        """The stream's events, stopping (and closing the stream) on abort; a failure while
        reading (an exception event, a cut connection, a stall) as a :class:`ModelError`."""
        from botocore.exceptions import BotoCoreError, ClientError
        from botocore.exceptions import ReadTimeoutError as BotoReadTimeout
        from urllib3.exceptions import HTTPError, ReadTimeoutError

        events = iter(stream)
        count = 0
        while True:
            self._check(stream, signal)  # before blocking on the next read, and again after
            try:
                event = next(events)
            except StopIteration:
                return
            except (BotoCoreError, ClientError, HTTPError, OSError) as failure:
                if signal.aborted:  # a read cut short by the close on abort
                    raise Aborted("the turn was aborted") from failure
                if isinstance(failure, ClientError):  # an exception event in the stream
                    code, retryable = _classify(failure)
                    if code not in ("invalid_request", "context_overflow"):
                        code, retryable = "stream_incomplete", True
                    raise self._error(failure, f"reported inside the stream after {count} "
                                               f"events", code=code, retryable=retryable
                                      ) from failure
                if isinstance(failure, ReadTimeoutError | BotoReadTimeout | TimeoutError):
                    raise self._fail("timeout", True, type(failure).__name__, f"the stream "
                                     f"stalled past the read timeout after {count} events"
                                     ) from failure
                raise self._fail("stream_incomplete", True, type(failure).__name__,
                                 f"the connection closed mid-stream after {count} events "
                                 f"({failure})") from failure
            self._check(stream, signal)
            count += 1
            yield event

    @staticmethod
    def _check(stream: Any, signal: Signal) -> None:
        if signal.aborted:
            stream.close()
            raise Aborted("the turn was aborted")

    def _translated(self, chunks: Iterator[ModelChunk], made: int) -> Iterator[ModelChunk]:
        from dormant.models._bedrock_wire import StreamFailed

        try:
            yield from chunks
        except StreamFailed as failure:
            raise self._fail(failure.code, failure.retryable, failure.code, str(failure),
                             f"after {attempts(made)}") from failure

    def _bedrock(self) -> Any:
        """The boto3 ``bedrock-runtime`` client: the one given, or one built on first use."""
        with self._lock:
            if self._client is None:
                self._client = self._build_client()
            return self._client

    def _build_client(self) -> Any:
        try:
            import boto3
            from botocore.config import Config
            from botocore.exceptions import BotoCoreError
        except ImportError as missing:
            raise ImportError(_MISSING) from missing
        # Retries are ours, inside the turn's budget: one attempt per call. (Config's own
        # "max_attempts" counts retries, not attempts: 1 would mean two requests.)
        config = Config(retries={"total_max_attempts": 1, "mode": "standard"},
                        connect_timeout=_CONNECT_TIMEOUT,
                        read_timeout=self.timeout or _READ_TIMEOUT)
        try:
            # A session of its own: boto3's default session is not safe to share across threads.
            # AWS_REGION as Lambda and the AWS SDKs set it; boto3 itself reads only
            # AWS_DEFAULT_REGION and the profile's region, which it falls back to.
            region = self.region or os.environ.get("AWS_REGION") or None
            session = boto3.session.Session(region_name=region)
            return session.client("bedrock-runtime", config=config)
        except BotoCoreError as error:  # no region, a broken profile...
            raise ModelError(f"cannot build the Bedrock client for model {self.model_id!r}: "
                             f"{error}; set AWS_REGION (or AWS_DEFAULT_REGION) or pass "
                             f"BedrockModel(..., region=...)",
                             code="invalid_request", retryable=False) from error

    # --- errors ---------------------------------------------------------------------------------

    def _error(self, failure: Exception, note: str = "", *, code: str | None = None,
               retryable: bool | None = None) -> ModelError:
        found, worth = _classify(failure)
        name, message = _described(failure)
        return self._fail(code or found, worth if retryable is None else retryable, name,
                          message, note, status=_status(failure))

    def _fail(self, code: str, retryable: bool, name: str, message: str, note: str = "", *,
              status: int | None = None) -> ModelError:
        text = f"Bedrock ConverseStream call for model {self.model_id!r} failed ({name}): " \
               f"{message}"
        if note:
            text += f" ({note})"
        hint = _HINTS.get(code)
        if hint:
            text += f" — {hint}"
        return ModelError(text, code=code, status=status, retryable=retryable)


def _described(failure: Exception) -> tuple[str, str]:
    """(Bedrock's error name, its message) of a botocore failure. Exceptions
    inside a stream come named as their event (``throttlingException``): capitalised here."""
    from botocore.exceptions import ClientError

    if isinstance(failure, ClientError):
        error = failure.response.get("Error", {})
        raw = str(error.get("Code") or "")
        name = raw[:1].upper() + raw[1:] if raw else "ClientError"
        return name, str(error.get("Message") or failure)
    return type(failure).__name__, str(failure)


def _classify(failure: Exception) -> tuple[str, bool]:
    """(dormant error code, worth retrying) for a botocore failure."""
    from botocore import exceptions as boto

    if isinstance(failure, boto.ClientError):
        name, message = _described(failure)
        if name == "ValidationException" and _CONTEXT_TEXT.search(message):
            return "context_overflow", False
        if name in ERRORS:
            return ERRORS[name]
        status = _status(failure)
        if status is not None and status >= 500:
            return "server_error", True
        if status == 429:
            return "rate_limited", True
        return "model_error", False
    if isinstance(failure, boto.ReadTimeoutError):
        return "timeout", True
    if isinstance(failure, boto.ConnectionError | boto.HTTPClientError):
        return "connection_error", True
    if isinstance(failure, boto.NoCredentialsError | boto.PartialCredentialsError):
        return "auth_failed", False
    if isinstance(failure, boto.ParamValidationError):
        return "invalid_request", False
    return "model_error", False


def _status(failure: Exception) -> int | None:
    response = getattr(failure, "response", None)
    if not isinstance(response, dict):
        return None
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return status if isinstance(status, int) else None


def _retry_after(failure: Exception) -> float | None:
    """The seconds a ``Retry-After`` header asks for, if the error response had one."""
    response = getattr(failure, "response", None)
    if not isinstance(response, dict):
        return None
    headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
    value = headers.get("retry-after") if isinstance(headers, dict) else None
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None
