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

The timing recorder (``dormant._timing.Recorder``: the phases, model calls and tools an
ending event's ``timing`` keeps, and what feeds the spans) runs in every case, "off"
included: it cannot be turned off. Its own cost is measured inside the "off" turns: every
method of its four classes timed as it is called (the outermost call only), less what the
timing itself adds (calibrated on an empty method), per turn and as a share of the turn.

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


#: The recorder's classes, whose every method is timed by :func:`recorder_cost`.
RECORDER_CLASSES = ("Recorder", "Phase", "CallRecorder", "ToolRecorder")


def recorder_cost(rounds: int, batch: int) -> dict[str, float]:
    """µs per "off" text turn spent in the recorder's methods, and the turn's µs (medians
    over rounds)."""
    timing = sys.modules["dormant._timing"]
    spent = [0.0]
    calls = [0]
    depth = [0]

    def timed(method: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if depth[0]:
                return method(*args, **kwargs)
            depth[0] = 1
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - start
                calls[0] += 1
                depth[0] = 0
        return wrapper

    # What timing one call adds (the wrapper itself), from an empty method timed alike.
    empty = timed(lambda: None)
    start = time.perf_counter()
    for _ in range(10_000):
        empty()
    per_call = (time.perf_counter() - start) / 10_000
    spent[0] = calls[0] = 0
    originals = {}
    for name in RECORDER_CLASSES:
        cls = getattr(timing, name)
        for attribute, value in list(vars(cls).items()):
            if (callable(value) and not attribute.startswith("__")) or attribute in (
                    "__init__", "__enter__", "__exit__"):
                originals[(cls, attribute)] = value
                setattr(cls, attribute, timed(value))
    inside: list[float] = []
    turns: list[float] = []
    try:
        for number in range(rounds + 1):
            app = dormant.App(name="bench")
            rest = app.handler.rest(agent=_agent(app, ["Three nights."] * (batch + 1), None))
            rest({"session_id": "bench", "input": {"message": "hello"}})
            gc.collect()
            spent[0] = calls[0] = 0
            start = time.perf_counter()
            for _ in range(batch):
                rest({"session_id": "bench", "input": {"message": "How long is my stay?"}})
            elapsed = time.perf_counter() - start
            if number:
                own = max(spent[0] - calls[0] * per_call, 0.0)
                inside.append(own / batch * 1e6)
                turns.append((elapsed - calls[0] * per_call) / batch * 1e6)
    finally:
        for (cls, attribute), value in originals.items():
            setattr(cls, attribute, value)
    us, turn = statistics.median(inside), statistics.median(turns)
    return {"us": us, "turn_us": turn, "share": us / turn if turn else 0.0}


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
    recorder = figures["recorder"]
    lines += ["", "The timing recorder, always on (in every case above): "
              f"{recorder['us']:,.1f} µs of an \"off\" turn's {recorder['turn_us']:,.1f} "
              f"({recorder['share']:.1%}), in its own methods."]
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
    figures["recorder"] = recorder_cost(rounds, batch)
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
