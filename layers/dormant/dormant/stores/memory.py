"""The in-memory store: the default, for tests, examples and single-process demos."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from dormant._head import Head
from dormant._ids import now_ms
from dormant.events import Event
from dormant.stores._base import once_keys, status_of
from dormant.types import CommitResult, SessionSummary, StoredSession

__all__ = ["MemoryStore"]


@dataclass
class _Row:
    head: Head
    version: int
    updated_at: int
    status: Literal["active", "awaiting_input", "failed"]
    principal: str | None
    events: list[Event] = field(default_factory=list)
    once: set[str] = field(default_factory=set)


class MemoryStore:
    """Sessions in a dict, guarded by a lock. Events are immutable, so reads share them;
    heads are cloned on the way in and out, so no caller can mutate what is stored. (The
    JSON form of heads and events is exercised by the SQLite and DynamoDB stores.)"""

    def __init__(self) -> None:
        self._rows: dict[str, _Row] = {}
        self._lock = threading.Lock()

    def load(self, session_id: str, *, turns: int | None = None) -> StoredSession | None:
        with self._lock:
            row = self._rows.get(session_id)
            if row is None:
                return None
            head, events = row.head.clone(), row.events
            start = head.window_start(turns)
            window = events[start:] if start else list(events)
        return StoredSession(head, window, start)

    def append(self, head: Head, events: Sequence[Event], *, expected_version: int) -> CommitResult:
        written = head.clone()
        written.version, written.updated_at = expected_version + 1, now_ms()
        keys = once_keys(events)
        with self._lock:
            row = self._rows.get(head.session_id)
            current = row.version if row is not None else 0
            held = next((k for k in keys if row is not None and k in row.once), None)
            if current != expected_version or held is not None:
                return CommitResult(ok=False, conflict=current != expected_version,
                                    current_version=current, duplicate=held)
            if row is None:
                row = _Row(written, written.version, written.updated_at, "active", head.principal)
                self._rows[head.session_id] = row
            row.events.extend(events)
            row.once.update(keys)
            row.head = written
            row.version = written.version
            row.updated_at = written.updated_at
            row.status = status_of(written)
        return CommitResult(ok=True, version=written.version)

    def has_once(self, session_id: str, key: str) -> bool:
        with self._lock:
            row = self._rows.get(session_id)
            return row is not None and key in row.once

    def landed(self, session_id: str, seq: int, event_id: str) -> bool:
        with self._lock:
            row = self._rows.get(session_id)
            return row is not None and seq < len(row.events) and row.events[seq].id == event_id

    def delete(self, session_id: str) -> bool:
        with self._lock:
            return self._rows.pop(session_id, None) is not None

    def list(self, *, principal: str | None = None, limit: int = 100) -> list[SessionSummary]:
        with self._lock:
            rows = [(sid, row) for sid, row in self._rows.items()
                    if principal is None or row.principal == principal]
            rows.sort(key=lambda item: item[1].updated_at, reverse=True)
            return [
                SessionSummary(session_id=sid, version=row.version,
                               status=row.status,
                               updated_at=row.updated_at, principal=row.principal)
                for sid, row in rows[:limit]
            ]
