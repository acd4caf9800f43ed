"""The HTTP API's read surfaces for a session parked in a sub-agent (``Agent.as_tool``): each
pending item names its agent's path (``agent: "concierge/billing"``) in ``GET
/sessions/{id}`` and in ``GET /sessions?detail=true``, and is answered with ``POST /turns``
as ever; the session agent's own items name none."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

import dormant
from dormant.http import build_resolver
from dormant.models import ScriptedModel


class Refund(BaseModel):
    booking: str


class Pick(BaseModel):
    room: str


def _event(method: str, path: str, body: Any = None, *,
           query: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "resource": path, "path": path, "httpMethod": method,
        "headers": {"Content-Type": "application/json"},
        "multiValueHeaders": {"Content-Type": ["application/json"]},
        "queryStringParameters": query,
        "multiValueQueryStringParameters": {k: [v] for k, v in query.items()} if query else None,
        "pathParameters": None, "stageVariables": None,
        "requestContext": {"resourcePath": path, "httpMethod": method, "path": path,
                           "stage": "test", "requestId": "r-1",
                           "authorizer": {"principalId": "ann"}, "identity": {}},
        "body": json.dumps(body) if body is not None else None, "isBase64Encoded": False,
    }


def _call(resolver: Any, event: dict[str, Any]) -> tuple[int, Any]:
    out = resolver.resolve(event, None)
    return out["statusCode"], json.loads(out["body"])


def _resolver(refunded: list[str]) -> Any:
    """``concierge`` asks ``billing`` (whose ``refund`` waits for approval) and ``rooms``
    (whose ``pick_room`` yields for the guest's answer) in one step; it has a ``pick_room``
    of its own too, with other metadata."""
    app = dormant.App(name="http-sub")

    def refund(ctx: dormant.ToolContext) -> dict[str, Any]:
        refunded.append(ctx.args.booking)
        return {"refunded": True}

    billing = app.agent(
        name="billing", tools=[app.tool(name="refund", description="Refund", schema=Refund,
                                        execute=refund)],
        tool_approval={"refund": "user-approval"},
        model=ScriptedModel([{"tool_calls": [{"name": "refund", "args": {"booking": "BK-1"}}]},
                             "Refunded BK-1."]))
    rooms = app.agent(
        name="rooms", tools=[app.tool(name="pick_room", description="Ask", schema=Pick,
                                      yield_schema=Pick, metadata={"ui": "room-picker"})],
        model=ScriptedModel([{"tool_calls": [{"name": "pick_room", "args": {"room": "?"}}]},
                             "Room 12."]))
    own = app.tool(name="pick_room", description="Ask", schema=Pick, yield_schema=Pick,
                   metadata={"ui": "the concierge's"})
    concierge = app.agent(
        name="concierge", tools=[billing.as_tool(), rooms.as_tool(), own],
        model=ScriptedModel([{"tool_calls": [
            {"name": "billing", "args": {"input": "refund BK-1"}},
            {"name": "rooms", "args": {"input": "which room?"}}]}, "All done."]))
    return build_resolver(app, concierge)


def test_get_session_names_the_sub_agent_of_each_pending_item() -> None:
    refunded: list[str] = []
    resolver = _resolver(refunded)
    status, parked = _call(resolver, _event("POST", "/turns", {"sessionId": "s1",
                                                               "message": "refund and room"}))
    assert status == 200 and parked["status"] == "yielded_tool", parked
    [approval] = parked["pendingApprovals"]
    assert approval["agent"] == "concierge/billing"

    status, view = _call(resolver, _event("GET", "/sessions/s1"))
    assert status == 200
    assert view["pendingApprovals"] == [approval]
    [yielded] = view["yieldedTools"]
    assert (yielded["name"], yielded["agent"]) == ("pick_room", "concierge/rooms")
    # the metadata and answer schema are the sub-agent's tool's, not the concierge's own
    assert yielded["toolMetadata"] == {"ui": "room-picker"}
    assert yielded["inputSchema"]["properties"] == {"room": {"title": "Room", "type": "string"}}
    assert sorted((w["kind"], w["name"], w["agent"]) for w in view["waiting"]) == [
        ("approval", "refund", "concierge/billing"), ("yield", "pick_room", "concierge/rooms")]

    status, listed = _call(resolver, _event("GET", "/sessions", query={"detail": "true"}))
    assert status == 200
    [line] = listed["sessions"]
    assert line["waiting"] == view["waiting"]

    # answered as ever: both sub-agents carry on, then the concierge
    status, _ = _call(resolver, _event("POST", "/turns", {"sessionId": "s1", "approvals": [
        {"approvalId": approval["approvalId"], "approved": True}]}))
    assert status == 200
    status, done = _call(resolver, _event("POST", "/turns", {"sessionId": "s1", "tools": [
        {"callId": yielded["callId"], "input": {"room": "12"}}]}))
    assert status == 200 and done["status"] == "completed", done
    assert refunded == ["BK-1"]
    status, view = _call(resolver, _event("GET", "/sessions/s1"))
    assert "waiting" not in view or view["waiting"] == []


def test_the_session_agents_own_pending_items_name_no_agent() -> None:
    app = dormant.App(name="http-own")
    own = app.tool(name="pick_room", description="Ask", schema=Pick, yield_schema=Pick)
    agent = app.agent(name="concierge", tools=[own], model=ScriptedModel(
        [{"tool_calls": [{"name": "pick_room", "args": {"room": "?"}}]}]))
    resolver = build_resolver(app, agent)
    _call(resolver, _event("POST", "/turns", {"sessionId": "s2", "message": "room?"}))
    status, view = _call(resolver, _event("GET", "/sessions/s2"))
    assert status == 200
    assert "agent" not in view["yieldedTools"][0]
    assert "agent" not in view["waiting"][0]


def test_the_openapi_document_describes_the_agent_path() -> None:
    status, spec = _call(_resolver([]), _event("GET", "/"))
    assert status == 200
    schemas = spec["components"]["schemas"]
    for name in ("PendingCall", "Waiting"):
        agent = schemas[name]["properties"]["agent"]
        assert "concierge/billing" in agent["description"]
        assert "agent" not in schemas[name].get("required", [])
