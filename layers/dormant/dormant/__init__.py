"""dormant: durable AI agents for AWS Lambda.

An agent that waits (for a human, a webhook, a timer) is not a process but rows in a store.
Every request loads the rows, runs one turn, commits with a conditional write and returns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dormant._timing import Price
from dormant.agent import Agent, Compaction, Hook, HookContext
from dormant.app import App
from dormant.errors import (
    AlreadyAnswered,
    AlreadyDecided,
    DormantError,
    DuplicateMessage,
    EventRefused,
    InputError,
    NotPending,
    NotRunning,
    PendingInputError,
    ResumeError,
    RetryRefused,
    ServerOnly,
    SessionFailed,
    SessionNotFound,
    SessionPaused,
    StoreError,
    TimerRefused,
    ToolSourceUnavailable,
)
from dormant.handlers import (
    HandlerInput,
    Input,
    ResponseOptions,
    RestResponse,
    TurnResult,
    TurnStream,
    VoiceResponse,
)
from dormant.results import (
    CompletedResult,
    ErrorResult,
    Output,
    PausedResult,
    RunResult,
    StoppedResult,
    YieldedMessageResult,
    YieldedToolResult,
)
from dormant.session import Session
from dormant.tools import (
    Aborted,
    Signal,
    Tool,
    ToolContext,
    handler_context,
    run_with_handler_context,
)
from dormant.types import (
    CommitResult,
    PendingApproval,
    PendingInput,
    QueuedMessage,
    YieldedTool,
)

if TYPE_CHECKING:
    from dormant._resume import UnresolvedYield, assert_ready_to_resume, validate_resume_state

__all__ = [
    "Aborted",
    "Agent",
    "AlreadyAnswered",
    "AlreadyDecided",
    "App",
    "CommitResult",
    "Compaction",
    "CompletedResult",
    "DormantError",
    "DuplicateMessage",
    "ErrorResult",
    "EventRefused",
    "HandlerInput",
    "Hook",
    "HookContext",
    "Input",
    "InputError",
    "NotPending",
    "NotRunning",
    "Output",
    "PausedResult",
    "PendingApproval",
    "PendingInput",
    "PendingInputError",
    "Price",
    "QueuedMessage",
    "ResponseOptions",
    "RestResponse",
    "ResumeError",
    "RetryRefused",
    "RunResult",
    "ServerOnly",
    "Session",
    "SessionFailed",
    "SessionNotFound",
    "SessionPaused",
    "Signal",
    "StoppedResult",
    "StoreError",
    "TimerRefused",
    "Tool",
    "ToolContext",
    "ToolSourceUnavailable",
    "TurnResult",
    "TurnStream",
    "UnresolvedYield",
    "VoiceResponse",
    "YieldedMessageResult",
    "YieldedTool",
    "YieldedToolResult",
    "assert_ready_to_resume",
    "estimate_tokens",
    "handler_context",
    "run_with_handler_context",
    "validate_resume_state",
]

__version__ = "0.1.0"

#: Public names whose modules no Lambda turn needs: imported when first asked for.
_LAZY = {
    "UnresolvedYield": "dormant._resume",
    "assert_ready_to_resume": "dormant._resume",
    "estimate_tokens": "dormant._run.compaction",
    "validate_resume_state": "dormant._resume",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'dormant' has no attribute {name!r}")
