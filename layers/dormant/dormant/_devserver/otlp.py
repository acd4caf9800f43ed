"""``dormant dev --otlp URL``: a turn's spans and metrics exported to an OTLP/HTTP collector.

:func:`endpoints` reads where they go: ``--otlp``'s base URL (traces to ``URL/v1/traces``,
metrics to ``URL/v1/metrics``), else the OpenTelemetry environment variables, as the
specification reads them: ``OTEL_EXPORTER_OTLP_ENDPOINT`` is a base URL the signal's path is
appended to, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` and ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``
are used as they are. :class:`Exporting` sets up the SDK's tracer provider (a
``BatchSpanProcessor`` and an ``OTLPSpanExporter``) and meter provider (a
``PeriodicExportingMetricReader`` and an ``OTLPMetricExporter``), sets them as the global
ones, where :func:`dormant._otel.sink` finds them, and shuts them down (exporting what is
left) when the server stops. The SDK is imported here only, and only when asked; the other
``OTEL_EXPORTER_OTLP_*`` settings (headers, timeout, compression) and ``OTEL_SERVICE_NAME``
apply as the SDK reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

__all__ = ["ENDPOINT", "METRICS_ENDPOINT", "TRACES_ENDPOINT", "Endpoints", "Exporting",
           "endpoints"]

#: The standard variables, in the order they are read.
ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
METRICS_ENDPOINT = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
#: The service name when the app has none (and ``OTEL_SERVICE_NAME`` is not set).
SERVICE = "dormant-dev"
MISSING = ("dormant dev --otlp exports with the OpenTelemetry SDK and its OTLP/HTTP exporter, "
           "which are not installed: pip install 'dormant[otel]'")


@dataclass(frozen=True)
class Endpoints:
    """Where spans go, where metrics go (None: nowhere), and who said so (``--otlp`` or a
    variable's name)."""

    traces: str | None
    metrics: str | None
    source: str

    def describe(self) -> str:
        """The start-up line's account of it."""
        said = []
        if self.traces:
            said.append(f"spans to {self.traces}")
        if self.metrics:
            said.append(f"metrics to {self.metrics}")
        return f"OpenTelemetry: {' and '.join(said)} (OTLP/HTTP, from {self.source})"


def endpoints(flag: str | None, environ: Mapping[str, str]) -> Endpoints | None:
    """Where ``--otlp`` (``flag``), else the environment, sends spans and metrics; None when
    neither says. ValueError (its message names the option or variable): not an http(s)
    URL with a host."""
    if flag:
        base = _checked(flag, "--otlp")
        return Endpoints(_signal(base, "traces"), _signal(base, "metrics"), "--otlp")
    base = environ.get(ENDPOINT, "").strip()
    traces = environ.get(TRACES_ENDPOINT, "").strip()
    metrics = environ.get(METRICS_ENDPOINT, "").strip()
    if not (base or traces):
        return None
    if base:
        base = _checked(base, ENDPOINT)
    source = " and ".join(name for name, value in ((ENDPOINT, base), (TRACES_ENDPOINT, traces),
                                                   (METRICS_ENDPOINT, metrics)) if value)
    if metrics:
        metrics = _checked(metrics, METRICS_ENDPOINT)
    elif base:
        metrics = _signal(base, "metrics")
    return Endpoints(_checked(traces, TRACES_ENDPOINT) if traces else _signal(base, "traces"),
                     metrics or None, source)


def _checked(url: str, where: str) -> str:
    """``url`` if it is an http or https URL with a host; else ValueError naming ``where``."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError as error:
        raise ValueError(f"{where} {url!r} is not a URL ({error})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{where} {url!r} is not an OTLP/HTTP endpoint: it needs http:// or "
                         f"https:// and a host, e.g. http://127.0.0.1:4318")
    return url


def _signal(base: str, signal: str) -> str:
    """The signal's URL under a base URL, as ``OTEL_EXPORTER_OTLP_ENDPOINT`` is read."""
    return f"{base.rstrip('/')}/v1/{signal}"


class Exporting:
    """The SDK's providers exporting to ``where``: :meth:`start` sets them up and global,
    :meth:`close` exports what is left and stops them. Constructing it imports the SDK (an
    ``ImportError`` naming the ``otel`` extra when it is not installed)."""

    def __init__(self, where: Endpoints) -> None:
        self.where = where
        self._providers: list[Any] = []
        try:
            from opentelemetry.exporter.otlp.proto.http import metric_exporter, trace_exporter
            from opentelemetry.sdk import metrics, resources, trace
        except ModuleNotFoundError as error:
            if not (error.name or "").startswith("opentelemetry"):
                raise
            raise ImportError(MISSING, name=error.name) from error
        self._sdk = (trace_exporter, metric_exporter, trace, metrics, resources)

    def start(self, service: str | None) -> None:
        """Set the providers up, ``service`` (else :data:`SERVICE`) as the resource's
        ``service.name`` unless ``OTEL_SERVICE_NAME`` says otherwise, and make them global."""
        from opentelemetry import metrics as metrics_api
        from opentelemetry import trace as trace_api
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        trace_exporter, metric_exporter, trace, metrics, resources = self._sdk
        detected = resources.Resource.create()
        named = detected.attributes.get(resources.SERVICE_NAME, "")
        if str(named).startswith("unknown_service"):  # neither OTEL_SERVICE_NAME nor attributes
            detected = detected.merge(resources.Resource({resources.SERVICE_NAME:
                                                          service or SERVICE}))
        if self.where.traces:
            tracer = trace.TracerProvider(resource=detected)
            tracer.add_span_processor(BatchSpanProcessor(
                trace_exporter.OTLPSpanExporter(endpoint=self.where.traces)))
            trace_api.set_tracer_provider(tracer)
            self._providers.append(tracer)
        if self.where.metrics:
            reader = PeriodicExportingMetricReader(
                metric_exporter.OTLPMetricExporter(endpoint=self.where.metrics))
            meter = metrics.MeterProvider(resource=detected, metric_readers=[reader])
            metrics_api.set_meter_provider(meter)
            self._providers.append(meter)

    def close(self) -> None:
        """Export what is left and stop (each provider once)."""
        while self._providers:
            self._providers.pop().shutdown()
