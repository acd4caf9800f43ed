"""The SSE framing read by an independent, widely used client parser (httpx-sse)."""

from __future__ import annotations

import json

import httpx
from httpx_sse import connect_sse
from pydantic import BaseModel

import dormant
from dormant.agui import SSE_CONTENT_TYPE, encode_sse
from dormant.models import ScriptedModel


class Question(BaseModel):
    q: str


class Answer(BaseModel):
    answer: str


def test_httpx_sse_reads_every_event_of_a_paused_and_a_resumed_run() -> None:
    app = dormant.App(name="sse")
    ask = app.tool(name="ask_guest", description="Ask", schema=Question, yield_schema=Answer)
    agent = app.agent(name="a", tools=[ask], model=ScriptedModel([
        {"text": "Let me ask — één moment.", "tool_calls": [
            {"name": "ask_guest", "args": {"q": "Which night?"}, "id": "call_q"}]},
        "Booked for Friday ✓."]))
    ui = app.handler.agui(agent=agent)
    runs = [list(ui({"session_id": "s", "input": {"message": "book"}})),
            list(ui({"session_id": "s", "input": {"tools": [
                {"call_id": "call_q", "input": {"answer": "Friday"}}]}}))]

    for events in runs:
        body = "".join(encode_sse(events))
        transport = httpx.MockTransport(lambda request, body=body: httpx.Response(
            200, headers={"content-type": SSE_CONTENT_TYPE},
            content=body.encode()))
        with httpx.Client(transport=transport) as client, \
                connect_sse(client, "POST", "http://test/agui") as source:
            parsed = [json.loads(sse.data) for sse in source.iter_sse()]

        assert parsed == [json.loads(e.model_dump_json(by_alias=True, exclude_none=True))
                          for e in events]
    assert runs[0][-1].type == "RUN_FINISHED" and runs[1][-1].type == "RUN_FINISHED"
    assert any(e.type == "CUSTOM" and e.name == "RUN_INTERRUPTED" for e in runs[0])
