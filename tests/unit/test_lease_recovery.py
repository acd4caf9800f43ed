"""A claim's lease wake-up after a restart: ``LocalScheduler.recover`` arms one for each
session whose head shows a claimed invocation running, since the process that armed it may
have died with it (``dormant dev`` killed with SIGKILL). See tests/reliability/test_dev_kill.py
for the real process."""

from __future__ import annotations

import threading
import time
from typing import Any

from pydantic import BaseModel

import dormant
from dormant._ids import now_ms
from dormant.events import InvocationEnd, InvocationResume, UserEvent
from dormant.models import ScriptedModel
from dormant.schedulers import LEASE_GRACE_MS, LEASE_TIMER, LocalScheduler, TimerDelivery
from dormant.stores import MemoryStore

WAIT = 10.0


class Question(BaseModel):
    q: str


class Answer(BaseModel):
    answer: str


def _app(store: MemoryStore, replies: list[Any], ran: list[str]
         ) -> tuple[dormant.App, dormant.Agent]:
    app = dormant.App(name="lease", store=store)
    ask = app.tool(name="ask_guest", description="ask", schema=Question, yield_schema=Answer,
                   execute=lambda ctx: ran.append(ctx.call_id) or {"booked": ctx.input.answer})
    return app, app.agent(name="c", model=ScriptedModel(replies), tools=[ask])


def _claimed(app: dormant.App, agent: dormant.Agent, name: str, *, lease: int,
             queued: tuple[str, ...] = ()) -> str:
    """Park ``name`` on a yielded call (``queued`` message ids wait behind it), then land the
    answer's claim (lease ``lease``) as a request does just before it runs the tool, and
    write nothing after: what a kill leaves."""
    rest = app.handler.rest(agent=agent)
    assert rest({"session_id": name, "input": {"message": "book"}}).status == "yielded_tool"
    for message_id in queued:
        assert rest({"session_id": name, "input": {"message": f"and {message_id}?",
                                                   "message_id": message_id}}).status == "queued"
    session = app.sessions.load(f"session_{name}", turns=None)
    assert session is not None and session.open_invocation is not None
    invocation = session.open_invocation
    session.input.tool(call_id="call_q", input={"answer": "Friday"})
    session.add_event(InvocationResume(invocation_id=invocation))
    session.head.lease = lease
    assert app.sessions.policy.claim(session).status == "committed"
    return invocation


def _wait_until(check: Any) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_recover_arms_a_wake_up_after_each_running_sessions_lease() -> None:
    now = 5_000_000_000_000
    store = MemoryStore()
    app, agent = _app(store, [
        {"tool_calls": [{"name": "ask_guest", "args": {"q": "?"}, "id": "call_q"}]}] * 3, [])
    _claimed(app, agent, "live", lease=now + 60_000)  # its claimer may still be at work
    _claimed(app, agent, "dead", lease=now - 60_000)  # long run out: due at once
    rest = app.handler.rest(agent=agent)
    assert rest({"session_id": "parked", "input": {"message": "book"}}).status == \
        "yielded_tool"  # waiting on a person, nothing running: no wake-up

    delivered: list[TimerDelivery] = []
    with LocalScheduler(delivered.append, clock=lambda: now) as scheduler:
        armed = scheduler.recover(store)
        _wait_until(lambda: delivered)  # the past-due one fired at once

        assert armed == 2
        assert delivered == [TimerDelivery(session_id="session_dead", name=LEASE_TIMER,
                                           fire_at=now)]
        assert scheduler.pending() == [TimerDelivery(
            session_id="session_live", name=LEASE_TIMER, fire_at=now + 60_000 + LEASE_GRACE_MS)]


def test_a_restarted_scheduler_takes_a_stranded_invocation_over_with_no_request() -> None:
    store, ran = MemoryStore(), []
    app, agent = _app(store, [
        {"tool_calls": [{"name": "ask_guest", "args": {"q": "?"}, "id": "call_q"}]},
        "Booked for Friday.", "Breakfast is at eight."], ran)
    invocation = _claimed(app, agent, "dead", lease=now_ms() - LEASE_GRACE_MS - 1,
                          queued=("m-2",))  # its wake-up is past due: it fires at once

    # the restart: a new scheduler delivering to the wake handler, its timers recovered
    scheduler = LocalScheduler(app.handler.wake(agent=agent))
    app.scheduler = scheduler
    try:
        assert scheduler.recover(store) == 1

        def settled() -> bool:
            now = app.sessions.get("dead")
            return now is not None and not now.head.running and now.inbox == []

        _wait_until(settled)
    finally:
        scheduler.close()
    assert ran == ["call_q"]  # the claimed tool ran, under its call id
    ledger = app.sessions.get("dead")
    assert ledger is not None
    ends = [(e.invocation_id, e.status) for e in ledger.events if isinstance(e, InvocationEnd)]
    assert ends[0] == (invocation, "completed") and len(ends) == 2
    assert [e.message_id for e in ledger.events if isinstance(e, UserEvent)][1:] == ["m-2"]


def test_a_lease_wake_up_with_nothing_to_take_over_is_done_not_retried() -> None:
    store = MemoryStore()
    app, agent = _app(store, ["Hello."], [])
    assert app.handler.rest(agent=agent)(
        {"session_id": "idle", "input": {"message": "hi"}}).status == "completed"
    before = store.load("session_idle", turns=0)
    assert before is not None
    wake = app.handler.wake(agent=agent)
    results: list[Any] = []
    delivered = threading.Event()

    def deliver(delivery: TimerDelivery) -> Any:
        results.append(wake(delivery))
        delivered.set()
        return results[-1]

    with LocalScheduler(deliver, attempts=3, backoff=0) as scheduler:
        scheduler.set(TimerDelivery(session_id="session_idle", name=LEASE_TIMER,
                                    fire_at=now_ms()))
        assert delivered.wait(WAIT)
        time.sleep(0.2)  # a retry (no backoff) would have come by now
        assert scheduler.pending() == []

    [result] = results
    assert (result.status, result.commit_status, result.code) == ("recorded", None, None)
    after = store.load("session_idle", turns=0)
    assert after is not None and after.head.version == before.head.version  # nothing written
