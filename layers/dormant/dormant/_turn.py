"""The request path of one turn: load the session, claim, run, commit, answer.

:class:`TurnStream` is what ``app.handler.turn`` returns for each request; ``rest`` and
``agui`` (in :mod:`dormant.handlers`) are loops over it.
"""

from __future__ import annotations

import hashlib
import logging
import time
import weakref
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from dormant import _control
from dormant._commit import Outcome
from dormant._control import DEFAULT_POLL_INTERVAL, ControlWatch, take_pending, write_asks
from dormant._ids import new_id
from dormant._run import TurnInput, run_turn
from dormant._turn_wire import (
    HandlerInput,
    Input,
    ResponseOptions,
    RetryRequest,
    TurnResult,
)
from dormant.agent import Agent, ErrorHandler, Hook, HookFn
from dormant.errors import (
    DormantError,
    DuplicateMessage,
    InputError,
    RetryRefused,
    ServerOnly,
    SessionNotFound,
    describe_validation,
)
from dormant.events import InvocationResume, StreamEvent, TimerFired
from dormant.models._base import ModelError
from dormant.results import (
    ErrorResult,
    RunResult,
    YieldedMessageResult,
    YieldedToolResult,
)
from dormant.session import Session, mint_session_id, normalize_session_id
from dormant.tools import Aborted, Signal
from dormant.types import PendingApproval, YieldedTool

if TYPE_CHECKING:
    from dormant._head import Head
    from dormant.app import App

__all__ = ["DEADLINE_MARGIN", "TurnStream"]

log = logging.getLogger("dormant")

#: Seconds kept back from the Lambda deadline for the commit and the reply.
DEADLINE_MARGIN = 5.0
#: Seconds of budget a queued message needs to run in the same request (else handed on).
DRAIN_BUDGET = 10.0
#: Queued messages one request runs at most before handing the rest on.
MAX_DRAIN = 16


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
        deadline_margin: float = DEADLINE_MARGIN,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        drain_budget: float = DRAIN_BUDGET,
        client_state: Sequence[str] = (),
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
        if poll_interval < 0:
            raise ValueError("poll_interval must be >= 0 seconds (0: no polling)")
        self.timeout = timeout
        self.deadline_margin = deadline_margin
        #: Seconds between reads of the control record while a turn runs (0: never).
        self.poll_interval = poll_interval
        #: Time a queued message needs: the inbox drains in the same request only while at
        #: least this much of the budget is left (else it is handed on).
        self.drain_budget = drain_budget
        self.response = (response if isinstance(response, ResponseOptions)
                         else ResponseOptions.model_validate(response or {}))
        if isinstance(client_state, str) or not all(
                isinstance(key, str) and key for key in client_state):
            raise TypeError("client_state must be a list of state keys public clients may "
                            f"write, e.g. client_state=['theme'], got {client_state!r}")
        #: The state keys a public request (HTTP, AG-UI) may change; any other is refused.
        self.client_state = frozenset(client_state)


