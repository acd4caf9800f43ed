"""The Bookings sample with a model whose behaviour a switch changes, for replaying a session
recorded with one agent against the next (``POST /sessions/{id}/replay``, the console's
"Replay against the current agent").

:class:`ConciergeModel` answers "upgrade ..." with ``upgrade_room`` (which a person approves)
and "... night ..." by asking the guest which night (``ask_guest``); after a tool's result it
says what came back. With ``DORMANT_TEST_REPLAY_CHANGED`` set (the "changed agent") it upgrades
to a deluxe room instead of a suite and changes the night without asking, so a replay of a
session recorded before shows a changed tool call and an orphaned answer.
"""

from __future__ import annotations

import os
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
from dormant.samples import bookings
from dormant.stores import Store
from dormant.tools import Signal

CHANGED = "DORMANT_TEST_REPLAY_CHANGED"


class ConciergeModel:
    """Upgrades to ``room``; asks which night unless ``asks`` is false."""

    provider = "example"
    model = "concierge-1"

    def __init__(self, *, room: str, asks: bool) -> None:
        self.room = room
        self.asks = asks

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[ModelChunk]:
        last = request.messages[-1] if request.messages else None
        if isinstance(last, ToolMessage):
            yield TextDelta(f"Done: {last.content}")
            return
        text = last.text.lower() if isinstance(last, UserMessage) else ""
        if "upgrade" in text:
            yield ToolCallChunk(call_id="", name="upgrade_room",
                                args={"ref": "BK-1", "room": self.room})
        elif "night" in text and self.asks:
            yield ToolCallChunk(call_id="", name="ask_guest", args={"q": "Which night?"})
        elif "night" in text:
            yield TextDelta("I moved your stay by one night.")
        else:
            yield TextDelta("How can I help with your booking?")


def build(store: Store | None = None, model: Any = None) -> tuple[dormant.App, dormant.Agent]:
    changed = bool(os.environ.get(CHANGED))
    chosen = model or ConciergeModel(room="deluxe" if changed else "suite", asks=not changed)
    app, agent = bookings.build(store=store, model=chosen)
    return app, agent


def describe_model(model: Any) -> str:
    return "concierge model (changed)" if os.environ.get(CHANGED) else "concierge model"
