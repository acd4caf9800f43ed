"""Side effects match the ledger, on every store: claims, kept progress, ids that land once.

Each test here is a defect found by driving dormant as a user would (concurrent requests,
injected failures) that the commit policy (``dormant._commit``) now rules out.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant.errors import StoreError
from dormant.events import ApprovalDecided, Event, ToolResult, UserEvent
from dormant.handlers import RestResponse
from dormant.models import ModelError, ScriptedModel
from dormant.models._base import ModelRequest, TextDelta, ToolCallChunk, UsageChunk
from dormant.stores import Store
from dormant.tools import Signal

WAIT = 20


class Ticket(BaseModel):
    ticket_id: str


class Decision(BaseModel):
    approved: bool


class RuleModel:
    """Deterministic and thread-safe: the reply depends on the conversation, not on call
    order, so concurrent turns never steal each other's script. ``close`` calls the
    ``close_ticket`` tool; a tool result gets ``done``; ``fail`` makes the call after a
    tool result raise (``failures`` times)."""

    def __init__(self, failures: int = 0) -> None:
        self.calls = 0
        self.failures = failures
        self._lock = threading.Lock()

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[Any]:
        with self._lock:
            self.calls += 1
        messages = request.messages
        last = messages[-1]
        if type(last).__name__ == "ToolMessage":
            first_user = next(m for m in reversed(messages) if type(m).__name__ == "UserMessage")
            with self._lock:
                failing = "fail" in first_user.text and self.failures > 0
                if failing:
                    self.failures -= 1
            if failing:
                raise ModelError("the provider is down", code="model_error")
            yield TextDelta("done")
        elif "close" in getattr(last, "text", "") or "fail" in getattr(last, "text", ""):
            yield ToolCallChunk(call_id="", name="close_ticket", args={"ticket_id": "T-7"})
        else:
            yield TextDelta("ok")
        yield UsageChunk()


class Support:
    """An app whose ``close_ticket`` tool records every execution (its call id)."""

    def __init__(self, store: Store, *, approval: bool = False, slow: float = 0.0,
                 failures: int = 0, clock: Callable[[], int] | None = None) -> None:
        self.app = dormant.App(name="support", store=store, clock=clock)
        self.ran: list[str] = []
        self.model = RuleModel(failures)
        lock = threading.Lock()

        def close_ticket(ctx: dormant.ToolContext) -> dict[str, Any]:
            time.sleep(slow)
            with lock:
                self.ran.append(ctx.call_id)
            return {"closed": ctx.args.ticket_id}

        tool = self.app.tool(name="close_ticket", description="Close a ticket", schema=Ticket,
                             execute=close_ticket)
        self.agent = self.app.agent(
            name="support", model=self.model, tools=[tool],
            tool_approval={"close_ticket": "user-approval"} if approval else None)
        self.rest = self.app.handler.rest(agent=self.agent)

    def ledger(self, session_id: str) -> list[Event]:
        session = self.app.sessions.get(session_id)
        assert session is not None
        return session.events


def _all_at_once(calls: Sequence[Callable[[], RestResponse]]) -> list[RestResponse]:
    barrier = threading.Barrier(len(calls), timeout=WAIT)
    out: list[RestResponse | None] = [None] * len(calls)

    def run(index: int) -> None:
        barrier.wait()
        out[index] = calls[index]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT * 2)
    assert all(o is not None for o in out), "a request hung"
    return [o for o in out if o is not None]


def _results(events: list[Event]) -> list[ToolResult]:
    return [e for e in events if isinstance(e, ToolResult)]


# --- claims: a decision or an answer lands before its tool runs ----------------------------------


def test_approve_and_deny_at_once_never_record_a_denial_for_a_tool_that_ran(
        store: Store) -> None:
    for round_ in range(4):
        support = Support(store, approval=True, slow=0.05)
        sid = f"decide-{round_}"
        paused = support.rest({"session_id": sid, "input": {"message": "close T-7"}})
        (pending,) = paused.pending_approvals or []

        def decide(approved: bool, pending: Any = pending, sid: str = sid,
                   support: Support = support) -> RestResponse:
            return support.rest({"session_id": sid, "input": {"approvals": [
                {"approval_id": pending.approval_id, "approved": approved}]}})

        replies = _all_at_once([lambda: decide(False)] + [lambda: decide(True)] * 3)

        landed = [r for r in replies if r.status == "completed"]
        refused = [r for r in replies if r.status == "error"]
        assert len(landed) == 1, [r.code for r in replies]
        assert {r.code for r in refused} == {"already_decided"}
        events = support.ledger(sid)
        (decided,) = [e for e in events if isinstance(e, ApprovalDecided)]
        (result,) = _results(events)
        if decided.approved:
            assert support.ran == [result.call_id] and not result.denied
        else:
            assert support.ran == [] and result.denied


def test_twelve_concurrent_approvals_of_one_id_run_the_tool_once(store: Store) -> None:
    support = Support(store, approval=True, slow=0.05)
    paused = support.rest({"session_id": "twelve", "input": {"message": "close T-7"}})
    (pending,) = paused.pending_approvals or []

    def approve() -> RestResponse:
        return support.rest({"session_id": "twelve", "input": {"approvals": [
            {"approval_id": pending.approval_id, "approved": True}]}})

    replies = _all_at_once([approve] * 12)

    assert Counter(r.code or r.status for r in replies) == {"completed": 1,
                                                             "already_decided": 11}
    assert len(support.ran) == 1
    assert [r.call_id for r in _results(support.ledger("twelve"))] == support.ran
    assert support.model.calls == 2  # the call that asked, the reply after the tool


def test_concurrent_answers_to_a_yielded_tool_run_its_execute_once(store: Store) -> None:
    app = dormant.App(name="answers", store=store)
    ran: list[Any] = []
    lock = threading.Lock()

    def execute(ctx: dormant.ToolContext) -> dict[str, Any]:
        time.sleep(0.05)
        with lock:
            ran.append(ctx.input.approved)
        return {"approved": ctx.input.approved}

    confirm = app.tool(name="close_ticket", description="Close after confirming",
                       schema=Ticket, yield_schema=Decision, execute=execute)
    agent = app.agent(name="a", model=RuleModel(), tools=[confirm])
    rest = app.handler.rest(agent=agent)
    paused = rest({"session_id": "answers", "input": {"message": "close T-7"}})
    (call,) = paused.yielded_tools or []

    def answer(approved: bool) -> Callable[[], RestResponse]:
        return lambda: rest({"session_id": "answers", "input": {"tools": [
            {"call_id": call.call_id, "input": {"approved": approved}}]}})

    replies = _all_at_once([answer(True), answer(False)] * 3)

    assert Counter(r.code or r.status for r in replies) == {"completed": 1,
                                                             "already_answered": 5}
    session = app.sessions.get("answers")
    assert session is not None
    (result,) = _results(session.events)
    assert ran == [result.result["approved"]]


# --- what changed the world is kept --------------------------------------------------------------


def test_a_model_failure_after_a_tool_ran_keeps_it_and_retry_does_not_rerun_it(
        store: Store) -> None:
    support = Support(store, failures=1)
    failed = support.rest({"session_id": "kept", "input": {"message": "fail after closing",
                                                           "message_id": "m-1"}})

    assert failed.status == "error" and failed.code == "model_error"
    assert failed.commit_status == "committed" and failed.retryable is True
    session = support.app.sessions.get("kept")
    assert session is not None and session.status == "failed"
    assert [e.type for e in session.events] == [
        "invocation_start", "user", "tool_call", "tool_result", "invocation_failed"]
    assert support.ran == [_results(session.events)[0].call_id]

    # Resending the message is not a retry: it is the same message, already landed.
    assert support.rest({"session_id": "kept", "input": {
        "message": "fail after closing", "message_id": "m-1"}}).code == "duplicate_message"
    # A new message waits for the failed invocation to be retried (or is refused, if asked).
    assert support.rest({"session_id": "kept", "input": {
        "message": "hello", "if_busy": "reject"}}).code == "session_failed"

    retried = support.rest({"session_id": "kept", "input": {"retry": {"retry_id": "r-1"}}})
    again = support.rest({"session_id": "kept", "input": {"retry": {"retry_id": "r-1"}}})

    assert retried.status == "completed" and retried.output.text == "done"
    assert again.status == "error" and again.code == "duplicate_retry"
    assert len(support.ran) == 1  # the finished tool was not executed again
    after = support.app.sessions.get("kept")
    assert after is not None and after.status == "active"
    assert [e.type for e in after.events][-4:] == [
        "invocation_failed", "retry", "assistant", "invocation_end"]


def test_a_failure_before_any_tool_ran_writes_nothing(store: Store) -> None:
    app = dormant.App(name="nothing", store=store)

    def broken(ctx: dormant.HookContext) -> None:
        raise ModelError("the provider is down")

    agent = app.agent(name="a", model=RuleModel(), hooks=[dormant.Hook(before_model=broken)])
    reply = app.handler.rest(agent=agent)({"session_id": "clean", "input": {"message": "hi"}})

    assert reply.status == "error" and reply.commit_status is None
    assert app.sessions.get("clean") is None


def test_a_tool_that_writes_state_and_raises_leaves_no_state_change(store: Store) -> None:
    app = dormant.App(name="state", store=store)

    def half_done(ctx: dormant.ToolContext) -> None:
        ctx.state["charged"] = True
        raise RuntimeError("card declined")

    tool = app.tool(name="close_ticket", description="d", schema=Ticket, execute=half_done)
    agent = app.agent(name="a", model=RuleModel(), tools=[tool])
    reply = app.handler.rest(agent=agent)({"session_id": "state",
                                           "input": {"message": "close T-7"}})

    assert reply.status == "completed"
    session = app.sessions.get("state")
    assert session is not None and session.state == {}
    (result,) = _results(session.events)
    assert result.error is not None and "card declined" in result.error


def _ticking() -> Callable[[], int]:
    """A clock every user message reads a strictly later time from (thread-safe)."""
    ticks = itertools.count(1_700_000_000_000)
    lock = threading.Lock()

    def clock() -> int:
        with lock:
            return next(ticks)

    return clock


def _overtake(support: Support, session_id: str,
              newer: Callable[[], RestResponse]) -> tuple[RestResponse, RestResponse]:
    """Run "close T-7" until its tool ran, let ``newer`` land, then let the first finish."""
    tool_done, release = threading.Event(), threading.Event()

    def gate(ctx: dormant.HookContext) -> None:
        if ctx.request is not None and ctx.request.step == 2:
            tool_done.set()
            assert release.wait(WAIT)

    slow = support.app.handler.rest(agent=support.agent, hooks=[dormant.Hook(before_model=gate)])
    out: list[RestResponse] = []
    thread = threading.Thread(target=lambda: out.append(slow(
        {"session_id": session_id, "input": {"message": "close T-7"}})))
    thread.start()
    assert tool_done.wait(WAIT)
    newer_reply = newer()
    release.set()
    thread.join(WAIT)
    return out[0], newer_reply


def test_a_message_sent_after_a_turns_tool_ran_waits_for_that_turn(store: Store) -> None:
    """A tool step's calls land before its tools run: from then on the turn holds a claim,
    and a newer message queues behind it instead of overtaking it."""
    support = Support(store, clock=_ticking())

    slow, newer = _overtake(support, "overtaken", lambda: support.rest(
        {"session_id": "overtaken", "input": {"message": "newer"}}))

    assert newer.status == "queued"
    assert slow.status == "completed" and slow.commit_status in ("committed", "merged")
    events = support.ledger("overtaken")
    assert [e.text for e in events if isinstance(e, UserEvent)] == ["close T-7", "newer"]
    assert [r.call_id for r in _results(events)] == support.ran
    assert "done" in [getattr(e, "text", None) for e in events]
    assert [e.status for e in events if e.type == "invocation_end"] == [  # type: ignore[union-attr]
        "completed", "completed"]


def test_a_turn_overtaken_before_its_first_tool_runs_no_tool(store: Store) -> None:
    """A newer message lands while the model answers with a call: the call's write-ahead
    finds the turn superseded, so the tool never runs and nothing of the turn lands."""
    support = Support(store, clock=_ticking())
    answered, release = threading.Event(), threading.Event()

    def gate(ctx: dormant.HookContext) -> None:
        if ctx.request is not None and ctx.request.step == 1:
            answered.set()
            assert release.wait(WAIT)

    slow = support.app.handler.rest(agent=support.agent, hooks=[dormant.Hook(after_model=gate)])
    out: list[RestResponse] = []
    thread = threading.Thread(target=lambda: out.append(slow(
        {"session_id": "early", "input": {"message": "close T-9"}})))
    thread.start()
    assert answered.wait(WAIT)
    newer = support.rest({"session_id": "early", "input": {"message": "newer"}})
    release.set()
    thread.join(WAIT)

    assert newer.commit_status == "committed"
    assert out[0].commit_status == "superseded" and not out[0].landed
    assert support.ran == []
    events = support.ledger("early")
    assert [e.text for e in events if isinstance(e, UserEvent)] == ["newer"]
    assert not any(e.type == "tool_call" for e in events)


def _overtake_in_process(support: Support, session_id: str,
                         newer: Callable[[], RestResponse]) -> tuple[Any, RestResponse]:
    """Run "close T-7" in process (trusted code: nothing lands before its commit) until its
    tool ran, let ``newer`` land, then commit it through the app's commit policy."""
    session = support.app.sessions.get(session_id) or support.app.sessions.create(session_id)
    result = support.app.run(support.agent, session=session, message="close T-7")
    newer_reply = newer()
    return support.app.sessions.policy.commit(result.session), newer_reply


