"""A server whose event stream carries SSE ``retry:`` fields (legal: it sets the reconnection
time and dispatches no event), through the official ``openai`` client and the local fake.

The ``openai`` package's decoder (``openai/_streaming.py``, ``SSEDecoder.decode``) dispatches
an event with empty data at the blank line after a lone ``retry:`` field, which its stream
then fails to parse as JSON; dormant's adapter drops such events, as the SSE spec does."""

from __future__ import annotations

from typing import Any

import pytest

import dormant
from dormant.models import ModelRequest, OpenAIModel, TextDelta, ToolCallChunk, UserMessage
from dormant.tools import Signal
from tests.unit.openai_fake import Call, FakeOpenAI, Reply, chat_stream, responses_stream

APIS = ["responses", "chat_completions"]


def _stream(api: str, *args: Any, **kwargs: Any) -> Reply:
    return (responses_stream if api == "responses" else chat_stream)(*args, **kwargs)


def _model(fake: FakeOpenAI, api: str) -> OpenAIModel:
    return OpenAIModel("gpt-5.6-luna", api=api,  # type: ignore[arg-type]
                       base_url=fake.base_url, api_key="test-key", max_retries=0)


@pytest.mark.parametrize("between", [False, True], ids=["before", "between"])
@pytest.mark.parametrize("api", APIS)
def test_a_stream_with_retry_fields_is_read_whole(fake: FakeOpenAI, api: str,
                                                  between: bool) -> None:
    reply = _stream(api, "Sunny in Lisbon.", [Call("lookup", {"city": "Lisbon"}, "call_1")])
    reply.retry, reply.retry_between = 3000, between
    fake.script(reply)
    request = ModelRequest(system=[], tools=[], messages=[UserMessage("Weather?")])

    chunks = list(_model(fake, api).stream(request, signal=Signal()))

    assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == "Sunny in Lisbon."
    assert [(c.call_id, c.name) for c in chunks if isinstance(c, ToolCallChunk)] == [
        ("call_1", "lookup")]
    assert len(fake.requests) == 1  # read once, no retry needed


@pytest.mark.parametrize("api", APIS)
def test_a_turn_against_a_server_sending_retry_fields_succeeds(fake: FakeOpenAI,
                                                               api: str) -> None:
    reply = _stream(api, "Hello from a server with retry fields.")
    reply.retry, reply.retry_between = 3000, True
    fake.script(reply)
    app = dormant.App(name="sse")
    agent = app.agent(name="a", model=_model(fake, api))

    done = app.handler.rest(agent=agent)({"session_id": "r1", "input": {"message": "hi"}})

    assert done.status == "completed"
    assert done.output.text == "Hello from a server with retry fields."
