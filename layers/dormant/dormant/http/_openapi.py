"""The API's OpenAPI description: what each route answers, and what the route signatures
cannot say (the constraints the server enforces on bodies it validates itself)."""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

from dormant._inputs import TOOL_NAME_PATTERN
from dormant.handlers import RestResponse
from dormant.http._resolver import JSON
from dormant.http._wire import SESSION_ID_SCHEMA, ErrorBody

__all__ = ["DOCS_CACHE_CONTROL", "SSE", "SWAGGER_UI", "DocsPage", "answers", "describe"]

SSE = "text/event-stream"

#: Where ``/docs`` loads Swagger UI from (a pinned release, so the page never changes under a
#: cached copy), and how long a browser or CDN may keep the page.
SWAGGER_UI = "https://cdn.jsdelivr.net/npm/swagger-ui-dist@5.17.14"
DOCS_CACHE_CONTROL = "public, max-age=3600"


class DocsPage:
    """``/docs``: a small static page (no description inlined: Swagger UI, from
    :data:`SWAGGER_UI`, fetches it from ``GET /`` beside it), built once per resolver, with
    an ``ETag`` so a browser's revalidation is a body-less 304. It holds no data."""

    def __init__(self, title: str) -> None:
        self.title = title

    @functools.cached_property
    def body(self) -> str:
        """The page, made on the first ``/docs`` request (``html`` imported then: not part of
        a cold start)."""
        import html

        name = html.escape(self.title)
        return rf"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{name}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="{SWAGGER_UI}/swagger-ui.css"></head>
<body><div id="swagger-ui"><noscript>{name}: the OpenAPI description is at
<a href="./">GET /</a> (this page shows it with Swagger UI, which needs JavaScript).</noscript>
</div>
<script src="{SWAGGER_UI}/swagger-ui-bundle.js" crossorigin="anonymous"></script>
<script>
const spec = location.pathname.replace(/docs\/?$/, "");
window.ui = SwaggerUIBundle({{url: spec, dom_id: "#swagger-ui", deepLinking: true}});
</script></body></html>
"""

    @functools.cached_property
    def etag(self) -> str:
        digest = hashlib.sha256(self.body.encode()).hexdigest()[:32]
        return json.dumps(digest)  # a strong validator: quoted

    def fresh(self, if_none_match: str | None) -> bool:
        """Whether the client's ``If-None-Match`` names this page (a 304 will do)."""
        if not if_none_match:
            return False
        tags = {tag.strip().removeprefix("W/") for tag in if_none_match.split(",")}
        return self.etag in tags or "*" in tags

#: Error statuses every route can answer: a body that is not UTF-8 (400), another method on
#: its path (405), a body too large (413) or not JSON (415), a server-side failure (5xx).
_ANY_ROUTE = (400, 405, 413, 415, 500, 503)


#: A value that may be anything but ``null``.
_NOT_NULL: dict[str, Any] = {"not": {"type": "null"}}

def answers(ok: str, model: Any, *errors: int) -> dict[int, Any]:
    """OpenAPI ``responses`` for a route: its 200 body and the error statuses it can give
    (each with the :class:`ErrorBody` schema), besides those any route can give."""
    answers: dict[int, Any] = {200: {"description": ok,
                                     "content": {JSON: {"model": model}} if model else {}}}
    if isinstance(model, type) and issubclass(model, RestResponse):
        answers[202] = {"description": "taken, not done yet: the message was queued (status "
                        "`queued`, `queued` says where), or a control was accepted for the "
                        "invocation running elsewhere (status `accepted`)",
                        "content": {JSON: {"model": model}}}
    for status in sorted({*errors, *_ANY_ROUTE}):
        answers[status] = {"description": "an error (see `code`)",
                           "content": {JSON: {"model": ErrorBody}}}
    return answers


