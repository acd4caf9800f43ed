"""OpenAIModel against a local server speaking OpenAI's wire formats, through the real client."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any

import openai
import pytest
from pydantic import BaseModel

import dormant
from dormant.events import InvocationEnd, Usage
from dormant.models import (
    AssistantMessage,
    ModelError,
    ModelRequest,
    OpenAIModel,
    ResponseInfo,
    TextDelta,
    ThoughtDelta,
    ToolCallChunk,
    ToolCallPart,
    ToolMessage,
    ToolSpec,
    UsageChunk,
    UserMessage,
)
from dormant.models._openai_schema import strict_schema
from dormant.tools import Aborted, Signal
from tests.unit.openai_fake import (
    MODEL,
    Call,
    FakeOpenAI,
    Reply,
    chat_json,
    chat_stream,
    error,
    responses_json,
    responses_stream,
)

APIS = ["responses", "chat_completions"]
PATHS = {"responses": "/v1/responses", "chat_completions": "/v1/chat/completions"}


class Action(BaseModel):
    action: str


class Decision(BaseModel):
    approved: bool
    note: str | None = None


class Paged(BaseModel):
    query: str
    limit: int = 10


ACTION = ToolSpec("request_approval", "Ask a human first", Action.model_json_schema())
PARALLEL = [Call("request_approval", {"action": "delete the 2019 archive"}, "call_a"),
            Call("request_approval", {"action": "empty the bin"}, "call_b")]


def _model(fake: FakeOpenAI, api: str = "responses", **options: Any) -> OpenAIModel:
    return OpenAIModel("gpt-5.6-luna", api=api,  # type: ignore[arg-type]
                       base_url=fake.base_url, api_key="test-key", **options)


def _request(*messages: Any, tools: tuple[ToolSpec, ...] = (ACTION,),
             system: tuple[str, ...] = ("Ask before destroying.",)) -> ModelRequest:
    return ModelRequest(system=list(system), tools=list(tools),
                        messages=list(messages) or [UserMessage("hi")])


def _run(model: OpenAIModel, request: ModelRequest | None = None,
         signal: Signal | None = None) -> list[Any]:
    return list(model.stream(request or _request(), signal=signal or Signal()))


def _text(chunks: list[Any]) -> str:
    return "".join(c.text for c in chunks if isinstance(c, TextDelta))


def _thought(chunks: list[Any]) -> str:
    return "".join(c.text for c in chunks if isinstance(c, ThoughtDelta))


def _calls(chunks: list[Any]) -> list[tuple[str, str, str]]:
    return [(c.call_id, c.name, c.args) for c in chunks if isinstance(c, ToolCallChunk)]


def _usage(chunks: list[Any]) -> list[Usage]:
    return [c.usage for c in chunks if isinstance(c, UsageChunk)]


def _stream_reply(api: str, *args: Any, **kwargs: Any) -> Reply:
    return (responses_stream if api == "responses" else chat_stream)(*args, **kwargs)


def _json_reply(api: str, *args: Any, **kwargs: Any) -> Reply:
    return (responses_json if api == "responses" else chat_json)(*args, **kwargs)


# --- replies become chunks --------------------------------------------------------------------


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "unstreamed"])
@pytest.mark.parametrize("api", APIS)
def test_text_tool_calls_and_usage_become_chunks(fake: FakeOpenAI, api: str,
                                                 streamed: bool) -> None:
    build = _stream_reply if streamed else _json_reply
    fake.script(build(api, "Asking for approval now.", PARALLEL[:1],
                      usage=(120, 30, 64, 18)))

    chunks = _run(_model(fake, api, stream=streamed))

    assert _text(chunks) == "Asking for approval now."
    assert _calls(chunks) == [("call_a", "request_approval",
                               '{"action": "delete the 2019 archive"}')]
    assert _usage(chunks) == [Usage(input_tokens=120, output_tokens=30, cached_tokens=64,
                                    reasoning_tokens=18)]
    assert chunks[-1] == (ResponseInfo(MODEL, "resp_fake", "completed") if api == "responses"
                          else ResponseInfo(MODEL, "chatcmpl-fake", "tool_calls"))
    (sent,) = fake.requests
    assert sent.path == PATHS[api]
    assert sent.headers["authorization"] == "Bearer test-key"
    assert sent.body["model"] == "gpt-5.6-luna"
    assert sent.body["stream"] is streamed


@pytest.mark.parametrize("api", APIS)
def test_streamed_text_arrives_as_several_deltas(fake: FakeOpenAI, api: str) -> None:
    fake.script(_stream_reply(api, "Archive deleted, as approved."))

    deltas = [c.text for c in _run(_model(fake, api)) if isinstance(c, TextDelta)]

    assert len(deltas) > 3 and "".join(deltas) == "Archive deleted, as approved."


@pytest.mark.parametrize("api", APIS)
def test_parallel_tool_calls_are_assembled_by_index(fake: FakeOpenAI, api: str) -> None:
    fake.script(_stream_reply(api, "", PARALLEL, interleave=True))

    calls = _calls(_run(_model(fake, api)))

    assert calls == [("call_a", "request_approval", '{"action": "delete the 2019 archive"}'),
                     ("call_b", "request_approval", '{"action": "empty the bin"}')]


def test_responses_arguments_are_assembled_from_deltas_without_done_events(
        fake: FakeOpenAI) -> None:
    reply = responses_stream("", PARALLEL, interleave=True)
    assert reply.events is not None
    reply.events = [(kind, event) for kind, event in reply.events
                    if kind != "response.function_call_arguments.done"
                    and not (kind == "response.output_item.done"
                             and event["item"]["type"] == "function_call")]
    fake.script(reply)

    calls = _calls(_run(_model(fake)))

    assert [args for _, _, args in calls] == ['{"action": "delete the 2019 archive"}',
                                              '{"action": "empty the bin"}']


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "unstreamed"])
def test_reasoning_summaries_become_thought_deltas(fake: FakeOpenAI, streamed: bool) -> None:
    build = responses_stream if streamed else responses_json
    fake.script(build("Done.", summary=["Checking the policy.", "It allows this."]))

    chunks = _run(_model(fake, stream=streamed, reasoning={"summary": "auto"}))

    assert _thought(chunks) == "Checking the policy.\n\nIt allows this."
    assert _text(chunks) == "Done."
    assert fake.requests[0].body["reasoning"] == {"summary": "auto"}


def test_compatible_server_reasoning_content_becomes_thought_deltas(fake: FakeOpenAI) -> None:
    fake.script(chat_stream("Friday.", reasoning="The user said Friday."))

    chunks = _run(_model(fake, "chat_completions"))

    assert _thought(chunks) == "The user said Friday."
    assert _text(chunks) == "Friday."


def test_chat_stream_asks_for_usage_and_unstreamed_does_not(fake: FakeOpenAI) -> None:
    fake.script(chat_stream("a"), chat_json("b"))

    _run(_model(fake, "chat_completions"))
    _run(_model(fake, "chat_completions", stream=False))

    assert fake.requests[0].body["stream_options"] == {"include_usage": True}
    assert "stream_options" not in fake.requests[1].body


# --- the conversation, translated -------------------------------------------------------------

HISTORY = (
    UserMessage("Delete the 2019 archive"),
    AssistantMessage("I will ask first.", (
        ToolCallPart("call_a", "request_approval", {"action": "delete the 2019 archive"}),
        ToolCallPart("call_b", "request_approval", {"action": "empty the bin"}),
    )),
    ToolMessage("call_a", "request_approval", '{"status": "performed"}'),
    ToolMessage("call_b", "request_approval", "Invalid input for request_approval: approved: "
                "Field required", is_error=True),
    AssistantMessage("One done, one failed."),
    UserMessage("Thanks"),
)


def test_responses_input_translates_every_message_kind(fake: FakeOpenAI) -> None:
    fake.script(responses_stream("ok"))

    _run(_model(fake), _request(*HISTORY, system=("Be careful.", "Be brief.")))

    body = fake.requests[0].body
    assert body["instructions"] == "Be careful.\n\nBe brief."
    assert body["input"] == [
        {"role": "user", "content": "Delete the 2019 archive"},
        {"role": "assistant", "content": "I will ask first."},
        {"type": "function_call", "call_id": "call_a", "name": "request_approval",
         "arguments": '{"action": "delete the 2019 archive"}'},
        {"type": "function_call", "call_id": "call_b", "name": "request_approval",
         "arguments": '{"action": "empty the bin"}'},
        {"type": "function_call_output", "call_id": "call_a",
         "output": '{"status": "performed"}'},
        {"type": "function_call_output", "call_id": "call_b",
         "output": "Invalid input for request_approval: approved: Field required"},
        {"role": "assistant", "content": "One done, one failed."},
        {"role": "user", "content": "Thanks"},
    ]


def test_chat_messages_translate_every_message_kind(fake: FakeOpenAI) -> None:
    fake.script(chat_stream("ok"))

    _run(_model(fake, "chat_completions"), _request(*HISTORY, system=("Be careful.",)))

    assert fake.requests[0].body["messages"] == [
        {"role": "system", "content": "Be careful."},
        {"role": "user", "content": "Delete the 2019 archive"},
        {"role": "assistant", "content": "I will ask first.", "tool_calls": [
            {"id": "call_a", "type": "function", "function": {
                "name": "request_approval",
                "arguments": '{"action": "delete the 2019 archive"}'}},
            {"id": "call_b", "type": "function", "function": {
                "name": "request_approval", "arguments": '{"action": "empty the bin"}'}},
        ]},
        {"role": "tool", "tool_call_id": "call_a", "content": '{"status": "performed"}'},
        {"role": "tool", "tool_call_id": "call_b",
         "content": "Invalid input for request_approval: approved: Field required"},
        {"role": "assistant", "content": "One done, one failed."},
        {"role": "user", "content": "Thanks"},
    ]


def test_assistant_tool_calls_without_text_send_null_content(fake: FakeOpenAI) -> None:
    fake.script(chat_stream("ok"))
    call = ToolCallPart("call_a", "request_approval", {"action": "x"})

    _run(_model(fake, "chat_completions"), _request(UserMessage("go"),
                                                    AssistantMessage("", (call,))))

    assert fake.requests[0].body["messages"][2]["content"] is None


# --- tools: strict where it can be ------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_a_strictable_schema_is_sent_strict(fake: FakeOpenAI, api: str) -> None:
    fake.script(_stream_reply(api, "ok"))
    decision = ToolSpec("decide", "Record a decision", Decision.model_json_schema())

    _run(_model(fake, api), _request(tools=(decision,)))

    (tool,) = fake.requests[0].body["tools"]
    spec = tool if api == "responses" else tool["function"]
    assert tool["type"] == "function" and spec["name"] == "decide"
    assert spec["description"] == "Record a decision"
    assert spec["strict"] is True
    assert spec["parameters"]["additionalProperties"] is False
    assert spec["parameters"]["required"] == ["approved", "note"]
    assert "default" not in spec["parameters"]["properties"]["note"]


@pytest.mark.parametrize("api", APIS)
def test_a_schema_that_cannot_be_strict_is_sent_as_written(fake: FakeOpenAI, api: str) -> None:
    fake.script(_stream_reply(api, "ok"))
    paged = ToolSpec("search", "Search", Paged.model_json_schema())

    _run(_model(fake, api), _request(tools=(paged,)))

    (tool,) = fake.requests[0].body["tools"]
    spec = tool if api == "responses" else tool["function"]
    assert spec["strict"] is False
    assert spec["parameters"] == Paged.model_json_schema()


def test_strict_tools_false_never_sends_strict(fake: FakeOpenAI) -> None:
    fake.script(chat_stream("ok"))

    _run(_model(fake, "chat_completions", strict_tools=False))

    function = fake.requests[0].body["tools"][0]["function"]
    assert function["strict"] is False
    assert function["parameters"] == Action.model_json_schema()


def test_strict_schema_closes_nested_models_and_keeps_meaning() -> None:
    class Item(BaseModel):
        sku: str
        qty: int | None = None

    class Order(BaseModel):
        items: list[Item]
        gift: Item | None = None

    strict = strict_schema(Order.model_json_schema())

    assert strict is not None
    item = strict["$defs"]["Item"]
    assert item["additionalProperties"] is False and item["required"] == ["sku", "qty"]
    assert strict["required"] == ["items", "gift"]
    assert Order.model_validate({"items": [{"sku": "a", "qty": None}], "gift": None}) == \
        Order(items=[Item(sku="a")])


@pytest.mark.parametrize("schema", [
    Paged.model_json_schema(),                                             # optional non-null
    {"type": "object", "properties": {"tags": {"type": "object",
                                               "additionalProperties": {"type": "string"}}},
     "required": ["tags"]},                                                # free-form mapping
    {"type": "object", "properties": {"name": {"type": "string", "minLength": 2}},
     "required": ["name"]},                                                # unsupported keyword
    {"type": "object", "properties": {"url": {"type": "string", "format": "uri"}},
     "required": ["url"]},                                                 # unsupported format
    {"type": "array", "items": {"type": "string"}},                        # root not an object
], ids=["optional-default", "mapping", "minLength", "uri", "array-root"])
def test_schemas_that_cannot_be_strict_are_refused(schema: dict[str, Any]) -> None:
    assert strict_schema(schema) is None


# --- errors and retries -----------------------------------------------------------------------

RATE_LIMIT = "Rate limit reached for gpt-5.6-luna on tokens per min (TPM): Limit 30000."


@pytest.mark.parametrize("api", APIS)
def test_rate_limit_then_success_is_retried(fake: FakeOpenAI, api: str) -> None:
    fake.script(error(429, RATE_LIMIT, code="rate_limit_exceeded", kind="tokens",
                      headers={"retry-after-ms": "5"}),
                _stream_reply(api, "Made it."))

    chunks = _run(_model(fake, api))

    assert _text(chunks) == "Made it."
    assert len(fake.requests) == 2
    assert fake.requests[0].body == fake.requests[1].body


def test_server_errors_are_retried(fake: FakeOpenAI) -> None:
    fake.script(error(500, "The server had an error.", kind="server_error",
                      headers={"retry-after-ms": "1"}),
                error(503, "Overloaded", kind="server_error", headers={"retry-after-ms": "1"}),
                responses_stream("Made it."))

    assert _text(_run(_model(fake))) == "Made it."
    assert len(fake.requests) == 3


def test_retries_give_up_after_max_retries(fake: FakeOpenAI) -> None:
    fake.script(*[error(429, RATE_LIMIT, code="rate_limit_exceeded",
                        headers={"retry-after-ms": "1"}) for _ in range(3)])

    with pytest.raises(ModelError) as caught:
        _run(_model(fake, max_retries=2))

    assert caught.value.code == "rate_limited" and caught.value.status == 429
    assert "gave up after 3 attempts" in str(caught.value)
    assert len(fake.requests) == 3


def test_no_retry_when_the_wait_would_outlast_the_turn(fake: FakeOpenAI) -> None:
    fake.script(error(429, RATE_LIMIT, code="rate_limit_exceeded",
                      headers={"retry-after": "30"}))

    with pytest.raises(ModelError) as caught:
        _run(_model(fake), signal=Signal(timeout=5))

    assert caught.value.code == "rate_limited"
    assert "no time left in the turn" in str(caught.value)
    assert len(fake.requests) == 1


@pytest.mark.parametrize("api", APIS)
def test_auth_failure_is_a_clear_error_and_not_retried(fake: FakeOpenAI, api: str) -> None:
    fake.script(error(401, "Incorrect API key provided: sk-abc123***********wxyz. You can find "
                      "your API key at https://platform.openai.com/account/api-keys.",
                      code="invalid_api_key"))

    with pytest.raises(ModelError) as caught:
        _run(_model(fake, api))

    assert caught.value.code == "auth_failed" and caught.value.status == 401
    assert "OPENAI_API_KEY" in str(caught.value)
    assert "abc123" not in str(caught.value)
    assert len(fake.requests) == 1


@pytest.mark.parametrize("api", APIS)
def test_context_overflow_is_a_clear_error(fake: FakeOpenAI, api: str) -> None:
    fake.script(error(400, "This model's maximum context length is 128000 tokens. However, "
                      "your messages resulted in 130412 tokens.", param="messages",
                      code="context_length_exceeded"))

    with pytest.raises(ModelError) as caught:
        _run(_model(fake, api))

    assert caught.value.code == "context_overflow" and caught.value.status == 400
    assert "maximum context length" in str(caught.value)
    assert "history(limit=N)" in str(caught.value)
    assert len(fake.requests) == 1


def test_invalid_request_is_not_retried(fake: FakeOpenAI) -> None:
    fake.script(error(400, "Invalid schema for function 'x'.", param="tools[0].parameters",
                      code="invalid_function_parameters"))

    with pytest.raises(ModelError) as caught:
        _run(_model(fake))

    assert caught.value.code == "invalid_request" and caught.value.status == 400
    assert "Invalid schema for function 'x'." in str(caught.value)


def test_exhausted_quota_is_not_retried(fake: FakeOpenAI) -> None:
    fake.script(error(429, "You exceeded your current quota.", code="insufficient_quota",
                      kind="insufficient_quota"))

    with pytest.raises(ModelError) as caught:
        _run(_model(fake))

    assert caught.value.code == "insufficient_quota"
    assert len(fake.requests) == 1


def test_a_failed_response_event_is_an_error(fake: FakeOpenAI) -> None:
    reply = responses_stream("partial")
    assert reply.events is not None
    _, last = reply.events[-1]
    failed = {**last, "type": "response.failed",
              "response": {**last["response"], "status": "failed",
                           "error": {"code": "server_error", "message": "The model failed."}}}
    reply.events[-1] = ("response.failed", failed)
    fake.script(reply)

    with pytest.raises(ModelError) as caught:
        _run(_model(fake))

    assert caught.value.code == "server_error"
    assert "The model failed." in str(caught.value)


def test_an_error_inside_a_chat_stream_is_an_error(fake: FakeOpenAI) -> None:
    reply = chat_stream("partial")
    assert reply.events is not None
    reply.events.insert(2, (None, {"error": {"message": "The server had an error while "
                                             "processing your request.",
                                             "type": "server_error", "code": None}}))
    fake.script(reply)

    with pytest.raises(ModelError, match="The server had an error"):
        _run(_model(fake, "chat_completions"))


# --- clients, keys, abort ---------------------------------------------------------------------


def test_an_injected_client_is_used_without_its_own_retries(fake: FakeOpenAI) -> None:
    client = openai.OpenAI(base_url=fake.base_url, api_key="test-key", max_retries=5)
    fake.script(error(500, "boom", kind="server_error", headers={"retry-after-ms": "1"}))

    with pytest.raises(ModelError) as caught:
        _run(OpenAIModel("gpt-5.6-luna", client=client, max_retries=0))

    assert caught.value.code == "server_error"
    assert len(fake.requests) == 1


def test_base_url_and_key_come_from_the_standard_environment(
        fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "env-key")
    fake.script(chat_stream("from env"))

    chunks = _run(OpenAIModel("gpt-5.6-luna", api="chat_completions"))

    assert _text(chunks) == "from env"
    assert fake.requests[0].headers["authorization"] == "Bearer env-key"


def test_a_missing_key_is_a_model_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    with pytest.raises(ModelError) as caught:
        _run(OpenAIModel("gpt-5.6-luna", base_url="http://127.0.0.1:9/v1"))

    assert caught.value.code == "auth_failed" and not caught.value.retryable


def test_a_callable_key_is_asked_per_request(fake: FakeOpenAI) -> None:
    keys = iter(["key-one", "key-two"])
    fake.script(responses_stream("a"), responses_stream("b"))
    model = OpenAIModel("gpt-5.6-luna", base_url=fake.base_url, api_key=lambda: next(keys))

    _run(model)
    _run(model)

    assert [r.headers["authorization"] for r in fake.requests] == ["Bearer key-one",
                                                                   "Bearer key-two"]


@pytest.mark.parametrize("api", APIS)
def test_abort_closes_the_http_stream(fake: FakeOpenAI, api: str) -> None:
    reply = _stream_reply(api, "This reply is long enough to be cut off midway.")
    assert reply.events is not None
    reply.pause_after = 1 + next(i for i, (kind, event) in enumerate(reply.events)
                                 if kind == "response.output_text.delta"
                                 or (kind is None and event["choices"][0]["delta"].get("content")))
    fake.script(reply)
    signal = Signal()
    stream = _model(fake, api).stream(_request(), signal=signal)
    assert isinstance(next(stream), TextDelta)
    assert reply.paused.wait(5)

    signal.abort()
    with pytest.raises(Aborted):
        list(stream)
    reply.release.set()  # the server talks on, and finds nobody listening

    assert reply.finished.wait(5)
    assert reply.disconnected


def test_a_stalled_stream_cannot_outlive_the_turn(fake: FakeOpenAI) -> None:
    reply = responses_stream("The server stops talking after this.")
    reply.pause_after = 6  # after the first text delta, then silence
    fake.script(reply)

    started = time.monotonic()
    with pytest.raises(Aborted):
        _run(_model(fake), signal=Signal(timeout=0.5))
    reply.release.set()

    assert time.monotonic() - started < 5  # the server would stay silent for 10 s


def test_an_abort_during_backoff_stops_waiting(fake: FakeOpenAI) -> None:
    refusal = error(429, RATE_LIMIT, code="rate_limit_exceeded", headers={"retry-after": "20"})
    fake.script(refusal)
    signal = Signal()
    done = threading.Event()
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            _run(_model(fake), signal=signal)
        except BaseException as caught:
            outcome.append(caught)
        done.set()

    worker = threading.Thread(target=call)
    worker.start()
    assert refusal.finished.wait(5)  # the first attempt was refused: now it backs off
    signal.abort()

    assert done.wait(5)
    worker.join()
    assert len(outcome) == 1 and isinstance(outcome[0], Aborted)
    assert len(fake.requests) == 1


# --- what a turn's timing keeps of a call ----------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_the_turn_timing_keeps_the_response_and_its_priced_tokens(fake: FakeOpenAI,
                                                                 api: str) -> None:
    app = dormant.App(name="timed", prices={MODEL: dormant.Price(input=1.25, output=10,
                                                                  cached=0.125)})
    rest = app.handler.rest(agent=app.agent(name="a", model=_model(fake, api)),
                            response={"usage": True})
    fake.script(_stream_reply(api, "Done.", usage=(1000, 200, 800, 150)))

    done = rest({"session_id": "s1", "input": {"message": "hi"}})

    session = app.sessions.get("s1")
    assert session is not None
    end = session.events[-1]
    assert isinstance(end, InvocationEnd) and end.timing is not None
    (call,) = end.timing.model_calls
    assert (call.provider, call.model, call.response_model) == ("openai", MODEL, MODEL)
    assert (call.response_id, call.finish_reason) == (
        ("resp_fake", "completed") if api == "responses" else ("chatcmpl-fake", "stop"))
    # 200 input tokens at 1.25, 800 cached at 0.125, 200 output (150 of them reasoning) at 10
    cost = (200 * 1.25 + 800 * 0.125 + 200 * 10) / 1_000_000
    assert call.usage.model_dump() == {"input_tokens": 1000, "output_tokens": 200,
                                       "cached_tokens": 800, "reasoning_tokens": 150,
                                       "cost": pytest.approx(cost)}
    assert done.usage == call.usage


def test_a_response_cut_short_says_why_it_finished(fake: FakeOpenAI) -> None:
    app = dormant.App(name="timed")
    rest = app.handler.rest(agent=app.agent(name="a", model=_model(fake)))
    fake.script(responses_stream("The answer is", final="response.incomplete"))

    rest({"session_id": "s1", "input": {"message": "hi"}})

    session = app.sessions.get("s1")
    assert session is not None
    timing = session.events[-1].timing  # type: ignore[union-attr]
    assert timing is not None
    assert timing.model_calls[0].finish_reason == "max_output_tokens"
    assert timing.model_calls[0].usage.cost is None  # no price table: no cost


def test_construction_errors_are_config_errors() -> None:
    with pytest.raises(ValueError, match="api must be one of"):
        OpenAIModel("gpt-5.6-luna", api="completions")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not both"):
        OpenAIModel("gpt-5.6-luna", client=openai.OpenAI(api_key="test-key"), api_key="k")


def test_neither_importing_dormant_nor_building_the_model_imports_openai() -> None:
    code = ("import sys, dormant, dormant.models, dormant.handlers; "
            "assert 'openai' not in sys.modules, 'openai imported'; "
            "model = dormant.models.OpenAIModel('gpt-5.6-luna', api_key='sk-test'); "
            "assert 'openai' not in sys.modules, 'openai imported by the constructor'; "
            "model._openai(); assert 'openai' in sys.modules")

    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_missing_openai_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)

    with pytest.raises(ImportError, match=r"pip install 'dormant\[openai\]'"):
        OpenAIModel("gpt-5.6-luna", api_key="sk-test")
