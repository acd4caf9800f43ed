"""Timeouts for fixtures that wait on other processes, stretched on a loaded machine.

A fixture's timeout guards against a hang, not a slow machine: a server that takes 40 s to
start on a 2-core machine running two test workers and a build is not broken. ``scaled``
multiplies a base timeout by the load average per core (when above 1) and by
``DORMANT_TEST_TIMEOUT_SCALE`` (default 1), both read when it is called.
"""

from __future__ import annotations

import os

__all__ = ["SCALE_ENV", "scaled"]

#: A further factor for every fixture timeout (a slow emulator, a debugger attached).
SCALE_ENV = "DORMANT_TEST_TIMEOUT_SCALE"


def _load_per_core() -> float:
    try:
        load = os.getloadavg()[0]
    except OSError:  # not available on this platform
        return 1.0
    return load / (os.cpu_count() or 1)


def scaled(seconds: float) -> float:
    """``seconds`` stretched by the machine's load (per core, when above 1) and the
    ``DORMANT_TEST_TIMEOUT_SCALE`` factor."""
    try:
        factor = float(os.environ.get(SCALE_ENV) or 1)
    except ValueError:
        raise ValueError(f"{SCALE_ENV} must be a number, not {os.environ[SCALE_ENV]!r}") from None
    return seconds * max(1.0, factor) * max(1.0, _load_per_core())
