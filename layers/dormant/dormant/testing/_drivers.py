"""How :func:`dormant.testing.run_test` delivers a script's steps: in process (the request
executor the handlers run, :func:`dormant._request.serve`) or through the REST handler, one
request and one commit per step. Both honour the fault steps (a model call that fails, a commit
another writer beats, an input delivered twice, a process that dies between its claim and its
commit) and turn control: a stop, steer or pause sent as its own request while a scripted reply
streams goes through the session's control record, which the running turn polls
(:class:`~dormant._control.ControlWatch`) like any turn does.

A crash (``Driver.crash_next``) is the kit's ``before_model`` hook raising :class:`_Killed`, a
``BaseException``: the run loop and :class:`TurnStream` catch ``Exception`` only, so it escapes
the request like a ``kill -9`` — nothing after it runs, nothing more is committed. The driver
then lets the claim's lease run out on the kit's clock (:class:`KitClock`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from dormant._ids import new_id, now_ms
from dormant._inputs import HandlerInput, Input
from dormant._request import Served, Serving, derive_invocation, serve
from dormant._turn import TurnStream
from dormant._turn_wire import TurnResult
from dormant.agent import Agent, Hook, HookContext
from dormant.app import App
from dormant.errors import DormantError
from dormant.events import StreamEvent
from dormant.models._base import (
    ModelChunk,
    ModelError,
    ModelRequest,
    TextDelta,
    ThoughtDelta,
    ToolCallDelta,
)
from dormant.models.scripted import ScriptedModel, ScriptError
from dormant.results import ErrorResult, RunResult
from dormant.schedulers import LEASE_GRACE_MS, TimerDelivery
from dormant.session import Session
from dormant.stores._base import Store
from dormant.testing._agents import agent_paths, rebuild
from dormant.tools import Signal

__all__ = ["POLL_INTERVAL", "Control", "Driver", "HandlerDriver", "InProcessDriver", "KitClock",
           "KitModel", "KitStore", "ModelFault"]

Outcome = RunResult | TurnResult

#: Seconds between two reads of the control record by a turn the kit runs (fast tests).
POLL_INTERVAL = 0.02
#: Seconds a scripted reply waits for its stop, steer or pause to reach the running turn.
CONTROL_WAIT = 5.0


class ModelFault:
    """A scripted model failure: the model call that consumes it raises :class:`ModelError`."""

    def __init__(self, message: str, retryable: bool) -> None:
        self.message = message
        self.retryable = retryable


class KitClock:
    """The clock of the app a script runs on (epoch ms): wall-clock time plus how far the
    script moved it on. A crash moves it past the dead request's lease, so the next request
    finds the invocation stranded without the test waiting for the lease (two minutes)."""

    def __init__(self) -> None:
        self._offset = 0
        self._lock = threading.Lock()

    def __call__(self) -> int:
        return now_ms() + self._offset

    def advance_past(self, when: int) -> None:
        """Move the clock on until it reads later than ``when`` (never back)."""
        with self._lock:
            gap = when - (now_ms() + self._offset) + 1
            if gap > 0:
                self._offset += gap


class _Killed(BaseException):
    """The process running a delivery dies (``crash()``). Not an ``Exception``: no
    ``except Exception`` on the request path catches it, so nothing after it runs."""

    def __init__(self, claimed: bool) -> None:
        super().__init__("killed")
        #: Whether the dying request's claim had committed.
        self.claimed = claimed


@dataclass(frozen=True)
class Control:
    """A control sent as its own request while a scripted reply streams, once the reply has
    streamed ``after`` pieces: ``stop`` (``seen``: pieces of the reply the client saw),
    ``steer`` (``text``, ``id``) or ``pause``."""

    kind: Literal["stop", "steer", "pause"]
    after: int = 0
    seen: int | None = None
    text: str | None = None
    id: str | None = None

    def describe(self) -> str:
        return f"{self.kind}(after={self.after})"


class KitModel(ScriptedModel):
    """The kit's :class:`ScriptedModel`: replies, failures in their place, and the controls
    to send while a reply streams (``controls``: model-call position -> controls).
    ``agent``: the path of the sub-agent it answers for (None: the session agent's), named
    in its complaints."""

    def __init__(self, replies: Sequence[str | dict[str, Any] | ModelFault],
                 controls: dict[int, list[Control]] | None = None, *,
                 agent: str | None = None) -> None:
        super().__init__([r for r in replies if not isinstance(r, ModelFault)])
        self.agent = agent
        #: Model-call position -> the failure scripted there.
        self._faults = {i: r for i, r in enumerate(replies) if isinstance(r, ModelFault)}
        self._controls = {i: sorted(c, key=lambda c: c.after)
                          for i, c in (controls or {}).items()}
        self._calls = 0
        self._fault_lock = threading.Lock()
        #: The model calls the script had no reply for, as raised: a request the executor
        #: runs on its own (a delegation's child session, the parent it resumes) only logs
        #: its failure, so :meth:`assert_consumed` raises it again.
        self.unexpected: list[str] = []
        #: Sends a control while a reply streams; True when the reply should go on streaming
        #: (set by the driver).
        self.send: Callable[[Control, Signal], bool] | None = None

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[Any]:
        with self._fault_lock:
            position = self._calls
            self._calls += 1
            fault = self._faults.pop(position, None)
            controls = self._controls.pop(position, [])
        if fault is not None:
            self.requests.append(request)
            raise ModelError(fault.message, retryable=fault.retryable)
        try:
            chunks = super().stream(request, signal=signal)
        except ScriptError as error:
            self.unexpected.append(self._named(str(error)))
            raise ScriptError(self.unexpected[-1]) from None
        if not controls:
            return chunks
        return self._with_controls(chunks, controls, signal)

    def _with_controls(self, chunks: Iterator[ModelChunk], controls: list[Control],
                       signal: Signal) -> Iterator[ModelChunk]:
        pieces = 0
        for chunk in chunks:
            if not isinstance(chunk, ThoughtDelta):
                while controls and controls[0].after <= pieces:
                    if not self._send(controls.pop(0), signal):
                        return  # stopped: the run loop sees the signal
            yield chunk
            if isinstance(chunk, TextDelta | ToolCallDelta):  # words, then streamed arguments
                pieces += 1
        for control in controls:  # the reply was shorter than scripted (checked up front)
            self._send(control, signal)

    def _send(self, control: Control, signal: Signal) -> bool:
        if self.send is None:
            raise ScriptError(f"{control.describe()}: nothing sends controls for this model")
        return self.send(control, signal)

    def _named(self, message: str) -> str:
        return message if self.agent is None else f"agent {self.agent}: {message}"

    def assert_consumed(self) -> None:
        if self.unexpected:
            raise ScriptError(self.unexpected[0])
        try:
            super().assert_consumed()
        except ScriptError as error:
            raise ScriptError(self._named(str(error))) from None
        if self._faults:
            raise ScriptError(f"{len(self._faults)} scripted model_error(...) steps were "
                              "never reached")
        if self._controls:
            left = [c.describe() for cs in self._controls.values() for c in cs]
            raise ScriptError(f"controls never sent (their model reply was never asked for): "
                              f"{', '.join(left)}")


class KitStore:
    """The script's store, counting reads of the control record: a reply that sent a steer or
    a pause waits until the running turn's watch has read the record since (so the control
    reaches the next step boundary however fast the script streams)."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self._reads = 0
        self._inflight = 0
        self._closed = False
        self._read = threading.Condition()

    def __getattr__(self, name: str) -> Any:  # close(), and whatever else a store offers
        return getattr(self.inner, name)

    @property
    def reads(self) -> int:
        with self._read:
            return self._reads

    def wait_reads(self, count: int, timeout: float) -> bool:
        """Wait until ``count`` reads of a control record have started."""
        with self._read:
            return self._read.wait_for(lambda: self._reads >= count, timeout)

    def load(self, session_id: str, *, turns: int | None = None,
             compacted: bool = False) -> Any:
        return self.inner.load(session_id, turns=turns, compacted=compacted)

    def append(self, head: Any, events: Any, *, expected_version: int) -> Any:
        return self.inner.append(head, events, expected_version=expected_version)

    def has_once(self, session_id: str, key: str) -> bool:
        return self.inner.has_once(session_id, key)

    def landed(self, session_id: str, seq: int, event_id: str) -> bool:
        return self.inner.landed(session_id, seq, event_id)

    def read_control(self, session_id: str) -> Any:
        with self._read:
            if self._closed:  # a watch of a turn that ended, polling once more
                return None
            self._reads += 1
            self._inflight += 1
            self._read.notify_all()
        try:
            return self.inner.read_control(session_id)
        finally:
            with self._read:
                self._inflight -= 1
                self._read.notify_all()

    def close_reads(self, timeout: float = CONTROL_WAIT) -> None:
        """The script is over: wait for reads of the control record in flight, refuse later
        ones (a turn's watch may poll once more after its turn ended; the caller may close
        the store next)."""
        with self._read:
            self._closed = True
            self._read.wait_for(lambda: self._inflight == 0, timeout)

    def write_control(self, session_id: str, control: Any, *, head_version: int) -> bool:
        return self.inner.write_control(session_id, control, head_version=head_version)

    def delete(self, session_id: str) -> bool:
        return self.inner.delete(session_id)

    def list(self, *, principal: str | None = None, limit: int = 100) -> Any:
        return self.inner.list(principal=principal, limit=limit)


