"""The test kit: script a conversation, run it, read what happened.

``run_test(agent, [user(...), model(...), tool_input({...}), model(...)])`` serves the agent
with a :class:`ScriptedModel` fed by the ``model`` steps, on a fresh session, committing after
every run exactly as a handler would. It raises if the script and the run disagree.

Steps:

- inputs: :func:`user` / :func:`message` (a user message; to a session that waits it lands in
  the inbox, ``if_busy="reject"`` refuses it instead), :func:`tool_input`, :func:`approval`
  (or :func:`approve` / :func:`deny`: decide what waits for approval),
  :func:`tool_result` (a deferred call's result, as trusted code supplies it),
  :func:`respond` (an input request), :func:`timer` (a pending timer fires now);
- the model: :func:`model` (one reply), :func:`model_error` (the call fails);
- turn control: :func:`stop`, :func:`steer` and ``pause(after=N)`` act on the *next* model
  reply while it streams — each is sent as its own request for the running invocation, through
  the session's control record the turn polls; :func:`pause` (between steps), :func:`resume`,
  :func:`interrupt`;
- faults and recovery: :func:`retry`, :func:`conflict`, :func:`redeliver`, :func:`crash`.

A script that stops, steers or pauses a turn::

    run = run_test(agent, [
        user("tell me about my stay"),
        steer("just the nights, please", after=2),
        model("Let me look that up"),       # the steer is sent after "Let me "
        model("Three nights."),             # the step the steer causes
    ])
    run = run_test(agent, [user("hi"), stop(after=3, seen=2), model("one two three four")])
    assert run.status == "stopped" and run.events[-1].status == "stopped"

A script whose process dies between a claim and its commit, and the next request that takes
the stranded invocation over::

    run = run_test(agent, [
        user("close T-7", id="m-1"), model(tool_calls=[CLOSE]),   # waits for an approval
        crash(),
        approval({"close_ticket": True}),   # claimed, the tool runs, then the process dies
        message("thanks", id="m-2"),        # queued; this request takes the invocation over:
        model("Closed T-7."),               # the tool runs again (same call id), the step ends
        model("You're welcome."),           # then the inbox drains: m-2 runs
    ])
    assert run.results[1].code == "crashed"

A script that decides approvals (``approve()`` approves every pending request, ``approve("refund")``
the one for that tool, ``approve(approval_id)`` that one; ``deny`` is the same with a
``reason`` the model reads; a step with nothing to decide fails, naming what is pending)::

    run = run_test(agent, [user("refund A-1042"), model(tool_calls=[REFUND]),
                           deny("refund", reason="too large"),
                           model("Sorry, I can't refund that.")])
    assert get_tool_results(run.events)[0].denied

:class:`StoreContract` (``dormant.testing.store_contract``) is the store conformance suite, for
pytest; it is imported on first use, so importing this module never imports pytest.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from dormant._ids import new_id
from dormant._inputs import IfBusy
from dormant.agent import Agent
from dormant.app import App
from dormant.events import Event, ToolResult
from dormant.models.scripted import ScriptedModel, ScriptError, arg_pieces
from dormant.schedulers import RecordingScheduler
from dormant.session import Session, mint_session_id, normalize_session_id
from dormant.stores._base import Store
from dormant.stores.memory import MemoryStore
from dormant.testing._drivers import (
    Control,
    Driver,
    HandlerDriver,
    InProcessDriver,
    KitClock,
    KitModel,
    KitStore,
    ModelFault,
)

if TYPE_CHECKING:  # not in __all__ either: a star import must not import pytest
    from dormant.testing.store_contract import StoreContract as StoreContract

__all__ = [
    "ScriptError",
    "TestRun",
    "ToolOutcome",
    "approval",
    "approve",
    "conflict",
    "crash",
    "deny",
    "get_tool_results",
    "interrupt",
    "message",
    "model",
    "model_error",
    "pause",
    "redeliver",
    "respond",
    "resume",
    "retry",
    "run_test",
    "steer",
    "stop",
    "timer",
    "tool_input",
    "tool_result",
    "user",
]


@dataclass(frozen=True)
class _User:
    text: str
    id: str | None = None
    if_busy: IfBusy | None = None


@dataclass(frozen=True)
class _Model:
    reply: str | dict[str, Any]


@dataclass(frozen=True)
class _ToolInput:
    answers: dict[str, Any]


@dataclass(frozen=True)
class _ToolResult:
    call: str
    result: Any
    is_error: bool


@dataclass(frozen=True)
class _Approval:
    #: Decisions keyed by tool name, call id or approval id; the key ``None`` decides every
    #: pending request (``approve()`` / ``deny()`` with no name).
    decisions: dict[str | None, Any]


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


@dataclass(frozen=True)
class _Crash:
    pass


@dataclass(frozen=True)
class _Pause:
    pass


@dataclass(frozen=True)
class _Resume:
    pass


@dataclass(frozen=True)
class _Interrupt:
    owner: str | None


@dataclass(frozen=True)
class _Respond:
    input_id: str
    value: Any


@dataclass(frozen=True)
class _Timer:
    name: str


#: The pieces :class:`ScriptedModel` streams a reply's text in (a word and the space after it):
#: what ``after=`` counts.
_PIECES = re.compile(r"\S+\s*|\s+")

Step = (_User | _Model | _ToolInput | _ToolResult | _Approval | _ModelError | _Retry | _Conflict
        | _Redeliver | _Crash | Control | _Pause | _Resume | _Interrupt | _Respond | _Timer)


def user(text: str, *, id: str | None = None) -> _User:
    """A user message (or the message that resumes a ``yields=True`` agent). To a session
    that waits (on a yield, an approval, an input request), failed or is paused, it lands in
    the inbox (status ``queued``) and runs once the session is free — as :func:`message`."""
    return _User(text, id)


def message(text: str, *, id: str | None = None,
            if_busy: IfBusy | None = None) -> _User:
    """A user message sent while the session may be waiting: it runs at once when the session
    is free, else lands in the inbox (``session.inbox``; the step's result has status
    ``queued``) and runs after the session frees up (the inbox drains after the step that
    frees it; script a ``model`` reply for it). ``if_busy="reject"`` makes the refusal the
    step's result instead (``pending_input``, ``session_failed``, ``session_paused``);
    ``"interrupt"`` ends the waiting response and runs this message."""
    return _User(text, id, if_busy)


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


def tool_result(call: str, result: Any = None, *, is_error: bool = False) -> _ToolResult:
    """The result of a deferred call (``app.tool(..., deferred=True)``), as trusted server
    code supplies it: ``call`` is the tool's name or the call id (by id when the tool was
    called twice in a step). ``is_error``: ``result`` is an error the model reads. The
    parked turn resumes once every call of its step is settled: script the ``model`` reply
    that follows."""
    return _ToolResult(call, result, is_error)


#: The seeds call this step ``input(...)``; importing it by that name shadows the builtin only
#: where you ask for it (``from dormant.testing import input``).
input = tool_input


def approval(decisions: dict[str, bool | dict[str, Any]]) -> _Approval:
    """Decisions on pending approval requests, keyed by tool name, call id or approval id:
    ``True`` / ``False``, or ``{"approved": False, "reason": "not today"}``."""
    keyed: dict[str | None, Any] = {key: value for key, value in decisions.items()}
    return _Approval(keyed)


def approve(name: str | None = None, *, reason: str | None = None) -> _Approval:
    """Approve what waits for approval: every pending request (no ``name``), or the one
    ``name`` names (a tool name, call id or approval id). The tool then runs; script the
    :func:`model` reply that follows. With nothing pending (or nothing ``name`` names) the
    run fails with a :class:`ScriptError` that lists what is pending."""
    return _Approval({name: {"approved": True, "reason": reason}})


def deny(name: str | None = None, *, reason: str | None = None) -> _Approval:
    """Deny what waits for approval (as :func:`approve` picks it): the tool never runs, and
    the model reads the denial (with ``reason``) as the call's result."""
    return _Approval({name: {"approved": False, "reason": reason}})


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


