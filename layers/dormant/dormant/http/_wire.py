"""The API's wire types (camelCase on the wire; unknown fields refused) and who is calling."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from dormant.handlers import HandlerInput, Input, RetryRequest, ToolAnswer

__all__ = [
    "ApprovalAnswer",
    "ErrorBody",
    "PendingCall",
    "SessionView",
    "TurnRequest",
    "principal_of",
]


class _Wire(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class ApprovalAnswer(_Wire):
    """A decision on a pending approval (SPEC §6)."""

    approval_id: str = Field(min_length=1, description="The approval being decided.")
    approved: bool = Field(description="Whether the tool may run.")
    reason: str | None = Field(default=None, description="Why (shown to the model when denied).")


class TurnRequest(_Wire):
    """The public body of ``POST /turns``.

    Only what a client may say: no ``principal`` (the authorizer names it) and no
    ``initialState`` or other server-only inputs (SPEC §8). Unknown fields are refused (422).
    """

    session_id: str | None = Field(
        default=None, description="The session (minted when absent; `thread-42` and "
        "`session_thread-42` are one session).")
    message: str | None = Field(default=None, min_length=1, description="The user's message.")
    message_id: str | None = Field(
        default=None, min_length=1, max_length=128,
        description="A stable id for the message: a retried request lands it once.")
    tools: list[ToolAnswer] | None = Field(
        default=None, description="Answers to yielded calls: [{callId, input}].")
    approvals: list[ApprovalAnswer] | None = Field(
        default=None, description="Decisions on pending approvals.")
    state: dict[str, Any] | None = Field(
        default=None, description="Merged (shallowly) into the session state for this turn.")
    retry: RetryRequest | None = Field(
        default=None, description="Rerun a failed turn's failed model call: {retryId} (a "
        "fresh id per retry; resending one lands once). Finished tools are not run again.")

    def to_handler_input(self, principal: str | None) -> HandlerInput:
        return HandlerInput(
            session_id=self.session_id,
            input=Input(
                message=self.message, message_id=self.message_id, tools=self.tools,
                approvals=([a.model_dump() for a in self.approvals]
                           if self.approvals is not None else None),
                state=self.state, retry=self.retry,
            ),
            principal=principal,
        )


class PendingCall(_Wire):
    """A call a session waits on."""

    call_id: str
    name: str
    args: Any = None


class SessionView(_Wire):
    """The body of ``GET /sessions/{id}``."""

    session_id: str
    status: str
    version: int
    yielded_tools: list[PendingCall] = Field(default_factory=list)
    pending_approvals: list[Any] = Field(default_factory=list)
    timers: list[dict[str, Any]] = Field(default_factory=list)
    state: dict[str, Any] = Field(default_factory=dict)
    created_at: int = 0
    updated_at: int = 0
    events: list[dict[str, Any]] | None = None


class ErrorBody(_Wire):
    """Every error answer: a stable ``code``, a message naming the id involved."""

    code: str
    message: str
    session_id: str | None = None
    pending: list[PendingCall] | None = None
    fields: list[dict[str, str]] | None = None


def principal_of(event: Mapping[str, Any]) -> str | None:
    """Who is calling, as API Gateway's authorizer established it (never the request body).

    In order: a Cognito user-pool authorizer's ``claims.sub``; a Lambda authorizer's
    ``principalId``; for IAM (SigV4) auth, ``requestContext.identity.userArn``. ``None`` when
    the API has no authorizer (then sessions are not scoped).
    """
    context = event.get("requestContext") or {}
    authorizer = context.get("authorizer") or {}
    claims = authorizer.get("claims") or {}
    for candidate in (claims.get("sub"), authorizer.get("principalId"),
                      (context.get("identity") or {}).get("userArn")):
        if isinstance(candidate, str) and candidate:
            return candidate
    return None
