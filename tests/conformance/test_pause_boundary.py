"""A pause or steer sent while a tool runs is taken at the step boundary that follows, however
soon after the request the tool returns, on every store.

The running turn polls its control record in the background once a poll interval; a tool
that returns sooner than that would let the next model step run before any scheduled read
saw the control. The boundary reads the record once itself, so the control comes before the
next step as asked. Here the poll interval is far longer than the turn, so only that read can
see it, and the control request is sent from inside the tool: on the turn's own thread, one
request after the other (in-process moto is not thread-safe).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

import dormant
from dormant.events import AssistantEvent, InvocationEnd, InvocationStart, UserEvent
from dormant.handlers import RestResponse, TurnResult
from dormant.models import ScriptedModel
from dormant.stores import Store

from ._ledger import ledger as _ledger
from ._ledger import types as _types

#: Far longer than the turn takes: the background poller never reads during it.
POLL_INTERVAL = 5.0


class Note(BaseModel):
    note: str




def _agent(store: Store, replies: list[Any],
           control: Callable[[dormant.ToolContext], dict[str, Any]]
           ) -> tuple[dormant.App, dormant.Agent, ScriptedModel, list[RestResponse]]:
    """An agent whose tool sends ``control(ctx)`` as a request of its own, then returns at
    once; the answers to those requests are collected."""
    app = dormant.App(name="boundary", store=store)
    model = ScriptedModel(replies)
    answers: list[RestResponse] = []

    def execute(ctx: dormant.ToolContext) -> dict[str, Any]:
        answers.append(app.handler.rest(agent=agent, poll_interval=POLL_INTERVAL)(
            {"session_id": "boundary", "input": control(ctx)}))
        return {"noted": ctx.args.note}

    note = app.tool(name="note", description="note it", schema=Note, execute=execute)
    agent = app.agent(name="worker", model=model, tools=[note])
    return app, agent, model, answers


def _run(app: dormant.App, agent: dormant.Agent) -> tuple[TurnResult, str | None]:
    stream = app.handler.turn(agent=agent, poll_interval=POLL_INTERVAL)(
        {"session_id": "boundary", "input": {"message": "two steps please"}})
    result = stream.run()
    return result, stream.invocation_id


def test_a_pause_sent_just_before_the_boundary_pauses_there_and_resume_continues(
        store: Store) -> None:
    app, agent, model, answers = _agent(store, [
        {"text": "Step one.", "tool_calls": [{"name": "note", "args": {"note": "a"}}]},
        "Step two, after the pause."], lambda ctx: {"pause": True})

    result, invocation = _run(app, agent)

    assert [a.status for a in answers] == ["paused"]
    assert result.status == "paused"
    assert len(model.requests) == 1  # no second model step
    session = app.sessions.get("boundary")
    assert session is not None and session.status == "paused"
    assert session.open_invocation == invocation  # paused between steps: still open
    assert _types(session.events) == ["invocation_start", "user", "assistant", "tool_call",
                                      "tool_result", "pause"]

    resumed = app.handler.rest(agent=agent, poll_interval=POLL_INTERVAL)(
        {"session_id": "boundary", "input": {"resume": True}})

    assert resumed.status == "completed" and resumed.output.text == "Step two, after the pause."
    ledger = _ledger(app, "boundary")
    assert _types(ledger) == ["invocation_start", "user", "assistant", "tool_call",
                              "tool_result", "pause", "resume", "assistant", "invocation_end"]
    assert len([e for e in ledger if isinstance(e, InvocationStart)]) == 1
    end = ledger[-1]
    assert isinstance(end, InvocationEnd) and end.status == "completed"
    assert end.invocation_id == invocation
    reply = ledger[-2]
    assert isinstance(reply, AssistantEvent) and reply.invocation_id == invocation
    assert app.sessions.get("boundary").status == "active"  # type: ignore[union-attr]
    model.assert_consumed()


def test_a_steer_sent_just_before_the_boundary_joins_there(store: Store) -> None:
    app, agent, model, answers = _agent(store, [
        {"text": "Let me check.", "tool_calls": [{"name": "note", "args": {"note": "a"}}]},
        "Shorter it is: done."],
        lambda ctx: {"steer": {"text": "make it shorter", "invocation_id": ctx.invocation_id,
                               "id": "st-1"}})

    result, invocation = _run(app, agent)

    assert [a.status for a in answers] == ["accepted"]
    assert result.status == "completed" and result.output.text == "Shorter it is: done."
    ledger = _ledger(app, "boundary")
    assert _types(ledger) == ["invocation_start", "user", "assistant", "tool_call",
                              "tool_result", "steer", "user", "assistant", "invocation_end"]
    steered = ledger[6]
    assert isinstance(steered, UserEvent) and steered.steer and steered.text == "make it shorter"
    assert steered.invocation_id == invocation and steered.message_id == "st-1"
    assert any("make it shorter" in str(m) for m in model.requests[1].messages)
    model.assert_consumed()
    session = app.sessions.get("boundary")
    assert session is not None and session.status == "active"
