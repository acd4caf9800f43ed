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


def test_the_api_function_calls_only_what_its_role_allows(
        deployed: Deployment, context: FakeLambdaContext,
        iam_recorded: Recording) -> None:
    api = deployed.cold_start("api")

    paused = api_body(api.handler(load_event("api_post_turn.json"), context))
    resume = load_event("api_post_turn_resume.json")
    body = api_body(resume)
    body["tools"][0]["callId"] = paused["yieldedTools"][0]["callId"]
    assert api.handler(with_body(resume, body), context)["statusCode"] == 200
    assert api.handler(load_event("api_get_session.json"), context)["statusCode"] == 200
    assert api.handler(load_event("api_post_agui.json"), context)["statusCode"] == 200
    assert api.handler(load_event("api_delete_session.json"), context)["statusCode"] == 200

    assert {"dynamodb:Query", "dynamodb:PutItem", "dynamodb:DeleteItem",
            "dynamodb:BatchWriteItem"} <= iam_recorded.recorder.actions("api")


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


@pytest.mark.parametrize("function", ["api", "webhook", "wake"])
def test_setting_and_cancelling_timers_needs_only_what_each_role_allows(
        deployed: Deployment, function: str, iam_recorded: Recording) -> None:
    """Any function's committed turn may set and cancel timers (the deployment's scheduler)."""
    module = deployed.cold_start(function)

    reply = module.app.handler.rest(agent=_snoozing_agent(module.app))(
        {"session_id": f"snooze-{function}", "input": {"message": "snooze it"}})

    assert reply.commit_status == "committed"
    assert len(deployed.schedules()) == 1
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


# --- hand-on: work a request cannot finish goes to the webhook queue ----------------------------


@pytest.mark.parametrize("function", ["api", "webhook", "wake"])
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
