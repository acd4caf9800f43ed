"""Run results: a discriminated union on ``status``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Discriminator, Field

from dormant.events import NO_USAGE, Usage
from dormant.types import PendingApproval, WireModel, YieldedTool

if TYPE_CHECKING:
    from dormant.session import Session

__all__ = [
    "CompletedResult",
    "ErrorResult",
    "Output",
    "OutputItem",
    "PausedResult",
    "RunResult",
    "StoppedResult",
    "YieldedMessageResult",
    "YieldedToolResult",
]


class OutputItem(WireModel):
    """One thing the assistant said during the run."""

    type: Literal["text"] = "text"
    text: str


class Output(WireModel):
    """What the run said: every assistant message, and the last one as ``text``."""

    items: list[OutputItem] = Field(default_factory=list)
    text: str = ""


class _Result(WireModel):
    output: Output = Field(default_factory=Output)
    invocation_id: str | None = None
    usage: Usage = Field(default=NO_USAGE)
    session_: Any = Field(default=None, exclude=True, repr=False)

    @property
    def session(self) -> Session:
        """The session the run worked on, holding its uncommitted events (``app.run``)."""
        return self.session_  # type: ignore[no-any-return]


class CompletedResult(_Result):
    status: Literal["completed"] = "completed"


class YieldedToolResult(_Result):
    status: Literal["yielded_tool"] = "yielded_tool"
    yielded_tools: list[YieldedTool]
    pending_approvals: list[PendingApproval] = Field(default_factory=list)
    #: Deferred calls waiting for their result from outside the turn.
    deferred_tools: list[YieldedTool] = Field(default_factory=list)


class YieldedMessageResult(_Result):
    status: Literal["yielded_message"] = "yielded_message"
    yielded_invocation_id: str


class ErrorResult(_Result):
    status: Literal["error"] = "error"
    error: str
    code: str = "run_error"
    #: Whether a retry of the invocation can succeed (False: a ``context_overflow``, say).
    retryable: bool = True


class StoppedResult(_Result):
    """A stop ended the invocation, rewound to what the client had seen."""

    status: Literal["stopped"] = "stopped"


class PausedResult(_Result):
    """A pause parked the session at a step boundary; ``resume`` continues the invocation."""

    status: Literal["paused"] = "paused"


RunResult = Annotated[
    CompletedResult | YieldedToolResult | YieldedMessageResult | ErrorResult | StoppedResult
    | PausedResult,
    Discriminator("status"),
]
