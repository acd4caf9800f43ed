"""The kit scripts each agent's model on its own (``model(..., agent="billing")``) and picks
a sub-agent's pending item by its agent's path (``approve(..., agent="concierge/billing")``);
``validate_resume_state`` lists a sub-agent's waiting calls with that path. In process and
through the REST handler."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant import validate_resume_state
from dormant.events import ToolResult
from dormant.testing import (
    ScriptError,
    approve,
    deny,
    get_tool_results,
    model,
    run_test,
    tool_input,
    user,
)

THROUGH = ["run", "handlers"]
REFUND = {"name": "refund", "args": {"booking": "BK-1", "amount": 40}}
ASK_BILLING = {"name": "billing", "args": {"input": "refund BK-1 40"}}
ASK_FRONT = {"name": "front", "args": {"input": "refund BK-2 10"}}


class Refund(BaseModel):
    booking: str
    amount: int


class Pick(BaseModel):
    room: str


def _agents(ran: list[str]) -> tuple[dormant.App, dormant.Agent, dormant.Agent]:
    app = dormant.App(name="kit")

    def refund(ctx: dormant.ToolContext) -> dict[str, Any]:
        ran.append(f"refund {ctx.args.booking}")
        return {"refunded": ctx.args.amount}

    tool = app.tool(name="refund", description="Refund a booking", schema=Refund,
                    execute=refund)
    billing = app.agent(name="billing", tools=[tool],
                        tool_approval={"refund": "user-approval"})
    concierge = app.agent(name="concierge", tools=[billing.as_tool()])
    return app, concierge, billing


@pytest.mark.parametrize("through", THROUGH)
def test_a_sub_agents_approval_is_scripted_per_agent(through: Any) -> None:
    ran: list[str] = []
    _, concierge, _ = _agents(ran)
    run = run_test(concierge, [
        user("please refund BK-1"),
        model(tool_calls=[ASK_BILLING]),                   # the concierge asks billing
        model(tool_calls=[REFUND], agent="billing"),       # billing wants to refund: waits
        approve("refund", agent="concierge/billing"),
        model("Refunded 40 for BK-1.", agent="billing"),   # billing carries on, then ends
        model("Done: billing refunded 40."),               # then the concierge
    ], through=through)

    assert ran == ["refund BK-1"]
    assert run.status == "completed"
    # the sub-agent's final reply is the concierge's tool result
    billing_call = next(e for e in run.events
                        if isinstance(e, ToolResult) and e.name == "billing")
    assert billing_call.result == "Refunded 40 for BK-1."
    assert len(run.models["concierge/billing"].requests) == 2
    assert len(run.model.requests) == 2

    refund = next(e for e in run.events if isinstance(e, ToolResult) and e.name == "refund")
    assert refund.scope is not None and refund.scope.path == "concierge/billing"


@pytest.mark.parametrize("through", THROUGH)
def test_the_parked_step_names_the_sub_agent(through: Any) -> None:
    """Before the decision the session waits on billing's call, listed with its path."""
    _, concierge, _ = _agents([])
    run = run_test(concierge, [
        user("please refund BK-1"),
        model(tool_calls=[ASK_BILLING]),
        model(tool_calls=[REFUND], agent="billing"),
    ], through=through)

    [pending] = run.session.pending_approvals
    assert (pending.tool, pending.agent) == ("refund", "concierge/billing")
    [waiting] = validate_resume_state(run.events)
    assert (waiting.name, waiting.agent) == ("refund", "concierge/billing")
    assert waiting.approval_id == pending.approval_id
    assert "agent" in waiting.model_dump()


def test_a_reply_for_an_unknown_agent_fails_before_anything_runs() -> None:
    ran: list[str] = []
    _, concierge, _ = _agents(ran)
    with pytest.raises(ScriptError, match=r"no agent 'payments' is reachable.*"
                                          r"reachable: concierge, concierge/billing"):
        run_test(concierge, [user("hi"), model("x", agent="payments")])
    assert ran == []


