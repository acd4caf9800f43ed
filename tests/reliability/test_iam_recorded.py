"""IAM from recorded calls: the checker can fail, every function is recorded, and the paths the
roles used to miss (DeleteItem, DeleteObject, the control record, the owner index) are
exercised and allowed.

Every test under tests/functions and tests/reliability runs with ``iam_recorded``
(tests/functions/conftest.py): each AWS call a function's code makes is attributed to that
function and checked against its role in template.yaml at teardown.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import boto3
import pytest
from pydantic import BaseModel

import dormant
from dormant.models import ScriptedModel
from dormant.stores import DynamoDBStore
from tests.functions.conftest import (
    Deployment,
    FakeLambdaContext,
    Recording,
    api_body,
    load_event,
    seed_wake_timer,
    with_body,
)
from tests.functions.iam_policy import FUNCTIONS, acting_as, refused
from tests.functions.test_template import template

# --- the checker can fail ----------------------------------------------------------------------


def test_a_call_outside_the_role_is_reported_naming_function_action_and_resource(
        deployed: Deployment, iam_recorded: Recording) -> None:
    deployed.cold_start("webhook")
    with acting_as("webhook"):
        boto3.client("dynamodb").scan(TableName=deployed.table)  # no role may scan
        boto3.client("s3").put_object(Bucket=deployed.bucket, Key="elsewhere/x", Body=b"x")

    problems = iam_recorded.refused()

    table = f"arn:aws:dynamodb:us-east-1:123456789012:table/{deployed.table}"
    assert problems == [f"webhook: Scan needs dynamodb:Scan on {table}",
                        f"webhook: PutObject needs s3:PutObject on "
                        f"arn:aws:s3:::{deployed.bucket}/elsewhere/x"]
    iam_recorded.recorder.calls.clear()  # reported: this test's teardown has nothing to fail


def test_the_test_s_own_calls_are_nobody_s(deployed: Deployment,
                                           iam_recorded: Recording) -> None:
    deployed.cold_start("api")
    boto3.client("dynamodb").scan(TableName=deployed.table)
    deployed.session("nobody")

    assert iam_recorded.recorder.calls == []


# --- every function is recorded ----------------------------------------------------------------


def _drive_api(deployed: Deployment) -> None:
    api = deployed.cold_start("api")
    assert api.handler(load_event("api_post_turn.json"), FakeLambdaContext())["statusCode"] == 200


def _drive_stream(deployed: Deployment) -> None:
    stream = deployed.cold_start("stream")
    assert stream.handler(load_event("api_post_agui.json"), FakeLambdaContext())[
        "statusCode"] == 200


def _drive_webhook(deployed: Deployment) -> None:
    deployed.cold_start("webhook").handler(load_event("webhook_sqs_fifo_batch.json"),
                                           FakeLambdaContext())


def _drive_wake(deployed: Deployment) -> None:
    event = load_event("wake-timer.json")
    seed_wake_timer(deployed, event)
    assert deployed.cold_start("wake").handler(event, FakeLambdaContext())["commitStatus"] \
        == "committed"


def _drive_cleanup(deployed: Deployment) -> None:
    event = load_event("cleanup_ddb_stream_remove.json")
    for key in event["Records"][0]["dynamodb"]["OldImage"]["s3"]["SS"]:
        boto3.client("s3").put_object(Bucket=deployed.bucket, Key=key, Body=b"{}")
    reply = deployed.cold_start("cleanup").handler(event, FakeLambdaContext())
    assert reply == {"batchItemFailures": []}


_DRIVERS = {"api": _drive_api, "stream": _drive_stream, "webhook": _drive_webhook,
            "wake": _drive_wake, "cleanup": _drive_cleanup}


def test_every_function_of_the_template_has_a_driver_here() -> None:
    functions = {name for name, r in template()["Resources"].items()
                 if r["Type"] == "AWS::Serverless::Function"}
    assert set(FUNCTIONS.values()) == functions
    assert set(_DRIVERS) == set(FUNCTIONS)


@pytest.mark.parametrize("function", sorted(FUNCTIONS))
def test_each_function_s_handler_is_recorded_as_its_own(
        deployed: Deployment, iam_recorded: Recording, function: str) -> None:
    _DRIVERS[function](deployed)

    recorded = iam_recorded.recorder.calls
    assert recorded, f"no call of the {function} function was recorded"
    assert {c.function for c in recorded} == {function}
    assert iam_recorded.refused() == []


# --- the paths the roles used to miss -----------------------------------------------------------


def _expired(deployed: Deployment, session_id: str) -> None:
    """A session that expired an hour ago and that TTL has not removed yet."""
    past = DynamoDBStore(deployed.table, bucket=deployed.bucket, ttl_seconds=60,
                         clock=lambda: time.time() - 3600)
    assert dormant.App(store=past).sessions.append(session_id, "long ago", id="old-1").ok


def _texts(deployed: Deployment, session_id: str) -> list[str]:
    session = deployed.session(session_id)
    assert session is not None
    return [e.text for e in session.events if e.type == "user"]


def test_a_webhook_turn_on_an_expired_session_s_id_clears_it_with_deleteitem(
        deployed: Deployment, iam_recorded: Recording) -> None:
    record = load_event("webhook_sqs_fifo_batch.json")["Records"][0]
    session_id = "thread-7"
    assert f'"{session_id}"' in record["body"]
    _expired(deployed, session_id)

    reply = deployed.cold_start("webhook").handler({"Records": [record]}, FakeLambdaContext())

    assert reply == {"batchItemFailures": []}
    assert "long ago" not in _texts(deployed, session_id)
    assert "dynamodb:DeleteItem" in iam_recorded.recorder.actions("webhook")


class _Case(BaseModel):
    case: str


def test_a_wake_turn_opening_a_session_on_an_expired_id_clears_it_with_deleteitem(
        deployed: Deployment, iam_recorded: Recording) -> None:
    """Trusted server code in a turn (here a tool) may open a session, e.g. a follow-up case."""
    event = load_event("wake-timer.json")
    seed_wake_timer(deployed, event)
    _expired(deployed, "case-9")
    wake = deployed.cold_start("wake")

    def open_case(ctx: dormant.ToolContext) -> dict[str, Any]:
        assert wake.app.sessions.append(ctx.args.case, "follow up", id="fu-1").ok
        return {"opened": ctx.args.case}

    tool = wake.app.tool(name="open_case", description="Open a case", schema=_Case,
                         execute=open_case)
    agent = wake.app.agent(name="follower", tools=[tool], model=ScriptedModel([
        {"tool_calls": [{"name": "open_case", "args": {"case": "case-9"}}]}, "Opened."]))

    result = wake.app.handler.wake(agent=agent)(event)

    assert result.landed
    assert _texts(deployed, "case-9") == ["follow up"]
    assert "dynamodb:DeleteItem" in iam_recorded.recorder.actions("wake")


class _Nothing(BaseModel):
    pass


@pytest.mark.parametrize("function", ["api", "webhook", "wake"])
def test_a_refused_commit_deletes_its_offloaded_events(
        deployed: Deployment, iam_recorded: Recording, function: str) -> None:
    module = deployed.cold_start(function)
    other = dormant.App(store=DynamoDBStore(deployed.table, bucket=deployed.bucket))
    assert other.sessions.append("big", "hi", id="m-0").ok

    def fetch_report(ctx: dormant.ToolContext) -> dict[str, Any]:
        assert other.sessions.append("big", "meanwhile", id="m-1").ok  # the turn is overtaken
        return {"report": "x" * 4_200_000}  # too large for a transaction: offloaded

    tool = module.app.tool(name="fetch_report", description="Fetch", schema=_Nothing,
                           execute=fetch_report)
    agent = module.app.agent(name="reporter", tools=[tool], model=ScriptedModel([
        {"tool_calls": [{"name": "fetch_report", "args": {}}]}, "Here it is."]))

    module.app.handler.rest(agent=agent)({"session_id": "big", "input": {"message": "report"}})

    actions = iam_recorded.recorder.actions(function)
    assert {"s3:PutObject", "s3:DeleteObject"} <= actions
    # What the refused commit offloaded is gone; what is left is what the session's items name.
    listed = boto3.client("s3").list_objects_v2(Bucket=deployed.bucket).get("Contents", [])
    items = boto3.client("dynamodb").query(
        TableName=deployed.table, KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": "session_big"}})["Items"]
    named = {key for item in items for key in item.get("s3", {}).get("SS", [])}
    assert {o["Key"] for o in listed} == named


def test_pausing_writes_the_control_record_and_listing_reads_the_owner_index(
        deployed: Deployment, iam_recorded: Recording) -> None:
    api = deployed.cold_start("api")
    first = api_body(api.handler(load_event("api_post_turn.json"), FakeLambdaContext()))
    post = load_event("api_post_turn.json")
    listing = copy.deepcopy(load_event("api_get_session.json"))
    listing.update(path="/sessions", resource="/sessions", pathParameters=None)
    listing["requestContext"].update(path="/v1/sessions", resourcePath="/sessions")

    paused = api.handler(with_body(post, {"sessionId": first["sessionId"], "pause": True}),
                         FakeLambdaContext())
    listed = api.handler(listing, FakeLambdaContext())

    assert paused["statusCode"] == 200, paused["body"]
    assert listed["statusCode"] == 200, listed["body"]
    assert first["sessionId"] in listed["body"]
    calls = {(c.action, "/index/" in c.resource) for c in iam_recorded.recorder.of("api")}
    assert ("dynamodb:ConditionCheckItem", False) in calls
    assert ("dynamodb:Query", True) in calls  # GET /sessions: the owner index


def test_a_running_turn_s_control_poll_is_its_function_s_getitem(
        deployed: Deployment, iam_recorded: Recording) -> None:
    webhook = deployed.cold_start("webhook")

    def slow(ctx: dormant.ToolContext) -> dict[str, Any]:
        time.sleep(0.2)  # the control record is polled meanwhile, on a thread of its own
        return {"slept": True}

    tool = webhook.app.tool(name="slow", description="Slow", schema=_Nothing, execute=slow)
    agent = webhook.app.agent(name="sleeper", tools=[tool], model=ScriptedModel([
        {"tool_calls": [{"name": "slow", "args": {}}]}, "Awake."]))

    reply = webhook.app.handler.rest(agent=agent, poll_interval=0.02)(
        {"session_id": "polled", "input": {"message": "sleep"}})

    assert reply.commit_status == "committed"
    assert "dynamodb:GetItem" in iam_recorded.recorder.actions("webhook")


def test_without_the_new_grants_those_paths_would_be_refused(
        deployed: Deployment, iam_recorded: Recording) -> None:
    """The recorded calls of the expired-id path, checked against the role as it was."""
    _expired(deployed, "thread-7")
    batch = load_event("webhook_sqs_fifo_batch.json")
    deployed.cold_start("webhook").handler(batch, FakeLambdaContext())
    narrowed = copy.deepcopy(template())
    for policy in narrowed["Resources"]["WebhookFunction"]["Properties"]["Policies"]:
        for statement in policy.get("Statement", ()):  # (an !If policy: the secret's)
            if statement["Sid"] == "SessionsTable":
                # (GetItem, the running turn's control read, was granted before as well)
                statement["Action"] = ["dynamodb:Query", "dynamodb:GetItem",
                                       "dynamodb:PutItem"]

    problems = refused(narrowed, iam_recorded.recorder.calls, deployed.names())

    # DeleteItem for the expired id; ConditionCheckItem for the new session's first turn,
    # which names itself in the control record (a write conditional on no head existing)
    assert {c.action for c in problems} == {"dynamodb:DeleteItem", "dynamodb:ConditionCheckItem"}
    assert refused(template(), iam_recorded.recorder.calls, deployed.names()) == []
