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

import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal
from urllib.parse import unquote

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
    decode_cursor,
    events_after,
    page_after,
)
from dormant._resume import validate_resume_state
from dormant.errors import (
    DormantError,
    InputError,
    SessionNotFound,
    is_client_error,
    public_message,
)
from dormant.events import Event
from dormant.handlers import RestResponse, RestStream, VoiceResponse
from dormant.http._openapi import DOCS_CACHE_CONTROL, SSE, DocsPage, answers, describe
from dormant.http._resolver import JSON, Resolver, error_response, validation_response
from dormant.http._voice import (
    AUDIO,
    HEADERS,
    VoiceRequest,
    audio_answer,
    raw_voice_request,
    wants_audio,
)
from dormant.http._wire import (
    SESSION_ID_SCHEMA,
    ActiveInvocation,
    ApprovalAnswer,
    CallAnswer,
    ErrorBody,
    ForkCreated,
    ForkOf,
    ForkRequest,
    PendingCall,
    Running,
    SessionLine,
    SessionList,
    SessionView,
    TurnRequest,
    Waiting,
    checked_session_id,
    principal_of,
    request_id_of,
    waiting_on,
)
from dormant.session import Session

if TYPE_CHECKING:
    from dormant._turn_wire import TurnResult
    from dormant.agent import Agent
    from dormant.app import App

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "FOLLOW_KEEPALIVE",
    "MAX_WAIT",
    "SSE_WRITER_ATTRIBUTE",
    "ApprovalAnswer",
    "CallAnswer",
    "ErrorBody",
    "Feed",
    "PendingCall",
    "SessionLine",
    "SessionList",
    "SessionView",
    "TurnRequest",
    "VoiceRequest",
    "Waiting",
    "build_resolver",
    "error_response",
    "principal_of",
    "public_events",
    "request_id_of",
    "wants_event_stream",
]

log = logging.getLogger("dormant.http")

#: Largest request body accepted (bytes, after base64 decoding); larger ones get 413.
DEFAULT_MAX_BODY_BYTES = 1_000_000

#: The attribute of the Lambda context through which a local server streams ``POST /agui``.
SSE_WRITER_ATTRIBUTE = "dormant_sse_writer"

#: Longest ``wait`` of ``GET /sessions/{id}/events`` (seconds; API Gateway cuts at 29).
MAX_WAIT = 20.0
#: Seconds between keep-alive comments of a followed (streamed) session with no commits.
FOLLOW_KEEPALIVE = 15.0
#: HTTP status of a successful turn by its status: the work was taken, not done yet.
ACCEPTED_STATUSES = frozenset({"queued", "accepted"})
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
    routes = _Routes(app, agent, resolver, rest, require_principal, handler_config)
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


