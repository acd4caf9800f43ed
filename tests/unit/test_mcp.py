"""MCP tools (``dormant.mcp.MCPServer``) against a real MCP server on 127.0.0.1."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import dormant
from dormant.errors import ConfigError, ToolSourceUnavailable
from dormant.mcp import IDEMPOTENCY_KEY, MCPServer
from dormant.models import ScriptedModel
from dormant.stores.memory import MemoryStore
from dormant.tools import Aborted, Signal
from tests.mcp_server import KEY, RunningServer, free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    running = RunningServer().start()
    yield running
    running.stop()


@pytest.fixture(autouse=True)
def fresh_record(server: RunningServer) -> None:
    with server.record.lock:
        server.record.methods.clear()
        server.record.calls.clear()
        server.record.headers.clear()


TOOLS = ["lookup", "book", "broken", "refuses", "confirm", "slow"]


def call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "args": args, "id": call_id}]}


def turn(app: dormant.App, agent: dormant.Agent, session: str, **given: Any) -> Any:
    return app.handler.turn(agent=agent)({"session_id": session, "input": given}).run()


def tool_results(app: dormant.App, session: str) -> list[Any]:
    loaded = app.sessions.get(session)
    assert loaded is not None
    return [e for e in loaded.events if e.type == "tool_result"]


def test_the_key_the_test_server_reads_is_the_one_dormant_sends() -> None:
    assert KEY == IDEMPOTENCY_KEY == "dormant/idempotency_key"


def test_a_call_reaches_the_server_and_its_structured_result_reaches_the_model(
        server: RunningServer) -> None:
    app = dormant.App(name="mcp")
    model = ScriptedModel([call("lookup", {"city": "Paris"}, "call_look"), "Sunny in Paris."])
    agent = app.agent("a", model=model, tools=[MCPServer(server.url)])

    result = turn(app, agent, "s1", message="weather in Paris?")

    assert result.status == "completed", result.error
    assert server.record.calls == [
        {"tool": "lookup", "key": "call_look", "args": {"city": "Paris"}}]
    (done,) = tool_results(app, "s1")
    assert done.result == {"city": "Paris", "forecast": "sunny", "high": 21}
    sent = model.requests[1].messages
    assert any("sunny" in str(m) for m in sent)  # the model read the server's answer
    specs = {spec.name: spec for spec in model.requests[0].tools}
    assert list(specs) == TOOLS
    assert specs["lookup"].description == "The weather in a city."
    assert specs["lookup"].parameters["required"] == ["city"]  # the server's inputSchema


def test_tools_are_listed_once_per_process_and_never_at_build(server: RunningServer) -> None:
    app = dormant.App(name="mcp")
    model = ScriptedModel(["one", "two"])
    agent = app.agent("a", model=model, tools=[MCPServer(server.url)])
    assert server.record.count("tools/list") == 0  # building the agent lists nothing

    turn(app, agent, "s1", message="hi")
    turn(app, agent, "s2", message="hi again")

    assert server.record.count("tools/list") == 1
    assert [t.name for t in model.requests[1].tools] == TOOLS


def test_a_rerun_call_sends_the_same_idempotency_key(server: RunningServer) -> None:
    app = dormant.App(name="mcp")
    model = ScriptedModel([call("book", {"name": "Ann", "seats": 2}, "call_b"), "Booked.",
                           call("book", {"name": "Ann", "seats": 2}, "call_b"), "Booked."])
    agent = app.agent("a", model=model, tools=[MCPServer(server.url)])

    turn(app, agent, "s1", message="book")
    turn(app, agent, "s2", message="book")  # same call id: a server keyed on it books once

    assert [c["key"] for c in server.record.calls] == ["call_b", "call_b"]


def test_the_allowlist_limits_the_tools_the_model_sees(server: RunningServer) -> None:
    app = dormant.App(name="mcp")
    model = ScriptedModel([call("book", {"name": "Ann", "seats": 2}, "call_x"), "Sorry."])
    agent = app.agent("a", model=model, tools=[MCPServer(server.url, tools=["lookup"])])

    turn(app, agent, "s1", message="book")

    assert [t.name for t in model.requests[0].tools] == ["lookup"]
    (refused,) = tool_results(app, "s1")
    assert "Unknown tool 'book'" in (refused.error or "")
    assert server.record.calls == []


def test_an_allowlisted_tool_the_server_does_not_list_fails_the_turn(
        server: RunningServer) -> None:
    app = dormant.App(name="mcp")
    model = ScriptedModel(["never"])
    agent = app.agent("a", model=model, tools=[MCPServer(server.url, tools=["teleport"])])

    result = turn(app, agent, "s1", message="hi")

    assert (result.status, result.code) == ("error", "tool_source_unavailable")
    assert "teleport" in (result.error or "") and model.requests == []


def test_approval_by_name_holds_the_call_until_approved(server: RunningServer) -> None:
    app = dormant.App(name="mcp")
    model = ScriptedModel([call("book", {"name": "Ann", "seats": 2}, "call_b"), "Booked."])
    mcp = MCPServer(server.url, approval={"book": "user-approval"})
    agent = app.agent("a", model=model, tools=[mcp])

    paused = turn(app, agent, "s1", message="book for Ann")
    assert paused.status == "yielded_tool"
    (pending,) = paused.pending_approvals
    assert (pending.tool, pending.args) == ("book", {"name": "Ann", "seats": 2})
    assert server.record.calls == []

    done = turn(app, agent, "s1",
                approvals=[{"approval_id": pending.approval_id, "approved": True}])

    assert done.status == "completed", done.error
    assert server.record.calls == [
        {"tool": "book", "key": "call_b", "args": {"name": "Ann", "seats": 2}}]
    assert tool_results(app, "s1")[-1].result == {"result": "booked 2 for Ann"}


def test_an_approval_function_gets_the_arguments_as_a_dict(server: RunningServer) -> None:
    seen: list[Any] = []

    def policy(args: Any) -> str:
        seen.append(args)
        return "user-approval" if args["seats"] > 4 else "approved"

    app = dormant.App(name="mcp")
    model = ScriptedModel([call("book", {"name": "Ann", "seats": 2}, "call_s"), "Booked."])
    agent = app.agent("a", model=model, tools=[MCPServer(server.url, approval={"book": policy})])

    result = turn(app, agent, "s1", message="book")

    assert result.status == "completed" and seen == [{"name": "Ann", "seats": 2}]
    assert [c["key"] for c in server.record.calls] == ["call_s"]


def test_the_agents_tool_approval_may_name_an_mcp_tool(server: RunningServer) -> None:
    app = dormant.App(name="mcp")
    model = ScriptedModel([call("lookup", {"city": "Oslo"}, "call_l")])
    agent = app.agent("a", model=model, tools=[MCPServer(server.url)],
                      tool_approval={"lookup": "user-approval"})

    paused = turn(app, agent, "s1", message="weather?")

    assert paused.status == "yielded_tool"
    assert [p.tool for p in paused.pending_approvals] == ["lookup"]
    assert server.record.calls == []


def test_an_approval_naming_no_tool_of_any_source_fails_the_turn(
        server: RunningServer) -> None:
    app = dormant.App(name="mcp")
    model = ScriptedModel(["never"])
    agent = app.agent("a", model=model, tools=[MCPServer(server.url)],
                      tool_approval={"launch": "user-approval"})

    result = turn(app, agent, "s1", message="hi")

    assert (result.status, result.code) == ("error", "config_error")
    assert "launch" in (result.error or "") and model.requests == []


def test_a_server_error_is_the_calls_error_and_the_turn_goes_on(server: RunningServer) -> None:
    app = dormant.App(name="mcp")
    model = ScriptedModel([call("broken", {"reason": "strike"}, "call_x"), "It failed."])
    agent = app.agent("a", model=model, tools=[MCPServer(server.url)])

    result = turn(app, agent, "s1", message="try")

    assert result.status == "completed"
    (failed,) = tool_results(app, "s1")
    assert failed.result is None
    assert failed.error == ("broken failed: Error executing tool broken: "
                            "the kitchen is closed: strike")
    assert any("kitchen is closed" in str(m) for m in model.requests[1].messages)


def test_invalid_arguments_are_refused_against_the_servers_schema(
        server: RunningServer) -> None:
    app = dormant.App(name="mcp")
    model = ScriptedModel([call("book", {"name": "Ann"}, "call_x"), "Oops."])
    agent = app.agent("a", model=model, tools=[MCPServer(server.url)])

    turn(app, agent, "s1", message="book")

    (refused,) = tool_results(app, "s1")
    assert refused.error == "Invalid arguments for book: (root).seats: required"
    assert server.record.calls == []


def test_an_unreachable_server_fails_the_turn_before_any_model_call() -> None:
    app = dormant.App(name="mcp")
    model = ScriptedModel(["never"])
    url = f"http://user:secret@127.0.0.1:{free_port()}/mcp?token=hush"
    agent = app.agent("a", model=model, tools=[MCPServer(url)])

    result = turn(app, agent, "s1", message="hi")

    assert (result.status, result.code) == ("error", "tool_source_unavailable")
    assert result.retryable is True
    assert f"127.0.0.1:{url.split(':')[3].split('/')[0]}/mcp" in (result.error or "")
    assert "secret" not in (result.error or "") and "hush" not in (result.error or "")
    assert model.requests == []
    assert app.sessions.get("s1") is None  # nothing was committed
    assert dormant.errors.HTTP_STATUS[result.code] == 503


def test_a_failed_listing_is_tried_again_on_the_next_turn() -> None:
    port = free_port()
    app = dormant.App(name="mcp")
    model = ScriptedModel(["hello"])
    agent = app.agent("a", model=model, tools=[MCPServer(f"http://127.0.0.1:{port}/mcp")])
    assert turn(app, agent, "s1", message="hi").code == "tool_source_unavailable"

    late = RunningServer(port).start()  # the server is up now (say, after its deploy)
    try:
        result = turn(app, agent, "s1", message="hi")
    finally:
        late.stop()

    assert result.status == "completed", result.error
    assert late.record.count("tools/list") == 1


def test_a_tool_name_clash_is_refused_when_the_tools_are_resolved(
        server: RunningServer) -> None:
    app = dormant.App(name="mcp")
    lookup = app.tool(name="lookup", description="mine", execute=lambda ctx: "local")
    agent = app.agent("a", model=ScriptedModel(["never"]), tools=[lookup, MCPServer(server.url)])

    with pytest.raises(ConfigError, match=r"two tools are named 'lookup'.*its own tools.*127"):
        agent.toolset()
    result = turn(app, agent, "s1", message="hi")
    assert (result.status, result.code) == ("error", "config_error")


def test_headers_are_sent_and_a_header_function_is_asked_per_connection(
        server: RunningServer) -> None:
    asked: list[int] = []

    def headers() -> dict[str, str]:
        asked.append(1)
        return {"Authorization": "Bearer t0ken"}

    app = dormant.App(name="mcp")
    model = ScriptedModel([call("lookup", {"city": "Rome"}, "call_r"), "ok"])
    agent = app.agent("a", model=model, tools=[MCPServer(server.url, headers=headers)])

    turn(app, agent, "s1", message="hi")

    assert len(asked) == 2  # the listing's connection, the call's
    assert {h.get("authorization") for h in server.record.headers} == {"Bearer t0ken"}


def test_an_elicitation_is_declined_and_the_tool_decides(server: RunningServer) -> None:
    app = dormant.App(name="mcp")
    model = ScriptedModel([call("confirm", {"item": "pizza"}, "call_c"), "Not ordered."])
    agent = app.agent("a", model=model, tools=[MCPServer(server.url)])

    result = turn(app, agent, "s1", message="order pizza")

    assert result.status == "completed"
    (answered,) = tool_results(app, "s1")
    assert answered.result == {"result": "elicitation answered: decline"}


def test_a_stopped_turn_does_not_start_a_call(server: RunningServer) -> None:
    signal = Signal()
    signal.abort()

    with pytest.raises(Aborted):
        MCPServer(server.url).call("lookup", {"city": "Rome"}, "call_z", signal)

    assert server.record.calls == []


def test_a_stop_cuts_a_running_call(server: RunningServer) -> None:
    signal = Signal()

    def abort_once_it_runs() -> None:  # the stop comes while the call runs on the server
        deadline = time.monotonic() + 10
        while not server.record.calls and time.monotonic() < deadline:
            time.sleep(0.01)
        signal.abort()

    threading.Thread(target=abort_once_it_runs, daemon=True).start()
    started = time.monotonic()
    with pytest.raises(Aborted):
        MCPServer(server.url).call("slow", {"seconds": 10}, "call_s", signal)

    assert time.monotonic() - started < 9  # cut: the call itself takes 10 s
    assert [c["tool"] for c in server.record.calls] == ["slow"]  # it had started


def test_the_turns_deadline_bounds_a_call(server: RunningServer) -> None:
    signal = Signal(timeout=0.5)

    started = time.monotonic()
    with pytest.raises(Aborted):
        MCPServer(server.url).call("slow", {"seconds": 10}, "call_d", signal)

    assert time.monotonic() - started < 3


def test_a_slow_call_within_the_deadline_finishes(server: RunningServer) -> None:
    result = MCPServer(server.url).call("slow", {"seconds": 0.2}, "call_f", Signal(timeout=10))
    assert result == {"result": "done"}


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"url": "ftp://user:pw@host/x"}, "http"),
    ({"url": "http://h/mcp", "tools": "lookup"}, "list of tool names"),
    ({"url": "http://h/mcp", "approval": {"book": "maybe"}}, "approval policy"),
    ({"url": "http://h/mcp", "tools": ["lookup"], "approval": {"book": "approved"}},
     "tools= leaves out"),
    ({"url": "http://h/mcp", "headers": 3}, "headers"),
])
def test_a_bad_declaration_is_refused_at_once(kwargs: dict[str, Any], message: str) -> None:
    url = kwargs.pop("url")
    with pytest.raises(ConfigError, match=message) as refused:
        MCPServer(url, **kwargs)
    assert "pw" not in str(refused.value)


def test_a_missing_mcp_package_is_named_with_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "mcp" else real(name, *a))
    with pytest.raises(ConfigError, match=r"pip install 'dormant\[mcp\]'"):
        MCPServer("http://127.0.0.1/mcp")


def test_listing_errors_name_the_source(server: RunningServer) -> None:
    source = MCPServer(f"http://127.0.0.1:{free_port()}/mcp")
    with pytest.raises(ToolSourceUnavailable, match=r"tool source http://127\.0\.0\.1:\d+/mcp"):
        source.list_tools()


def _imports_mcp(code: str) -> bool:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.strip().splitlines()[-1] == "True"


def test_building_an_app_with_an_mcp_server_does_not_import_mcp() -> None:
    assert not _imports_mcp("""
        import sys
        import dormant
        from dormant.mcp import MCPServer
        from dormant.models import ScriptedModel
        app = dormant.App(name="x")
        app.agent("a", model=ScriptedModel([]), tools=[MCPServer("http://127.0.0.1:9/mcp")])
        print("mcp" in sys.modules)
    """)


def test_the_check_sees_mcp_once_it_is_imported() -> None:
    assert _imports_mcp("import sys, dormant.mcp, mcp; print('mcp' in sys.modules)")


def test_a_json_rpc_error_is_the_calls_error_too(server: RunningServer) -> None:
    app = dormant.App(name="mcp")
    model = ScriptedModel([call("refuses", {"table": 9}, "call_t"), "No such table."])
    agent = app.agent("a", model=model, tools=[MCPServer(server.url)])

    result = turn(app, agent, "s1", message="sit at 9")

    assert result.status == "completed"
    (failed,) = tool_results(app, "s1")
    assert failed.error == "refuses failed: MCPError: table 9 does not exist"
    assert server.record.calls == [{"tool": "refuses", "key": "call_t", "args": {"table": 9}}]


def test_an_app_without_mcp_servers_never_imports_mcp() -> None:
    assert not _imports_mcp("""
        import sys
        import dormant
        from dormant.samples import bookings
        app, agent = bookings.build()
        app.handler.rest(agent=agent)({"session_id": "c1", "input": {"message": "hi"}})
        print("mcp" in sys.modules or "dormant.mcp" in sys.modules)
    """)


def test_concurrent_first_turns_list_the_server_once(server: RunningServer) -> None:
    app = dormant.App(name="mcp")
    agent = app.agent("a", model=ScriptedModel([]), tools=[MCPServer(server.url)])
    barrier = threading.Barrier(4)
    seen: list[list[str]] = []

    def first_turn() -> None:
        barrier.wait()
        seen.append(sorted(agent.toolset().tools))

    threads = [threading.Thread(target=first_turn) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)

    assert server.record.count("tools/list") == 1
    assert seen == [sorted(TOOLS)] * 4
    assert agent.tools == {}  # the agent's own tools: none


def test_an_approval_decided_while_the_server_is_down_runs_once_it_is_back(
        server: RunningServer) -> None:
    now = [1_000_000]
    store = MemoryStore()
    book = call("book", {"name": "Ann", "seats": 2}, "call_b")

    def process(url: str, replies: list[Any]) -> tuple[dormant.App, dormant.Agent, Any]:
        app = dormant.App(name="mcp", store=store, clock=lambda: now[0])
        model = ScriptedModel(replies)
        source = MCPServer(url, approval={"book": "user-approval"})
        return app, app.agent("a", model=model, tools=[source]), model

    app, agent, _ = process(server.url, [book])
    (pending,) = turn(app, agent, "s1", message="book").pending_approvals

    down, agent, model = process(f"http://127.0.0.1:{free_port()}/mcp", [])
    failed = turn(down, agent, "s1",
                  approvals=[{"approval_id": pending.approval_id, "approved": True}])
    assert (failed.code, failed.retryable) == ("tool_source_unavailable", True)
    assert server.record.calls == [] and model.requests == []
    kept = down.sessions.get("s1")
    assert kept is not None and kept.events[-1].type == "invocation_resume"  # the claim only

    now[0] += 10 * 60_000  # the claim's lease ran out: the next request takes the step over
    back, agent, _ = process(server.url, ["Booked."])
    done = turn(back, agent, "s1")

    assert done.status == "completed", done.error
    assert server.record.calls == [
        {"tool": "book", "key": "call_b", "args": {"name": "Ann", "seats": 2}}]