@dataclass
class Driver:
    """Delivers one step at a time to one session; remembers the last input (``redeliver``),
    whether the next commit must lose a race (``conflict``) and whether the next delivery's
    process dies (``crash``: at its first model call). ``controls`` holds the
    outcomes of the controls sent while a reply streamed; ``problems`` what went wrong
    sending them (``run_test`` raises them as a :class:`ScriptError`)."""

    def __init__(self, app: App, agent: Agent, session_id: str) -> None:
        if not isinstance(app.store, KitStore):
            raise TypeError("the kit's drivers need an app on a KitStore")
        self.app = app
        self.store: KitStore = app.store
        #: The app's clock when it is the kit's (a crash needs it to let a lease run out).
        self.clock: KitClock | None = app.clock if isinstance(app.clock, KitClock) else None
        #: The agent served, with the kit's hook (it names the invocation a reply belongs to)
        #: on it and on every sub-agent it reaches (a resumed sub-agent calls its model first).
        hook = Hook(before_model=self.before_model)
        self.agent = rebuild(agent, lambda _, each: replace(each, hooks=(*each.hooks, hook)))
        for each in agent_paths(agent).values():
            if isinstance(each.model, KitModel):
                each.model.send = self.send
        self.session_id = session_id
        self.results: list[Outcome] = []
        self.controls: list[Outcome] = []
        self.problems: list[str] = []
        self.last: dict[str, Any] | None = None
        #: The session the last input went to (None: the script's).
        self.last_session: str | None = None
        self.conflict_next = False
        #: The next delivery's process dies at its first model call (``crash()``).
        self.crash_next = False
        self._crashing = False
        #: The invocation whose model is being called (set by the kit's ``before_model`` hook),
        #: and its session (a delegation's child session, or the script's).
        self.running: str | None = None
        self.running_session: str | None = None

    def before_model(self, ctx: HookContext) -> None:
        self.running = ctx.invocation_id
        self.running_session = ctx.session.session_id
        if self._crashing:  # after the claim (if any) committed, before the turn commits
            self._crashing = False
            raise _Killed(ctx.session.claimed)

    # What a step asks for, as the wire shape of ``Input`` (so both drivers share it).
    def deliver(self, given: dict[str, Any], session_id: str | None = None) -> Outcome:
        """Deliver ``given`` to the script's session, or to ``session_id`` (a child session
        a delegation made: a step answering what waits there)."""
        self.last, self.last_session = given, session_id
        crashing, self.crash_next = self.crash_next, False
        if crashing and self.clock is None:
            raise ScriptError("crash() needs the app on the kit's clock (KitClock)")
        policy = self.app.sessions.policy
        store = policy.store
        if self.conflict_next:  # the delivery's first write loses a race (a claim, or a commit)
            policy.store = _RaceOnce(store, self)
        self._crashing = crashing
        try:
            outcome = self._deliver(given, session_id or self.session_id)
        except _Killed as killed:
            outcome = self._died(killed)
        finally:
            policy.store = store
            self._crashing = False
        if crashing and not (isinstance(outcome, ErrorResult) and outcome.code == "crashed"):
            raise ScriptError(f"crash(): the next delivery ({', '.join(given) or 'empty'}) "
                              "called no model, so it had no point to die at; put crash() "
                              "before a step that runs a turn")
        self.results.append(outcome)
        return outcome

    def _died(self, killed: _Killed) -> ErrorResult:
        """The delivery's process died: what it committed stays (its claim, if any), the rest
        is lost. A claim holds a lease: the kit's clock moves past it (and the wake-up's
        grace), so the next request finds the invocation stranded and takes it over."""
        assert self.clock is not None
        stored = self.app.store.load(self.session_id, turns=0)
        head = stored.head if stored is not None else None
        if killed.claimed and head is not None and head.running:
            self.clock.advance_past(head.lease + LEASE_GRACE_MS)
            error = (f"the process died after its claim committed (version {head.version}), "
                     f"before its turn did: invocation {head.open_invocation} is stranded "
                     "(its lease ran out) and the next request takes it over")
        elif killed.claimed:
            error = "the process died after its claim committed, before its turn did"
        else:
            error = ("the process died before writing anything (a turn with no claim writes "
                     "nothing until it ends): the delivery is lost")
        return ErrorResult(error=error, code="crashed")

    def redeliver(self) -> Outcome:
        if self.last is None:
            raise ScriptError("redeliver() before any input was delivered")
        return self.deliver(dict(self.last), self.last_session)

    def session(self) -> Session:
        session = self.app.sessions.get(self.session_id)
        return session if session is not None else Session.new(self.session_id)

    def children(self) -> list[Session]:
        """The child sessions delegations made (``Agent.as_delegate``): the script session's,
        then theirs, in the order they were made, as stored."""
        found: list[Session] = []
        waiting = [self.session()]
        while waiting:
            for child in waiting.pop(0).head.children:
                session = self.app.sessions.get(child["session"])
                if session is not None:
                    found.append(session)
                    waiting.append(session)
        return found

    def timer(self, name: str) -> Outcome:
        """Deliver the session's pending timer ``name`` now."""
        pending = self.session().timers
        matches = [t for t in pending if t.name == name]
        if not matches:
            waiting = ", ".join(t.name for t in pending) or "none"
            raise ScriptError(f"timer({name!r}): no such timer is pending; pending: {waiting}")
        fired = matches[0]
        given: dict[str, Any] = {"timer": {"name": fired.name, "fire_at": fired.fire_at}}
        if fired.message is not None:
            given["message"] = fired.message
            given["message_id"] = fired.message_id
        if fired.tool_input:
            given["tools"] = [{"call_id": str(fired.tool_input["call_id"]),
                               "input": fired.tool_input.get("input")}]
        return self.deliver(given)

    def _deliver(self, given: dict[str, Any], session_id: str) -> Outcome:
        raise NotImplementedError

    def _request(self, given: dict[str, Any], session_id: str) -> Outcome:
        """A control request sent while a turn runs (not a step of its own)."""
        raise NotImplementedError

    def _stream_events(self) -> list[StreamEvent] | None:
        """The numbered events the running turn streamed so far (None: not known here)."""
        raise NotImplementedError

    # --- controls sent while a reply streams ---------------------------------------------------

    def send(self, control: Control, signal: Signal) -> bool:
        """Send ``control`` for the running invocation as its own request, then wait (bounded)
        until it reached the turn: a stop until the turn's signal is stopped (the reply ends:
        False), a steer or pause until the turn's watch read the control record since."""
        invocation = self.running
        if invocation is None:
            self.problems.append(f"{control.describe()}: no invocation is running")
            return True
        given: dict[str, Any]
        if control.kind == "stop":
            seen = self._frontier(control)
            given = {"stop": {"invocation_id": invocation, "seen": seen}}
        elif control.kind == "steer":
            given = {"steer": {"text": control.text, "invocation_id": invocation,
                               "id": control.id or new_id("msg")}}
        else:
            given = {"pause": True}
        outcome = self._request(given, self.running_session or self.session_id)
        # Counted once the control is written: a poll already under way may have read the
        # record before the write, so only reads that start from here are sure to see it.
        reads = self.store.reads
        self.controls.append(outcome)
        # A pause request answers ``paused`` (the session is paused, or will be at the
        # running turn's next step boundary).
        if outcome.status not in ("accepted", "paused" if control.kind == "pause" else None):
            error = getattr(outcome, "error", None)
            self.problems.append(f"{control.describe()} for the running invocation {invocation} "
                                 f"was not accepted: {outcome.status}"
                                 + (f" ({error})" if error else ""))
            return True
        if control.kind == "stop":
            if signal.wait(CONTROL_WAIT):
                return False
            self.problems.append(f"{control.describe()}: the running turn did not stop within "
                                 f"{CONTROL_WAIT:g} s")
            return True
        # The second read started after the control was written begins once the poll of the
        # first (which saw it) has been applied: the watch polls one read at a time.
        if not self.store.wait_reads(reads + 2, CONTROL_WAIT):
            self.problems.append(f"{control.describe()}: the running turn did not read its "
                                 f"control record within {CONTROL_WAIT:g} s")
        return True

    def _frontier(self, control: Control) -> int | None:
        """The stream position (``seen``) of the reply's ``control.seen``-th piece."""
        if control.seen is None:
            return None
        events = self._stream_events()
        if events is None:
            self.problems.append(f"{control.describe()}: seen= needs the running turn's stream, "
                                 "which this driver does not have here (a turn the inbox or "
                                 "a timer ran); leave seen unset")
            return None
        start = max((i for i, e in enumerate(events) if e.type == "model_start"), default=-1)
        deltas = [e for e in events[start + 1:] if e.type == "assistant_delta"]
        if control.seen == 0:
            first = deltas[0].seq if deltas else None
            if first is not None:
                return first - 1
            return events[-1].seq if events and events[-1].seq is not None else 0
        return deltas[control.seen - 1].seq

    # --- races -------------------------------------------------------------------------------

    def _lose_the_next_race(self) -> None:
        """Another writer lands first: the version moves under the turn (no new message)."""
        if not self.conflict_next:
            return
        self.conflict_next = False
        stored = self.app.store.load(self.session_id, turns=0)
        if stored is None:
            raise ScriptError("conflict() needs a session that exists: put it after a step "
                              "that committed")
        landed = self.app.store.append(stored.head, [], expected_version=stored.head.version)
        assert landed.ok, landed


