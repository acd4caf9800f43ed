"""A real MCP server for the tests: the ``mcp`` package's ``MCPServer`` over streamable HTTP,
served by uvicorn on a thread (127.0.0.1, a free port), recording what it was asked.

Run as a script (``python tests/mcp_server.py``) it serves until killed and prints
``mcp server on <url>`` once it listens (the dev-server tests start it that way); the calls it
records then go, one JSON line each, to the file named by ``MCP_TEST_LOG``.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Annotated, Any

import anyio
import uvicorn
from mcp.server.mcpserver import Context, Elicit, ElicitationResult, MCPServer, Resolve
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from pydantic import BaseModel
from starlette.types import ASGIApp, Receive, Scope, Send

#: The ``_meta`` key dormant's MCP client puts a call's idempotency key under.
KEY = "dormant/idempotency_key"


@dataclass
class Record:
    """What the server saw: each JSON-RPC method asked over HTTP, each tool call with its
    idempotency key, and the headers of each HTTP request."""

    methods: list[str] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, method: str) -> int:
        with self.lock:
            return self.methods.count(method)

    def note_call(self, tool: str, key: Any, args: dict[str, Any]) -> None:
        with self.lock:
            self.calls.append({"tool": tool, "key": key, "args": args})
        log = os.environ.get("MCP_TEST_LOG")
        if log:
            with open(log, "a") as out:
                out.write(json.dumps({"tool": tool, "key": key, "args": args}) + "\n")


class Consent(BaseModel):
    confirm: bool


def ask(item: str) -> Elicit[Consent]:
    """The question ``confirm`` asks the client (an elicitation) before it runs."""
    return Elicit(f"Really order {item}?", Consent)


def build_server(record: Record) -> MCPServer:
    server = MCPServer("dormant-test")

    def key_of(ctx: Context) -> Any:
        meta = ctx.request_context.meta
        extra = meta.model_dump() if isinstance(meta, BaseModel) else dict(meta or {})
        return extra.get(KEY)

    @server.tool(description="The weather in a city.")
    def lookup(city: str, ctx: Context) -> dict[str, Any]:
        record.note_call("lookup", key_of(ctx), {"city": city})
        return {"city": city, "forecast": "sunny", "high": 21}

    @server.tool(description="Book a table; idempotent on the call's key.")
    def book(name: str, seats: int, ctx: Context) -> str:
        record.note_call("book", key_of(ctx), {"name": name, "seats": seats})
        return f"booked {seats} for {name}"

    @server.tool(description="Always fails.")
    def broken(reason: str, ctx: Context) -> str:
        record.note_call("broken", key_of(ctx), {"reason": reason})
        raise ToolError(f"the kitchen is closed: {reason}")

    @server.tool(description="Fails as a JSON-RPC error, not a tool result.")
    def refuses(table: int, ctx: Context) -> str:
        record.note_call("refuses", key_of(ctx), {"table": table})
        raise MCPError(code=INVALID_PARAMS, message=f"table {table} does not exist")

    @server.tool(description="Asks the user to confirm before it acts.")
    def confirm(item: str, consent: Annotated[ElicitationResult[Consent], Resolve(ask)],
                ctx: Context) -> str:
        record.note_call("confirm", key_of(ctx), {"item": item})
        return f"elicitation answered: {consent.action}"

    @server.tool(description="Takes its time.")
    async def slow(seconds: float, ctx: Context) -> str:
        record.note_call("slow", key_of(ctx), {"seconds": seconds})
        await anyio.sleep(seconds)
        return "done"

    return server


class _Recording:
    """ASGI middleware noting each JSON-RPC method (and the headers) posted to the server."""

    def __init__(self, app: ASGIApp, record: Record) -> None:
        self.app, self.record = app, record

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        try:
            payload = json.loads(body)
        except ValueError:
            payload = None
        for item in payload if isinstance(payload, list) else [payload]:
            if isinstance(item, dict) and "method" in item:
                with self.record.lock:
                    self.record.methods.append(item["method"])
        with self.record.lock:
            self.record.headers.append({k.decode(): v.decode() for k, v in scope["headers"]})
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


class RunningServer:
    """The server on a uvicorn thread; ``url`` is its MCP endpoint (``port`` 0: a free one)."""

    def __init__(self, port: int = 0) -> None:
        self.record = Record()
        app = build_server(self.record).streamable_http_app()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", port))
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        config = uvicorn.Config(_Recording(app, self.record), log_level="warning",
                                lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run,
                                        kwargs={"sockets": [self._sock]}, daemon=True)

    def start(self) -> RunningServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the MCP test server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()


def free_port() -> int:
    """A port with nothing listening on it (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


if __name__ == "__main__":
    running = RunningServer().start()
    print(f"mcp server on {running.url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        running.stop()
