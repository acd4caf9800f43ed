"""API Gateway (REST, Cognito authorizer, Lambda proxy integration) in front of the Lambda
Runtime API, emulated on 127.0.0.1 from their documented contracts, for a function whose
runtime loop is a real process (``bootstrap-stream``).

- The gateway side takes a client's HTTP request, refuses it with 401 when its bearer token
  names no user (the authorizer: the function is never invoked), else builds the REST proxy
  event (``requestContext.authorizer.claims.sub``, a request id) and queues an invocation
  with a deadline.
- The runtime side serves ``GET /2018-06-01/runtime/invocation/next`` (the event and its
  ``Lambda-Runtime-*`` headers) and reads ``POST …/{id}/response`` as it arrives: in
  ``streaming`` mode, chunked, a JSON prelude (``statusCode``, ``headers``,
  ``multiValueHeaders``, ``cookies``) within the first 16 KB, eight NUL bytes, then the
  payload, and the error trailers; ``…/{id}/error`` becomes a 502.
- Transfer mode ``STREAM`` relays each payload chunk to the client as it arrives;
  ``BUFFERED`` holds the whole answer until the function has finished, as API Gateway's
  buffered integration does.
- A client that hangs up while its answer streams has its invocation's response connection
  closed, so the function's next write fails (what a runtime that propagates the disconnect
  would do; docs/aws.md says what Lambda itself does).
"""

from __future__ import annotations

import json
import queue
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

DELIMITER = b"\0" * 8
PRELUDE_LIMIT = 16 * 1024
_END = object()


@dataclass
class Invocation:
    request_id: str
    event: dict[str, Any]
    deadline_ms: int
    #: What the runtime sent: ("start", prelude), ("data", bytes), ("error", dict), _END.
    out: queue.Queue[Any] = field(default_factory=queue.Queue)
    client_gone: threading.Event = field(default_factory=threading.Event)
    trailers: dict[str, str] = field(default_factory=dict)
    #: The response's request headers as the runtime sent them.
    response_headers: dict[str, str] = field(default_factory=dict)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):  # a side that hung up
            super().handle_error(request, client_address)


class Gateway:
    """Both sides, each on its own port; ``with Gateway(...) as gw:`` starts and stops them."""

    def __init__(self, tokens: Mapping[str, str], *, mode: str = "STREAM",
                 timeout_s: float = 900.0, stage: str = "v1") -> None:
        if mode not in ("STREAM", "BUFFERED"):
            raise ValueError(mode)
        self.tokens = dict(tokens)
        self.mode = mode
        self.timeout_s = timeout_s
        self.stage = stage
        self.pending: queue.Queue[Invocation] = queue.Queue()
        self.invocations: dict[str, Invocation] = {}
        self.invoked = 0
        self.init_errors: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._api = _Server(("127.0.0.1", 0), _gateway_handler(self))
        self._runtime = _Server(("127.0.0.1", 0), _runtime_handler(self))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._api.server_address[1]}"

    @property
    def runtime_api(self) -> str:
        return f"127.0.0.1:{self._runtime.server_address[1]}"

    def __enter__(self) -> Gateway:
        for server in (self._api, self._runtime):
            threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        for server in (self._api, self._runtime):
            server.shutdown()
            server.server_close()

    def event(self, method: str, target: str, headers: Mapping[str, str], body: bytes,
              sub: str, source_ip: str) -> dict[str, Any]:
        """The REST proxy event API Gateway sends for this request."""
        parts = urlsplit(target)
        query = parse_qsl(parts.query, keep_blank_values=True)
        multi: dict[str, list[str]] = {}
        for name, value in headers.items():
            multi.setdefault(name, []).append(value)
        request_id = str(uuid.uuid4())
        return {
            "resource": parts.path, "path": parts.path, "httpMethod": method,
            "headers": dict(headers), "multiValueHeaders": multi,
            "queryStringParameters": dict(query) or None,
            "multiValueQueryStringParameters": {k: [v for n, v in query if n == k]
                                                for k, _ in query} or None,
            "pathParameters": None, "stageVariables": None,
            "requestContext": {
                "resourcePath": parts.path, "httpMethod": method, "path": f"/{self.stage}"
                f"{parts.path}", "stage": self.stage, "requestId": request_id,
                "extendedRequestId": request_id, "requestTimeEpoch": int(time.time() * 1000),
                "protocol": "HTTP/1.1", "accountId": "123456789012", "apiId": "emulated",
                "identity": {"sourceIp": source_ip, "userAgent": headers.get("User-Agent")},
                "authorizer": {"claims": {"sub": sub, "token_use": "id"}},
            },
            "body": body.decode() if body else None,
            "isBase64Encoded": False,
        }

    def invoke(self, event: dict[str, Any]) -> Invocation:
        invocation = Invocation(request_id=str(uuid.uuid4()), event=event,
                                deadline_ms=int((time.time() + self.timeout_s) * 1000))
        with self._lock:
            self.invocations[invocation.request_id] = invocation
            self.invoked += 1
        self.pending.put(invocation)
        return invocation


