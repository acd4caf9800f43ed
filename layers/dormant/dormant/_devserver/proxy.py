"""An HTTP request as the ``api`` Lambda's resolver sees it: the API Gateway REST proxy event
(:func:`to_proxy_event`), a stand-in Lambda context (:class:`LambdaContext`) and the writer
through which a streamed answer goes out as HTTP chunks (:class:`ChunkWriter`)."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from dormant.http import SSE_WRITER_ATTRIBUTE

__all__ = ["ChunkWriter", "LambdaContext", "to_proxy_event"]


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


class LambdaContext:
    """A stand-in Lambda context; carries the SSE writer for the streamed route."""

    function_name = "dormant-dev"
    memory_limit_in_mb = 0
    invoked_function_arn = "arn:aws:lambda:local:000000000000:function:dormant-dev"

    def __init__(self, request_id: str, writer: ChunkWriter) -> None:
        self.aws_request_id = request_id
        setattr(self, SSE_WRITER_ATTRIBUTE, writer)

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 15 * 60 * 1000


class ChunkWriter:
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


