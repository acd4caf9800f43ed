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
:class:`_Resolver`.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, CORSConfig, Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from dormant.errors import HTTP_STATUS, DormantError, InputError, SessionNotFound
from dormant.handlers import HandlerInput, Input, RestResponse, ToolAnswer
from dormant.session import Session, normalize_session_id

if TYPE_CHECKING:
    from dormant.agent import Agent
    from dormant.app import App

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "ApprovalAnswer",
    "ErrorBody",
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

JSON = "application/json"
SSE = "text/event-stream"


# --- wire types -------------------------------------------------------------------------------


class _Wire(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class ApprovalAnswer(_Wire):
    """A decision on a pending approval (SPEC §6)."""

    approval_id: str = Field(min_length=1, description="The approval being decided.")
    approved: bool = Field(description="Whether the tool may run.")
    reason: str | None = Field(default=None, description="Why (shown to the model when denied).")


class TurnRequest(_Wire):
    """The public body of ``POST /turns``.

    Only what a client may say: no ``principal`` (the authorizer names it) and no
    ``initialState`` or other server-only inputs (SPEC §8). Unknown fields are refused (422).
    """

    session_id: str | None = Field(
        default=None, description="The session (minted when absent; `thread-42` and "
        "`session_thread-42` are one session).")
    message: str | None = Field(default=None, min_length=1, description="The user's message.")
    message_id: str | None = Field(
        default=None, min_length=1, max_length=128,
        description="A stable id for the message: a retried request lands it once.")
    tools: list[ToolAnswer] | None = Field(
        default=None, description="Answers to yielded calls: [{callId, input}].")
    approvals: list[ApprovalAnswer] | None = Field(
        default=None, description="Decisions on pending approvals.")
    state: dict[str, Any] | None = Field(
        default=None, description="Merged (shallowly) into the session state for this turn.")

    def to_handler_input(self, principal: str | None) -> HandlerInput:
        return HandlerInput(
            session_id=self.session_id,
            input=Input(
                message=self.message, message_id=self.message_id, tools=self.tools,
                approvals=([a.model_dump() for a in self.approvals]
                           if self.approvals is not None else None),
                state=self.state,
            ),
            principal=principal,
        )


class PendingCall(_Wire):
    """A call a session waits on."""

    call_id: str
    name: str
    args: Any = None


class SessionView(_Wire):
    """The body of ``GET /sessions/{id}``."""

    session_id: str
    status: str
    version: int
    yielded_tools: list[PendingCall] = Field(default_factory=list)
    pending_approvals: list[Any] = Field(default_factory=list)
    state: dict[str, Any] = Field(default_factory=dict)
    created_at: int = 0
    updated_at: int = 0
    events: list[dict[str, Any]] | None = None


class ErrorBody(_Wire):
    """Every error answer: a stable ``code``, a message naming the id involved."""

    code: str
    message: str
    session_id: str | None = None
    pending: list[PendingCall] | None = None
    fields: list[dict[str, str]] | None = None


# --- principals and errors --------------------------------------------------------------------


def principal_of(event: Mapping[str, Any]) -> str | None:
    """Who is calling, as API Gateway's authorizer established it (never the request body).

    In order: a Cognito user-pool authorizer's ``claims.sub``; a Lambda authorizer's
    ``principalId``; for IAM (SigV4) auth, ``requestContext.identity.userArn``. ``None`` when
    the API has no authorizer (then sessions are not scoped).
    """
    context = event.get("requestContext") or {}
    authorizer = context.get("authorizer") or {}
    claims = authorizer.get("claims") or {}
    for candidate in (claims.get("sub"), authorizer.get("principalId"),
                      (context.get("identity") or {}).get("userArn")):
        if isinstance(candidate, str) and candidate:
            return candidate
    return None


def error_response(code: str, message: str, **extra: Any) -> Response[Any]:
    """A JSON error with the status :data:`HTTP_STATUS` gives ``code`` (500 if unlisted)."""
    body = ErrorBody(code=code, message=message, **extra)
    return Response(status_code=HTTP_STATUS.get(code, 500), content_type=JSON,
                    body=body.model_dump(by_alias=True, mode="json", exclude_none=True))


def _validation_response(error: RequestValidationError) -> Response[Any]:
    errors = list(error.errors())
    if any(item.get("type") == "json_invalid" for item in errors):
        detail = next(item for item in errors if item.get("type") == "json_invalid")
        reason = (detail.get("ctx") or {}).get("error", "malformed JSON")
        return error_response("invalid_json", f"the request body is not valid JSON: {reason}")
    fields = []
    for item in errors:
        loc = [str(part) for part in item.get("loc", ()) if part != "body"]
        fields.append({"field": ".".join(loc) or "body", "message": str(item.get("msg", ""))})
    named = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
    return error_response("validation_error", f"invalid request: {named}", fields=fields)


# --- a resolver that can serve several threads ------------------------------------------------


class _Resolver(APIGatewayRestResolver):
    """``APIGatewayRestResolver`` with per-thread request state, and a body-size guard.

    Powertools keeps the current event on the ``BaseRouter`` class: fine in Lambda (one request
    per process), wrong in a threaded server. Here the event, context and per-request dict live
    in a ``threading.local``, so ``dormant dev`` can serve the same resolver from many threads.
    """

    def __init__(self, *, max_body_bytes: int, **kwargs: Any) -> None:
        self._local = threading.local()
        self.max_body_bytes = max_body_bytes
        super().__init__(**kwargs)

    @property
    def current_event(self) -> Any:
        return self._local.current_event

    @current_event.setter
    def current_event(self, value: Any) -> None:
        self._local.current_event = value

    @property
    def lambda_context(self) -> Any:
        return getattr(self._local, "lambda_context", None)

    @lambda_context.setter
    def lambda_context(self, value: Any) -> None:
        self._local.lambda_context = value

    @property
    def context(self) -> dict[str, Any]:
        if not hasattr(self._local, "context"):
            self._local.context = {}
        return self._local.context  # type: ignore[no-any-return]

    @context.setter
    def context(self, value: dict[str, Any]) -> None:
        self._local.context = value

    @property
    def processed_stack_frames(self) -> list[str]:
        if not hasattr(self._local, "frames"):
            self._local.frames = []
        return self._local.frames  # type: ignore[no-any-return]

    @processed_stack_frames.setter
    def processed_stack_frames(self, value: list[str]) -> None:
        self._local.frames = value

    def resolve(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        """Answer one API Gateway REST proxy event (refusing oversize bodies first)."""
        size = _body_size(event)
        if size > self.max_body_bytes:
            response = error_response(
                "payload_too_large",
                f"the request body is {size} bytes; the limit is {self.max_body_bytes}")
            return {"statusCode": response.status_code, "body": _json_text(response.body),
                    "headers": {"Content-Type": JSON}, "isBase64Encoded": False}
        self.current_event = self._to_proxy_event(_json_content(event))
        self.lambda_context = context
        try:
            return self._build_response(self._resolve())
        finally:
            self.clear_context()  # type: ignore[no-untyped-call]


def _body_size(event: Mapping[str, Any]) -> int:
    body = event.get("body")
    if not body:
        return 0
    if event.get("isBase64Encoded"):
        return len(base64.b64decode(body))
    return len(body.encode()) if isinstance(body, str) else len(body)


def _json_content(event: Mapping[str, Any]) -> dict[str, Any]:
    """The event with a form content type read as JSON: this API speaks only JSON, and
    ``curl -d`` labels JSON bodies ``application/x-www-form-urlencoded`` by default."""
    copy = dict(event)
    for key in ("headers", "multiValueHeaders"):
        headers = copy.get(key)
        if not headers:
            continue
        fixed = dict(headers)
        for name, value in headers.items():
            first = value[0] if isinstance(value, list) and value else value
            if name.lower() == "content-type" and isinstance(first, str) \
                    and first.startswith("application/x-www-form-urlencoded"):
                fixed[name] = [JSON] if isinstance(value, list) else JSON
        copy[key] = fixed
    return copy


def _json_text(body: Any) -> str:
    return body if isinstance(body, str) else json.dumps(body, separators=(",", ":"))


# --- the routes -------------------------------------------------------------------------------


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
    resolver = _Resolver(
        max_body_bytes=max_body_bytes,
        cors=cors or CORSConfig(allow_origin="*", allow_headers=["X-Principal"]),
        enable_validation=True,
    )
    rest = app.handler.rest(agent=agent, **handler_config)
    routes = _Routes(app, agent, resolver, rest, require_principal, handler_config)

    @resolver.post("/turns", summary="Run one turn", tags=["turns"],
                   description="Start or continue a session: a message, or answers to the calls "
                   "it waits on. Answers the REST response (sessionId, status, output, "
                   "yieldedTools...).")
    def post_turn(request: Annotated[TurnRequest, Body(embed=False)]) -> Response[Any]:
        return routes.turn(request)

    @resolver.get("/sessions/<session_id>", summary="Read a session", tags=["sessions"])
    def get_session(
        session_id: Annotated[str, Path(description="The session id")],
        events: Annotated[bool, Query(description="Include the ledger")] = False,
    ) -> Response[Any]:
        return routes.show(session_id, events)

    @resolver.delete("/sessions/<session_id>", summary="Delete a session", tags=["sessions"])
    def delete_session(
        session_id: Annotated[str, Path(description="The session id")],
    ) -> Response[Any]:
        return routes.delete(session_id)

    @resolver.post("/agui", summary="Run one turn as AG-UI events", tags=["agui"],
                   description="Body: an AG-UI RunAgentInput (threadId is the session, the last "
                   "user message the input, resume entries the tool answers). Answers "
                   "text/event-stream.")
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
        return _validation_response(error)

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

    def __init__(self, app: App, agent: Agent, resolver: _Resolver,
                 rest: Callable[[HandlerInput], RestResponse], require_principal: bool,
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
        reply = self.rest(request.to_handler_input(principal))
        if reply.status == "error" and reply.commit_status in (None, "failed"):
            code = reply.code or "run_error"
            pending = self._pending(reply.session_id, principal) \
                if code == "awaiting_input" else None
            return error_response(code, reply.error or code,
                                  session_id=reply.session_id or None, pending=pending)
        return Response(status_code=200, content_type=JSON, body=reply.wire())

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
            created_at=head.created_at, updated_at=head.updated_at,
            events=[e.model_dump(mode="json") for e in session.events] if events else None,
        )
        return Response(status_code=200, content_type=JSON,
                        body=view.model_dump(by_alias=True, mode="json", exclude_none=True))

    def delete(self, session_id: str) -> Response[Any]:
        session = self._load(session_id, self.principal(), turns=0)
        if not self.app.sessions.delete(session.session_id):
            raise SessionNotFound(session.session_id)
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
                return _validation_response(RequestValidationError(cause.errors()))
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
