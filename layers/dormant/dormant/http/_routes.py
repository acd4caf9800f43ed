"""What the HTTP API's routes do, apart from the Powertools plumbing (the route table is
:func:`dormant.http.build_resolver`): run a turn (JSON, or its events as they happen), a
spoken turn, an AG-UI run; read, list, follow, fork and delete sessions."""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestValidationError,
)

from dormant._decide import announced
from dormant._follow import (
    DEFAULT_LIMIT,
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
from dormant.http._openapi import SSE
from dormant.http._resolver import JSON, Resolver, error_response, validation_response
from dormant.http._sse import (
    FOLLOW_KEEPALIVE,
    SSE_WRITER_ATTRIBUTE,
    event_stream,
    wants_event_stream,
    wants_positions,
)
from dormant.http._voice import (
    AUDIO,
    VoiceRequest,
    audio_answer,
    raw_voice_request,
    wants_audio,
)
from dormant.http._wire import (
    ActiveInvocation,
    ErrorBody,
    ForkCreated,
    ForkOf,
    ForkRequest,
    PendingCall,
    PendingStop,
    Running,
    SessionLine,
    SessionLink,
    SessionList,
    SessionUsage,
    SessionView,
    TurnRequest,
    checked_session_id,
    principal_of,
    request_id_of,
    waiting_on,
)
from dormant.session import Session, normalize_session_id

if TYPE_CHECKING:
    from dormant._turn_wire import TurnResult
    from dormant.agent import Agent
    from dormant.app import App

__all__ = ["ACCEPTED_STATUSES", "Routes", "Unauthorized", "public_events"]

log = logging.getLogger("dormant.http")

#: Seconds a followed session's stream ends before the invocation's deadline.
FOLLOW_DEADLINE_MARGIN = 5.0
#: HTTP status of a successful turn by its status: the work was taken, not done yet.
ACCEPTED_STATUSES = frozenset({"queued", "accepted"})


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


class Routes:
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
            raise Unauthorized()
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
        """Send ``chunks`` as server-sent events (see :func:`~dormant.http._sse.event_stream`)."""
        writer = getattr(self.resolver.lambda_context, SSE_WRITER_ATTRIBUTE, None)
        return event_stream(chunks, run, writer, self.keepalive)

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
                              pending=pending, retryable=ended.retryable,
                              handed_on=ended.handed_on)

    def _remaining_time(self) -> float | None:
        """Seconds this Lambda invocation has left (None off Lambda): the turn ends as a
        retryable ``deadline`` failure, progress kept, before the platform would kill it."""
        context = getattr(self.resolver, "lambda_context", None)
        remaining = getattr(context, "get_remaining_time_in_millis", None)
        return remaining() / 1000 if callable(remaining) else None

    def _pending(self, session_id: str, principal: str | None) -> list[PendingCall] | None:
        session = self._load(session_id, principal, turns=0)
        return [PendingCall(call_id=c.call_id, name=c.name, args=c.args, agent=c.agent)
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
        session = self._load(session_id, principal, turns=0, first_turn=True)
        head = session.head
        schemas = self._input_schemas(session, whole=False)
        after, skip = decode_cursor(cursor or "0")
        page = page_after(self.app, head, after, skip=skip, limit=limit,
                          principal=principal) if events else None
        view = SessionView(
            session_id=session.session_id, status=session.status, version=session.version,
            yielded_tools=[PendingCall(call_id=c.call_id, name=c.name, args=c.args,
                                       input_schema=schemas.get(c.call_id),
                                       tool_metadata=self._tool_metadata(c.name, c.agent),
                                       agent=c.agent)
                           for c in session.yielded_tools],
            pending_approvals=session.pending_approvals,
            deferred_tools=[PendingCall(call_id=c.call_id, name=c.name, args=c.args,
                                        tool_metadata=self._tool_metadata(c.name, c.agent),
                                        agent=c.agent)
                            for c in session.deferred_tools],
            pending_inputs=session.pending_inputs, waiting=waiting_on(session),
            inbox=session.inbox, open_invocation=session.open_invocation,
            running=Running.of(session, self.app.clock()),
            active_invocation=ActiveInvocation.of(session, self.app.clock()),
            pending_stop=PendingStop.of(session),
            state=session.state, preview=head.preview, agent=head.agent,
            timers=[t.model_dump(by_alias=True, mode="json", exclude={"session_id"})
                    for t in session.timers],
            fork_of=ForkOf(**head.fork_of) if head.fork_of else None,
            parent=SessionLink.of(head.parent) if head.parent else None,
            children=[SessionLink.of(c) for c in head.children] or None,
            compactions=head.compactions or None, usage=SessionUsage.of(session),
            created_at=head.created_at, updated_at=head.updated_at,
            events=public_events(page.events) if page is not None else None,
            next=page.next if page is not None else None,
        )
        return Response(status_code=200, content_type=JSON, body=view.wire())

    def _tool_metadata(self, name: str, path: str | None = None) -> dict[str, Any] | None:
        """The own tool's ``metadata`` of the agent that made the call — the served agent, or
        the sub-agent ``path`` names, reached through the tools that run sub-agents (a
        source's tools are not listed for a view)."""
        agent: Any = self.agent
        for step in (path or "").split("/")[1:]:  # the first part is the served agent
            agent = next((t.agent for t in agent.tools.values()
                          if t.agent is not None and t.agent.name == step), None)
            if agent is None:
                return None
        tool = agent.tools.get(name)
        return tool.metadata if tool is not None else None

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
        listed = self.app.sessions.list(principal=principal, limit=limit)
        # a version-0 line is a first turn that announced itself: shown while it is live
        firsts = {s.session_id: first for s in listed if s.version == 0
                  and (first := self._first_turn(s.session_id)) is not None}
        summaries = [s for s in listed if s.version > 0 or s.session_id in firsts]
        if not detail:
            lines = [SessionLine(session_id=s.session_id, status=s.status, version=s.version,
                                 updated_at=s.updated_at) for s in summaries]
        else:
            heads = (firsts.get(s.session_id) or self.app.sessions.load(s.session_id, turns=0)
                     for s in summaries)
            # A session deleted since the listing is left out, not a 404 for the whole list.
            now = self.app.clock()
            lines = [SessionLine.detailed(session, now) for session in heads
                     if session is not None and session.head.visible_to(principal)]
        return Response(status_code=200, content_type=JSON,
                        body=SessionList(sessions=lines).wire())

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
                "invalid_input", "follow=true streams only where answers stream (dormant dev, "
                "the deployed stack's stream function); here, long-poll: GET "
                "/sessions/{id}/events?after=VERSION&wait=20, then again with after = the "
                "version it answered")
        feed = events_after(self.app, session_id, after, principal=principal,  # 404 first
                            skip=skip, limit=limit)
        remaining = self._remaining_time()
        until = None if remaining is None else \
            time.monotonic() + remaining - FOLLOW_DEADLINE_MARGIN
        self._follow(writer, feed, after, principal, limit, until=until)
        return Response(status_code=200, content_type=SSE, body="",
                        headers={"Cache-Control": "no-cache"})

    def _follow(self, writer: Callable[[str], None], feed: Feed, after: int,
                principal: str | None, limit: int = DEFAULT_LIMIT, *,
                until: float | None = None) -> None:
        """Stream the session's feeds until the client hangs up: a ``data:`` message each
        time the version moves (one per page: a page with ``next`` is followed at once by
        the next), a comment every :data:`FOLLOW_KEEPALIVE` seconds otherwise. ``until``
        (monotonic seconds: the Lambda invocation's deadline, less a margin): the stream
        ends before it with ``event: reconnect`` whose data says where to follow on
        (``{"after": version}``, or ``{"cursor": ...}`` mid-page), not cut by the platform
        (a timeout is an error to Lambda, and to the function's rollback alarms)."""
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
                if until is not None and time.monotonic() + FOLLOW_KEEPALIVE > until:
                    on = {"cursor": feed.next} if skip and feed.next is not None \
                        else {"after": after}
                    writer(f"event: reconnect\ndata: {json.dumps(on)}\n\n")
                    return
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
        children = self.app.sessions.children(session.session_id)  # deleted with it
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
                        body={"sessionId": session.session_id, "deleted": True,
                              **({"children": children} if children else {})})

    def _load(self, session_id: str, principal: str | None, *, turns: int | None,
              first_turn: bool = False) -> Session:
        """The session, if ``principal`` may see it. ``first_turn``: a session whose first
        turn is running (it has no ledger yet, only its control record's announcement) is
        shown too, as the empty session that turn started."""
        sid = checked_session_id(session_id)
        session = self.app.sessions.load(sid, turns=turns)
        if session is None and first_turn:
            session = self._first_turn(normalize_session_id(sid))
        if session is None or not session.head.visible_to(principal):
            raise SessionNotFound(sid)
        return session

    def _first_turn(self, sid: str) -> Session | None:
        control = self.app.store.read_control(sid)
        entry = control.running if control is not None else None
        if entry is None or entry.version != 0:
            return None
        session = Session.new(sid, principal=entry.principal)
        session.control = control
        return session if announced(session, self.app.clock()) is not None else None

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
                              positions=wants_positions(body),
                              remaining_time=self._remaining_time(), echo=body)
        # The first event comes once the turn has read the session: a request refused by then
        # (another principal's session, a state key it may not write...) wrote nothing and
        # streamed nothing, so it gets the JSON error POST /turns gives, not a 200.
        first = next(run)
        ended = run.result
        if ended is not None and ended.status == "error" and ended.commit_status is None:
            return self._refused(ended, principal)
        return self._stream(encode_sse(itertools.chain([first], run)), run)


class Unauthorized(DormantError):
    """The API needs an authenticated caller and the authorizer named nobody (401)."""

    code = "unauthorized"

    def __init__(self) -> None:
        super().__init__("this API needs an authenticated caller (the authorizer named nobody)")
