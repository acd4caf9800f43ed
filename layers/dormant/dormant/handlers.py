"""One turn per request: load the session, run a turn, commit, answer.

``app.handler.turn`` is the atom (a lazy stream of events with a result at the end);
``rest`` drains it into a JSON body; ``agui`` translates it into AG-UI events.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from dormant._ids import new_id
from dormant._runtime import TurnInput, run_turn
from dormant._turn_wire import (
    ApprovalDecision,
    CommitStatus,
    HandlerInput,
    Input,
    ResponseOptions,
    RestResponse,
    TimerRef,
    ToolAnswer,
    TurnResult,
)
from dormant.agent import Agent, ErrorHandler, Hook, HookFn
from dormant.errors import DormantError, InputError, SessionNotFound, describe_validation
from dormant.events import StreamEvent, TimerCancelled, TimerFired, TimerSet
from dormant.models._base import ModelError
from dormant.results import (
    ErrorResult,
    RunResult,
    YieldedMessageResult,
    YieldedToolResult,
)
from dormant.schedulers import TimerDelivery, hand_over
from dormant.session import Session, mint_session_id, normalize_session_id
from dormant.tools import Aborted, Signal
from dormant.types import PendingApproval, YieldedTool

if TYPE_CHECKING:
    from dormant._head import Head
    from dormant.app import App

__all__ = [
    "ApprovalDecision",
    "CommitStatus",
    "HandlerInput",
    "Handlers",
    "Input",
    "ResponseOptions",
    "RestResponse",
    "ToolAnswer",
    "TurnResult",
    "TurnStream",
]

log = logging.getLogger("dormant")

#: Attempts at writing a turn when the store fails (not conflicts), and the first backoff.
STORE_ATTEMPTS = 3
STORE_BACKOFF = 0.05
#: Re-reads when other writers keep landing first while merging (each one is progress).
MERGE_ATTEMPTS = 32


class _Config:
    """A handler's configuration, fixed when the handler is built."""

    def __init__(
        self,
        app: App,
        *,
        agent: Agent,
        schema: type[BaseModel] | None = None,
        hooks: Sequence[Hook | dict[str, HookFn]] | None = None,
        error_handlers: Sequence[ErrorHandler] | None = None,
        timeout: float | None = None,
        response: ResponseOptions | dict[str, bool] | None = None,
    ) -> None:
        if not isinstance(agent, Agent):
            raise TypeError(f"handler config needs agent=<an app.agent(...)>, got {agent!r}")
        if timeout is not None and timeout <= 0:
            raise ValueError("timeout must be positive (seconds)")
        self.app = app
        self.agent = agent
        self.schema = schema
        self.hooks = tuple(Hook.coerce(h) for h in hooks or ())
        self.error_handlers = tuple(error_handlers or ())
        self.timeout = timeout
        self.response = (response if isinstance(response, ResponseOptions)
                         else ResponseOptions.model_validate(response or {}))


