"""BedrockModel against a local server speaking Bedrock Runtime's ConverseStream wire format
(AWS event-stream frames over chunked HTTP), through the real boto3 client."""

from __future__ import annotations

import functools
import json
import logging
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.eventstream import EventStreamBuffer
from pydantic import BaseModel

import dormant
from dormant.errors import ConfigError
from dormant.events import InvocationEnd, Usage
from dormant.models import (
    AssistantMessage,
    BedrockModel,
    ModelError,
    ModelRequest,
    ReasoningChunk,
    ResponseInfo,
    TextDelta,
    ThoughtDelta,
    ToolCallChunk,
    ToolCallDelta,
    ToolCallPart,
    ToolMessage,
    ToolSpec,
    UsageChunk,
    UserMessage,
    _retry,
)
from dormant.settings import Settings
from dormant.tools import Aborted, Signal
from tests._moto import aws_env
from tests.bedrock_fake import (
    MODEL,
    Call,
    FakeBedrock,
    Reply,
    converse_stream,
    error,
    fake_bedrock,
    frame,
    stream_exception,
)

NOVA = "amazon.nova-pro-v1:0"
LLAMA = "meta.llama3-3-70b-instruct-v1:0"


class Stay(BaseModel):
    ref: str


STAY = ToolSpec("lookup_stay", "Look up a booking", Stay.model_json_schema())
LOOKUP = Call("lookup_stay", {"ref": "BK-1042"}, "tooluse_stay")


@pytest.fixture()
def bedrock() -> Iterator[FakeBedrock]:
    with fake_bedrock() as server:
        yield server


