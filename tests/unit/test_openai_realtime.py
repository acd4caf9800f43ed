"""OpenAIRealtimeModel against a local WebSocket server speaking the Realtime event protocol,
through the real client (``client.realtime.connect``): on its own and served by the handlers."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import threading
import time
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant.errors import ConfigError
from dormant.events import AudioDelta
from dormant.models import (
    AudioChunk,
    ModelError,
    ModelRequest,
    OpenAIRealtimeModel,
    ResponseInfo,
    ScriptedModel,
    TextDelta,
    ToolCallChunk,
    UsageChunk,
    UserMessage,
)
from dormant.stores import MemoryStore, SqliteStore, Store
from dormant.tools import Aborted, Signal
from tests.unit.realtime_fake import (
    Call,
    FakeRealtime,
    Script,
    audio_reply,
    error_event,
    reply,
    transcription,
)

ROOT = Path(__file__).resolve().parents[2]
#: Two pieces of pcm16 "speech" (any bytes do: the model passes them on untouched).
SOUND = [b"\x01\x00\x02\x00" * 8, b"\x03\x00\x04\x00" * 8]


class Stay(BaseModel):
    booking: str


@pytest.fixture()
def fake() -> Iterator[FakeRealtime]:
    server = FakeRealtime()
    yield server
    server.close()
    assert server.unused == 0, "scripted sessions were left unused"


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
    else:
        sqlite = SqliteStore(tmp_path / "realtime.db")
        yield sqlite
        sqlite.close()


def _model(fake: FakeRealtime, **options: Any) -> OpenAIRealtimeModel:
    return OpenAIRealtimeModel("gpt-realtime", base_url=fake.base_url, api_key="test-key",
                               timeout=10, **options)


def _agent(app: dormant.App, model: Any, **options: Any) -> dormant.Agent:
    lookup = app.tool(name="lookup_stay", description="How long a stay is", schema=Stay,
                      execute=lambda ctx: {"booking": ctx.args.booking, "nights": 3})
    return app.agent("concierge", model=model, tools=[lookup],
                     context=[app.context.system("Answer in one sentence."),
                              app.context.history()], **options)


def _types(session: dormant.Session) -> list[str]:
    return [e.type for e in session.events if e.type != "state_delta"]


def _request(text: str = "hi") -> ModelRequest:
    return ModelRequest(system=["Be brief."], tools=[], messages=[UserMessage(text)])


# --- yields by default ------------------------------------------------------------------------


def test_a_realtime_agent_yields_after_each_reply_with_no_yields_given(
        fake: FakeRealtime, store: Store) -> None:
    app = dormant.App(name="realtime", store=store)
    agent = _agent(app, _model(fake))
    rest = app.handler.rest(agent=agent)
    fake.script(reply("Which date?"), reply("Booked for next Tuesday."))

    asked = rest({"session_id": "thread-1", "input": {"message": "I want to book a room"}})
    answered = rest({"session_id": "thread-1", "input": {"message": "Next Tuesday"}})

    assert agent.yields is True
    assert (asked.status, asked.output.text) == ("yielded_message", "Which date?")
    assert (answered.status, answered.output.text) == ("yielded_message",
                                                       "Booked for next Tuesday.")
    session = app.sessions.get("thread-1")
    assert session is not None and session.status == "awaiting_input"
    assert _types(session) == ["invocation_start", "user", "assistant", "invocation_yield",
                               "user", "invocation_resume", "assistant", "invocation_yield"]
    first, second = fake.connections
    assert first.path == "/v1/realtime?model=gpt-realtime"
    assert first.headers["authorization"] == "Bearer test-key"
    assert first.session["instructions"] == "Answer in one sentence."
    assert first.session["output_modalities"] == ["text"]
    assert [t["name"] for t in first.session["tools"]] == ["lookup_stay"]
    assert first.session["audio"]["input"]["turn_detection"] is None
    assert second.items == [  # the whole conversation, from the ledger, on a new connection
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "I want to book a room"}]},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "Which date?"}]},
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "Next Tuesday"}]}]
    assert [e["type"] for e in second.received][-1] == "response.create"


def test_an_explicit_yields_false_wins_over_the_realtime_default(
        fake: FakeRealtime, store: Store) -> None:
    app = dormant.App(name="realtime", store=store)
    agent = _agent(app, _model(fake), yields=False)
    fake.script(reply("Hello."))

    done = app.handler.rest(agent=agent)({"session_id": "t", "input": {"message": "Hi"}})

    assert agent.yields is False
    assert done.status == "completed"
    session = app.sessions.get("t")
    assert session is not None and _types(session)[-1] == "invocation_end"


def test_yields_resolves_from_the_model_and_an_explicit_value_wins() -> None:
    app = dormant.App(name="yields")
    realtime = OpenAIRealtimeModel(api_key="test-key")

    assert app.agent("a", model=ScriptedModel(["x"])).yields is False
    assert app.agent("b").yields is False  # no model at all
    assert app.agent("c", model=realtime).yields is True
    assert app.agent("d", model=realtime, yields=False).yields is False
    assert app.agent("e", model=ScriptedModel(["x"]), yields=True).yields is True
    with pytest.raises(ConfigError, match="yields must be"):
        app.agent("f", model=realtime, yields="yes")  # type: ignore[arg-type]


# --- tools ------------------------------------------------------------------------------------


def test_a_tool_call_round_trip_keeps_the_provider_call_id(fake: FakeRealtime,
                                                           store: Store) -> None:
    app = dormant.App(name="realtime", store=store)
    rest = app.handler.rest(agent=_agent(app, _model(fake)), response={"usage": True})
    fake.script(reply("", [Call("lookup_stay", {"booking": "B-7"}, "call_rt_1")]),
                reply("Your stay is 3 nights.", usage=(30, 8, 16)))

    done = rest({"session_id": "stay", "input": {"message": "How long is B-7?"}})

    assert (done.status, done.output.text) == ("yielded_message", "Your stay is 3 nights.")
    session = app.sessions.get("stay")
    assert session is not None
    [call] = [e for e in session.events if e.type == "tool_call"]
    [result] = [e for e in session.events if e.type == "tool_result"]
    assert (call.call_id, call.name, call.args) == ("call_rt_1", "lookup_stay",
                                                    {"booking": "B-7"})
    assert result.call_id == "call_rt_1" and result.result == {"booking": "B-7", "nights": 3}
    _, second = fake.connections
    assert second.items[1:] == [
        {"type": "function_call", "call_id": "call_rt_1", "name": "lookup_stay",
         "arguments": json.dumps({"booking": "B-7"})},
        {"type": "function_call_output", "call_id": "call_rt_1",
         "output": json.dumps({"booking": "B-7", "nights": 3})}]
    assert done.usage is not None
    assert (done.usage.input_tokens, done.usage.output_tokens,
            done.usage.cached_tokens) == (40, 13, 16)


def test_chunks_of_a_text_reply_with_a_call(fake: FakeRealtime) -> None:
    fake.script(reply("Looking.", [Call("lookup_stay", {"booking": "B-1"}, "call_x")],
                      usage=(9, 4, 2)))

    chunks = list(_model(fake).stream(_request(), signal=Signal()))

    assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == "Looking."
    assert [(c.call_id, c.name, json.loads(c.args)) for c in chunks
            if isinstance(c, ToolCallChunk)] == [("call_x", "lookup_stay", {"booking": "B-1"})]
    [usage] = [c.usage for c in chunks if isinstance(c, UsageChunk)]
    assert (usage.input_tokens, usage.output_tokens, usage.cached_tokens) == (9, 4, 2)
    assert isinstance(chunks[-2], UsageChunk)
    assert chunks[-1] == ResponseInfo(response_id="resp_fake", finish_reason="completed")


# --- audio ------------------------------------------------------------------------------------


def test_audio_deltas_stream_as_audio_delta_events_and_stay_out_of_the_ledger(
        fake: FakeRealtime, store: Store) -> None:
    app = dormant.App(name="realtime", store=store)
    agent = _agent(app, _model(fake, audio=True, voice="marin"))
    fake.script(audio_reply("Your room is ready.", SOUND), audio_reply("Goodbye.", SOUND[:1]))

    stream = app.handler.turn(agent=agent)({"session_id": "voice",
                                             "input": {"message": "Is my room ready?"}})
    events = list(stream)
    body = app.handler.rest(agent=agent, response={"events": True})(
        {"session_id": "voice", "input": {"message": "Thanks"}})

    audio = [e for e in events if e.type == "audio_delta"]
    assert all(isinstance(e, AudioDelta) for e in audio)
    assert [base64.b64decode(e.data) for e in audio] == SOUND
    assert {(e.format, e.rate) for e in audio} == {("pcm16", 24000)}
    [said] = [e for e in events if e.type == "assistant"]
    assert said.text == "Your room is ready."  # the transcript is what the ledger records
    assert {e.message_id for e in audio} == {said.id}
    assert stream.result is not None and stream.result.status == "yielded_message"
    session = app.sessions.get("voice")
    assert session is not None
    assert not any(e.type == "audio_delta" or "audio" in e.type for e in session.events)
    assert [e.text for e in session.events if e.type == "assistant"] == [
        "Your room is ready.", "Goodbye."]
    assert body.events is not None and body.output.text == "Goodbye."
    assert "audio_delta" not in {e["type"] for e in body.events}  # REST keeps its words only
    assert "assistant_delta" in {e["type"] for e in body.events}
    first = fake.connections[0].session
    assert first["output_modalities"] == ["audio"]
    assert first["audio"]["output"] == {"format": {"type": "audio/pcm", "rate": 24000},
                                        "voice": "marin"}


def test_the_model_yields_audio_chunks_and_the_transcript_as_text(fake: FakeRealtime) -> None:
    fake.script(audio_reply("Hello there.", SOUND))

    chunks = list(_model(fake, audio=True).stream(_request(), signal=Signal()))

    assert [c.data for c in chunks if isinstance(c, AudioChunk)] == SOUND
    assert {(c.format, c.rate) for c in chunks if isinstance(c, AudioChunk)} == {
        ("pcm16", 24000)}
    assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == "Hello there."


def test_the_agui_adapter_drops_audio_and_keeps_the_text_message_open() -> None:
    from dormant.agui import AgUIAdapter
    from dormant.events import AssistantDelta

    adapter = AgUIAdapter(thread_id="t", run_id="r")
    out = []
    for event in (AssistantDelta(message_id="m", delta="Hel"),
                  AudioDelta(message_id="m", data=base64.b64encode(b"\x00\x01").decode()),
                  AssistantDelta(message_id="m", delta="lo")):
        out += adapter.transform(event)

    assert [e.type.value for e in out] == ["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT",
                                           "TEXT_MESSAGE_CONTENT"]


# --- transcription ----------------------------------------------------------------------------


def _wav(pcm: bytes, rate: int) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as file:
        file.setnchannels(1)
        file.setsampwidth(2)
        file.setframerate(rate)
        file.writeframes(pcm)
    return out.getvalue()


def test_transcribe_returns_the_servers_transcript(fake: FakeRealtime) -> None:
    fake.script(transcription("Book me a room for Tuesday."))
    pcm = b"\x10\x00\x20\x00" * 600

    text = _model(fake, transcription_model="gpt-4o-mini-transcribe").transcribe(pcm, "pcm16")

    assert text == "Book me a room for Tuesday."
    [sent] = fake.connections
    assert sent.session["audio"]["input"]["transcription"] == {
        "model": "gpt-4o-mini-transcribe"}
    assert sent.session["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
    heard = b"".join(base64.b64decode(e["audio"]) for e in sent.sent("input_audio_buffer.append"))
    assert heard == pcm
    assert [e["type"] for e in sent.received][-1] == "input_audio_buffer.commit"
    assert not sent.sent("response.create")  # transcription only: the model does not answer


def test_transcribe_sends_a_wav_file_as_24_khz_mono_pcm16(fake: FakeRealtime) -> None:
    fake.script(transcription("Hello."))
    samples = b"".join(int(v).to_bytes(2, "little", signed=True)
                       for v in range(-800, 800, 4))  # 400 samples at 8 kHz

    assert _model(fake).transcribe(_wav(samples, 8000), "wav") == "Hello."

    heard = b"".join(base64.b64decode(e["audio"])
                     for e in fake.connections[0].sent("input_audio_buffer.append"))
    assert len(heard) == 2 * 1200  # three times the samples
    assert heard[:2] == samples[:2] and heard[-2:] == samples[-2:]


def test_transcribe_refuses_audio_the_realtime_api_cannot_take(fake: FakeRealtime) -> None:
    with pytest.raises(ModelError) as refused:
        _model(fake).transcribe(b"ID3\x04fake-mp3", "mp3")

    assert refused.value.code == "unsupported_audio_format" and not refused.value.retryable
    assert "OpenAITranscriber" in str(refused.value)
    assert fake.connections == []  # refused before connecting


def test_a_failed_transcription_is_a_model_error(fake: FakeRealtime) -> None:
    fake.script(Script([error_event("Audio buffer too small",
                                    code="input_audio_buffer_commit_empty")]))

    with pytest.raises(ModelError, match="Audio buffer too small") as failed:
        _model(fake).transcribe(b"\x00\x00", "pcm16")

    assert (failed.value.code, failed.value.retryable) == ("invalid_request", False)
    assert "input_audio_buffer_commit_empty" in str(failed.value)


# --- failures and stops -----------------------------------------------------------------------


@pytest.mark.parametrize(("code", "kind", "expected", "retryable"), [
    ("rate_limit_exceeded", "invalid_request_error", "rate_limited", True),
    (None, "server_error", "server_error", True),
    ("invalid_value", "invalid_request_error", "invalid_request", False),
])
def test_an_error_event_becomes_a_model_error(fake: FakeRealtime, code: str | None, kind: str,
                                              expected: str, retryable: bool) -> None:
    fake.script(Script([error_event("Something went wrong.", code=code, kind=kind)]))

    with pytest.raises(ModelError, match="Something went wrong") as failed:
        list(_model(fake).stream(_request(), signal=Signal()))

    assert (failed.value.code, failed.value.retryable) == (expected, retryable)


def test_an_error_event_fails_the_turn_and_commits_nothing(fake: FakeRealtime,
                                                           store: Store) -> None:
    app = dormant.App(name="realtime", store=store)
    rest = app.handler.rest(agent=_agent(app, _model(fake)))
    fake.script(Script([error_event("Invalid 'session.tools'.", code="invalid_value")]))

    failed = rest({"session_id": "broken", "input": {"message": "Hi"}})

    assert failed.status == "error" and failed.commit_status is None
    assert failed.error is not None and "Invalid 'session.tools'" in failed.error
    assert app.sessions.get("broken") is None


def test_an_unreachable_server_is_a_retryable_connection_error() -> None:
    model = OpenAIRealtimeModel("gpt-realtime", base_url="http://127.0.0.1:1/v1",
                                api_key="test-key", max_retries=0, timeout=5)

    with pytest.raises(ModelError) as failed:
        list(model.stream(_request(), signal=Signal()))

    assert failed.value.code == "connection_error" and failed.value.retryable


@pytest.mark.parametrize(("status", "code", "retryable"), [
    (401, "auth_failed", False), (429, "rate_limited", True), (503, "server_error", True)])
def test_a_refused_upgrade_is_a_model_error_retried_only_when_it_can_succeed(
        fake: FakeRealtime, status: int, code: str, retryable: bool) -> None:
    fake.script(*[Script(refuse=status) for _ in range(2 if retryable else 1)])

    with pytest.raises(ModelError) as failed:
        list(_model(fake, max_retries=1).stream(_request(), signal=Signal()))

    assert (failed.value.code, failed.value.status, failed.value.retryable) == (
        code, status, retryable)
    assert len(fake.connections) == (2 if retryable else 1)


def test_a_stop_ends_the_response_early_and_cancels_it(fake: FakeRealtime) -> None:
    long = reply("one two three four five six seven eight nine ten")
    long.pause_after = 3  # response.created and two text deltas, then silence
    fake.script(long)
    signal = Signal()
    seen: list[Any] = []

    started = time.monotonic()
    with pytest.raises(Aborted):
        for chunk in _model(fake).stream(_request(), signal=signal):
            seen.append(chunk)
            if len(seen) == 2:
                assert long.paused.wait(5)
                signal.stop()

    assert time.monotonic() - started < 3
    assert "".join(c.text for c in seen) == "one two thre"
    assert long.closed.wait(5)
    assert long.sent("response.cancel")


def test_a_stopped_turn_keeps_what_was_said_and_ends_stopped(fake: FakeRealtime,
                                                             store: Store) -> None:
    app = dormant.App(name="realtime", store=store)
    agent = _agent(app, _model(fake))
    long = reply("one two three four five six seven eight nine ten")
    long.pause_after = 3
    fake.script(long)
    stream = app.handler.turn(agent=agent, poll_interval=0.02)(
        {"session_id": "stop", "input": {"message": "Count"}})
    seen: list[Any] = []
    thread = threading.Thread(target=lambda: [seen.append(e) for e in stream], daemon=True)
    thread.start()
    assert long.paused.wait(5)
    deadline = time.monotonic() + 5
    while sum(e.type == "assistant_delta" for e in list(seen)) < 2:  # the client saw them
        assert time.monotonic() < deadline, "the deltas did not arrive"
        time.sleep(0.01)
    invocation = stream.invocation_id

    stop = app.handler.rest(agent=agent)({"session_id": "stop", "input": {
        "stop": {"invocation_id": invocation}}})
    thread.join(5)

    assert stop.status == "accepted" and not thread.is_alive()
    assert stream.result is not None and stream.result.status == "stopped"
    session = app.sessions.get("stop")
    assert session is not None
    assert [e.text for e in session.events if e.type == "assistant"] == ["one two thre"]
    assert _types(session)[-1] == "invocation_end"
    assert long.closed.wait(5) and long.sent("response.cancel")


# --- cold start -------------------------------------------------------------------------------


def test_building_a_realtime_model_imports_neither_openai_nor_websockets() -> None:
    code = ("import sys\nimport dormant\nfrom dormant.models import OpenAIRealtimeModel\n"
            "model = OpenAIRealtimeModel('gpt-realtime', api_key='test-key')\n"
            "app = dormant.App(name='cold')\nagent = app.agent('a', model=model)\n"
            "print(agent.yields, 'openai' in sys.modules, 'websockets' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=60, check=True)

    assert run.stdout.split() == ["True", "False", "False"]


def test_a_key_function_is_asked_for_the_key_when_connecting(fake: FakeRealtime) -> None:
    asked: list[str] = []

    def key() -> str:
        asked.append("key")
        return "sk-from-secret"

    fake.script(reply("Hi."))
    model = OpenAIRealtimeModel("gpt-realtime", base_url=fake.base_url, api_key=key)

    assert list(model.stream(_request(), signal=Signal()))
    assert asked and fake.connections[0].headers["authorization"] == "Bearer sk-from-secret"
