"""Is a ledger answerable? Checks over plain events, so a resume can be vetted anywhere."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict

from dormant.errors import ResumeError
from dormant.events import Event

__all__ = ["UnresolvedYield", "assert_ready_to_resume", "validate_resume_state"]


class UnresolvedYield(BaseModel):
    """A yield with no input yet."""

    model_config = ConfigDict(frozen=True)

    call_id: str
    name: str
    args: Any = None
    invocation_id: str | None = None


def validate_resume_state(events: Iterable[Event]) -> list[UnresolvedYield]:
    """One entry per ``tool_yield`` that has neither a ``tool_input`` nor a ``tool_result``."""
    waiting: dict[str, UnresolvedYield] = {}
    for event in events:
        if event.type == "tool_yield":
            waiting[event.call_id] = UnresolvedYield(call_id=event.call_id, name=event.name,
                                                     args=event.args,
                                                     invocation_id=event.invocation_id)
        elif event.type in ("tool_input", "tool_result"):
            waiting.pop(event.call_id, None)
    return list(waiting.values())


def assert_ready_to_resume(events: Iterable[Event]) -> None:
    """Raise :class:`ResumeError` naming every unresolved yield."""
    unresolved = validate_resume_state(events)
    if unresolved:
        names = ", ".join(f"{u.name} ({u.call_id})" for u in unresolved)
        raise ResumeError(f"cannot resume: {len(unresolved)} yield(s) await input: {names}")
