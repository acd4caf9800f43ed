"""What only the SQLite store has to prove: a file that outlives its process, shared safely by
several processes, and a schema it refuses to misread."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

import pytest

import dormant
from dormant.errors import StoreError
from dormant.events import UserEvent
from dormant.stores import SqliteStore

WRITERS = 4


def test_sessions_outlive_the_store_that_wrote_them(tmp_path: Path) -> None:
    db = tmp_path / "durable.db"
    first = SqliteStore(db)
    session = dormant.App(store=first).sessions.create("kept", state={"n": 1})
    session.input.message("remember me", id="m-1")
    assert dormant.App(store=first).sessions.commit(session).ok
    first.close()

    reopened = dormant.App(store=SqliteStore(db)).sessions.get("kept")

    assert reopened is not None and reopened.version == 2 and reopened.state == {"n": 1}
    assert [e.text for e in reopened.events if isinstance(e, UserEvent)] == ["remember me"]
    assert reopened.head.has_message("m-1") and len(reopened.head.message_ids) == 1


def test_the_file_is_in_wal_mode(tmp_path: Path) -> None:
    SqliteStore(tmp_path / "wal.db").close()
    with sqlite3.connect(tmp_path / "wal.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_file_from_a_newer_schema_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "future.db"
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA user_version = 99")
    with pytest.raises(StoreError, match="newer dormant"):
        SqliteStore(db)


def test_memory_is_not_a_path() -> None:
    with pytest.raises(ValueError, match="MemoryStore"):
        SqliteStore(":memory:")


def _commit_from_another_process(db: str, barrier: multiprocessing.synchronize.Barrier,
                                 results: multiprocessing.queues.Queue[bool]) -> None:
    app = dormant.App(store=SqliteStore(db))
    session = app.sessions.get("contended")
    assert session is not None
    session.input.message(f"from process {multiprocessing.current_process().pid}")
    barrier.wait(timeout=30)
    results.put(app.sessions.commit(session).ok)


def test_processes_racing_on_one_version_have_exactly_one_winner(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    store = SqliteStore(db)
    dormant.App(store=store).sessions.create("contended")
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(WRITERS)
    results = context.Queue()
    workers = [context.Process(target=_commit_from_another_process,
                               args=(str(db), barrier, results)) for _ in range(WRITERS)]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)

    assert sorted(outcomes) == [False] * (WRITERS - 1) + [True]
    final = dormant.App(store=store).sessions.get("contended")
    assert final is not None and final.version == 2 and len(final.events) == 1


def test_a_schema_1_file_is_migrated_with_its_message_ids_as_keys(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    store = SqliteStore(path)
    app = dormant.App(store=store)
    for n in range(40):
        assert app.sessions.append("old", f"note {n}", id=f"m-{n}").ok
    store.close()
    with sqlite3.connect(path) as conn:  # what a schema-1 file looked like
        conn.execute("DROP TABLE once_keys")
        conn.execute("PRAGMA user_version = 1")
    conn.close()

    migrated = SqliteStore(path)
    again = dormant.App(store=migrated).sessions.append("old", "note 0", id="m-0")

    assert again.ok and again.version == 40  # a redelivery: nothing new was written
    assert migrated.has_once("session_old", "m:m-0")
    migrated.close()


def _talk(app: dormant.App, session_id: str, *texts: str) -> None:
    for text in texts:
        session = app.sessions.get(session_id) or app.sessions.create(session_id, owner="p")
        session.input.message(text)
        assert app.sessions.commit(session).ok


def _decoding(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every event body the SQLite store decodes."""
    import dormant.stores.sqlite as module

    decoded: list[str] = []
    real = module.load_event

    def counted(body: str) -> object:
        decoded.append(body)
        return real(body)

    monkeypatch.setattr(module, "load_event", counted)
    return decoded


def test_a_load_decodes_only_what_was_appended_since_this_store_last_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "incremental.db"
    mine, other = SqliteStore(db), SqliteStore(db)  # another process's store on the file
    _talk(dormant.App(store=other), "session_s", "one", "two", "three")
    assert mine.load("session_s") is not None  # reads and keeps the whole ledger
    _talk(dormant.App(store=other), "session_s", "four")
    decoded = _decoding(monkeypatch)

    stored = mine.load("session_s")

    fresh = SqliteStore(db, cache_events=0).load("session_s")
    assert stored is not None and fresh is not None
    assert stored.events == fresh.events and stored.head == fresh.head
    assert [e.text for e in stored.events if isinstance(e, UserEvent)] \
        == ["one", "two", "three", "four"]
    assert len(decoded) == 1 + len(fresh.events)  # mine: the new event only; fresh: all
    assert '"four"' in decoded[0]


def test_a_session_made_again_under_its_id_elsewhere_is_read_afresh(tmp_path: Path) -> None:
    db = tmp_path / "again.db"
    mine, other = SqliteStore(db), SqliteStore(db)
    _talk(dormant.App(store=other), "session_s", "first life", "still first")
    assert mine.load("session_s") is not None
    assert other.delete("session_s")
    _talk(dormant.App(store=other), "session_s", "second life", "still second", "and more")

    stored = mine.load("session_s")

    assert stored is not None
    assert [e.text for e in stored.events if isinstance(e, UserEvent)] \
        == ["second life", "still second", "and more"]


def test_what_loads_keep_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "bounded.db"
    _talk(dormant.App(store=SqliteStore(db)), "session_a", "one", "two")
    _talk(dormant.App(store=SqliteStore(db)), "session_b", "three", "four")
    store = SqliteStore(db, cache_events=3)
    assert store.load("session_a") is not None
    assert store.load("session_b") is not None  # 2 + 2 > 3: session_a's are dropped
    decoded = _decoding(monkeypatch)

    assert store.load("session_b") is not None and decoded == []
    stored = store.load("session_a")

    assert stored is not None and len(decoded) == len(stored.events) == 2
    assert len(SqliteStore(db, cache_events=0).load("session_a").events) == 2  # type: ignore[union-attr]


def test_a_schema_3_file_gains_version_ends_and_forks_what_it_can(tmp_path: Path) -> None:
    """Schema 4 added ``commits.end_seq``: versions committed before it have no recorded end,
    so a fork there is refused with a clear error; a fork at the current version works."""
    path = tmp_path / "three.db"
    with sqlite3.connect(path) as conn:  # schema 3's commits table
        conn.execute("CREATE TABLE commits (session_id TEXT NOT NULL, version INTEGER NOT "
                     "NULL, committed_at INTEGER NOT NULL, PRIMARY KEY (session_id, version)) "
                     "WITHOUT ROWID")
        conn.execute("PRAGMA user_version = 3")
    conn.close()
    store = SqliteStore(path)
    app = dormant.App(store=store)
    _talk(app, "old", "one", "two")
    with sqlite3.connect(path) as conn:  # as if committed by a release before schema 4
        conn.execute("UPDATE commits SET end_seq = NULL")
    conn.close()
    with pytest.raises(dormant.InputError, match="version 1 is not in the store"):
        app.sessions.fork("old", at_version=1)
    app.sessions.fork("old", new_session_id="old-2")
    fork = app.sessions.get("old-2")
    assert fork is not None
    assert [e.text for e in fork.events if isinstance(e, UserEvent)] == ["one", "two"]
    assert store.version_end("session_old-2", 1) == 2
    store.close()
