"""Seed 002, "Serving it: one turn per request": REST, the turn stream, commit outcomes."""

from __future__ import annotations

import time
from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant.models import ScriptedModel
from dormant.stores import MemoryStore


class Ref(BaseModel):
    ref: str


class Question(BaseModel):
    q: str


class Reply(BaseModel):
    answer: str


def scripted(text: str) -> list[dormant.Hook]:
    """The seed's stand-down: a before_agent hook answers, so no model is reached."""
    return [dormant.Hook(before_agent=lambda ctx: text)]


@pytest.fixture()
def app() -> dormant.App:
    return dormant.App(name="bookings")


@pytest.fixture()
def concierge(app: dormant.App) -> dormant.Agent:
    lookup_stay = app.tool(name="lookup_stay", description="Look up a booking by its reference",
                           schema=Ref, execute=lambda ctx: {"ref": ctx.args.ref, "nights": 3})
    return app.agent(name="concierge", model=ScriptedModel([]),
                     context=[app.context.system("Answer booking questions."),
                              app.context.history()],
                     tools=[lookup_stay])


def test_step2_the_rest_handler(app: dormant.App, concierge: dormant.Agent) -> None:
    ask = app.handler.rest(agent=concierge, hooks=scripted("Three nights, checking out Friday."),
                           response={"state": True})

    reply = ask({"session_id": "thread-42",
                 "input": {"message": "How long is my stay?", "state": {"channel": "sms"}}})

    assert reply.commit_status == "committed"
    assert reply.wire() == {
        "sessionId": "session_thread-42",
        "status": "completed",
        "output": {"items": [{"type": "text", "text": "Three nights, checking out Friday."}],
                   "text": "Three nights, checking out Friday."},
        "state": {"channel": "sms"},
    }


def test_step2_a_second_request_resumes_a_conversation_nobody_kept(
        app: dormant.App, concierge: dormant.Agent) -> None:
    ask = app.handler.rest(agent=concierge, hooks=scripted("Three nights, checking out Friday."))
    reply = ask({"session_id": "thread-42",
                 "input": {"message": "How long is my stay?", "state": {"channel": "sms"}}})
    second = ask({"sessionId": "thread-42", "input": {"message": "And the checkout time?"}})
    thread = app.sessions.get("thread-42")

    assert [reply.status, second.status] == ["completed", "completed"]
    assert thread is not None
    assert thread.version == 2
    assert [e.type for e in thread.events] == [
        "invocation_start", "user", "state_delta", "assistant", "invocation_end",
        "invocation_start", "user", "assistant", "invocation_end"]
    assert len(thread.events) == 9
    assert thread.state == {"channel": "sms"}


def test_step2_opt_in_fields(app: dormant.App, concierge: dormant.Agent) -> None:
    ask = app.handler.rest(agent=concierge, hooks=scripted("ok"),
                           response={"events": True, "usage": True})
    wire = ask({"input": {"message": "hi"}}).wire()
    assert wire["sessionId"].startswith("session_")
    assert [e["type"] for e in wire["events"]] == [
        "invocation_start", "user", "assistant", "invocation_end"]
    assert wire["usage"] == {"inputTokens": 0, "outputTokens": 0, "cachedTokens": 0,
                             "reasoningTokens": 0, "cost": None}
    assert "state" not in wire and "yieldedTools" not in wire and "warning" not in wire


def test_step3_a_turn_that_stops_and_resumes_across_requests(app: dormant.App) -> None:
    ask_guest = app.tool(name="ask_guest", description="Ask the guest", schema=Question,
                         yield_schema=Reply)
    model = ScriptedModel([
        {"tool_calls": [{"name": "ask_guest", "args": {"q": "Which night?"}}]},
        "Booked for Friday.",
    ])
    agent = app.agent(name="concierge", model=model, tools=[ask_guest])
    ask = app.handler.rest(agent=agent)

    paused = ask({"session_id": "y1", "input": {"message": "book me in"}})
    assert paused.status == "yielded_tool"
    assert paused.output.items == []
    assert paused.yielded_tools is not None
    (pending,) = paused.yielded_tools
    assert (pending.name, pending.args) == ("ask_guest", {"q": "Which night?"})
    assert paused.wire()["yieldedTools"][0]["callId"] == pending.call_id

    resumed = ask({"sessionId": paused.session_id,
                   "input": {"tools": [{"callId": pending.call_id,
                                        "input": {"answer": "Friday"}}]}})
    assert resumed.status == "completed"
    assert resumed.output.text == "Booked for Friday."
    model.assert_consumed()


