"""Fixtures for the Lambda functions' tests: their environment, fresh imports, events/, moto.

Lambda puts the function's ``CodeUri`` (``functions/``) on ``sys.path`` and imports the handler
as ``api.app`` / ``webhook.app``: one line each, importing ``handler`` from ``dormant.aws.<name>``
(which builds the app ``DORMANT_APP`` names). So this conftest puts ``functions/`` on
``sys.path`` the same way, once, and a cold start imports the entry point and every module of
``dormant.aws`` afresh.
"""

from __future__ import annotations

import copy
import functools
import importlib
import json
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests._moto import MotoServer, aws_env, in_process_aws, shared_moto_server
from tests.functions.iam_policy import CallRecorder, Names, acting_as, refused

ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = ROOT / "functions"
EVENTS = ROOT / "events"

if str(FUNCTIONS) not in sys.path:
    sys.path.insert(0, str(FUNCTIONS))

#: Modules a cold start imports from ``functions/``; dropped before each fresh import.
_FUNCTION_MODULES = ("api", "api.app", "stream", "stream.app", "webhook", "webhook.app", "wake",
                     "wake.app", "cleanup", "cleanup.app", "dormant.aws.api",
                     "dormant.aws.stream", "dormant.aws.webhook", "dormant.aws.wake",
                     "dormant.aws.cleanup", "dormant.aws.deployment", "dormant.aws.hand_on",
                     "dormant.aws.purge",
                     "dormant.aws.tracing", "dormant.samples.bookings", "bookings")
#: What the template gives every function for timers (EventBridge Scheduler -> wake function).
WAKE_ARN = "arn:aws:lambda:us-east-1:123456789012:function:dormant-test-wake"
SCHEDULER_ROLE_ARN = "arn:aws:iam::123456789012:role/dormant-test-scheduler"
WAKE_DLQ_ARN = "arn:aws:sqs:us-east-1:123456789012:dormant-test-wake-dlq"


def load_event(name: str) -> dict[str, Any]:
    """A sample event from ``events/`` (a deep copy: tests may edit it)."""
    with (EVENTS / name).open() as file:
        return copy.deepcopy(json.load(file))


#: The sample event of a record on the webhook queue (a hand-on, a delegation's start).
HAND_ON = "webhook_sqs_fifo_hand_on.json"


def batch_failures(response: dict[str, Any]) -> list[str]:
    """The message ids an SQS batch answer reports failed (those the queue delivers again)."""
    return [item["itemIdentifier"] for item in response["batchItemFailures"]]


