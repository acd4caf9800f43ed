"""The store contract every backend satisfies (and ``tests/conformance`` checks)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

from dormant._head import COMMIT_WINDOW, Head, status_of
from dormant._ids import now_ms
from dormant.events import AppEvent, Event, QueuedEvent, RetryEvent, SeedEvent, UserEvent
from dormant.types import CommitResult, Control, SessionSummary, StoredSession

__all__ = ["LedgerPage", "Store", "commit_head", "first_turn", "lineage_key", "once_keys",
           "stamp_commit", "status_of"]


class LedgerPage(NamedTuple):
    """One page of a ledger, as a store's optional ``read_page(head, after, skip, limit)``
    answers it: at most ``limit`` events from the position ``skip`` events after the end of
    version ``after`` (0: the ledger's start), up to ``head.seq``; ``first_seq`` is the
    position of ``events[0]``, and ``next`` the ``(after, skip)`` where the next page starts
    (None: this page reaches ``head.seq``). A store answers None for a version it cannot
    place (a caller then reads the ledger with ``load``). A store without ``read_page``
    is read with ``load`` too: paged routes stay correct, only not bounded."""

    events: list[Event]
    first_seq: int
    next: tuple[int, int] | None


@runtime_checkable
class Store(Protocol):
    """Read a session; append to it at an expected version. That is the whole bargain.

    Optimistic concurrency is the uniqueness of ``(session_id, version)``: ``append`` with an
    ``expected_version`` that is no longer current returns ``CommitResult(ok=False,
    conflict=True, current_version=N)`` and writes nothing. Any other failure raises
    :class:`dormant.errors.StoreError`.

    Optional, beside the protocol: ``counters() -> tuple[int, float]``, the requests the
    store made on the calling thread so far and the capacity units they consumed (running
    totals; a turn's timing records each phase's difference). ``DynamoDBStore`` has it;
    a store without it records no requests.
    """

    def load(self, session_id: str, *, turns: int | None = None,
             compacted: bool = False) -> StoredSession | None:
        """The head and the ledger from ``head.window_start(turns, compacted=compacted)``: the
        start of the ``turns``-th most recent turn (``None``: the whole ledger; ``0``: no
        events), and with ``compacted`` no earlier than the latest compaction's tail. ``None``
        if there is no such session. A fork's positions before its fork point are read from
        the sessions its ``head.lineage`` names (never copied into the fork)."""
        ...

    def fork(self, head: Head) -> CommitResult:
        """Create the fork ``head`` describes (version 1, no events of its own: positions
        below ``head.seq`` are its lineage's) iff no session holds its id (else
        ``CommitResult(ok=False, conflict=True, current_version=N)``, nothing written), and
        record it on every session of its lineage, so deleting one of those keeps what the
        fork reads. Raises :class:`dormant.errors.SessionNotFound` if a lineage session is
        gone."""
        ...

    def version_end(self, session_id: str, version: int) -> int | None:
        """The ledger position just after the events of ``version`` (the session's ``seq`` at
        that version); None if the session has no such version."""
        ...

    def append(self, head: Head, events: Sequence[Event], *, expected_version: int) -> CommitResult:
        """Write ``events`` (positions ``head.seq - len(events)`` … ``head.seq - 1``) and
        ``head`` iff the stored version is ``expected_version`` (0: the session must not
        exist) of the session ``head`` continues: one deleted and made again under its id
        (another ``created_at``) refuses it as a conflict. The written head carries version
        ``expected_version + 1``.

        Once-only ids (:func:`once_keys` of ``events``) are the session's own keys, kept for
        its life: a slice carrying one the session already holds is refused, nothing
        written, with ``CommitResult(ok=False, duplicate=key)`` (``conflict`` may be set
        too when the version moved as well)."""
        ...

    def has_once(self, session_id: str, key: str) -> bool:
        """Whether a committed slice of the session carried the once-only id ``key`` (see
        :func:`once_keys`). ``append`` refuses a slice carrying one the session holds."""
        ...

    def landed(self, session_id: str, seq: int, event_id: str) -> bool:
        """Whether the ledger holds the event ``event_id`` at position ``seq`` (the first
        event of a commit): how a commit policy learns the truth after an ambiguous write."""
        ...

    def read_control(self, session_id: str) -> Control | None:
        """The session's control record (a strongly consistent read of one small record;
        None if it has none). A running turn calls this about once a second."""
        ...

    def write_control(self, session_id: str, control: Control, *, head_version: int) -> bool:
        """Write ``control`` (revision ``control.rev``) iff the session's head is still at
        ``head_version`` (0: no head exists yet) and the stored record is at
        ``control.rev - 1`` (absent counts as 0). False, nothing written, when either moved:
        the caller re-reads and decides again."""
        ...

    def delete(self, session_id: str) -> bool:
        """Remove the session and its ledger; ``False`` if there was none. While forks read
        its events (a fork's lineage names it) those are kept, out of sight — the id is free
        for a new session at once — and go when the last such fork is deleted."""
        ...

    def list(self, *, principal: str | None = None, limit: int = 100) -> list[SessionSummary]:
        """Sessions, most recently updated first (only ``principal``'s when given). A session
        whose first turn runs now (no ledger yet, its control record announces the turn, see
        :func:`first_turn`) is listed too, at version 0, ``active``, updated when it started:
        readers check the announcement is still live (its heartbeat)."""
        ...


def first_turn(session_id: str, control: Control | None,
               principal: str | None = None) -> SessionSummary | None:
    """The ``list`` line of a session that has no ledger yet, from its control record: its
    first turn, announced as it started (only ``principal``'s when given); None when the
    record announces no first turn."""
    entry = control.running if control is not None else None
    if entry is None or entry.version != 0 \
            or (principal is not None and entry.principal != principal):
        return None
    return SessionSummary(session_id=session_id, version=0, status="active",
                          updated_at=entry.since, principal=entry.principal)


def commit_head(head: Head, expected_version: int, events: Sequence[Event] = ()) -> Head:
    """The head as a store writes it: next version, fresh ``updated_at``, and the ledger
    position this version's events start at remembered (``Head.commit_seqs``, what
    ``GET /sessions/{id}/events?after=VERSION`` reads)."""
    return stamp_commit(head.model_copy(), expected_version, events)


def stamp_commit(head: Head, expected_version: int, events: Sequence[Event] = ()) -> Head:
    """:func:`commit_head` in place, on a head the caller owns (a store that copies the head
    it keeps anyway stamps its own copy instead of copying twice)."""
    head.commit_seqs = [*head.commit_seqs, head.seq - len(events)][-COMMIT_WINDOW:]
    head.version = expected_version + 1
    head.updated_at = now_ms()
    return head


def once_keys(events: Sequence[Event]) -> list[str]:
    """The ids in ``events`` that may land only once per session, for the session's life:
    every user message id (``m:<id>``: messages, queued messages, seeds and steers), every
    retry id (``r:<id>``) and every application event id given (``e:<id>``)."""
    keys: list[str] = []
    for event in events:
        if isinstance(event, UserEvent):
            if not event.queued:  # a queued message's id landed with its ``queued`` event
                keys.append("m:" + event.message_id)
        elif isinstance(event, QueuedEvent | SeedEvent):
            keys.append("m:" + event.message_id)
        elif isinstance(event, RetryEvent):
            keys.append("r:" + event.retry_id)
        elif isinstance(event, AppEvent) and event.event_id is not None:
            keys.append("e:" + event.event_id)
    return keys


def lineage_key(segment: dict[str, Any]) -> tuple[str, int]:
    """The incarnation a lineage segment reads: its session id and that session's creation
    time (a session deleted and made again under the same id is another incarnation)."""
    return str(segment["session"]), int(segment["created_at"])
