"""A peer's Lambda layer size, the way ``sam build`` would make it for python3.13 x86_64: pip
installs the requirements as manylinux wheels for CPython 3.13 into a folder (``--target``),
and the size is what that folder takes on disk (MiB). A peer's figure is its pinned
distribution and what it depends on; it is cached per pin (it only changes with the pin).
dormant's own figure comes from its layer's recipe (``bench/coldstart.py --layer``), which
carries both architectures' compiled modules: a few MB more than one architecture's."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench._venvs import CACHE

CACHED = CACHE / "layers.json"


def _size(folder: Path) -> float:
    return sum(f.lstat().st_blocks for f in folder.rglob("*")) * 512 / 2**20


def layer_mb(requirements: list[str], extra: Path | None = None) -> float:
    """MiB of ``pip install --target`` of ``requirements`` (and ``extra`` copied in)."""
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "python"
        pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",
                              "--disable-pip-version-check", "--target", str(target),
                              "--platform", "manylinux2014_x86_64", "--implementation", "cp",
                              "--python-version", "3.13", "--only-binary=:all:",
                              *requirements], capture_output=True, text=True)
        if pip.returncode:
            tail = (pip.stderr.strip().splitlines() or ["?"])[-1]
            raise RuntimeError(f"pip could not build the layer: {tail[:200]}")
        if extra is not None:
            shutil.copytree(extra, target / extra.name,
                            ignore=shutil.ignore_patterns("__pycache__"))
        return _size(target)


def peer_layer_mb(pin: str) -> float:
    """A peer's layer size, measured once per pin."""
    cached: dict[str, float] = json.loads(CACHED.read_text()) if CACHED.exists() else {}
    if pin not in cached:
        cached[pin] = round(layer_mb([pin]), 1)
        CACHED.parent.mkdir(parents=True, exist_ok=True)
        CACHED.write_text(json.dumps(cached, indent=1))
    return cached[pin]
