"""A Lambda runtime loop that streams: the Runtime API, spoken from Python.

Python's managed runtime answers each invocation with one buffered payload; Lambda streams a
response only when the runtime posts it in the Runtime API's *streaming* mode (what Node's
``awslambda.streamifyResponse`` and the Rust and .NET runtimes do). This module is that client,
for a function on the ``python3.13`` runtime whose ``AWS_LAMBDA_EXEC_WRAPPER`` replaces the
managed loop with ours (``bootstrap-stream``, shipped beside it; docs/aws.md says why this and
not the Lambda Web Adapter)::

    GET  /2018-06-01/runtime/invocation/next             -> the event, its request id, deadline
    POST /2018-06-01/runtime/invocation/{id}/response    Lambda-Runtime-Function-Response-Mode:
         streaming, Transfer-Encoding: chunked; the body is API Gateway's streamed proxy
         response: a JSON prelude (statusCode, headers, multiValueHeaders, cookies), eight NUL
         bytes, then the payload as it is written
    POST /2018-06-01/runtime/invocation/{id}/error       a failure before anything was sent
         (after that: the Lambda-Runtime-Function-Error-Type/-Body trailers)
    POST /2018-06-01/runtime/init/error                  the app could not be built
    GET  /2018-06-01/runtime/restore/next                SnapStart: the snapshot is taken
         while it waits; it answers in an environment restored from it
    POST /2018-06-01/runtime/restore/error               an after-restore hook failed

Under SnapStart (``AWS_LAMBDA_INITIALIZATION_TYPE=snap-start``) the loop runs the hooks apps
register with the runtime's ``snapshot_restore_py`` as the managed loop does: before-snapshot
hooks last registered first, then ``restore/next``, then after-restore hooks in order (dormant
re-seeds its ids there). Without that module it refuses to be snapshotted: every environment
restored from one snapshot would mint the same ids.

Only the standard library: nothing here costs import time beyond ``http.client``.
"""

from __future__ import annotations

import base64
import gc
import http.client
import importlib
import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "AFTER_RESTORE_ERROR",
    "BEFORE_SNAPSHOT_ERROR",
    "CONTENT_TYPE",
    "DELIMITER",
    "Invocation",
    "InvocationContext",
    "ResponseStream",
    "RuntimeApi",
    "StreamClosed",
    "load",
    "main",
    "serve_forever",
    "snap_start",
]

log = logging.getLogger("dormant.aws")

_VERSION = "2018-06-01"
#: The content type of a streamed HTTP integration response (prelude + delimiter + payload).
CONTENT_TYPE = "application/vnd.awslambda.http-integration-response"
#: What separates the JSON prelude from the payload.
DELIMITER = b"\0" * 8
_TRAILERS = ("Lambda-Runtime-Function-Error-Type", "Lambda-Runtime-Function-Error-Body")


class StreamClosed(ConnectionError):
    """The response stream cannot take more: the connection to the Runtime API broke."""


class Invocation:
    """One event from ``/invocation/next``, with what its headers tell."""

    def __init__(self, event: Any, headers: Mapping[str, str]) -> None:
        self.event = event
        self.request_id = headers.get("Lambda-Runtime-Aws-Request-Id", "")
        self.deadline_ms = int(headers.get("Lambda-Runtime-Deadline-Ms") or 0)
        self.function_arn = headers.get("Lambda-Runtime-Invoked-Function-Arn", "")
        self.trace_id = headers.get("Lambda-Runtime-Trace-Id")


class InvocationContext:
    """The Lambda context object a handler expects (what Powertools reads from it)."""

    def __init__(self, invocation: Invocation, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        self.aws_request_id = invocation.request_id
        self.invoked_function_arn = invocation.function_arn
        self.function_name = env.get("AWS_LAMBDA_FUNCTION_NAME", "")
        self.function_version = env.get("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        self.memory_limit_in_mb = int(env.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE") or 0)
        self.log_group_name = env.get("AWS_LAMBDA_LOG_GROUP_NAME", "")
        self.log_stream_name = env.get("AWS_LAMBDA_LOG_STREAM_NAME", "")
        self.identity = None
        self.client_context = None
        self._deadline_ms = invocation.deadline_ms

    def get_remaining_time_in_millis(self) -> int:
        return max(0, self._deadline_ms - int(time.time() * 1000))


