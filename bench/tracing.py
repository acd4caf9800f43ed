"""What OpenTelemetry costs a text turn: spans off and on, side by side in one process.

The turn is bench/overhead.py's text turn: ``app.handler.rest``, MemoryStore, the agent of
that bench (system prompt, full history, two tools), a scripted model that reads its
messages. The cases differ only in the sink a request gets, which is what
``dormant._otel.sink()`` would return; the bench puts it where the request path reads it
(``dormant._request.serve.otel_sink``), because a process sets its global providers once and
the cases must run interleaved in one process to be compared on a busy machine:

  - off: ``dormant._otel.sink()`` itself, with OpenTelemetry imported and no provider set (it
    returns None). A process that never imported OpenTelemetry does less: two dictionary
    look-ups, both empty;
  - spans: an ``OtelSink`` on a local SDK ``TracerProvider`` with a ``SimpleSpanProcessor``
    and an exporter that discards what it is given (each span made, ended and handed over;
    no serialisation, no network: what a backend costs is its exporter's, not dormant's);
  - spans + metrics: the same, and the three histograms on a local SDK ``MeterProvider``
    whose reader (an ``InMemoryMetricReader``) is never collected during the run.

Each round starts a session and runs ``--batch`` turns of each case on it, in an order
rotated round by round. A case's figure is the median over rounds of its µs per turn; its
ratio, the median of the round-by-round ratios to "off".

    python bench/tracing.py                   # 40 rounds of 50 turns per case
    python bench/tracing.py --smoke           # one round of one turn (CI keeps it from rotting)
    python bench/tracing.py --json out.json --markdown bench/results/tracing.md
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import (  # noqa: E402
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

import dormant  # noqa: E402
from bench.overhead import _agent  # noqa: E402
from dormant import _otel  # noqa: E402

#: Where the request path reads the sink (the package's ``serve`` is a function).
SERVE = sys.modules["dormant._request.serve"]
CASES = {
    "off": "off: `sink()` finds no provider",
    "spans": "spans: SimpleSpanProcessor, discarding exporter",
    "metrics": "spans + metrics: MeterProvider, reader not collected",
}


class Discard(SpanExporter):
    """Takes each span and keeps only the count."""

    def __init__(self) -> None:
        self.exported = 0

    def export(self, spans: Any) -> SpanExportResult:
        self.exported += len(spans)
        return SpanExportResult.SUCCESS


def sinks(exporter: Discard) -> dict[str, Callable[[], Any]]:
    """Each case's sink, as ``dormant._otel.sink`` would return it."""
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = tracer_provider.get_tracer(_otel.SCOPE)
    meter = _otel._instruments(MeterProvider(metric_readers=[InMemoryMetricReader()]))
    spans = _otel.OtelSink(tracer, None, content=False)
    both = _otel.OtelSink(tracer, meter, content=False)
    return {"off": _otel.sink, "spans": lambda: spans, "metrics": lambda: both}


def run(rounds: int, batch: int) -> dict[str, Any]:
    """{case: {us, ratio, spans_per_turn}} over ``rounds`` of ``batch`` turns per case."""
    exporter = Discard()
    made = sinks(exporter)
    assert made["off"]() is None, "a provider is set: off would not be off"
    seen: dict[str, list[float]] = {case: [] for case in CASES}
    spans: dict[str, int] = dict.fromkeys(CASES, 0)
    cases = list(CASES)
    for number in range(rounds + 1):  # round 0 warms up (validators, caches) and is dropped
        app = dormant.App(name="bench")
        rest = app.handler.rest(agent=_agent(app, ["Three nights."] * (batch * 3 + 1), None))
        rest({"session_id": "bench", "input": {"message": "hello"}})
        shift = number % len(cases)
        for case in cases[shift:] + cases[:shift]:
            SERVE.otel_sink = made[case]
            gc.collect()
            before = exporter.exported
            start = time.perf_counter()
            for _ in range(batch):
                reply = rest({"session_id": "bench",
                              "input": {"message": "How long is my stay?"}})
            elapsed = time.perf_counter() - start
            assert reply.status == "completed", reply
            if number:
                seen[case].append(elapsed / batch * 1e6)
                spans[case] += exporter.exported - before
    SERVE.otel_sink = _otel.sink
    off = seen["off"]
    return {case: {"us": statistics.median(us),
                   "ratio": statistics.median(u / o for u, o in zip(us, off, strict=True)),
                   "spans_per_turn": spans[case] / (rounds * batch)}
            for case, us in seen.items()}


def markdown(figures: dict[str, Any], rounds: int, batch: int, smoke: bool) -> str:
    kind = "python bench/tracing.py --smoke` (one turn: not figures to quote)" if smoke \
        else "python bench/tracing.py`"
    lines = ["# Tracing: a text turn with OpenTelemetry off and on\n",
             f"One run of `{kind}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
             f"Python {platform.python_version()}: {rounds} round(s) of {batch} turn(s) per "
             f"case, interleaved in one process; µs is the median over rounds, × off the "  # noqa: RUF001
             f"median of the round-by-round ratios.\n",
             "| case | µs per text turn | × off | spans per turn |",  # noqa: RUF001
             "|---|---:|---:|---:|"]
    for case, label in CASES.items():
        f = figures[case]
        lines.append(f"| {label} | {f['us']:,.1f} | {f['ratio']:.2f}× | "  # noqa: RUF001
                     f"{f['spans_per_turn']:.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="one round of one turn")
    parser.add_argument("--rounds", type=int, default=40, help="rounds (each case per round)")
    parser.add_argument("--batch", type=int, default=50, help="turns per case per round")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--markdown", type=Path, help="also write the table to this file")
    args = parser.parse_args()
    rounds, batch = (1, 1) if args.smoke else (args.rounds, args.batch)
    figures = run(rounds, batch)
    for case in ("spans", "metrics"):
        if not figures[case]["spans_per_turn"]:
            raise SystemExit(f"{case}: no span was made: the request path did not use the sink")
    table = markdown(figures, rounds, batch, args.smoke)
    print(table)
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    if args.markdown is not None:
        args.markdown.write_text(table)


if __name__ == "__main__":
    main()
