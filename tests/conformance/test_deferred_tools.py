"""Deferred tool results and stopped drafts, through the public API on every store.

A deferred tool (``app.tool(..., deferred=True)``) parks the turn; only trusted server code
supplies its result (``session.input.tool_result``, ``Input(tool_results=...)`` through a
handler, ``app.sessions.append``); it lands once and resumes the parked turn, whose next model
step reads it. The public REST and AG-UI APIs refuse it (422, nothing written). A stop while
a call's arguments stream leaves a ``tool_call_draft`` in the ledger, out of the conversation.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

import dormant
from dormant._inspect import render_session
from dormant.agui import from_run_agent_input
from dormant.errors import AlreadyAnswered, NotPending, ServerOnly
from dormant.http import build_resolver
from dormant.models import ScriptedModel, ToolMessage
from dormant.stores import Store
from dormant.testing import model, run_test, stop, tool_result, user


class Query(BaseModel):
    query: str


class Booking(BaseModel):
    room: str
    night: str


def _app(store: Store, replies: list[Any]) -> tuple[dormant.App, Any, ScriptedModel]:
    app = dormant.App(name="deferred", store=store)
    search = app.tool(name="web_search", description="Search the web (run by the provider)",
                      schema=Query, deferred=True)
    scripted = ScriptedModel(replies)
    agent = app.agent(name="researcher", model=scripted, tools=[search])
    return app, agent, scripted


SEARCH = {"tool_calls": [{"name": "web_search", "args": {"query": "dormant lambda"},
                          "id": "call_search"}]}


def _tool_messages(scripted: ScriptedModel, request: int) -> list[ToolMessage]:
    return [m for m in scripted.requests[request].messages if isinstance(m, ToolMessage)]


def _parked(store: Store, sid: str = "s1") -> tuple[dormant.App, Any, ScriptedModel]:
    app, agent, scripted = _app(store, [SEARCH, "Found 3 hits."])
    reply = app.handler.rest(agent=agent)({"session_id": sid, "input": {"message": "search"}})
    assert reply.status == "yielded_tool"
    assert [t.call_id for t in reply.deferred_tools or []] == ["call_search"]
    assert reply.yielded_tools == []  # a deferred call is not the client's to answer
    return app, agent, scripted


def test_a_deferred_call_parks_and_a_trusted_result_resumes_it_once(store: Store) -> None:
    app, agent, scripted = _parked(store)
    session = app.sessions.get("s1")
    assert session is not None and session.status == "awaiting_input"
    assert [(t.call_id, t.name, t.args) for t in session.deferred_tools] == [
        ("call_search", "web_search", {"query": "dormant lambda"})]
    assert [e.type for e in session.events] == [
        "invocation_start", "user", "tool_call", "tool_deferred", "invocation_yield"]
    shown = render_session(session)
    assert "web_search deferred" in shown and "[call_search] is deferred" in shown
    rest = app.handler.rest(agent=agent)

    done = rest({"session_id": "s1", "input": {"tool_results": [
        {"call_id": "call_search", "result": {"hits": 3}}]}})

    assert done.status == "completed" and done.output.text == "Found 3 hits."
    assert _tool_messages(scripted, 1) == [
        ToolMessage("call_search", "web_search", '{"hits": 3}', False)]
    session = app.sessions.get("s1")
    assert session is not None and session.deferred_tools == []
    assert [e.type for e in session.events][4:] == [
        "invocation_yield", "tool_result", "invocation_resume", "assistant", "invocation_end"]
    version = session.version

    again = rest({"session_id": "s1", "input": {"tool_results": [
        {"call_id": "call_search", "result": {"hits": 3}}]}})

    assert (again.status, again.code) == ("error", AlreadyAnswered.code)
    assert app.sessions.get("s1").version == version  # type: ignore[union-attr]
    assert len(scripted.requests) == 2  # it resumed once
    assert app.handler.rest(agent=agent)({"session_id": "s1", "input": {"tool_results": [
        {"call_id": "call_search", "result": 1}]}}).code == "already_answered"


def test_an_unknown_or_non_deferred_call_is_not_pending(store: Store) -> None:
    app, agent, _ = _parked(store)
    version = app.sessions.get("s1").version  # type: ignore[union-attr]
    reply = app.handler.rest(agent=agent)({"session_id": "s1", "input": {"tool_results": [
        {"call_id": "call_nope", "result": 1}]}})
    assert (reply.status, reply.code) == ("error", NotPending.code)
    assert "call_search" in (reply.error or "")  # names what does wait
    session = app.sessions.get("s1")
    assert session is not None and session.version == version
    # and the deferred call is not a yield: a tool input for it is refused too
    try:
        session.input.tool(call_id="call_search", input={"hits": 1})
    except NotPending as error:
        assert "deferred" in str(error)
    else:
        raise AssertionError("a tool input for a deferred call was accepted")


def test_an_error_result_reaches_the_model_as_an_error(store: Store) -> None:
    app, agent, scripted = _parked(store)
    session = app.sessions.get("s1")
    assert session is not None
    session.input.tool_result("call_search", "provider timed out", is_error=True)
    assert app.sessions.commit(session).ok
    with_error = app.handler.rest(agent=agent)({"session_id": "s1"})  # the next request
    assert with_error.status == "completed"
    assert _tool_messages(scripted, 1) == [
        ToolMessage("call_search", "web_search", "provider timed out", True)]


def test_app_sessions_append_lands_the_result_once_and_the_next_request_resumes(
        store: Store) -> None:
    app, agent, scripted = _parked(store)
    handed: list[Any] = []
    app.hand_on = handed.append
    assert app.sessions.append("s1", tool_results=[
        {"call_id": "call_search", "result": {"hits": 3}}]).ok
    assert [h.session_id for h in handed] == ["session_s1"]  # the resume is handed on
    try:
        app.sessions.append("s1", tool_results=[{"call_id": "call_search", "result": 0}])
    except AlreadyAnswered:
        pass
    else:
        raise AssertionError("a second result for one call landed")
    reply = app.handler.rest(agent=agent)(handed[0])
    assert reply.status == "completed"
    assert _tool_messages(scripted, 1)[0].content == '{"hits": 3}'
    results = [e for e in app.sessions.get("s1").events  # type: ignore[union-attr]
               if e.type == "tool_result"]
    assert len(results) == 1 and results[0].deferred


def _post(resolver: Any, path: str, body: Any) -> tuple[int, Any]:
    out = resolver.resolve({
        "resource": path, "path": path, "httpMethod": "POST",
        "headers": {"Content-Type": "application/json"},
        "multiValueHeaders": {"Content-Type": ["application/json"]},
        "queryStringParameters": None, "multiValueQueryStringParameters": None,
        "pathParameters": None, "stageVariables": None,
        "requestContext": {"resourcePath": path, "httpMethod": "POST", "path": path,
                           "stage": "test", "requestId": "r-1",
                           "authorizer": {"principalId": "ann"}, "identity": {}},
        "body": json.dumps(body), "isBase64Encoded": False}, None)
    text = out["body"]
    return out["statusCode"], json.loads(text) if text.startswith("{") else text


def test_public_rest_and_agui_cannot_supply_a_deferred_result(store: Store) -> None:
    app, agent, scripted = _app(store, [SEARCH, "Found 3 hits."])
    resolver = build_resolver(app, agent)
    status, reply = _post(resolver, "/turns", {"sessionId": "p1", "message": "search"})
    assert (status, reply["status"]) == (200, "yielded_tool")
    assert reply["deferredTools"] == [{"callId": "call_search", "name": "web_search",
                                       "args": {"query": "dormant lambda"}}]
    version = app.sessions.get("p1").version  # type: ignore[union-attr]

    status, reply = _post(resolver, "/turns", {"sessionId": "p1", "toolResults": [
        {"callId": "call_search", "result": {"hits": 99}}]})
    assert status == 422 and "toolResults" in json.dumps(reply)
    assert "trusted server code" in json.dumps(reply)
    status, reply = _post(resolver, "/turns", {"sessionId": "p1", "tools": [
        {"callId": "call_search", "input": {"hits": 99}}]})  # as if it were a yield
    assert (status, reply["code"]) == (422, ServerOnly.code)
    stock = {"threadId": "p1", "runId": "client", "state": {}, "tools": [], "context": [],
             "forwardedProps": {}}
    status, reply = _post(resolver, "/agui", {**stock, "messages": [], "resume": [
        {"interruptId": "call_search", "status": "resolved", "payload": {"hits": 99}}]})
    assert (status, reply["code"]) == (422, ServerOnly.code)
    status, reply = _post(resolver, "/agui", {**stock, "messages": [
        {"id": "m1", "role": "user", "content": "search"},
        {"id": "t1", "role": "tool", "toolCallId": "call_search", "content": "99 hits"}]})
    assert (status, reply["code"]) == (422, ServerOnly.code)

    session = app.sessions.get("p1")
    assert session is not None and session.version == version  # nothing written
    assert [t.call_id for t in session.deferred_tools] == ["call_search"]
    assert len(scripted.requests) == 1
    # the handler refuses it from a public request on any path
    refused = app.handler.rest(agent=agent)(dormant.HandlerInput(
        session_id="p1", public=True, input=dormant.Input(tool_results=[
            {"call_id": "call_search", "result": 1}])))
    assert refused.code == ServerOnly.code
    assert app.sessions.get("p1").version == version  # type: ignore[union-attr]
    # the same body from trusted code lands
    assert from_run_agent_input({**stock, "messages": [
        {"id": "t1", "role": "tool", "toolCallId": "call_search", "content": "x"}]},
        public=False).input.message is None


def test_the_test_kit_supplies_a_deferred_result(store: Store) -> None:
    _, agent, _ = _app(store, [])
    for through in ("run", "handlers"):
        run = run_test(agent, [
            user("search"), model(tool_calls=[{"name": "web_search",
                                               "args": {"query": "dormant"}}]),
            tool_result("web_search", {"hits": 2}), model("Two hits."),
        ], store=store, through=through)  # type: ignore[arg-type]
        assert run.status == "completed" and run.result.output.text == "Two hits."
        tool = [e for e in run.events if e.type == "tool_result"]
        assert [(t.name, t.result, t.deferred) for t in tool] == [
            ("web_search", {"hits": 2}, True)]
        assert isinstance(run.model.requests[1].messages[-1], ToolMessage)


def test_a_stopped_draft_is_kept_out_of_the_conversation_and_shown(store: Store) -> None:
    app = dormant.App(name="drafts", store=store)
    book = app.tool(name="book", description="Book a room", schema=Booking,
                    execute=lambda ctx: {"booked": ctx.args.room})
    agent = app.agent(name="concierge", model=ScriptedModel([]), tools=[book])

    run = run_test(agent, [
        user("book room 12 for friday"),
        stop(after=4),  # "Let me book" is 3 pieces; the 4th is the first piece of arguments
        model("Let me book", tool_calls=[{"name": "book", "args": {"room": "12",
                                                                   "night": "friday"},
                                          "stream_args": True}]),
        user("never mind"), model("OK."),
    ], store=store)

    events = run.events
    assert [e.type for e in events][:6] == [
        "invocation_start", "user", "assistant", "tool_call_draft", "stop_requested",
        "invocation_end"]
    (draft,) = [e for e in events if e.type == "tool_call_draft"]
    assert (draft.name, draft.args_text) == ("book", '{"room":')
    assert not any(e.type == "tool_call" for e in events)
    stored = app.sessions.get(run.session.session_id)
    assert stored is not None
    assert any(e.type == "tool_call_draft" for e in stored.events)  # committed
    messages = run.model.requests[-1].messages
    assert [type(m).__name__ for m in messages] == [
        "UserMessage", "AssistantMessage", "UserMessage"]
    assert all(not getattr(m, "tool_calls", ()) for m in messages)
    assert [getattr(m, "text", None) for m in messages] == [
        "book room 12 for friday", "Let me book", "never mind"]  # no draft text anywhere
    shown = render_session(stored)
    assert "draft of book" in shown and '{"room":' in shown


# --- a deferred call under a user-approval policy ------------------------------------------------


def _asking(store: Store, replies: list[Any]) -> tuple[dormant.App, Any, ScriptedModel, str]:
    """A deferred tool under ``user-approval``, parked on its approval request."""
    app = dormant.App(name="deferred", store=store)
    search = app.tool(name="web_search", description="Search the web (run by the provider)",
                      schema=Query, deferred=True)
    scripted = ScriptedModel(replies)
    agent = app.agent(name="researcher", model=scripted, tools=[search],
                      tool_approval={"web_search": "user-approval"})
    reply = app.handler.rest(agent=agent)({"session_id": "a1", "input": {"message": "search"}})
    assert reply.status == "yielded_tool"
    (asked,) = reply.pending_approvals or []
    assert (asked.call_id, asked.tool) == ("call_search", "web_search")
    assert not reply.deferred_tools  # not admitted yet: nothing waits for a result
    return app, agent, scripted, asked.approval_id


def test_a_deferred_call_under_approval_is_asked_first_and_waits_once_approved(
        store: Store) -> None:
    app, agent, scripted, approval_id = _asking(store, [SEARCH, "Found 3 hits."])
    rest = app.handler.rest(agent=agent)
    session = app.sessions.get("a1")
    assert session is not None
    assert [e.type for e in session.events] == [
        "invocation_start", "user", "tool_call", "approval_requested", "invocation_yield"]
    version = session.version
    # a result for a call still waiting for its approval is refused, nothing written
    early = rest({"session_id": "a1", "input": {"tool_results": [
        {"call_id": "call_search", "result": {"hits": 1}}]}})
    assert (early.status, early.code) == ("error", NotPending.code)
    assert "no deferred call is waiting" in (early.error or "")
    assert app.sessions.get("a1").version == version  # type: ignore[union-attr]

    admitted = rest({"session_id": "a1", "input": {"approvals": [
        {"approval_id": approval_id, "approved": True}]}})

    assert admitted.status == "yielded_tool" and not admitted.pending_approvals
    assert [t.call_id for t in admitted.deferred_tools or []] == ["call_search"]
    assert len(scripted.requests) == 1  # the model is not called while the result waits
    session = app.sessions.get("a1")
    assert session is not None and session.status == "awaiting_input"
    assert [e.type for e in session.events][5:] == [
        "approval_decided", "invocation_resume", "tool_deferred", "invocation_yield"]

    done = rest({"session_id": "a1", "input": {"tool_results": [
        {"call_id": "call_search", "result": {"hits": 3}}]}})

    assert done.status == "completed" and done.output.text == "Found 3 hits."
    assert _tool_messages(scripted, 1) == [
        ToolMessage("call_search", "web_search", '{"hits": 3}', False)]
    results = [e for e in app.sessions.get("a1").events  # type: ignore[union-attr]
               if e.type == "tool_result"]
    assert [(r.deferred, r.denied) for r in results] == [(True, False)]


def test_a_denied_deferred_call_is_read_as_denied_and_nothing_waits(store: Store) -> None:
    app, agent, scripted, approval_id = _asking(store, [SEARCH, "I will not search."])
    rest = app.handler.rest(agent=agent)

    denied = rest({"session_id": "a1", "input": {"approvals": [
        {"approval_id": approval_id, "approved": False, "reason": "no web today"}]}})

    assert denied.status == "completed" and denied.output.text == "I will not search."
    assert _tool_messages(scripted, 1) == [
        ToolMessage("call_search", "web_search", "Denied by the user: no web today", True)]
    session = app.sessions.get("a1")
    assert session is not None and session.deferred_tools == []
    assert "tool_deferred" not in [e.type for e in session.events]
    # it was never admitted: a result for it has nothing to land on
    late = rest({"session_id": "a1", "input": {"tool_results": [
        {"call_id": "call_search", "result": {"hits": 3}}]}})
    assert (late.status, late.code) == ("error", NotPending.code)
    assert len(scripted.requests) == 2
