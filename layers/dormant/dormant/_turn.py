"""The request path of one turn: load the session, claim, run, commit, answer.

:class:`TurnStream` is what ``app.handler.turn`` returns for each request; ``rest`` and
``agui`` (in :mod:`dormant.handlers`) are loops over it.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from dormant._commit import Outcome
from dormant._control import DEFAULT_POLL_INTERVAL, ControlWatch, write_asks
from dormant._ids import new_id
from dormant._inputs import HandlerInput, Input, ResponseOptions, RetryRequest
from dormant._request import (
    Host,
    Opened,
    RequestRules,
    derive_invocation,
    finish_request,
    open_request,
)
from dormant._run import run_turn
from dormant._run.compaction import claim_in
from dormant._turn_wire import TurnResult
from dormant.agent import Agent, ErrorHandler, Hook, HookFn
from dormant.errors import (
    MODEL_ERROR_CODES,
    DormantError,
    DuplicateMessage,
    InputError,
    RetryRefused,
    describe_validation,
)
from dormant.events import AppEvent, StreamEvent
from dormant.models._base import ModelError
from dormant.results import (
    ErrorResult,
    RunResult,
    YieldedMessageResult,
    YieldedToolResult,
)
from dormant.session import Session, normalize_session_id
from dormant.tools import Aborted, Signal
from dormant.types import PendingApproval, YieldedTool

if TYPE_CHECKING:
    from dormant._head import Head

__all__ = ["DEADLINE_MARGIN", "TurnConfig", "TurnStream"]

log = logging.getLogger("dormant")

#: Seconds kept back from the Lambda deadline for the commit and the reply.
DEADLINE_MARGIN = 5.0
#: Seconds of budget a queued message needs to run in the same request (else handed on).
DRAIN_BUDGET = 10.0
#: Queued messages one request runs at most before handing the rest on.
MAX_DRAIN = 16
#: Failures that wrote nothing and that the same request can get past when the error does not
#: say itself (a model's or a store's error carries its own ``retryable``).
_RETRYABLE = frozenset({"model_error", "aborted", "deadline", "store_error", "run_error"})


class TurnConfig:
    """A handler's configuration, fixed when the handler is built. ``host`` is what the turn
    sees of the app (:class:`~dormant._request.Host`: sessions, store, clock, hand-on)."""

    def __init__(
        self,
        host: Host,
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
        lease: float | None = None,
    ) -> None:
        if not isinstance(agent, Agent):
            raise TypeError(f"handler config needs agent=<an app.agent(...)>, got {agent!r}")
        if timeout is not None and timeout <= 0:
            raise ValueError("timeout must be positive (seconds)")
        self.host = host
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
        if lease is not None and lease <= 0:
            raise ValueError("lease must be positive (seconds)")
        #: The rules the request room applies (state schema, client state keys, the lease a
        #: claim holds when the request has no deadline).
        self.rules = RequestRules(schema=schema, client_state=frozenset(client_state),
                                  **({"lease": lease} if lease is not None else {}))


class TurnStream(Iterator[StreamEvent]):
    """A lazy turn: nothing runs (not even a read) until iterated.

    Iterate it for the stream events; ``result`` is the :class:`TurnResult` once exhausted.
    ``invocation_id`` is minted up front; on a resume it becomes the reopened invocation's id
    once iteration starts. ``abort()`` stops the run and commits nothing.
    """

    def __init__(self, config: TurnConfig, request: HandlerInput | dict[str, Any], *,
                 remaining_time: float | None = None) -> None:
        self._config = config
        self._request = request
        self._signal = Signal()
        self._remaining = remaining_time
        self._gen: Generator[StreamEvent, None, None] | None = None
        self.invocation_id: str = _invocation_id(request)
        self.session_id: str | None = None
        self.result: TurnResult | None = None
        self.events: list[StreamEvent] = []
        #: The session this turn opened, and a copy of its head before the run touched it (the
        #: state at turn start, what was parked): set once iteration starts (the AG-UI adapter
        #: reads them for its opening snapshots and run ids).
        self.session: Session | None = None
        self.start_head: Head | None = None
        self._seq = 0
        #: False for the turns a drain runs (the outer request drains; they do not).
        self.drains = True
        #: Set True before iterating to have ``start_head`` filled (it costs a deep copy).
        self.capture_start = False
        #: What the request ran besides its own input: the queued message it started from
        #: the inbox, and whether it took a stranded invocation over.
        self.dequeued: str | None = None
        self.recovered = False

    def __iter__(self) -> TurnStream:
        return self

    def __next__(self) -> StreamEvent:
        return next(self._gen or self._begin())

    def _begin(self) -> Generator[StreamEvent, None, None]:
        budgets = [b for b in (self._config.timeout, self._remaining_budget()) if b is not None]
        if budgets:  # the budget runs from the first read
            self._signal.deadline = time.monotonic() + min(budgets)
        self._gen = self._drive()
        return self._gen

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
        for _ in self._gen or self._begin():  # (not through __next__: one frame less an event)
            pass
        assert self.result is not None
        return self.result

    # --- the request path ----------------------------------------------------------------------

    def _drive(self) -> Generator[StreamEvent, None, None]:
        config = self._config
        try:
            request = (self._request if isinstance(self._request, HandlerInput)
                       else HandlerInput.model_validate(self._request))
            opened = open_request(config.host, config.agent, request, config.rules,
                                  lease=self._lease(), invocation_id=self.invocation_id,
                                  on_start=self._started if self.capture_start else None)
        except ValidationError as error:
            reason = "invalid request: " + describe_validation(error)
            self._fail(self._request_session_id(), InputError(reason))
            return
        except DormantError as error:
            self._fail(self._request_session_id(), error)
            return
        session = opened.session
        self.session_id = session.session_id
        self.session = session
        self.dequeued, self.recovered = opened.dequeued, opened.recovering
        if opened.invocation_id is not None:
            self.invocation_id = opened.invocation_id
        if opened.turn is None:
            self._finish(opened, request)
            return
        turn = opened.turn
        for event in opened.claimed:  # committed by the claim: the stream shows them first
            yield self._number(event)
        for event in session.new_events:  # application events the request brought
            if isinstance(event, AppEvent):
                yield self._number(event)
        watch = ControlWatch(config.host.store, session.session_id, _invocation_of(self),
                             self._signal, interval=config.poll_interval,
                             control_rev=session.head.control_rev, session=session).start()
        try:
            run = run_turn(
                config.agent, session, turn,
                hooks=config.hooks, error_handlers=config.error_handlers,
                signal=self._signal, clock=config.host.clock, watch=watch,
                claim_compaction=claim_in(config.host.store),
            )
            # The run's events, numbered and kept as they pass (a loop here, not a generator
            # of its own: every event of the turn passes through it).
            while True:
                try:
                    streamed = next(run)
                except StopIteration as stop:
                    result = stop.value
                    break
                if streamed.type == "invocation_resume" and streamed.invocation_id:
                    self.invocation_id = streamed.invocation_id
                yield self._number(streamed)
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
            # its own code (one of MODEL_ERROR_CODES; a code of a model's own is the generic
            # model_error, named in the message) and its own retryable
            code = error.code if error.code in MODEL_ERROR_CODES else "model_error"
            self._fail(session.session_id, error, code=code)
            return
        except Exception as error:  # a tool/model/hook bug: report it, write nothing
            log.exception("turn failed", extra={"session_id": session.session_id})
            self._fail(session.session_id, error, code="run_error")
            return
        finally:
            watch.close()
        try:
            outcome = config.host.sessions.policy.commit(session)  # hands timers over too
        except (DuplicateMessage, RetryRefused) as error:  # a redelivery lost the race
            self._fail(session.session_id, error)
            return
        self.result = self._turn_result(session, result, outcome)
        if self.result.code == "deadline" and outcome.version is not None:
            self._hand_on_cut(request, session, "deadline")
        self._write_asks(session)
        self._drain(session, request)

    def _started(self, head: Head) -> None:
        self.start_head = head

    def _lease(self) -> float | None:
        """Seconds this request has to commit what it claims (None: the handler's default)."""
        budgets = [b for b in (self._config.timeout, self._remaining_budget()) if b is not None]
        return min(budgets) + self._config.deadline_margin if budgets else None

    def _finish(self, opened: Opened, request: HandlerInput) -> None:
        """A request that runs no turn: commit what its inputs recorded (a claim may have
        already), write what it asks of the running turn, drain the inbox if the session
        became free."""
        plan, session = opened.plan, opened.session
        assert plan.status is not None
        try:
            commit, version = finish_request(self._config.host, opened, self._reload(session))
        except DormantError as error:
            self._fail(session.session_id, error)
            return
        self.result = TurnResult(
            session_id=session.session_id, status=plan.status, commit_status=commit,
            invocation_id=self.invocation_id, version=version, queued=plan.queued,
            state=dict(session.state))
        self._drain(session, request)

    def _reload(self, session: Session) -> Callable[[], Session | None]:
        host, agent = self._config.host, self._config.agent
        turns, compacted = agent.history_turns, agent.compaction is not None
        return lambda: host.sessions.load(session.session_id, turns=turns, compacted=compacted)

    def _write_asks(self, session: Session) -> None:
        if session.control_asks:
            write_asks(self._config.host.store, session, self._reload(session))

    # --- the inbox and handing on ------------------------------------------------------------

    def _drain(self, session: Session, request: HandlerInput) -> None:
        """Run the inbox's next messages, each its own turn and commit, while the session
        can take them and time remains; hand the rest on (``App.hand_on``)."""
        result = self.result
        if not self.drains or result is None or result.status == "error":
            return
        host = self._config.host
        drained: list[str] = []
        runs = 0
        while _waiting_to_run(session, host.clock):
            # with no hand-on, the inbox drains here however long that takes
            if (runs >= MAX_DRAIN and host.hand_on is not None) \
                    or not self._time_for_another():
                if host.hand_on is not None:
                    host.hand_on(HandlerInput(session_id=session.session_id, input=Input(),
                                              principal=request.principal))
                    result.handed_on = True
                break
            runs += 1
            turn = TurnStream(self._config, HandlerInput(
                session_id=session.session_id, input=Input(), principal=request.principal),
                remaining_time=self._left())
            turn.drains = False  # (the outer request drains; its invocation id derives from
            # the queued message's id)
            done = turn.run()
            if done.landed and turn.dequeued is not None:
                drained.append(turn.dequeued)  # it ran (a failure after its tools ran too)
            if done.status == "error" or turn.session is None or not (
                    turn.dequeued or turn.recovered):  # (it ran nothing: a pause, say)
                log.warning("a queued message did not run to its end: %s", done.error,
                            extra={"session_id": session.session_id})
                break
            session = turn.session
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
        host = self._config.host
        if code != "deadline" or host.hand_on is None or self.result is None:
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
        host.hand_on(HandlerInput(session_id=session.session_id, input=given,
                                  principal=request.principal))
        self.result.handed_on = True

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

    def _check_state(self, session: Session) -> None:
        schema = self._config.schema
        if schema is not None:
            try:
                schema.model_validate(session.state)
            except ValidationError as error:
                raise InputError(f"state no longer fits the state schema: "
                                 f"{describe_validation(error)}") from error

    def _fail(self, session_id: str, error: BaseException, code: str | None = None) -> None:
        """The turn ended in ``error`` having written nothing. ``retryable``: the error's own
        (a :class:`ModelError`'s, a :class:`StoreError`'s…) when it says, else whether ``code``
        is a failure the same request can get past."""
        code = code or getattr(error, "code", "run_error")
        own = getattr(error, "retryable", None)
        retryable = own if isinstance(own, bool) else code in _RETRYABLE
        self.result = TurnResult(
            session_id=session_id, status="error", error=str(error), code=code,
            invocation_id=self.invocation_id, retryable=retryable,
        )

    def _turn_result(self, session: Session, result: RunResult, outcome: Outcome
                     ) -> TurnResult:
        commit, version = outcome.status, outcome.version
        status: Any = result.status
        error = code = yielded_invocation_id = None
        retryable: bool | None = None
        yielded_tools: list[YieldedTool] | None = None
        approvals: list[PendingApproval] | None = None
        deferred: list[YieldedTool] | None = None
        if isinstance(result, ErrorResult):
            error, code = result.error, result.code
            retryable = session.head.failed and result.retryable
        elif isinstance(result, YieldedToolResult):
            yielded_tools, approvals = result.yielded_tools, result.pending_approvals
            deferred = result.deferred_tools
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
            deferred_tools=deferred, yielded_invocation_id=yielded_invocation_id,
            error=error, code=code, version=version, state=dict(session.state),
            retryable=retryable)


def _waiting_to_run(session: Session, clock: Callable[[], int]) -> bool:
    """Whether the session has work a request should run now: a stranded invocation to take
    over, or queued messages while it is free (and no pause waits)."""
    head = session.head
    if head.running:  # stranded: taken over even while a pause waits (it pauses in a step)
        return head.stranded(clock())
    return bool(head.queue and head.free) and not session.pause_pending


def _invocation_of(stream: TurnStream) -> Callable[[], str | None]:
    """The running invocation's id, read through a weak reference: a stream its caller drops
    before it ends is not kept alive by its control watch (which then stops polling)."""
    ref = weakref.ref(stream)

    def invocation() -> str | None:
        live = ref()
        return live.invocation_id if live is not None else None

    return invocation


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
        return derive_invocation(sid, mid)
    return new_id("inv")
