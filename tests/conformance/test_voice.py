"""A voice turn on every store: the transcript is stored as a spoken user message and the
audio is not; a failed transcription writes nothing; a failed speech keeps the turn."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest

import dormant
from dormant.events import UserEvent
from dormant.models import OpenAISpeaker, OpenAITranscriber, ScriptedModel
from dormant.stores import Store
from tests.audio_fake import FakeAudioAPI, audio_seconds, fake_audio_api, spoken_wav

SAID = "Book me a room for Friday."
REPLY = "Booked for Friday."


@pytest.fixture(scope="module")
def wav() -> bytes:
    return spoken_wav("book me a room for friday")


@pytest.fixture
def fake(wav: bytes) -> Iterator[FakeAudioAPI]:
    with fake_audio_api(hears=(wav, SAID)) as api:
        yield api


def _voice(store: Store, fake: FakeAudioAPI) -> Any:
    app = dormant.App(name="voice-stores", store=store)
    agent = app.agent("concierge", model=ScriptedModel([REPLY] * 5))
    return app.handler.voice(
        agent=agent,
        transcriber=OpenAITranscriber(api_key="sk-test", base_url=fake.base_url, max_retries=0),
        speaker=OpenAISpeaker(api_key="sk-test", base_url=fake.base_url, max_retries=0))


def _stored(store: Store, session_id: str) -> Any:
    """The session as another process reads it back from ``store``."""
    return dormant.App(store=store).sessions.get(session_id)


def test_the_user_event_is_marked_spoken_and_holds_no_audio(
        store: Store, fake: FakeAudioAPI, wav: bytes) -> None:
    voice = _voice(store, fake)

    reply = voice({"session_id": "spoken", "input": {"audio": {"data": wav, "format": "wav"}}})

    assert (reply.status, reply.commit_status) == ("completed", "committed")
    assert reply.audio is not None and audio_seconds(base64.b64decode(reply.audio.data)) > 0.3
    session = _stored(store, "spoken")
    [user] = [e for e in session.events if isinstance(e, UserEvent)]
    assert (user.text, user.audio) == (SAID, True)
    stored = json.dumps([e.model_dump(mode="json") for e in session.events])
    assert base64.b64encode(wav[64:256]).decode() not in stored
    assert len(stored) < len(wav) // 20


def test_a_typed_message_is_not_marked_spoken(store: Store, fake: FakeAudioAPI) -> None:
    voice = _voice(store, fake)

    voice({"session_id": "typed", "input": {"message": "hello"}})

    [user] = [e for e in _stored(store, "typed").events if isinstance(e, UserEvent)]
    assert (user.text, user.audio) == ("hello", False)


def test_a_failed_transcription_writes_nothing(store: Store, fake: FakeAudioAPI,
                                               wav: bytes) -> None:
    voice = _voice(store, fake)
    voice({"session_id": "kept", "input": {"message": "first"}})
    fake.fail("transcriptions", 500)

    reply = voice({"session_id": "kept", "input": {"audio": {"data": wav, "format": "wav"}}})
    fresh = voice({"session_id": "never", "input": {"audio": {"data": wav, "format": "wav"}}})

    assert (reply.status, reply.code) == ("error", "model_error")
    assert _stored(store, "kept").version == 1
    assert fresh.status == "completed"  # the fake failed once; this one ran
    assert _stored(store, "never").version == 1


def test_a_failed_speech_keeps_the_committed_turn(store: Store, fake: FakeAudioAPI,
                                                  wav: bytes) -> None:
    voice = _voice(store, fake)
    fake.fail("speech", 500)

    reply = voice({"session_id": "mute", "input": {"audio": {"data": wav, "format": "wav"}}})

    assert reply.commit_status == "committed" and reply.audio is None
    assert reply.audio_error is not None
    session = _stored(store, "mute")
    assert session.version == 1
    assert [e.type for e in session.events] == ["invocation_start", "user", "assistant",
                                                "invocation_end"]


def test_a_spoken_message_that_waits_in_the_inbox_runs_marked_spoken(
        store: Store, fake: FakeAudioAPI, wav: bytes) -> None:
    voice = _voice(store, fake)
    voice({"session_id": "inbox", "input": {"message": "first"}})
    assert voice({"session_id": "inbox", "input": {"pause": True}}).status == "paused"

    queued = voice({"session_id": "inbox", "input": {"audio": {"data": wav, "format": "wav"}}})
    assert queued.status == "queued", queued
    assert voice({"session_id": "inbox", "input": {"resume": True}}).status == "completed"

    users = [e for e in _stored(store, "inbox").events if isinstance(e, UserEvent)]
    assert [(u.text, u.audio, u.queued) for u in users] == [
        ("first", False, False), (SAID, True, True)]
