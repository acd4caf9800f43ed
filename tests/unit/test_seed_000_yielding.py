"""Seed 000, "Yielding: stopping to ask, then sleeping as a row", walkthrough by walkthrough."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant.testing import get_tool_results, model, run_test, tool_input, user

DELETE = {"name": "request_approval", "args": {"action": "delete the 2019 archive"}}


class Action(BaseModel):
    action: str


class Decision(BaseModel):
    approved: bool
    note: str | None = None


def _prepare(ctx: dormant.ToolContext) -> Any:
    ctx.state["pending_action"] = ctx.args.action
    return ctx.args


def _execute(ctx: dormant.ToolContext) -> Any:
    decision = ctx.input
    if not decision or not decision.approved:
        return {"action": ctx.args.action, "status": "declined"}
    return {"action": ctx.args.action, "status": "performed", "note": decision.note}


def _finalize(ctx: dormant.ToolContext) -> None:
    ctx.state.pop("pending_action", None)


@pytest.fixture()
def app() -> dormant.App:
    return dormant.App(name="seed-000")


@pytest.fixture()
def operator(app: dormant.App) -> dormant.Agent:
    request_approval = app.tool(
        name="request_approval",
        description="Ask a human to approve an action before performing it",
        schema=Action,
        yield_schema=Decision,
        prepare=_prepare,
        execute=_execute,
        finalize=_finalize,
    )
    return app.agent(
        name="operator",
        context=[app.context.system("Ask for approval before any destructive action."),
                 app.context.history()],
        tools=[request_approval],
    )


def _types(events: list[Any]) -> list[str]:
    return [e.type for e in events if e.type != "state_delta"]


def test_step1_a_tool_needs_execute_or_yield_schema(app: dormant.App) -> None:
    with pytest.raises(ValueError, match="needs an execute or a yield_schema"):
        app.tool(name="nothing", description="does nothing", schema=Action)
    answer_only = app.tool(name="ask", description="ask", schema=Action, yield_schema=Decision)
    assert answer_only.yields and answer_only.execute is None


def test_step2_the_run_that_stops(operator: dormant.Agent) -> None:
    paused = run_test(operator, [user("Delete the 2019 archive"), model(tool_calls=[DELETE])])

    assert paused.result.status == "yielded_tool"
    assert paused.session.status == "awaiting_input"
    asked = paused.result.yielded_tools  # type: ignore[union-attr]
    assert [(y.name, y.args) for y in asked] == [
        ("request_approval", {"action": "delete the 2019 archive"})]
    assert asked[0].call_id.startswith("call_")
    assert [y.call_id for y in paused.session.yielded_tools] == [asked[0].call_id]
    assert paused.session.state["pending_action"] == "delete the 2019 archive"


def test_step2_resume_readiness_is_read_from_plain_events(operator: dormant.Agent) -> None:
    paused = run_test(operator, [user("Delete the 2019 archive"), model(tool_calls=[DELETE])])

    unresolved = dormant.validate_resume_state(paused.events)
    with pytest.raises(dormant.ResumeError) as raised:
        dormant.assert_ready_to_resume(paused.events)

    assert len(unresolved) == 1
    assert unresolved[0].name == "request_approval"
    assert unresolved[0].call_id == paused.session.yielded_tools[0].call_id
    assert "request_approval" in str(raised.value)
    assert unresolved[0].call_id in str(raised.value)


def test_step3_a_sleeping_agent_is_a_ledger_ending_in_a_yield(operator: dormant.Agent) -> None:
    paused = run_test(operator, [user("Delete the 2019 archive"), model(tool_calls=[DELETE])])

    assert _types(paused.events) == [
        "invocation_start", "user", "tool_call", "tool_yield", "invocation_yield"]
    assert "invocation_end" not in [e.type for e in paused.events]


def test_step4_supplying_the_input(operator: dormant.Agent) -> None:
    resumed = run_test(operator, [
        user("Delete the 2019 archive"),
        model(tool_calls=[DELETE]),
        tool_input({"request_approval": {"approved": True, "note": "Owner signed off"}}),
        model("Archive deleted."),
    ])

    assert resumed.status == "completed"
    assert len(dormant.validate_resume_state(resumed.events)) == 0
    dormant.assert_ready_to_resume(resumed.events)
    results = get_tool_results(resumed.events)
    assert [(r.name, r.result, r.error) for r in results] == [(
        "request_approval",
        {"action": "delete the 2019 archive", "status": "performed", "note": "Owner signed off"},
        None,
    )]
    assert "pending_action" not in resumed.session.state
    assert _types(resumed.events) == [
        "invocation_start", "user", "tool_call", "tool_yield", "invocation_yield",
        "tool_input", "invocation_resume", "tool_result", "assistant", "invocation_end"]
    assert resumed.result.output.text == "Archive deleted."


def test_step4_the_model_reads_the_tool_result_on_the_next_step(operator: dormant.Agent) -> None:
    resumed = run_test(operator, [
        user("Delete the 2019 archive"),
        model(tool_calls=[DELETE]),
        tool_input({"request_approval": {"approved": False}}),
        model("Left the archive alone."),
    ])

    last_request = resumed.model.requests[-1]
    tool_message = last_request.messages[-1]
    assert tool_message.role == "tool"
    assert '"declined"' in tool_message.content  # type: ignore[union-attr]
    assert last_request.system == ["Ask for approval before any destructive action."]


def test_step4_a_mismatched_answer_becomes_an_invalid_input_result(
        operator: dormant.Agent) -> None:
    resumed = run_test(operator, [
        user("Delete the 2019 archive"),
        model(tool_calls=[DELETE]),
        tool_input({"request_approval": {"approved": "maybe later"}}),
        model("The approval was not understood; please answer yes or no."),
    ])

    (result,) = get_tool_results(resumed.events)
    assert result.result is None
    assert result.error is not None and "Invalid input" in result.error
    assert "approved" in result.error
    assert resumed.status == "completed"
    tool_message = resumed.model.requests[-1].messages[-1]
    assert tool_message.role == "tool" and tool_message.is_error  # type: ignore[union-attr]
    assert "pending_action" not in resumed.session.state


def test_step5_yielding_for_a_message(app: dormant.App) -> None:
    intake = app.agent(
        name="intake",
        context=[app.context.system("Ask one question at a time."), app.context.history()],
        tools=[],
        yields=True,
    )

    asked = run_test(intake, [user("I want to book a room"), model("Which date?")])
    answered = run_test(intake, [
        user("I want to book a room"),
        model("Which date?"),
        user("Next Tuesday"),
        model("Booked for next Tuesday."),
    ])

    assert asked.status == "yielded_message"
    assert answered.status == "yielded_message"
    assert [e.text for e in answered.events if e.type == "assistant"] == [
        "Which date?", "Booked for next Tuesday."]
    assert [e.type for e in answered.events] == [
        "invocation_start", "user", "assistant", "invocation_yield",
        "user", "invocation_resume", "assistant", "invocation_yield"]
    first, second = answered.results
    assert first.yielded_invocation_id == second.yielded_invocation_id  # type: ignore[union-attr]
    assert answered.session.status == "awaiting_input"


def test_step5_realtime_models_default_to_yielding(app: dormant.App) -> None:
    """A model whose ``realtime`` attribute is true makes its agent yield with no ``yields=``
    given; an explicit value wins."""

    class Realtime(dormant.models.ScriptedModel):
        realtime = True

    def agent(name: str, **options: Any) -> dormant.Agent:
        return app.agent(name=name, model=Realtime(["Which date?"]), tools=[], **options)

    talking = run_test(agent("voice"), [user("I want to book a room"), model("Which date?")])
    ending = run_test(agent("text", yields=False),
                      [user("I want to book a room"), model("Which date?")])

    assert talking.status == "yielded_message"
    assert [e.type for e in talking.events] == [
        "invocation_start", "user", "assistant", "invocation_yield"]
    assert ending.status == "completed"
    assert app.agent(name="plain", model=dormant.models.ScriptedModel(["x"])).yields is False


def test_step6_the_same_protocol_across_requests(operator: dormant.Agent,
                                                 app: dormant.App) -> None:
    """The process that asks and the one that answers need not be the same: only rows."""
    scripted = dormant.models.ScriptedModel([{"tool_calls": [DELETE]}, "Archive deleted."])
    served = app.agent(name="operator", model=scripted, tools=list(operator.tools.values()),
                       context=list(operator.context))
    asking = app.handler.rest(agent=served)
    paused = asking({"session_id": "archive", "input": {"message": "Delete the 2019 archive"}})
    assert paused.status == "yielded_tool" and paused.yielded_tools

    answering = dormant.App(name="another-process", store=app.store).handler.rest(agent=served)
    call_id = paused.yielded_tools[0].call_id
    done = answering({"session_id": "archive",
                      "input": {"tools": [{"call_id": call_id, "input": {"approved": True}}]}})

    assert done.status == "completed"
    assert done.output.text == "Archive deleted."
    scripted.assert_consumed()


def test_the_seed_spellings_of_the_test_steps_work_too(operator: dormant.Agent) -> None:
    from dormant.testing import input as seed_input

    resumed = run_test(operator, [
        user("Delete the 2019 archive"),
        model({"toolCalls": [DELETE]}),
        seed_input({"request_approval": {"approved": True, "note": "Owner signed off"}}),
        model("Archive deleted."),
    ])
    assert resumed.status == "completed"
    assert get_tool_results(resumed.events)[0].result["status"] == "performed"
