"""The Bookings sample with a model that fails once after a tool ran, for the console's Retry.

The first model call after a tool result fails, as a provider's outage would: the turn commits
the tool's result and the session is ``failed`` until a retry reruns that model call, which
then answers as the demo model does. The failure is a ``ModelError`` whose code and
retryability come from ``DORMANT_TEST_FAILURE_CODE`` (default ``service_unavailable``) and
``DORMANT_TEST_FAILURE_RETRYABLE`` (``false`` for a failure a retry cannot get past); its text,
:data:`SECRET`, is what only the server's log may show.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from dormant.models import ModelError
from dormant.models.rules import Reply, ToolOutcome
from dormant.samples import bookings
from dormant.stores import Store

#: The failure's own text (what a provider's error might carry): never shown to a client.
SECRET = "upstream 503 from llm-gw.internal:8443 (token tk-test-not-a-secret)"


class FlakyDemoModel(bookings.DemoModel):
    """The demo model, failing its first answer to a tool result."""

    def __init__(self) -> None:
        super().__init__()
        self._failed = threading.Event()
        self._code = os.environ.get("DORMANT_TEST_FAILURE_CODE", "service_unavailable")
        self._retryable = os.environ.get("DORMANT_TEST_FAILURE_RETRYABLE", "true") != "false"

    def after_tool(self, result: ToolOutcome) -> Reply:
        if not self._failed.is_set():
            self._failed.set()
            raise ModelError(SECRET, code=self._code, retryable=self._retryable)
        return super().after_tool(result)


def build(store: Store | None = None, model: Any = None) -> bookings.Bookings:
    return bookings.build(store=store, model=model or FlakyDemoModel())


describe_model = bookings.describe_model
