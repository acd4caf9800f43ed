"""One request as a stream: :class:`TurnStream` runs the request executor
(:func:`dormant._request.serve`: open, run, commit, asks, drain or hand-on) and keeps what a
caller sees of it: the events numbered, the time budget (the handler's ``timeout``, the
Lambda deadline less :data:`DEADLINE_MARGIN`), and the :class:`TurnResult` it answers.

:class:`TurnStream` is what ``app.handler.turn`` returns for each request; ``rest`` and
``agui`` (in :mod:`dormant.handlers`) are loops over it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Generator, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from dormant._commit import Outcome
from dormant._control import DEFAULT_POLL_INTERVAL
from dormant._ids import new_id
from dormant._inputs import HandlerInput, ResponseOptions
from dormant._measure import measure
from dormant._request import (
    DEADLINE_MARGIN,
    DEFAULT_HEARTBEAT,
    DRAIN_BUDGET,
    MAX_DRAIN,
    Host,
    Opened,
    RequestRules,
    Served,
    Serving,
    derive_invocation,
    serve,
)
from dormant._turn_wire import TurnResult
from dormant.agent import Agent, ErrorHandler, Hook, HookFn
from dormant.errors import InputError, describe_validation
from dormant.events import StreamEvent
from dormant.results import (
    ErrorResult,
    RunResult,
    YieldedMessageResult,
    YieldedToolResult,
)
from dormant.session import Session, normalize_session_id
from dormant.tools import Signal
from dormant.types import PendingApproval, YieldedTool

if TYPE_CHECKING:
    from dormant._head import Head

__all__ = ["DEADLINE_MARGIN", "DRAIN_BUDGET", "MAX_DRAIN", "TurnConfig", "TurnStream"]

log = logging.getLogger("dormant")

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
        heartbeat: float = DEFAULT_HEARTBEAT,
    ) -> None:
        if not isinstance(agent, Agent):
            raise TypeError(f"handler config needs agent=<an app.agent(...)>, got {agent!r}")
        if agent.handoffs:  # (resolved now when it can be: a hand-off to nobody fails here)
            agent.team()
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
        if heartbeat < 0:
            raise ValueError("heartbeat must be >= 0 seconds (0: a claim's lease runs to its "
                             "request's deadline)")
        #: The rules the request room applies (state schema, client state keys, the lease a
        #: claim holds when the request has no deadline, its heartbeat). The heartbeat beats
        #: on the control thread's reads, so it needs them at least every half heartbeat.
        self.rules = RequestRules(schema=schema, client_state=frozenset(client_state),
                                  heartbeat=heartbeat if 0 < 2 * poll_interval <= heartbeat
                                  else 0.0,
                                  **({"lease": lease} if lease is not None else {}))
        #: What the request executor (:func:`dormant._request.serve`) serves with.
        self.serving = Serving(host, agent, self.rules, self.hooks, self.error_handlers,
                               poll_interval, timeout, drain_budget, deadline_margin)


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
        self._claims_refused = 0
        self._started_turn = False

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

    def stop(self, seen: int | None = None) -> None:
        """Stop the run as a stop request would (from any thread): the text of the step in
        flight up to stream position ``seen`` (None: all of it) is kept, the calls that did
        not finish get a ``stopped`` result, the invocation ends ``stopped`` and that is
        committed with the request's input."""
        self._signal.stop(seen)

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
        try:
            request = (self._request if isinstance(self._request, HandlerInput)
                       else HandlerInput.model_validate(self._request))
        except ValidationError as error:
            reason = "invalid request: " + describe_validation(error)
            self._fail(self._request_session_id(), InputError(reason))
            self._measured()
            return
        served = serve(self._config.serving, request, self._signal,
                       invocation_id=self.invocation_id,
                       on_start=self._started if self.capture_start else None,
                       on_open=self._opened, on_done=self._shape, drains=self.drains)
        number = self._number
        try:
            # The run's events, numbered and kept as they pass (a loop here, not a generator
            # of its own: every event of the turn passes through it).
            while True:
                try:
                    streamed = next(served)
                except StopIteration as stop:
                    done: Served = stop.value
                    break
                yield number(streamed)
        finally:
            served.close()
        result = self.result
        assert result is not None
        if done.drained:
            result.drained = done.drained
        if done.handed_on:
            result.handed_on = True
        self._measured()

    def _measured(self) -> None:
        """Count the request, ended (``App.meter``, when the app has one)."""
        meter = self._config.host.meter
        if meter is None or self.result is None:
            return
        try:
            meter.record(measure(self.result, self.events, started=self._started_turn,
                                 claims_refused=self._claims_refused))
        except Exception:
            log.exception("the app's meter failed; the request is not counted",
                          extra={"session_id": self.session_id})

    def _started(self, head: Head) -> None:
        self.start_head = head

    def _opened(self, opened: Opened) -> None:
        session = opened.session
        self.session_id = session.session_id
        self.session = session
        self.dequeued, self.recovered = opened.dequeued, opened.recovering
        self._claims_refused = opened.lost_claims
        self._started_turn = opened.start is not None
        if opened.invocation_id is not None:
            self.invocation_id = opened.invocation_id

    def _shape(self, served: Served) -> None:
        """The request's own outcome as its :class:`TurnResult` (before the inbox drains)."""
        opened = served.opened
        if opened is None:
            assert served.error is not None
            self._fail(self._request_session_id(), served.error, served.code)
            return
        session = opened.session
        if served.error is not None:
            self._fail(session.session_id, served.error, served.code)
        elif served.result is None:
            plan = opened.plan
            assert plan.status is not None
            self.result = TurnResult(
                session_id=session.session_id, status=plan.status,
                commit_status=served.commit, invocation_id=self.invocation_id,
                version=served.version, queued=plan.queued, state=dict(session.state),
                note=plan.note)
        else:
            assert served.outcome is not None
            self.result = self._turn_result(session, served.result, served.outcome)
            if self._config.serving.agent.handoffs:  # (one agent alone: no need to say)
                self.result.agent = session.head.agent or None
        if served.handed_on:
            assert self.result is not None
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
