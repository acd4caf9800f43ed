"""Issue 43: a turn's OpenTelemetry spans and metrics, and the timing the ledger keeps.

An app sets its providers with ``opentelemetry.trace.set_tracer_provider`` (and
``opentelemetry.metrics.set_meter_provider``), which the API lets happen once per process.
The ``spans`` and ``metric_reader`` fixtures set a provider of their own that way for one test
and then put the API's globals back as they were (unset), so no other test in the worker
traces; the turn resumed in another process sets its provider with no such help.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from itertools import count
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.metrics import _internal as metrics_api
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

import dormant
from dormant import _otel
from dormant.events import (
    Event,
    InvocationEnd,
    InvocationYield,
    SpanRef,
    ToolCall,
    TurnTiming,
    Usage,
)
from dormant.models import ModelError, ModelRequest
from dormant.settings import ENV
from dormant.stores.sqlite import SqliteStore
from dormant.tools import Signal
from tests.unit.otel_turns import DAY_MS, UsageModel, record, travel

ROOT = Path(__file__).resolve().parents[2]
#: The app's clock when the turn parks (epoch ms).
PARKED_AT = 1_800_000_000_000
LOOKUP = {"tool_calls": [{"name": "lookup", "args": {"city": "Paris"}}]}
BOOK = {"tool_calls": [{"name": "book", "args": {"hotel": "Lutetia"}}]}
ASK = {"session_id": "trip", "input": {"message": "Book me a hotel in Paris"}}
#: One call of :class:`UsageModel` at the travel app's prices.
CALL_COST = 0.00048
CONTENT = ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
           "gen_ai.tool.call.arguments", "gen_ai.tool.call.result")


@pytest.fixture()
def unset(monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenTelemetry's API imported (as by this module) but no provider set, until the test
    ends: then the API's globals are put back as they were."""
    monkeypatch.setattr(trace, "_TRACER_PROVIDER_SET_ONCE", Once())
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    monkeypatch.setattr(metrics_api, "_METER_PROVIDER_SET_ONCE", Once())
    monkeypatch.setattr(metrics_api, "_METER_PROVIDER", None)
    monkeypatch.setattr(metrics_api._PROXY_METER_PROVIDER, "_real_meter_provider", None)
    monkeypatch.delenv("OTEL_PYTHON_TRACER_PROVIDER", raising=False)
    monkeypatch.delenv("OTEL_PYTHON_METER_PROVIDER", raising=False)


