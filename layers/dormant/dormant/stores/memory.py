"""The in-memory store: the default, for tests, examples and single-process demos."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from dormant._head import Head
from dormant.events import Event
from dormant.stores._base import commit_head, once_keys, status_of
from dormant.types import CommitResult, Control, SessionSummary, StoredSession

__all__ = ["MemoryStore"]


@dataclass
class _Row:
    head: Head
    version: int
    updated_at: int
    status: Literal["active", "awaiting_input", "failed", "paused"]
    principal: str | None
    events: list[Event] = field(default_factory=list)
    once: set[str] = field(default_factory=set)


class MemoryStore:
    """Sessions in a dict, guarded by a lock. Events are immutable, so reads share them;
    heads and control records are copied on the way in and out, so no caller can mutate what
    is stored. (The JSON form of heads and events is exercised by the SQLite and DynamoDB
    stores.)

    Control records live beside the rows, keyed by session id: one may exist before the
    session's first commit (``write_control`` at ``head_version=0``)."""

    def __init__(self) -> None:
        self._rows: dict[str, _Row] = {}
        self._controls: dict[str, Control] = {}
        self._lock = threading.Lock()

    def load(self, session_id: str, *, turns: int | None = None) -> StoredSession | None:
        with self._lock:
            row = self._rows.get(session_id)
            if row is None:
                return None
            head, events = row.head.clone(), row.events
            start = head.window_start(turns)
            window = events[start:] if start else list(events)
            control = self._controls.get(session_id)
        return StoredSession(head, window, start,
                             control.model_copy(deep=True) if control is not None else None)

    def append(self, head: Head, events: Sequence[Event], *, expected_version: int) -> CommitResult:
        written = commit_head(head.clone(), expected_version, events)
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

    def read_control(self, session_id: str) -> Control | None:
        with self._lock:
            control = self._controls.get(session_id)
        return control.model_copy(deep=True) if control is not None else None

    def write_control(self, session_id: str, control: Control, *, head_version: int) -> bool:
        written = control.model_copy(deep=True)
        with self._lock:
            row = self._rows.get(session_id)
            stored = self._controls.get(session_id)
            if (row.version if row is not None else 0) != head_version:
                return False
            if (stored.rev if stored is not None else 0) != control.rev - 1:
                return False
            self._controls[session_id] = written
        return True

    def delete(self, session_id: str) -> bool:
        with self._lock:
            self._controls.pop(session_id, None)
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
