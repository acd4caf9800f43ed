"""An OTLP/HTTP receiver on 127.0.0.1 for tests: what exporters send to ``/v1/traces`` and
``/v1/metrics``, decoded with the protocol's own protobuf messages."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

_DECODERS: dict[str, Any] = {"/v1/traces": ExportTraceServiceRequest,
                             "/v1/metrics": ExportMetricsServiceRequest}


class Receiver:
    """A collector that keeps every export request it is sent (a context manager)."""

    def __init__(self) -> None:
        self.requests: dict[str, list[Any]] = {path: [] for path in _DECODERS}
        self.content_types: set[str] = set()
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                decoder = _DECODERS.get(self.path)
                if decoder is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                with receiver._lock:
                    receiver.content_types.add(self.headers.get("Content-Type", ""))
                    receiver.requests[self.path].append(decoder.FromString(body))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def spans(self) -> list[tuple[Any, dict[str, Any], dict[str, Any]]]:
        """Each span received: (span, its attributes, its resource's attributes)."""
        found = []
        for request in self.requests["/v1/traces"]:
            for resource_spans in request.resource_spans:
                resource = attributes(resource_spans.resource.attributes)
                for scope in resource_spans.scope_spans:
                    found.extend((span, attributes(span.attributes), resource)
                                 for span in scope.spans)
        return found

    def metric_names(self) -> set[str]:
        """The names of the metrics received."""
        return {metric.name for request in self.requests["/v1/metrics"]
                for resource in request.resource_metrics for scope in resource.scope_metrics
                for metric in scope.metrics}


def attributes(pairs: Iterator[Any] | Any) -> dict[str, Any]:
    """OTLP key-values as a dict of plain values."""
    out: dict[str, Any] = {}
    for pair in pairs:
        kind = pair.value.WhichOneof("value")
        value = getattr(pair.value, kind) if kind else None
        if kind == "array_value":
            value = [getattr(v, v.WhichOneof("value")) for v in value.values]
        out[pair.key] = value
    return out
