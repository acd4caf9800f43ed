"""The SQLite store: embedded and durable, the local server's default.

One file, WAL mode. Six tables:

- ``sessions``: one row per session, the head (JSON) and its version;
- ``events``: the ledger, one row per event, keyed by ``(session_id, seq)``;
- ``commits``: one row per commit, keyed by ``(session_id, version)``;
- ``once_keys``: the ids that land once for the session's life (message ids, retry ids),
  keyed by ``(session_id, key)``: a redelivery is refused by the key, not by a window;
- ``controls``: the session's control record (stop / steer / pause asked of the running turn),
  one row per session: its revision and its JSON. It may exist before the session's first
  commit, and commits never touch it.
- ``forks``: which forks read which session's events (a fork's rows hold only its own events;
  its ``head.lineage`` names where the rest are). A deleted session that forks still read
  keeps its events under the archive id ``~<session id>@<created at>`` (no session id has a
  ``~``) until the last of those forks is deleted.

A commit runs in one ``BEGIN IMMEDIATE`` transaction of writes only, no reads: it moves the
head on condition that it is still at the expected version (``UPDATE ... WHERE version = ?``;
a new session's ``INSERT`` fails on its key), inserts its ``(session_id, version)`` row, its
once-only keys and its events, and commits. Optimistic concurrency *is* those keys: two
writers on one version cannot both move the head, a held once-only key fails its insert, and
either rolls the whole transaction back, so a refused commit writes nothing; only then does
the store read what refused it (the current version, the key held). ``write_control`` is one
``BEGIN IMMEDIATE`` transaction too: it checks the head's version and the record's revision,
then replaces the record.

Reads are incremental: the store keeps, per session, the events it decoded last (a
:class:`_Decoded`, bounded by ``cache_events`` in all), the JSON of the last of them, and the
head they end at with its JSON; a later ``load`` first reads the head alone (with the control
record, one statement), and if its JSON is the one kept, the ledger is the one kept: no event
row is read. Otherwise it reads the rows from the last one kept on, and uses what it kept only
if that row's JSON is still the same (rows are inserted once and never updated; a session
deleted and made again has other ids in its rows). A commit that moved the head from the very
JSON kept (the head is swapped only ``WHERE head = ?``, a check SQLite makes while it updates
the row) extends what is kept with its own events and head, so the load after a turn's commit
reads one row and decodes nothing, and a full-history turn decodes only the events other
processes added.

Connections are pooled, one per concurrent caller, so threads never share a connection
(``sqlite3`` objects are not thread-safe): a running turn polling ``read_control`` from a
background thread while its main thread commits uses two connections, and WAL lets the reader
run beside the writer.

Checkpoints stay off the turn. SQLite's own (``wal_autocheckpoint``) runs inside the ``COMMIT``
that takes the WAL past 1,000 pages: that commit copies the WAL into the file and fsyncs both,
13 to 19 ms where a commit takes 50 µs. The store turns it off and counts the pages its own
writes put in the WAL (about: the tables and indexes a write touches, and its bytes); past
:data:`CHECKPOINT_PAGES` a thread of its own runs a ``PASSIVE`` checkpoint on a connection of
its own (readers and writers go on meanwhile), and the next writer starts the WAL over. The
WAL stays as bounded as SQLite's default keeps it, and durability is the same: a commit is in
the WAL when it returns, and on disk once a checkpoint fsyncs it or the operating system
writes it back. The last connection to close checkpoints what is left, as SQLite always does.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from dormant._head import Head
from dormant._lru import Lru
from dormant.errors import StoreError
from dormant.events import Event, load_event, load_events
from dormant.stores._base import (
    LedgerPage,
    commit_head,
    first_turn,
    lineage_key,
    once_keys,
    status_of,
)
from dormant.stores._sqlite import (
    BACKFILL_ONCE_KEYS,
    HEAD_AND_CONTROL,
    SCHEMA,
    archive_id,
    control_of,
    held_key,
    inherited_events,
    move_head,
    refused,
    release,
    source_id,
    version_of,
    write_version,
)
from dormant.types import CommitResult, Control, SessionSummary, StoredSession

__all__ = ["SqliteStore"]

#: Schema version written to ``PRAGMA user_version``; bump it only with a migration.
#: 2 added ``once_keys`` (created by the schema script, so a version-1 file migrates itself);
#: 3 added ``controls`` (likewise created by the schema script: nothing to backfill);
#: 4 added ``forks`` and ``commits.end_seq`` (the ledger's length after each version: a fork
#: at a version of a session committed before it cannot be made).
SCHEMA_VERSION = 4
#: Seconds a writer waits for another process's write lock before failing.
BUSY_TIMEOUT = 30.0
#: Decoded events kept across loads, all sessions together (see the module's docstring).
CACHE_EVENTS = 50_000
#: WAL pages this store's writes may add before a thread of its own checkpoints them (SQLite's
#: ``wal_autocheckpoint`` default, see the module's docstring).
CHECKPOINT_PAGES = 1000
#: SQLite's page size (the default: the file never sets another).
PAGE_BYTES = 4096

class _Stale(Exception):
    """The rows a load kept decoded are not the session's rows any more."""


