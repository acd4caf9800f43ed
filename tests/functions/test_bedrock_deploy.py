"""A deploy on Amazon Bedrock: ``BedrockModelId`` set. The functions then serve
``BedrockModel`` through their own role (no key, no secret), and only then does that role get
``bedrock:InvokeModelWithResponseStream``, on that model alone.

The turns here reach a local server speaking Bedrock Runtime's wire format (the
``AWS_ENDPOINT_URL_BEDROCK_RUNTIME`` variable points boto3 at it); the autouse IAM recorder
checks each ``ConverseStream`` call against the function's role as the template resolves it
for this deployment's parameters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from dormant.aws.deployment import deployed_app
from tests.bedrock_fake import MODEL, FakeBedrock, converse_stream
from tests.functions.conftest import (
    Deployment,
    FakeLambdaContext,
    Recording,
    api_body,
    load_event,
    with_body,
)
from tests.functions.iam_policy import function_policy
from tests.functions.test_template import template

#: The functions that run turns, so call the model.
TURN_FUNCTIONS = ("ApiFunction", "StreamFunction", "WebhookFunction", "WakeFunction")
PROFILE = f"us.{MODEL}"


@pytest.fixture
def bedrock() -> Iterator[FakeBedrock]:
    server = FakeBedrock()
    yield server
    server.close()
    assert server.unused == 0, "scripted replies were left unused"


def _on_bedrock(deployed: Deployment, monkeypatch: pytest.MonkeyPatch, bedrock: FakeBedrock,
                model: str) -> Deployment:
    monkeypatch.setenv("DORMANT_BEDROCK_MODEL", model)  # what !Ref BedrockModelId gives
    monkeypatch.setenv("DORMANT_OPENAI_SECRET", "")
    monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", bedrock.url)
    deployed.parameters = {"BedrockModelId": model, "OpenAISecretName": ""}
    return deployed


@pytest.mark.parametrize("model", [MODEL, PROFILE], ids=["model id", "inference profile"])
def test_the_api_function_answers_on_bedrock_within_its_role(
        deployed: Deployment, monkeypatch: pytest.MonkeyPatch, bedrock: FakeBedrock,
        context: FakeLambdaContext, iam_recorded: Recording, model: str) -> None:
    _on_bedrock(deployed, monkeypatch, bedrock, model)
    api = deployed.cold_start("api")
    assert type(api.agent.model).__name__ == "BedrockModel"
    assert api.agent.model._client is None  # made on the first model call, not at init
    bedrock.script(converse_stream("Which night would you like?"))

    response = api.handler(with_body(load_event("api_post_turn.json"),
                                     {"message": "Book me a room"}), context)

    assert response["statusCode"] == 200, response["body"]
    body = api_body(response)
    assert (body["status"], body["output"]["text"]) == ("completed",
                                                        "Which night would you like?")
    [call] = bedrock.requests
    assert call.model_id == model
    assert "bedrock:InvokeModelWithResponseStream" in iam_recorded.recorder.actions("api")


def test_a_bedrock_deploy_reads_no_secret_and_logs_no_warning(
        deployed: Deployment, monkeypatch: pytest.MonkeyPatch, bedrock: FakeBedrock) -> None:
    _on_bedrock(deployed, monkeypatch, bedrock, MODEL)

    _, agent, settings = deployed_app()

    assert type(agent.model).__name__ == "BedrockModel"
    assert agent.model.model_id == MODEL  # type: ignore[attr-defined]
    assert settings.openai_secret is None


@pytest.mark.parametrize("function", TURN_FUNCTIONS)
def test_bedrock_is_granted_only_when_a_model_is_named(deployed: Deployment,
                                                      function: str) -> None:
    def bedrock_statements(model: str) -> list[dict[str, object]]:
        names = dataclasses.replace(deployed.names(), parameters={"BedrockModelId": model})
        return [s for s in function_policy(template(), function, names)
                if "bedrock" in str(s["Action"])]

    assert bedrock_statements("") == []
    granted, routed = bedrock_statements(PROFILE)
    assert granted["Resource"] == [
        f"arn:aws:bedrock:us-east-1::foundation-model/{PROFILE}",
        f"arn:aws:bedrock:us-east-1:123456789012:inference-profile/{PROFILE}"]
    assert routed["Resource"] == "arn:aws:bedrock:*::foundation-model/*"
    assert routed["Condition"] == {"StringEquals": {
        "bedrock:InferenceProfileArn":
            f"arn:aws:bedrock:us-east-1:123456789012:inference-profile/{PROFILE}"}}