def _gateway_handler(gateway: Gateway) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def do_DELETE(self) -> None:
            self._serve()

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            token = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
            sub = gateway.tokens.get(token)
            if sub is None:  # the Cognito authorizer refuses; the function never runs
                self._send_whole(401, {"Content-Type": "application/json"},
                                 b'{"message":"Unauthorized"}')
                return
            headers = {k: v for k, v in self.headers.items() if k != "Authorization"}
            headers["Authorization"] = "Bearer ***"
            event = gateway.event(self.command, self.path, headers, body, sub,
                                  self.client_address[0])
            invocation = gateway.invoke(event)
            first = invocation.out.get()
            if first[0] == "error":
                self._send_whole(502, {"Content-Type": "application/json"},
                                 b'{"message":"Internal server error"}')
                return
            prelude = first[1]
            if gateway.mode == "BUFFERED":
                data = b""
                while (item := invocation.out.get()) is not _END:
                    data += item[1] if item[0] == "data" else b""
                self._send_whole(prelude["statusCode"], _headers(prelude), data)
                return
            self.send_response(prelude["statusCode"])
            for name, value in _headers(prelude).items():
                self.send_header(name, value)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                self.wfile.flush()
                while (item := invocation.out.get()) is not _END:
                    if item[0] == "data" and item[1]:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(item[1]), item[1]))
                        self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                invocation.client_gone.set()
                self.close_connection = True

        def _send_whole(self, status: int, headers: Mapping[str, str], data: bytes) -> None:
            self.send_response(status)
            for name, value in headers.items():
                if name.lower() != "content-length":
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()

    return Handler


def _headers(prelude: Mapping[str, Any]) -> dict[str, str]:
    headers = {k: str(v) for k, v in (prelude.get("headers") or {}).items()}
    for name, values in (prelude.get("multiValueHeaders") or {}).items():
        headers[name] = ", ".join(str(v) for v in values)
    return headers


def _runtime_handler(gateway: Gateway) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            if not self.path.endswith("/runtime/invocation/next"):
                self.send_error(404)
                return
            invocation = gateway.pending.get()
            body = json.dumps(invocation.event).encode()
            self.send_response(200)
            self.send_header("Lambda-Runtime-Aws-Request-Id", invocation.request_id)
            self.send_header("Lambda-Runtime-Deadline-Ms", str(invocation.deadline_ms))
            self.send_header("Lambda-Runtime-Invoked-Function-Arn",
                             "arn:aws:lambda:us-east-1:123456789012:function:dormant-stream")
            self.send_header("Lambda-Runtime-Trace-Id", "Root=1-00000000-000000000000000000000000")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            parts = self.path.strip("/").split("/")
            if parts[-2:] == ["init", "error"]:
                gateway.init_errors.append(json.loads(self._body()))
                self._accepted()
                return
            invocation = gateway.invocations.get(parts[-2]) if len(parts) >= 2 else None
            if invocation is None:
                self.send_error(404)
                return
            invocation.response_headers = dict(self.headers.items())
            if parts[-1] == "error":
                invocation.out.put(("error", json.loads(self._body() or b"{}")))
                invocation.out.put(_END)
                self._accepted()
                return
            if self.headers.get("Lambda-Runtime-Function-Response-Mode") != "streaming":
                reply = json.loads(self._body() or b"null")  # a buffered proxy response
                invocation.out.put(("start", {k: v for k, v in reply.items() if k != "body"}))
                invocation.out.put(("data", (reply.get("body") or "").encode()))
                invocation.out.put(_END)
                self._accepted()
                return
            self._relay(invocation)

        def _relay(self, invocation: Invocation) -> None:
            head = b""
            started = False
            try:
                for piece in self._chunks(invocation):
                    if invocation.client_gone.is_set():
                        raise ConnectionAbortedError("the client hung up")
                    if started:
                        invocation.out.put(("data", piece))
                        continue
                    head += piece
                    if DELIMITER in head:
                        prelude, _, rest = head.partition(DELIMITER)
                        invocation.out.put(("start", json.loads(prelude)))
                        started = True
                        if rest:
                            invocation.out.put(("data", rest))
                    elif len(head) > PRELUDE_LIMIT:
                        raise ValueError("no prelude within the first 16 KB")
            except ConnectionAbortedError:
                invocation.out.put(_END)
                self.close_connection = True
                # the function's next write fails (shutdown: the handler's files hold the fd)
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if not started:
                invocation.out.put(("error", {"errorMessage": "no prelude"}))
            invocation.out.put(_END)
            self._accepted()

        def _chunks(self, invocation: Invocation) -> Any:
            while True:
                size_line = self.rfile.readline()
                if not size_line:
                    raise ConnectionAbortedError("the function closed its response")
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while (line := self.rfile.readline()) not in (b"\r\n", b"\n", b""):
                        name, _, value = line.decode().partition(":")
                        invocation.trailers[name.strip()] = value.strip()
                    return
                data = self.rfile.read(size)
                self.rfile.readline()
                yield data

        def _body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _accepted(self) -> None:
            self.send_response(202)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

    return Handler
