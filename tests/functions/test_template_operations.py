"""template.yaml as a production team reads it: what the default stack asks of the account
(no reserved concurrency, arm64), what tracing costs, which alarms watch what and whom they
tell, which alarms roll a deploy back. docs/aws.md ("Load and limits") says why each."""

from __future__ import annotations

from typing import Any

import pytest

from dormant.settings import ENV
from tests.functions.test_template import FUNCTIONS, _alarms, _parameter, props, resource, template

#: The functions whose turns emit the turn metrics (every function but the cleanup one).
TURN_FUNCTIONS = ("ApiFunction", "StreamFunction", "WebhookFunction", "WakeFunction")
NOTIFY = {"Fn::If": ["NotifyAlarms", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]}


def _holds(condition: str, overrides: dict[str, Any] | None = None) -> bool:
    """Whether ``condition`` holds for the stack deployed with its parameters' defaults
    (and ``overrides``): CloudFormation compares parameter values as strings."""
    values = {name: str(p.get("Default", "")) for name, p in template()["Parameters"].items()}
    values.update({k: str(v) for k, v in (overrides or {}).items()})

    def value(node: Any) -> Any:
        if isinstance(node, dict) and set(node) == {"Ref"}:
            return values[node["Ref"]]
        if isinstance(node, dict):
            return truth(node)
        return str(node)

    def truth(node: dict[str, Any]) -> bool:
        [(function, arguments)] = node.items()
        if function == "Fn::Equals":
            return bool(value(arguments[0]) == value(arguments[1]))
        if function == "Fn::Not":
            return not value(arguments[0])
        if function == "Fn::Or":
            return any(value(a) for a in arguments)
        if function == "Fn::And":
            return all(value(a) for a in arguments)
        if function == "Condition":
            return truth(template()["Conditions"][arguments])
        raise AssertionError(f"unexpected {function} in a condition")

    return truth(template()["Conditions"][condition])


def _resolved(node: Any, overrides: dict[str, Any] | None = None) -> Any:
    """``node`` with its ``Fn::If``s decided for the default stack (``AWS::NoValue``: None)."""
    if isinstance(node, dict) and "Fn::If" in node:
        condition, then, otherwise = node["Fn::If"]
        return _resolved(then if _holds(condition, overrides) else otherwise, overrides)
    if node == {"Ref": "AWS::NoValue"}:
        return None
    return node


# --- deployable on a new account ---------------------------------------------------------------


def test_the_default_stack_reserves_no_concurrency() -> None:
    # Lambda keeps 100 of the account's concurrency unreserved: any reservation by default
    # fails the deploy on an account whose quota is under 100 + the reservations.
    reservations = [name for name in template()["Parameters"]
                    if name.endswith("ReservedConcurrency")]
    assert sorted(reservations) == sorted(f"{f.removesuffix('Function')}ReservedConcurrency"
                                          for f in FUNCTIONS)
    for name in reservations:
        parameter = _parameter(name)
        assert parameter["Default"] == 0, name
        assert "100 of the account's concurrency quota unreserved" in " ".join(
            parameter["Description"].split()), name
    for function in FUNCTIONS:
        assert _resolved(props(function)["ReservedConcurrentExecutions"]) is None, function
        # and a value other than 0 does reserve it
        name = f"{function.removesuffix('Function')}ReservedConcurrency"
        assert _resolved(props(function)["ReservedConcurrentExecutions"], {name: 20}) == {
            "Ref": name}
    # nothing else reserves or provisions concurrency by default
    for function in FUNCTIONS:
        assert _resolved(props(function).get("ProvisionedConcurrencyConfig")) is None


def test_every_limit_parameter_is_in_the_limits_group() -> None:
    groups = template()["Metadata"]["AWS::CloudFormation::Interface"]["ParameterGroups"]
    grouped = [name for group in groups for name in group["Parameters"]]
    assert sorted(grouped) == sorted(template()["Parameters"])  # each once, none left out
    limits = next(g["Parameters"] for g in groups if g["Label"]["default"] == "Limits")
    assert {name for name in template()["Parameters"]
            if name.endswith("ReservedConcurrency")} <= set(limits)
    assert {"ApiThrottleRate", "ApiThrottleBurst"} <= set(limits)


