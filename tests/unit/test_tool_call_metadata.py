"""Seed 003: "Dynamic-tool, provider-executed, provider metadata, and tool metadata fields
carry through to the message" — from the tool's definition and the model's chunk to the
ledger's ``tool_call``, the next model request and the REST view; and a blank message is
refused at the boundary."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant._run.loop import Start, drain, run_turn
from dormant.errors import ConfigError, InputError
from dormant.events import InvocationStart, ToolCall, ToolResult, UserEvent
from dormant.http import build_resolver
from dormant.models import AssistantMessage, ScriptedModel, ToolCallPart, ToolMessage
from tests._http import get, post


class Ticket(BaseModel):
    ticket: str


class Answer(BaseModel):
    answer: str


OWNER = {"owner": "billing", "risk": 2, "tags": ["refund"]}


def _desk(replies: list[Any]) -> tuple[dormant.App, dormant.Agent, ScriptedModel, list[str]]:
    app = dormant.App(name="desk")
    ran: list[str] = []

    def refund(ctx: dormant.ToolContext) -> Any:
        ran.append(ctx.call_id)
        return {"refunded": ctx.args.ticket}

    tool = app.tool(name="refund", description="Refund a ticket", schema=Ticket,
                    execute=refund, metadata=OWNER)
    scripted = ScriptedModel(replies)
    return app, app.agent(name="desk", model=scripted, tools=[tool]), scripted, ran


def _calls(app: dormant.App, sid: str) -> list[ToolCall]:
    session = app.sessions.get(sid)
    assert session is not None
    return [e for e in session.events if isinstance(e, ToolCall)]


def test_tool_and_provider_metadata_land_on_the_call_and_reach_the_next_request() -> None:
    app, agent, scripted, ran = _desk([
        {"tool_calls": [{"name": "refund", "args": {"ticket": "T-1"}, "id": "call_r",
                         "provider_metadata": {"itemId": "fc_9", "status": "completed"}}]},
        "Refunded."])

    done = app.handler.rest(agent=agent)({"session_id": "m1", "input": {"message": "refund"}})

    assert done.status == "completed" and ran == ["call_r"]
    (call,) = _calls(app, "m1")
    assert call.tool_metadata == OWNER
    assert call.provider_metadata == {"itemId": "fc_9", "status": "completed"}
    assert not call.provider_executed and not call.dynamic
    (assistant,) = [m for m in scripted.requests[1].messages
                    if isinstance(m, AssistantMessage)]
    assert assistant.tool_calls == (ToolCallPart(
        "call_r", "refund", {"ticket": "T-1"},
        provider_metadata={"itemId": "fc_9", "status": "completed"}, tool_metadata=OWNER),)


def test_a_provider_executed_call_is_recorded_not_run_and_its_result_is_the_message() -> None:
    app, agent, scripted, ran = _desk([
        {"text": "Searched.", "tool_calls": [
            {"name": "web_search", "args": {"q": "refund policy"}, "id": "srv_1",
             "provider_executed": True, "provider_metadata": {"type": "server_tool_use"},
             "result": {"hits": 2}}]},
        "Two hits, as before."])
    rest = app.handler.rest(agent=agent)

    first = rest({"session_id": "m2", "input": {"message": "search"}})
    second = rest({"session_id": "m2", "input": {"message": "again?"}})

    # no local tool of that name, and no "Unknown tool" loop: one model call per turn
    assert (first.status, second.status) == ("completed", "completed") and ran == []
    assert len(scripted.requests) == 2
    session = app.sessions.get("m2")
    assert session is not None
    (result,) = [e for e in session.events if isinstance(e, ToolResult)]
    assert result.provider_executed and result.result == {"hits": 2}
    messages = scripted.requests[1].messages
    (assistant,) = [m for m in messages if isinstance(m, AssistantMessage)]
    assert assistant.tool_calls[0].provider_executed
    assert [m for m in messages if isinstance(m, ToolMessage)] == [
        ToolMessage("srv_1", "web_search", '{"hits": 2}', provider_executed=True)]


def test_tool_metadata_must_be_a_json_object() -> None:
    app = dormant.App(name="desk")
    for bad in (["a"], {"when": object()}, {1: "x"}):
        with pytest.raises(ConfigError) as refused:
            app.tool(name="t", schema=Ticket, execute=lambda ctx: None, metadata=bad)
        assert "tool 't': metadata must be" in str(refused.value)

    @app.tool(metadata={"team": "ops"})
    def ping(host: str) -> str:
        return host

    assert ping.metadata == {"team": "ops"}


def test_the_rest_view_shows_a_waiting_calls_tool_metadata() -> None:
    app = dormant.App(name="desk")
    ask = app.tool(name="ask_owner", description="Ask", schema=Ticket, yield_schema=Answer,
                   metadata=OWNER)
    agent = app.agent(name="desk", tools=[ask], model=ScriptedModel([
        {"tool_calls": [{"name": "ask_owner", "args": {"ticket": "T-2"}, "id": "call_a"}]}]))
    resolver = build_resolver(app, agent)
    status, paused = post(resolver, "/turns", {"sessionId": "v1", "message": "ask"})
    assert (status, paused["status"]) == (200, "yielded_tool")

    status, view = get(resolver, "/sessions/v1")

    assert status == 200
    (waiting,) = view["yieldedTools"]
    assert (waiting["callId"], waiting["toolMetadata"]) == ("call_a", OWNER)


@pytest.mark.parametrize("blank", [" ", "\n\t  ", "\u3000"])
def test_a_whitespace_only_message_is_refused_with_422_and_writes_nothing(blank: str) -> None:
    app, agent, scripted, _ = _desk([])
    resolver = build_resolver(app, agent)

    status, body = post(resolver, "/turns", {"sessionId": "b1", "message": blank})

    assert status == 422 and "whitespace" in json.dumps(body)
    assert app.sessions.get("b1") is None and scripted.requests == []
    session = app.sessions.create("b2")
    with pytest.raises(InputError) as refused:
        session.input.message(blank)
    assert "whitespace only" in str(refused.value)
    assert session.events == []


def test_a_provider_executed_call_with_no_result_waits_on_a_deferred_tool_of_its_name() -> None:
    app = dormant.App(name="desk")
    search = app.tool(name="web_search", schema=Ticket, deferred=True)
    scripted = ScriptedModel([
        {"tool_calls": [{"name": "web_search", "args": {"ticket": "T-3"}, "id": "srv_2",
                         "provider_executed": True}]},
        "Found it."])
    agent = app.agent(name="desk", model=scripted, tools=[search])
    rest = app.handler.rest(agent=agent)

    parked = rest({"session_id": "d1", "input": {"message": "search"}})

    assert parked.status == "yielded_tool"
    assert [t.call_id for t in parked.deferred_tools or []] == ["srv_2"]
    (call,) = _calls(app, "d1")
    assert call.provider_executed
    done = rest({"session_id": "d1", "input": {"tool_results": [
        {"call_id": "srv_2", "result": {"found": True}}]}})
    assert done.status == "completed" and done.output.text == "Found it."
    (result,) = [m for m in scripted.requests[1].messages if isinstance(m, ToolMessage)]
    assert (result.content, result.provider_executed) == ('{"found": true}', False)


def test_a_stranded_step_reruns_its_local_calls_not_the_provider_executed_one() -> None:
    """A step whose calls were written ahead, then its request died before its tools ran:
    the provider's result landed with the calls, so only the local call runs again."""
    app, agent, scripted, ran = _desk(["Refunded, and searched."])
    session = app.sessions.create("w1")
    for event in (InvocationStart(invocation_id="inv_1", agent="desk"),
                  UserEvent(invocation_id="inv_1", text="refund and search", message_id="m1"),
                  ToolCall(invocation_id="inv_1", call_id="srv_1", name="web_search",
                           args={"q": "x"}, provider_executed=True),
                  ToolCall(invocation_id="inv_1", call_id="call_r", name="refund",
                           args={"ticket": "T-9"}),
                  ToolResult(invocation_id="inv_1", call_id="srv_1", name="web_search",
                             result={"hits": 1}, provider_executed=True)):
        session.add_event(event)

    result = drain(run_turn(agent, session, Start("inv_1", "tools", hooks=False)))

    assert result.status == "completed" and ran == ["call_r"]
    results = [(e.call_id, e.provider_executed) for e in session.events
               if isinstance(e, ToolResult)]
    assert results == [("srv_1", True), ("call_r", False)]
    assert len(scripted.requests) == 1
