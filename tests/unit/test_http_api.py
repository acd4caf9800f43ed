"""``dormant.http``: the API resolver driven with API Gateway REST proxy events (no server)."""

from __future__ import annotations

import base64
import json
import threading
from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant.http import build_resolver, principal_of
from dormant.models import ScriptedModel


class Question(BaseModel):
    q: str


class Answer(BaseModel):
    answer: str


def _app() -> tuple[dormant.App, dormant.Agent]:
    app = dormant.App(name="http-test")
    ask = app.tool(name="ask_guest", description="Ask", schema=Question, yield_schema=Answer)
    model = ScriptedModel([{"tool_calls": [{"name": "ask_guest", "args": {"q": "Which night?"}}]},
                           "Booked."] * 20)
    return app, app.agent(name="concierge", model=model, tools=[ask])


def _event(method: str, path: str, body: Any = None, *, authorizer: dict[str, Any] | None = None,
           identity: dict[str, Any] | None = None, raw: str | None = None,
           base64_body: bool = False) -> dict[str, Any]:
    text = raw if raw is not None else (json.dumps(body) if body is not None else None)
    if base64_body and text is not None:
        text = base64.b64encode(text.encode()).decode()
    return {
        "resource": path, "path": path, "httpMethod": method,
        "headers": {"Content-Type": "application/json"},
        "multiValueHeaders": {"Content-Type": ["application/json"]},
        "queryStringParameters": None, "multiValueQueryStringParameters": None,
        "pathParameters": None, "stageVariables": None,
        "requestContext": {"resourcePath": path, "httpMethod": method, "path": path,
                           "stage": "test", "requestId": "r-1",
                           "authorizer": authorizer or {}, "identity": identity or {}},
        "body": text, "isBase64Encoded": base64_body,
    }


def _call(resolver: Any, event: dict[str, Any]) -> tuple[int, Any]:
    out = resolver.resolve(event, None)
    body = out["body"]
    return out["statusCode"], json.loads(body) if body.startswith(("{", "[")) else body


COGNITO = {"claims": {"sub": "user-1", "email": "a@example.com"}}


@pytest.mark.parametrize(("event", "principal"), [
    ({"requestContext": {"authorizer": {"claims": {"sub": "abc"}}}}, "abc"),
    ({"requestContext": {"authorizer": {"principalId": "lambda-auth"}}}, "lambda-auth"),
    ({"requestContext": {"identity": {"userArn": "arn:aws:iam::1:user/x"}}},
     "arn:aws:iam::1:user/x"),
    ({"requestContext": {"authorizer": {"claims": {"sub": "abc"}, "principalId": "p"}}}, "abc"),
    ({"requestContext": {}}, None),
    ({}, None),
])
def test_the_principal_comes_only_from_the_request_context(event: dict[str, Any],
                                                           principal: str | None) -> None:
    assert principal_of(event) == principal


def test_a_session_is_invisible_to_another_cognito_user() -> None:
    app, agent = _app()
    resolver = build_resolver(app, agent)
    status, paused = _call(resolver, _event("POST", "/turns", {"sessionId": "s1",
                                                               "message": "book"},
                                            authorizer=COGNITO))
    assert status == 200 and paused["status"] == "yielded_tool"
    other = {"claims": {"sub": "user-2"}}
    status, body = _call(resolver, _event("GET", "/sessions/s1", authorizer=other))
    assert (status, body["code"]) == (404, "session_not_found")
    call = paused["yieldedTools"][0]["callId"]
    status, body = _call(resolver, _event("POST", "/turns", {
        "sessionId": "s1", "tools": [{"callId": call, "input": {"answer": "Fri"}}]},
        authorizer=other))
    assert (status, body["code"]) == (404, "session_not_found")
    status, body = _call(resolver, _event("DELETE", "/sessions/s1", authorizer=other))
    assert status == 404
    stored = app.sessions.get("s1")
    assert stored is not None and stored.version == 1 and stored.principal == "user-1"


def test_require_principal_refuses_an_anonymous_caller_with_401() -> None:
    app, agent = _app()
    resolver = build_resolver(app, agent, require_principal=True)
    status, body = _call(resolver, _event("POST", "/turns", {"message": "book"}))
    assert (status, body["code"]) == (401, "unauthorized")
    assert app.sessions.list() == []


