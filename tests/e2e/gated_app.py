"""The Bookings sample with a gate in its model, for proving that ``POST /agui`` streams.

After the first text delta of a reply, the model waits until the file named by
``DORMANT_TEST_GATE`` exists, and fails the turn if it does not appear in time. A client that
sees that first delta *before* it creates the file has received it streamed: a buffered
response would hold it back until the end, and the turn would fail at the gate instead.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dormant.models import ModelChunk, ModelError, ModelRequest, TextDelta
from dormant.samples import bookings
from dormant.stores import Store
from dormant.tools import Signal

GATE_TIMEOUT = 10.0
POLL = 0.01


class GatedDemoModel(bookings.DemoModel):
    """The demo model, pausing after its first text delta until the gate file exists."""

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[ModelChunk]:
        gated = False
        for chunk in super().stream(request, signal=signal):
            yield chunk
            if not gated and isinstance(chunk, TextDelta):
                gated = True
                _wait_for_gate(signal)


def _wait_for_gate(signal: Signal) -> None:
    gate = os.environ.get("DORMANT_TEST_GATE")
    if not gate:
        return
    deadline = time.monotonic() + GATE_TIMEOUT
    while not Path(gate).exists():  # another process opens the gate: poll the file
        if time.monotonic() > deadline:
            raise ModelError(f"gate {gate} never opened: the first delta was not streamed")
        if signal.wait(POLL):
            return


def build(store: Store | None = None, model: Any = None) -> bookings.Bookings:
    return bookings.build(store=store, model=model or GatedDemoModel())


describe_model = bookings.describe_model
