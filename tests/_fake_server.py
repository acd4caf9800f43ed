"""What the local stand-ins for a provider's HTTP API share (``tests/unit/openai_fake.py``,
``tests/bedrock_fake.py``): a threaded HTTP server on 127.0.0.1 that replays scripted replies in
order and records each request it was sent."""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, TypeVar

__all__ = ["QuietServer", "ScriptedServer"]

ReplyT = TypeVar("ReplyT")
RecordedT = TypeVar("RecordedT")


class QuietServer(ThreadingHTTPServer):
    """A server whose handler threads die with the test, and for which a client hanging up
    mid-reply (the cut and abort tests do it on purpose) is no error."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class ScriptedServer(Generic[ReplyT, RecordedT]):
    """Serve ``handler`` (whose ``owner`` is set to this object) on a free port; ``script``
    queues replies, ``next_reply`` records a request and takes the next one (None when the
    script ran out); ``requests`` holds what arrived; ``close()`` stops the server."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.requests: list[RecordedT] = []
        self._replies: list[ReplyT] = []
        self._lock = threading.Lock()
        owned = type(handler.__name__, (handler,), {"owner": self})
        self._server = QuietServer(("127.0.0.1", 0), owned)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        daemon=True)
        self._thread.start()

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:PORT``."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def script(self, *replies: ReplyT) -> None:
        with self._lock:
            self._replies.extend(replies)

    @property
    def unused(self) -> int:
        return len(self._replies)

    def next_reply(self, recorded: RecordedT) -> ReplyT | None:
        with self._lock:
            self.requests.append(recorded)
            return self._replies.pop(0) if self._replies else None

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
