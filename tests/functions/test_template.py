"""template.yaml says what the code assumes: the store's table, the functions' handlers and
routes, least privilege, the queue settings, the environment names."""

from __future__ import annotations

import inspect
import json
import re
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from dormant.aws.hand_on import QUEUE_URL_ENV
from dormant.scaffold import entry_point
from dormant.schedulers import TimerDelivery
from dormant.settings import ENV
from dormant.stores import DynamoDBStore
from tests.functions.conftest import EVENTS, ROOT

FUNCTIONS = ("ApiFunction", "StreamFunction", "WebhookFunction", "WakeFunction",
             "CleanupFunction")


class _CfnLoader(yaml.SafeLoader):
    """YAML with CloudFormation's short-form intrinsics (``!Ref x`` -> ``{"Ref": x}``)."""


def _intrinsic(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    name = "Ref" if suffix == "Ref" else f"Fn::{suffix}"
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
        if suffix == "GetAtt":
            value = value.split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    return {name: value}


_CfnLoader.add_multi_constructor("!", _intrinsic)


@cache
def template() -> dict[str, Any]:
    with (ROOT / "template.yaml").open() as file:
        return yaml.load(file, Loader=_CfnLoader)  # type: ignore[no-any-return]


def resource(name: str) -> dict[str, Any]:
    return template()["Resources"][name]  # type: ignore[no-any-return]


def props(name: str) -> dict[str, Any]:
    return resource(name)["Properties"]  # type: ignore[no-any-return]


def statements(function: str) -> list[dict[str, Any]]:
    """The function's statements, a conditional policy's or statement's as they are when its
    condition holds."""
    def holding(value: dict[str, Any]) -> dict[str, Any]:
        return value["Fn::If"][1] if "Fn::If" in value else value

    return [holding(s) for policy in props(function)["Policies"]
            for s in holding(policy)["Statement"]]


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


# --- the table is the store's -----------------------------------------------------------------


def test_table_keys_and_index_are_exactly_the_stores() -> None:
    table = props("SessionsTable")
    expected = DynamoDBStore.table_definition()

    def by_name(items: list[dict[str, Any]]) -> dict[str, Any]:
        return {i.get("AttributeName", i.get("IndexName")): i for i in items}

    assert table["KeySchema"] == DynamoDBStore.TABLE_KEY_SCHEMA == expected["KeySchema"]
    assert by_name(table["AttributeDefinitions"]) == by_name(expected["AttributeDefinitions"])
    assert by_name(table["GlobalSecondaryIndexes"]) == by_name(
        expected["GlobalSecondaryIndexes"])
    assert table["BillingMode"] == expected["BillingMode"] == "PAY_PER_REQUEST"


def test_table_has_ttl_on_the_stores_attribute_pitr_and_sse() -> None:
    table = props("SessionsTable")
    assert table["TimeToLiveSpecification"] == {
        "AttributeName": DynamoDBStore.TTL_ATTRIBUTE, "Enabled": True}
    assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert table["SSESpecification"]["SSEEnabled"] is True
    assert resource("SessionsTable")["DeletionPolicy"] == "Retain"


def test_offload_bucket_is_encrypted_and_private() -> None:
    bucket = props("OffloadBucket")
    assert bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert set(bucket["PublicAccessBlockConfiguration"].values()) == {True}
    assert len(bucket["PublicAccessBlockConfiguration"]) == 4


# --- the functions ---------------------------------------------------------------------------


@pytest.mark.parametrize("function", FUNCTIONS)
def test_handler_paths_resolve_to_a_handler_under_codeuri(function: str) -> None:
    fn = props(function)
    module, _, attribute = fn["Handler"].rpartition(".")
    source = ROOT / fn["CodeUri"] / f"{module}.py"
    assert source.is_file(), source
    # The entry point is what `dormant new` writes for a project: one import from dormant.aws,
    # which defines the handler.
    name = module.partition("/")[0]
    assert source.read_text() == entry_point(name)
    served = ROOT / "layers" / "dormant" / "dormant" / "aws" / f"{name}.py"
    assert re.search(rf"^def {attribute}\(", served.read_text(), re.MULTILINE)
    assert template()["Globals"]["Function"]["Runtime"] == "python3.13"
    assert template()["Globals"]["Function"]["Layers"] == [{"Ref": "DormantLayer"}]


def test_layer_is_built_from_layers_dormant_for_python313_with_its_bytecode() -> None:
    layer = resource("DormantLayer")
    assert layer["Properties"]["ContentUri"] == "layers/dormant"
    assert layer["Properties"]["CompatibleRuntimes"] == ["python3.13"]
    assert layer["Metadata"]["BuildMethod"] == "makefile"
    assert (ROOT / "layers/dormant/dormant/__init__.py").is_file()
    recipe = (ROOT / "layers/dormant/Makefile").read_text()
    assert "build-DormantLayer:" in recipe
    # Wheels for the runtime, not the build machine (both architectures' compiled modules,
    # side by side); bytecode Lambda uses as it is.
    assert "--platform manylinux2014_x86_64" in recipe
    assert "--platform manylinux2014_aarch64" in recipe
    assert layer["Properties"]["CompatibleArchitectures"] == ["arm64", "x86_64"]
    assert "--python-version 3.13" in recipe
    assert "-r requirements.txt" in recipe
    assert "--invalidation-mode unchecked-hash" in recipe


def test_api_routes_are_the_resolvers_and_all_but_docs_need_a_cognito_user() -> None:
    import re

    import dormant
    from dormant.http import build_resolver

    events = [*props("ApiFunction")["Events"].values(),
              *props("StreamFunction")["Events"].values()]
    routes = {(e["Properties"]["Method"].upper(), e["Properties"]["Path"]): e["Properties"]
              for e in events if e["Type"] == "Api"}
    assert len(routes) == len(events)  # no route served by both
    app = dormant.App()
    served = build_resolver(app, app.agent("a")).get_openapi_schema().paths or {}
    resolver_routes = {(method.upper(), re.sub(r"\{[^}]+\}", "{id}", path))
                       for path, item in served.items()
                       for method in (item if isinstance(item, dict)
                                      else item.model_dump(exclude_none=True))}
    # every route the resolver serves reaches it through API Gateway (and nothing else does)
    assert set(routes) == resolver_routes | {("GET", "/docs")}
    assert {("GET", "/sessions/{id}/events"), ("GET", "/sessions")} <= set(routes)
    open_routes = {r for r, p in routes.items() if p.get("Auth", {}).get("Authorizer") == "NONE"}
    assert open_routes == {("GET", "/docs")}
    auth = props("RestApi")["Auth"]
    assert auth["DefaultAuthorizer"] == "CognitoAuthorizer"
    assert auth["Authorizers"]["CognitoAuthorizer"]["UserPoolArn"] == {
        "Fn::GetAtt": ["UserPool", "Arn"]}


def test_turns_agui_and_the_events_long_poll_stream_from_the_stream_function() -> None:
    stream = props("StreamFunction")
    streamed = {(e["Properties"]["Method"].upper(), e["Properties"]["Path"]): e["Properties"]
                for e in stream["Events"].values()}
    # The routes that answer text/event-stream (the events feed with follow=true), and only
    # those, are streamed: the events long-poll holds its invocation up to 20 s, in the stream
    # function's environments, not those of GET/DELETE /sessions/{id} and fork.
    assert set(streamed) == {("POST", "/turns"), ("POST", "/agui"),
                             ("GET", "/sessions/{id}/events")}
    for route in streamed.values():
        assert route["ResponseTransferMode"] == "RESPONSE_STREAM"
        assert route["TimeoutInMillis"] == 900_000  # API Gateway's streaming maximum
        assert "Auth" not in route  # the API's default: the Cognito authorizer
    api_routes = {(e["Properties"]["Method"].upper(), e["Properties"]["Path"])
                  for e in props("ApiFunction")["Events"].values()}
    assert not api_routes & set(streamed)
    # The streaming loop replaces the managed one; the turn has the function's whole timeout.
    wrapper = stream["Environment"]["Variables"]["AWS_LAMBDA_EXEC_WRAPPER"]
    assert wrapper == "/opt/python/dormant/aws/bootstrap-stream"
    assert (ROOT / "layers" / "dormant" / wrapper.removeprefix("/opt/python/")).is_file()
    assert "DORMANT_TURN_TIMEOUT" not in stream["Environment"]["Variables"]
    assert stream["Timeout"] == 900  # API Gateway's streaming maximum, in seconds


def test_webhook_reads_the_fifo_queue_reporting_partial_failures() -> None:
    queue, dlq = props("WebhookQueue"), props("WebhookDeadLetterQueue")
    [event] = props("WebhookFunction")["Events"].values()
    assert event["Type"] == "SQS"
    assert event["Properties"]["Queue"] == {"Fn::GetAtt": ["WebhookQueue", "Arn"]}
    assert event["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert queue["FifoQueue"] is True and dlq["FifoQueue"] is True
    assert queue["ContentBasedDeduplication"] is True
    assert queue["RedrivePolicy"]["deadLetterTargetArn"] == {
        "Fn::GetAtt": ["WebhookDeadLetterQueue", "Arn"]}
    assert queue["VisibilityTimeout"] >= 6 * props("WebhookFunction")["Timeout"]


def test_every_function_hands_on_to_the_webhook_queue() -> None:
    env = template()["Globals"]["Function"]["Environment"]["Variables"]
    assert env[QUEUE_URL_ENV] == {"Ref": "WebhookQueue"}
    for function in FUNCTIONS:
        assert QUEUE_URL_ENV not in props(function).get("Environment", {}).get("Variables", {})


# --- least privilege -------------------------------------------------------------------------


_SCHEDULES = ("arn:${AWS::Partition}:scheduler:${AWS::Region}:${AWS::AccountId}:"
              "schedule/${ScheduleGroup}/*")


_TURN_TABLE_ACTIONS = {"Query", "GetItem", "PutItem", "ConditionCheckItem", "DeleteItem"}
_OBJECTS = {"GetObject", "PutObject", "DeleteObject"}


@pytest.mark.parametrize(("function", "dynamodb", "s3"), [
    ("ApiFunction", _TURN_TABLE_ACTIONS, _OBJECTS),
    ("StreamFunction", _TURN_TABLE_ACTIONS, _OBJECTS),
    ("WebhookFunction", _TURN_TABLE_ACTIONS | {"BatchWriteItem"}, _OBJECTS),  # purge steps
    ("WakeFunction", _TURN_TABLE_ACTIONS, _OBJECTS),
])
def test_each_function_may_do_only_what_it_does_on_its_own_resources(
        function: str, dynamodb: set[str], s3: set[str]) -> None:
    granted: dict[str, set[str]] = {}
    for statement in statements(function):
        assert statement["Effect"] == "Allow"
        for action in _as_list(statement["Action"]):
            assert "*" not in action, action
            service, _, name = action.partition(":")
            granted.setdefault(service, set()).add(name)
        for target in _as_list(statement["Resource"]):
            assert target != "*"
        if any(a.startswith("dynamodb:") for a in _as_list(statement["Action"])):
            # the table, or (listing a principal's sessions: a query only) its by_owner index
            assert statement["Resource"] in ({"Fn::GetAtt": ["SessionsTable", "Arn"]}, {
                "Fn::Sub": f"${{SessionsTable.Arn}}/index/{DynamoDBStore.INDEX_NAME}"})
            if statement["Resource"] != {"Fn::GetAtt": ["SessionsTable", "Arn"]}:
                assert statement["Action"] == "dynamodb:Query"
        if any(a.startswith("s3:") for a in _as_list(statement["Action"])):
            assert statement["Resource"] == {"Fn::Sub": "${OffloadBucket.Arn}/ledger/*"}
        if any(a.startswith("secretsmanager:") for a in _as_list(statement["Action"])):
            assert "${OpenAISecretName}-??????" in statement["Resource"]["Fn::Sub"]
        if any(a.startswith("bedrock:") for a in _as_list(statement["Action"])):
            # the named model or profile; any foundation model only through that profile
            for target in _as_list(statement["Resource"]):
                assert "${BedrockModelId}" in target["Fn::Sub"] or statement["Condition"] == {
                    "StringEquals": {"bedrock:InferenceProfileArn": {"Fn::Sub": (
                        "arn:${AWS::Partition}:bedrock:${AWS::Region}:${AWS::AccountId}:"
                        "inference-profile/${BedrockModelId}")}}}
        if any(a.startswith("scheduler:") for a in _as_list(statement["Action"])):
            assert statement["Resource"] == {"Fn::Sub": _SCHEDULES}  # the group's schedules
        if any(a.startswith("sqs:") for a in _as_list(statement["Action"])):
            assert statement["Resource"] == {"Fn::GetAtt": ["WebhookQueue", "Arn"]}  # hand-on
        if any(a.startswith("iam:") for a in _as_list(statement["Action"])):
            assert statement["Resource"] == {"Fn::GetAtt": ["SchedulerRole", "Arn"]}
            assert statement["Condition"] == {
                "StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}}
    # Every function may set timers: a turn that commits hands its timers to the scheduler;
    # and may hand on work it cannot finish to the webhook queue (send only).
    assert granted == {"dynamodb": dynamodb, "s3": s3, "secretsmanager": {"GetSecretValue"},
                       "scheduler": {"CreateSchedule", "UpdateSchedule", "DeleteSchedule"},
                       "iam": {"PassRole"}, "sqs": {"SendMessage"},
                       "bedrock": {"InvokeModelWithResponseStream"}}


def test_the_cleanup_function_deletes_offloaded_objects_of_removed_items_only() -> None:
    from dormant.stores._dynamodb import layout

    cleanup = props("CleanupFunction")
    assert statements("CleanupFunction") == [{
        "Sid": "OffloadedEvents", "Effect": "Allow", "Action": "s3:DeleteObject",
        "Resource": {"Fn::Sub": "${OffloadBucket.Arn}/ledger/*"}}]
    # The removed item's old image names the keys: the stream must carry it.
    assert props("SessionsTable")["StreamSpecification"] == {"StreamViewType": "OLD_IMAGE"}
    [event] = cleanup["Events"].values()
    assert event["Type"] == "DynamoDB"
    source = event["Properties"]
    assert source["Stream"] == {"Fn::GetAtt": ["SessionsTable", "StreamArn"]}
    assert source["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    [criteria] = source["FilterCriteria"]["Filters"]
    # Only removals of items naming offloaded keys (what the store writes under ledger/ and
    # the function's role may delete); which records pass: tests/reliability/test_s3_cleanup.py
    assert json.loads(criteria["Pattern"]) == {
        "eventName": ["REMOVE"],
        "dynamodb": {"OldImage": {layout.OFFLOADED: {"SS": [{"prefix": "ledger/"}]}}}}
    assert layout.OFFLOADED == "s3"  # the attribute functions/cleanup/app.py reads
    assert source["DestinationConfig"]["OnFailure"] == {
        "Type": "SQS", "Destination": {"Fn::GetAtt": ["CleanupDeadLetterQueue", "Arn"]}}


def test_the_scheduler_role_may_invoke_the_wake_function_and_dead_letter_only() -> None:
    role = props("SchedulerRole")
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
        "Service": "scheduler.amazonaws.com"}
    granted = [(s["Action"], s["Resource"]) for policy in role["Policies"]
               for s in policy["PolicyDocument"]["Statement"]]
    # The `live` alias schedules target, and the bare function schedules made before it.
    assert sorted(granted, key=str) == sorted([
        ("lambda:InvokeFunction", [{"Fn::Sub": "${WakeFunction.Arn}:live"},
                                   {"Fn::GetAtt": ["WakeFunction", "Arn"]}]),
        ("sqs:SendMessage", {"Fn::GetAtt": ["WakeDeadLetterQueue", "Arn"]}),
    ], key=str)
    assert "ManagedPolicyArns" not in role


def test_the_wake_function_is_what_every_schedule_targets() -> None:
    env = template()["Globals"]["Function"]["Environment"]["Variables"]
    wake = props("WakeFunction")
    # The target ARN is built from the function's fixed name (no self-reference).
    assert wake["FunctionName"] == {"Fn::Sub": "${AWS::StackName}-wake"}
    # Schedules invoke its `live` alias (the version CodeDeploy last shifted to), as
    # everything else does.
    assert env[ENV.WAKE_TARGET_ARN]["Fn::Sub"].endswith(
        ":function:${AWS::StackName}-wake:" + template()["Globals"]["Function"]["AutoPublishAlias"])
    assert env[ENV.SCHEDULER_ROLE_ARN] == {"Fn::GetAtt": ["SchedulerRole", "Arn"]}
    assert env[ENV.SCHEDULE_GROUP] == {"Ref": "ScheduleGroup"}
    assert env[ENV.SCHEDULE_DLQ_ARN] == {"Fn::GetAtt": ["WakeDeadLetterQueue", "Arn"]}
    # A firing whose turn did not commit raises: Lambda retries it, then dead-letters it.
    assert wake["DeadLetterQueue"] == {
        "Type": "SQS", "TargetArn": {"Fn::GetAtt": ["WakeDeadLetterQueue", "Arn"]}}
    assert wake["EventInvokeConfig"]["MaximumRetryAttempts"] == 2
    assert "FifoQueue" not in props("WakeDeadLetterQueue")  # Lambda and Scheduler need standard
    assert float(wake["Environment"]["Variables"][ENV.TURN_TIMEOUT]) < wake["Timeout"]
    assert "Events" not in wake  # only schedules invoke it, through SchedulerRole


def test_the_granted_s3_prefix_is_where_the_store_offloads() -> None:
    default = inspect.signature(DynamoDBStore).parameters["offload_prefix"].default
    assert default == "ledger/"


def test_the_openai_key_is_named_never_given() -> None:
    text = (ROOT / "template.yaml").read_text()
    assert not re.search(r"sk-[A-Za-z0-9]{8,}", text)
    env = template()["Globals"]["Function"]["Environment"]["Variables"]
    assert env[ENV.OPENAI_SECRET] == {"Ref": "OpenAISecretName"}
    assert ENV.OPENAI_API_KEY not in env


# --- configuration by environment ------------------------------------------------------------


def test_environment_names_are_dormants_and_powertools() -> None:
    names = set(template()["Globals"]["Function"]["Environment"]["Variables"])
    for function in FUNCTIONS:
        names |= set(props(function).get("Environment", {}).get("Variables", {}))
    known = {v for k, v in vars(ENV).items() if k.isupper()}
    dormant_names = {n for n in names if n.startswith("DORMANT_")}
    assert dormant_names <= known, dormant_names - known
    assert {ENV.TABLE, ENV.BUCKET, ENV.OPENAI_SECRET, ENV.TURN_TIMEOUT} <= names
    assert {ENV.SCHEDULE_GROUP, ENV.WAKE_TARGET_ARN, ENV.SCHEDULER_ROLE_ARN,
            ENV.SCHEDULE_DLQ_ARN} <= names
    assert {"POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE", "LOG_LEVEL"} <= names
    # The deployment's own (functions/, not the library's): where hand-ons go, and Lambda's
    # own: the stream function's runtime loop.
    assert names - known - {"POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE",
                            "LOG_LEVEL"} == {QUEUE_URL_ENV, "AWS_LAMBDA_EXEC_WRAPPER",
                                             "PYDANTIC_DISABLE_PLUGINS"}


def test_the_offload_threshold_is_a_parameter_the_store_reads() -> None:
    from dormant.settings import Settings
    from dormant.stores import DynamoDBStore

    env = template()["Globals"]["Function"]["Environment"]["Variables"]
    assert env[ENV.OFFLOAD_ABOVE] == {"Ref": "OffloadAboveBytes"}
    parameter = template()["Parameters"]["OffloadAboveBytes"]
    assert (parameter["Type"], parameter["MinValue"]) == ("Number", 0)
    groups = template()["Metadata"]["AWS::CloudFormation::Interface"]["ParameterGroups"]
    assert "OffloadAboveBytes" in next(g["Parameters"] for g in groups
                                       if g["Label"]["default"] == "Sessions")
    deployed = {ENV.TABLE: "t", ENV.BUCKET: "b", ENV.OFFLOAD_ABOVE: str(parameter["Default"])}
    assert Settings.from_env(deployed).offload_above == parameter["Default"] > 0
    store = DynamoDBStore.from_env(deployed, client=object())  # type: ignore[arg-type]
    assert store._offload_above == parameter["Default"]
    assert Settings.from_env({**deployed, ENV.OFFLOAD_ABOVE: "0"}).offload_above is None


def test_outputs_name_the_api_url_queue_and_table() -> None:
    assert {"ApiUrl", "WebhookQueueUrl", "SessionsTableName", "ScheduleGroupName",
            "WakeFunctionArn", "WakeDeadLetterQueueUrl", "AlarmNotifications"} <= set(
        template()["Outputs"])


# --- the layer's requirements ----------------------------------------------------------------


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~ ;]", requirement.strip(), maxsplit=1)[0].lower()


#: What the Lambda python3.13 runtime ships: a layer must not carry it (a layer's botocore
#: would shadow the runtime's under the runtime's boto3).
LAMBDA_RUNTIME_HAS = {"boto3", "botocore"}


def _requirements(path: str) -> list[str]:
    lines = (ROOT / path).read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _extras() -> dict[str, list[str]]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        project = tomllib.load(file)["project"]
    return {"": project["dependencies"], **project["optional-dependencies"]}


def test_layer_requirements_are_the_runtime_dependencies_lambda_lacks() -> None:
    extras = _extras()
    runtime = {_name(r) for extra in ("", "openai", "agui", "aws") for r in extras[extra]}
    layer = {_name(line) for line in _requirements("layers/dormant/requirements.txt")}
    assert layer == runtime - LAMBDA_RUNTIME_HAS


def test_layer_requirements_have_pyproject_s_ranges_and_are_pinned_inside_them() -> None:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    declared = {canonicalize_name(r.name): r.specifier for extra in ("", "openai", "agui", "aws")
                for r in map(Requirement, _extras()[extra])}
    layer = [Requirement(line) for line in _requirements("layers/dormant/requirements.txt")]
    for requirement in layer:
        assert requirement.specifier == declared[canonicalize_name(requirement.name)], requirement
    pins = {}
    for line in _requirements("layers/dormant/constraints.txt"):
        pin = Requirement(line)
        [spec] = pin.specifier
        assert spec.operator == "==", line  # exact versions only
        pins[canonicalize_name(pin.name)] = spec.version
    for requirement in layer:
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not pinned in layers/dormant/constraints.txt"
        assert requirement.specifier.contains(pins[name]), (requirement, pins[name])
    assert not set(pins) & (LAMBDA_RUNTIME_HAS | {"aws-xray-sdk", "s3transfer"})
    for recipe in ("layers/dormant/Makefile",
                   "layers/dormant/dormant/scaffold/files/layers/dormant/Makefile"):
        assert "-r requirements.txt -c constraints.txt" in (ROOT / recipe).read_text()


def test_the_dormant_layer_pulls_in_neither_botocore_nor_the_xray_sdk() -> None:
    # Powertools' [tracer] extra is the X-Ray SDK, which depends on botocore.
    lines = _requirements("layers/dormant/requirements.txt")
    assert not [line for line in lines if "[" in line or _name(line) in
                LAMBDA_RUNTIME_HAS | {"aws-xray-sdk", "s3transfer"}], lines


def test_the_xray_layer_is_the_tracer_extra_with_its_boto3_pair() -> None:
    lines = _requirements("layers/xray/requirements.txt")
    # The SDK the extra adds to Powertools (which DormantLayer already carries), and the
    # boto3 matching the botocore it pulls in.
    assert _extras()["tracer"] == ["aws-lambda-powertools[tracer]>=3.0"]
    assert {_name(line) for line in lines} == {"aws-xray-sdk", "boto3"}
    layer = resource("XRaySdkLayer")
    assert layer["Properties"]["ContentUri"] == "layers/xray"
    assert layer["Metadata"]["BuildMethod"] == "makefile"
    recipe = (ROOT / "layers/xray/Makefile").read_text()
    assert "build-XRaySdkLayer:" in recipe
    assert "--platform manylinux2014_x86_64" in recipe
    assert "--platform manylinux2014_aarch64" in recipe  # wrapt is compiled
    assert layer["Properties"]["CompatibleArchitectures"] == ["arm64", "x86_64"]
    assert "--invalidation-mode unchecked-hash" in recipe
    # Opt-in: no function but the cleanup function (whose module builds a Tracer) takes it.
    users = [f for f in FUNCTIONS if {"Ref": "XRaySdkLayer"} in props(f).get("Layers", [])]
    assert users == ["CleanupFunction"]
    assert template()["Globals"]["Function"]["Tracing"] == {
        "Fn::If": ["TracingOn", "Active", "PassThrough"]}


def test_every_sample_event_is_an_event_of_the_function_it_is_named_for() -> None:
    paths = sorted(Path(EVENTS).glob("*.json"))
    kinds = set()
    for path in paths:
        event = json.loads(path.read_text())
        if path.name.startswith("api_"):
            assert event["httpMethod"] and event["path"] and "requestContext" in event
        elif path.name.startswith("webhook_"):
            assert {r["eventSource"] for r in event["Records"]} == {"aws:sqs"}
            assert all(r["attributes"]["MessageGroupId"] for r in event["Records"])
        elif path.name.startswith("wake-"):  # Scheduler passes the target input as the event
            TimerDelivery.model_validate(event)
        elif path.name.startswith("cleanup_"):
            assert {r["eventSource"] for r in event["Records"]} == {"aws:dynamodb"}
            assert {r["dynamodb"]["StreamViewType"] for r in event["Records"]} == {"OLD_IMAGE"}
        kinds.add(re.split(r"[_-]", path.name, maxsplit=1)[0])
    assert kinds == {"api", "webhook", "wake", "cleanup"}


# --- who may sign up, per-caller limits, alarms, what survives a deletion ---------------------


def _parameter(name: str) -> dict[str, Any]:
    return template()["Parameters"][name]  # type: ignore[no-any-return]


def test_only_an_administrator_creates_users_unless_self_sign_up_is_opened() -> None:
    assert _parameter("AllowSelfSignUp")["Default"] == "false"
    assert template()["Conditions"]["SelfSignUp"] == {
        "Fn::Equals": [{"Ref": "AllowSelfSignUp"}, "true"]}
    assert props("UserPool")["AdminCreateUserConfig"] == {
        "AllowAdminCreateUserOnly": {"Fn::If": ["SelfSignUp", False, True]}}


def test_the_user_pool_and_the_table_survive_the_stack() -> None:
    for name in ("UserPool", "SessionsTable", "OffloadBucket"):
        assert resource(name)["DeletionPolicy"] == resource(name)["UpdateReplacePolicy"] \
            == "Retain"
    assert _parameter("TableDeletionProtection")["Default"] == "true"
    assert props("SessionsTable")["DeletionProtectionEnabled"] == {
        "Fn::If": ["ProtectTable", True, False]}


def test_the_account_wide_api_gateway_setting_is_left_alone_by_default() -> None:
    assert _parameter("ConfigureApiGatewayAccount")["Default"] == "false"
    assert resource("ApiGatewayAccount")["Condition"] == "ConfigureAccount"


def test_waf_limits_each_bearer_token_and_each_ip_on_the_api_stage() -> None:
    acl = props("ApiWebAcl")
    rules = {}
    for entry in acl["Rules"]:
        condition, rule, otherwise = entry["Fn::If"]
        assert otherwise == {"Ref": "AWS::NoValue"}
        rules[condition] = rule
    token, ip = rules["RateLimitTokens"], rules["RateLimitIps"]
    assert token["Statement"]["RateBasedStatement"]["CustomKeys"] == [{"Header": {
        "Name": "authorization", "TextTransformations": [{"Priority": 0, "Type": "NONE"}]}}]
    assert token["Statement"]["RateBasedStatement"]["Limit"] == {"Ref": "WafRequestsPerToken"}
    assert ip["Statement"]["RateBasedStatement"]["AggregateKeyType"] == "IP"
    assert ip["Statement"]["RateBasedStatement"]["Limit"] == {"Ref": "WafRequestsPerIp"}
    for rule in (token, ip):
        assert rule["Action"] == {"Block": {"CustomResponse": {"ResponseCode": 429}}}
    # 0 turns a rule off; both 0: no web ACL at all (and no cost).
    conditions = template()["Conditions"]
    assert conditions["RateLimitTokens"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "WafRequestsPerToken"}, 0]}]}
    assert conditions["UseWaf"] == {
        "Fn::Or": [{"Fn::Condition": "RateLimitTokens"}, {"Fn::Condition": "RateLimitIps"}]}
    association = resource("ApiWebAclAssociation")
    assert resource("ApiWebAcl")["Condition"] == association["Condition"] == "UseWaf"
    assert association["Properties"]["ResourceArn"]["Fn::Sub"].endswith(
        "/restapis/${RestApi}/stages/${RestApi.Stage}")