class TurnStream(Iterator[StreamEvent]):
    """A lazy turn: nothing runs (not even a read) until iterated.

    Iterate it for the stream events; ``result`` is the :class:`TurnResult` once exhausted.
    ``invocation_id`` is minted up front; on a resume it becomes the reopened invocation's id
    once iteration starts. ``abort()`` stops the run and commits nothing.
    """

    def __init__(self, config: _Config, request: HandlerInput | dict[str, Any], *,
                 remaining_time: float | None = None) -> None:
        self._config = config
        self._request = request
        self._signal = Signal()
        self._remaining = remaining_time
        self._gen: Generator[StreamEvent, None, None] | None = None
        #: The ``invocation_resume`` a claim committed (then the run does not reopen again).
        self._resumed: InvocationResume | None = None
        self.invocation_id: str = _invocation_id(request)
        self.session_id: str | None = None
        self.result: TurnResult | None = None
        self.events: list[StreamEvent] = []
        #: The session this turn opened, and a copy of its head before the run touched it (the
        #: state at turn start, what was parked): set once iteration starts (the AG-UI adapter
        #: reads them for its opening snapshots and run ids).
        self.session: Session | None = None
        self.start_head: Head | None = None
        self._plan = _control.Plan()
        self._first: tuple[tuple[str, str], ...] = ()
        self._seq = 0
        #: False for the turns a drain runs (the outer request drains; they do not).
        self.drains = True
        #: Set True before iterating to have ``start_head`` filled (it costs a deep copy).
        self.capture_start = False

    def __iter__(self) -> TurnStream:
        return self

    def __next__(self) -> StreamEvent:
        if self._gen is None:
            budgets = [b for b in (self._config.timeout, self._remaining_budget()) if b is not None]
            if budgets:  # the budget runs from the first read
                self._signal.deadline = time.monotonic() + min(budgets)
            self._gen = self._drive()
        return next(self._gen)

    def _remaining_budget(self) -> float | None:
        """The Lambda invocation's time left, less the margin the commit needs."""
        if self._remaining is None:
            return None
        return max(self._remaining - self._config.deadline_margin, 0.0)

    def abort(self) -> None:
        """Stop the run. Nothing is committed unless a tool already ran; then the finished
        steps are, with an ``invocation_failed`` (code ``aborted``)."""
        self._signal.abort()

    def close(self) -> None:
        """Abandon the turn: abort it and release what it holds now (its poll of the control
        record), instead of when the stream is garbage collected. What an abort keeps is
        kept; nothing more runs or is committed."""
        self._signal.abort()
        if self._gen is not None:
            self._gen.close()

    def run(self) -> TurnResult:
        """Drain the stream and return the result."""
        for _ in self:
            pass
        assert self.result is not None
        return self.result

    # --- the request path ----------------------------------------------------------------------

    def _drive(self) -> Generator[StreamEvent, None, None]:
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
        plan = self._plan
        if not plan.run:
            self._finish(session, request)
            return
        if self._resumed is not None:  # the claim reopened the invocation: stream that first
            self.invocation_id = self._resumed.invocation_id or self.invocation_id
            yield self._number(self._resumed)
        if plan.continue_paused and session.head.open_invocation:
            self.invocation_id = session.head.open_invocation
        watch = ControlWatch(config.app.store, session.session_id, _invocation_of(self),
                             self._signal, interval=config.poll_interval,
                             control_rev=session.head.control_rev).start()
        try:
            retry = request.input.retry.retry_id if request.input.retry else None
            run = run_turn(
                config.agent, session,
                TurnInput(message=plan.message, message_id=plan.message_id,
                          state=request.input.state, invocation_id=self.invocation_id,
                          retry_id=retry, resumed=self._resumed is not None,
                          resume_paused=plan.continue_paused, first=self._first),
                hooks=config.hooks, error_handlers=config.error_handlers,
                signal=self._signal, clock=config.app.clock, watch=watch,
            )
            result = yield from self._pump(run, session)
            self._check_state(session)
            if session.effects_end == 0 and not self._signal.stopped:
                self._signal.raise_if_aborted()  # aborted at the very end: write nothing
        except Aborted as error:
            code = "deadline" if self._signal.expired else "aborted"
            self._fail(session.session_id, error, code=code)
            self._hand_on_cut(request, session, code)
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
        finally:
            watch.close()
        try:
            outcome = config.app.sessions.policy.commit(session)  # hands timers over too
        except (DuplicateMessage, RetryRefused) as error:  # a redelivery lost the race
            self._fail(session.session_id, error)
            return
        self.result = self._turn_result(session, result, outcome)
        if self.result.code == "deadline" and outcome.version is not None:
            self._hand_on_cut(request, session, "deadline")
        self._write_asks(session)
        self._drain(session, request)

    def _finish(self, session: Session, request: HandlerInput) -> None:
        """A request that runs no turn: commit what its inputs recorded, write what it asks
        of the running turn, drain the inbox if the session became free."""
        plan = self._plan
        assert plan.status is not None
        try:
            commit, version = _control.record(self._config.app.sessions.policy, session,
                                              self._reload(session))
        except DormantError as error:
            self._fail(session.session_id, error)
            return
        self.result = TurnResult(
            session_id=session.session_id, status=plan.status, commit_status=commit,
            invocation_id=self.invocation_id, version=version, queued=plan.queued,
            state=dict(session.state))
        self._drain(session, request)

    def _reload(self, session: Session) -> Callable[[], Session | None]:
        app, agent = self._config.app, self._config.agent
        turns, compacted = agent.history_turns, agent.compaction is not None
        return lambda: app.sessions.load(session.session_id, turns=turns, compacted=compacted)

    def _write_asks(self, session: Session) -> None:
        if session.control_asks:
            write_asks(self._config.app.store, session, self._reload(session))

    # --- the inbox and handing on ------------------------------------------------------------

    def _drain(self, session: Session, request: HandlerInput) -> None:
        """Run the inbox's next messages, each its own turn and commit, while the session
        can take them and time remains; hand the rest on (``App.hand_on``)."""
        result = self.result
        if not self.drains or result is None or result.status == "error":
            return
        app = self._config.app
        head = session.head
        drained: list[str] = []
        while head.queue and head.free and not session.pause_pending:
            if len(drained) >= MAX_DRAIN or not self._time_for_another():
                if app.hand_on is not None:
                    app.hand_on(HandlerInput(session_id=session.session_id, input=Input(),
                                             principal=request.principal))
                    result.handed_on = True
                break
            next_id = head.queue[0]["id"]
            turn = TurnStream(self._config, HandlerInput(
                session_id=session.session_id, input=Input(), principal=request.principal),
                remaining_time=self._left())
            turn.drains = False  # (its plan derives the invocation id from next_id)
            done = turn.run()
            if done.landed:
                drained.append(next_id)  # it ran (a failure after its tools ran is kept too)
            if done.status == "error" or turn.session is None:
                log.warning("a queued message did not run to its end: %s", done.error,
                            extra={"session_id": session.session_id})
                break
            session = turn.session
            head = session.head
        if drained:
            result.drained = drained

    def _left(self) -> float | None:
        """Seconds of this request's budget left (None: no budget)."""
        deadline = self._signal.deadline
        if deadline is None:
            return None
        return max(deadline - time.monotonic(), 0.0) + self._config.deadline_margin

    def _time_for_another(self) -> bool:
        deadline = self._signal.deadline
        return deadline is None or deadline - time.monotonic() >= self._config.drain_budget

    def _hand_on_cut(self, request: HandlerInput, session: Session, code: str) -> None:
        """A turn cut by the deadline carries on in another invocation: as a retry when its
        progress was committed (the session failed, retryable), else as the same message."""
        app = self._config.app
        if code != "deadline" or app.hand_on is None or self.result is None:
            return
        head = session.head
        if head.failed and head.open_invocation:
            retry_id = f"deadline:{head.open_invocation}:{head.retries}"
            given = Input(retry=RetryRequest(retry_id=retry_id))
        elif request.input.message is not None and self.result.commit_status is None:
            given = Input(message=request.input.message,
                          message_id=request.input.message_id or new_id("msg"),
                          state=request.input.state)
        else:
            return
        app.hand_on(HandlerInput(session_id=session.session_id, input=given,
                                 principal=request.principal))
        self.result.handed_on = True

    def _pump(self, run: Iterator[StreamEvent], session: Session) -> Any:
        while True:
            try:
                event = next(run)
            except StopIteration as stop:
                return stop.value
            if event.type == "invocation_resume" and event.invocation_id:
                self.invocation_id = event.invocation_id
            yield self._number(event)

    def _number(self, event: StreamEvent) -> StreamEvent:
        """Give a stream event its ``seq`` (1-based in this invocation's stream)."""
        self._seq += 1
        object.__setattr__(event, "seq", self._seq)
        self.events.append(event)
        return event

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
        if request.public:
            _refuse_server_only(request.input)
        session = config.app.sessions.load(sid, turns=config.agent.history_turns,
                                           compacted=config.agent.compaction is not None)
        if session is None:
            session = Session.new(sid, state=self._initial_state(request.input.initial_state),
                                  principal=request.principal)
        elif not session.head.visible_to(request.principal):
            raise SessionNotFound(sid)
        if request.public and request.input.state:
            self._check_client_state(session, request.input.state)
        retry = request.input.retry
        if retry is not None and session.head.failed and not session.head.knows_every_message \
                and config.app.store.has_once(sid, "r:" + retry.retry_id):
            raise RetryRefused(sid, retry.retry_id, duplicate=True)
        if request.input.timer is not None:  # a wake delivery: consume the firing first
            session.add_event(TimerFired(name=request.input.timer.name,
                                      fire_at=request.input.timer.fire_at))
        given = request.input
        message_id = given.message_id
        if message_id is not None and config.app.sessions.holds_message(session, message_id):
            raise DuplicateMessage(sid, message_id)  # a redelivery: nothing runs again
        self._first = tuple((s.id, s.text) for s in take_pending(session))
        for decision in given.approvals or ():
            session.input.approval(decision.approval_id, approved=decision.approved,
                                   reason=decision.reason)
        for answer in given.tools or ():
            session.input.tool(call_id=answer.call_id, input=answer.input)
        if self.capture_start:  # the state at turn start, what was parked (before a claim)
            self.start_head = session.head.model_copy(deep=True)
        self._apply_controls(session, given)
        if self._plan.run and not self._paused_now(session) \
                and self._needs_claim(session, given):
            # The decision or answer lands before the tool it unlocks runs, so a
            # lost race runs nothing (409 already_decided / already_answered). When it
            # settles the step, the claim reopens the invocation too: only the request that
            # landed the reopening runs the step's tools, never a second one beside it.
            head = session.head
            if head.parked == "tool" and not head.unresolved():
                self._resumed = InvocationResume(invocation_id=head.open_invocation)
                session.add_event(self._resumed)
            config.app.sessions.policy.claim(session, turns=config.agent.history_turns,
                                             compacted=config.agent.compaction is not None)
        return session

    def _paused_now(self, session: Session) -> bool:
        return session.head.paused or session.pause_pending

    def _apply_controls(self, session: Session, given: Input) -> None:
        """Apply the request's turn-control inputs and decide what it does (``_plan``)."""
        plan = self._plan = _control.plan(
            session, given, holds=lambda mid: self._config.app.sessions.holds_message(
                session, mid))
        if plan.stopped is not None:
            self.invocation_id = plan.stopped
        if plan.invocation_key is not None:
            self.invocation_id = _derive_invocation(session.session_id, plan.invocation_key)

    def _needs_claim(self, session: Session, given: Input) -> bool:
        """A claim comes first when the request decides an approval, answers a yielded tool
        that has ``execute``, or (with no input) resumes a settled step that runs a tool."""
        if given.approvals:
            return True
        head = session.head
        tools = self._config.agent.tools
        for answer in given.tools or ():
            call = head.call(answer.call_id)
            tool = tools.get(call.name) if call is not None else None
            if tool is not None and tool.execute is not None:
                return True
        if given.message is None and given.retry is None and head.parked == "tool" \
                and not head.unresolved():
            return any(not call.settled and (
                (call.approval_id is not None and call.approved)
                or (call.yielded and (tool := tools.get(call.name)) is not None
                    and tool.execute is not None)) for call in head.step)
        return False

    def _initial_state(self, initial: dict[str, Any] | None) -> dict[str, Any]:
        schema = self._config.schema
        if schema is None:
            return dict(initial or {})
        try:
            return schema.model_validate(initial or {}).model_dump(mode="json")
        except ValidationError as error:
            raise InputError(f"initial_state does not fit the state schema: "
                             f"{describe_validation(error)}") from error

    def _check_client_state(self, session: Session, state: dict[str, Any]) -> None:
        """A public request may change only the ``client_state`` keys; a key it sends back
        unchanged (AG-UI clients echo the state they were shown) is not a write."""
        current = session.state
        refused = sorted(key for key, value in state.items()
                         if key not in self._config.client_state
                         and (key not in current or current[key] != value))
        if refused:
            allowed = sorted(self._config.client_state)
            raise ServerOnly(
                f"state key(s) {', '.join(map(repr, refused))} may not be written by a client: "
                f"the handler lets clients write {allowed or 'no state keys'} "
                "(client_state=[...]); server code writes the rest")

    def _check_state(self, session: Session) -> None:
        schema = self._config.schema
        if schema is not None:
            try:
                schema.model_validate(session.state)
            except ValidationError as error:
                raise InputError(f"state no longer fits the state schema: "
                                 f"{describe_validation(error)}") from error

    def _fail(self, session_id: str, error: BaseException, code: str | None = None) -> None:
        code = code or getattr(error, "code", "run_error")
        self.result = TurnResult(
            session_id=session_id, status="error", error=str(error), code=code,
            invocation_id=self.invocation_id,
            retryable=code in ("model_error", "aborted", "deadline", "store_error",
                               "run_error") or None,
        )

    def _turn_result(self, session: Session, result: RunResult, outcome: Outcome
                     ) -> TurnResult:
        commit, version = outcome.status, outcome.version
        status: Any = result.status
        error = code = yielded_invocation_id = None
        retryable: bool | None = None
        yielded_tools: list[YieldedTool] | None = None
        approvals: list[PendingApproval] | None = None
        if isinstance(result, ErrorResult):
            error, code = result.error, result.code
            retryable = session.head.failed or None
        elif isinstance(result, YieldedToolResult):
            yielded_tools, approvals = result.yielded_tools, result.pending_approvals
        elif isinstance(result, YieldedMessageResult):
            yielded_invocation_id = result.yielded_invocation_id
        if commit == "failed":
            status, code = "error", "store_error"
            retryable = outcome.error is None or outcome.error.retryable
            error = error or (
                f"the turn ran but session {session.session_id} could not be written: "
                f"{outcome.error}" + ("; retry the request" if retryable else
                                      "; retrying will not help until that is fixed"))
        return TurnResult(
            session_id=session.session_id, status=status, output=result.output,
            commit_status=commit, invocation_id=result.invocation_id, usage=result.usage,
            yielded_tools=yielded_tools, pending_approvals=approvals,
            yielded_invocation_id=yielded_invocation_id,
            error=error, code=code, version=version, state=dict(session.state),
            retryable=retryable)


