"""The exceptions dormant raises. One root; user mistakes apart from failures.

Each message names the id involved and what to do about it. HTTP layers map them to status
codes through :data:`HTTP_STATUS` (one table, not an ``isinstance`` chain).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError

__all__ = [
    "HTTP_STATUS",
    "AlreadyAnswered",
    "AlreadyDecided",
    "ConfigError",
    "DormantError",
    "DuplicateMessage",
    "EventRefused",
    "InputError",
    "NotPending",
    "NotRunning",
    "PendingInputError",
    "ResumeError",
    "RetryRefused",
    "SchedulerError",
    "ServerOnly",
    "SessionExists",
    "SessionFailed",
    "SessionMoved",
    "SessionNotFound",
    "SessionPaused",
    "SessionRunning",
    "StaleTimer",
    "StoreError",
    "TimerRefused",
    "ToolSourceMisconfigured",
    "ToolSourceUnavailable",
    "describe_validation",
    "is_client_error",
    "public_message",
]


class DormantError(Exception):
    """Root of every error dormant raises on purpose."""

    code = "dormant_error"


class ConfigError(DormantError, ValueError):
    """The app, an agent or a tool was declared wrongly (a programming mistake)."""

    code = "config_error"


class InputError(DormantError, ValueError):
    """A request asked for something the session cannot accept. Nothing was written."""

    code = "invalid_input"


class SessionExists(InputError):
    """A session was to be made under an id another session holds. Nothing was written."""

    code = "session_exists"

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id} already exists")


class PendingInputError(InputError):
    """A user message reached a session that waits for tool input or an approval."""

    code = "awaiting_input"

    def __init__(self, session_id: str, pending: Sequence[tuple[str, str]]) -> None:
        self.session_id = session_id
        self.pending = list(pending)
        calls = ", ".join(f"{name} ({call_id})" for call_id, name in self.pending)
        super().__init__(
            f"session {session_id} is awaiting input for {calls}; answer those calls "
            "(input.tools) before sending a new message"
        )


class DuplicateMessage(InputError):
    """A message whose id the session already holds: a redelivery, which lands once."""

    code = "duplicate_message"

    def __init__(self, session_id: str, message_id: str) -> None:
        self.session_id = session_id
        self.message_id = message_id
        super().__init__(f"message {message_id} is already in session {session_id}")


class AlreadyDecided(InputError):
    """A decision for an approval somebody else decided first: nothing ran, nothing written."""

    code = "already_decided"

    def __init__(self, session_id: str, approval_id: str) -> None:
        self.session_id = session_id
        self.approval_id = approval_id
        super().__init__(f"approval {approval_id} in session {session_id} was already decided; "
                         "this decision was not applied and nothing ran")


class AlreadyAnswered(InputError):
    """An answer to a call somebody else answered first: nothing ran, nothing written."""

    code = "already_answered"

    def __init__(self, session_id: str, call_id: str) -> None:
        self.session_id = session_id
        self.call_id = call_id
        super().__init__(f"call {call_id} in session {session_id} was already answered; "
                         "this answer was not applied and nothing ran")


class SessionFailed(InputError):
    """A message reached a session whose invocation failed: retry (or interrupt) it first."""

    code = "session_failed"

    def __init__(self, session_id: str, invocation_id: str | None) -> None:
        self.session_id = session_id
        self.invocation_id = invocation_id
        super().__init__(f"session {session_id} has a failed invocation ({invocation_id}); "
                         "retry it first (input.retry = {\"retry_id\": ...})")


class SessionMoved(InputError):
    """Inputs recorded with no turn (an inbox edit, an interrupt…) no longer fit the session:
    another request changed it first. Nothing was written; send them again."""

    code = "conflict"

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id} moved while this request was applied; "
                         "nothing was written: send it again")


class SessionPaused(InputError):
    """A message (or turn) reached a paused session with ``if_busy="reject"``; resume it."""

    code = "session_paused"

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id} is paused; resume it first "
                         "(input.resume = true), or send the message to its inbox")


class SessionRunning(InputError):
    """A message with ``if_busy="reject"`` reached a session whose resumed invocation is
    running (its answer or decision was claimed and its tools run now)."""

    code = "session_running"

    def __init__(self, session_id: str, invocation_id: str | None) -> None:
        self.session_id = session_id
        self.invocation_id = invocation_id
        super().__init__(f"session {session_id} is running invocation {invocation_id}; send "
                         "the message to its inbox (the default), steer the invocation, or "
                         "interrupt it if its turn died")


class RetryRefused(InputError):
    """A retry for a session with nothing to retry, or a retry id that already landed."""

    code = "nothing_to_retry"

    def __init__(self, session_id: str, retry_id: str, *, duplicate: bool = False) -> None:
        self.session_id = session_id
        self.retry_id = retry_id
        if duplicate:
            self.code = "duplicate_retry"
            reason = "this retry already landed (a retry id lands once)"
        else:
            reason = "it has no failed invocation to retry"
        super().__init__(f"retry {retry_id} refused in session {session_id}: {reason}")


class NotRunning(InputError):
    """A stop (or steer) named an invocation that is not running: it ended, or it is an
    older one. Nothing was written, and nothing of a later invocation was touched."""

    code = "not_running"

    def __init__(self, session_id: str, invocation_id: str, why: str = "it already ended "
                 "(or is an older invocation)") -> None:
        self.session_id = session_id
        self.invocation_id = invocation_id
        super().__init__(f"invocation {invocation_id} of session {session_id} is not "
                         f"running: {why}; nothing was written")


class NotPending(InputError):
    """The request names something the session does not wait on now: an interrupt's owner (a
    delayed interrupt must not end later work), an inbox operation's message that is not
    queued, an answer for a call that is not awaiting input, a decision for an approval that
    is not pending, or a request with nothing to run (no message, nothing parked to resume).
    A conflict with the session's state (409), not a malformed request."""

    code = "not_pending"


