"""Approvals over AG-UI: the interrupt names the approval id; a stock resume decides it."""

from __future__ import annotations

import json
from typing import Any

from ag_ui.core import BaseEvent
from ag_ui_validate.pytest_plugin import assert_valid_agui
from pydantic import BaseModel

import dormant
from dormant.agui import RUN_INTERRUPTED, from_run_agent_input
from dormant.models import ScriptedModel


class Ticket(BaseModel):
    ticket_id: str


def conformant(events: list[BaseEvent]) -> list[dict[str, Any]]:
    data = [json.loads(e.model_dump_json(by_alias=True, exclude_none=True)) for e in events]
    assert_valid_agui(data, max_warnings=0)
    return data


def _support(closed: list[str]) -> tuple[dormant.App, Any]:
    app = dormant.App(name="support")
    tool = app.tool(name="close_ticket", description="Close a ticket", schema=Ticket,
                    execute=lambda ctx: closed.append(ctx.args.ticket_id) or {"closed": True})
    agent = app.agent(name="support", tools=[tool], tool_approval={"close_ticket": "user-approval"},
                      model=ScriptedModel([
                          {"tool_calls": [{"name": "close_ticket", "args": {"ticket_id": "T-7"},
                                           "id": "call_close"}]},
                          "Closed T-7.", "Left it open."]))
    return app, app.handler.agui(agent=agent)


def _stock_body(thread: str, **fields: Any) -> dict[str, Any]:
    return {"threadId": thread, "runId": "client", "state": {}, "tools": [], "context": [],
            "forwardedProps": {}, "messages": [], **fields}


def test_an_approval_interrupts_the_run_and_a_resume_entry_decides_it() -> None:
    closed: list[str] = []
    _, ui = _support(closed)
    paused = conformant(list(ui(from_run_agent_input(_stock_body("t", messages=[
        {"id": "m1", "role": "user", "content": "close T-7"}])))))

    custom = next(e for e in paused if e["type"] == "CUSTOM")
    assert custom["name"] == RUN_INTERRUPTED
    (request,) = custom["value"]["pendingApprovals"]
    assert request["callId"] == "call_close" and request["tool"] == "close_ticket"
    finished = paused[-1]
    assert finished["type"] == "RUN_FINISHED"
    (interrupt,) = finished["outcome"]["interrupts"]
    assert interrupt["id"] == request["approvalId"]
    assert interrupt["toolCallId"] == "call_close"
    assert closed == []

    resumed = conformant(list(ui(from_run_agent_input(_stock_body("t", resume=[
        {"interruptId": request["approvalId"], "status": "resolved",
         "payload": {"approved": True}}])))))

    assert resumed[-1]["type"] == "RUN_FINISHED"
    assert resumed[-1]["result"] == {"commitStatus": "committed",
                                    "status": "completed"}
    assert closed == ["T-7"]
    assert any(e["type"] == "TOOL_CALL_RESULT" and e["toolCallId"] == "call_close"
               for e in resumed)


def test_a_cancelled_approval_interrupt_is_a_denial() -> None:
    closed: list[str] = []
    app, ui = _support(closed)
    paused = list(ui(from_run_agent_input(_stock_body("t2", messages=[
        {"id": "m1", "role": "user", "content": "close T-7"}]))))
    approval_id = conformant(paused)[-1]["outcome"]["interrupts"][0]["id"]

    conformant(list(ui(from_run_agent_input(_stock_body("t2", resume=[
        {"interruptId": approval_id, "status": "cancelled"}])))))

    assert closed == []
    session = app.sessions.get("t2")
    assert session is not None
    (result,) = [e for e in session.events if e.type == "tool_result"]
    assert result.denied and result.error == "Denied by the user: cancelled by the user"
