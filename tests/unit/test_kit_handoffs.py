"""The kit scripts the agents a hand-off reaches as it scripts sub-agents: each has a scripted
model of its own, fed by ``model(..., agent="billing")`` (a hand-off target is named by its
own name: it becomes the session's agent), and the copies the kit serves hand over to one
another, so a later request runs the scripted target. In process and through the REST
handler."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant.errors import ConfigError
from dormant.events import HandoffEvent, InvocationStart, ToolResult
from dormant.models import ScriptedModel
from dormant.testing import ScriptError, approve, model, run_test, user

THROUGH = ["run", "handlers"]
TO_BILLING = {"name": "transfer_to_billing", "args": {"reason": "a refund"}}
TO_CONCIERGE = {"name": "transfer_to_concierge", "args": {}}


class Refund(BaseModel):
    invoice: str


def _desk(app: dormant.App | None = None) -> tuple[dormant.Agent, ScriptedModel]:
    """A concierge and billing handing over to each other by name (a cycle), each with a
    model of its own the kit must not use."""
    app = app or dormant.App(name="kit")
    own = ScriptedModel(["not the kit's"])
    concierge = app.agent("concierge", own, [app.context.system("You greet guests."),
                                             app.context.history()], handoffs=["billing"])
    app.agent("billing", own, [app.context.system("You do refunds."), app.context.history()],
              handoffs=["concierge"])
    return concierge, own


@pytest.mark.parametrize("through", THROUGH)
def test_a_handoff_and_a_handback_across_requests_are_scripted_per_agent(through: Any) -> None:
    concierge, own = _desk()
    run = run_test(concierge, [
        user("I need a refund"),
        model(tool_calls=[TO_BILLING]),                          # the concierge hands over
        model("Billing here: which invoice?", agent="billing"),  # the same turn goes on
        user("INV-7"),                                           # billing has the session
        model("Refunded INV-7.", agent="billing"),
        user("thanks"),
        model(tool_calls=[TO_CONCIERGE], agent="billing"),       # billing hands back
        model("Anything else?"),                                 # the concierge again
    ], through=through)

    assert [r.output.text for r in run.results] == [
        "Billing here: which invoice?", "Refunded INV-7.", "Anything else?"]
    assert [e.agent for e in run.events if isinstance(e, InvocationStart)] == [
        "concierge", "billing", "billing"]
    moves = [(e.from_agent, e.to_agent, e.reason) for e in run.events
             if isinstance(e, HandoffEvent)]
    assert moves == [("concierge", "billing", "a refund"), ("billing", "concierge", None)]
    assert run.session.head.agent == "concierge"
    # one scripted model per agent, made by the kit; the agents' own were never called
    assert set(run.models) == {"concierge", "billing"}
    assert run.models["concierge"] is run.model
    assert len(run.model.requests) == 2 and len(run.models["billing"].requests) == 3
    assert own.requests == []
    # each scripted copy kept its agent's instructions and hand-off tool
    billing = run.models["billing"].requests
    assert [r.system for r in billing] == [["You do refunds."]] * 3
    assert {t.name for r in billing for t in r.tools} == {"transfer_to_concierge"}
    assert [t.name for t in run.model.requests[1].tools] == ["transfer_to_billing"]


def test_the_agents_given_are_not_changed() -> None:
    """The kit serves copies: the app's agents still hand over to the app's agents."""
    app = dormant.App(name="kit")
    concierge, _ = _desk(app)
    run_test(concierge, [user("refund"), model(tool_calls=[TO_BILLING]),
                         model("Which invoice?", agent="billing")])

    assert concierge.handoffs == ("billing",)
    assert concierge.team()["billing"] is app.agents["billing"][0]
    assert concierge.team()["billing"].model is concierge.model


def _with_ledger(ran: list[str]) -> dormant.Agent:
    """The concierge hands over to billing (given as an Agent), which asks a ``ledger``
    agent as a tool and refunds itself, after an approval."""
    app = dormant.App(name="kit")

    def refund(ctx: dormant.ToolContext) -> dict[str, Any]:
        ran.append(f"refund {ctx.args.invoice}")
        return {"refunded": ctx.args.invoice}

    tool = app.tool(name="refund", description="Refund an invoice", schema=Refund,
                    execute=refund)
    ledger = app.agent("ledger", None, tools=[tool], tool_approval={"refund": "user-approval"})
    billing = app.agent("billing", None, tools=[ledger.as_tool()], handoffs=["concierge"])
    return app.agent("concierge", None, handoffs=[billing])


@pytest.mark.parametrize("through", THROUGH)
def test_a_handoff_target_runs_its_sub_agent_each_scripted_by_path(through: Any) -> None:
    ran: list[str] = []
    run = run_test(_with_ledger(ran), [
        user("refund INV-7"),
        model(tool_calls=[TO_BILLING]),
        model(tool_calls=[{"name": "ledger", "args": {"input": "refund INV-7"}}],
              agent="billing"),
        model(tool_calls=[{"name": "refund", "args": {"invoice": "INV-7"}}],
              agent="billing/ledger"),                       # waits for its approval
        approve("refund", agent="billing/ledger"),
        model("Refunded INV-7.", agent="ledger"),            # the ledger ends
        model("Done: INV-7 is refunded.", agent="billing"),  # then billing
    ], through=through)

    assert ran == ["refund INV-7"]
    assert run.status == "completed" and run.result.output.text == "Done: INV-7 is refunded."
    assert set(run.models) == {"concierge", "billing", "billing/ledger"}
    refund = next(e for e in run.events if isinstance(e, ToolResult) and e.name == "refund")
    assert refund.scope is not None and refund.scope.path == "billing/ledger"
    assert len(run.models["billing/ledger"].requests) == 2


@pytest.mark.parametrize("through", THROUGH)
def test_the_handed_over_agents_own_approval_is_picked_by_its_name(through: Any) -> None:
    """After a hand-off, the session's agent is billing: its own pending items (no path)
    are billing's for ``approve(..., agent="billing")``."""
    app = dormant.App(name="kit")
    tool = app.tool(name="refund", description="Refund", schema=Refund,
                    execute=lambda ctx: {"refunded": ctx.args.invoice})
    billing = app.agent("billing", None, tools=[tool], tool_approval={"refund": "user-approval"})
    concierge = app.agent("concierge", None, handoffs=[billing])
    run = run_test(concierge, [
        user("refund INV-7"),
        model(tool_calls=[TO_BILLING]),
        model(tool_calls=[{"name": "refund", "args": {"invoice": "INV-7"}}], agent="billing"),
        approve("refund", agent="billing"),
        model("Refunded.", agent="billing"),
    ], through=through)

    assert run.status == "completed" and run.result.output.text == "Refunded."


