"""``app.handler.voice`` and ``POST /voice``: real audio (espeak-ng) through OpenAI's audio
wire format (a local fake of it, tests/audio_fake.py), checked with sox."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

import pytest
from pydantic import ValidationError

import dormant
from dormant._inputs import AudioInput
from dormant.http import build_resolver
from dormant.models import (
    AudioChunk,
    ModelChunk,
    ModelError,
    ModelRequest,
    OpenAISpeaker,
    OpenAITranscriber,
    ScriptedModel,
    Speaker,
    TextDelta,
    Transcriber,
)
from dormant.tools import Signal
from tests.audio_fake import FakeAudioAPI, audio_seconds, audio_type, fake_audio_api, spoken_wav

SAID = "Book me a room for Friday."
REPLY = "Booked for Friday."


@pytest.fixture(scope="module")
def wav() -> bytes:
    return spoken_wav("book me a room for friday")


@pytest.fixture
def fake(wav: bytes) -> Iterator[FakeAudioAPI]:
    with fake_audio_api(hears=(wav, SAID)) as api:
        yield api


def _voice(fake: FakeAudioAPI, replies: list[Any] | None = None, **config: Any
           ) -> tuple[dormant.App, Any]:
    app = dormant.App(name="voice-test")
    agent = app.agent("concierge", model=ScriptedModel(replies or [REPLY] * 5))
    handler = app.handler.voice(
        agent=agent, **{"transcriber": _transcriber(fake), "speaker": _speaker(fake), **config})
    return app, handler


def _transcriber(fake: FakeAudioAPI) -> OpenAITranscriber:
    return OpenAITranscriber(api_key="sk-test", base_url=fake.base_url, max_retries=0)


def _speaker(fake: FakeAudioAPI) -> OpenAISpeaker:
    return OpenAISpeaker(api_key="sk-test", base_url=fake.base_url, max_retries=0)


def _spoken(session_id: str, wav: bytes, **input: Any) -> dict[str, Any]:
    return {"session_id": session_id, "input": {"audio": {"data": wav, "format": "wav"},
                                                **input}}


# --- the handler ------------------------------------------------------------------------------


def test_audio_becomes_the_turns_message_and_the_reply_is_spoken(
        fake: FakeAudioAPI, wav: bytes) -> None:
    app, voice = _voice(fake)

    reply = voice(_spoken("v-1", wav))

    assert (reply.status, reply.commit_status, reply.transcript) == ("completed", "committed",
                                                                     SAID)
    assert reply.output.text == REPLY
    assert reply.audio is not None and reply.audio.format == "wav"
    spoken = base64.b64decode(reply.audio.data)
    assert audio_type(spoken) == "wav" and audio_seconds(spoken) > 0.3
    session = app.sessions.get("v-1")
    assert session is not None
    assert [(e.type, getattr(e, "text", None)) for e in session.events] == [
        ("invocation_start", None), ("user", SAID), ("assistant", REPLY),
        ("invocation_end", None)]
    assert session.events[1].audio is True  # type: ignore[union-attr]
    # what went over the wire: the WAV as a file, then the reply's text to speak
    transcribed, said = fake.requests
    assert (transcribed.path, transcribed.file_name, transcribed.file_type) == (
        "/v1/audio/transcriptions", "audio.wav", "audio/wav")
    assert transcribed.file_bytes == len(wav)
    assert transcribed.fields["model"] == "gpt-4o-mini-transcribe"
    assert said.body["input"] == REPLY and said.body["response_format"] == "wav"


def test_base64_text_is_audio_too_and_a_text_message_is_still_a_turn(
        fake: FakeAudioAPI, wav: bytes) -> None:
    app, voice = _voice(fake)

    heard = voice(_spoken("v-2", base64.b64encode(wav).decode()))
    typed = voice({"session_id": "v-2", "input": {"message": "And Saturday?"}})

    assert heard.transcript == SAID and heard.status == "completed"
    assert typed.transcript is None and typed.status == "completed"
    assert typed.audio is not None  # the reply is spoken either way
    session = app.sessions.get("v-2")
    assert session is not None
    users = [e for e in session.events if e.type == "user"]
    assert [(u.text, u.audio) for u in users] == [  # type: ignore[union-attr]
        (SAID, True), ("And Saturday?", False)]


def test_a_failed_transcription_is_a_model_error_and_writes_nothing(
        fake: FakeAudioAPI, wav: bytes) -> None:
    app, voice = _voice(fake)
    fake.fail("transcriptions", 503)

    reply = voice(_spoken("v-3", wav))

    assert (reply.status, reply.code, reply.retryable) == ("error", "model_error", True)
    assert "transcription failed" in (reply.error or "")
    assert reply.commit_status is None and reply.audio is None
    assert app.sessions.get("v-3") is None
    assert fake.paths() == ["/v1/audio/transcriptions"]  # no turn ran, nothing was spoken


def test_a_failed_speech_keeps_the_committed_turn_and_says_so(
        fake: FakeAudioAPI, wav: bytes) -> None:
    app, voice = _voice(fake)
    fake.fail("speech", 500)

    reply = voice(_spoken("v-4", wav))

    assert (reply.status, reply.commit_status, reply.transcript) == ("completed", "committed",
                                                                     SAID)
    assert reply.audio is None and reply.audio_code == "server_error"
    assert "speech call" in (reply.audio_error or "")
    session = app.sessions.get("v-4")
    assert session is not None and session.version == 1
    assert [e.type for e in session.events][-2:] == ["assistant", "invocation_end"]


def test_audio_that_holds_no_words_is_refused_and_writes_nothing(wav: bytes) -> None:
    class Silence:
        def transcribe(self, audio: bytes, format: str) -> str:
            return "  "

    app = dormant.App()
    voice = app.handler.voice(agent=app.agent("a", model=ScriptedModel([])),
                              transcriber=Silence(), speaker=None)

    reply = voice(_spoken("v-5", wav))

    assert (reply.status, reply.code) == ("error", "no_speech")
    assert app.sessions.get("v-5") is None


def test_audio_and_a_message_together_are_refused(fake: FakeAudioAPI, wav: bytes) -> None:
    app, voice = _voice(fake)

    reply = voice(_spoken("v-6", wav, message="hello"))

    assert (reply.status, reply.code) == ("error", "invalid_input")
    assert fake.requests == [] and app.sessions.get("v-6") is None


def test_the_other_handlers_refuse_audio(wav: bytes) -> None:
    app = dormant.App()
    rest = app.handler.rest(agent=app.agent("a", model=ScriptedModel(["hi"])))

    reply = rest(_spoken("v-7", wav))

    assert (reply.status, reply.code) == ("error", "invalid_input")
    assert "app.handler.voice" in (reply.error or "")
    assert app.sessions.get("v-7") is None


def test_the_audio_is_never_stored(fake: FakeAudioAPI, wav: bytes) -> None:
    app, voice = _voice(fake)
    voice(_spoken("v-8", wav))

    session = app.sessions.get("v-8")
    assert session is not None
    stored = json.dumps([e.model_dump(mode="json") for e in session.events])
    assert base64.b64encode(wav[:300]).decode()[:200] not in stored
    assert len(stored) < len(wav) // 20


def test_transcriber_and_speaker_are_protocols() -> None:
    class Mine:
        def transcribe(self, audio: bytes, format: str) -> str:
            return "x"

        def speak(self, text: str) -> tuple[bytes, str]:
            return b"x", "wav"

    assert isinstance(Mine(), Transcriber) and isinstance(Mine(), Speaker)
    app = dormant.App()
    with pytest.raises(TypeError, match="transcribe"):
        app.handler.voice(agent=app.agent("a", model=ScriptedModel([])), transcriber=object())


def test_openai_errors_are_model_errors(fake: FakeAudioAPI, wav: bytes) -> None:
    fake.fail("transcriptions", 401)
    with pytest.raises(ModelError) as failed:
        _transcriber(fake).transcribe(wav, "wav")
    assert (failed.value.code, failed.value.status, failed.value.retryable) == (
        "auth_failed", 401, False)
    with pytest.raises(ModelError) as unreachable:
        OpenAISpeaker(api_key="sk-test", base_url="http://127.0.0.1:9/v1", max_retries=0,
                      timeout=5).speak("hello")
    assert unreachable.value.code == "connection_error"


# --- a realtime model hears and speaks itself -------------------------------------------------


class _Realtime:
    """A realtime model as the voice handler sees it: ``realtime``, ``transcribe``, and a
    stream (its audio arrives as ``audio_delta`` stream events)."""

    realtime = True

    def __init__(self) -> None:
        self.heard: list[tuple[int, str]] = []

    def transcribe(self, audio: bytes, format: str) -> str:
        self.heard.append((len(audio), format))
        return SAID

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[ModelChunk]:
        yield TextDelta(REPLY)


def test_a_realtime_model_is_its_own_transcriber(wav: bytes) -> None:
    app = dormant.App()
    model = _Realtime()
    spoke: list[str] = []

    class Speaks:
        def speak(self, text: str) -> tuple[bytes, str]:
            spoke.append(text)
            return spoken_wav(text), "wav"

    voice = app.handler.voice(agent=app.agent("rt", model=model, yields=False),
                              speaker=Speaks())
    reply = voice(_spoken("v-9", wav))

    assert model.heard == [(len(wav), "wav")]
    assert reply.transcript == SAID and reply.status == "completed"
    assert spoke == [REPLY]  # its turn streamed no audio: the speaker read the reply


class _Speaking(_Realtime):
    """A realtime model that answers in its own voice: pcm16 audio chunks with the words."""

    def __init__(self, pcm: bytes, rate: int) -> None:
        super().__init__()
        self.pcm, self.rate = pcm, rate

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[ModelChunk]:
        half = len(self.pcm) // 4 * 2
        yield AudioChunk(self.pcm[:half], rate=self.rate)
        yield TextDelta(REPLY)
        yield AudioChunk(self.pcm[half:], rate=self.rate)


def test_a_realtime_turns_audio_is_the_reply_as_wav(wav: bytes) -> None:
    """The ``audio_delta`` events of a realtime turn (pcm16) become one WAV, no speaker."""
    pcm = _pcm16(spoken_wav("booked for friday"))

    class NoSpeaker:
        def speak(self, text: str) -> tuple[bytes, str]:
            raise AssertionError("the realtime model's own audio is the reply")

    app = dormant.App()
    model = _Speaking(pcm, rate=22050)
    voice = app.handler.voice(agent=app.agent("rt", model=model), speaker=NoSpeaker())

    reply = voice(_spoken("v-10", wav))

    assert model.heard == [(len(wav), "wav")] and reply.transcript == SAID
    assert reply.output.text == REPLY
    assert reply.audio is not None and reply.audio.format == "wav"
    data = base64.b64decode(reply.audio.data)
    assert audio_type(data) == "wav"
    assert audio_seconds(data) == pytest.approx(len(pcm) / 2 / 22050, abs=0.01)
    stored = app.sessions.get("v-10")
    assert stored is not None and "audio_delta" not in {e.type for e in stored.events}


def _pcm16(wav_bytes: bytes) -> bytes:
    import io
    import wave

    with wave.open(io.BytesIO(wav_bytes)) as file:
        assert file.getsampwidth() == 2 and file.getnchannels() == 1
        return file.readframes(file.getnframes())


# --- POST /voice, in process ------------------------------------------------------------------


def _event(body: bytes | str | None, content_type: str, *, accept: str | None = None,
           query: dict[str, str] | None = None, principal: str = "alice",
           base64_body: bool = False) -> dict[str, Any]:
    headers = {"Content-Type": content_type, **({"Accept": accept} if accept else {})}
    text = body.decode() if isinstance(body, bytes) else body
    return {
        "resource": "/voice", "path": "/voice", "httpMethod": "POST", "headers": headers,
        "multiValueHeaders": {k: [v] for k, v in headers.items()},
        "queryStringParameters": query, "multiValueQueryStringParameters": None,
        "pathParameters": None, "stageVariables": None, "body": text,
        "isBase64Encoded": base64_body,
        "requestContext": {"resourcePath": "/voice", "httpMethod": "POST", "path": "/voice",
                           "stage": "test", "requestId": "r-1",
                           "authorizer": {"principalId": principal}, "identity": {}},
    }


def _raw(wav: bytes, **options: Any) -> dict[str, Any]:
    return _event(base64.b64encode(wav).decode(), "audio/wav", base64_body=True, **options)


@pytest.fixture
def api(fake: FakeAudioAPI) -> tuple[dormant.App, Any]:
    app = dormant.App(name="voice-http")
    agent = app.agent("concierge", model=ScriptedModel([REPLY] * 10))
    return app, build_resolver(app, agent, transcriber=_transcriber(fake),
                               speaker=_speaker(fake))


def test_post_voice_takes_a_raw_audio_body(api: tuple[dormant.App, Any], wav: bytes) -> None:
    app, resolver = api

    out = resolver.resolve(_raw(wav, query={"sessionId": "h-1"}), None)

    assert out["statusCode"] == 200, out["body"]
    body = json.loads(out["body"])
    assert (body["sessionId"], body["status"], body["transcript"]) == ("session_h-1",
                                                                       "completed", SAID)
    assert body["audio"]["format"] == "wav"
    assert audio_seconds(base64.b64decode(body["audio"]["data"])) > 0.3
    session = app.sessions.get("h-1")
    assert session is not None and session.owner == "alice"


def test_post_voice_takes_the_json_form(api: tuple[dormant.App, Any], wav: bytes) -> None:
    app, resolver = api
    body = {"sessionId": "h-2", "audio": {"data": base64.b64encode(wav).decode(),
                                          "format": "wav"}}

    out = resolver.resolve(_event(json.dumps(body), "application/json"), None)

    assert out["statusCode"] == 200, out["body"]
    assert json.loads(out["body"])["transcript"] == SAID
    users = [e for e in app.sessions.get("h-2").events if e.type == "user"]  # type: ignore[union-attr]
    assert [(u.text, u.audio) for u in users] == [(SAID, True)]  # type: ignore[union-attr]


def test_accept_audio_answers_the_audio_with_the_turn_in_headers(
        api: tuple[dormant.App, Any], wav: bytes) -> None:
    _, resolver = api

    out = resolver.resolve(_raw(wav, query={"sessionId": "h-3"}, accept="audio/*"), None)

    assert out["statusCode"] == 200
    headers = {k: v[0] for k, v in out["multiValueHeaders"].items()}
    assert headers["Content-Type"] == "audio/wav" and out["isBase64Encoded"] is True
    assert headers["X-Dormant-Session-Id"] == "session_h-3"
    assert headers["X-Dormant-Status"] == "completed"
    assert unquote(headers["X-Dormant-Transcript"]) == SAID
    assert unquote(headers["X-Dormant-Reply"]) == REPLY
    audio = base64.b64decode(out["body"])
    assert audio_type(audio) == "wav" and audio_seconds(audio) > 0.3


def test_post_voice_refuses_unknown_and_server_only_fields(
        api: tuple[dormant.App, Any], wav: bytes) -> None:
    app, resolver = api
    audio = {"data": base64.b64encode(wav).decode(), "format": "wav"}

    for extra in ({"initialState": {"vip": True}}, {"principal": "mallory"}, {"spoken": True},
                  {"bogus": 1}):
        out = resolver.resolve(_event(json.dumps({"sessionId": "h-4", "audio": audio, **extra}),
                                      "application/json"), None)
        assert out["statusCode"] == 422, (extra, out["body"])
    bad = resolver.resolve(_event(json.dumps({"audio": {**audio, "format": "aiff"}}),
                                  "application/json"), None)
    assert bad["statusCode"] == 422
    unknown = resolver.resolve(_raw(wav, query={"sessionId": "h-4", "principal": "x"}), None)
    assert unknown["statusCode"] == 400
    other = resolver.resolve(_event(base64.b64encode(wav).decode(), "audio/aiff",
                                    base64_body=True), None)
    assert other["statusCode"] == 400 and "audio/aiff" in json.loads(other["body"])["message"]
    assert app.sessions.get("h-4") is None


def test_another_principals_session_is_not_found(api: tuple[dormant.App, Any],
                                                  wav: bytes) -> None:
    app, resolver = api
    assert resolver.resolve(_raw(wav, query={"sessionId": "h-5"}), None)["statusCode"] == 200

    out = resolver.resolve(_raw(wav, query={"sessionId": "h-5"}, principal="mallory"), None)

    assert out["statusCode"] == 404
    assert app.sessions.get("h-5").version == 1  # type: ignore[union-attr]


def test_a_failed_transcription_is_502_and_a_failed_speech_200_with_audio_error(
        api: tuple[dormant.App, Any], fake: FakeAudioAPI, wav: bytes) -> None:
    app, resolver = api
    fake.fail("transcriptions", 500)

    failed = resolver.resolve(_raw(wav, query={"sessionId": "h-6"}), None)

    assert failed["statusCode"] == 502
    assert json.loads(failed["body"])["code"] == "model_error"
    assert "transcription service failed" not in failed["body"]  # the detail is logged
    assert app.sessions.get("h-6") is None
    fake.fail("speech", 500)

    kept = resolver.resolve(_raw(wav, query={"sessionId": "h-6"}, accept="audio/*"), None)

    assert kept["statusCode"] == 200
    body = json.loads(kept["body"])  # no audio to answer: the JSON says why
    assert body["status"] == "completed" and body["transcript"] == SAID
    assert "audio" not in body and body["audioError"].startswith("the model provider failed")
    assert app.sessions.get("h-6").version == 1  # type: ignore[union-attr]


def test_the_openapi_description_lists_post_voice(api: tuple[dormant.App, Any]) -> None:
    _, resolver = api
    doc = json.loads(resolver.get_openapi_json_schema())
    post = doc["paths"]["/voice"]["post"]
    assert set(post["requestBody"]["content"]) == {"application/json", "audio/*"}
    assert set(post["responses"]["200"]["content"]) == {"application/json", "audio/*"}
    assert {"audio", "sessionId", "message"} <= set(
        doc["components"]["schemas"]["VoiceRequest"]["properties"])
    assert {"transcript", "audio", "audioError"} <= set(
        doc["components"]["schemas"]["VoiceResponse"]["properties"])


@pytest.mark.parametrize(("format", "start"), [
    ("wav", b"RIFF\x24\x00\x00\x00WAVEfmt "), ("mp3", b"ID3\x04\x00"), ("mp3", b"\xff\xfb\x90"),
    ("ogg", b"OggS\x00\x02"), ("webm", b"\x1a\x45\xdf\xa3\x9f"), ("flac", b"fLaC\x00"),
    ("m4a", b"\x00\x00\x00\x20ftypM4A "),
])
def test_audio_is_checked_against_its_format(format: str, start: bytes) -> None:
    assert AudioInput(data=start + b"\x00" * 8, format=format).data.startswith(start)
    others = [f for f in ("wav", "ogg", "webm", "m4a") if f != format]
    with pytest.raises(ValidationError, match=f"not {others[0]} audio"):
        AudioInput(data=start + b"\x00" * 8, format=others[0])


def test_random_bytes_are_refused_before_any_transcriber_hears_them() -> None:
    noise = base64.b64decode("+8D30LZsWxr00AINBJahcGSpcgmhNhn2CQOCM08MlSgvJu==")
    with pytest.raises(ValidationError, match="audio data is not mp3 audio"):
        AudioInput(data=noise, format="mp3")


def test_post_voice_refuses_audio_that_is_not_its_format_and_hears_nothing(
        api: tuple[dormant.App, Any], wav: bytes, fake: FakeAudioAPI) -> None:
    app, resolver = api
    as_mp3 = {"sessionId": "h-5", "audio": {"data": base64.b64encode(wav).decode(),
                                            "format": "mp3"}}

    named = resolver.resolve(_event(json.dumps(as_mp3), "application/json"), None)
    raw = resolver.resolve(_event(base64.b64encode(b"\x00" * 64).decode(), "audio/webm",
                                  base64_body=True, query={"sessionId": "h-5"}), None)

    assert named["statusCode"] == 400, named["body"]
    assert json.loads(named["body"])["message"] == (
        "audio.data: audio data is not mp3 audio: it does not start as mp3 audio does")
    assert raw["statusCode"] == 400 and "not webm audio" in json.loads(raw["body"])["message"]
    assert app.sessions.get("h-5") is None
    assert fake.requests == []  # no transcriber was asked
