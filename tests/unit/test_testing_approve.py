"""``approve(...)`` and ``deny(...)``: a script decides what waits for approval in a person's
words — every pending request, or the one a tool name, call id or approval id names — through
the same decisions ``approval({...})`` sends, in process and through the REST handler."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant.models import ToolMessage
from dormant.stores import MemoryStore
from dormant.testing import (
    ScriptError,
    approve,
    deny,
    get_tool_results,
    model,
    run_test,
    user,
)

THROUGH = ["run", "handlers"]
REFUND = {"name": "refund", "args": {"order_id": "A-1042"}}
NOTE = {"name": "note", "args": {"order_id": "A-1042"}}


class Order(BaseModel):
    order_id: str


@pytest.fixture()
def ran() -> list[str]:
    return []


@pytest.fixture()
def agent(ran: list[str]) -> dormant.Agent:
    """``refund`` and ``note`` each wait for a person's approval before they run."""
    app = dormant.App(name="kit")

    def refund(ctx: dormant.ToolContext) -> dict[str, Any]:
        ran.append(f"refund {ctx.args.order_id}")
        return {"order_id": ctx.args.order_id, "status": "refunded"}

    def note(ctx: dormant.ToolContext) -> str:
        ran.append(f"note {ctx.args.order_id}")
        return "noted"

    tools = [app.tool(name="refund", description="d", schema=Order, execute=refund),
             app.tool(name="note", description="d", schema=Order, execute=note)]
    return app.agent(name="shop", tools=tools,
                     tool_approval={"refund": "user-approval", "note": "user-approval"})


@pytest.mark.parametrize("through", THROUGH)
def test_approve_runs_the_tool_once(agent: dormant.Agent, ran: list[str], through: Any) -> None:
    run = run_test(agent, [user("refund A-1042"), model(tool_calls=[REFUND]),
                           approve("refund"), model("Refunded.")], through=through)

    assert run.status == "completed"
    assert ran == ["refund A-1042"]
    [outcome] = get_tool_results(run.events)
    assert (outcome.name, outcome.result, outcome.denied) == (
        "refund", {"order_id": "A-1042", "status": "refunded"}, False)
    assert [e.type for e in run.events].count("approval_decided") == 1


@pytest.mark.parametrize("through", THROUGH)
def test_deny_never_runs_the_tool_and_the_model_reads_the_denial(
        agent: dormant.Agent, ran: list[str], through: Any) -> None:
    run = run_test(agent, [user("refund A-1042"), model(tool_calls=[REFUND]),
                           deny("refund", reason="too large"),
                           model("Sorry, I can't refund that.")], through=through)

    assert run.status == "completed"
    assert ran == []
    [outcome] = get_tool_results(run.events)
    assert outcome.denied and outcome.result is None
    read = run.model.requests[-1].messages[-1]  # what the reply after the denial was asked with
    assert isinstance(read, ToolMessage) and read.name == "refund"
    assert "too large" in read.content and read.is_error


def test_approve_with_no_name_decides_every_pending_request(agent: dormant.Agent,
                                                            ran: list[str]) -> None:
    run = run_test(agent, [user("refund A-1042 and note it"),
                           model(tool_calls=[REFUND, NOTE]), approve(), model("Done.")])

    assert run.status == "completed"
    assert sorted(ran) == ["note A-1042", "refund A-1042"]
    assert [o.denied for o in get_tool_results(run.events)] == [False, False]


def test_by_approval_id_one_is_denied_and_the_other_approved(agent: dormant.Agent,
                                                             ran: list[str]) -> None:
    store = MemoryStore()
    waiting = run_test(agent, [user("refund A-1042 and note it"),
                               model(tool_calls=[REFUND, NOTE])], store=store, session_id="s-1")
    ids = {p.tool: p.approval_id for p in waiting.session.pending_approvals}
    assert set(ids) == {"refund", "note"}

    run = run_test(agent, [deny(ids["note"], reason="no notes"), approve(ids["refund"]),
                           model("Refunded, no note.")], store=store, session_id="s-1")

    assert [r.status for r in run.results] == ["yielded_tool", "completed"]
    assert ran == ["refund A-1042"]
    assert {o.name: o.denied for o in get_tool_results(run.events)} == {
        "refund": False, "note": True}


@pytest.mark.parametrize("through", THROUGH)
def test_a_name_with_nothing_pending_fails_naming_what_is(agent: dormant.Agent, ran: list[str],
                                                          through: Any) -> None:
    with pytest.raises(ScriptError) as failed:
        run_test(agent, [user("refund A-1042"), model(tool_calls=[REFUND]),
                         approve("lookup_stay"), model("Done.")], through=through)

    assert "'lookup_stay'" in str(failed.value)
    assert re.search(r"pending: refund \(apr_\w+\)$", str(failed.value)), failed.value
    assert ran == []


@pytest.mark.parametrize("step", [approve(), deny(), deny("refund", reason="no")])
def test_a_decision_when_nothing_waits_fails_saying_so(agent: dormant.Agent, step: Any) -> None:
    with pytest.raises(AssertionError, match="matches 0 pending requests; pending: nothing"):
        run_test(agent, [user("hello"), model("Hi."), step])
