"""Answers to yielded calls over HTTP: an answer must say something, and it lands once.

- ``POST /turns`` with a ``tools`` entry that has no ``input`` (or ``"input": null``) is 422
  ``validation_error`` naming ``tools.N.input``: nothing is read or written, the call still
  waits, and a proper answer then works. AG-UI's equivalent, a ``resolved`` resume entry with
  no payload, is refused the same way (422 naming ``resume.N.payload``).
- An answer to a call that was already answered, or ended unanswered (interrupted), is 409
  ``already_answered``, nothing written; an unknown call id stays 409 ``not_pending`` ("is not
  awaiting input").
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant.http import build_resolver
from dormant.models import ScriptedModel
from dormant.session import Session
from tests._http import post

SID = "session_s1"


class Question(BaseModel):
    q: str


class Answer(BaseModel):
    answer: str


class Api:
    """One app parked on ``ask_guest`` (call ``call_q``) in session ``s1``, driven through
    the HTTP resolver with API Gateway proxy events."""

    def __init__(self) -> None:
        self.app = dormant.App(name="answers")
        ask = self.app.tool(name="ask_guest", description="Ask", schema=Question,
                            yield_schema=Answer)
        model = ScriptedModel([
            {"tool_calls": [{"name": "ask_guest", "args": {"q": "Which night?"},
                             "id": "call_q"}]},
            "Booked."])
        self.resolver = build_resolver(
            self.app, self.app.agent(name="concierge", model=model, tools=[ask]))
        status, parked = self.post("/turns", {"sessionId": "s1", "message": "book"})
        assert (status, parked["status"]) == (200, "yielded_tool")

    def post(self, path: str, body: Any) -> tuple[int, Any]:
        return post(self.resolver, path, body)

    def answer(self, entry: dict[str, Any]) -> tuple[int, Any]:
        return self.post("/turns", {"sessionId": "s1", "tools": [entry]})

    def session(self) -> Session:
        session = self.app.sessions.get(SID)
        assert session is not None
        return session


@pytest.fixture
def api() -> Api:
    return Api()


FRIDAY = {"callId": "call_q", "input": {"answer": "Friday"}}


def _agui_body(**fields: Any) -> dict[str, Any]:
    return {"threadId": "s1", "runId": "client", "state": {}, "tools": [], "context": [],
            "forwardedProps": {}, "messages": [], **fields}


# --- an answer without input ---------------------------------------------------------------------


@pytest.mark.parametrize("entry", [{"callId": "call_q"}, {"callId": "call_q", "input": None}],
                         ids=["input-missing", "input-null"])
def test_an_answer_without_input_is_422_and_the_call_still_waits(
        api: Api, entry: dict[str, Any]) -> None:
    before = api.session()

    status, refused = api.answer(entry)

    assert (status, refused["code"]) == (422, "validation_error")
    assert [f["field"] for f in refused["fields"]] == ["tools.0.input"]
    after = api.session()
    assert after.version == before.version and len(after.events) == len(before.events)
    assert [c.call_id for c in after.yielded_tools] == ["call_q"]
    status, done = api.answer(FRIDAY)
    assert (status, done["status"], done["output"]["text"]) == (200, "completed", "Booked.")


def test_a_resolved_agui_resume_without_payload_is_422_and_the_call_still_waits(
        api: Api) -> None:
    before = api.session()

    status, refused = api.post("/agui", _agui_body(
        resume=[{"interruptId": "call_q", "status": "resolved"}]))

    assert (status, refused["code"]) == (422, "validation_error")
    assert [f["field"] for f in refused["fields"]] == ["resume.0.payload"]
    assert "call_q" in refused["message"]
    after = api.session()
    assert after.version == before.version and len(after.events) == len(before.events)
    assert [c.call_id for c in after.yielded_tools] == ["call_q"]
    status, stream = api.post("/agui", _agui_body(resume=[
        {"interruptId": "call_q", "status": "resolved", "payload": {"answer": "Friday"}}]))
    assert status == 200 and "RUN_FINISHED" in stream
    assert api.session().status == "active" and api.session().yielded_tools == []


# --- a late answer -------------------------------------------------------------------------------


@pytest.mark.parametrize("settle", [
    lambda api: api.answer(FRIDAY),
    lambda api: api.post("/turns", {"sessionId": "s1", "interrupt": {"owner": "call_q"}}),
], ids=["answered", "interrupted"])
def test_a_late_answer_is_409_already_answered_and_writes_nothing(api: Api, settle: Any) -> None:
    status, _ = settle(api)
    assert status == 200
    before = api.session()

    status, refused = api.answer({"callId": "call_q", "input": {"answer": "Saturday"}})

    assert (status, refused["code"]) == (409, "already_answered")
    assert "call call_q in session session_s1 was already answered" in refused["message"]
    after = api.session()
    assert after.version == before.version and len(after.events) == len(before.events)


def test_the_library_tells_a_late_answer_to_an_interrupted_call_the_same(api: Api) -> None:
    api.post("/turns", {"sessionId": "s1", "interrupt": {"owner": "call_q"}})
    session = api.session()

    with pytest.raises(dormant.errors.AlreadyAnswered, match="call_q"):
        session.input.tool(call_id="call_q", input={"answer": "Saturday"})


def test_an_answer_to_an_unknown_call_is_still_409_not_pending(api: Api) -> None:
    before = api.session()

    status, refused = api.answer({"callId": "call_nope", "input": {"answer": "x"}})

    assert (status, refused["code"]) == (409, "not_pending")
    assert "call call_nope is not awaiting input in session session_s1" in refused["message"]
    assert "awaiting: ask_guest call_q" in refused["message"]
    after = api.session()
    assert after.version == before.version
    assert [c.call_id for c in after.yielded_tools] == ["call_q"]
