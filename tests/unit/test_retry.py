"""Retry from Python (SPEC §8): ``session.input.retry`` and ``app.run``, and what tools see."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant.errors import RetryRefused
from dormant.models import ModelError


class Ref(BaseModel):
    ref: str


class Flaky:
    """Calls ``lookup`` twice (two steps), fails once on the third call, then answers."""

    def __init__(self) -> None:
        self.calls = 0

    def stream(self, request: Any, *, signal: Any) -> Any:
        from dormant.models._base import TextDelta, ToolCallChunk, UsageChunk

        self.calls += 1
        if self.calls in (1, 3):
            yield ToolCallChunk(call_id="", name="lookup", args={"ref": f"r{self.calls}"})
        elif self.calls == 2:
            raise ModelError("provider down")
        else:
            yield TextDelta("done")
        yield UsageChunk()


def test_session_input_retry_reruns_the_failed_call_and_tools_see_the_attempt() -> None:
    app = dormant.App(name="retry")
    attempts: list[tuple[str, int]] = []

    def lookup(ctx: dormant.ToolContext) -> str:
        attempts.append((ctx.args.ref, ctx.attempt))
        return ctx.args.ref

    tool = app.tool(name="lookup", description="d", schema=Ref, execute=lookup)
    agent = app.agent(name="a", model=Flaky(), tools=[tool])
    failed = app.run(agent, session_id="py", message="go")
    assert failed.status == "error" and failed.session.status == "failed"
    assert app.sessions.commit(failed.session).ok

    session = app.sessions.get("py")
    assert session is not None
    with pytest.raises(dormant.InputError, match="non-empty"):
        session.input.retry("")
    session.input.retry("r-1")
    retried = app.run(agent, session=session)
    assert app.sessions.commit(retried.session).ok

    assert retried.status == "completed" and retried.output.text == "done"
    assert attempts == [("r1", 1), ("r3", 2)]  # the rerun step's tool sees attempt 2
    again = app.sessions.get("py")
    assert again is not None and again.status == "active"
    with pytest.raises(RetryRefused, match="already landed"):
        again.input.retry("r-1")
    with pytest.raises(RetryRefused, match="no failed invocation"):
        again.input.retry("r-2")
