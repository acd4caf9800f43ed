"""One behaviour, every entry point: app.run + commit, handler.turn, handler.rest."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant.models import ScriptedModel


class Question(BaseModel):
    q: str


class Reply(BaseModel):
    answer: str


Outcome = tuple[str, list[Any]]
Turn = Callable[[dormant.App, dormant.Agent, dict[str, Any]], Outcome]


def via_run(
    app: dormant.App, agent: dormant.Agent, request: dict[str, Any]
) -> tuple[str, list[Any]]:
    session = app.sessions.get(request["session_id"]) or dormant.Session.new(
        "session_" + request["session_id"]
    )
    for answer in request["input"].get("tools", []):
        session.input.tool(call_id=answer["call_id"], input=answer["input"])
    result = app.run(agent, session=session, message=request["input"].get("message"))
    assert app.sessions.commit(result.session).ok
    return result.status, [y.call_id for y in getattr(result, "yielded_tools", [])]


def via_turn(
    app: dormant.App, agent: dormant.Agent, request: dict[str, Any]
) -> tuple[str, list[Any]]:
    result = app.handler.turn(agent=agent)(request).run()
    assert result.commit_status == "committed"
    return result.status, [y.call_id for y in result.yielded_tools or []]


def via_rest(
    app: dormant.App, agent: dormant.Agent, request: dict[str, Any]
) -> tuple[str, list[Any]]:
    wire = app.handler.rest(agent=agent)(request).wire()
    return wire["status"], [y["callId"] for y in wire.get("yieldedTools", [])]


@pytest.mark.parametrize("turn", [via_run, via_turn, via_rest], ids=["run", "turn", "rest"])
def test_pause_and_resume_reads_the_same_through_every_entry_point(turn: Turn) -> None:
    app = dormant.App(name="entry")
    ask_guest = app.tool(
        name="ask_guest", description="Ask the guest", schema=Question, yield_schema=Reply
    )
    agent = app.agent(
        name="concierge",
        tools=[ask_guest],
        model=ScriptedModel(
            [
                {"tool_calls": [{"name": "ask_guest", "args": {"q": "Which night?"}}]},
                "Booked for Friday.",
            ]
        ),
    )

    status, pending = turn(app, agent, {"session_id": "y1", "input": {"message": "book me in"}})
    assert status == "yielded_tool" and len(pending) == 1
    status, _ = turn(
        app,
        agent,
        {
            "session_id": "y1",
            "input": {"tools": [{"call_id": pending[0], "input": {"answer": "Friday"}}]},
        },
    )

    assert status == "completed"
    stored = app.sessions.get("y1")
    # A handler claims the answer that settles the step before the model runs (one more
    # version); the in-memory ``app.run`` has no other writer to race: the same ledger.
    assert stored is not None and stored.version == (2 if turn is via_run else 3)
    assert [e.type for e in stored.events] == [
        "invocation_start",
        "user",
        "tool_call",
        "tool_yield",
        "invocation_yield",
        "tool_input",
        "invocation_resume",
        "tool_result",
        "assistant",
        "invocation_end",
    ]