def public_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ledger events (JSON form) as a public answer shows them: an ``invocation_failed`` of a
    server-side failure says what failed, not its exception's text (the log of the request
    that failed has that)."""
    shown = []
    for event in events:
        if event.get("type") == "invocation_failed" and not is_client_error(event.get("code")):
            event = {**event, "message": public_message(event.get("code"),
                                                        str(event.get("message")))}
        shown.append(event)
    return shown


def _yields(events: list[Event], waiting: set[str]) -> dict[str, dict[str, Any] | None]:
    """The recorded answer schema of each call of ``waiting`` whose yield is in ``events``."""
    return {u.call_id: u.input_schema for u in validate_resume_state(events)
            if u.call_id in waiting}


def _version() -> str:
    import dormant

    return dormant.__version__


class _Routes:
    """What the routes do, apart from the Powertools plumbing."""

    def __init__(self, app: App, agent: Agent, resolver: Resolver,
                 rest: Callable[..., RestResponse], require_principal: bool,
                 handler_config: dict[str, Any]) -> None:
        self.app = app
        self.agent = agent
        self.resolver = resolver
        self.rest = rest
        self.require_principal = require_principal
        self.handler_config = handler_config
        self._agui: Callable[..., Any] | None = None
        self._turns: Callable[..., RestStream] | None = None
        self.keepalive = FOLLOW_KEEPALIVE
        self.voice_handler: Callable[..., VoiceResponse] | None = None

    def principal(self) -> str | None:
        principal = principal_of(self.resolver.current_event.raw_event)
        if principal is None and self.require_principal:
            raise _Unauthorized()
        return principal

    def request_id(self) -> str | None:
        """This request's id: API Gateway's (``dormant dev`` mints one), else the Lambda
        invocation's."""
        found = request_id_of(self.resolver.current_event.raw_event)
        return found or getattr(self.resolver.lambda_context, "aws_request_id", None)

    # --- POST /turns ---------------------------------------------------------------------------

    def turn(self, request: TurnRequest) -> Response[Any]:
        principal = self.principal()
        if request.session_id is not None:
            checked_session_id(request.session_id)
        if wants_event_stream(self.resolver.current_event.headers):
            return self._turn_events(request, principal)
        reply = self.rest(request.to_handler_input(principal),
                          remaining_time=self._remaining_time())
        if reply.status == "error" and reply.commit_status in (None, "failed"):
            return self._refused(reply, principal)
        status, body = self._answer(reply)
        return Response(status_code=status, content_type=JSON, body=body)

    def _turn_events(self, request: TurnRequest, principal: str | None) -> Response[Any]:
        """``POST /turns`` as server-sent events: each turn event as it happens (``id:`` its
        stream position, ``event:`` its type), then ``event: result`` with the body the JSON
        answer would have had, and its ``httpStatus``. A request refused before anything ran
        answers that JSON error instead, as without the ``Accept``."""
        if self._turns is None:
            self._turns = self.app.handler.rest_stream(agent=self.agent, **self.handler_config)
        run = self._turns(request.to_handler_input(principal),
                          remaining_time=self._remaining_time())
        first = next(run, None)
        ended = run.result
        if ended is not None and ended.status == "error" \
                and ended.commit_status in (None, "failed"):
            return self._refused(ended, principal)

        def frames() -> Iterator[str]:
            for event in itertools.chain(() if first is None else [first], run):
                [shown] = public_events([event.model_dump(mode="json")])
                yield (f"id: {event.seq}\nevent: {event.type}\n"
                       f"data: {json.dumps(shown, separators=(',', ':'))}\n\n")
            reply = run.response
            assert reply is not None
            status, body = self._answer(reply)
            yield f"event: result\ndata: {json.dumps({**body, 'httpStatus': status})}\n\n"

        return self._stream(frames(), run)

    def _stream(self, chunks: Iterator[str], run: Any) -> Response[Any]:
        """Send ``chunks`` as a ``text/event-stream`` body: one by one through the server's
        writer when there is one (``dormant dev``, the streaming function), else whole. A
        client that hung up stops the turn (``run.close()``)."""
        writer = getattr(self.resolver.lambda_context, SSE_WRITER_ATTRIBUTE, None)
        headers = {"Cache-Control": "no-cache"}
        if writer is not None:
            with _KeepAlive(writer, self.keepalive, run) as send:
                try:
                    for chunk in chunks:
                        send(chunk)
                except OSError:  # the client hung up: stop the turn
                    run.close()
            return Response(status_code=200, content_type=SSE, body="", headers=headers)
        return Response(status_code=200, content_type=SSE, body="".join(chunks), headers=headers)

    def _answer(self, reply: RestResponse) -> tuple[int, dict[str, Any]]:
        """The HTTP status and JSON body of a turn that ran (or a control that applied)."""
        status = 202 if reply.status in ACCEPTED_STATUSES else 200
        body = reply.wire()
        if body.get("events"):
            body["events"] = public_events(body["events"])
        if reply.error is not None and not is_client_error(reply.code or "run_error"):
            # A failure after a tool ran: progress saved (200), the failure's text logged.
            request_id = self.request_id()
            log.error("request %s: turn of %s failed: %s: %s", request_id, reply.session_id,
                      reply.code, reply.error,
                      extra={"request_id": request_id, "session_id": reply.session_id})
            body["error"] = public_message(reply.code or "run_error", reply.error, request_id)
            body["requestId"] = request_id
        return status, body

    def _refused(self, ended: RestResponse | TurnResult, principal: str | None
                 ) -> Response[Any]:
        """The JSON error of a turn that ended in an error having written nothing, with its
        own code and whether the same request can succeed later (``retryable``)."""
        code, session_id = ended.code or "run_error", ended.session_id
        pending = self._pending(session_id, principal) \
            if code == "awaiting_input" and session_id else None
        return error_response(code, ended.error or "the turn failed",
                              request_id=self.request_id(), session_id=session_id or None,
                              pending=pending, retryable=ended.retryable)

    def _remaining_time(self) -> float | None:
        """Seconds this Lambda invocation has left (None off Lambda): the turn ends as a
        retryable ``deadline`` failure, progress kept, before the platform would kill it."""
        context = getattr(self.resolver, "lambda_context", None)
        remaining = getattr(context, "get_remaining_time_in_millis", None)
        return remaining() / 1000 if callable(remaining) else None

    def _pending(self, session_id: str, principal: str | None) -> list[PendingCall] | None:
        session = self._load(session_id, principal, turns=0)
        return [PendingCall(call_id=c.call_id, name=c.name, args=c.args)
                for c in session.yielded_tools]

    # --- POST /voice ---------------------------------------------------------------------------

    def voice(self) -> Response[Any]:
        """One spoken turn (see the route's description)."""
        from pydantic import ValidationError

        event = self.resolver.current_event
        principal = self.principal()
        kind = next((v for k, v in (event.headers or {}).items()
                     if k.lower() == "content-type"), "") or ""
        try:
            if kind.split(";", 1)[0].strip().lower().startswith(AUDIO):
                request = raw_voice_request(event.raw_event, kind, principal)
            else:
                body = event.json_body if event.body else {}
                request = VoiceRequest.model_validate(body).to_handler_input(principal)
        except json.JSONDecodeError as error:
            return error_response("invalid_json", f"the request body is not valid JSON: "
                                  f"{error.msg}")
        except ValidationError as error:
            return validation_response(RequestValidationError(error.errors()))
        if request.session_id is not None:
            checked_session_id(request.session_id)
        assert self.voice_handler is not None
        reply = self.voice_handler(request, remaining_time=self._remaining_time())
        if reply.status == "error" and reply.commit_status in (None, "failed"):
            return self._refused(reply, principal)
        status, body = self._answer(reply)
        if reply.audio_error is not None:  # the provider's text stays in the log
            request_id = self.request_id()
            log.error("request %s: speech for %s failed: %s", request_id, reply.session_id,
                      reply.audio_error,
                      extra={"request_id": request_id, "session_id": reply.session_id})
            body["audioError"] = public_message("model_error", reply.audio_error, request_id)
            body["requestId"] = request_id
        if reply.audio is not None and wants_audio(event.headers):
            data, media, headers = audio_answer(reply)
            answer = Response(status_code=status, content_type=media, body=data,
                              headers=headers)
            # Already base64: as a str, it passes Powertools' response serialization as is.
            answer.base64_encoded = True
            return answer
        return Response(status_code=status, content_type=JSON, body=body)

    # --- /sessions/{id} ------------------------------------------------------------------------

    def show(self, session_id: str, events: bool, *, limit: int = DEFAULT_LIMIT,
             cursor: str | None = None) -> Response[Any]:
        # Path parameters arrive as the URL spelled them: ``a%3Ab`` is session ``a:b``. A
        # session id has no ``%``, so decoding an already decoded one changes nothing.
        session_id = unquote(session_id)
        principal = self.principal()
        session = self._load(session_id, principal, turns=0)
        head = session.head
        schemas = self._input_schemas(session, whole=False)
        after, skip = decode_cursor(cursor or "0")
        page = page_after(self.app, head, after, skip=skip, limit=limit,
                          principal=principal) if events else None
        view = SessionView(
            session_id=session.session_id, status=session.status, version=session.version,
            yielded_tools=[PendingCall(call_id=c.call_id, name=c.name, args=c.args,
                                       input_schema=schemas.get(c.call_id))
                           for c in session.yielded_tools],
            pending_approvals=session.pending_approvals,
            deferred_tools=[PendingCall(call_id=c.call_id, name=c.name, args=c.args)
                            for c in session.deferred_tools],
            pending_inputs=session.pending_inputs, waiting=waiting_on(session),
            inbox=session.inbox, open_invocation=session.open_invocation,
            running=Running.of(session, self.app.clock()),
            active_invocation=ActiveInvocation.of(session, self.app.clock()),
            state=session.state, preview=head.preview,
            timers=[t.model_dump(by_alias=True, mode="json", exclude={"session_id"})
                    for t in session.timers],
            fork_of=ForkOf(**head.fork_of) if head.fork_of else None,
            compactions=head.compactions or None,
            created_at=head.created_at, updated_at=head.updated_at,
            events=public_events(page.events) if page is not None else None,
            next=page.next if page is not None else None,
        )
        return Response(status_code=200, content_type=JSON, body=view.wire())

    def _input_schemas(self, session: Session, *, whole: bool) -> dict[str, dict[str, Any]]:
        """What each call the session waits on expects, from its ``tool_yield``. Unless the
        whole ledger is at hand, the last turn is read for them (one more read, only for a
        session waiting on calls), and the whole ledger only if a yield is older than that
        (a user seed or steer landed since)."""
        waiting = {c.call_id for c in session.yielded_tools}
        if not waiting:
            return {}
        found = _yields(session.events if whole else self._events(session, 1), waiting)
        if not whole and not waiting <= found.keys():
            found = _yields(self._events(session, None), waiting)
        return {call_id: schema for call_id, schema in found.items() if schema is not None}

    def _events(self, session: Session, turns: int | None) -> list[Event]:
        read = self.app.sessions.load(session.session_id, turns=turns)
        return read.events if read is not None else []

    def list(self, limit: int, detail: bool) -> Response[Any]:
        principal = self.principal()
        summaries = self.app.sessions.list(principal=principal, limit=limit)
        if not detail:
            lines = [SessionLine(session_id=s.session_id, status=s.status, version=s.version,
                                 updated_at=s.updated_at) for s in summaries]
        else:
            heads = (self.app.sessions.load(s.session_id, turns=0) for s in summaries)
            # A session deleted since the listing is left out, not a 404 for the whole list.
            now = self.app.clock()
            lines = [SessionLine.detailed(session, now) for session in heads
                     if session is not None and session.head.visible_to(principal)]
        body = SessionList(sessions=lines)
        return Response(status_code=200, content_type=JSON,
                        body=body.model_dump(by_alias=True, mode="json", exclude_none=True))

    # --- /sessions/{id}/events -----------------------------------------------------------------

    def events(self, session_id: str, after: int | None, wait: float, follow: bool, *,
               limit: int = DEFAULT_LIMIT, cursor: str | None = None) -> Response[Any]:
        session_id = unquote(session_id)
        principal = self.principal()
        checked_session_id(session_id)
        if cursor is not None and after is not None:
            return error_response("invalid_input", "pass after or cursor, not both: a "
                                  "cursor (a page's `next`) says where to go on")
        after, skip = decode_cursor(cursor) if cursor is not None else (after or 0, 0)
        if not follow:
            feed = events_after(self.app, session_id, after, wait=wait, principal=principal,
                                skip=skip, limit=limit)
            body = feed.wire()
            body["events"] = public_events(body["events"])
            return Response(status_code=200, content_type=JSON, body=body)
        writer = getattr(self.resolver.lambda_context, SSE_WRITER_ATTRIBUTE, None)
        if writer is None:
            return error_response(
                "invalid_input", "follow=true streams only from a local server (dormant dev); "
                "through this API, long-poll: GET /sessions/{id}/events?after=VERSION&wait=20, "
                "then again with after = the version it answered")
        feed = events_after(self.app, session_id, after, principal=principal,  # 404 first
                            skip=skip, limit=limit)
        self._follow(writer, feed, after, principal, limit)
        return Response(status_code=200, content_type=SSE, body="",
                        headers={"Cache-Control": "no-cache"})

    def _follow(self, writer: Callable[[str], None], feed: Feed, after: int,
                principal: str | None, limit: int = DEFAULT_LIMIT) -> None:
        """Stream the session's feeds until the client hangs up: a ``data:`` message each
        time the version moves (one per page: a page with ``next`` is followed at once by
        the next), a comment every :data:`FOLLOW_KEEPALIVE` seconds otherwise."""
        try:
            writer(f": following {feed.session_id} after version {after}\n\n")
            while True:
                skip = 0
                if feed.version > after:
                    shown = feed.wire()
                    shown["events"] = public_events(shown["events"])
                    writer(f"data: {json.dumps(shown, separators=(',', ':'))}\n\n")
                    after, skip = decode_cursor(feed.next) if feed.next is not None \
                        else (feed.version, 0)
                try:
                    feed = events_after(self.app, feed.session_id, after, skip=skip,
                                        limit=limit, principal=principal,
                                        wait=0 if skip or feed.next else FOLLOW_KEEPALIVE)
                except SessionNotFound as error:  # deleted while followed
                    body = ErrorBody(code=error.code, message=str(error))
                    data = body.model_dump_json(by_alias=True, exclude_none=True)
                    writer(f"event: error\ndata: {data}\n\n")
                    return
                if feed.version <= after:
                    writer(": keep-alive\n\n")
        except OSError:  # the client hung up
            return

    def fork(self, session_id: str, request: ForkRequest) -> Response[Any]:
        source = checked_session_id(unquote(session_id))
        new_id = checked_session_id(request.session_id) if request.session_id else None
        principal = self.principal()
        fork = self.app.sessions.fork(source, at_version=request.at_version,
                                      new_session_id=new_id, owner=principal, history=False)
        fork_of = fork.head.fork_of or {}
        body = ForkCreated(session_id=fork.session_id, version=fork.version,
                           fork_of=ForkOf(**fork_of))
        return Response(status_code=201, content_type=JSON,
                        body=body.model_dump(by_alias=True, mode="json"))

    def delete(self, session_id: str) -> Response[Any]:
        session = self._load(unquote(session_id), self.principal(), turns=0)
        if not self.app.sessions.delete(session.session_id):
            raise SessionNotFound(session.session_id)
        scheduler = self.app.scheduler
        for timer in session.timers:
            if scheduler is None:
                break
            try:  # best effort: a timer left behind fires into nothing (stale_timer)
                scheduler.cancel(session.session_id, timer.name)
            except Exception:
                log.warning("could not cancel timer %r of deleted session %s", timer.name,
                            session.session_id, exc_info=True)
        return Response(status_code=200, content_type=JSON,
                        body={"sessionId": session.session_id, "deleted": True})

    def _load(self, session_id: str, principal: str | None, *, turns: int | None) -> Session:
        sid = checked_session_id(session_id)
        session = self.app.sessions.load(sid, turns=turns)
        if session is None or not session.head.visible_to(principal):
            raise SessionNotFound(sid)
        return session

    # --- POST /agui ----------------------------------------------------------------------------

    def agui(self, body: dict[str, Any]) -> Response[Any]:
        from pydantic import ValidationError

        from dormant.agui import encode_sse, from_run_agent_input

        principal = self.principal()
        try:
            request = from_run_agent_input(body, principal=principal)
            if request.session_id is not None:  # as POST /turns: a bad id is 400, no stream
                checked_session_id(request.session_id)
        except ValidationError as error:  # a RunAgentInput whose entries fit no turn input
            return validation_response(RequestValidationError(error.errors()))
        except InputError as error:
            cause = error.__cause__
            if isinstance(cause, ValidationError):  # not a RunAgentInput: name the fields
                return validation_response(RequestValidationError(cause.errors()))
            return error_response(error.code, str(error))
        if self._agui is None:  # takes request_id= too (dormant.agui.agui_handler)
            handler: Any = self.app.handler.agui(agent=self.agent, **self.handler_config)
            self._agui = handler
        # An AgUIRun: iterable, and close() stops the turn. Its RUN_ERROR names a server-side
        # failure by code and this request id; the detail goes to the log.
        run: Any = self._agui(request, request_id=self.request_id(),
                              positions=wants_positions(body))
        # The first event comes once the turn has read the session: a request refused by then
        # (another principal's session, a state key it may not write...) wrote nothing and
        # streamed nothing, so it gets the JSON error POST /turns gives, not a 200.
        first = next(run)
        ended = run.result
        if ended is not None and ended.status == "error" and ended.commit_status is None:
            return self._refused(ended, principal)
        return self._stream(encode_sse(itertools.chain([first], run)), run)


