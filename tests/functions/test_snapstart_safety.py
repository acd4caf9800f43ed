"""What SnapStart snapshots is a function's initialized environment: its imports and the app
built at import. Nothing made there may be unique to one environment or tied to a network
connection, so initializing a function makes no AWS call (boto3 clients are made, and connect
on their first call); ids are re-seeded after a restore (tests/unit/test_ids_snapstart.py) by
the hook the managed runtime runs. The stream function runs dormant's own runtime loop
(``dormant.aws.runtime``) instead of the managed one, so there only that loop could run it:
the template offers SnapStart on it only once the loop takes part in the restore."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.functions.conftest import Deployment, FakeLambdaContext, Recording, load_event
from tests.functions.test_template import props


@pytest.mark.parametrize("function", ["api", "stream", "webhook", "wake", "cleanup"])
def test_initializing_a_function_calls_no_aws_api(
        deployed: Deployment, iam_recorded: Recording, function: str) -> None:
    before = len(iam_recorded.recorder.of(function))
    deployed.cold_start(function)
    assert iam_recorded.recorder.of(function)[before:] == []


def test_the_recorder_does_see_a_function_s_calls(
        deployed: Deployment, iam_recorded: Recording, context: FakeLambdaContext) -> None:
    # The check above could not fail if calls went unrecorded: a request's calls are recorded.
    api = deployed.cold_start("api")
    api.handler(load_event("api_post_turn.json"), context)
    assert iam_recorded.recorder.of("api")


@contextmanager
def _runtime_api() -> Iterator[tuple[str, list[str]]]:
    """A Lambda Runtime API that serves one invocation and records every path asked for,
    answering ``/runtime/restore/next`` as Lambda does once a snapshot is restored."""
    paths: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            paths.append(self.path)
            headers = {"Lambda-Runtime-Aws-Request-Id": "restored-1",
                       "Lambda-Runtime-Deadline-Ms": "9999999999999"}
            self._answer(200, b"{}", headers if "invocation" in self.path else {})

        def do_POST(self) -> None:
            paths.append(self.path)
            if self.headers.get("Transfer-Encoding") == "chunked":
                while (size := int(self.rfile.readline().split(b";")[0], 16)) > 0:
                    self.rfile.read(size + 2)
                while self.rfile.readline() not in (b"\r\n", b""):
                    pass  # the trailers
            else:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._answer(202, json.dumps({"status": "OK"}).encode(), {})

        def _answer(self, status: int, body: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", paths
    finally:
        server.shutdown()
        server.server_close()


def test_snapstart_is_offered_on_the_stream_function_only_if_its_loop_takes_part_in_restores(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from dormant.aws.runtime import serve_forever

    # What Lambda sets in an environment it will snapshot: the runtime must then ask for
    # /runtime/restore/next (the snapshot is taken there) and, once restored, run the
    # after-restore hooks (dormant's id re-seeding among them) before any invocation.
    monkeypatch.setenv("AWS_LAMBDA_INITIALIZATION_TYPE", "snap-start")

    def handler(event: Any, context: Any, stream: Any) -> None:
        stream.start(200, {"Content-Type": "application/json"})
        stream.write("{}")
        stream.finish()

    with _runtime_api() as (address, paths):
        serve_forever(lambda: handler, address=address, invocations=1)
    takes_part = "/2018-06-01/runtime/restore/next" in paths
    assert paths[-2:] == ["/2018-06-01/runtime/invocation/next",
                          "/2018-06-01/runtime/invocation/restored-1/response"]
    # Today the loop does not: SnapStart there would restore every environment from one
    # snapshot with one id seed. Once it does, the template should offer StreamSnapStart.
    assert ("SnapStart" in props("StreamFunction")) is takes_part