@pytest.mark.parametrize("function", FUNCTIONS)
def test_each_function_has_a_reserved_concurrency_parameter_zero_meaning_unreserved(
        function: str) -> None:
    name = function.removesuffix("Function")
    condition = f"Reserve{name}"
    assert props(function)["ReservedConcurrentExecutions"] == {
        "Fn::If": [condition, {"Ref": f"{name}ReservedConcurrency"}, {"Ref": "AWS::NoValue"}]}
    assert template()["Conditions"][condition] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": f"{name}ReservedConcurrency"}, 0]}]}


def test_the_webhook_reservation_says_it_must_cover_its_queue_s_maximum_concurrency() -> None:
    [event] = props("WebhookFunction")["Events"].values()
    maximum = event["Properties"]["ScalingConfig"]["MaximumConcurrency"]
    assert maximum == {"Ref": "WebhookQueueConcurrency"}
    assert "at or above WebhookQueueConcurrency" in " ".join(
        _parameter("WebhookReservedConcurrency")["Description"].split())
    assert _parameter("WebhookQueueConcurrency")["Default"] == 10
    assert (_parameter("WebhookQueueConcurrency")["MinValue"],
            _parameter("WebhookQueueConcurrency")["MaxValue"]) == (2, 1000)  # what SQS allows