class ServerOnly(InputError):
    """A public request carried an input only trusted server code may send."""

    code = "server_only"


class StaleTimer(InputError):
    """A timer delivery for a timer that was cancelled, replaced or already delivered."""

    code = "stale_timer"

    def __init__(self, session_id: str, name: str) -> None:
        self.session_id = session_id
        self.name = name
        super().__init__(f"timer {name!r} of session {session_id} is not pending (cancelled, "
                         "replaced or already delivered): nothing to deliver")


class ResumeError(DormantError):
    """A ledger was asked to resume while some yields have no input."""

    code = "not_ready_to_resume"


class SessionNotFound(DormantError, LookupError):
    """No such session (or not one the caller may see)."""

    code = "session_not_found"

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id} not found")


class StoreError(DormantError):
    """The store failed (not a version conflict: those are data, see ``CommitResult``).

    ``retryable`` False marks a deterministic refusal (access denied, a missing table or
    bucket, a request the store will always reject): trying again cannot succeed, so commit
    policies do not. True (the default) covers timeouts and throttling, where the write may
    even have landed: the policy re-reads before deciding.
    """

    code = "store_error"

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class SchedulerError(DormantError):
    """The timer backend (e.g. EventBridge Scheduler) refused or failed a set or cancel.

    ``retryable`` False marks a deterministic refusal (a validation error, a time beyond the
    backend's limit): setting the same timer again cannot succeed, so it is not retried."""

    code = "scheduler_error"

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class TimerRefused(SchedulerError, ValueError):
    """A timer that would never fire, refused when it is asked for (``session.schedule``):
    the app has no scheduler, or its scheduler rejects the timer for good (validation, a
    time beyond its limit). Nothing is recorded; a tool that asked gets this as its error."""

    code = "timer_refused"

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class ToolSourceUnavailable(DormantError):
    """A tool source (an MCP server, :class:`dormant.mcp.MCPServer`) could not list its tools
    when a turn first needed them. The turn fails before any model call and writes nothing;
    the request may be retried (the listing is tried again on the next turn)."""

    code = "tool_source_unavailable"
    retryable = True

    def __init__(self, source: str, reason: str) -> None:
        self.source = source
        super().__init__(f"tool source {source} is unavailable: {reason}; retry the request")


class ToolSourceMisconfigured(ConfigError):
    """A tool source (an MCP server) is set up wrongly: its URL answers that no MCP server of
    that transport is there (a 404, a 405, an HTML page: a wrong path, or a legacy-SSE-only
    server reached as streamable HTTP), or its command cannot be run. The turn fails before
    any model call and writes nothing; retrying the same request cannot help until the app's
    configuration is fixed, so it is not retryable."""

    code = "tool_source_misconfigured"
    retryable = False

    def __init__(self, source: str, reason: str, fix: str) -> None:
        self.source = source
        super().__init__(f"tool source {source} is misconfigured: {reason}; {fix} "
                         "(retrying will not help)")