@pytest.fixture(autouse=True)
def _quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries wait milliseconds, not seconds (the rules stay the same)."""
    monkeypatch.setattr(_retry, "BACKOFF", 0.001)


@functools.cache
def _session() -> boto3.session.Session:
    """One boto3 session for the module's clients (it caches botocore's service model)."""
    return boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing",
                                 region_name="us-east-1")


def _client(fake: FakeBedrock | str) -> Any:
    url = fake if isinstance(fake, str) else fake.url
    return _session().client("bedrock-runtime", endpoint_url=url,
                             config=Config(retries={"total_max_attempts": 1, "mode": "standard"}))


def _model(fake: FakeBedrock, model_id: str = MODEL, **options: Any) -> BedrockModel:
    return BedrockModel(model_id, client=_client(fake), **options)


def _request(*messages: Any, tools: tuple[ToolSpec, ...] = (STAY,),
             system: tuple[str, ...] = ("You are a concierge.",)) -> ModelRequest:
    return ModelRequest(system=list(system), tools=list(tools),
                        messages=list(messages) or [UserMessage("hi")])


def _run(model: BedrockModel, request: ModelRequest | None = None,
         signal: Signal | None = None) -> list[Any]:
    return list(model.stream(request or _request(), signal=signal or Signal()))


def _failure(model: BedrockModel, request: ModelRequest | None = None) -> ModelError:
    with pytest.raises(ModelError) as caught:
        _run(model, request)
    return caught.value


def _text(chunks: list[Any]) -> str:
    return "".join(c.text for c in chunks if isinstance(c, TextDelta))


def _calls(chunks: list[Any]) -> list[tuple[str, str, Any]]:
    return [(c.call_id, c.name, json.loads(c.args)) for c in chunks
            if isinstance(c, ToolCallChunk)]


# --- the wire itself --------------------------------------------------------------------------


def test_the_fakes_frames_decode_with_botocores_own_parser() -> None:
    buffer = EventStreamBuffer()
    buffer.add_data(frame({":message-type": "event", ":event-type": "messageStop"},
                          b'{"stopReason": "end_turn"}'))
    buffer.add_data(stream_exception("throttlingException", "Too many requests"))

    messages: list[Any] = list(buffer)
    event, failure = messages

    assert event.headers == {":message-type": "event", ":event-type": "messageStop"}
    assert json.loads(event.payload) == {"stopReason": "end_turn"}
    assert failure.headers[":exception-type"] == "throttlingException"
    assert json.loads(failure.payload) == {"message": "Too many requests"}


# --- replies become chunks --------------------------------------------------------------------


def test_text_streams_as_several_deltas(bedrock: FakeBedrock) -> None:
    bedrock.script(converse_stream("Your stay BK-1042 is three nights."))

    chunks = _run(_model(bedrock))

    deltas = [c.text for c in chunks if isinstance(c, TextDelta)]
    assert len(deltas) > 3 and "".join(deltas) == "Your stay BK-1042 is three nights."
    (sent,) = bedrock.requests
    assert sent.model_id == MODEL
    assert sent.messages == [{"role": "user", "content": [{"text": "hi"}]}]
    assert sent.body["system"][0] == {"text": "You are a concierge."}
    assert sent.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=testing/")


def test_tool_input_streams_as_deltas_and_the_whole_call_comes_after_message_stop(
        bedrock: FakeBedrock) -> None:
    bedrock.script(converse_stream("Let me look.", [LOOKUP]))

    chunks = _run(_model(bedrock))

    fragments = [c for c in chunks if isinstance(c, ToolCallDelta)]
    assert len(fragments) > 2
    assert {(f.call_id, f.name) for f in fragments} == {("tooluse_stay", "lookup_stay")}
    assert "".join(f.args for f in fragments) == json.dumps(LOOKUP.args)
    assert isinstance(chunks[-3], ToolCallChunk) and isinstance(chunks[-2], UsageChunk)
    # Converse names no response: the call's request id stands for it.
    assert chunks[-1] == ResponseInfo(response_id="fake-request-id", finish_reason="tool_use")
    assert _calls(chunks) == [("tooluse_stay", "lookup_stay", {"ref": "BK-1042"})]
    (spec,) = bedrock.requests[0].body["toolConfig"]["tools"][:1]
    assert spec == {"toolSpec": {"name": "lookup_stay", "description": "Look up a booking",
                                 "inputSchema": {"json": Stay.model_json_schema()}}}


def test_reasoning_streams_as_thoughts_and_becomes_one_bedrock_item(
        bedrock: FakeBedrock) -> None:
    bedrock.script(converse_stream("Three nights.", reasoning="The guest asks about a stay.",
                                   signature="sig-abc"))

    chunks = _run(_model(bedrock))

    assert "".join(c.text for c in chunks if isinstance(c, ThoughtDelta)) == \
        "The guest asks about a stay."
    assert [(c.item, c.provider) for c in chunks if isinstance(c, ReasoningChunk)] == [
        ({"type": "bedrock_reasoning",
          "reasoningText": {"text": "The guest asks about a stay.", "signature": "sig-abc"}},
         "bedrock")]


def test_redacted_reasoning_is_kept_as_base64_and_sent_back_as_bytes(
        bedrock: FakeBedrock) -> None:
    bedrock.script(converse_stream("Done.", redacted=b"\x00opaque\xff"),
                   converse_stream("Again."))
    model = _model(bedrock)

    (item,) = [c.item for c in _run(model) if isinstance(c, ReasoningChunk)]
    _run(model, _request(UserMessage("hi"), AssistantMessage("Done.", reasoning=(item,)),
                         UserMessage("and?")))

    assert item == {"type": "bedrock_reasoning", "redactedContent": "AG9wYXF1Zf8="}
    assert bedrock.requests[1].blocks("reasoningContent") == [
        {"redactedContent": "AG9wYXF1Zf8="}]  # a blob: base64 on the wire


def test_usage_counts_cache_reads_as_input_too(bedrock: FakeBedrock) -> None:
    bedrock.script(converse_stream("Hello.", usage=(30, 7, 1200)))

    (usage,) = [c.usage for c in _run(_model(bedrock)) if isinstance(c, UsageChunk)]

    assert usage == Usage(input_tokens=1230, output_tokens=7, cached_tokens=1200)


# --- what is sent -----------------------------------------------------------------------------


def test_the_conversation_alternates_roles_with_tool_results_in_user_messages(
        bedrock: FakeBedrock) -> None:
    bedrock.script(converse_stream("Three nights, as noted."))
    history = _request(
        UserMessage("How long is BK-1042?"),
        UserMessage("The guest is a member.", role="system"),
        AssistantMessage("Looking.", tool_calls=(
            ToolCallPart("tu_1", "lookup_stay", {"ref": "BK-1042"}),
            ToolCallPart("tu_2", "lookup_stay", '{"ref": "BK-7"}'))),
        ToolMessage("tu_1", "lookup_stay", '{"nights": 3}'),
        ToolMessage("tu_2", "lookup_stay", "[1, 2]"),
        UserMessage("Thanks"))

    _run(_model(bedrock), history)

    assert bedrock.requests[0].messages == [
        {"role": "user", "content": [{"text": "How long is BK-1042?"},
                                     {"text": "[system note] The guest is a member."}]},
        {"role": "assistant", "content": [
            {"text": "Looking."},
            {"toolUse": {"toolUseId": "tu_1", "name": "lookup_stay", "input": {"ref": "BK-1042"}}},
            {"toolUse": {"toolUseId": "tu_2", "name": "lookup_stay", "input": {"ref": "BK-7"}}}]},
        {"role": "user", "content": [
            {"toolResult": {"toolUseId": "tu_1", "content": [{"json": {"nights": 3}}],
                            "status": "success"}},
            {"toolResult": {"toolUseId": "tu_2", "content": [{"text": "[1, 2]"}],
                            "status": "success"}},
            {"text": "Thanks"}]},
    ]


def test_calls_in_the_history_of_a_request_without_tools_are_told_as_text(
        bedrock: FakeBedrock) -> None:
    bedrock.script(converse_stream("It was three nights."))
    history = _request(
        UserMessage("How long is BK-1042?"),
        AssistantMessage("", tool_calls=(ToolCallPart("tu_1", "lookup_stay",
                                                      {"ref": "BK-1042"}),)),
        ToolMessage("tu_1", "lookup_stay", '{"nights": 3}'),
        AssistantMessage("Three nights."), UserMessage("Remind me?"), tools=())

    assert _text(_run(_model(bedrock), history)) == "It was three nights."

    sent = bedrock.requests[0].body
    assert "toolConfig" not in sent
    assert sent["messages"][1:3] == [
        {"role": "assistant", "content": [
            {"text": '[called lookup_stay (tu_1) with {"ref": "BK-1042"}]'}]},
        {"role": "user", "content": [{"text": '[tu_1 returned: {"nights": 3}]'}]}]


def test_a_history_starting_with_the_assistant_gets_a_user_turn_first(
        bedrock: FakeBedrock) -> None:
    bedrock.script(converse_stream("Sure."))

    _run(_model(bedrock), _request(AssistantMessage("Welcome back."), UserMessage("Hi")))

    assert [m["role"] for m in bedrock.requests[0].messages] == ["user", "assistant", "user"]


def test_openai_reasoning_items_are_not_sent_to_bedrock(bedrock: FakeBedrock) -> None:
    bedrock.script(converse_stream("Hello."))
    mixed = (
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
        {"type": "bedrock_reasoning", "reasoningText": {"text": "hm", "signature": "s1"}},
    )

    _run(_model(bedrock), _request(UserMessage("hi"), AssistantMessage("Hi!", reasoning=mixed),
                                   UserMessage("again")))

    assert bedrock.requests[0].messages[1]["content"] == [
        {"reasoningContent": {"reasoningText": {"text": "hm", "signature": "s1"}}},
        {"text": "Hi!"}]


@pytest.mark.parametrize(("model_id", "cache", "system", "tools"), [
    (MODEL, None, True, True),
    ("us.anthropic.claude-3-7-sonnet-20250219-v1:0", None, True, True),
    ("anthropic.claude-3-haiku-20240307-v1:0", None, False, False),
    (NOVA, None, True, False),
    (LLAMA, None, False, False),
    (MODEL, False, False, False),
    (LLAMA, True, True, True),
], ids=["claude", "claude-profile", "old-claude", "nova", "llama", "off", "forced"])
def test_cache_points_follow_the_system_prompt_and_tools_where_the_model_takes_them(
        bedrock: FakeBedrock, model_id: str, cache: bool | None, system: bool,
        tools: bool) -> None:
    bedrock.script(converse_stream("Hello."))

    _run(_model(bedrock, model_id, cache=cache))

    body = bedrock.requests[0].body
    point = {"cachePoint": {"type": "default"}}
    assert (body["system"][-1] == point) is system and len(body["system"]) == 1 + system
    assert (body["toolConfig"]["tools"][-1] == point) is tools


def test_inference_config_additional_fields_and_request_settings_are_sent(
        bedrock: FakeBedrock) -> None:
    bedrock.script(converse_stream("Hello."))
    model = _model(bedrock, inference_config={"maxTokens": 512, "temperature": 0.2},
                   additional_fields={"thinking": {"type": "enabled", "budget_tokens": 1024}})
    request = ModelRequest(system=[], tools=[], messages=[UserMessage("hi")],
                           settings={"performanceConfig": {"latency": "optimized"}})

    _run(model, request)

    body = bedrock.requests[0].body
    assert body["inferenceConfig"] == {"maxTokens": 512, "temperature": 0.2}
    assert body["additionalModelRequestFields"] == {
        "thinking": {"type": "enabled", "budget_tokens": 1024}}
    assert body["performanceConfig"] == {"latency": "optimized"}
    assert "system" not in body and "toolConfig" not in body


def test_a_tool_name_bedrock_cannot_take_is_refused_before_any_request(
        bedrock: FakeBedrock) -> None:
    spec = ToolSpec("lookup.stay", "Look up", Stay.model_json_schema())

    failure = _failure(_model(bedrock), _request(tools=(spec,)))

    assert (failure.code, failure.retryable) == ("invalid_request", False)
    assert "'lookup.stay'" in str(failure)
    assert bedrock.requests == []


# --- stop reasons -----------------------------------------------------------------------------


def test_max_tokens_keeps_the_text_so_far_and_logs_it(
        bedrock: FakeBedrock, caplog: pytest.LogCaptureFixture) -> None:
    bedrock.script(converse_stream("The story begins", stop="max_tokens"))

    with caplog.at_level(logging.WARNING, logger="dormant"):
        chunks = _run(_model(bedrock))

    assert _text(chunks) == "The story begins"
    assert "stopReason max_tokens" in caplog.text and MODEL in caplog.text


def test_a_guardrail_keeps_its_message_and_drops_the_tool_calls(
        bedrock: FakeBedrock, caplog: pytest.LogCaptureFixture) -> None:
    bedrock.script(converse_stream("Sorry, I can't help with that.", [LOOKUP],
                                   stop="guardrail_intervened"))

    with caplog.at_level(logging.WARNING, logger="dormant"):
        chunks = _run(_model(bedrock))

    assert _text(chunks) == "Sorry, I can't help with that." and _calls(chunks) == []
    assert "guardrail_intervened" in caplog.text


def test_a_malformed_tool_use_fails_the_step_as_retryable(bedrock: FakeBedrock) -> None:
    bedrock.script(converse_stream("", [LOOKUP], stop="malformed_tool_use"))

    failure = _failure(_model(bedrock))

    assert (failure.code, failure.retryable) == ("model_error", True)
    assert "malformed_tool_use" in str(failure)


# --- failures and retries ---------------------------------------------------------------------


def test_throttling_is_retried_then_succeeds(bedrock: FakeBedrock) -> None:
    bedrock.script(error("ThrottlingException", "Too many requests", 429),
                   error("ThrottlingException", "Too many requests", 429),
                   converse_stream("Hello."))

    assert _text(_run(_model(bedrock))) == "Hello."
    assert len(bedrock.requests) == 3


def test_throttling_fails_for_good_after_max_retries_as_rate_limited(
        bedrock: FakeBedrock) -> None:
    bedrock.script(*[error("ThrottlingException", "Too many requests", 429)] * 3)

    failure = _failure(_model(bedrock, max_retries=2))

    assert (failure.code, failure.status, failure.retryable) == ("rate_limited", 429, True)
    assert str(failure).startswith(f"Bedrock ConverseStream call for model {MODEL!r} failed "
                                   f"(ThrottlingException): Too many requests")
    assert "gave up after 3 attempts, max_retries=2" in str(failure)
    assert len(bedrock.requests) == 3


def test_a_retry_after_beyond_the_cap_is_not_waited_out(bedrock: FakeBedrock) -> None:
    bedrock.script(error("ThrottlingException", "Slow down", 429,
                         headers={"Retry-After": "120"}))

    failure = _failure(_model(bedrock))

    assert failure.code == "rate_limited" and "asked to wait 120 s" in str(failure)
    assert len(bedrock.requests) == 1


def test_no_retry_when_the_backoff_does_not_fit_the_turn(
        bedrock: FakeBedrock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_retry, "BACKOFF", 30.0)
    monkeypatch.setattr(_retry, "BACKOFF_CAP", 60.0)  # 15-30 s: never within the 5 s left
    bedrock.script(error("ServiceUnavailableException", "Try later", 503))

    with pytest.raises(ModelError) as caught:
        _run(_model(bedrock), signal=Signal(timeout=5))

    assert "no time left in the turn" in str(caught.value)
    assert len(bedrock.requests) == 1


@pytest.mark.parametrize(("name", "status", "code"), [
    ("ServiceUnavailableException", 503, "server_error"),
    ("InternalServerException", 500, "server_error"),
    ("ModelNotReadyException", 429, "model_not_ready"),
])
def test_transient_failures_are_retried(bedrock: FakeBedrock, name: str, status: int,
                                        code: str) -> None:
    bedrock.script(error(name, "not now", status), converse_stream("Hello."))
    assert _text(_run(_model(bedrock))) == "Hello."

    bedrock.script(*[error(name, "not now", status)] * 2)
    failure = _failure(_model(bedrock, max_retries=1))
    assert (failure.code, failure.retryable) == (code, True)
    assert len(bedrock.requests) == 4


def test_a_context_window_validation_error_is_context_overflow_and_not_retried(
        bedrock: FakeBedrock) -> None:
    bedrock.script(error("ValidationException", "Input is too long for requested model."))

    failure = _failure(_model(bedrock))

    assert (failure.code, failure.status, failure.retryable) == ("context_overflow", 400, False)
    assert "app.context.history(limit=N)" in str(failure)
    assert len(bedrock.requests) == 1


@pytest.mark.parametrize(("name", "status", "code", "hint"), [
    ("ValidationException", 400, "invalid_request", ""),
    ("AccessDeniedException", 403, "permission_denied", "bedrock:InvokeModelWithResponseStream"),
    ("ResourceNotFoundException", 404, "model_not_found", "check the model id"),
    ("UnrecognizedClientException", 403, "auth_failed", "AWS credentials"),
])
def test_client_mistakes_are_not_retried_and_say_what_to_do(
        bedrock: FakeBedrock, name: str, status: int, code: str, hint: str) -> None:
    bedrock.script(error(name, "nope", status))

    failure = _failure(_model(bedrock))

    assert (failure.code, failure.status, failure.retryable) == (code, status, False)
    assert f"({name}): nope" in str(failure) and hint in str(failure)
    assert len(bedrock.requests) == 1


def test_a_model_timeout_is_retried_once(bedrock: FakeBedrock) -> None:
    bedrock.script(*[error("ModelTimeoutException", "took too long", 408)] * 2)

    failure = _failure(_model(bedrock))

    assert failure.code == "timeout" and "retried once" in str(failure)
    assert len(bedrock.requests) == 2


def test_an_unreachable_endpoint_is_a_connection_error_after_retries() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    failure = _failure(BedrockModel(MODEL, client=_client(f"http://127.0.0.1:{port}"),
                                    max_retries=1))

    assert (failure.code, failure.retryable) == ("connection_error", True)
    assert "gave up after 2 attempts" in str(failure)


def test_a_cut_stream_is_stream_incomplete(bedrock: FakeBedrock) -> None:
    reply = converse_stream("A long answer, cut short.", [LOOKUP])
    reply.cut_after = 5
    bedrock.script(reply)

    failure = _failure(_model(bedrock))

    assert (failure.code, failure.retryable) == ("stream_incomplete", True)
    assert "closed mid-stream after 5 events" in str(failure)


def test_a_stream_that_ends_without_message_stop_is_stream_incomplete(
        bedrock: FakeBedrock) -> None:
    reply = converse_stream("Half an answer", [LOOKUP])
    reply.frames = reply.frames[:-2]  # no messageStop, no metadata, but a clean end
    bedrock.script(reply)

    chunks: list[Any] = []
    with pytest.raises(ModelError) as caught:
        chunks.extend(_model(bedrock).stream(_request(), signal=Signal()))

    assert caught.value.code == "stream_incomplete" and "before messageStop" in str(caught.value)
    assert not any(isinstance(c, ToolCallChunk) for c in chunks)


@pytest.mark.parametrize(("kind", "code", "retryable"), [
    ("modelStreamErrorException", "stream_incomplete", True),
    ("throttlingException", "stream_incomplete", True),
    ("validationException", "invalid_request", False),
])
def test_an_exception_inside_the_stream_ends_the_step(bedrock: FakeBedrock, kind: str,
                                                      code: str, retryable: bool) -> None:
    reply = converse_stream("Starting to answer")
    reply.frames.insert(3, stream_exception(kind, "the model stream failed"))
    bedrock.script(reply)

    failure = _failure(_model(bedrock))

    assert (failure.code, failure.retryable) == (code, retryable)
    assert "the model stream failed (reported inside the stream after 3 events)" in str(failure)
    assert len(bedrock.requests) == 1  # text already streamed: not retried here


def test_abort_mid_stream_closes_the_stream(bedrock: FakeBedrock) -> None:
    reply = converse_stream("A long answer that nobody waits for.")
    reply.pause_after = 2
    bedrock.script(reply)
    signal = Signal()
    chunks = _model(bedrock).stream(_request(), signal=signal)

    first = next(chunks)
    signal.abort()
    reply.release.set()
    with pytest.raises(Aborted):
        next(chunks)

    assert isinstance(first, TextDelta)
    assert reply.finished.wait(5) and reply.disconnected


# --- the client -------------------------------------------------------------------------------


def test_the_client_is_built_from_the_aws_environment_on_first_call_only(
        bedrock: FakeBedrock, monkeypatch: pytest.MonkeyPatch) -> None:
    aws_env(monkeypatch)
    monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", bedrock.url)
    model = BedrockModel(MODEL)
    assert model._client is None  # nothing built at construction
    bedrock.script(converse_stream("One."), converse_stream("Two."))

    assert _text(_run(model)) + _text(_run(model)) == "One.Two."
    assert model._client is not None and model._client.meta.region_name == "us-east-1"
    assert model._client.meta.config.retries == {"total_max_attempts": 1, "mode": "standard"}


def test_importing_the_module_does_not_import_boto3() -> None:
    code = ("import sys, dormant.models; m = dormant.models.BedrockModel('x'); "
            "print('boto3' in sys.modules, 'botocore' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    assert done.stdout.split() == ["False", "False"]


def test_from_settings_reads_the_model_id() -> None:
    model = BedrockModel.from_settings(Settings.from_env({"DORMANT_BEDROCK_MODEL": NOVA}))
    assert model.model_id == NOVA
    with pytest.raises(ConfigError, match="DORMANT_BEDROCK_MODEL"):
        BedrockModel.from_settings(Settings.from_env({}))


# --- through the app --------------------------------------------------------------------------


def _broken(ctx: dormant.ToolContext) -> Any:
    raise RuntimeError("the booking system is down")


def _concierge(app: dormant.App, fake: FakeBedrock) -> dormant.Agent:
    lookup = app.tool(name="lookup_stay", description="Look up a booking", schema=Stay,
                      execute=lambda ctx: {"ref": ctx.args.ref, "nights": 3})
    cancel = app.tool(name="cancel_stay", description="Cancel a booking", schema=Stay,
                      execute=_broken)
    return app.agent(name="concierge", model=_model(fake),
                     context=[app.context.system("You are a concierge."),
                              app.context.history()],
                     tools=[lookup, cancel])


def _events(app: dormant.App, session_id: str = "s1") -> list[Any]:
    session = app.sessions.get(session_id)
    assert session is not None
    return list(session.events)


def _types(session: dormant.Session | None) -> list[str]:
    assert session is not None
    return [e.type for e in session.events if e.type != "state_delta"]


def test_a_tool_round_trip_sends_the_tool_result_and_sums_usage(bedrock: FakeBedrock) -> None:
    app = dormant.App(name="bedrock", prices={MODEL: {"input": 3, "output": 15, "cached": 0.3}})
    rest = app.handler.rest(agent=_concierge(app, bedrock), response={"usage": True})
    bedrock.script(converse_stream("", [LOOKUP], usage=(100, 20, 0)),
                   converse_stream("BK-1042 is three nights.", usage=(40, 6, 1100)))

    done = rest({"session_id": "s1", "input": {"message": "How long is BK-1042?"}})

    assert done.status == "completed" and done.output.text == "BK-1042 is three nights."
    assert done.usage is not None and (done.usage.input_tokens, done.usage.output_tokens,
                                       done.usage.cached_tokens) == (1240, 26, 1100)
    # The cache reads at the cached price, the rest of the input at the input price.
    one, two = (100 * 3 + 20 * 15) / 1e6, (40 * 3 + 1100 * 0.3 + 6 * 15) / 1e6
    assert done.usage.cost == pytest.approx(one + two)
    end = _events(app)[-1]
    assert isinstance(end, InvocationEnd) and end.timing is not None
    calls = end.timing.model_calls
    assert [(c.provider, c.model, c.response_id, c.finish_reason) for c in calls] == [
        ("aws.bedrock", MODEL, "fake-request-id", "tool_use"),
        ("aws.bedrock", MODEL, "fake-request-id", "end_turn")]
    assert [c.usage.cost for c in calls] == pytest.approx([one, two])
    second = bedrock.requests[1]
    assert second.blocks("toolUse") == [
        {"toolUseId": "tooluse_stay", "name": "lookup_stay", "input": {"ref": "BK-1042"}}]
    assert second.blocks("toolResult") == [
        {"toolUseId": "tooluse_stay", "content": [{"json": {"ref": "BK-1042", "nights": 3}}],
         "status": "success"}]
    assert _types(app.sessions.get("s1")) == [
        "invocation_start", "user", "tool_call", "tool_result", "assistant", "invocation_end"]


def test_a_failed_tool_is_sent_back_with_status_error(bedrock: FakeBedrock) -> None:
    app = dormant.App(name="bedrock")
    rest = app.handler.rest(agent=_concierge(app, bedrock))
    bedrock.script(converse_stream("", [Call("cancel_stay", {"ref": "BK-1"}, "tu_cancel")]),
                   converse_stream("I could not cancel it."))

    assert rest({"input": {"message": "Cancel BK-1"}}).status == "completed"

    (result,) = bedrock.requests[1].blocks("toolResult")
    assert result["toolUseId"] == "tu_cancel" and result["status"] == "error"
    assert "the booking system is down" in result["content"][0]["text"]


def test_reasoning_is_kept_in_the_ledger_and_sent_back_on_the_next_call(
        bedrock: FakeBedrock) -> None:
    app = dormant.App(name="bedrock")
    rest = app.handler.rest(agent=_concierge(app, bedrock))
    bedrock.script(converse_stream("", [LOOKUP], reasoning="Look the booking up first.",
                                   signature="sig-1"),
                   converse_stream("Three nights."))

    assert rest({"session_id": "r1", "input": {"message": "BK-1042?"}}).status == "completed"

    session = app.sessions.get("r1")
    assert session is not None
    (kept,) = [e for e in session.events if e.type == "reasoning"]
    assert kept.provider == "bedrock"
    assistant = bedrock.requests[1].messages[1]
    assert assistant["role"] == "assistant" and assistant["content"][0] == {
        "reasoningContent": {"reasoningText": {"text": "Look the booking up first.",
                                               "signature": "sig-1"}}}
    assert "toolUse" in assistant["content"][1]


@pytest.mark.parametrize("cut", ["connection", "exception"])
def test_a_stream_cut_short_commits_nothing(bedrock: FakeBedrock, cut: str) -> None:
    app = dormant.App(name="bedrock")
    rest = app.handler.rest(agent=_concierge(app, bedrock))
    reply = converse_stream("Half an ans", [LOOKUP])
    if cut == "connection":
        reply.cut_after = 4
    else:
        reply.frames.insert(4, stream_exception("modelStreamErrorException", "broken"))
    bedrock.script(reply)

    failed = rest({"session_id": "c1", "input": {"message": "BK-1042?"}})

    assert failed.status == "error" and failed.code == "stream_incomplete"
    assert failed.commit_status is None and app.sessions.get("c1") is None


def test_an_aborted_turn_closes_the_stream_and_commits_nothing(bedrock: FakeBedrock) -> None:
    app = dormant.App(name="bedrock")
    turn = app.handler.turn(agent=_concierge(app, bedrock))
    reply: Reply = converse_stream("A long answer that the user will not wait for.")
    reply.pause_after = 2
    bedrock.script(reply)
    stream = turn({"session_id": "a1", "input": {"message": "Tell me everything"}})

    first = next(e for e in stream if e.type == "assistant_delta")
    stream.abort()
    reply.release.set()
    leftover = list(stream)

    assert first.delta and all(e.type != "assistant" for e in leftover)
    assert stream.result is not None and stream.result.code == "aborted"
    assert stream.result.commit_status is None and app.sessions.get("a1") is None
    assert reply.finished.wait(5) and reply.disconnected