def test_the_stage_throttle_is_a_parameter_of_50_a_second_by_default() -> None:
    [setting] = props("RestApi")["MethodSettings"]
    assert setting["ThrottlingRateLimit"] == {"Ref": "ApiThrottleRate"}
    assert setting["ThrottlingBurstLimit"] == {"Ref": "ApiThrottleBurst"}
    assert (_parameter("ApiThrottleRate")["Default"], _parameter("ApiThrottleBurst")["Default"]) \
        == (50, 100)


# --- arm64 -----------------------------------------------------------------------------------


def test_functions_are_arm64_by_default_on_layers_built_for_both_architectures() -> None:
    architecture = _parameter("Architecture")
    assert architecture["Default"] == "arm64"
    assert architecture["AllowedValues"] == ["arm64", "x86_64"]
    assert template()["Globals"]["Function"]["Architectures"] == [{"Ref": "Architecture"}]
    for function in FUNCTIONS:
        assert "Architectures" not in props(function)  # none overrides it
    for layer in ("DormantLayer", "XRaySdkLayer"):
        assert set(props(layer)["CompatibleArchitectures"]) == set(architecture["AllowedValues"])


# --- tracing -----------------------------------------------------------------------------------


def test_tracing_is_sampled_by_default_full_records_every_api_request_and_off_is_off() -> None:
    tracing = _parameter("Tracing")
    assert tracing["Default"] == "sampled"
    assert tracing["AllowedValues"] == ["sampled", "full", "off"]
    function_mode = template()["Globals"]["Function"]["Tracing"]
    stage = props("RestApi")["TracingEnabled"]
    rule = resource("ApiTraceEveryRequest")
    assert rule["Condition"] == "TraceEveryRequest"
    for value, mode, traced, every in (("sampled", "Active", True, False),
                                       ("full", "Active", True, True),
                                       ("off", "PassThrough", False, False)):
        given = {"Tracing": value}
        assert _resolved(function_mode, given) == mode, value
        assert _resolved(stage, given) is traced, value
        assert _holds("TraceEveryRequest", given) is every, value
    # The rule: every request of this stack's stage, above X-Ray's default rule (10000).
    sampling = rule["Properties"]["SamplingRule"]
    assert (sampling["FixedRate"], sampling["ServiceType"]) == (1, "AWS::ApiGateway::Stage")
    assert sampling["ServiceName"] == {"Fn::Sub": "${AWS::StackName}-api/${StageName}"}
    assert props("RestApi")["Name"] == {"Fn::Sub": "${AWS::StackName}-api"}
    assert sampling["Priority"] < 10000


# --- alarms ------------------------------------------------------------------------------------


def _metric(alarm: dict[str, Any], metric_id: str) -> dict[str, Any]:
    [metric] = [m for m in alarm["Metrics"] if m["Id"] == metric_id]
    return metric  # type: ignore[no-any-return]


def test_every_alarm_notifies_the_topic_when_there_is_one() -> None:
    for name, alarm in _alarms().items():
        assert alarm["AlarmActions"] == alarm["OKActions"] == NOTIFY, name
        assert alarm["TreatMissingData"] == "notBreaching", name


def test_an_empty_topic_is_said_by_an_output_and_by_the_functions_at_cold_start() -> None:
    output = template()["Outputs"]["AlarmNotifications"]["Value"]
    condition, topic, nobody = output["Fn::If"]
    assert (condition, topic) == ("NotifyAlarms", {"Ref": "AlarmTopicArn"})
    assert nobody.startswith("NOBODY")
    assert _parameter("AlarmTopicArn")["Default"] == ""
    # dormant/aws/deployment.py warns when this is empty (tests/functions/test_alarm_topic.py)
    env = template()["Globals"]["Function"]["Environment"]["Variables"]
    assert env[ENV.ALARM_TOPIC] == {"Ref": "AlarmTopicArn"}