def _alarms() -> dict[str, dict[str, Any]]:
    return {name: r["Properties"] for name, r in template()["Resources"].items()
            if r["Type"] == "AWS::CloudWatch::Alarm"}


def test_alarms_watch_dead_letters_function_errors_throttles_and_durations_the_api_the_table(
        ) -> None:
    watched: dict[tuple[str, str, str], float] = {}
    notify = {"Fn::If": ["NotifyAlarms", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]}
    for alarm in _alarms().values():
        if "Metrics" in alarm:  # metric math: tests/functions/test_template_operations.py
            continue
        dimensions = {d["Name"]: d["Value"] for d in alarm["Dimensions"]}
        watched[(alarm["Namespace"], alarm["MetricName"], json.dumps(dimensions))] = \
            alarm["Threshold"]
        assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
        assert alarm["AlarmActions"] == alarm["OKActions"] == notify
    expected: dict[tuple[str, str, str], float] = {}
    for queue in ("WebhookDeadLetterQueue", "WakeDeadLetterQueue", "CleanupDeadLetterQueue"):
        queue_name = json.dumps({"QueueName": {"Fn::GetAtt": [queue, "QueueName"]}})
        expected[("AWS/SQS", "ApproximateNumberOfMessagesVisible", queue_name)] = 0
    for function in FUNCTIONS:
        name = json.dumps({"FunctionName": {"Ref": function}})
        expected[("AWS/Lambda", "Errors", name)] = 0
        expected[("AWS/Lambda", "Throttles", name)] = 0
        # near the timeout: 90% of it, in milliseconds
        expected[("AWS/Lambda", "Duration", name)] = props(function)["Timeout"] * 900
    # the stream's records live 24 hours: an hour behind is time to look
    expected[("AWS/Lambda", "IteratorAge",
              json.dumps({"FunctionName": {"Ref": "CleanupFunction"}}))] = 3_600_000
    table: dict[str, Any] = {"TableName": {"Ref": "SessionsTable"}}
    index = {**table, "GlobalSecondaryIndexName": DynamoDBStore.INDEX_NAME}
    for dims in (table, index):
        for metric in ("ReadThrottleEvents", "WriteThrottleEvents"):
            expected[("AWS/DynamoDB", metric, json.dumps(dims))] = 0
    api = json.dumps({"ApiName": props("RestApi")["Name"], "Stage": {"Ref": "StageName"}})
    expected[("AWS/ApiGateway", "5XXError", api)] = 0
    expected[("AWS/ApiGateway", "4XXError", api)] = 0.1  # a rate: the Average of 4XXError
    expected[("AWS/ApiGateway", "Latency", api)] = 25_000  # p90, under the 29 s cut
    # a webhook record waiting 3 x the function's timeout: its session is stalled
    expected[("AWS/SQS", "ApproximateAgeOfOldestMessage",
              json.dumps({"QueueName": {"Fn::GetAtt": ["WebhookQueue", "QueueName"]}}))] = 900
    expected[("AWS/Lambda", "AsyncEventsDropped",
              json.dumps({"FunctionName": {"Ref": "WakeFunction"}}))] = 0
    group = json.dumps({"ScheduleGroup": {"Ref": "ScheduleGroup"}})
    expected[("AWS/Scheduler", "TargetErrorCount", group)] = 0
    expected[("AWS/Scheduler", "InvocationDroppedCount", group)] = 0
    assert watched == expected
    assert _parameter("AlarmTopicArn")["Default"] == ""
    [latency] = [a for a in _alarms().values() if a.get("MetricName") == "Latency"]
    assert latency["ExtendedStatistic"] == "p90"
    [rate] = [a for a in _alarms().values() if a.get("MetricName") == "4XXError"]
    assert rate["Statistic"] == "Average"


