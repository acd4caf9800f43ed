"""Compaction: a long conversation's older turns folded into a summary the model is sent in
their place, committed as a ledger event, kept through failure and retry, shown as what it is."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant._inspect import render_session
from dormant.errors import ConfigError
from dormant.events import CompactionEvent, Usage, UserEvent
from dormant.models import ModelError, ModelRequest, TextDelta, ToolCallChunk, UsageChunk
from dormant.models._base import AssistantMessage, Message, ToolMessage, UserMessage


class Recorder:
    """A model that answers from a script of callables and records every request."""

    def __init__(self, *replies: Any) -> None:
        self.replies = list(replies)
        self.requests: list[ModelRequest] = []
        self.sent: list[list[Message]] = []

    def stream(self, request: ModelRequest, *, signal: Any = None) -> Iterator[Any]:
        self.requests.append(request)
        self.sent.append(list(request.messages))
        reply = self.replies.pop(0) if self.replies else "ok"
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, dict):
            yield ToolCallChunk(call_id="", name=reply["name"], args=reply["args"])
            return
        yield TextDelta(reply)
        yield UsageChunk(Usage(input_tokens=10, output_tokens=2))


def _summaries(calls: list[list[Message]]) -> Any:
    def summarize(messages: list[Message]) -> str:
        calls.append(messages)
        return f"summary #{len(calls)}"
    return summarize


def _texts(messages: list[Message]) -> list[str]:
    return [m.text if isinstance(m, UserMessage | AssistantMessage) else m.content
            for m in messages]


def test_over_the_turn_budget_the_model_gets_the_summary_then_the_last_turns() -> None:
    app = dormant.App(name="compact")
    calls: list[list[Message]] = []
    model = Recorder(*[f"answer {n}" for n in range(7)])
    agent = app.agent(name="a", model=model, context=[app.context.history(
        compact=dormant.Compaction(max_turns=4, keep_last=2, summarize=_summaries(calls)))])
    turn = app.handler.rest(agent=agent)
    for n in range(6):
        turn({"session_id": "long", "input": {"message": f"question {n}"}})

    assert len(calls) == 1  # at the fifth turn: 5 turns > 4
    assert _texts(calls[0]) == ["question 0", "answer 0", "question 1", "answer 1",
                                "question 2", "answer 2"]
    fifth, sixth = model.sent[4], model.sent[5]
    assert fifth[0] == UserMessage(
        "Summary of the earlier conversation (older turns were compacted):\nsummary #1",
        role="system")
    assert _texts(fifth[1:]) == ["question 3", "answer 3", "question 4"]
    assert _texts(sixth[1:]) == ["question 3", "answer 3", "question 4", "answer 4",
                                 "question 5"]
    session = app.sessions.get("long")
    assert session is not None
    compactions = [e for e in session.events if isinstance(e, CompactionEvent)]
    assert len(compactions) == 1 and compactions[0].turns == 3
    assert compactions[0].covered_from == 0
    tail = compactions[0].tail_start
    assert isinstance(session.events[tail], UserEvent)
    assert session.events[tail].text == "question 3"
    # nothing is deleted: every message is still in the ledger
    assert [e.text for e in session.events if isinstance(e, UserEvent)] == [
        f"question {n}" for n in range(6)]


def test_each_compaction_folds_the_previous_summary_in() -> None:
    app = dormant.App(name="again")
    calls: list[list[Message]] = []
    agent = app.agent(name="a", model=Recorder(), context=[app.context.history(
        compact=dormant.Compaction(max_turns=3, keep_last=1, summarize=_summaries(calls)))])
    turn = app.handler.rest(agent=agent)
    for n in range(9):
        turn({"session_id": "folds", "input": {"message": f"m{n}"}})
    assert len(calls) == 2
    assert calls[1][0].text.endswith("summary #1")  # type: ignore[union-attr]
    assert "m3" in _texts(calls[1]) and "m0" not in _texts(calls[1])
    session = app.sessions.get("folds")
    assert session is not None and session.head.compactions == 2


def test_a_token_budget_counts_the_estimate_of_what_would_be_sent() -> None:
    assert dormant.estimate_tokens([UserMessage("x" * 400)]) == 104  # 400/4 + 4 framing
    assert dormant.estimate_tokens([ToolMessage("c", "t", "y" * 40)]) == 14
    app = dormant.App(name="tokens")
    calls: list[list[Message]] = []
    agent = app.agent(name="a", model=Recorder(*["z" * 200] * 10), context=[
        app.context.history(compact=dormant.Compaction(max_tokens=300, keep_last=1,
                                                       summarize=_summaries(calls)))])
    turn = app.handler.rest(agent=agent)
    turn({"session_id": "t", "input": {"message": "a" * 200}})  # ~54 tokens sent
    assert calls == []
    turn({"session_id": "t", "input": {"message": "b" * 200}})  # ~162: under 300
    assert calls == []
    turn({"session_id": "t", "input": {"message": "c" * 200}})  # ~270: under
    turn({"session_id": "t", "input": {"message": "d" * 200}})  # ~378: over, compact
    assert len(calls) == 1 and len(calls[0]) == 6  # three whole turns folded


def test_a_model_summary_is_asked_with_the_instruction_and_a_plain_transcript() -> None:
    app = dormant.App(name="model-summary")
    summarizer = Recorder("They talked about rooms.")
    served = Recorder(*[f"answer {n}" for n in range(4)])
    agent = app.agent(name="a", model=served, context=[app.context.history(
        compact=dormant.Compaction(max_turns=2, keep_last=1, summarize="Be brief.",
                                   model=summarizer))])
    turn = app.handler.rest(agent=agent, response={"usage": True})
    for n in range(2):
        turn({"session_id": "m", "input": {"message": f"room {n}?"}})
    answer = turn({"session_id": "m", "input": {"message": "room 2?"}})

    request = summarizer.requests[0]
    assert request.system == ["Be brief."] and request.tools == []
    transcript = request.messages[0].text  # type: ignore[union-attr]
    assert transcript == "User: room 0?\nAssistant: answer 0\nUser: room 1?\nAssistant: answer 1"
    assert served.sent[-1][0].text.endswith("They talked about rooms.")  # type: ignore[union-attr]
    assert answer.usage is not None and answer.usage.input_tokens == 20  # summary counted


def test_the_default_summariser_is_the_agents_own_model_with_the_default_instruction() -> None:
    app = dormant.App(name="default")
    model = Recorder("a0", "a1", "the gist", "a2")
    agent = app.agent(name="a", model=model, context=[app.context.history(
        compact=dormant.Compaction(max_turns=2, keep_last=1))])
    turn = app.handler.rest(agent=agent)
    for n in range(3):
        turn({"session_id": "d", "input": {"message": f"q{n}"}})
    assert model.requests[2].system == [dormant.agent.DEFAULT_SUMMARY_INSTRUCTION]
    assert model.sent[3][0].text.endswith("the gist")  # type: ignore[union-attr]


class Order(BaseModel):
    item: str


def test_a_committed_summary_survives_a_failed_turn_and_its_retry() -> None:
    app = dormant.App(name="retry")
    calls: list[list[Message]] = []
    ran: list[str] = []

    def place(ctx: dormant.ToolContext) -> dict[str, str]:
        ran.append(ctx.args.item)
        return {"placed": ctx.args.item}

    order = app.tool(name="order", description="Order", schema=Order, execute=place)
    model = Recorder("a0", "a1", {"name": "order", "args": {"item": "tea"}},
                     ModelError("provider down", code="server_error"), "done")
    agent = app.agent(name="a", model=model, tools=[order], context=[app.context.history(
        compact=dormant.Compaction(max_turns=2, keep_last=1, summarize=_summaries(calls)))])
    turn = app.handler.rest(agent=agent)
    turn({"session_id": "r", "input": {"message": "q0"}})
    turn({"session_id": "r", "input": {"message": "q1"}})
    failed = turn({"session_id": "r", "input": {"message": "order tea"}})
    assert failed.status == "error" and ran == ["tea"]
    session = app.sessions.get("r")
    assert session is not None and session.status == "failed"
    assert session.head.compactions == 1  # committed with the progress

    retried = turn({"session_id": "r", "input": {"retry": {"retry_id": "again"}}})
    assert retried.status == "completed" and retried.output.text == "done"
    assert len(calls) == 1 and ran == ["tea"]  # neither summarised nor ordered twice
    assert model.sent[-1][0].text.endswith("summary #1")  # type: ignore[union-attr]


def test_a_failed_summary_fails_the_turn_and_writes_nothing() -> None:
    app = dormant.App(name="bad-summary")
    model = Recorder("a0", "a1", ModelError("overloaded", code="server_error"))
    agent = app.agent(name="a", model=model, context=[app.context.history(
        compact=dormant.Compaction(max_turns=2, keep_last=1))])
    turn = app.handler.rest(agent=agent)
    turn({"session_id": "b", "input": {"message": "q0"}})
    turn({"session_id": "b", "input": {"message": "q1"}})
    before = app.sessions.get("b")
    answer = turn({"session_id": "b", "input": {"message": "q2"}})
    assert answer.status == "error" and answer.error is not None
    after = app.sessions.get("b")
    assert before is not None and after is not None and after.version == before.version


def test_a_compaction_reaches_agui_as_a_custom_event_not_a_chat_message() -> None:
    from ag_ui.core import EventType

    app = dormant.App(name="agui")
    agent = app.agent(name="a", model=Recorder(), context=[app.context.history(
        compact=dormant.Compaction(max_turns=2, keep_last=1, summarize=lambda m: "gist"))])
    rest = app.handler.rest(agent=agent)
    rest({"session_id": "g", "input": {"message": "q0"}})
    rest({"session_id": "g", "input": {"message": "q1"}})
    events = list(app.handler.agui(agent=agent)({"session_id": "g",
                                                 "input": {"message": "q2"}}))
    custom = [e for e in events if e.type == EventType.CUSTOM and e.name == "dormant.compaction"]
    assert len(custom) == 1 and custom[0].value["summary"] == "gist"
    texts = [e.delta for e in events if e.type == EventType.TEXT_MESSAGE_CONTENT]
    assert all("gist" not in t for t in texts)


def test_sessions_show_marks_compactions() -> None:
    app = dormant.App(name="show")
    agent = app.agent(name="a", model=Recorder(), context=[app.context.history(
        compact=dormant.Compaction(max_turns=2, keep_last=1, summarize=lambda m: "the gist"))])
    rest = app.handler.rest(agent=agent)
    for n in range(3):
        rest({"session_id": "s", "input": {"message": f"q{n}"}})
    session = app.sessions.get("s")
    assert session is not None
    text = render_session(session)
    assert "compacted 1 time(s)" in text
    assert "⇊ compacted 2 turn(s) (events 0-8) into a summary: the gist" in text


@pytest.mark.parametrize(("kwargs", "message"), [
    ({}, "needs a budget"),
    ({"max_turns": 0}, "positive int"),
    ({"max_turns": 3, "keep_last": 3}, "must exceed keep_last"),
    ({"max_tokens": 100, "summarize": 42}, "instruction"),
])
def test_a_bad_compaction_is_refused_when_declared(kwargs: dict[str, Any],
                                                   message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        dormant.Compaction(**kwargs)


def test_a_turn_budget_larger_than_the_heads_turn_index_is_counted_exactly() -> None:
    app = dormant.App(name="big")
    calls: list[list[Message]] = []
    agent = app.agent(name="a", model=Recorder(), context=[app.context.history(
        compact=dormant.Compaction(max_turns=100, keep_last=4, summarize=_summaries(calls)))])
    turn = app.handler.rest(agent=agent)
    for n in range(100):
        turn({"session_id": "big", "input": {"message": f"m{n}"}})
    assert calls == []  # 100 turns: at the budget, not over it
    turn({"session_id": "big", "input": {"message": "m100"}})
    assert len(calls) == 1
    assert len([m for m in calls[0] if isinstance(m, UserMessage)]) == 97