def test_an_oversize_base64_body_is_413_before_anything_runs() -> None:
    app, agent = _app()
    resolver = build_resolver(app, agent, max_body_bytes=100)
    status, body = _call(resolver, _event("POST", "/turns", {"message": "x" * 200},
                                          base64_body=True))
    assert (status, body["code"]) == (413, "payload_too_large")
    assert app.sessions.list() == []


def test_on_lambda_agui_answers_the_whole_event_stream() -> None:
    app, agent = _app()
    resolver = build_resolver(app, agent)
    run_input = {"threadId": "t1", "runId": "r1", "state": {}, "tools": [], "context": [],
                 "forwardedProps": {}, "messages": [{"id": "m1", "role": "user",
                                                      "content": "book"}]}
    out = resolver.resolve(_event("POST", "/agui", run_input, authorizer=COGNITO), None)
    assert out["statusCode"] == 200
    headers = {k.lower(): v for k, v in (out.get("multiValueHeaders") or {}).items()}
    assert headers["content-type"] == ["text/event-stream"]
    types = [json.loads(line[6:])["type"] for line in out["body"].splitlines()
             if line.startswith("data: ")]
    assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED" and "CUSTOM" in types


@pytest.mark.parametrize("forwarded", [
    {}, {"dormant": {}}, {"dormant": {"positions": False}}, {"positions": True}])
def test_agui_events_carry_no_position_unless_asked(forwarded: dict[str, Any]) -> None:
    app, agent = _app()
    data = _agui_events(build_resolver(app, agent), forwarded)
    assert [e for e in data if "rawEvent" in e] == []


@pytest.mark.parametrize(("forwarded", "field"), [
    ({"dormant": {"positions": "yes"}}, "forwardedProps.dormant.positions"),
    ({"dormant": True}, "forwardedProps.dormant"),
])
def test_agui_options_that_are_not_options_are_refused(forwarded: dict[str, Any],
                                                       field: str) -> None:
    app, agent = _app()
    run_input = {"threadId": "t1", "runId": "r1", "state": {}, "tools": [], "context": [],
                 "forwardedProps": forwarded,
                 "messages": [{"id": "m1", "role": "user", "content": "book"}]}
    out = build_resolver(app, agent).resolve(_event("POST", "/agui", run_input), None)
    body = json.loads(out["body"])
    assert out["statusCode"] == 422 and [f["field"] for f in body["fields"]] == [field], body
    assert app.sessions.load("session_t1", turns=None) is None  # nothing ran


def test_agui_positions_are_each_events_stream_position_what_a_stop_counts() -> None:
    app, agent = _app()
    data = _agui_events(build_resolver(app, agent), {"dormant": {"positions": True}})
    positioned = [e for e in data if "rawEvent" in e]
    assert {e["type"] for e in positioned} >= {"TOOL_CALL_START", "TOOL_CALL_END"}
    assert all(set(e["rawEvent"]) == {"seq"} for e in positioned)
    seqs = [e["rawEvent"]["seq"] for e in positioned]
    assert seqs == sorted(seqs) and seqs[0] >= 1


def _agui_events(resolver: Any, forwarded: dict[str, Any]) -> list[dict[str, Any]]:
    run_input = {"threadId": "t1", "runId": "r1", "state": {}, "tools": [], "context": [],
                 "forwardedProps": forwarded,
                 "messages": [{"id": "m1", "role": "user", "content": "book"}]}
    out = resolver.resolve(_event("POST", "/agui", run_input, authorizer=COGNITO), None)
    assert out["statusCode"] == 200, out["body"]
    return [json.loads(line[6:]) for line in out["body"].splitlines()
            if line.startswith("data: ")]


def test_an_agui_body_that_is_not_a_run_agent_input_is_422_naming_fields() -> None:
    app, agent = _app()
    status, body = _call(build_resolver(app, agent),
                         _event("POST", "/agui", {"threadId": 3}, authorizer=COGNITO))
    assert (status, body["code"]) == (422, "validation_error")
    assert {"threadId", "runId", "messages"} <= {f["field"] for f in body["fields"]}


