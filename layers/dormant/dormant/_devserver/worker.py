"""``dormant dev``'s worker: what a request hands on (``App.hand_on``) runs here."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dormant.handlers import HandlerInput

__all__ = ["Worker"]

log = logging.getLogger("dormant.dev")


class Worker:
    """Runs handed-on requests (``App.hand_on``) on a daemon thread, one at a time.

    ``submit`` queues a :class:`~dormant.handlers.HandlerInput`; the thread passes it to
    ``run`` (the REST handler). A failure is logged, never raised: the thread keeps serving.
    """

    def __init__(self, run: Callable[[HandlerInput], Any], *, name: str = "dormant-dev-worker"
                 ) -> None:
        self._run = run
        self._queue: queue.Queue[HandlerInput | None] = queue.Queue()
        self._idle = threading.Condition()
        self._pending = 0  # submitted and not finished
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def submit(self, request: HandlerInput) -> None:
        """Queue one request to run (returns at once). What ``App.hand_on`` is set to."""
        with self._idle:
            self._pending += 1
        self._queue.put(request)

    def join_idle(self, timeout: float | None = None) -> bool:
        """Wait until every submitted request has run (and whatever they handed on): True,
        or False if ``timeout`` seconds passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._idle:
            while self._pending:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._idle.wait(left)
        return True

    @property
    def idle(self) -> bool:
        with self._idle:
            return self._pending == 0

    def close(self, timeout: float = 5.0) -> None:
        """Stop the thread after the request it runs (queued ones are dropped: they are in
        the session's inbox, and the next request there takes them up)."""
        self._queue.put(None)
        self._thread.join(timeout)

    def _serve(self) -> None:
        while True:
            request = self._queue.get()
            if request is None:
                return
            try:
                reply = self._run(request)
                status = getattr(reply, "status", None)
                if status == "error":
                    log.warning("handed-on request for %s ended in an error: %s (%s)",
                                request.session_id, getattr(reply, "error", None),
                                getattr(reply, "code", None))
                else:
                    log.info("handed-on request for %s: %s", request.session_id, status)
            except Exception:
                log.exception("handed-on request for %s failed", request.session_id)
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()


