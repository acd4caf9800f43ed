"""The HTTP API: one Powertools resolver, for the ``api`` Lambda and ``dormant dev``.

Routes::

    POST   /turns            one turn: {sessionId?, message?, messageId?, tools?, approvals?,
                             state?, retry?, stop?, steer?, pause?, resume?, interrupt?, queue?,
                             inputs?, seed?, ifBusy?} -> the REST response (202 when the message
                             was queued or a control accepted for a run elsewhere, else 200);
                             with Accept: text/event-stream, the turn's events as they happen
                             (``event: <type>``), then ``event: result`` with that response
    GET    /sessions         the caller's sessions (sessionId, status, version, updatedAt;
                             ?detail=true adds waiting [{kind, id, name}], inbox (a count),
                             openInvocation, forkOf, compactions, createdAt: one head read
                             per session)
    GET    /sessions/{id}    status, version, pending yields and inputs, inbox, state (+ a
                             page of the ledger with ?events=true[&limit=L][&cursor=C])
    GET    /sessions/{id}/events?after=V[&limit=L][&cursor=C][&wait=N]
                             the committed events after version V, at most L (200, <= 1000)
                             of them and ``next`` (a cursor) when more follow; long-polls up
                             to N <= 20 s; ``dormant dev`` streams them with &follow=true
    POST   /sessions/{id}/fork   {atVersion?, sessionId?} -> a fork (copy-on-write) of the
                             caller's session at that version, owned by the caller (201)
    DELETE /sessions/{id}    forget a session (its forks keep what they inherited)
    POST   /voice            one spoken turn: a raw audio body (Content-Type: audio/*,
                             ?sessionId=) or {audio: {data, format}, ...as /turns} -> the
                             REST response plus transcript and audio {data, format}; with
                             Accept: audio/*, the spoken reply itself (X-Dormant-* headers)
    POST   /agui             one turn as AG-UI server-sent events (a standard RunAgentInput;
                             forwardedProps.dormant.positions: true adds rawEvent.seq)
    GET    /                 the OpenAPI description of these routes (Swagger UI at /docs)

The principal comes only from API Gateway's ``requestContext`` (see :func:`principal_of`), never
from the body; a session owned by another principal answers 404. Errors are JSON
``{"code", "message"}`` with a status from :data:`dormant.errors.HTTP_STATUS`; a refused request
writes nothing. A client's mistake is a 4xx whose message says what was wrong; a known path
asked with another method is 405 (with ``Allow``); a body in another media type than JSON is
415. A failure on the server side (the model provider's, the store's, a bug) never shows its
exception text: the answer names the failure and the request id (API Gateway's
``requestContext.requestId``) under which the ``dormant`` logger recorded the detail.

Powertools is imported here and nowhere else in the library: only the HTTP entry points pay for
it. The resolver is thread-safe (``dormant dev`` serves it from many threads), see
:class:`dormant.http._resolver.Resolver`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated, Any, Literal

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, CORSConfig, Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError, ServiceError
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query

from dormant._follow import (
    CURSOR_PATTERN,
    DEFAULT_LIMIT,
    MAX_LIMIT,
    Feed,
)
from dormant.errors import (
    DormantError,
)
from dormant.handlers import RestResponse, VoiceResponse
from dormant.http._openapi import DOCS_CACHE_CONTROL, SSE, DocsPage, answers, describe
from dormant.http._resolver import JSON, Resolver, error_response, validation_response
from dormant.http._routes import Routes, public_events
from dormant.http._sse import (
    FOLLOW_KEEPALIVE,
    SSE_WRITER_ATTRIBUTE,
    wants_event_stream,
    wants_positions,
)
from dormant.http._voice import (
    AUDIO,
    HEADERS,
    VoiceRequest,
)
from dormant.http._wire import (
    SESSION_ID_SCHEMA,
    ApprovalAnswer,
    CallAnswer,
    ErrorBody,
    ForkCreated,
    ForkRequest,
    PendingCall,
    SessionLine,
    SessionList,
    SessionUsage,
    SessionView,
    TurnRequest,
    Waiting,
    checked_session_id,
    principal_of,
    request_id_of,
)

if TYPE_CHECKING:
    from dormant.agent import Agent
    from dormant.app import App

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "FOLLOW_KEEPALIVE",
    "MAX_WAIT",
    "SESSION_ID_SCHEMA",
    "SSE_WRITER_ATTRIBUTE",
    "ApprovalAnswer",
    "CallAnswer",
    "ErrorBody",
    "Feed",
    "PendingCall",
    "SessionLine",
    "SessionList",
    "SessionUsage",
    "SessionView",
    "TurnRequest",
    "VoiceRequest",
    "Waiting",
    "answers",
    "build_resolver",
    "checked_session_id",
    "error_response",
    "principal_of",
    "public_events",
    "request_id_of",
    "wants_event_stream",
    "wants_positions",
]

log = logging.getLogger("dormant.http")

#: Largest request body accepted (bytes, after base64 decoding); larger ones get 413.
DEFAULT_MAX_BODY_BYTES = 1_000_000

#: Longest ``wait`` of ``GET /sessions/{id}/events`` (seconds; API Gateway cuts at 29).
MAX_WAIT = 20.0
#: Codes for the 4xx Powertools itself may raise (``ServiceError``), by status.
_SERVICE_CODES = {401: "unauthorized", 404: "not_found", 413: "payload_too_large"}


def build_resolver(
    app: App,
    agent: Agent,
    *,
    cors: CORSConfig | Literal[False] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    require_principal: bool = False,
    title: str | None = None,
    keepalive: float = FOLLOW_KEEPALIVE,
    transcriber: Any = None,
    speaker: Any = None,
    **handler_config: Any,
) -> APIGatewayRestResolver:
    """The HTTP API for ``agent`` on ``app``: a Powertools ``APIGatewayRestResolver``.

    Call ``resolver.resolve(event, context)`` with an API Gateway REST proxy event.
    ``handler_config`` goes to ``app.handler.rest`` / ``agui`` (``hooks``, ``timeout``,
    ``response``...). ``require_principal=True`` answers 401 when the authorizer named nobody.
    ``keepalive``: seconds of silence after which a streamed answer (``POST /agui``, ``POST
    /turns`` as events) sends an SSE comment, so a proxy's idle timeout (API Gateway ends a
    stream silent for 5 minutes) does not cut a turn whose tool runs long; 0: none.
    ``transcriber`` / ``speaker``: what ``POST /voice`` hears and speaks with (see
    ``app.handler.voice``; left out: a realtime model itself, else OpenAI's audio APIs).
    ``cors``: the CORS rules (left out: any origin, ``X-Principal`` allowed, which is what the
    ``api`` function serves behind API Gateway); ``False``: no CORS at all, so only pages of
    the server's own origin can read it (``dormant dev`` without ``--allow-origin``).
    """
    resolver = Resolver(
        max_body_bytes=max_body_bytes,
        cors=None if cors is False else cors or CORSConfig(
            allow_origin="*", allow_headers=["X-Principal"], expose_headers=list(HEADERS)),
        enable_validation=True,
    )
    rest = app.handler.rest(agent=agent, **handler_config)
    routes = Routes(app, agent, resolver, rest, require_principal, handler_config)
    routes.keepalive = keepalive
    routes.voice_handler = app.handler.voice(agent=agent, transcriber=transcriber,
                                             speaker=speaker, **handler_config)
    resolver.binary_bodies["/voice"] = (AUDIO,)
    client_state = sorted(handler_config.get("client_state") or ())
    resolver.describe = lambda openapi: describe(openapi, client_state)
    # What a local server needs to run handed-on work (App.hand_on) the way this API does.
    resolver.dormant_app, resolver.dormant_rest = app, rest

    @resolver.post("/turns", summary="Run one turn", tags=["turns"],
                   description="Start or continue a session: a message, or answers to the calls "
                   "it waits on, or a control (stop, steer, pause, resume, interrupt, inbox "
                   "operations, a seed). Answers the REST response (sessionId, status, output, "
                   "yieldedTools...): 200 when the turn ran or the control applied, 202 when "
                   "the message was queued or the control accepted for a run elsewhere.",
                   responses=answers("the turn's outcome", RestResponse,
                                      400, 401, 404, 409, 413, 422, 502, 504))
    def post_turn(request: Annotated[TurnRequest, Body(embed=False)]) -> Response[Any]:
        return routes.turn(request)

    @resolver.get("/sessions", summary="List your sessions", tags=["sessions"],
                  description="The caller's sessions, most recently updated first: "
                  "`sessionId`, `status`, `version`, `updatedAt`. With `detail=true` each "
                  "line also says what the session waits on (`waiting`), how many messages "
                  "its inbox holds (`inbox`), `openInvocation`, `forkOf`, `compactions` and "
                  "`createdAt`, each only when it says something; that reads each listed "
                  "session's head (one more read per session, never its ledger).",
                  responses=answers("the sessions", SessionList, 401, 422))
    def list_sessions(
        limit: Annotated[int, Query(ge=1, le=100, description="At most this many")] = 100,
        detail: Annotated[bool, Query(description="Say what each session waits on, its "
                                      "inbox, fork and compactions (reads each head)")] = False,
    ) -> Response[Any]:
        return routes.list(limit, detail)

    @resolver.get("/sessions/<session_id>/events", summary="Follow a session",
                  tags=["sessions"],
                  description="The committed ledger events after version `after` (keep the "
                  "`version` of the last answer and pass it next time), a page of at most "
                  f"`limit` (default {DEFAULT_LIMIT}, at most {MAX_LIMIT}): when more follow, "
                  "`next` is a cursor; ask again with `cursor` set to it (instead of `after`) "
                  "until `next` is null, and only then hold `version`. With `wait`, waits up "
                  "to that many seconds for a commit when there is none yet (long polling). "
                  "`resync: true`: `after` could not be placed; `events` start the whole "
                  "ledger, replace what you hold. `dormant dev` also streams it as "
                  "server-sent events with `follow=true` (every page, then each commit).",
                  responses=answers("the events after `after`", Feed, 400, 401, 404, 422))
    def session_events(
        session_id: Annotated[str, Path(description="The session id",
                                        json_schema_extra=SESSION_ID_SCHEMA)],
        after: Annotated[int | None, Query(ge=0, description="The version you hold (0: "
                                           "all)")] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="At most this many "
                                    f"events (<= {MAX_LIMIT})")] = DEFAULT_LIMIT,
        cursor: Annotated[str | None, Query(pattern=CURSOR_PATTERN, description="The `next` "
                                            "of the previous page")] = None,
        wait: Annotated[float, Query(ge=0, le=MAX_WAIT, allow_inf_nan=False,
                                     description="Seconds to wait for a commit (<= 20)")] = 0,
        follow: Annotated[bool, Query(description="Stream (dormant dev only)")] = False,
    ) -> Response[Any]:
        return routes.events(session_id, after, wait, follow, limit=limit, cursor=cursor)

    @resolver.get("/sessions/<session_id>", summary="Read a session", tags=["sessions"],
                  description="Status, version, what the session waits on, inbox, state. "
                  "With `events=true`, also a page of the ledger from its start (or from "
                  f"`cursor`): at most `limit` events (default {DEFAULT_LIMIT}, at most "
                  f"{MAX_LIMIT}) and, when more follow, `next`: pass it as `cursor` for the "
                  "next page.",
                  responses=answers("the session", SessionView, 400, 401, 404, 422))
    def get_session(
        session_id: Annotated[str, Path(description="The session id",
                                        json_schema_extra=SESSION_ID_SCHEMA)],
        events: Annotated[bool, Query(description="Include a page of the ledger")] = False,
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="With events: at most "
                                    f"this many (<= {MAX_LIMIT})")] = DEFAULT_LIMIT,
        cursor: Annotated[str | None, Query(pattern=CURSOR_PATTERN, description="With "
                                            "events: the `next` of the previous page")] = None,
    ) -> Response[Any]:
        return routes.show(session_id, events, limit=limit, cursor=cursor)

    @resolver.post("/sessions/<session_id>/fork", summary="Fork a session", tags=["sessions"],
                   description="A new session whose history is this one's up to `atVersion` "
                   "(default: its current version), owned by you. Copy-on-write: the fork "
                   "reads the source's history and writes only its own events, so writes to "
                   "either never appear in the other, and deleting the source does not break "
                   "the fork. Edit-and-resend: fork at the version before a message, then send "
                   "the edited message to the fork.",
                   responses=answers("the fork", ForkCreated, 400, 401, 404, 409, 422))
    def fork_session(
        session_id: Annotated[str, Path(description="The session to fork",
                                        json_schema_extra=SESSION_ID_SCHEMA)],
        request: Annotated[ForkRequest | None, Body(embed=False)] = None,
    ) -> Response[Any]:
        return routes.fork(session_id, request or ForkRequest())

    @resolver.delete("/sessions/<session_id>", summary="Delete a session", tags=["sessions"],
                     responses=answers("deleted", None, 400, 401, 404))
    def delete_session(
        session_id: Annotated[str, Path(description="The session id",
                                        json_schema_extra=SESSION_ID_SCHEMA)],
    ) -> Response[Any]:
        return routes.delete(session_id)

    @resolver.post("/voice", summary="Run one spoken turn", tags=["turns"],
                   description="Send what the user said: a raw audio body (`Content-Type: "
                   "audio/wav`, `audio/mpeg`, `audio/ogg`, `audio/webm`, `audio/flac` or "
                   "`audio/mp4`; the session in `?sessionId=`), or a JSON body with `audio: "
                   "{data, format}` (base64) and anything `POST /turns` takes. The transcript "
                   "runs as the turn's message (the audio is not stored). Answers the REST "
                   "response plus `transcript` and the spoken reply, `audio: {data, format}`; "
                   "with `Accept: audio/*`, the reply's audio itself, with the session id, "
                   "status, transcript and reply text (URL-encoded) in `X-Dormant-Session-Id`, "
                   "`X-Dormant-Status`, `X-Dormant-Transcript` and `X-Dormant-Reply`. A failed "
                   "transcription writes nothing (502 `model_error`); a failed speech keeps the "
                   "committed turn and says why in `audioError`.",
                   responses=answers("the spoken turn's outcome", VoiceResponse,
                                      400, 401, 404, 409, 413, 415, 422, 502, 504))
    def post_voice() -> Response[Any]:
        return routes.voice()

    @resolver.post("/agui", summary="Run one turn as AG-UI events", tags=["agui"],
                   description="Body: an AG-UI RunAgentInput (threadId is the session, the last "
                   "user message the input, resume entries the tool answers; "
                   "forwardedProps {\"dormant\": {\"positions\": true}} gives each event "
                   "its stream position as rawEvent.seq, which a stop's `seen` counts). Answers "
                   "text/event-stream.",
                   responses={**answers("AG-UI events", None, 400, 401, 404, 409, 413,
                                         422),
                              200: {"description": "AG-UI events, as server-sent events",
                                    "content": {SSE: {"schema": {"type": "string"}}}}})
    def post_agui(body: Annotated[dict[str, Any], Body(embed=False)]) -> Response[Any]:
        return routes.agui(body)

    @resolver.get("/", summary="This API's OpenAPI description", include_in_schema=False)
    def openapi() -> Response[Any]:
        return Response(status_code=200, content_type=JSON,
                        body=resolver.get_openapi_json_schema(
                            title=title or f"dormant: {app.name}", version=_version()))

    docs = DocsPage(title or f"dormant: {app.name}")

    @resolver.get("/docs", summary="This API's documentation page", include_in_schema=False)
    def docs_page() -> Response[Any]:
        headers = {"Cache-Control": DOCS_CACHE_CONTROL, "ETag": docs.etag}
        asked = resolver.current_event.headers.get("If-None-Match")  # any case
        if docs.fresh(asked):
            return Response(status_code=304, body="", headers=headers)
        return Response(status_code=200, content_type="text/html; charset=utf-8",
                        body=docs.body, headers=headers)

    @resolver.exception_handler(RequestValidationError)  # type: ignore[untyped-decorator]
    def invalid(error: RequestValidationError) -> Response[Any]:
        return validation_response(error)

    @resolver.exception_handler(RequestUnsupportedContentType)  # type: ignore[untyped-decorator]
    def unsupported(error: RequestUnsupportedContentType) -> Response[Any]:
        return error_response("unsupported_media_type",
                              "send the body as application/json")

    @resolver.not_found
    def not_found(error: NotFoundError) -> Response[Any]:
        event = resolver.current_event
        allowed = resolver.allowed_methods(event.path)
        if allowed:
            return error_response("method_not_allowed",
                                  f"{event.http_method} is not a method of {event.path} "
                                  f"(it allows {', '.join(allowed)})",
                                  headers={"Allow": ", ".join(allowed)})
        return error_response("not_found", f"no route {event.http_method} {event.path}")

    @resolver.exception_handler(DormantError)  # type: ignore[untyped-decorator]
    def dormant_error(error: DormantError) -> Response[Any]:
        return error_response(error.code, str(error), request_id=routes.request_id(),
                              session_id=getattr(error, "session_id", None))

    @resolver.exception_handler(Exception)  # type: ignore[untyped-decorator]
    def internal_error(error: Exception) -> Response[Any]:
        if isinstance(error, ServiceError) and error.status_code < 500:  # Powertools' own 4xx
            code = _SERVICE_CODES.get(error.status_code, "invalid_input")
            return error_response(code, str(error.msg))
        # A bug (or a dependency failing) under a route: the detail goes to the log only.
        log.error("request %s: unhandled error", routes.request_id(), exc_info=error,
                  extra={"request_id": routes.request_id()})
        return error_response("internal_error", type(error).__name__,
                              request_id=routes.request_id())

    return resolver


def _version() -> str:
    import dormant

    return dormant.__version__
