"""OpenAIModel on the wire where replies go wrong or carry more than text: reasoning items
sent back, cut and unstreamed replies, foreign error bodies, context limits, retry honesty."""

from __future__ import annotations

import socket
import time
from typing import Any

import openai
import pytest
from pydantic import BaseModel

import dormant
from dormant.models import (
    AssistantMessage,
    ModelError,
    ModelRequest,
    OpenAIModel,
    ReasoningChunk,
    TextDelta,
    ToolCallChunk,
    ToolCallPart,
    ToolMessage,
    ToolSpec,
    UsageChunk,
    UserMessage,
)
from dormant.models.openai import RETRY_AFTER_CAP
from dormant.tools import Signal
from tests.unit.openai_fake import (
    Call,
    FakeOpenAI,
    Reply,
    chat_json,
    chat_stream,
    error,
    raw,
    responses_json,
    responses_stream,
)

APIS = ["responses", "chat_completions"]
STAY = Call("lookup_stay", {"booking": "B-7"}, "call_stay")


class Stay(BaseModel):
    booking: str


LOOKUP = ToolSpec("lookup_stay", "How long a stay is", Stay.model_json_schema())


def _model(fake: FakeOpenAI, api: str = "responses", **options: Any) -> OpenAIModel:
    return OpenAIModel("gpt-5.6-luna", api=api,  # type: ignore[arg-type]
                       base_url=fake.base_url, api_key="test-key", **options)


def _request(*messages: Any) -> ModelRequest:
    return ModelRequest(system=["Be brief."], tools=[LOOKUP],
                        messages=list(messages) or [UserMessage("How long is B-7?")])


def _run(model: OpenAIModel, request: ModelRequest | None = None,
         signal: Signal | None = None) -> list[Any]:
    return list(model.stream(request or _request(), signal=signal or Signal()))


def _until_error(model: OpenAIModel) -> tuple[list[Any], ModelError]:
    """The chunks yielded before the call failed, and its error."""
    seen: list[Any] = []
    with pytest.raises(ModelError) as caught:
        for chunk in model.stream(_request(), signal=Signal()):
            seen.append(chunk)
    return seen, caught.value


def _reasoning_item(reply: Reply) -> dict[str, Any]:
    """The reasoning output item the fake sent, as it sent it."""
    assert reply.events is not None
    return next(e["item"] for kind, e in reply.events
                if kind == "response.output_item.done" and e["item"]["type"] == "reasoning")


def _text(chunks: list[Any]) -> str:
    return "".join(c.text for c in chunks if isinstance(c, TextDelta))


# --- reasoning items --------------------------------------------------------------------------


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "unstreamed"])
def test_reasoning_items_become_reasoning_chunks(fake: FakeOpenAI, streamed: bool) -> None:
    build = responses_stream if streamed else responses_json
    fake.script(build("", [STAY], summary=["Look it up."], encrypted="gAAAA-enc-1"))

    chunks = _run(_model(fake, stream=streamed))

    (reasoning,) = [c for c in chunks if isinstance(c, ReasoningChunk)]
    assert reasoning.provider == "openai"
    assert reasoning.item == {"id": "rs_1", "type": "reasoning", "status": "completed",
                              "summary": [{"type": "summary_text", "text": "Look it up."}],
                              "encrypted_content": "gAAAA-enc-1"}


def test_a_tool_loop_sends_the_reasoning_item_back_before_its_call(fake: FakeOpenAI) -> None:
    first = responses_stream("", [STAY], summary=["Look it up."], encrypted="gAAAA-enc-1")
    fake.script(first, responses_stream("Three nights."))
    model = _model(fake, store=False)
    question = UserMessage("How long is B-7?")

    chunks = _run(model, _request(question))
    reasoning = tuple(c.item for c in chunks if isinstance(c, ReasoningChunk))
    calls = tuple(ToolCallPart(c.call_id, c.name, c.args) for c in chunks
                  if isinstance(c, ToolCallChunk))
    _run(model, _request(question, AssistantMessage("", calls, reasoning=reasoning),
                         ToolMessage("call_stay", "lookup_stay", '{"nights": 3}')))

    assert [r.body["include"] for r in fake.requests] == [["reasoning.encrypted_content"]] * 2
    assert fake.requests[1].body["input"] == [
        {"role": "user", "content": "How long is B-7?"},
        _reasoning_item(first),
        {"type": "function_call", "call_id": "call_stay", "name": "lookup_stay",
         "arguments": '{"booking": "B-7"}'},
        {"type": "function_call_output", "call_id": "call_stay", "output": '{"nights": 3}'},
    ]
    assert fake.requests[1].body["input"][1]["encrypted_content"] == "gAAAA-enc-1"


