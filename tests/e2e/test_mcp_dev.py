"""MCP tools across processes: an approval asked in one ``dormant dev`` process and decided in
another runs the MCP call once, under the call's idempotency key, whether the server is
reached over streamable HTTP or run by each ``dormant dev`` process over stdio."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import ROOT, STARTUP_TIMEOUT, DevServer, _first_line

MCP_APP = Path(__file__).with_name("mcp_app.py")


@pytest.fixture()
def mcp_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The test MCP server as a process of its own; its calls go to a JSON-lines file."""
    log = tmp_path / "mcp-calls.jsonl"
    proc = subprocess.Popen([sys.executable, "tests/mcp_server.py"], cwd=ROOT, text=True,
                            env={**_env(), "MCP_TEST_LOG": str(log)},
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    line = _first_line(proc.stdout, STARTUP_TIMEOUT)
    assert line.startswith("mcp server on "), line
    try:
        yield line.removeprefix("mcp server on ").strip(), log
    finally:
        proc.kill()
        proc.wait(timeout=10)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _post(server: DevServer, body: Any) -> dict[str, Any]:
    reply = httpx.post(f"{server.url}/turns", json=body, timeout=30)
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


def _calls(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line]


def test_an_approval_decided_after_a_restart_calls_the_server_once_with_the_call_id(
        tmp_path: Path, mcp_server: tuple[str, Path]) -> None:
    url, log = mcp_server
    # SIGKILL between the turns: the approval waits in the SQLite file only
    _approved_across_a_restart(tmp_path, log, {"DORMANT_TEST_MCP_URL": url})


def test_a_stdio_server_is_started_by_each_dev_process_and_called_once(tmp_path: Path) -> None:
    log = tmp_path / "mcp-calls.jsonl"
    # SIGKILL between the turns: the child's stdin closes; the next process starts its own
    _approved_across_a_restart(tmp_path, log, {"DORMANT_TEST_MCP_STDIO": "1",
                                               "MCP_TEST_LOG": str(log)})


def _approved_across_a_restart(tmp_path: Path, log: Path, env: dict[str, str]) -> None:
    """A turn parks on the MCP tool's approval, the dev server is killed and restarted, the
    approval runs the call: once, keyed on the call id."""
    server = DevServer(tmp_path / "mcp.db", MCP_APP, env=env).start()
    try:
        paused = _post(server, {"sessionId": "m1", "message": "book a table for Ann"})
        assert paused["status"] == "yielded_tool", paused
        (pending,) = paused["pendingApprovals"]
        assert pending["tool"] == "book" and _calls(log) == []

        server.restart()

        done = _post(server, {"sessionId": "m1", "approvals": [
            {"approvalId": pending["approvalId"], "approved": True}]})
    finally:
        server.kill()

    assert done["status"] == "completed", done
    assert done["output"]["text"] == 'Done: {"result": "booked 2 for Ann"}'
    assert _calls(log) == [{"tool": "book", "key": pending["callId"],
                            "args": {"name": "Ann", "seats": 2}}]
