"""A child session's agent is found through the whole team of the handler's agent: a delegate
that only a hand-off target calls still runs its child session."""

from __future__ import annotations

import dormant
from dormant.models import ScriptedModel


def test_a_delegate_of_a_hand_off_target_runs_its_child_session() -> None:
    app = dormant.App(name="team")
    auditor = app.agent("auditor", ScriptedModel(["No anomalies in 3 invoices."]))
    app.agent("billing", ScriptedModel([
        {"tool_calls": [{"name": "audit", "args": {"input": "audit the account"},
                         "id": "call_audit"}]},
        "The audit found no anomalies.",
    ]), [app.context.system("You do billing."), app.context.history()],
        tools=[auditor.as_delegate(name="audit")], handoffs=["concierge"])
    concierge = app.agent("concierge", ScriptedModel([
        {"tool_calls": [{"name": "transfer_to_billing", "args": {}}]},
    ]), handoffs=["billing"])
    assert set(concierge.delegates()) == {"auditor"}

    reply = app.handler.rest(agent=concierge)(
        {"session_id": "desk", "input": {"message": "please audit my account"}})
    assert reply.status == "yielded_tool", reply

    parent = app.sessions.load("desk", turns=None)
    assert parent is not None
    [child_link] = parent.head.children
    child = app.sessions.load(child_link["session"], turns=None)
    assert child is not None and child.head.parent is not None
    assert child.head.parent["agent"] == "auditor"
    assert [e.text for e in child.loaded_events if e.type == "assistant"] == [
        "No anomalies in 3 invoices."]
    texts = [e.text for e in parent.loaded_events if e.type == "assistant"]
    assert texts[-1] == "The audit found no anomalies.", texts
    assert parent.head.agent == "billing"