def test_an_overtaken_turn_keeps_the_tools_it_ran_and_drops_its_reply(store: Store) -> None:
    support = Support(store, clock=_ticking())

    slow, newer = _overtake_in_process(support, "overtaken", lambda: support.rest(
        {"session_id": "overtaken", "input": {"message": "newer"}}))

    assert newer.commit_status == "committed"
    assert slow.status == "superseded" and slow.version is not None
    events = support.ledger("overtaken")
    assert [e.text for e in events if isinstance(e, UserEvent)] == ["newer", "close T-7"]
    assert [r.call_id for r in _results(events)] == support.ran
    assert "done" not in [getattr(e, "text", None) for e in events]
    assert [e.status for e in events if e.type == "invocation_end"] == [  # type: ignore[union-attr]
        "completed", "superseded"]


def test_an_overtaken_turn_keeps_its_tools_even_when_the_newer_turn_is_parked(
        store: Store) -> None:
    support = Support(store, clock=_ticking())
    ask = support.app.tool(name="ask_guest", description="Ask", schema=Ticket,
                           yield_schema=Decision)
    asker = support.app.agent(name="asker", tools=[ask], model=ScriptedModel(
        [{"tool_calls": [{"name": "ask_guest", "args": {"ticket_id": "T-8"}}]}]))

    slow, newer = _overtake_in_process(
        support, "parked", lambda: support.app.handler.rest(agent=asker)(
            {"session_id": "parked", "input": {"message": "newer"}}))

    assert newer.status == "yielded_tool" and newer.commit_status == "committed"
    assert slow.status == "superseded" and slow.version is not None
    session = support.app.sessions.get("parked")
    assert session is not None
    assert [r.call_id for r in _results(session.events)] == support.ran
    # The newer turn still waits for its answer: the kept record changed none of that.
    assert session.status == "awaiting_input"
    assert [t.name for t in session.yielded_tools] == ["ask_guest"]


