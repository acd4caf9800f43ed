"""Deferred calls over AG-UI: the stream carrying one passes ag-ui-validate, shows the call
as waiting on the server (no interrupt for the client), and trusted code's result resumes it."""

from __future__ import annotations

import json
from typing import Any

from ag_ui.core import BaseEvent
from ag_ui_validate.pytest_plugin import assert_valid_agui
from pydantic import BaseModel

import dormant
from dormant.agui import LEDGER_EVENT_PREFIX, from_run_agent_input
from dormant.models import ScriptedModel


class Query(BaseModel):
    query: str


def conformant(events: list[BaseEvent]) -> list[dict[str, Any]]:
    data = [json.loads(e.model_dump_json(by_alias=True, exclude_none=True)) for e in events]
    assert_valid_agui(data, max_warnings=0)
    return data


def _body(thread: str, **fields: Any) -> dict[str, Any]:
    return {"threadId": thread, "runId": "client", "state": {}, "tools": [], "context": [],
            "forwardedProps": {}, "messages": [], **fields}


def test_a_stream_carrying_a_deferred_call_is_valid_ag_ui_and_resumes_on_its_result() -> None:
    app = dormant.App(name="agui-deferred")
    search = app.tool(name="web_search", description="Search", schema=Query, deferred=True)
    agent = app.agent(name="researcher", tools=[search], model=ScriptedModel([
        {"text": "Searching.", "tool_calls": [{"name": "web_search", "id": "call_s",
                                               "args": {"query": "dormant"}}]},
        "Found it."]))
    ui = app.handler.agui(agent=agent)

    parked = conformant(list(ui(from_run_agent_input(_body("t", messages=[
        {"id": "m1", "role": "user", "content": "search dormant"}])))))

    assert [e["toolCallId"] for e in parked if e["type"] == "TOOL_CALL_START"] == ["call_s"]
    assert not any(e["type"] == "TOOL_CALL_RESULT" for e in parked)
    (waiting,) = [e for e in parked if e["type"] == "CUSTOM"
                  and e["name"] == LEDGER_EVENT_PREFIX + "tool_deferred"]
    assert waiting["value"]["call_id"] == "call_s"  # the ledger event as stored
    finished = parked[-1]
    assert finished["type"] == "RUN_FINISHED" and "outcome" not in finished  # no interrupt
    assert finished["result"]["status"] == "yielded_tool"
    assert finished["result"]["deferredTools"] == [
        {"callId": "call_s", "name": "web_search", "args": {"query": "dormant"}}]

    resumed = conformant(list(ui(dormant.HandlerInput(  # trusted server code, not a client
        session_id="t", input=dormant.Input(tool_results=[
            {"call_id": "call_s", "result": {"hits": 1}}])))))

    (snapshot,) = [e for e in resumed if e["type"] == "MESSAGES_SNAPSHOT"]
    assert snapshot["messages"][-1] == {  # the result its claim landed, before the reply
        "id": snapshot["messages"][-1]["id"], "role": "tool", "content": '{"hits": 1}',
        "toolCallId": "call_s"}
    assert resumed[-1]["type"] == "RUN_FINISHED"
    assert resumed[-1]["result"]["status"] == "completed"
    text = "".join(e["delta"] for e in resumed if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "Found it."
