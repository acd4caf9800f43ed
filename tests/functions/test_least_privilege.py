"""The paths each function's role must cover: the sample events, timers, hand-on.

Every test under tests/functions is recorded (``iam_recorded`` in conftest.py): each AWS call a
function makes is checked against its role in template.yaml, and a call the role does not allow
fails the test (see iam_policy.py). The tests here drive the paths a role is easiest to get
wrong on and say which authorisations they needed, so a path that stops being exercised shows.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant.handlers import HandlerInput, Input, RetryRequest
from dormant.models import ScriptedModel
from tests.functions.conftest import (
    Deployment,
    FakeLambdaContext,
    Recording,
    api_body,
    load_event,
    seed_wake_timer,
    with_body,
)


def _resume_of_a_paused_turn(function: Any, context: FakeLambdaContext) -> dict[str, Any]:
    """The sample turn sent through ``function`` (it yields), and the event answering it."""
    paused = api_body(function.handler(load_event("api_post_turn.json"), context))
    resume = load_event("api_post_turn_resume.json")
    body = api_body(resume)
    body["tools"][0]["callId"] = paused["yieldedTools"][0]["callId"]
    return with_body(resume, body)


def test_the_api_function_calls_only_what_its_role_allows(
        deployed: Deployment, context: FakeLambdaContext,
        iam_recorded: Recording) -> None:
    api = deployed.cold_start("api")

    assert api.handler(_resume_of_a_paused_turn(api, context), context)["statusCode"] == 200
    assert api.handler(load_event("api_get_session.json"), context)["statusCode"] == 200
    assert api.handler(load_event("api_post_agui.json"), context)["statusCode"] == 200
    assert api.handler(load_event("api_delete_session.json"), context)["statusCode"] == 200

    assert {"dynamodb:Query", "dynamodb:PutItem",
            "dynamodb:DeleteItem"} <= iam_recorded.recorder.actions("api")


def test_the_stream_function_calls_only_what_its_role_allows(
        deployed: Deployment, context: FakeLambdaContext,
        iam_recorded: Recording) -> None:
    stream = deployed.cold_start("stream")

    events = _resume_of_a_paused_turn(stream, context)
    events["headers"]["Accept"] = "text/event-stream"
    streamed = stream.handler(events, context)
    assert streamed["statusCode"] == 200 and "event: result" in streamed["body"]
    assert stream.handler(load_event("api_post_agui.json"), context)["statusCode"] == 200

    assert {"dynamodb:Query", "dynamodb:PutItem"} <= iam_recorded.recorder.actions("stream")


def test_the_webhook_function_calls_only_what_its_role_allows(
        deployed: Deployment, context: FakeLambdaContext,
        iam_recorded: Recording) -> None:
    webhook = deployed.cold_start("webhook")

    batch = load_event("webhook_sqs_fifo_batch.json")
    webhook.handler(batch, context)
    webhook.handler(batch, FakeLambdaContext())  # the redelivery

    assert deployed.session("thread-7") is not None
    assert {"dynamodb:Query", "dynamodb:PutItem"} <= iam_recorded.recorder.actions("webhook")


def test_with_the_secret_configured_the_concierge_is_openai_and_cold_start_reads_no_key(
        deployed: Deployment, monkeypatch: pytest.MonkeyPatch, iam_recorded: Recording) -> None:
    monkeypatch.setenv("DORMANT_OPENAI_SECRET", "dormant/openai-api-key")
    monkeypatch.setenv("DORMANT_OPENAI_MODEL", "gpt-test-model")

    api = deployed.cold_start("api")

    model = api.agent.model
    assert (type(model).__name__, model.model) == ("OpenAIModel", "gpt-test-model")
    assert iam_recorded.recorder.of("api") == []  # the key is read on the first model call


class _Snooze(BaseModel):
    minutes: int


def _snooze(ctx: dormant.ToolContext) -> dict[str, Any]:
    session = dormant.handler_context().session
    session.schedule("snooze", delay=ctx.args.minutes * 60, message="Snoozed reminder")
    session.cancel_schedule("stale-nudge")
    return {"snoozed": True}


def _snoozing_agent(app: dormant.App) -> dormant.Agent:
    tool = app.tool(name="snooze", description="Snooze", schema=_Snooze, execute=_snooze)
    return app.agent(name="snoozer", tools=[tool], model=ScriptedModel([
        {"tool_calls": [{"name": "snooze", "args": {"minutes": 10}}]}, "Snoozed."]))


@pytest.mark.parametrize("function", ["api", "stream", "webhook", "wake"])
def test_setting_and_cancelling_timers_needs_only_what_each_role_allows(
        deployed: Deployment, function: str, iam_recorded: Recording) -> None:
    """Any function's committed turn may set and cancel timers (the deployment's scheduler)."""
    module = deployed.cold_start(function)

    reply = module.app.handler.rest(agent=_snoozing_agent(module.app))(
        {"session_id": f"snooze-{function}", "input": {"message": "snooze it"}})

    assert reply.commit_status == "committed"
    # the snooze (the wake-up of the lease the tool step's write-ahead held: cancelled)
    assert sorted(deployed.timers()) == ["snooze"]
    assert {"scheduler:CreateSchedule", "scheduler:DeleteSchedule",
            "iam:PassRole"} <= iam_recorded.recorder.actions(function)


def test_the_wake_function_calls_only_what_its_role_allows(
        deployed: Deployment, context: FakeLambdaContext,
        iam_recorded: Recording) -> None:
    event = load_event("wake-timer.json")
    seed_wake_timer(deployed, event)
    wake = deployed.cold_start("wake")

    assert wake.handler(event, context)["commitStatus"] == "committed"
    assert wake.handler(event, FakeLambdaContext())["code"] == "stale_timer"

    assert {"dynamodb:Query", "dynamodb:PutItem"} <= iam_recorded.recorder.actions("wake")


# --- delete: the api retires the session, the webhook purges what is left --------------------


def test_deleting_and_purging_calls_only_what_each_role_allows(
        deployed: Deployment, context: FakeLambdaContext, iam_recorded: Recording) -> None:
    from dormant.events import AssistantEvent
    from dormant.stores import DynamoDBStore
    from tests.functions.test_purge import SUB, _as_event, _drain, _failures, _keys

    # a long session with an offloaded event, and a fork that keeps what it reads of it
    seeding = dormant.App(store=DynamoDBStore(deployed.table, bucket=deployed.bucket,
                                              offload_above=2_000))
    session = seeding.sessions.create("thread-42", owner=SUB)
    for n in range(120):
        session.input.message(f"turn {n}", id=f"m-{n}")
        session.add_event(AssistantEvent(text="x" * (3_000 if n == 7 else 10)))
        assert seeding.sessions.commit(session).ok
    seeding.sessions.fork("thread-42", new_session_id="thread-43", owner=SUB)
    api = deployed.cold_start("api")
    webhook = deployed.cold_start("webhook")

    for sid in ("thread-42", "thread-43"):
        event = load_event("api_delete_session.json")
        event["path"], event["pathParameters"] = f"/sessions/{sid}", {"id": sid}
        assert api.handler(event, context)["statusCode"] == 200
        assert _failures(webhook.handler(_as_event(deployed.queued()), FakeLambdaContext())) == []
        _drain(deployed, webhook)

    assert _keys(deployed, "session_thread-42") == ["e#v0000000122"]  # the markers alone
    assert _keys(deployed, "session_thread-43") == ["e#v0000000002"]
    assert list(deployed_objects(deployed)) == []
    # DELETE: a fixed few calls and a send; everything else is the webhook's purge
    assert iam_recorded.recorder.actions("api") == {
        "dynamodb:Query", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem",
        "dynamodb:ConditionCheckItem", "sqs:SendMessage"}
    assert {"dynamodb:Query", "dynamodb:BatchWriteItem", "dynamodb:PutItem",
            "dynamodb:DeleteItem", "s3:DeleteObject",
            "sqs:SendMessage"} <= iam_recorded.recorder.actions("webhook")


def deployed_objects(deployed: Deployment) -> list[str]:
    import boto3

    listed = boto3.client("s3").list_objects_v2(Bucket=deployed.bucket)
    return [o["Key"] for o in listed.get("Contents", [])]


# --- hand-on: work a request cannot finish goes to the webhook queue ----------------------------


@pytest.mark.parametrize("function", ["api", "stream", "webhook", "wake"])
def test_handing_on_needs_only_what_each_role_allows(
        deployed: Deployment, function: str, iam_recorded: Recording) -> None:
    module = deployed.cold_start(function)

    module.app.hand_on(HandlerInput(session_id=f"hand-on-{function}", principal="someone"))
    module.app.hand_on(HandlerInput(session_id=f"hand-on-{function}",
                                    input=Input(retry=RetryRequest(retry_id="deadline-1"))))

    assert iam_recorded.recorder.actions(function) == {"sqs:SendMessage"}
    assert len(deployed.queued()) == 2


def test_the_api_handing_on_its_inbox_calls_only_what_its_role_allows(
        deployed: Deployment, context: FakeLambdaContext,
        iam_recorded: Recording) -> None:
    api = deployed.cold_start("api")
    paused = api_body(api.handler(load_event("api_post_turn.json"), context))
    later = {"sessionId": "thread-42", "message": "How long is my stay BK-1042?",
             "messageId": "msg-0002"}
    assert api.handler(with_body(load_event("api_post_turn.json"), later),
                       context)["statusCode"] == 202  # queued
    resume = load_event("api_post_turn_resume.json")
    body = api_body(resume)
    body["tools"][0]["callId"] = paused["yieldedTools"][0]["callId"]

    short = FakeLambdaContext(remaining_ms=14_000)  # too little left to drain it here
    assert api_body(api.handler(with_body(resume, body), short)).get("handedOn") is True

    assert "sqs:SendMessage" in iam_recorded.recorder.actions("api")


def test_the_webhook_running_hand_on_records_calls_only_what_its_role_allows(
        deployed: Deployment, context: FakeLambdaContext,
        iam_recorded: Recording) -> None:
    webhook = deployed.cold_start("webhook")

    event = load_event("webhook_sqs_fifo_hand_on.json")
    webhook.handler(event, context)
    webhook.handler(event, FakeLambdaContext())  # the redelivery

    assert deployed.session("thread-13") is not None
    assert {"dynamodb:Query", "dynamodb:PutItem"} <= iam_recorded.recorder.actions("webhook")
