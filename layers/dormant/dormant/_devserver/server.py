"""``dormant dev``'s HTTP server: connections served by a fixed pool of threads, each request
checked (:mod:`~dormant._devserver.guard`), turned into a proxy event
(:mod:`~dormant._devserver.proxy`) and given to the resolver, or answered with the console."""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import queue
import socket
import threading
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import urlsplit

from dormant._console import console_file, missing
from dormant._devserver.guard import (
    DEFAULT_PRINCIPAL,
    IDLE_TIMEOUT,
    LISTEN_BACKLOG,
    PRINCIPAL_HEADER,
    THREADS,
    TRANSPORT_LIMIT,
    Deadlines,
    HostRule,
    normalize_origin,
    origin_or_none,
)
from dormant._devserver.inflight import InFlight
from dormant._devserver.proxy import ChunkWriter, LambdaContext, to_proxy_event
from dormant._devserver.worker import Worker
from dormant.errors import public_message

__all__ = ["DevServer"]

log = logging.getLogger("dormant.dev")


class DevServer(HTTPServer):
    """An HTTP server answering every request with ``resolver.resolve``, on a thread pool.

    When the resolver serves an app (``dormant.http.build_resolver``), the server also runs
    its handed-on work: ``app.hand_on`` is set to :attr:`worker`'s ``submit`` until
    ``server_close``. ``allow_origins``: the other origins whose pages may call it (the
    resolver's CORS must say the same: :func:`dev_cors`); ``allow_hosts``: ``Host`` names it
    answers to besides its address's (:class:`HostRule`); ``idle_timeout``: seconds a
    connection has to send each request; ``threads``: connections served at once (the others
    wait to be accepted, in a backlog of :data:`LISTEN_BACKLOG`).
    """

    request_queue_size = LISTEN_BACKLOG

    def __init__(self, address: tuple[str, int], resolver: Any, *,
                 allow_origins: Sequence[str] = (), allow_hosts: Sequence[str] = (),
                 idle_timeout: float = IDLE_TIMEOUT, threads: int = THREADS) -> None:
        # Everything server_close reads exists before binding: a failed bind calls it.
        self.resolver = resolver
        self.worker: Worker | None = None
        self._app: Any = getattr(resolver, "dormant_app", None)
        self.allow_origins = frozenset(normalize_origin(origin) for origin in allow_origins)
        self.idle_timeout = idle_timeout
        #: What the console lacks in this installation (see ``dormant._console.missing``).
        self.lacking = missing()
        self.deadlines = Deadlines()
        #: The requests running a turn now (what a stop cuts off).
        self.in_flight = InFlight()
        self._connections: queue.Queue[tuple[Any, Any] | None] = queue.Queue(maxsize=threads)
        self._pool: list[threading.Thread] = []
        self._stopping = threading.Event()
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)
        self.hosts = HostRule.of(str(self.server_address[0]), int(self.server_address[1]),
                                 allow_hosts, (socket.gethostname(), self.server_name))
        self.deadlines.start()
        for number in range(threads):
            thread = threading.Thread(target=self._serve_connections, daemon=True,
                                      name=f"dormant-dev-{number}")
            thread.start()
            self._pool.append(thread)
        self._hand_on_to_worker()

    def serve_app(self, resolver: Any) -> None:
        """Serve ``resolver`` from now on (``dormant dev --reload``: the app as it now reads):
        the next requests go to it, those being served finish on the one they started on,
        and what either hands on runs on a new :attr:`worker` through the new routes."""
        old_app, old_worker = self._app, self.worker
        self.resolver = resolver
        self._app = getattr(resolver, "dormant_app", None)
        self.worker = None
        self._hand_on_to_worker()
        if old_app is not None and self.worker is not None:
            old_app.hand_on = self.worker.submit
        if old_worker is not None:
            old_worker.close()

    def _hand_on_to_worker(self) -> None:
        rest = getattr(self.resolver, "dormant_rest", None)
        if self._app is not None and rest is not None:
            self.worker = Worker(rest)
            self._app.hand_on = self.worker.submit

    @property
    def url(self) -> str:
        address, port = self.server_address[:2]
        host = address.decode() if isinstance(address, bytes) else str(address)
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def process_request(self, request: Any, client_address: Any) -> None:
        """Hand the accepted connection to the pool; while every thread is busy and the
        hand-over queue full, accepting waits (the kernel's backlog holds the next ones)."""
        while not self._stopping.is_set():
            try:
                self._connections.put((request, client_address), timeout=0.5)
                return
            except queue.Full:
                continue
        self.shutdown_request(request)

    def _serve_connections(self) -> None:
        while True:
            item = self._connections.get()
            if item is None:
                return
            request, client_address = item
            try:
                self.finish_request(request, client_address)
            except (ConnectionError, TimeoutError) as error:  # the client's side, not ours
                log.info("connection from %s ended: %s", client_address[0], error)
            except Exception:
                self.handle_error(request, client_address)
            finally:
                self.shutdown_request(request)

    def shutdown(self) -> None:
        self._stopping.set()
        super().shutdown()

    def server_close(self) -> None:
        self._stopping.set()
        super().server_close()
        self.deadlines.close()
        while True:  # connections accepted and not yet served: nobody will serve them now
            try:
                item = self._connections.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                self.shutdown_request(item[0])
        for _ in self._pool:  # the threads stop after the connection each serves
            try:
                self._connections.put_nowait(None)
            except queue.Full:
                break
        if self.worker is not None:
            if self._app is not None and self._app.hand_on == self.worker.submit:
                self._app.hand_on = None
            self.worker.close()


