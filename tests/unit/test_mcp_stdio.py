"""MCP servers over stdio (``MCPServer.stdio``): a real server written with the ``mcp``
package's own ``MCPServer`` (FastMCP), ``tests/mcp_stdio_server.py``, run by
``sys.executable`` as a child process, driven through whole turns."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import dormant
from dormant.errors import HTTP_STATUS, ConfigError, ToolSourceMisconfigured
from dormant.mcp import MAX_RESULT_BYTES, MCPServer, model_tool_name
from dormant.models import ScriptedModel
from dormant.tools import Aborted

ROOT = Path(__file__).resolve().parents[2]
SERVER = str(ROOT / "tests" / "mcp_stdio_server.py")
#: The server's tools but ``files_read``, whose model name ``files.read``'s would take.
TOOLS = ["files.read", "pid", "order", "count", "big"]


def stdio(log: Path, **options: Any) -> MCPServer:
    options.setdefault("tools", TOOLS)
    return MCPServer.stdio(sys.executable, args=[SERVER], env={"MCP_TEST_LOG": str(log)},
                           **options)


def call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "args": args, "id": call_id}]}


def turn(app: dormant.App, agent: dormant.Agent, session: str, **given: Any) -> Any:
    return app.handler.turn(agent=agent)({"session_id": session, "input": given}).run()


def events(app: dormant.App, session: str, kind: str) -> list[Any]:
    loaded = app.sessions.get(session)
    assert loaded is not None
    return [e for e in loaded.events if e.type == kind]


def calls(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def wait_until(done: Callable[[], bool], seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_turn_lists_and_calls_a_stdio_server_under_the_models_names(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    app = dormant.App(name="stdio")
    model = ScriptedModel([call("files_read", {"path": "/etc/motd"}, "call_r"), "Read it."])
    agent = app.agent("a", model=model, tools=[stdio(log)])

    result = turn(app, agent, "s1", message="read the motd")

    assert result.status == "completed", result.error
    assert [t.name for t in model.requests[0].tools] == ["files_read", "pid", "order", "count",
                                                         "big"]
    assert calls(log) == [{"tool": "files.read", "key": "call_r", "args": {"path": "/etc/motd"}}]
    (asked,) = events(app, "s1", "tool_call")
    assert asked.name == "files_read"  # the ledger keeps the name the model used
    (done,) = events(app, "s1", "tool_result")
    assert done.result == {"result": "contents of /etc/motd"}


def test_the_process_is_kept_across_turns_and_restarted_once_it_died(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    app = dormant.App(name="stdio")
    model = ScriptedModel([call("pid", {}, "call_1"), "one", call("pid", {}, "call_2"), "two",
                           call("pid", {}, "call_3"), "three"])
    agent = app.agent("a", model=model, tools=[stdio(log)])

    turn(app, agent, "s1", message="pid?")
    turn(app, agent, "s2", message="pid?")
    first, second = (events(app, s, "tool_result")[0].result["pid"] for s in ("s1", "s2"))
    assert first == second  # one process for both turns

    os.kill(first, signal.SIGKILL)
    wait_until(lambda: not Path(f"/proc/{first}").exists())  # dead and reaped
    result = turn(app, agent, "s3", message="pid?")

    assert result.status == "completed", result.error
    (after,) = events(app, "s3", "tool_result")
    assert after.error is None and after.result["pid"] != first
    assert [c["key"] for c in calls(log)] == ["call_1", "call_2", "call_3"]


def test_a_listing_after_the_process_died_starts_it_again(tmp_path: Path) -> None:
    server = stdio(tmp_path / "calls.jsonl")
    pid = server.call("pid", {}, "call_p", dormant.Signal())["pid"]  # starts it, lists nothing
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not Path(f"/proc/{pid}").exists())

    listed = server.list_tools()

    assert "pid" in [t.name for t in listed]
    assert server.call("pid", {}, "call_q", dormant.Signal())["pid"] != pid


def test_a_process_that_dies_mid_call_is_the_calls_error_and_the_next_call_restarts_it(
        tmp_path: Path) -> None:
    app = dormant.App(name="stdio")
    model = ScriptedModel([call("pid", {}, "call_1"), call("crash", {}, "call_2"),
                           call("pid", {}, "call_3"), "done"])
    agent = app.agent("a", model=model,
                      tools=[stdio(tmp_path / "calls.jsonl", tools=["pid", "crash"])])

    result = turn(app, agent, "s1", message="go")

    assert result.status == "completed", result.error
    before, crashed, after = events(app, "s1", "tool_result")
    assert crashed.error == ("crash failed: stdio:python mcp_stdio_server.py exited during the "
                             "call (the next call starts it again)")
    assert after.error is None and after.result["pid"] != before.result["pid"]


def test_a_stop_or_the_deadline_cuts_a_stdio_call_and_the_process_stays(
        tmp_path: Path) -> None:
    server = stdio(tmp_path / "calls.jsonl", tools=["pid", "sleep"])
    pid = server.call("pid", {}, "call_1", dormant.Signal())["pid"]

    started = time.monotonic()
    with pytest.raises(Aborted):
        server.call("sleep", {"seconds": 10}, "call_2", dormant.Signal(timeout=0.5))
    stop = dormant.Signal()
    threading.Timer(0.3, stop.abort).start()
    with pytest.raises(Aborted):
        server.call("sleep", {"seconds": 10}, "call_3", stop)

    assert time.monotonic() - started < 5  # each call itself takes 10 s
    assert server.call("pid", {}, "call_4", dormant.Signal())["pid"] == pid
    assert server.call("sleep", {"seconds": 0.1}, "call_5", dormant.Signal(timeout=10)) == {
        "result": "slept"}


def test_an_elicitation_is_declined_and_the_tools_result_reaches_the_model(
        tmp_path: Path) -> None:
    app = dormant.App(name="stdio")
    model = ScriptedModel([call("order", {"item": "pizza"}, "call_o"), "Not ordered."])
    agent = app.agent("a", model=model, tools=[stdio(tmp_path / "calls.jsonl")])

    result = turn(app, agent, "s1", message="order a pizza")

    assert result.status == "completed", result.error
    (answered,) = events(app, "s1", "tool_result")
    assert (answered.error, answered.result) == (None, {"result": "elicitation answered: decline"})
    assert any("decline" in str(m) for m in model.requests[1].messages)


def test_progress_notifications_are_preliminary_results_before_the_final_one(
        tmp_path: Path) -> None:
    app = dormant.App(name="stdio")
    model = ScriptedModel([call("count", {"n": 3}, "call_c"), "Counted."])
    agent = app.agent("a", model=model, tools=[stdio(tmp_path / "calls.jsonl")])

    result = turn(app, agent, "s1", message="count to 3")

    assert result.status == "completed", result.error
    results = events(app, "s1", "tool_result")
    assert [(r.preliminary, r.result) for r in results] == [
        (True, {"progress": 1.0, "total": 3.0, "message": "step 1"}),
        (True, {"progress": 2.0, "total": 3.0, "message": "step 2"}),
        (True, {"progress": 3.0, "total": 3.0, "message": "step 3"}),
        (False, {"result": "counted to 3"}),
    ]
    assert all(r.name == "count" and r.call_id == "call_c" for r in results)
    sent = str(model.requests[1].messages)
    assert "counted to 3" in sent and "step 1" not in sent  # the model reads the result only


def test_a_30_mb_result_is_the_calls_error_and_never_reaches_the_ledger(tmp_path: Path) -> None:
    app = dormant.App(name="stdio")
    model = ScriptedModel([call("big", {"megabytes": 30}, "call_b"), "Too big."])
    agent = app.agent("a", model=model, tools=[stdio(tmp_path / "calls.jsonl")])

    started = time.monotonic()
    result = turn(app, agent, "s1", message="everything")

    assert result.status == "completed", result.error
    assert time.monotonic() - started < 20
    (refused,) = events(app, "s1", "tool_result")
    assert refused.result is None
    assert refused.error is not None and "max_result_bytes=1048576" in refused.error
    assert "bytes" in refused.error and "not kept" in refused.error
    loaded = app.sessions.get("s1")
    assert loaded is not None
    ledger = json.dumps([e.model_dump(mode="json") for e in loaded.events])
    assert len(ledger) < 20_000 and "xxxxxxxxxx" not in ledger
    assert "max_result_bytes" in str(model.requests[1].messages)  # the model read why


def test_a_result_over_a_smaller_limit_is_refused_with_its_size(tmp_path: Path) -> None:
    app = dormant.App(name="stdio")
    model = ScriptedModel([call("big", {"megabytes": 0.01}, "call_s"), "ok",
                           call("big", {"megabytes": 0.002}, "call_t"), "ok"])
    agent = app.agent("a", model=model,
                      tools=[stdio(tmp_path / "calls.jsonl", max_result_bytes=5000)])

    turn(app, agent, "s1", message="some")
    turn(app, agent, "s2", message="less")

    (over,) = events(app, "s1", "tool_result")
    assert over.error == ("big failed: the result is 10013 bytes of JSON, over the "
                          "max_result_bytes=5000 of stdio:python mcp_stdio_server.py: the "
                          "result is not kept; ask for less")
    (under,) = events(app, "s2", "tool_result")
    assert under.error is None and len(under.result["result"]) == 2000
    assert MAX_RESULT_BYTES == 1 << 20


def test_a_prefix_and_a_rename_are_what_the_model_sees(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    app = dormant.App(name="stdio")
    model = ScriptedModel([call("read_file", {"path": "a"}, "call_a"),
                           call("fs_pid", {}, "call_p"), "done"])
    server = stdio(log, prefix="fs", rename={"files.read": "read_file"},
                   approval={"pid": "approved"})
    agent = app.agent("a", model=model, tools=[server])

    result = turn(app, agent, "s1", message="go")

    assert result.status == "completed", result.error
    assert [t.name for t in model.requests[0].tools] == ["read_file", "fs_pid", "fs_order",
                                                         "fs_count", "fs_big"]
    assert [c["tool"] for c in calls(log)] == ["files.read", "pid"]
    assert server.approval == {"fs_pid": "approved"}  # by the model's name, for the agent
    assert [server.server_name(n) for n in ("read_file", "fs_pid", "other")] == [
        "files.read", "pid", "other"]


def test_an_approval_by_the_servers_name_holds_the_mapped_tool(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    app = dormant.App(name="stdio")
    model = ScriptedModel([call("files_read", {"path": "a"}, "call_a"), "read"])
    agent = app.agent("a", model=model,
                      tools=[stdio(log, approval={"files.read": "user-approval"})])

    paused = turn(app, agent, "s1", message="read a")

    assert paused.status == "yielded_tool"
    assert [p.tool for p in paused.pending_approvals] == ["files_read"]
    assert calls(log) == []


def test_two_server_tools_mapped_to_one_name_are_refused_naming_both(tmp_path: Path) -> None:
    app = dormant.App(name="stdio")
    model = ScriptedModel(["never"])
    agent = app.agent("a", model=model, tools=[stdio(tmp_path / "calls.jsonl", tools=None)])

    result = turn(app, agent, "s1", message="hi")

    assert (result.status, result.code, result.retryable) == ("error", "config_error", False)
    assert "'files.read' and 'files_read' would both be named 'files_read'" in result.error
    assert model.requests == []


def test_a_server_tool_named_like_the_agents_own_is_refused(tmp_path: Path) -> None:
    app = dormant.App(name="stdio")
    own = app.tool(name="files_read", description="mine", execute=lambda ctx: "local")
    agent = app.agent("a", model=ScriptedModel(["never"]),
                      tools=[own, stdio(tmp_path / "calls.jsonl")])

    with pytest.raises(ConfigError, match=r"two tools are named 'files_read' \(one from its "
                                          r"own tools, one from stdio:python mcp_stdio.*"
                                          r"which it calls 'files.read'"):
        agent.toolset()


@pytest.mark.parametrize(("options", "message"), [
    ({"prefix": "f.s"}, r"prefix= must be 1 to 32 characters"),
    ({"prefix": ""}, r"prefix= must be"),
    ({"rename": {"files.read": "read.file"}}, r"maps 'files.read' to 'read.file'"),
    ({"rename": {"a": "same", "b": "same"}}, r"its tools 'a' and 'b' would both be named 'same'"),
    ({"approval": {"files.read": "approved", "files_read": "approved"}},
     r"its tools 'files.read' and 'files_read' would both be named 'files_read'"),
    ({"max_result_bytes": 0}, r"max_result_bytes must be a positive"),
    ({"args": "server.py"}, r"args=\.\.\.\) takes a list of strings"),
    ({"env": {"KEY": 1}}, r"env=\.\.\.\) takes a dict of strings"),
])
def test_a_bad_option_is_refused_at_construction(options: dict[str, Any], message: str) -> None:
    args = options.pop("args", [SERVER])
    with pytest.raises(ConfigError, match=message):
        MCPServer.stdio(sys.executable, args=args, **options)


def test_model_names_are_sanitised_and_long_ones_cut_with_a_stable_hash() -> None:
    long = "a" * 70
    assert model_tool_name("files.read") == "files_read"
    assert model_tool_name("read file/ü") == "read_file__"
    assert model_tool_name("read", prefix="fs") == "fs_read"
    assert model_tool_name("files.read", "fs", {"files.read": "cat"}) == "cat"
    cut = model_tool_name(long)
    assert len(cut) == 64 and cut == model_tool_name(long) != model_tool_name(long + "b")
    assert cut.startswith("a" * 55 + "_")


def test_a_command_that_cannot_run_is_a_configuration_error(tmp_path: Path) -> None:
    app = dormant.App(name="stdio")
    model = ScriptedModel(["never"])
    missing = str(tmp_path / "no-such-server")
    agent = app.agent("a", model=model, tools=[MCPServer.stdio(missing)])

    result = turn(app, agent, "s1", message="hi")

    assert (result.code, result.retryable) == ("tool_source_misconfigured", False)
    assert "cannot run" in result.error and "check the command" in result.error
    assert HTTP_STATUS[result.code] == 502 and model.requests == []
    with pytest.raises(ToolSourceMisconfigured):
        MCPServer.stdio(missing).list_tools()


def test_the_servers_stderr_goes_to_the_log(tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    server = stdio(tmp_path / "calls.jsonl")
    with caplog.at_level(logging.INFO, logger="dormant.mcp"):
        server.call("pid", {}, "call_e", dormant.Signal())
        wait_until(lambda: "not a JSON-RPC message" in caplog.text)

    assert "MCP server stdio:python mcp_stdio_server.py stderr: a line on stderr" in caplog.text


@pytest.mark.parametrize("name", ["files.read", "a b", "x" * 65, "café"])
def test_an_agents_own_tool_with_a_name_no_model_takes_is_refused_at_build(name: str) -> None:
    app = dormant.App(name="names")
    with pytest.raises(ConfigError, match=r"1 to 64 characters of a-z, A-Z, 0-9, _ and -.*"
                                          r"name it, say, '[a-zA-Z0-9_-]+'"):
        app.tool(name=name, description="", execute=lambda ctx: None)

    def read(path: str) -> str:
        return path

    with pytest.raises(ConfigError, match="1 to 64 characters"):
        app.tool(name=name)(read)
    assert app.tool(name="files_read-2", execute=lambda ctx: None).name == "files_read-2"
