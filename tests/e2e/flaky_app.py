"""The Bookings sample with a model that fails once after a tool ran, for the console's Retry.

The first model call after a tool result fails (a retryable ``model_error``, as a provider's
outage would): the turn commits the tool's result and the session is ``failed`` until a retry
reruns that model call, which then answers as the demo model does.
"""

from __future__ import annotations

import threading
from typing import Any

from dormant.models import ModelError
from dormant.models.rules import Reply, ToolOutcome
from dormant.samples import bookings
from dormant.stores import Store


class FlakyDemoModel(bookings.DemoModel):
    """The demo model, failing its first answer to a tool result."""

    def __init__(self) -> None:
        super().__init__()
        self._failed = threading.Event()

    def after_tool(self, result: ToolOutcome) -> Reply:
        if not self._failed.is_set():
            self._failed.set()
            raise ModelError("the model provider is unavailable (a test outage)")
        return super().after_tool(result)


def build(store: Store | None = None, model: Any = None) -> bookings.Bookings:
    return bookings.build(store=store, model=model or FlakyDemoModel())


describe_model = bookings.describe_model
