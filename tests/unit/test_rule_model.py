"""``RuleModel``, the keyless model users extend, and app specs' checks of a factory."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant._appspec import AppSpecError, build_app
from dormant.models import RuleModel, ToolCallChunk
from dormant.models.rules import Reply, ToolOutcome


class Order(BaseModel):
    order: str


class Refunds(RuleModel):
    def reply(self, text: str) -> Reply:
        if "both" in text:
            return [self.call("refund", {"order": "A-1"}), self.call("refund", {"order": "A-2"})]
        return self.call("refund", {"order": "A-1"}) if "refund" in text else "No rule."

    def after_tool(self, result: ToolOutcome) -> Reply:
        return f"{result.name}: {result.data['status']}"


def _agent(model: Any) -> tuple[dormant.App, dormant.Agent]:
    app = dormant.App(name="rules")
    refund = app.tool(name="refund", description="Refund an order",
                      execute=lambda ctx: {"status": f"refunded {ctx.args.order}"},
                      schema=Order)
    return app, app.agent(name="rules", model=model, tools=[refund])


def _turn(model: Any, message: str) -> dict[str, Any]:
    app, agent = _agent(model)
    turn = app.handler.rest(agent=agent, response={"events": True})
    return turn({"session_id": "r", "input": {"message": message}}).wire()  # type: ignore[no-any-return]


def test_a_rule_calls_a_tool_and_the_result_goes_to_after_tool() -> None:
    assert _turn(Refunds(), "refund please")["output"]["text"] == "refund: refunded A-1"


def test_a_rule_may_call_several_tools_in_one_step() -> None:
    done = _turn(Refunds(), "refund both")
    results = [e["result"] for e in done["events"] if e["type"] == "tool_result"]
    assert results == [{"status": "refunded A-1"}, {"status": "refunded A-2"}]
    assert done["output"]["text"] == "refund: refunded A-2"  # the step's last result


def test_text_is_streamed_word_by_word() -> None:
    chunks = list(RuleModel.play("No rule answers this."))
    assert [c.text for c in chunks] == ["No ", "rule ", "answers ", "this."]  # type: ignore[union-attr]


def test_the_defaults_say_what_to_override_and_pass_results_on() -> None:
    assert "override RuleModel.reply" in _turn(RuleModel(), "hello")["output"]["text"]
    outcome = ToolOutcome("lookup", "call_1", "not json", is_error=False)
    assert outcome.data == "not json"
    assert RuleModel().after_tool(outcome) == "lookup answered: not json"
    failed = ToolOutcome("lookup", "call_1", "boom", is_error=True)
    assert RuleModel().after_tool(failed) == "lookup failed: boom"


class Guarded(Refunds):
    """Says what came of a refund under an approval policy, naming the order it asked for."""

    def after_tool(self, result: ToolOutcome) -> Reply:
        if result.denied:
            return f"No refund for {result.args['order']}: {result.reason or 'no reason'}."
        return super().after_tool(result)


@pytest.mark.parametrize(("reason", "reply"), [("too late", "No refund for A-1: too late."),
                                               (None, "No refund for A-1: no reason.")])
def test_after_tool_sees_a_denial_its_reason_and_the_args_it_called_with(
        reason: str | None, reply: str) -> None:
    app = dormant.App(name="rules")
    refund = app.tool(name="refund", description="Refund an order", schema=Order,
                      execute=lambda ctx: {"status": "refunded"})
    agent = app.agent(name="rules", model=Guarded(), tools=[refund],
                      tool_approval={"refund": "user-approval"})
    rest = app.handler.rest(agent=agent)
    [pending] = rest({"session_id": "g", "input": {"message": "refund"}}).pending_approvals or []
    done = rest({"session_id": "g", "input": {"approvals": [
        {"approval_id": pending.approval_id, "approved": False, "reason": reason}]}})
    assert done.output.text == reply


def test_a_failure_is_not_a_denial() -> None:
    failed = ToolOutcome("refund", "call_1", "Denied by the user? no: a timeout", is_error=True)
    denied = ToolOutcome("refund", "call_1", "Denied by the user: too late", is_error=True)
    assert (failed.denied, failed.reason) == (False, None)
    assert (denied.denied, denied.reason) == (True, "too late")
    assert not ToolOutcome("refund", "call_1", "Denied by the user", is_error=False).denied


def test_a_rule_answering_something_else_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match=r"return text, self\.call"):
        list(RuleModel.play([ToolCallChunk("c", "x", {}), "oops"]))  # type: ignore[list-item]


def test_a_factory_that_cannot_take_store_is_an_app_spec_error() -> None:
    def build() -> Any:
        return _agent(RuleModel())

    with pytest.raises(AppSpecError, match="store= and model= keyword arguments"):
        build_app(build, store=None, spec="app.py")


def test_a_type_error_inside_a_factory_is_the_apps_own() -> None:
    def build(store: Any = None, model: Any = None) -> Any:
        raise TypeError("an argument of the app's own went wrong")

    with pytest.raises(TypeError, match="of the app's own"):
        build_app(build, store=None)