class _KeepAlive:
    """Sends a streamed answer's chunks through ``writer`` and, from a thread of its own, an
    SSE comment (``: keepalive``) whenever ``interval`` seconds pass with nothing sent (a tool
    that runs long). One lock orders the two. A comment that finds the client gone aborts the
    turn (``run.abort()``) at once; the next chunk's write then fails where it is sent."""

    COMMENT = ": keepalive\n\n"

    def __init__(self, writer: Callable[[str], None], interval: float, run: Any) -> None:
        self._writer = writer
        self._interval = interval
        self._run = run
        self._lock = threading.Lock()
        self._last = time.monotonic()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> _KeepAlive:
        if self._interval > 0:
            self._thread = threading.Thread(target=self._beat, name="dormant-sse-keepalive",
                                            daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def __call__(self, chunk: str) -> None:
        with self._lock:
            self._writer(chunk)
            self._last = time.monotonic()

    def _beat(self) -> None:
        wait = self._interval
        while not self._done.wait(wait):
            with self._lock:
                if self._done.is_set():
                    return
                quiet = time.monotonic() - self._last
                if quiet >= self._interval:
                    try:
                        self._writer(self.COMMENT)
                    except OSError:  # the client hung up while the turn was quiet
                        self._run.abort()
                        return
                    self._last = time.monotonic()
                    quiet = 0.0
            wait = self._interval - quiet


def wants_event_stream(headers: Mapping[str, str] | None) -> bool:
    """Whether a request's ``Accept`` asks for ``text/event-stream`` over JSON (a client that
    names both gets the one it ranks higher; equal ranks: the first named)."""
    accept = next((v for k, v in (headers or {}).items() if k.lower() == "accept"), "")
    ranks: dict[str, tuple[float, int]] = {}
    for index, part in enumerate(accept.split(",")):
        kind, *params = (p.strip() for p in part.split(";"))
        weight = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip() == "q":
                try:
                    weight = float(value)
                except ValueError:
                    weight = 0.0
        ranks.setdefault(kind.lower(), (weight, -index))
    sse = ranks.get(SSE, (0.0, 0))
    json_rank = max(ranks.get(JSON, (0.0, 0)), ranks.get("application/*", (0.0, 0)))
    return sse[0] > 0 and sse > json_rank


def wants_positions(body: dict[str, Any]) -> bool:
    """Whether an AG-UI request asks for each event's stream position (``rawEvent.seq``, what
    a stop's ``seen`` counts): ``forwardedProps: {"dormant": {"positions": true}}``."""
    forwarded = body.get("forwardedProps")
    dormant = forwarded.get("dormant") if isinstance(forwarded, dict) else None
    return isinstance(dormant, dict) and dormant.get("positions") is True


class _Unauthorized(DormantError):
    code = "unauthorized"

    def __init__(self) -> None:
        super().__init__("this API needs an authenticated caller (the authorizer named nobody)")
