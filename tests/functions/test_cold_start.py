"""What a cold start loads: only what the first request needs (SPEC §9, STYLE 9).

Each test starts a fresh interpreter with the deployed environment (the OpenAI secret in
Secrets Manager, the timers' scheduler, the webhook queue, Lambda's variables under which
Powertools would trace) against the shared moto server, imports the function as Lambda does,
and reports what ``sys.modules`` and the app hold before and after its first requests.
Timings are not asserted here: bench/coldstart.py measures them.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests._moto import FAKE_AWS_ENV, shared_moto_server
from tests.functions.conftest import EVENTS, FUNCTIONS, ROOT
from tests.unit.openai_fake import FakeOpenAI, responses_stream

SECRET = "dormant/openai-api-key"
OPENAPI_MODELS = "aws_lambda_powertools.event_handler.openapi.models"

#: Runs in the fresh interpreter: import the function (FUNCTION: ``api`` as the managed
#: runtime imports functions/api/app.py; ``stream`` as its streaming runtime loop imports its
#: handler, dormant.aws.runtime.load), then (per argv) requests.
PROBE = """
import json, sys

class Context:
    function_name = "dormant-api"
    function_version = "$LATEST"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:dormant-api"
    aws_request_id = "cold-start-probe"
    def get_remaining_time_in_millis(self):
        return 29_000

class Stream:
    started = finished = False
    def start(self, status, headers=None, multi_value_headers=None, cookies=None):
        self.started, self.status, self.body = True, status, []
    def write(self, data):
        self.body.append(data)
    def finish(self):
        self.finished = True

def event(name, body=None):
    with open(f"{EVENTS}/{name}") as file:
        loaded = json.load(file)
    if body is not None:
        loaded["body"] = json.dumps(body)
    return loaded

def loaded():
    return {name: name in sys.modules for name in
            ("openai", "aws_xray_sdk", "botocore", OPENAPI_MODELS, "mcp",
             "dormant.models.bedrock", "dormant.mcp")}

import gc
if FUNCTION == "stream":
    from dormant.aws import runtime
    stream_handler = runtime.load(runtime.DEFAULT_HANDLER)
    from dormant.aws import stream as served

    def handle(request):
        sent = event("api_post_turn.json", {"message": "Hi there"})
        sent["headers"]["Accept"] = "text/event-stream"
        out = Stream()
        stream_handler(sent, Context(), out)
        return {"statusCode": out.status, "body": "".join(out.body)[-2000:]}  # to the result
else:
    import api.app
    from dormant.aws import api as served

    def handle(request):
        if request == "docs":
            return api.app.handler(event("api_get_docs.json"), Context())
        return api.app.handler(event("api_post_turn.json", {"message": "Hi there"}), Context())
