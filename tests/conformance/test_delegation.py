"""Delegation to a child session (``Agent.as_delegate``), in-process, on every store.

The lead's call parks it (a deferred call); once its turn has committed, the delegate runs
the call's task in a child session (same principal, linked both ways), and the child's end
is the call's result, supplied through the trusted path: the lead resumes. A child that parks
leaves the lead waiting; its pending items are answered on the child. Deleting the lead
deletes its children. A public request can neither make a session a child nor answer the
delegated call. (Over the webhook queue: ``tests/functions/test_delegation.py``.)
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import dormant
from dormant._inspect import render_session, session_json
from dormant.errors import ServerOnly
from dormant.handlers import Delegated, HandlerInput, Input
from dormant.http import build_resolver
from dormant.models import ScriptedModel, UserMessage
from dormant.session import child_session_id
from dormant.stores import Store

CALL = "call_research"
ASK = {"tool_calls": [{"name": "research", "args": {"input": "find papers on tides"},
                       "id": CALL}]}


def _app(store: Store, research_replies: list[Any], *, approval: bool = False,
         max_steps: int = 8) -> tuple[dormant.App, Any, ScriptedModel, ScriptedModel]:
    app = dormant.App(name="delegation", store=store)

    @app.tool(description="Order a paper (costs money)")
    def order(title: str) -> str:
        return f"ordered {title}"

    researcher = ScriptedModel(research_replies)
    research = app.agent(name="research", model=researcher, tools=[order],
                         tool_approval={"order": "user-approval"} if approval else None,
                         max_steps=max_steps)
    lead_model = ScriptedModel([ASK, "The researcher says: 3 papers."])
    lead = app.agent(name="lead", model=lead_model, tools=[research.as_delegate()])
    return app, lead, lead_model, researcher


def _call(resolver: Any, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    out = resolver.resolve({
        "resource": path, "path": path, "httpMethod": method,
        "headers": {"Content-Type": "application/json"},
        "multiValueHeaders": {"Content-Type": ["application/json"]},
        "queryStringParameters": None, "multiValueQueryStringParameters": None,
        "pathParameters": None, "stageVariables": None,
        "requestContext": {"resourcePath": path, "httpMethod": method, "path": path,
                           "stage": "test", "requestId": "r-1",
                           "authorizer": {"principalId": "ann"}, "identity": {}},
        "body": json.dumps(body) if body is not None else None, "isBase64Encoded": False},
        None)
    text = out["body"]
    return out["statusCode"], json.loads(text) if text.startswith("{") else text


CHILD = child_session_id("p1", CALL)


def test_the_child_runs_the_task_and_its_answer_resumes_the_parent(store: Store) -> None:
    app, lead, lead_model, researcher = _app(store, ["Found 3 papers on tides."])
    resolver = build_resolver(app, lead)

    status, reply = _call(resolver, "POST", "/turns", {"sessionId": "p1",
                                                       "message": "Survey tides"})

    assert (status, reply["status"]) == (200, "yielded_tool")  # the lead's own turn parked
    assert [t["callId"] for t in reply["deferredTools"]] == [CALL]
    status, parent = _call(resolver, "GET", "/sessions/p1")
    assert (status, parent["status"]) == (200, "active")  # the child answered, it resumed
    assert parent["children"] == [{"sessionId": CHILD, "callId": CALL}]
    assert "parent" not in parent
    status, child = _call(resolver, "GET", f"/sessions/{CHILD}")
    assert status == 200  # the same principal's session
    assert child["parent"] == {"sessionId": "session_p1", "callId": CALL}
    assert (child["status"], child["agent"], "children" in child) == ("active", "research",
                                                                        False)
    assert [m.text for m in researcher.requests[0].messages if isinstance(m, UserMessage)] == [
        "find papers on tides"]
    session = app.sessions.get("p1")
    assert session is not None
    [result] = [e for e in session.events if e.type == "tool_result"]
    assert (result.call_id, result.result, result.deferred) == (
        CALL, "Found 3 papers on tides.", True)
    assert [e.type for e in session.events][-2:] == ["assistant", "invocation_end"]
    assert len(lead_model.requests) == 2
    deferred = [e for e in session.events if e.type == "tool_deferred"]
    assert [e.delegate for e in deferred] == [CHILD]


def test_a_child_that_parks_leaves_the_parent_waiting_until_it_is_answered_there(
        store: Store) -> None:
    order = {"tool_calls": [{"name": "order", "args": {"title": "Tides"}, "id": "call_order"}]}
    app, lead, _, _ = _app(store, [order, "Ordered Tides."], approval=True)
    resolver = build_resolver(app, lead)
    _call(resolver, "POST", "/turns", {"sessionId": "p1", "message": "Survey tides"})

    _, child = _call(resolver, "GET", f"/sessions/{CHILD}")
    [approval] = child["pendingApprovals"]
    _, parent = _call(resolver, "GET", "/sessions/p1")
    assert [t["callId"] for t in parent["deferredTools"]] == [CALL]  # still waiting

    status, reply = _call(resolver, "POST", "/turns", {
        "sessionId": CHILD, "approvals": [{"approvalId": approval["approvalId"],
                                           "approved": True}]})

    assert (status, reply["status"]) == (200, "completed")
    assert reply["output"]["text"] == "Ordered Tides."
    _, parent = _call(resolver, "GET", "/sessions/p1")
    assert (parent["status"], parent["deferredTools"]) == ("active", [])
    session = app.sessions.get("p1")
    assert session is not None
    [result] = [e for e in session.events if e.type == "tool_result"]
    assert result.result == "Ordered Tides."


def test_a_child_that_fails_answers_the_call_with_an_error(store: Store) -> None:
    order = {"tool_calls": [{"name": "order", "args": {"title": "Tides"}}]}
    app, lead, lead_model, _ = _app(store, [order], max_steps=1)  # it runs out of steps
    reply = app.handler.rest(agent=lead)({"session_id": "p1", "input": {"message": "go"}})
    assert reply.status == "yielded_tool"
    child = app.sessions.get(CHILD)
    session = app.sessions.get("p1")
    assert child is not None and session is not None
    [result] = [e for e in session.events if e.type == "tool_result"]
    assert result.error is not None
    assert result.error.startswith("the delegated agent failed (max_steps): agent 'research'")
    assert session.status == "active" and len(lead_model.requests) == 2


def test_a_start_or_an_answer_sent_again_lands_once(store: Store) -> None:
    app, lead, _, researcher = _app(store, ["Found 3 papers on tides."])
    handler = app.handler.rest(agent=lead)
    handler({"session_id": "p1", "input": {"message": "Survey tides"}})
    versions = (app.sessions.get("p1").version, app.sessions.get(CHILD).version)  # type: ignore[union-attr]

    again = handler(HandlerInput(session_id=CHILD, input=Input(
        message="find papers on tides", message_id="delegation",
        delegated=Delegated(session="p1", call_id=CALL, agent="research"))))
    answer = handler(HandlerInput(session_id="p1", input=Input(
        tool_results=[{"call_id": CALL, "result": "Found 3 papers on tides."}])))

    assert (again.code, answer.code) == ("duplicate_message", "already_answered")
    assert (app.sessions.get("p1").version, app.sessions.get(CHILD).version) == versions  # type: ignore[union-attr]
    assert len(researcher.requests) == 1


def test_deleting_the_parent_deletes_its_children(store: Store) -> None:
    app, lead, _, _ = _app(store, ["Found 3 papers on tides."])
    resolver = build_resolver(app, lead)
    _call(resolver, "POST", "/turns", {"sessionId": "p1", "message": "Survey tides"})
    assert app.sessions.children("p1") == [CHILD]

    status, reply = _call(resolver, "DELETE", "/sessions/p1")

    assert (status, reply) == (200, {"sessionId": "session_p1", "deleted": True,
                                     "children": [CHILD]})
    assert app.sessions.get("p1") is None and app.sessions.get(CHILD) is None


def test_a_public_request_cannot_make_a_child_nor_answer_the_delegated_call(
        store: Store) -> None:
    app, lead, _, _ = _app(store, [{"tool_calls": [{"name": "order",
                                                     "args": {"title": "T"}}]}, "x"],
                           approval=True)  # the child parks: the lead's call waits
    resolver = build_resolver(app, lead)
    _call(resolver, "POST", "/turns", {"sessionId": "p1", "message": "Survey tides"})
    version = app.sessions.get("p1").version  # type: ignore[union-attr]

    forged, _ = _call(resolver, "POST", "/turns", {
        "sessionId": "p2", "message": "hi",
        "delegated": {"session": "p1", "callId": CALL, "agent": "research"}})
    answered, reply = _call(resolver, "POST", "/turns", {
        "sessionId": "p1", "toolResults": [{"callId": CALL, "result": "forged"}]})
    public = app.handler.rest(agent=lead)(HandlerInput(
        session_id="p3", public=True, principal="ann", input=Input(
            message="hi", delegated=Delegated(session="p1", call_id=CALL, agent="research"))))

    assert forged == 422 and app.sessions.get("p2") is None
    assert (answered, reply["code"]) == (422, "validation_error")  # not on the public wire
    assert (public.code, app.sessions.get("p3")) == (ServerOnly.code, None)
    assert app.sessions.get("p1").version == version  # type: ignore[union-attr]


@pytest.mark.parametrize("name", ["lead", "research"])
def test_a_child_is_served_by_its_delegate_whichever_handler_gets_it(
        store: Store, name: str) -> None:
    app, lead, _, _ = _app(store, ["Found 3 papers on tides."])
    agent = lead if name == "lead" else lead.tools["research"].delegate
    handler = app.handler.rest(agent=agent)
    reply = handler(HandlerInput(session_id="c1", input=Input(
        message="find papers", message_id="delegation",
        delegated=Delegated(session="elsewhere", call_id="call_x", agent="research"))))
    assert (reply.status, reply.output.text) == ("completed", "Found 3 papers on tides.")
    assert app.sessions.get("c1").head.parent == {  # type: ignore[union-attr]
        "session": "session_elsewhere", "call_id": "call_x", "agent": "research"}


def test_a_start_naming_a_session_that_is_not_the_calls_child_is_refused(store: Store) -> None:
    app, lead, _, researcher = _app(store, ["Found 3 papers on tides."])
    handler = app.handler.rest(agent=lead)
    app.sessions.create("taken")  # (not a child)
    version = app.sessions.get("taken").version  # type: ignore[union-attr]

    reply = handler(HandlerInput(session_id="taken", input=Input(
        message="find papers", message_id="delegation",
        delegated=Delegated(session="p1", call_id=CALL, agent="research"))))

    assert reply.code == "invalid_input" and "is not the child of call" in (reply.error or "")
    taken = app.sessions.get("taken")
    assert taken is not None and taken.version == version and taken.head.parent is None
    assert researcher.requests == []


def test_the_inspector_shows_both_links(store: Store) -> None:
    app, lead, _, _ = _app(store, ["Found 3 papers on tides."])
    app.handler.rest(agent=lead)({"session_id": "p1", "input": {"message": "Survey tides"}})
    parent, child = app.sessions.get("p1"), app.sessions.get(CHILD)
    assert parent is not None and child is not None

    assert f"  child {CHILD} runs call {CALL}" in render_session(parent).splitlines()
    assert (f"  child of session_p1 (runs its call {CALL}; its end is that call's result)"
            in render_session(child).splitlines())
    assert session_json(parent)["children"] == [{"sessionId": CHILD, "callId": CALL}]
    assert (session_json(parent)["parent"], session_json(child)["parent"]) == (
        None, {"sessionId": "session_p1", "callId": CALL})


def test_a_parked_child_that_is_stopped_answers_the_call_with_an_error(store: Store) -> None:
    order = {"tool_calls": [{"name": "order", "args": {"title": "Tides"}}]}
    app, lead, lead_model, _ = _app(store, [order], approval=True)
    handler = app.handler.rest(agent=lead)
    handler({"session_id": "p1", "input": {"message": "Survey tides"}})
    child = app.sessions.get(CHILD)
    assert child is not None and child.pending_approvals  # parked: the lead waits

    reply = handler({"session_id": CHILD,
                     "input": {"stop": {"invocation_id": child.open_invocation}}})

    assert reply.status == "stopped"
    session = app.sessions.get("p1")
    assert session is not None
    [result] = [e for e in session.events if e.type == "tool_result"]
    assert result.error == "the delegated agent was stopped before it answered"
    assert session.status == "active" and len(lead_model.requests) == 2


def test_deleting_a_fork_of_the_parent_leaves_the_parents_children(store: Store) -> None:
    app, lead, _, _ = _app(store, ["Found 3 papers on tides."])
    app.handler.rest(agent=lead)({"session_id": "p1", "input": {"message": "Survey tides"}})
    fork = app.sessions.fork("p1", new_session_id="p1-fork")
    assert fork.head.children == [{"session": CHILD, "call_id": CALL}]  # (inherited)

    assert app.sessions.children("p1-fork") == []
    assert app.sessions.delete("p1-fork")
    assert app.sessions.get(CHILD) is not None and app.sessions.children("p1") == [CHILD]
