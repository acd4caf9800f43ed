"""A message id already in the session is a redelivery, whatever state the session is in."""

from __future__ import annotations

from pydantic import BaseModel

import dormant
from dormant.models import ScriptedModel


class Question(BaseModel):
    q: str


class Answer(BaseModel):
    answer: str


def test_a_redelivered_message_to_a_session_it_parked_is_already_in_session() -> None:
    app = dormant.App(name="redelivery")
    ask = app.tool(name="ask", description="Ask", schema=Question, yield_schema=Answer)
    agent = app.agent(name="a", model=ScriptedModel([
        {"text": "", "tool_calls": [{"name": "ask", "args": {"q": "Which night?"}}]}]),
        context=[app.context.history()], tools=[ask])
    rest = app.handler.rest(agent=agent)
    request = {"session_id": "s-1", "input": {"message": "book me", "message_id": "m-1"}}
    assert rest(request).status == "yielded_tool"
    version = app.sessions.get("s-1").version  # type: ignore[union-attr]

    again = rest(request)

    assert (again.status, again.code) == ("error", "duplicate_message")
    assert "already in session" in (again.error or "")
    assert app.sessions.get("s-1").version == version  # type: ignore[union-attr]
