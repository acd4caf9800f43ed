"""``dormant dev --model bedrock:MODEL_ID`` as a real subprocess, its Bedrock a local fake
speaking ConverseStream's event-stream wire format (tests/bedrock_fake.py), found through the
standard AWS environment (``AWS_ENDPOINT_URL_BEDROCK_RUNTIME``, fake credentials). A tool call
made before a restart is answered after it, and the next Bedrock call carries its result."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests._moto import FAKE_AWS_ENV
from tests.bedrock_fake import MODEL, Call, FakeBedrock, converse_stream, fake_bedrock

from .conftest import ROOT, DevServer


@pytest.fixture
def bedrock() -> Iterator[FakeBedrock]:
    with fake_bedrock() as server:
        yield server


@pytest.fixture
def server(tmp_path: Path, bedrock: FakeBedrock) -> Iterator[DevServer]:
    env = {**FAKE_AWS_ENV, "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": bedrock.url,
           "AWS_CONFIG_FILE": str(tmp_path / "no-config"),
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-credentials")}
    dev = DevServer(tmp_path / "bedrock.db", env=env, args=("--model", f"bedrock:{MODEL}"))
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE"):  # nothing may lead to a real account
        dev.env.pop(name, None)
    try:
        yield dev.start()
    finally:
        dev.kill()


def _turn(server: DevServer, body: dict[str, Any]) -> dict[str, Any]:
    reply = httpx.post(f"{server.url}/turns", json=body, timeout=30)
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


def test_the_startup_line_names_the_bedrock_model(server: DevServer) -> None:
    assert f"BedrockModel({MODEL})" in server.startup_line


def test_a_yielded_tool_answered_after_a_restart_reaches_bedrock_as_its_result(
        server: DevServer, bedrock: FakeBedrock) -> None:
    bedrock.script(converse_stream("", [Call("ask_guest", {"q": "Which night?"}, "tu_ask")]))
    paused = _turn(server, {"sessionId": "b1", "message": "Book me in"})
    assert paused["status"] == "yielded_tool"
    [call] = paused["yieldedTools"]
    assert (call["callId"], call["name"]) == ("tu_ask", "ask_guest")

    server.restart()  # SIGKILL: a new process, the same SQLite file
    bedrock.script(converse_stream("Booked for Friday."))
    done = _turn(server, {"sessionId": "b1", "tools": [
        {"callId": "tu_ask", "input": {"answer": "Friday"}}]})

    assert done["status"] == "completed" and done["output"]["text"] == "Booked for Friday."
    first, second = bedrock.requests
    assert first.model_id == MODEL and first.messages[0]["content"] == [{"text": "Book me in"}]
    assert second.blocks("toolUse") == [
        {"toolUseId": "tu_ask", "name": "ask_guest", "input": {"q": "Which night?"}}]
    assert second.blocks("toolResult") == [
        {"toolUseId": "tu_ask", "content": [{"json": {"answer": "Friday"}}],
         "status": "success"}]


@pytest.mark.parametrize(("approved", "status", "content"), [
    (True, "success", [{"json": {"ref": "BK-1042", "room": "suite", "status": "upgraded"}}]),
    (False, "error", [{"text": "Denied by the user: not this time"}]),
], ids=["approved", "denied"])
def test_an_approval_decided_after_a_restart_reaches_bedrock_as_the_tools_outcome(
        server: DevServer, bedrock: FakeBedrock, approved: bool, status: str,
        content: list[dict[str, Any]]) -> None:
    upgrade = Call("upgrade_room", {"ref": "BK-1042", "room": "suite"}, "tu_upgrade")
    bedrock.script(converse_stream("Asking for approval.", [upgrade]))
    paused = _turn(server, {"sessionId": "b2", "message": "Upgrade BK-1042 to a suite"})
    assert paused["status"] == "yielded_tool"
    [pending] = paused["pendingApprovals"]
    assert (pending["callId"], pending["tool"]) == ("tu_upgrade", "upgrade_room")

    server.restart()
    bedrock.script(converse_stream("Done."))
    decision: dict[str, Any] = {"approvalId": pending["approvalId"], "approved": approved}
    if not approved:
        decision["reason"] = "not this time"
    done = _turn(server, {"sessionId": "b2", "approvals": [decision]})

    assert done["status"] == "completed" and done["output"]["text"] == "Done."
    assert bedrock.requests[1].blocks("toolResult") == [
        {"toolUseId": "tu_upgrade", "content": content, "status": status}]


def test_bedrock_with_no_model_id_takes_it_from_the_environment(tmp_path: Path) -> None:
    nova = "amazon.nova-lite-v1:0"
    dev = DevServer(tmp_path / "env.db", env={**FAKE_AWS_ENV, "DORMANT_BEDROCK_MODEL": nova},
                    args=("--model", "bedrock"))
    try:
        dev.start()  # no request is made: the client is built on the first model call
        assert f"BedrockModel({nova})" in dev.startup_line
    finally:
        dev.kill()


def test_bedrock_with_no_model_id_anywhere_is_one_line_and_exit_2(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DORMANT_BEDROCK_MODEL"}
    done = subprocess.run([sys.executable, "-m", "dormant.cli", "dev", "--port", "0", "--db",
                           str(tmp_path / "x.db"), "--model", "bedrock"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)

    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == ("dormant: --model bedrock needs a model id: --model "
                           "bedrock:MODEL_ID, or DORMANT_BEDROCK_MODEL in the environment\n")