# --- message ids land once, for the life of the session ------------------------------------------


def test_a_message_id_lands_once_for_the_life_of_the_session(store: Store) -> None:
    support = Support(store)
    for n in range(40):
        reply = support.rest({"session_id": "long", "input": {"message": f"note {n}",
                                                             "message_id": f"m-{n}"}})
        assert reply.commit_status == "committed"
    calls = support.model.calls

    late = support.rest({"session_id": "long", "input": {"message": "note 0",
                                                        "message_id": "m-0"}})

    assert late.status == "error" and late.code == "duplicate_message"
    assert support.model.calls == calls  # refused before the model was asked anything
    texts = [e.text for e in support.ledger("long") if isinstance(e, UserEvent)]
    assert texts.count("note 0") == 1 and len(texts) == 40


def test_sixteen_concurrent_sends_of_one_message_id_land_once(store: Store) -> None:
    support = Support(store)
    support.app.sessions.create("sixteen")

    def send() -> RestResponse:
        return support.rest({"session_id": "sixteen", "input": {
            "message": "close T-7", "message_id": "webhook-1"}})

    replies = _all_at_once([send] * 16)

    landed = [r for r in replies if r.commit_status in ("committed", "merged")]
    assert len(landed) == 1
    assert {r.code for r in replies if r not in landed} == {"duplicate_message"}
    assert not [r for r in replies if r.commit_status == "superseded"]
    events = support.ledger("sixteen")
    assert [e.message_id for e in events if isinstance(e, UserEvent)] == ["webhook-1"]
    # Every duplicate derived the same call id, so the side effect keyed by it is one.
    assert set(support.ran) == {r.call_id for r in _results(events)}