def test_include_is_asked_only_without_store_and_never_overrides_the_users(
        fake: FakeOpenAI) -> None:
    fake.script(*[responses_stream("ok") for _ in range(3)], chat_stream("ok"))

    _run(_model(fake))
    _run(_model(fake, store=True))
    _run(_model(fake, store=False, include=["message.output_text.logprobs"]))
    _run(_model(fake, "chat_completions", store=False))

    assert [r.body.get("include") for r in fake.requests] == [
        None, None, ["message.output_text.logprobs"], None]


def test_chat_completions_sends_no_reasoning_items(fake: FakeOpenAI) -> None:
    fake.script(chat_stream("ok"))
    item = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "x"}

    _run(_model(fake, "chat_completions"),
         _request(UserMessage("hi"), AssistantMessage("Hello.", reasoning=(item,)),
                  UserMessage("bye")))

    assert fake.requests[0].body["messages"][1:] == [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "bye"}]


def test_a_reasoning_item_with_nothing_after_it_is_not_sent(fake: FakeOpenAI) -> None:
    fake.script(responses_stream("ok"))
    item = {"type": "reasoning", "id": "rs_1", "summary": []}

    _run(_model(fake), _request(UserMessage("hi"), AssistantMessage("", reasoning=(item,)),
                                UserMessage("again")))

    assert fake.requests[0].body["input"] == [{"role": "user", "content": "hi"},
                                              {"role": "user", "content": "again"}]


def test_an_agent_keeps_reasoning_in_the_ledger_and_replays_it_next_turn(
        fake: FakeOpenAI) -> None:
    app = dormant.App(name="reasoning")
    lookup = app.tool(name="lookup_stay", description="How long a stay is", schema=Stay,
                      execute=lambda ctx: {"nights": 3})
    client = openai.OpenAI(base_url=fake.base_url, api_key="test")
    agent = app.agent(name="concierge", model=OpenAIModel("gpt-5.6-luna", client=client,
                                                          store=False),
                      context=[app.context.history()], tools=[lookup])
    rest = app.handler.rest(agent=agent)
    step_one = responses_stream("", [STAY], summary=["Look it up."], encrypted="enc-1")
    step_two = responses_stream("Three nights.", encrypted="enc-2", reasoning_id="rs_2")
    fake.script(step_one, step_two)

    first = rest({"input": {"message": "How long is B-7?"}})

    assert first.status == "completed" and first.output.text == "Three nights."
    session = app.sessions.get(first.session_id)
    assert session is not None
    kept = [e for e in session.events if e.type == "reasoning"]
    assert [e.items for e in kept] == [[_reasoning_item(step_one)], [_reasoning_item(step_two)]]
    assert [e.type for e in session.events if e.type in ("reasoning", "tool_call", "assistant")
            ] == ["reasoning", "tool_call", "reasoning", "assistant"]

    fake.script(responses_stream("You're welcome."))
    second = rest({"session_id": first.session_id, "input": {"message": "Thanks"}})

    assert second.status == "completed"
    replayed = fake.requests[2].body
    assert replayed["include"] == ["reasoning.encrypted_content"]
    assert replayed["input"] == [
        {"role": "user", "content": "How long is B-7?"},
        _reasoning_item(step_one),
        {"type": "function_call", "call_id": "call_stay", "name": "lookup_stay",
         "arguments": '{"booking": "B-7"}'},
        {"type": "function_call_output", "call_id": "call_stay", "output": '{"nights": 3}'},
        _reasoning_item(step_two),
        {"role": "assistant", "content": "Three nights."},
        {"role": "user", "content": "Thanks"},
    ]
    assert fake.requests[1].body["input"][1]["encrypted_content"] == "enc-1"


# --- streams that end early -------------------------------------------------------------------


def test_a_responses_stream_without_its_terminal_event_is_incomplete(fake: FakeOpenAI) -> None:
    fake.script(responses_stream("Let me check.", [STAY], final=None))

    seen, failure = _until_error(_model(fake))

    assert failure.code == "stream_incomplete" and failure.retryable
    assert "before response.completed" in str(failure)
    assert _text(seen) == "Let me check."  # text streamed; the loop drops it with the step
    assert not [c for c in seen if isinstance(c, ToolCallChunk | UsageChunk | ReasoningChunk)]