class EventRefused(InputError):
    """An application event that is not declared (``app.event``) or whose data does not fit
    its declared schema. Nothing was written."""

    code = "invalid_event"


def describe_validation(error: ValidationError, root: str = "body") -> str:
    """``field.path: what is wrong; …`` for a pydantic error (``root`` names a top-level one)."""
    parts = []
    for item in error.errors(include_url=False):
        where = ".".join(str(p) for p in item["loc"]) or root
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


#: What a model adapter's :class:`~dormant.models.ModelError` may be coded as (beside the
#: generic ``model_error``), whatever the provider: the turn result, the REST ``error.code``
#: and the AG-UI ``RUN_ERROR.code`` carry the code itself, so a client can tell a failure it
#: may retry (``rate_limited``) from one it may not (``context_overflow``). Each is a 502:
#: the model provider, not the caller, failed.
MODEL_ERROR_CODES: tuple[str, ...] = (
    "auth_failed", "conflict_upstream", "connection_error", "context_overflow",
    "insufficient_quota", "invalid_request", "model_not_found", "model_not_ready",
    "permission_denied", "rate_limited", "request_too_large", "response_failed",
    "server_error", "service_unavailable", "session_expired", "stream_error",
    "stream_expected", "stream_incomplete", "summary_empty", "timeout",
)


#: HTTP status per error code, for every HTTP surface (API function, local server).
HTTP_STATUS: dict[str, int] = {
    InputError.code: 400,
    ConfigError.code: 500,
    PendingInputError.code: 409,
    SessionExists.code: 409,
    DuplicateMessage.code: 409,
    AlreadyDecided.code: 409,
    AlreadyAnswered.code: 409,
    SessionFailed.code: 409,
    SessionPaused.code: 409,
    SessionRunning.code: 409,
    RetryRefused.code: 409,
    "duplicate_retry": 409,
    StaleTimer.code: 409,
    NotRunning.code: 409,
    NotPending.code: 409,
    ServerOnly.code: 422,
    ResumeError.code: 409,
    SessionNotFound.code: 404,
    StoreError.code: 503,
    SchedulerError.code: 503,
    TimerRefused.code: 422,
    ToolSourceUnavailable.code: 503,
    ToolSourceMisconfigured.code: 502,
    EventRefused.code: 422,
    DormantError.code: 500,
    # Codes the HTTP layer (dormant.http) and the run itself report; one table for all of them.
    "invalid_json": 400,
    "invalid_body": 400,
    "conflict": 409,
    "unauthorized": 401,
    "not_found": 404,
    "method_not_allowed": 405,
    "payload_too_large": 413,
    "unsupported_media_type": 415,
    "validation_error": 422,
    "internal_error": 500,
    "run_error": 500,
    "max_steps": 500,
    "model_error": 502,
    **dict.fromkeys(MODEL_ERROR_CODES, 502),
    "no_speech": 422,  # a voice request whose audio held no words
    "aborted": 504,
    "deadline": 504,
}


#: What a public answer says of a server-side failure, by code (the detail goes to the log).
_FAILURES: dict[str, str] = {
    "model_error": "the model provider failed",
    **dict.fromkeys(MODEL_ERROR_CODES, "the model provider failed"),
    "deadline": "the turn ran out of time",
    "aborted": "the turn was aborted",
    "max_steps": "the turn took more model steps than the agent allows",
    "store_error": "the session store failed",
    "scheduler_error": "the timer service failed",
    "tool_source_unavailable": "a tool source (an MCP server) was unreachable; retry",
    "tool_source_misconfigured": "a tool source (an MCP server) is misconfigured; "
                                 "retrying will not help",
}


def is_client_error(code: str | None) -> bool:
    """Whether ``code`` is a client's mistake (a 4xx in :data:`HTTP_STATUS`): its message is
    about the client's own input and may be shown to it. Anything else (unlisted codes too) is
    a failure on the server side, whose text may hold what no client should see."""
    return code is not None and HTTP_STATUS.get(code, 500) < 500


def public_message(code: str | None, message: str, request_id: str | None = None) -> str:
    """What a public response (HTTP body, AG-UI ``RUN_ERROR``) may say about an error.

    A client mistake keeps its message. A server-side failure (a model provider's error text,
    a store's, an exception's) is never shown: the answer names the failure by its code and the
    request id under which the caller logged the detail.
    """
    if is_client_error(code):
        return message
    what = _FAILURES.get(code or "", "the server failed")
    where = f" (request id {request_id})" if request_id else ""
    return f"{what}; the details are in the server log{where}"