def test_a_server_append_of_an_old_message_id_lands_once(store: Store) -> None:
    app = dormant.App(name="appends", store=store)
    for n in range(40):
        assert app.sessions.append("appended", f"note {n}", id=f"a-{n}").ok
    again = app.sessions.append("appended", "note 0", id="a-0")
    assert again.ok
    session = app.sessions.get("appended")
    assert session is not None and session.version == again.version == 40
    assert len(session.events) == 40


def test_a_redelivery_after_an_interleaved_message_runs_its_tool_once(
        store: Store) -> None:
    support = Support(store)
    turn = support.app.handler.turn(agent=support.agent)
    first = turn({"session_id": "ids", "input": {"message": "close T-7", "message_id": "m1"}})
    next(first)  # reads the empty session
    support.rest({"session_id": "ids", "input": {"message": "hi", "message_id": "m2"}})
    again = turn({"session_id": "ids", "input": {"message": "close T-7", "message_id": "m1"}})
    next(again)  # reads it after "hi" landed

    two, one = again.run(), first.run()

    # The first delivery's call is refused where it would land, before its tool runs.
    assert two.landed and one.code == "duplicate_message"
    assert len(support.ran) == 1
    assert [r.call_id for r in _results(support.ledger("ids"))] == support.ran


def test_two_racing_deliveries_of_one_retry_land_once(store: Store) -> None:
    support = Support(store, failures=1)
    support.rest({"session_id": "rr", "input": {"message": "fail after closing"}})
    turn = support.app.handler.turn(agent=support.agent)
    first = turn({"session_id": "rr", "input": {"retry": {"retry_id": "r1"}}})
    second = turn({"session_id": "rr", "input": {"retry": {"retry_id": "r1"}}})
    next(first)  # its claim lands: the retry is committed before the model is called again

    two = second.run()  # it reads the session after that claim: refused, nothing runs
    one = first.run()

    assert one.status == "completed" and one.landed
    assert two.status == "error" and two.code == "duplicate_retry"
    assert [e.type for e in support.ledger("rr")].count("retry") == 1


