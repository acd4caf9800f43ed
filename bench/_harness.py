"""Runs every scenario for dormant, the floor and each peer, each in a fresh subprocess.

A scenario script (``bench/peers/<framework>.py``) runs in its framework's interpreter: the
project's venv for dormant and the floor, the peer's own venv otherwise. The DynamoDB and
contention scenarios each get a fresh counting moto server (``bench._moto``).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import _venvs
from bench._moto import MotoServer

ROOT = Path(__file__).resolve().parent.parent
PEERS_DIR = ROOT / "bench" / "peers"
PREFIX = "BENCH-JSON "
DORMANT, FLOOR = "dormant", "floor"

Result = dict[str, Any]
#: results[scenario][framework] = {"figures": {...}} or {"unsupported": "why, one line"}
Results = dict[str, dict[str, Result]]


@dataclass(frozen=True)
class Plan:
    """How much of each scenario to run: the full run, or ``--smoke``'s one iteration."""

    smoke: bool = False
    #: Turns per sample and samples (the median is reported) of the text, tool and pause
    #: scenarios; the slowest peers take tens of ms a turn, so the whole run stays < 15 min.
    turns: int = 100
    repeats: int = 5
    growth_turns: int = 30
    growth_repeats: int = 3
    histories: tuple[int, ...] = (1, 100, 1000)
    #: Turns per sample and samples of the SQLite scenario (one seeded session takes them all:
    #: the floor reads its whole history back each turn, so more turns would slow its figure).
    sqlite_turns: int = 10
    sqlite_repeats: int = 5
    sqlite_histories: tuple[int, ...] = (1, 1000)
    cold_runs: int = 5
    checkpoints: tuple[int, ...] = (10, 500)
    samples: int = 3
    contenders: int = 8
    timeout: float = 600.0

    @classmethod
    def for_run(cls, smoke: bool) -> Plan:
        if not smoke:
            return cls()
        return cls(smoke=True, turns=1, repeats=1, growth_turns=1, growth_repeats=1,
                   histories=(1, 100, 1000), sqlite_turns=1, sqlite_repeats=1,
                   sqlite_histories=(1, 1000),
                   cold_runs=1, checkpoints=(2,), samples=1, contenders=2, timeout=60.0)

    def params(self, scenario: str) -> dict[str, Any]:
        if scenario in ("text", "tool", "pause"):
            return {"turns": self.turns, "repeats": self.repeats}
        if scenario == "growth":
            return {"turns": self.growth_turns, "repeats": self.growth_repeats,
                    "histories": list(self.histories)}
        if scenario == "sqlite":
            return {"turns": self.sqlite_turns, "repeats": self.sqlite_repeats,
                    "histories": list(self.sqlite_histories)}
        if scenario == "dynamodb":
            return {"checkpoints": list(self.checkpoints), "samples": self.samples}
        if scenario == "contention":
            return {"n": self.contenders}
        return {}


@dataclass
class Framework:
    key: str
    name: str
    version: str
    python: Path
    #: Why the framework cannot run at all (its venv did not install), else None.
    missing: str | None = None
    #: Why its DynamoDB persistence package is not there, else None.
    no_dynamodb: str | None = None
    install: dict[str, Any] = field(default_factory=dict)


def frameworks(peers: list[str], install: bool, log: Callable[[str], None]) -> list[Framework]:
    """dormant, the floor, then each peer (installed on demand when ``install``)."""
    import dormant

    project = Path(sys.executable)
    found = [Framework(DORMANT, "dormant", dormant.__version__, project),
             Framework(FLOOR, "floor (hand-rolled ledger)", "-", project)]
    for key in peers:
        peer = _venvs.PEERS[key]
        marker = _venvs.marker(peer)
        if marker is None and install:
            log(f"installing {peer.pin} into {peer.venv} ...")
            marker = _venvs.ensure_peer(peer)
            log(f"  {peer.pin}: {marker.get('seconds')} s")
        framework = Framework(key, peer.name, peer.version, peer.python)
        if marker is None:
            framework.missing = f"not installed ({peer.pin}; run without --no-install)"
        elif not marker.get("ok"):
            framework.missing = str(marker.get("why"))
        else:
            framework.install = marker
            if not marker.get("dynamodb"):
                framework.no_dynamodb = (peer.no_dynamodb or str(marker.get("dynamodb_why"))
                                         or "none in its ecosystem")
        found.append(framework)
    return found


def run_script(framework: Framework, scenario: str, params: dict[str, Any],
               env: dict[str, str] | None = None, timeout: float = 600.0) -> Result:
    """One scenario in a fresh process of the framework's interpreter."""
    if framework.missing:
        return {"unsupported": framework.missing}
    script = PEERS_DIR / f"{framework.key}.py"
    child_env = {**os.environ, **(env or {}), "PYTHONHASHSEED": "0"}
    child_env.pop("PYTHONPATH", None)
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY"):
        child_env.pop(name, None)  # fake models only: nothing may reach a real provider
    try:
        done = subprocess.run([str(framework.python), str(script), scenario, json.dumps(params)],
                              capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                              env=child_env)
    except subprocess.TimeoutExpired:
        return {"unsupported": f"failed: did not finish within {timeout:.0f} s"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(PREFIX):
            result: Result = json.loads(line[len(PREFIX):])
            return result
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return {"unsupported": f"failed: {tail[:200]}"}


def _wall(python: Path, args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([str(python), *args], check=True, cwd=ROOT, capture_output=True,
                   env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    return time.perf_counter() - start


def cold_start(framework: Framework, runs: int) -> Result:
    """Fresh process: import + build the agent + first turn, ms; the same script doing nothing
    (interpreter and script start-up) subtracted."""
    if framework.missing:
        return {"unsupported": framework.missing}
    script = str(PEERS_DIR / f"{framework.key}.py")
    probe = run_script(framework, "coldstart", {})
    if "unsupported" in probe:
        return probe
    cold, idle = [], []
    for _ in range(runs):
        cold.append(_wall(framework.python, [script, "coldstart", "{}"]))
        idle.append(_wall(framework.python, [script, "noop", "{}"]))
    return {"figures": {"ms": (statistics.median(cold) - statistics.median(idle)) * 1000}}


#: The interpreter the cold-start rows run on (template.yaml's runtime).
COLD_START_PYTHON = "python3.13"


def dormant_cold_start(smoke: bool, layer: bool) -> dict[str, float]:
    """``bench/coldstart.py --json``: the Lambda function rows (and the layer with ``layer``)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "coldstart.json"
        args = [sys.executable, str(ROOT / "bench" / "coldstart.py"), "--json", str(out)]
        # On the template's runtime, as the functions run on Lambda; a smoke run keeps to this
        # interpreter (no venv to build in CI).
        args += ["--smoke"] if smoke else ["--python", COLD_START_PYTHON]
        args += ["--layer"] if layer else []
        done = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=900)
        if done.returncode or not out.exists():
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            return {"error": 0.0, f"bench/coldstart.py failed: {tail[:150]}": 0.0}
        figures: dict[str, float] = json.loads(out.read_text())
        return figures


def with_moto(framework: Framework, scenario: str, params: dict[str, Any],
              timeout: float) -> Result:
    """A scenario against a fresh counting moto server of its own."""
    if framework.missing:
        return {"unsupported": framework.missing}
    with MotoServer() as server:
        return run_script(framework, scenario, params, env=server.env(), timeout=timeout)
