"""A real MCP server over stdio for the tests: the ``mcp`` package's own ``MCPServer``
(FastMCP), run as ``python tests/mcp_stdio_server.py`` (by ``sys.executable``).

``--sse PORT`` serves the same tools over the legacy SSE transport on 127.0.0.1 instead, and
prints ``mcp sse server on <url>`` once it listens. Each tool call is written, one JSON line,
to the file named by ``MCP_TEST_LOG`` (the server's own name of the tool, its arguments, and
the idempotency key its ``_meta`` carried).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel

#: The ``_meta`` key dormant puts a call's idempotency key under.
KEY = "dormant/idempotency_key"


class Consent(BaseModel):
    confirm: bool


def _note(tool: str, ctx: Context, args: dict[str, Any]) -> None:
    meta = ctx.request_context.meta
    extra = meta.model_dump() if isinstance(meta, BaseModel) else dict(meta or {})
    log = os.environ.get("MCP_TEST_LOG")
    if log:
        with open(log, "a") as out:
            out.write(json.dumps({"tool": tool, "key": extra.get(KEY), "args": args}) + "\n")


def build() -> MCPServer:
    server = MCPServer("dormant-stdio-test")

    @server.tool(name="files.read", description="Read a file (a dotted name, as MCP allows).")
    def files_read(path: str, ctx: Context) -> str:
        _note("files.read", ctx, {"path": path})
        return f"contents of {path}"

    @server.tool(name="files_read", description="A second tool that maps to files_read.")
    def files_read_too(path: str, ctx: Context) -> str:
        _note("files_read", ctx, {"path": path})
        return f"also {path}"

    @server.tool(description="Book a table; idempotent on the call's key.")
    def book(name: str, seats: int, ctx: Context) -> str:
        _note("book", ctx, {"name": name, "seats": seats})
        return f"booked {seats} for {name}"

    @server.tool(description="This server process's id.")
    def pid(ctx: Context) -> dict[str, int]:
        _note("pid", ctx, {})
        print("a line on stderr, not a JSON-RPC message", file=sys.stderr, flush=True)
        return {"pid": os.getpid()}

    @server.tool(description="Order something, once the user confirms.")
    async def order(item: str, ctx: Context) -> str:
        _note("order", ctx, {"item": item})
        answer = await ctx.elicit(f"Really order {item}?", Consent)
        return f"elicitation answered: {answer.action}"

    @server.tool(description="Count to n, reporting progress.")
    async def count(n: int, ctx: Context) -> str:
        _note("count", ctx, {"n": n})
        for i in range(1, n + 1):
            await ctx.report_progress(i, n, f"step {i}")
        return f"counted to {n}"

    @server.tool(description="Exits the server process in the middle of the call.")
    def crash(ctx: Context) -> str:
        _note("crash", ctx, {})
        os._exit(3)

    @server.tool(description="Takes its time.")
    async def sleep(seconds: float, ctx: Context) -> str:
        _note("sleep", ctx, {"seconds": seconds})
        await anyio.sleep(seconds)
        return "slept"

    @server.tool(description="A result of about `megabytes` MB.")
    def big(megabytes: float, ctx: Context) -> str:
        _note("big", ctx, {"megabytes": megabytes})
        return "x" * int(megabytes * 1_000_000)

    return server


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--sse":
        import uvicorn

        app = build().sse_app()
        config = uvicorn.Config(app, host="127.0.0.1", port=int(sys.argv[2]),
                                log_level="warning")
        server = uvicorn.Server(config)
        print(f"mcp sse server on http://127.0.0.1:{sys.argv[2]}/sse", flush=True)
        server.run()
    else:
        build().run("stdio")
