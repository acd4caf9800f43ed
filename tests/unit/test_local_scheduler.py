"""The local scheduler (SPEC §7, §10): a thread that fires committed timers in this process."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant._ids import now_ms
from dormant.models import ScriptedModel
from dormant.schedulers import LocalScheduler, Scheduler, TimerDelivery, is_lease_timer
from dormant.stores import SqliteStore

WAIT = 10.0  # seconds an Event may take before the test fails (never reached when it works)


class FakeClock:
    """Epoch milliseconds that move only when told."""

    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class Recorder:
    """A ``deliver`` callback that records each delivery and signals after ``expect`` of them."""

    def __init__(self, expect: int = 1, reply: Callable[[TimerDelivery], Any] | None = None,
                 ) -> None:
        self.delivered: list[TimerDelivery] = []
        self.expect = expect
        self.done = threading.Event()
        self._reply = reply
        self._lock = threading.Lock()

    def __call__(self, delivery: TimerDelivery) -> Any:
        with self._lock:
            self.delivered.append(delivery)
            if len(self.delivered) >= self.expect:
                self.done.set()
        return self._reply(delivery) if self._reply else None

    def expect_total(self, count: int) -> threading.Event:
        """An Event set once ``count`` deliveries in all have been made."""
        with self._lock:
            self.expect, self.done = count, threading.Event()
            if len(self.delivered) >= count:
                self.done.set()
            return self.done

    def names(self) -> list[str]:
        with self._lock:
            return [d.name for d in self.delivered]


def _timer(name: str, fire_at: int, session_id: str = "session_s", **extra: Any) -> TimerDelivery:
    return TimerDelivery(session_id=session_id, name=name, fire_at=fire_at,
                         message=extra.pop("message", f"{name} is due"), **extra)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make(clock: FakeClock) -> Iterator[Callable[..., LocalScheduler]]:
    made: list[LocalScheduler] = []

    def build(deliver: Callable[[TimerDelivery], Any], **options: Any) -> LocalScheduler:
        scheduler = LocalScheduler(deliver, clock=options.pop("clock", clock), **options)
        made.append(scheduler)
        return scheduler

    yield build
    for scheduler in made:
        scheduler.close()


def test_it_is_a_scheduler_exposed_from_dormant_schedulers() -> None:
    import dormant.scheduling as deprecated
    from dormant.schedulers.local import LocalScheduler as Direct

    assert LocalScheduler is Direct
    assert deprecated.LocalScheduler is Direct
    assert deprecated.Scheduler is Scheduler and deprecated.TimerDelivery is TimerDelivery
    with LocalScheduler(lambda d: None) as scheduler:
        assert isinstance(scheduler, Scheduler)


def test_timers_fire_in_order_of_their_time_once_due(
        clock: FakeClock, make: Callable[..., LocalScheduler]) -> None:
    recorder = Recorder(expect=3)
    scheduler = make(recorder)
    for name, at in [("third", 3_000), ("first", 1_000), ("second", 2_000)]:
        scheduler.set(_timer(name, clock.now + at))

    clock.now += 2_500
    scheduler.nudge()
    # Two are due: the sentinel set now lands after them, and proves the third did not fire.
    scheduler.set(_timer("sentinel", clock.now))
    assert recorder.done.wait(WAIT)
    assert recorder.names() == ["first", "second", "sentinel"]
    assert [t.name for t in scheduler.pending()] == ["third"]

    done = recorder.expect_total(4)
    clock.now += 1_000
    scheduler.nudge()
    assert done.wait(WAIT)
    assert recorder.names() == ["first", "second", "sentinel", "third"]
    assert scheduler.pending() == []


def test_a_timer_past_due_fires_at_once_on_the_real_clock(
        make: Callable[..., LocalScheduler]) -> None:
    recorder = Recorder()
    scheduler = make(recorder, clock=now_ms)
    scheduler.set(_timer("overdue", 1))
    assert recorder.done.wait(WAIT)
    assert recorder.names() == ["overdue"]


def test_setting_a_name_again_converges_on_one_timer(
        clock: FakeClock, make: Callable[..., LocalScheduler]) -> None:
    recorder = Recorder(expect=2)
    scheduler = make(recorder)
    scheduler.set(_timer("nudge", clock.now + 1_000, message="first"))
    scheduler.set(_timer("nudge", clock.now + 5_000, message="second"))
    scheduler.set(_timer("nudge", clock.now + 5_000, message="second"))  # a retried turn
    scheduler.set(_timer("nudge", clock.now + 5_000, session_id="session_other"))
    assert [(t.session_id, t.message) for t in scheduler.pending()] == [
        ("session_s", "second"), ("session_other", "nudge is due")]

    clock.now += 10_000
    scheduler.nudge()
    assert recorder.done.wait(WAIT)
    scheduler.close()
    assert sorted((d.session_id, d.message) for d in recorder.delivered) == [
        ("session_other", "nudge is due"), ("session_s", "second")]


def test_cancel_disarms_and_is_idempotent(
        clock: FakeClock, make: Callable[..., LocalScheduler]) -> None:
    recorder = Recorder()
    scheduler = make(recorder)
    scheduler.set(_timer("gone", clock.now + 1_000))
    scheduler.cancel("session_s", "gone")
    scheduler.cancel("session_s", "gone")
    scheduler.cancel("session_s", "never-set")

    clock.now += 2_000
    scheduler.set(_timer("sentinel", clock.now))  # due now: it lands after anything earlier
    assert recorder.done.wait(WAIT)
    assert recorder.names() == ["sentinel"]


def test_a_failing_delivery_is_retried_with_backoff_then_lands(
        clock: FakeClock, make: Callable[..., LocalScheduler]) -> None:
    failures = iter([RuntimeError("store busy"), RuntimeError("still busy")])

    def flaky(delivery: TimerDelivery) -> None:
        error = next(failures, None) if delivery.name == "flaky" else None
        if error is not None:
            raise error

    recorder = Recorder(reply=flaky)
    scheduler = make(recorder, backoff=1.0)
    scheduler.set(_timer("flaky", clock.now))

    def advance(ms: int, expect: list[str]) -> None:
        """Move the clock; a sentinel due then lands after anything due before it."""
        done = recorder.expect_total(len(recorder.delivered) + len(expect))
        clock.now += ms
        scheduler.set(_timer(f"sentinel-{clock.now}", clock.now))
        assert done.wait(WAIT)
        assert recorder.names()[-len(expect):] == [
            f"sentinel-{clock.now}" if n == "sentinel" else n for n in expect]

    advance(0, ["flaky", "sentinel"])     # attempt 1 fails: retry in 1 s
    advance(999, ["sentinel"])            # not yet
    advance(1, ["flaky", "sentinel"])     # attempt 2 fails: retry in 2 s
    advance(1_999, ["sentinel"])
    advance(1, ["flaky", "sentinel"])     # attempt 3 lands
    advance(60_000, ["sentinel"])         # and nothing more
    assert recorder.names().count("flaky") == 3
    assert scheduler.pending() == []


def test_a_delivery_that_keeps_failing_is_dropped_after_bounded_attempts(
        clock: FakeClock, make: Callable[..., LocalScheduler],
        caplog: pytest.LogCaptureFixture) -> None:
    def broken(delivery: TimerDelivery) -> None:
        raise RuntimeError("model down")

    recorder = Recorder(expect=3, reply=lambda d: broken(d) if d.name == "doomed" else None)
    scheduler = make(recorder, attempts=3, backoff=0)
    scheduler.set(_timer("doomed", clock.now))
    assert recorder.done.wait(WAIT)
    done = recorder.expect_total(4)
    scheduler.set(_timer("sentinel", clock.now))  # a 4th attempt would be due before it
    assert done.wait(WAIT)

    assert recorder.names() == ["doomed"] * 3 + ["sentinel"]
    assert scheduler.pending() == []
    assert "could not be delivered after 3 attempts" in caplog.text


def _result(status: str, code: str | None = None, commit: str | None = "committed") -> Any:
    return dormant.TurnResult(session_id="session_s", status=status,
                              code=code, commit_status=commit)


def test_a_stale_timer_is_done_but_an_unlanded_turn_is_retried(
        clock: FakeClock, make: Callable[..., LocalScheduler]) -> None:
    replies = {"stale": [_result("error", "stale_timer", None)],
               "refused": [_result("error", "awaiting_input", None), _result("completed")],
               "overtaken": [_result("completed", commit="superseded"), _result("completed")]}
    recorder = Recorder(expect=5, reply=lambda d: replies[d.name].pop(0))
    scheduler = make(recorder, backoff=0)
    for name in replies:
        scheduler.set(_timer(name, clock.now))
    assert recorder.done.wait(WAIT)
    done = recorder.expect_total(6)
    replies["sentinel"] = [_result("completed")]
    scheduler.set(_timer("sentinel", clock.now))  # lands after any retry (backoff 0)
    assert done.wait(WAIT)

    assert sorted(recorder.names()[:5]) == ["overtaken", "overtaken", "refused", "refused",
                                            "stale"]
    assert replies == {"stale": [], "refused": [], "overtaken": [], "sentinel": []}


def test_close_stops_the_thread_promptly_and_refuses_new_timers(
        make: Callable[..., LocalScheduler], clock: FakeClock) -> None:
    recorder = Recorder()
    scheduler = make(recorder)
    scheduler.set(_timer("far", clock.now + 86_400_000))  # the thread waits a day for it
    thread = scheduler._thread

    scheduler.close(timeout=WAIT)

    assert not thread.is_alive()
    assert scheduler.closed
    assert recorder.delivered == []
    with pytest.raises(RuntimeError, match="closed"):
        scheduler.set(_timer("late", clock.now))


class Reminder(BaseModel):
    delay_ms: int
    reminder: str


def _set_reminder(ctx: dormant.ToolContext) -> dict[str, Any]:
    dormant.handler_context().session.schedule(
        f"reminder:{ctx.call_id}", delay=f"{ctx.args.delay_ms}ms",
        message=f"Reminder: {ctx.args.reminder}")
    return {"scheduled": True}


def _serve(db: Path, replies: list[Any], *, clock: Callable[[], int] = now_ms,
           ) -> tuple[dormant.App, dormant.Agent, LocalScheduler, SqliteStore]:
    """What ``dormant dev`` wires: a SQLite store, the local scheduler delivering to the wake
    handler, and pending timers re-armed from the store at start-up."""
    store = SqliteStore(db)
    app = dormant.App(name="restart", store=store)
    tool = app.tool(name="set_reminder", description="Set a reminder", schema=Reminder,
                    execute=_set_reminder)
    agent = app.agent(name="a", model=ScriptedModel(replies), tools=[tool])
    app.scheduler = scheduler = LocalScheduler(app.handler.wake(agent=agent), clock=clock)
    scheduler.recover(store)
    return app, agent, scheduler, store


def _timers(scheduler: LocalScheduler) -> list[TimerDelivery]:
    """The armed timers turns asked for (not the wake-up a tool step's claim arms)."""
    return [t for t in scheduler.pending() if not is_lease_timer(t.name)]


def test_a_committed_timer_is_delivered_through_the_wake_handler(tmp_path: Path) -> None:
    app, agent, scheduler, store = _serve(tmp_path / "live.db", [
        {"tool_calls": [{"name": "set_reminder", "args": {"delay_ms": 20,
                                                          "reminder": "stretch"}}]},
        "I'll remind you.", "Time to stretch!"])
    try:
        reply = app.handler.rest(agent=agent)({"session_id": "live",
                                               "input": {"message": "remind me"}})
        assert reply.status == "completed"
        _wait_until(lambda: _user_texts(app, "live")[-1:] == ["Reminder: stretch"])
        _wait_until(lambda: _timers(scheduler) == [])
        session = app.sessions.get("live")
        assert session is not None and session.timers == []
        assert [e.text for e in session.events if e.type == "assistant"][-1] == "Time to stretch!"
    finally:
        scheduler.close()
        store.close()


def test_a_pending_timer_survives_a_restart_and_lands_once(tmp_path: Path) -> None:
    db = tmp_path / "restart.db"
    frozen = FakeClock(0)  # the first process dies before its timer is due
    app, agent, scheduler, store = _serve(db, [
        {"tool_calls": [{"name": "set_reminder", "args": {"delay_ms": 20,
                                                          "reminder": "stretch"}}]},
        "I'll remind you."], clock=frozen)
    app.handler.rest(agent=agent)({"session_id": "r", "input": {"message": "remind me"}})
    assert [t.message for t in _timers(scheduler)] == ["Reminder: stretch"]
    scheduler.close()
    store.close()

    app, agent, scheduler, store = _serve(db, ["Time to stretch!"])  # recover() re-arms it
    try:
        _wait_until(lambda: _timers(scheduler) == [] and _user_texts(app, "r")[-1:] == [
            "Reminder: stretch"])
        scheduler.recover(store)  # nothing left to re-arm: it landed
        assert _timers(scheduler) == []
        session = app.sessions.get("r")
        assert session is not None
        assert _user_texts(app, "r") == ["remind me", "Reminder: stretch"]
        assert [e.type for e in session.events].count("timer_fired") == 1
        assert session.timers == []
    finally:
        scheduler.close()
        store.close()


def test_a_delivery_that_lost_the_race_to_its_twin_is_done_not_retried(
        tmp_path: Path, clock: FakeClock, make: Callable[..., LocalScheduler],
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The firing is delivered twice at once (another process, a recover() racing the
    thread): the twin lands it while this delivery runs on the head it read. This one wrote
    nothing; it is done, not a failed attempt to retry and warn about."""
    store = SqliteStore(tmp_path / "twins.db")
    app = dormant.App(name="twins", store=store)
    wake = app.handler.wake(agent=app.agent(name="a", hooks=[
        dormant.Hook(before_agent=lambda ctx: "on it")]))
    session = app.sessions.create("twins")
    session.schedule("nudge", delay="1s", message="stretch")
    assert app.sessions.commit(session).ok
    (timer,) = session.timers
    load, twin = store.load, []

    def read_then_lose(session_id: str, **options: Any) -> Any:
        read = load(session_id, **options)
        monkeypatch.setattr(store, "load", load)
        twin.append(wake(timer))  # the other delivery lands first
        return read

    monkeypatch.setattr(store, "load", read_then_lose)
    sentinel = _timer("sentinel", timer.fire_at, session_id="session_other")
    recorder = Recorder(expect=2, reply=lambda d: None if d == sentinel else wake(d))
    scheduler = make(recorder, backoff=60)  # a retry would still be pending at the end
    try:
        clock.now = timer.fire_at
        scheduler.set(timer)
        scheduler.set(sentinel)  # taken once the firing's delivery (and any retry) is done
        assert recorder.done.wait(WAIT)

        assert recorder.names() == ["nudge", "sentinel"]
        assert scheduler.pending() == []
        assert [result.commit_status for result in twin] == ["committed"]
        assert _user_texts(app, "twins") == ["stretch"]
        assert not [r for r in caplog.records if r.name == "dormant.scheduler"
                    and r.levelname in ("WARNING", "ERROR")]
    finally:
        scheduler.close()
        store.close()


def _user_texts(app: dormant.App, session_id: str) -> list[str]:
    session = app.sessions.get(session_id)
    return [e.text for e in session.events if e.type == "user"] if session else []


def _wait_until(condition: Callable[[], bool], timeout: float = WAIT) -> None:
    """Wait for the scheduler thread to reach a state (it signals nothing we could wait on)."""
    done = threading.Event()
    deadline = threading.Timer(timeout, done.set)
    deadline.start()
    try:
        while not condition():
            if done.wait(0.005):
                raise AssertionError("condition not reached in time")
    finally:
        deadline.cancel()
