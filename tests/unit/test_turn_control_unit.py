"""Turn control in one process: the session builders, the head's rules, input schemas,
resume checks and the timeline (the cross-process paths are in tests/conformance)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant._ids import now_ms
from dormant._inspect import render_session, session_json
from dormant._schema import schema_errors
from dormant.events import InputRequested, InputResponse, ToolResult
from dormant.models import ScriptedModel
from dormant.types import Control, ControlRunning


class Question(BaseModel):
    q: str


class Answer(BaseModel):
    answer: str


def _parked(app: dormant.App, session_id: str = "s") -> dormant.Session:
    ask = app.tool(name="ask_guest", description="ask", schema=Question, yield_schema=Answer)
    agent = app.agent(name="c", model=ScriptedModel([{"tool_calls": [
        {"name": "ask_guest", "args": {"q": "Which night?"}, "id": "call_q"}]}]), tools=[ask])
    app.handler.rest(agent=agent)({"session_id": session_id, "input": {"message": "book"}})
    session = app.sessions.get(session_id)
    assert session is not None and session.status == "awaiting_input"
    return session


def test_builders_queue_a_message_to_a_waiting_session_and_edit_the_inbox() -> None:
    app = dormant.App()
    session = _parked(app)

    queued = session.input.message("first", id="a")
    session.input.message("second", id="b")
    session.input.queue_move("b", 0)
    session.input.queue_edit("a", "first, edited")
    assert app.sessions.commit(session).ok

    stored = app.sessions.get("s")
    assert stored is not None and queued.type == "queued"
    assert [(m.id, m.text) for m in stored.inbox] == [("b", "second"), ("a", "first, edited")]
    with pytest.raises(dormant.NotPending, match="inbox: b, a"):
        stored.input.queue_remove("zzz")
    with pytest.raises(dormant.PendingInputError, match="ask_guest"):
        stored.input.message("no queue please", if_busy="reject")
    with pytest.raises(dormant.DuplicateMessage):
        stored.input.message("again", id="a")


def test_a_stop_for_an_ended_invocation_is_refused_by_the_builder_too() -> None:
    app = dormant.App()
    agent = app.agent(name="c", model=ScriptedModel(["hi"]))
    stream = app.handler.turn(agent=agent)({"session_id": "e", "input": {"message": "x"}})
    stream.run()
    session = app.sessions.get("e")
    assert session is not None
    with pytest.raises(dormant.NotRunning, match="not running"):
        session.input.stop(stream.invocation_id)
    # An id the session never saw may be running elsewhere: asked through the control record.
    assert session.input.stop("inv_elsewhere") == "accepted"
    assert [a.kind for a in session.control_asks] == ["stop"]


def test_interrupt_names_exactly_one_owner() -> None:
    app = dormant.App()
    session = _parked(app)
    with pytest.raises(dormant.NotPending, match="waiting on: call_q"):
        session.input.interrupt("call_other")
    assert not session.dirty  # a refused interrupt adds nothing
    session.input.interrupt("call_q")
    types = [e.type for e in session.new_events]
    assert types == ["interrupt", "tool_result", "invocation_end"]
    assert session.status == "active"


def test_a_seed_of_any_role_adds_no_turn_and_lands_once() -> None:
    app = dormant.App()
    session = app.sessions.create("seeds")
    session.seed("House rule: no pets.", role="system", id="rule-1")
    assert app.sessions.commit(session).ok
    again = app.sessions.get("seeds")
    assert again is not None
    with pytest.raises(dormant.DuplicateMessage):
        again.seed("House rule: no pets.", role="system", id="rule-1")
    with pytest.raises(dormant.InputError, match="role"):
        again.seed("x", role="assistant")  # type: ignore[arg-type]


def test_input_requests_validate_answers_against_their_schema() -> None:
    class Budget(BaseModel):
        amount: int

    app = dormant.App()
    session = app.sessions.create("in")
    session.request_input("budget", Budget, "How much?")
    assert session.status == "awaiting_input"
    with pytest.raises(dormant.InputError, match="amount: required"):
        session.input.respond("budget", {})
    session.input.respond("budget", {"amount": 3})
    assert session.pending_inputs == [] and session.status == "active"
    with pytest.raises(dormant.errors.AlreadyAnswered):
        session.input.respond("budget", {"amount": 4})


@pytest.mark.parametrize("value, schema, problem", [
    ("x", {"type": "integer"}, "expected integer"),
    ({"a": 1}, {"type": "object", "required": ["b"]}, "value.b: required"),
    ({"a": 1}, {"type": "object", "additionalProperties": False}, "value.a: not allowed"),
    ([1, "2"], {"type": "array", "items": {"type": "integer"}}, "value[1]: expected integer"),
    ("toolong", {"type": "string", "maxLength": 3}, "longer than 3"),
    (0, {"type": "number", "minimum": 1}, "below 1"),
    ("c", {"enum": ["a", "b"]}, "one of"),
    (True, {"type": "integer"}, "expected integer"),
])
def test_schema_errors_name_what_is_wrong(value: object, schema: dict[str, object],
                                          problem: str) -> None:
    problems = schema_errors(value, schema)  # type: ignore[arg-type]
    assert any(problem in p for p in problems), problems
    assert schema_errors({"ok": 1}, {"type": "object"}) == []


def test_validate_resume_state_counts_input_requests_and_skips_progress() -> None:
    events = [InputRequested(input_id="b", prompt="Budget?"),
              ToolResult(call_id="c", name="n", preliminary=True, result={"pct": 10})]
    (waiting,) = dormant.validate_resume_state(events)
    assert (waiting.input_id, waiting.args) == ("b", "Budget?")
    assert dormant.validate_resume_state([*events, InputResponse(input_id="b", value=1)]) == []


def test_the_timeline_shows_the_inbox_stops_and_seeds() -> None:
    app = dormant.App()
    session = _parked(app, "show")
    session.input.message("later please", id="q-1")
    session.seed("VIP guest", role="system", id="s-1")
    session.input.stop(session.open_invocation or "")
    app.sessions.commit(session)
    shown = app.sessions.get("show")
    assert shown is not None
    text = render_session(shown)
    assert "✉ queued #0: later please  [q-1]" in text
    assert "system (seed): VIP guest" in text
    assert "■ stop: run" in text and "■ run ended (stopped)" in text
    assert "inbox:" in text and "#0 later please  [q-1]" in text
    assert session_json(shown)["inbox"][0]["id"] == "q-1"


def test_asks_of_a_running_turn_are_written_when_the_session_is_committed() -> None:
    app = dormant.App()
    session = app.sessions.create("asks")
    assert session.input.stop("inv_running_elsewhere", seen=3) == "accepted"
    assert session.input.steer("shorter", "inv_running_elsewhere", id="st-1") == "accepted"
    assert session.input.pause() == "accepted"
    assert app.sessions.commit(session).ok

    control = app.store.read_control("session_asks")
    assert control is not None and control.stop is not None
    assert (control.stop.invocation_id, control.stop.seen) == ("inv_running_elsewhere", 3)
    assert [s.id for s in control.steers] == ["st-1"] and control.pause == control.rev
    again = app.sessions.get("asks")
    assert again is not None and again.status == "paused"  # asked: the next request takes it
    assert again.input.resume() == "resumed"
    assert app.sessions.commit(again).ok
    assert app.sessions.get("asks").status == "active"  # type: ignore[union-attr]


def test_several_asks_reach_a_session_whose_first_turn_has_not_committed_yet() -> None:
    app = dormant.App()
    agent = app.agent(name="c", model=ScriptedModel(["x"]))
    rest = app.handler.rest(agent=agent)
    # the first turn, running elsewhere, named itself as it started
    assert app.store.write_control("session_fresh", Control(rev=1, running=ControlRunning(
        invocation_id="inv_first", since=now_ms())), head_version=0)
    steer = rest({"session_id": "fresh", "input": {"steer": {
        "text": "shorter", "invocation_id": "inv_first", "id": "st-1"}}})
    pause = rest({"session_id": "fresh", "input": {"pause": True}})
    stop = rest({"session_id": "fresh", "input": {"stop": {"invocation_id": "inv_first"}}})

    assert (steer.status, pause.status, stop.status) == ("accepted", "paused", "accepted")
    control = app.store.read_control("session_fresh")
    assert control is not None and control.rev == 4
    assert control.pause == 3 and control.stop is not None and [s.id for s in control.steers] \
        == ["st-1"]
    assert app.sessions.get("fresh") is None  # nothing was written to a ledger


def test_a_pause_or_stop_for_a_session_that_does_not_exist_is_404_and_writes_nothing() -> None:
    app = dormant.App()
    agent = app.agent(name="c", model=ScriptedModel(["x"]))
    rest = app.handler.rest(agent=agent)
    pause = rest({"session_id": "nobody", "input": {"pause": True}})
    stop = rest({"session_id": "nobody", "input": {"stop": {"invocation_id": "inv_never"}}})

    assert (pause.code, stop.code) == ("session_not_found", "session_not_found")
    assert app.store.read_control("session_nobody") is None
    assert app.sessions.get("nobody") is None


def test_a_stop_naming_an_invocation_a_waiting_session_never_ran_is_409() -> None:
    app = dormant.App()
    agent = app.agent(name="c", model=ScriptedModel(["x"]))
    rest = app.handler.rest(agent=agent)
    assert rest({"session_id": "s", "input": {"message": "hi"}}).status == "completed"
    session = app.sessions.get("s")
    assert session is not None
    session.request_input("budget", {"type": "object"})
    assert app.sessions.commit(session).ok
    before = app.store.read_control("session_s")

    stop = rest({"session_id": "s", "input": {"stop": {"invocation_id": "inv_never"}}})

    assert (stop.status, stop.code) == ("error", "not_running")
    assert app.store.read_control("session_s") == before


def test_a_pause_after_the_control_record_expired_and_restarted_its_revisions_still_pauses(
        ) -> None:
    app = dormant.App()
    agent = app.agent(name="c", model=ScriptedModel(["one", "two"]))
    rest = app.handler.rest(agent=agent)
    rest({"session_id": "ttl", "input": {"message": "hi"}})
    for _ in range(3):  # the record reaches rev 3 while the ledger takes the pause up
        rest({"session_id": "ttl", "input": {"steer": {
            "text": "x", "invocation_id": "inv_elsewhere"}}})
    assert rest({"session_id": "ttl", "input": {"pause": True}}).status == "paused"
    assert rest({"session_id": "ttl", "input": {}}).status == "paused"  # taken up (rev 4)
    assert rest({"session_id": "ttl", "input": {"resume": True}}).status != "error"
    assert app.sessions.get("ttl").status == "active"  # type: ignore[union-attr]
    store = app.store
    store._controls.pop("session_ttl", None)  # type: ignore[attr-defined]  # TTL took it

    assert rest({"session_id": "ttl", "input": {"pause": True}}).status == "paused"
    control = store.read_control("session_ttl")
    assert control is not None and control.rev == 1  # the record starts again...
    again = app.sessions.get("ttl")
    assert again is not None and again.status == "paused"  # ...and the pause still counts
    assert rest({"session_id": "ttl", "input": {"message": "queued?"}}).status == "queued"


def test_a_paused_session_records_answers_but_refuses_to_run_a_retry() -> None:
    from dormant.testing import model, model_error, run_test, user

    app = dormant.App()
    tick = app.tool(name="tick", description="t", schema=Answer, execute=lambda ctx: {"ok": 1})
    agent = app.agent(name="c", tools=[tick])
    failed = run_test(agent, [user("go"), model(tool_calls=[{"name": "tick",
                                                             "args": {"answer": "x"}}]),
                              model_error("down")], store=app.store, session_id="p",
                      through="handlers")
    assert failed.session.status == "failed"
    rest = app.handler.rest(agent=agent)
    assert rest({"session_id": "p", "input": {"pause": True}}).status == "paused"

    refused = rest({"session_id": "p", "input": {"retry": {"retry_id": "r-1"}}})

    assert (refused.status, refused.code) == ("error", "session_paused")


def test_a_timer_delivery_to_a_paused_session_waits_in_its_inbox() -> None:
    app = dormant.App()
    agent = app.agent(name="c", model=ScriptedModel(["Reminder passed on."]))
    session = app.sessions.create("tp")
    session.schedule("nudge", delay="60s", message="Reminder: call Ana")
    app.sessions.commit(session)
    rest = app.handler.rest(agent=agent)
    assert rest({"session_id": "tp", "input": {"pause": True}}).status == "paused"
    (timer,) = app.sessions.get("tp").timers  # type: ignore[union-attr]

    fired = app.handler.wake(agent=agent)(timer)

    assert fired.status == "queued"
    paused = app.sessions.get("tp")
    assert paused is not None and paused.status == "paused" and paused.timers == []
    assert [m.text for m in paused.inbox] == ["Reminder: call Ana"]
    resumed = rest({"session_id": "tp", "input": {"resume": True}})
    assert resumed.status == "completed" and resumed.output.text == "Reminder passed on."
    assert app.sessions.get("tp").inbox == []  # type: ignore[union-attr]


def test_closing_an_abandoned_stream_stops_its_control_poll_and_commits_nothing() -> None:
    import time

    app = dormant.App(name="close")
    reads: list[str] = []
    read_control = app.store.read_control

    def counted(session_id: str) -> Any:
        reads.append(session_id)
        return read_control(session_id)

    app.store.read_control = counted  # type: ignore[method-assign]
    agent = app.agent(name="a", model=ScriptedModel(["one two three"]))
    stream = app.handler.turn(agent=agent, poll_interval=0.01)(
        {"session_id": "abandoned", "input": {"message": "hi"}})
    next(stream)  # running: its control poll is on
    deadline = time.monotonic() + 5
    while not reads and time.monotonic() < deadline:
        time.sleep(0.01)
    assert reads, "the running turn never read its control record"

    stream.close()

    seen = len(reads)
    time.sleep(0.1)  # ten intervals
    assert len(reads) == seen  # no read after close
    assert app.sessions.get("abandoned") is None  # nothing was committed
    with pytest.raises(StopIteration):
        next(stream)
