"""A traced turn's cost does not grow with its session's history: only a request carrying a
parked invocation on looks for the spans that parked it (a fresh turn started it itself).

The sink is built from a local SDK tracer provider (never the process's global one) and put
where the request path reads it.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel

import dormant
from dormant import _timing
from dormant._otel import OtelSink
from dormant.models import ScriptedModel

#: The module (the package's ``serve`` is its function of that name).
serve = sys.modules["dormant._request.serve"]


class Question(BaseModel):
    q: str


class Answer(BaseModel):
    answer: str


def test_only_a_carried_invocation_looks_for_its_parked_spans(
        monkeypatch: pytest.MonkeyPatch) -> None:
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    sink = OtelSink(provider.get_tracer("test"), None, content=False)
    monkeypatch.setattr(serve, "otel_sink", lambda: sink)
    looked: list[str | None] = []

    def parked_spans(events: Any, invocation_id: str | None) -> Any:
        looked.append(invocation_id)
        return _timing.parked_spans(events, invocation_id)

    monkeypatch.setattr(serve, "parked_spans", parked_spans)
    app = dormant.App(name="stays")
    ask = app.tool(name="ask_guest", description="Ask", schema=Question, yield_schema=Answer)
    agent = app.agent("concierge", tools=[ask], model=ScriptedModel(
        ["Hello."] * 3 + [{"tool_calls": [{"name": "ask_guest", "args": {"q": "When?"},
                                           "id": "call_1"}]}, "Booked."]))
    rest = app.handler.rest(agent=agent)
    for _ in range(3):
        assert rest({"session_id": "s1", "input": {"message": "hi"}}).status == "completed"
    assert rest({"session_id": "s1", "input": {"message": "book"}}).status == "yielded_tool"
    assert looked == []  # four fresh turns: nothing parked them
    done = rest({"session_id": "s1", "input": {"tools": [{"call_id": "call_1",
                                                          "input": {"answer": "Friday"}}]}})
    assert done.status == "completed"
    roots = [s for s in exported.get_finished_spans() if s.name == "invoke_agent concierge"]
    assert len(looked) == 1 and looked[0] == roots[-1].attributes["dormant.invocation.id"]
    assert [link.context.span_id for link in roots[-1].links] == [roots[-2].context.span_id]