def test_the_resolver_keeps_each_threads_request_apart() -> None:
    """Powertools keeps the current event on a class; the resolver must not, or one
    thread's request would be answered with another's."""
    app, agent = _app()
    resolver = build_resolver(app, agent)
    both_inside = threading.Barrier(2)

    @resolver.get("/whoami")
    def whoami() -> dict[str, Any]:
        both_inside.wait(timeout=10)  # the other thread has resolved its own event by now
        return {"principal": principal_of(resolver.current_event.raw_event)}

    answers: dict[str, Any] = {}

    def ask(who: str) -> None:
        answers[who] = _call(resolver, _event("GET", "/whoami",
                                              authorizer={"principalId": who}))[1]

    threads = [threading.Thread(target=ask, args=(who,)) for who in ("ann", "bob")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert answers == {"ann": {"principal": "ann"}, "bob": {"principal": "bob"}}


def test_the_openapi_description_documents_bodies_and_errors() -> None:
    app, agent = _app()
    status, spec = _call(build_resolver(app, agent), _event("GET", "/"))
    assert status == 200
    turns = spec["paths"]["/turns"]["post"]
    assert turns["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/TurnRequest")
    answers = turns["responses"]
    assert answers["200"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/RestResponse")
    assert {"400", "404", "409", "413", "422"} <= set(answers)
    assert answers["409"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/ErrorBody")
    assert answers["202"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/RestResponse")
    properties = spec["components"]["schemas"]["TurnRequest"]["properties"]
    assert set(properties) == {
        "sessionId", "message", "messageId", "tools", "approvals", "state", "retry", "stop",
        "steer", "pause", "resume", "interrupt", "queue", "inputs", "seed", "ifBusy"}
    assert all(field.get("description") for field in properties.values())


def test_an_approval_is_pending_in_the_api_and_decided_by_post_turns() -> None:
    class Ticket(BaseModel):
        ticket_id: str

    app = dormant.App(name="http-approvals")
    closed: list[str] = []
    close = app.tool(name="close_ticket", description="Close", schema=Ticket,
                     execute=lambda ctx: closed.append(ctx.args.ticket_id) or {"closed": True})
    agent = app.agent(name="support", tools=[close],
                      tool_approval={"close_ticket": "user-approval"},
                      model=ScriptedModel([{"tool_calls": [
                          {"name": "close_ticket", "args": {"ticket_id": "T-7"}}]}, "Closed."]))
    resolver = build_resolver(app, agent)

    status, paused = _call(resolver, _event("POST", "/turns", {"sessionId": "a1",
                                                               "message": "close T-7"},
                                            authorizer=COGNITO))
    assert status == 200 and paused["status"] == "yielded_tool"
    (request,) = paused["pendingApprovals"]
    status, view = _call(resolver, _event("GET", "/sessions/a1", authorizer=COGNITO))
    assert status == 200 and view["pendingApprovals"] == [request]

    status, stale = _call(resolver, _event("POST", "/turns", {"sessionId": "a1", "approvals": [
        {"approvalId": "apr_stale", "approved": True}]}, authorizer=COGNITO))
    assert status == 409 and stale["code"] == "not_pending" and closed == []

    status, done = _call(resolver, _event("POST", "/turns", {"sessionId": "a1", "approvals": [
        {"approvalId": request["approvalId"], "approved": True}]}, authorizer=COGNITO))
    assert status == 200 and done["status"] == "completed" and closed == ["T-7"]


def test_get_session_lists_pending_timers_and_delete_cancels_them() -> None:
    from dormant.schedulers import RecordingScheduler

    scheduler = RecordingScheduler()
    app = dormant.App(name="http-timers", scheduler=scheduler)

    def remind(ctx: dormant.HookContext) -> str:
        ctx.session.schedule("nudge", delay="5m", message="Reminder: stretch")
        return "I'll remind you."

    agent = app.agent(name="a", hooks=[dormant.Hook(before_agent=remind)])
    resolver = build_resolver(app, agent)
    status, _ = _call(resolver, _event("POST", "/turns", {"sessionId": "t1", "message": "hi"},
                                       authorizer=COGNITO))
    assert status == 200 and len(scheduler.timers) == 1

    status, view = _call(resolver, _event("GET", "/sessions/t1", authorizer=COGNITO))
    assert status == 200
    (timer,) = view["timers"]
    assert (timer["name"], timer["message"]) == ("nudge", "Reminder: stretch")
    assert timer["messageId"] == f"timer:nudge:{timer['fireAt']}"

    status, _ = _call(resolver, _event("DELETE", "/sessions/t1", authorizer=COGNITO))
    assert status == 200
    assert scheduler.timers == {} and scheduler.calls[-1] == ("cancel", "session_t1", "nudge")
