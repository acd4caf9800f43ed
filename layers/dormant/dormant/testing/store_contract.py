"""The store contract as a pytest suite: versions, conflicts, merge, "a refusal writes nothing",
and the session's control record (read by a running turn, written by stop / steer / pause).

Every store shipped with dormant runs it, and so can yours. This module imports pytest: import it
from test code only (``dormant.testing`` itself does not import it).
"""

from __future__ import annotations

import threading
import time

import pytest

import dormant
from dormant.events import CompactionEvent, PauseEvent, StateDelta, UserEvent
from dormant.session import Session
from dormant.stores import Store
from dormant.types import Control, ControlRunning, ControlSteer, ControlStop

__all__ = ["StoreContract"]


def _app(store: Store) -> dormant.App:
    return dormant.App(name="conformance", store=store)


def _control(rev: int, *, stop: bool = False, pause: bool = False,
             steers: int = 0) -> Control:
    """A control record at ``rev``: a stop, a pause and ``steers`` steers, as asked."""
    return Control(
        rev=rev,
        stop=ControlStop(invocation_id="inv_running", rev=rev, at=1_700_000_000_000)
        if stop else None,
        pause=rev if pause else None,
        steers=[ControlSteer(id=f"steer-{n}", text=f"also check room {n}",
                             invocation_id="inv_running", rev=rev, at=1_700_000_000_000 + n)
                for n in range(steers)])


