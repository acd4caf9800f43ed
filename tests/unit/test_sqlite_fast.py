"""How the SQLite store keeps a turn short: a commit of writes only, refused by its keys, a load
after it that reads the head alone, and no WAL checkpoint inside a commit. Statement counts and
what the file holds, not timings (those are bench's)."""

from __future__ import annotations

import shutil
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import dormant
from dormant.events import UserEvent
from dormant.stores import SqliteStore
from dormant.stores import sqlite as sqlite_store
from dormant.types import Control, StoredSession


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every SQL statement any SqliteStore's connections run from now on."""
    seen: list[str] = []
    real = SqliteStore._open

    def traced(self: SqliteStore) -> sqlite3.Connection:
        conn = real(self)
        conn.set_trace_callback(seen.append)
        return conn

    monkeypatch.setattr(SqliteStore, "_open", traced)
    yield seen


def _turn(app: dormant.App, session_id: str, text: str) -> None:
    session = app.sessions.get(session_id) or app.sessions.create(session_id, owner="p")
    session.input.message(text)
    assert app.sessions.commit(session).ok


def _same(stored: StoredSession | None, fresh: StoredSession | None) -> None:
    assert stored is not None and fresh is not None
    assert stored.events == fresh.events and stored.head == fresh.head
    assert stored.first_seq == fresh.first_seq and stored.control == fresh.control


def _rows(db: Path) -> tuple[int, ...]:
    with sqlite3.connect(db) as conn:
        counted = tuple(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                        for table in ("events", "commits", "once_keys"))
        counted += (conn.execute("SELECT version FROM sessions").fetchone()[0],)
    conn.close()
    return counted


def test_a_commit_writes_without_reading_first(tmp_path: Path, statements: list[str]) -> None:
    store = SqliteStore(tmp_path / "writes.db")
    app = dormant.App(store=store)
    _turn(app, "s", "one")
    session = app.sessions.get("s")
    assert session is not None
    session.input.message("two")
    statements.clear()

    assert app.sessions.commit(session).ok

    begin = statements.index("BEGIN IMMEDIATE")
    written = statements[begin + 1:statements.index("COMMIT", begin)]
    assert written and not [s for s in written if s.lstrip().upper().startswith("SELECT")]
    assert written[0].startswith("UPDATE sessions")  # the head moves first: the version's key


def test_the_load_after_a_commit_reads_the_head_alone(tmp_path: Path,
                                                     statements: list[str]) -> None:
    db = tmp_path / "warm.db"
    store = SqliteStore(db)
    app = dormant.App(store=store)
    _turn(app, "s", "one")
    _turn(app, "s", "two")
    statements.clear()

    stored = store.load("session_s")

    assert len(statements) == 1 and "FROM events" not in statements[0]
    _same(stored, SqliteStore(db, cache_events=0).load("session_s"))
    assert [e.text for e in stored.events if isinstance(e, UserEvent)] == ["one", "two"]


def test_a_warm_load_equals_a_cold_one_whatever_wrote_last(tmp_path: Path) -> None:
    db = tmp_path / "mixed.db"
    mine, other = SqliteStore(db), SqliteStore(db)  # another process's store on the file
    mine_app, other_app = dormant.App(store=mine), dormant.App(store=other)
    for n in range(6):
        _turn(mine_app if n % 3 else other_app, "s", f"turn {n}")
        if n == 3:  # a control record written elsewhere moves no head: still read
            version = other.load("session_s").head.version  # type: ignore[union-attr]
            assert other.write_control("session_s", Control(rev=1, pause=1),
                                       head_version=version)
        for turns in (None, 1, 0):
            _same(mine.load("session_s", turns=turns),
                  SqliteStore(db, cache_events=0).load("session_s", turns=turns))
    assert mine.load("session_s").control == Control(rev=1, pause=1)  # type: ignore[union-attr]