def test_a_chat_stream_that_never_finishes_is_incomplete(fake: FakeOpenAI) -> None:
    fake.script(chat_stream("Let me check.", [STAY], finish=False))

    seen, failure = _until_error(_model(fake, "chat_completions"))

    assert failure.code == "stream_incomplete" and failure.retryable
    assert "before any choice finished" in str(failure)
    assert not [c for c in seen if isinstance(c, ToolCallChunk)]


def test_a_finished_chat_stream_without_done_is_still_whole(fake: FakeOpenAI) -> None:
    reply = chat_stream("All good.")
    reply.done_marker = False
    fake.script(reply)

    assert _text(_run(_model(fake, "chat_completions"))) == "All good."


@pytest.mark.parametrize(("api", "cut"), [("responses", 6), ("chat_completions", 3)])
def test_a_connection_closed_after_text_arrived_is_a_cut_stream(fake: FakeOpenAI, api: str,
                                                               cut: int) -> None:
    reply = (responses_stream if api == "responses" else chat_stream)("Part of an answer.")
    reply.cut_after = cut  # two text deltas in
    fake.script(reply)

    seen, failure = _until_error(_model(fake, api))

    assert _text(seen) == "Part of an"
    assert failure.code == "stream_incomplete" and failure.retryable
    assert f"connection closed mid-stream after {cut} events" in str(failure)
    assert "cannot reach" not in str(failure)
    assert len(fake.requests) == 1  # a started stream is not resent by the adapter


def test_an_unreachable_api_is_still_a_connection_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there

    with pytest.raises(ModelError) as caught:
        _run(OpenAIModel("gpt-5.6-luna", base_url=f"http://127.0.0.1:{port}/v1",
                         api_key="test-key", max_retries=0))

    assert caught.value.code == "connection_error" and caught.value.retryable
    assert "cannot reach the API" in str(caught.value)


def test_an_agent_turn_on_a_cut_stream_fails_and_commits_nothing(fake: FakeOpenAI) -> None:
    app = dormant.App(name="cut")
    agent = app.agent(name="a", model=_model(fake), context=[app.context.history()])
    reply = responses_stream("This answer never ends")
    reply.cut_after = 5
    fake.script(reply)

    response = app.handler.rest(agent=agent)({"session_id": "thread-9",
                                              "input": {"message": "Hi"}})

    assert response.status == "error" and response.commit_status is None
    assert response.error is not None and "stream_incomplete" in response.error
    assert app.sessions.get("thread-9") is None


# --- a JSON body where a stream was asked for --------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_a_json_body_to_a_streamed_request_is_read_as_the_whole_reply(fake: FakeOpenAI,
                                                                     api: str) -> None:
    build = responses_json if api == "responses" else chat_json
    fake.script(build("Asking now.", [STAY], usage=(50, 7, 16)))

    chunks = _run(_model(fake, api))

    assert fake.requests[0].body["stream"] is True
    assert _text(chunks) == "Asking now."
    assert [(c.call_id, c.name, c.args) for c in chunks if isinstance(c, ToolCallChunk)] == [
        ("call_stay", "lookup_stay", '{"booking": "B-7"}')]
    assert [(c.usage.input_tokens, c.usage.output_tokens, c.usage.cached_tokens)
            for c in chunks if isinstance(c, UsageChunk)] == [(50, 7, 16)]


@pytest.mark.parametrize("api", APIS)
def test_a_json_body_that_is_no_reply_is_stream_expected(fake: FakeOpenAI, api: str) -> None:
    fake.script(raw(200, {"status": "ok", "note": "mock server"}))

    with pytest.raises(ModelError) as caught:
        _run(_model(fake, api))

    assert caught.value.code == "stream_expected" and not caught.value.retryable
    assert "ignored stream=true" in str(caught.value)