@pytest.fixture()
def spans(unset: None) -> InMemorySpanExporter:
    """A tracer provider set as an app sets it, for this test only: what it finished."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return exporter


def set_meter_provider(monkeypatch: pytest.MonkeyPatch) -> InMemoryMetricReader:
    """Set a meter provider as an app sets it (the API's once-only guard reset first):
    its reader."""
    monkeypatch.setattr(metrics_api, "_METER_PROVIDER_SET_ONCE", Once())
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader], shutdown_on_exit=False))
    return reader


@pytest.fixture()
def metric_reader(unset: None, monkeypatch: pytest.MonkeyPatch) -> InMemoryMetricReader:
    """A meter provider set as an app sets it, for this test only: its reader."""
    return set_meter_provider(monkeypatch)


def finished(exporter: InMemorySpanExporter) -> list[dict[str, Any]]:
    return [record(span) for span in exporter.get_finished_spans()]


def root_of(request_spans: list[dict[str, Any]]) -> dict[str, Any]:
    """A request's ``invoke_agent`` span, having checked that every other span of the request
    is its child in its trace."""
    (root,) = [span for span in request_spans if span["name"].startswith("invoke_agent")]
    assert root["parent"] is None
    for span in request_spans:
        if span is not root:
            assert (span["trace_id"], span["parent"]) == (root["trace_id"], root["span_id"]), \
                span["name"]
    return root


def ledger(app: dormant.App) -> list[Event]:
    session = app.sessions.get("trip")
    assert session is not None
    return session.events


def timings(app: dormant.App, kind: type[Event]) -> list[TurnTiming]:
    """The timing each ``kind`` event of the ledger keeps."""
    kept = [getattr(event, "timing", None) for event in ledger(app) if isinstance(event, kind)]
    assert None not in kept
    return [timing for timing in kept if timing is not None]


def pending_of(result: Any) -> tuple[str, str]:
    """The one pending approval of a parked turn's result: its id and its call's id."""
    (pending,) = result.pending_approvals
    return pending.approval_id, pending.call_id


def named(request_spans: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [span for span in request_spans if span["name"] == name]


def resume_elsewhere(store: Path, tmp_path: Path, request: dict[str, Any]
                     ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Serve ``request`` in another process, a day after the turn parked: its REST result
    and the spans its own tracer provider finished."""
    out = tmp_path / "resumed-spans.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "layers/dormant")])}
    env.pop(ENV.OTEL_CAPTURE_CONTENT, None)
    done = subprocess.run(
        [sys.executable, "-m", "tests.unit.otel_turns", str(store), str(PARKED_AT + DAY_MS),
         json.dumps(request), str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), json.loads(out.read_text())


# --- the span tree of a turn that parks, and of its resumption a day later, elsewhere ------


def test_a_turn_parked_for_approval_and_resumed_in_another_process_a_day_later_links_back(
        spans: InMemorySpanExporter, tmp_path: Path) -> None:
    store = tmp_path / "travel.db"
    app, agent = travel(UsageModel([LOOKUP, BOOK]), store=SqliteStore(store),
                        clock=lambda: PARKED_AT)
    parked = app.handler.rest(agent=agent)(ASK)
    assert parked.status == "yielded_tool"
    approval_id, call_id = pending_of(parked)

    first = finished(spans)
    assert [span["name"] for span in first] == [  # (in the order they ended)
        "dormant.load", "chat tiny-1", "dormant.write_ahead", "execute_tool lookup",
        "chat tiny-1", "execute_tool book", "dormant.commit", "invoke_agent planner"]
    root = root_of(first)
    assert root["attributes"] == {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner",
        "gen_ai.conversation.id": "session_trip",
        "dormant.invocation.id": root["attributes"]["dormant.invocation.id"],
        "dormant.turn.outcome": "yielded", "dormant.commit.status": "committed",
        "gen_ai.usage.input_tokens": 240, "gen_ai.usage.output_tokens": 60,
        "dormant.usage.cost": 2 * CALL_COST}
    assert (root["kind"], root["status"], root["links"]) == ("INTERNAL", "UNSET", [])
    for number, chat in enumerate(named(first, "chat tiny-1"), 1):
        assert chat["kind"] == "CLIENT"
        assert chat["attributes"] == {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": "acme",
            "gen_ai.request.model": "tiny-1", "gen_ai.response.model": "tiny-1-2026",
            "gen_ai.response.id": f"resp_{number}", "gen_ai.response.finish_reasons": [
                "tool_calls"], "gen_ai.usage.input_tokens": 120,
            "gen_ai.usage.output_tokens": 30, "dormant.usage.cost": CALL_COST,
            "dormant.time_to_first_chunk_ms": 0}
    (lookup,) = named(first, "execute_tool lookup")
    assert lookup["attributes"]["dormant.tool.outcome"] == "result"
    (waiting,) = named(first, "execute_tool book")
    assert waiting["attributes"] == {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "book",
        "gen_ai.tool.call.id": call_id, "gen_ai.tool.type": "function",
        "gen_ai.tool.description": "Book a hotel.", "dormant.tool.outcome": "approval"}
    spans.clear()

    result, second = resume_elsewhere(store, tmp_path, {"session_id": "trip", "input": {
        "approvals": [{"approval_id": approval_id, "approved": True}]}})

    assert result["status"] == "completed"
    assert [span["name"] for span in second] == [
        "dormant.load", "dormant.claim", "execute_tool book", "chat tiny-1", "dormant.commit",
        "invoke_agent planner"]
    resumed = root_of(second)
    assert resumed["trace_id"] != root["trace_id"]  # a request of its own...
    assert resumed["links"] == [{"trace_id": root["trace_id"], "span_id": root["span_id"],
                                 "attributes": {"dormant.link": "parked"}}]  # ...linked back
    assert {key: resumed["attributes"][key] for key in (
        "gen_ai.operation.name", "gen_ai.agent.name", "gen_ai.conversation.id",
        "dormant.invocation.id", "dormant.turn.outcome", "gen_ai.usage.input_tokens")} == {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner",
        "gen_ai.conversation.id": "session_trip",
        "dormant.invocation.id": root["attributes"]["dormant.invocation.id"],
        "dormant.turn.outcome": "completed", "gen_ai.usage.input_tokens": 120}
    (ran,) = named(second, "execute_tool book")
    assert {key: ran["attributes"].get(key) for key in (
        "gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.tool.call.id",
        "dormant.tool.outcome", "dormant.tool.approved")} == {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "book",
        "gen_ai.tool.call.id": call_id, "dormant.tool.outcome": "result",
        "dormant.tool.approved": True}
    (claim,) = named(second, "dormant.claim")
    assert claim["attributes"]["dormant.commit.status"] == "committed"
    assert named(second, "chat tiny-1")[0]["attributes"]["gen_ai.usage.output_tokens"] == 30
    assert finished(spans) == []  # (the other process's spans went to its own provider)

    (yielded,), (ended,) = timings(app, InvocationYield), timings(app, InvocationEnd)
    assert yielded.span == SpanRef(trace_id=root["trace_id"], span_id=root["span_id"])
    assert ended.span == SpanRef(trace_id=resumed["trace_id"], span_id=resumed["span_id"])
    assert (yielded.started, ended.started) == (PARKED_AT, PARKED_AT + DAY_MS)


# --- the provider, content capture, a tool's own spans, failures ---------------------------


def test_the_provider_set_before_the_turn_is_the_one_its_spans_go_to(
        spans: InMemorySpanExporter) -> None:
    app, agent = travel(UsageModel([LOOKUP, "Lutetia."]))
    unset_exporter = InMemorySpanExporter()  # a provider made but never set: not used
    TracerProvider(shutdown_on_exit=False).add_span_processor(
        SimpleSpanProcessor(unset_exporter))

    assert app.handler.rest(agent=agent)(ASK).status == "completed"

    names = [span["name"] for span in finished(spans)]
    assert names.count("invoke_agent planner") == 1 and "execute_tool lookup" in names
    assert unset_exporter.get_finished_spans() == ()


def test_message_contents_stay_out_of_spans_by_default(
        spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV.OTEL_CAPTURE_CONTENT, raising=False)
    app, agent = travel(UsageModel([LOOKUP, "Lutetia."]))

    app.handler.rest(agent=agent)(ASK)

    recorded = finished(spans)
    assert len(recorded) == 7
    assert [span["name"] for span in recorded if set(CONTENT) & set(span["attributes"])] == []


def test_message_contents_are_captured_as_json_when_the_app_opts_in(
        spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV.OTEL_CAPTURE_CONTENT, "true")
    app, agent = travel(UsageModel([LOOKUP, "Lutetia."]), system="Be brief.")

    app.handler.rest(agent=agent)(ASK)

    recorded = finished(spans)
    first, second = named(recorded, "chat tiny-1")
    asked = json.loads(first["attributes"]["gen_ai.input.messages"])
    assert asked == [{"role": "user", "parts": [
        {"type": "text", "content": "Book me a hotel in Paris"}]}]
    assert "Be brief." in first["attributes"]["gen_ai.system_instructions"]
    (called,) = json.loads(first["attributes"]["gen_ai.output.messages"])
    assert called["finish_reason"] == "tool_calls"
    assert [part["name"] for part in called["parts"]] == ["lookup"]
    (answered,) = json.loads(second["attributes"]["gen_ai.output.messages"])
    assert answered["parts"] == [{"type": "text", "content": "Lutetia."}]
    (tool,) = named(recorded, "execute_tool lookup")
    assert json.loads(tool["attributes"]["gen_ai.tool.call.arguments"]) == {"city": "Paris"}
    assert json.loads(tool["attributes"]["gen_ai.tool.call.result"]) == {
        "city": "Paris", "hotel": "Lutetia"}


def test_a_tool_s_own_spans_nest_under_its_execute_tool_span(
        spans: InMemorySpanExporter) -> None:
    app = dormant.App(name="geo")

    @app.tool
    def geocode(city: str) -> str:
        """Where a city is."""
        with trace.get_tracer("geo.tools").start_as_current_span(f"geocode {city}"):
            return f"{city}: somewhere"

    two_at_once = {"tool_calls": [{"name": "geocode", "args": {"city": "Paris"}},
                                  {"name": "geocode", "args": {"city": "Rome"}}]}
    one = {"tool_calls": [{"name": "geocode", "args": {"city": "Oslo"}}]}
    agent = app.agent("mapper", model=UsageModel([two_at_once, one, "Done."]), tools=[geocode])

    app.handler.rest(agent=agent)(ASK)

    recorded = finished(spans)
    runs = {span["attributes"]["gen_ai.tool.call.id"]: span
            for span in named(recorded, "execute_tool geocode")}
    calls = {event.args["city"]: event.call_id
             for event in ledger(app) if isinstance(event, ToolCall)}
    assert len(runs) == 3 and set(calls.values()) == set(runs)
    for city, call_id in calls.items():  # two ran on threads of their own, one in the turn's
        (own,) = named(recorded, f"geocode {city}")
        assert own["parent"] == runs[call_id]["span_id"], city
        assert own["trace_id"] == runs[call_id]["trace_id"]


def test_a_denied_call_s_span_says_a_person_denied_it(spans: InMemorySpanExporter) -> None:
    app, agent = travel(UsageModel([BOOK, "Not booked."]))
    turn = app.handler.rest(agent=agent)
    approval_id, call_id = pending_of(turn(ASK))
    spans.clear()

    turn({"session_id": "trip", "input": {"approvals": [
        {"approval_id": approval_id, "approved": False, "reason": "too dear"}]}})

    (denied,) = named(finished(spans), "execute_tool book")
    assert {key: denied["attributes"].get(key) for key in (
        "gen_ai.tool.call.id", "dormant.tool.outcome", "dormant.tool.approved")} == {
        "gen_ai.tool.call.id": call_id, "dormant.tool.outcome": "denied",
        "dormant.tool.approved": False}
    assert denied["status"] == "UNSET"


class FailingModel:
    """A model whose provider refuses the call."""

    provider = "acme"
    model = "tiny-1"

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[Any]:
        raise ModelError("the provider is over capacity", code="rate_limited",
                         retryable=False)


def test_a_failed_model_call_marks_its_chat_span_and_the_turn_failed(
        spans: InMemorySpanExporter) -> None:
    app, agent = travel(FailingModel())

    failed = app.handler.rest(agent=agent)(ASK)

    assert failed.code == "rate_limited"
    recorded = finished(spans)
    (chat,) = named(recorded, "chat tiny-1")
    assert chat["status"] == "ERROR"
    assert chat["attributes"]["error.type"] == "rate_limited"
    root = root_of(recorded)
    assert root["attributes"]["dormant.turn.outcome"] == "failed"
    assert root["status"] == "ERROR"
    assert root["attributes"]["error.type"] == "rate_limited"


# --- metrics --------------------------------------------------------------------------------


def points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    """Each metric's data points, by the metric's name."""
    data = reader.get_metrics_data()
    assert data is not None
    return {metric.name: list(metric.data.data_points)
            for resource in data.resource_metrics for scope in resource.scope_metrics
            for metric in scope.metrics}


def test_a_turn_records_token_usage_call_durations_and_its_own_duration_by_outcome(
        metric_reader: InMemoryMetricReader) -> None:
    app, agent = travel(UsageModel([LOOKUP, "Lutetia."]))

    app.handler.rest(agent=agent)(ASK)

    recorded = points(metric_reader)
    tokens = {point.attributes["gen_ai.token.type"]: point
              for point in recorded["gen_ai.client.token.usage"]}
    assert (tokens["input"].count, tokens["input"].sum) == (2, 240)
    assert (tokens["output"].count, tokens["output"].sum) == (2, 60)
    assert dict(tokens["input"].attributes) == {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "acme",
        "gen_ai.request.model": "tiny-1", "gen_ai.response.model": "tiny-1-2026",
        "gen_ai.token.type": "input"}
    (calls,) = recorded["gen_ai.client.operation.duration"]
    assert calls.count == 2 and calls.attributes["gen_ai.request.model"] == "tiny-1"
    (turn,) = recorded["dormant.turn.duration"]
    assert turn.count == 1
    assert dict(turn.attributes) == {"gen_ai.agent.name": "planner",
                                     "dormant.turn.outcome": "completed"}


def test_metrics_alone_record_no_span_and_keep_none_on_the_ledger(
        metric_reader: InMemoryMetricReader) -> None:
    app, agent = travel(UsageModel(["Lutetia."]))

    app.handler.rest(agent=agent)(ASK)

    assert points(metric_reader)["dormant.turn.duration"][0].count == 1
    (end,) = timings(app, InvocationEnd)
    assert end.span is None


def test_a_second_meter_provider_gets_instruments_of_its_own(
        unset: None, monkeypatch: pytest.MonkeyPatch) -> None:
    app, agent = travel(UsageModel(["Paris.", "Rome."]))
    for _ in range(2):
        reader = set_meter_provider(monkeypatch)

        app.handler.rest(agent=agent)(ASK)

        assert points(reader)["dormant.turn.duration"][0].count == 1


# --- with no OpenTelemetry -----------------------------------------------------------------


def test_with_the_api_imported_but_no_provider_set_nothing_is_traced(unset: None) -> None:
    assert _otel.sink() is None
    app, agent = travel(UsageModel([LOOKUP, "Lutetia."]))

    assert app.handler.rest(agent=agent)(ASK).status == "completed"

    (end,) = timings(app, InvocationEnd)
    assert end.span is None
    assert [tool.outcome for tool in end.tools] == ["result"]


NO_OTEL = textwrap.dedent("""
    import json, sys

    class NoOpenTelemetry:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "opentelemetry":
                raise ImportError(f"{name} is not installed here")
            return None

    sys.meta_path.insert(0, NoOpenTelemetry())
    import dormant
    from dormant.models import ScriptedModel

    app = dormant.App(name="bare")

    @app.tool
    def add(a: int, b: int) -> int:
        \"\"\"Add.\"\"\"
        return a + b

    agent = app.agent("calc", tools=[add], model=ScriptedModel(
        [{"tool_calls": [{"name": "add", "args": {"a": 1, "b": 2}}]}, "3"]))
    done = app.handler.rest(agent=agent)({"session_id": "s", "input": {"message": "1+2?"}})
    end = app.sessions.get("s").events[-1]
    print(json.dumps({"status": done.status, "text": done.output.text,
                      "timed": [tool.name for tool in end.timing.tools],
                      "span": end.timing.span,
                      "otel": sorted(m for m in sys.modules if m.startswith("opentelemetry"))}))
""")


def test_with_opentelemetry_missing_a_turn_imports_none_of_it_and_completes() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "layers/dormant")}
    done = subprocess.run([sys.executable, "-c", NO_OTEL], env=env, capture_output=True,
                          text=True, timeout=60, check=False)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"status": "completed", "text": "3", "timed": ["add"],
                                       "span": None, "otel": []}