# --- deploys: versions, the live alias, gradual shifts, rollback ------------------------------


def test_every_function_is_invoked_through_its_live_alias_shifted_by_codedeploy() -> None:
    function = template()["Globals"]["Function"]
    assert function["AutoPublishAlias"] == "live"
    assert function["DeploymentPreference"] == {"Type": {"Ref": "DeploymentType"}}
    deployment = _parameter("DeploymentType")
    assert deployment["Default"] == "AllAtOnce"
    assert {"AllAtOnce", "Canary10Percent5Minutes"} <= set(deployment["AllowedValues"])
    for name in FUNCTIONS:
        # overridden nowhere: every function publishes versions and is shifted
        assert "AutoPublishAlias" not in props(name)
        assert "Type" not in props(name).get("DeploymentPreference", {})


@pytest.mark.parametrize("function", FUNCTIONS)
def test_a_function_s_own_alarms_roll_its_deploy_back(function: str) -> None:
    name = function.removesuffix("Function")
    rollback = {ref["Ref"] for ref in props(function)["DeploymentPreference"]["Alarms"]}
    own = {alarm for alarm, p in _alarms().items()
           if {"Name": "FunctionName", "Value": {"Ref": function}} in p.get("Dimensions", [])
           and p["MetricName"] in ("Errors", "Throttles", "Duration")}
    assert len(own) == 3 and own <= rollback
    # and, where turns answer over HTTP, the share of turns that failed (a failed turn is no
    # Lambda error: its answer or its stream says so)
    extra = {"Api": {"Api5xxAlarm", "ApiTurnFailureRateAlarm"},
             "Stream": {"StreamTurnFailureRateAlarm"}}.get(name, set())
    assert rollback - own == extra


