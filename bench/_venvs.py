"""Peer frameworks, pinned, each installed into a venv of its own on demand (never the project's).

A venv lives at ``~/.cache/dormant-bench/<peer>-<version>/`` (``<peer>-<version>-python3.13/``
when built from another interpreter than :data:`BASE_PYTHON`: the cold start is paired on the
template's runtime, python3.13) and is reused while its marker file (``bench-installed.json``:
what was asked for and what installed) is there. A peer's DynamoDB
persistence package is a separate, optional install: when it cannot be installed beside the
pinned framework, the marker says why and the DynamoDB rows say so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

CACHE = Path(os.environ.get("DORMANT_BENCH_CACHE", Path.home() / ".cache" / "dormant-bench"))
MARKER = "bench-installed.json"
#: A peer's venv is built from this interpreter (the peers support the project's Python).
BASE_PYTHON = os.environ.get("DORMANT_BENCH_PYTHON", "python3.11")


@dataclass(frozen=True)
class Peer:
    """One peer framework: its PyPI distribution pinned, and the extras its scenarios use."""

    key: str
    name: str
    distribution: str
    version: str
    #: Installed with the framework (test models, the SQLite persistence...).
    extras: tuple[str, ...] = ()
    #: The peer's DynamoDB-backed persistence (from its own ecosystem), installed separately.
    dynamodb: tuple[str, ...] = ()
    #: Why the peer has no DynamoDB persistence, when that is known before installing.
    no_dynamodb: str = ""

    @property
    def pin(self) -> str:
        return f"{self.distribution}=={self.version}"

    @property
    def venv(self) -> Path:
        return self.venv_on(BASE_PYTHON)

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def venv_on(self, python: str) -> Path:
        """The peer's venv built from the interpreter ``python`` (a name on PATH)."""
        return CACHE / f"{self.key}-{self.version}{_suffix(python)}"


def _suffix(python: str) -> str:
    """Nothing for :data:`BASE_PYTHON` (its venvs keep the names they always had), else the
    interpreter's name."""
    return "" if python == BASE_PYTHON else f"-{Path(python).name}"


PEERS: dict[str, Peer] = {p.key: p for p in (
    Peer("strands", "Strands Agents", "strands-agents", "1.62.0",
         dynamodb=("strands-dynamodb-session-manager==0.2.0",)),
    Peer("langgraph", "LangGraph", "langgraph", "1.2.24",
         extras=("langchain-core", "langgraph-checkpoint-sqlite"),
         dynamodb=("langgraph-checkpoint-aws==1.2.6",)),
    Peer("openai_agents", "OpenAI Agents SDK", "openai-agents", "0.24.0",
         dynamodb=("openai-agents-session==0.1.0", "aiobotocore")),
    Peer("pydantic_ai", "Pydantic AI", "pydantic-ai-slim", "2.62.0",
         dynamodb=("pya-memory==0.0.1",),
         no_dynamodb="none of its own; pya-memory 0.0.1, the one DynamoDB message store for "
                     "it on PyPI, needs pydantic-ai-slim 1.x"),
    Peer("adk", "Google ADK", "google-adk", "2.13.0",
         extras=("google-adk[db]==2.13.0", "aiosqlite"),
         dynamodb=("adk-dynamodb-session==0.0.5",)),
)}

#: The harness's own venv (matplotlib for the chart), beside the peers'.
CHART_VENV = CACHE / "chart-matplotlib-3.11"
CHART_PIN = "matplotlib==3.11.2"


def _pip(python: Path, *args: str, log: Path) -> subprocess.CompletedProcess[str]:
    with log.open("a") as out:
        out.write(f"\n$ pip {' '.join(args)}\n")
        out.flush()
        return subprocess.run([str(python), "-m", "pip", "install", "--quiet",
                               "--disable-pip-version-check", *args],
                              stdout=out, stderr=subprocess.STDOUT, text=True, check=False)


def _make_venv(path: Path, python: str = BASE_PYTHON) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([runnable(python), "-m", "venv", str(path)], check=True)
    return path / "bin" / "python"