@pytest.mark.parametrize("function", FUNCTIONS)
def test_concurrency_near_a_reservation_alarms_only_when_there_is_one(function: str) -> None:
    name = function.removesuffix("Function")
    alarm = resource(f"{name}ConcurrencyAlarm")
    assert alarm["Condition"] == f"Reserve{name}"
    assert not _holds(alarm["Condition"])  # the default stack reserves nothing
    properties = alarm["Properties"]
    used = _metric(properties, "used")
    assert used["Expression"] == {"Fn::Sub": f"100 * concurrent / ${{{name}ReservedConcurrency}}"}
    stat = _metric(properties, "concurrent")["MetricStat"]
    assert stat["Metric"]["Namespace"] == "AWS/Lambda"
    assert stat["Metric"]["MetricName"] == "ConcurrentExecutions"
    assert stat["Metric"]["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": function}}]
    assert stat["Stat"] == "Maximum"
    assert properties["Threshold"] == 80  # percent of the reservation


def test_the_table_s_own_failures_alarm_over_every_operation_the_functions_call() -> None:
    alarm = props("TableSystemErrorsAlarm")
    assert _metric(alarm, "errors")["Expression"] == "SUM(METRICS())"
    operations = set()
    for metric in alarm["Metrics"]:
        if "MetricStat" not in metric:
            continue
        assert metric["ReturnData"] is False
        watched = metric["MetricStat"]["Metric"]
        assert (watched["Namespace"], watched["MetricName"]) == ("AWS/DynamoDB", "SystemErrors")
        dimensions = {d["Name"]: d["Value"] for d in watched["Dimensions"]}
        assert dimensions["TableName"] == {"Ref": "SessionsTable"}
        operations.add(dimensions["Operation"])
    # the calls the functions' roles allow (ConditionCheckItem goes inside TransactWriteItems)
    assert operations == {"GetItem", "PutItem", "DeleteItem", "Query", "TransactWriteItems",
                          "BatchWriteItem"}
    assert alarm["Threshold"] == 0


@pytest.mark.parametrize("function", TURN_FUNCTIONS)
def test_each_turn_running_function_alarms_on_its_share_of_failed_turns(function: str) -> None:
    name = function.removesuffix("Function")
    alarm = props(f"{name}TurnFailureRateAlarm")
    rate = _metric(alarm, "rate")
    # A rate only over minutes of at least 10 turns: one failure in a quiet minute is no page.
    assert rate["Expression"] == "IF(turns >= 10, 100 * FILL(failed, 0) / turns, 0)"
    assert rate["ReturnData"] is True
    for metric_id, metric_name in (("turns", "Turns"), ("failed", "TurnsFailed")):
        stat = _metric(alarm, metric_id)["MetricStat"]
        # what the turn metrics are published as (Powertools EMF: POWERTOOLS_METRICS_NAMESPACE,
        # its `service` dimension, and the function's name)
        assert stat["Metric"] == {"Namespace": "Dormant", "MetricName": metric_name,
                                  "Dimensions": [{"Name": "service", "Value": "dormant"},
                                                 {"Name": "FunctionName",
                                                  "Value": {"Ref": function}}]}
        assert (stat["Stat"], stat["Period"]) == ("Sum", 60)
    env = template()["Globals"]["Function"]["Environment"]["Variables"]
    assert (env["POWERTOOLS_METRICS_NAMESPACE"], env["POWERTOOLS_SERVICE_NAME"]) == (
        "Dormant", "dormant")
    assert alarm["Threshold"] == 5 and alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (3, 2)


@pytest.mark.parametrize("function", ["ApiFunction", "StreamFunction"])
def test_failed_turns_roll_back_a_deploy_of_the_functions_that_answer_them(function: str) -> None:
    # A streamed turn that fails ends its response with error trailers, and a buffered one
    # answers its error body: neither is a Lambda `Errors` datapoint.
    name = function.removesuffix("Function")
    rollback = props(function)["DeploymentPreference"]["Alarms"]
    assert {"Ref": f"{name}TurnFailureRateAlarm"} in rollback
