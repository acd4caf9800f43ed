"""OpenAIModel served through ``app.handler.rest``: seed 000 end to end, usage, failures."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant.models import OpenAIModel
from tests.unit.openai_fake import Call, FakeOpenAI, chat_stream, error, responses_stream

APIS = ["responses", "chat_completions"]
DELETE = Call("request_approval", {"action": "delete the 2019 archive"}, "call_del")


class Action(BaseModel):
    action: str


class Decision(BaseModel):
    approved: bool
    note: str | None = None


class Stay(BaseModel):
    booking: str


def _prepare(ctx: dormant.ToolContext) -> Any:
    ctx.state["pending_action"] = ctx.args.action
    return ctx.args


def _execute(ctx: dormant.ToolContext) -> Any:
    if not ctx.input or not ctx.input.approved:
        return {"action": ctx.args.action, "status": "declined"}
    return {"action": ctx.args.action, "status": "performed", "note": ctx.input.note}


def _finalize(ctx: dormant.ToolContext) -> None:
    ctx.state.pop("pending_action", None)


@pytest.fixture()
def app() -> dormant.App:
    return dormant.App(name="seed-000")


def _operator(app: dormant.App, fake: FakeOpenAI, api: str) -> dormant.Agent:
    request_approval = app.tool(
        name="request_approval",
        description="Ask a human to approve an action before performing it",
        schema=Action, yield_schema=Decision,
        prepare=_prepare, execute=_execute, finalize=_finalize,
    )
    lookup_stay = app.tool(name="lookup_stay", description="How long a stay is",
                           schema=Stay, execute=lambda ctx: {"nights": 3})
    model = OpenAIModel("gpt-5.6-luna", api=api,  # type: ignore[arg-type]
                        base_url=fake.base_url, api_key="test-key")
    return app.agent(
        name="operator", model=model,
        context=[app.context.system("Ask for approval before any destructive action."),
                 app.context.history()],
        tools=[request_approval, lookup_stay],
    )


def _reply(api: str, *args: Any, **kwargs: Any) -> Any:
    return (responses_stream if api == "responses" else chat_stream)(*args, **kwargs)


def _types(session: dormant.Session) -> list[str]:
    return [e.type for e in session.events if e.type != "state_delta"]


def _tool_outputs(api: str, body: dict[str, Any]) -> list[tuple[str, Any]]:
    if api == "responses":
        return [(i["call_id"], json.loads(i["output"])) for i in body["input"]
                if i.get("type") == "function_call_output"]
    return [(m["tool_call_id"], json.loads(m["content"])) for m in body["messages"]
            if m["role"] == "tool"]


@pytest.mark.parametrize("api", APIS)
def test_seed_000_yield_answer_finish_through_openai(app: dormant.App, fake: FakeOpenAI,
                                                     api: str) -> None:
    rest = app.handler.rest(agent=_operator(app, fake, api))
    fake.script(_reply(api, "", [DELETE]))

    paused = rest({"input": {"message": "Delete the 2019 archive"}})

    assert paused.status == "yielded_tool"
    assert [(y.call_id, y.name, y.args) for y in paused.yielded_tools or []] == [
        ("call_del", "request_approval", {"action": "delete the 2019 archive"})]
    asleep = app.sessions.get(paused.session_id)
    assert asleep is not None and asleep.status == "awaiting_input"
    assert asleep.state["pending_action"] == "delete the 2019 archive"
    assert _types(asleep) == ["invocation_start", "user", "tool_call", "tool_yield",
                              "invocation_yield"]

    fake.script(_reply(api, "Archive deleted."))
    done = rest({"session_id": paused.session_id, "input": {"tools": [
        {"call_id": "call_del", "input": {"approved": True, "note": "Owner signed off"}}]}})

    assert done.status == "completed"
    assert done.output.text == "Archive deleted."
    finished = app.sessions.get(paused.session_id)
    assert finished is not None and "pending_action" not in finished.state
    assert _types(finished) == [
        "invocation_start", "user", "tool_call", "tool_yield", "invocation_yield",
        "tool_input", "invocation_resume", "tool_result", "assistant", "invocation_end"]
    assert _tool_outputs(api, fake.requests[1].body) == [
        ("call_del", {"action": "delete the 2019 archive", "status": "performed",
                      "note": "Owner signed off"})]


@pytest.mark.parametrize("api", APIS)
def test_usage_of_every_model_call_is_summed_into_the_turn(app: dormant.App, fake: FakeOpenAI,
                                                           api: str) -> None:
    rest = app.handler.rest(agent=_operator(app, fake, api), response={"usage": True})
    fake.script(_reply(api, "", [Call("lookup_stay", {"booking": "B-7"}, "call_stay")],
                       usage=(100, 20, 0)),
                _reply(api, "Three nights.", usage=(140, 6, 96)))

    response = rest({"input": {"message": "How long is booking B-7?"}})

    assert response.status == "completed" and response.output.text == "Three nights."
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens,
            response.usage.cached_tokens) == (240, 26, 96)
    assert response.wire()["usage"]


@pytest.mark.parametrize("api", APIS)
def test_a_rate_limited_call_is_retried_inside_the_turn(app: dormant.App, fake: FakeOpenAI,
                                                        api: str) -> None:
    rest = app.handler.rest(agent=_operator(app, fake, api))
    fake.script(error(429, "Rate limit reached", code="rate_limit_exceeded",
                      headers={"retry-after-ms": "2"}),
                _reply(api, "Hello."))

    response = rest({"input": {"message": "Hi"}})

    assert response.status == "completed" and response.output.text == "Hello."
    assert response.commit_status == "committed"


@pytest.mark.parametrize("api", APIS)
def test_an_auth_failure_is_an_error_result_and_commits_nothing(
        app: dormant.App, fake: FakeOpenAI, api: str) -> None:
    rest = app.handler.rest(agent=_operator(app, fake, api))
    fake.script(error(401, "Incorrect API key provided: test-key.", code="invalid_api_key"))

    response = rest({"session_id": "thread-42", "input": {"message": "Hi"}})

    assert response.status == "error"
    assert response.error is not None
    assert "401" in response.error and "OPENAI_API_KEY" in response.error
    assert response.commit_status is None
    assert app.sessions.get("thread-42") is None


@pytest.mark.parametrize("api", APIS)
def test_a_context_overflow_after_the_tool_ran_keeps_its_result_and_fails_the_session(
        app: dormant.App, fake: FakeOpenAI, api: str) -> None:
    rest = app.handler.rest(agent=_operator(app, fake, api))
    fake.script(_reply(api, "", [DELETE]))
    paused = rest({"input": {"message": "Delete the 2019 archive"}})
    answer = {"session_id": paused.session_id, "input": {"tools": [
        {"call_id": "call_del", "input": {"approved": True}}]}}
    fake.script(error(400, "This model's maximum context length is 128000 tokens.",
                      code="context_length_exceeded", param="input"))

    failed = rest(answer)

    # The answer was claimed and the tool ran before the model failed: that is kept.
    assert failed.status == "error" and failed.commit_status == "committed"
    assert failed.error is not None and "maximum context length" in failed.error
    after = app.sessions.get(paused.session_id)
    assert after is not None and after.status == "failed"
    assert [e.type for e in after.events if e.type != "state_delta"][-3:] == [
        "invocation_resume", "tool_result", "invocation_failed"]
    assert rest(answer).code == "already_answered"  # the same answer never runs twice

    fake.script(_reply(api, "Archive deleted."))
    retried = rest({"session_id": paused.session_id, "input": {"retry": {"retry_id": "r1"}}})
    assert retried.status == "completed" and retried.output.text == "Archive deleted."


@pytest.mark.parametrize("api", APIS)
def test_an_aborted_turn_closes_the_stream_and_commits_nothing(
        app: dormant.App, fake: FakeOpenAI, api: str) -> None:
    turn = app.handler.turn(agent=_operator(app, fake, api))
    reply = _reply(api, "A long answer that the user will not wait for.")
    assert reply.events is not None
    reply.pause_after = 1 + next(i for i, (kind, event) in enumerate(reply.events)
                                 if kind == "response.output_text.delta"
                                 or (kind is None and event["choices"][0]["delta"].get("content")))
    fake.script(reply)
    stream = turn({"session_id": "thread-7", "input": {"message": "Tell me everything"}})

    first = next(e for e in stream if e.type == "assistant_delta")
    stream.abort()
    leftover = list(stream)
    reply.release.set()

    assert first.delta and all(e.type != "assistant" for e in leftover)
    assert stream.result is not None and stream.result.status == "error"
    assert stream.result.code == "aborted" and stream.result.commit_status is None
    assert app.sessions.get("thread-7") is None
    assert reply.finished.wait(5) and reply.disconnected
