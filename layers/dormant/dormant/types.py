"""Session value types: immutable data that sessions, stores, handlers and wires pass around.

They live apart from :mod:`dormant.session` (the mutable :class:`~dormant.session.Session`) so
a store, a result or a wire format can name them without importing the session machinery.
:mod:`dormant.session` re-exports them, so ``from dormant.session import CommitResult`` keeps
working.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from dormant._head import Head
from dormant.events import Event

__all__ = [
    "CommitResult",
    "PendingApproval",
    "SessionSummary",
    "StoredSession",
    "YieldedTool",
]


class _Wire(BaseModel):
    """Base of the frozen wire types: camelCase aliases on the wire, snake_case in Python."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)


class YieldedTool(_Wire):
    """A call the run waits on: answer it by ``call_id``."""

    call_id: str
    name: str
    args: Any = None


class PendingApproval(_Wire):
    """A call waiting for a human decision: decide it by ``approval_id``."""

    approval_id: str
    call_id: str
    tool: str
    args: Any = None


class CommitResult(_Wire):
    """What a commit did. A refusal is data: ``ok=False, conflict=True, current_version=N``."""

    ok: bool
    version: int | None = None
    conflict: bool = False
    current_version: int | None = None
    #: Set when the store refused the write because one of the slice's once-only ids (a
    #: message id ``m:<id>``, a retry id ``r:<id>``) is already in the session: a redelivery.
    #: Not part of the dumped form (the seeds' refusal is ``{ok, conflict, currentVersion}``).
    duplicate: str | None = Field(default=None, exclude=True)


class SessionSummary(_Wire):
    """One line of ``sessions.list``."""

    session_id: str
    version: int
    status: Literal["active", "awaiting_input", "failed"]
    updated_at: int
    principal: str | None = None


class StoredSession(NamedTuple):
    """What a store returns: the head, and the ledger from position ``first_seq`` on."""

    head: Head
    events: list[Event]
    first_seq: int
