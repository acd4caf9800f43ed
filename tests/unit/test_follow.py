"""Following a session (``dormant._follow.events_after``): the events after a version."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import dormant
from dormant._follow import Feed, events_after, start_of
from dormant._head import COMMIT_WINDOW
from dormant.errors import InputError, SessionNotFound
from dormant.session import normalize_session_id
from dormant.stores import SqliteStore
from dormant.stores.memory import MemoryStore


@pytest.fixture(params=["memory", "sqlite"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dormant.App]:
    if request.param == "memory":
        yield dormant.App(name="follow", store=MemoryStore())
        return
    store = SqliteStore(tmp_path / "follow.db")
    try:
        yield dormant.App(name="follow", store=store)
    finally:
        store.close()


def _grow(app: dormant.App, sid: str, commits: int, *, principal: str | None = None,
          ) -> dict[int, int]:
    """Commit ``commits`` messages; the ledger length after each version (0 -> 0)."""
    seqs = {0: 0}
    for n in range(commits):
        result = app.sessions.append(sid, f"message {n}", principal=principal)
        assert result.ok
        stored = app.store.load(normalize_session_id(sid), turns=0)
        assert stored is not None
        seqs[stored.head.version] = stored.head.seq
    return seqs


def _ledger(app: dormant.App, sid: str) -> list[dict[str, Any]]:
    stored = app.store.load(normalize_session_id(sid), turns=None)
    assert stored is not None
    return [e.model_dump(mode="json") for e in stored.events]


def test_after_zero_is_the_whole_ledger(app: dormant.App) -> None:
    _grow(app, "f1", 3)
    feed = events_after(app, "f1", 0)
    assert (feed.session_id, feed.version, feed.status, feed.resync) == (
        "session_f1", 3, "active", False)
    assert feed.events == _ledger(app, "f1") and len(feed.events) == 3


def test_after_a_version_is_exactly_what_was_committed_since(app: dormant.App) -> None:
    seqs = _grow(app, "f2", 10)
    ledger = _ledger(app, "f2")
    for after in range(10):
        feed = events_after(app, "f2", after)
        assert (feed.version, feed.resync) == (10, False)
        assert feed.events == ledger[seqs[after]:], after


def test_after_the_current_version_is_empty_at_once(app: dormant.App) -> None:
    _grow(app, "f3", 2)
    started = time.monotonic()
    feed = events_after(app, "f3", 2)
    assert time.monotonic() - started < 0.2
    assert (feed.version, feed.events, feed.resync) == (2, [], False)
    assert events_after(app, "f3", 99).events == []  # ahead of the session: nothing either


def test_wait_returns_as_soon_as_another_thread_commits(app: dormant.App) -> None:
    _grow(app, "f4", 1)
    committer = threading.Timer(0.3, lambda: app.sessions.append("f4", "news"))
    committer.start()
    started = time.monotonic()
    try:
        feed = events_after(app, "f4", 1, wait=5.0, poll=0.05)
    finally:
        committer.join()
    elapsed = time.monotonic() - started
    assert 0.25 <= elapsed < 2.0, elapsed
    assert feed.version == 2
    assert [(e["type"], e["text"]) for e in feed.events] == [("user", "news")]


def test_wait_with_no_commit_ends_empty_after_the_wait(app: dormant.App) -> None:
    _grow(app, "f5", 1)
    started = time.monotonic()
    feed = events_after(app, "f5", 1, wait=0.3, poll=0.05)
    assert 0.3 <= time.monotonic() - started < 1.5
    assert (feed.version, feed.events) == (1, [])


class _NoPages:
    """A store without ``read_page`` (a third-party one): feeds read it with ``load``."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        if name == "read_page":
            raise AttributeError(name)
        return getattr(self._store, name)


def test_a_version_older_than_the_window_resyncs_with_the_whole_ledger(app: dormant.App
                                                                       ) -> None:
    commits = COMMIT_WINDOW + 8
    seqs = _grow(app, "f6", commits)
    ledger = _ledger(app, "f6")
    oldest = commits - COMMIT_WINDOW  # version oldest + 1 is the oldest the head remembers
    # dormant's stores place any version (read_page asks the store where it ended)...
    placed = events_after(app, "f6", oldest - 1)
    assert (placed.resync, placed.events) == (False, ledger[seqs[oldest - 1]:])
    # ...a store without read_page is read through the head's commit window.
    paged = app.store
    app.store = _NoPages(paged)  # type: ignore[assignment]
    try:
        kept = events_after(app, "f6", oldest)
        assert (kept.resync, kept.events) == (False, ledger[seqs[oldest]:])
        lost = events_after(app, "f6", oldest - 1)
        assert (lost.resync, lost.version, lost.events) == (True, commits, ledger)
        assert events_after(app, "f6", 0).resync is False  # "everything" is never a resync
    finally:
        app.store = paged


def test_another_principals_session_is_not_found(app: dormant.App) -> None:
    _grow(app, "f7", 1, principal="ann")
    assert events_after(app, "f7", 0, principal="ann").version == 1
    with pytest.raises(SessionNotFound):
        events_after(app, "f7", 0, principal="bob")
    with pytest.raises(SessionNotFound):  # nor can waiting reveal it
        events_after(app, "f7", 1, wait=0.2, poll=0.05, principal="bob")
    with pytest.raises(SessionNotFound):
        events_after(app, "nobody", 0)
    assert events_after(app, "f7", 0).version == 1  # no principal: not scoped


@pytest.mark.parametrize(("after", "wait"), [(-1, 0.0), (0, -1.0), (0, float("nan")),
                                             (0, float("inf"))])
def test_a_bad_after_or_wait_is_an_input_error(app: dormant.App, after: int, wait: float
                                               ) -> None:
    _grow(app, "f8", 1)
    with pytest.raises(InputError):
        events_after(app, "f8", after, wait=wait)


def test_start_of_reads_the_commit_window() -> None:
    head = dormant.Session.new("session_x").head
    head.version, head.seq, head.commit_seqs = 5, 12, [0, 2, 5, 9, 10]
    assert [start_of(head, after) for after in range(5)] == [0, 2, 5, 9, 10]
    head.commit_seqs = [9, 10]  # only versions 4 and 5 remembered
    assert [start_of(head, after) for after in range(5)] == [0, None, None, 9, 10]


def test_the_feed_is_camel_case_on_the_wire() -> None:
    feed = Feed(session_id="session_x", version=3, status="paused", events=[], resync=True)
    assert feed.wire() == {"sessionId": "session_x", "version": 3, "status": "paused",
                           "events": [], "resync": True, "next": None}
