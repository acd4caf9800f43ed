"""An app whose agent has no tools of its own and whose model uses the client's: for driving
``dormant dev``'s ``POST /agui`` with front-end tools from real AG-UI clients.

:class:`PageModel` is deterministic. Asked by a user, it calls the first tool the client
offered (arguments made to fit the tool's schema); told that tool's result, it says the
result and the context the client gave (``request.system``), in several deltas. A message
containing "slowly" makes it talk for a while instead, a delta every ``SLOW_PAUSE`` seconds,
ending early when the turn is stopped: for the tests of Stop and of a client that hangs up.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import dormant
from dormant.models import (
    ModelChunk,
    ModelRequest,
    TextDelta,
    ToolCallChunk,
    ToolMessage,
    UserMessage,
)
from dormant.stores import Store
from dormant.tools import Signal

CONTEXT_HEADING = "Context from the user's application"
SLOW_WORDS = 50
SLOW_PAUSE = 0.2


class PageModel:
    """Calls the page's tool, then reports what the page answered and the context it had."""

    def __init__(self, own_tools: frozenset[str] = frozenset()) -> None:
        self.own_tools = own_tools

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[ModelChunk]:
        last = request.messages[-1] if request.messages else None
        if isinstance(last, ToolMessage):
            said = f"The page said: {_text_of(last.content)} (context: {_context(request)})"
            for word in said.split(" "):
                yield TextDelta(word + " ")
            return
        if isinstance(last, UserMessage) and "slowly" in last.text:
            for n in range(1, SLOW_WORDS + 1):
                yield TextDelta(f"word{n} ")
                if signal.wait(SLOW_PAUSE):
                    return
            return
        page_tools = [t for t in request.tools if t.name not in self.own_tools]
        if not page_tools:
            yield TextDelta("No front-end tool was offered.")
            return
        tool = page_tools[0]
        yield ToolCallChunk(call_id="", name=tool.name, args=_fitting(tool.parameters))


def _text_of(content: str) -> str:
    """A tool result reaches the model as JSON: show a string result as the string."""
    try:
        value = json.loads(content)
    except ValueError:
        return content
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _context(request: ModelRequest) -> str:
    """``description=value`` for each context item the client gave, from its system part."""
    part = next((s for s in request.system if s.startswith(CONTEXT_HEADING)), "")
    items = [line[2:].split(": ", 1) for line in part.splitlines() if line.startswith("- ")]
    return ", ".join(f"{item[0]}={item[-1]}" for item in items) or "none"


def _fitting(schema: dict[str, Any]) -> dict[str, Any]:
    """Arguments that satisfy a flat object schema: each property a value of its type."""
    samples = {"string": "12", "integer": 1, "number": 1, "boolean": True}
    args = {}
    for name, spec in (schema.get("properties") or {}).items():
        enum = spec.get("enum")
        args[name] = enum[0] if enum else samples.get(spec.get("type"), "12")
    return args


def build(store: Store | None = None, model: Any = None) -> tuple[dormant.App, dormant.Agent]:
    app = dormant.App(name="frontend-tools", store=store)
    agent = app.agent("page-helper", model=model or PageModel())
    return app, agent


def describe_model(model: Any) -> str:
    return "front-end tools model"
