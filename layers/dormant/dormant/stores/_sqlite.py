"""The SQLite store's tables and the statements its commits, forks and deletes run: the
schema (:data:`SCHEMA`), moving a head on condition, the version's rows, what refused a
commit, and where a fork's inherited events are read from. Each function runs on the
connection (and in the transaction) its caller holds."""

from __future__ import annotations

import sqlite3
from typing import Any

from dormant._head import Head
from dormant.errors import SessionNotFound
from dormant.events import Event, load_event
from dormant.stores._base import lineage_key, status_of
from dormant.types import CommitResult, Control

__all__ = ["BACKFILL_ONCE_KEYS", "HEAD_AND_CONTROL", "MOVE_HEAD", "SCHEMA", "archive_id",
           "control_of", "held_key", "inherited_events", "move_head", "refused", "release",
           "source_id", "version_of", "write_version"]

#: The tables (see :mod:`dormant.stores.sqlite`); each statement is idempotent, so the script
#: also migrates an older file (its new tables are created, nothing else changes).
SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    version    INTEGER NOT NULL,
    status     TEXT NOT NULL,
    principal  TEXT,
    updated_at INTEGER NOT NULL,
    head       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_by_update ON sessions (updated_at DESC);
CREATE TABLE IF NOT EXISTS commits (
    session_id   TEXT NOT NULL,
    version      INTEGER NOT NULL,
    committed_at INTEGER NOT NULL,
    end_seq      INTEGER,
    PRIMARY KEY (session_id, version)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS forks (
    source     TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    fork       TEXT NOT NULL,
    PRIMARY KEY (source, created_at, fork)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS once_keys (
    session_id TEXT NOT NULL,
    key        TEXT NOT NULL,
    PRIMARY KEY (session_id, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS controls (
    session_id TEXT PRIMARY KEY,
    rev        INTEGER NOT NULL,
    body       TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events (
    session_id TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    type       TEXT NOT NULL,
    body       TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
"""


#: The head and the control record in one statement (one snapshot without a transaction).
HEAD_AND_CONTROL = ("SELECT head, (SELECT body FROM controls WHERE session_id = ?1) "
                    "FROM sessions WHERE session_id = ?1")
#: A commit moves the head with this, on condition that it is where the commit found it.
MOVE_HEAD = ("UPDATE sessions SET version = ?, status = ?, updated_at = ?, head = ? "
             "WHERE session_id = ? AND ")
#: Version 1 files had no ``once_keys``: their user messages' ids, landed once from then on.
BACKFILL_ONCE_KEYS = """
INSERT OR IGNORE INTO once_keys (session_id, key)
SELECT session_id, 'm:' || json_extract(body, '$.message_id') FROM events WHERE type = 'user'
"""


def move_head(conn: sqlite3.Connection, written: Head, body: str, expected_version: int,
               base: str | None) -> bool | None:
    """Move the session's head to ``written`` iff it is at ``expected_version`` (a new
    session's insert raises ``IntegrityError`` if the id is taken) and holds the session
    ``written`` continues (its ``created_at``). None: not moved; True:
    moved from the JSON ``base`` exactly (or a new session), so the ledger below the commit is
    the one ``base`` ends; False: moved from another head at that version."""
    sid = written.session_id
    if expected_version == 0:
        conn.execute("INSERT INTO sessions (session_id, version, status, principal, updated_at, "
                     "head) VALUES (?, ?, ?, ?, ?, ?)",
                     (sid, written.version, status_of(written), written.principal,
                      written.updated_at, body))
        return True
    values = (written.version, status_of(written), written.updated_at, body, sid)
    if base is not None and conn.execute(MOVE_HEAD + "head = ?", (*values, base)).rowcount:
        return True
    # at that version, of the same incarnation (a session deleted and made again under its
    # id is another one)
    if conn.execute(MOVE_HEAD + "version = ? AND COALESCE(json_extract(head, '$.created_at'), "
                    "0) = ?", (*values, expected_version, written.created_at)).rowcount:
        return False
    return None


def refused(conn: sqlite3.Connection, session_id: str, expected_version: int,
             keys: list[str]) -> CommitResult:
    """Why a commit was refused, read after its transaction rolled back: the version moved,
    or a once-only key is held (or both); a key taken otherwise counts as a conflict."""
    conn.execute("BEGIN")  # one snapshot for the version and the keys
    current = version_of(conn, session_id)
    held = held_key(conn, session_id, keys)
    conn.rollback()
    return CommitResult(ok=False, conflict=current != expected_version or held is None,
                        current_version=current, duplicate=held)


def held_key(conn: sqlite3.Connection, session_id: str, keys: list[str]) -> str | None:
    """The first of ``keys`` the session already holds, if any."""
    for key in keys:
        if conn.execute("SELECT 1 FROM once_keys WHERE session_id = ? AND key = ?",
                        (session_id, key)).fetchone() is not None:
            return key
    return None


def write_version(conn: sqlite3.Connection, written: Head, status: str) -> None:
    """The version's ``commits`` row (its key is the optimistic lock) and the head moved to it:
    what every commit and a fork's creation write."""
    conn.execute("INSERT INTO commits (session_id, version, committed_at, end_seq) "
                 "VALUES (?, ?, ?, ?)",
                 (written.session_id, written.version, written.updated_at, written.seq))
    conn.execute(
        "INSERT INTO sessions (session_id, version, status, principal, updated_at, head) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (session_id) DO UPDATE SET "
        "version = excluded.version, status = excluded.status, "
        "updated_at = excluded.updated_at, head = excluded.head",
        (written.session_id, written.version, status, written.principal, written.updated_at,
         written.model_dump_json()))


def archive_id(session_id: str, created_at: int) -> str:
    """Where a deleted session's events wait for the last fork that reads them."""
    return f"~{session_id}@{created_at}"


def source_id(conn: sqlite3.Connection, segment: dict[str, Any]) -> str:
    """The rows' session id holding a lineage segment's events: its archive, once the
    session was deleted, else the live session (the incarnation the segment names)."""
    sid, created_at = lineage_key(segment)
    archive = archive_id(sid, created_at)
    if conn.execute("SELECT 1 FROM events WHERE session_id = ? LIMIT 1",
                    (archive,)).fetchone() is not None:
        return archive
    row = conn.execute("SELECT head FROM sessions WHERE session_id = ?", (sid,)).fetchone()
    if row is None or Head.model_validate_json(row[0]).created_at != created_at:
        raise SessionNotFound(sid)
    return sid


def inherited_events(conn: sqlite3.Connection, head: Head, start: int,
               stop: int | None = None) -> list[Event]:
    """A fork's inherited events from position ``start`` to its fork point (or ``stop``)."""
    events: list[Event] = []
    below = 0
    for segment in head.lineage:
        end = int(segment["end"]) if stop is None else min(int(segment["end"]), stop)
        if max(start, below) < end:
            rows = conn.execute(
                "SELECT body FROM events WHERE session_id = ? AND seq >= ? AND seq < ? "
                "ORDER BY seq", (source_id(conn, segment), max(start, below), end)).fetchall()
            events.extend(load_event(body) for (body,) in rows)
        below = int(segment["end"])
    return events


def release(conn: sqlite3.Connection, segment: dict[str, Any], fork: str) -> None:
    """``fork`` no longer reads ``segment``'s session: the last reader of a deleted one
    takes its archived events with it."""
    sid, created_at = lineage_key(segment)
    conn.execute("DELETE FROM forks WHERE source = ? AND created_at = ? AND fork = ?",
                 (sid, created_at, fork))
    if conn.execute("SELECT 1 FROM forks WHERE source = ? AND created_at = ? LIMIT 1",
                    (sid, created_at)).fetchone() is None:
        conn.execute("DELETE FROM events WHERE session_id = ?", (archive_id(sid, created_at),))


def control_of(conn: sqlite3.Connection, session_id: str) -> Control | None:
    row = conn.execute("SELECT body FROM controls WHERE session_id = ?",
                       (session_id,)).fetchone()
    return Control.model_validate_json(row[0]) if row is not None else None


def version_of(conn: sqlite3.Connection, session_id: str) -> int:
    row = conn.execute("SELECT version FROM sessions WHERE session_id = ?",
                       (session_id,)).fetchone()
    return int(row[0]) if row is not None else 0
