"""``dormant dev``'s HTTP server: the API resolver, served over plain HTTP on localhost.

Each HTTP request becomes an API Gateway REST proxy event and goes through
``resolver.resolve(event, context)`` — the same resolver the ``api`` Lambda runs, so there is one
route table. The principal comes from the ``X-Principal`` header (default ``local``) and is put
where API Gateway's authorizer puts it (``requestContext.authorizer.principalId``).

``POST /agui`` streams: the Lambda context this server passes carries a writer
(:data:`dormant.http.SSE_WRITER_ATTRIBUTE`); the ``/agui`` route, after validating the request
like any other, hands each encoded event to that writer, which sends it as one HTTP chunk and
flushes. Errors found before the first event (a bad body, an unknown session) still come back
as ordinary JSON responses. On Lambda there is no writer and the route returns the whole body.
``GET /sessions/{id}/events?follow=true`` streams through the same writer (a feed per commit).

A browser asking for ``/`` gets the console instead (``dormant._console``: the built page and its
``/assets/``), which uses the same API as any client; every other request, ``/`` from an API
client included, goes to the resolver.

Each request gets a fresh id (``requestContext.requestId``, as API Gateway gives one): a
server-side failure's answer names it, and the log record with the detail carries it. The
server listens with a backlog of :data:`LISTEN_BACKLOG`, so a burst of clients connecting at
once waits to be accepted instead of being reset.

Work a request cannot finish (``App.hand_on``: the rest of a session's inbox, a deadline
retry) goes to this server's :class:`Worker`: a daemon thread that runs each handed-on request
through the REST handler the routes use, one at a time, as AWS's webhook queue would.
"""

from __future__ import annotations

import base64
import json
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from dormant._console import console_file
from dormant.errors import public_message
from dormant.http import SSE_WRITER_ATTRIBUTE

if TYPE_CHECKING:
    from dormant.handlers import HandlerInput

__all__ = ["DEFAULT_PRINCIPAL", "DevServer", "Worker", "to_proxy_event"]

log = logging.getLogger("dormant.dev")

DEFAULT_PRINCIPAL = "local"
PRINCIPAL_HEADER = "X-Principal"
#: Bodies past this are refused before being read (API Gateway's own payload limit).
TRANSPORT_LIMIT = 10 * 1024 * 1024
#: Connections the kernel holds for ``accept`` while every thread is busy starting others.
#: The stdlib's default (5) resets connections when a burst of clients (a browser opening a
#: page, a test with 32 threads) arrives at once.
LISTEN_BACKLOG = 1024


def to_proxy_event(method: str, target: str, headers: Mapping[str, str], body: bytes,
                   *, principal: str, source_ip: str = "127.0.0.1") -> dict[str, Any]:
    """The API Gateway REST proxy event (payload 1.0) for one HTTP request."""
    url = urlsplit(target)
    pairs = parse_qsl(url.query, keep_blank_values=True)
    query: dict[str, str] = {}
    multi_query: dict[str, list[str]] = {}
    for key, value in pairs:
        query[key] = value
        multi_query.setdefault(key, []).append(value)
    single = {k: v for k, v in headers.items()}
    multi = {k: [v] for k, v in headers.items()}
    try:
        text: str | None = body.decode() if body else None
        encoded = False
    except UnicodeDecodeError:
        text, encoded = base64.b64encode(body).decode(), True
    path = url.path or "/"
    return {
        "resource": path,
        "path": path,
        "httpMethod": method,
        "headers": single,
        "multiValueHeaders": multi,
        "queryStringParameters": query or None,
        "multiValueQueryStringParameters": multi_query or None,
        "pathParameters": None,
        "stageVariables": None,
        "requestContext": {
            "resourcePath": path,
            "httpMethod": method,
            "path": path,
            "stage": "local",
            "requestId": str(uuid.uuid4()),
            "identity": {"sourceIp": source_ip},
            "authorizer": {"principalId": principal},
        },
        "body": text,
        "isBase64Encoded": encoded,
    }


class _Context:
    """A stand-in Lambda context; carries the SSE writer for the streamed route."""

    function_name = "dormant-dev"
    memory_limit_in_mb = 0
    invoked_function_arn = "arn:aws:lambda:local:000000000000:function:dormant-dev"

    def __init__(self, request_id: str, writer: _ChunkWriter) -> None:
        self.aws_request_id = request_id
        setattr(self, SSE_WRITER_ATTRIBUTE, writer)

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 15 * 60 * 1000