def test_step4_the_stream_underneath(app: dormant.App, concierge: dormant.Agent) -> None:
    stream_turn = app.handler.turn(agent=concierge, hooks=scripted("Checkout is at eleven."))
    live = stream_turn({"session_id": "thread-42", "input": {"message": "Remind me again?"}})
    invocation_before = live.invocation_id

    streamed = [event.type for event in live]

    assert live.result is not None
    assert live.invocation_id == invocation_before
    assert live.result.invocation_id == invocation_before
    assert streamed == ["invocation_start", "user", "assistant", "invocation_end"]
    assert live.result.status == "completed"
    assert live.result.commit_status == "committed"
    assert live.result.session_id == "session_thread-42"


def test_step4_a_real_turn_streams_model_events(app: dormant.App) -> None:
    agent = app.agent(name="talker", model=ScriptedModel(["Checkout is at eleven."]))
    streamed = [event.type for event in app.handler.turn(agent=agent)(
        {"input": {"message": "When?"}})]
    assert streamed[:3] == ["invocation_start", "user", "model_start"]
    assert streamed.count("assistant_delta") == 4
    assert streamed[-3:] == ["model_end", "assistant", "invocation_end"]


class _CountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.loads = 0

    def load(self, session_id: str, *, turns: int | None = None,
             compacted: bool = False) -> Any:
        self.loads += 1
        return super().load(session_id, turns=turns, compacted=compacted)


def test_step4_the_stream_is_lazy(concierge: dormant.Agent) -> None:
    store = _CountingStore()
    app = dormant.App(name="lazy", store=store)
    agent = app.agent(name="a", hooks=scripted("hi"))
    live = app.handler.turn(agent=agent)({"input": {"message": "hello"}})
    assert store.loads == 0 and live.result is None
    first = next(live)
    assert store.loads == 1 and first.type == "invocation_start"
    assert first.invocation_id == live.invocation_id


def test_step4_an_aborted_turn_commits_nothing(app: dormant.App) -> None:
    agent = app.agent(name="a", model=ScriptedModel(["a long answer that gets cut off"]))
    live = app.handler.turn(agent=agent)({"session_id": "cut", "input": {"message": "go"}})
    for event in live:
        if event.type == "assistant_delta":
            live.abort()
    assert live.result is not None
    assert live.result.status == "error"
    assert live.result.commit_status is None
    assert live.result.code == "aborted"
    assert app.sessions.get("cut") is None


def test_step4_a_turn_that_throws_writes_nothing(app: dormant.App) -> None:
    def broken(ctx: dormant.HookContext) -> None:
        raise RuntimeError("the model provider is down")

    agent = app.agent(name="a", model=ScriptedModel(["never"]),
                      hooks=[dormant.Hook(before_model=broken)])
    rest = app.handler.rest(agent=agent)
    reply = rest({"session_id": "thrown", "input": {"message": "go"}})
    assert reply.status == "error"
    assert reply.error == "the model provider is down"
    assert reply.commit_status is None
    assert app.sessions.get("thrown") is None


def test_error_handlers_can_recover_a_failed_turn(app: dormant.App) -> None:
    def broken(ctx: dormant.HookContext) -> None:
        raise RuntimeError("provider down")

    agent = app.agent(name="a", model=ScriptedModel(["never"]),
                      hooks=[dormant.Hook(before_model=broken)])
    rest = app.handler.rest(agent=agent,
                            error_handlers=[lambda error, ctx: f"Sorry ({error}). Try again."])
    reply = rest({"session_id": "recovered", "input": {"message": "go"}})
    assert reply.status == "completed"
    assert reply.output.text == "Sorry (provider down). Try again."
    assert reply.commit_status == "committed"


def test_a_turn_past_its_timeout_keeps_the_tool_that_ran_and_fails_retryably(
        app: dormant.App) -> None:
    def slow_tool(ctx: dormant.ToolContext) -> str:
        ctx.signal.wait(5)  # returns as soon as the deadline aborts the turn
        return "late"

    tool = app.tool(name="slow", description="d", schema=Ref, execute=slow_tool)
    agent = app.agent(name="a", tools=[tool], model=ScriptedModel([
        {"tool_calls": [{"name": "slow", "args": {"ref": "x"}}]}, "done"]))
    rest = app.handler.rest(agent=agent, timeout=0.05)
    reply = rest({"session_id": "timed", "input": {"message": "go"}})
    assert reply.status == "error" and reply.code == "deadline" and reply.retryable is True
    assert reply.commit_status == "committed"
    session = app.sessions.get("timed")
    assert session is not None and session.status == "failed"
    assert [e.type for e in session.events][-2:] == ["tool_result", "invocation_failed"]


