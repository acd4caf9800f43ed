"""python -m bench: dormant side by side with its peers, in one run.

    python -m bench all            # every scenario, every peer (installed on demand), tables,
                                   # headline and chart in bench/results/
    python -m bench all --smoke    # dormant and the floor only, one iteration, no installs,
                                   # no chart, written to a temporary folder (CI)
    python -m bench text           # one scenario (its table only)
    python -m bench install        # only install the peers' venvs

Each peer runs in its own venv under ~/.cache/dormant-bench/ (never the project's), its
scenario script in bench/peers/<peer>.py, with a fake instant model: no network, no key.
Every figure is a median, shown with its ratio to dormant's figure in the same run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench import _harness, _report, _venvs
from bench._harness import DORMANT, FLOOR, Framework, Plan, Results
from bench._report import Column

RESULTS = _harness.ROOT / "bench" / "results"

#: name, what it measures (for --help and each table's heading).
SCENARIOS: dict[str, str] = {
    "text": "text turn: a message in, the model answers (µs per turn, history 1)",
    "tool": "tool turn: the model calls a tool, reads its result, answers (µs per turn)",
    "pause": "pause and resume with each framework's own human-in-the-loop mechanism "
             "(µs per pause + resume, two requests)",
    "growth": "growth to history 1,000: µs per text turn at history 1, 100 and 1,000, the "
              "full history sent to the model, which reads all of it (in-memory persistence)",
    "sqlite": "the same on each framework's SQLite persistence (µs per turn at history 1 and "
              "1,000)",
    "coldstart": "cold start: a fresh process imports the framework, builds the agent and "
                 "serves a first turn (ms)",
    "dynamodb": "DynamoDB: each framework's own DynamoDB persistence on a moto server, "
                "requests, write units, read units and read bytes per text turn at turns 10 "
                "and 500",
    "contention": "contention: 8 concurrent turns on one session through each framework's "
                  "persistence: committed / refused / lost / written twice",
    "layer": "Lambda layer MB: pip install --target for python3.13 x86_64, then du",
}


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def _names(found: list[Framework]) -> dict[str, str]:
    return {f.key: (f.name if f.key == FLOOR else f"{f.name} {f.version}") for f in found}


def run_scenario(name: str, found: list[Framework], plan: Plan,
                 extra: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """One scenario for every framework: {framework: result}."""
    if name in PARALLEL:
        # Only counts come out of these (no timings): frameworks run side by side, each
        # against its own moto server, to keep the whole run short on two cores.
        with ThreadPoolExecutor(max_workers=PARALLEL[name]) as pool:
            done = list(pool.map(lambda f: _one(name, f, plan, extra), found))
        return {f.key: result for f, result in zip(found, done, strict=True)}
    return {f.key: _one(name, f, plan, extra) for f in found}


#: Scenarios whose frameworks run side by side, and how many at once.
PARALLEL = {"dynamodb": 3, "contention": 2}


def _one(name: str, framework: Framework, plan: Plan, extra: dict[str, Any]) -> dict[str, Any]:
    """One framework's run of a scenario (logged as it ends)."""
    started = time.perf_counter()
    result: dict[str, Any]
    if name == "coldstart":
        result = _harness.cold_start(framework, plan.cold_runs)
    elif name in ("dynamodb", "contention") and framework.no_dynamodb:
        result = {"unsupported": f"DynamoDB persistence: {framework.no_dynamodb}"}
    elif name in ("dynamodb", "contention"):
        result = _harness.with_moto(framework, name, plan.params(name), plan.timeout)
    elif name == "layer":
        result = _layer(framework, plan, extra)
    else:
        result = _harness.run_script(framework, name, plan.params(name), timeout=plan.timeout)
    shown = result.get("unsupported") or "ok"
    _log(f"  {name:<10} {framework.key:<14} {time.perf_counter() - started:6.1f} s  "
         f"{str(shown)[:90]}")
    if name == "coldstart" and framework.key == DORMANT:
        _log("  coldstart  dormant's Lambda function rows (bench/coldstart.py --json) ...")
        extra["coldstart"] = _harness.dormant_cold_start(plan.smoke, layer=not plan.smoke)
    return result


def _layer(framework: Framework, plan: Plan, extra: dict[str, Any]) -> dict[str, Any]:
    from bench import _layer

    if plan.smoke:
        return {"unsupported": "not measured by --smoke (pip downloads the wheels)"}
    if framework.key == FLOOR:
        return {"unsupported": "the floor is not a package"}
    if framework.key == DORMANT:
        mb = extra.get("coldstart", {}).get("layer_mb")
        if mb is None:
            return {"unsupported": "bench/coldstart.py --layer gave no layer_mb"}
        return {"figures": {"mb": mb, "what": "layers/dormant/requirements.txt + dormant "
                                        "(x86_64 and arm64 modules: one layer serves both)"}}
    if framework.missing:
        return {"unsupported": framework.missing}
    try:
        pin = _venvs.PEERS[framework.key].pin
        return {"figures": {"mb": _layer.peer_layer_mb(pin), "what": pin}}
    except RuntimeError as error:
        return {"unsupported": str(error)}


