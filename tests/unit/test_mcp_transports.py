"""MCP servers people run, through whole turns: ``@modelcontextprotocol/server-everything``
from npm over stdio, a FastMCP server on the legacy SSE transport, a dotted tool name through
the Bedrock and OpenAI fakes, and an address that is no MCP endpoint (a 404, a 405, an HTML
page) answered as a configuration error through the HTTP API. Everything on 127.0.0.1."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.config import Config

import dormant
from dormant.errors import HTTP_STATUS
from dormant.http import build_resolver
from dormant.mcp import MCPServer
from dormant.models import BedrockModel, OpenAIModel, ScriptedModel
from tests.bedrock_fake import MODEL, FakeBedrock, converse_stream, fake_bedrock
from tests.bedrock_fake import Call as BedrockCall
from tests.mcp_server import RunningServer, free_port
from tests.unit.openai_fake import Call as OpenAICall
from tests.unit.openai_fake import FakeOpenAI, responses_stream

ROOT = Path(__file__).resolve().parents[2]
EVERYTHING = (ROOT / "tests" / "e2e" / "js" / "node_modules" / "@modelcontextprotocol"
              / "server-everything" / "dist" / "index.js")
STDIO_SERVER = str(ROOT / "tests" / "mcp_stdio_server.py")


def call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "args": args, "id": call_id}]}


def turn(app: dormant.App, agent: dormant.Agent, session: str, **given: Any) -> Any:
    return app.handler.turn(agent=agent)({"session_id": session, "input": given}).run()


def results(app: dormant.App, session: str) -> list[Any]:
    loaded = app.sessions.get(session)
    assert loaded is not None
    return [e for e in loaded.events if e.type == "tool_result" and not e.preliminary]


def calls(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


# --- @modelcontextprotocol/server-everything over stdio ----------------------------------------


@pytest.fixture(scope="module")
def everything() -> MCPServer:
    assert EVERYTHING.exists(), "npm ci --prefix tests/e2e/js (scripts/setup-dev) installs it"
    return MCPServer.stdio("node", args=[str(EVERYTHING), "stdio"],
                           tools=["echo", "get-sum", "get-env",
                                  "trigger-long-running-operation"])


def test_server_everything_from_npm_is_listed_and_called_through_a_turn(
        everything: MCPServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DORMANT_TEST_SECRET", "hush-7c1")  # the child must not inherit it
    app = dormant.App(name="everything")
    model = ScriptedModel([
        {"tool_calls": [{"name": "echo", "args": {"message": "hi"}, "id": "call_e"},
                        {"name": "get-sum", "args": {"a": 2, "b": 40}, "id": "call_s"}]},
        call("get-env", {}, "call_v"), "done"])
    agent = app.agent("a", model=model, tools=[everything])

    result = turn(app, agent, "s1", message="echo and add")

    assert result.status == "completed", result.error
    assert [t.name for t in model.requests[0].tools] == [  # in the server's order
        "echo", "get-env", "get-sum", "trigger-long-running-operation"]
    echo, total, env = results(app, "s1")
    assert (echo.error, echo.result) == (None, "Echo: hi")
    assert total.error is None and "42" in str(total.result)
    assert env.error is None and "PATH" in str(env.result)
    assert "hush-7c1" not in str(env.result)


def test_server_everythings_progress_reaches_the_turn_before_its_result(
        everything: MCPServer) -> None:
    app = dormant.App(name="everything")
    model = ScriptedModel([call("trigger-long-running-operation",
                                {"duration": 0.3, "steps": 3}, "call_l"), "done"])
    agent = app.agent("a", model=model, tools=[everything])

    result = turn(app, agent, "s1", message="run it")

    assert result.status == "completed", result.error
    loaded = app.sessions.get("s1")
    assert loaded is not None
    outputs = [e for e in loaded.events if e.type == "tool_result"]
    assert [e.preliminary for e in outputs] == [True, True, True, False]
    assert [e.result["progress"] for e in outputs[:3]] == [1, 2, 3]
    assert outputs[0].result["total"] == 3
    assert outputs[-1].error is None and "completed" in str(outputs[-1].result).lower()


# --- the legacy SSE transport ------------------------------------------------------------------


@pytest.fixture(scope="module")
def sse_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    log = tmp_path_factory.mktemp("sse") / "calls.jsonl"
    port = free_port()
    proc = subprocess.Popen([sys.executable, STDIO_SERVER, "--sse", str(port)], cwd=ROOT,
                            env={"PATH": "/usr/bin:/bin", "MCP_TEST_LOG": str(log),
                                 "PYTHONPATH": f"{ROOT}:{ROOT / 'layers' / 'dormant'}"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:  # listening once a connection is accepted
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "no SSE server"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/sse", log
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_legacy_sse_server_is_listed_and_called_through_a_turn(
        sse_url: tuple[str, Path]) -> None:
    url, log = sse_url
    app = dormant.App(name="sse")
    model = ScriptedModel([call("files_read", {"path": "b"}, "call_f"),
                           call("order", {"item": "tea"}, "call_o"),
                           call("count", {"n": 2}, "call_c"), "done"])
    server = MCPServer.sse(url, tools=["files.read", "order", "count"])
    agent = app.agent("a", model=model, tools=[server])

    result = turn(app, agent, "s1", message="go")

    assert result.status == "completed", result.error
    assert [t.name for t in model.requests[0].tools] == ["files_read", "order", "count"]
    read, order, count = results(app, "s1")
    assert read.result == {"result": "contents of b"}
    assert order.result == {"result": "elicitation answered: decline"}
    assert count.result == {"result": "counted to 2"}
    loaded = app.sessions.get("s1")
    assert loaded is not None
    assert [e.result for e in loaded.events if e.type == "tool_result" and e.preliminary] == [
        {"progress": 1.0, "total": 2.0, "message": "step 1"},
        {"progress": 2.0, "total": 2.0, "message": "step 2"}]
    assert [(c["tool"], c["key"]) for c in calls(log)] == [
        ("files.read", "call_f"), ("order", "call_o"), ("count", "call_c")]


def test_streamable_http_pointed_at_a_legacy_sse_server_says_to_use_sse(
        sse_url: tuple[str, Path]) -> None:
    app = dormant.App(name="sse")
    model = ScriptedModel(["never"])
    agent = app.agent("a", model=model, tools=[MCPServer(sse_url[0])])

    result = turn(app, agent, "s1", message="hi")

    assert (result.code, result.retryable) == ("tool_source_misconfigured", False)
    assert "HTTP 405" in result.error and "use MCPServer.sse(url)" in result.error
    assert model.requests == []


# --- a dotted name through the Bedrock and OpenAI fakes ----------------------------------------


@pytest.fixture()
def files(tmp_path: Path) -> tuple[MCPServer, Path]:
    log = tmp_path / "calls.jsonl"
    return MCPServer.stdio(sys.executable, args=[STDIO_SERVER], env={"MCP_TEST_LOG": str(log)},
                           tools=["files.read"]), log


def _bedrock_client(fake: FakeBedrock) -> Any:
    session = boto3.session.Session(aws_access_key_id="testing",
                                    aws_secret_access_key="testing", region_name="us-east-1")
    return session.client("bedrock-runtime", endpoint_url=fake.url,
                          config=Config(retries={"total_max_attempts": 1, "mode": "standard"}))


def test_a_dotted_mcp_tool_name_works_through_bedrock(files: tuple[MCPServer, Path]) -> None:
    server, log = files
    with fake_bedrock() as bedrock:
        bedrock.script(converse_stream(calls=[BedrockCall("files_read", {"path": "x"}, "tu_1")]),
                       converse_stream("It says hello."))
        app = dormant.App(name="bedrock-mcp")
        agent = app.agent("a", model=BedrockModel(MODEL, client=_bedrock_client(bedrock)),
                          tools=[server])

        result = turn(app, agent, "s1", message="read x")

    assert result.status == "completed", result.error
    sent = bedrock.requests[0].body["toolConfig"]["tools"]
    assert [t["toolSpec"]["name"] for t in sent if "toolSpec" in t] == ["files_read"]
    # botocore's validator (the fake's) checks no pattern: hold the name to Bedrock's own
    rule = botocore.session.get_session().get_service_model("bedrock-runtime").shape_for(
        "ToolSpecification").members["name"].metadata
    assert re.fullmatch(rule["pattern"], "files_read") and not re.fullmatch(rule["pattern"],
                                                                            "files.read")
    assert calls(log) == [{"tool": "files.read", "key": "tu_1", "args": {"path": "x"}}]
    (used,) = bedrock.requests[1].blocks("toolUse")
    assert used["name"] == "files_read"
    (answered,) = bedrock.requests[1].blocks("toolResult")
    assert "contents of x" in json.dumps(answered)


def test_a_dotted_mcp_tool_name_works_through_openai(files: tuple[MCPServer, Path]) -> None:
    server, log = files
    fake = FakeOpenAI()
    try:
        fake.script(responses_stream(calls=[OpenAICall("files_read", {"path": "y"}, "call_y")]),
                    responses_stream("It says hello."))
        app = dormant.App(name="openai-mcp")
        model = OpenAIModel("gpt-5.6-luna", base_url=fake.base_url, api_key="test-key")
        agent = app.agent("a", model=model, tools=[server])

        result = turn(app, agent, "s1", message="read y")
    finally:
        fake.close()

    assert result.status == "completed", result.error
    assert [t["name"] for t in fake.requests[0].body["tools"]] == ["files_read"]
    assert calls(log) == [{"tool": "files.read", "key": "call_y", "args": {"path": "y"}}]
    assert "contents of y" in json.dumps(fake.requests[1].body["input"])


# --- an address that is no MCP endpoint --------------------------------------------------------


@pytest.fixture(scope="module")
def mcp_http() -> Iterator[RunningServer]:
    running = RunningServer().start()
    yield running
    running.stop()


class _Fixed(BaseHTTPRequestHandler):
    """Answers every request with the status and content type its server was given."""

    def do_POST(self) -> None:
        status, kind = self.server.answer  # type: ignore[attr-defined]
        body = b"<html>not here</html>"
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def fixed() -> Iterator[Any]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Fixed)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def test_a_404_is_a_configuration_error_through_the_http_api(mcp_http: RunningServer) -> None:
    app = dormant.App(name="misconfigured")
    url = mcp_http.url.replace("/mcp", "/wrong")
    agent = app.agent("a", model=ScriptedModel(["never"]), tools=[MCPServer(url)])
    resolver = build_resolver(app, agent)
    event = {"resource": "/turns", "path": "/turns", "httpMethod": "POST",
             "headers": {"Content-Type": "application/json"},
             "multiValueHeaders": {"Content-Type": ["application/json"]},
             "queryStringParameters": None, "multiValueQueryStringParameters": None,
             "pathParameters": None, "stageVariables": None,
             "requestContext": {"resourcePath": "/turns", "httpMethod": "POST",
                                "path": "/turns", "stage": "test", "requestId": "r-404",
                                "authorizer": {}, "identity": {}},
             "body": json.dumps({"sessionId": "m1", "message": "hi"}),
             "isBase64Encoded": False}

    answer = resolver.resolve(event, None)

    body = json.loads(answer["body"])
    assert answer["statusCode"] == 502 == HTTP_STATUS["tool_source_misconfigured"]
    assert (body["code"], body["retryable"]) == ("tool_source_misconfigured", False)
    assert "retrying will not help" in body["message"]
    direct = turn(app, agent, "m2", message="hi")
    assert "HTTP 404" in direct.error and "check the URL's path (often /mcp)" in direct.error
    assert app.sessions.get("m1") is None  # nothing was written


@pytest.mark.parametrize(("answer", "code", "said"), [
    ((404, "text/plain"), "tool_source_misconfigured", "HTTP 404"),
    ((405, "text/plain"), "tool_source_misconfigured", "HTTP 405"),
    ((200, "text/html"), "tool_source_misconfigured", "answered with text/html"),
    ((503, "text/plain"), "tool_source_unavailable", "retry the request"),
    ((500, "text/plain"), "tool_source_unavailable", "retry the request"),
])
def test_what_an_http_answer_means_for_a_listing(fixed: Any, answer: tuple[int, str],
                                                 code: str, said: str) -> None:
    fixed.answer = answer
    app = dormant.App(name="answers")
    url = f"http://127.0.0.1:{fixed.server_address[1]}/mcp"
    agent = app.agent("a", model=ScriptedModel(["never"]), tools=[MCPServer(url)])

    result = turn(app, agent, "s1", message="hi")

    assert (result.code, result.retryable) == (code, code == "tool_source_unavailable")
    assert said in result.error


def test_a_404_from_a_legacy_sse_url_says_to_check_the_path(fixed: Any) -> None:
    fixed.answer = (404, "text/plain")
    source = MCPServer.sse(f"http://127.0.0.1:{fixed.server_address[1]}/sse")
    app = dormant.App(name="answers")
    agent = app.agent("a", model=ScriptedModel(["never"]), tools=[source])

    result = turn(app, agent, "s1", message="hi")

    assert (result.code, result.retryable) == ("tool_source_misconfigured", False)
    assert "HTTP 404" in result.error and "use MCPServer(url)" in result.error
