"""The test kit: script a conversation, run it, read what happened.

``run_test(agent, [user(...), model(...), tool_input({...}), model(...)])`` serves the agent
with a :class:`ScriptedModel` fed by the ``model`` steps, on a fresh session, committing after
every run exactly as a handler would. It raises if the script and the run disagree.

:class:`StoreContract` (``dormant.testing.store_contract``) is the store conformance suite, for
pytest; it is imported on first use, so importing this module never imports pytest.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from dormant._ids import new_id
from dormant.agent import Agent
from dormant.app import App
from dormant.events import Event, ToolResult
from dormant.models.scripted import ScriptedModel, ScriptError
from dormant.session import Session, mint_session_id, normalize_session_id
from dormant.stores._base import Store
from dormant.stores.memory import MemoryStore
from dormant.testing._drivers import Driver, HandlerDriver, InProcessDriver, KitModel, ModelFault

if TYPE_CHECKING:  # not in __all__ either: a star import must not import pytest
    from dormant.testing.store_contract import StoreContract as StoreContract

__all__ = [
    "ScriptError",
    "TestRun",
    "ToolOutcome",
    "approval",
    "conflict",
    "get_tool_results",
    "model",
    "model_error",
    "redeliver",
    "retry",
    "run_test",
    "tool_input",
    "user",
]


@dataclass(frozen=True)
class _User:
    text: str
    id: str | None = None


@dataclass(frozen=True)
class _Model:
    reply: str | dict[str, Any]


@dataclass(frozen=True)
class _ToolInput:
    answers: dict[str, Any]


@dataclass(frozen=True)
class _Approval:
    decisions: dict[str, Any]


@dataclass(frozen=True)
class _ModelError:
    message: str
    retryable: bool


@dataclass(frozen=True)
class _Retry:
    retry_id: str | None


@dataclass(frozen=True)
class _Conflict:
    pass


@dataclass(frozen=True)
class _Redeliver:
    pass


Step = _User | _Model | _ToolInput | _Approval | _ModelError | _Retry | _Conflict | _Redeliver


def user(text: str, *, id: str | None = None) -> _User:
    """A user message (or the message that resumes a ``yields=True`` agent)."""
    return _User(text, id)


def model(text: str | dict[str, Any] | None = None, *,
          tool_calls: Sequence[dict[str, Any]] | None = None,
          thought: str | None = None) -> _Model:
    """One model reply: text, tool calls (``[{"name": ..., "args": {...}}]``) or both.

    A dict in the seeds' shape is accepted too: ``model({"tool_calls": [...]})``."""
    if isinstance(text, dict):
        calls = text.get("tool_calls", text.get("toolCalls"))
        return model(text.get("text"), tool_calls=calls, thought=text.get("thought"))
    if text is None and not tool_calls:
        raise ScriptError("model(...) needs text or tool_calls")
    if tool_calls is None and thought is None:
        return _Model(text or "")
    reply: dict[str, Any] = {"text": text or ""}
    if tool_calls:
        reply["tool_calls"] = [dict(call) for call in tool_calls]
    if thought:
        reply["thought"] = thought
    return _Model(reply)


def tool_input(answers: dict[str, Any]) -> _ToolInput:
    """Answers for the calls that yielded, keyed by tool name or by call id."""
    return _ToolInput(dict(answers))


#: The seeds call this step ``input(...)``; importing it by that name shadows the builtin only
#: where you ask for it (``from dormant.testing import input``).
input = tool_input


def approval(decisions: dict[str, bool | dict[str, Any]]) -> _Approval:
    """Decisions on pending approval requests, keyed by tool name, call id or approval id:
    ``True`` / ``False``, or ``{"approved": False, "reason": "not today"}``."""
    return _Approval(dict(decisions))


def model_error(message: str = "the model provider failed", *,
                retryable: bool = True) -> _ModelError:
    """The next model call fails (a :class:`~dormant.models.ModelError`). Before any tool ran
    the turn writes nothing; after, its finished steps are kept and the session is
    ``failed`` until :func:`retry`."""
    return _ModelError(message, retryable)


def retry(retry_id: str | None = None) -> _Retry:
    """Retry the failed invocation: its failed model call runs again (the next ``model``
    step answers it); finished tools are not run again. ``retry_id`` defaults to a fresh id."""
    return _Retry(retry_id)


def conflict() -> _Conflict:
    """The next commit is refused as if another writer had landed first (the version moves,
    no newer message): the commit policy merges it (``commit_status == "merged"``)."""
    return _Conflict()


def redeliver() -> _Redeliver:
    """The previous input arrives again (same message id, answer, decision or retry id): it
    must land once — the repeat is refused (``duplicate_message``, ``already_answered``…)
    and writes nothing."""
    return _Redeliver()


