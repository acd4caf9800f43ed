"""A ``tool_yield`` records what the call expects (``input_schema``): how it is stored and shown.

- The DynamoDB store's compact codec keeps the field, and decodes an item written before it
  existed (no field: ``None``).
- ``render_session`` takes what a waiting call expects from the ledger; ``expects``, when
  given, still wins; a ledger written before the field existed shows no ``expects`` line.
- ``GET /sessions/{id}`` reads the last turn for the schemas only when the session waits on a
  call, and the whole ledger only when a yield is older than the last turn.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant._inspect import describe_input, render_session, session_json
from dormant.events import ToolYield, UserEvent, load_events
from dormant.http import build_resolver
from dormant.models import ScriptedModel
from dormant.session import Session
from dormant.stores._dynamodb import codec
from dormant.tools import Tool
from tests._http import get


class Question(BaseModel):
    q: str


class Stay(BaseModel):
    answer: str
    nights: int
    note: str | None = None


STAY = "{answer: string, nights: integer, note: any}"


def _parked(app: dormant.App, replies: int = 1) -> dormant.Agent:
    ask = app.tool(name="ask_guest", description="Ask", schema=Question, yield_schema=Stay)
    agent = app.agent(name="concierge", tools=[ask], model=ScriptedModel([
        {"tool_calls": [{"name": "ask_guest", "args": {"q": "Which night?"},
                         "id": "call_q"}]}] * replies))
    assert app.handler.rest(agent=agent)({"session_id": "s1", "input": {
        "message": "book"}}).status == "yielded_tool"
    return agent


def _session(app: dormant.App) -> Session:
    session = app.sessions.get("s1")
    assert session is not None
    return session


# --- the DynamoDB codec -------------------------------------------------------------------------


def test_the_compact_codec_keeps_a_yields_schema_and_decodes_one_written_without() -> None:
    event = ToolYield(invocation_id="inv_1", call_id="call_q", name="ask_guest",
                      args={"q": "Which night?"}, input_schema=Stay.model_json_schema())
    shared, compact = codec.encode_events([event.model_dump(mode="json")])
    stored = codec.unpack(codec.pack({"s": 0, "i": shared, "ev": compact}))

    assert load_events(codec.decode_events(stored["i"], stored["ev"])) == [event]
    written_before = {k: v for k, v in compact[0].items() if k != "input_schema"}
    (old,) = load_events(codec.decode_events(shared, [written_before]))
    assert old.input_schema is None and old.args == {"q": "Which night?"}
    assert codec.EVENT_DEFAULTS["tool_yield"] == {"args": None, "input_schema": None}


# --- sessions show ------------------------------------------------------------------------------


def test_show_tells_what_a_waiting_call_expects_from_the_ledger() -> None:
    app = dormant.App(name="show")
    _parked(app)
    session = _session(app)

    shown = render_session(session)

    assert f"      expects input {STAY}" in shown.splitlines()
    assert session_json(session)["yieldedTools"][0]["inputSchema"] == Stay.model_json_schema()
    assert describe_input(Stay.model_json_schema()) == STAY


def test_expects_given_by_the_caller_still_wins() -> None:
    app = dormant.App(name="show")
    _parked(app)

    shown = render_session(_session(app), expects={"ask_guest": "{answer: text}"})

    assert "expects input {answer: text}" in shown and STAY not in shown


def test_a_ledger_written_before_the_schema_was_recorded_shows_no_expects_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Tool, "input_schema", lambda self: None)
    app = dormant.App(name="show")
    _parked(app)
    session = _session(app)

    shown = render_session(session)

    assert "ask_guest [call_q] waits for input" in shown and "expects input" not in shown
    assert "inputSchema" not in session_json(session)["yieldedTools"][0]


# --- GET /sessions/{id} -------------------------------------------------------------------------


def _get(app: dormant.App, agent: dormant.Agent) -> dict[str, Any]:
    status, body = get(build_resolver(app, agent), "/sessions/s1")
    assert status == 200
    return body


def _reads(app: dormant.App, monkeypatch: pytest.MonkeyPatch) -> list[int | None]:
    """The ``turns`` of every session read the app makes from now on."""
    reads: list[int | None] = []
    load = app.sessions.load

    def counted(session_id: str, *, turns: int | None) -> Session | None:
        reads.append(turns)
        return load(session_id, turns=turns)

    monkeypatch.setattr(app.sessions, "load", counted)
    return reads


def test_get_session_reads_the_last_turn_for_what_waiting_calls_expect(
        monkeypatch: pytest.MonkeyPatch) -> None:
    app = dormant.App(name="get")
    agent = _parked(app)
    reads = _reads(app, monkeypatch)

    view = _get(app, agent)

    assert view["yieldedTools"][0]["inputSchema"] == Stay.model_json_schema()
    assert reads == [0, 1]


def test_get_session_reads_nothing_more_when_no_call_waits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    app = dormant.App(name="get")
    agent = app.agent(name="chat", model=ScriptedModel(["Hello."]))
    app.handler.rest(agent=agent)({"session_id": "s1", "input": {"message": "hi"}})
    reads = _reads(app, monkeypatch)

    assert _get(app, agent)["yieldedTools"] == []
    assert reads == [0]


def test_get_session_reads_the_whole_ledger_when_the_yield_is_older_than_the_last_turn(
        monkeypatch: pytest.MonkeyPatch) -> None:
    app = dormant.App(name="get")
    agent = _parked(app)
    session = _session(app)  # a steer the parked invocation took starts a turn after the yield
    session.add_event(UserEvent(text="two nights", steer=True,
                              invocation_id=session.open_invocation))
    assert app.sessions.commit(session).ok
    reads = _reads(app, monkeypatch)

    view = _get(app, agent)

    assert view["yieldedTools"][0]["inputSchema"] == Stay.model_json_schema()
    assert reads == [0, 1, None]