def crash() -> _Crash:
    """The next delivery's process dies (a ``kill -9``) after its claim committed and before
    its turn commits. The point it dies at is its first model call, just before the model is
    asked: what the claim committed stays (a decision, an answer, a retry, the start of a
    queued message), a tool the claim let run has already run, and nothing the turn did
    after the claim is committed. The step's result is an error with code ``crashed``.

    Its claim's lease then runs out (the kit's clock moves past it): the next step — any
    delivery, e.g. a :func:`message`, which is queued — finds the invocation stranded, takes
    it over in the same request and drains the inbox. The takeover re-runs the unfinished
    step under the same call ids (a tool that ran before the crash runs again with the same
    ``ctx.call_id``, its idempotency key; its result lands in the ledger once), so script the
    :func:`model` replies the takeover needs, then those of the queued messages.

    A delivery that claims nothing (a fresh message: its turn writes nothing until it ends)
    dies having written nothing: the message is lost (:func:`redeliver` sends it again). A
    next delivery that calls no model is a :class:`ScriptError`."""
    return _Crash()


def stop(*, after: int = 0, seen: int | None = None) -> Control:
    """Stop the *next* model reply once it streamed ``after`` pieces (words): a stop for the
    running invocation is sent as its own request (``{"stop": {"invocation_id": ...,
    "seen": ...}}``) while the reply streams, and the reply waits (up to 5 s) until the turn
    took it from the session's control record. The turn ends ``stopped``; the reply keeps its
    first ``seen`` pieces (None: all it streamed). The pieces of a tool call scripted with
    ``"stream_args": True`` count after the words: a stop among them leaves the call a
    ``tool_call_draft`` in the ledger, out of the conversation.

    Through the handlers, ``seen`` needs the stopped turn to be the step's own (not one the
    inbox or a timer ran)."""
    _count("stop", after)
    if seen is not None:
        _count("stop: seen", seen)
        if seen > after:
            raise ScriptError(f"stop(after={after}, seen={seen}): the client cannot have seen "
                              "more pieces than the reply streamed")
    return Control("stop", after, seen=seen)