def runnable(python: str) -> str:
    """The interpreter ``python`` names, as something to run: the name itself when it runs,
    else the newest pyenv install of it (a pyenv shim runs only the versions the shell has
    selected: ``python3.13`` fails where only 3.11 is, though 3.13 is installed)."""
    if shutil.which(python) and subprocess.run([python, "-c", "pass"],
                                               capture_output=True).returncode == 0:
        return python
    installs = sorted(Path.home().glob(f".pyenv/versions/*/bin/{Path(python).name}"),
                      key=lambda found: [int(part) if part.isdigit() else 0 for part in
                                         found.parents[1].name.split(".")])
    if not installs:
        raise RuntimeError(f"{python}: not on PATH and not installed with pyenv")
    return str(installs[-1])


def marker(peer: Peer, python: str = BASE_PYTHON) -> dict[str, object] | None:
    """What the peer's venv holds, or None when it is not installed."""
    path = peer.venv_on(python) / MARKER
    return json.loads(path.read_text()) if path.exists() else None


def ensure_peer(peer: Peer, python: str = BASE_PYTHON) -> dict[str, object]:
    """The peer's venv (built from the interpreter ``python``), installed when missing.
    Returns its marker (``ok`` False: why not)."""
    found = marker(peer, python)
    if found is not None:
        return found
    venv = peer.venv_on(python)
    log = venv.parent / f"{venv.name}.log"
    started = time.perf_counter()
    made = _make_venv(venv, python)
    log.write_text("")
    result: dict[str, object] = {"peer": peer.key, "pin": peer.pin}
    core = _pip(made, peer.pin, *peer.extras, "boto3", log=log)
    if core.returncode != 0:
        result.update(ok=False, why=f"pip install {peer.pin} failed (see {log})")
    else:
        result["ok"] = True
        extra = _pip(made, *peer.dynamodb, peer.pin, log=log) if peer.dynamodb else None
        if extra is None:
            result["dynamodb"] = None
        elif extra.returncode == 0:
            result["dynamodb"] = list(peer.dynamodb)
        else:
            result["dynamodb"] = None
            result["dynamodb_why"] = (f"{', '.join(peer.dynamodb)} does not install beside "
                                      f"{peer.pin}")
    result["seconds"] = round(time.perf_counter() - started, 1)
    (venv / MARKER).write_text(json.dumps(result, indent=1))
    return result


#: What the Lambda layer installs (layers/dormant/Makefile), pinned as it pins them.
LAYER = Path(__file__).resolve().parent.parent / "layers" / "dormant"


def ensure_layer_venv(python: str) -> Path:
    """A venv built from the interpreter ``python`` holding what a deployed function imports
    besides ``dormant`` itself (which the cold start puts on the path as the layer ships it):
    the layer's requirements pinned by its constraints, the X-Ray SDK's layer (with boto3 and
    botocore, as the Lambda runtime has them) and ``snapshot_restore_py`` (the runtime's hook
    registry). Rebuilt when those requirements change. Returns its interpreter."""
    venv = CACHE / f"dormant-layer-{Path(python).name}"
    xray = LAYER.parent / "xray" / "requirements.txt"
    asked = {"requirements": (LAYER / "requirements.txt").read_text(),
             "constraints": (LAYER / "constraints.txt").read_text(), "xray": xray.read_text()}
    path = venv / MARKER
    if path.exists() and json.loads(path.read_text()) == asked:
        return venv / "bin" / "python"
    log = venv.parent / f"{venv.name}.log"
    made = _make_venv(venv, python)
    log.write_text("")
    if _pip(made, "-r", str(LAYER / "requirements.txt"), "-c", str(LAYER / "constraints.txt"),
            "-r", str(xray), "snapshot-restore-py", log=log).returncode != 0:
        raise RuntimeError(f"could not install the layer's requirements (see {log})")
    path.write_text(json.dumps(asked))
    return made


def ensure_chart_venv() -> Path:
    python = CHART_VENV / "bin" / "python"
    if (CHART_VENV / MARKER).exists():
        return python
    log = CHART_VENV.parent / f"{CHART_VENV.name}.log"
    python = _make_venv(CHART_VENV)
    log.write_text("")
    if _pip(python, CHART_PIN, log=log).returncode != 0:
        raise RuntimeError(f"could not install {CHART_PIN} (see {log})")
    (CHART_VENV / MARKER).write_text(json.dumps({"pin": CHART_PIN}))
    return python


if __name__ == "__main__":
    for key in sys.argv[1:] or list(PEERS):
        print(key, ensure_peer(PEERS[key]), flush=True)
