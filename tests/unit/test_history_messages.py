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


def test_a_session_read_at_an_older_version_still_sees_that_version() -> None:
    # A newer commit grows the fold its cache holds in place; a session loaded before that
    # commit (a turn still running, or one that lost a race) must read its own history.
    app = dormant.App(name="fold")
    rest = app.handler.rest(agent=app.agent(name="a", model=ScriptedModel(["a", "b", "c"])))
    rest({"session_id": "s", "input": {"message": "m1"}})
    older = app.sessions.get("s")
    assert older is not None
    rest({"session_id": "s", "input": {"message": "m2"}})  # its call grew the cached fold
    rest({"session_id": "s", "input": {"message": "m3"}})

    newer = app.sessions.get("s")
    assert newer is not None
    assert history_messages(older, None, older.head.seq) == to_messages(older.events)
    assert history_messages(newer, None, newer.head.seq) == to_messages(newer.events)
    # and the older one grows a copy of its own, leaving the newer one's history as it was
    older.input.message("a branch")
    assert [getattr(m, "text", None) for m in history_messages(
        older, None, older.head.seq)] == ["m1", "a", "a branch"]
    assert history_messages(newer, None, newer.head.seq) == to_messages(newer.events)


def test_a_grown_fold_leaves_the_fold_it_grew_from_as_it_was() -> None:
    app = dormant.App(name="fold")
    rest = app.handler.rest(agent=app.agent(name="a", model=ScriptedModel(["a", "b", "c"])))
    for text in ("m1", "m2", "m3"):
        rest({"session_id": "s", "input": {"message": text}})
    session = app.sessions.get("s")
    assert session is not None
    events = session.events
    cut = next(i for i, e in enumerate(events) if getattr(e, "text", None) == "m2")
    short = _context._Fold(0).add(events[:cut])

    longer = short.grown(events[cut:])  # appends to the list the short fold hands on
    other = short.grown(events[cut:cut + 2])  # that list grew since: a copy of its own

    assert short.finished() == to_messages(events[:cut])
    assert longer.finished() == to_messages(events)
    assert other.finished() == to_messages(events[:cut + 2])