def test_an_empty_request_racing_a_claimer_never_runs_the_step_twice(store: Store) -> None:
    support = Support(store, approval=True)
    paused = support.rest({"session_id": "nudge", "input": {"message": "close T-7"}})
    (pending,) = paused.pending_approvals or []
    turn = support.app.handler.turn(agent=support.agent)
    claimer = turn({"session_id": "nudge", "input": {"approvals": [
        {"approval_id": pending.approval_id, "approved": True}]}})
    next(claimer)  # the decision and the reopening are committed; the tool has not run
    nudge = turn({"session_id": "nudge", "input": {}}).run()

    done = claimer.run()

    assert done.status == "completed" and len(support.ran) == 1
    assert nudge.status == "error" and not nudge.landed
    assert [r.call_id for r in _results(support.ledger("nudge"))] == support.ran


# --- the reported outcome is the truth -----------------------------------------------------------


class _Wrapped:
    """A store that delegates, so a test can make one call misbehave."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.appends = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def append(self, head: Any, events: Any, *, expected_version: int) -> Any:
        self.appends += 1
        return self.inner.append(head, events, expected_version=expected_version)


class _LandsThenTimesOut(_Wrapped):
    """The first append lands, a rival then commits, and the caller sees a timeout."""

    def __init__(self, inner: Store, rival: Callable[[], None]) -> None:
        super().__init__(inner)
        self.rival = rival
        self.armed = False

    def append(self, head: Any, events: Any, *, expected_version: int) -> Any:
        result = super().append(head, events, expected_version=expected_version)
        if self.armed and result.ok:
            self.armed = False
            self.rival()
            raise StoreError("read timed out after the request was sent", retryable=True)
        return result


def test_an_ambiguous_write_that_landed_is_reported_committed(store: Store) -> None:
    ticks = itertools.count(1_700_000_000_000)
    rival_app = dormant.App(name="rival", store=store)

    def rival() -> None:
        session = rival_app.sessions.get("ambiguous")
        assert session is not None
        session.input.message("a newer message from elsewhere")
        assert rival_app.sessions.commit(session).ok

    wrapped = _LandsThenTimesOut(store, rival)
    app = dormant.App(name="ambiguous", store=wrapped, clock=lambda: next(ticks))  # type: ignore[arg-type]
    app.sessions.create("ambiguous")
    wrapped.armed = True
    rest = app.handler.rest(agent=app.agent(name="a", model=RuleModel()))

    reply = rest({"session_id": "ambiguous", "input": {"message": "mine", "message_id": "m"}})

    assert reply.commit_status == "committed" and reply.status == "completed"
    session = app.sessions.get("ambiguous")
    assert session is not None
    texts = [e.text for e in session.events if isinstance(e, UserEvent)]
    assert texts == ["mine", "a newer message from elsewhere"]


class _RefusesForGood(_Wrapped):
    def append(self, head: Any, events: Any, *, expected_version: int) -> Any:
        self.appends += 1
        raise StoreError("access denied to the table", retryable=False)


def test_a_deterministic_store_failure_is_not_retried(store: Store) -> None:
    wrapped = _RefusesForGood(store)
    app = dormant.App(name="denied", store=wrapped)  # type: ignore[arg-type]
    rest = app.handler.rest(agent=app.agent(name="a", model=RuleModel()))

    reply = rest({"session_id": "denied", "input": {"message": "hi"}})

    assert wrapped.appends == 1
    assert reply.commit_status == "failed" and reply.code == "store_error"
    assert reply.retryable is False and "retry the request" not in (reply.error or "")
    assert store.load("session_denied") is None


def test_a_transient_store_failure_is_retried_a_bounded_number_of_times(store: Store) -> None:
    class Flaky(_Wrapped):
        def append(self, head: Any, events: Any, *, expected_version: int) -> Any:
            self.appends += 1
            raise StoreError("throttled", retryable=True)

    wrapped = Flaky(store)
    app = dormant.App(name="flaky", store=wrapped)  # type: ignore[arg-type]
    reply = app.handler.rest(agent=app.agent(name="a", model=RuleModel()))(
        {"session_id": "flaky", "input": {"message": "hi"}})

    assert reply.commit_status == "failed" and reply.retryable is True
    assert wrapped.appends == 3
    assert store.load("session_flaky") is None


def test_a_store_raising_something_unexpected_is_a_bounded_transient_failure(
        store: Store) -> None:
    class Broken(_Wrapped):
        def append(self, head: Any, events: Any, *, expected_version: int) -> Any:
            self.appends += 1
            raise ConnectionResetError("connection reset by peer")

    wrapped = Broken(store)
    app = dormant.App(name="broken", store=wrapped)  # type: ignore[arg-type]
    reply = app.handler.rest(agent=app.agent(name="a", model=RuleModel()))(
        {"session_id": "broken", "input": {"message": "hi"}})

    assert reply.commit_status == "failed" and reply.code == "store_error"
    assert "connection reset" in (reply.error or "") and wrapped.appends == 3


@pytest.mark.parametrize("approved", [True, False])
def test_a_decision_for_an_approval_already_decided_is_refused_with_409(
        store: Store, approved: bool) -> None:
    support = Support(store, approval=True)
    paused = support.rest({"session_id": "late", "input": {"message": "close T-7"}})
    (pending,) = paused.pending_approvals or []
    decide = {"session_id": "late", "input": {"approvals": [
        {"approval_id": pending.approval_id, "approved": approved}]}}
    assert support.rest(decide).status == "completed"
    version = support.app.sessions.get("late").version  # type: ignore[union-attr]

    again = support.rest(decide)

    assert again.code == "already_decided"
    assert support.app.sessions.get("late").version == version  # type: ignore[union-attr]
    assert len(support.ran) == (1 if approved else 0)


def test_a_turn_that_read_a_free_session_never_starts_beside_a_claimed_invocation(
        store: Store) -> None:
    """A turn read the session while it was free; meanwhile another turn parked on an
    approval and a decision claimed it (that invocation runs now). The first turn's commit
    must not start a second invocation beside the running one: it is superseded (it ran no
    tool), and the session keeps one open invocation."""
    support = Support(store, approval=True, clock=_ticking())
    turn = support.app.handler.turn(agent=support.agent)
    late = turn({"session_id": "beside", "input": {"message": "close T-9",
                                                   "message_id": "late"}})
    next(late)  # read at version 0 (the session is new and free)

    parked = support.rest({"session_id": "beside", "input": {"message": "close T-7"}})
    (pending,) = parked.pending_approvals or []
    decision = turn({"session_id": "beside", "input": {"approvals": [
        {"approval_id": pending.approval_id, "approved": True}]}})
    next(decision)  # the decision is claimed: that invocation is running now

    for _ in late:
        pass
    for _ in decision:
        pass

    assert late.result is not None and decision.result is not None
    assert late.result.commit_status == "superseded" and not late.result.landed
    assert decision.result.status == "completed", decision.result
    events = support.ledger("beside")
    starts = [e.invocation_id for e in events if e.type == "invocation_start"]
    ends = [e.invocation_id for e in events if e.type == "invocation_end"]
    assert starts == ends, f"an invocation started beside another: {[e.type for e in events]}"
    assert "late" not in [e.message_id for e in events if isinstance(e, UserEvent)]
    assert support.ran == [r.call_id for r in _results(events)]
