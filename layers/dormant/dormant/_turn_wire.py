"""The wire types of one turn per request: what a request brings, what it gets back."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from dormant.events import Usage
from dormant.results import Output
from dormant.types import PendingApproval, YieldedTool

__all__ = [
    "ApprovalDecision",
    "CommitStatus",
    "HandlerInput",
    "Input",
    "ResponseOptions",
    "RestResponse",
    "TimerRef",
    "ToolAnswer",
    "TurnResult",
]

CommitStatus = Literal["committed", "merged", "superseded", "failed"]


class _In(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class ToolAnswer(_In):
    """The answer to one yielded call."""

    call_id: str = Field(min_length=1)
    input: Any = None


class ApprovalDecision(_In):
    """A decision on one pending approval request."""

    approval_id: str = Field(min_length=1)
    approved: bool
    reason: str | None = None


class TimerRef(_In):
    """Which timer firing a wake request delivers (server-only: never from a public body)."""

    name: str = Field(min_length=1)
    fire_at: int


class Input(_In):
    """What a request brings: a message, answers to yields, decisions, state.

    ``initial_state`` and ``timer`` are for trusted server code; the HTTP API refuses them."""

    message: str | None = Field(default=None, min_length=1)
    message_id: str | None = Field(default=None, min_length=1, max_length=128)
    tools: list[ToolAnswer] | None = None
    approvals: list[ApprovalDecision] | None = None
    state: dict[str, Any] | None = None
    initial_state: dict[str, Any] | None = None
    timer: TimerRef | None = None


class HandlerInput(_In):
    """One request: ``session_id`` (minted when absent) and its ``input``.

    ``principal`` scopes the request: a session created by one principal is invisible to
    another. It is server-side only: HTTP layers set it from the authorizer, never the body.
    """

    session_id: str | None = None
    input: Input = Field(default_factory=Input)
    principal: str | None = None


class ResponseOptions(_In):
    """Opt-in parts of a REST response."""

    events: bool = False
    usage: bool = False
    state: bool = False


class TurnResult(BaseModel):
    """A run result plus how (and whether) it reached the store."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    session_id: str
    status: Literal["completed", "yielded_tool", "yielded_message", "error"]
    output: Output = Field(default_factory=Output)
    commit_status: CommitStatus | None = None
    invocation_id: str | None = None
    yielded_tools: list[YieldedTool] | None = None
    pending_approvals: list[PendingApproval] | None = None
    yielded_invocation_id: str | None = None
    error: str | None = None
    code: str | None = None
    usage: Usage = Field(default_factory=Usage)
    version: int | None = None
    state: dict[str, Any] | None = None

    @property
    def warning(self) -> str | None:
        """Why the commit was not clean (merged, superseded, failed), else None."""
        return _WARNINGS.get(self.commit_status or "")


_WARNINGS = {
    "merged": "merged: the session moved while this turn ran; its events were appended "
              "after the newer ones",
    "superseded": "superseded: a newer message (or answer) landed while this turn ran; "
                  "this turn was dropped and nothing of it was stored",
    "failed": "failed: the store could not be written; nothing of this turn was stored",
}


class RestResponse(BaseModel):
    """The REST body. Wire form: ``model_dump(by_alias=True, mode="json",
    exclude_none=True)`` (camelCase)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    session_id: str
    status: Literal["completed", "yielded_tool", "yielded_message", "error"]
    output: Output
    yielded_tools: list[YieldedTool] | None = None
    pending_approvals: list[PendingApproval] | None = None
    error: str | None = None
    code: str | None = None
    warning: str | None = None
    #: How the turn reached the store (also in Python; not on the wire, where ``warning``
    #: says when the commit was not clean).
    commit_status: CommitStatus | None = Field(default=None, exclude=True)
    events: list[dict[str, Any]] | None = None
    usage: Usage | None = None
    state: dict[str, Any] | None = None

    def wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json", exclude_none=True)
