"""An agent used as a tool, resumed across a restart, on every store the issue names.

The sub-agent's tool waits for a person; the decision is served by a NEW app (fresh ``App``,
fresh agents, fresh models, a fresh store object over the same file or table: another
process after a restart). The sub-agent carries on first (its approved tool runs once, its
next model call sees only its own task and events), then its caller (whose model reads the
sub-agent's reply as the call's result and nothing of the sub-agent's events).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant.events import ToolResult
from dormant.models import AssistantMessage, ScriptedModel, ToolMessage, UserMessage
from dormant.stores import DynamoDBStore, MemoryStore, SqliteStore, Store
from tests._moto import aws_env, in_process_aws

Reopen = Callable[[], Store]


def _memory() -> Iterator[tuple[Store, Reopen]]:
    store = MemoryStore()
    yield store, lambda: store  # (one process's memory: the same object is all there is)


def _sqlite() -> Iterator[tuple[Store, Reopen]]:
    with tempfile.TemporaryDirectory(prefix="dormant-sub-") as tmp:
        path = f"{tmp}/sub.db"
        opened = [SqliteStore(path)]

        def reopen() -> Store:
            opened.append(SqliteStore(path))
            return opened[-1]

        try:
            yield opened[0], reopen
        finally:
            for store in opened:
                store.close()


def _dynamodb_moto() -> Iterator[tuple[Store, Reopen]]:
    with pytest.MonkeyPatch.context() as patch:
        aws_env(patch)
        with in_process_aws():
            store = DynamoDBStore("dormant-subagents")
            store.ensure_table()
            yield store, lambda: DynamoDBStore("dormant-subagents")


_STORES = {"memory": _memory, "sqlite": _sqlite, "dynamodb-moto": _dynamodb_moto}


@pytest.fixture(params=sorted(_STORES))
def stores(request: pytest.FixtureRequest) -> Iterator[tuple[Store, Reopen]]:
    yield from _STORES[request.param]()


class Refund(BaseModel):
    booking: str
    amount: int


REFUND = {"tool_calls": [{"name": "refund", "args": {"booking": "BK-1", "amount": 40},
                          "id": "call_refund"}]}
ASK_BILLING = {"tool_calls": [{"name": "billing", "args": {"input": "refund BK-1 40"},
                               "id": "call_billing"}]}


class Process:
    """One process's app: its own App, agents and models over ``store``."""

    def __init__(self, store: Store, ran: list[str], billing: list[Any],
                 concierge: list[Any], *, history: bool = True) -> None:
        self.app = app = dormant.App(name="subagents", store=store)

        def refund(ctx: dormant.ToolContext) -> dict[str, Any]:
            ran.append(ctx.call_id)
            ctx.state["refunded"] = ctx.args.booking
            return {"refunded": ctx.args.amount}

        tool = app.tool(name="refund", description="Refund a booking", schema=Refund,
                        execute=refund)
        self.billing_model = ScriptedModel(billing)
        self.concierge_model = ScriptedModel(concierge)
        billing_agent = app.agent("billing", self.billing_model,
                                  [app.context.system("You do billing.")], tools=[tool],
                                  tool_approval={"refund": "user-approval"})
        recipe = [app.context.system("You are the concierge.")]
        if history:
            recipe.append(app.context.history())
        self.agent = app.agent("concierge", self.concierge_model, recipe,
                               tools=[billing_agent.as_tool(description="Billing questions")])
        self.rest = app.handler.rest(agent=self.agent)


def _park(store: Store, ran: list[str], *, history: bool = True) -> Process:
    first = Process(store, ran, [REFUND], [ASK_BILLING], history=history)
    reply = first.rest({"session_id": "s1", "input": {"message": "please refund BK-1"}})
    assert reply.status == "yielded_tool"
    [pending] = reply.pending_approvals or []
    assert (pending.call_id, pending.tool, pending.agent) == (
        "call_refund", "refund", "concierge/billing")
    assert ran == []
    first.billing_model.assert_consumed()
    first.concierge_model.assert_consumed()
    return first