class TurnStream(Iterator[StreamEvent]):
    """A lazy turn: nothing runs (not even a read) until iterated.

    Iterate it for the stream events; ``result`` is the :class:`TurnResult` once exhausted.
    ``invocation_id`` is minted up front; on a resume it becomes the reopened invocation's id
    once iteration starts. ``abort()`` stops the run and commits nothing.
    """

    def __init__(self, config: _Config, request: HandlerInput | dict[str, Any]) -> None:
        self._config = config
        self._request = request
        self._signal = Signal()
        self._gen: Iterator[StreamEvent] | None = None
        self.invocation_id: str = new_id("inv")
        self.session_id: str | None = None
        self.result: TurnResult | None = None
        self.events: list[StreamEvent] = []
        #: The session this turn opened, and a copy of its head before the run touched it (the
        #: state at turn start, what was parked): set once iteration starts (the AG-UI adapter
        #: reads them for its opening snapshots and run ids).
        self.session: Session | None = None
        self.start_head: Head | None = None
        #: Set True before iterating to have ``start_head`` filled (it costs a deep copy).
        self.capture_start = False

    def __iter__(self) -> TurnStream:
        return self

    def __next__(self) -> StreamEvent:
        if self._gen is None:
            if self._config.timeout is not None:  # the timeout runs from the first read
                self._signal.deadline = time.monotonic() + self._config.timeout
            self._gen = self._drive()
        return next(self._gen)

    def abort(self) -> None:
        """Stop the run; the turn commits nothing."""
        self._signal.abort()

    def run(self) -> TurnResult:
        """Drain the stream and return the result."""
        for _ in self:
            pass
        assert self.result is not None
        return self.result

    # --- the request path ----------------------------------------------------------------------

    def _drive(self) -> Iterator[StreamEvent]:
        config = self._config
        try:
            request = (self._request if isinstance(self._request, HandlerInput)
                       else HandlerInput.model_validate(self._request))
            session = self._open(request)
        except ValidationError as error:
            reason = "invalid request: " + describe_validation(error)
            self._fail(self._request_session_id(), InputError(reason))
            return
        except DormantError as error:
            self._fail(self._request_session_id(), error)
            return
        self.session_id = session.session_id
        self.session = session
        if self.capture_start:
            self.start_head = session.head.model_copy(deep=True)
        try:
            run = run_turn(
                config.agent, session,
                TurnInput(message=request.input.message, message_id=request.input.message_id,
                          state=request.input.state, invocation_id=self.invocation_id),
                hooks=config.hooks, error_handlers=config.error_handlers,
                signal=self._signal, clock=config.app.clock,
            )
            result = yield from self._pump(run, session)
            self._check_state(session)
            self._signal.raise_if_aborted()
        except Aborted as error:
            self._fail(session.session_id, error, code="aborted")
            return
        except DormantError as error:
            self._fail(session.session_id, error)
            return
        except ModelError as error:  # the model provider failed for good (after retries)
            log.warning("model call failed: %s", error, extra={"session_id": session.session_id})
            self._fail(session.session_id, error, code="model_error")
            return
        except Exception as error:  # a tool/model/hook bug: report it, write nothing
            log.exception("turn failed", extra={"session_id": session.session_id})
            self._fail(session.session_id, error, code="run_error")
            return
        commit, version = self._commit(session, result)  # hands committed timers over too
        self.result = self._turn_result(session, result, commit, version)

    def _pump(self, run: Iterator[StreamEvent], session: Session) -> Any:
        while True:
            try:
                event = next(run)
            except StopIteration as stop:
                return stop.value
            if event.type == "invocation_resume" and event.invocation_id:
                self.invocation_id = event.invocation_id
            self.events.append(event)
            yield event

    def _request_session_id(self) -> str:
        raw = (self._request.session_id if isinstance(self._request, HandlerInput)
               else self._request.get("session_id") or self._request.get("sessionId"))
        if isinstance(raw, str):
            try:
                return normalize_session_id(raw)
            except InputError:
                return raw
        return ""

    def _open(self, request: HandlerInput) -> Session:
        config = self._config
        sid = (normalize_session_id(request.session_id) if request.session_id is not None
               else mint_session_id())
        self.session_id = sid
        session = config.app.sessions.load(sid, turns=config.agent.history_turns)
        if session is None:
            session = Session.new(sid, state=self._initial_state(request.input.initial_state),
                                  principal=request.principal)
        elif (request.principal is not None and session.principal is not None
              and session.principal != request.principal):
            raise SessionNotFound(sid)
        if request.input.timer is not None:  # a wake delivery: consume the firing first
            session._append(TimerFired(name=request.input.timer.name,
                                       fire_at=request.input.timer.fire_at))
        for decision in request.input.approvals or ():
            session.input.approval(decision.approval_id, approved=decision.approved,
                                   reason=decision.reason)
        for answer in request.input.tools or ():
            session.input.tool(call_id=answer.call_id, input=answer.input)
        return session

    def _initial_state(self, initial: dict[str, Any] | None) -> dict[str, Any]:
        schema = self._config.schema
        if schema is None:
            return dict(initial or {})
        try:
            return schema.model_validate(initial or {}).model_dump(mode="json")
        except ValidationError as error:
            raise InputError(f"initial_state does not fit the state schema: "
                             f"{describe_validation(error)}") from error

    def _check_state(self, session: Session) -> None:
        schema = self._config.schema
        if schema is not None:
            try:
                schema.model_validate(session.state)
            except ValidationError as error:
                raise InputError(f"state no longer fits the state schema: "
                                 f"{describe_validation(error)}") from error

    def _fail(self, session_id: str, error: BaseException, code: str | None = None) -> None:
        self.result = TurnResult(
            session_id=session_id, status="error", error=str(error),
            code=code or getattr(error, "code", "run_error"), invocation_id=self.invocation_id,
        )

    # --- commit policy -------------------------------------------------------------------------

    def _commit(self, session: Session, result: RunResult) -> tuple[CommitStatus, int | None]:
        if not session.dirty:
            return "committed", session.version
        sessions = self._config.app.sessions
        own_user_ts = max((e.ts for e in session.new_events if e.type == "user"), default=None)
        last_event = session.new_events[-1].id
        timers = [e for e in session.new_events if isinstance(e, TimerSet | TimerCancelled)]
        merged = False
        failures = conflicts = 0
        while True:
            try:
                outcome = sessions.commit(session)
            except Exception as error:  # store failure: bounded retry with backoff
                failures += 1
                log.warning("commit failed (attempt %d): %s", failures, error,
                            extra={"session_id": session.session_id})
                if failures >= STORE_ATTEMPTS:
                    return "failed", None
                time.sleep(STORE_BACKOFF * 2 ** (failures - 1))
                outcome = None
            if outcome is not None and outcome.ok:
                return ("merged" if merged else "committed"), outcome.version
            if outcome is not None:
                conflicts += 1
                if conflicts > MERGE_ATTEMPTS:
                    return "failed", None
            # Conflict, or an ambiguous failure: look at the head before trying again.
            try:
                stored = self._config.app.store.load(session.session_id, turns=0)
            except Exception:
                continue
            if stored is None:
                if session.version == 0 and outcome is None:
                    continue  # a new session whose write failed: nothing landed, try again
                return "failed", None
            if stored.head.last_event == last_event:  # a "failed" write that did land
                if timers:  # commit() raised before it could hand them over
                    hand_over(self._config.app.scheduler, session.session_id, timers)
                return ("merged" if merged else "committed"), stored.head.version
            if own_user_ts is not None and stored.head.last_user_ts > own_user_ts:
                return "superseded", None
            try:
                session._rebase(stored)
            except DormantError:
                return "superseded", None
            merged = True

    def _turn_result(self, session: Session, result: RunResult, commit: CommitStatus,
                     version: int | None) -> TurnResult:
        status: Any = result.status
        error = code = yielded_invocation_id = None
        yielded_tools: list[YieldedTool] | None = None
        approvals: list[PendingApproval] | None = None
        if isinstance(result, ErrorResult):
            error, code = result.error, result.code
        elif isinstance(result, YieldedToolResult):
            yielded_tools, approvals = result.yielded_tools, result.pending_approvals
        elif isinstance(result, YieldedMessageResult):
            yielded_invocation_id = result.yielded_invocation_id
        if commit == "failed":
            status, code = "error", "store_error"
            error = error or (
                f"the turn ran but session {session.session_id} could not be written after "
                f"{STORE_ATTEMPTS} attempts; retry the request")
        return TurnResult(
            session_id=session.session_id, status=status, output=result.output,
            commit_status=commit, invocation_id=result.invocation_id, usage=result.usage,
            yielded_tools=yielded_tools, pending_approvals=approvals,
            yielded_invocation_id=yielded_invocation_id,
            error=error, code=code, version=version, state=dict(session.state))




