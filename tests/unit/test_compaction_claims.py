"""Compaction claims and merges: a turn summarises a range only once it claimed it in the
control record (a dead claimer's expired claim is taken over), and a merge keeps one summary
per range."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant import _control
from dormant._ids import now_ms
from dormant.events import CompactionEvent, ToolResult, UserEvent
from dormant.models._base import (
    Message,
    ModelError,
    ModelRequest,
    TextDelta,
    ToolCallChunk,
    ToolMessage,
)
from dormant.session import Session, normalize_session_id
from dormant.types import Control, ControlCompaction

SID = normalize_session_id("claims")


class Answers:
    """Calls ``note`` once per turn when given tools, then answers; records what it is sent."""

    def __init__(self) -> None:
        self.sent: list[list[Message]] = []

    def stream(self, request: ModelRequest, *, signal: Any = None) -> Iterator[Any]:
        self.sent.append(list(request.messages))
        if request.tools and not isinstance(request.messages[-1], ToolMessage):
            yield ToolCallChunk(call_id="", name="note", args={"text": "x"})
            return
        yield TextDelta("noted")


class Note(BaseModel):
    text: str


def _app(calls: list[list[Message]], *, tool: bool = False,
         failures: list[Exception] | None = None) -> tuple[dormant.App, Any, Answers]:
    """An app whose session is due for compaction at its next turn; the summariser raises
    ``failures`` first, one a call."""
    def summarize(messages: list[Message]) -> str:
        if failures:
            raise failures.pop()
        calls.append(messages)
        return f"summary #{len(calls)}"

    app = dormant.App(name="claims")
    tools = [app.tool(name="note", description="Note", schema=Note,
                      execute=lambda ctx: {"noted": ctx.args.text})] if tool else []
    model = Answers()
    agent = app.agent(name="a", model=model, tools=tools, context=[app.context.history(
        compact=dormant.Compaction(max_turns=3, keep_last=1, summarize=summarize))])
    rest = app.handler.rest(agent=agent)
    for n in range(3):  # the next turn is a fourth: over max_turns=3
        rest({"session_id": SID, "input": {"message": f"q{n}"}})
    model.sent.clear()
    return app, agent, model


@pytest.mark.parametrize("expired", [True, False])
def test_an_expired_claim_is_taken_over_and_a_live_one_is_left_alone(expired: bool) -> None:
    calls: list[list[Message]] = []
    app, agent, model = _app(calls)
    session = app.sessions.get(SID)
    assert session is not None
    until = now_ms() + (-1 if expired else 60_000)  # expired: its claimer died
    rev = (app.store.read_control(SID) or Control()).rev + 1  # (the first turn announced)
    dead = Control(rev=rev, compaction=ControlCompaction(
        tail_start=session.head.seq + 100, covered_from=0, until=until, rev=rev,
        invocation_id="inv_elsewhere"))
    assert app.store.write_control(SID, dead, head_version=session.version)

    result = app.handler.rest(agent=agent)({"session_id": SID, "input": {"message": "q3"}})
    assert result.status == "completed"
    after = app.sessions.get(SID)
    assert after is not None
    compactions = [e for e in after.events if isinstance(e, CompactionEvent)]
    control = app.store.read_control(SID)
    assert control is not None and control.compaction is not None
    if expired:
        assert len(calls) == 1 and len(compactions) == 1
        claim = control.compaction
        assert control.rev == rev + 1 and claim.rev == rev + 1 and claim.until > now_ms()
        assert claim.invocation_id == result.invocation_id
        assert claim.tail_start == compactions[0].tail_start
    else:
        assert calls == [] and compactions == []
        assert control == dead  # nothing written: the live claim stands
        assert len(model.sent[0]) == 7  # the whole history, uncompacted this time


def _session(compacted_to: int) -> Session:
    session = Session.new(SID)
    session.head.compacted_to = compacted_to
    return session


def test_other_control_writes_keep_a_claim_until_the_ledger_takes_it_up() -> None:
    def claim(until: int) -> Control:
        return Control(rev=4, pause=None, compaction=ControlCompaction(
            tail_start=10, covered_from=2, until=until, rev=3, invocation_id="inv_a"))

    later = now_ms() + 60_000
    pause = [_control.Ask("pause")]
    kept = _control._with(claim(later), pause, _session(compacted_to=2))
    assert kept.rev == 5 and kept.pause == 5 and kept.compaction == claim(later).compaction
    taken_up = _control._with(claim(later), pause, _session(compacted_to=10))
    assert taken_up.compaction is None
    expired = _control._with(claim(now_ms() - 1), pause, _session(compacted_to=2))
    assert expired.compaction is None


def test_a_merge_drops_a_summary_the_newer_head_already_has() -> None:
    calls: list[list[Message]] = []
    app, agent, _ = _app(calls, tool=True)
    # three turns read the same head and compact without a claim (``app.run`` has no store)
    first, second, third = (app.run(agent, session_id=SID, message=f"q{n}").session
                            for n in (3, 4, 5))
    assert len(calls) == 3
    assert app.sessions.policy.commit(first).status == "committed"
    assert app.sessions.policy.commit(third).status == "merged"  # the commit policy's way

    before = second.window.effects_end
    assert isinstance(second.new_events[before - 1], ToolResult)
    stored = app.store.load(SID, turns=None)
    assert stored is not None
    second.window.rebase(stored)
    assert not any(isinstance(e, CompactionEvent) for e in second.new_events)
    # the mark of what changed the world still ends at the tool's result
    assert second.window.effects_end == before - 1
    assert isinstance(second.new_events[second.window.effects_end - 1], ToolResult)
    assert app.sessions.policy.commit(second).status == "committed"

    merged = app.sessions.get(SID)
    assert merged is not None
    compactions = [e for e in merged.events if isinstance(e, CompactionEvent)]
    assert [c.summary for c in compactions] == ["summary #1"]
    assert merged.head.compactions == 1
    assert [e.text for e in merged.events if isinstance(e, UserEvent)] == [
        "q0", "q1", "q2", "q3", "q5", "q4"]
    assert len([e for e in merged.events if isinstance(e, ToolResult)]) == 6


def test_a_redelivery_of_a_failed_turns_message_claims_its_range_again() -> None:
    calls: list[list[Message]] = []
    failures: list[Exception] = []
    app, agent, _ = _app(calls, failures=failures)
    failures.append(ModelError("summariser down", code="server_error"))
    rest = app.handler.rest(agent=agent)
    before = app.sessions.get(SID)
    failed = rest({"session_id": SID, "input": {"message": "q3", "message_id": "m3"}})
    assert failed.status == "error"  # it claimed the range, then wrote nothing
    control = app.store.read_control(SID)
    assert control is not None and control.compaction is not None
    after = app.sessions.get(SID)
    assert before is not None and after is not None and after.version == before.version
    # the same message again, at the same head: the same invocation, so its claim is its own
    again = rest({"session_id": SID, "input": {"message": "q3", "message_id": "m3"}})
    assert again.status == "completed" and again.invocation_id == failed.invocation_id
    assert len(calls) == 1
    session = app.sessions.get(SID)
    assert session is not None and session.head.compactions == 1