def test_snapstart_and_provisioned_concurrency_are_opt_in_on_the_api_function() -> None:
    api = props("ApiFunction")
    assert api["SnapStart"] == {"Fn::If": [
        "ApiSnapStartOn", {"ApplyOn": "PublishedVersions"}, {"Ref": "AWS::NoValue"}]}
    assert api["ProvisionedConcurrencyConfig"] == {"Fn::If": [
        "ProvisionApi", {"ProvisionedConcurrentExecutions": {"Ref": "ApiProvisionedConcurrency"}},
        {"Ref": "AWS::NoValue"}]}
    assert _parameter("ApiSnapStart")["Default"] == "false"
    assert _parameter("ApiProvisionedConcurrency")["Default"] == 0
    conditions = template()["Conditions"]
    assert conditions["ApiSnapStartOn"] == {"Fn::Equals": [{"Ref": "ApiSnapStart"}, "true"]}
    assert conditions["ProvisionApi"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "ApiProvisionedConcurrency"}, 0]}]}
    # Lambda allows one or the other, not both: the stack refuses the pair up front.
    rule = template()["Rules"]["SnapStartOrProvisionedConcurrency"]
    assert rule["RuleCondition"] == {"Fn::Equals": [{"Ref": "ApiSnapStart"}, "true"]}
    assert rule["Assertions"][0]["Assert"] == {
        "Fn::Equals": [{"Ref": "ApiProvisionedConcurrency"}, "0"]}
    # The stream function: the same two (its runtime loop takes part in restores:
    # tests/functions/test_snapstart_safety.py); the others: neither.
    stream = props("StreamFunction")
    assert stream["SnapStart"] == {"Fn::If": [
        "StreamSnapStartOn", {"ApplyOn": "PublishedVersions"}, {"Ref": "AWS::NoValue"}]}
    assert stream["ProvisionedConcurrencyConfig"] == {"Fn::If": [
        "ProvisionStream",
        {"ProvisionedConcurrentExecutions": {"Ref": "StreamProvisionedConcurrency"}},
        {"Ref": "AWS::NoValue"}]}
    assert _parameter("StreamSnapStart")["Default"] == "false"
    assert _parameter("StreamProvisionedConcurrency")["Default"] == 0
    assert conditions["StreamSnapStartOn"] == {
        "Fn::Equals": [{"Ref": "StreamSnapStart"}, "true"]}
    assert conditions["ProvisionStream"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "StreamProvisionedConcurrency"}, 0]}]}
    rule = template()["Rules"]["StreamSnapStartOrProvisionedConcurrency"]
    assert rule["RuleCondition"] == {"Fn::Equals": [{"Ref": "StreamSnapStart"}, "true"]}
    assert rule["Assertions"][0]["Assert"] == {
        "Fn::Equals": [{"Ref": "StreamProvisionedConcurrency"}, "0"]}
    for name in FUNCTIONS[2:]:
        assert "SnapStart" not in props(name)
    for name in FUNCTIONS[2:]:
        assert "ProvisionedConcurrencyConfig" not in props(name)