def test_an_unscripted_sub_agent_call_names_the_agent() -> None:
    _, concierge, _ = _agents([])
    with pytest.raises(ScriptError, match=r"agent concierge/billing: unexpected model call"):
        run_test(concierge, [user("refund"), model(tool_calls=[ASK_BILLING])])


def test_a_sub_agents_unused_reply_names_the_agent() -> None:
    _, concierge, _ = _agents([])
    with pytest.raises(ScriptError, match=r"agent concierge/billing: 1 scripted model"):
        run_test(concierge, [user("hi"), model("Hello."), model("never", agent="billing")])


def _two_waiting(ran: list[str]) -> dormant.Agent:
    """Two sub-agents, ``billing`` and ``front``, each with a ``refund`` needing approval."""
    app = dormant.App(name="kit")

    def refund(ctx: dormant.ToolContext) -> dict[str, Any]:
        ran.append(f"refund {ctx.args.booking}")
        return {"refunded": ctx.args.amount}

    def subagent(name: str) -> dormant.Agent:
        tool = app.tool(name="refund", description="Refund", schema=Refund, execute=refund)
        return app.agent(name=name, tools=[tool], tool_approval={"refund": "user-approval"})

    return app.agent(name="concierge",
                     tools=[subagent("billing").as_tool(), subagent("front").as_tool()])


@pytest.mark.parametrize("through", THROUGH)
def test_agent_picks_which_of_two_waiting_agents_is_decided(through: Any) -> None:
    ran: list[str] = []
    run = run_test(_two_waiting(ran), [
        user("refund both"),
        model(tool_calls=[ASK_BILLING, ASK_FRONT]),
        model(tool_calls=[REFUND], agent="billing"),
        model(tool_calls=[{"name": "refund", "args": {"booking": "BK-2", "amount": 10}}],
              agent="front"),
        deny("refund", agent="concierge/front", reason="not that one"),
        model("Front could not refund.", agent="front"),
        approve("refund", agent="billing"),
        model("Refunded BK-1.", agent="billing"),
        model("One refunded, one refused."),
    ], through=through)

    assert ran == ["refund BK-1"]
    assert run.status == "completed"
    outcomes = {(o.name, o.denied) for o in get_tool_results(run.events)}
    assert ("refund", True) in outcomes and ("refund", False) in outcomes


def test_a_step_naming_the_agent_refuses_a_name_that_is_only_anothers() -> None:
    """``approve("refund")`` with two agents waiting on ``refund`` is ambiguous; naming the
    wrong agent lists what is pending, each with its path."""
    with pytest.raises(ScriptError, match=r"matches 2 pending requests"):
        run_test(_two_waiting([]), [
            user("refund both"), model(tool_calls=[ASK_BILLING, ASK_FRONT]),
            model(tool_calls=[REFUND], agent="billing"),
            model(tool_calls=[REFUND], agent="front"),
            approve("refund")])
    with pytest.raises(ScriptError, match=r"\(agent concierge/nobody\).*"
                                          r"in concierge/billing"):
        run_test(_two_waiting([]), [
            user("refund both"), model(tool_calls=[ASK_BILLING, ASK_FRONT]),
            model(tool_calls=[REFUND], agent="billing"),
            model(tool_calls=[REFUND], agent="front"),
            approve("refund", agent="concierge/nobody")])


@pytest.mark.parametrize("through", THROUGH)
def test_a_sub_agents_yield_is_answered_with_tool_input(through: Any) -> None:
    app = dormant.App(name="kit")
    pick = app.tool(name="pick_room", description="Ask the guest", schema=Pick,
                    yield_schema=Pick)
    rooms = app.agent(name="rooms", tools=[pick])
    concierge = app.agent(name="concierge", tools=[rooms.as_tool()])
    run = run_test(concierge, [
        user("which room?"),
        model(tool_calls=[{"name": "rooms", "args": {"input": "ask"}}]),
        model(tool_calls=[{"name": "pick_room", "args": {"room": "?"}}], agent="rooms"),
        tool_input({"pick_room": {"room": "12"}}, agent="concierge/rooms"),
        model("Room 12.", agent="rooms"),
        model("You have room 12."),
    ], through=through)

    assert run.status == "completed"
    assert validate_resume_state(run.events) == []