def test_an_agent_both_a_tool_and_a_handoff_target_has_a_model_at_each_path() -> None:
    """Run as a tool it is ``concierge/billing``; handed the conversation, ``billing``."""
    app = dormant.App(name="kit")
    billing = app.agent("billing", None)
    concierge = app.agent("concierge", None, tools=[billing.as_tool()], handoffs=[billing])
    run = run_test(concierge, [
        user("refund"),
        model(tool_calls=[{"name": "billing", "args": {"input": "which invoice?"}}]),
        model("INV-7", agent="concierge/billing"),
        model(tool_calls=[TO_BILLING]),
        model("Billing here.", agent="billing"),
    ])

    assert run.result.output.text == "Billing here."
    assert len(run.models["concierge/billing"].requests) == 1
    assert len(run.models["billing"].requests) == 1


def test_an_unknown_agent_fails_before_anything_runs() -> None:
    ran: list[str] = []
    with pytest.raises(ScriptError, match=r"no agent 'sales' is reachable.*reachable: "
                                          r"concierge, billing, billing/ledger$"):
        run_test(_with_ledger(ran), [user("hi"), model("x", agent="sales")])
    with pytest.raises(ScriptError, match=r"no agent 'concierge/billing' is reachable.*"
                                          r"'billing' is a hand-off target, named by its own "
                                          r"name.*agent='billing'"):
        run_test(_with_ledger(ran), [user("hi"), model("x", agent="concierge/billing")])
    assert ran == []


def test_a_handoff_to_an_agent_the_app_lacks_is_a_config_error() -> None:
    app = dormant.App(name="kit")
    lost = app.agent("concierge", None, handoffs=["nobody"])
    with pytest.raises(ConfigError, match="'concierge' hands over to 'nobody'"):
        run_test(lost, [user("hi"), model("hello")])


def test_a_targets_leftover_reply_names_the_agent() -> None:
    concierge, _ = _desk()
    with pytest.raises(ScriptError, match=r"agent billing: 1 scripted model"):
        run_test(concierge, [user("hi"), model("Hello."), model("never", agent="billing")])


def test_an_unscripted_targets_call_names_the_agent() -> None:
    concierge, _ = _desk()
    with pytest.raises(ScriptError, match=r"agent billing: unexpected model call"):
        run_test(concierge, [user("refund"), model(tool_calls=[TO_BILLING])])
