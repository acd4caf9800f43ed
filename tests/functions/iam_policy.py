"""Every AWS call a function makes, checked against that function's role in template.yaml.

:class:`CallRecorder` hooks botocore below the client layer (``BaseClient._make_api_call``)
and attributes each call to the function whose code made it: the one whose handler is running
or whose cold start is importing (:func:`acting_as`, which ``Deployment.cold_start`` applies),
else the one whose modules or objects (its app, store, scheduler, hand-on sender) are on the
stack (each cold start imports ``dormant.aws``'s modules and the sample afresh, so their
module objects say whose they are), else the one whose code built the client (a running turn
polls its control record on a thread of its own, with its function's store client). A test's
own calls (provisioning, reading back) belong to nobody and are not checked.

Each call is turned into what IAM authorises it as (:func:`authorisations`): an action and a
resource ARN, plus the condition keys AWS adds (``iam:PassedToService`` for the role a schedule
is created with). A ``TransactWriteItems`` is authorised per action inside it (``Put`` as
``dynamodb:PutItem``, ``ConditionCheck`` as ``dynamodb:ConditionCheckItem``, ``Delete`` as
``dynamodb:DeleteItem``, ``Update`` as ``dynamodb:UpdateItem``), a ``DeleteObjects`` per key as
``s3:DeleteObject``, a query on an index on the index's ARN. :func:`function_policy` resolves
the function's inline statements (``!GetAtt``, ``!Sub``, ``!Ref``) to the test deployment's
ARNs, and :func:`allows` evaluates them (Allow statements, ``*``/``?`` wildcards,
``StringEquals``/``StringLike`` conditions; anything else does not match, so the check fails
closed). Every call is checked, refused or not (a conditional write that fails still needed the
permission), except one on a resource that exists nowhere in the deployment (a test pointing a
function at a deleted queue): that fails whatever the role says.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any
from urllib.parse import urlparse

from botocore.client import BaseClient
from botocore.exceptions import ClientError
from botocore.session import Session

__all__ = [
    "ACCOUNT",
    "FUNCTIONS",
    "REGION",
    "Call",
    "CallRecorder",
    "Names",
    "acting_as",
    "allows",
    "authorisations",
    "function_policy",
    "refused",
]

REGION = "us-east-1"
ACCOUNT = "123456789012"
#: The functions (``functions/<name>/app.py``) and their logical ids in template.yaml.
FUNCTIONS: dict[str, str] = {"api": "ApiFunction", "stream": "StreamFunction",
                             "webhook": "WebhookFunction", "wake": "WakeFunction",
                             "cleanup": "CleanupFunction"}

_TRANSACTION_ACTIONS = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem",
                        "ConditionCheck": "ConditionCheckItem"}
_S3_OBJECT_ACTIONS = {"GetObject": "GetObject", "HeadObject": "GetObject",
                      "PutObject": "PutObject", "DeleteObject": "DeleteObject"}
_S3_BUCKET_ACTIONS = {"ListObjects": "ListBucket", "ListObjectsV2": "ListBucket",
                      "ListObjectVersions": "ListBucketVersions"}
#: Where a call's resource could not be named: matches no statement's resource.
UNKNOWN = "<unknown resource>"

#: Error codes of calls on resources that do not exist.
_MISSING = frozenset({"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist",
                      "ResourceNotFoundException", "NoSuchBucket"})

_acting: ContextVar[str | None] = ContextVar("dormant_acting_function", default=None)
_OWNER = "_dormant_function"


@contextlib.contextmanager
def acting_as(function: str) -> Iterator[None]:
    """AWS calls made inside are ``function``'s (its handler or its cold start is running)."""
    token = _acting.set(function)
    try:
        yield
    finally:
        _acting.reset(token)


@dataclass(frozen=True)
class Call:
    """One authorisation an AWS call needs, attributed to the function that made it."""

    function: str
    operation: str
    action: str
    resource: str
    context: tuple[tuple[str, str], ...] = ()
    #: The call failed because its resource does not exist.
    missing: bool = False

    def __str__(self) -> str:
        extra = "".join(f" [{k}={v}]" for k, v in self.context)
        return f"{self.function}: {self.operation} needs {self.action} on {self.resource}{extra}"