def steer(text: str, *, after: int = 0, id: str | None = None) -> Control:
    """Steer the running invocation: sent as its own request once the *next* model reply
    streamed ``after`` pieces; it joins at the next step boundary (a ``steer`` and a
    ``user`` event with ``steer=True`` inside the invocation), so script one more
    :func:`model` reply for the step it causes."""
    _count("steer", after)
    if not text:
        raise ScriptError("steer(...) needs a text")
    return Control("steer", after, text=text, id=id)


def pause(*, after: int | None = None) -> _Pause | Control:
    """Pause the session. ``after=None``: a pause request between steps (no turn runs; the
    next request takes it up, messages queue until :func:`resume`). ``after=N``: a pause sent
    while the *next* model reply streams, after ``N`` pieces: the turn stops at its next step
    boundary with status ``paused`` (after a reply with no tool calls the invocation ends
    first, and the session is paused after it)."""
    if after is None:
        return _Pause()
    _count("pause", after)
    return Control("pause", after)


def resume() -> _Resume:
    """Resume a paused session: an invocation paused between steps carries on (script its
    next :func:`model` reply), then the inbox drains."""
    return _Resume()


def interrupt(owner: str | None = None) -> _Interrupt:
    """Interrupt what the session waits on: ``owner`` names it (a pending call, approval or
    input id, or the failed invocation id); by default the first pending yielded call or
    approval, else the first input request, else the failed invocation."""
    return _Interrupt(owner)


def respond(input_id: str, value: Any) -> _Respond:
    """Answer the input request ``input_id`` (``session.request_input``) with ``value``."""
    return _Respond(input_id, value)


def timer(name: str) -> _Timer:
    """The session's pending timer ``name`` fires now: its delivery goes through the wake
    path (``app.handler.wake`` through the handlers). A name not pending is a
    :class:`ScriptError` that says what is pending."""
    return _Timer(name)