def _decide(stores: tuple[Store, Reopen], approved: bool, billing_reply: str,
            concierge_reply: str, *, history: bool = True) -> tuple[Process, Any, list[str]]:
    store, reopen = stores
    ran: list[str] = []
    _park(store, ran, history=history)
    # another process, after a restart: nothing of the first app is reused but the data
    later = Process(reopen(), ran, [billing_reply], [concierge_reply], history=history)
    session = later.app.sessions.get("s1")
    assert session is not None
    [pending] = session.pending_approvals
    assert pending.agent == "concierge/billing"
    reply = later.rest({"session_id": "s1", "input": {"approvals": [
        {"approval_id": pending.approval_id, "approved": approved}]}})
    return later, reply, ran


def test_an_approval_inside_a_sub_agent_resumes_it_then_its_caller_after_a_restart(
        stores: tuple[Store, Reopen]) -> None:
    later, reply, ran = _decide(stores, True, "Refunded 40 for BK-1.", "Done: refunded.")

    assert reply.status == "completed" and reply.output.text == "Done: refunded."
    assert ran == ["call_refund"]  # once, under its call id
    # the sub-agent's next model call sees its own task and history only
    [billing_request] = later.billing_model.requests
    assert billing_request.system == ["You do billing."]
    messages = billing_request.messages
    assert [type(m) for m in messages] == [UserMessage, AssistantMessage, ToolMessage]
    assert messages[0] == UserMessage(text="refund BK-1 40")
    assert messages[2] == ToolMessage("call_refund", "refund", '{"refunded": 40}', False)
    # then the caller, whose model reads the sub-agent's reply as its call's result
    [concierge_request] = later.concierge_model.requests
    assert concierge_request.system == ["You are the concierge."]
    messages = concierge_request.messages
    assert [type(m) for m in messages] == [UserMessage, AssistantMessage, ToolMessage]
    assert messages[0] == UserMessage(text="please refund BK-1")
    # (a tool's result is JSON: the reply is a JSON string)
    assert messages[2] == ToolMessage("call_billing", "billing", '"Refunded 40 for BK-1."',
                                      False)
    session = later.app.sessions.get("s1")
    assert session is not None and session.state == {"refunded": "BK-1"}
    assert session.status == "active" and session.pending_approvals == []
    results = [(e.call_id, e.scope.path if e.scope else None)
               for e in session.events if isinstance(e, ToolResult)]
    assert results == [("call_refund", "concierge/billing"), ("call_billing", None)]


def test_a_denial_inside_a_sub_agent_is_its_tool_result_then_its_caller_carries_on(
        stores: tuple[Store, Reopen]) -> None:
    later, reply, ran = _decide(stores, False, "I could not refund it.",
                                "Billing could not refund it.")

    assert reply.status == "completed" and reply.output.text == "Billing could not refund it."
    assert ran == []
    [billing_request] = later.billing_model.requests
    denied = billing_request.messages[2]
    assert isinstance(denied, ToolMessage) and denied.call_id == "call_refund"
    assert denied.is_error
    [concierge_request] = later.concierge_model.requests
    assert concierge_request.messages[2] == ToolMessage(
        "call_billing", "billing", '"I could not refund it."', False)
    session = later.app.sessions.get("s1")
    assert session is not None and session.state == {}
    [refund] = [e for e in session.events if isinstance(e, ToolResult)
                and e.call_id == "call_refund"]
    assert refund.denied and refund.scope is not None and refund.scope.call_id == "call_billing"


def test_a_sub_agent_resumes_with_its_own_events_under_a_caller_that_keeps_no_history(
        stores: tuple[Store, Reopen]) -> None:
    # The request loads what its agent's recipe asks for; the sub-agent's own events (in the
    # open invocation) must be loaded all the same, or it would forget its pending call.
    later, reply, ran = _decide(stores, True, "Refunded 40 for BK-1.", "Done.", history=False)

    assert reply.status == "completed" and ran == ["call_refund"]
    [billing_request] = later.billing_model.requests
    assert [type(m) for m in billing_request.messages] == [
        UserMessage, AssistantMessage, ToolMessage]
    [concierge_request] = later.concierge_model.requests
    assert concierge_request.messages == []  # (a caller without history sees none)