class Handlers:
    """``app.handler``: builds per-request functions from a config."""

    def __init__(self, app: App) -> None:
        self._app = app

    def turn(self, **config: Any) -> Callable[[HandlerInput | dict[str, Any]], TurnStream]:
        """``handler(input) -> TurnStream`` (lazy)."""
        cfg = _Config(self._app, **config)

        def handle(request: HandlerInput | dict[str, Any]) -> TurnStream:
            return TurnStream(cfg, request)

        return handle

    def rest(self, **config: Any) -> Callable[[HandlerInput | dict[str, Any]], RestResponse]:
        """``handler(input) -> RestResponse``: the turn, drained and committed."""
        cfg = _Config(self._app, **config)

        def handle(request: HandlerInput | dict[str, Any]) -> RestResponse:
            stream = TurnStream(cfg, request)
            result = stream.run()
            return to_rest(result, stream, cfg.response)

        return handle

    def wake(self, **config: Any) -> Callable[[TimerDelivery | dict[str, Any]], TurnResult]:
        """``handler(delivery) -> TurnResult``: a fired timer appends its message (or tool
        input) and runs a turn. A delivery for a timer that is no longer pending (cancelled,
        replaced, already delivered) is refused with code ``stale_timer`` and writes nothing."""
        cfg = _Config(self._app, **config)

        def handle(delivery: TimerDelivery | dict[str, Any]) -> TurnResult:
            fired = (delivery if isinstance(delivery, TimerDelivery)
                     else TimerDelivery.model_validate(delivery))
            answers = ([ToolAnswer(call_id=str(fired.tool_input["call_id"]),
                                   input=fired.tool_input.get("input"))]
                       if fired.tool_input else None)
            request = HandlerInput(session_id=fired.session_id, input=Input(
                message=fired.message, message_id=fired.message_id, tools=answers,
                timer=TimerRef(name=fired.name, fire_at=fired.fire_at)))
            return TurnStream(cfg, request).run()

        return handle

    def agui(self, **config: Any) -> Callable[[HandlerInput | dict[str, Any]], Iterator[Any]]:
        """``handler(input) -> iterator of ag_ui.core events`` (needs ``ag-ui-protocol``)."""
        from dormant.agui import agui_handler

        return agui_handler(_Config(self._app, **config))


def to_rest(result: TurnResult, stream: TurnStream, options: ResponseOptions) -> RestResponse:
    return RestResponse(
        session_id=result.session_id,
        status=result.status,
        output=result.output,
        yielded_tools=result.yielded_tools if result.status == "yielded_tool" else None,
        pending_approvals=result.pending_approvals or None,
        error=result.error,
        code=result.code if result.status == "error" else None,
        warning=result.warning,
        commit_status=result.commit_status,
        events=[e.model_dump(mode="json") for e in stream.events] if options.events else None,
        usage=result.usage if options.usage else None,
        state=result.state if options.state else None,
    )