def queue_event(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """What the SQS event source hands the webhook function for these queued messages."""
    template = load_event(HAND_ON)["Records"][0]
    records = []
    for message in messages:
        record = copy.deepcopy(template)
        record["messageId"] = message["MessageId"]
        record["receiptHandle"] = message["ReceiptHandle"]
        record["body"] = message["Body"]
        record["md5OfBody"] = message["MD5OfBody"]
        record["attributes"].update(message["Attributes"])
        records.append(record)
    return {"Records": records}


def seed_wake_timer(deployed: Deployment, event: dict[str, Any]) -> None:
    """The session as a turn that asked for a wake event's timer left it (timer pending)."""
    from datetime import UTC, datetime

    import dormant
    from dormant.stores import DynamoDBStore

    app = dormant.App(store=DynamoDBStore(deployed.table, bucket=deployed.bucket))
    session = app.sessions.get(event["sessionId"]) or app.sessions.create(event["sessionId"])
    session.schedule(event["name"], at=datetime.fromtimestamp(event["fireAt"] / 1000, UTC),
                     message=event["message"])
    assert app.sessions.commit(session).ok


def api_body(response: dict[str, Any]) -> Any:
    """The JSON body of an API Gateway proxy response."""
    return json.loads(response["body"])


def with_body(event: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    event = copy.deepcopy(event)
    event["body"] = json.dumps(body)
    return event


def as_principal(event: dict[str, Any], sub: str | None) -> dict[str, Any]:
    """The event as another Cognito user sends it (``None``: no authorizer claims at all)."""
    event = copy.deepcopy(event)
    if sub is None:
        event["requestContext"].pop("authorizer", None)
    else:
        event["requestContext"]["authorizer"]["claims"]["sub"] = sub
    return event


@dataclass
class FakeLambdaContext:
    """What Powertools reads from the Lambda context object."""

    function_name: str = "dormant-test"
    function_version: str = "$LATEST"
    memory_limit_in_mb: int = 1024
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:dormant-test"
    aws_request_id: str = ""
    log_group_name: str = "/aws/lambda/dormant-test"
    log_stream_name: str = "2026/11/30/[$LATEST]test"
    remaining_ms: int = 300_000

    def __post_init__(self) -> None:
        self.aws_request_id = self.aws_request_id or str(uuid.uuid4())

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


@dataclass
class Deployment:
    """The resources a deployed stack gives the functions, and a way to cold-start them."""

    table: str
    bucket: str
    schedule_group: str = "default"
    #: The webhook SQS FIFO queue (what the template's ``WebhookQueue`` is): its name and URL.
    queue: str = "dormant-webhook.fifo"
    queue_url: str = ""
    server: MotoServer | None = None
    #: The template parameters the stack was deployed with (what its policies resolve with).
    parameters: dict[str, str] = field(default_factory=dict)

    def cold_start(self, function: str) -> ModuleType:
        """Import ``functions/<function>/app.py`` afresh, as a new execution environment does.

        The AWS calls its import, its ``handler`` and its modules make are ``function``'s: the
        recorder (:func:`iam_recorded`) checks them against the function's role."""
        for name in _FUNCTION_MODULES:
            sys.modules.pop(name, None)
        importlib.invalidate_caches()
        if _recording is not None:
            _recording.deployment = self
        with acting_as(function):
            entry = importlib.import_module(f"{function}.app")
        # The entry point is one import: what it serves is the module behind it.
        module = sys.modules[f"dormant.aws.{function}"]
        assert entry.handler is module.handler
        if _recording is not None:
            app = getattr(module, "app", None)
            parts = [getattr(app, part, None) for part in ("store", "scheduler", "hand_on")]
            _recording.recorder.claim(
                function, [sys.modules[name] for name in _FUNCTION_MODULES if name in sys.modules],
                [thing for thing in (app, *parts) if thing is not None])
        module.handler = _acting_handler(function, module.handler)
        return module

    def names(self) -> Names:
        """What the template's resources are called in this deployment (for its policies)."""
        return Names(table=self.table, bucket=self.bucket, schedule_group=self.schedule_group,
                     queue=self.queue, scheduler_role_arn=SCHEDULER_ROLE_ARN,
                     wake_dlq_arn=WAKE_DLQ_ARN, parameters=self.parameters)

    def session(self, session_id: str) -> Any:
        """The stored session (whole ledger), read with a store of its own."""
        from dormant import App
        from dormant.stores import DynamoDBStore

        return App(store=DynamoDBStore(self.table, bucket=self.bucket)).sessions.get(session_id)

    def schedules(self) -> list[dict[str, Any]]:
        """Every schedule in the deployment's timer group, in full (``get_schedule``)."""
        import boto3

        client = boto3.client("scheduler")
        names = [s["Name"] for s in client.list_schedules(GroupName=self.schedule_group)
                 ["Schedules"]]
        return [client.get_schedule(Name=n, GroupName=self.schedule_group) for n in names]

    def timers(self) -> dict[str, dict[str, Any]]:
        """Every schedule in the timer group by the timer it delivers (its event's ``name``)."""
        return {json.loads(s["Target"]["Input"])["name"]: s for s in self.schedules()}

    def queued(self) -> list[dict[str, Any]]:
        """Take every message waiting in the webhook queue (body, attributes), in order."""
        import boto3

        client = boto3.client("sqs")
        taken: list[dict[str, Any]] = []
        while True:
            batch = client.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10,
                                           AttributeNames=["All"], WaitTimeSeconds=0,
                                           VisibilityTimeout=0).get("Messages", [])
            if not batch:
                return taken
            for message in batch:
                client.delete_message(QueueUrl=self.queue_url,
                                      ReceiptHandle=message["ReceiptHandle"])
            taken.extend(batch)


def _acting_handler(function: str, handler: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(handler)
    def acting(*args: Any, **kwargs: Any) -> Any:
        with acting_as(function):
            return handler(*args, **kwargs)

    return acting


@dataclass
class Recording:
    """The AWS calls of the functions one test drove, and the deployment they ran in."""

    recorder: CallRecorder
    deployment: Deployment | None = None

    def refused(self) -> list[str]:
        """Each recorded call its function's role in template.yaml does not allow."""
        from tests.functions.test_template import template

        if not self.recorder.calls:
            return []
        assert self.deployment is not None, "calls were recorded outside any deployment"
        return [str(c) for c in refused(template(), self.recorder.calls, self.deployment.names())]


_recording: Recording | None = None


@pytest.fixture(autouse=True)
def iam_recorded() -> Iterator[Recording]:
    """Record every AWS call of every function a test drives; fail the test naming each call
    the function's role in template.yaml does not allow (see iam_policy.py)."""
    global _recording
    recording = Recording(CallRecorder().start())
    _recording = recording
    try:
        yield recording
    finally:
        recording.recorder.stop()
        _recording = None
    if problems := recording.refused():
        pytest.fail("calls outside the function's role in template.yaml:\n  "
                    + "\n  ".join(problems), pytrace=False)


def _deployment_env(monkeypatch: pytest.MonkeyPatch) -> Deployment:
    aws_env(monkeypatch)
    suffix = uuid.uuid4().hex[:8]
    deployment = Deployment(table=f"dormant-sessions-{suffix}", bucket=f"dormant-offload-{suffix}",
                            schedule_group=f"dormant-timers-{suffix}",
                            queue=f"dormant-webhook-{suffix}.fifo")
    env = {
        "DORMANT_TABLE": deployment.table,
        "DORMANT_BUCKET": deployment.bucket,
        "DORMANT_SESSION_TTL_DAYS": "30",
        "DORMANT_TURN_TIMEOUT": "25",
        "DORMANT_SCHEDULE_GROUP": deployment.schedule_group,
        "DORMANT_WAKE_TARGET_ARN": WAKE_ARN,
        "DORMANT_SCHEDULER_ROLE_ARN": SCHEDULER_ROLE_ARN,
        "DORMANT_SCHEDULE_DLQ_ARN": WAKE_DLQ_ARN,
        "POWERTOOLS_SERVICE_NAME": "dormant",
        "POWERTOOLS_METRICS_NAMESPACE": "Dormant",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "LOG_LEVEL": "INFO",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    # The sample serves its demo model: no key, no secret, never the network.
    for name in ("OPENAI_API_KEY", "DORMANT_OPENAI_SECRET", "DORMANT_OPENAI_PARAMETER"):
        monkeypatch.delenv(name, raising=False)
    return deployment


def _provision(deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> None:
    import boto3

    from dormant.stores import DynamoDBStore

    DynamoDBStore(deployment.table).ensure_table()
    boto3.client("s3").create_bucket(Bucket=deployment.bucket)
    boto3.client("scheduler").create_schedule_group(Name=deployment.schedule_group)
    # As template.yaml's WebhookQueue, whose URL every function gets for hand-ons.
    deployment.queue_url = boto3.client("sqs").create_queue(
        QueueName=deployment.queue,
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true",
                    "DeduplicationScope": "messageGroup",
                    "FifoThroughputLimit": "perMessageGroupId"})["QueueUrl"]
    monkeypatch.setenv("WEBHOOK_QUEUE_URL", deployment.queue_url)


@pytest.fixture
def deployed(monkeypatch: pytest.MonkeyPatch) -> Iterator[Deployment]:
    """A stack on in-process moto: table and bucket created, the functions' env set."""
    deployment = _deployment_env(monkeypatch)
    with in_process_aws():
        _provision(deployment, monkeypatch)
        yield deployment
    for name in _FUNCTION_MODULES:
        sys.modules.pop(name, None)


@pytest.fixture
def deployed_over_http(monkeypatch: pytest.MonkeyPatch) -> Iterator[Deployment]:
    """The same stack on the shared moto *server*: boto3 talks HTTP to 127.0.0.1, reached only
    through the standard ``AWS_ENDPOINT_URL_*`` variables, as ``sam local`` would set them."""
    deployment = _deployment_env(monkeypatch)
    server = shared_moto_server()
    for name, value in server.endpoint_env().items():
        monkeypatch.setenv(name, value)
    deployment.server = server
    _provision(deployment, monkeypatch)
    yield deployment
    for name in _FUNCTION_MODULES:
        sys.modules.pop(name, None)


@pytest.fixture
def context() -> FakeLambdaContext:
    return FakeLambdaContext()
