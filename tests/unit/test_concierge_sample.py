"""The concierge sample: a concierge hands billing questions to a billing agent (an agent
used as a tool), whose refunds wait for a person's approval, or hands the conversation over
to billing, which hands back; with no key, on rule models."""

from __future__ import annotations

from typing import Any

import pytest

from dormant.models import OpenAIModel
from dormant.samples import concierge
from dormant.stores.memory import MemoryStore


@pytest.fixture
def ask() -> Any:
    app, agent = concierge.build(MemoryStore(), env={})
    return app.handler.rest(agent=agent, response={"events": True})


def _turn(ask: Any, session_id: str, **input: Any) -> dict[str, Any]:
    return ask({"session_id": session_id, "input": input}).wire()  # type: ignore[no-any-return]


def _scoped(events: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    return [(e["type"], (e.get("scope") or {}).get("path")) for e in events
            if e["type"] in ("tool_call", "tool_result", "approval_requested", "assistant")]


def test_a_refund_goes_to_billing_and_waits_for_approval_there(ask: Any) -> None:
    paused = _turn(ask, "refund", message="refund invoice INV-7")
    assert paused["status"] == "yielded_tool"
    [approval] = paused["pendingApprovals"]
    assert (approval["tool"], approval["args"], approval["agent"]) == (
        "refund", {"invoice": "INV-7", "amount_cents": 12000}, "concierge/billing")
    assert _scoped(paused["events"]) == [
        ("tool_call", None),  # the concierge calls billing
        ("tool_call", "concierge/billing"), ("tool_result", "concierge/billing"),
        ("tool_call", "concierge/billing"), ("approval_requested", "concierge/billing")]
    [handed] = [e for e in paused["events"] if e["type"] == "tool_call" and "scope" not in e]
    assert (handed["name"], handed["args"]) == ("billing", {"input": "refund invoice INV-7"})
    assert {e["scope"]["call_id"] for e in paused["events"] if "scope" in e} == {
        handed["call_id"]}

    done = _turn(ask, "refund", approvals=[{"approval_id": approval["approvalId"],
                                            "approved": True}])
    assert done["status"] == "completed"
    assert done["output"]["text"] == "Billing says: Refunded 120.00 EUR on invoice INV-7."
    looked = _turn(ask, "refund", message="what is invoice INV-7?")
    assert looked["output"]["text"] == "Billing says: Invoice INV-7 is for 120.00 EUR, refunded."


def test_a_denied_refund_says_so_with_the_reason(ask: Any) -> None:
    [approval] = _turn(ask, "deny", message="Please refund INV-8")["pendingApprovals"]
    done = _turn(ask, "deny", approvals=[{"approval_id": approval["approvalId"],
                                          "approved": False, "reason": "paid in cash"}])
    assert done["output"]["text"] == ("Billing says: The refund of INV-8 was not approved. "
                                      "The reason given: paid in cash.")


def test_other_questions_the_concierge_answers_itself(ask: Any) -> None:
    done = _turn(ask, "hello", message="hello, what can you do?")
    assert [e["type"] for e in done["events"] if e["type"] == "tool_call"] == []
    assert "refund invoice INV-7" in done["output"]["text"]
    unknown = _turn(ask, "unknown", message="what is on my invoice INV-404?")
    assert unknown["output"]["text"].startswith("Billing says: I couldn't look that invoice up")


def test_asking_for_billing_hands_over_and_billing_answers_until_it_hands_back(
        ask: Any) -> None:
    handed = _turn(ask, "desk", message="let me talk to billing")
    assert (handed["status"], handed["agent"]) == ("completed", "billing")
    assert handed["output"]["text"].startswith("Billing here: which invoice")
    [move] = [e for e in handed["events"] if e["type"] == "handoff"]
    assert (move["from_agent"], move["to_agent"], move["reason"]) == (
        "concierge", "billing", "the customer asked to talk to billing")
    [call] = [e for e in handed["events"] if e["type"] == "tool_call"]
    assert (call["name"], call["call_id"]) == ("transfer_to_billing", move["call_id"])

    # Billing answers itself now: no call of the billing tool, no sub-agent scope.
    looked = _turn(ask, "desk", message="what is invoice INV-8?")
    assert (looked["agent"], looked["output"]["text"]) == (
        "billing", "Invoice INV-8 is for 45.00 EUR, paid.")
    assert _scoped(looked["events"]) == [("tool_call", None), ("tool_result", None),
                                         ("assistant", None)]
    # Its refund waits for approval as the session's agent's own (no agent path).
    [approval] = _turn(ask, "desk", message="refund INV-7")["pendingApprovals"]
    assert (approval["tool"], approval.get("agent")) == ("refund", None)
    done = _turn(ask, "desk", approvals=[{"approval_id": approval["approvalId"],
                                          "approved": True}])
    assert (done["agent"], done["output"]["text"]) == (
        "billing", "Refunded 120.00 EUR on invoice INV-7.")

    back = _turn(ask, "desk", message="thanks, that's all")
    assert (back["agent"], back["output"]["text"]) == (
        "concierge", "Welcome back! Anything else I can help with?")
    assert [(e["from_agent"], e["to_agent"]) for e in back["events"]
            if e["type"] == "handoff"] == [("billing", "concierge")]
    # The concierge again: a billing question goes to the billing tool.
    again = _turn(ask, "desk", message="what is invoice INV-7?")
    assert (again["agent"], again["output"]["text"]) == (
        "concierge", "Billing says: Invoice INV-7 is for 120.00 EUR, refunded.")


def test_with_a_key_both_agents_use_the_real_model() -> None:
    _, agent = concierge.build(MemoryStore(), env={"OPENAI_API_KEY": "sk-test"})
    billing = agent.tools["billing"].agent
    assert isinstance(agent.model, OpenAIModel)
    assert billing.model is agent.model
    assert agent.handoffs == (billing,) and billing.handoffs == ("concierge",)
    assert agent.team() == {"concierge": agent, "billing": billing}
