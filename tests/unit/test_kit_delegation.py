"""The kit scripts delegation (``Agent.as_delegate``) as it scripts sub-agents and hand-offs:
the delegate has a scripted model of its own, fed by ``model(..., agent="researcher")`` (its
own name: it is its child session's agent), and the copies the kit serves delegate to one
another, so the child session the executor starts after the parent's commit runs the
scripted delegate; a step answering the delegate's pending items goes to its child session.
In process and through the REST handler."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant.events import AssistantEvent, InvocationEnd, ToolResult, UserEvent
from dormant.models import ScriptedModel
from dormant.testing import ScriptError, approve, deny, model, run_test, stop, user

THROUGH = ["run", "handlers"]
RESEARCH = {"name": "research", "args": {"input": "flights to Oslo"}}
BOOK = {"name": "book", "args": {"flight": "SK-1"}}


class Book(BaseModel):
    flight: str


def _desk(*, approval: bool = False) -> tuple[dormant.Agent, dormant.Agent, ScriptedModel]:
    """A concierge delegating research to a researcher (which books flights, maybe only with
    an approval), each with a model of its own the kit must not use."""
    app = dormant.App(name="kit")
    own = ScriptedModel(["not the kit's"])
    book = app.tool(name="book", description="Book a flight", schema=Book,
                    execute=lambda ctx: {"booked": ctx.args.flight})
    researcher = app.agent("researcher", own, [app.context.system("You research trips."),
                                               app.context.history()], tools=[book],
                           tool_approval={"book": "user-approval"} if approval else None)
    concierge = app.agent("concierge", own, tools=[researcher.as_delegate(name="research")])
    return concierge, researcher, own


def _texts(events: list[Any]) -> list[str]:
    return [e.text for e in events if isinstance(e, AssistantEvent) and e.text]


@pytest.mark.parametrize("through", THROUGH)
def test_a_delegation_is_scripted_end_to_end(through: Any) -> None:
    concierge, researcher, own = _desk()
    run = run_test(concierge, [
        user("research flights to Oslo"),
        model(tool_calls=[RESEARCH]),
        model("Three flights found: SK-1, SK-2, DY-3.", agent="researcher"),  # the child
        model("The researcher found three flights."),                        # the parent
    ], through=through)

    # the step's own request: the parent's turn parked on the delegated call; the child
    # ran after its commit, and its answer resumed the parent, in that same request
    assert [r.status for r in run.results] == ["yielded_tool"]
    [deferred] = run.results[0].deferred_tools
    assert deferred.name == "research"
    assert run.session.head.open_invocation is None
    [answer] = [e for e in run.events if isinstance(e, ToolResult)]
    assert (answer.call_id, answer.result) == (deferred.call_id,
                                               "Three flights found: SK-1, SK-2, DY-3.")
    assert _texts(run.events)[-1] == "The researcher found three flights."
    # the child session, run by the scripted copy of the delegate
    [child] = run.children
    assert child.head.parent is not None and child.head.parent["agent"] == "researcher"
    assert run.session.head.children == [{"session": child.session_id,
                                          "call_id": deferred.call_id}]
    assert [e.text for e in child.events if isinstance(e, UserEvent)] == ["flights to Oslo"]
    assert _texts(child.events) == ["Three flights found: SK-1, SK-2, DY-3."]
    assert set(run.models) == {"concierge", "researcher"}
    assert [r.system for r in run.models["researcher"].requests] == [["You research trips."]]
    assert len(run.model.requests) == 2 and own.requests == []
    # the kit served copies: the app's agents still delegate to the app's agents
    assert concierge.tools["research"].delegate is researcher
    assert concierge.delegates() == {"researcher": researcher}


@pytest.mark.parametrize("through", THROUGH)
def test_the_childs_approval_is_answered_on_the_child_session(through: Any) -> None:
    concierge, _, _ = _desk(approval=True)
    steps = [user("book me to Oslo"), model(tool_calls=[RESEARCH]),
             model(tool_calls=[BOOK], agent="researcher")]
    parked = run_test(concierge, steps, through=through)
    [child] = parked.children
    assert [p.tool for p in child.pending_approvals] == ["book"]
    assert parked.session.pending_approvals == []  # the parent waits on its delegated call
    assert [d.name for d in parked.session.deferred_tools] == ["research"]

    run = run_test(concierge, [*steps, approve("book", agent="researcher"),
                               model("Booked SK-1.", agent="researcher"),
                               model("Your flight SK-1 is booked.")], through=through)
    # the approval's request is the child's: it ends, and its answer resumes the parent
    assert [r.status for r in run.results] == ["yielded_tool", "completed"]
    assert run.results[1].output.text == "Booked SK-1."
    [child] = run.children
    assert [(e.name, e.result) for e in child.events if isinstance(e, ToolResult)] == [
        ("book", {"booked": "SK-1"})]
    assert [(e.name, e.result) for e in run.events if isinstance(e, ToolResult)] == [
        ("research", "Booked SK-1.")]
    assert _texts(run.events)[-1] == "Your flight SK-1 is booked."
    assert run.session.head.open_invocation is None


def test_a_denial_on_the_child_reaches_the_childs_model() -> None:
    concierge, _, _ = _desk(approval=True)
    run = run_test(concierge, [user("book me to Oslo"), model(tool_calls=[RESEARCH]),
                               model(tool_calls=[BOOK], agent="researcher"),
                               deny(agent="researcher", reason="too dear"),
                               model("I could not book it.", agent="researcher"),
                               model("The booking was refused.")])
    [child] = run.children
    [refused] = [e for e in child.events if isinstance(e, ToolResult)]
    assert refused.denied
    assert _texts(run.events)[-1] == "The booking was refused."


def test_an_unscripted_delegate_fails_naming_it() -> None:
    concierge, _, _ = _desk()
    with pytest.raises(ScriptError, match="agent researcher: unexpected model call #1"):
        run_test(concierge, [user("research flights to Oslo"), model(tool_calls=[RESEARCH])])


def test_a_delegates_leftover_reply_names_it() -> None:
    concierge, _, _ = _desk()
    with pytest.raises(ScriptError, match=r"agent researcher: 1 scripted model replies were "
                                          r"never used: \['again'\]"):
        run_test(concierge, [user("research flights to Oslo"), model(tool_calls=[RESEARCH]),
                             model("Three flights.", agent="researcher"),
                             model("Three flights, says the researcher."),
                             model("again", agent="researcher")])


def test_a_delegate_named_by_a_path_fails_before_anything_runs() -> None:
    concierge, _, own = _desk()
    with pytest.raises(ScriptError, match="'researcher' is a delegate, named by its own name"):
        run_test(concierge, [user("hi"), model("Hello.", agent="concierge/researcher")])
    assert own.requests == []


def test_answering_a_delegate_with_no_waiting_child_says_so() -> None:
    concierge, _, _ = _desk(approval=True)
    with pytest.raises(ScriptError, match=r"0 of its child sessions wait .*: none"):
        run_test(concierge, [user("hi"), model("Hello."), approve("book", agent="researcher")])


def test_a_delegates_delegate_and_sub_agent_are_scripted_too() -> None:
    """The walk reaches a delegate's own sub-agents (by path under its name) and delegates
    (by their own names), and the child's copy delegates to the scripted copy."""
    app = dormant.App(name="kit")
    checker = app.agent("checker")
    helper = app.agent("helper")
    researcher = app.agent("researcher", tools=[helper.as_tool(), checker.as_delegate()])
    concierge = app.agent("concierge", tools=[researcher.as_delegate(name="research")])
    run = run_test(concierge, [
        user("research flights to Oslo"), model(tool_calls=[RESEARCH]),
        model(tool_calls=[{"name": "helper", "args": {"input": "list airlines"}},
                          {"name": "checker", "args": {"input": "check SK-1"}}],
              agent="researcher"),
        model("SAS, Norwegian.", agent="researcher/helper"),
        model("SK-1 is fine.", agent="checker"),                 # the grandchild
        model("SK-1 on SAS.", agent="researcher"),               # the child resumes
        model("SK-1 on SAS, says the researcher."),              # then the parent
    ])
    assert set(run.models) == {"concierge", "researcher", "researcher/helper", "checker"}
    assert [c.head.parent["agent"] for c in run.children
            if c.head.parent is not None] == ["researcher", "checker"]
    assert _texts(run.events)[-1] == "SK-1 on SAS, says the researcher."


@pytest.mark.parametrize("through", THROUGH)
def test_a_stop_while_the_childs_reply_streams_reaches_the_child(through: Any) -> None:
    """A control acts on the invocation whose reply streams: the child's, on its session;
    the stopped child answers its parent's call with an error."""
    concierge, _, _ = _desk()
    run = run_test(concierge, [
        user("research flights to Oslo"), model(tool_calls=[RESEARCH]),
        stop(after=2),
        model("Three flights found: SK-1, SK-2, DY-3.", agent="researcher"),
        model("The researcher was stopped."),
    ], through=through)
    assert [c.status for c in run.controls] == ["accepted"]
    [child] = run.children
    assert [e.status for e in child.events if isinstance(e, InvocationEnd)] == ["stopped"]
    [answer] = [e for e in run.events if isinstance(e, ToolResult)]
    assert answer.error == "the delegated agent was stopped before it answered"
    assert _texts(run.events)[-1] == "The researcher was stopped."
