"""``POST /voice`` on a real ``dormant dev``: a WAV spoken by espeak-ng goes in over HTTP and
comes back as a transcript, a committed turn and audio sox can play. OpenAI (the model, the
transcriptions and the speech API) is a local fake on 127.0.0.1 (tests/audio_fake.py)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import httpx
import pytest

from dormant.stores.sqlite import SqliteStore
from tests.audio_fake import FakeAudioAPI, audio_seconds, audio_type, fake_audio_api, spoken_wav

from .conftest import DevServer, voice_dev_server

SAID = "Book me a room for Friday."
REPLY = "Your room is booked for Friday."


@pytest.fixture(scope="module")
def wav() -> bytes:
    return spoken_wav("book me a room for friday")


@pytest.fixture
def fake(wav: bytes) -> Iterator[FakeAudioAPI]:
    with fake_audio_api(REPLY, hears=(wav, SAID)) as api:
        yield api


@pytest.fixture
def voice_server(tmp_path: Path, fake: FakeAudioAPI) -> Iterator[DevServer]:
    with voice_dev_server(tmp_path / "voice.db", fake.base_url) as server:
        yield server


def _stored_users(server: DevServer, session_id: str) -> list[tuple[str, bool]]:
    store = SqliteStore(str(server.db))
    try:
        import dormant

        session = dormant.App(store=store).sessions.get(session_id)
        assert session is not None
        return [(e.text, e.audio) for e in session.events  # type: ignore[union-attr]
                if e.type == "user"]
    finally:
        store.close()


def test_a_spoken_wav_comes_back_as_a_transcript_a_committed_turn_and_playable_audio(
        voice_server: DevServer, fake: FakeAudioAPI, wav: bytes) -> None:
    reply = httpx.post(f"{voice_server.url}/voice", params={"sessionId": "spoken-1"},
                       content=wav, headers={"Content-Type": "audio/wav"}, timeout=60)

    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert (body["sessionId"], body["status"], body["transcript"]) == (
        "session_spoken-1", "completed", SAID)
    assert body["output"]["text"] == REPLY
    audio = base64.b64decode(body["audio"]["data"])
    assert body["audio"]["format"] == "wav"
    assert audio_type(audio) == "wav" and audio_seconds(audio) > 0.5
    view = httpx.get(f"{voice_server.url}/sessions/spoken-1", timeout=30).json()
    assert (view["status"], view["version"]) == ("active", 1)  # committed
    assert _stored_users(voice_server, "session_spoken-1") == [(SAID, True)]
    assert [r.path for r in fake.requests] == ["/v1/audio/transcriptions", "/v1/responses",
                                               "/v1/audio/speech"]
    assert fake.requests[0].file_bytes == len(wav)  # the WAV arrived whole, byte for byte


def test_accept_audio_answers_the_wav_itself(voice_server: DevServer, wav: bytes) -> None:
    reply = httpx.post(f"{voice_server.url}/voice", params={"sessionId": "spoken-2"},
                       content=wav, headers={"Content-Type": "audio/wav", "Accept": "audio/*"},
                       timeout=60)

    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"] == "audio/wav"
    assert reply.headers["x-dormant-session-id"] == "session_spoken-2"
    assert reply.headers["x-dormant-status"] == "completed"
    assert unquote(reply.headers["x-dormant-transcript"]) == SAID
    assert audio_type(reply.content) == "wav" and audio_seconds(reply.content) > 0.5


def test_the_json_form_runs_the_same_turn(voice_server: DevServer, wav: bytes) -> None:
    reply = httpx.post(f"{voice_server.url}/voice", json={
        "sessionId": "spoken-3", "audio": {"data": base64.b64encode(wav).decode(),
                                           "format": "wav"}}, timeout=60)

    assert reply.status_code == 200, reply.text
    assert reply.json()["transcript"] == SAID
    assert _stored_users(voice_server, "session_spoken-3") == [(SAID, True)]


def test_a_failed_transcription_over_http_writes_nothing(
        voice_server: DevServer, fake: FakeAudioAPI, wav: bytes) -> None:
    fake.fail("transcriptions", 401)

    reply = httpx.post(f"{voice_server.url}/voice", params={"sessionId": "spoken-4"},
                       content=wav, headers={"Content-Type": "audio/wav"}, timeout=60)

    assert reply.status_code == 502 and reply.json()["code"] == "model_error"
    assert httpx.get(f"{voice_server.url}/sessions/spoken-4", timeout=30).status_code == 404
