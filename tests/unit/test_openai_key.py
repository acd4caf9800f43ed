"""The OpenAI key in Lambda: Secrets Manager or SSM through Powertools parameters (moto)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import boto3
import pytest
from aws_lambda_powertools.utilities import parameters
from moto import mock_aws

from dormant.models import ModelError, ModelRequest, OpenAIModel, TextDelta, UserMessage
from dormant.models.openai import openai_api_key_from_settings
from dormant.settings import Settings
from dormant.tools import Signal
from tests.unit.openai_fake import FakeOpenAI, responses_stream

REGION = "eu-west-1"


@pytest.fixture()
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in {"AWS_DEFAULT_REGION": REGION, "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(name, value)
    parameters.clear_caches()  # Powertools keeps providers (and values) per process
    with mock_aws():
        yield
    parameters.clear_caches()


def _secret(name: str, value: str) -> None:
    boto3.client("secretsmanager", region_name=REGION).create_secret(Name=name,
                                                                     SecretString=value)


def _settings(**env: str) -> Settings:
    return Settings.from_env(env)


def test_no_secret_configured_means_no_key() -> None:
    assert openai_api_key_from_settings(_settings()) is None


@pytest.mark.usefixtures("aws")
def test_the_key_comes_from_a_plain_secret() -> None:
    _secret("prod/openai", "sk-from-secrets-manager")

    key = openai_api_key_from_settings(_settings(DORMANT_OPENAI_SECRET="prod/openai"))

    assert key == "sk-from-secrets-manager"


@pytest.mark.usefixtures("aws")
@pytest.mark.parametrize("value", [
    {"OPENAI_API_KEY": "sk-json", "org": "acme"},
    {"api_key": "sk-json"},
    {"whatever": "sk-json"},
], ids=["OPENAI_API_KEY", "api_key", "only-value"])
def test_the_key_comes_from_a_json_secret(value: dict[str, str]) -> None:
    _secret("prod/openai", json.dumps(value))

    assert openai_api_key_from_settings(
        _settings(DORMANT_OPENAI_SECRET="prod/openai")) == "sk-json"


@pytest.mark.usefixtures("aws")
def test_a_json_secret_without_a_key_field_is_a_clear_error() -> None:
    _secret("prod/openai", json.dumps({"user": "alice", "password": "hunter2"}))

    with pytest.raises(ModelError, match="without a key field") as caught:
        openai_api_key_from_settings(_settings(DORMANT_OPENAI_SECRET="prod/openai"))

    assert "password" in str(caught.value) and "hunter2" not in str(caught.value)
    assert caught.value.code == "auth_failed"


@pytest.mark.usefixtures("aws")
def test_the_key_comes_from_an_ssm_secure_string() -> None:
    boto3.client("ssm", region_name=REGION).put_parameter(
        Name="/bookings/openai-key", Value="sk-from-ssm", Type="SecureString")

    key = openai_api_key_from_settings(
        _settings(DORMANT_OPENAI_PARAMETER="/bookings/openai-key"))

    assert key == "sk-from-ssm"


@pytest.mark.usefixtures("aws")
def test_warm_invocations_reuse_the_cached_key() -> None:
    _secret("prod/openai", "sk-first")
    settings = _settings(DORMANT_OPENAI_SECRET="prod/openai")
    assert openai_api_key_from_settings(settings) == "sk-first"
    boto3.client("secretsmanager", region_name=REGION).delete_secret(
        SecretId="prod/openai", ForceDeleteWithoutRecovery=True)

    assert openai_api_key_from_settings(settings) == "sk-first"


@pytest.mark.usefixtures("aws")
def test_a_missing_secret_is_a_model_error_naming_it() -> None:
    with pytest.raises(ModelError, match="secret prod/missing") as caught:
        openai_api_key_from_settings(_settings(DORMANT_OPENAI_SECRET="prod/missing"))

    assert caught.value.code == "auth_failed"


@pytest.mark.usefixtures("aws")
def test_from_settings_sends_the_secret_as_the_bearer_key() -> None:
    _secret("prod/openai", "sk-lambda")
    fake = FakeOpenAI()
    try:
        fake.script(responses_stream("Hello from Lambda."))
        model = OpenAIModel.from_settings(
            _settings(DORMANT_OPENAI_SECRET="prod/openai", DORMANT_OPENAI_MODEL="gpt-test"),
            base_url=fake.base_url)
        request = ModelRequest(system=[], tools=[], messages=[UserMessage("hi")])

        chunks = list(model.stream(request, signal=Signal()))
    finally:
        fake.close()

    assert model.model == "gpt-test"
    assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == "Hello from Lambda."
    assert fake.requests[0].headers["authorization"] == "Bearer sk-lambda"


@pytest.mark.usefixtures("aws")
def test_from_settings_with_a_missing_secret_fails_the_model_call_clearly() -> None:
    model = OpenAIModel.from_settings(_settings(DORMANT_OPENAI_SECRET="prod/missing"),
                                      base_url="http://127.0.0.1:9/v1")
    request = ModelRequest(system=[], tools=[], messages=[UserMessage("hi")])

    with pytest.raises(ModelError, match="cannot read the OpenAI key from secret prod/missing"):
        list(model.stream(request, signal=Signal()))