class ResponseStream:
    """One invocation's streamed response. :meth:`start` sends the HTTP status and headers
    (the prelude), :meth:`write` each piece of the body as one chunk, :meth:`finish` ends it;
    :meth:`fail` ends it with the error trailers. A broken connection raises
    :class:`StreamClosed` (an ``OSError``) from the write that found it."""

    def __init__(self, api: RuntimeApi, request_id: str) -> None:
        self._api = api
        self._request_id = request_id
        self._conn: http.client.HTTPConnection | None = None
        self.started = False
        self.finished = False

    def start(self, status: int, headers: Mapping[str, str] | None = None,
              multi_value_headers: Mapping[str, list[str]] | None = None,
              cookies: list[str] | None = None) -> None:
        if self.started:
            raise RuntimeError("the response has started already")
        self.started = True
        prelude: dict[str, Any] = {"statusCode": status, "headers": dict(headers or {})}
        if multi_value_headers:
            prelude["multiValueHeaders"] = {k: list(v) for k, v in multi_value_headers.items()}
        if cookies:
            prelude["cookies"] = list(cookies)
        conn = self._api.connection()
        try:
            conn.putrequest("POST", f"/{_VERSION}/runtime/invocation/{self._request_id}/response",
                            skip_accept_encoding=True)
            conn.putheader("Lambda-Runtime-Function-Response-Mode", "streaming")
            conn.putheader("Transfer-Encoding", "chunked")
            conn.putheader("Content-Type", CONTENT_TYPE)
            conn.putheader("Trailer", ", ".join(_TRAILERS))
            conn.endheaders()
        except OSError as error:
            conn.close()
            raise StreamClosed(f"the Runtime API refused the response: {error}") from error
        self._conn = conn
        self._send(json.dumps(prelude, separators=(",", ":")).encode() + DELIMITER)

    def write(self, data: bytes | str) -> None:
        if not self.started:
            raise RuntimeError("start the response before writing its body")
        payload = data.encode() if isinstance(data, str) else data
        if payload:
            self._send(payload)

    def finish(self) -> None:
        self._end(b"0\r\n\r\n")

    def fail(self, error_type: str, message: str) -> None:
        """End the stream as failed: Lambda records the error the trailers name."""
        body = base64.b64encode(json.dumps({"errorType": error_type, "errorMessage": message})
                                .encode()).decode()
        self._end(f"0\r\n{_TRAILERS[0]}: {error_type}\r\n{_TRAILERS[1]}: {body}\r\n\r\n"
                  .encode())

    def _send(self, payload: bytes) -> None:
        assert self._conn is not None
        try:
            self._conn.send(b"%x\r\n%s\r\n" % (len(payload), payload))
        except OSError as error:
            self._close()
            raise StreamClosed(f"the response stream broke: {error}") from error

    def _end(self, last: bytes) -> None:
        if self.finished or self._conn is None:
            self.finished = True
            return
        self.finished = True
        try:
            self._conn.send(last)
            self._conn.getresponse().read()
        except (OSError, http.client.HTTPException) as error:
            log.warning("invocation %s: the end of its response was not delivered: %s",
                        self._request_id, error)
        finally:
            self._close()

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class RuntimeApi:
    """The Runtime API at ``address`` (``AWS_LAMBDA_RUNTIME_API``: host:port)."""

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self._host, self._port = (host or address), int(port or 80)

    def connection(self, timeout: float | None = None) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def next(self) -> Invocation:
        """Block until the next invocation (no timeout: the environment may sleep for hours)."""
        body, headers = self._wait("invocation/next")
        return Invocation(json.loads(body or b"null"), headers)

    def _wait(self, what: str) -> tuple[bytes, dict[str, str]]:
        """GET ``/runtime/<what>``, which answers when Lambda has something (no timeout):
        the body and headers of its 200 answer."""
        conn = self.connection()
        try:
            conn.request("GET", f"/{_VERSION}/runtime/{what}")
            reply = conn.getresponse()
            body = reply.read()
            if reply.status != 200:
                raise RuntimeError(f"the Runtime API answered {reply.status} to {what}: "
                                   f"{body!r}")
            return body, dict(reply.getheaders())
        finally:
            conn.close()

    def stream(self, request_id: str) -> ResponseStream:
        return ResponseStream(self, request_id)

    def error(self, request_id: str, error: BaseException) -> None:
        self._post_error(f"/{_VERSION}/runtime/invocation/{request_id}/error", error)

    def init_error(self, error: BaseException, kind: str | None = None) -> None:
        self._post_error(f"/{_VERSION}/runtime/init/error", error, kind)

    def restore_next(self) -> None:
        """SnapStart: wait while the snapshot is taken; return once restored from it."""
        self._wait("restore/next")

    def restore_error(self, error: BaseException) -> None:
        self._post_error(f"/{_VERSION}/runtime/restore/error", error, AFTER_RESTORE_ERROR)

    def _post_error(self, path: str, error: BaseException, kind: str | None = None) -> None:
        body = json.dumps({"errorMessage": str(error), "errorType": type(error).__name__,
                           "stackTrace": traceback.format_exception(error)})
        conn = self.connection(timeout=10)
        try:
            conn.request("POST", path, body=body, headers={
                "Content-Type": "application/json",
                "Lambda-Runtime-Function-Error-Type": kind or type(error).__name__})
            conn.getresponse().read()
        finally:
            conn.close()


