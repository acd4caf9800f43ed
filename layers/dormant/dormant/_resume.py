"""Is a ledger answerable? Checks over plain events, so a resume can be vetted anywhere."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dormant.errors import ResumeError
from dormant.events import (
    ApprovalDecided,
    ApprovalRequested,
    Event,
    InputRequested,
    InputResponse,
    InterruptEvent,
    ToolDeferred,
    ToolInput,
    ToolResult,
    ToolYield,
)

__all__ = ["UnresolvedYield", "assert_ready_to_resume", "validate_resume_state"]


class UnresolvedYield(BaseModel):
    """A yield with no input yet, or an approval request with no decision (``approval_id``)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    call_id: str
    name: str
    args: Any = None
    invocation_id: str | None = None
    approval_id: str | None = None
    #: Set for an input request (``request_input``): ``call_id`` and ``input_id`` are its id.
    input_id: str | None = None
    #: What a yielded call's answer must look like (JSON Schema), as its ``tool_yield``
    #: recorded it; None for approvals, input requests and yields recorded without one.
    input_schema: dict[str, Any] | None = None
    #: True for a deferred call (``tool_deferred``): it waits for its result, which trusted
    #: code supplies (``input.tool_result``), not for an input.
    deferred: bool = False
    #: A sub-agent's call (an agent used as a tool): its agent's path, as the event's
    #: ``scope`` names it (``"concierge/billing"``). None (and absent from a dump): the
    #: session agent's own. It is answered like any other; its caller's call has no result
    #: until it is, and is not listed (it waits on this one).
    agent: str | None = Field(default=None, exclude_if=lambda value: value is None)


def validate_resume_state(events: Iterable[Event]) -> list[UnresolvedYield]:
    """One entry per ``tool_yield`` with neither a ``tool_input`` nor a final ``tool_result``,
    per ``approval_requested`` with neither an ``approval_decided`` nor a ``tool_result``, and
    per ``tool_deferred`` with no final ``tool_result``, and
    per ``input_requested`` with neither an ``input_response`` nor an ``interrupt`` naming it.
    A stop or interrupt settles what it ended (its ``tool_result`` events say so).

    A sub-agent's calls (events with a ``scope``) count the same, each entry naming its
    agent's path (``agent``): call ids are unique across agents, so an answer settles the
    one call it names whichever agent waits."""
    waiting: dict[str, UnresolvedYield] = {}
    for event in events:
        match event:
            case ToolYield():
                waiting[event.call_id] = UnresolvedYield(
                    call_id=event.call_id, name=event.name, args=event.args,
                    invocation_id=event.invocation_id, input_schema=event.input_schema,
                    agent=_path(event))
            case ToolDeferred():
                waiting[event.call_id] = UnresolvedYield(
                    call_id=event.call_id, name=event.name, args=event.args,
                    invocation_id=event.invocation_id, deferred=True, agent=_path(event))
            case ApprovalRequested():
                waiting[event.call_id] = UnresolvedYield(
                    call_id=event.call_id, name=event.name, args=event.args,
                    invocation_id=event.invocation_id, approval_id=event.approval_id,
                    agent=_path(event))
            case ToolResult(preliminary=True):
                pass  # a generator tool's progress: the call is still running
            case ToolInput() | ToolResult():
                waiting.pop(event.call_id, None)
            case InputRequested():
                waiting["\x00" + event.input_id] = UnresolvedYield(
                    call_id=event.input_id, name="input request", args=event.prompt,
                    invocation_id=event.invocation_id, input_id=event.input_id,
                    agent=_path(event))
            case InputResponse():
                waiting.pop("\x00" + event.input_id, None)
            case InterruptEvent():
                waiting.pop("\x00" + event.owner, None)
            case ApprovalDecided():
                for call_id, unresolved in list(waiting.items()):
                    if unresolved.approval_id == event.approval_id:
                        del waiting[call_id]
    return list(waiting.values())


def _path(event: Event) -> str | None:
    scope = getattr(event, "scope", None)
    return scope.path if scope is not None else None


def assert_ready_to_resume(events: Iterable[Event]) -> None:
    """Raise :class:`ResumeError` naming every unresolved yield."""
    unresolved = validate_resume_state(events)
    if unresolved:
        names = ", ".join(f"{u.name} ({u.approval_id or u.call_id}"
                          + (f" in {u.agent})" if u.agent else ")") for u in unresolved)
        raise ResumeError(f"cannot resume: {len(unresolved)} call(s) await input or a "
                          f"decision: {names}")
