"""``run_test(...)`` and the handlers produce the same ledger for every walkthrough.

Each walkthrough runs twice, on a fresh :class:`MemoryStore` each: in process
(``through="run"``) and through the REST handler (``through="handlers"``). The two ledgers
must agree event by event on everything that does not vary from run to run: every field of
every event except its ``id``, ``ts`` and ``seq``, and the times in a turn's ``timing`` (its
phases, calls and tools must agree, not how long they took); ids minted at random
(``apr_…``, ``evt_…``, ``msg_…``: ``new_id``) are compared by where they first appear.
Derived ids — invocation ids (from the session and the message id), call ids (from the
invocation and the call's place) — are compared as they are: every walkthrough names its
session and its messages, so a path that minted an invocation id where the other derived it
would show here. The steps' outcomes (status and code) and the tools that ran (by call id)
must agree too.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant._request import derive_invocation
from dormant.stores import MemoryStore
from dormant.testing import (
    TestRun,
    approval,
    conflict,
    crash,
    interrupt,
    message,
    model,
    model_error,
    pause,
    redeliver,
    resume,
    retry,
    run_test,
    steer,
    stop,
    timer,
    tool_input,
    user,
)


class Ref(BaseModel):
    ref: str


class Night(BaseModel):
    answer: str


class Ticket(BaseModel):
    ticket_id: str


class Nudge(BaseModel):
    name: str


#: A fixed time, so the timer (and the message id derived from it) is the same in both runs.
NUDGE_AT = datetime(2100, 1, 1, tzinfo=UTC)


def concierge(ran: list[str]) -> dormant.Agent:
    """One agent with every kind of tool the walkthroughs use; ``ran`` gets each run's call
    id (the side effect's idempotency key)."""
    app = dormant.App(name="parity")

    def lookup(ctx: dormant.ToolContext) -> dict[str, Any]:
        ran.append(ctx.call_id)
        return {"ref": ctx.args.ref, "nights": 3}

    def book(ctx: dormant.ToolContext) -> str:
        ran.append(ctx.call_id)
        return f"booked {ctx.input.answer}"

    def close(ctx: dormant.ToolContext) -> dict[str, Any]:
        ran.append(ctx.call_id)
        return {"ticket_id": ctx.args.ticket_id, "closed": True}

    def remind(ctx: dormant.ToolContext) -> str:
        ran.append(ctx.call_id)
        ctx.session.schedule(ctx.args.name, at=NUDGE_AT, message="Time to check out")
        return "scheduled"

    return app.agent(name="concierge", tools=[
        app.tool(name="lookup_stay", description="d", schema=Ref, execute=lookup),
        app.tool(name="ask_guest", description="d", schema=Ref, yield_schema=Night,
                 execute=book),
        app.tool(name="close_ticket", description="d", schema=Ticket, execute=close),
        app.tool(name="remind", description="d", schema=Nudge, execute=remind),
    ], tool_approval={"close_ticket": "user-approval"})


LOOKUP = {"name": "lookup_stay", "args": {"ref": "BK-1"}}
ASK = {"name": "ask_guest", "args": {"ref": "night"}}
CLOSE = {"name": "close_ticket", "args": {"ticket_id": "T-7"}}
REMIND = {"name": "remind", "args": {"name": "nudge"}}


@dataclass(frozen=True)
class Walkthrough:
    name: str
    steps: Callable[[], list[Any]]


WALKTHROUGHS = [
    Walkthrough("plain reply", lambda: [user("hi", id="m-1"), model("hello")]),
    Walkthrough("a tool step", lambda: [
        user("how long is my stay?", id="m-1"), model(tool_calls=[LOOKUP]),
        model("Three nights.")]),
    Walkthrough("a yield answered", lambda: [
        user("book me in", id="m-1"), model(tool_calls=[ASK]),
        tool_input({"ask_guest": {"answer": "Friday"}}), model("Booked for Friday.")]),
    Walkthrough("an approval approved", lambda: [
        user("close T-7", id="m-1"), model(tool_calls=[CLOSE]),
        approval({"close_ticket": True}), model("Closed T-7.")]),
    Walkthrough("an approval denied", lambda: [
        user("close T-7", id="m-1"), model(tool_calls=[CLOSE]),
        approval({"close_ticket": {"approved": False, "reason": "not today"}}),
        model("I left T-7 open.")]),
    Walkthrough("a model error, then a retry", lambda: [
        user("how long?", id="m-1"), model(tool_calls=[LOOKUP]), model_error("provider down"),
        retry("r-1"), model("Three nights."), redeliver()]),
    Walkthrough("a model error before any tool ran", lambda: [
        user("hi", id="m-1"), model_error("provider down", retryable=False),
        redeliver(), model("hello")]),
    Walkthrough("a redelivered message", lambda: [
        user("hi", id="m-1"), model("hello"), redeliver()]),
    Walkthrough("a redelivered answer", lambda: [
        user("book me in", id="m-1"), model(tool_calls=[ASK]),
        tool_input({"ask_guest": {"answer": "Friday"}}), model("Booked for Friday."),
        redeliver()]),
    Walkthrough("a message while waiting, then the answer drains the inbox", lambda: [
        user("book me in", id="m-1"), model(tool_calls=[ASK]),
        message("late checkout too?", id="m-2"),
        tool_input({"ask_guest": {"answer": "Friday"}}),
        model("Booked for Friday."), model("Late checkout is fine.")]),
    Walkthrough("a message that must not wait", lambda: [
        user("book me in", id="m-1"), model(tool_calls=[ASK]),
        message("now or never", id="m-2", if_busy="reject")]),
    Walkthrough("an interrupt, then the inbox runs", lambda: [
        user("book me in", id="m-1"), model(tool_calls=[ASK]),
        message("never mind, just say hi", id="m-2"), interrupt(), model("Hi!")]),
    Walkthrough("an interrupt of a failed invocation", lambda: [
        user("how long?", id="m-1"), model(tool_calls=[LOOKUP]), model_error(), interrupt()]),
    Walkthrough("a pause between steps, then resume", lambda: [
        user("hi", id="m-1"), model("hello"), pause(),
        message("are you there?", id="m-2"), resume(), model("Still here.")]),
    Walkthrough("a pause while the reply streams, then resume", lambda: [
        user("how long is my stay?", id="m-1"), pause(after=0), model(tool_calls=[LOOKUP]),
        resume(), model("Three nights.")]),
    Walkthrough("a stop while the reply streams", lambda: [
        user("tell me a story", id="m-1"), stop(after=3, seen=2),
        model("Once upon a time there was a guest.")]),
    Walkthrough("a steer", lambda: [
        user("how long is my stay?", id="m-1"), steer("only the nights", after=1, id="s-1"),
        model("Let me check that."), model("Three nights.")]),
    Walkthrough("a conflict", lambda: [
        user("one", id="m-1"), model("first"), conflict(), user("two", id="m-2"),
        model("second")]),
    Walkthrough("a timer", lambda: [
        user("remind me", id="m-1"), model(tool_calls=[REMIND]), model("Will do."),
        timer("nudge"), model("Reminder: time to check out."), redeliver()]),
    Walkthrough("a crash after an approval claim, taken over by the next message", lambda: [
        user("close T-7", id="m-1"), model(tool_calls=[CLOSE]), crash(),
        approval({"close_ticket": True}), message("thanks", id="m-2"),
        model("Closed T-7."), model("You're welcome.")]),
    Walkthrough("a crash before any claim", lambda: [
        crash(), user("hi", id="m-1"), redeliver(), model("hello")]),
]

#: An id ``new_id`` minted (``prefix_<64 random bits>_<counter>``): different in every run.
MINTED = re.compile(r"^[a-z]+_[0-9a-f]{16}_[0-9a-f]+$")
#: Fields that hold when, or where in a stream, an event was made.
VARYING = frozenset({"id", "ts", "seq"})
#: A turn timing's fields that hold when, or how long (every ``…_ms`` too).
TIMES = frozenset({"started"})


def ledger(run: TestRun) -> list[dict[str, Any]]:
    """The run's ledger, without what varies run to run; minted ids by first appearance."""
    seen: dict[str, str] = {}

    def canon(value: Any) -> Any:
        if isinstance(value, str) and MINTED.match(value):
            return seen.setdefault(value, f"<{value.split('_', 1)[0]} #{len(seen) + 1}>")
        if isinstance(value, dict):
            return {k: canon(v) for k, v in value.items()
                    if k not in TIMES and not k.endswith("_ms")}
        if isinstance(value, list):
            return [canon(v) for v in value]
        return value

    return [canon({k: v for k, v in event.model_dump(mode="json").items() if k not in VARYING})
            for event in run.events]


def outcomes(run: TestRun) -> list[tuple[str, str | None]]:
    return [(r.status, getattr(r, "code", None)) for r in run.results]


def play(walkthrough: Walkthrough, through: Any) -> tuple[TestRun, list[str]]:
    ran: list[str] = []
    run = run_test(concierge(ran), walkthrough.steps(), store=MemoryStore(),
                   through=through, session_id="parity")
    return run, ran


@pytest.mark.parametrize("walkthrough", WALKTHROUGHS, ids=[w.name for w in WALKTHROUGHS])
def test_run_test_and_the_handlers_write_the_same_ledger(walkthrough: Walkthrough) -> None:
    in_process, ran_here = play(walkthrough, "run")
    handled, ran_there = play(walkthrough, "handlers")

    assert ledger(in_process) == ledger(handled)
    assert outcomes(in_process) == outcomes(handled)
    assert ran_here == ran_there
    assert in_process.session.status == handled.session.status
    assert in_process.session.version == handled.session.version
    assert [(q.id, q.text) for q in in_process.session.inbox] == [
        (q.id, q.text) for q in handled.session.inbox]


def test_the_ledgers_compared_carry_derived_ids() -> None:
    """The comparison is not blind to ids: a walkthrough's invocation and call ids are the
    derived ones, the same in both runs, and a minted id is replaced by its place."""
    walkthrough = WALKTHROUGHS[1]  # a tool step
    run, ran = play(walkthrough, "run")
    shown = ledger(run)
    invocation = derive_invocation("session_parity", "m-1")
    assert {e["invocation_id"] for e in shown} == {invocation}
    (call,) = [e for e in shown if e["type"] == "tool_call"]
    assert ran == [call["call_id"]] and not MINTED.match(call["call_id"])
    (requested,) = [e for e in ledger(play(WALKTHROUGHS[3], "run")[0])
                    if e["type"] == "approval_requested"]
    assert requested["approval_id"].startswith("<apr #")
