"""``dormant dev --otlp``: where spans and metrics go (the option, the OpenTelemetry variables),
the mistakes it refuses, and a turn's spans reaching a real OTLP/HTTP receiver.

The export runs in a subprocess: a process sets its global tracer provider once.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dormant._devserver.otlp import Endpoints, endpoints
from tests._dev import one_dormant_line
from tests._otlp import Receiver

ENV = {k: v for k, v in os.environ.items()
       if k != "OPENAI_API_KEY" and not k.startswith("OTEL_")}
TIMEOUT = 60
BASE = "http://127.0.0.1:4318"


@pytest.mark.parametrize(("flag", "environ", "expected"), [
    (BASE, {}, Endpoints(f"{BASE}/v1/traces", f"{BASE}/v1/metrics", "--otlp")),
    (f"{BASE}/", {}, Endpoints(f"{BASE}/v1/traces", f"{BASE}/v1/metrics", "--otlp")),
    ("https://otel.example.com/prefix", {},
     Endpoints("https://otel.example.com/prefix/v1/traces",
               "https://otel.example.com/prefix/v1/metrics", "--otlp")),
    (BASE, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://elsewhere:4318"},  # the option wins
     Endpoints(f"{BASE}/v1/traces", f"{BASE}/v1/metrics", "--otlp")),
    (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": BASE},
     Endpoints(f"{BASE}/v1/traces", f"{BASE}/v1/metrics", "OTEL_EXPORTER_OTLP_ENDPOINT")),
    # A signal's own variable is the whole URL, used as it is; with no base, no metrics.
    (None, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{BASE}/custom"},
     Endpoints(f"{BASE}/custom", None, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")),
    (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": BASE,
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://traces:1/t",
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://metrics:2/m"},
     Endpoints("http://traces:1/t", "http://metrics:2/m",
               "OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_EXPORTER_OTLP_TRACES_ENDPOINT and "
               "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")),
], ids=["base", "trailing slash", "https with a path", "option over variable", "variable",
        "traces variable only", "every variable"])
def test_where_spans_and_metrics_go(flag: str | None, environ: dict[str, str],
                                    expected: Endpoints) -> None:
    assert endpoints(flag, environ) == expected


def test_nothing_asked_nothing_exported() -> None:
    assert endpoints(None, {}) is None
    assert endpoints("", {"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": BASE}) is None  # no traces


@pytest.mark.parametrize("url", ["ftp://collector:4318", "127.0.0.1:4318", "http://",
                                 "http://host:port", "collector"])
def test_a_url_that_is_not_http_with_a_host_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match=r"^--otlp ") as raised:
        endpoints(url, {})
    assert repr(url) in str(raised.value)


def _dev(*args: str, cwd: Path, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dormant.cli", "dev", "--port", "0", *args],
                          cwd=cwd, env={**ENV, **(env or {})}, capture_output=True, text=True,
                          timeout=TIMEOUT)


def test_dev_with_a_bad_otlp_url_says_so_and_starts_nothing(tmp_path: Path) -> None:
    said = one_dormant_line(_dev("--otlp", "localhost:4318", cwd=tmp_path))
    assert said == ("dormant: --otlp 'localhost:4318' is not an OTLP/HTTP endpoint: it needs "
                    "http:// or https:// and a host, e.g. http://127.0.0.1:4318\n")
    assert list(tmp_path.iterdir()) == []  # no database for a server that never started


def test_dev_with_a_bad_endpoint_variable_names_the_variable(tmp_path: Path) -> None:
    said = one_dormant_line(_dev(cwd=tmp_path, env={"OTEL_EXPORTER_OTLP_ENDPOINT": "grpc://x:4317"}))
    assert said.startswith("dormant: OTEL_EXPORTER_OTLP_ENDPOINT 'grpc://x:4317' is not an "
                           "OTLP/HTTP endpoint")


def test_dev_otlp_without_the_otel_extra_says_what_to_install(tmp_path: Path) -> None:
    shim = tmp_path / "shim"
    shim.mkdir()  # `site` imports it first: the SDK is not there, as without the extra
    (shim / "sitecustomize.py").write_text('import sys\nsys.modules["opentelemetry.sdk"] = None\n')
    work = tmp_path / "work"
    work.mkdir()
    path = os.pathsep.join(p for p in (str(shim), ENV.get("PYTHONPATH")) if p)
    said = one_dormant_line(_dev("--otlp", BASE, cwd=work, env={"PYTHONPATH": path}))
    assert said == ("dormant: dormant dev --otlp exports with the OpenTelemetry SDK and its "
                    "OTLP/HTTP exporter, which are not installed: pip install 'dormant[otel]'\n")
    assert list(work.iterdir()) == []


#: A tool turn through the REST handler, its spans and metrics exported as ``dormant dev``
#: sets them up (argv[1]: the receiver's URL), then the providers shut down.
TURN = textwrap.dedent('''
    import sys

    import dormant
    from dormant._devserver.otlp import Exporting, endpoints
    from dormant.models import ScriptedModel

    exporting = Exporting(endpoints(sys.argv[1], {}))
    exporting.start("calc")
    app = dormant.App(name="calc", prices={"scripted": {"input": 1, "output": 2}})

    @app.tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    agent = app.agent("calc", model=ScriptedModel(
        [{"tool_calls": [{"name": "add", "args": {"a": 1, "b": 2}}]}, "3"]), tools=[add])
    reply = app.handler.rest(agent=agent)({"session_id": "s1", "input": {"message": "1+2?"}})
    assert reply.status == "completed", reply
    exporting.close()
''')


def test_a_turn_s_spans_and_metrics_reach_an_otlp_receiver(tmp_path: Path) -> None:
    with Receiver() as receiver:
        done = subprocess.run([sys.executable, "-c", TURN, receiver.url], cwd=tmp_path,
                              env=ENV, capture_output=True, text=True, timeout=TIMEOUT)
        assert done.returncode == 0, done.stderr
    assert receiver.content_types == {"application/x-protobuf"}
    spans = {span.name: (span, attrs, resource) for span, attrs, resource in receiver.spans()}
    assert {"invoke_agent calc", "chat scripted", "execute_tool add"} <= set(spans)
    root, root_attrs, resource = spans["invoke_agent calc"]
    assert resource["service.name"] == "calc"
    assert root_attrs["gen_ai.operation.name"] == "invoke_agent"
    assert root_attrs["gen_ai.conversation.id"] == "session_s1"
    chat, chat_attrs, _ = spans["chat scripted"]
    assert chat.trace_id == root.trace_id and chat.parent_span_id == root.span_id
    assert chat_attrs["gen_ai.request.model"] == "scripted"
    assert "dormant.usage.cost" in chat_attrs  # priced: App(prices=...)
    assert spans["execute_tool add"][1]["dormant.tool.outcome"] == "result"
    assert {"gen_ai.client.token.usage", "gen_ai.client.operation.duration",
            "dormant.turn.duration"} <= receiver.metric_names()
