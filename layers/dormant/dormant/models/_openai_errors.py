"""What an OpenAI failure means, for every OpenAI adapter (``OpenAIModel``,
``OpenAIRealtimeModel``, ``OpenAITranscriber``, ``OpenAISpeaker``): one table from an HTTP
status or an OpenAI error code to dormant's error code and whether calling again can succeed,
and the redaction of keys from error text.

Free of the ``openai`` package: the adapters import it only when a call needs it.
"""

from __future__ import annotations

import re

__all__ = ["API_CODES", "STATUS", "classify", "redact"]

#: HTTP status → (dormant error code, worth retrying). A 5xx is ``server_error``, retried.
STATUS: dict[int, tuple[str, bool]] = {
    400: ("invalid_request", False),
    401: ("auth_failed", False),
    403: ("permission_denied", False),
    404: ("model_not_found", False),  # a wrong model name, or a base URL that serves none
    408: ("timeout", True),
    409: ("conflict_upstream", True),
    413: ("request_too_large", False),
    422: ("invalid_request", False),
    429: ("rate_limited", True),
}
#: OpenAI error codes (and Realtime error types) that say more than their status.
API_CODES: dict[str, tuple[str, bool]] = {
    "context_length_exceeded": ("context_overflow", False),
    "string_above_max_length": ("context_overflow", False),
    "insufficient_quota": ("insufficient_quota", False),
    "invalid_api_key": ("auth_failed", False),
    "model_not_found": ("model_not_found", False),
    "rate_limit_exceeded": ("rate_limited", True),
    "server_error": ("server_error", True),
    "invalid_request_error": ("invalid_request", False),
    "session_expired": ("session_expired", True),
    # dormant's own codes, for failures with no HTTP status of their own
    "connection_error": ("connection_error", True),
    "timeout": ("timeout", True),
    "stream_incomplete": ("stream_incomplete", True),
    "stream_expected": ("stream_expected", False),
    "response_failed": ("response_failed", False),
    "stream_error": ("stream_error", False),
}

_SECRET_TEXT = re.compile(r"\b(sk-|Bearer\s+)[A-Za-z0-9_\-*.]{3,}")


def classify(status: int | None, api_code: str | None = None) -> tuple[str, bool]:
    """(dormant error code, worth retrying) for a failure with this status and OpenAI code:
    always one of :data:`dormant.errors.MODEL_ERROR_CODES` or ``model_error``."""
    if api_code in API_CODES:
        return API_CODES[api_code]
    if status is not None and status >= 500:
        return "server_error", True
    if status is not None:
        return STATUS.get(status, ("model_error", False))
    return "model_error", False  # a code of the server's own: named in the message


def redact(text: str) -> str:
    """``text`` with anything that looks like an API key or a bearer token starred out."""
    return _SECRET_TEXT.sub(r"\1***", text)
