"""Seed 003's tool-call fields (provider-executed, provider metadata, tool metadata) survive
every store: what a turn recorded is what a later request loads and sends the model."""

from __future__ import annotations

from pydantic import BaseModel

import dormant
from dormant.events import ToolCall, ToolResult
from dormant.models import AssistantMessage, ScriptedModel, ToolCallPart, ToolMessage
from dormant.stores import Store


class Ticket(BaseModel):
    ticket: str


def test_tool_call_fields_are_stored_and_sent_back(store: Store) -> None:
    app = dormant.App(name="meta", store=store)
    refund = app.tool(name="refund", schema=Ticket, execute=lambda ctx: {"ok": True},
                      metadata={"owner": "billing"})
    scripted = ScriptedModel([
        {"tool_calls": [
            {"name": "web_search", "args": {"q": "policy"}, "id": "srv_1",
             "provider_executed": True, "provider_metadata": {"type": "server_tool_use"},
             "result": [{"text": "30 days"}]},
            {"name": "refund", "args": {"ticket": "T-1"}, "id": "call_r",
             "provider_metadata": {"itemId": "fc_1"}}]},
        "Refunded within the 30 days.", "You're welcome."])
    agent = app.agent(name="desk", model=scripted, tools=[refund])
    rest = app.handler.rest(agent=agent)

    assert rest({"session_id": "k1", "input": {"message": "refund T-1"}}).status == "completed"
    assert rest({"session_id": "k1", "input": {"message": "thanks"}}).status == "completed"

    session = app.sessions.get("k1")
    assert session is not None
    calls = [e for e in session.events if isinstance(e, ToolCall)]
    assert [(c.call_id, c.provider_executed, c.provider_metadata, c.tool_metadata)
            for c in calls] == [
        ("srv_1", True, {"type": "server_tool_use"}, None),
        ("call_r", False, {"itemId": "fc_1"}, {"owner": "billing"})]
    results = [e for e in session.events if isinstance(e, ToolResult)]
    assert [(r.call_id, r.provider_executed, r.result) for r in results] == [
        ("srv_1", True, [{"text": "30 days"}]), ("call_r", False, {"ok": True})]
    # the third model call (a new request, the history loaded from the store)
    messages = scripted.requests[2].messages
    (assistant, _) = [m for m in messages if isinstance(m, AssistantMessage)]
    assert assistant.tool_calls == (
        ToolCallPart("srv_1", "web_search", {"q": "policy"}, provider_executed=True,
                     provider_metadata={"type": "server_tool_use"}),
        ToolCallPart("call_r", "refund", {"ticket": "T-1"},
                     provider_metadata={"itemId": "fc_1"}, tool_metadata={"owner": "billing"}))
    assert [m for m in messages if isinstance(m, ToolMessage)] == [
        ToolMessage("srv_1", "web_search", '[{"text": "30 days"}]', provider_executed=True),
        ToolMessage("call_r", "refund", '{"ok": true}')]