# --- the tables ----------------------------------------------------------------------------


def _dormant_lambda(extra: dict[str, Any]) -> dict[str, float | None]:
    """dormant's Lambda function rows of bench/coldstart.py, by the headline's names."""
    rows: dict[str, float] = extra.get("coldstart", {})

    def first(*needles: str) -> float | None:
        for name, value in rows.items():
            if all(n in name for n in needles):
                return float(value)
        return None

    return {"api": first("api:", "first turn"),
            "api_deployed_read": first("api, deployed:", "first GET"),
            "api_deployed": first("api, deployed:", "first turn"),
            "api_vs_floor": first("api ÷ floor (paired)"),
            "api_vs_strands": first("api ÷ Strands (paired)"),
            "stream_vs_floor": first("stream ÷ floor (paired)"),
            "stream_vs_strands": first("stream ÷ Strands (paired)")}


def tables(results: Results, names: dict[str, str], plan: Plan,
           extra: dict[str, Any], found: list[Framework]) -> dict[str, str]:
    """{file stem: markdown} for every scenario that ran, and the headline when all did."""
    us = [Column("µs per turn", ("us_per_turn",))]
    columns: dict[str, tuple[list[Column], list[str], bool]] = {
        "text": (us, [], True),
        "tool": (us, [], True),
        "pause": ([Column("µs per pause + resume", ("us_per_turn",))], ["mechanism"], True),
        "growth": ([Column(f"history {h:,}", (str(h),)) for h in plan.histories],
                   ["persistence"], True),
        "sqlite": ([Column(f"history {h:,}", (str(h),)) for h in plan.sqlite_histories],
                   ["persistence"], True),
        "coldstart": ([Column("ms", ("ms",))], [], True),
        "dynamodb": ([Column(f"turn {t}: {label}", ("turns", str(t), key))
                      for t in plan.checkpoints
                      for label, key in (("requests", "requests"), ("write units",
                                         "write_units"), ("read units", "read_units"),
                                         ("read bytes", "read_bytes"))],
                     ["persistence"], True),
        "contention": ([Column(c, (c,)) for c in ("committed", "refused", "lost", "failed",
                                                  "duplicated")],
                       ["persistence", "errors"], False),
        "layer": ([Column("MB", ("mb",))], ["what"], True),
    }
    out = {}
    for name, by_framework in results.items():
        if not by_framework:
            continue
        cols, notes, ratios = columns[name]
        text = f"# {SCENARIOS[name]}\n\n{_preamble(plan)}\n\n"
        text += _report.scenario_table(results, name, names, cols, notes, ratios)
        if name == "coldstart":
            text += _coldstart_notes(extra, plan.smoke)
        if name == "contention":
            text += ("\nEach of the N turns runs in its own agent and store client (N Lambdas) "
                     "behind a barrier; the fake model takes 50 ms, the window in which they "
                     "overlap. committed: the turn said it committed and its message is "
                     "stored; refused: the framework turned it away and said so; lost: it said "
                     "it committed, but its message is not stored; failed: an error; "
                     "duplicated: a message stored more than once.\n")
        out[name] = text
    if set(results) >= set(SCENARIOS):
        rows = _report.headline_rows(results, names, _dormant_lambda(extra))
        out["headline"] = ("# Headline: dormant against its targets\n\n"
                           f"{_preamble(plan)}\n\n" + _report.headline_table(rows)
                           + HEADLINE_NOTES + _versions(names, extra, found))
    return out


HEADLINE_NOTES = """
- The four cold-start rows are ratios taken pair by pair on python3.13, the template's
  runtime (`bench/coldstart.py --python python3.13`, its rows run in turn, one fresh process
  each per round): dormant's `api` Lambda function (`functions/api/app.py`: Powertools, the
  DynamoDB client, the resolver, the sample app) importing and serving a first `POST /turns`
  against a moto server, and its `stream` function (`dormant.aws.stream`, as the response
  streaming runtime loads it) importing and streaming a first `POST /turns`, each over the
  same round's bare `python -c "import boto3, pydantic"` (interpreter start-up subtracted
  from both), and over the same round's Strands Agents import, agent and first turn on a
  fake model (its script doing nothing subtracted). The absolute figures: coldstart.md.
- The text, tool and SQLite rows' target is a multiple of the floor's figure in the same
  run.
- The DynamoDB rows are the last checkpoint of dynamodb.md (turn 500 in a full run), on each
  framework's own DynamoDB persistence; write units per DynamoDB's rules (bench/_capacity.py).
- Lowest is best everywhere; "fastest peer" is the lowest peer figure.
"""


def _preamble(plan: Plan) -> str:
    when = extra_when()
    kind = "`python -m bench all --smoke` (one iteration: not figures to quote)" \
        if plan.smoke else "`python -m bench all`"
    return (f"One run of {kind}, {when}, on {os.cpu_count()} cores, Python "
            f"{platform.python_version()}. Every figure is a median; × dormant is the figure "  # noqa: RUF001
            f"divided by dormant's in the same run. Fake instant models, no network.")


