"""A traced turn's cost does not grow with its session's history: looking for the spans that
parked its invocation reads back to where that invocation began, or to an earlier
invocation's event (a fresh turn's search ends at once).

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


class _Counted(list[Any]):
    """A ledger window that counts the events read from its end."""

    read = 0

    def __reversed__(self) -> Any:
        for event in super().__reversed__():
            _Counted.read += 1
            yield event


def test_looking_for_parked_spans_reads_only_the_carried_invocation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    sink = OtelSink(provider.get_tracer("test"), None, content=False)
    monkeypatch.setattr(serve, "otel_sink", lambda: sink)
    read: list[int] = []

    def parked_spans(events: Any, invocation_id: str | None) -> Any:
        _Counted.read = 0
        found = _timing.parked_spans(_Counted(events), invocation_id)
        read.append(_Counted.read)
        return found

    monkeypatch.setattr(serve, "parked_spans", parked_spans)
    app = dormant.App(name="stays")
    ask = app.tool(name="ask_guest", description="Ask", schema=Question, yield_schema=Answer)
    agent = app.agent("concierge", tools=[ask], model=ScriptedModel(
        ["Hello."] * 20 + [{"tool_calls": [{"name": "ask_guest", "args": {"q": "When?"},
                                            "id": "call_1"}]}, "Booked."]))
    rest = app.handler.rest(agent=agent)
    for _ in range(20):
        assert rest({"session_id": "s1", "input": {"message": "hi"}}).status == "completed"
    assert rest({"session_id": "s1", "input": {"message": "book"}}).status == "yielded_tool"
    # 80 events behind the last fresh turn; each search stopped at the one before it
    assert len(read) == 21 and max(read) <= 1
    done = rest({"session_id": "s1", "input": {"tools": [{"call_id": "call_1",
                                                          "input": {"answer": "Friday"}}]}})
    assert done.status == "completed"
    assert read[-1] <= 8  # the parked invocation's own events, back to its start
    roots = [s for s in exported.get_finished_spans() if s.name == "invoke_agent concierge"]
    assert [link.context.span_id for link in roots[-1].links] == [roots[-2].context.span_id]
