"""moto for dormant's tests: fake credentials, serialised calls into moto, a local server,
and fault injection. Reuse these instead of rolling your own.

moto is not thread-safe (see ../shared/AWS-NOTES.md): racing threads can break its state or
let two conditional writes both win. Everything here serialises calls *into moto* on one
process-wide lock, :data:`MOTO_LOCK`, so a race test exercises the code under test, not moto.

API
---
``FAKE_AWS_ENV``
    Fake credentials and region (``testing`` / ``us-east-1``). Never real ones.
``aws_env(monkeypatch)``
    Put ``FAKE_AWS_ENV`` into the environment (and drop profile/endpoint variables that could
    point boto3 at a real account).
``in_process_aws()`` (context manager)
    ``mock_aws`` plus the lock around ``BotocoreStubber.__call__``. Call ``aws_env`` (or use
    ``pytest.MonkeyPatch.context()``) first. boto3 clients built inside talk to moto in memory.
``MotoServer`` / ``moto_server()``
    A real HTTP moto server on ``127.0.0.1`` (free port) serving
    ``DomainDispatcherApplication(create_backend_app)`` through ``werkzeug.serving.make_server``
    behind a WSGI middleware that holds the lock. ``server.url``; ``server.client("dynamodb")``
    builds a boto3 client with ``endpoint_url`` set; ``server.endpoint_env()`` gives
    ``AWS_ENDPOINT_URL`` and per-service ``AWS_ENDPOINT_URL_<SERVICE>`` for code that builds
    its own clients (boto3 honours them natively); ``server.reset()`` clears moto's state.
    ``shared_moto_server()`` returns one server per test process (started on first use,
    stopped at exit): moto's Flask apps are slow to build, so reuse it and give each test its
    own table/queue names (or call ``reset()``).
``pytest fixtures`` (import them into a conftest: ``from tests._moto import moto_aws, ...``)
    ``moto_aws``: in-process moto with fake env, yields nothing.
    ``moto_server_env``: the shared server, with ``AWS_ENDPOINT_URL*`` pointing at it; yields
    the ``MotoServer``.
``FaultInjector(client)``
    Makes a boto3 client see errors moto never produces, through a ``before-send`` hook
    registered first: ``faults.fail("TransactWriteItems", throttling(), conflict())`` answers
    the next two TransactWriteItems calls with those responses, then lets calls through.
    ``faults.sent`` records ``(operation, request body)`` of every intercepted call. Response
    builders: ``throttling()``, ``transaction_conflict()``, ``server_error()``,
    ``client_error(code, message, status)``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

__all__ = [
    "FAKE_AWS_ENV",
    "MOTO_LOCK",
    "FaultInjector",
    "MotoServer",
    "aws_env",
    "client_error",
    "in_process_aws",
    "moto_aws",
    "moto_server",
    "moto_server_env",
    "server_error",
    "shared_moto_server",
    "throttling",
    "transaction_conflict",
]

#: One lock for every call into moto, in-process and server alike.
MOTO_LOCK = threading.RLock()
#: Set on a request a FaultInjector answered. botocore calls *every* ``before-send`` handler
#: (the first response wins), so in-process moto would otherwise still execute the request.
_INJECTED = "_dormant_fault_injected"

FAKE_AWS_ENV: dict[str, str] = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}
_UNSET = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL",
          "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL_SQS",
          "AWS_ENDPOINT_URL_SCHEDULER")
#: Services whose endpoint variable ``MotoServer.endpoint_env`` sets.
SERVICES = ("dynamodb", "s3", "sqs", "scheduler", "secretsmanager", "ssm", "lambda")


def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake credentials and region; no profile or endpoint that could reach a real account."""
    for name in _UNSET:
        monkeypatch.delenv(name, raising=False)
    for name, value in FAKE_AWS_ENV.items():
        monkeypatch.setenv(name, value)



def put_items(table: str, items: list[dict[str, Any]]) -> None:
    """Write raw items (as a store of another version wrote them) into ``table``."""
    import boto3

    client = boto3.client("dynamodb")
    for item in items:
        client.put_item(TableName=table, Item=item)


