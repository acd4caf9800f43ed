"""Application events over AG-UI: each is a ``CUSTOM`` event named after its declared type
(value: its data and id), and a stream carrying them passes ag-ui-validate."""

from __future__ import annotations

import json
from typing import Any

from ag_ui.core import BaseEvent
from ag_ui_validate.pytest_plugin import assert_valid_agui

import dormant
from dormant.agui import from_run_agent_input
from dormant.models import ScriptedModel

CLOSED = {"type": "object", "properties": {"reason": {"type": "string"}},
          "required": ["reason"]}


def conformant(events: list[BaseEvent]) -> list[dict[str, Any]]:
    data = [json.loads(e.model_dump_json(by_alias=True, exclude_none=True)) for e in events]
    assert_valid_agui(data, max_warnings=0)
    return data


def test_app_events_are_custom_events_named_after_their_type() -> None:
    app = dormant.App(name="agui-events")
    app.event("ai.session.closed", CLOSED)
    app.event("crm.ticket_updated", {"type": "object"})

    def close(ctx: dormant.ToolContext) -> str:
        ctx.session.append_event("ai.session.closed", {"reason": "resolved"}, id="close-1")
        return "closed"

    agent = app.agent(name="support", tools=[
        app.tool(name="close_session", description="Close the session", execute=close)],
        model=ScriptedModel([{"text": "Closing.", "tool_calls": [
            {"name": "close_session", "args": {}, "id": "call_c"}]}, "Closed.", "Seen."]))
    ui = app.handler.agui(agent=agent)

    closing = conformant(list(ui(from_run_agent_input({
        "threadId": "t", "runId": "client", "state": {}, "tools": [], "context": [],
        "forwardedProps": {}, "messages": [{"id": "m1", "role": "user", "content": "done"}]}))))
    brought = conformant(list(ui(dormant.HandlerInput(session_id="t", input=dormant.Input(
        message="the ticket moved", events=[{"name": "crm.ticket_updated", "id": "u1",
                                             "data": {"ticket_id": "T-1"}}])))))

    (custom,) = [e for e in closing if e["type"] == "CUSTOM"]
    assert custom["name"] == "ai.session.closed"
    assert custom["value"] == {"data": {"reason": "resolved"}, "id": "close-1"}
    kinds = [e["type"] for e in closing]
    assert kinds.index("TOOL_CALL_RESULT") < kinds.index("CUSTOM") < kinds.index("RUN_FINISHED")
    (moved,) = [e for e in brought if e["type"] == "CUSTOM"]
    assert (moved["name"], moved["value"]) == ("crm.ticket_updated",
                                               {"data": {"ticket_id": "T-1"}, "id": "u1"})
    assert brought[0]["type"] == "RUN_STARTED" and brought[-1]["type"] == "RUN_FINISHED"