# --- error bodies -----------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "content_type", "said"), [
    ({"type": "about:blank", "title": "Unprocessable Entity", "status": 422,
      "detail": "input[0] is invalid; key sk-live-abcdef1234 rejected"},
     "application/problem+json", "Unprocessable Entity: input[0] is invalid"),
    ({"detail": "model 'gpt-5.6-luna' is not served here (Bearer abc.def.ghi)"},
     "application/json", "model 'gpt-5.6-luna' is not served here"),
    ("upstream rejected the request: token sk-proj-XYZ987 expired", "text/plain",
     "upstream rejected the request: token"),
], ids=["problem+json", "detail", "plain-text"])
def test_a_foreign_error_body_keeps_its_explanation(fake: FakeOpenAI, body: Any,
                                                    content_type: str, said: str) -> None:
    fake.script(raw(422, body, content_type))

    with pytest.raises(ModelError) as caught:
        _run(_model(fake, "chat_completions"))

    message = str(caught.value)
    assert caught.value.code == "invalid_request" and caught.value.status == 422
    assert said in message
    assert "abcdef1234" not in message and "XYZ987" not in message
    assert "abc.def" not in message


@pytest.mark.parametrize(("message", "code"), [
    ("This model's context window is 8192 tokens; your prompt is 9100.", None),
    ("This model's maximum context length is 32768 tokens.", "invalid_request_error"),
    ("Input exceeds the CONTEXT LENGTH of the model", "BadRequestError"),
    ("Too many tokens: 9000 > 8192", "400"),
], ids=["context-window", "maximum-context-length", "context-length", "too-many-tokens"])
def test_a_compatible_servers_context_error_is_context_overflow(fake: FakeOpenAI, message: str,
                                                                code: str | None) -> None:
    fake.script(error(400, message, code=code))

    with pytest.raises(ModelError) as caught:
        _run(_model(fake, "chat_completions"))

    assert caught.value.code == "context_overflow" and not caught.value.retryable
    assert message in str(caught.value) and "history(limit=N)" in str(caught.value)
    assert len(fake.requests) == 1


# --- retries: what happened, said truly ---------------------------------------------------------

RATE_LIMIT = "Rate limit reached for gpt-5.6-luna on tokens per min (TPM): Limit 30000."


def test_a_rate_limit_with_no_retries_says_one_attempt_was_made(fake: FakeOpenAI) -> None:
    fake.script(error(429, RATE_LIMIT, code="rate_limit_exceeded"))

    with pytest.raises(ModelError) as caught:
        _run(_model(fake, max_retries=0))

    message = str(caught.value)
    assert caught.value.code == "rate_limited" and caught.value.retryable
    assert "gave up after 1 attempt," in message and "max_retries=0" in message
    assert "retried with backoff" not in message


def test_a_rate_limit_with_no_time_left_says_it_was_not_retried(fake: FakeOpenAI) -> None:
    fake.script(error(429, RATE_LIMIT, code="rate_limit_exceeded",
                      headers={"retry-after": "8"}))

    with pytest.raises(ModelError) as caught:
        _run(_model(fake), signal=Signal(timeout=3))

    message = str(caught.value)
    assert "the 8 s the server asked to wait" in message
    assert "not retried after 1 attempt" in message and "retried with backoff" not in message


def test_a_retry_after_beyond_the_cap_fails_at_once(fake: FakeOpenAI) -> None:
    fake.script(error(429, RATE_LIMIT, code="rate_limit_exceeded",
                      headers={"retry-after": "60"}))

    started = time.monotonic()
    with pytest.raises(ModelError) as caught:
        _run(_model(fake))  # no deadline: the cap is all that bounds the wait

    assert time.monotonic() - started < 2
    assert caught.value.code == "rate_limited" and caught.value.retryable
    assert f"asked to wait 60 s, longer than the {RETRY_AFTER_CAP:g} s" in str(caught.value)
    assert len(fake.requests) == 1


def test_a_retry_after_within_the_cap_is_waited_out(fake: FakeOpenAI) -> None:
    fake.script(error(429, RATE_LIMIT, code="rate_limit_exceeded",
                      headers={"retry-after": "1"}),
                responses_stream("Made it."))

    started = time.monotonic()
    chunks = _run(_model(fake))

    assert _text(chunks) == "Made it."
    assert time.monotonic() - started >= 1


def test_a_request_timeout_is_retried_once(fake: FakeOpenAI) -> None:
    stalled = [Reply(stall=10, body={}), Reply(stall=10, body={})]
    fake.script(*stalled)

    try:
        with pytest.raises(ModelError) as caught:
            _run(_model(fake, timeout=0.3, max_retries=3))
    finally:
        for reply in stalled:
            reply.release.set()

    assert caught.value.code == "timeout" and caught.value.retryable
    assert "gave up after 2 attempts; a timed-out request is retried once" in str(caught.value)
    assert len(fake.requests) == 2
