"""What the local stand-ins for a provider's HTTP API share (``tests/unit/openai_fake.py``,
``tests/bedrock_fake.py``): a threaded HTTP server on 127.0.0.1 that replays scripted replies in
order and records each request it was sent, and a handler that answers a whole body or a
chunked stream it can cut or pause mid-way."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["QuietServer", "ScriptedHandler", "ScriptedServer", "Streamed"]

#: Seconds a paused stream, once released, keeps sending keep-alives for the client's hang-up
#: to show (a client that aborted has closed its end; writing is how the server finds out).
KEEP_ALIVE_FOR = 5.0

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


class Streamed(Protocol):
    """What a scripted streamed reply says about how it is sent."""

    #: Drop the connection after this many frames, mid-body (no final chunk).
    cut_after: int | None
    #: Pause after this many frames until ``release`` is set (``paused`` set meanwhile), then
    #: keep talking until the client hangs up (abort tests).
    pause_after: int | None
    paused: threading.Event
    release: threading.Event
    #: Set when the client hung up mid-stream.
    disconnected: bool


class ScriptedHandler(BaseHTTPRequestHandler):
    """HTTP/1.1, silent; :meth:`send_whole` and :meth:`send_chunked` answer a request."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def send_whole(self, status: int, content_type: str, data: bytes,
                   headers: Mapping[str, str]) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def send_chunked(self, frames: list[bytes], reply: Streamed, *,
                     headers: Mapping[str, str], keep_alive: bytes) -> None:
        """A 200 whose body is ``frames``, one HTTP chunk each, cut or paused as ``reply``
        says; ``keep_alive`` is what a released pause sends until the client's close shows."""
        self.send_response(200)
        self.send_header("transfer-encoding", "chunked")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        try:
            for index, data in enumerate(frames):
                if reply.cut_after is not None and index == reply.cut_after:
                    self.close_connection = True  # hang up without the final chunk
                    return
                if reply.pause_after is not None and index == reply.pause_after:
                    reply.paused.set()
                    reply.release.wait(10)
                    until = time.monotonic() + KEEP_ALIVE_FOR
                    while time.monotonic() < until:
                        self._chunk(keep_alive)
                self._chunk(data)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            reply.disconnected = True
            self.close_connection = True

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()
