"""Application events (``app.event``), through the public API on every store.

An app declares its own event types with a schema; trusted code appends one
(``session.append_event``, ``Input(events=...)`` through a handler, ``app.sessions.append``):
an undeclared name or data that does not fit is refused with nothing written, an id lands once,
the ledger records an ``app_event``. Tools see it as ``handler_context().event`` in a turn it
started, hooks see it, the inspector shows it, and the model sees it only through a history
that asks for it. The public REST and AG-UI APIs refuse it (422, nothing written).
"""

from __future__ import annotations

import json
from typing import Any, Literal

import pytest
from pydantic import BaseModel

import dormant
from dormant._inspect import render_session
from dormant.errors import EventRefused, ServerOnly
from dormant.events import AppEvent
from dormant.http import build_resolver
from dormant.models import ScriptedModel, UserMessage
from dormant.stores import Store


class Ticket(BaseModel):
    ticket_id: str
    status: Literal["open", "closed"]


CREATED = {"type": "object", "properties": {"source": {"type": "string"}},
           "required": ["source"], "additionalProperties": False}


def _app(store: Store, replies: list[Any], *, app_events: Any = False,
         tools: list[Any] | None = None) -> tuple[dormant.App, Any, ScriptedModel]:
    app = dormant.App(name="events", store=store)
    app.event("crm.ticket_updated", Ticket)
    app.event("ai.session.created", CREATED)
    scripted = ScriptedModel(replies)
    agent = app.agent(name="support", model=scripted, tools=tools or [],
                      context=[app.context.history(app_events=app_events)])
    return app, agent, scripted


def _app_events(app: dormant.App, sid: str) -> list[AppEvent]:
    session = app.sessions.get(sid)
    assert session is not None
    return session.app_events


def test_undeclared_or_invalid_events_are_refused_and_nothing_is_written(store: Store) -> None:
    app, agent, _ = _app(store, [])
    app.sessions.create("s1")
    version = app.sessions.get("s1").version  # type: ignore[union-attr]

    with pytest.raises(EventRefused, match=r"'crm.unknown' is not declared.*declared: "
                                           r"ai.session.created, crm.ticket_updated"):
        app.sessions.append("s1", events=[{"name": "crm.unknown", "data": {}}])
    with pytest.raises(EventRefused, match=r"crm.ticket_updated.*status"):
        app.sessions.append("s1", events=[{"name": "crm.ticket_updated",
                                           "data": {"ticket_id": "T-1", "status": "lost"}}])
    with pytest.raises(EventRefused, match=r"data.source: required"):
        app.sessions.append("s1", events=[{"name": "ai.session.created", "data": {}}])
    session = app.sessions.get("s1")
    assert session is not None
    with pytest.raises(EventRefused, match=r"data\.extra: not allowed"):
        session.append_event("ai.session.created", {"source": "web", "extra": 1})
    assert session.new_events == []
    # through a trusted handler: refused with its code and status, nothing written
    reply = app.handler.rest(agent=agent)({"session_id": "s1", "input": {
        "events": [{"name": "crm.ticket_updated", "data": {"ticket_id": 7}}]}})
    assert (reply.status, reply.code) == ("error", "invalid_event")
    assert dormant.errors.HTTP_STATUS[EventRefused.code] == 422

    assert app.sessions.get("s1").version == version  # type: ignore[union-attr]
    assert _app_events(app, "s1") == []


def test_a_valid_event_lands_once_per_id_on_every_path(store: Store) -> None:
    app, agent, scripted = _app(store, [])
    updated = {"name": "crm.ticket_updated", "id": "tkt-1-v2",
               "data": {"ticket_id": "T-1", "status": "closed"}}

    first = app.sessions.append("s1", events=[updated])
    again = app.sessions.append("s1", events=[updated])  # a redelivered webhook

    assert first.ok and again.ok and again.version == first.version
    reply = app.handler.rest(agent=agent)({"session_id": "s1", "input": {"events": [updated]}})
    assert reply.status == "recorded"  # no turn runs for an event
    assert scripted.requests == []
    session = app.sessions.get("s1")
    assert session is not None
    session.append_event("crm.ticket_updated", updated["data"], id="tkt-1-v2")
    assert session.new_events == []  # the id is there: nothing to record
    session.append_event("ai.session.created", {"source": "web"})
    assert app.sessions.commit(session).ok

    events = _app_events(app, "s1")
    assert [(e.name, e.data, e.event_id) for e in events] == [
        ("crm.ticket_updated", {"ticket_id": "T-1", "status": "closed"}, "tkt-1-v2"),
        ("ai.session.created", {"source": "web"}, None)]
    stored = app.sessions.get("s1")
    assert stored is not None
    assert [e.type for e in stored.events] == ["app_event", "app_event"]
    assert stored.events[0].model_dump(mode="json")["type"] == "app_event"


