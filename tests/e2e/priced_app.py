"""An app whose model reports its tokens and has a price, for the console's turn timeline.

:class:`MeteredModel` answers a message with one call of the ``note`` tool (which stores the
message in the session's state), then says it noted it: two model calls and one tool per
turn, each call reporting :data:`USAGE` through a ``UsageChunk``. The app prices the model by
:data:`PRICE` (per million tokens), so each turn has a cost; with ``DORMANT_TEST_UNPRICED`` set
it has no price (the turns' cost is unknown). The model and the tool wait a
few milliseconds so the timeline's bars have a width to show.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

import dormant
from dormant.events import Usage
from dormant.models import (
    ModelChunk,
    ModelRequest,
    ResponseInfo,
    TextDelta,
    ToolCallChunk,
    ToolMessage,
    UsageChunk,
    UserMessage,
)
from dormant.stores import Store
from dormant.tools import Signal, ToolContext

MODEL = "metered-1"
PRICE = {"input": 3.0, "output": 15.0}
#: What each call reports: the first call (it asks for the tool), then the second (it answers).
USAGE = (Usage(input_tokens=1200, output_tokens=80), Usage(input_tokens=1400, output_tokens=40))
THINK = 0.03  # seconds before a call's first chunk
WORK = 0.04  # seconds the tool takes


class MeteredModel:
    """Calls ``note`` with the user's message, then says it noted it; reports its usage."""

    provider = "example"
    model = MODEL

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[ModelChunk]:
        signal.wait(THINK)
        last = request.messages[-1] if request.messages else None
        if isinstance(last, UserMessage):
            yield ToolCallChunk(call_id="", name="note", args={"text": last.text})
            yield UsageChunk(USAGE[0])
            yield ResponseInfo(model=MODEL, response_id="resp-1", finish_reason="tool_calls")
            return
        said = last.content if isinstance(last, ToolMessage) else "nothing"
        yield TextDelta(f"Noted: {said}")
        yield UsageChunk(USAGE[1])
        yield ResponseInfo(model=MODEL, response_id="resp-2", finish_reason="stop")


class Note(BaseModel):
    text: str


def _note(ctx: ToolContext) -> str:
    ctx.signal.wait(WORK)
    text: str = ctx.args.text
    ctx.state["note"] = text
    return text


def build(store: Store | None = None, model: Any = None) -> tuple[dormant.App, dormant.Agent]:
    app = dormant.App(name="metered", store=store,
                        prices={} if os.environ.get("DORMANT_TEST_UNPRICED") else {MODEL: PRICE})
    note = app.tool(name="note", description="Keep a note", schema=Note, execute=_note)
    agent = app.agent("noter", model=model or MeteredModel(), tools=[note])
    return app, agent


def describe_model(model: Any) -> str:
    return "metered model"