_STARTED = datetime.datetime.now(datetime.UTC)


def extra_when() -> str:
    return _STARTED.strftime("%Y-%m-%d %H:%M UTC")


def _coldstart_notes(extra: dict[str, Any], smoke: bool) -> str:
    rows = extra.get("coldstart", {})
    on = f"Python {platform.python_version()}" if smoke else _harness.COLD_START_PYTHON
    lines = ["", f"dormant's Lambda functions on {on} (`bench/coldstart.py --json`, same run: "
             "each function's handler module imported as Lambda does and a first request "
             "served against a moto server):", ""]
    lines.append(_report.table(["row", "ms"],
                               [[k, _report.fmt(float(v))] for k, v in rows.items()
                                if k != "layer_mb"]))
    return "\n".join(lines)


def _versions(names: dict[str, str], extra: dict[str, Any],
              found: list[Framework]) -> str:
    lines = ["", "Frameworks: " + ", ".join(v for k, v in names.items() if k != FLOOR) + "."]
    persistence = [p for f in found for p in (f.install.get("dynamodb") or [])]
    if persistence:
        lines.append("Peers' DynamoDB persistence: " + ", ".join(persistence) + ".")
    if extra.get("run_seconds"):
        lines.append(f"Run time: {extra['run_seconds']:.0f} s (peer venv installs: "
                     f"{extra.get('install_seconds', 0):.0f} s, not included).")
    return "\n".join(lines) + "\n"


def write(out: Path, results: Results, found: list[Framework], plan: Plan,
          extra: dict[str, Any]) -> list[Path]:
    names = _names(found)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for stem, text in tables(results, names, plan, extra, found).items():
        path = out / f"{stem}.md"
        path.write_text(text)
        written.append(path)
    raw = out / "results.json"
    raw.write_text(json.dumps({"names": names, "order": list(names), "results": results,
                               "extra": extra}, indent=1, sort_keys=True) + "\n")
    written.append(raw)
    return written


def chart(out: Path) -> Path:
    python = _venvs.ensure_chart_venv()
    png = out / "chart.png"
    subprocess.run([str(python), str(_harness.ROOT / "bench" / "_chart.py"),
                    str(out / "results.json"), str(png)], check=True)
    return png


# --- the command line ----------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=(__doc__ or "").splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="scenarios:\n" + "\n".join(f"  {k:<11} {v}" for k, v in SCENARIOS.items()))
    parser.add_argument("command", choices=["all", "install", *SCENARIOS],
                        help="all: every scenario; install: the peers' venvs only; or one "
                             "scenario")
    parser.add_argument("--smoke", action="store_true",
                        help="dormant and the floor only, one iteration, no installs, no "
                             "chart, into a temporary folder")
    parser.add_argument("--out", type=Path, help="where the tables go (default bench/results, "
                                                 "or a temporary folder with --smoke)")
    parser.add_argument("--peers", default=",".join(_venvs.PEERS),
                        help=f"comma-separated subset of {','.join(_venvs.PEERS)}")
    parser.add_argument("--no-install", action="store_true",
                        help="skip peers whose venv is not installed yet")
    parser.add_argument("--no-chart", action="store_true", help="no chart.png")
    args = parser.parse_args(argv)
    return run(args)


def run(args: argparse.Namespace) -> int:
    plan = Plan.for_run(args.smoke)
    peers = [] if args.smoke else [p for p in args.peers.split(",") if p]
    unknown = set(peers) - set(_venvs.PEERS)
    if unknown:
        raise SystemExit(f"unknown peers: {', '.join(sorted(unknown))}")
    out = args.out or (Path(tempfile.mkdtemp(prefix="dormant-bench-")) if args.smoke
                       else RESULTS)
    started = time.perf_counter()
    found = _harness.frameworks(peers, install=not (args.no_install or args.smoke), log=_log)
    install_seconds = time.perf_counter() - started
    _log(f"venvs ready in {install_seconds:.1f} s: "
         + ", ".join(f"{f.key} {f.version}" + (f" (missing: {f.missing})" if f.missing else "")
                     for f in found))
    if args.command == "install":
        return 0
    extra: dict[str, Any] = {"install_seconds": install_seconds}
    chosen = list(SCENARIOS) if args.command == "all" else [args.command]
    if "layer" in chosen and "coldstart" not in chosen and not plan.smoke:
        extra["coldstart"] = _harness.dormant_cold_start(False, layer=True)
    results: Results = {}
    measuring = time.perf_counter()
    for name in chosen:
        _log(f"{name}: {SCENARIOS[name]}")
        results[name] = run_scenario(name, found, plan, extra)
    extra["run_seconds"] = time.perf_counter() - measuring
    written = write(out, results, found, plan, extra)
    if not (args.smoke or args.no_chart) and args.command == "all":
        written.append(chart(out))
    _log(f"measured in {extra['run_seconds']:.0f} s (venv installs {install_seconds:.0f} s, "
         "not included); wrote " + ", ".join(str(p) for p in written))
    headline = out / "headline.md"
    if headline.exists():
        print(headline.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