class InProcessDriver(Driver):
    """Serves each step in process with the request executor the handlers run
    (:func:`dormant._request.serve`: open, claim, run under a control watch, commit through
    ``app.sessions.policy``, write the asks, drain the inbox), polling the control record
    every :data:`POLL_INTERVAL`; a step's outcome is its run's :class:`RunResult` (a
    :class:`TurnResult` for a step that runs no turn)."""

    def __init__(self, app: App, agent: Agent, session_id: str) -> None:
        super().__init__(app, agent, session_id)
        self._serving = Serving(app, self.agent, poll_interval=POLL_INTERVAL)
        self._events: list[StreamEvent] | None = None

    def _deliver(self, given: dict[str, Any], session_id: str) -> Outcome:
        return self._serve(given, session_id=session_id)

    def _request(self, given: dict[str, Any], session_id: str) -> Outcome:
        return self._serve(given, control=True, session_id=session_id)

    def _stream_events(self) -> list[StreamEvent] | None:
        return self._events

    def _serve(self, given: dict[str, Any], *, control: bool = False,
               session_id: str | None = None) -> Outcome:
        """One delivery through the request executor, as a handler serves it."""
        sid = session_id or self.session_id
        request = HandlerInput(session_id=sid, input=Input.model_validate(given))
        mid = request.input.message_id  # a fresh invocation is named as a handler names it
        fresh = derive_invocation(sid, mid) if mid else new_id("inv")
        events: list[StreamEvent] = []
        if not control:
            self._events = events
        served = serve(self._serving, request, Signal(), invocation_id=fresh,
                       on_done=None if control else self._done)
        try:
            while True:
                try:
                    event = next(served)
                except StopIteration as stop:
                    done: Served = stop.value
                    break
                if event.invocation_id is not None:
                    self.running, self.running_session = event.invocation_id, sid
                object.__setattr__(event, "seq", len(events) + 1)  # as a handler numbers them
                events.append(event)
        finally:
            served.close()
            if not control:
                self._events = None
        if control and done.result is not None:
            self.problems.append(f"a control sent while a turn runs ran a turn: {given!r}")
        return _outcome(done)

    def _done(self, served: Served) -> None:
        """The request's own turn is over: a turn its drain runs streams elsewhere."""
        self._events = None


