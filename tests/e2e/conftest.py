"""``dormant dev`` as a real subprocess: start it, restart it, stop it."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from tests._timing import scaled

ROOT = Path(__file__).resolve().parents[2]
BOOKINGS = "dormant.samples.bookings:build"
GATED = Path(__file__).with_name("gated_app.py")
FRONTEND = Path(__file__).with_name("frontend_app.py")
STARTUP_TIMEOUT = 30.0
JS = Path(__file__).with_name("js")
_READY = re.compile(r"^dormant dev: serving \S+ on (http://\S+) ")


class DevServer:
    """One ``dormant dev`` process on a SQLite file; ``restart()`` keeps the file and port."""

    def __init__(self, db: Path, app: Path | str = BOOKINGS, *, env: dict[str, str] | None = None,
                 log: Path | None = None, args: tuple[str, ...] = ()) -> None:
        self.db = db
        self.app = app
        self.args = args
        self.env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
        self.env.update(env or {})
        self.log = log or db.with_suffix(".log")
        self.port = 0  # the first start picks a free port; restarts reuse it
        self.url = ""
        self.startup_line = ""
        self._proc: subprocess.Popen[str] | None = None

    def start(self) -> DevServer:
        command = [sys.executable, "-m", "dormant.cli", "dev", "--host", "127.0.0.1",
                   "--port", str(self.port), "--db", str(self.db), "--app", str(self.app),
                   "--quiet", *self.args]
        with self.log.open("a") as log:
            self._proc = subprocess.Popen(command, cwd=ROOT, env=self.env, text=True,
                                          stdout=subprocess.PIPE, stderr=log)
        assert self._proc.stdout is not None
        line = _first_line(self._proc.stdout, scaled(STARTUP_TIMEOUT))
        match = _READY.match(line)
        assert match, f"dormant dev did not start: {line!r}\n{self.log.read_text()}"
        self.startup_line = line
        self.url = match.group(1)
        self.port = int(self.url.rsplit(":", 1)[1])
        return self

    def kill(self) -> None:
        """Stop it the hard way (SIGKILL): only what was committed survives."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGKILL)
            self._proc.wait(timeout=10)
        self._proc = None

    def stop(self) -> int:
        """Stop it politely (SIGTERM) and return its exit status."""
        assert self._proc is not None
        self._proc.send_signal(signal.SIGTERM)
        code = self._proc.wait(timeout=10)
        self._proc = None
        return code

    def restart(self) -> DevServer:
        self.kill()
        return self.start()


@contextmanager
def voice_dev_server(db: Path, openai_url: str) -> Iterator[DevServer]:
    """``dormant dev`` whose OpenAI (model, transcription, speech) is the fake at
    ``openai_url``, with a key that is not one."""
    server = DevServer(db, env={"OPENAI_API_KEY": "sk-test-not-a-key",
                                "OPENAI_BASE_URL": openai_url}).start()
    try:
        yield server
    finally:
        server.kill()


def _first_line(stream: IO[str], timeout: float) -> str:
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stream:  # keep draining so the child never blocks on a full pipe
            lines.put(line)
        lines.put("")

    threading.Thread(target=pump, daemon=True).start()
    try:
        return lines.get(timeout=timeout).rstrip("\n")
    except queue.Empty:
        return "(no output within the startup timeout)"


@pytest.fixture
def dev_server(tmp_path: Path) -> Iterator[DevServer]:
    server = DevServer(tmp_path / "dormant.db").start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    server = DevServer(tmp_path_factory.mktemp("dev") / "dormant.db").start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def gated_server(tmp_path: Path) -> Iterator[tuple[DevServer, Path]]:
    gate = tmp_path / "gate"
    server = DevServer(tmp_path / "gated.db", GATED,
                       env={"DORMANT_TEST_GATE": str(gate)}).start()
    try:
        yield server, gate
    finally:
        server.kill()


@pytest.fixture
def frontend_server(tmp_path: Path) -> Iterator[DevServer]:
    """``dormant dev`` serving :mod:`tests.e2e.frontend_app` (a model that uses the client's
    tools, and talks slowly when asked)."""
    server = DevServer(tmp_path / "frontend.db", FRONTEND).start()
    try:
        yield server
    finally:
        server.kill()


def run_node(script: str, *args: str, server: DevServer, timeout: float = 120) -> dict[str, Any]:
    """Run ``tests/e2e/js/<script>`` against ``server`` and return the JSON line it prints
    last; failing, the assertion shows the script's output and the server's log."""
    node = shutil.which("node")
    assert node, "Node.js is needed for the JavaScript client tests"
    assert (JS / "node_modules").is_dir(), \
        "run `npm ci --prefix tests/e2e/js` first (scripts/setup-dev does)"
    env = {**os.environ, "DORMANT_URL": server.url,
           # CopilotKit's runtime and front-end report usage unless told not to
           "COPILOTKIT_TELEMETRY_DISABLED": "true", "DO_NOT_TRACK": "1"}
    done = subprocess.run([node, script, *args], cwd=JS, env=env, capture_output=True,
                          text=True, timeout=scaled(timeout))
    said = f"\n--- {script} stdout:\n{done.stdout}\n--- stderr:\n{done.stderr}" \
           f"\n--- dormant dev log:\n{server.log.read_text()}"
    assert done.returncode == 0, f"{script} {' '.join(args)} failed{said}"
    lines = done.stdout.strip().splitlines()
    assert lines, f"{script} printed nothing{said}"
    seen: dict[str, Any] = json.loads(lines[-1])
    return seen


def ended_session(server: DevServer, session_id: str, timeout: float = 15) -> dict[str, Any]:
    """``GET /sessions/{id}?events=true`` once no invocation is running (another process
    commits it: poll), with its events."""
    deadline = time.monotonic() + scaled(timeout)
    while True:
        answer = httpx.get(f"{server.url}/sessions/{session_id}", params={"events": "true"},
                           timeout=10)
        body: dict[str, Any] = answer.json()
        if answer.status_code == 200 and body.get("activeInvocation") is None and any(
                e["type"] == "invocation_end" for e in body["events"]):
            return body
        assert time.monotonic() < deadline, \
            f"{session_id} never ended: {answer.status_code} {body}\n{server.log.read_text()}"
        time.sleep(0.05)