def test_a_turn_past_its_timeout_before_any_tool_ran_commits_nothing(app: dormant.App) -> None:
    def slow_hook(ctx: dormant.HookContext) -> None:
        time.sleep(0.1)

    agent = app.agent(name="a", model=ScriptedModel(["never seen"]),
                      hooks=[dormant.Hook(after_model=slow_hook)])
    rest = app.handler.rest(agent=agent, timeout=0.05)
    reply = rest({"session_id": "timed-early", "input": {"message": "go"}})
    assert reply.status == "error" and reply.code == "deadline"
    assert reply.commit_status is None
    assert app.sessions.get("timed-early") is None


def test_initial_state_applies_only_when_the_session_is_created(
        app: dormant.App, concierge: dormant.Agent) -> None:
    rest = app.handler.rest(agent=concierge, hooks=scripted("ok"), response={"state": True})
    first = rest({"session_id": "st", "input": {"message": "a", "initial_state": {"tier": "gold"}}})
    second = rest({"session_id": "st", "input": {"message": "b", "initial_state": {"tier": "x"},
                                                 "state": {"lang": "fr"}}})
    assert first.state == {"tier": "gold"}
    assert second.state == {"tier": "gold", "lang": "fr"}


def test_a_state_schema_validates_state(app: dormant.App, concierge: dormant.Agent) -> None:
    class State(BaseModel):
        tier: str = "basic"
        visits: int = 0

    rest = app.handler.rest(agent=concierge, hooks=scripted("ok"), schema=State,
                            response={"state": True})
    assert rest({"session_id": "sch", "input": {"message": "a"}}).state == {
        "tier": "basic", "visits": 0}
    bad = rest({"session_id": "sch", "input": {"message": "b", "state": {"visits": "many"}}})
    assert bad.status == "error" and "visits" in (bad.error or "")
    stored = app.sessions.get("sch")
    assert stored is not None and stored.version == 1


def test_a_principal_cannot_see_another_principals_session(
        app: dormant.App, concierge: dormant.Agent) -> None:
    rest = app.handler.rest(agent=concierge, hooks=scripted("ok"))
    assert rest({"session_id": "mine", "principal": "alice",
                 "input": {"message": "hi"}}).status == "completed"
    other = rest({"session_id": "mine", "principal": "mallory", "input": {"message": "hi"}})
    assert other.status == "error" and other.code == "session_not_found"
    stored = app.sessions.get("mine")
    assert stored is not None and stored.version == 1


def test_a_failing_store_is_retried_then_reported_failed(
        app: dormant.App, concierge: dormant.Agent) -> None:
    class Broken(MemoryStore):
        attempts = 0

        def append(self, head: Any, events: Any, *, expected_version: int) -> Any:
            Broken.attempts += 1
            raise dormant.StoreError("throttled for good")

    broken = dormant.App(name="b", store=Broken())
    agent = broken.agent(name="a", hooks=scripted("ok"))
    reply = broken.handler.rest(agent=agent)({"session_id": "f", "input": {"message": "hi"}})
    assert reply.status == "error" and reply.commit_status == "failed"
    assert reply.code == "store_error"
    assert reply.warning is not None and reply.warning.startswith("failed")
    assert Broken.attempts == 3


def test_a_model_failure_is_reported_with_a_stable_code_and_writes_nothing(
        app: dormant.App) -> None:
    class Down:
        def __init__(self, code: str) -> None:
            self.code = code

        def stream(self, request: Any, *, signal: Any) -> Any:
            raise dormant.models.ModelError("auth failed: check OPENAI_API_KEY",
                                            code=self.code, status=401, retryable=False)

    for code, answered in (("auth_failed", "auth_failed"), ("my_own_code", "model_error")):
        agent = app.agent(name="a", model=Down(code))  # type: ignore[arg-type]
        reply = app.handler.rest(agent=agent)({"session_id": "m", "input": {"message": "hi"}})
        assert (reply.status, reply.code, reply.retryable) == ("error", answered, False)
        assert reply.error == "auth failed: check OPENAI_API_KEY"
        assert app.sessions.get("m") is None
