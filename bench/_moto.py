"""A moto server on 127.0.0.1 that counts what DynamoDB is asked, whoever asks.

Run as its own process (``python -m bench._moto PORT``) so the framework under test gets the
machine's other core. Every DynamoDB request is counted by operation: requests, request bytes,
response bytes, write units (``bench._capacity.write_units`` of the request) and read units
(``bench._capacity.read_units`` of the items returned). S3 requests are counted by method.
Two paths of its own answer the benchmark scripts: ``GET /__bench/counters`` and
``POST /__bench/reset``.
"""

from __future__ import annotations

import io
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]

FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}
MOTO_ACCOUNT = "123456789012"  # moto's default account
READS = ("GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems")
WRITES = ("PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem")


def _stored_size(table_name: str, key_or_item: dict[str, Any]) -> int:
    """The size of the item stored under this key (0: none), read from moto's backend: a
    write that replaces an item is priced on the larger of the two."""
    from moto.dynamodb.models import dynamodb_backends

    from bench import _capacity

    backend = dynamodb_backends[MOTO_ACCOUNT][FAKE_AWS_ENV["AWS_DEFAULT_REGION"]]
    table = backend.get_table(table_name)
    names = [table.hash_key_attr, *([table.range_key_attr] if table.range_key_attr else [])]
    key = {name: key_or_item[name] for name in names}
    item = backend.get_item(table_name, key)
    return 0 if item is None else _capacity.item_bytes(item.to_json()["Attributes"])


def _old_sizes(operation: str, body: bytes) -> list[int]:
    """Sizes of the items a write touches, as stored before it (in the request's order)."""
    if operation not in WRITES or not body:
        return []
    params = json.loads(body)
    try:
        if operation in ("PutItem", "UpdateItem", "DeleteItem"):
            return [_stored_size(params["TableName"], params.get("Key") or params["Item"])]
        if operation == "TransactWriteItems":
            sizes = []
            for entry in params["TransactItems"]:
                (_, action), = entry.items()
                sizes.append(_stored_size(action["TableName"],
                                          action.get("Key") or action["Item"]))
            return sizes
        sizes = []
        for table_name, requests in params["RequestItems"].items():
            for request in requests:
                put = request.get("PutRequest", {}).get("Item")
                key = put or request["DeleteRequest"]["Key"]
                sizes.append(_stored_size(table_name, key))
        return sizes
    except Exception:  # a table or key moto itself will refuse: priced as nothing stored
        return []


class Counting:
    """WSGI middleware around moto's app: counts each request before and after moto answers."""

    def __init__(self, app: WSGIApp) -> None:
        self.app = app
        self.lock = threading.Lock()
        self.counters: dict[str, defaultdict[str, float]] = {}
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.counters = {name: defaultdict(float) for name in (
                "requests", "sent", "received", "write_units", "read_units")}

    def snapshot(self) -> dict[str, dict[str, float]]:
        with self.lock:
            return {name: dict(counter) for name, counter in self.counters.items()}

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path.startswith("/__bench/"):
            return self._own(path, start_response)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if target.startswith("DynamoDB_"):
            operation = target.rpartition(".")[2]
        else:
            operation = f"s3:{environ.get('REQUEST_METHOD', '?')}"
        olds = _old_sizes(operation, body)
        chunks = list(self.app(environ, start_response))
        received = sum(len(chunk) for chunk in chunks)
        self._count(operation, body, b"".join(chunks) if operation in READS else b"", received,
                    olds)
        return chunks

    def _count(self, operation: str, body: bytes, response: bytes, received: int,
               olds: list[int]) -> None:
        from bench import _capacity

        params: dict[str, Any] = json.loads(body) if body and operation in WRITES + READS \
            else {}
        units = _capacity.write_units(operation, params, old_items=olds) \
            if operation in WRITES else 0.0
        read = 0.0
        if response:
            consistent = bool(params.get("ConsistentRead", False))
            answer = json.loads(response)
            items = answer.get("Items") or ([answer["Item"]] if "Item" in answer else [])
            read = float(_capacity.read_units(
                sum(_capacity.item_bytes(item) for item in items), consistent))
        with self.lock:
            self.counters["requests"][operation] += 1
            self.counters["sent"][operation] += len(body)
            self.counters["received"][operation] += received
            self.counters["write_units"][operation] += units
            self.counters["read_units"][operation] += read

    def _own(self, path: str, start_response: StartResponse) -> Iterator[bytes]:
        if path == "/__bench/reset":
            self.reset()
        payload = json.dumps(self.snapshot()).encode()
        start_response("200 OK", [("Content-Type", "application/json"),
                                  ("Content-Length", str(len(payload)))])
        return iter([payload])


def serve(port: int) -> None:
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no access log per request
    app = Counting(DomainDispatcherApplication(create_backend_app))
    server = make_server("127.0.0.1", port, app, threaded=True,
                         request_handler=MotoRequestHandler)
    print("ready", flush=True)
    server.serve_forever()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class MotoServer:
    """The counting moto server as a child process (a context manager)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._process: subprocess.Popen[str] | None = None

    def __enter__(self) -> MotoServer:
        root = Path(__file__).resolve().parent.parent
        self._process = subprocess.Popen(
            [sys.executable, "-m", "bench._moto", str(self.port)], cwd=root,
            env={**os.environ, **FAKE_AWS_ENV}, stdout=subprocess.PIPE, text=True)
        assert self._process.stdout is not None
        if self._process.stdout.readline().strip() != "ready":
            raise RuntimeError("the moto server did not start")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                self.counters()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"the moto server on {self.endpoint} does not answer")

    def __exit__(self, *_: object) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=10)

    def counters(self, reset: bool = False) -> dict[str, dict[str, float]]:
        url = f"{self.endpoint}/__bench/{'reset' if reset else 'counters'}"
        with urllib.request.urlopen(urllib.request.Request(
                url, method="POST" if reset else "GET"), timeout=10) as answer:
            result: dict[str, dict[str, float]] = json.loads(answer.read())
            return result

    def env(self) -> dict[str, str]:
        """What a process needs to reach this server and nothing else."""
        return {**FAKE_AWS_ENV, "AWS_ENDPOINT_URL": self.endpoint}


if __name__ == "__main__":
    os.environ.update(FAKE_AWS_ENV)
    serve(int(sys.argv[1]))
