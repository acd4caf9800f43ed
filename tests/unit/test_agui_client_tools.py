"""AG-UI front-end tools and context, a client's ids, and a client that hangs up.

- A ``RunAgentInput``'s ``tools`` are offered to the model (``ModelRequest.tools``) beside the
  agent's; a call to one is a ``dynamic`` ``tool_call`` that parks the session as a yield (the
  run shows the call and ends with RUN_FINISHED, no interrupt); the next body's trailing
  ``tool`` message answers it, its content the call's result, landing once.
- Its ``context`` reaches the model as a system part (``app.context.client`` decides where
  and how).
- ``RUN_STARTED`` echoes the client's ``threadId``, ``runId`` and ``parentRunId``.
- A REST caller streaming ``POST /turns`` that hangs up keeps what a stop keeps.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ag_ui_validate.pytest_plugin import assert_valid_agui
from pydantic import BaseModel

import dormant
from dormant.http import build_resolver
from dormant.models import ModelRequest, ScriptedModel
from dormant.models._base import ModelChunk, ToolMessage
from dormant.tools import Signal
from tests._http import post

CONFIRM = {"name": "confirm_booking", "description": "Ask the user to confirm in the page",
           "parameters": {"type": "object", "properties": {"room": {"type": "string"}},
                          "required": ["room"]}}


class Recording:
    """A scripted model that keeps every request it was sent."""

    def __init__(self, replies: list[Any]) -> None:
        self.scripted = ScriptedModel(replies)
        self.requests: list[ModelRequest] = []

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[ModelChunk]:
        self.requests.append(request)
        request.messages  # noqa: B018  (read while the session is as the call saw it)
        return self.scripted.stream(request, signal=signal)


class Query(BaseModel):
    query: str


def body(thread: str, messages: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return {"threadId": thread, "runId": fields.pop("runId", "run-1"), "state": {},
            "tools": [CONFIRM], "context": [], "forwardedProps": {}, "messages": messages,
            **fields}


def events_of(answer: Any) -> list[dict[str, Any]]:
    assert isinstance(answer, str), answer
    data = [json.loads(line[len("data: "):]) for line in answer.splitlines()
            if line.startswith("data: ")]
    assert_valid_agui(data, max_warnings=0)
    return data


class Api:
    def __init__(self, replies: list[Any], **agent: Any) -> None:
        self.app = dormant.App(name="front")
        search = self.app.tool(name="web_search", description="Search", schema=Query,
                               deferred=True)
        self.model = Recording(replies)
        self.agent = self.app.agent(name="concierge", model=self.model, tools=[search],
                                    **agent)
        self.resolver = build_resolver(self.app, self.agent)

    def agui(self, payload: dict[str, Any]) -> tuple[int, Any]:
        return post(self.resolver, "/agui", payload)

    def ledger(self, thread: str) -> list[Any]:
        session = self.app.sessions.get(thread)
        assert session is not None
        return session.events


ASK = {"tool_calls": [{"name": "confirm_booking", "id": "call_c", "args": {"room": "12"}}]}
USER = {"id": "m1", "role": "user", "content": "book room 12"}
CALLED = {"id": "a1", "role": "assistant", "content": "",
          "toolCalls": [{"id": "call_c", "type": "function", "function": {
              "name": "confirm_booking", "arguments": '{"room": "12"}'}}]}
ANSWERED = {"id": "t1", "role": "tool", "toolCallId": "call_c", "content": "confirmed"}


def test_a_front_end_tool_is_offered_parks_the_call_and_its_tool_message_answers_it() -> None:
    api = Api([ASK, "Booked room 12."])

    status, answer = api.agui(body("t1", [USER]))

    assert status == 200
    run = events_of(answer)
    offered = api.model.requests[0].tools
    assert [t.name for t in offered] == ["web_search", "confirm_booking"]
    assert offered[1].parameters == CONFIRM["parameters"]
    assert offered[1].description == CONFIRM["description"]
    assert [e["toolCallName"] for e in run if e["type"] == "TOOL_CALL_START"] == [
        "confirm_booking"]
    assert run[-1]["type"] == "RUN_FINISHED"
    assert "outcome" not in run[-1]  # a success: the client answers the call it was sent
    call = next(e for e in api.ledger("session_t1") if e.type == "tool_call")
    assert call.dynamic and call.args == {"room": "12"}
    assert [e.type for e in api.ledger("session_t1")][-2:] == ["tool_yield", "invocation_yield"]

    status, answer = api.agui(body("t1", [USER, CALLED, ANSWERED], runId="run-2"))

    assert status == 200
    resumed = events_of(answer)
    assert resumed[-1]["type"] == "RUN_FINISHED"
    assert resumed[-1]["result"]["status"] == "completed"
    result = next(e for e in api.ledger("session_t1") if e.type == "tool_result")
    assert (result.call_id, result.result, result.error) == ("call_c", "confirmed", None)
    told = [m for m in api.model.requests[1].messages if isinstance(m, ToolMessage)]
    assert [(m.call_id, m.content) for m in told] == [("call_c", '"confirmed"')]

    # the same body again (a client's retry): answered already, nothing written twice
    before = len(api.ledger("session_t1"))
    status, refused = api.agui(body("t1", [USER, CALLED, ANSWERED], runId="run-2"))
    assert (status, refused["code"]) == (409, "already_answered")
    assert len(api.ledger("session_t1")) == before


def test_a_parked_front_end_call_is_answered_by_a_run_that_no_longer_offers_the_tool() -> None:
    api = Api([ASK, "Done."])
    api.agui(body("t2", [USER]))

    status, answer = api.agui(body("t2", [USER, CALLED, ANSWERED], tools=[]))

    assert status == 200 and events_of(answer)[-1]["result"]["status"] == "completed"
    result = next(e for e in api.ledger("session_t2") if e.type == "tool_result")
    assert result.result == "confirmed"
    assert [t.name for t in api.model.requests[1].tools] == ["web_search"]


def test_arguments_that_break_the_front_end_tools_schema_are_the_models_to_fix() -> None:
    api = Api([{"tool_calls": [{"name": "confirm_booking", "id": "call_c", "args": {}}]},
               "Sorry."])

    status, answer = api.agui(body("t3", [USER]))

    assert status == 200 and events_of(answer)[-1]["result"]["status"] == "completed"
    result = next(e for e in api.ledger("session_t3") if e.type == "tool_result")
    assert result.error is not None and "room" in result.error
    assert not any(e.type == "tool_yield" for e in api.ledger("session_t3"))


def test_a_tool_message_for_a_deferred_call_stays_trusted_codes() -> None:
    api = Api([{"tool_calls": [{"name": "web_search", "id": "call_s",
                                "args": {"query": "x"}}]}])
    api.agui(body("t4", [USER]))
    forged = {"id": "t9", "role": "tool", "toolCallId": "call_s", "content": "{}"}

    status, refused = api.agui(body("t4", [USER, forged]))

    assert (status, refused["code"]) == (422, "server_only")
    assert not any(e.type == "tool_result" for e in api.ledger("session_t4"))


def test_a_tool_a_model_cannot_take_is_refused_naming_it() -> None:
    api = Api(["unused"])

    status, refused = api.agui(body("t5", [USER], tools=[{**CONFIRM, "name": "files.read"}]))
    assert status == 422
    assert [f["field"] for f in refused["fields"]] == ["tools.0.name"]

    status, refused = api.agui(body("t5", [USER], tools=[CONFIRM, CONFIRM]))
    assert status == 422 and "two tools are named" in json.dumps(refused)
    assert api.app.sessions.get("session_t5") is None


def test_an_agent_tool_keeps_its_name_over_a_clients() -> None:
    api = Api([{"tool_calls": [{"name": "web_search", "id": "call_s",
                                "args": {"query": "x"}}]}])
    clash = {"name": "web_search", "description": "the page's", "parameters": {}}

    api.agui(body("t6", [USER], tools=[clash]))

    assert [t.description for t in api.model.requests[0].tools] == ["Search"]
    call = next(e for e in api.ledger("session_t6") if e.type == "tool_call")
    assert not call.dynamic
    assert any(e.type == "tool_deferred" for e in api.ledger("session_t6"))


CONTEXT_OF = dormant.App(name="recipes").context
CONTEXT = [{"description": "page", "value": "checkout"}, {"description": "cart", "value": "2"}]


def test_context_reaches_the_model_after_the_system_prompts_by_default() -> None:
    api = Api(["Hi."], context=[CONTEXT_OF.system("Be brief."),
                                CONTEXT_OF.history()])

    api.agui(body("t7", [USER], context=CONTEXT))

    system = api.model.requests[0].system
    assert system[0] == "Be brief."
    assert "- page: checkout" in system[1] and "- cart: 2" in system[1]
    api.agui(body("t7", [{"id": "m2", "role": "user", "content": "again"}]))
    assert api.model.requests[1].system == ["Be brief."]  # each run gives its own


def test_the_recipe_places_and_renders_the_context_or_leaves_it_out() -> None:
    shown = Api(["Hi."], context=[CONTEXT_OF.client(
        lambda items: "; ".join(i.value for i in items)), CONTEXT_OF.system("Last.")])
    shown.agui(body("t8", [USER], context=CONTEXT))
    assert shown.model.requests[0].system == ["checkout; 2", "Last."]

    dropped = Api(["Hi."], context=[CONTEXT_OF.client(lambda items: None)])
    dropped.agui(body("t8", [USER], context=CONTEXT))
    assert dropped.model.requests[0].system == []


def test_run_started_echoes_the_clients_ids() -> None:
    api = Api(["Hi."])

    _, answer = api.agui(body("t9", [USER], runId="client-run", parentRunId="client-parent"))

    started = events_of(answer)[0]
    assert (started["threadId"], started["runId"], started["parentRunId"]) == (
        "t9", "client-run", "client-parent")
    meta = started["metadata"]
    assert meta["sessionId"] == "session_t9"
    assert meta["dormantRunId"] == meta["invocationId"]  # the server's own ids, kept
    finished = events_of(answer)[-1]
    assert (finished["threadId"], finished["runId"]) == ("t9", "client-run")


def test_a_rest_caller_that_hangs_up_keeps_its_message_and_what_it_was_sent() -> None:
    app = dormant.App(name="rest")
    agent = app.agent(name="a", model=ScriptedModel(["one two three"]))
    stream = app.handler.rest_stream(agent=agent)({"session_id": "r1",
                                                   "input": {"message": "count"}})
    taken = [next(stream)]
    while sum(e.type == "assistant_delta" for e in taken) < 2:
        taken.append(next(stream))

    stream.close()  # the write of the last event taken failed

    assert stream.result is not None and stream.result.status == "stopped"
    kept = app.sessions.get("r1")
    assert kept is not None
    first = next(e.delta for e in taken if e.type == "assistant_delta")
    assert [(e.type, getattr(e, "text", None)) for e in kept.events][1:3] == [
        ("user", "count"), ("assistant", first)]
    assert kept.events[-1].status == "stopped"


def test_a_stranded_step_parks_its_front_end_call_again_without_the_tool_offered() -> None:
    """A step whose calls were written ahead, then its request died before its tools ran:
    the takeover (which no client offers tools to) runs the local call and parks the front-end
    call for its answer, as the step would have."""
    from dormant._run.loop import Start, drain, run_turn
    from dormant.events import InvocationStart, ToolCall, UserEvent

    app = dormant.App(name="strand")
    ran: list[str] = []
    note = app.tool(name="note", description="Note it", schema=Query,
                    execute=lambda ctx: ran.append(ctx.call_id) or "noted")
    agent = app.agent(name="a", model=ScriptedModel(["unused"]), tools=[note])
    session = app.sessions.create("w1")
    for event in (InvocationStart(invocation_id="inv_1", agent="a"),
                  UserEvent(invocation_id="inv_1", text="book", message_id="m1"),
                  ToolCall(invocation_id="inv_1", call_id="call_c", name="confirm_booking",
                           args={"room": "12"}, dynamic=True),
                  ToolCall(invocation_id="inv_1", call_id="call_n", name="note",
                           args={"query": "12"})):
        session.add_event(event)

    result = drain(run_turn(agent, session, Start("inv_1", "tools", hooks=False)))

    assert result.status == "yielded_tool" and ran == ["call_n"]
    assert [t.call_id for t in result.yielded_tools] == ["call_c"]
    assert [e.type for e in session.events][-3:] == [
        "tool_yield", "tool_result", "invocation_yield"]


def test_a_tool_message_in_parts_answers_with_its_text() -> None:
    api = Api([ASK, "Done."])
    api.agui(body("t10", [USER]))
    parts = {**ANSWERED, "content": [{"type": "text", "text": "con"},
                                     {"type": "text", "text": "firmed"}]}

    status, _ = api.agui(body("t10", [USER, CALLED, parts]))

    assert status == 200
    result = next(e for e in api.ledger("session_t10") if e.type == "tool_result")
    assert result.result == "confirmed"