def describe(openapi: dict[str, Any], client_state: list[str]) -> None:
    """What the generated description cannot know from the route signatures: the state keys
    a client may write (``client_state``; any other key is refused unless sent back
    unchanged), that a public seed is a ``user`` seed, what each inbox operation needs, and
    the body of ``POST /agui`` and its events: the AG-UI protocol's own ``RunAgentInput``
    (its ``threadId`` a session id) and ``Event`` schemas. The route validates that body
    itself, so the protocol package loads only when AG-UI is used."""
    from ag_ui.core import Event, RunAgentInput
    from pydantic import TypeAdapter

    components = openapi.setdefault("components", {}).setdefault("schemas", {})
    state = {"type": "object", "additionalProperties": False,
             "properties": {key: {} for key in client_state}}
    writes = ("Merged (shallowly) into the session state for this turn. A client writes only "
              f"the keys the server lists ({', '.join(client_state) or 'none here'}); any "
              "other key is refused (422) unless sent back unchanged.")
    turn = components["TurnRequest"]["properties"]
    turn["state"] = {"anyOf": [state, {"type": "null"}], "description": writes}
    # An edit needs its text, a move its position.
    components["QueueOp"]["allOf"] = [
        {"if": {"properties": {"op": {"const": "edit"}}},
         "then": {"required": ["text"], "properties": {"text": {"type": "string"}}}},
        {"if": {"properties": {"op": {"const": "move"}}},
         "then": {"required": ["position"], "properties": {"position": {"type": "integer"}}}}]
    # An answer says something: `input` is required and not null.
    components["CallAnswer"]["properties"]["input"] = {
        **components["CallAnswer"]["properties"]["input"], **_NOT_NULL}
    components["SeedRequest"]["properties"]["role"] = {
        "type": "string", "enum": ["user"], "default": "user",
        "description": "Only `user` (other roles are for trusted server code)."}
    refs = "#/components/schemas/AgUi{model}"
    agui = RunAgentInput.model_json_schema(by_alias=True, ref_template=refs)
    event = TypeAdapter(Event).json_schema(by_alias=True, ref_template=refs,
                                           mode="serialization")
    for name, definition in {**agui.pop("$defs", {}), **event.pop("$defs", {})}.items():
        components[f"AgUi{name}"] = definition
    components["AgUiEvent"] = event
    _require_tags(components)
    _describe_voice(openapi, components, state, writes)
    agui["properties"]["threadId"] = {"type": "string", **SESSION_ID_SCHEMA,
                                      "description": "The session."}
    components["AgUiResumeEntry"]["properties"]["interruptId"]["minLength"] = 1
    # A trailing tool message answers the parked call it names: a call has an id.
    components["AgUiToolMessage"]["properties"]["toolCallId"]["minLength"] = 1
    # A client's tool is offered to a model: a name every model takes (unique in the run),
    # parameters that are a JSON Schema object.
    tool = components["AgUiTool"]["properties"]
    tool["name"] = {"type": "string", "pattern": TOOL_NAME_PATTERN,
                    "description": "Unique among the run's tools."}
    tool["description"] = {"type": "string", "maxLength": 10_000}
    tool["parameters"] = {"anyOf": [{"type": "object"}, {"type": "null"}], "default": None}
    context = components["AgUiContext"]["properties"]
    context["description"] = {"type": "string", "maxLength": 10_000}
    context["value"] = {"type": "string", "maxLength": 100_000}
    agui["properties"]["tools"] = {"anyOf": [
        {"type": "array", "items": {"$ref": "#/components/schemas/AgUiTool"},
         "maxItems": 128}, {"type": "null"}], "default": None}
    agui["properties"]["context"] = {"anyOf": [
        {"type": "array", "items": {"$ref": "#/components/schemas/AgUiContext"},
         "maxItems": 128}, {"type": "null"}], "default": None}
    # A resolved interrupt carries its answer (a missing or null one would use the call up).
    components["AgUiResumeEntry"]["allOf"] = [
        {"if": {"required": ["status"], "properties": {"status": {"const": "resolved"}}},
         "then": {"required": ["payload"], "properties": {"payload": _NOT_NULL}}}]
    # A state that is not an object is ignored; an object is a write, as in POST /turns.
    agui["properties"]["state"] = {"anyOf": [state, {"not": {"type": "object"}}],
                                   "description": writes}
    components["RunAgentInput"] = agui
    post = openapi["paths"]["/agui"]["post"]
    post["requestBody"] = {
        "required": True,
        "content": {JSON: {"schema": {"$ref": "#/components/schemas/RunAgentInput"}}}}
    # Each server-sent event's data is one AG-UI event, as JSON.
    post["responses"]["200"]["content"] = {SSE: {"schema": {
        "type": "object", "required": ["data"],
        "properties": {"data": {"type": "string", "contentMediaType": JSON,
                                "contentSchema": {"$ref": "#/components/schemas/AgUiEvent"}},
                       "event": {"type": "string"}}}}}
    # POST /turns with Accept: text/event-stream: the turn's events, then the result.
    turns = openapi["paths"]["/turns"]["post"]["responses"]["200"].setdefault("content", {})
    turns[SSE] = {"schema": {
        "type": "object", "required": ["event", "data"],
        "description": "One server-sent event per turn event (`id`: its stream position, "
                       "`event`: its type, `data`: the event as JSON), then `event: result` "
                       "whose data is the JSON answer plus its `httpStatus`",
        "properties": {"id": {"type": "string"}, "event": {"type": "string"},
                       "data": {"type": "string", "contentMediaType": JSON}}}}


