"""The HTTP API (SPEC §9): one Powertools resolver, for the ``api`` Lambda and ``dormant dev``.

Routes::

    POST   /turns            one turn: {sessionId?, message?, messageId?, tools?, approvals?,
                             state?} -> the REST response
    GET    /sessions/{id}    status, version, pending yields, state (+ the ledger with ?events=true)
    DELETE /sessions/{id}    forget a session
    POST   /agui             one turn as AG-UI server-sent events (a standard RunAgentInput)
    GET    /                 the OpenAPI description of these routes (Swagger UI at /docs)

The principal comes only from API Gateway's ``requestContext`` (see :func:`principal_of`), never
from the body; a session owned by another principal answers 404. Errors are JSON
``{"code", "message"}`` with a status from :data:`dormant.errors.HTTP_STATUS`; a refused request
writes nothing.

Powertools is imported here and nowhere else in the library: only the HTTP entry points pay for
it. The resolver is thread-safe (``dormant dev`` serves it from many threads), see
:class:`dormant.http._resolver.Resolver`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, CORSConfig, Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query

from dormant.errors import DormantError, InputError, SessionNotFound
from dormant.handlers import HandlerInput, RestResponse
from dormant.http._resolver import JSON, Resolver, error_response, validation_response
from dormant.http._wire import (
    ApprovalAnswer,
    ErrorBody,
    PendingCall,
    SessionView,
    TurnRequest,
    principal_of,
)
from dormant.session import Session, normalize_session_id

if TYPE_CHECKING:
    from dormant.agent import Agent
    from dormant.app import App

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "SSE_WRITER_ATTRIBUTE",
    "ApprovalAnswer",
    "ErrorBody",
    "PendingCall",
    "SessionView",
    "TurnRequest",
    "build_resolver",
    "error_response",
    "principal_of",
]

log = logging.getLogger("dormant.http")

#: Largest request body accepted (bytes, after base64 decoding); larger ones get 413.
DEFAULT_MAX_BODY_BYTES = 1_000_000

#: The attribute of the Lambda context through which a local server streams ``POST /agui``.
SSE_WRITER_ATTRIBUTE = "dormant_sse_writer"

SSE = "text/event-stream"


def _answers(ok: str, model: Any, *errors: int) -> dict[int, Any]:
    """OpenAPI ``responses`` for a route: its 200 body and the error statuses it can give."""
    answers: dict[int, Any] = {200: {"description": ok,
                                     "content": {JSON: {"model": model}} if model else {}}}
    for status in errors:
        answers[status] = {"description": "an error (see `code`)",
                           "content": {JSON: {"model": ErrorBody}}}
    return answers


def build_resolver(
    app: App,
    agent: Agent,
    *,
    cors: CORSConfig | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    require_principal: bool = False,
    title: str | None = None,
    **handler_config: Any,
) -> APIGatewayRestResolver:
    """The API of SPEC §9 for ``agent`` on ``app``: a Powertools ``APIGatewayRestResolver``.

    Call ``resolver.resolve(event, context)`` with an API Gateway REST proxy event.
    ``handler_config`` goes to ``app.handler.rest`` / ``agui`` (``hooks``, ``timeout``,
    ``response``...). ``require_principal=True`` answers 401 when the authorizer named nobody.
    """
    resolver = Resolver(
        max_body_bytes=max_body_bytes,
        cors=cors or CORSConfig(allow_origin="*", allow_headers=["X-Principal"]),
        enable_validation=True,
    )
    rest = app.handler.rest(agent=agent, **handler_config)
    routes = _Routes(app, agent, resolver, rest, require_principal, handler_config)

    @resolver.post("/turns", summary="Run one turn", tags=["turns"],
                   description="Start or continue a session: a message, or answers to the calls "
                   "it waits on. Answers the REST response (sessionId, status, output, "
                   "yieldedTools...).",
                   responses=_answers("the turn's outcome", RestResponse,
                                      400, 401, 404, 409, 413, 422))
    def post_turn(request: Annotated[TurnRequest, Body(embed=False)]) -> Response[Any]:
        return routes.turn(request)

    @resolver.get("/sessions/<session_id>", summary="Read a session", tags=["sessions"],
                  responses=_answers("the session", SessionView, 400, 401, 404))
    def get_session(
        session_id: Annotated[str, Path(description="The session id")],
        events: Annotated[bool, Query(description="Include the ledger")] = False,
    ) -> Response[Any]:
        return routes.show(session_id, events)

    @resolver.delete("/sessions/<session_id>", summary="Delete a session", tags=["sessions"],
                     responses=_answers("deleted", None, 400, 401, 404))
    def delete_session(
        session_id: Annotated[str, Path(description="The session id")],
    ) -> Response[Any]:
        return routes.delete(session_id)

    @resolver.post("/agui", summary="Run one turn as AG-UI events", tags=["agui"],
                   description="Body: an AG-UI RunAgentInput (threadId is the session, the last "
                   "user message the input, resume entries the tool answers). Answers "
                   "text/event-stream.",
                   responses={**_answers("AG-UI events", None, 401, 413, 422),
                              200: {"description": "AG-UI events, as server-sent events",
                                    "content": {SSE: {"schema": {"type": "string"}}}}})
    def post_agui(body: Annotated[dict[str, Any], Body(embed=False)]) -> Response[Any]:
        return routes.agui(body)

    @resolver.get("/", summary="This API's OpenAPI description", include_in_schema=False)
    def openapi() -> Response[Any]:
        return Response(status_code=200, content_type=JSON,
                        body=resolver.get_openapi_json_schema(
                            title=title or f"dormant: {app.name}", version=_version()))

    resolver.enable_swagger(path="/docs", title=title or f"dormant: {app.name}",
                            version=_version())

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
        return error_response("not_found", f"no route {event.http_method} {event.path}")

    @resolver.exception_handler(DormantError)  # type: ignore[untyped-decorator]
    def dormant_error(error: DormantError) -> Response[Any]:
        return error_response(error.code, str(error))

    return resolver


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
        self._agui: Callable[[HandlerInput], Any] | None = None

    def principal(self) -> str | None:
        principal = principal_of(self.resolver.current_event.raw_event)
        if principal is None and self.require_principal:
            raise _Unauthorized()
        return principal

    # --- POST /turns ---------------------------------------------------------------------------

    def turn(self, request: TurnRequest) -> Response[Any]:
        principal = self.principal()
        reply = self.rest(request.to_handler_input(principal),
                          remaining_time=self._remaining_time())
        if reply.status == "error" and reply.commit_status in (None, "failed"):
            code = reply.code or "run_error"
            pending = self._pending(reply.session_id, principal) \
                if code == "awaiting_input" else None
            return error_response(code, reply.error or code,
                                  session_id=reply.session_id or None, pending=pending)
        return Response(status_code=200, content_type=JSON, body=reply.wire())

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

    # --- /sessions/{id} ------------------------------------------------------------------------

    def show(self, session_id: str, events: bool) -> Response[Any]:
        principal = self.principal()
        session = self._load(session_id, principal, turns=None if events else 0)
        head = session.head
        view = SessionView(
            session_id=session.session_id, status=session.status, version=session.version,
            yielded_tools=[PendingCall(call_id=c.call_id, name=c.name, args=c.args)
                           for c in session.yielded_tools],
            pending_approvals=session.pending_approvals, state=session.state,
            timers=[t.model_dump(by_alias=True, mode="json", exclude={"session_id"})
                    for t in session.timers],
            created_at=head.created_at, updated_at=head.updated_at,
            events=[e.model_dump(mode="json") for e in session.events] if events else None,
        )
        return Response(status_code=200, content_type=JSON,
                        body=view.model_dump(by_alias=True, mode="json", exclude_none=True))

    def delete(self, session_id: str) -> Response[Any]:
        session = self._load(session_id, self.principal(), turns=0)
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
        sid = normalize_session_id(session_id)
        session = self.app.sessions.load(sid, turns=turns)
        if session is None or (principal is not None and session.principal is not None
                               and session.principal != principal):
            raise SessionNotFound(sid)
        return session

    # --- POST /agui ----------------------------------------------------------------------------

    def agui(self, body: dict[str, Any]) -> Response[Any]:
        from pydantic import ValidationError

        from dormant.agui import encode_sse, from_run_agent_input

        principal = self.principal()
        try:
            request = from_run_agent_input(body, principal=principal)
        except InputError as error:
            cause = error.__cause__
            if isinstance(cause, ValidationError):  # not a RunAgentInput: name the fields
                return validation_response(RequestValidationError(cause.errors()))
            return error_response(error.code, str(error))
        if self._agui is None:
            self._agui = self.app.handler.agui(agent=self.agent, **self.handler_config)
        run: Any = self._agui(request)  # an AgUIRun: iterable, and close() stops the turn
        chunks = encode_sse(run)
        writer = getattr(self.resolver.lambda_context, SSE_WRITER_ATTRIBUTE, None)
        headers = {"Cache-Control": "no-cache"}
        if writer is not None:  # a local server streams each event as it is produced
            try:
                for chunk in chunks:
                    writer(chunk)
            except OSError:  # the client hung up: stop the turn; it writes nothing
                run.close()
            return Response(status_code=200, content_type=SSE, body="", headers=headers)
        return Response(status_code=200, content_type=SSE, body="".join(chunks), headers=headers)


class _Unauthorized(DormantError):
    code = "unauthorized"

    def __init__(self) -> None:
        super().__init__("this API needs an authenticated caller (the authorizer named nobody)")
