"""SPEC §8 / seed 003: trusted server code appends messages; a redelivery lands once."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

import dormant
from dormant.models import ScriptedModel


class Question(BaseModel):
    q: str


def test_an_appended_message_is_stored_once_and_taken_up_by_the_next_turn() -> None:
    app = dormant.App(name="appends")
    model = ScriptedModel(["Got your payment."])
    agent = app.agent(name="a", model=model)

    first = app.sessions.append("s1", "payment received", id="evt-77")
    again = app.sessions.append("s1", "payment received", id="evt-77")  # webhook retried

    assert first.ok and first.version == 1
    assert again.ok and again.version == 1  # nothing written twice
    reply = app.handler.rest(agent=agent)({"session_id": "s1", "input": {}})
    assert reply.status == "completed" and reply.output.text == "Got your payment."
    assert model.requests[0].messages[0].text == "payment received"  # type: ignore[union-attr]
    stored = app.sessions.get("s1")
    assert stored is not None
    assert [e.type for e in stored.events] == [
        "user", "invocation_start", "assistant", "invocation_end"]


def test_an_append_to_a_session_awaiting_tool_input_waits_in_its_inbox() -> None:
    app = dormant.App(name="appends")
    ask = app.tool(name="ask", description="d", schema=Question, yield_schema=Question)
    agent = app.agent(name="a", tools=[ask], model=ScriptedModel([
        {"tool_calls": [{"name": "ask", "args": {"q": "?"}, "id": "call_q"}]}]))
    app.handler.rest(agent=agent)({"session_id": "s2", "input": {"message": "go"}})

    app.sessions.append("s2", "from a webhook", id="evt-1")
    session = app.sessions.get("s2")
    assert session is not None and session.version == 2
    assert [(m.id, m.text) for m in session.inbox] == [("evt-1", "from a webhook")]
    assert session.yielded_tools  # the question is still pending
    app.sessions.append("s2", "from a webhook", id="evt-1")  # a redelivery lands once
    assert [m.id for m in app.sessions.get("s2").inbox] == ["evt-1"]  # type: ignore[union-attr]


def test_an_append_is_scoped_to_its_principal() -> None:
    app = dormant.App(name="appends")
    app.sessions.append("s3", "hello", id="a", principal="alice")
    with pytest.raises(dormant.SessionNotFound):
        app.sessions.append("s3", "hello", id="b", principal="mallory")
    assert [s.principal for s in app.sessions.list()] == ["alice"]
