"""Server-sent events as the HTTP API sends them: whether a request asks for them, and a
streamed answer's keep-alive comments (a proxy's idle timeout must not cut a quiet turn)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from aws_lambda_powertools.event_handler import Response

from dormant.http._openapi import SSE
from dormant.http._resolver import JSON

__all__ = ["FOLLOW_KEEPALIVE", "SSE_WRITER_ATTRIBUTE", "KeepAlive", "event_stream",
           "wants_event_stream", "wants_positions"]

#: The attribute of the Lambda context through which a local server streams ``POST /agui``.
SSE_WRITER_ATTRIBUTE = "dormant_sse_writer"
#: Seconds between keep-alive comments of a followed (streamed) session with no commits.
FOLLOW_KEEPALIVE = 15.0


def event_stream(chunks: Iterator[str], run: Any, writer: Callable[[str], None] | None,
                 keepalive: float) -> Response[Any]:
    """Send ``chunks`` as a ``text/event-stream`` body: one by one through the server's
    ``writer`` when there is one (``dormant dev``, the streaming function), with a comment
    after ``keepalive`` quiet seconds, else whole. A client that hung up stops the turn
    (``run.close()``), keeping what a stop keeps: its message and the text it was sent."""
    headers = {"Cache-Control": "no-cache"}
    if writer is not None:
        with KeepAlive(writer, keepalive, run) as send:
            try:
                for chunk in chunks:
                    send(chunk)
            except OSError:  # the client hung up: stop the turn
                run.close()
        return Response(status_code=200, content_type=SSE, body="", headers=headers)
    return Response(status_code=200, content_type=SSE, body="".join(chunks), headers=headers)


class KeepAlive:
    """Sends a streamed answer's chunks through ``writer`` and, from a thread of its own, an
    SSE comment (``: keepalive``) whenever ``interval`` seconds pass with nothing sent (a tool
    that runs long). One lock orders the two. A comment that finds the client gone stops the
    turn (``run.hang_up()``: what a stop keeps is kept) at once; the next chunk's write then
    fails where it is sent."""

    COMMENT = ": keepalive\n\n"

    def __init__(self, writer: Callable[[str], None], interval: float, run: Any) -> None:
        self._writer = writer
        self._interval = interval
        self._run = run
        self._lock = threading.Lock()
        self._last = time.monotonic()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> KeepAlive:
        if self._interval > 0:
            self._thread = threading.Thread(target=self._beat, name="dormant-sse-keepalive",
                                            daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def __call__(self, chunk: str) -> None:
        with self._lock:
            self._writer(chunk)
            self._last = time.monotonic()

    def _beat(self) -> None:
        wait = self._interval
        while not self._done.wait(wait):
            with self._lock:
                if self._done.is_set():
                    return
                quiet = time.monotonic() - self._last
                if quiet >= self._interval:
                    try:
                        self._writer(self.COMMENT)
                    except OSError:  # the client hung up while the turn was quiet
                        self._run.hang_up()
                        return
                    self._last = time.monotonic()
                    quiet = 0.0
            wait = self._interval - quiet


def wants_event_stream(headers: Mapping[str, str] | None) -> bool:
    """Whether a request's ``Accept`` asks for ``text/event-stream`` over JSON (a client that
    names both gets the one it ranks higher; equal ranks: the first named)."""
    accept = next((v for k, v in (headers or {}).items() if k.lower() == "accept"), "")
    ranks: dict[str, tuple[float, int]] = {}
    for index, part in enumerate(accept.split(",")):
        kind, *params = (p.strip() for p in part.split(";"))
        weight = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip() == "q":
                try:
                    weight = float(value)
                except ValueError:
                    weight = 0.0
        ranks.setdefault(kind.lower(), (weight, -index))
    sse = ranks.get(SSE, (0.0, 0))
    json_rank = max(ranks.get(JSON, (0.0, 0)), ranks.get("application/*", (0.0, 0)))
    return sse[0] > 0 and sse > json_rank


def wants_positions(body: dict[str, Any]) -> bool:
    """Whether an AG-UI request asks for each event's stream position (``rawEvent.seq``, what
    a stop's ``seen`` counts): ``forwardedProps: {"dormant": {"positions": true}}``."""
    forwarded = body.get("forwardedProps")
    dormant = forwarded.get("dormant") if isinstance(forwarded, dict) else None
    return isinstance(dormant, dict) and dormant.get("positions") is True