class _Decoded:
    """Events ``start`` … ``start + len(events) - 1`` of one session as a load decodes them,
    the stored JSON of the last one, and the head they end at."""

    __slots__ = ("events", "head", "head_json", "last_body", "start")

    def __init__(self, start: int, events: list[Event], last_body: str, head: Head,
                 head_json: str) -> None:
        self.start = start
        self.events = events
        self.last_body = last_body
        #: The head the events end at (``head.seq == end``; never handed out, only clones of
        #: it) and its stored JSON, exactly as read or written.
        self.head = head
        self.head_json = head_json

    @property
    def end(self) -> int:
        return self.start + len(self.events)


class SqliteStore:
    """Sessions in a SQLite file: ``SqliteStore("dormant.db")``.

    Safe for many threads in one process and for several processes on one file (``dormant dev``
    and ``dormant sessions list`` side by side). Call :meth:`close` to release the connections.
    ``cache_events``: how many decoded events loads keep for the next load (0: none; the
    head kept with a session's events counts as one more).
    """

    def __init__(self, path: str | Path, *, cache_events: int = CACHE_EVENTS) -> None:
        self.path = Path(path)
        self._decoded: Lru[_Decoded] = Lru(cache_events, lambda d: len(d.events) + 1)
        if str(path) == ":memory:":
            raise ValueError("SqliteStore needs a file path (use MemoryStore for memory)")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._idle: list[sqlite3.Connection] = []
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        #: WAL pages written since the last checkpoint began (estimated), and its thread.
        self._wal_pages = 0
        self._checkpointer: threading.Thread | None = None
        with self._connection() as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(f"{self.path} was written by a newer dormant (schema "
                                 f"{version} > {SCHEMA_VERSION}); upgrade dormant")
            columns = {row[1] for row in conn.execute("PRAGMA table_info(commits)")}
            if columns and "end_seq" not in columns:  # a file made before schema 4
                conn.execute("ALTER TABLE commits ADD COLUMN end_seq INTEGER")
            conn.executescript(SCHEMA)
            if version == 1:  # schema 1 had no once_keys: the ledger holds every message id
                conn.execute(BACKFILL_ONCE_KEYS)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def __repr__(self) -> str:
        return f"SqliteStore({str(self.path)!r})"

    # --- connections ---------------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        # isolation_level=None: no implicit transactions; each method says BEGIN itself.
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT, isolation_level=None,
                               check_same_thread=False)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")  # durable across crashes of the process
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA wal_autocheckpoint = 0")  # no checkpoint in a COMMIT: see _wrote
        return conn

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            try:
                conn = self._open()
            except sqlite3.Error as error:
                raise StoreError(f"cannot open {self.path}: {error}") from error
            with self._lock:
                self._all.append(conn)
        try:
            yield conn
        finally:
            if conn.in_transaction:  # an exception left it open: never leak a half-done write
                conn.rollback()
            with self._lock:
                self._idle.append(conn)

    def close(self) -> None:
        """Close every connection (the store must not be used afterwards); a checkpoint
        running is let finish first."""
        with self._lock:
            checkpointer = self._checkpointer
        if checkpointer is not None:
            checkpointer.join()
        with self._lock:
            conns, self._all, self._idle = self._all, [], []
        for conn in conns:
            conn.close()

    def _wrote(self, pages: int) -> None:
        """A write transaction committed about ``pages`` WAL pages: past
        :data:`CHECKPOINT_PAGES` since the last checkpoint began, begin one on a thread of
        its own, unless one is running (it will have the pages written meanwhile too)."""
        with self._lock:
            self._wal_pages += pages
            if self._wal_pages < CHECKPOINT_PAGES or self._checkpointer is not None:
                return
            self._wal_pages = 0
            self._checkpointer = thread = threading.Thread(
                target=self._checkpoint, name=f"dormant-sqlite-checkpoint {self.path.name}",
                daemon=True)
        thread.start()

    def _checkpoint(self) -> None:
        """Copy the WAL into the database file, ``PASSIVE``: it waits for no reader or
        writer, and copies what no reader still needs. A checkpoint that fails leaves the
        commits in the WAL, where the next one finds them."""
        try:
            # A connection of its own (the pool's stay with the turns), to the file as it is:
            # one deleted meanwhile is not made again.
            conn = sqlite3.connect(self.path.resolve().as_uri() + "?mode=rw", uri=True,
                                   isolation_level=None)
            try:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            finally:
                conn.close()
        except sqlite3.Error:
            pass
        finally:
            with self._lock:
                self._checkpointer = None

    # --- the Store protocol --------------------------------------------------------------------

    def load(self, session_id: str, *, turns: int | None = None,
             compacted: bool = False) -> StoredSession | None:
        kept = self._decoded.get(session_id)
        try:
            return self._load(session_id, turns, compacted, kept)
        except _Stale:  # not the rows it kept: read afresh
            self._decoded.pop(session_id)
            return self._load(session_id, turns, compacted, None)

    def _load(self, session_id: str, turns: int | None, compacted: bool,
              kept: _Decoded | None) -> StoredSession | None:
        with self._connection() as conn:
            try:
                if kept is not None:  # the head alone first: is it still the one kept?
                    found = conn.execute(HEAD_AND_CONTROL, (session_id,)).fetchone()
                    if found is None:
                        self._decoded.pop(session_id)
                        return None
                    if found[0] == kept.head_json:
                        known = _from_kept(kept, found[1], turns, compacted)
                        if known is not None:
                            return known
                conn.execute("BEGIN")  # one snapshot for the head and its window
                row = conn.execute("SELECT head FROM sessions WHERE session_id = ?",
                                   (session_id,)).fetchone()
                if row is None:
                    conn.rollback()
                    self._decoded.pop(session_id)
                    return None
                head = Head.model_validate_json(row[0])
                wanted = head.window_start(turns, compacted=compacted)
                start = max(wanted, head.fork_point)  # the session's own rows start there
                if kept is not None and not kept.start <= start < kept.end <= head.seq:
                    kept = None
                bodies = conn.execute(
                    "SELECT body FROM events WHERE session_id = ? AND seq >= ? AND seq < ? "
                    "ORDER BY seq", (session_id, kept.end - 1 if kept else start, head.seq),
                ).fetchall()
                inherited = inherited_events(conn, head, wanted) if wanted < start else []
                control = control_of(conn, session_id)
                conn.rollback()
            except sqlite3.Error as error:
                raise StoreError(f"cannot read session {session_id} from {self.path}: "
                                 f"{error}") from error
        if kept is not None and bodies and bodies[0][0] == kept.last_body:
            events = kept.events + [load_event(body) for (body,) in bodies[1:]]
            first = kept.start
        elif kept is not None:
            raise _Stale
        else:
            events = [load_event(body) for (body,) in bodies]
            first = start
        if events:
            self._decoded.put(session_id, _Decoded(first, events, bodies[-1][0], head.clone(),
                                                   row[0]))
        if inherited:
            return StoredSession(head, inherited + events[start - first:], wanted, control)
        return StoredSession(head, events[start - first:], start, control)

    def read_page(self, head: Head, after: int, skip: int, limit: int) -> LedgerPage | None:
        """At most ``limit`` events from ``skip`` after version ``after``'s end, up to
        ``head.seq`` (see :class:`dormant.stores._base.LedgerPage`): one read of the commit's
        end and a range of the events' primary key (and of a fork's sources' below its fork
        point)."""
        sid = head.session_id
        with self._connection() as conn:
            try:
                conn.execute("BEGIN")  # one snapshot for the commit's end and the events
                start: int | None = 0
                if after > 0:
                    row = conn.execute("SELECT end_seq FROM commits WHERE session_id = ? AND "
                                       "version = ?", (sid, after)).fetchone()
                    start = int(row[0]) if row is not None and row[0] is not None else None
                if start is None:  # a commit of a file older than schema 4: not placed
                    conn.rollback()
                    return None
                low = min(start + skip, head.seq)
                high = min(low + limit, head.seq)
                inherited = inherited_events(conn, head, low, high) if low < head.fork_point else []
                bodies = conn.execute(
                    "SELECT body FROM events WHERE session_id = ? AND seq >= ? AND seq < ? "
                    "ORDER BY seq", (sid, max(low, head.fork_point), high)).fetchall()
                conn.rollback()
            except sqlite3.Error as error:
                raise StoreError(f"cannot read session {sid} from {self.path}: "
                                 f"{error}") from error
        events = inherited + [load_event(body) for (body,) in bodies]
        return LedgerPage(events, low, (after, high - start) if high < head.seq else None)

    def append(self, head: Head, events: Sequence[Event], *, expected_version: int) -> CommitResult:
        written = commit_head(head, expected_version, events)
        written_json = written.model_dump_json()
        sid = head.session_id
        first = written.seq - len(events)
        bodies = [e.model_dump_json() for e in events]
        rows = [(sid, first + i, e.type, body)
                for i, (e, body) in enumerate(zip(events, bodies, strict=True))]
        keys = [(sid, key) for key in once_keys(events)]
        kept = self._decoded.get(sid)
        # What is kept ends where this commit starts: then the head kept is the one it moves
        # (of the same incarnation: a session deleted and made again under its id is another).
        base = kept.head_json if kept is not None and kept.end == first \
            and kept.head.version == expected_version \
            and kept.head.created_at == head.created_at else None
        with self._connection() as conn:
            try:
                conn.execute("BEGIN IMMEDIATE")
                moved = move_head(conn, written, written_json, expected_version, base)
                if moved is not None:
                    conn.execute("INSERT INTO commits (session_id, version, committed_at, "
                                 "end_seq) VALUES (?, ?, ?, ?)",
                                 (sid, written.version, written.updated_at, written.seq))
                    if keys:
                        conn.executemany("INSERT INTO once_keys (session_id, key) VALUES (?, ?)",
                                         keys)
                    conn.executemany("INSERT INTO events (session_id, seq, type, body) "
                                     "VALUES (?, ?, ?, ?)", rows)
                    conn.commit()
            except sqlite3.IntegrityError:
                # A key is taken (the session's id for a new one, the version, a once-only
                # key, a position): the transaction goes whole.
                moved = None
            except sqlite3.Error as error:
                raise StoreError(f"cannot write session {sid} to {self.path}: {error}") from error
            if moved is None:
                try:
                    if conn.in_transaction:
                        conn.rollback()
                    return refused(conn, sid, expected_version, [key for _, key in keys])
                except sqlite3.Error as error:
                    raise StoreError(f"cannot read session {sid} from {self.path}: "
                                     f"{error}") from error
        # 5 to 9 pages a text turn, 7.6 on average: the head's row and its index entry, the
        # commit's row, a once-only key, the events' leaf (and, now and then, its split)
        self._wrote(7 + (len(written_json) + sum(map(len, bodies))) // PAGE_BYTES)
        if moved and events:  # what is kept, extended by the rows as a load decodes them
            known = kept.events if kept is not None and expected_version else []
            self._decoded.put(sid, _Decoded(
                kept.start if kept is not None and expected_version else first,
                known + load_events("[" + ",".join(bodies) + "]"), bodies[-1],
                written.clone(), written_json))
        return CommitResult(ok=True, version=written.version)

    def fork(self, head: Head) -> CommitResult:
        written = commit_head(head, 0)
        sid = head.session_id
        with self._connection() as conn:
            try:
                conn.execute("BEGIN IMMEDIATE")
                current = version_of(conn, sid)
                if current:
                    conn.rollback()
                    return CommitResult(ok=False, conflict=True, current_version=current)
                for segment in head.lineage:
                    source_id(conn, segment)  # raises if the source is gone
                conn.executemany("INSERT OR IGNORE INTO forks (source, created_at, fork) "
                                 "VALUES (?, ?, ?)",
                                 [(*lineage_key(segment), sid) for segment in head.lineage])
                write_version(conn, written, status_of(written))
                conn.commit()
            except sqlite3.IntegrityError:
                conn.rollback()
                return CommitResult(ok=False, conflict=True, current_version=self._current(sid))
            except sqlite3.Error as error:
                raise StoreError(f"cannot write session {sid} to {self.path}: {error}") from error
        self._wrote(4 + len(head.lineage))
        return CommitResult(ok=True, version=written.version)

    def version_end(self, session_id: str, version: int) -> int | None:
        with self._connection() as conn:
            try:
                row = conn.execute("SELECT end_seq FROM commits WHERE session_id = ? AND "
                                   "version = ?", (session_id, version)).fetchone()
            except sqlite3.Error as error:
                raise StoreError(f"cannot read session {session_id} from {self.path}: "
                                 f"{error}") from error
        return int(row[0]) if row is not None and row[0] is not None else None

    def has_once(self, session_id: str, key: str) -> bool:
        with self._connection() as conn:
            try:
                return held_key(conn, session_id, [key]) is not None
            except sqlite3.Error as error:
                raise StoreError(f"cannot read session {session_id} from {self.path}: "
                                 f"{error}") from error

    def landed(self, session_id: str, seq: int, event_id: str) -> bool:
        with self._connection() as conn:
            try:
                row = conn.execute("SELECT body FROM events WHERE session_id = ? AND seq = ?",
                                   (session_id, seq)).fetchone()
            except sqlite3.Error as error:
                raise StoreError(f"cannot read session {session_id} from {self.path}: "
                                 f"{error}") from error
        return row is not None and load_event(row[0]).id == event_id

    def read_control(self, session_id: str) -> Control | None:
        with self._connection() as conn:
            try:
                return control_of(conn, session_id)
            except sqlite3.Error as error:
                raise StoreError(f"cannot read the control record of session {session_id} "
                                 f"from {self.path}: {error}") from error

    def write_control(self, session_id: str, control: Control, *, head_version: int) -> bool:
        body = control.model_dump_json()
        with self._connection() as conn:
            try:
                conn.execute("BEGIN IMMEDIATE")
                row = conn.execute("SELECT rev FROM controls WHERE session_id = ?",
                                   (session_id,)).fetchone()
                stored = int(row[0]) if row is not None else 0
                if version_of(conn, session_id) != head_version or stored != control.rev - 1:
                    conn.rollback()
                    return False
                conn.execute(
                    "INSERT INTO controls (session_id, rev, body) VALUES (?, ?, ?) "
                    "ON CONFLICT (session_id) DO UPDATE SET rev = excluded.rev, "
                    "body = excluded.body", (session_id, control.rev, body))
                conn.commit()
            except sqlite3.Error as error:
                raise StoreError(f"cannot write the control record of session {session_id} "
                                 f"to {self.path}: {error}") from error
        self._wrote(1 + len(body) // PAGE_BYTES)
        return True

    def _current(self, session_id: str) -> int:
        with self._connection() as conn:
            return version_of(conn, session_id)

    def delete(self, session_id: str) -> bool:
        with self._connection() as conn:
            try:
                conn.execute("BEGIN IMMEDIATE")
                row = conn.execute("SELECT head FROM sessions WHERE session_id = ?",
                                   (session_id,)).fetchone()
                deleted = conn.execute("DELETE FROM sessions WHERE session_id = ?",
                                       (session_id,)).rowcount
                head = Head.model_validate_json(row[0]) if row is not None else None
                if head is not None and conn.execute(
                        "SELECT 1 FROM forks WHERE source = ? AND created_at = ? LIMIT 1",
                        (session_id, head.created_at)).fetchone() is not None:
                    conn.execute("UPDATE events SET session_id = ? WHERE session_id = ?",
                                 (archive_id(session_id, head.created_at), session_id))
                conn.execute("DELETE FROM events WHERE session_id = ?", (session_id,))
                for segment in head.lineage if head is not None else ():
                    release(conn, segment, session_id)
                conn.execute("DELETE FROM commits WHERE session_id = ?", (session_id,))
                conn.execute("DELETE FROM once_keys WHERE session_id = ?", (session_id,))
                conn.execute("DELETE FROM controls WHERE session_id = ?", (session_id,))
                conn.commit()
                self._decoded.pop(session_id)
            except sqlite3.Error as error:
                raise StoreError(f"cannot delete session {session_id} from {self.path}: "
                                 f"{error}") from error
        self._wrote(6 + (head.seq if head is not None else 0) // 8)  # ~8 events a page
        return deleted > 0

    def list(self, *, principal: str | None = None, limit: int = 100) -> list[SessionSummary]:
        query = "SELECT session_id, version, status, updated_at, principal FROM sessions"
        params: tuple[object, ...] = ()
        if principal is not None:
            query += " WHERE principal = ?"
            params = (principal,)
        query += " ORDER BY updated_at DESC, session_id LIMIT ?"
        with self._connection() as conn:
            try:
                rows = conn.execute(query, (*params, limit)).fetchall()
                # sessions whose first turn runs: a control record and no ledger yet
                firsts = conn.execute(
                    "SELECT session_id, body FROM controls WHERE session_id NOT IN "
                    "(SELECT session_id FROM sessions)").fetchall()
            except sqlite3.Error as error:
                raise StoreError(f"cannot list sessions in {self.path}: {error}") from error
        lines = [SessionSummary(session_id=sid, version=version,
                                status=status if status in ("awaiting_input", "failed",
                                                            "paused") else "active",
                                updated_at=updated_at, principal=owner)
                 for sid, version, status, updated_at, owner in rows]
        lines += [line for sid, body in firsts if (line := first_turn(
            sid, Control.model_validate_json(body), principal)) is not None]
        lines.sort(key=lambda line: line.updated_at, reverse=True)
        return lines[:limit]


def _from_kept(kept: _Decoded, control: str | None, turns: int | None,
               compacted: bool) -> StoredSession | None:
    """The session as a load answers it, from what was kept (its stored head is the one
    kept); None when the window reaches outside it (earlier events, or a fork's lineage)."""
    head = kept.head.clone()
    wanted = head.window_start(turns, compacted=compacted)
    if wanted < max(kept.start, head.fork_point) or kept.end != head.seq:
        return None
    return StoredSession(head, kept.events[wanted - kept.start:], wanted,
                         Control.model_validate_json(control) if control is not None else None)
