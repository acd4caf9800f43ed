"""A keyless deploy: ``OpenAISecretName`` left empty. The template then sets
``DORMANT_OPENAI_SECRET`` to the empty string and grants no secret; the functions serve the app's
own default model (the Bookings sample's demo model) and say so when they start."""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Iterator

import pytest

from dormant.aws.deployment import deployed_app
from tests.functions.conftest import Deployment, FakeLambdaContext, api_body, load_event
from tests.functions.iam_policy import function_policy
from tests.functions.test_template import template

FUNCTIONS = ("ApiFunction", "WebhookFunction", "WakeFunction")


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def startup_log() -> Iterator[list[logging.LogRecord]]:
    """What ``dormant.aws`` logs, whatever Powertools did to the logger's propagation."""
    handler = _Records()
    logger = logging.getLogger("dormant.aws")
    logger.addHandler(handler)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)


@pytest.fixture
def keyless(deployed: Deployment, monkeypatch: pytest.MonkeyPatch) -> Deployment:
    monkeypatch.setenv("DORMANT_OPENAI_SECRET", "")  # what !Ref OpenAISecretName gives
    monkeypatch.setenv("DORMANT_OPENAI_MODEL", "gpt-5.6-luna")  # set, and unused
    return deployed


def test_the_deployed_app_serves_the_demo_model_and_logs_it(
        keyless: Deployment, startup_log: list[logging.LogRecord]) -> None:
    _, agent, settings = deployed_app()
    assert settings.openai_secret is None
    # by name: cold starts in other tests import the sample afresh, class and all
    assert type(agent.model).__name__ == "DemoModel"
    assert type(agent.model).__module__ == "dormant.samples.bookings"
    [warning] = [r for r in startup_log if "no model configured" in r.getMessage()]
    assert warning.levelno == logging.WARNING
    assert "DemoModel" in warning.getMessage()
    assert settings.app in warning.getMessage()


def test_a_named_secret_serves_openai_and_logs_no_warning(
        deployed: Deployment, monkeypatch: pytest.MonkeyPatch,
        startup_log: list[logging.LogRecord]) -> None:
    monkeypatch.setenv("DORMANT_OPENAI_SECRET", "dormant/openai-api-key")
    _, agent, _ = deployed_app()  # the key is read on the first model call, not here
    assert type(agent.model).__name__ == "OpenAIModel"
    assert not [r for r in startup_log if "no model configured" in r.getMessage()]


def test_a_keyless_api_function_answers_a_turn_without_any_secret(
        keyless: Deployment, context: FakeLambdaContext,
        startup_log: list[logging.LogRecord]) -> None:
    api = keyless.cold_start("api")  # the autouse IAM recorder checks its calls, too
    # (a cold start imports the sample afresh: its class, by name)
    assert type(api.agent.model).__name__ == "DemoModel"
    assert [r for r in startup_log if "no model configured" in r.getMessage()]
    response = api.handler(load_event("api_post_turn.json"), context)
    assert response["statusCode"] == 200, response["body"]
    assert api_body(response)["status"] == "yielded_tool"  # the demo model asks which night


@pytest.mark.parametrize("function", FUNCTIONS)
def test_the_secret_is_granted_only_when_named(keyless: Deployment, function: str) -> None:
    def secret_actions(name: str) -> list[str]:
        names = dataclasses.replace(keyless.names(), parameters={"OpenAISecretName": name})
        return [s["Action"] for s in function_policy(template(), function, names)
                if "secretsmanager" in str(s["Action"])]

    assert secret_actions("") == []
    assert secret_actions("dormant/openai-api-key") == ["secretsmanager:GetSecretValue"]
    [granted] = [s for s in function_policy(template(), function, dataclasses.replace(
        keyless.names(), parameters={"OpenAISecretName": "team/key"})) if s.get("Sid") ==
        "OpenAIKey"]
    assert granted["Resource"].endswith(":secret:team/key-??????")
    pattern = template()["Parameters"]["OpenAISecretName"]["AllowedPattern"]
    assert re.fullmatch(pattern, "") and re.fullmatch(pattern, "dormant/openai-api-key")