app = served.app
import threading
seen = {"import": loaded(), "modules": sorted(sys.modules),
        "gc": {"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()},
        "threads": sorted(thread.name for thread in threading.enumerate()),
        "tracer": type(served.tracer).__name__,
        "model": type(served.agent.model).__name__,
        "model_client_built": getattr(served.agent.model, "_client", None) is not None,
        "scheduler_client_built": app.scheduler._client is not None,
        "hand_on_client_built": app.hand_on._client is not None}
for request in sys.argv[1:]:
    reply = handle(request)
    seen[request] = {"status": reply["statusCode"], "body": reply["body"][:2000],
                     "loaded": loaded(), "modules": sorted(sys.modules)}
print(json.dumps(seen))
"""


@pytest.fixture(scope="module")
def openai_server() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    yield server
    server.close()


@pytest.fixture
def deployed_env(openai_server: FakeOpenAI) -> dict[str, str]:
    """A deployed function's environment on the shared moto server (fresh resources)."""
    from dormant.stores import DynamoDBStore

    server = shared_moto_server()
    suffix = uuid.uuid4().hex[:8]
    table, queue, group = (f"dormant-cold-{suffix}", f"dormant-cold-{suffix}.fifo",
                           f"dormant-cold-{suffix}")
    client = server.client
    DynamoDBStore(table, client=client("dynamodb")).ensure_table()
    client("scheduler").create_schedule_group(Name=group)
    queue_url = client("sqs").create_queue(QueueName=queue, Attributes={
        "FifoQueue": "true", "ContentBasedDeduplication": "true"})["QueueUrl"]
    secrets = client("secretsmanager")
    with contextlib.suppress(secrets.exceptions.ResourceExistsException):
        secrets.create_secret(Name=SECRET, SecretString="sk-cold-start")
    keep = {k: v for k, v in os.environ.items()
            if not k.startswith(("AWS_", "DORMANT_", "POWERTOOLS_", "OPENAI_", "_X_AMZN"))}
    return {
        **keep, **FAKE_AWS_ENV, **server.endpoint_env(),
        "PYTHONPATH": os.pathsep.join([str(FUNCTIONS), str(ROOT / "layers" / "dormant")]),
        "DORMANT_TABLE": table, "DORMANT_BUCKET": f"dormant-cold-{suffix}",
        "DORMANT_OPENAI_SECRET": SECRET, "DORMANT_SCHEDULE_GROUP": group,
        "DORMANT_WAKE_TARGET_ARN": "arn:aws:lambda:us-east-1:123456789012:function:dormant-wake",
        "DORMANT_SCHEDULER_ROLE_ARN": "arn:aws:iam::123456789012:role/dormant-scheduler",
        "DORMANT_SCHEDULE_DLQ_ARN": "arn:aws:sqs:us-east-1:123456789012:dormant-wake-dlq",
        "WEBHOOK_QUEUE_URL": queue_url, "OPENAI_BASE_URL": openai_server.base_url,
        "POWERTOOLS_SERVICE_NAME": "dormant", "POWERTOOLS_METRICS_NAMESPACE": "Dormant",
        "PYDANTIC_DISABLE_PLUGINS": "__all__",
        # Lambda's own variables: under them Powertools' Tracer would trace.
        "LAMBDA_TASK_ROOT": str(FUNCTIONS), "AWS_LAMBDA_FUNCTION_NAME": "dormant-api",
        "_X_AMZN_TRACE_ID": "Root=1-5759e988-bd862e3fe1be46a994272793;"
                            "Parent=53995c3f42cd8ad8;Sampled=1",
        "AWS_XRAY_CONTEXT_MISSING": "IGNORE_ERROR",
    }


def _cold_start(env: dict[str, str], *requests: str, function: str = "api") -> dict[str, Any]:
    code = (f"EVENTS = {str(EVENTS)!r}\nOPENAPI_MODELS = {OPENAPI_MODELS!r}\n"
            f"FUNCTION = {function!r}\n" + PROBE)
    run = subprocess.run([sys.executable, "-c", code, *requests], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_the_deployed_api_imports_no_openai_xray_sdk_or_openapi_models_at_init(
        deployed_env: dict[str, str]) -> None:
    seen = _cold_start(deployed_env)

    assert seen["model"] == "OpenAIModel"  # the secret is configured: the real model
    assert seen["import"] == {"openai": False, "aws_xray_sdk": False, "botocore": True,
                              OPENAPI_MODELS: False, "mcp": False,
                              "dormant.models.bedrock": False, "dormant.mcp": False}
    assert seen["tracer"] == "Untraced"
    assert not seen["scheduler_client_built"]
    assert not seen["hand_on_client_built"]


def test_the_first_model_call_imports_openai_reads_the_secret_and_answers(
        deployed_env: dict[str, str], openai_server: FakeOpenAI) -> None:
    openai_server.script(responses_stream("Which night would you like?"))

    seen = _cold_start(deployed_env, "turn")

    assert seen["turn"]["status"] == 200, seen["turn"]["body"]
    body = json.loads(seen["turn"]["body"])
    assert (body["status"], body["output"]["text"]) == ("completed",
                                                        "Which night would you like?")
    assert seen["turn"]["loaded"]["openai"]
    [call] = openai_server.requests[-1:]
    assert call.headers.get("authorization") == "Bearer sk-cold-start"  # from the secret


def test_docs_serve_a_static_page_that_builds_no_openapi_description(
        deployed_env: dict[str, str]) -> None:
    seen = _cold_start(deployed_env, "docs")

    assert seen["docs"]["status"] == 200
    assert "swagger" in seen["docs"]["body"].lower()
    # The page fetches the description (GET /) from the browser; serving it builds nothing.
    assert not seen["docs"]["loaded"][OPENAPI_MODELS]
    assert not seen["docs"]["loaded"]["openai"]


def test_opting_into_the_xray_sdk_traces_with_powertools(deployed_env: dict[str, str]) -> None:
    seen = _cold_start({**deployed_env, "DORMANT_XRAY_SDK": "true"})

    assert seen["tracer"] == "Tracer"
    assert seen["import"]["aws_xray_sdk"]
    assert not seen["import"]["openai"]


def test_without_the_opt_in_the_handlers_are_left_as_they_are() -> None:
    from dormant.aws import tracing

    def handler(event: dict[str, Any], context: object) -> dict[str, Any]:
        return event

    untraced = tracing.tracer({})
    assert untraced.capture_lambda_handler(handler) is handler
    assert untraced.capture_method(handler) is handler
    assert isinstance(tracing.tracer({"DORMANT_XRAY_SDK": "false"}), tracing.Untraced)


def test_opting_in_without_the_xray_sdk_says_what_to_add(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from dormant.aws import tracing

    monkeypatch.setitem(sys.modules, "aws_xray_sdk", None)  # as if not installed

    with pytest.raises(ImportError, match="XRaySdkLayer"):
        tracing.tracer({"DORMANT_XRAY_SDK": "true"})


def test_a_bedrock_deploy_builds_its_model_but_no_client_at_init(
        deployed_env: dict[str, str]) -> None:
    from tests.bedrock_fake import FakeBedrock, converse_stream

    bedrock = FakeBedrock()
    try:
        bedrock.script(converse_stream("Which night would you like?"))
        env = {**deployed_env, "DORMANT_BEDROCK_MODEL": "us.amazon.nova-pro-v1:0",
               "DORMANT_OPENAI_SECRET": "", "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": bedrock.url}

        seen = _cold_start(env, "turn")
    finally:
        bedrock.close()

    assert seen["model"] == "BedrockModel" and not seen["model_client_built"]
    assert seen["import"]["dormant.models.bedrock"]
    assert not seen["import"]["openai"] and not seen["import"]["mcp"]
    assert seen["turn"]["status"] == 200, seen["turn"]["body"]
    assert json.loads(seen["turn"]["body"])["output"]["text"] == "Which night would you like?"
    assert not seen["turn"]["loaded"]["openai"]
    assert [r.model_id for r in bedrock.requests] == ["us.amazon.nova-pro-v1:0"]



#: The api function's import budget: every dormant module its cold start imports (deployed:
#: the OpenAI secret configured, timers, the webhook queue), before any request. A module that
#: joins the cold start is paid by every deployment on every new execution environment; add
#: one here only when the first request needs it.
API_INIT_MODULES = {
    "dormant", "dormant._appspec", "dormant._clients", "dormant._commit", "dormant._context",
    "dormant._control", "dormant._decide", "dormant._follow", "dormant._fork", "dormant._head",
    "dormant._ids", "dormant._inputs", "dormant._lru", "dormant._patch", "dormant._request",
    # what a request came to, counted as the function's metrics (dormant.aws.metrics), and
    # what it took, kept on the ledger (the turn's timing, its tokens and cost)
    "dormant._measure", "dormant.aws.metrics", "dormant._timing",
    # the request room by job (it was one module): the executor, the opening, the invocation,
    # and the write-ahead of a tool step (every turn that runs a tool writes one)
    "dormant._request.ahead", "dormant._request.host", "dormant._request.invocation",
    "dormant._request.opening", "dormant._request.serve",
    "dormant._resume", "dormant._run", "dormant._run.compaction", "dormant._run.loop",
    "dormant._run.state", "dormant._run.tools", "dormant._schema", "dormant._turn",
    # one model step's stream read, shared by the ordinary turn's flat loop and the general one
    "dormant._run.step",
    "dormant._turn_wire", "dormant._voice", "dormant.agent", "dormant.app", "dormant.aws",
    "dormant.aws.api", "dormant.aws.deployment", "dormant.aws.hand_on", "dormant.aws.purge",
    "dormant.aws.tracing", "dormant.errors", "dormant.events", "dormant.handlers",
    "dormant.http", "dormant.http._openapi", "dormant.http._resolver", "dormant.http._voice",
    "dormant.http._wire", "dormant.models", "dormant.models._base", "dormant.models._hints",
    "dormant.models._openai_errors", "dormant.models._openai_key", "dormant.models._retry",
    "dormant.models.audio", "dormant.models.openai", "dormant.models.rules", "dormant.results",
    "dormant.samples", "dormant.samples.bookings", "dormant.schedulers",
    "dormant.schedulers._base", "dormant.schedulers.eventbridge", "dormant.session",
    "dormant.settings", "dormant.stores", "dormant.stores._base", "dormant.stores._dynamodb",
    "dormant.stores._dynamodb.codec", "dormant.stores._dynamodb.commits",
    "dormant.stores._dynamodb.deletes", "dormant.stores._dynamodb.forks",
    "dormant.stores._dynamodb.layout", "dormant.stores._dynamodb.offload",
    "dormant.stores._dynamodb.reads", "dormant.stores._dynamodb.table",
    "dormant.stores._dynamodb.window", "dormant.stores._dynamodb.writes",
    "dormant.stores.dynamodb", "dormant.stores.memory", "dormant.tools", "dormant.types",
    "dormant._window",  # the session's ledger window, under Session (it was in session.py)
    "dormant._fold",  # each event's rule, out of _head (the head and its questions stay)
    "dormant.models._openai_client",  # the OpenAI models' one lazy client (no openai import)
    "dormant.http._routes", "dormant.http._sse",  # the HTTP API by job (was http/__init__)
    # the DynamoDB store's listing and control record (were in stores/dynamodb.py)
    "dormant.stores._dynamodb.control", "dormant.stores._dynamodb.listing",
    # what the store's requests consumed, per phase of a turn (its timing on the ledger)
    "dormant.stores._dynamodb.meter",
}
#: The packages outside the standard library it may import at init (and their own deps).
API_INIT_PACKAGES = {
    "annotated_types", "api", "aws_lambda_powertools", "botocore", "certifi", "dateutil",
    "dormant", "jmespath", "pydantic", "pydantic_core", "six", "typing_extensions",
    "typing_inspection", "urllib3",
    # Lambda's SnapStart hook registry, where dormant._ids registers its re-seeding (on Lambda
    # it is the runtime's own, in /var/runtime, imported before the function; here, the dev
    # extra's)
    "snapshot_restore_py",
    # Only the empty namespace package, in the dev venv: urllib3 probes ``backports.zstd``
    # (ImportError: not installed), and the namespace is there because twine (the dev extra,
    # for the release check) brings backports.tarfile. The layer has no backports at all.
    "backports",
}
#: Never at init: boto3 (with s3transfer, multiprocessing) is not how dormant makes its
#: clients; the model's, tracing's and tools' packages come with their first use.
NEVER_AT_INIT = {"boto3", "s3transfer", "multiprocessing", "openai", "httpx", "aws_xray_sdk",
                 "mcp", "websockets", "jsonschema"}
#: All modules at init, standard library included (626 when this was written): room for a
#: dependency's minor growth, not for a new package's tree.
API_INIT_MODULE_CAP = 660


def _packages(modules: list[str]) -> set[str]:
    """Top-level packages outside the standard library (the venv's site hooks aside)."""
    top = {name.split(".")[0] for name in modules}
    return {name for name in top - set(sys.stdlib_module_names) - set(sys.builtin_module_names)
            if not name.startswith("_")}


def test_the_api_function_s_cold_start_keeps_to_its_import_budget(
        deployed_env: dict[str, str]) -> None:
    seen = _cold_start(deployed_env)
    modules = seen["modules"]

    ours = {name for name in modules if name.split(".")[0] == "dormant"}
    assert sorted(ours - API_INIT_MODULES) == [], "new on the cold start: add with a reason"
    assert sorted(API_INIT_MODULES - ours) == [], "no longer imported: take out of the budget"
    assert sorted(_packages(modules) - API_INIT_PACKAGES) == []
    assert [name for name in modules if name.startswith("backports.")] == []  # the probe only
    assert sorted(NEVER_AT_INIT & {name.split(".")[0] for name in modules}
                  | NEVER_AT_INIT & set(modules)) == []
    assert len(modules) <= API_INIT_MODULE_CAP


def test_a_first_request_that_calls_no_model_imports_no_boto3(
        deployed_env: dict[str, str]) -> None:
    seen = _cold_start(deployed_env, "docs")

    assert seen["docs"]["status"] == 200
    assert {"boto3", "s3transfer"} & set(seen["docs"]["modules"]) == set()


def test_the_cold_start_s_objects_are_frozen_and_collection_resumes(
        deployed_env: dict[str, str]) -> None:
    # functions/api/app.py turns the collector off while it imports; dormant.aws.initialised
    # freezes what init built (later collections skip it) and turns collection back on.
    seen = _cold_start(deployed_env)

    assert seen["gc"]["enabled"] is True
    assert seen["gc"]["frozen"] > 10_000


#: The stream function's import budget, the same way: the api function's modules, less its
#: module, plus its own and the streaming runtime loop that imports it (bootstrap-stream runs
#: dormant.aws.runtime, which replaces the managed runtime's loop). Nothing for AG-UI: a
#: first ``POST /agui`` imports it (and the ag_ui package) when it comes.
STREAM_INIT_MODULES = API_INIT_MODULES - {"dormant.aws.api"} | {"dormant.aws.stream",
                                                                 "dormant.aws.runtime"}
#: Outside the standard library: the api function's packages (``stream``: functions/stream is
#: not imported under the streaming loop, so not ``api`` either).
STREAM_INIT_PACKAGES = API_INIT_PACKAGES - {"api"}


def test_the_stream_function_s_cold_start_keeps_to_its_import_budget(
        deployed_env: dict[str, str]) -> None:
    seen = _cold_start(deployed_env, function="stream")
    modules = seen["modules"]

    ours = {name for name in modules if name.split(".")[0] == "dormant"}
    assert sorted(ours - STREAM_INIT_MODULES) == [], "new on the cold start: add with a reason"
    assert sorted(STREAM_INIT_MODULES - ours) == [], "no longer imported: take out of the budget"
    assert sorted(_packages(modules) - STREAM_INIT_PACKAGES) == []
    assert [name for name in modules if name.startswith("backports.")] == []  # the probe only
    assert sorted(NEVER_AT_INIT & {name.split(".")[0] for name in modules}
                  | NEVER_AT_INIT & set(modules)) == []
    assert {"ag_ui", "dormant.agui"} & set(modules) == set()
    assert len(modules) <= API_INIT_MODULE_CAP
    assert seen["import"]["botocore"] and seen["tracer"] == "Untraced"
    assert not seen["scheduler_client_built"] and not seen["hand_on_client_built"]


def test_the_stream_function_s_first_streamed_turn_imports_openai_then(
        deployed_env: dict[str, str], openai_server: FakeOpenAI) -> None:
    openai_server.script(responses_stream("Which night would you like?"))

    seen = _cold_start(deployed_env, "turn", function="stream")

    assert not seen["import"]["openai"]
    turn = seen["turn"]
    assert turn["status"] == 200, turn["body"]
    assert "event: result" in turn["body"] and "Which night would you like?" in turn["body"]
    assert turn["loaded"]["openai"]
    [call] = openai_server.requests[-1:]
    assert call.headers.get("authorization") == "Bearer sk-cold-start"  # from the secret


def test_the_stream_function_s_cold_start_is_built_with_the_collector_off_and_frozen(
        deployed_env: dict[str, str]) -> None:
    # Under the streaming loop functions/stream/app.py is not imported: runtime.load turns the
    # collector off while the handler's module builds, and its initialised() freezes that.
    seen = _cold_start(deployed_env, function="stream")

    assert seen["gc"]["enabled"] is True
    assert seen["gc"]["frozen"] > 10_000


def test_the_stream_function_s_init_starts_no_thread(deployed_env: dict[str, str]) -> None:
    # What SnapStart snapshots is what init built: a thread started there would be restored
    # mid-step in every environment (the keep-alive thread of a streamed answer starts with
    # its request). That init makes no AWS call is test_snapstart_safety's check.
    seen = _cold_start(deployed_env, function="stream")

    assert seen["threads"] == ["MainThread"]