def _describe_voice(openapi: dict[str, Any], components: dict[str, Any],
                    state: dict[str, Any], writes: str) -> None:
    """``POST /voice`` reads its body itself (raw audio or JSON): say what both are, and that
    ``Accept: audio/*`` answers audio."""
    from dormant.http._voice import VoiceRequest

    voice = VoiceRequest.model_json_schema(by_alias=True,
                                           ref_template="#/components/schemas/{model}")
    for name, definition in voice.pop("$defs", {}).items():
        components.setdefault(name, definition)
    voice["properties"]["state"] = {"anyOf": [state, {"type": "null"}], "description": writes}
    components["VoiceRequest"] = voice
    post = openapi["paths"]["/voice"]["post"]
    post["parameters"] = [
        {"name": "sessionId", "in": "query", "required": False,
         "schema": {"type": "string", **SESSION_ID_SCHEMA},
         "description": "With a raw audio body: the session (minted when absent)."},
        {"name": "messageId", "in": "query", "required": False,
         "schema": {"type": "string", "minLength": 1, "maxLength": 128},
         "description": "With a raw audio body: a stable id for the message."}]
    post["requestBody"] = {"required": True, "content": {
        JSON: {"schema": {"$ref": "#/components/schemas/VoiceRequest"}},
        "audio/*": {"schema": {"type": "string", "format": "binary"}}}}
    post["responses"]["200"].setdefault("content", {})["audio/*"] = {
        "schema": {"type": "string", "format": "binary",
                   "description": "With Accept: audio/*, the spoken reply (the X-Dormant-* "
                                  "headers carry the session id, status, transcript and "
                                  "reply text)"}}


def _require_tags(components: dict[str, Any]) -> None:
    """Make each discriminated union's tag required in its members: pydantic leaves a tag with
    a default (``role: "user"``) optional in the JSON Schema, yet refuses a member without
    it, so a schema-valid message without its ``role`` would be refused."""
    stack: list[Any] = list(components.values())
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            tag = node.get("discriminator")
            if isinstance(tag, dict):
                for ref in (tag.get("mapping") or {}).values():
                    member = components.get(str(ref).rsplit("/", 1)[-1])
                    if member is not None and tag["propertyName"] not in member.get(
                            "required", []):
                        member["required"] = [*member.get("required", []),
                                              tag["propertyName"]]
            stack.extend(node.values())