def _refuse_server_only(given: Input) -> None:
    """What only trusted server code may send, refused from a public request (nothing read or
    written yet). The public wire types cannot carry these; this holds for any other path."""
    named = [name for name, value in (("initial_state", given.initial_state),
                                      ("timer", given.timer)) if value is not None]
    if given.seed is not None and given.seed.role != "user":
        named.append(f"seed role {given.seed.role!r} (a client seeds role 'user' only)")
    if named:
        raise ServerOnly(f"{', '.join(named)}: for trusted server code (app.sessions or the "
                         "handlers in Python), not a public client")


def _invocation_of(stream: TurnStream) -> Callable[[], str | None]:
    """The running invocation's id, read through a weak reference: a stream its caller drops
    before it ends is not kept alive by its control watch (which then stops polling)."""
    ref = weakref.ref(stream)

    def invocation() -> str | None:
        live = ref()
        return live.invocation_id if live is not None else None

    return invocation


def _derive_invocation(session_id: str, key: str) -> str:
    seed = f"{session_id.removeprefix('session_')}|{key}".encode()
    return "inv_" + hashlib.blake2b(seed, digest_size=8).hexdigest()


def _invocation_id(request: HandlerInput | dict[str, Any]) -> str:
    """A new invocation's id: derived from the session and the message id when the request
    names both (so a redelivery reruns under the same id, and its derived call ids match),
    else fresh."""
    if isinstance(request, HandlerInput):
        sid, mid = request.session_id, request.input.message_id
    else:
        raw = request.get("input")
        given: dict[str, Any] = raw if isinstance(raw, dict) else {}
        sid = request.get("session_id") or request.get("sessionId")
        mid = given.get("message_id") or given.get("messageId")
    if isinstance(sid, str) and isinstance(mid, str) and sid and mid:
        return _derive_invocation(sid, mid)
    return new_id("inv")
