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

Sub-agents (``Agent.as_tool``) are scripted on their own: ``model(..., agent="billing")``
feeds the reply to that agent's model (a name or a path such as ``"concierge/billing"``; every
agent the script's agent reaches has its own scripted model, ``run.models`` by path), and a
step answering a pending item picks among one agent's with ``agent=``::

    run = run_test(concierge, [
        user("refund BK-1"), model(tool_calls=[ASK_BILLING]),
        model(tool_calls=[REFUND], agent="billing"),       # billing's refund waits
        approve("refund", agent="concierge/billing"),
        model("Refunded.", agent="billing"),               # billing carries on, then ends
        model("Done."),                                    # then the concierge
    ])

Hand-off targets (``handoffs=[...]``) are scripted the same way, each by its own name (a
target becomes the session's agent: ``"billing"``, its sub-agents ``"billing/ledger"``); a
:func:`model` step without ``agent=`` is always the script's agent's, whichever agent the
session has now::

    run = run_test(concierge, [
        user("I need a refund"),
        model(tool_calls=[{"name": "transfer_to_billing", "args": {}}]),
        model("Billing here: which invoice?", agent="billing"),   # the same turn goes on
        user("INV-7"),                                            # billing has the session
        model(tool_calls=[{"name": "transfer_to_concierge", "args": {}}], agent="billing"),
        model("Anything else?"),                                  # the concierge again
    ])

Delegates (``Agent.as_delegate``) too, each by its own name (it is its child session's agent).
The child runs after the parent's commit, in the same request (as the executor does without a
hand-on), and its end resumes the parent there too: the step's result is the parent's parked
turn (``yielded_tool``), ``run.session`` shows where it went, ``run.children`` the child
sessions. A step answering a delegate (``approve("book", agent="researcher")``) goes to its
child session that waits; its result is the child's request's::

    run = run_test(concierge, [
        user("research flights to Oslo"),
        model(tool_calls=[{"name": "research", "args": {"input": "flights to Oslo"}}]),
        model("Three flights found: ...", agent="researcher"),   # the child's reply
        model("The researcher found three flights."),            # the parent resumes
    ])

:class:`StoreContract` (``dormant.testing.store_contract``) is the store conformance suite, for
pytest; it is imported on first use, so importing this module never imports pytest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from dormant._evalset import EvalSet, ExportedSession, export_sessions, read_set, write_set
from dormant._timing import Price
from dormant.agent import Agent
from dormant.app import App
from dormant.events import Event, ToolResult
from dormant.models.scripted import ScriptedModel, ScriptError
from dormant.schedulers import RecordingScheduler
from dormant.session import Session, mint_session_id, normalize_session_id
from dormant.stores._base import Store
from dormant.stores.memory import MemoryStore
from dormant.testing._agents import agent_paths, delegated, rebuild, resolve_agent
from dormant.testing._checks import (
    CheckResult,
    judge,
    no_new_approvals,
    no_orphans,
    same_questions,
    same_status,
    same_tools,
    similar_text,
)
from dormant.testing._drivers import (
    Driver,
    HandlerDriver,
    InProcessDriver,
    KitClock,
    KitModel,
    KitStore,
    ModelFault,
)
from dormant.testing._eval import CaseResult, EvalReport, evaluate
from dormant.testing._outcomes import Orphan, ReplayDiff, TurnDiff, TurnOutcome
from dormant.testing._play import play
from dormant.testing._replay import Replay, replay
from dormant.testing.steps import (
    ModelErrorStep,
    ModelStep,
    Step,
    approval,
    approve,
    conflict,
    controls_by_agent,
    crash,
    deny,
    input,  # noqa: F401  (an alias of tool_input, kept out of __all__: it shadows a builtin)
    interrupt,
    message,
    model,
    model_error,
    pause,
    redeliver,
    respond,
    resume,
    retry,
    steer,
    stop,
    timer,
    tool_input,
    tool_result,
    user,
)

if TYPE_CHECKING:  # not in __all__ either: a star import must not import pytest
    from dormant.testing.store_contract import StoreContract as StoreContract

__all__ = [
    "CaseResult",
    "CheckResult",
    "EvalReport",
    "EvalSet",
    "ExportedSession",
    "Orphan",
    "Replay",
    "ReplayDiff",
    "ScriptError",
    "TestRun",
    "ToolOutcome",
    "TurnDiff",
    "TurnOutcome",
    "approval",
    "approve",
    "conflict",
    "crash",
    "deny",
    "evaluate",
    "export_sessions",
    "get_tool_results",
    "interrupt",
    "judge",
    "message",
    "model",
    "model_error",
    "no_new_approvals",
    "no_orphans",
    "pause",
    "read_set",
    "redeliver",
    "replay",
    "respond",
    "resume",
    "retry",
    "run_test",
    "same_questions",
    "same_status",
    "same_tools",
    "similar_text",
    "steer",
    "stop",
    "timer",
    "tool_input",
    "tool_result",
    "user",
    "write_set",
]


class TestRun:
    """The outcome of :func:`run_test`: ``result`` (the last step's; a :class:`RunResult`, or
    through the handlers a :class:`~dormant.handlers.TurnResult`), ``results`` (every step's
    that sends a request, in order), ``controls`` (the outcomes of the stops, steers and
    pauses sent while a reply streamed, normally ``accepted``), ``session`` (as stored),
    ``events`` (its ledger), ``children`` (the child sessions its delegations made, and
    theirs, as stored), ``model`` (the scripted model), ``models`` (every agent's, by
    path).

    In process, a step that runs no turn (a queued message, a pause, an interrupt…) has a
    :class:`~dormant.handlers.TurnResult` with the status a handler would answer."""

    __test__ = False  # not a pytest class

    def __init__(self, result: Any, session: Session, results: list[Any],
                 scripted: ScriptedModel, controls: list[Any] | None = None,
                 models: Mapping[str, ScriptedModel] | None = None,
                 children: list[Session] | None = None) -> None:
        self.result = result
        self.session = session
        self.results = results
        self.model = scripted
        self.controls = controls if controls is not None else []
        #: Path -> the scripted model of each agent the script reached (``model`` is the
        #: session agent's): ``run.models["concierge/billing"].requests``.
        self.models = dict(models) if models is not None else {}
        #: The child sessions the script's delegations made (``Agent.as_delegate``), then
        #: theirs, in the order they were made: ``run.children[0].events``.
        self.children = children if children is not None else []

    @property
    def status(self) -> str:
        return str(self.result.status)

    @property
    def events(self) -> list[Event]:
        return self.session.events


def run_test(agent: Agent, steps: Iterable[Step], *, store: Store | None = None,
             through: Literal["run", "handlers"] = "run",
             session_id: str | None = None,
             prices: Mapping[str, Price | Mapping[str, Any]] | None = None) -> TestRun:
    """Run the script against ``agent`` on a fresh session; return the last step's outcome.

    ``through="run"`` (default) serves each step in process, as its own request, with the
    request executor the handlers run (open, run, commit, drain), and reports the run's
    result; ``through="handlers"`` sends each step to the REST handler as its own request
    and commit (a :func:`timer` to the wake handler). ``store`` (default: a new
    :class:`MemoryStore`) holds the session; ``session_id`` names it (it may exist already
    in ``store``). ``prices``: the app's price table (``App(prices=...)``), by which the
    :func:`model` steps' ``usage`` is priced under the model name ``scripted``.

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
    models = _models(agent, steps)
    scripted = models[agent.name]
    served = rebuild(agent, lambda path, each: replace(each, model=models[path]))
    kit_store = KitStore(store if store is not None else MemoryStore())
    # the kit delivers timers itself (the ``timer`` step): it is the app's scheduler
    app = App(name="test", store=kit_store, clock=KitClock(), scheduler=RecordingScheduler(),
              prices=prices)
    sid = normalize_session_id(session_id) if session_id else mint_session_id()
    driver: Driver = (HandlerDriver if through == "handlers" else InProcessDriver)(
        app, served, sid)
    try:
        play(driver, steps)
    finally:
        kit_store.close_reads()
    if driver.problems:
        raise ScriptError("; ".join(driver.problems))
    for each in models.values():
        each.assert_consumed()
    if not driver.results:
        raise ScriptError("the script has no user(...) step, so nothing ran")
    return TestRun(driver.results[-1], driver.session(), driver.results, scripted,
                   driver.controls, models, driver.children())


def _models(agent: Agent, steps: list[Step]) -> dict[str, KitModel]:
    """Path -> the scripted model of each agent the script's agent reaches (its sub-agents,
    its hand-off targets and theirs), fed by the ``model`` / ``model_error`` steps naming it
    (no ``agent=``: the script's agent). An agent with no step gets an empty script: a call
    of its model fails the run, naming it."""
    paths = agent_paths(agent)
    delegates = delegated(agent)
    owners: dict[int, str] = {}
    for step in steps:
        if isinstance(step, ModelStep | ModelErrorStep):
            what = "model(...)" if isinstance(step, ModelStep) else "model_error(...)"
            owners[id(step)] = (agent.name if step.agent is None
                                else resolve_agent(paths, step.agent, what, delegates))
    controls = controls_by_agent(steps, lambda step: owners[id(step)])
    return {path: KitModel([s.reply if isinstance(s, ModelStep)
                            else ModelFault(s.message, s.retryable)
                            for s in steps if isinstance(s, ModelStep | ModelErrorStep)
                            and owners[id(s)] == path],
                           controls.get(path), agent=None if path == agent.name else path)
            for path in paths}


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
