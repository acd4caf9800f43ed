"""The test kit drives what goes wrong (SPEC §3): a failing model call, a lost race, an input
delivered twice, a retry — in process and through the REST handler, on any store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant.stores import MemoryStore, SqliteStore, Store
from dormant.testing import (
    ScriptError,
    conflict,
    get_tool_results,
    model,
    model_error,
    redeliver,
    retry,
    run_test,
    tool_input,
    user,
)

THROUGH = ["run", "handlers"]


class Ref(BaseModel):
    ref: str


class Night(BaseModel):
    answer: str


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
    else:
        sqlite = SqliteStore(tmp_path / "kit.db")
        yield sqlite
        sqlite.close()


@pytest.fixture()
def ran() -> list[str]:
    return []


@pytest.fixture()
def agent(ran: list[str]) -> dormant.Agent:
    app = dormant.App(name="kit")

    def lookup(ctx: dormant.ToolContext) -> dict[str, Any]:
        ran.append(ctx.call_id)
        return {"ref": ctx.args.ref, "nights": 3}

    def book(ctx: dormant.ToolContext) -> str:
        ran.append(ctx.call_id)
        return f"booked {ctx.input.answer}"

    stay = app.tool(name="lookup_stay", description="d", schema=Ref, execute=lookup)
    ask = app.tool(name="ask_guest", description="d", schema=Ref, yield_schema=Night,
                   execute=book)
    return app.agent(name="concierge", tools=[stay, ask])


LOOKUP = {"name": "lookup_stay", "args": {"ref": "BK-1"}}
ASK = {"name": "ask_guest", "args": {"ref": "night"}}


@pytest.mark.parametrize("through", THROUGH)
def test_a_model_error_after_a_tool_ran_keeps_it_and_retry_finishes_without_rerunning_it(
        agent: dormant.Agent, store: Store, ran: list[str], through: Any) -> None:
    run = run_test(agent, [
        user("how long is my stay?"),
        model(tool_calls=[LOOKUP]),
        model_error("provider down"),
        retry("r-1"),
        model("Three nights."),
    ], store=store, through=through)

    failed, retried = run.results
    assert retried is run.result
    assert failed.status == "error" and failed.code == "model_error"
    assert run.status == "completed" and run.result.output.text == "Three nights."
    assert len(ran) == 1
    assert [r.call_id for r in get_tool_results(run.events)] == ran
    assert [e.type for e in run.events] == [
        "invocation_start", "user", "tool_call", "tool_result", "invocation_failed", "retry",
        "assistant", "invocation_end"]


@pytest.mark.parametrize("through", THROUGH)
def test_a_model_error_before_any_tool_ran_writes_nothing(
        agent: dormant.Agent, store: Store, through: Any) -> None:
    run = run_test(agent, [user("hi"), model_error("provider down", retryable=False)],
                   store=store, through=through)
    assert run.status == "error" and run.result.code == "model_error"
    assert run.events == [] and run.session.version == 0


@pytest.mark.parametrize("through", THROUGH)
def test_a_redelivered_message_lands_once(agent: dormant.Agent, store: Store,
                                          through: Any) -> None:
    run = run_test(agent, [user("hi", id="m-1"), model("hello"), redeliver()],
                   store=store, through=through)
    first, again = run.results
    assert first.status == "completed"
    assert again.status == "error" and again.code == "duplicate_message"
    assert [e.type for e in run.events].count("user") == 1


@pytest.mark.parametrize("through", THROUGH)
def test_a_message_without_an_id_is_redelivered_with_the_id_it_got(
        agent: dormant.Agent, store: Store, through: Any) -> None:
    run = run_test(agent, [user("hi"), model("hello"), redeliver()], store=store,
                   through=through)
    assert run.result.code == "duplicate_message"
    assert run.session.version == 1


@pytest.mark.parametrize("through", THROUGH)
def test_a_redelivered_answer_runs_nothing_twice(agent: dormant.Agent, store: Store,
                                                 ran: list[str], through: Any) -> None:
    run = run_test(agent, [
        user("book me in"), model(tool_calls=[ASK]),
        tool_input({"ask_guest": {"answer": "Friday"}}), model("Booked for Friday."),
        redeliver(),
    ], store=store, through=through)
    assert [r.status for r in run.results] == ["yielded_tool", "completed", "error"]
    assert run.result.code == "already_answered"
    assert len(ran) == 1


@pytest.mark.parametrize("through", THROUGH)
def test_a_redelivered_retry_lands_once(agent: dormant.Agent, store: Store, ran: list[str],
                                        through: Any) -> None:
    run = run_test(agent, [
        user("how long?"), model(tool_calls=[LOOKUP]), model_error(),
        retry("r-1"), model("Three nights."), redeliver(),
    ], store=store, through=through)
    assert run.result.status == "error" and run.result.code == "duplicate_retry"
    assert [e.type for e in run.events].count("retry") == 1 and len(ran) == 1


@pytest.mark.parametrize("through", THROUGH)
def test_a_conflict_makes_the_commit_merge_onto_the_newer_head(
        agent: dormant.Agent, store: Store, through: Any) -> None:
    run = run_test(agent, [user("one"), model("first"), conflict(), user("two"),
                           model("second")], store=store, through=through)
    assert run.status == "completed"
    # The other writer's commit moved the version: the turn landed one past it.
    assert run.session.version == 3
    assert [e.text for e in run.events if e.type == "user"] == ["one", "two"]
    if through == "handlers":
        assert run.result.commit_status == "merged"


def test_an_unreached_model_error_fails_the_script(agent: dormant.Agent) -> None:
    with pytest.raises(ScriptError, match="model_error"):
        run_test(agent, [user("hi"), model("hello"), model_error()])


def test_an_unknown_through_is_refused(agent: dormant.Agent) -> None:
    with pytest.raises(ValueError, match="through"):
        run_test(agent, [user("hi"), model("hello")], through="rest")  # type: ignore[arg-type]
