"""Concurrent turns over a session due for compaction, on every conformance store: the range
is summarised once (one paid summariser call) and the ledger keeps one summary per range.

The turns race deterministically in one thread (moto is not thread-safe): each is a lazy
:class:`TurnStream` whose first event is pulled before any of them commits, so every one
reads the same head; then they finish one after another and merge.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import dormant
from dormant.events import CompactionEvent, StreamEvent, UserEvent
from dormant.handlers import TurnStream
from dormant.models._base import Message, ModelRequest, TextDelta
from dormant.session import normalize_session_id
from dormant.stores import Store

SID = "racing"
#: Turns racing in each round.
RACERS = 6


class Answers:
    """A model that answers every request at once."""

    def __init__(self) -> None:
        self.requests = 0

    def stream(self, request: ModelRequest, *, signal: Any = None) -> Iterator[Any]:
        self.requests += 1
        yield TextDelta("noted")


def _compacting(store: Store, calls: list[list[Message]]) -> tuple[dormant.App, Any]:
    def summarize(messages: list[Message]) -> str:
        calls.append(messages)
        return f"summary #{len(calls)}"

    app = dormant.App(name="races", store=store)
    agent = app.agent(name="a", model=Answers(), context=[app.context.history(
        compact=dormant.Compaction(max_turns=3, keep_last=1, summarize=summarize))])
    return app, agent


def _ledger(app: dormant.App) -> tuple[list[CompactionEvent], Counter[str]]:
    session = app.sessions.get(SID)
    assert session is not None
    compactions = [e for e in session.events if isinstance(e, CompactionEvent)]
    messages = Counter(e.text for e in session.events if isinstance(e, UserEvent))
    return compactions, messages


def _first(stream: TurnStream) -> StreamEvent:
    """Pull the turn's first event: it has read the head (nothing is committed yet)."""
    return next(stream)


def test_racing_turns_summarise_each_range_once_and_all_land(store: Store) -> None:
    calls: list[list[Message]] = []
    app, agent = _compacting(store, calls)
    rest = app.handler.rest(agent=agent)
    for n in range(3):  # three turns: the next one is a fourth, over max_turns=3
        rest({"session_id": SID, "input": {"message": f"q{n}"}})
    assert calls == []
    turn = app.handler.turn(agent=agent)
    sent = [f"q{n}" for n in range(3)]
    for round_ in range(3):  # every round is due again: its racers are 6 turns more
        texts = [f"r{round_}.{n}" for n in range(RACERS)]
        streams = [turn({"session_id": SID, "input": {"message": text}}) for text in texts]
        for stream in streams:
            _first(stream)
        results = [stream.run() for stream in streams]
        sent += texts
        assert [r.status for r in results] == ["completed"] * RACERS
        assert results[0].commit_status == "committed"
        assert {r.commit_status for r in results[1:]} == {"merged"}
        assert len(calls) == round_ + 1  # the range was summarised once

    compactions, messages = _ledger(app)
    assert len(compactions) == 3  # one summary per range
    assert len({c.tail_start for c in compactions}) == 3
    assert [c.summary for c in compactions] == ["summary #1", "summary #2", "summary #3"]
    assert messages == Counter(sent)  # every turn's message landed once
    session = app.sessions.get(SID)
    assert session is not None and session.head.compactions == 3


def test_a_turn_that_finds_the_range_claimed_does_not_summarise_it(store: Store) -> None:
    calls: list[list[Message]] = []
    app, agent = _compacting(store, calls)
    rest = app.handler.rest(agent=agent)
    for n in range(3):
        rest({"session_id": SID, "input": {"message": f"q{n}"}})
    turn = app.handler.turn(agent=agent)
    claimer = turn({"session_id": SID, "input": {"message": "first"}})
    while not isinstance(_first(claimer), CompactionEvent):  # claimed and summarised, not
        pass                                                 # committed yet
    assert len(calls) == 1
    control = store.read_control(normalize_session_id(SID))
    assert control is not None and control.compaction is not None
    assert control.compaction.invocation_id == claimer.invocation_id
    late = turn({"session_id": SID, "input": {"message": "second"}})
    _first(late)  # it reads the head and the claim in the control record
    finished_claimer = claimer.run()
    finished_late = late.run()  # it sends the history uncompacted, and merges
    assert finished_late.status == finished_claimer.status == "completed"
    assert finished_claimer.commit_status == "committed"
    assert finished_late.commit_status == "merged"
    assert len(calls) == 1
    compactions, messages = _ledger(app)
    assert len(compactions) == 1
    assert messages == Counter(["q0", "q1", "q2", "first", "second"])