# --- the timing the ledger keeps ------------------------------------------------------------


def ticking(step: int = 7) -> Any:
    """An app clock that moves ``step`` ms each time it is read."""
    ticks = count(PARKED_AT, step)
    return lambda: next(ticks)


def test_the_ending_events_keep_phases_model_calls_and_tools_and_the_head_sums_them(
        unset: None) -> None:
    model = UsageModel([LOOKUP, BOOK, "Booked."],
                       usage=Usage(input_tokens=120, output_tokens=30, cached_tokens=20))
    app, agent = travel(model, clock=ticking())
    turn = app.handler.rest(agent=agent)
    approval_id, _ = pending_of(turn(ASK))
    turn({"session_id": "trip", "input": {"approvals": [
        {"approval_id": approval_id, "approved": True}]}})

    (yielded,), (ended,) = timings(app, InvocationYield), timings(app, InvocationEnd)
    assert [phase.name for phase in yielded.phases] == ["load", "write_ahead"]
    assert [phase.name for phase in ended.phases] == ["load", "claim"]
    assert [(tool.name, tool.outcome) for tool in yielded.tools] == [
        ("lookup", "result"), ("book", "approval")]
    assert [(tool.name, tool.outcome) for tool in ended.tools] == [("book", "result")]
    priced = Usage(input_tokens=120, output_tokens=30, cached_tokens=20, cost=CALL_COST)
    for timing, steps in ((yielded, [1, 2]), (ended, [1])):
        assert [call.step for call in timing.model_calls] == steps
        for call in timing.model_calls:
            assert (call.provider, call.model, call.response_model) == (
                "acme", "tiny-1", "tiny-1-2026")
            assert call.first_token_ms is not None and call.first_token_ms > 0
            assert call.duration_ms >= call.first_token_ms
            assert call.usage == priced
        assert timing.usage.cost == pytest.approx(CALL_COST * len(steps))
        assert timing.span is None
    session = app.sessions.get("trip")
    assert session is not None and session.head.usage == {
        "input_tokens": 360, "output_tokens": 90, "cached_tokens": 60, "reasoning_tokens": 0,
        "cost": pytest.approx(3 * CALL_COST), "turns": 2}


