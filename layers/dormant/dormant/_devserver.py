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

Who can drive it: the server trusts whoever sends ``X-Principal``, so it must answer only its
own console and the clients on this machine, never a page another site opened in the
browser. Before the resolver, it refuses

- a ``Host`` it does not answer to (421 ``forbidden_host``; see :class:`HostRule`): a page
  of another site that rebinds its own name to 127.0.0.1 sends its own name;
- an ``Origin`` that is neither the server's own nor one passed as ``allow_origins`` (403
  ``forbidden_origin``): a cross-site form or ``text/plain`` POST needs no CORS pre-flight,
  so CORS alone would not stop it writing. A request with no ``Origin`` (curl, the SDKs) is
  not a browser page's and passes.

CORS headers are sent only for ``allow_origins`` (:func:`dev_cors` is the resolver's rule,
the streamed answers follow the same). A method the server has no handler for, and any
request the standard library refuses itself (a malformed request line, headers too long), is
answered in the API's JSON error shape. Connections are served by a fixed pool of threads
(``threads``); a connection that sends no complete request within ``idle_timeout`` seconds
(an idle keep-alive, a request dribbled byte by byte) is closed, so none holds a thread for
long. The limit is on reading a request only: a streamed answer runs as long as it runs.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import json
import logging
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qsl, urlsplit

from aws_lambda_powertools.event_handler import CORSConfig

from dormant._console import console_file, missing
from dormant.errors import public_message
from dormant.http import SSE_WRITER_ATTRIBUTE
from dormant.http._voice import HEADERS

if TYPE_CHECKING:
    from dormant.handlers import HandlerInput

__all__ = ["DEFAULT_PRINCIPAL", "IDLE_TIMEOUT", "THREADS", "DevServer", "HostRule", "Worker",
           "dev_cors", "normalize_origin", "to_proxy_event"]

log = logging.getLogger("dormant.dev")

DEFAULT_PRINCIPAL = "local"
PRINCIPAL_HEADER = "X-Principal"
#: Bodies past this are refused before being read (API Gateway's own payload limit).
TRANSPORT_LIMIT = 10 * 1024 * 1024
#: Connections the kernel holds for ``accept`` while every thread is busy starting others.
#: The stdlib's default (5) resets connections when a burst of clients (a browser opening a
#: page, a test with 32 threads) arrives at once.
LISTEN_BACKLOG = 1024
#: Seconds a connection may take to send a whole request (or sit idle between two).
IDLE_TIMEOUT = 10.0
#: Threads serving connections: at most this many requests are served at once.
THREADS = 32
_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


def normalize_origin(value: str) -> str:
    """``value`` as a browser sends it in ``Origin`` (``http://localhost:5173``: scheme, host,
    port unless the scheme's default, lower case, no path); ValueError when it is not one."""
    url = urlsplit(value.strip())
    try:
        port = url.port
    except ValueError as error:
        raise ValueError(f"{value!r} is not an origin: {error}") from None
    if url.scheme not in ("http", "https") or not url.hostname or url.path not in ("", "/") \
            or url.query or url.fragment or url.username is not None:
        raise ValueError(f"{value!r} is not an origin (scheme://host[:port], e.g. "
                         f"http://localhost:5173)")
    host = f"[{url.hostname}]" if ":" in url.hostname else url.hostname
    default = {"http": 80, "https": 443}[url.scheme]
    return f"{url.scheme}://{host}" + (f":{port}" if port not in (None, default) else "")


def _origin_or_none(value: str) -> str | None:
    """``value`` normalised as :func:`normalize_origin` does, or None when it is not one."""
    try:
        return normalize_origin(value)
    except ValueError:
        return None


def dev_cors(origins: Sequence[str]) -> CORSConfig | Literal[False]:
    """The resolver's CORS rule for ``dormant dev``: none at all (same origin only) unless
    ``origins`` are given, then those origins exactly, ``X-Principal`` allowed."""
    if not origins:
        return False
    first, *rest = [normalize_origin(origin) for origin in origins]
    return CORSConfig(allow_origin=first, extra_origins=rest, allow_headers=[PRINCIPAL_HEADER],
                      expose_headers=list(HEADERS))