def test_a_tool_sees_the_event_that_started_its_turn_and_hooks_see_it_too(store: Store) -> None:
    seen: list[Any] = []
    hooked: list[Any] = []

    def look(ctx: dormant.ToolContext) -> str:
        seen.append(dormant.handler_context().event)
        return "looked"

    app = dormant.App(name="events", store=store)
    app.event("crm.ticket_updated", Ticket)
    tool = app.tool(name="look", description="Look at the ticket", execute=look)
    agent = app.agent(name="support", tools=[tool], hooks=[dormant.Hook(
        before_agent=lambda ctx: hooked.append((ctx.event, ctx.session.app_events)))],
        model=ScriptedModel([{"tool_calls": [{"name": "look", "args": {}}]}, "Done.",
                             {"tool_calls": [{"name": "look", "args": {}}]}, "Done again."]))
    rest = app.handler.rest(agent=agent)

    reply = rest({"session_id": "s1", "input": {
        "message": "the ticket changed", "events": [
            {"name": "crm.ticket_updated", "id": "e1",
             "data": {"ticket_id": "T-1", "status": "open"}}]}})
    plain = rest({"session_id": "s1", "input": {"message": "anything new?"}})

    assert reply.status == plain.status == "completed"
    first, second = seen
    assert isinstance(first, AppEvent) and first.name == "crm.ticket_updated"
    assert first.data == {"ticket_id": "T-1", "status": "open"}
    assert second.type == "user" and second.text == "anything new?"  # as today
    (event, listed), (later, _) = hooked
    assert isinstance(event, AppEvent) and event.event_id == "e1"
    assert [e.event_id for e in listed] == ["e1"]
    assert later.type == "user"


def test_the_model_sees_events_only_through_a_history_that_asks_for_them(
        store: Store) -> None:
    event = {"name": "crm.ticket_updated", "data": {"ticket_id": "T-1", "status": "closed"}}
    for asks, expected in ((False, []), (True, [
            'Application event crm.ticket_updated: {"status": "closed", "ticket_id": "T-1"}'])):
        app, agent, scripted = _app(store, ["Noted."], app_events=asks)
        sid = f"s-{asks}"
        app.sessions.append(sid, events=[event])
        reply = app.handler.rest(agent=agent)({"session_id": sid,
                                               "input": {"message": "status?"}})
        assert reply.status == "completed"
        (request,) = scripted.requests
        notes = [m.text for m in request.messages
                 if isinstance(m, UserMessage) and m.role == "system"]
        assert notes == expected
        assert request.messages[-1] == UserMessage("status?")
    # a builder of its own renders them (None: skipped)
    app, agent, scripted = _app(store, ["Noted."], app_events=lambda e: (
        f"Ticket {e.data['ticket_id']} is now {e.data['status']}."
        if e.name == "crm.ticket_updated" else None))
    app.sessions.append("s-own", events=[event, {"name": "ai.session.created",
                                                  "data": {"source": "web"}}])
    app.handler.rest(agent=agent)({"session_id": "s-own", "input": {"message": "status?"}})
    (request,) = scripted.requests
    assert [m.text for m in request.messages] == ["Ticket T-1 is now closed.", "status?"]


def _post(resolver: Any, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    out = resolver({
        "resource": path, "path": path, "httpMethod": "POST", "headers": {
            "content-type": "application/json"}, "queryStringParameters": None,
        "requestContext": {"requestId": "r", "stage": "prod",
                           "authorizer": {"principalId": "ann"}, "identity": {}},
        "body": json.dumps(body), "isBase64Encoded": False}, None)
    text = out["body"]
    return out["statusCode"], json.loads(text) if text.startswith("{") else text


def test_public_rest_and_agui_cannot_append_events(store: Store) -> None:
    app, agent, scripted = _app(store, ["Hi."])
    resolver = build_resolver(app, agent)
    status, reply = _post(resolver, "/turns", {"sessionId": "p1", "message": "hello"})
    assert status == 200 and reply["status"] == "completed"
    version = app.sessions.get("p1").version  # type: ignore[union-attr]
    event = {"name": "crm.ticket_updated", "data": {"ticket_id": "T-1", "status": "open"}}

    status, reply = _post(resolver, "/turns", {"sessionId": "p1", "message": "again",
                                                "events": [event]})
    assert status == 422 and "application events are for trusted server code" in \
        json.dumps(reply)
    stock = {"threadId": "p1", "runId": "client", "state": {}, "tools": [], "context": [],
             "messages": [{"id": "m9", "role": "user", "content": "again"}]}
    status, reply = _post(resolver, "/agui", {**stock, "forwardedProps": {
        "dormant": {"events": [event]}}})
    assert (status, reply["code"]) == (422, ServerOnly.code)
    refused = app.handler.rest(agent=agent)(dormant.HandlerInput(
        session_id="p1", public=True, input=dormant.Input(message="again", events=[event])))
    assert refused.code == ServerOnly.code

    session = app.sessions.get("p1")
    assert session is not None and session.version == version  # nothing written
    assert session.app_events == []
    assert len(scripted.requests) == 1


def test_the_inspector_shows_app_events(store: Store) -> None:
    app, _, _ = _app(store, [])
    app.sessions.append("s1", events=[{"name": "crm.ticket_updated", "id": "tkt-9",
                                       "data": {"ticket_id": "T-9", "status": "open"}}])
    session = app.sessions.get("s1")
    assert session is not None

    shown = render_session(session)

    assert "◆ event crm.ticket_updated" in shown
    assert "T-9" in shown and "[tkt-9]" in shown
