"""The one request executor: :func:`serve` takes a request from its opening to its end.

open (:func:`~dormant._request.opening.open_request`) → run under a
:class:`~dormant._control.ControlWatch` → commit (the app's commit policy) → write the asks
→ drain the inbox while time is left, or hand the rest on. The handlers'
:class:`~dormant._turn.TurnStream` numbers, budgets and shapes what it yields; the test kit's
in-process driver calls it too, so a script runs the path production runs.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydantic import ValidationError

from dormant._commit import Outcome
from dormant._control import DEFAULT_POLL_INTERVAL, ControlWatch, write_asks
from dormant._ids import new_id
from dormant._inputs import CommitStatus, HandlerInput, Input, RetryRequest, landed
from dormant._request.ahead import WriteAhead
from dormant._request.host import Host, RequestRules
from dormant._request.opening import Opened, load_turns, open_request
from dormant._run import run_turn
from dormant._run.compaction import claim_in
from dormant._timing import Recorder, Sink, otel_loaded, outcome_of, parked_spans
from dormant.errors import (
    MODEL_ERROR_CODES,
    DormantError,
    DuplicateMessage,
    InputError,
    RetryRefused,
    SessionMoved,
    StoreError,
    describe_validation,
)
from dormant.events import InvocationFailed, StreamEvent
from dormant.models._base import ModelError
from dormant.results import ErrorResult, RunResult
from dormant.session import Session
from dormant.tools import Aborted, Signal

if TYPE_CHECKING:
    from dormant._head import Head
    from dormant.agent import Agent, ErrorHandler, Hook

__all__ = ["DEADLINE_MARGIN", "DRAIN_BUDGET", "MAX_DRAIN", "Served", "Serving", "otel_sink",
           "serve"]

log = logging.getLogger("dormant")

#: Seconds kept back from the Lambda deadline for the commit and the reply.
DEADLINE_MARGIN = 5.0
#: Seconds of budget a queued message needs to run in the same request (else handed on).
DRAIN_BUDGET = 10.0
#: Queued messages one request runs at most before handing the rest on.
MAX_DRAIN = 16


@dataclass(frozen=True)
class Serving:
    """How a handler serves its requests, fixed when it is built: the app (``host``), the
    agent, the request rules, the turn's hooks and error handlers, how often a running turn
    reads its control record, and the time budget's parts (``timeout``: seconds one turn may
    take; ``drain_budget``: seconds a queued message needs to run in the same request;
    ``deadline_margin``: seconds kept back from a deadline for the commit)."""

    host: Host
    agent: Agent
    rules: RequestRules = field(default_factory=RequestRules)
    hooks: tuple[Hook, ...] = ()
    error_handlers: tuple[ErrorHandler, ...] = ()
    poll_interval: float = DEFAULT_POLL_INTERVAL
    timeout: float | None = None
    drain_budget: float = DRAIN_BUDGET
    deadline_margin: float = DEADLINE_MARGIN


@dataclass
class Served:
    """What one request came to. ``opened``: the request as opened (None: refused before
    that). A request whose turn ran has its ``result`` and how it was committed
    (``outcome``); one that ran none has its ``plan.status`` and what it wrote (``commit``,
    ``version``). ``error``/``code``: it failed, having written nothing more (``result`` is
    None). ``drained``: the queued messages it ran after its own turn; ``handed_on``: work it
    handed to another invocation."""

    opened: Opened | None = None
    result: RunResult | None = None
    outcome: Outcome | None = None
    commit: CommitStatus | None = None
    version: int | None = None
    error: BaseException | None = None
    code: str | None = None
    drained: list[str] = field(default_factory=list)
    handed_on: bool = False

    @property
    def errored(self) -> bool:
        """The request ended in an error: refused, failed, a run that ended failed, or a
        commit the store refused."""
        return (self.error is not None
                or (self.result is not None and self.result.status == "error")
                or (self.outcome is not None and self.outcome.status == "failed"))

    @property
    def landed(self) -> bool:
        """Whether its input is in the session now (see ``TurnResult.landed``)."""
        if self.error is not None:
            return False
        if self.outcome is not None:
            return landed(self.outcome.status, self.outcome.version)
        return landed(self.commit, self.version)


def serve(serving: Serving, request: HandlerInput, signal: Signal, *,
          invocation_id: str | None = None,
          on_start: Callable[[Head], None] | None = None,
          on_open: Callable[[Opened], None] | None = None,
          on_done: Callable[[Served], None] | None = None,
          drains: bool = True) -> Generator[StreamEvent, None, Served]:
    """Serve ``request``: a generator of the turn's stream events (the opening first) that
    returns what the request came to. ``signal``: the turn's, its ``deadline`` the budget
    (the claim's lease runs to it, plus the margin); ``invocation_id``: a fresh invocation's
    id; ``on_start``: see :func:`~dormant._request.opening.open_request`; ``on_open``:
    called with the opened request before anything runs; ``on_done``: with the request's own
    outcome, before the inbox drains; ``drains``: False for the turns a drain runs."""
    host = serving.host
    store = host.store
    recorder = Recorder(agent=serving.agent.name, clock=host.clock, prices=host.prices,
                        sink=otel_sink(), store=type(store).__name__,
                        counters=getattr(store, "counters", None))
    served = Served()
    try:
        _open(serving, served, request, signal, recorder, invocation_id, on_start)
        opened = served.opened
        if opened is None:
            _done(served, on_done)
            return served
        if recorder.span is not None:
            recorder.opened(session_id=opened.session.session_id,
                            invocation_id=opened.invocation_id,
                            links=parked_spans(opened.session.loaded_events,
                                               opened.invocation_id))
        if on_open is not None:
            on_open(opened)
        session, start = opened.session, opened.start
        if start is None:
            _finish(serving, served, opened, recorder)
        else:  # the turn runs here, in this frame: every event of the turn passes through it
            running = _Running(start.invocation_id)
            # a claim's lease, and a first turn's announcement, live on the turn's heartbeat
            beats = session.version == 0 or (session.claimed and session.head.running)
            watch = ControlWatch(host.store, session.session_id, running.reader(), signal,
                                 interval=serving.poll_interval,
                                 control_rev=session.head.control_rev, session=session,
                                 heartbeat=serving.rules.heartbeat if beats else 0.0,
                                 clock=host.clock).start()
            ahead = WriteAhead(host, session, watch=watch, heartbeat=serving.rules.heartbeat,
                               lease=lambda: _lease(serving, signal),
                               default_lease=serving.rules.lease, recorder=recorder)
            try:
                yield from opened.shown  # committed by the claim, or opened in the slice
                served.result = yield from run_turn(
                    serving.agent, session, start, hooks=serving.hooks,
                    error_handlers=serving.error_handlers, signal=signal, clock=host.clock,
                    watch=watch, claim_compaction=claim_in(host.store), write_ahead=ahead,
                    client_tools=request.input.client_tools or (),
                    client_context=request.input.context or (), recorder=recorder)
                _check_state(serving.rules, session)
                if session.window.effects_end == 0 and not signal.stopped:
                    signal.raise_if_aborted()  # aborted at the very end: write nothing
            except Exception as error:
                _run_failed(serving, served, error, request, session, signal)
            finally:
                watch.close()
            if ahead.outcome is not None:  # superseded before a step's tools ran: written
                served.outcome = ahead.outcome
            elif served.error is None:
                _commit(serving, served, request, session, recorder)
            _disarm(serving, served, session, [opened.armed, ahead.armed])
            if session.version == 0:  # a first turn that wrote nothing: it was never there
                watch.retract()
        _done(served, on_done)
    finally:
        _close(recorder, served)
    if drains and not served.errored and served.opened is not None:
        _drain(serving, served, served.opened.session, request, signal)
    return served


def _open(serving: Serving, served: Served, request: HandlerInput, signal: Signal,
          recorder: Recorder, invocation_id: str | None,
          on_start: Callable[[Head], None] | None) -> None:
    """Open the request: ``served.opened`` set, or the error that refused it (nothing
    written)."""
    try:
        served.opened = open_request(serving.host, serving.agent, request, serving.rules,
                                     recorder, lease=_lease(serving, signal),
                                     invocation_id=invocation_id, on_start=on_start)
    except ValidationError as error:
        _failed(served, InputError("invalid request: " + describe_validation(error)))
    except DormantError as error:
        _failed(served, error)


def otel_sink() -> Sink | None:
    """OpenTelemetry's sink when the process loaded it: its bridge is imported only then."""
    if not otel_loaded():
        return None
    from dormant._otel import sink

    return sink()


def _close(recorder: Recorder, served: Served) -> None:
    """End the request's trace: its outcome, how it reached the store."""
    if recorder.span is None:
        return
    result, outcome = served.result, served.outcome
    status: str
    code: str | None
    if served.error is not None or (result is None and served.opened is None):
        status, code = "error", served.code or "aborted"
    elif result is not None:
        status, code = result.status, getattr(result, "code", None)
    else:
        opened = served.opened
        status, code = (opened.plan.status if opened is not None else None) or "recorded", None
    commit = outcome.status if outcome is not None else served.commit
    recorder.close(outcome=outcome_of(status, code), commit=commit, code=code)


def _run_failed(serving: Serving, served: Served, error: Exception, request: HandlerInput,
                session: Session, signal: Signal) -> None:
    """The run raised: the turn ended in ``error`` having written nothing (a turn that must
    keep its progress ends with an ``invocation_failed`` instead of raising)."""
    if isinstance(error, Aborted):
        _failed(served, error, "deadline" if signal.expired else "aborted")
        if served.code == "deadline":
            _hand_on_cut(serving, served, request, session)
    elif isinstance(error, DormantError):
        _failed(served, error)
    elif isinstance(error, ModelError):  # the model provider failed for good (after retries)
        log.warning("model call failed: %s", error, extra={"session_id": session.session_id})
        _failed(served, error)
    else:  # a tool/model/hook bug: report it, write nothing
        log.exception("turn failed", extra={"session_id": session.session_id})
        _failed(served, error, "run_error")


def _commit(serving: Serving, served: Served, request: HandlerInput,
            session: Session, recorder: Recorder) -> None:
    """Commit the turn that ran (the commit policy hands its timers over too), then write
    what it asks of a turn running elsewhere."""
    try:
        with recorder.phase("commit") as phase:
            served.outcome = outcome = serving.host.sessions.policy.commit(session)
            phase.attributes["dormant.commit.status"] = outcome.status
    except (DuplicateMessage, RetryRefused) as error:  # a redelivery lost the race
        _failed(served, error)
        return
    if outcome.status == "failed" and session.claimed and outcome.error is not None \
            and not outcome.error.retryable:
        _fail_landed(serving, session, served.result, outcome.error)
    result = served.result
    if isinstance(result, ErrorResult) and result.code == "deadline" \
            and outcome.status != "failed" and outcome.version is not None:
        _hand_on_cut(serving, served, request, session)
    _write_asks(serving, session)


def _disarm(serving: Serving, served: Served, session: Session,
            armed: list[str | None]) -> None:
    """Cancel the lease wake-ups this request armed once what it claimed is over: its turn
    committed, or was superseded (whoever overtook it holds a claim of its own, or ended
    it). A turn that failed to commit, or left its invocation running, keeps them: they
    take it over."""
    outcome = served.outcome
    if served.error is not None or outcome is None or outcome.status == "failed":
        return
    if outcome.status != "superseded" and session.head.running:
        return
    for name in armed:
        if name is not None:
            serving.host.sessions.disarm(session.session_id, name)


def _fail_landed(serving: Serving, session: Session, result: RunResult | None,
                 error: StoreError) -> None:
    """A turn whose claim (or a step's write-ahead) landed could not write the rest, and
    never will (the store refuses it for good, e.g. it is too large): its invocation ends
    failed where it landed, so nobody takes it over only to be refused again. Its calls
    without a result run again only if somebody retries it. Best effort: a store that cannot
    be written leaves the invocation to its lease."""
    sessions = serving.host.sessions
    invocation = result.invocation_id if result is not None else None
    try:
        landed = sessions.load(session.session_id, turns=0)
        if landed is None or landed.head.open_invocation != invocation \
                or not landed.head.running:
            return
        landed.add_event(InvocationFailed(invocation_id=invocation, code="store_error",
                                          message=str(error), retryable=False))
        sessions.policy.commit(landed)
    except DormantError:
        log.exception("could not record that the turn failed",
                      extra={"session_id": session.session_id})


def _finish(serving: Serving, served: Served, opened: Opened, recorder: Recorder) -> None:
    """A request that runs no turn: commit what its inputs recorded that its claim did not
    (if anything), then write what it asks of the running turn. A store that cannot be
    written, or inputs that no longer fit a newer head (``SessionMoved``), fail it."""
    session = opened.session
    served.commit = opened.commit
    served.version = opened.version if opened.commit else session.version
    try:
        if session.dirty:
            with recorder.phase("commit") as phase:
                outcome = serving.host.sessions.policy.commit(session)
                phase.attributes["dormant.commit.status"] = outcome.status
            if outcome.status == "failed":
                raise outcome.error or StoreError(
                    f"session {session.session_id} could not be written")
            if outcome.status == "superseded":
                raise SessionMoved(session.session_id)
            served.commit, served.version = outcome.status, outcome.version
        _write_asks(serving, session)
    except DormantError as error:
        _failed(served, error)


# --- the inbox and handing on ------------------------------------------------------------------


def _drain(serving: Serving, served: Served, session: Session, request: HandlerInput,
           signal: Signal) -> None:
    """Run the inbox's next messages, each its own request and commit, while the session
    can take them and time remains; hand the rest on (``Host.hand_on``)."""
    host = serving.host
    runs = 0
    while _waiting_to_run(session, host.clock):
        # with no hand-on, the inbox drains here however long that takes
        if (runs >= MAX_DRAIN and host.hand_on is not None) \
                or not _time_for_another(serving, signal):
            if host.hand_on is not None:
                host.hand_on(HandlerInput(session_id=session.session_id, input=Input(),
                                          principal=request.principal))
                served.handed_on = True
            break
        runs += 1
        nested = Signal()
        nested.deadline = _budget(serving, signal)
        turn = serve(serving, HandlerInput(session_id=session.session_id, input=Input(),
                                           principal=request.principal), nested, drains=False)
        done = _exhaust(turn)  # (its events are not this request's stream)
        ran = done.opened
        if done.landed and ran is not None and ran.dequeued is not None:
            served.drained.append(ran.dequeued)  # it ran (a failure after its tools too)
        if done.errored or ran is None or not (ran.dequeued or ran.recovering):
            # (it ran nothing: a pause, say)
            log.warning("a queued message did not run to its end: %s", _describe(done),
                        extra={"session_id": session.session_id})
            break
        session = ran.session


def _hand_on_cut(serving: Serving, served: Served, request: HandlerInput,
                 session: Session) -> None:
    """A turn cut by the deadline carries on in another invocation: as a retry when its
    progress was committed (the session failed, retryable), else as the same message."""
    host = serving.host
    if host.hand_on is None:
        return
    head = session.head
    if head.failed and head.open_invocation:
        retry_id = f"deadline:{head.open_invocation}:{head.retries}"
        given = Input(retry=RetryRequest(retry_id=retry_id))
    elif request.input.message is not None and served.outcome is None:
        given = Input(message=request.input.message,
                      message_id=request.input.message_id or new_id("msg"),
                      state=request.input.state)
    else:
        return
    host.hand_on(HandlerInput(session_id=session.session_id, input=given,
                              principal=request.principal))
    served.handed_on = True


def _waiting_to_run(session: Session, clock: Callable[[], int]) -> bool:
    """Whether the session has work a request should run now: a stranded invocation to take
    over, or queued messages while it is free (and no pause waits)."""
    head = session.head
    if head.running:  # stranded: taken over even while a pause waits (it pauses in a step)
        return head.stranded(clock())
    return bool(head.queue and head.free) and not session.pause_pending


def _time_for_another(serving: Serving, signal: Signal) -> bool:
    deadline = signal.deadline
    return deadline is None or deadline - time.monotonic() >= serving.drain_budget


def _budget(serving: Serving, signal: Signal) -> float | None:
    """The deadline of a turn the drain runs: the request's, or sooner by the handler's
    ``timeout`` (None: neither)."""
    deadline = signal.deadline
    if serving.timeout is not None:
        own = time.monotonic() + serving.timeout
        return own if deadline is None else min(own, deadline)
    return deadline


def _lease(serving: Serving, signal: Signal) -> float | None:
    """Seconds this request has to commit what it claims (None: the rules' default)."""
    deadline = signal.deadline
    if deadline is None:
        return None
    return max(deadline - time.monotonic(), 0.0) + serving.deadline_margin


# --- small parts -------------------------------------------------------------------------------


class _Running:
    """The running invocation's id, read by its control watch through a weak reference: a
    request its caller drops before it ends is not kept alive by the watch (which then stops
    polling)."""

    def __init__(self, invocation_id: str | None) -> None:
        self.invocation_id = invocation_id

    def reader(self) -> Callable[[], str | None]:
        ref = weakref.ref(self)

        def invocation() -> str | None:
            live = ref()
            return live.invocation_id if live is not None else None

        return invocation


def _reload(serving: Serving, session: Session) -> Callable[[], Session | None]:
    host, agent = serving.host, serving.agent
    turns, compacted = load_turns(agent), agent.compaction is not None
    return lambda: host.sessions.load(session.session_id, turns=turns, compacted=compacted)


def _write_asks(serving: Serving, session: Session) -> None:
    if session.control_asks:
        write_asks(serving.host.store, session, _reload(serving, session))


def _check_state(rules: RequestRules, session: Session) -> None:
    schema = rules.schema
    if schema is not None:
        try:
            schema.model_validate(session.state)
        except ValidationError as error:
            raise InputError(f"state no longer fits the state schema: "
                             f"{describe_validation(error)}") from error


def _failed(served: Served, error: BaseException, code: str | None = None) -> None:
    """The request failed with ``error`` (``code``: its own, by default); a run's result it
    had is not its outcome."""
    served.result = None
    served.error, served.code = error, code or _code(error)


def _code(error: BaseException | None) -> str:
    """The code a failure reports: a model failure's own (one of ``MODEL_ERROR_CODES``; a
    code of a model's own is the generic ``model_error``), else the error's."""
    if isinstance(error, ModelError):
        return error.code if error.code in MODEL_ERROR_CODES else "model_error"
    return str(getattr(error, "code", "run_error"))


def _done(served: Served, on_done: Callable[[Served], None] | None) -> None:
    if on_done is not None:
        on_done(served)


def _exhaust(turn: Generator[StreamEvent, None, Served]) -> Served:
    """Run a :func:`serve` generator to its end; what it returned."""
    while True:
        try:
            next(turn)
        except StopIteration as stop:
            served: Served = stop.value
            return served


def _describe(done: Served) -> str | None:
    if done.error is not None:
        return str(done.error)
    result = done.result
    return getattr(result, "error", None)
