"""Hand-offs: an agent hands the conversation to another (``transfer_to_<agent>``); the
session keeps the agent it was handed to, and later requests to the entry agent's handler
run that agent until it hands back or on."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

import dormant
from dormant.agent import HANDOFF_PREFIX
from dormant.errors import ConfigError
from dormant.events import HandoffEvent, InvocationStart, ToolResult
from dormant.models import ScriptedModel
from dormant.stores import Store
from dormant.testing import get_tool_results, model, run_test, user
from tests.conformance.conftest import STORE_FACTORIES

FACTORIES = {name: STORE_FACTORIES[name][1] for name in ("memory", "sqlite")}


def handoff(to: str, reason: str | None = None) -> dict[str, Any]:
    """A model reply that hands over to ``to``."""
    return {"text": "", "tool_calls": [{"name": HANDOFF_PREFIX + to,
                                        "args": {"reason": reason} if reason else {}}]}


@pytest.fixture(params=sorted(FACTORIES))
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    yield from FACTORIES[request.param]()


def desk(store: Store | None = None) -> tuple[dormant.App, ScriptedModel, ScriptedModel]:
    """A concierge that hands refunds to billing, which hands back: each its own model."""
    app = dormant.App(store=store) if store is not None else dormant.App()
    front = ScriptedModel([handoff("billing", "a refund"), "Anything else?"])
    back = ScriptedModel(["Billing here: which booking?", "Refunded BK-1.",
                          handoff("concierge")])
    app.agent("concierge", front, [app.context.system("You greet guests."),
                                   app.context.history()], handoffs=["billing"])
    app.agent("billing", back, [app.context.system("You do refunds."),
                                app.context.history()], handoffs=["concierge"])
    return app, front, back


def test_a_handoff_and_a_handback_across_requests(store):
    app, front, back = desk(store)
    concierge = app.agents["concierge"][0]
    rest = app.handler.rest(agent=concierge)

    first = rest({"session_id": "s1", "input": {"message": "I want a refund"}})
    # the same turn goes on with billing, whose reply is the turn's
    assert first.status == "completed" and first.output.text == "Billing here: which booking?"
    assert first.agent == "billing" and first.wire()["agent"] == "billing"
    second = rest({"session_id": "s1", "input": {"message": "BK-1"}})
    assert (second.output.text, second.agent) == ("Refunded BK-1.", "billing")
    third = rest({"session_id": "s1", "input": {"message": "thanks"}})
    assert (third.output.text, third.agent) == ("Anything else?", "concierge")

    session = app.sessions.load("session_s1", turns=None)
    assert session is not None
    events = session.loaded_events
    assert [e.agent for e in events if isinstance(e, InvocationStart)] == [
        "concierge", "billing", "billing"]
    moves = [e for e in events if isinstance(e, HandoffEvent)]
    assert [(m.from_agent, m.to_agent, m.reason) for m in moves] == [
        ("concierge", "billing", "a refund"), ("billing", "concierge", None)]
    results = {e.call_id: e for e in events if isinstance(e, ToolResult)}
    assert [results[m.call_id].result for m in moves] == ["Handed over to billing.",
                                                           "Handed over to concierge."]
    assert session.head.agent == "concierge"
    # each model saw its own instructions and tools, and the whole conversation
    assert [r.system for r in back.requests] == [["You do refunds."]] * 3
    assert {t.name for r in back.requests for t in r.tools} == {"transfer_to_concierge"}
    assert {t.name for r in front.requests for t in r.tools} == {"transfer_to_billing"}
    assert [m.role for m in back.requests[1].messages] == [
        "user", "assistant", "tool", "assistant", "user"]
    assert front.requests[-1].messages[0].text == "I want a refund"


def test_a_handoff_is_offered_as_a_tool_with_an_optional_reason():
    app, front, _ = desk()
    app.handler.rest(agent=app.agents["concierge"][0])({"input": {"message": "hi"}})
    spec = front.requests[0].tools[0]
    assert spec.name == "transfer_to_billing" and "billing" in spec.description
    assert spec.parameters["properties"].keys() == {"reason"}
    assert not spec.parameters.get("required")


def test_only_the_first_handoff_of_a_step_counts():
    app = dormant.App()
    both = {"text": "", "tool_calls": [{"name": "transfer_to_billing", "args": {}},
                                       {"name": "transfer_to_sales", "args": {}}]}
    concierge = app.agent("concierge", ScriptedModel([both]), handoffs=["billing", "sales"])
    app.agent("billing", ScriptedModel(["Billing."]))
    app.agent("sales", ScriptedModel(["Sales."]))

    reply = app.handler.rest(agent=concierge)({"session_id": "s", "input": {"message": "?"}})

    assert (reply.output.text, reply.agent) == ("Billing.", "billing")
    outcomes = get_tool_results(app.sessions.load("session_s", turns=None).loaded_events)
    assert outcomes[0].result == "Handed over to billing."
    assert outcomes[1].error is not None and "went to billing" in outcomes[1].error


def test_an_unknown_or_ambiguous_target_is_a_config_error_naming_the_agent():
    app = dormant.App()
    lost = app.agent("concierge", ScriptedModel(["hi"]), handoffs=["nobody"])
    with pytest.raises(ConfigError, match="'concierge' hands over to 'nobody'"):
        app.handler.rest(agent=lost)  # as the handler is made
    with pytest.raises(ConfigError, match="'concierge' hands over to 'nobody'"):
        app.run(lost, message="hi")  # at the latest, on the first turn

    twice = app.agent("front", ScriptedModel(["hi"]), handoffs=["twin"])
    app.agent("twin", ScriptedModel(["a"]))
    app.agent("twin", ScriptedModel(["b"]))
    with pytest.raises(ConfigError, match="2 agents of its app are named 'twin'"):
        twice.team()
    with pytest.raises(ConfigError, match="handoffs"):
        app.agent("odd", ScriptedModel(["hi"]), handoffs=[42])  # type: ignore[list-item]


def test_a_handler_of_another_agent_does_not_run_the_handed_over_one():
    app, _, _ = desk()
    app.handler.rest(agent=app.agents["concierge"][0])({"session_id": "s",
                                                        "input": {"message": "refund"}})
    other = app.agent("other", ScriptedModel(["Other here."]))

    reply = app.handler.rest(agent=other)({"session_id": "s", "input": {"message": "hi"}})

    assert reply.output.text == "Other here."
    assert reply.agent is None and "agent" not in reply.wire()  # one agent alone: not said


def test_a_sub_agent_is_not_offered_its_handoffs():
    app = dormant.App()
    inner = ScriptedModel(["Billing says hi."])
    billing = app.agent("billing", inner, handoffs=["concierge"])
    concierge = app.agent("concierge", ScriptedModel([
        {"text": "", "tool_calls": [{"name": "billing", "args": {"input": "say hi"}}]},
        "Done."]), tools=[billing.as_tool()])

    reply = app.handler.rest(agent=concierge)({"input": {"message": "hi"}})

    assert reply.output.text == "Done."
    assert inner.requests[0].tools == []


def test_agui_says_which_agent_answered():
    app, _, _ = desk()
    handle = app.handler.agui(agent=app.agents["concierge"][0])

    events = [json.loads(e.model_dump_json(by_alias=True))
              for e in handle({"session_id": "t", "input": {"message": "refund"}})]

    custom = [e for e in events if e["type"] == "CUSTOM" and e["name"] == "dormant.handoff"]
    assert len(custom) == 1
    assert (custom[0]["value"]["from_agent"], custom[0]["value"]["to_agent"]) == (
        "concierge", "billing")
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["result"]["agent"] == "billing"


def test_a_kit_script_hands_over_and_back():
    """The kit scripts the hand-off target too (its own model is replaced, as a
    sub-agent's is): ``model(..., agent="billing")`` is billing's reply."""
    app = dormant.App()
    own = ScriptedModel(["never used"])
    billing = app.agent("billing", own, handoffs=["concierge"])
    concierge = app.agent("concierge", None, handoffs=[billing])

    run = run_test(concierge, [
        user("refund please"),
        model(tool_calls=[{"name": "transfer_to_billing", "args": {}}]),  # concierge's
        model("Which booking?", agent="billing"),
        user("BK-1, thanks"),          # billing answers, then hands back...
        model(tool_calls=[{"name": "transfer_to_concierge", "args": {"reason": "done"}}],
              agent="billing"),
        model("Glad to help."),        # ...and the concierge (the kit's model) replies
    ])

    assert [r.output.text for r in run.results] == ["Which booking?", "Glad to help."]
    moves = [(e.from_agent, e.to_agent) for e in run.events if isinstance(e, HandoffEvent)]
    assert moves == [("concierge", "billing"), ("billing", "concierge")]
    assert run.session.head.agent == "concierge"
    assert own.requests == []


def test_the_inspector_shows_a_handoff():
    from dormant._inspect import render_session

    app, _, _ = desk()
    app.handler.rest(agent=app.agents["concierge"][0])({"session_id": "s",
                                                        "input": {"message": "refund"}})

    shown = render_session(app.sessions.load("session_s", turns=None))

    assert "⇄ concierge handed over to billing (a refund)" in shown
