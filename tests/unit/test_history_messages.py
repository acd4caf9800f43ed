"""The model's messages are built incrementally per session (dormant._context.history_messages):
whatever the process saw before, they must equal a fresh translation of the ledger."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant import _context
from dormant._context import history_messages, to_messages
from dormant.events import AssistantEvent
from dormant.models import ModelChunk, ModelRequest, ScriptedModel
from dormant.tools import Signal


class Ref(BaseModel):
    ref: str


class Recording(ScriptedModel):
    """Keeps the messages of every call, and checks each against a fresh translation."""

    def __init__(self, replies: list[Any]) -> None:
        super().__init__(replies)
        self.seen: list[list[Any]] = []

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[ModelChunk]:
        self.seen.append(list(request.messages))
        return super().stream(request, signal=signal)


def _fresh(app: dormant.App, session_id: str) -> list[Any]:
    session = app.sessions.get(session_id)
    assert session is not None
    return to_messages(session.events)


@pytest.fixture(autouse=True)
def _empty_folds() -> Iterator[None]:
    _context._FOLDS.clear()
    yield
    _context._FOLDS.clear()


@pytest.mark.parametrize("limit", [None, 2])
def test_every_call_sees_what_a_fresh_translation_of_its_ledger_gives(limit: int | None) -> None:
    app = dormant.App(name="fold")
    lookup = app.tool(name="lookup", description="d", schema=Ref,
                      execute=lambda ctx: {"ref": ctx.args.ref})
    replies: list[Any] = []
    for n in range(6):
        replies += [{"text": f"let me look {n}",
                     "tool_calls": [{"name": "lookup", "args": {"ref": f"r{n}"}}]},
                    f"found r{n}"]
    model = Recording(replies)
    agent = app.agent(name="a", model=model, tools=[lookup],
                      context=[app.context.history(limit)])
    rest = app.handler.rest(agent=agent)
    for n in range(6):
        assert rest({"session_id": "s", "input": {"message": f"question {n}"}}).status \
            == "completed"
        session = app.sessions.get("s")
        assert session is not None
        # the second call of turn n saw the ledger up to its answer, translated afresh,
        # windowed like the agent
        events = session.events
        answer = max(i for i, e in enumerate(events) if isinstance(e, AssistantEvent))
        start = 0 if limit is None else session.head.window_start(limit) - session.first_seq
        assert model.seen[-1] == to_messages(events[start:answer])
    assert len(model.seen) == 12


def test_a_session_deleted_and_made_again_under_the_same_id_is_translated_afresh() -> None:
    app = dormant.App(name="fold")
    model = Recording(["one", "two", "three", "four"])
    rest = app.handler.rest(agent=app.agent(name="a", model=model))
    rest({"session_id": "s", "input": {"message": "first life"}})
    rest({"session_id": "s", "input": {"message": "still first"}})  # its first turn folded
    assert app.sessions.delete("s")
    rest({"session_id": "s", "input": {"message": "second life"}})  # as long as the first

    rest({"session_id": "s", "input": {"message": "still second"}})

    texts = [getattr(m, "text", None) for m in model.seen[-1]]
    assert texts == ["second life", "three", "still second"]


def test_a_fold_is_never_extended_with_a_turn_that_did_not_commit() -> None:
    app = dormant.App(name="fold")
    rest = app.handler.rest(agent=app.agent(name="a", model=ScriptedModel(["a", "b", "c"])))
    rest({"session_id": "s", "input": {"message": "m1"}})
    rest({"session_id": "s", "input": {"message": "m2"}})
    session = app.sessions.get("s")
    assert session is not None
    built = history_messages(session, None, session.head.seq)
    session.input.message("uncommitted")  # appended to the slice, never committed
    with_slice = history_messages(session, None, session.head.seq)
    assert [getattr(m, "text", None) for m in with_slice][-1] == "uncommitted"

    again = app.sessions.get("s")
    assert again is not None
    assert history_messages(again, None, again.head.seq) == built == to_messages(again.events)