class _ConnectionGone(Exception):
    """The client closed the connection (or its deadline did) in the middle of a request."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: DevServer
    #: The socket timeout while a request is read; each request sets the server's own
    #: (``idle_timeout``) in :meth:`handle_one_request`.
    timeout = IDLE_TIMEOUT

    def handle_one_request(self) -> None:
        """One request, which must arrive whole within the idle timeout."""
        self.connection.settimeout(self.server.idle_timeout)
        self.server.deadlines.arm(self.connection, self.server.idle_timeout)
        try:
            super().handle_one_request()
        finally:
            self.server.deadlines.disarm(self.connection)

    def _received(self) -> None:
        """The request is read: answering it (a stream, a long turn) has no time limit."""
        self.server.deadlines.disarm(self.connection)
        self.connection.settimeout(None)

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

    def send_error(self, code: int, message: str | None = None, explain: str | None = None
                   ) -> None:
        """What the standard library refuses itself (a malformed request line, headers too
        long, a method with no ``do_`` handler: its 501), answered in the API's JSON shape
        rather than its HTML page."""
        if code == HTTPStatus.NOT_IMPLEMENTED and self.command:  # no do_<method>
            allowed = self._allowed_methods()
            self._refuse(405, "method_not_allowed",
                         f"{self.command} is not a method of {urlsplit(self.path).path} (it "
                         f"allows {', '.join(allowed)})", {"Allow": ", ".join(allowed)})
            return
        status = HTTPStatus(code)
        self._refuse(code, status.phrase.lower().replace(" ", "_").replace("-", "_"),
                     message or status.phrase)

    def _allowed_methods(self) -> list[str]:
        """The methods served at this request's path (every handled one: an unknown path)."""
        of_path = getattr(self.server.resolver, "allowed_methods", None)
        allowed = of_path(urlsplit(self.path).path) if callable(of_path) else []
        return list(allowed) or sorted(name[3:] for name in dir(self)
                                       if name.startswith("do_"))

    def _foreign(self) -> tuple[int, str, str] | None:
        """Why this request is refused before the resolver (a foreign ``Host`` or
        ``Origin``), or None."""
        host = self.headers.get("Host")
        if host is not None and not self.server.hosts.accepts(host):
            return (421, "forbidden_host", f"this server answers to Host "
                    f"{self.server.hosts.describe()}, not {host!r} (dormant dev --allow-host "
                    f"adds a name)")
        origin = self.headers.get("Origin")
        if origin is None or self._origin_allowed(origin, host):
            return None
        return (403, "forbidden_origin", f"pages of {origin} may not call this server; it "
                "answers its own pages, clients that send no Origin, and the origins given to "
                "dormant dev --allow-origin")

    def _origin_allowed(self, origin: str, host: str | None) -> bool:
        """Whether ``origin`` is this server's own (its ``Host``'s) or an allowed one; never
        "null" (a sandboxed page, a file) nor anything that is not an origin."""
        seen = origin_or_none(origin)
        own = origin_or_none(f"http://{host}") if host else None
        return seen is not None and (seen == own or seen in self.server.allow_origins)

    def _cors(self) -> dict[str, str]:
        """The CORS headers of a streamed answer: an allowed origin's, else none."""
        origin = self.headers.get("Origin")
        if origin is None or origin_or_none(origin) not in self.server.allow_origins:
            return {}
        return {"Access-Control-Allow-Origin": origin, "Vary": "Origin"}

    def _serve(self) -> None:
        refusal = self._foreign()
        if refusal is not None:
            self._refuse(*refusal)
            return
        try:
            body = self._read_body()
        except ValueError:  # a Content-Length or chunk size that is not a size
            self._refuse(400, "invalid_body", "the request's framing is broken (Content-Length "
                         "or a chunk size is not a size)")
            return
        except _ConnectionGone:
            self.close_connection = True
            return
        if body is None:
            return  # refused as too large
        self._received()
        static = console_file(self.command, urlsplit(self.path).path,
                              self.headers.get("Accept", ""), lacking=self.server.lacking)
        if static is not None:
            self._reply({"statusCode": static.status, "body": static.body,
                         "headers": {"Content-Type": static.content_type, **static.headers}})
            return
        principal = self.headers.get(PRINCIPAL_HEADER) or DEFAULT_PRINCIPAL
        headers = {k: v for k, v in self.headers.items()}
        event = to_proxy_event(self.command, self.path, headers, body, principal=principal,
                               source_ip=self.client_address[0])
        writer = ChunkWriter(self, self._cors())
        context = LambdaContext(event["requestContext"]["requestId"], writer)
        ticket = self.server.in_flight.start(self.command, self.path, principal, body)
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
        finally:
            self.server.in_flight.end(ticket)
        if writer.started:
            writer.finish()
            return
        self._reply(result)

    def _read_body(self) -> bytes | None:
        """The request's body; None when it was refused as too large (answered already).
        ValueError: broken framing; :class:`_ConnectionGone`: the body never came whole."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            body = self._read_chunked()
            if body is None:
                self._refuse_oversize(TRANSPORT_LIMIT + 1)
            return body
        length = int(self.headers.get("Content-Length") or 0)
        if length < 0:
            raise ValueError(f"negative Content-Length {length}")
        if length > TRANSPORT_LIMIT:
            self._refuse_oversize(length)
            return None
        body = self.rfile.read(length) if length else b""
        if len(body) < length:
            raise _ConnectionGone
        return body

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
            line = self.rfile.readline()
            if not line:
                raise _ConnectionGone
            size = int(line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            total += size
            if total > TRANSPORT_LIMIT:
                return None
            part = self.rfile.read(size)
            if len(part) < size:
                raise _ConnectionGone
            parts.append(part)
            self.rfile.readline()  # the CRLF after each chunk

    def _refuse_oversize(self, length: int) -> None:
        self._refuse(413, "payload_too_large", f"the request body is {length} bytes; the "
                     f"server accepts at most {TRANSPORT_LIMIT}")

    def _refuse(self, status: int, code: str, message: str,
                headers: Mapping[str, str] | None = None) -> None:
        """Answer before the request reached the resolver, and close the connection (what
        is left of the request cannot be told from the next one)."""
        body = json.dumps({"code": code, "message": message}).encode()
        if self.request_version == "HTTP/0.9":  # the version was unreadable: no 0.9 client
            self.request_version = self.protocol_version  # lives, so the head is sent
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Connection", "close")
        self.close_connection = True
        with contextlib.suppress(OSError):  # the client is gone (or its deadline cut it)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
