"""An approval is a JSON ``true`` or ``false`` and nothing else, on every route.

A gate on a side effect must not read ``"yes"``, ``"on"``, ``"1"`` or ``1`` as consent (nor
``"no"`` or ``0`` as a denial): each is refused with 422 before anything is written, the tool
does not run, and the same approval can still be decided with a real boolean afterwards.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

import dormant
from dormant.agui import from_run_agent_input
from dormant.handlers import ApprovalDecision
from dormant.http import build_resolver
from dormant.models import ScriptedModel
from tests._http import post

NOT_BOOLEANS: list[Any] = ["yes", "no", "on", "off", "1", "0", "true", "false", 1, 0, 1.0,
                           None, [], {}]


class Ticket(BaseModel):
    ticket_id: str


def _support(closed: list[str]) -> tuple[dormant.App, dormant.Agent]:
    app = dormant.App(name="strict-decisions")
    tool = app.tool(name="close_ticket", description="Close a ticket", schema=Ticket,
                    execute=lambda ctx: closed.append(ctx.args.ticket_id) or {"closed": True})
    agent = app.agent(name="support", tools=[tool],
                      tool_approval={"close_ticket": "user-approval"},
                      model=ScriptedModel([
                          {"tool_calls": [{"name": "close_ticket", "args": {"ticket_id": "T-7"},
                                           "id": "call_close"}]},
                          "Closed T-7."]))
    return app, agent


def _version(app: dormant.App, session_id: str) -> int:
    session = app.sessions.get(session_id)
    assert session is not None
    return session.version


@pytest.mark.parametrize("value", NOT_BOOLEANS, ids=repr)
def test_post_turns_refuses_an_approval_that_is_not_a_boolean(value: Any) -> None:
    closed: list[str] = []
    app, agent = _support(closed)
    resolver = build_resolver(app, agent)
    status, paused = post(resolver, "/turns", {"sessionId": "s", "message": "close T-7"})
    assert status == 200 and paused["status"] == "yielded_tool"
    approval_id = paused["pendingApprovals"][0]["approvalId"]
    before = _version(app, "s")

    status, refused = post(resolver, "/turns", {"sessionId": "s", "approvals": [
        {"approvalId": approval_id, "approved": value}]})

    assert status == 422 and refused["code"] == "validation_error", refused
    assert "approvals.0.approved" in json.dumps(refused)
    assert closed == [] and _version(app, "s") == before
    status, done = post(resolver, "/turns", {"sessionId": "s", "approvals": [
        {"approvalId": approval_id, "approved": True}]})
    assert status == 200 and done["status"] == "completed" and closed == ["T-7"]


def _paused(session_id: str, closed: list[str]) -> tuple[dormant.App, Any, str]:
    """The app, its REST handler, and the approval id of session ``session_id``'s paused
    call."""
    app, agent = _support(closed)
    rest = app.handler.rest(agent=agent)
    paused = rest({"session_id": session_id, "input": {"message": "close T-7"}})
    return app, rest, paused.pending_approvals[0].approval_id


@pytest.mark.parametrize("value", ["yes", 1, "true"], ids=repr)
def test_the_rest_handler_refuses_it_too(value: Any) -> None:
    closed: list[str] = []
    app, rest, approval_id = _paused("r", closed)
    before = _version(app, "r")

    refused = rest({"session_id": "r", "input": {"approvals": [
        {"approval_id": approval_id, "approved": value}]}})

    assert refused.status == "error" and refused.code == "invalid_input"
    assert "approved" in (refused.error or "")
    assert closed == [] and _version(app, "r") == before


@pytest.mark.parametrize("value", ["yes", "on", 1, None], ids=repr)
def test_post_agui_refuses_a_resume_payload_that_is_not_a_boolean(value: Any) -> None:
    closed: list[str] = []
    app, agent = _support(closed)
    resolver = build_resolver(app, agent)

    def run(**fields: Any) -> tuple[int, Any]:
        return post(resolver, "/agui", {"threadId": "a", "runId": "client", "state": {},
                                        "tools": [], "context": [], "forwardedProps": {},
                                        "messages": [], **fields})

    status, paused = run(messages=[{"id": "m1", "role": "user", "content": "close T-7"}])
    assert status == 200
    finished = [json.loads(line.removeprefix("data: ")) for line in paused.splitlines()
                if line.startswith("data: ")][-1]
    approval_id = finished["outcome"]["interrupts"][0]["id"]
    before = _version(app, "a")

    status, refused = run(resume=[{"interruptId": approval_id, "status": "resolved",
                                   "payload": {"approved": value}}])

    assert status == 422 and refused["code"] == "validation_error", refused
    assert "resume.0.payload.approved" in refused["message"]
    assert closed == [] and _version(app, "a") == before
    with pytest.raises(dormant.InputError, match="approved"):
        from_run_agent_input({"threadId": "a", "runId": "client", "state": {}, "tools": [],
                              "context": [], "forwardedProps": {}, "messages": [],
                              "resume": [{"interruptId": approval_id, "status": "resolved",
                                          "payload": {"approved": value}}]})


@pytest.mark.parametrize("value", ["yes", 1, "true", None], ids=repr)
def test_in_python_a_decision_is_a_bool(value: Any) -> None:
    app, _, approval_id = _paused("p", [])

    with pytest.raises(ValidationError, match="approved"):
        ApprovalDecision(approval_id=approval_id, approved=value)
    session = app.sessions.load("p", turns=None)
    assert session is not None
    with pytest.raises(dormant.InputError, match="true or false"):
        session.input.approval(approval_id, approved=value)
    assert ApprovalDecision(approval_id=approval_id, approved=True).approved is True