# --- the web ACL's logs, the bucket's safety net, the user pool ------------------------------


def test_waf_logs_to_an_aws_waf_logs_group_with_the_bearer_token_redacted() -> None:
    group, logging = resource("ApiWafLogGroup"), resource("ApiWafLogging")
    assert group["Condition"] == logging["Condition"] == "UseWaf"
    assert group["Properties"]["LogGroupName"]["Fn::Sub"].startswith("aws-waf-logs-")
    assert logging["Properties"]["ResourceArn"] == {"Fn::GetAtt": ["ApiWebAcl", "Arn"]}
    [destination] = logging["Properties"]["LogDestinationConfigs"]
    assert destination["Fn::Sub"].endswith(":log-group:${ApiWafLogGroup}")
    assert logging["Properties"]["RedactedFields"] == [{"SingleHeader": {"Name": "authorization"}}]


def test_offloaded_objects_expire_after_their_session_items_as_a_safety_net() -> None:
    rules = props("OffloadBucket")["LifecycleConfiguration"]["Rules"]
    [tidy] = [r for r in rules if r.get("Id") == "tidy"]
    assert tidy["NoncurrentVersionExpiration"] == {"NoncurrentDays": 7}
    [conditional] = [r["Fn::If"] for r in rules if "Fn::If" in r]
    condition, net, otherwise = conditional
    assert condition == "ExpireOffloads" and otherwise == {"Ref": "AWS::NoValue"}
    assert net["Prefix"] == inspect.signature(DynamoDBStore).parameters["offload_prefix"].default
    assert net["ExpirationInDays"] == {"Ref": "OffloadExpiryDays"}
    assert net["NoncurrentVersionExpiration"] == {"NoncurrentDays": 7}
    # After the items naming them: version items outlive their write by at most 1.25 x TTL.
    assert _parameter("OffloadExpiryDays")["Default"] > 1.25 * _parameter(
        "SessionTtlDays")["Default"]
    rule = template()["Rules"]["OffloadExpiryNeedsSessionTtl"]
    assert rule["RuleCondition"] == {"Fn::Equals": [{"Ref": "SessionTtlDays"}, "0"]}
    assert rule["Assertions"][0]["Assert"] == {
        "Fn::Equals": [{"Ref": "OffloadExpiryDays"}, "0"]}