def test_a_model_the_price_table_does_not_cover_costs_nothing_known(unset: None) -> None:
    app, agent = travel(UsageModel(["Lutetia."]))
    app.prices.clear()

    app.handler.rest(agent=agent)(ASK)

    session = app.sessions.get("trip")
    assert session is not None and session.head.usage is not None
    assert session.head.usage["cost"] is None and session.head.usage["input_tokens"] == 120


def test_a_takeover_links_to_the_claim_and_the_parking_not_to_itself() -> None:
    from dormant._timing import parked_spans
    from dormant.events import (
        InvocationResume,
        InvocationStart,
        InvocationYield,
        SpanRef,
        TurnTiming,
    )

    parked = SpanRef(trace_id="a" * 32, span_id="1" * 16)
    claimed = SpanRef(trace_id="b" * 32, span_id="2" * 16)
    events = [InvocationStart(invocation_id="inv_old"),
              InvocationYield(invocation_id="inv_old", reason="message"),
              InvocationStart(invocation_id="inv_1"),
              InvocationYield(invocation_id="inv_1", reason="tool",
                              timing=TurnTiming(started=1, elapsed_ms=2, span=parked)),
              InvocationResume(invocation_id="inv_1", span=claimed)]

    assert parked_spans(events, "inv_1") == [(claimed, "claimed"), (parked, "parked")]
    assert parked_spans(events, None) == []
