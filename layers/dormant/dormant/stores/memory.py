"""The in-memory store: the default, for tests, examples and single-process demos."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from dormant._head import Head
from dormant.errors import SessionNotFound
from dormant.events import Event
from dormant.stores._base import (
    LedgerPage,
    first_turn,
    lineage_key,
    once_keys,
    stamp_commit,
    status_of,
)
from dormant.types import CommitResult, Control, SessionSummary, StoredSession

__all__ = ["MemoryStore"]

_Key = tuple[str, int]


@dataclass
class _Row:
    head: Head
    version: int
    updated_at: int
    status: Literal["active", "awaiting_input", "failed", "paused"]
    principal: str | None
    events: list[Event] = field(default_factory=list)
    once: set[str] = field(default_factory=set)
    #: The ledger's length after each version (``ends[v - 1]``: after version ``v``).
    ends: list[int] = field(default_factory=list)
    #: Ledger position of ``events[0]`` (a fork's own events start at its fork point).
    base: int = 0

    def own(self, start: int, end: int | None = None) -> list[Event]:
        """The row's own events at positions ``start`` … ``end - 1``."""
        return self.events[max(start - self.base, 0):None if end is None else end - self.base]

    @property
    def key(self) -> _Key:
        return self.head.session_id, self.head.created_at


