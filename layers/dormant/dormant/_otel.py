"""OpenTelemetry: a request's spans and metrics, following the GenAI semantic conventions.

dormant never imports OpenTelemetry on its own: :func:`sink` looks for it only where the
app (or the AWS Distro for OpenTelemetry's wrapper, or ``dormant dev --otlp``) already
imported it, so a function with no OpenTelemetry installed, or none set up, imports nothing
and pays one dictionary look-up per request. With a tracer provider set
(``opentelemetry.trace.set_tracer_provider``), each request is an ``invoke_agent`` span with
``chat``, ``execute_tool`` and store phase (``dormant.load``, ``dormant.claim``,
``dormant.write_ahead``, ``dormant.commit``) spans under it; with a meter provider set, the
conventions' ``gen_ai.client.token.usage`` and ``gen_ai.client.operation.duration``
histograms and ``dormant.turn.duration`` by outcome. Message contents are recorded only when
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is true.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from dormant._timing import OTEL_MODULES
from dormant.events import CallTiming, SpanRef
from dormant.settings import ENV

__all__ = ["OtelSink", "sink"]

#: The instrumentation's name, as spans and metrics carry it.
SCOPE = "dormant"


def sink() -> OtelSink | None:
    """The OpenTelemetry sink of this request, or None: OpenTelemetry was never imported in
    this process, or neither a tracer nor a meter provider is set."""
    trace, metrics = (sys.modules.get(name) for name in OTEL_MODULES)
    if trace is None and metrics is None:
        return None
    tracer = meter = None
    if trace is not None and _configured(trace.get_tracer_provider()):
        tracer = trace.get_tracer(SCOPE)
    if metrics is not None and _configured(metrics.get_meter_provider()):
        meter = _instruments(metrics.get_meter_provider())
    if tracer is None and meter is None:
        return None
    return OtelSink(tracer, meter, content=_captures_content())


def _configured(provider: object) -> bool:
    """Whether ``provider`` is one the app set (not the API's proxy or no-op default)."""
    name = type(provider).__name__
    return name not in ("ProxyTracerProvider", "NoOpTracerProvider", "_ProxyMeterProvider",
                        "NoOpMeterProvider")


def _captures_content() -> bool:
    value = os.environ.get(ENV.OTEL_CAPTURE_CONTENT, "")
    return value.strip().lower() in ("true", "1", "yes")


class _Instruments:
    """The histograms, made once per meter provider."""

    def __init__(self, meter: Any) -> None:
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}",
            description="Number of input and output tokens used.")
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s",
            description="GenAI operation duration.")
        self.turn = meter.create_histogram(
            "dormant.turn.duration", unit="s",
            description="A request's turn, from its opening to its end, by outcome.")


#: The meter provider the instruments were made with, and them (one provider at a time: a
#: new one replaces the old). The provider itself, not its ``id``: a later provider could
#: reuse the id of one that was let go.
_INSTRUMENTS: list[tuple[Any, _Instruments]] = []


def _instruments(provider: Any) -> _Instruments:
    if _INSTRUMENTS and _INSTRUMENTS[0][0] is provider:
        return _INSTRUMENTS[0][1]
    made = _Instruments(provider.get_meter(SCOPE))
    _INSTRUMENTS[:] = [(provider, made)]
    return made


class _Span:
    """One OpenTelemetry span, as :class:`~dormant._timing.SinkSpan`."""

    def __init__(self, tracer: Any, span: Any) -> None:
        self.tracer = tracer
        self.span = span

    def child(self, name: str, attributes: Mapping[str, Any], *,
              client: bool = False) -> _Span:
        from opentelemetry import trace

        kind = trace.SpanKind.CLIENT if client else trace.SpanKind.INTERNAL
        span = self.tracer.start_span(name, context=trace.set_span_in_context(self.span),
                                      kind=kind, attributes=dict(attributes))
        return _Span(self.tracer, span)

    def set(self, attributes: Mapping[str, Any]) -> None:
        self.span.set_attributes(dict(attributes))

    def link(self, ref: SpanRef, why: str) -> None:
        from opentelemetry import trace

        context = trace.SpanContext(trace_id=int(ref.trace_id, 16),
                                    span_id=int(ref.span_id, 16), is_remote=True,
                                    trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED))
        self.span.add_link(context, {"dormant.link": why})

    def ref(self) -> SpanRef | None:
        context = self.span.get_span_context()
        if not context.is_valid:
            return None
        return SpanRef(trace_id=format(context.trace_id, "032x"),
                       span_id=format(context.span_id, "016x"))

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        from opentelemetry import trace

        with trace.use_span(self.span, end_on_exit=False, record_exception=False,
                            set_status_on_exception=False):
            yield

    def end(self, error: str | None = None) -> None:
        if error is not None:
            from opentelemetry import trace

            self.span.set_attribute("error.type", error)
            self.span.set_status(trace.Status(trace.StatusCode.ERROR, error))
        self.span.end()


class _NoSpan:
    """A request's spans when only metrics are set up."""

    def child(self, name: str, attributes: Mapping[str, Any], *,
              client: bool = False) -> _NoSpan:
        return self

    def set(self, attributes: Mapping[str, Any]) -> None:
        return None

    def link(self, ref: SpanRef, why: str) -> None:
        return None

    def ref(self) -> SpanRef | None:
        return None

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        yield

    def end(self, error: str | None = None) -> None:
        return None


class OtelSink:
    """Spans through ``tracer`` (None: none), metrics through ``meter``'s instruments (None:
    none), as :class:`~dormant._timing.Sink`."""

    def __init__(self, tracer: Any, meter: _Instruments | None, *, content: bool) -> None:
        self.tracer = tracer
        self.meter = meter
        self.content = content

    def turn(self, agent: str, attributes: Mapping[str, Any]) -> _Span | _NoSpan:
        if self.tracer is None:
            return _NoSpan()
        name = f"invoke_agent {agent}" if agent else "invoke_agent"
        return _Span(self.tracer, self.tracer.start_span(name, attributes=dict(attributes)))

    def call_done(self, call: CallTiming, seconds: float) -> None:
        meter = self.meter
        if meter is None:
            return
        attributes: dict[str, Any] = {"gen_ai.operation.name": "chat",
                                      "gen_ai.request.model": call.model}
        if call.provider:
            attributes["gen_ai.provider.name"] = call.provider
        if call.response_model:
            attributes["gen_ai.response.model"] = call.response_model
        if call.error is not None:
            meter.duration.record(seconds, {**attributes, "error.type": call.error})
            return
        meter.duration.record(seconds, attributes)
        usage = call.usage
        meter.tokens.record(usage.input_tokens, {**attributes, "gen_ai.token.type": "input"})
        meter.tokens.record(usage.output_tokens, {**attributes, "gen_ai.token.type": "output"})

    def turn_done(self, agent: str, outcome: str, seconds: float) -> None:
        meter = self.meter
        if meter is not None:
            meter.turn.record(seconds, {"gen_ai.agent.name": agent,
                                        "dormant.turn.outcome": outcome})