def test_the_user_pool_is_protected_and_signs_in_with_srp_and_refresh_tokens_only() -> None:
    pool, client = props("UserPool"), props("UserPoolClient")
    assert pool["DeletionProtection"] == {"Ref": "UserPoolDeletionProtection"}
    assert _parameter("UserPoolDeletionProtection")["Default"] == "ACTIVE"
    assert client["ExplicitAuthFlows"] == ["ALLOW_USER_SRP_AUTH", "ALLOW_REFRESH_TOKEN_AUTH"]
    assert client["GenerateSecret"] is False
    # Threat protection needs the Plus plan; off by default (it is billed per active user).
    assert pool["UserPoolAddOns"] == {"AdvancedSecurityMode": {"Ref": "UserPoolThreatProtection"}}
    assert pool["UserPoolTier"] == {"Fn::If": ["ThreatProtection", "PLUS", {"Ref": "AWS::NoValue"}]}
    assert _parameter("UserPoolThreatProtection")["Default"] == "OFF"
    assert set(_parameter("UserPoolThreatProtection")["AllowedValues"]) == {
        "OFF", "AUDIT", "ENFORCED"}


def test_every_checkov_skip_is_justified_inline_in_one_line() -> None:
    skips = [(name, entry) for name, r in template()["Resources"].items()
             for entry in r.get("Metadata", {}).get("checkov", {}).get("skip", [])]
    assert skips  # the template does carry justified skips
    for name, entry in skips:
        assert set(entry) == {"id", "comment"}, (name, entry)
        assert re.fullmatch(r"CKV2?_AWS_\d+", entry["id"]), (name, entry)
        comment = entry["comment"]
        assert 20 <= len(comment) <= 160 and "\n" not in comment, (name, comment)
    # No other way of skipping: no skip comments, no skip list elsewhere.
    text = (ROOT / "template.yaml").read_text()
    assert "checkov:skip" not in text
    assert "--skip-check" not in (ROOT / ".ci/sam").read_text()
