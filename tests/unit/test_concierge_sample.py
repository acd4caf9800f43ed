"""The concierge sample: a concierge hands billing questions to a billing agent (an agent
used as a tool), whose refunds wait for a person's approval; with no key, on rule models."""

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


def test_with_a_key_both_agents_use_the_real_model() -> None:
    _, agent = concierge.build(MemoryStore(), env={"OPENAI_API_KEY": "sk-test"})
    billing = agent.tools["billing"].agent
    assert isinstance(agent.model, OpenAIModel)
    assert billing.model is agent.model
