"""A travel agent whose turns the OpenTelemetry tests trace, in this process or another.

``python -m tests.unit.otel_turns STORE CLOCK_MS REQUEST_JSON SPANS_JSON`` serves one REST
request of :func:`travel` on the SQLite store at ``STORE`` with the app's clock at
``CLOCK_MS``, under a tracer provider of its own set with ``set_tracer_provider``, and writes
the spans it finished to ``SPANS_JSON`` (as :func:`record` shows them) and the result to
stdout: the second process of a turn resumed a day after it parked.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import dormant
from dormant.agent import ContextItem
from dormant.events import Usage
from dormant.models import (
    Model,
    ModelChunk,
    ModelRequest,
    ResponseInfo,
    TextDelta,
    ToolCallChunk,
    UsageChunk,
)
from dormant.stores._base import Store
from dormant.stores.sqlite import SqliteStore
from dormant.tools import Signal

#: The price table of the travel app: per million tokens.
PRICES = {"tiny-1": {"input": 2.0, "output": 8.0}}
#: A day, in milliseconds.
DAY_MS = 86_400_000
#: What each call of :class:`UsageModel` uses unless told.
CALL_USAGE = Usage(input_tokens=120, output_tokens=30)


class UsageModel:
    """A model that plays back ``replies`` (text, or a dict of ``tool_calls``), each with
    ``usage`` and the provider's response info, as a real provider's adapter would."""

    provider = "acme"
    model = "tiny-1"

    def __init__(self, replies: Sequence[str | dict[str, Any]], *,
                 usage: Usage = CALL_USAGE) -> None:
        self.replies = list(replies)
        self.usage = usage
        self.calls = 0

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[ModelChunk]:
        reply = self.replies[self.calls]
        self.calls += 1
        return self._play(reply, self.calls)

    def _play(self, reply: str | dict[str, Any], number: int) -> Iterator[ModelChunk]:
        if isinstance(reply, str):
            yield TextDelta(reply)
            finish = "stop"
        else:
            for call in reply["tool_calls"]:
                yield ToolCallChunk(call_id="", name=call["name"], args=call["args"])
            finish = "tool_calls"
        yield UsageChunk(self.usage)
        yield ResponseInfo(model="tiny-1-2026", response_id=f"resp_{number}",
                           finish_reason=finish)


def travel(model: Model, *, store: Store | None = None, clock: Callable[[], int] | None = None,
           system: str | None = None) -> tuple[dormant.App, dormant.Agent]:
    """The travel app (its prices :data:`PRICES`; ``store``, ``clock``: the app's; ``system``:
    the agent's prompt): ``lookup`` runs at once, ``book`` waits for a person's approval."""
    app = dormant.App(name="travel", store=store, clock=clock, prices=PRICES)

    @app.tool
    def lookup(city: str) -> dict[str, Any]:
        """Find a hotel."""
        return {"city": city, "hotel": "Lutetia"}

    @app.tool
    def book(hotel: str) -> str:
        """Book a hotel."""
        return f"booked {hotel}"

    context: list[ContextItem] | None = [app.context.system(system),
                                         app.context.history()] if system else None
    agent = app.agent("planner", model=model, context=context, tools=[lookup, book],
                      tool_approval={"book": "user-approval"})
    return app, agent


def record(span: Any) -> dict[str, Any]:
    """A finished SDK span as plain JSON: its name, ids, parent, kind, status, attributes
    and links."""
    context = span.get_span_context()
    return {
        "name": span.name,
        "trace_id": format(context.trace_id, "032x"),
        "span_id": format(context.span_id, "016x"),
        "parent": format(span.parent.span_id, "016x") if span.parent is not None else None,
        "kind": span.kind.name,
        "status": span.status.status_code.name,
        "attributes": {key: list(value) if isinstance(value, tuple) else value
                       for key, value in span.attributes.items()},
        "links": [{"trace_id": format(link.context.trace_id, "032x"),
                   "span_id": format(link.context.span_id, "016x"),
                   "attributes": dict(link.attributes or {})} for link in span.links],
    }


def main(argv: list[str]) -> None:
    store, clock_ms, request, spans = argv
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    app, agent = travel(UsageModel(["Booked: Lutetia, Paris."]), store=SqliteStore(store),
                        clock=lambda: int(clock_ms))
    result = app.handler.rest(agent=agent)(json.loads(request))
    Path(spans).write_text(json.dumps([record(span) for span in exporter.get_finished_spans()]))
    print(result.model_dump_json())


if __name__ == "__main__":
    main(sys.argv[1:])
