"""What SnapStart snapshots is a function's initialized environment: its imports and the app
built at import. Nothing made there may be unique to one environment or tied to a network
connection, so initializing a function makes no AWS call (boto3 clients are made, and connect
on their first call); ids are re-seeded after a restore (tests/unit/test_ids_snapstart.py) by
the hook the managed runtime runs. The stream function runs dormant's own runtime loop
(``dormant.aws.runtime``) instead of the managed one, so that loop runs the hooks: checked here
against a Runtime API served on 127.0.0.1 with the runtime's own hook registry
(``snapshot_restore_py``); the template offers SnapStart on it only because it does."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
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
def _runtime_api() -> Iterator[tuple[str, list[str], dict[str, str]]]:
    """A Lambda Runtime API that serves invocations and records every path asked for (and
    the error type posted to each error path), answering ``/runtime/restore/next`` as Lambda
    does once a snapshot is restored."""
    paths: list[str] = []
    errors: dict[str, str] = {}

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
            if self.path.endswith("/error"):
                errors[self.path] = self.headers.get("Lambda-Runtime-Function-Error-Type", "")
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
        yield f"127.0.0.1:{server.server_address[1]}", paths, errors
    finally:
        server.shutdown()
        server.server_close()


RESTORE_NEXT = "/2018-06-01/runtime/restore/next"
FIRST_INVOCATION = ["/2018-06-01/runtime/invocation/next",
                    "/2018-06-01/runtime/invocation/restored-1/response"]


def _answer(event: Any, context: Any, stream: Any) -> None:
    stream.start(200, {"Content-Type": "application/json"})
    stream.write("{}")
    stream.finish()


@pytest.fixture
def hooks(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The runtime's hook registry, as Lambda's python3.13 runtime has it, holding what
    dormant registered at import; its lists are the test's own (running the hooks empties
    the before-snapshot list, as the managed runtime's runner does)."""
    import snapshot_restore_py

    import dormant._ids  # noqa: F401  (registers its re-seeding at import)

    monkeypatch.setenv("AWS_LAMBDA_INITIALIZATION_TYPE", "snap-start")
    monkeypatch.setattr(snapshot_restore_py, "_before_snapshot_registry", [])
    monkeypatch.setattr(snapshot_restore_py, "_after_restore_registry",
                        list(snapshot_restore_py.get_after_restore()))
    return snapshot_restore_py


def test_the_stream_loop_runs_snapstart_s_hooks_around_the_restore(hooks: Any) -> None:
    from dormant import _ids
    from dormant.aws.runtime import serve_forever

    assert any(func is _ids._reseed for func, _, _ in hooks.get_after_restore())
    order: list[str] = []
    with _runtime_api() as (address, paths, errors):
        hooks.register_before_snapshot(lambda: order.append(f"first registered {paths[:]}"))
        hooks.register_before_snapshot(lambda: order.append(f"last registered {paths[:]}"))
        hooks.register_after_restore(lambda: order.append(f"restored {paths[:]}"))
        before = _ids.new_id("x")
        serve_forever(lambda: _answer, address=address, invocations=1)
        after = _ids.new_id("x")
    # Before the snapshot: last registered first; after the restore, before any invocation.
    assert order == ["last registered []", "first registered []", f"restored {[RESTORE_NEXT]}"]
    assert paths == [RESTORE_NEXT, *FIRST_INVOCATION] and errors == {}
    # dormant's ids were re-seeded by the restore: another environment restored from the same
    # snapshot mints from a seed of its own.
    assert before.split("_")[1] != after.split("_")[1]


def test_a_failed_after_restore_hook_is_reported_to_lambda(hooks: Any) -> None:
    from dormant.aws.runtime import AFTER_RESTORE_ERROR, serve_forever

    def broken() -> None:
        raise OSError("no entropy")

    hooks.register_after_restore(broken)
    with _runtime_api() as (address, paths, errors), pytest.raises(SystemExit) as exit_:
        serve_forever(lambda: _answer, address=address, invocations=1)
    assert exit_.value.code == 65
    assert paths == [RESTORE_NEXT, "/2018-06-01/runtime/restore/error"]
    assert errors == {"/2018-06-01/runtime/restore/error": AFTER_RESTORE_ERROR}


def test_a_failed_before_snapshot_hook_is_an_init_error(hooks: Any) -> None:
    from dormant.aws.runtime import BEFORE_SNAPSHOT_ERROR, serve_forever

    def broken() -> None:
        raise RuntimeError("cannot close the pool")

    hooks.register_before_snapshot(broken)
    with _runtime_api() as (address, paths, errors), pytest.raises(SystemExit) as exit_:
        serve_forever(lambda: _answer, address=address, invocations=1)
    assert exit_.value.code == 64
    assert paths == ["/2018-06-01/runtime/init/error"]
    assert errors == {"/2018-06-01/runtime/init/error": BEFORE_SNAPSHOT_ERROR}


def test_without_the_hook_registry_the_loop_refuses_to_be_snapshotted(
        hooks: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from dormant.aws.runtime import serve_forever

    monkeypatch.setitem(sys.modules, "snapshot_restore_py", None)  # import fails
    with _runtime_api() as (address, paths, _), pytest.raises(SystemExit) as exit_:
        serve_forever(lambda: _answer, address=address, invocations=1)
    assert exit_.value.code == 64 and paths == ["/2018-06-01/runtime/init/error"]


def test_without_snapstart_the_loop_asks_for_no_restore(monkeypatch: pytest.MonkeyPatch) -> None:
    from dormant.aws.runtime import serve_forever

    monkeypatch.delenv("AWS_LAMBDA_INITIALIZATION_TYPE", raising=False)
    with _runtime_api() as (address, paths, errors):
        serve_forever(lambda: _answer, address=address, invocations=1)
    assert paths == FIRST_INVOCATION and errors == {}


def test_snapstart_is_offered_on_the_stream_function_only_if_its_loop_takes_part_in_restores(
        hooks: Any) -> None:
    from dormant.aws.runtime import serve_forever

    with _runtime_api() as (address, paths, _):
        serve_forever(lambda: _answer, address=address, invocations=1)
    takes_part = RESTORE_NEXT in paths
    assert paths[-2:] == FIRST_INVOCATION
    assert ("SnapStart" in props("StreamFunction")) is takes_part


def test_bootstrap_stream_puts_the_runtime_s_modules_last_on_the_path(tmp_path: Path) -> None:
    """On Lambda, ``snapshot_restore_py`` is in /var/runtime: the wrapper keeps it reachable,
    after the function's code and the layer. Run with a stand-in interpreter that prints the
    path it was given."""
    interpreter = tmp_path / "python"
    interpreter.write_text('#!/bin/sh\nprintf %s "$PYTHONPATH"\n')
    interpreter.chmod(0o755)
    wrapper = (Path(__file__).resolve().parents[2] / "layers" / "dormant" / "dormant" / "aws"
               / "bootstrap-stream")
    env = {"PATH": os.environ["PATH"], "LAMBDA_TASK_ROOT": "/var/task",
           "LAMBDA_RUNTIME_DIR": "/var/runtime"}
    shown = subprocess.run(["sh", str(wrapper), str(interpreter)], capture_output=True,
                           text=True, check=True, env=env)
    assert shown.stdout == "/var/task:/opt/python:/var/runtime"
    shown = subprocess.run(["sh", str(wrapper), str(interpreter)], capture_output=True,
                           text=True, check=True, env={**env, "PYTHONPATH": "/extra"})
    assert shown.stdout == "/var/task:/opt/python:/extra:/var/runtime"