def _count(what: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ScriptError(f"{what}: expected a count of pieces >= 0, got {value!r}")


def redeliver() -> _Redeliver:
    """The previous input arrives again (same message id, answer, decision or retry id): it
    must land once — the repeat is refused (``duplicate_message``, ``already_answered``…)
    and writes nothing."""
    return _Redeliver()


class TestRun:
    """The outcome of :func:`run_test`: ``result`` (the last step's; a :class:`RunResult`, or
    through the handlers a :class:`~dormant.handlers.TurnResult`), ``results`` (every step's
    that sends a request, in order), ``controls`` (the outcomes of the stops, steers and
    pauses sent while a reply streamed, normally ``accepted``), ``session`` (as stored),
    ``events`` (its ledger), ``model`` (the scripted model).

    In process, a step that runs no turn (a queued message, a pause, an interrupt…) has a
    :class:`~dormant.handlers.TurnResult` with the status a handler would answer."""

    __test__ = False  # not a pytest class

    def __init__(self, result: Any, session: Session, results: list[Any],
                 scripted: ScriptedModel, controls: list[Any] | None = None) -> None:
        self.result = result
        self.session = session
        self.results = results
        self.model = scripted
        self.controls = controls if controls is not None else []

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

    ``through="run"`` (default) runs each step in process (the run loop and
    ``session.input``) and commits it through the app's commit policy; ``through="handlers"``
    sends each step to the REST handler as its own request and commit (a :func:`timer` to the
    wake handler). ``store`` (default: a new :class:`MemoryStore`) holds the session;
    ``session_id`` names it (it may exist already in ``store``).

    Steps: :func:`user` / :func:`message`, :func:`model`, :func:`tool_input`,
    :func:`tool_result`, :func:`approval` (:func:`approve`, :func:`deny`), :func:`respond`,
    :func:`timer`; turn control —
    :func:`stop`, :func:`steer` and ``pause(after=N)`` act on the next :func:`model` reply
    while it streams (sent as their own requests through the session's control record, which
    the turns the kit runs poll every 0.02 s), :func:`pause`, :func:`resume`, :func:`interrupt` are
    requests between steps; fault steps — :func:`model_error`, :func:`conflict`,
    :func:`redeliver`, :func:`crash` — and :func:`retry` drive what goes wrong and its
    recovery. The app runs on a clock the kit controls (real time until a :func:`crash`
    moves it past the dead request's lease).

    Every step that sends a request adds its outcome to ``results``; a message to a session
    that waits gets ``queued`` and runs once the session is free (the inbox drains after the
    step that frees it: script a :func:`model` reply for each queued message). The outcomes
    of stops, steers and pauses sent mid-reply go to ``controls``; one the running turn does
    not take (refused, or not seen within 5 s) fails the script with a :class:`ScriptError`
    saying why.
    """
    steps = list(steps)
    if through not in ("run", "handlers"):
        raise ValueError(f"through must be 'run' or 'handlers', got {through!r}")
    scripted = KitModel([s.reply if isinstance(s, _Model) else ModelFault(s.message, s.retryable)
                         for s in steps if isinstance(s, _Model | _ModelError)],
                        _controls_by_reply(steps))
    served = replace(agent, model=scripted)
    kit_store = KitStore(store if store is not None else MemoryStore())
    # the kit delivers timers itself (the ``timer`` step): it is the app's scheduler
    app = App(name="test", store=kit_store, clock=KitClock(), scheduler=RecordingScheduler())
    sid = normalize_session_id(session_id) if session_id else mint_session_id()
    driver: Driver = (HandlerDriver if through == "handlers" else InProcessDriver)(
        app, served, sid)
    try:
        _play(driver, steps)
    finally:
        kit_store.close_reads()
    if driver.problems:
        raise ScriptError("; ".join(driver.problems))
    scripted.assert_consumed()
    if not driver.results:
        raise ScriptError("the script has no user(...) step, so nothing ran")
    return TestRun(driver.results[-1], driver.session(), driver.results, scripted,
                   driver.controls)


def _play(driver: Driver, steps: list[Step]) -> None:
    for step in steps:
        if isinstance(step, _User):
            # The id is minted here so a redelivery resends it, wherever the message went.
            given: dict[str, Any] = {"message": step.text,
                                     "message_id": step.id or new_id("msg")}
            if step.if_busy is not None:
                given["if_busy"] = step.if_busy
            driver.deliver(given)
        elif isinstance(step, _ToolInput):
            driver.deliver({"tools": _answer(driver.session(), step.answers)})
        elif isinstance(step, _ToolResult):
            driver.deliver({"tool_results": [{"call_id": _deferred(driver.session(), step.call),
                                              "result": step.result,
                                              "is_error": step.is_error}]})
        elif isinstance(step, _Approval):
            driver.deliver({"approvals": _decide(driver.session(), step.decisions)})
        elif isinstance(step, _Retry):
            driver.deliver({"retry": {"retry_id": step.retry_id or new_id("retry")}})
        elif isinstance(step, _Conflict):
            driver.conflict_next = True
        elif isinstance(step, _Crash):
            driver.crash_next = True
        elif isinstance(step, _Redeliver):
            driver.redeliver()
        elif isinstance(step, _Pause):
            driver.deliver({"pause": True})
        elif isinstance(step, _Resume):
            driver.deliver({"resume": True})
        elif isinstance(step, _Interrupt):
            owner = step.owner or _waited_on(driver.session())
            driver.deliver({"interrupt": {"owner": owner}})
        elif isinstance(step, _Respond):
            driver.deliver({"inputs": [{"input_id": step.input_id, "value": step.value}]})
        elif isinstance(step, _Timer):
            driver.timer(step.name)


def _controls_by_reply(steps: list[Step]) -> dict[int, list[Control]]:
    """Model-call position -> the stops, steers and pauses sent while that reply streams
    (each acts on the next ``model`` step after it)."""
    by_reply: dict[int, list[Control]] = {}
    waiting: list[Control] = []
    position = 0
    for step in steps:
        if isinstance(step, Control):
            waiting.append(step)
        elif isinstance(step, _ModelError):
            if waiting:
                raise ScriptError(f"{waiting[0].describe()} acts on the next model(...) reply, "
                                  "but the next model call is a model_error(...)")
            position += 1
        elif isinstance(step, _Model):
            reply: dict[str, Any] = (step.reply if isinstance(step.reply, dict)
                                     else {"text": step.reply})
            calls: list[dict[str, Any]] = reply.get("tool_calls") or []
            pieces = len(_PIECES.findall(reply.get("text") or "")) + sum(
                arg_pieces(call) for call in calls)
            for control in waiting:
                if control.after > pieces:
                    raise ScriptError(f"{control.describe()}: the next reply streams only "
                                      f"{pieces} pieces")
            if waiting:
                by_reply[position] = waiting
                waiting = []
            position += 1
    if waiting:
        raise ScriptError(f"{waiting[0].describe()} needs a model(...) reply after it to act on")
    return by_reply


def _waited_on(session: Session) -> str:
    """What ``interrupt()`` ends by default: the first pending call or approval, else the
    first input request, else the failed invocation."""
    head = session.head
    for call in head.unresolved():
        return call.approval_id or call.call_id
    for item in head.inputs:
        return str(item["input_id"])
    if head.failed and head.open_invocation is not None:
        return head.open_invocation
    raise ScriptError("interrupt(): the session waits on nothing (no pending call, approval, "
                      "input request or failed invocation); name the owner")


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


def _deferred(session: Session, key: str) -> str:
    """The call id of the waiting deferred call ``key`` names (by id or by tool name); a key
    that names none is passed on as it is (the request refuses it, as production would)."""
    pending = session.deferred_tools
    by_name = [p for p in pending if p.name == key]
    if any(p.call_id == key for p in pending) or not by_name:
        return key
    if len(by_name) > 1:
        ids = ", ".join(p.call_id for p in by_name)
        raise ScriptError(f"{key!r} was called {len(by_name)} times; give the result by "
                          f"call id: {ids}")
    return by_name[0].call_id


def _decide(session: Session, decisions: dict[str | None, Any]) -> list[dict[str, Any]]:
    """The wire decisions (``approvals``) for ``decisions``: each key names one pending
    request (approval id, call id, else tool name); ``None`` names every pending one."""
    pending = session.pending_approvals
    given: list[dict[str, Any]] = []
    for key, value in decisions.items():
        if key is None:
            matches = list(pending)
        else:
            matches = [p for p in pending if key in (p.approval_id, p.call_id)] or \
                [p for p in pending if p.tool == key]
        if not matches or (key is not None and len(matches) != 1):
            waiting = ", ".join(f"{p.tool} ({p.approval_id})" for p in pending) or "nothing"
            what = ("a decision on every pending approval" if key is None
                    else f"approval for {key!r}")
            raise ScriptError(f"{what} matches {len(matches)} pending requests; "
                              f"pending: {waiting}")
        decision = value if isinstance(value, dict) else {"approved": value}
        given.extend({"approval_id": match.approval_id, "approved": decision["approved"],
                      "reason": decision.get("reason")} for match in matches)
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
