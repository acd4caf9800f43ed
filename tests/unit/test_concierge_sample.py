"""The concierge sample: a concierge hands billing questions to a billing agent (an agent
used as a tool), whose refunds wait for a person's approval, or hands the conversation over
to billing, which hands back, and delegates an audit to an auditor in a child session; with no
key, on rule models."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dormant.http import build_resolver
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


def _get(resolver: Any, path: str) -> dict[str, Any]:
    """``GET path?events=true`` through the app's REST routes, as the console reads a
    session."""
    out = resolver.resolve({
        "resource": path, "path": path, "httpMethod": "GET", "headers": {},
        "multiValueHeaders": {}, "queryStringParameters": {"events": "true"},
        "multiValueQueryStringParameters": {"events": ["true"]}, "pathParameters": None,
        "stageVariables": None, "body": None, "isBase64Encoded": False,
        "requestContext": {"resourcePath": path, "httpMethod": "GET", "path": path,
                           "stage": "test", "requestId": "r-1", "identity": {}}}, None)
    assert out["statusCode"] == 200, out
    return json.loads(out["body"])  # type: ignore[no-any-return]


def test_an_audit_is_delegated_to_the_auditor_in_a_child_session() -> None:
    app, agent = concierge.build(MemoryStore(), env={})
    ask = app.handler.rest(agent=agent, response={"events": True})
    resolver = build_resolver(app, agent)

    parked = _turn(ask, "acct", message="audit my account")
    assert parked["status"] == "yielded_tool"  # the concierge's own turn parks on the call
    [deferred] = parked["deferredTools"]
    assert (deferred["name"], deferred["args"]) == ("audit", {"input": "audit my account"})

    # Once that turn committed, the auditor ran the task in a child session (here, in the
    # same process), and its answer resumed the concierge.
    parent = _get(resolver, "/sessions/session_acct")
    [child_link] = parent["children"]
    assert child_link["callId"] == deferred["callId"] and "parent" not in parent
    child = _get(resolver, f"/sessions/{child_link['sessionId']}")
    assert child["parent"] == {"sessionId": "session_acct", "callId": deferred["callId"]}
    assert "children" not in child
    assert [(e["type"], e.get("text") or e.get("name")) for e in child["events"]
            if e["type"] in ("user", "tool_call", "assistant")] == [
        ("user", "audit my account"), ("tool_call", "list_invoices"),
        ("assistant", "No anomalies in 3 invoices.")]
    [answer] = [e for e in parent["events"] if e["type"] == "assistant"]
    assert answer["text"] == "The audit is done: No anomalies in 3 invoices."
    assert parent["status"] == "active"
    [result] = [e for e in parent["events"] if e["type"] == "tool_result"]
    assert (result["call_id"], result["result"]) == (deferred["callId"],
                                                     "No anomalies in 3 invoices.")


def test_with_a_key_both_agents_use_the_real_model() -> None:
    _, agent = concierge.build(MemoryStore(), env={"OPENAI_API_KEY": "sk-test"})
    billing = agent.tools["billing"].agent
    auditor = agent.tools["audit"].delegate
    assert isinstance(agent.model, OpenAIModel)
    assert billing.model is agent.model and auditor.model is agent.model
    assert agent.handoffs == (billing,) and billing.handoffs == ("concierge",)
    assert agent.team() == {"concierge": agent, "billing": billing}
    assert agent.delegates() == {"auditor": auditor}