def session_items(table: str, session_id: str) -> dict[str, dict[str, Any]]:
    """A session's raw items in ``table``, by sort key."""
    import boto3

    found = boto3.client("dynamodb").query(
        TableName=table, KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": session_id}})["Items"]
    return {item["sk"]["S"]: item for item in found}

@contextlib.contextmanager
def in_process_aws() -> Iterator[None]:
    """``mock_aws`` with every call into moto serialised on :data:`MOTO_LOCK`."""
    from moto import mock_aws
    from moto.core.botocore_stubber import BotocoreStubber

    original = BotocoreStubber.__call__

    def locked(self: Any, event_name: str, request: Any, **kwargs: Any) -> Any:
        if getattr(request, _INJECTED, False):
            return None  # a FaultInjector answered it: moto must not act on it too
        with MOTO_LOCK:
            return original(self, event_name, request, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(BotocoreStubber, "__call__", locked)
        with mock_aws():
            yield


class _Locked:
    """WSGI middleware: one request at a time into moto (the response body included)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        with MOTO_LOCK:
            return list(self.app(environ, start_response))


class MotoServer:
    """moto over HTTP on 127.0.0.1, requests serialised into moto. Start, use, stop."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._host, self._port = host, port
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the server first"
        return f"http://{self._host}:{self._server.server_port}"

    def start(self) -> MotoServer:
        from moto.server import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server

        app = _Locked(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(self._host, self._port, app, threaded=True,
                                   request_handler=MotoRequestHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="moto-server")
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._server = self._thread = None

    def reset(self) -> None:
        """Clear every moto backend (all tables, queues, buckets)."""
        import urllib.request

        request = urllib.request.Request(self.url + "/moto-api/reset", method="POST")
        with urllib.request.urlopen(request, timeout=10):
            pass

    def endpoint_env(self) -> dict[str, str]:
        env = {"AWS_ENDPOINT_URL": self.url}
        env.update({f"AWS_ENDPOINT_URL_{s.upper()}": self.url for s in SERVICES})
        return env

    def client(self, service: str, **kwargs: Any) -> Any:
        """A boto3 client for ``service`` talking HTTP to this server."""
        import boto3
        from botocore.config import Config

        kwargs.setdefault("config", Config(retries={"mode": "standard", "max_attempts": 3}))
        return boto3.client(service, endpoint_url=self.url, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing",
                            **kwargs)

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def dynamodb_engine(engine: str, monkeypatch: pytest.MonkeyPatch, *, table: str,
                    bucket: str) -> Iterator[None]:
    """AWS for a DynamoDB store test on ``engine`` ("moto", or "dynamodb-local": Amazon's
    DynamoDB Local for DynamoDB, moto for S3), with ``bucket`` created; DynamoDB Local is
    shared between tests, so ``table`` is dropped from it afterwards."""
    from tests import _dynamodb_local

    aws_env(monkeypatch)
    local = _dynamodb_local.shared_dynamodb_local() if engine != "moto" else None
    with in_process_aws():  # S3 (and DynamoDB, for moto): in-process moto
        if local is not None:  # DynamoDB Local's address is no AWS endpoint: moto passes it on
            monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", local.url)
        import boto3

        boto3.client("s3").create_bucket(Bucket=bucket)
        try:
            yield
        finally:
            if local is not None:
                with contextlib.suppress(local.client().exceptions.ResourceNotFoundException):
                    local.client().delete_table(TableName=table)


@contextlib.contextmanager
def moto_server() -> Iterator[MotoServer]:
    """A private server for the block (prefer :func:`shared_moto_server`: it is faster)."""
    with MotoServer() as server:
        yield server


_shared: MotoServer | None = None
_shared_lock = threading.Lock()


def shared_moto_server() -> MotoServer:
    """The test process's moto server, started on first use and stopped at exit."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = MotoServer().start()
            atexit.register(_shared.stop)
        return _shared


@pytest.fixture
def moto_aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """In-process moto with fake credentials."""
    aws_env(monkeypatch)
    with in_process_aws():
        yield


@pytest.fixture
def moto_server_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[MotoServer]:
    """The shared moto server, with ``AWS_ENDPOINT_URL*`` and fake credentials set."""
    aws_env(monkeypatch)
    server = shared_moto_server()
    for name, value in server.endpoint_env().items():
        monkeypatch.setenv(name, value)
    yield server


# --- fault injection ---------------------------------------------------------------------------


@dataclass
class FaultInjector:
    """Answers chosen calls of one boto3 client with canned error responses."""

    client: Any
    _queued: dict[str, list[Any]] = field(default_factory=dict)
    sent: list[tuple[str, bytes]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.client.meta.events.register_first("before-send", self._before_send)

    def fail(self, operation: str, *responses: Callable[[Any], Any]) -> FaultInjector:
        """Answer the next ``len(responses)`` calls of ``operation`` (e.g. ``"Query"``) with
        these responses, in order; later calls go through."""
        with self._lock:
            self._queued.setdefault(operation, []).extend(responses)
        return self

    def _before_send(self, request: Any, **kwargs: Any) -> Any:
        target = request.headers.get("X-Amz-Target", b"")
        target = target.decode() if isinstance(target, bytes) else str(target)
        operation = target.rpartition(".")[2]
        with self._lock:
            body = request.body if isinstance(request.body, bytes) else (
                (request.body or "").encode() if isinstance(request.body, str | None) else b"")
            self.sent.append((operation, body))
            queue = self._queued.get(operation)
            make = queue.pop(0) if queue else None
        if make is None:
            return None
        setattr(request, _INJECTED, True)
        return make(request)


def client_error(code: str, message: str = "injected", status: int = 400,
                 extra: dict[str, Any] | None = None) -> Callable[[Any], Any]:
    """A JSON-protocol (DynamoDB-style) error response."""

    def build(request: Any) -> Any:
        from botocore.awsrequest import AWSResponse
        from moto.core.botocore_stubber import MockRawResponse

        body = json.dumps({"__type": f"com.amazonaws.dynamodb.v20120810#{code}",
                           "message": message, **(extra or {})}).encode()
        headers = {"Content-Type": "application/x-amz-json-1.0",
                   "x-amzn-RequestId": "injected", "x-amzn-ErrorType": code}
        return AWSResponse(request.url, status, headers, MockRawResponse(body))

    return build


def throttling() -> Callable[[Any], Any]:
    """What DynamoDB answers when a partition is over its throughput (botocore retries it)."""
    return client_error("ThrottlingException", "Rate of requests exceeds the allowed throughput")


def server_error() -> Callable[[Any], Any]:
    return client_error("InternalServerError", "Internal server error", status=500)


def transaction_conflict(actions: int = 2, index: int = 0) -> Callable[[Any], Any]:
    """A cancelled transaction whose ``index``-th action met another transaction."""
    reasons: list[dict[str, str]] = [{"Code": "None"} for _ in range(actions)]
    reasons[index] = {"Code": "TransactionConflict",
                      "Message": "Transaction is ongoing for the item"}
    codes = ", ".join(r["Code"] for r in reasons)
    return client_error(
        "TransactionCanceledException",
        f"Transaction cancelled, please refer cancellation reasons for specific reasons [{codes}]",
        extra={"CancellationReasons": reasons},
    )
