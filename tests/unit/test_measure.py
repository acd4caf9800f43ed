"""``App.meter``: each request, once it ended, is measured (``dormant._measure``) from what it
already kept: its outcome, its model calls (latency, tokens), its tool errors, the claims and
commits another writer beat."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant._measure import TurnMeasure
from dormant.events import UserEvent
from dormant.models import ScriptedModel
from dormant.models._base import ModelChunk, ModelRequest, TextDelta, UsageChunk
from dormant.tools import Signal


class Nights(BaseModel):
    nights: int


class Recorded:
    def __init__(self) -> None:
        self.measures: list[TurnMeasure] = []

    def record(self, measure: TurnMeasure) -> None:
        self.measures.append(measure)


@pytest.fixture
def meter() -> Recorded:
    return Recorded()


@pytest.fixture
def app(meter: Recorded) -> dormant.App:
    app = dormant.App(name="measured")
    app.meter = meter
    return app


def _agent(app: dormant.App, replies: list[Any]) -> dormant.Agent:
    def extend(ctx: dormant.ToolContext) -> dict[str, Any]:
        if ctx.args.nights > 5:
            raise ValueError("too many nights")
        return {"ok": True}

    tool = app.tool(name="extend", description="Extend", schema=Nights, execute=extend)
    return app.agent(name="desk", tools=[tool], model=ScriptedModel(replies))


def test_a_completed_turn_counts_its_model_calls_and_tool_errors(
        app: dormant.App, meter: Recorded) -> None:
    rest = app.handler.rest(agent=_agent(app, [
        {"tool_calls": [{"name": "extend", "args": {"nights": 9}},
                        {"name": "extend", "args": {"nights": 1}}]}, "Done."]))

    assert rest({"session_id": "m1", "input": {"message": "extend"}}).status == "completed"

    [measured] = meter.measures
    assert (measured.outcome, measured.ran, measured.code) == ("completed", True, None)
    assert measured.commit == "committed" and not measured.commit_conflict
    assert measured.tool_errors == 1  # the call that raised; not the one that ran
    assert len(measured.model_calls) == 2
    assert all(call.latency_ms >= 0 for call in measured.model_calls)


class _Counting:
    """Streams one word after ``seconds``, then reports the tokens it used."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[ModelChunk]:
        signal.wait(self.seconds)
        yield TextDelta("hello")
        yield UsageChunk(dormant.events.Usage(input_tokens=120, output_tokens=7))


def test_a_model_call_s_latency_and_tokens_are_measured(app: dormant.App,
                                                         meter: Recorded) -> None:
    agent = app.agent(name="slow", model=_Counting(0.2))
    app.handler.rest(agent=agent)({"session_id": "m2", "input": {"message": "hi"}})

    [measured] = meter.measures
    [call] = measured.model_calls
    assert (call.input_tokens, call.output_tokens) == (120, 7)
    assert 200 <= call.latency_ms < 5_000


def test_a_failure_is_measured_by_its_code_and_a_refusal_apart(
        app: dormant.App, meter: Recorded) -> None:
    class Broken:
        def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[ModelChunk]:
            raise RuntimeError("the provider's SDK broke")
            yield  # (a generator)

    rest = app.handler.rest(agent=app.agent(name="broken", model=Broken()))
    assert rest({"session_id": "m3", "input": {"message": "hi"}}).code == "run_error"
    assert rest({"session_id": "bad id!", "input": {"message": "hi"}}).status == "error"

    failed, refused = meter.measures
    assert (failed.outcome, failed.code, failed.ran) == ("failed", "run_error", True)
    assert (refused.outcome, refused.ran) == ("refused", False)
    assert refused.code is not None


def test_a_commit_another_writer_beat_is_a_conflict(app: dormant.App,
                                                    meter: Recorded) -> None:
    def meanwhile(ctx: dormant.HookContext) -> None:  # another writer lands first
        other = app.sessions.load("session_m4", turns=None)
        if other is not None and len(other.events) < 5:
            other.add_event(UserEvent(text="also this"))
            assert app.sessions.commit(other).ok

    rest = app.handler.rest(agent=app.agent(
        name="raced", model=ScriptedModel(["One.", "Two."]),
        hooks=[dormant.Hook(after_model=meanwhile)]))
    assert rest({"session_id": "m4", "input": {"message": "first"}}).status == "completed"
    assert rest({"session_id": "m4", "input": {"message": "second"}}).status == "completed"

    # (the second turn merges onto the other write, or, its message older, is superseded)
    first, second = meter.measures
    assert (first.commit, first.commit_conflict) == ("committed", False)
    assert second.commit in ("merged", "superseded") and second.commit_conflict


def test_a_request_that_ran_no_turn_is_measured_as_what_it_did(
        app: dormant.App, meter: Recorded) -> None:
    rest = app.handler.rest(agent=_agent(app, ["Hello."]))
    assert rest({"session_id": "m5", "input": {"message": "hi"}}).status == "completed"
    assert rest({"session_id": "m5", "input": {"pause": True}}).status == "paused"

    assert [(m.outcome, m.ran) for m in meter.measures] == [("completed", True),
                                                           ("paused", False)]


def test_a_meter_that_fails_does_not_fail_the_request(app: dormant.App,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    class Failing:
        def record(self, measure: TurnMeasure) -> None:
            raise OSError("metrics sink unreachable")

    app.meter = Failing()
    reply = app.handler.rest(agent=_agent(app, ["Hello."]))(
        {"session_id": "m6", "input": {"message": "hi"}})

    assert reply.status == "completed" and reply.commit_status == "committed"
    assert "the app's meter failed" in caplog.text
