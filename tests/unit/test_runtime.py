"""The run loop: tools, validation, concurrency, limits, hooks, bad input."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant.models import ScriptedModel
from dormant.testing import ScriptError, get_tool_results, model, run_test, tool_input, user


class Ref(BaseModel):
    ref: str


class Answer(BaseModel):
    answer: str


@pytest.fixture()
def app() -> dormant.App:
    return dormant.App(name="runtime")


def test_decorator_form_infers_the_schema_from_the_signature(app: dormant.App) -> None:
    @app.tool
    def lookup_stay(ref: str, nights_hint: int = 0) -> dict[str, Any]:
        """Look up a booking by its reference.

        More detail the model does not need.
        """
        return {"ref": ref, "nights": 3 + nights_hint}

    assert lookup_stay.name == "lookup_stay"
    assert lookup_stay.description == "Look up a booking by its reference."
    params = lookup_stay.parameters()
    assert params["required"] == ["ref"]
    assert set(params["properties"]) == {"ref", "nights_hint"}

    agent = app.agent(name="concierge", tools=[lookup_stay])
    run = run_test(agent, [
        user("How long is my stay?"),
        model(tool_calls=[{"name": "lookup_stay", "args": {"ref": "B-1"}}]),
        model("Three nights."),
    ])
    assert [(r.result, r.error) for r in get_tool_results(run.events)] == [
        ({"ref": "B-1", "nights": 3}, None)]
    assert run.result.output.text == "Three nights."


def test_decorator_with_options_and_a_context_parameter(app: dormant.App) -> None:
    @app.tool(name="whoami", description="Say which call this is")
    def who(ctx: dormant.ToolContext) -> str:
        return f"{ctx.tool}:{ctx.call_id}:{ctx.attempt}"

    run = run_test(app.agent(name="a", tools=[who]), [
        user("who?"),
        model(tool_calls=[{"name": "whoami", "args": {}, "id": "call_fixed"}]),
        model("done"),
    ])
    assert get_tool_results(run.events)[0].result == "whoami:call_fixed:1"


def test_arguments_that_fail_the_schema_reach_the_model_as_a_tool_error(app: dormant.App) -> None:
    calls: list[str] = []
    lookup = app.tool(name="lookup_stay", description="d", schema=Ref,
                      execute=lambda ctx: calls.append(ctx.args.ref))
    run = run_test(app.agent(name="a", tools=[lookup]), [
        user("?"),
        model(tool_calls=[{"name": "lookup_stay", "args": {"reference": 7}}]),
        model("Sorry, I need the reference."),
    ])
    (result,) = get_tool_results(run.events)
    assert result.error is not None and result.error.startswith("Invalid arguments for lookup_stay")
    assert "ref" in result.error
    assert calls == []
    assert run.model.requests[1].messages[-1].is_error  # type: ignore[union-attr]


def test_an_unknown_tool_reaches_the_model_as_a_tool_error(app: dormant.App) -> None:
    lookup = app.tool(name="lookup_stay", description="d", schema=Ref,
                      execute=lambda ctx: {"nights": 3})
    run = run_test(app.agent(name="a", tools=[lookup]), [
        user("?"),
        model(tool_calls=[{"name": "cancel_stay", "args": {}}]),
        model("I cannot cancel."),
    ])
    (result,) = get_tool_results(run.events)
    assert result.error == "Unknown tool 'cancel_stay'. Available tools: lookup_stay"
    assert run.status == "completed"


def test_a_tool_that_raises_becomes_a_tool_error_not_a_failed_turn(app: dormant.App) -> None:
    def boom(ctx: dormant.ToolContext) -> None:
        raise RuntimeError("database is down")

    run = run_test(app.agent(name="a", tools=[
        app.tool(name="boom", description="d", schema=Ref, execute=boom)]), [
        user("?"), model(tool_calls=[{"name": "boom", "args": {"ref": "x"}}]), model("Sorry."),
    ])
    assert get_tool_results(run.events)[0].error == "boom failed: database is down"
    assert run.status == "completed"


def test_independent_tools_run_concurrently_and_results_keep_call_order(app: dormant.App) -> None:
    barrier = threading.Barrier(2, timeout=5)

    def slow(ctx: dormant.ToolContext) -> str:
        barrier.wait()  # deadlocks (and times out) unless both calls run at once
        return ctx.args.ref

    tool = app.tool(name="fetch", description="d", schema=Ref, execute=slow)
    run = run_test(app.agent(name="a", tools=[tool]), [
        user("both"),
        model(tool_calls=[{"name": "fetch", "args": {"ref": "first"}},
                          {"name": "fetch", "args": {"ref": "second"}}]),
        model("ok"),
    ])
    assert [r.result for r in get_tool_results(run.events)] == ["first", "second"]


def test_max_steps_ends_the_run_with_a_clear_error(app: dormant.App) -> None:
    tool = app.tool(name="again", description="d", schema=Ref, execute=lambda ctx: "more")
    looping = app.agent(name="loop", tools=[tool], max_steps=2)
    call = {"name": "again", "args": {"ref": "x"}}
    run = run_test(looping, [user("go"), model(tool_calls=[call]), model(tool_calls=[call])])
    assert run.status == "error"
    assert "max_steps=2" in run.result.error  # type: ignore[union-attr]
    assert [e.type for e in run.events][-2:] == ["error", "invocation_end"]


def test_several_yields_resume_only_when_all_are_answered(app: dormant.App) -> None:
    ask = app.tool(name="ask_guest", description="d", schema=Ref, yield_schema=Answer)
    agent = app.agent(name="a", tools=[ask])
    both = [{"name": "ask_guest", "args": {"ref": "night"}, "id": "call_night"},
            {"name": "ask_guest", "args": {"ref": "room"}, "id": "call_room"}]
    half = run_test(agent, [user("book"), model(tool_calls=both),
                            tool_input({"call_night": {"answer": "Friday"}})])
    assert half.status == "yielded_tool"
    assert [y.call_id for y in half.result.yielded_tools] == ["call_room"]  # type: ignore[union-attr]
    assert [e.type for e in half.events][-1] == "tool_input"

    done = run_test(agent, [user("book"), model(tool_calls=both),
                            tool_input({"call_night": {"answer": "Friday"}}),
                            tool_input({"call_room": {"answer": "suite"}}),
                            model("Booked a suite for Friday.")])
    assert done.status == "completed"
    assert [r.result for r in get_tool_results(done.events)] == [
        {"answer": "Friday"}, {"answer": "suite"}]


def test_a_yielding_tool_without_execute_returns_its_input(app: dormant.App) -> None:
    ask = app.tool(name="ask_guest", description="d", schema=Ref, yield_schema=Answer)
    run = run_test(app.agent(name="a", tools=[ask]), [
        user("book"), model(tool_calls=[{"name": "ask_guest", "args": {"ref": "q"}}]),
        tool_input({"ask_guest": {"answer": "Friday"}}), model("Booked for Friday."),
    ])
    assert get_tool_results(run.events)[0].result == {"answer": "Friday"}


def test_prepare_may_rewrite_the_arguments_execute_sees(app: dormant.App) -> None:
    seen: list[str] = []
    ask = app.tool(name="ask", description="d", schema=Ref, yield_schema=Answer,
                   prepare=lambda ctx: Ref(ref=ctx.args.ref.upper()),
                   execute=lambda ctx: seen.append(ctx.args.ref))
    paused = run_test(app.agent(name="a", tools=[ask]), [
        user("x"), model(tool_calls=[{"name": "ask", "args": {"ref": "abc"}}]),
        tool_input({"ask": {"answer": "y"}}), model("ok")])
    assert paused.results[0].yielded_tools[0].args == {"ref": "ABC"}  # type: ignore[union-attr]
    assert seen == ["ABC"]


def test_handler_context_is_available_below_execute(app: dormant.App) -> None:
    def helper() -> str:
        return dormant.handler_context().call_id

    tool = app.tool(name="t", description="d", schema=Ref, execute=lambda ctx: helper())
    run = run_test(app.agent(name="a", tools=[tool]), [
        user("x"), model(tool_calls=[{"name": "t", "args": {"ref": "r"}, "id": "call_7"}]),
        model("ok")])
    assert get_tool_results(run.events)[0].result == "call_7"
    with pytest.raises(dormant.DormantError, match="outside a tool execution"):
        dormant.handler_context()


def test_run_with_handler_context_sets_it_for_tests() -> None:
    session = dormant.Session.new("session_ctx")
    ctx = dormant.ToolContext(args=None, state={}, call_id="call_x", session=session, tool="t")
    assert dormant.run_with_handler_context(ctx, lambda: dormant.handler_context().call_id) == \
        "call_x"


def test_hooks_see_every_phase_and_before_agent_replaces_the_output(app: dormant.App) -> None:
    seen: list[str] = []
    hook = dormant.Hook(before_model=lambda c: seen.append("before_model"),
                        after_model=lambda c: seen.append(f"after_model:{c.text}"),
                        before_tool=lambda c: seen.append(f"before_tool:{c.tool.call_id}"),
                        after_tool=lambda c: seen.append(f"after_tool:{c.result}"),
                        after_agent=lambda c: seen.append("after_agent"))
    tool = app.tool(name="t", description="d", schema=Ref, execute=lambda ctx: ctx.args.ref)
    run_test(app.agent(name="a", tools=[tool], hooks=[hook]), [
        user("x"), model(tool_calls=[{"name": "t", "args": {"ref": "r"}, "id": "c1"}]),
        model("done")])
    assert seen == ["before_model", "after_model:", "before_tool:c1", "after_tool:r",
                    "before_model", "after_model:done", "after_agent"]

    stood_down = app.agent(name="b", hooks=[dormant.Hook(before_agent=lambda c: "canned")])
    result = app.run(stood_down, message="hi")
    assert result.status == "completed" and result.output.text == "canned"
    assert [e.type for e in result.session.events] == [
        "invocation_start", "user", "assistant", "invocation_end"]


def test_app_run_leaves_the_turn_uncommitted_until_commit(app: dormant.App) -> None:
    agent = app.agent(name="a", model=ScriptedModel(["hello"]))
    result = app.run(agent, session_id="thread-9", message="hi")
    assert result.session.session_id == "session_thread-9"
    assert app.sessions.get("thread-9") is None
    assert app.sessions.commit(result.session).ok
    stored = app.sessions.get("session_thread-9")
    assert stored is not None and [e.type for e in stored.events] == [
        "invocation_start", "user", "assistant", "invocation_end"]


def test_a_message_to_a_session_awaiting_tool_input_is_refused_naming_the_calls(
        app: dormant.App) -> None:
    ask = app.tool(name="ask_guest", description="d", schema=Ref, yield_schema=Answer)
    agent = app.agent(name="a", model=ScriptedModel([{"tool_calls": [
        {"name": "ask_guest", "args": {"ref": "q"}, "id": "call_q"}]}]), tools=[ask])
    rest = app.handler.rest(agent=agent)
    assert rest({"session_id": "s1", "input": {"message": "book"}}).status == "yielded_tool"
    before = app.sessions.get("s1")
    assert before is not None

    refused = rest({"session_id": "s1", "input": {"message": "hello?", "if_busy": "reject"}})

    assert refused.status == "error" and refused.code == "awaiting_input"
    assert "ask_guest (call_q)" in (refused.error or "")
    after = app.sessions.get("s1")
    assert after is not None and after.version == before.version
    assert len(after.events) == len(before.events)

    queued = rest({"session_id": "s1", "input": {"message": "hello?", "message_id": "m-2"}})
    assert (queued.status, queued.queued and queued.queued.id) == ("queued", "m-2")
    parked = app.sessions.get("s1")
    assert parked is not None and [m.text for m in parked.inbox] == ["hello?"]
    assert parked.status == "awaiting_input" and parked.yielded_tools  # still waiting


@pytest.mark.parametrize("answer, code, expected", [
    ({"call_id": "call_nope", "input": {"answer": "x"}}, "not_pending",
     "call_nope is not awaiting input"),
    ({"call_id": "call_q", "input": {"answer": "x"}}, "already_answered", "already answered"),
])
def test_a_bad_answer_is_refused_and_writes_nothing(app: dormant.App, answer: dict[str, Any],
                                                     code: str, expected: str) -> None:
    ask = app.tool(name="ask_guest", description="d", schema=Ref, yield_schema=Answer)
    twice = {"tool_calls": [{"name": "ask_guest", "args": {"ref": "a"}, "id": "call_q"},
                            {"name": "ask_guest", "args": {"ref": "b"}, "id": "call_r"}]}
    agent = app.agent(name="a", model=ScriptedModel([twice]), tools=[ask])
    rest = app.handler.rest(agent=agent)
    rest({"session_id": "s2", "input": {"message": "book"}})
    first = {"call_id": "call_q", "input": {"answer": "1"}}
    rest({"session_id": "s2", "input": {"tools": [first]}})
    before = app.sessions.get("s2")
    assert before is not None

    refused = rest({"session_id": "s2", "input": {"tools": [answer]}})

    assert refused.status == "error" and refused.code == code
    assert expected in (refused.error or "")
    after = app.sessions.get("s2")
    assert after is not None and after.version == before.version


@pytest.mark.parametrize("bad", ["", "a b", "x" * 200, "semi;colon", "slash/y", "trailing\n"])
def test_bad_session_ids_are_refused_before_any_write(app: dormant.App, bad: str) -> None:
    rest = app.handler.rest(agent=app.agent(name="a", model=ScriptedModel([])))
    response = rest({"session_id": bad, "input": {"message": "hi"}})
    assert response.status == "error" and response.code == "invalid_input"
    assert app.sessions.list() == []


def test_session_ids_are_normalised(app: dormant.App) -> None:
    app.sessions.create("thread-42")
    assert app.sessions.get("session_thread-42") is not None
    assert app.sessions.get("thread-42") is not None
    assert [s.session_id for s in app.sessions.list()] == ["session_thread-42"]


def test_scripted_model_fails_loudly(app: dormant.App) -> None:
    agent = app.agent(name="a")
    with pytest.raises(ScriptError, match="never used"):
        run_test(agent, [user("hi"), model("one"), model("two")])
    with pytest.raises(ScriptError, match="unexpected model call"):
        run_test(agent, [user("hi")])
