"""``dormant dev --otlp URL`` over real HTTP: a turn's spans, and its metrics, reach an
OTLP/HTTP receiver on 127.0.0.1 by the time the server has stopped (Ctrl-C or SIGTERM)."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest

from tests._otlp import Receiver

from .conftest import DevServer


@pytest.mark.parametrize(("how", "stop", "code"), [
    ("--otlp", signal.SIGTERM, 0),
    ("OTEL_EXPORTER_OTLP_ENDPOINT", signal.SIGINT, 130),
], ids=["--otlp, SIGTERM", "the variable, Ctrl-C"])
def test_a_turn_s_spans_and_metrics_reach_the_collector(
        how: str, stop: signal.Signals, code: int, tmp_path: Path) -> None:
    with Receiver() as receiver:
        flag = ("--otlp", receiver.url) if how == "--otlp" else ()
        env = {} if flag else {how: receiver.url}
        server = DevServer(tmp_path / "dormant.db", args=flag, env=env).start()
        try:
            reply = httpx.post(f"{server.url}/turns", json={"sessionId": "otel",
                                                           "message": "book me in"}, timeout=30)
            assert reply.status_code == 200, reply.text
            assert reply.json()["status"] == "yielded_tool"
        finally:
            proc = server._proc
            assert proc is not None
            proc.send_signal(stop)
            assert proc.wait(timeout=30) == code, server.log.read_text()
            server._proc = None
    log = server.log.read_text()
    assert (f"dormant dev: OpenTelemetry: spans to {receiver.url}/v1/traces and metrics to "
            f"{receiver.url}/v1/metrics (OTLP/HTTP, from {how})") in log
    spans = {span.name: (span, attributes, resource)
             for span, attributes, resource in receiver.spans()}
    root, attributes, resource = spans["invoke_agent concierge"]
    assert resource["service.name"] == "bookings"
    assert attributes["gen_ai.conversation.id"] == "session_otel"
    assert attributes["dormant.turn.outcome"] == "yielded"
    assert {"dormant.load", "dormant.commit", "execute_tool ask_guest"} <= set(spans)
    chat = [span for name, (span, _, _) in spans.items() if name.startswith("chat ")]
    assert chat and all(span.parent_span_id == root.span_id for span in chat)
    assert "dormant.turn.duration" in receiver.metric_names()
