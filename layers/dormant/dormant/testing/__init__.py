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
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from dormant._runtime import TurnInput, run_turn
from dormant.agent import Agent
from dormant.events import Event, ToolResult
from dormant.models.scripted import ScriptedModel, ScriptError
from dormant.results import RunResult
from dormant.session import Session, mint_session_id
from dormant.stores.memory import MemoryStore

if TYPE_CHECKING:  # not in __all__ either: a star import must not import pytest
    from dormant.testing.store_contract import StoreContract as StoreContract

__all__ = [
    "ScriptError",
    "TestRun",
    "ToolOutcome",
    "approval",
    "get_tool_results",
    "model",
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


Step = _User | _Model | _ToolInput | _Approval


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


class TestRun:
    """The outcome of :func:`run_test`."""

    __test__ = False  # not a pytest class

    def __init__(self, result: RunResult, session: Session, results: list[RunResult],
                 scripted: ScriptedModel) -> None:
        self.result = result
        self.session = session
        self.results = results
        self.model = scripted

    @property
    def status(self) -> str:
        return self.result.status

    @property
    def events(self) -> list[Event]:
        return self.session.events


def run_test(agent: Agent, steps: Iterable[Step]) -> TestRun:
    """Run the script against ``agent`` on a fresh session; return the last run's outcome."""
    steps = list(steps)
    scripted = ScriptedModel([s.reply for s in steps if isinstance(s, _Model)])
    served = replace(agent, model=scripted)
    store = MemoryStore()
    session = Session.new(mint_session_id())
    results: list[RunResult] = []

    def run(turn: TurnInput) -> None:
        nonlocal session
        stream = run_turn(served, session, turn)
        while True:
            try:
                next(stream)
            except StopIteration as stop:
                result: RunResult = stop.value
                break
        results.append(result)
        outcome = store.append(session.head, session.new_events, expected_version=session.version)
        assert outcome.ok and outcome.version is not None
        session.mark_committed(outcome.version)

    for step in steps:
        if isinstance(step, _User):
            run(TurnInput(message=step.text, message_id=step.id))
        elif isinstance(step, _ToolInput):
            _answer(session, step.answers)
            run(TurnInput())
        elif isinstance(step, _Approval):
            _decide(session, step.decisions)
            run(TurnInput())
    scripted.assert_consumed()
    if not results:
        raise ScriptError("the script has no user(...) step, so nothing ran")
    return TestRun(results[-1], session, results, scripted)


def _answer(session: Session, answers: dict[str, Any]) -> None:
    pending = session.yielded_tools
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
        session.input.tool(call_id=target.call_id, input=value)


def _decide(session: Session, decisions: dict[str, Any]) -> None:
    pending = session.pending_approvals
    for key, value in decisions.items():
        matches = [p for p in pending if key in (p.approval_id, p.call_id)] or \
            [p for p in pending if p.tool == key]
        if len(matches) != 1:
            waiting = ", ".join(f"{p.tool} ({p.approval_id})" for p in pending) or "nothing"
            raise ScriptError(f"approval for {key!r} matches {len(matches)} pending requests; "
                              f"pending: {waiting}")
        decision = value if isinstance(value, dict) else {"approved": value}
        session.input.approval(matches[0].approval_id, approved=decision["approved"],
                               reason=decision.get("reason"))


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
