"""SAM CLI for the tests that run it (``sam validate``, ``sam build``): CI's, or one made once.

CI's is ``.venv-deploy`` (``.ci/sam`` makes it); without it a venv holding SAM CLI is made once
under ``~/.cache`` (a lock keeps parallel runs from building it twice; a marker file tells a
finished install from an interrupted one). :func:`sam_env` is what ``sam build`` needs besides:
no telemetry, and ``python3.13`` (the layer's Makefile builds for the Lambda runtime).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: What these tests keep between runs: a sam venv made once when CI's is not there.
SAM_CACHE = Path.home() / ".cache" / "dormant-tests" / "sam"
SAM_REQUIREMENT = "aws-sam-cli>=1.130"  # pyproject.toml's deploy extra
#: pyenv's versions holding python3.13 on these machines (.ci/sam does the same).
PYENV_WITH_313 = "3.11.7:3.13.0"


def sam_cli() -> Path:
    """The ``sam`` executable: ``.venv-deploy``'s, else the cached one (made on first use)."""
    deploy = ROOT / ".venv-deploy" / "bin" / "sam"
    return deploy if deploy.exists() else _cached_sam()


def sam_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` as ``sam`` wants it: no telemetry, ``python3.13`` found (pyenv's, if needed)."""
    out = {**env, "SAM_CLI_TELEMETRY": "0"}
    try:
        found = subprocess.run(["python3.13", "--version"], env=out, capture_output=True,
                               timeout=60, check=False).returncode == 0
    except FileNotFoundError:
        found = False
    if not found:
        out["PYENV_VERSION"] = PYENV_WITH_313
    return out


def _cached_sam() -> Path:
    SAM_CACHE.parent.mkdir(parents=True, exist_ok=True)
    with (SAM_CACHE.parent / "sam.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        installed = SAM_CACHE / ".installed"
        if not installed.exists():
            for command in ([sys.executable, "-m", "venv", "--clear", str(SAM_CACHE)],
                            [str(SAM_CACHE / "bin" / "python"), "-m", "pip", "install",
                             "--quiet", SAM_REQUIREMENT]):
                done = subprocess.run(command, cwd=SAM_CACHE.parent, capture_output=True,
                                      text=True, timeout=900, env=dict(os.environ))
                assert done.returncode == 0, done.stdout + done.stderr
            installed.touch()
    return SAM_CACHE / "bin" / "sam"