def _outcome(served: Served) -> Outcome:
    """A step's outcome, as the kit reports it: the run's result, a failure, or what a
    request that ran no turn answers."""
    if served.error is not None:
        if not isinstance(served.error, DormantError | ModelError):
            raise served.error  # a bug in the agent's tools or hooks: the test sees it
        return ErrorResult(error=str(served.error), code=served.code or "run_error")
    opened = served.opened
    assert opened is not None
    outcome = served.outcome
    if outcome is not None and outcome.status == "failed":
        return ErrorResult(error=f"the commit failed: {outcome.error}", code="store_error")
    if served.result is not None:
        return served.result
    plan, session = opened.plan, opened.session
    assert plan.status is not None
    return TurnResult(session_id=session.session_id, status=plan.status,
                      commit_status=served.commit, version=served.version, queued=plan.queued,
                      invocation_id=session.head.open_invocation, state=dict(session.state))


class HandlerDriver(Driver):
    """Sends each step to the turn handler (``app.handler.turn``, what ``rest`` runs) as its
    own request; a timer goes through the wake handler."""

    def __init__(self, app: App, agent: Agent, session_id: str) -> None:
        super().__init__(app, agent, session_id)
        self._turn = app.handler.turn(agent=self.agent, poll_interval=POLL_INTERVAL)
        self._wake = app.handler.wake(agent=self.agent, poll_interval=POLL_INTERVAL)
        self._current: TurnStream | None = None

    def _deliver(self, given: dict[str, Any], session_id: str) -> Outcome:
        try:
            if given.get("timer") is not None:
                return self._wake(_delivery(session_id, given))
            stream = self._turn(HandlerInput(session_id=session_id, input=Input(**given)))
            self._current = stream
            return stream.run()
        finally:
            self._current = None

    def _request(self, given: dict[str, Any], session_id: str) -> Outcome:
        return self._turn(HandlerInput(session_id=session_id, input=Input(**given))).run()

    def _stream_events(self) -> list[StreamEvent] | None:
        current = self._current
        if current is None or current.result is not None:  # a drained or woken turn runs
            return None
        return current.events


class _RaceOnce:
    """A store whose next append loses a race (for ``conflict()`` through the handlers)."""

    def __init__(self, inner: Store, driver: Driver) -> None:
        self._inner = inner
        self._driver = driver

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def append(self, head: Any, events: Any, *, expected_version: int) -> Any:
        self._driver._lose_the_next_race()
        return self._inner.append(head, events, expected_version=expected_version)

    def read_control(self, session_id: str) -> Any:
        return self._inner.read_control(session_id)

    def write_control(self, session_id: str, control: Any, *, head_version: int) -> Any:
        return self._inner.write_control(session_id, control, head_version=head_version)


def _delivery(session_id: str, given: dict[str, Any]) -> TimerDelivery:
    timer = given["timer"]
    tools = given.get("tools") or []
    return TimerDelivery(session_id=session_id, name=timer["name"], fire_at=timer["fire_at"],
                         message=given.get("message"), message_id=given.get("message_id"),
                         tool_input=dict(tools[0]) if tools else None)


def _error(error: DormantError | ModelError) -> ErrorResult:
    return ErrorResult(error=str(error), code=str(getattr(error, "code", "run_error")))
