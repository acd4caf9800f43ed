"""A ``dormant dev`` process for tests that start the command themselves (an installed copy,
an app file): started, read up to its start-up line, killed at the end."""

from __future__ import annotations

import re
import subprocess
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests._timing import scaled

#: Seconds a start may take before the test fails (rather than hangs), before ``scaled``.
STARTUP_TIMEOUT = 30.0
READY = re.compile(r"^dormant dev: serving \S+ on (http://\S+) ")


@contextmanager
def dev_process(command: Sequence[str], *, cwd: Path, env: Mapping[str, str],
                log: Path) -> Iterator[tuple[subprocess.Popen[str], str, str]]:
    """Run ``command`` (a ``dormant dev``) in ``cwd``, stderr to ``log``; yields the process,
    its start-up line and the URL it serves on."""
    with log.open("w") as stderr:
        proc = subprocess.Popen(list(command), cwd=cwd, env=dict(env), text=True,
                                stdout=subprocess.PIPE, stderr=stderr)
    # A silent start fails, not hangs.
    watchdog = threading.Timer(scaled(STARTUP_TIMEOUT), proc.kill)
    watchdog.start()
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        watchdog.cancel()
        ready = READY.match(line)
        assert ready, f"dormant dev did not start: {line!r}\n{log.read_text()}"
        yield proc, line, ready.group(1)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def one_dormant_line(done: subprocess.CompletedProcess[str]) -> str:
    """The one ``dormant:`` line a refused command printed (asserting it is one, exit 2,
    nothing on stdout)."""
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("dormant: ") and done.stderr.count("\n") == 1, done.stderr
    assert done.stdout == ""
    return done.stderr