#: The error types the managed runtime reports for a failed SnapStart hook.
BEFORE_SNAPSHOT_ERROR = "Runtime.BeforeSnapshotError"
AFTER_RESTORE_ERROR = "Runtime.AfterRestoreError"
#: Where Lambda's runtime hooks are registered (on the python3.13 runtime: /var/runtime).
_HOOKS = "snapshot_restore_py"


def snap_start(api: RuntimeApi) -> None:
    """Take part in a SnapStart snapshot as the managed runtime does: run the before-snapshot
    hooks (last registered first), wait on ``restore/next``, then run the after-restore hooks
    (first registered first). A before-snapshot failure (or no hook registry: nothing would
    re-seed what must differ per environment) is an init error, exit 64; an after-restore
    failure is reported to ``restore/error``, exit 65."""
    try:
        try:
            hooks = importlib.import_module(_HOOKS)
        except ImportError as error:
            raise RuntimeError(
                f"SnapStart is on but {_HOOKS} cannot be imported (on Lambda it is in "
                "/var/runtime): without it nothing re-seeds ids after a restore, so the "
                "function refuses to be snapshotted") from error
        before = hooks.get_before_snapshot()
        while before:
            func, args, kwargs = before.pop()
            func(*args, **kwargs)
    except Exception as error:
        log.exception("SnapStart: before the snapshot")
        api.init_error(error, BEFORE_SNAPSHOT_ERROR)
        sys.exit(64)
    api.restore_next()
    try:
        for func, args, kwargs in hooks.get_after_restore():
            func(*args, **kwargs)
    except Exception as error:
        log.exception("SnapStart: after the restore")
        api.restore_error(error)
        sys.exit(65)


#: ``handler(event, context, stream)``: answer the invocation on ``stream``.
StreamHandler = Callable[[Any, InvocationContext, ResponseStream], None]


def serve_forever(build: Callable[[], StreamHandler], *, address: str | None = None,
                  invocations: int | None = None) -> None:
    """Build the handler (an error goes to ``/init/error``), then answer invocations one at a
    time, forever (or ``invocations`` of them). A handler that raises before its response
    started is reported to ``/invocation/{id}/error``; after, its stream ends with the error
    trailers. ``_X_AMZN_TRACE_ID`` carries each invocation's trace header, as the managed
    runtime sets it. Under SnapStart the handler is built before the snapshot, and the first
    invocation is asked for once restored (:func:`snap_start`)."""
    api = RuntimeApi(address or os.environ["AWS_LAMBDA_RUNTIME_API"])
    try:
        handler = build()
    except Exception as error:
        api.init_error(error)
        raise
    if os.environ.get("AWS_LAMBDA_INITIALIZATION_TYPE") == "snap-start":
        snap_start(api)
    served = 0
    while invocations is None or served < invocations:
        invocation = api.next()
        served += 1
        if invocation.trace_id:
            os.environ["_X_AMZN_TRACE_ID"] = invocation.trace_id
        else:
            os.environ.pop("_X_AMZN_TRACE_ID", None)
        stream = api.stream(invocation.request_id)
        try:
            handler(invocation.event, InvocationContext(invocation), stream)
        except Exception as error:
            log.exception("invocation %s failed", invocation.request_id)
            if not stream.started:
                api.error(invocation.request_id, error)
            else:
                stream.fail(type(error).__name__, str(error))
            continue
        if not stream.finished:
            if not stream.started:
                stream.start(200, {})
            stream.finish()


#: The handler ``main`` serves unless ``DORMANT_STREAM_HANDLER`` names another.
DEFAULT_HANDLER = "dormant.aws.stream:stream_handler"


def main() -> None:
    """``bootstrap-stream``'s entry point: serve the handler ``DORMANT_STREAM_HANDLER`` names
    (``module:attribute``, default :data:`DEFAULT_HANDLER`), importing it as the init phase
    (a failure to build the app is reported to ``/init/error``)."""
    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "INFO").upper())
    spec = os.environ.get("DORMANT_STREAM_HANDLER") or DEFAULT_HANDLER
    serve_forever(lambda: load(spec))


def load(spec: str) -> StreamHandler:
    """Import the handler ``spec`` names (``module:attribute``): the function's init phase.

    The garbage collector is off while it runs, as ``functions/<name>/app.py`` turns it off
    under the managed runtime (which this loop replaces, so the stream function's ``app.py``
    is not what Lambda imports): what init builds lives as long as the environment, and
    collections while it is built find nothing to free. The module's last line,
    :func:`dormant.aws.initialised`, freezes what it built and resumes collection; for a
    handler module that does not call it, collection resumes here all the same."""
    gc.disable()
    try:
        module, _, attribute = spec.partition(":")
        found: StreamHandler = getattr(importlib.import_module(module), attribute)
    finally:
        gc.enable()
    return found