class TestRun:
    """The outcome of :func:`run_test`: ``result`` (the last step's; a :class:`RunResult`, or
    through the handlers a :class:`~dormant.handlers.TurnResult`), ``results`` (every step's),
    ``session`` (as stored), ``events`` (its ledger), ``model`` (the scripted model)."""

    __test__ = False  # not a pytest class

    def __init__(self, result: Any, session: Session, results: list[Any],
                 scripted: ScriptedModel) -> None:
        self.result = result
        self.session = session
        self.results = results
        self.model = scripted

    @property
    def status(self) -> str:
        return str(self.result.status)

    @property
    def events(self) -> list[Event]:
        return self.session.events


def run_test(agent: Agent, steps: Iterable[Step], *, store: Store | None = None,
             through: Literal["run", "handlers"] = "run",
             session_id: str | None = None) -> TestRun:
    """Run the script against ``agent`` on a fresh session; return the last step's outcome.

    ``through="run"`` (default) runs each step in process and commits it through the app's
    commit policy; ``through="handlers"`` sends each step to the REST handler as its own
    request and commit. ``store`` (default: a new :class:`MemoryStore`) holds the session.
    Fault steps — :func:`model_error`, :func:`conflict`, :func:`redeliver` — and
    :func:`retry` drive what goes wrong and its recovery.
    """
    steps = list(steps)
    if through not in ("run", "handlers"):
        raise ValueError(f"through must be 'run' or 'handlers', got {through!r}")
    scripted = KitModel([s.reply if isinstance(s, _Model) else ModelFault(s.message, s.retryable)
                         for s in steps if isinstance(s, _Model | _ModelError)])
    served = replace(agent, model=scripted)
    app = App(name="test", store=store if store is not None else MemoryStore())
    sid = normalize_session_id(session_id) if session_id else mint_session_id()
    driver: Driver = (HandlerDriver if through == "handlers" else InProcessDriver)(
        app, served, sid)
    for step in steps:
        if isinstance(step, _User):
            given: dict[str, Any] = {"message": step.text}
            if step.id is not None:
                given["message_id"] = step.id
            driver.deliver(given)
        elif isinstance(step, _ToolInput):
            driver.deliver({"tools": _answer(driver.session(), step.answers)})
        elif isinstance(step, _Approval):
            driver.deliver({"approvals": _decide(driver.session(), step.decisions)})
        elif isinstance(step, _Retry):
            driver.deliver({"retry": {"retry_id": step.retry_id or new_id("retry")}})
        elif isinstance(step, _Conflict):
            driver.conflict_next = True
        elif isinstance(step, _Redeliver):
            driver.redeliver()
    scripted.assert_consumed()
    if not driver.results:
        raise ScriptError("the script has no user(...) step, so nothing ran")
    return TestRun(driver.results[-1], driver.session(), driver.results, scripted)


def _answer(session: Session, answers: dict[str, Any]) -> list[dict[str, Any]]:
    pending = session.yielded_tools
    given: list[dict[str, Any]] = []
    for key, value in answers.items():
        by_id = [p for p in pending if p.call_id == key]
        by_name = [p for p in pending if p.name == key]
        if by_id:
            target = by_id[0]
        elif len(by_name) == 1:
            target = by_name[0]
        elif by_name:
            ids = ", ".join(p.call_id for p in by_name)
            raise ScriptError(f"{key!r} yielded {len(by_name)} times; answer by call id: {ids}")
        else:
            waiting = ", ".join(f"{p.name} ({p.call_id})" for p in pending) or "nothing"
            raise ScriptError(f"tool_input for {key!r}, but the run waits on {waiting}")
        given.append({"call_id": target.call_id, "input": value})
    return given


def _decide(session: Session, decisions: dict[str, Any]) -> list[dict[str, Any]]:
    pending = session.pending_approvals
    given: list[dict[str, Any]] = []
    for key, value in decisions.items():
        matches = [p for p in pending if key in (p.approval_id, p.call_id)] or \
            [p for p in pending if p.tool == key]
        if len(matches) != 1:
            waiting = ", ".join(f"{p.tool} ({p.approval_id})" for p in pending) or "nothing"
            raise ScriptError(f"approval for {key!r} matches {len(matches)} pending requests; "
                              f"pending: {waiting}")
        decision = value if isinstance(value, dict) else {"approved": value}
        given.append({"approval_id": matches[0].approval_id, "approved": decision["approved"],
                      "reason": decision.get("reason")})
    return given


class ToolOutcome(BaseModel):
    """One settled tool call."""

    model_config = ConfigDict(frozen=True)

    call_id: str
    name: str
    result: Any = None
    error: str | None = None
    denied: bool = False


def get_tool_results(events: Iterable[Event]) -> list[ToolOutcome]:
    """Every ``tool_result`` in the ledger, in order."""
    return [ToolOutcome(call_id=e.call_id, name=e.name, result=e.result, error=e.error,
                        denied=e.denied)
            for e in events if isinstance(e, ToolResult)]


def __getattr__(name: str) -> Any:
    if name == "StoreContract":  # imports pytest: only when asked for
        from dormant.testing.store_contract import StoreContract

        return StoreContract
    raise AttributeError(f"module 'dormant.testing' has no attribute {name!r}")
