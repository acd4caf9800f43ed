"""{{name}}'s tests: each path of the agent, with no model and no AWS.

``run_test`` plays the ``model(...)`` steps instead of the agent's model, on a fresh in-memory
session, through the same turn code the Lambda functions run; ``approve`` and ``deny`` decide
a call that waits for approval, ``tool_input`` answers a question.
"""

from __future__ import annotations

from typing import Any

from dormant.models import ToolMessage
from dormant.testing import (
    approve,
    deny,
    get_tool_results,
    model,
    run_test,
    tool_input,
    user,
)

from app import WHICH_ORDER, LocalModel, build

REFUND = {"name": "refund", "args": {"order_id": "A-1042", "amount": 20}}
ASK = {"name": "ask_customer", "args": {"question": WHICH_ORDER}}


def test_a_refund_waits_for_approval() -> None:
    _, agent = build()
    run = run_test(agent, [user("Please refund order A-1042"), model(tool_calls=[REFUND])])
    assert run.status == "yielded_tool"
    [pending] = run.result.pending_approvals
    assert (pending.tool, pending.args) == ("refund", REFUND["args"])
    assert get_tool_results(run.events) == []  # nothing refunded yet


def test_an_approved_refund_is_performed() -> None:
    _, agent = build()
    run = run_test(agent, [user("Please refund order A-1042"), model(tool_calls=[REFUND]),
                           approve("refund"), model("Your refund is on its way.")])
    assert run.status == "completed"
    [result] = get_tool_results(run.events)
    assert result.result == {"order_id": "A-1042", "amount": 20.0, "status": "refunded"}


def test_a_denied_refund_is_not_performed_and_the_model_reads_why() -> None:
    _, agent = build()
    run = run_test(agent, [user("Please refund order A-1042"), model(tool_calls=[REFUND]),
                           deny("refund", reason="past 30 days"),
                           model("Sorry, that order is past the refund window.")])
    assert run.status == "completed"
    [result] = get_tool_results(run.events)
    assert result.denied and result.result is None  # the refund never ran
    read = run.model.requests[-1].messages[-1]  # what the model was sent after the denial
    assert isinstance(read, ToolMessage) and read.content == "Denied by the user: past 30 days"


def test_a_question_waits_for_the_customers_answer() -> None:
    _, agent = build()
    asked = run_test(agent, [user("I want a refund"), model(tool_calls=[ASK])])
    assert asked.status == "yielded_tool"
    assert [call.name for call in asked.result.yielded_tools] == ["ask_customer"]

    run = run_test(agent, [user("I want a refund"), model(tool_calls=[ASK]),
                           tool_input({"ask_customer": {"answer": "A-1042, 20 EUR"}}),
                           model(tool_calls=[REFUND])])
    [answered] = get_tool_results(run.events)
    assert answered.result == {"answer": "A-1042, 20 EUR"}
    assert [p.tool for p in run.result.pending_approvals] == ["refund"]


def test_the_local_model_takes_the_same_paths() -> None:
    app, agent = build(model=LocalModel())
    turn = app.handler.rest(agent=agent)

    def send(session: str, **input: Any) -> dict[str, Any]:
        return turn({"session_id": session, "input": input}).wire()

    asked = send("local", message="refund my order please")
    [call] = asked["yieldedTools"]
    assert call["args"] == {"question": WHICH_ORDER}
    paused = send("local", tools=[{"call_id": call["callId"],
                                   "input": {"answer": "A-7, 12.50 EUR"}}])
    [request] = paused["pendingApprovals"]
    assert request["args"] == {"order_id": "A-7", "amount": 12.5}
    done = send("local", approvals=[{"approval_id": request["approvalId"], "approved": True}])
    assert done["output"]["text"] == "Refunded 12.50 for order A-7."

    [request] = send("other", message="refund order B-9")["pendingApprovals"]
    denied = send("other", approvals=[{"approval_id": request["approvalId"], "approved": False,
                                       "reason": "already refunded"}])
    assert denied["output"]["text"] == "The refund for order B-9 was declined (already refunded)."