class MemoryStore:
    """Sessions in a dict, guarded by a lock. Events are immutable, so reads share them;
    heads and control records are copied on the way in and out, so no caller can mutate what
    is stored. (The JSON form of heads and events is exercised by the SQLite and DynamoDB
    stores.)

    Control records live beside the rows, keyed by session id: one may exist before the
    session's first commit (``write_control`` at ``head_version=0``).

    A fork's row holds its own events only (from its fork point on); what it inherits is read
    from the rows its lineage names. A deleted session that forks still read moves to
    ``_retired`` until the last is deleted."""

    def __init__(self) -> None:
        self._rows: dict[str, _Row] = {}
        self._retired: dict[_Key, _Row] = {}
        #: incarnation -> the forks whose lineage names it
        self._forks: dict[_Key, set[str]] = {}
        #: Each session's control record as its fields (what a real store's item holds): a
        #: read validates a copy of its own, cheaper than a deep copy of the model.
        self._controls: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def load(self, session_id: str, *, turns: int | None = None,
             compacted: bool = False) -> StoredSession | None:
        with self._lock:
            row = self._rows.get(session_id)
            if row is None:
                return None
            head = row.head.clone()
            start = head.window_start(turns, compacted=compacted)
            window = self._window(row, start)
            control = self._controls.get(session_id)
        return StoredSession(head, window, start,
                             Control.model_validate(control) if control is not None else None)

    def _window(self, row: _Row, start: int) -> list[Event]:
        """Positions ``start`` … of ``row``'s ledger, inherited ones from their sessions."""
        window: list[Event] = []
        below = 0
        for segment in row.head.lineage:
            end = int(segment["end"])
            if start < end:
                window.extend(self._source(segment).own(max(start, below), end))
            below = end
        window.extend(row.own(start))
        return window

    def read_page(self, head: Head, after: int, skip: int, limit: int) -> LedgerPage | None:
        """At most ``limit`` events from ``skip`` after version ``after``'s end, up to
        ``head.seq`` (see :class:`dormant.stores._base.LedgerPage`)."""
        with self._lock:
            row = self._rows.get(head.session_id)
            if row is None or row.head.created_at != head.created_at:
                return LedgerPage([], head.seq, None)  # deleted since: nothing more to page
            if after <= 0:
                start = 0
            elif after <= len(row.ends):
                start = row.ends[after - 1]
            else:
                return None
            low = min(start + skip, head.seq)
            high = min(low + limit, head.seq)
            events = self._range(row, low, high)
        return LedgerPage(events, low, (after, high - start) if high < head.seq else None)

    def _range(self, row: _Row, low: int, high: int) -> list[Event]:
        """Positions ``low`` … ``high - 1`` of ``row``'s ledger, inherited ones from their
        sessions."""
        window: list[Event] = []
        below = 0
        for segment in row.head.lineage:
            end = min(int(segment["end"]), high)
            if max(low, below) < end:
                window.extend(self._source(segment).own(max(low, below), end))
            below = int(segment["end"])
        if max(low, row.base) < high:
            window.extend(row.own(max(low, row.base), high))
        return window

    def _source(self, segment: dict[str, object]) -> _Row:
        key = lineage_key(segment)
        retired = self._retired.get(key)
        if retired is not None:
            return retired
        row = self._rows.get(key[0])
        if row is None or row.head.created_at != key[1]:
            raise SessionNotFound(key[0])
        return row

    def append(self, head: Head, events: Sequence[Event], *, expected_version: int) -> CommitResult:
        written = stamp_commit(head.clone(), expected_version, events)
        keys = once_keys(events)
        with self._lock:
            row = self._rows.get(head.session_id)
            current = row.version if row is not None else 0
            held = None
            if row is not None:
                once = row.once
                for key in keys:
                    if key in once:
                        held = key
                        break
            # (a session deleted and made again under its id is another one: not this head's)
            other = row is not None and expected_version > 0 \
                and row.head.created_at != head.created_at
            if current != expected_version or held is not None or other:
                return CommitResult(ok=False, conflict=current != expected_version or other,
                                    current_version=current, duplicate=held)
            if row is None:
                row = _Row(written, written.version, written.updated_at, "active", head.principal)
                self._rows[head.session_id] = row
            row.events.extend(events)
            self._commit(row, written)
            row.once.update(keys)
        return CommitResult(ok=True, version=written.version)

    def _commit(self, row: _Row, written: Head) -> None:
        row.head = written
        row.version = written.version
        row.updated_at = written.updated_at
        row.status = status_of(written)
        row.ends.append(written.seq)

    def fork(self, head: Head) -> CommitResult:
        written = stamp_commit(head.clone(), 0)
        with self._lock:
            row = self._rows.get(head.session_id)
            if row is not None:
                return CommitResult(ok=False, conflict=True, current_version=row.version)
            for segment in head.lineage:
                self._source(segment)  # raises if a source is gone
            row = _Row(written, 0, 0, "active", head.principal, base=head.fork_point)
            self._commit(row, written)
            self._rows[head.session_id] = row
            for segment in head.lineage:
                self._forks.setdefault(lineage_key(segment), set()).add(head.session_id)
        return CommitResult(ok=True, version=written.version)

    def version_end(self, session_id: str, version: int) -> int | None:
        with self._lock:
            row = self._rows.get(session_id)
            if row is None or not 1 <= version <= len(row.ends):
                return None
            return row.ends[version - 1]

    def has_once(self, session_id: str, key: str) -> bool:
        with self._lock:
            row = self._rows.get(session_id)
            return row is not None and key in row.once

    def landed(self, session_id: str, seq: int, event_id: str) -> bool:
        with self._lock:
            row = self._rows.get(session_id)
            if row is None or not row.base <= seq < row.base + len(row.events):
                return False
            return row.events[seq - row.base].id == event_id

    def read_control(self, session_id: str) -> Control | None:
        with self._lock:
            control = self._controls.get(session_id)
        return Control.model_validate(control) if control is not None else None

    def write_control(self, session_id: str, control: Control, *, head_version: int) -> bool:
        written = control.model_dump()
        with self._lock:
            row = self._rows.get(session_id)
            stored = self._controls.get(session_id)
            if (row.version if row is not None else 0) != head_version:
                return False
            if (stored["rev"] if stored is not None else 0) != control.rev - 1:
                return False
            self._controls[session_id] = written
        return True

    def delete(self, session_id: str) -> bool:
        with self._lock:
            self._controls.pop(session_id, None)
            row = self._rows.pop(session_id, None)
            if row is None:
                return False
            if self._forks.get(row.key):
                self._retired[row.key] = row  # forks still read it
            for segment in row.head.lineage:
                key = lineage_key(segment)
                readers = self._forks.get(key, set())
                readers.discard(session_id)
                if not readers:
                    self._forks.pop(key, None)
                    self._retired.pop(key, None)  # its last fork is gone
            return True

    def list(self, *, principal: str | None = None, limit: int = 100) -> list[SessionSummary]:
        with self._lock:
            lines = [SessionSummary(session_id=sid, version=row.version, status=row.status,
                                    updated_at=row.updated_at, principal=row.principal)
                     for sid, row in self._rows.items()
                     if principal is None or row.principal == principal]
            lines += [line for sid, control in self._controls.items() if sid not in self._rows
                      and (line := first_turn(sid, Control.model_validate(control),
                                                 principal)) is not None]
        lines.sort(key=lambda line: line.updated_at, reverse=True)
        return lines[:limit]
