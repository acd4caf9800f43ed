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
    "Control",
    "ControlCompaction",
    "ControlRunning",
    "ControlSteer",
    "ControlStop",
    "PendingApproval",
    "PendingInput",
    "QueuedMessage",
    "SessionSummary",
    "StoredSession",
    "YieldedTool",
]


class WireModel(BaseModel):
    """Base of the frozen wire types: camelCase aliases on the wire, snake_case in Python."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True,
                              defer_build=True)


def _whole(value: object) -> bool:
    return value is None


def _agent() -> Any:
    """What a pending item says of the agent that waits (absent: the session's own)."""
    return Field(default=None, exclude_if=_whole, description=(
        "A sub-agent's call (an agent used as a tool): the agents from the session's down to "
        "the one that made the call, joined by `/` (`concierge/billing`). Absent for the "
        "session's own agent's calls. It is answered like any other."))


class YieldedTool(WireModel):
    """A call the run waits on: answer it by ``call_id``."""

    call_id: str
    name: str
    args: Any = None
    agent: str | None = _agent()


class PendingApproval(WireModel):
    """A call waiting for a human decision: decide it by ``approval_id``."""

    approval_id: str
    call_id: str
    tool: str
    args: Any = None
    agent: str | None = _agent()


class QueuedMessage(WireModel):
    """A user message waiting in the session's inbox (``session.inbox``)."""

    id: str
    text: str
    queued_at: int = 0


class PendingInput(WireModel):
    """An input request awaiting a response: answer it with ``respond(input_id, value)``."""

    input_id: str
    input_schema: dict[str, Any] = Field(default_factory=dict, alias="schema")
    prompt: str | None = None


class CommitResult(WireModel):
    """What a commit did. A refusal is data: ``ok=False, conflict=True, current_version=N``."""

    ok: bool
    version: int | None = None
    conflict: bool = False
    current_version: int | None = None
    #: Set when the store refused the write because one of the slice's once-only ids (a
    #: message id ``m:<id>``, a retry id ``r:<id>``) is already in the session: a redelivery.
    #: Not part of the dumped form (the seeds' refusal is ``{ok, conflict, currentVersion}``).
    duplicate: str | None = Field(default=None, exclude=True)


class SessionSummary(WireModel):
    """One line of ``sessions.list``."""

    session_id: str
    version: int
    status: Literal["active", "awaiting_input", "failed", "paused"]
    updated_at: int
    principal: str | None = None


class ControlStop(BaseModel):
    """A stop waiting for the running invocation ``invocation_id`` to see it."""

    invocation_id: str
    seen: int | None = None
    rev: int
    at: int = 0


class ControlSteer(BaseModel):
    """A steer waiting for the running invocation to take it at its next step boundary."""

    id: str
    text: str
    invocation_id: str
    rev: int
    at: int = 0


class ControlCompaction(BaseModel):
    """A compaction one turn has claimed: it alone summarises the range ``covered_from`` …
    ``tail_start`` (a paid model call), until its lease ``until`` (epoch ms) passes. Turns
    that race it send the uncompacted history instead; a claimer that died lets its lease
    run out and the next turn due takes the range over. ``invocation_id`` names the claimer:
    another attempt of that invocation (a redelivery after a failure that wrote nothing) may
    claim it again at once."""

    tail_start: int
    covered_from: int = 0
    until: int
    rev: int
    invocation_id: str | None = None


class ControlRunning(BaseModel):
    """A turn that announced itself while it runs: invocation ``invocation_id``, started at
    ``since`` (epoch ms) from head version ``version``, for ``principal`` (the caller that
    started it; None: trusted code). Written by the turn itself at its first poll (a turn
    that ends within a poll interval writes nothing), or as it starts when it is the
    session's first (so the session exists to readers from its first request), so that a
    client which did not start it can still find and stop it. Never cleared: it is live only
    while the head is still at ``version`` and has not seen the invocation end
    (:func:`dormant._decide.announced`).

    ``until``: the turn's heartbeat (epoch ms; 0: none). A turn that holds a claim, or is the
    session's first, renews it every half heartbeat while it works: a claimed invocation's
    lease runs to the later of the claim's and this (a loaded head shows that one), and an
    announcement past it is a turn that died."""

    invocation_id: str
    since: int
    version: int = 0
    principal: str | None = None
    until: int = 0


class Control(BaseModel):
    """A session's control record: what other requests ask of the turn running now.

    Small on purpose (a running turn reads it about once a second): a stop (pending while its
    invocation runs), a pause (pending while it names another revision than the last pause
    the ledger took up, ``Head.control_rev``) and steers (pending until their message id is
    in the ledger), each stamped with the record's revision ``rev`` when it was added; and
    the compaction a turn has claimed (held until the ledger takes it up or its lease ends);
    and the turn running now, as it announced itself (``running``, kept while it is live).
    Writers replace the record whole at ``rev + 1`` (a conditional write)."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    rev: int = 0
    stop: ControlStop | None = None
    #: The revision a pause was asked at (None: no pause asked).
    pause: int | None = None
    steers: list[ControlSteer] = Field(default_factory=list)
    compaction: ControlCompaction | None = None
    running: ControlRunning | None = None


class StoredSession(NamedTuple):
    """What a store returns: the head, the ledger from position ``first_seq`` on, and the
    control record (None when the session has none)."""

    head: Head
    events: list[Event]
    first_seq: int
    control: Control | None = None
