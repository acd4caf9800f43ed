"""How :func:`dormant.testing.run_test` delivers a script's steps: in process (``app.run``
semantics, committed through the app's commit policy) or through the REST handler, one
request and one commit per step. Both honour the fault steps: a model call that fails, a
commit another writer beats, an input delivered twice."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

from dormant._run import TurnInput, drain, run_turn
from dormant.agent import Agent
from dormant.app import App
from dormant.errors import DormantError
from dormant.events import UserEvent
from dormant.handlers import HandlerInput, Input, TurnResult
from dormant.models._base import ModelError, ModelRequest
from dormant.models.scripted import ScriptedModel, ScriptError
from dormant.results import ErrorResult, RunResult
from dormant.session import Session
from dormant.stores._base import Store
from dormant.tools import Signal

__all__ = ["Driver", "HandlerDriver", "InProcessDriver", "KitModel", "ModelFault"]

Outcome = RunResult | TurnResult


class ModelFault:
    """A scripted model failure: the model call that consumes it raises :class:`ModelError`."""

    def __init__(self, message: str, retryable: bool) -> None:
        self.message = message
        self.retryable = retryable


class KitModel(ScriptedModel):
    """The kit's :class:`ScriptedModel`: replies, and failures in their place."""

    def __init__(self, replies: Sequence[str | dict[str, Any] | ModelFault]) -> None:
        super().__init__([r for r in replies if not isinstance(r, ModelFault)])
        #: Model-call position -> the failure scripted there.
        self._faults = {i: r for i, r in enumerate(replies) if isinstance(r, ModelFault)}
        self._calls = 0
        self._fault_lock = threading.Lock()

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[Any]:
        with self._fault_lock:
            position = self._calls
            self._calls += 1
            fault = self._faults.pop(position, None)
        if fault is not None:
            self.requests.append(request)
            raise ModelError(fault.message, retryable=fault.retryable)
        return super().stream(request, signal=signal)

    def assert_consumed(self) -> None:
        super().assert_consumed()
        if self._faults:
            raise ScriptError(f"{len(self._faults)} scripted model_error(...) steps were "
                              "never reached")


class Driver:
    """Delivers one step at a time to one session; remembers the last input (``redeliver``)
    and whether the next commit must lose a race (``conflict``)."""

    def __init__(self, app: App, agent: Agent, session_id: str) -> None:
        self.app = app
        self.agent = agent
        self.session_id = session_id
        self.results: list[Outcome] = []
        self.last: dict[str, Any] | None = None
        self.conflict_next = False

    # What a step asks for, as the wire shape of ``Input`` (so both drivers share it).
    def deliver(self, given: dict[str, Any]) -> Outcome:
        self.last = given
        outcome = self._deliver(given)
        self.results.append(outcome)
        return outcome

    def redeliver(self) -> Outcome:
        if self.last is None:
            raise ScriptError("redeliver() before any input was delivered")
        return self.deliver(dict(self.last))

    def session(self) -> Session:
        session = self.app.sessions.get(self.session_id)
        return session if session is not None else Session.new(self.session_id)

    def _deliver(self, given: dict[str, Any]) -> Outcome:
        raise NotImplementedError

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
    """Runs each step with the run loop, commits through ``app.sessions.policy`` (the same
    policy the handlers use)."""

    def _deliver(self, given: dict[str, Any]) -> Outcome:
        session = self.session()
        retry = given.get("retry", {}).get("retry_id") if given.get("retry") else None
        try:
            for decision in given.get("approvals") or ():
                session.input.approval(decision["approval_id"], approved=decision["approved"],
                                       reason=decision.get("reason"))
            for answer in given.get("tools") or ():
                session.input.tool(call_id=answer["call_id"], input=answer["input"])
            message_id = given.get("message_id")
            if message_id is not None and self.app.sessions.holds_message(session, message_id):
                raise _duplicate(session, message_id)
            result = drain(run_turn(
                self.agent, session,
                TurnInput(message=given.get("message"), message_id=message_id,
                          retry_id=retry),
                clock=self.app.clock))
        except (DormantError, ModelError) as error:
            return ErrorResult(error=str(error), code=str(getattr(error, "code", "run_error")))
        if given.get("message") is not None and "message_id" not in given:
            given["message_id"] = _last_message_id(session)  # what redeliver() resends
        self._lose_the_next_race()
        try:
            outcome = self.app.sessions.policy.commit(session)
        except DormantError as error:
            return ErrorResult(error=str(error), code=str(getattr(error, "code", "run_error")))
        if outcome.status == "failed":
            return ErrorResult(error=f"the commit failed: {outcome.error}", code="store_error")
        return result


class HandlerDriver(Driver):
    """Sends each step to ``app.handler.rest`` as its own request."""

    def __init__(self, app: App, agent: Agent, session_id: str) -> None:
        super().__init__(app, agent, session_id)
        self._turn = app.handler.turn(agent=agent)

    def _deliver(self, given: dict[str, Any]) -> Outcome:
        policy = self.app.sessions.policy
        store = policy.store
        if self.conflict_next:
            policy.store = _RaceOnce(store, self)
        stream = self._turn(HandlerInput(session_id=self.session_id, input=Input(**given)))
        try:
            result = stream.run()
        finally:
            policy.store = store
        if given.get("message") is not None and "message_id" not in given:
            given["message_id"] = _last_message_id(self.session())
        return result


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


def _last_message_id(session: Session) -> str | None:
    for event in reversed(session.events):
        if isinstance(event, UserEvent):
            return event.message_id
    return None


def _duplicate(session: Session, message_id: str) -> DormantError:
    from dormant.errors import DuplicateMessage

    return DuplicateMessage(session.session_id, message_id)