@dataclass
class CallRecorder:
    """Records the authorisations of every attributed AWS call while started."""

    calls: list[Call] = field(default_factory=list)
    #: ``id(module.__dict__)`` -> function, for the modules each cold start imported.
    modules: dict[int, str] = field(default_factory=dict)
    _undo: list[Callable[[], None]] = field(default_factory=list)

    #: ``id(object)`` -> function, for the objects its cold start built (its app, store, ...).
    objects: dict[int, str] = field(default_factory=dict)
    _kept: list[Any] = field(default_factory=list)

    def claim(self, function: str, modules: list[ModuleType], objects: list[Any]) -> None:
        """These freshly imported modules, and the objects they built, are ``function``'s."""
        for module in modules:
            self.modules[id(module.__dict__)] = function
        for thing in objects:
            self.objects[id(thing)] = function
        self._kept += [*modules, *objects]  # ids stay theirs while the recorder lives

    def of(self, function: str) -> list[Call]:
        return [c for c in self.calls if c.function == function]

    def actions(self, function: str) -> set[str]:
        return {c.action for c in self.of(function)}

    def _owner(self) -> str | None:
        acting = _acting.get()
        if acting is not None:
            return acting
        frame = sys._getframe(2)
        while frame is not None:
            owner = self.modules.get(id(frame.f_globals))
            if owner is None and "self" in frame.f_code.co_varnames[:1]:
                owner = self.objects.get(id(frame.f_locals.get("self")))
            if owner is not None:
                return owner
            frame = frame.f_back  # type: ignore[assignment]
        return None

    def start(self) -> CallRecorder:
        make_call = BaseClient._make_api_call
        create_client = Session.create_client
        recorder = self

        def recording(client: BaseClient, operation: str, params: dict[str, Any]) -> Any:
            owner = recorder._owner() or getattr(client, _OWNER, None)
            if owner is None:
                return make_call(client, operation, params)
            service = client.meta.service_model.endpoint_prefix
            region = client.meta.region_name or REGION
            needed = [Call(owner, operation, action, resource, context)
                      for action, resource, context in authorisations(
                          service, operation, params, region=region)]
            try:
                result = make_call(client, operation, params)
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") in _MISSING:
                    needed = [replace(c, missing=True) for c in needed]
                recorder.calls.extend(needed)
                raise
            recorder.calls.extend(needed)
            return result

        def creating(session: Session, *args: Any, **kwargs: Any) -> Any:
            client = create_client(session, *args, **kwargs)
            owner = recorder._owner()
            if owner is not None:
                setattr(client, _OWNER, owner)
            return client

        BaseClient._make_api_call = recording  # type: ignore[method-assign]
        Session.create_client = creating  # type: ignore[method-assign]
        self._undo = [lambda: setattr(BaseClient, "_make_api_call", make_call),
                      lambda: setattr(Session, "create_client", create_client)]
        return self

    def stop(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo = []


# --- what IAM authorises a call as -------------------------------------------------------------

_Authorisation = tuple[str, str, tuple[tuple[str, str], ...]]


def authorisations(service: str, operation: str, params: Mapping[str, Any], *,
                   region: str = REGION, account: str = ACCOUNT) -> list[_Authorisation]:
    """``(action, resource ARN, condition keys)`` for each authorisation the call needs."""
    if service == "dynamodb":
        return _dynamodb(operation, params, region, account)
    if service == "s3":
        return _s3(operation, params)
    if service == "sqs":
        queue = _queue_arn(params.get("QueueUrl", ""), region, account)
        action = "SendMessage" if operation == "SendMessageBatch" else operation
        return [(f"sqs:{action}", queue, ())]
    if service == "scheduler":
        return _scheduler(operation, params, region, account)
    if service == "secretsmanager" and operation == "GetSecretValue":
        secret = str(params["SecretId"])
        if not secret.startswith("arn:"):
            # AWS appends six random characters to a secret's name in its ARN.
            secret = f"arn:aws:secretsmanager:{region}:{account}:secret:{secret}-AbCdEf"
        return [("secretsmanager:GetSecretValue", secret, ())]
    if service == "bedrock-runtime" and operation in _BEDROCK_ACTIONS:
        return _bedrock(_BEDROCK_ACTIONS[operation], str(params.get("modelId", "")), region,
                        account)
    if service == "ssm" and operation in {"GetParameter", "GetParameters"}:
        names = params.get("Names") or [params.get("Name", "")]
        return [(f"ssm:{operation}",
                 f"arn:aws:ssm:{region}:{account}:parameter/{str(n).lstrip('/')}", ())
                for n in names]
    return [(f"{service}:{operation}", UNKNOWN, ())]


#: What IAM authorises a Bedrock Runtime call as.
_BEDROCK_ACTIONS = {"ConverseStream": "bedrock:InvokeModelWithResponseStream",
                    "Converse": "bedrock:InvokeModel"}
#: The prefixes of cross-region inference profile ids (``us.amazon.nova-pro-v1:0``).
_PROFILE_PREFIXES = ("us.", "eu.", "apac.", "us-gov.", "jp.", "au.", "ca.", "global.")


def _bedrock(action: str, model: str, region: str, account: str) -> list[_Authorisation]:
    """A model id is authorised on its foundation model; an inference profile's on the
    profile, and on the foundation model it routes to with the profile as condition key."""
    if model.startswith(_PROFILE_PREFIXES):
        profile = f"arn:aws:bedrock:{region}:{account}:inference-profile/{model}"
        routed = model.split(".", 1)[1]
        return [(action, profile, ()),
                (action, f"arn:aws:bedrock:{region}::foundation-model/{routed}",
                 (("bedrock:InferenceProfileArn", profile),))]
    if model.startswith("arn:"):
        return [(action, model, ())]
    return [(action, f"arn:aws:bedrock:{region}::foundation-model/{model}", ())]


def _table(name: str, region: str, account: str) -> str:
    return f"arn:aws:dynamodb:{region}:{account}:table/{name}"


def _dynamodb(operation: str, params: Mapping[str, Any], region: str,
              account: str) -> list[_Authorisation]:
    if operation == "TransactWriteItems":
        return [(f"dynamodb:{_TRANSACTION_ACTIONS[kind]}",
                 _table(body["TableName"], region, account), ())
                for item in params["TransactItems"] for kind, body in item.items()]
    if operation == "TransactGetItems":
        return [("dynamodb:GetItem", _table(item["Get"]["TableName"], region, account), ())
                for item in params["TransactItems"]]
    if operation in {"BatchWriteItem", "BatchGetItem"}:
        return [(f"dynamodb:{operation}", _table(name, region, account), ())
                for name in params["RequestItems"]]
    if "TableName" not in params:
        return [(f"dynamodb:{operation}", UNKNOWN, ())]
    resource = _table(params["TableName"], region, account)
    if params.get("IndexName"):
        resource += f"/index/{params['IndexName']}"
    return [(f"dynamodb:{operation}", resource, ())]


def _s3(operation: str, params: Mapping[str, Any]) -> list[_Authorisation]:
    bucket = f"arn:aws:s3:::{params.get('Bucket', '')}"
    if operation == "DeleteObjects":
        return [("s3:DeleteObject", f"{bucket}/{o['Key']}", ())
                for o in params["Delete"]["Objects"]]
    if operation in _S3_OBJECT_ACTIONS:
        return [(f"s3:{_S3_OBJECT_ACTIONS[operation]}", f"{bucket}/{params['Key']}", ())]
    return [(f"s3:{_S3_BUCKET_ACTIONS.get(operation, operation)}", bucket, ())]


def _queue_arn(url: str, region: str, account: str) -> str:
    parts = urlparse(url).path.strip("/").split("/")
    if len(parts) < 2:
        return UNKNOWN
    return f"arn:aws:sqs:{region}:{parts[-2]}:{parts[-1]}"


def _scheduler(operation: str, params: Mapping[str, Any], region: str,
               account: str) -> list[_Authorisation]:
    group = params.get("GroupName") or "default"
    if "Name" not in params:
        return [(f"scheduler:{operation}", UNKNOWN, ())]
    found: list[_Authorisation] = [(
        f"scheduler:{operation}",
        f"arn:aws:scheduler:{region}:{account}:schedule/{group}/{params['Name']}", ())]
    role = (params.get("Target") or {}).get("RoleArn")
    if operation in {"CreateSchedule", "UpdateSchedule"} and role:
        found.append(("iam:PassRole", role,
                      (("iam:PassedToService", "scheduler.amazonaws.com"),)))
    return found


# --- the template's policies, resolved to a test deployment's ARNs ------------------------------


@dataclass(frozen=True)
class Names:
    """The physical names a test deployment gives the template's resources."""

    table: str
    bucket: str
    schedule_group: str
    queue: str
    scheduler_role_arn: str
    wake_dlq_arn: str
    stack: str = "dormant-test"
    parameters: Mapping[str, str] = field(default_factory=dict)

    def ref(self, name: str, template: Mapping[str, Any]) -> str:
        pseudo = {"AWS::Partition": "aws", "AWS::Region": REGION, "AWS::AccountId": ACCOUNT,
                  "AWS::StackName": self.stack, "AWS::URLSuffix": "amazonaws.com"}
        if name in pseudo:
            return pseudo[name]
        if name in template.get("Parameters", {}):
            return str(self.parameters.get(name, template["Parameters"][name].get("Default")))
        physical = {"SessionsTable": self.table, "OffloadBucket": self.bucket,
                    "ScheduleGroup": self.schedule_group,
                    "WebhookQueue": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{self.queue}"}
        if name not in physical:
            raise KeyError(f"the IAM check does not know what !Ref {name} is in a test "
                           "deployment: add it to tests/functions/iam_policy.py Names.ref")
        return physical[name]

    def owns(self, arn: str) -> bool:
        """Whether ``arn`` is one of the deployment's resources (or inside one)."""
        scheduler = f"arn:aws:scheduler:{REGION}:{ACCOUNT}:schedule/{self.schedule_group}/"
        return any(arn == own or arn.startswith(own + "/") for own in (
            self.get_att("SessionsTable", "Arn"), self.get_att("OffloadBucket", "Arn"),
            self.get_att("WebhookQueue", "Arn"), self.scheduler_role_arn, self.wake_dlq_arn,
        )) or arn.startswith(scheduler)

    def get_att(self, name: str, attribute: str) -> str:
        arns = {
            ("SessionsTable", "Arn"): _table(self.table, REGION, ACCOUNT),
            ("SessionsTable", "StreamArn"):
                _table(self.table, REGION, ACCOUNT) + "/stream/2026-01-01T00:00:00.000",
            ("OffloadBucket", "Arn"): f"arn:aws:s3:::{self.bucket}",
            ("WebhookQueue", "Arn"): f"arn:aws:sqs:{REGION}:{ACCOUNT}:{self.queue}",
            ("SchedulerRole", "Arn"): self.scheduler_role_arn,
            ("WakeDeadLetterQueue", "Arn"): self.wake_dlq_arn,
        }
        if (name, attribute) not in arns:
            raise KeyError(f"the IAM check does not know !GetAtt {name}.{attribute} in a test "
                           "deployment: add it to tests/functions/iam_policy.py Names.get_att")
        return arns[(name, attribute)]


#: What ``!Ref AWS::NoValue`` resolves to: dropped from the list holding it.
_NO_VALUE = object()


def _holds(condition: Any, names: Names, template: Mapping[str, Any]) -> bool:
    """A template condition (by name, or a condition function) for this deployment's
    parameters."""
    if isinstance(condition, str):
        return _holds(template["Conditions"][condition], names, template)
    [(function, arguments)] = condition.items()
    if function == "Fn::Equals":
        left, right = (_resolve(a, names, template) for a in arguments)
        return str(left) == str(right)
    if function == "Fn::Not":
        return not _holds(arguments[0], names, template)
    if function == "Fn::And":
        return all(_holds(a, names, template) for a in arguments)
    if function == "Fn::Or":
        return any(_holds(a, names, template) for a in arguments)
    if function == "Fn::Condition":
        return _holds(arguments, names, template)
    raise KeyError(f"the IAM check does not evaluate {function} in a condition")


def _resolve(value: Any, names: Names, template: Mapping[str, Any]) -> Any:
    if isinstance(value, list):
        resolved = [_resolve(v, names, template) for v in value]
        return [v for v in resolved if v is not _NO_VALUE]
    if not isinstance(value, dict):
        return value
    if value == {"Ref": "AWS::NoValue"}:
        return _NO_VALUE
    if set(value) == {"Fn::If"}:
        condition, then, otherwise = value["Fn::If"]
        return _resolve(then if _holds(condition, names, template) else otherwise, names,
                        template)
    if set(value) == {"Ref"}:
        return names.ref(value["Ref"], template)
    if set(value) == {"Fn::GetAtt"}:
        resource, attribute = value["Fn::GetAtt"]
        return names.get_att(resource, attribute)
    if set(value) == {"Fn::Sub"}:
        text, variables = (value["Fn::Sub"] if isinstance(value["Fn::Sub"], list)
                           else (value["Fn::Sub"], {}))

        def substitute(match: re.Match[str]) -> str:
            ref = match.group(1)
            if ref in variables:
                return str(_resolve(variables[ref], names, template))
            if "." in ref and not ref.startswith("AWS::"):
                return names.get_att(*ref.split(".", 1))
            return names.ref(ref, template)

        return re.sub(r"\$\{([^}!]+)\}", substitute, text)
    return {k: _resolve(v, names, template) for k, v in value.items()}


def function_policy(template: Mapping[str, Any], logical_id: str,
                    names: Names) -> list[dict[str, Any]]:
    """The function's inline policy statements, with every intrinsic resolved."""
    policies = template["Resources"][logical_id]["Properties"].get("Policies", [])
    return [s for p in _resolve(policies, names, template) for s in p["Statement"]]


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _matches(pattern: str, value: str, *, ignore_case: bool = False) -> bool:
    """IAM's wildcards: ``*`` any run of characters, ``?`` any one character."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.DOTALL | (re.IGNORECASE if ignore_case else 0)) \
        is not None


def _condition_holds(condition: Mapping[str, Any], context: Mapping[str, str]) -> bool:
    for operator, tests in condition.items():
        if operator not in {"StringEquals", "StringLike"}:
            return False  # an operator this check does not evaluate never grants
        for key, expected in tests.items():
            actual = context.get(key)
            if actual is None:
                return False
            if operator == "StringEquals" and actual not in _as_list(expected):
                return False
            if operator == "StringLike" and not any(_matches(p, actual)
                                                    for p in _as_list(expected)):
                return False
    return True


def allows(statements: list[dict[str, Any]], call: Call) -> bool:
    """Whether an Allow statement grants the call's action on its resource."""
    context = dict(call.context)
    return any(
        s.get("Effect") == "Allow"
        and any(_matches(a, call.action, ignore_case=True) for a in _as_list(s["Action"]))
        and any(_matches(r, call.resource) for r in _as_list(s["Resource"]))
        and _condition_holds(s.get("Condition", {}), context)
        for s in statements)


def refused(template: Mapping[str, Any], calls: list[Call], names: Names) -> list[Call]:
    """The calls their function's policy does not allow (each authorisation once)."""
    policies: dict[str, list[dict[str, Any]]] = {}
    found: list[Call] = []
    for call in dict.fromkeys(calls):
        if call.missing and not names.owns(call.resource):
            # A test pointing a function at a resource that is not there (a queue that was
            # deleted): the call fails whatever the role says. A missing resource of the
            # deployment's own (a schedule cancelled before it was made) is checked.
            continue
        if call.function not in policies:
            policies[call.function] = function_policy(template, FUNCTIONS[call.function], names)
        if not allows(policies[call.function], call):
            found.append(call)
    return found
