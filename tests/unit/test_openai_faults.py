"""Three OpenAI adapter faults, on the wire: a stream event that is not JSON, a model error's
own code and ``retryable`` reaching every caller (turn result, REST ``error``, AG-UI
``RUN_ERROR``, the ledger's ``invocation_failed``), and reasoning items with null fields sent
back."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant.http import build_resolver
from dormant.models import (
    AssistantMessage,
    ModelError,
    ModelRequest,
    OpenAIModel,
    ToolCallPart,
    ToolMessage,
    UserMessage,
)
from dormant.tools import Signal, ToolContext
from tests._http import post_event
from tests.unit.openai_fake import Call, FakeOpenAI, chat_stream, error, responses_stream

APIS = ["responses", "chat_completions"]
OVERFLOW = ("This model's maximum context length is 128000 tokens. However, your messages "
            "resulted in 131072 tokens.")


def _model(fake: FakeOpenAI, api: str = "responses") -> OpenAIModel:
    return OpenAIModel("gpt-5.6-luna", api=api,  # type: ignore[arg-type]
                       base_url=fake.base_url, api_key="test-key", max_retries=0)


def _garbled(api: str) -> Any:
    """A stream whose third event's data is not JSON (a proxy's truncated write)."""
    reply = (responses_stream if api == "responses" else chat_stream)("Part of an answer.")
    assert reply.events is not None
    name, _ = reply.events[2]
    reply.events[2] = (name, '{"type": "response.output_text.delta", "delta": "an')
    return reply


def _api(fake: FakeOpenAI) -> tuple[dormant.App, Any]:
    app = dormant.App(name="faults")
    agent = app.agent(name="a", model=_model(fake), context=[app.context.history()])
    return app, build_resolver(app, agent)


# --- a stream event that is not JSON ----------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_a_stream_event_that_is_not_json_is_an_incomplete_stream(fake: FakeOpenAI,
                                                                api: str) -> None:
    fake.script(_garbled(api))

    with pytest.raises(ModelError) as caught:
        list(_model(fake, api).stream(ModelRequest(system=[], tools=[],
                                                   messages=[UserMessage("Hi")]),
                                      signal=Signal()))

    failure = caught.value
    assert failure.code == "stream_incomplete" and failure.retryable
    assert "gpt-5.6-luna" in str(failure) and "not JSON" in str(failure)
    assert "nothing of this step was kept" in str(failure)


def test_a_turn_on_a_garbled_stream_fails_retryably_and_keeps_nothing(
        fake: FakeOpenAI, caplog: pytest.LogCaptureFixture) -> None:
    app = dormant.App(name="garbled")
    agent = app.agent(name="a", model=_model(fake), context=[app.context.history()])
    fake.script(_garbled("responses"))

    response = app.handler.rest(agent=agent)({"session_id": "thread-1",
                                              "input": {"message": "Hi"}})

    assert (response.status, response.code, response.retryable) == (
        "error", "stream_incomplete", True)
    assert response.commit_status is None and app.sessions.get("thread-1") is None
    assert not [r for r in caplog.records if r.exc_info]  # the model's failure, not a bug


# --- the model error's own code and retryable -------------------------------------------------


def test_a_context_overflow_reaches_rest_as_itself_and_not_retryable(fake: FakeOpenAI) -> None:
    _, resolver = _api(fake)
    fake.script(error(400, OVERFLOW, code="context_length_exceeded", param="input"))

    out = resolver.resolve(post_event("/turns", {"sessionId": "thread-2", "message": "Hi"}),
                           None)

    body = json.loads(out["body"])
    assert out["statusCode"] == 502
    assert (body["code"], body["retryable"]) == ("context_overflow", False)
    assert "128000" not in body["message"]  # the provider's text stays in the log
    assert body["requestId"] == "r-1"


def test_a_rate_limit_reaches_rest_as_itself_and_retryable(fake: FakeOpenAI) -> None:
    _, resolver = _api(fake)
    fake.script(error(429, "Rate limit reached", code="rate_limit_exceeded",
                      kind="requests", headers={"retry-after": "0"}))

    out = resolver.resolve(post_event("/turns", {"message": "Hi"}), None)

    body = json.loads(out["body"])
    assert (out["statusCode"], body["code"], body["retryable"]) == (502, "rate_limited", True)


def test_the_agui_run_error_carries_the_models_code(fake: FakeOpenAI) -> None:
    _, resolver = _api(fake)
    fake.script(error(400, OVERFLOW, code="context_length_exceeded"))
    run = {"threadId": "thread-3", "runId": "run-1", "state": {}, "tools": [], "context": [],
           "forwardedProps": {}, "messages": [{"id": "m1", "role": "user", "content": "Hi"}]}

    out = resolver.resolve(post_event("/agui", run), None)

    errors = [json.loads(line[len("data: "):]) for line in out["body"].splitlines()
              if line.startswith("data: ") and '"RUN_ERROR"' in line]
    assert [e["code"] for e in errors] == ["context_overflow"]


class Archive(BaseModel):
    year: int


def test_an_overflow_after_a_tool_ran_is_recorded_and_answered_as_not_retryable(
        fake: FakeOpenAI) -> None:
    app = dormant.App(name="after-tool")
    deleted: list[int] = []

    def delete(ctx: ToolContext) -> dict[str, Any]:
        deleted.append(ctx.args.year)
        return {"deleted": ctx.args.year}

    delete_archive = app.tool(name="delete_archive", description="Delete an archive",
                              schema=Archive, execute=delete)
    agent = app.agent(name="a", model=_model(fake), tools=[delete_archive],
                      context=[app.context.history()])
    fake.script(responses_stream("", [Call("delete_archive", {"year": 2019}, "call_del")]),
                error(400, OVERFLOW, code="context_length_exceeded"))

    response = app.handler.rest(agent=agent)({"session_id": "thread-4",
                                              "input": {"message": "Delete 2019"}})

    assert deleted == [2019] and response.commit_status == "committed"
    assert (response.status, response.code, response.retryable) == (
        "error", "context_overflow", False)
    session = app.sessions.get("thread-4")
    assert session is not None
    (failed,) = [e for e in session.events if e.type == "invocation_failed"]
    assert (failed.code, failed.retryable) == ("context_overflow", False)


# --- reasoning items replayed -----------------------------------------------------------------


def test_replayed_reasoning_items_drop_null_fields(fake: FakeOpenAI) -> None:
    fake.script(responses_stream("Done."))
    item = {"type": "reasoning", "id": "rs_1", "status": None, "content": None,
            "summary": [{"type": "summary_text", "text": "Look it up."}],
            "encrypted_content": "gAAAA-enc-1"}
    call = ToolCallPart("call_stay", "lookup_stay", {"booking": "B-7"})
    request = ModelRequest(system=[], tools=[], messages=[
        UserMessage("How long is B-7?"), AssistantMessage("", (call,), reasoning=(item,)),
        ToolMessage("call_stay", "lookup_stay", '{"nights": 3}')])

    list(_model(fake).stream(request, signal=Signal()))

    sent = fake.requests[0].body["input"][1]
    assert sent == {"type": "reasoning", "id": "rs_1",
                    "summary": [{"type": "summary_text", "text": "Look it up."}],
                    "encrypted_content": "gAAAA-enc-1"}


def test_every_code_an_openai_adapter_reports_has_a_status_of_its_own() -> None:
    from dormant.errors import HTTP_STATUS, MODEL_ERROR_CODES
    from dormant.models._openai_errors import API_CODES, STATUS, classify

    codes = {code for code, _ in [*STATUS.values(), *API_CODES.values()]}
    codes |= {classify(status)[0] for status in (418, 500, 503)}
    codes |= {classify(None, "a_code_of_the_servers_own")[0]}
    assert codes <= {*MODEL_ERROR_CODES, "model_error"}
    assert {HTTP_STATUS[code] for code in codes} == {502}
