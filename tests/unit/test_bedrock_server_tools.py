"""Bedrock's own tools (``BedrockModel(system_tools=[...])``) through the app and the fake
(botocore's codec and validator on both sides): a ``server_tool_use`` call is recorded with its
result as the provider returned it, never run here, and sent back the way Converse wants it."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from pydantic import BaseModel

import dormant
from dormant.errors import ConfigError
from dormant.events import ToolCall, ToolResult
from dormant.models import AssistantMessage, BedrockModel, ModelRequest, UserMessage
from dormant.tools import Signal
from tests.bedrock_fake import MODEL, Call, FakeBedrock, Served, converse_stream, fake_bedrock

GROUNDING = "nova_grounding"
SEARCH = Served(Call(GROUNDING, {"query": "Lisbon weather"}, "tooluse_ground"),
                content=({"text": "Sunny, 24 C in Lisbon today."},
                         {"json": {"source": "https://example.org/lisbon"}}))


class Stay(BaseModel):
    ref: str


@pytest.fixture()
def bedrock() -> Iterator[FakeBedrock]:
    with fake_bedrock() as server:
        yield server


@functools.cache
def _session() -> boto3.session.Session:
    return boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing",
                                 region_name="us-east-1")


def _model(fake: FakeBedrock, **options: Any) -> BedrockModel:
    client = _session().client("bedrock-runtime", endpoint_url=fake.url,
                               config=Config(retries={"total_max_attempts": 1,
                                                      "mode": "standard"}))
    return BedrockModel(MODEL, client=client, **options)


def _agent(app: dormant.App, fake: FakeBedrock, ran: list[str]) -> dormant.Agent:
    def lookup(ctx: dormant.ToolContext) -> Any:
        ran.append(ctx.call_id)
        return {"ref": ctx.args.ref, "nights": 3}

    stay = app.tool(name="lookup_stay", description="Look up a booking", schema=Stay,
                    execute=lookup)
    return app.agent(name="guide", model=_model(fake, system_tools=[GROUNDING]),
                     context=[app.context.system("You are a guide."), app.context.history()],
                     tools=[stay])


def _events(app: dormant.App, sid: str) -> list[Any]:
    session = app.sessions.get(sid)
    assert session is not None
    return [e for e in session.events if e.type != "state_delta"]


def test_a_server_tool_is_recorded_not_run_and_sent_back_on_the_next_turn(
        bedrock: FakeBedrock) -> None:
    app = dormant.App(name="bedrock")
    ran: list[str] = []
    rest = app.handler.rest(agent=_agent(app, bedrock, ran))
    bedrock.script(converse_stream("It is sunny in Lisbon.", served=[SEARCH]),
                   converse_stream("Yes, take sunglasses."))

    first = rest({"session_id": "g1", "input": {"message": "Weather in Lisbon?"}})

    # one model call: the provider's result satisfies the step, nothing loops or runs here
    assert first.status == "completed" and first.output.text == "It is sunny in Lisbon."
    assert len(bedrock.requests) == 1 and ran == []
    assert {"systemTool": {"name": GROUNDING}} in bedrock.requests[0].body["toolConfig"]["tools"]
    events = _events(app, "g1")
    assert [e.type for e in events] == ["invocation_start", "user", "assistant", "tool_call",
                                        "tool_result", "invocation_end"]
    call, result = events[3], events[4]
    assert isinstance(call, ToolCall) and isinstance(result, ToolResult)
    assert (call.call_id, call.name, call.args) == ("tooluse_ground", GROUNDING,
                                                    {"query": "Lisbon weather"})
    assert call.provider_executed and call.provider_metadata == {"type": "server_tool_use"}
    assert result.provider_executed and result.error is None
    assert result.result == [{"text": "Sunny, 24 C in Lisbon today."},
                             {"json": {"source": "https://example.org/lisbon"}}]
    assert result.provider_metadata == {"type": "nova_grounding_results"}

    second = rest({"session_id": "g1", "input": {"message": "Sunglasses?"}})

    assert second.status == "completed" and second.output.text == "Yes, take sunglasses."
    # the fake accepted it (botocore's request shape and Converse's rules); the pair sits in
    # the assistant's message, the result right after its call
    assistant = bedrock.requests[1].messages[1]
    assert assistant["role"] == "assistant"
    assert assistant["content"][1:] == [
        {"toolUse": {"toolUseId": "tooluse_ground", "name": GROUNDING,
                     "input": {"query": "Lisbon weather"}, "type": "server_tool_use"}},
        {"toolResult": {"toolUseId": "tooluse_ground", "type": "nova_grounding_results",
                        "content": [{"text": "Sunny, 24 C in Lisbon today."},
                                    {"json": {"source": "https://example.org/lisbon"}}]}}]
    assert assistant["content"][0] == {"text": "It is sunny in Lisbon."}


def test_a_server_tool_beside_a_local_call_runs_only_the_local_one(bedrock: FakeBedrock) -> None:
    app = dormant.App(name="bedrock")
    ran: list[str] = []
    rest = app.handler.rest(agent=_agent(app, bedrock, ran))
    bedrock.script(converse_stream("", [Call("lookup_stay", {"ref": "BK-7"}, "tu_stay")],
                                   served=[SEARCH]),
                   converse_stream("Three nights, and sunny."))

    done = rest({"session_id": "g2", "input": {"message": "My stay and the weather?"}})

    assert done.status == "completed" and ran == ["tu_stay"]
    second = bedrock.requests[1]
    assistant, answers = second.messages[1], second.messages[2]
    assert [next(iter(b)) for b in assistant["content"]] == ["toolUse", "toolResult", "toolUse"]
    assert assistant["content"][0]["toolUse"]["type"] == "server_tool_use"
    assert "type" not in assistant["content"][2]["toolUse"]
    assert answers["role"] == "user" and [b["toolResult"]["toolUseId"]
                                          for b in answers["content"]] == ["tu_stay"]


def test_a_server_tool_whose_result_never_came_is_an_error_the_model_reads(
        bedrock: FakeBedrock) -> None:
    app = dormant.App(name="bedrock")
    ran: list[str] = []
    rest = app.handler.rest(agent=_agent(app, bedrock, ran))
    lost = converse_stream("", served=[SEARCH], stop="tool_use")
    # the same stream without the toolResult block (block 1: its start, deltas and stop)
    lost.frames[:] = [f for f in lost.frames
                      if b"toolResult" not in f and b'"contentBlockIndex": 1}' not in f]
    bedrock.script(lost, converse_stream("The search failed; I do not know."))

    done = rest({"session_id": "g3", "input": {"message": "Weather?"}})

    assert done.status == "completed" and ran == []
    (result,) = [e for e in _events(app, "g3") if isinstance(e, ToolResult)]
    assert not result.provider_executed
    assert result.error == (f"{GROUNDING} ran on the model's provider, but its result did not "
                            "come in the response")
    # sent as an ordinary call and its error, which Converse takes
    second = bedrock.requests[1]
    (use,) = second.blocks("toolUse")
    assert "type" not in use
    (sent,) = second.blocks("toolResult")
    assert sent["status"] == "error" and sent["toolUseId"] == "tooluse_ground"


def test_an_approval_policy_on_a_system_tool_is_refused_when_the_agent_is_built(
        bedrock: FakeBedrock) -> None:
    app = dormant.App(name="bedrock")

    with pytest.raises(ConfigError) as refused:
        app.agent(name="guide", model=_model(bedrock, system_tools=[GROUNDING]),
                  tool_approval={GROUNDING: "user-approval"})

    assert "provider runs inside the model call" in str(refused.value)
    assert "no approval can be asked first" in str(refused.value)


def test_a_blank_user_text_from_an_old_ledger_is_never_sent(bedrock: FakeBedrock) -> None:
    bedrock.script(converse_stream("Booked."))
    request = ModelRequest(system=["You book rooms."], tools=[], messages=[
        UserMessage("Book a room"), AssistantMessage("Which night?"), UserMessage("  \n "),
        UserMessage("Friday")])

    chunks = list(_model(bedrock).stream(request, signal=Signal()))

    assert chunks  # the fake took it: no blank text block (Bedrock refuses one)
    sent = bedrock.requests[0].messages
    assert sent[-1] == {"role": "user", "content": [{"text": "Friday"}]}
    assert all(b.get("text", "x").strip() for m in sent for b in m["content"])


def test_system_tool_names_bedrock_cannot_take_are_refused() -> None:
    with pytest.raises(ConfigError) as refused:
        BedrockModel(MODEL, system_tools=["web search"])
    assert "'web search'" in str(refused.value)
