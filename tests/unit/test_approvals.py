"""Seed 003 / SPEC §6: a tool under "user-approval" waits for a human decision."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant.models import ScriptedModel
from dormant.testing import approval, get_tool_results, model, run_test, user


class Ticket(BaseModel):
    ticket_id: str


CLOSE = {"name": "close_ticket", "args": {"ticket_id": "T-7"}, "id": "call_close"}
LEDGER_PAUSED = ["invocation_start", "user", "tool_call", "approval_requested",
                 "invocation_yield"]


@pytest.fixture()
def app() -> dormant.App:
    return dormant.App(name="support")


@pytest.fixture()
def closed() -> list[str]:
    return []


@pytest.fixture()
def support(app: dormant.App, closed: list[str]) -> dormant.Agent:
    def close_ticket(ctx: dormant.ToolContext) -> dict[str, Any]:
        closed.append(f"{ctx.args.ticket_id} key={ctx.call_id}")  # the call id: idempotency key
        return {"ticket_id": ctx.args.ticket_id, "closed": True}

    tool = app.tool(name="close_ticket", description="Close a resolved support ticket",
                    schema=Ticket, execute=close_ticket)
    return app.agent(name="support-tools", tools=[tool],
                     tool_approval={"close_ticket": "user-approval"})


def test_a_call_under_user_approval_does_not_run_and_parks(
        support: dormant.Agent, closed: list[str]) -> None:
    paused = run_test(support, [user("close T-7"), model(tool_calls=[CLOSE])])

    assert paused.status == "yielded_tool"
    assert paused.session.status == "awaiting_input"
    assert closed == []
    assert [e.type for e in paused.events] == LEDGER_PAUSED
    (pending,) = paused.session.pending_approvals
    assert (pending.call_id, pending.tool, pending.args) == (
        "call_close", "close_ticket", {"ticket_id": "T-7"})
    assert pending.approval_id.startswith("apr_")
    assert paused.result.pending_approvals == [pending]  # type: ignore[union-attr]
    unresolved = dormant.validate_resume_state(paused.events)
    assert [(u.call_id, u.approval_id) for u in unresolved] == [("call_close", pending.approval_id)]
    with pytest.raises(dormant.ResumeError, match=pending.approval_id):
        dormant.assert_ready_to_resume(paused.events)


def test_approved_the_tool_runs_with_its_call_id_as_idempotency_key(
        support: dormant.Agent, closed: list[str]) -> None:
    done = run_test(support, [user("close T-7"), model(tool_calls=[CLOSE]),
                              approval({"close_ticket": True}), model("Closed T-7.")])

    assert done.status == "completed"
    assert closed == ["T-7 key=call_close"]
    assert [e.type for e in done.events] == [
        *LEDGER_PAUSED,
        "approval_decided", "invocation_resume", "tool_result", "assistant", "invocation_end"]
    assert get_tool_results(done.events)[0].result == {"ticket_id": "T-7", "closed": True}
    assert dormant.validate_resume_state(done.events) == []


def test_denied_the_model_reads_a_denied_result_with_the_reason(
        support: dormant.Agent, closed: list[str]) -> None:
    done = run_test(support, [
        user("close T-7"), model(tool_calls=[CLOSE]),
        approval({"call_close": {"approved": False, "reason": "Denied by the user"}}),
        model("I left T-7 open."),
    ])

    assert closed == []
    (result,) = get_tool_results(done.events)
    assert result.denied is True and result.result is None
    assert result.error == "Denied by the user: Denied by the user"
    told = done.model.requests[-1].messages[-1]
    assert told.role == "tool" and told.is_error  # type: ignore[union-attr]
    assert "Denied" in told.content  # type: ignore[union-attr]


def test_a_predicate_policy_decides_from_the_validated_arguments(
        app: dormant.App, closed: list[str]) -> None:
    tool = app.tool(name="close_ticket", description="d", schema=Ticket,
                    execute=lambda ctx: closed.append(ctx.args.ticket_id))
    policy = {"close_ticket": lambda args: "user-approval" if args.ticket_id.startswith("VIP")
              else "approved"}
    agent = app.agent(name="a", tools=[tool], tool_approval=policy)

    ordinary = run_test(agent, [user("close"), model(tool_calls=[
        {"name": "close_ticket", "args": {"ticket_id": "T-1"}}]), model("done")])
    vip = run_test(agent, [user("close"), model(tool_calls=[
        {"name": "close_ticket", "args": {"ticket_id": "VIP-1"}}])])

    assert ordinary.status == "completed" and closed == ["T-1"]
    assert vip.status == "yielded_tool" and closed == ["T-1"]


def _served(app: dormant.App, support: dormant.Agent, replies: list[Any]) -> Any:
    agent = app.agent(name="support", model=ScriptedModel(replies),
                      tools=list(support.tools.values()), tool_approval=support.tool_approval)
    return app.handler.rest(agent=agent)


def test_through_rest_pending_approvals_and_the_approvals_input(
        app: dormant.App, support: dormant.Agent, closed: list[str]) -> None:
    rest = _served(app, support, [{"tool_calls": [CLOSE]}, "Closed."])
    paused = rest({"session_id": "t", "input": {"message": "close T-7"}})
    wire = paused.wire()
    assert wire["status"] == "yielded_tool"
    (pending,) = wire["pendingApprovals"]
    assert set(pending) == {"approvalId", "callId", "tool", "args"}

    done = rest({"sessionId": "t", "input": {"approvals": [
        {"approvalId": pending["approvalId"], "approved": True}]}})
    assert done.status == "completed" and closed == ["T-7 key=call_close"]


def test_a_decision_not_pending_is_rejected_and_writes_nothing(
        app: dormant.App, support: dormant.Agent) -> None:
    rest = _served(app, support, [{"tool_calls": [CLOSE]}, "Closed."])
    paused = rest({"session_id": "t2", "input": {"message": "close T-7"}})
    approval_id = paused.pending_approvals[0].approval_id  # type: ignore[index]
    before = app.sessions.get("t2")
    assert before is not None

    stale = rest({"session_id": "t2", "input": {"approvals": [
        {"approval_id": "apr_from_an_old_step", "approved": True}]}})
    assert stale.status == "error" and stale.code == "not_pending"
    assert "apr_from_an_old_step is not pending" in (stale.error or "")
    assert approval_id in (stale.error or "")  # names what is pending

    message = rest({"session_id": "t2", "input": {"message": "hello?", "if_busy": "reject"}})
    assert message.code == "awaiting_input" and "close_ticket (call_close)" in (message.error
                                                                               or "")
    after = app.sessions.get("t2")
    assert after is not None and after.version == before.version

    assert rest({"session_id": "t2", "input": {"approvals": [
        {"approval_id": approval_id, "approved": True}]}}).status == "completed"
    twice = rest({"session_id": "t2", "input": {"approvals": [
        {"approval_id": approval_id, "approved": False}]}})
    assert twice.status == "error" and twice.code == "already_decided"
    assert "already decided" in (twice.error or "")


def test_two_decisions_on_one_approval_never_both_land(
        app: dormant.App, support: dormant.Agent, closed: list[str]) -> None:
    rest = _served(app, support, [{"tool_calls": [CLOSE]}, "Closed.", "Closed again."])
    paused = rest({"session_id": "t3", "input": {"message": "close T-7"}})
    approval_id = paused.pending_approvals[0].approval_id  # type: ignore[index]
    first, second = (app.sessions.load("t3", turns=None) for _ in range(2))
    assert first is not None and second is not None
    first.input.approval(approval_id, approved=True)
    second.input.approval(approval_id, approved=False)

    assert app.sessions.commit(first).ok
    assert not app.sessions.commit(second).ok
    with pytest.raises(dormant.InputError, match="already decided"):
        app.sessions.merge(second)
    stored = app.sessions.get("t3")
    assert stored is not None
    assert [e.approved for e in stored.events if e.type == "approval_decided"] == [True]


def test_policies_are_checked_when_the_agent_is_declared(app: dormant.App) -> None:
    tool = app.tool(name="t", description="d", schema=Ticket, execute=lambda ctx: None)
    ask = app.tool(name="ask", description="d", schema=Ticket, yield_schema=Ticket)
    with pytest.raises(ValueError, match="not one of its tools"):
        app.agent(name="a", tools=[tool], tool_approval={"nope": "user-approval"})
    with pytest.raises(ValueError, match="must be 'user-approval', 'approved'"):
        app.agent(name="a", tools=[tool], tool_approval={"t": "maybe"})
    with pytest.raises(ValueError, match="yields"):
        app.agent(name="a", tools=[ask], tool_approval={"ask": "user-approval"})


def test_the_inspector_shows_what_waits_for_a_decision(support: dormant.Agent) -> None:
    from dormant._inspect import render_session, session_json

    paused = run_test(support, [user("close T-7"), model(tool_calls=[CLOSE])])
    approval_id = paused.session.pending_approvals[0].approval_id
    text = render_session(paused.session)

    assert f"close_ticket needs approval: {{\"ticket_id\": \"T-7\"}}  [{approval_id}]" in text
    assert f"close_ticket [call_close] needs approval {approval_id}" in text
    assert '"approvals": [{"approvalId": "' + approval_id in text
    assert session_json(paused.session)["pendingApprovals"][0]["approvalId"] == approval_id
