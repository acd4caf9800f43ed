"""The store contract every backend satisfies (and ``tests/conformance`` checks)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from dormant._head import Head
from dormant._ids import now_ms
from dormant.events import Event
from dormant.types import CommitResult, SessionSummary, StoredSession

__all__ = ["Store", "commit_head"]


@runtime_checkable
class Store(Protocol):
    """Read a session; append to it at an expected version. That is the whole bargain.

    Optimistic concurrency is the uniqueness of ``(session_id, version)``: ``append`` with an
    ``expected_version`` that is no longer current returns ``CommitResult(ok=False,
    conflict=True, current_version=N)`` and writes nothing. Any other failure raises
    :class:`dormant.errors.StoreError`.
    """

    def load(self, session_id: str, *, turns: int | None = None) -> StoredSession | None:
        """The head and the ledger from the start of the ``turns``-th most recent turn
        (``None``: the whole ledger; ``0``: no events). ``None`` if there is no such session."""
        ...

    def append(self, head: Head, events: Sequence[Event], *, expected_version: int) -> CommitResult:
        """Write ``events`` (positions ``head.seq - len(events)`` … ``head.seq - 1``) and
        ``head`` iff the stored version is ``expected_version`` (0: the session must not
        exist). The written head carries version ``expected_version + 1``."""
        ...

    def delete(self, session_id: str) -> bool:
        """Remove the session and its ledger; ``False`` if there was none."""
        ...

    def list(self, *, principal: str | None = None, limit: int = 100) -> list[SessionSummary]:
        """Sessions, most recently updated first (only ``principal``'s when given)."""
        ...


def commit_head(head: Head, expected_version: int) -> Head:
    """The head as a store writes it: next version, fresh ``updated_at``."""
    return head.model_copy(update={"version": expected_version + 1, "updated_at": now_ms()})
