"""{{name}}'s tests: each path of the agent, with no model and no AWS.

``run_test`` plays the ``model(...)`` steps instead of the agent's model, on a fresh in-memory
session, through the same turn code the Lambda functions run.
"""

from __future__ import annotations

from typing import Any

from dormant.testing import get_tool_results, model, run_test, tool_input, user

from app import LocalModel, build

REFUND = {"name": "refund", "args": {"order_id": "A-1042", "amount": 20}}


def test_a_refund_waits_for_a_person() -> None:
    _, agent = build()
    run = run_test(agent, [user("Please refund order A-1042"), model(tool_calls=[REFUND])])
    assert run.status == "yielded_tool"
    assert [call.name for call in run.result.yielded_tools] == ["refund"]
    assert get_tool_results(run.events) == []  # nothing refunded yet


def test_an_approved_refund_is_performed() -> None:
    _, agent = build()
    run = run_test(agent, [user("Please refund order A-1042"), model(tool_calls=[REFUND]),
                           tool_input({"refund": {"approved": True}}),
                           model("Your refund is on its way.")])
    assert run.status == "completed"
    [result] = get_tool_results(run.events)
    assert result.result == {"order_id": "A-1042", "amount": 20.0, "status": "refunded"}


def test_a_declined_refund_is_not_performed() -> None:
    _, agent = build()
    run = run_test(agent, [user("Please refund order A-1042"), model(tool_calls=[REFUND]),
                           tool_input({"refund": {"approved": False, "note": "past 30 days"}}),
                           model("Sorry, that order is past the refund window.")])
    [result] = get_tool_results(run.events)
    assert result.result["status"] == "declined"


def test_the_local_model_takes_the_same_path() -> None:
    app, agent = build(model=LocalModel())
    turn = app.handler.rest(agent=agent)

    def send(**input: Any) -> dict[str, Any]:
        return turn({"session_id": "local", "input": input}).wire()

    paused = send(message="refund order A-7 for 12.50 EUR")
    [call] = paused["yieldedTools"]
    assert call["args"] == {"order_id": "A-7", "amount": 12.5}
    done = send(tools=[{"call_id": call["callId"], "input": {"approved": True}}])
    assert done["output"]["text"] == "Refunded 12.50 for order A-7."
