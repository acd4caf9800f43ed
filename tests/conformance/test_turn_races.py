"""Seed 002, step 7: two turns on one session, with real threads, on every store."""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from collections.abc import Callable

import dormant
from dormant.events import UserEvent
from dormant.handlers import TurnResult, TurnStream
from dormant.stores import Store

WAIT = 10  # seconds a barrier/event may take before the test fails instead of hanging


def _said(app: dormant.App, session_id: str) -> list[str]:
    session = app.sessions.get(session_id)
    assert session is not None
    return [e.text if isinstance(e, UserEvent) else e.type for e in session.events]


def _answering(text: str, gate: Callable[[], None] | None = None) -> dormant.Hook:
    def before_agent(ctx: dormant.HookContext) -> str:
        if gate is not None:
            gate()
        return text

    return dormant.Hook(before_agent=before_agent)


def _in_thread(stream: TurnStream) -> tuple[threading.Thread, list[TurnResult]]:
    out: list[TurnResult] = []
    thread = threading.Thread(target=lambda: out.append(stream.run()))
    thread.start()
    return thread, out


def _ticking_clock(start: int = 1_700_000_000_000) -> Callable[[], int]:
    ticks = itertools.count(start)
    lock = threading.Lock()

    def clock() -> int:
        with lock:
            return next(ticks)

    return clock


def test_a_slow_turn_overtaken_by_a_newer_message_is_dropped_whole(store: Store) -> None:
    app = dormant.App(name="bookings", store=store, clock=_ticking_clock())
    concierge = app.agent(name="concierge")
    thinking, release = threading.Event(), threading.Event()

    def slow_gate() -> None:
        thinking.set()
        assert release.wait(WAIT)

    slow = app.handler.turn(agent=concierge, hooks=[_answering("the slow answer", slow_gate)])
    fast = app.handler.turn(agent=concierge, hooks=[_answering("the fast answer")])

    thread, slow_out = _in_thread(slow({"session_id": "race",
                                        "input": {"message": "first question"}}))
    assert thinking.wait(WAIT)
    fast_outcome = fast({"session_id": "race", "input": {"message": "second question"}}).run()
    release.set()
    thread.join(WAIT)
    (slow_outcome,) = slow_out

    assert [slow_outcome.status, slow_outcome.commit_status] == ["completed", "superseded"]
    assert [fast_outcome.status, fast_outcome.commit_status] == ["completed", "committed"]
    assert slow_outcome.warning is not None and "superseded" in slow_outcome.warning
    assert _said(app, "race") == [
        "invocation_start", "second question", "assistant", "invocation_end"]


def test_two_turns_at_once_both_survive_and_the_loser_merges(store: Store) -> None:
    app = dormant.App(name="bookings", store=store, clock=lambda: 1_700_000_000_000)
    concierge = app.agent(name="concierge")
    both_answered = threading.Barrier(2, timeout=WAIT)
    together = app.handler.turn(agent=concierge,
                                hooks=[_answering("either answer", both_answered.wait)])

    first_thread, first_out = _in_thread(together({"session_id": "tie",
                                                   "input": {"message": "A"}}))
    second_thread, second_out = _in_thread(together({"session_id": "tie",
                                                     "input": {"message": "B"}}))
    first_thread.join(WAIT)
    second_thread.join(WAIT)
    outcomes = first_out + second_out

    assert [o.status for o in outcomes] == ["completed", "completed"]
    assert sorted(o.commit_status or "" for o in outcomes) == ["committed", "merged"]
    winner = next(o for o in outcomes if o.commit_status == "committed")
    loser = next(o for o in outcomes if o.commit_status == "merged")
    assert loser.version == (winner.version or 0) + 1
    said = _said(app, "tie")
    assert sorted(said[1::4]) == ["A", "B"]
    assert said == ["invocation_start", said[1], "assistant", "invocation_end",
                    "invocation_start", said[5], "assistant", "invocation_end"]


def test_a_loser_whose_own_message_is_older_is_superseded(store: Store) -> None:
    # the first user event created is the older one (a first turn's heartbeat reads the
    # clock too, as it names itself in the control record)
    stamps = itertools.count(1_000, 1_000)
    lock = threading.Lock()

    def clock() -> int:
        with lock:
            return next(stamps)

    app = dormant.App(name="bookings", store=store, clock=clock)
    concierge = app.agent(name="concierge")
    older_stamped, newer_committed = threading.Event(), threading.Event()

    def older_gate() -> None:
        older_stamped.set()
        assert newer_committed.wait(WAIT)

    older = app.handler.turn(agent=concierge, hooks=[_answering("old", older_gate)])
    newer = app.handler.turn(agent=concierge, hooks=[_answering("new")])
    thread, older_out = _in_thread(older({"session_id": "order", "input": {"message": "A"}}))
    assert older_stamped.wait(WAIT)
    newer_outcome = newer({"session_id": "order", "input": {"message": "B"}}).run()
    newer_committed.set()
    thread.join(WAIT)

    assert newer_outcome.commit_status == "committed"
    assert older_out[0].commit_status == "superseded"
    assert "A" not in _said(app, "order")


def test_twenty_concurrent_turns_never_lose_or_duplicate_a_message(store: Store) -> None:
    app = dormant.App(name="stress", store=store)
    agent = app.agent(name="echo")
    app.sessions.create("stress")
    turns = 20
    all_stamped = threading.Barrier(turns, timeout=WAIT)
    handler = app.handler.turn(agent=agent, hooks=[_answering("ack", all_stamped.wait)])
    streams = [handler({"session_id": "stress", "input": {"message": f"message {n}"}})
               for n in range(turns)]
    threads = [_in_thread(stream) for stream in streams]
    for thread, _ in threads:
        thread.join(WAIT * 2)
    outcomes = {f"message {n}": out[0] for n, (_, out) in enumerate(threads)}

    on_row = Counter(t for t in _said(app, "stress") if t.startswith("message "))
    for message, outcome in outcomes.items():
        assert outcome.status == "completed", outcome.error
        if outcome.commit_status in ("committed", "merged"):
            assert on_row[message] == 1, f"{message} landed {on_row[message]} times"
        else:
            assert outcome.commit_status == "superseded", outcome
            assert on_row[message] == 0, f"{message} was superseded yet stored"
    assert sum(on_row.values()) == sum(
        1 for o in outcomes.values() if o.commit_status in ("committed", "merged"))
    assert any(o.commit_status == "committed" for o in outcomes.values())
    final = app.sessions.get("stress")
    assert final is not None
    assert final.version == 1 + sum(on_row.values())
