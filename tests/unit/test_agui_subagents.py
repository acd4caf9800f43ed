"""A sub-agent's turn over AG-UI: the run's messages and tool calls are the session agent's
(the call of the sub-agent is one tool call, its final reply that call's result); every
event of the sub-agent is a ``CUSTOM`` ``dormant.subagent`` naming its path and the call it
runs for — its words never join the caller's assistant message. Its approval is an interrupt
like any other, naming the agent; a stock ``resume`` decides it."""

from __future__ import annotations

import json
from typing import Any

from ag_ui.core import BaseEvent
from ag_ui_validate.pytest_plugin import assert_valid_agui
from pydantic import BaseModel

import dormant
from dormant.agui import SUBAGENT, AgUIAdapter, from_run_agent_input
from dormant.handlers import HandlerInput
from dormant.models import ScriptedModel


class Refund(BaseModel):
    booking: str


def conformant(events: list[BaseEvent]) -> list[dict[str, Any]]:
    data = [json.loads(e.model_dump_json(by_alias=True, exclude_none=True)) for e in events]
    assert_valid_agui(data, max_warnings=0)
    return data


def _agents(refunded: list[str]) -> tuple[dormant.App, dormant.Agent]:
    app = dormant.App(name="agui-sub")
    refund = app.tool(name="refund", description="Refund", schema=Refund,
                      execute=lambda ctx: refunded.append(ctx.args.booking) or {"ok": True})
    billing = app.agent(name="billing", tools=[refund], tool_approval={"refund": "user-approval"},
                        model=ScriptedModel([
                            {"text": "Checking the booking.", "tool_calls": [
                                {"name": "refund", "args": {"booking": "BK-1"},
                                 "id": "call_refund"}]},
                            "Refunded BK-1."]))
    concierge = app.agent(name="concierge", tools=[billing.as_tool()], model=ScriptedModel([
        {"text": "Let me ask billing.", "tool_calls": [
            {"name": "billing", "args": {"input": "refund BK-1"}, "id": "call_billing"}]},
        "Billing refunded it."]))
    return app, concierge


def _ui(refunded: list[str]) -> tuple[dormant.App, Any]:
    app, concierge = _agents(refunded)
    return app, app.handler.agui(agent=concierge)


def _body(thread: str, **fields: Any) -> dict[str, Any]:
    return {"threadId": thread, "runId": "client", "state": {}, "tools": [], "context": [],
            "forwardedProps": {}, "messages": [], **fields}


def _texts(events: list[dict[str, Any]]) -> dict[str, str]:
    """Message id -> the text its TEXT_MESSAGE_CONTENT events stream."""
    texts: dict[str, str] = {}
    for event in events:
        if event["type"] == "TEXT_MESSAGE_CONTENT":
            texts[event["messageId"]] = texts.get(event["messageId"], "") + event["delta"]
    return texts


def _sub(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["value"] for e in events if e["type"] == "CUSTOM" and e["name"] == SUBAGENT]


def test_a_sub_agents_events_are_custom_events_not_the_callers_message() -> None:
    refunded: list[str] = []
    _, ui = _ui(refunded)
    paused = conformant(list(ui(from_run_agent_input(_body("t", messages=[
        {"id": "m1", "role": "user", "content": "refund BK-1"}])))))

    assert list(_texts(paused).values()) == ["Let me ask billing."]
    assert [e["toolCallName"] for e in paused if e["type"] == "TOOL_CALL_START"] == ["billing"]
    sub = _sub(paused)
    assert {(v["agent"], v["callId"]) for v in sub} == {("concierge/billing", "call_billing")}
    said = "".join(v["event"]["delta"] for v in sub if v["event"]["type"] == "assistant_delta")
    assert said == "Checking the booking."
    assert [v["event"]["type"] for v in sub if v["event"]["type"].startswith(
        ("tool_call", "approval"))] == ["tool_call", "approval_requested"]

    [interrupt] = paused[-1]["outcome"]["interrupts"]
    assert interrupt["reason"] == "tool_approval"
    assert interrupt["toolCallId"] == "call_refund"
    assert interrupt["metadata"]["agent"] == "concierge/billing"
    assert refunded == []


def test_a_resume_carries_the_sub_agent_on_then_the_caller() -> None:
    refunded: list[str] = []
    _, ui = _ui(refunded)
    paused = conformant(list(ui(from_run_agent_input(_body("t2", messages=[
        {"id": "m1", "role": "user", "content": "refund BK-1"}])))))
    approval_id = paused[-1]["outcome"]["interrupts"][0]["id"]

    resumed = conformant(list(ui(from_run_agent_input(_body("t2", resume=[
        {"interruptId": approval_id, "status": "resolved", "payload": {"approved": True}}])))))

    assert refunded == ["BK-1"]
    assert resumed[-1]["result"] == {"commitStatus": "committed", "status": "completed"}
    # the snapshot is the caller's conversation: no sub-agent message or call in it
    [snapshot] = [e for e in resumed if e["type"] == "MESSAGES_SNAPSHOT"]
    calls = [c["id"] for m in snapshot["messages"] for c in m.get("toolCalls", [])]
    assert calls == ["call_billing"]
    assert "Checking the booking." not in json.dumps(snapshot)
    # the sub-agent's result and words are its own; its final reply is the call's result
    sub = [v["event"] for v in _sub(resumed)]
    assert [e["type"] for e in sub if e["type"] == "tool_result"] == ["tool_result"]
    results = [e for e in resumed if e["type"] == "TOOL_CALL_RESULT"]
    assert [(r["toolCallId"], r["content"]) for r in results] == [
        ("call_billing", "Refunded BK-1.")]
    assert list(_texts(resumed).values()) == ["Billing refunded it."]


def test_a_sub_agents_model_steps_are_no_steps_of_the_run() -> None:
    """With ``include_steps`` only the caller's model steps are ``STEP_*``: the sub-agent's
    model calls run inside the caller's step (its tool call)."""
    app, concierge = _agents([])
    live = app.handler.turn(agent=concierge)(HandlerInput(session_id="t3", input={
        "message": "refund BK-1"}))
    adapter = AgUIAdapter("t3", live.invocation_id, include_steps=True)
    events = [adapter.run_started()]
    for event in live:
        events.extend(adapter.transform(event))
    assert live.result is not None
    events.extend(adapter.finish(live.result))
    data = conformant(events)

    assert [e["stepName"] for e in data if e["type"] == "STEP_STARTED"] == ["step_1"]
    assert [e["type"] for e in data if e["type"].startswith("STEP_")] == [
        "STEP_STARTED", "STEP_FINISHED"]
    assert any(v["event"]["type"] == "model_start" for v in _sub(data))
