"""A history holding a call another provider ran itself (a Bedrock server tool, in a session
that switched to an OpenAI model): neither OpenAI API takes it as a function call (no such
function, and no output of ours), so it is told in the assistant's text, through the official
client and the local fake."""

from __future__ import annotations

from typing import Any

import pytest

from dormant.models import (
    AssistantMessage,
    ModelRequest,
    OpenAIModel,
    ToolCallPart,
    ToolMessage,
    UserMessage,
)
from dormant.tools import Signal
from tests.unit.openai_fake import FakeOpenAI, chat_stream, responses_stream

HISTORY = [
    UserMessage("Weather in Lisbon, and my booking?"),
    AssistantMessage("Let me look.", tool_calls=(
        ToolCallPart("srv_1", "nova_grounding", {"query": "Lisbon"}, provider_executed=True,
                     provider_metadata={"type": "server_tool_use"}),
        ToolCallPart("call_2", "lookup_stay", {"ref": "BK-1"}))),
    ToolMessage("srv_1", "nova_grounding", '[{"text": "Sunny"}]', provider_executed=True),
    ToolMessage("call_2", "lookup_stay", '{"nights": 3}'),
    UserMessage("Thanks"),
]
TOLD = '[nova_grounding ran on the model provider\'s side and returned: [{"text": "Sunny"}]]'


@pytest.mark.parametrize("api", ["responses", "chat_completions"])
def test_a_provider_executed_pair_is_told_as_text_and_the_rest_is_sent_as_calls(
        fake: FakeOpenAI, api: str) -> None:
    fake.script((responses_stream if api == "responses" else chat_stream)("You're welcome."))
    model = OpenAIModel("gpt-5.6-luna", api=api,  # type: ignore[arg-type]
                        base_url=fake.base_url, api_key="test-key")

    list(model.stream(ModelRequest(system=[], tools=[], messages=HISTORY), signal=Signal()))

    body: dict[str, Any] = fake.requests[0].body
    if api == "responses":
        calls = [i for i in body["input"] if i.get("type") == "function_call"]
        outputs = [i for i in body["input"] if i.get("type") == "function_call_output"]
        said = [i["content"] for i in body["input"] if i.get("role") == "assistant"]
    else:
        calls = [c | {"call_id": c["id"]} for m in body["messages"]
                 for c in m.get("tool_calls") or ()]
        outputs = [m | {"call_id": m["tool_call_id"]} for m in body["messages"]
                   if m["role"] == "tool"]
        said = [m["content"] for m in body["messages"] if m["role"] == "assistant"]
    assert [c["call_id"] for c in calls] == ["call_2"]
    assert [o["call_id"] for o in outputs] == ["call_2"]
    # told in the text of the message that made it: Chat Completions wants a call's tool
    # message right after its assistant message, with no other message between
    assert said == [f"Let me look.\n{TOLD}"]
    if api == "chat_completions":
        roles = [m["role"] for m in body["messages"]]
        assert roles == ["user", "assistant", "tool", "user"]
