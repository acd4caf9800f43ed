"""``POST /voice`` through the ``api`` function: API Gateway hands the raw audio over
base64-encoded (``isBase64Encoded``, the API's ``BinaryMediaTypes``), as in
events/api_post_voice.json. OpenAI is a local fake (tests/audio_fake.py), on in-process moto."""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterator

import pytest

from tests.audio_fake import FakeAudioAPI, audio_seconds, audio_type, fake_audio_api
from tests.functions.conftest import (
    Deployment,
    FakeLambdaContext,
    api_body,
    as_principal,
    load_event,
)

SESSION = "session_thread-42"
SAID = "Book me in for Friday."
REPLY = "Booked for Friday."


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAudioAPI]:
    sample = base64.b64decode(load_event("api_post_voice.json")["body"])
    with fake_audio_api(REPLY, hears=(sample, SAID)) as api:
        # the sample serves OpenAIModel once a key is set; the fake is the API it reaches
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")
        monkeypatch.setenv("OPENAI_BASE_URL", api.base_url)
        yield api


def test_a_base64_audio_body_runs_a_spoken_turn(
        deployed: Deployment, fake: FakeAudioAPI, context: FakeLambdaContext) -> None:
    api = deployed.cold_start("api")

    out = api.handler(load_event("api_post_voice.json"), context)

    assert out["statusCode"] == 200, out["body"]
    body = api_body(out)
    assert (body["sessionId"], body["status"], body["transcript"]) == (SESSION, "completed",
                                                                       SAID)
    assert body["output"]["text"] == REPLY
    audio = base64.b64decode(body["audio"]["data"])
    assert audio_type(audio) == "wav" and audio_seconds(audio) > 0.3
    session = deployed.session(SESSION)
    assert session.owner == "7d9c2a5e-4f1b-4c3a-9e8d-1a2b3c4d5e6f"  # the Cognito user
    [user] = [e for e in session.events if e.type == "user"]
    assert (user.text, user.audio) == (SAID, True)
    assert [r.path for r in fake.requests] == ["/v1/audio/transcriptions", "/v1/responses",
                                               "/v1/audio/speech"]


def test_accept_audio_answers_base64_audio_for_api_gateway_to_decode(
        deployed: Deployment, fake: FakeAudioAPI, context: FakeLambdaContext) -> None:
    api = deployed.cold_start("api")
    event = copy.deepcopy(load_event("api_post_voice.json"))
    event["headers"]["Accept"] = "audio/*"
    event["multiValueHeaders"]["Accept"] = ["audio/*"]

    out = api.handler(event, context)

    assert out["statusCode"] == 200
    assert out["isBase64Encoded"] is True
    headers = {k.lower(): v[0] for k, v in out["multiValueHeaders"].items()}
    assert headers["content-type"] == "audio/wav"
    assert headers["x-dormant-session-id"] == SESSION
    audio = base64.b64decode(out["body"])
    assert audio_type(audio) == "wav" and audio_seconds(audio) > 0.3


def test_a_stranger_cannot_speak_into_someone_elses_session(
        deployed: Deployment, fake: FakeAudioAPI, context: FakeLambdaContext) -> None:
    api = deployed.cold_start("api")
    assert api.handler(load_event("api_post_voice.json"), context)["statusCode"] == 200

    out = api.handler(as_principal(load_event("api_post_voice.json"), "someone-else"),
                      FakeLambdaContext())

    assert out["statusCode"] == 404
    assert deployed.session(SESSION).version == 1