def test_a_session_made_again_at_the_same_version_is_not_read_from_what_was_kept(
        tmp_path: Path) -> None:
    """The head kept names the ledger below a commit only when the commit moved that very
    head: a session deleted and made again elsewhere, up to the same version and length, is
    another session. A commit made on the first life is refused there (it continues another
    ``created_at``), and what is read is the second life's, not what was kept."""
    db = tmp_path / "again.db"
    mine, other = SqliteStore(db), SqliteStore(db)
    mine_app, other_app = dormant.App(store=mine), dormant.App(store=other)
    _turn(other_app, "s", "first life")
    session = mine_app.sessions.get("s")  # mine keeps the first life's events and head
    assert session is not None
    assert other.delete("session_s")
    time.sleep(0.002)  # created_at has millisecond resolution
    _turn(other_app, "s", "second life")
    session.input.message("late")
    refused = mine_app.sessions.commit(session)
    assert not refused.ok and refused.conflict

    stored = mine.load("session_s")

    _same(stored, SqliteStore(db, cache_events=0).load("session_s"))
    assert [e.text for e in stored.events if isinstance(e, UserEvent)] == ["second life"]


def test_a_refused_commit_writes_nothing_and_says_what_refused_it(tmp_path: Path) -> None:
    db = tmp_path / "refused.db"
    store = SqliteStore(db)
    app = dormant.App(store=store)
    _turn(app, "s", "one")
    stale = app.sessions.get("s")
    assert stale is not None and app.sessions.append("s", "two", id="m-2").ok
    before = _rows(db)
    loaded = store.load("session_s")
    assert loaded is not None

    stale.input.message("late")
    redelivered = [UserEvent(text="two", message_id="m-2")]
    ahead = loaded.head.clone()
    ahead.seq += 1

    moved = store.append(stale.head, stale.new_events, expected_version=stale.version)
    again = store.append(ahead, redelivered, expected_version=loaded.head.version)
    both = store.append(stale.head, redelivered, expected_version=stale.version)
    beyond = store.append(ahead, [UserEvent(text="three")],
                          expected_version=loaded.head.version + 1)  # no such version yet

    assert (moved.ok, moved.conflict, moved.current_version, moved.duplicate) \
        == (False, True, loaded.head.version, None)
    assert (again.ok, again.conflict, again.duplicate) == (False, False, "m:m-2")
    assert (both.ok, both.conflict, both.current_version, both.duplicate) \
        == (False, True, loaded.head.version, "m:m-2")
    assert (beyond.ok, beyond.conflict, beyond.current_version) \
        == (False, True, loaded.head.version)
    assert _rows(db) == before
    _same(store.load("session_s"), SqliteStore(db, cache_events=0).load("session_s"))


def _checkpointed(db: Path, copy: Path) -> int:
    """How many sessions the database file itself holds, its WAL aside: what checkpoints
    copied into it (a copy of the file alone is opened, so nothing is checkpointed here)."""
    shutil.copyfile(db, copy)
    with sqlite3.connect(copy) as conn:  # (the schema too is in the WAL until then)
        found = conn.execute("SELECT count(*) FROM sessions").fetchone()[0] if conn.execute(
            "SELECT 1 FROM sqlite_master WHERE name = 'sessions'").fetchone() else 0
    conn.close()
    copy.unlink()
    return int(found)


def _checkpoints_end() -> None:
    for thread in threading.enumerate():
        if thread.name.startswith("dormant-sqlite-checkpoint"):
            thread.join()


def test_no_commit_checkpoints_the_wal_a_thread_of_the_store_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite's own checkpoint would run inside the commit that takes the WAL past 1,000 pages
    (milliseconds, with two fsyncs): the store's commits leave it to a thread of their own, once
    they wrote ``CHECKPOINT_PAGES``."""
    db, copy = tmp_path / "wal.db", tmp_path / "copy.db"
    monkeypatch.setattr(sqlite_store, "CHECKPOINT_PAGES", 10**6)
    store = SqliteStore(db)
    app = dormant.App(store=store)
    big = "x" * 200_000  # ~50 pages a turn
    for n in range(30):  # ~1,500 pages: past SQLite's 1,000
        _turn(app, f"s{n}", big)
    assert _checkpointed(db, copy) == 0  # every commit is still in the WAL alone

    monkeypatch.setattr(sqlite_store, "CHECKPOINT_PAGES", 100)
    _turn(app, "s", "one more")  # past the store's own threshold: its thread checkpoints
    _checkpoints_end()

    assert _checkpointed(db, copy) == 31
    _turn(app, "s", "after")  # the next writer starts the WAL over
    store.close()