class _ChunkWriter:
    """Sends a streamed 200 response, one HTTP/1.1 chunk per call, flushed."""

    def __init__(self, handler: BaseHTTPRequestHandler) -> None:
        self._handler = handler
        self.started = False

    def __call__(self, text: str) -> None:
        handler = self._handler
        if not self.started:
            self.started = True
            handler.send_response(200)
            handler.send_header("Content-Type", "text/event-stream")
            handler.send_header("Cache-Control", "no-cache")
            handler.send_header("Access-Control-Allow-Origin", "*")
            handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()
        data = text.encode()
        if data:
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            handler.wfile.flush()

    def finish(self) -> None:
        try:
            self._handler.wfile.write(b"0\r\n\r\n")
            self._handler.wfile.flush()
        except OSError:  # the client is gone; nothing left to tell it
            self._handler.close_connection = True


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


class DevServer(ThreadingHTTPServer):
    """A threaded HTTP server answering every request with ``resolver.resolve``.

    When the resolver serves an app (``dormant.http.build_resolver``), the server also runs
    its handed-on work: ``app.hand_on`` is set to :attr:`worker`'s ``submit`` until
    ``server_close``.
    """

    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, address: tuple[str, int], resolver: Any) -> None:
        self.resolver = resolver
        super().__init__(address, _Handler)
        self.worker: Worker | None = None
        self._app: Any = getattr(resolver, "dormant_app", None)
        rest = getattr(resolver, "dormant_rest", None)
        if self._app is not None and rest is not None:
            self.worker = Worker(rest)
            self._app.hand_on = self.worker.submit

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def server_close(self) -> None:
        super().server_close()
        if self.worker is not None:
            if self._app is not None and self._app.hand_on == self.worker.submit:
                self._app.hand_on = None
            self.worker.close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: DevServer

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def do_PATCH(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def do_OPTIONS(self) -> None:
        self._serve()

    def do_HEAD(self) -> None:
        self._serve()

    def log_message(self, format: str, *args: Any) -> None:
        log.info("%s %s", self.address_string(), format % args)

    def _serve(self) -> None:
        try:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                body = self._read_chunked()
                if body is None:
                    self._refuse_oversize(TRANSPORT_LIMIT + 1)
                    return
            else:
                length = int(self.headers.get("Content-Length") or 0)
                if length < 0:
                    raise ValueError(f"negative Content-Length {length}")
                if length > TRANSPORT_LIMIT:
                    self._refuse_oversize(length)
                    return
                body = self.rfile.read(length) if length else b""
        except ValueError:  # a Content-Length or chunk size that is not a size
            self._refuse(400, "invalid_body", "the request's framing is broken (Content-Length "
                         "or a chunk size is not a size)")
            return
        static = console_file(self.command, urlsplit(self.path).path,
                              self.headers.get("Accept", ""))
        if static is not None:
            self._reply({"statusCode": static.status, "body": static.body,
                         "headers": {"Content-Type": static.content_type, **static.headers}})
            return
        principal = self.headers.get(PRINCIPAL_HEADER) or DEFAULT_PRINCIPAL
        headers = {k: v for k, v in self.headers.items()}
        event = to_proxy_event(self.command, self.path, headers, body, principal=principal,
                               source_ip=self.client_address[0])
        writer = _ChunkWriter(self)
        context = _Context(event["requestContext"]["requestId"], writer)
        try:
            result = self.server.resolver.resolve(event, context)
        except Exception:
            log.exception("unhandled error serving %s %s", self.command, self.path)
            if writer.started:
                writer.finish()
                return
            request_id = event["requestContext"]["requestId"]
            result = {"statusCode": 500, "headers": {"Content-Type": "application/json"},
                      "body": json.dumps({
                          "code": "internal_error", "requestId": request_id,
                          "message": public_message("internal_error", "", request_id)})}
        if writer.started:
            writer.finish()
            return
        self._reply(result)

    def _reply(self, result: Mapping[str, Any]) -> None:
        raw = result.get("body") or ""
        if isinstance(raw, bytes):
            data = raw
        else:
            data = base64.b64decode(raw) if result.get("isBase64Encoded") else raw.encode()
        self.send_response(int(result.get("statusCode", 200)))
        sent = set()
        for name, values in (result.get("multiValueHeaders") or {}).items():
            for value in values:
                self.send_header(name, str(value))
            sent.add(name.lower())
        for name, value in (result.get("headers") or {}).items():
            if name.lower() not in sent:
                self.send_header(name, str(value))
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _read_chunked(self) -> bytes | None:
        """A ``Transfer-Encoding: chunked`` request body (None past the transport limit)."""
        parts: list[bytes] = []
        total = 0
        while True:
            size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            total += size
            if total > TRANSPORT_LIMIT:
                return None
            parts.append(self.rfile.read(size))
            self.rfile.readline()  # the CRLF after each chunk

    def _refuse_oversize(self, length: int) -> None:
        self._refuse(413, "payload_too_large", f"the request body is {length} bytes; the "
                     f"server accepts at most {TRANSPORT_LIMIT}")

    def _refuse(self, status: int, code: str, message: str) -> None:
        """Answer before the request reached the resolver, and close the connection (what
        is left of the request cannot be told from the next one)."""
        body = json.dumps({"code": code, "message": message}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True