class StoreContract:
    """Subclass it in a test module, name the subclass ``Test...``, give it a ``store`` fixture
    that yields a fresh, empty store (and cleans up after), and every check below runs on it::

        import pytest
        from dormant.testing import StoreContract

        class TestMyStore(StoreContract):
            @pytest.fixture
            def store(self, tmp_path):          # any pytest fixture may be requested
                store = MyStore(tmp_path / "sessions.db")
                yield store                     # a fresh, empty store per test
                store.close()                   # teardown runs after each test

    Each test gets its own store from the fixture. This base class is not collected on its own
    (its name does not start with ``Test``); each subclass runs the whole suite once.
    """

    @pytest.fixture
    def store(self) -> Store:
        """Overridden by every subclass; failing here names the class that forgot to."""
        pytest.fail(f"{type(self).__name__} subclasses StoreContract but defines no `store` "
                    f"fixture: add `@pytest.fixture def store(self): yield YourStore(...)`")

    def test_a_missing_session_loads_as_none(self, store: Store) -> None:
        assert store.load("session_nobody") is None
        assert _app(store).sessions.get("nobody") is None

    def test_create_commits_version_one_and_get_reads_it(self, store: Store) -> None:
        app = _app(store)
        created = app.sessions.create("thread-1", state={"plan": "basic"})
        assert created.version == 1
        loaded = app.sessions.get("session_thread-1")
        assert loaded is not None
        assert loaded.session_id == "session_thread-1"
        assert loaded.version == 1
        assert loaded.state == {"plan": "basic"}
        assert loaded.events == []

    def test_create_refuses_an_existing_id(self, store: Store) -> None:
        app = _app(store)
        app.sessions.create("twice")
        with pytest.raises(dormant.InputError, match="already exists"):
            app.sessions.create("twice")

    def test_each_commit_moves_the_version_by_one(self, store: Store) -> None:
        app = _app(store)
        session = app.sessions.create("versions")
        for n in range(3):
            session.input.message(f"message {n}")
            result = app.sessions.commit(session)
            assert result.ok and result.version == n + 2
        loaded = app.sessions.get("versions")
        assert loaded is not None
        assert loaded.version == 4
        assert [e.text for e in loaded.events if isinstance(e, UserEvent)] == [
            "message 0", "message 1", "message 2"]

    def test_a_stale_commit_is_refused_as_data_and_writes_nothing(self, store: Store) -> None:
        app = _app(store)
        app.sessions.create("stale", state={"n": 1})
        one, two = app.sessions.get("stale"), app.sessions.get("stale")
        assert one is not None and two is not None
        one.input.message("first")
        two.input.message("second")
        assert app.sessions.commit(one).ok
        refused = app.sessions.commit(two)
        assert refused.ok is False
        assert refused.conflict is True
        assert refused.current_version == 2
        after = app.sessions.get("stale")
        assert after is not None
        assert after.version == 2
        assert [e.text for e in after.events if isinstance(e, UserEvent)] == ["first"]
        assert after.state == {"n": 1}

    def test_merge_rereads_the_head_and_appends(self, store: Store) -> None:
        """Seed 002, step 6: load twice, the second commit is refused, merge rescues it."""
        app = _app(store)
        app.sessions.create("thread-shared")
        one, two = app.sessions.get("thread-shared"), app.sessions.get("thread-shared")
        assert one is not None and two is not None
        loaded_at = [one.version, two.version]
        one.input.message("from the first request")
        two.input.message("from the second request")
        won = app.sessions.commit(one)
        lost = app.sessions.commit(two)
        rescued = app.sessions.merge(two)
        settled = app.sessions.get("thread-shared")
        assert settled is not None
        assert loaded_at == [1, 1]
        assert won.model_dump() == {"ok": True, "version": 2, "conflict": False,
                                    "current_version": None}
        assert lost.model_dump() == {"ok": False, "version": None, "conflict": True,
                                     "current_version": 2}
        assert rescued.ok is True and rescued.version == 3
        assert settled.version == 3
        assert [e.text if isinstance(e, UserEvent) else e.type for e in settled.events] == [
            "from the first request", "from the second request"]

    def test_a_commit_to_a_deleted_session_conflicts(self, store: Store) -> None:
        app = _app(store)
        session = app.sessions.create("gone")
        assert app.sessions.delete("gone") is True
        assert app.sessions.delete("gone") is False
        session.input.message("late")
        result = app.sessions.commit(session)
        assert result.ok is False and result.conflict is True and result.current_version == 0
        assert app.sessions.get("gone") is None

    def test_a_new_session_commits_at_version_zero_only_once(self, store: Store) -> None:
        app = _app(store)
        first, second = Session.new("session_race0"), Session.new("session_race0")
        first.input.message("a")
        second.input.message("b")
        assert app.sessions.commit(first).ok
        refused = app.sessions.commit(second)
        assert refused.conflict and refused.current_version == 1

    def test_history_window_loads_only_the_last_turns(self, store: Store) -> None:
        app = _app(store)
        session = app.sessions.create("window")
        for n in range(5):
            session.input.message(f"turn {n}")
            assert app.sessions.commit(session).ok
        windowed = store.load("session_window", turns=2)
        assert windowed is not None
        assert [e.text for e in windowed.events if isinstance(e, UserEvent)] == [
            "turn 3", "turn 4"]
        assert windowed.first_seq == 3
        assert windowed.head.seq == 5
        assert store.load("session_window", turns=0).events == []  # type: ignore[union-attr]
        whole = app.sessions.get("window")
        assert whole is not None and len(whole.events) == 5

    def test_state_and_head_round_trip(self, store: Store) -> None:
        app = _app(store)
        session = app.sessions.create("state", state={"nested": {"a": [1, 2]}, "s": "é ✓"})
        session.input.message("hello", id="m-1")
        assert app.sessions.commit(session).ok
        loaded = app.sessions.get("state")
        assert loaded is not None
        assert loaded.state == {"nested": {"a": [1, 2]}, "s": "é ✓"}
        assert loaded.head.has_message("m-1") and len(loaded.head.message_ids) == 1
        assert loaded.events[0].model_dump() == session.events[0].model_dump()

    def test_list_returns_newest_first_and_filters_by_principal(self, store: Store) -> None:
        app = _app(store)
        app.sessions.create("alpha", principal="alice")
        app.sessions.create("beta", principal="bob")
        gamma = app.sessions.create("gamma", principal="alice")
        time.sleep(0.002)  # updated_at has millisecond resolution: make "newest" unambiguous
        gamma.input.message("bump")
        assert app.sessions.commit(gamma).ok
        mine = [s.session_id for s in app.sessions.list(principal="alice")]
        assert mine[0] == "session_gamma" and set(mine) == {"session_alpha", "session_gamma"}
        assert {s.session_id for s in app.sessions.list()} >= {
            "session_alpha", "session_beta", "session_gamma"}

    def test_list_says_each_sessions_status_as_its_head_does(self, store: Store) -> None:
        app = _app(store)
        app.sessions.create("idle")
        paused = app.sessions.create("paused")
        paused.add_event(PauseEvent())
        waiting = app.sessions.create("waiting")
        waiting.request_input("size", {"type": "string"}, "Which size?")
        assert app.sessions.commit(paused).ok and app.sessions.commit(waiting).ok
        listed = {s.session_id: s.status for s in app.sessions.list()}
        assert listed == {"session_idle": "active", "session_paused": "paused",
                          "session_waiting": "awaiting_input"}
        for sid, status in listed.items():
            loaded = app.sessions.load(sid, turns=0)
            assert loaded is not None and loaded.status == status

    def test_list_shows_a_first_turn_that_announced_itself(self, store: Store) -> None:
        """A session whose first turn runs has no ledger yet, only its control record: the
        list shows it (version 0, ``active``), for its principal, until the turn takes its
        announcement back or its first commit lists it as any session."""
        app = _app(store)
        running = ControlRunning(invocation_id="inv_first", since=1_700_000_000_000,
                                 principal="alice")
        assert store.write_control("session_new", Control(rev=1, running=running),
                                   head_version=0)
        [line] = [s for s in app.sessions.list() if s.session_id == "session_new"]
        assert (line.version, line.status, line.principal) == (0, "active", "alice")
        assert [s.session_id for s in app.sessions.list(principal="alice")] == ["session_new"]
        assert app.sessions.list(principal="bob") == []

        assert store.write_control("session_new", Control(rev=2), head_version=0)  # taken back
        assert app.sessions.list() == []
        assert store.write_control("session_new", Control(rev=3, running=running),
                                   head_version=0)
        session = Session.new("session_new", principal="alice")
        session.input.message("hello")
        assert app.sessions.commit(session).ok
        [line] = app.sessions.list()
        assert (line.session_id, line.version) == ("session_new", 1)

    def test_concurrent_commits_on_one_version_have_exactly_one_winner(
            self, store: Store) -> None:
        app = _app(store)
        app.sessions.create("contended")
        replicas = [app.sessions.get("contended") for _ in range(8)]
        barrier = threading.Barrier(len(replicas))
        outcomes: list[bool] = []

        def commit(session: Session) -> None:
            session.input.message(f"from {id(session)}")
            barrier.wait()
            outcomes.append(app.sessions.commit(session).ok)

        threads = [threading.Thread(target=commit, args=(r,)) for r in replicas if r is not None]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert outcomes.count(True) == 1
        final = app.sessions.get("contended")
        assert final is not None and final.version == 2 and len(final.events) == 1

    # --- ids that land once, and the truth after an ambiguous write ----------------------------

    def test_a_message_id_is_a_key_for_the_life_of_the_session(self, store: Store) -> None:
        app = _app(store)
        session = app.sessions.create("once")
        session.input.message("first", id="m-1")
        assert app.sessions.commit(session).ok
        for n in range(40):  # far past any window a head could keep
            session.input.message(f"filler {n}")
            assert app.sessions.commit(session).ok
        assert store.has_once("session_once", "m:m-1") is True
        assert store.has_once("session_once", "m:m-2") is False
        stale = Session.from_stored(store.load("session_once", turns=0))  # type: ignore[arg-type]
        stale.head.message_ids.clear()  # a head that forgot: only the store's key remembers
        stale.input.message("first again", id="m-1")
        refused = store.append(stale.head, stale.new_events, expected_version=stale.version)
        assert refused.ok is False and refused.duplicate == "m:m-1"
        after = app.sessions.get("once")
        assert after is not None and after.version == 42 and len(after.events) == 41

    def test_a_duplicate_id_refuses_the_whole_slice(self, store: Store) -> None:
        app = _app(store)
        session = app.sessions.create("dup")
        session.input.message("first", id="m-1")
        assert app.sessions.commit(session).ok
        racer = Session.from_stored(store.load("session_dup", turns=0))  # type: ignore[arg-type]
        racer.head.message_ids.clear()
        racer.input.message("new", id="m-2")
        racer.input.message("first", id="m-1")
        refused = store.append(racer.head, racer.new_events, expected_version=racer.version)
        assert refused.ok is False and refused.duplicate == "m:m-1"
        assert store.has_once("session_dup", "m:m-2") is False  # nothing of it was written
        assert [e.text for e in app.sessions.get("dup").events] == ["first"]  # type: ignore

    def test_a_commit_at_a_stale_version_with_a_taken_id_reports_both(self, store: Store) -> None:
        app = _app(store)
        app.sessions.create("both")
        one, two = app.sessions.get("both"), app.sessions.get("both")
        assert one is not None and two is not None
        one.input.message("x", id="same")
        two.input.message("x", id="same")
        assert app.sessions.commit(one).ok
        refused = store.append(two.head, two.new_events, expected_version=two.version)
        assert refused.ok is False and refused.current_version == 2
        assert refused.conflict is True or refused.duplicate == "m:same"

    def test_landed_finds_the_first_event_of_a_commit(self, store: Store) -> None:
        app = _app(store)
        session = app.sessions.create("landed")
        session.input.message("one")
        session.input.message("two")
        first = session.new_events[0]
        assert app.sessions.commit(session).ok
        session.input.message("three")
        third = session.new_events[0]
        assert app.sessions.commit(session).ok
        assert store.landed("session_landed", 0, first.id) is True
        assert store.landed("session_landed", 2, third.id) is True
        assert store.landed("session_landed", 2, first.id) is False
        assert store.landed("session_landed", 3, third.id) is False
        assert store.landed("session_nobody", 0, first.id) is False
        assert store.has_once("session_nobody", "m:x") is False

    def test_a_commit_made_on_a_deleted_incarnation_is_refused(self, store: Store) -> None:
        """A session deleted and made again under its id is another session: a slice made
        on the first (the request read it before the delete) is refused at the second,
        even at the same version, and writes nothing."""
        app = _app(store)
        old = app.sessions.create("again")
        old.input.message("made on the first")
        assert store.delete("session_again")
        time.sleep(0.002)  # created_at has millisecond resolution
        new = app.sessions.create("again")
        assert new.version == 1 and new.head.created_at != old.head.created_at
        result = store.append(old.head, old.new_events, expected_version=1)
        assert not result.ok and result.conflict
        loaded = app.sessions.get("again")
        assert loaded is not None and loaded.version == 1 and loaded.events == []

    def test_a_session_made_again_within_a_millisecond_is_another_incarnation(
            self, store: Store) -> None:
        """Two requests that both found no session make it at once (a redelivery beside its
        message): one lands, the session is deleted, the other lands, making it again. The
        first one's next write is refused there: the two are different incarnations however
        close their making (no ``sleep`` here)."""
        app = _app(store)
        first = app.sessions.bind(Session.new("session_twice"))
        second = app.sessions.bind(Session.new("session_twice"))
        assert first.head.created_at != second.head.created_at
        first.input.message("from the first")
        assert app.sessions.commit(first).ok
        assert store.delete("session_twice")
        second.input.message("from the second")
        assert app.sessions.commit(second).ok
        first.input.message("the first's next write")
        result = store.append(first.head, first.new_events, expected_version=1)
        assert not result.ok and result.conflict
        loaded = app.sessions.get("twice")
        assert loaded is not None and [e.text for e in loaded.events] == [  # type: ignore[union-attr]
            "from the second"]

    def test_delete_forgets_the_ids(self, store: Store) -> None:
        app = _app(store)
        assert app.sessions.append("forget", "hello", id="m-1").ok
        assert store.has_once("session_forget", "m:m-1")
        assert app.sessions.delete("forget")
        assert store.has_once("session_forget", "m:m-1") is False
        assert app.sessions.append("forget", "hello again", id="m-1").ok
        again = app.sessions.get("forget")
        assert again is not None and [e.text for e in again.events] == ["hello again"]  # type: ignore[union-attr]

    # --- the control record --------------------------------------------------------------------

    def test_a_session_without_a_control_record_reads_none(self, store: Store) -> None:
        app = _app(store)
        app.sessions.create("quiet")
        assert store.read_control("session_quiet") is None
        assert store.read_control("session_nobody") is None
        stored = store.load("session_quiet")
        assert stored is not None and stored.control is None

    def test_a_control_write_at_the_current_head_lands_and_reads_back(
            self, store: Store) -> None:
        app = _app(store)
        app.sessions.create("steered")
        written = _control(1, stop=True, steers=1)
        assert store.write_control("session_steered", written, head_version=1) is True
        assert store.read_control("session_steered") == written
        after = _control(2, stop=True, pause=True, steers=2)
        assert store.write_control("session_steered", after, head_version=1) is True
        assert store.read_control("session_steered") == after

    def test_a_control_write_at_the_wrong_revision_is_refused(self, store: Store) -> None:
        app = _app(store)
        app.sessions.create("revs")
        assert store.write_control("session_revs", _control(2, pause=True),
                                   head_version=1) is False  # absent counts as revision 0
        assert store.read_control("session_revs") is None
        first = _control(1, stop=True)
        assert store.write_control("session_revs", first, head_version=1) is True
        for rev in (1, 3):  # a writer that read nothing, or skipped one
            assert store.write_control("session_revs", _control(rev, pause=True),
                                       head_version=1) is False
        assert store.read_control("session_revs") == first

    def test_a_control_write_after_the_head_moved_is_refused(self, store: Store) -> None:
        app = _app(store)
        session = app.sessions.create("moved")
        read_at = session.version
        first = _control(1, pause=True)
        assert store.write_control("session_moved", first, head_version=read_at) is True
        session.input.message("a commit lands after the writer read the head")
        assert app.sessions.commit(session).ok
        assert store.write_control("session_moved", _control(2, stop=True),
                                   head_version=read_at) is False
        assert store.read_control("session_moved") == first
        assert store.write_control("session_moved", _control(2, stop=True),
                                   head_version=read_at + 1) is True

    def test_head_version_zero_means_the_session_does_not_exist(self, store: Store) -> None:
        app = _app(store)
        early = _control(1, pause=True)
        assert store.write_control("session_unborn", early, head_version=0) is True
        assert store.read_control("session_unborn") == early
        assert store.load("session_unborn") is None  # a control record makes no session
        app.sessions.create("exists")
        assert store.write_control("session_exists", _control(1, stop=True),
                                   head_version=0) is False
        assert store.read_control("session_exists") is None

    def test_load_returns_the_control_record(self, store: Store) -> None:
        app = _app(store)
        session = app.sessions.create("loaded")
        for n in range(3):
            session.input.message(f"turn {n}")
            assert app.sessions.commit(session).ok
        written = _control(1, stop=True, pause=True, steers=1)
        assert store.write_control("session_loaded", written, head_version=4) is True
        for turns in (None, 0, 1, 2):
            stored = store.load("session_loaded", turns=turns)
            assert stored is not None and stored.control == written, turns
            assert stored.head.version == 4
        windowed = store.load("session_loaded", turns=2)
        assert windowed is not None
        assert [e.text for e in windowed.events if isinstance(e, UserEvent)] == [
            "turn 1", "turn 2"]

    def test_delete_removes_the_control_record(self, store: Store) -> None:
        app = _app(store)
        app.sessions.create("dropped")
        assert store.write_control("session_dropped", _control(1, stop=True),
                                   head_version=1) is True
        assert app.sessions.delete("dropped") is True
        assert store.read_control("session_dropped") is None
        app.sessions.create("dropped")  # the id again: a new session starts at revision 1
        assert store.load("session_dropped").control is None  # type: ignore[union-attr]
        assert store.write_control("session_dropped", _control(1, pause=True),
                                   head_version=1) is True

    def test_a_commit_leaves_the_control_record_unchanged(self, store: Store) -> None:
        app = _app(store)
        session = app.sessions.create("kept")
        written = _control(1, stop=True, steers=1)
        assert store.write_control("session_kept", written, head_version=1) is True
        session.input.message("a turn commits")
        assert app.sessions.commit(session).ok
        assert store.read_control("session_kept") == written
        stored = store.load("session_kept")
        assert stored is not None and stored.control == written and stored.head.version == 2

    def test_the_head_remembers_where_each_commit_began(self, store: Store) -> None:
        """``Head.commit_seqs``: the store appends the position the slice starts at to the
        head it is given (each commit here starts from the stored head, as a turn does)."""
        sizes = [1, 2, 1]
        starts: list[int] = []
        for n, size in enumerate(sizes):
            stored = store.load("session_commits", turns=1)
            session = Session.new("session_commits") if stored is None \
                else Session.from_stored(stored)
            for m in range(size):
                session.input.message(f"commit {n} message {m}")
            starts.append(session.head.seq - len(session.new_events))
            first = session.new_events[0]
            result = store.append(session.head, session.new_events,
                                  expected_version=session.version)
            assert result.ok and result.version == n + 1
            assert store.landed("session_commits", starts[-1], first.id)
        assert starts == [0, 1, 3]
        whole = store.load("session_commits")
        assert whole is not None and whole.head.version == 3
        assert whole.head.commit_seqs == starts
        assert [e.text for e in whole.events if isinstance(e, UserEvent)][1] == (
            "commit 1 message 0")  # position 1 is where the second commit began
        windowed = store.load("session_commits", turns=0)
        assert windowed is not None and windowed.head.commit_seqs == starts

    def test_control_reads_in_another_thread_run_beside_commits(self, store: Store) -> None:
        """A running turn polls ``read_control`` from a background thread while its main
        thread commits: neither may fail or see a torn record."""
        app = _app(store)
        session = app.sessions.create("polled")
        written = _control(1, stop=True, pause=True, steers=1)
        assert store.write_control("session_polled", written, head_version=1) is True
        done = threading.Event()
        seen: list[Control | None] = []
        errors: list[BaseException] = []

        def poll() -> None:
            try:
                while not done.is_set():
                    seen.append(store.read_control("session_polled"))
                    time.sleep(0.001)
            except BaseException as error:  # reported by the main thread
                errors.append(error)

        poller = threading.Thread(target=poll)
        poller.start()
        try:
            for n in range(10):
                session.input.message(f"turn {n}")
                assert app.sessions.commit(session).ok
        finally:
            done.set()
            poller.join()
        assert errors == []
        assert seen and all(control == written for control in seen)
        stored = store.load("session_polled")
        assert stored is not None and stored.head.version == 11 and stored.control == written

    # --- long sessions: compaction windows and forks -----------------------------------------

    def test_a_compacted_window_starts_at_the_latest_compactions_tail(self, store: Store) -> None:
        app = _app(store)
        session = app.sessions.create("compacted")
        for n in range(6):
            session.input.message(f"turn {n}")
            assert app.sessions.commit(session).ok
        tail = session.head.turn_starts[-2]  # turns 4 and 5 stay as they are
        session.add_event(CompactionEvent(summary="turns 0-3: greetings", tail_start=tail,
                                        turns=4))
        assert app.sessions.commit(session).ok
        session.input.message("turn 6")
        assert app.sessions.commit(session).ok

        compacted = store.load("session_compacted", compacted=True)
        assert compacted is not None and compacted.first_seq == tail
        assert [e.type for e in compacted.events] == ["user", "user", "compaction", "user"]
        narrow = store.load("session_compacted", turns=1, compacted=True)
        assert narrow is not None and [e.type for e in narrow.events] == ["user"]
        whole = store.load("session_compacted")
        assert whole is not None and len(whole.events) == 8  # nothing is deleted
        assert whole.head.compacted_to == tail and whole.head.compactions == 1

    def _numbered(self, app: dormant.App, name: str, turns: int) -> Session:
        session = app.sessions.create(name)
        for n in range(turns):
            session.input.message(f"{name} {n}")
            session.add_event(StateDelta(patch=[{"op": "add", "path": "/n", "value": n + 1}]))
            assert app.sessions.commit(session).ok
        return session

    def test_a_fork_at_version_n_sees_exactly_the_sources_first_n_versions(
            self, store: Store) -> None:
        app = _app(store)
        self._numbered(app, "source", 5)  # versions 2-6 hold messages 0-4
        fork = app.sessions.fork("source", at_version=4, new_session_id="fork")
        assert fork.session_id == "session_fork" and fork.version == 1
        assert fork.head.fork_of == {"session": "session_source", "version": 4, "seq": 6}
        loaded = app.sessions.get("fork")
        assert loaded is not None
        assert [e.text for e in loaded.events if isinstance(e, UserEvent)] == [
            "source 0", "source 1", "source 2"]
        assert loaded.state == {"n": 3}
        source = app.sessions.get("source")
        assert source is not None
        assert [e.id for e in loaded.events] == [e.id for e in source.events[:6]]
        latest = app.sessions.fork("source")
        assert latest.state == {"n": 5} and latest.head.seq == 10
        whole = app.sessions.get(latest.session_id)
        assert whole is not None and len(whole.events) == 10 and whole.state == {"n": 5}

    def test_writes_to_either_side_never_appear_in_the_other(self, store: Store) -> None:
        app = _app(store)
        source = self._numbered(app, "left", 3)
        fork = app.sessions.fork("left", new_session_id="right")
        fork.input.message("only on the right")
        assert app.sessions.commit(fork).ok
        source.input.message("only on the left")
        assert app.sessions.commit(source).ok

        def texts(sid: str, turns: int | None = None) -> list[str]:
            stored = store.load(sid, turns=turns)
            assert stored is not None
            return [e.text for e in stored.events if isinstance(e, UserEvent)]

        assert texts("session_left") == ["left 0", "left 1", "left 2", "only on the left"]
        assert texts("session_right") == ["left 0", "left 1", "left 2", "only on the right"]
        # a window reaching back past the fork point reads the inherited turns too
        assert texts("session_right", turns=2) == ["left 2", "only on the right"]
        assert texts("session_right", turns=1) == ["only on the right"]

    def test_a_fork_refuses_a_taken_id_a_missing_source_and_a_bad_version(
            self, store: Store) -> None:
        app = _app(store)
        self._numbered(app, "origin", 2)
        app.sessions.create("taken")
        with pytest.raises(dormant.InputError, match="already exists"):
            app.sessions.fork("origin", new_session_id="taken")
        with pytest.raises(dormant.SessionNotFound):
            app.sessions.fork("nowhere")
        for bad in (0, 4, -1):
            with pytest.raises(dormant.InputError, match="versions 1-3"):
                app.sessions.fork("origin", at_version=bad)
        with pytest.raises(dormant.SessionNotFound):  # another principal's session
            app.sessions.fork("origin", owner="mallory")

    def test_deleting_the_source_keeps_its_forks_and_frees_the_id(self, store: Store) -> None:
        app = _app(store)
        self._numbered(app, "doomed", 3)
        child = app.sessions.fork("doomed", new_session_id="child")
        child.input.message("child's own")
        assert app.sessions.commit(child).ok
        grandchild = app.sessions.fork("child", new_session_id="grandchild")
        assert app.sessions.delete("doomed")
        assert app.sessions.get("doomed") is None

        reborn = app.sessions.create("doomed")
        reborn.input.message("a new life")
        assert app.sessions.commit(reborn).ok
        for sid in ("child", "grandchild"):
            loaded = app.sessions.get(sid)
            assert loaded is not None
            assert [e.text for e in loaded.events if isinstance(e, UserEvent)] == [
                "doomed 0", "doomed 1", "doomed 2", "child's own"]
        assert app.sessions.delete("child")  # the middle of the chain
        loaded = app.sessions.get("grandchild")
        assert loaded is not None and len(loaded.events) == len(grandchild.events) == 7
        assert app.sessions.delete("grandchild")
        again = app.sessions.get("doomed")
        assert again is not None
        assert [e.text for e in again.events if isinstance(e, UserEvent)] == ["a new life"]
