"""An app whose agent books through an MCP server (``DORMANT_TEST_MCP_URL``, or, with
``DORMANT_TEST_MCP_STDIO`` set, ``tests/mcp_stdio_server.py`` run over stdio, its calls logged
to ``MCP_TEST_LOG``), each booking held for a human's approval: for proving that an approval
asked in one ``dormant dev`` process and decided in another runs the MCP call once, under the
call's idempotency key."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dormant
from dormant.mcp import MCPServer
from dormant.models import ModelChunk, ModelRequest, TextDelta, ToolCallChunk, ToolMessage
from dormant.stores import Store
from dormant.tools import Signal


class BookingModel:
    """Asks to book until it reads the booking's result, then says what it read."""

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[ModelChunk]:
        last = request.messages[-1] if request.messages else None
        if isinstance(last, ToolMessage):
            yield TextDelta(f"Done: {last.content}")
        else:
            yield ToolCallChunk(call_id="", name="book", args={"name": "Ann", "seats": 2})


def build(store: Store | None = None, model: Any = None) -> tuple[dormant.App, dormant.Agent]:
    app = dormant.App(name="mcp-bookings", store=store)
    if os.environ.get("DORMANT_TEST_MCP_STDIO"):
        script = Path(__file__).resolve().parents[1] / "mcp_stdio_server.py"
        server = MCPServer.stdio(sys.executable, args=[str(script)],
                                 env={"MCP_TEST_LOG": os.environ["MCP_TEST_LOG"]},
                                 tools=["book"], approval={"book": "user-approval"})
    else:
        server = MCPServer(os.environ["DORMANT_TEST_MCP_URL"], tools=["book"],
                           approval={"book": "user-approval"})
    agent = app.agent("booker", model=model or BookingModel(), tools=[server])
    return app, agent


def describe_model(model: Any) -> str:
    return "booking model"
