"""dormant.aws.runtime against the emulated Runtime API (tests/_gateway.py): the wire format
of a streamed response, errors before and after the stream started, and init errors."""

from __future__ import annotations

import base64
import gc
import http.client
import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from dormant.aws.runtime import (
    CONTENT_TYPE,
    InvocationContext,
    ResponseStream,
    StreamClosed,
    load,
    serve_forever,
)
from tests._gateway import Gateway

TOKENS = {"t": "alice"}


def serving(gateway: Gateway, handler: Any, invocations: int) -> threading.Thread:
    thread = threading.Thread(target=serve_forever, args=(lambda: handler,), kwargs={
        "address": gateway.runtime_api, "invocations": invocations}, daemon=True)
    thread.start()
    return thread


def call(gateway: Gateway, path: str = "/x") -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection(gateway.url.removeprefix("http://"), timeout=30)
    conn.request("POST", path, body=b"{}", headers={"Authorization": "Bearer t"})
    reply = conn.getresponse()
    return reply.status, dict(reply.getheaders()), reply.read()


def test_a_streamed_response_is_a_prelude_eight_nuls_and_the_payload() -> None:
    seen: list[InvocationContext] = []

    def handler(event: Any, context: InvocationContext, stream: ResponseStream) -> None:
        seen.append(context)
        stream.start(201, {"Content-Type": "text/plain"}, {"X-Many": ["a", "b"]})
        for piece in ("one ", "two ", "three"):
            stream.write(piece)
        stream.finish()

    with Gateway(TOKENS) as gateway:
        thread = serving(gateway, handler, 1)
        status, headers, body = call(gateway)
        thread.join(10)
        [invocation] = gateway.invocations.values()
    assert (status, headers["Content-Type"], headers["X-Many"], body) == (
        201, "text/plain", "a, b", b"one two three")
    sent = invocation.response_headers
    assert sent["Lambda-Runtime-Function-Response-Mode"] == "streaming"
    assert sent["Transfer-Encoding"] == "chunked"
    assert sent["Content-Type"] == CONTENT_TYPE
    assert invocation.trailers == {}
    [context] = seen
    assert context.aws_request_id == invocation.request_id
    assert 0 < context.get_remaining_time_in_millis() <= gateway.timeout_s * 1000


def test_a_handler_that_fails_before_answering_reports_an_invocation_error() -> None:
    def handler(event: Any, context: Any, stream: ResponseStream) -> None:
        raise KeyError("no such thing")

    with Gateway(TOKENS) as gateway:
        thread = serving(gateway, handler, 1)
        status, _, _ = call(gateway)
        thread.join(10)
    assert status == 502  # what API Gateway answers a failed invocation


def test_a_handler_that_fails_mid_stream_ends_it_with_the_error_trailers() -> None:
    def handler(event: Any, context: Any, stream: ResponseStream) -> None:
        stream.start(200, {"Content-Type": "text/event-stream"})
        stream.write("data: 1\n\n")
        raise RuntimeError("broke halfway")

    with Gateway(TOKENS) as gateway:
        thread = serving(gateway, handler, 1)
        status, _, body = call(gateway)
        thread.join(10)
        [invocation] = gateway.invocations.values()
    assert (status, body) == (200, b"data: 1\n\n")
    assert invocation.trailers["Lambda-Runtime-Function-Error-Type"] == "RuntimeError"
    detail = json.loads(base64.b64decode(invocation.trailers["Lambda-Runtime-Function-Error-Body"]))
    assert detail == {"errorType": "RuntimeError", "errorMessage": "broke halfway"}


def test_a_handler_that_answers_nothing_still_ends_its_invocation() -> None:
    with Gateway(TOKENS) as gateway:
        thread = serving(gateway, lambda event, context, stream: None, 2)
        assert call(gateway)[0] == 200
        assert call(gateway)[0] == 200  # the loop went on to the next invocation
        thread.join(10)
    assert not thread.is_alive()


def test_an_app_that_cannot_be_built_reports_an_init_error() -> None:
    def build() -> Any:
        raise ImportError("no module named shop")

    with Gateway(TOKENS) as gateway, pytest.raises(ImportError):
        serve_forever(build, address=gateway.runtime_api, invocations=1)
    assert [e["errorType"] for e in gateway.init_errors] == ["ImportError"]


def test_writing_to_a_stream_the_runtime_closed_raises_stream_closed() -> None:
    closed: list[BaseException] = []

    def handler(event: Any, context: Any, stream: ResponseStream) -> None:
        stream.start(200, {})
        try:
            for _ in range(10_000):
                stream.write(b"x" * 1024)
        except StreamClosed as error:
            closed.append(error)

    with Gateway(TOKENS) as gateway:
        thread = serving(gateway, handler, 1)
        conn = http.client.HTTPConnection(gateway.url.removeprefix("http://"), timeout=30)
        conn.request("POST", "/x", body=b"{}", headers={"Authorization": "Bearer t"})
        reply = conn.getresponse()
        reply.read(10)
        reply.close()
        conn.close()
        thread.join(30)
    assert closed and isinstance(closed[0], OSError)


def _handler_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
                    body: str) -> None:
    (tmp_path / f"{name}.py").write_text("import gc\nCOLLECTING = gc.isenabled()\n" + body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)


def test_loading_the_handler_builds_it_with_the_collector_off_then_resumes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The streaming loop imports the handler's module itself (not functions/stream/app.py,
    # which turns the collector off under the managed runtime): the init it pays is the same.
    _handler_module(tmp_path, monkeypatch, "loaded_handler", "def handler(e, c, s): pass\n")
    assert gc.isenabled()

    handler = load("loaded_handler:handler")

    assert sys.modules["loaded_handler"].COLLECTING is False
    assert handler is sys.modules["loaded_handler"].handler
    assert gc.isenabled()


def test_a_handler_module_that_fails_to_build_leaves_the_collector_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _handler_module(tmp_path, monkeypatch, "broken_handler", "raise RuntimeError('no app')\n")

    with pytest.raises(RuntimeError, match="no app"):
        load("broken_handler:handler")

    assert gc.isenabled()