def _split_host(value: str) -> tuple[str, int | None] | None:
    """``Host``'s name and port (None: no port), or None when it is not ``name[:port]``."""
    value = value.strip().lower()
    if value.startswith("["):
        name, bracket, rest = value[1:].partition("]")
        if not bracket:
            return None
    else:
        name, colon, port = value.partition(":")
        rest = colon + port
    if not rest:
        return name, None
    if rest[0] == ":" and rest[1:].isdigit():
        return name, int(rest[1:])
    return None


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class HostRule:
    """The ``Host`` values a server bound to one address answers to.

    Bound to a loopback address: ``127.0.0.1``, ``localhost`` and ``[::1]`` (and the address
    itself). Bound to one other address: that address. Bound to every interface (``0.0.0.0``,
    ``::``): any IP literal, ``localhost`` and the machine's own names. Always on the bound
    port (no port: only when that is 80), plus the ``extra`` names (``--allow-host``).
    """

    names: frozenset[str]
    port: int
    any_ip: bool = False

    @classmethod
    def of(cls, address: str, port: int, extra: Iterable[str] = (),
           own_names: Iterable[str] = ()) -> HostRule:
        """The rule for a server bound to ``address`` (an IP) and ``port``; ``own_names``:
        the machine's names, for a server on every interface."""
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        names = {str(ip)}
        if ip.is_loopback:
            names.update(_LOOPBACK_NAMES)
        elif ip.is_unspecified:
            names.update(("localhost", *own_names))
        names.update(extra)
        return cls(frozenset(name.lower().strip("[]") for name in names if name), port,
                   ip.is_unspecified)

    def accepts(self, host: str) -> bool:
        """Whether a request whose ``Host`` header is ``host`` is this server's."""
        split = _split_host(host)
        if split is None:
            return False
        name, port = split
        if port != self.port and not (port is None and self.port == 80):
            return False
        return name in self.names or (self.any_ip and _is_ip(name))

    def describe(self) -> str:
        """The accepted hosts, for a refusal's message."""
        shown = sorted(f"[{name}]" if ":" in name else name for name in self.names)
        if self.any_ip:
            shown.insert(0, "any IP address")
        return ", ".join(f"{name}:{self.port}" for name in shown)


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

    def __init__(self, handler: BaseHTTPRequestHandler, cors: Mapping[str, str]) -> None:
        self._handler = handler
        self._cors = cors
        self.started = False

    def __call__(self, text: str) -> None:
        handler = self._handler
        if not self.started:
            self.started = True
            handler.send_response(200)
            handler.send_header("Content-Type", "text/event-stream")
            handler.send_header("Cache-Control", "no-cache")
            for name, value in self._cors.items():
                handler.send_header(name, value)
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


class _Deadlines:
    """Closes connections whose request has not arrived by its deadline.

    A socket timeout bounds each read, not a request: a client sending one byte every few
    seconds would hold its thread for ever. This one thread shuts such a connection down
    (the blocked read then sees the end of the stream), whatever the pace of its bytes.
    """

    def __init__(self) -> None:
        self._due: dict[socket.socket, float] = {}
        self._changed = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._watch, name="dormant-dev-deadlines",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def arm(self, connection: socket.socket, seconds: float) -> None:
        with self._changed:
            self._due[connection] = time.monotonic() + seconds
            self._changed.notify()

    def disarm(self, connection: socket.socket) -> None:
        with self._changed:
            self._due.pop(connection, None)

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify()

    def _watch(self) -> None:
        with self._changed:
            while not self._closed:
                now = time.monotonic()
                for connection, due in list(self._due.items()):
                    if due <= now:
                        del self._due[connection]
                        _cut(connection)
                upcoming = min(self._due.values(), default=None)
                self._changed.wait(None if upcoming is None else max(upcoming - now, 0.01))


def _cut(connection: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already gone
        connection.shutdown(socket.SHUT_RDWR)


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
        self.deadlines = _Deadlines()
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
        rest = getattr(resolver, "dormant_rest", None)
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
        seen = _origin_or_none(origin)
        own = _origin_or_none(f"http://{host}") if host else None
        return seen is not None and (seen == own or seen in self.server.allow_origins)

    def _cors(self) -> dict[str, str]:
        """The CORS headers of a streamed answer: an allowed origin's, else none."""
        origin = self.headers.get("Origin")
        if origin is None or _origin_or_none(origin) not in self.server.allow_origins:
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
        writer = _ChunkWriter(self, self._cors())
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
