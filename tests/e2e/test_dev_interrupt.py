"""Ctrl-C while ``dormant dev`` runs a turn: it says which turn it cut off and how to send it
again, then exits 130 (as a command ended by SIGINT does)."""

from __future__ import annotations

import contextlib
import json
import shlex
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx

from tests._timing import scaled

from .conftest import GATED, DevServer

#: Seconds the turn has to be seen running; the gate holds it up to 10 s (gated_app).
SEEN_RUNNING = 8.0


def _interrupt(server: DevServer) -> tuple[int, list[str]]:
    """SIGINT, as Ctrl-C sends it; the exit status and the ``dormant dev:`` lines it said."""
    proc = server._proc
    assert proc is not None
    before = server.log.read_text()
    proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=30)
    server._proc = None
    said = server.log.read_text()[len(before):]
    return code, [line for line in said.splitlines() if line.startswith("dormant dev: ")]


def _gated(tmp_path: Path) -> DevServer:
    return DevServer(tmp_path / "gated.db", GATED,
                     env={"DORMANT_TEST_GATE": str(tmp_path / "never-opened")}).start()


def test_ctrl_c_mid_turn_names_the_turn_and_the_command_that_resends_it(
        tmp_path: Path) -> None:
    server = _gated(tmp_path)
    sent = {"sessionId": "cut", "message": "what can you do?"}
    try:
        # The gated model stops after its first words until a gate that never opens: the turn
        # is running when its session exists.
        def send() -> None:
            with contextlib.suppress(httpx.HTTPError):  # the stop closes its connection
                httpx.post(f"{server.url}/turns", json=sent, timeout=30)

        threading.Thread(target=send, daemon=True).start()
        deadline = time.monotonic() + scaled(SEEN_RUNNING)
        while httpx.get(f"{server.url}/sessions/cut", timeout=10).status_code != 200:
            assert time.monotonic() < deadline, server.log.read_text()
            time.sleep(0.05)

        code, said = _interrupt(server)

        assert code == 130
        [line] = said
        command = f"curl -s {server.url}/turns -H 'content-type: application/json' -d " \
                  f"{shlex.quote(json.dumps(sent))}"
        assert line == (
            f"dormant dev: stopped in the middle of a turn of session_cut (POST /turns, the "
            f"message \"what can you do?\"): nothing of it was committed; send it again with: "
            f"{command}  (or from the console: {server.url}/#/sessions/cut)")
        assert "Traceback" not in server.log.read_text()

        # The command it gave sends the turn again, as it was, to the next server.
        (tmp_path / "never-opened").write_text("open")
        server.start()
        resent = subprocess.run(["bash", "-c", command.replace("curl -s", "curl -sf")],
                                capture_output=True, text=True, timeout=60)
        assert resent.returncode == 0, resent.stderr
        assert json.loads(resent.stdout)["status"] == "completed"
        assert "demo concierge" in json.loads(resent.stdout)["output"]["text"]
    finally:
        server.kill()


def test_ctrl_c_mid_stream_names_the_console_message(tmp_path: Path) -> None:
    server = _gated(tmp_path)
    body = {"threadId": "streamed", "runId": "r1", "state": {}, "tools": [], "context": [],
            "forwardedProps": {}, "messages": [{"id": "m1", "role": "user",
                                                "content": "tell me about checkout"}]}
    try:
        with httpx.stream("POST", f"{server.url}/agui", json=body, timeout=30) as reply:
            for line in reply.iter_lines():
                if line.startswith("data: ") and json.loads(line[6:])["type"] == \
                        "TEXT_MESSAGE_CONTENT":
                    break  # the model now waits at its gate: the turn is running
            code, said = _interrupt(server)

        assert code == 130
        [line] = said
        assert line.startswith("dormant dev: stopped in the middle of a turn of session_streamed "
                               "(POST /agui, the message \"tell me about checkout\"): nothing of "
                               "it was committed; send it again with: curl -s ")
        assert line.endswith(f"-d '{{\"sessionId\": \"session_streamed\", \"message\": \"tell "
                             f"me about checkout\"}}'  (or from the console: "
                             f"{server.url}/#/sessions/streamed)")
    finally:
        server.kill()


def test_ctrl_c_with_no_turn_running_says_nothing_more(tmp_path: Path) -> None:
    server = DevServer(tmp_path / "idle.db").start()
    try:
        code, said = _interrupt(server)
        assert (code, said) == (130, [])
    finally:
        server.kill()
