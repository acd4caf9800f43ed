"""Replay a recorded session against an agent: :func:`replay`.

A ledger holds every input that came from outside the turns — messages, answers, approvals and
denials, input answers, deferred results, app events, timer deliveries, seeds, turn control
sent while no turn ran — in the order they came (:func:`outside_inputs`). A replay sends each
again, as its own request, through the request executor the handlers run (the kit's
:class:`InProcessDriver`), on a fresh in-memory store, to the agent given, and records what
each one set off.

The new agent need not call the same tools with the same ids, so an input that names a call
(an answer, a decision, a deferred result, a timer named after a call) is matched by position:
the n-th call of that tool by that agent in the recording is the n-th in the replay. An input
whose call the replay never made, or made but does not wait on, is an :class:`Orphan`:
reported, never guessed at. Tools run as the caller chooses (``tools="recorded"`` plays the
recorded results back by the same positions; ``"real"`` runs them; ``fakes`` replaces one by
name) and the model is the agent's own, one given, or the recorded replies.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import BaseModel

from dormant.agent import Agent
from dormant.app import App
from dormant.errors import MODEL_ERROR_CODES
from dormant.events import (
    AppEvent,
    ApprovalDecided,
    ApprovalRequested,
    AssistantEvent,
    Event,
    HandoffEvent,
    InputRequested,
    InputResponse,
    InterruptEvent,
    InvocationFailed,
    InvocationStart,
    PauseEvent,
    QueuedEvent,
    ReasoningEvent,
    ResumeEvent,
    RetryEvent,
    SeedEvent,
    StopRequested,
    TimerFired,
    TimerSet,
    ToolCall,
    ToolDeferred,
    ToolInput,
    ToolResult,
    UserEvent,
    load_events,
    load_ledger,
)
from dormant.models._base import Model, ModelChunk, ModelError, ModelRequest
from dormant.models.scripted import ScriptedModel
from dormant.results import ErrorResult
from dormant.schedulers import RecordingScheduler
from dormant.session import Session, mint_session_id, normalize_session_id
from dormant.stores._base import Store
from dormant.stores.memory import MemoryStore
from dormant.testing._agents import agent_paths, rebuild, resolve_agent
from dormant.testing._drivers import InProcessDriver, KitClock, KitStore
from dormant.testing._outcomes import (
    OPENS,
    SETTLES,
    Orphan,
    ReplayDiff,
    TurnOutcome,
    compare,
    outcome,
)
from dormant.tools import Signal, Tool, ToolContext

__all__ = ["Recorded", "Replay", "outside_inputs", "recorded_events", "replay", "unreplayed"]

#: A call as the two ledgers can agree on it: (agent path, "" for the session's agent; tool
#: name; its position among that agent's calls of that tool).
CallKey = tuple[str, str, int]

Fake = Callable[[ToolContext], Any]
ModelChoice = Model | Literal["recorded"] | Sequence[str | dict[str, Any]] | \
    Mapping[str, Model | Sequence[str | dict[str, Any]]] | None


@dataclass(frozen=True)
class Recorded:
    """One input of the recording: the ledger event it left (at ``position``), what it is
    (``kind``: message, answer, decision, input, result, event, timer or seed) and how a
    report names it."""

    position: int
    kind: str
    event: Event
    described: str


class Replay(list[Event]):
    """The new ledger (a list of its events), with what the replay found: ``recorded`` (the
    recording's events), ``inputs`` (the recording's outside inputs, in order), ``orphans``
    (the inputs that no longer fit), ``notes`` (what else the replay could not do as
    recorded: a recorded result or model reply it ran out of), ``turns`` (what each input set
    off in the replay: None for an orphan), ``recorded_turns`` (the same of the recording),
    ``diff`` (the two side by side, turn by turn), ``session`` (the replayed session) and
    ``results`` (each delivery's outcome, as the test kit reports it)."""

    def __init__(self, events: Iterable[Event], *, recorded: list[Event],
                 inputs: list[Recorded], orphans: list[Orphan], notes: list[str],
                 turns: list[TurnOutcome | None], recorded_turns: list[TurnOutcome],
                 session: Session, results: list[Any]) -> None:
        super().__init__(events)
        self.recorded = recorded
        self.inputs = inputs
        self.orphans = orphans
        self.notes = notes
        self.turns = turns
        self.recorded_turns = recorded_turns
        self.session = session
        self.results = results
        self.diff: ReplayDiff = compare(recorded_turns, turns, orphans)

    @property
    def events(self) -> list[Event]:
        return list(self)


# --- what the recording holds -----------------------------------------------------------------


def recorded_events(source: Any) -> tuple[list[Event], str | None]:
    """The events of ``source`` and the session id it names (None if it names none): a list
    of events (or of their JSON), a :class:`Session`, a stored ledger (``{"format": 1,
    "events": [...]}``) or an exported session (anything with an ``events()`` method and a
    ``session_id``)."""
    if isinstance(source, Session):
        return list(source.events), source.session_id
    if isinstance(source, Mapping):
        return load_ledger(dict(source)), None
    events = getattr(source, "events", None)
    if callable(events):
        return list(events()), getattr(source, "session_id", None)
    if isinstance(source, Iterable) and not isinstance(source, str | bytes):
        listed = list(source)
        if all(isinstance(e, BaseModel) and isinstance(getattr(e, "type", None), str)
               for e in listed):
            return listed, None
        if all(isinstance(e, Mapping) for e in listed):  # events as JSON
            return load_events([dict(e) for e in listed]), None
    raise TypeError("replay(events_or_session, ...): expected a list of ledger events, a "
                    "Session, a stored ledger ({'format': 1, 'events': [...]}) or an exported "
                    f"session, got {type(source).__name__}")


def outside_inputs(events: Sequence[Event]) -> list[Recorded]:
    """The inputs that came from outside the turns, in the order they came. A message a timer
    delivered is the timer's, and a queued message is the one it was sent as (its later run
    is the inbox draining, not a new input); a delegated call's result comes from its child
    session's run, not from outside. Turn control sent while no turn ran (a pause, a resume,
    a stop of a waiting invocation, an interrupt) is an input; sent into a running turn, it
    is not (:func:`unreplayed` names it)."""
    return _scan(events)[0]


def unreplayed(events: Sequence[Event]) -> list[str]:
    """What a replay leaves out of ``events``, in words: turn control a person sent into a
    running turn (where it fell in that turn cannot be played back: the replay's turns run
    whole)."""
    return _scan(events)[1]


def _scan(events: Sequence[Event]) -> tuple[list[Recorded], list[str]]:
    deferred = {e.call_id for e in events if isinstance(e, ToolDeferred) and e.delegate is None}
    names = {e.call_id: e.name for e in events if isinstance(e, ToolCall)}
    timers: dict[str, TimerSet] = {}
    by_timer: set[str] = set()  # message ids and call ids a timer delivered
    queued: set[str] = set()
    found: list[Recorded] = []
    left_out: Counter[str] = Counter()
    running = paused_mid_turn = False
    for position, event in enumerate(events):
        described: str | None = None
        kind = ""
        if event.scope is None and isinstance(event, OPENS + SETTLES):
            running = isinstance(event, OPENS)
        if isinstance(event, TimerSet):
            timers[event.name] = event
        elif isinstance(event, TimerFired):
            kind, described = "timer", f"timer {event.name}"
            fired = timers.get(event.name)
            if fired is not None and fired.message_id:
                by_timer.add(fired.message_id)
            if fired is not None and fired.tool_input:
                by_timer.add(str(fired.tool_input.get("call_id")))
        elif isinstance(event, QueuedEvent):
            queued.add(event.message_id)
            if event.message_id not in by_timer:
                kind, described = "message", f"message {_quote(event.text)}"
        elif isinstance(event, UserEvent) and event.scope is None:
            if event.message_id not in by_timer and event.message_id not in queued:
                kind = "message"
                described = (f"steer {_quote(event.text)} (sent as a message)" if event.steer
                             else f"message {_quote(event.text)}")
        elif isinstance(event, ToolInput):
            if event.call_id not in by_timer:
                kind = "answer"
                described = f"answer {names.get(event.call_id, event.call_id)}"
        elif isinstance(event, ApprovalDecided):
            kind = "decision"
            verb = "approve" if event.approved else "deny"
            described = f"{verb} {names.get(_decided_call(events, event), '?')}"
        elif isinstance(event, InputResponse):
            kind, described = "input", f"input {event.input_id}"
        elif isinstance(event, ToolResult) and event.call_id in deferred \
                and not event.preliminary:
            kind, described = "result", f"result of {event.name}"
        elif isinstance(event, AppEvent):
            kind, described = "event", f"event {event.name}"
        elif isinstance(event, SeedEvent):
            kind, described = "seed", f"seed ({event.role}) {_quote(event.text)}"
        elif isinstance(event, PauseEvent):
            paused_mid_turn, running = running, False
            if paused_mid_turn:
                left_out["pause"] += 1
            else:
                kind, described = "pause", "pause"
        elif isinstance(event, ResumeEvent):
            if paused_mid_turn:
                left_out["resume of that pause"] += 1
            else:
                kind, described = "resume", "resume"
            paused_mid_turn = False
        elif isinstance(event, StopRequested):
            if running:
                left_out["stop"] += 1
            else:
                kind, described = "stop", "stop"
        elif isinstance(event, InputRequested) and event.scope is None and not running:
            kind, described = "ask", f"input request {event.input_id}"  # (trusted code's)
        elif isinstance(event, InterruptEvent):
            kind, described = "interrupt", f"interrupt {names.get(event.owner, event.owner)}"
        elif isinstance(event, RetryEvent) and event.scope is None:
            kind, described = "retry", "retry"
        if described is not None:
            found.append(Recorded(position, kind, event, described))
    notes = [f"the recording's {what} ({count}x) sent into a running turn is not replayed: "
             "where it fell cannot be played back" for what, count in left_out.items()]
    return found, notes


def _decided_call(events: Sequence[Event], decided: ApprovalDecided) -> str:
    """The call a decision is for (older ledgers name only the approval)."""
    if decided.call_id:
        return decided.call_id
    for event in events:
        if isinstance(event, ApprovalRequested) and event.approval_id == decided.approval_id:
            return event.call_id
    return ""


def _quote(text: str, most: int = 60) -> str:
    return repr(text if len(text) <= most else text[:most - 1] + "…")


def call_keys(events: Iterable[Event]) -> dict[str, CallKey]:
    """Call id -> its :data:`CallKey`, for every tool call in ``events``."""
    counts: Counter[tuple[str, str]] = Counter()
    keys: dict[str, CallKey] = {}
    for event in events:
        if isinstance(event, ToolCall) and event.call_id not in keys:
            path = event.scope.path if event.scope is not None else ""
            keys[event.call_id] = (path, event.name, counts[path, event.name])
            counts[path, event.name] += 1
    return keys


def _ordinal(key: CallKey) -> str:
    path, name, position = key
    whose = f" by {path}" if path else ""
    return f"call {position + 1} of {name}{whose}"


# --- replaying ---------------------------------------------------------------------------------


def replay(events_or_session: Any, agent: Agent, *, model: ModelChoice = None,
           tools: Literal["recorded", "real"] = "recorded",
           fakes: Mapping[str, Fake] | None = None, state: dict[str, Any] | None = None,
           store: Store | None = None, session_id: str | None = None) -> Replay:
    """Send a recorded session's outside inputs to ``agent`` again, in order, each as its own
    request through the request executor the handlers run, on a fresh in-memory store
    (``store``: another, empty of this session); return the new ledger (:class:`Replay`).

    ``events_or_session``: a list of ledger events, a :class:`Session`, a stored ledger or an
    exported session (``dormant sessions export``). ``model``: None runs each agent's own
    model; ``"recorded"`` plays each agent's recorded replies back in order (a reply the
    recording does not have fails that model call, named in ``notes``); a :class:`Model` or a
    list of scripted replies serves the session's agent; a mapping serves agents by name or
    path. ``tools``: ``"recorded"`` (default) returns each call the recorded result of the
    call at the same position (the n-th run of a tool by an agent gets the recording's n-th
    result of it; one past them fails, named in ``notes``), so nothing outside is touched;
    ``"real"`` runs the tools. ``fakes``: tool name -> a function of the
    :class:`~dormant.tools.ToolContext` run instead of that tool's ``execute``, either way.
    Tools without an ``execute`` (a question's answer is its result) and agents run as tools
    are left as they are. ``state``: the session's state before its first input.
    ``session_id``: the replay's (default: the recording's, if it names one).
    """
    recorded, recorded_sid = recorded_events(events_or_session)
    if tools not in ("recorded", "real"):
        raise ValueError(f"tools must be 'recorded' or 'real', got {tools!r}")
    inputs = outside_inputs(recorded)
    notes = unreplayed(recorded)
    models = _models(agent, agent_paths(agent), recorded, model)
    served = _served(agent, models, recorded, tools, dict(fakes or {}), notes)
    kit_store = KitStore(store if store is not None else MemoryStore())
    app = App(name="replay", store=kit_store, clock=KitClock(), scheduler=RecordingScheduler())
    sid = normalize_session_id(session_id or recorded_sid or mint_session_id())
    driver = InProcessDriver(app, served, sid)
    if state:
        app.sessions.create(sid, state=state)
    keys = call_keys(recorded)
    orphans: list[Orphan] = []
    turns: list[TurnOutcome | None] = []
    try:
        for index, given in enumerate(inputs):
            session = driver.session()
            if isinstance(given.event, InputRequested):  # trusted code's edit, not a request
                _ask(app, sid, given.event)
                turns.append(outcome(driver.session().events[len(session.events):],
                                     given.described))
                continue
            asked = _request(given, recorded, keys, session)
            if isinstance(asked, str):
                orphans.append(Orphan(index=index, input=given.described, reason=asked))
                turns.append(None)
                continue
            before = len(session.events)
            result = driver.deliver(asked)
            turn = outcome(driver.session().events[before:], given.described)
            if isinstance(result, ErrorResult):  # (a failed turn may leave no event)
                notes.append(f"input {index + 1} ({given.described}): {result.code}: "
                             f"{result.error}")
                turn = turn.model_copy(update={"status": "failed"})
            turns.append(turn)
    finally:
        kit_store.close_reads()
    notes.extend(f"agent {path}: the model was called {len(each.requests)} times, the "
                 f"recording has {len(each.replies)} of its replies"
                 for path, each in models.items()
                 if isinstance(each, _Replies) and len(each.requests) > len(each.replies))
    ends = [e.position for e in inputs[1:]] + [len(recorded)]
    recorded_turns = [outcome(recorded[given.position:end], given.described)
                      for given, end in zip(inputs, ends, strict=True)]
    final = driver.session()
    return Replay(final.events, recorded=recorded, inputs=inputs, orphans=orphans, notes=notes,
                  turns=turns, recorded_turns=recorded_turns, session=final,
                  results=driver.results)


def _request(given: Recorded, recorded: list[Event], keys: dict[str, CallKey],
             session: Session) -> dict[str, Any] | str:
    """What to send for ``given`` to the replay's ``session`` now, or why it no longer fits."""
    event = given.event
    if isinstance(event, QueuedEvent | UserEvent):
        return {"message": event.text, "message_id": event.message_id}
    if isinstance(event, SeedEvent):
        return {"seed": {"text": event.text, "role": event.role, "id": event.message_id}}
    if isinstance(event, AppEvent):
        return {"events": [{"name": event.name, "data": event.data, "id": event.event_id}]}
    if isinstance(event, InputResponse):
        if event.input_id not in {p.input_id for p in session.pending_inputs}:
            return f"no input request {event.input_id!r} waits in the replay"
        return {"inputs": [{"input_id": event.input_id, "value": event.value}]}
    if isinstance(event, TimerFired):
        return _timer(event, keys, session)
    if isinstance(event, PauseEvent):
        return {"pause": True}
    if isinstance(event, ResumeEvent):
        return {"resume": True} if session.head.paused or session.pause_pending \
            else "the replay's session is not paused"
    if isinstance(event, StopRequested):
        open_invocation = session.head.open_invocation
        if open_invocation is None or session.head.failed:
            return "no invocation waits in the replay"
        return {"stop": {"invocation_id": open_invocation}}
    if isinstance(event, InterruptEvent):
        return _interrupt(event, recorded, keys, session)
    if isinstance(event, RetryEvent):
        return {"retry": {"retry_id": event.retry_id}} if session.head.failed \
            else "the replay's turn did not fail: there is nothing to retry"
    call = _decided_call(recorded, event) if isinstance(event, ApprovalDecided) \
        else getattr(event, "call_id", "")
    key = keys.get(call)
    if key is None:
        return f"the recording has no call {call!r} for it to answer"
    mine = {k: cid for cid, k in call_keys(session.events).items()}.get(key)
    if mine is None:
        return f"the replay never made the recording's {_ordinal(key)}"
    if isinstance(event, ToolInput):
        if mine not in {y.call_id for y in session.yielded_tools}:
            return f"the replay's {_ordinal(key)} does not wait for an answer"
        return {"tools": [{"call_id": mine, "input": event.input}]}
    if isinstance(event, ApprovalDecided):
        waiting = [a for a in session.pending_approvals if a.call_id == mine]
        if not waiting:
            return f"the replay's {_ordinal(key)} does not wait for an approval"
        return {"approvals": [{"approval_id": waiting[0].approval_id,
                               "approved": event.approved, "reason": event.reason}]}
    assert isinstance(event, ToolResult)
    if mine not in {d.call_id for d in session.deferred_tools}:
        return f"the replay's {_ordinal(key)} does not wait for a result"
    failed = event.error is not None
    return {"tool_results": [{"call_id": mine, "result": event.error if failed else event.result,
                              "is_error": failed}]}


def _ask(app: App, session_id: str, asked: InputRequested) -> None:
    """Ask for input as the recording's trusted code did, outside any turn."""
    session = app.sessions.get(session_id) or app.sessions.create(session_id)
    session.request_input(asked.input_id, asked.input_schema, asked.prompt)
    app.sessions.commit(session)


def _interrupt(interrupt: InterruptEvent, recorded: list[Event], keys: dict[str, CallKey],
               session: Session) -> dict[str, Any] | str:
    """The replay's item that stands for what ``interrupt`` ended: a waiting call or its
    approval (the call at the same position), an input request (its id), or the failed
    invocation."""
    owner = interrupt.owner
    asked = {e.approval_id: e.call_id for e in recorded if isinstance(e, ApprovalRequested)}
    call = asked.get(owner, owner)
    head = session.head
    if call in keys:
        mine = {k: cid for cid, k in call_keys(session.events).items()}.get(keys[call])
        if mine is None:
            return f"the replay never made the recording's {_ordinal(keys[call])}"
        if owner in asked:
            waiting = [a.approval_id for a in session.pending_approvals if a.call_id == mine]
            return {"interrupt": {"owner": waiting[0]}} if waiting else \
                f"the replay's {_ordinal(keys[call])} does not wait for an approval"
        pending = {y.call_id for y in (*session.yielded_tools, *session.deferred_tools)}
        return {"interrupt": {"owner": mine}} if mine in pending else \
            f"the replay's {_ordinal(keys[call])} does not wait"
    if owner in {p.input_id for p in session.pending_inputs}:
        return {"interrupt": {"owner": owner}}
    if head.failed and head.open_invocation is not None:
        return {"interrupt": {"owner": head.open_invocation}}
    return f"nothing the replay waits on stands for {owner!r}"


def _timer(fired: TimerFired, keys: dict[str, CallKey], session: Session) -> dict[str, Any] | str:
    """The replay's timer that stands for the recording's ``fired``: of the same name once
    the recorded call ids in it are the replay's calls at the same positions."""
    mine = {k: cid for cid, k in call_keys(session.events).items()}
    name = fired.name
    for recorded_id in sorted(keys, key=len, reverse=True):
        if recorded_id in name and keys[recorded_id] in mine:
            name = name.replace(recorded_id, mine[keys[recorded_id]])
    pending = [t for t in session.timers if t.name == name]
    if not pending:
        waiting = ", ".join(t.name for t in session.timers) or "none"
        return f"no timer {name!r} is pending in the replay (pending: {waiting})"
    timer = pending[0]
    given: dict[str, Any] = {"timer": {"name": timer.name, "fire_at": timer.fire_at}}
    if timer.message is not None:
        given["message"], given["message_id"] = timer.message, timer.message_id
    if timer.tool_input:
        given["tools"] = [{"call_id": str(timer.tool_input["call_id"]),
                           "input": timer.tool_input.get("input")}]
    return given


# --- what the replay runs ----------------------------------------------------------------------


def _served(agent: Agent, models: dict[str, Model], recorded: list[Event], tools: str,
            fakes: dict[str, Fake], notes: list[str]) -> Agent:
    """``agent`` and the agents it reaches, with the models and tools the replay runs."""
    paths = agent_paths(agent)
    played = _RecordedTools(recorded, notes) if tools == "recorded" else None
    unknown = sorted(set(fakes) - {name for each in paths.values() for name in each.tools})
    if unknown:
        raise ValueError(f"fakes name tools no agent here has: {', '.join(unknown)}")

    def change(path: str, each: Agent) -> Agent:
        scope = path if "/" in path else ""  # a root's events carry no scope
        swapped = {name: _swap(tool, scope, played, fakes) for name, tool in each.tools.items()}
        if path in models:
            return replace(each, model=models[path], tools=swapped)
        return replace(each, tools=swapped)

    return rebuild(agent, change)


def _swap(tool: Tool, scope: str, played: _RecordedTools | None,
          fakes: dict[str, Fake]) -> Tool:
    if tool.agent is not None or tool.delegate is not None or tool.execute is None:
        return tool
    if tool.name in fakes:
        return replace(tool, execute=fakes[tool.name])
    if played is not None:
        return replace(tool, execute=played.runner(scope, tool.name))
    return tool


def _models(agent: Agent, paths: Mapping[str, Agent], recorded: list[Event],
            model: ModelChoice) -> dict[str, Model]:
    if model is None:
        return {}
    if isinstance(model, str):
        if model != "recorded":
            raise ValueError(f"model: 'recorded', a Model, replies or a mapping; got {model!r}")
        replies = recorded_replies(recorded)
        entry = next((e.agent for e in recorded if isinstance(e, InvocationStart)
                      and e.scope is None and e.agent), agent.name)
        if entry != agent.name and agent.name not in replies:  # (recorded under another name)
            replies[agent.name] = replies.pop(entry, [])
        return {path: _Replies(replies.get(path, []), path) for path in paths}
    if isinstance(model, Mapping):
        return {resolve_agent(paths, key, "replay(model=...)"): _model(each)
                for key, each in model.items()}
    return {agent.name: _model(model)}


def _model(given: Any) -> Model:
    """A model as given, or a scripted one serving the replies given."""
    if callable(getattr(given, "stream", None)):
        return given  # type: ignore[no-any-return]
    return ScriptedModel(list(given), strict=False)


#: The failures of a turn that were its model call's (``InvocationFailed.code``).
MODEL_FAILURES = frozenset({"model_error", *MODEL_ERROR_CODES})


def recorded_replies(events: Sequence[Event]) -> dict[str, list[dict[str, Any]]]:
    """Agent path -> the replies its model gave in the recording, in order, as scripted
    replies (``{"text": ..., "tool_calls": [{"name", "args"}]}``), and where a call of it
    failed, that failure (``{"failure": {"message", "code", "retryable"}}``). A reply is a run
    of the agent's texts and calls; the session's agent is named by its name (it changes at
    a hand-off), a sub-agent by its scope's path."""
    replies: dict[str, list[dict[str, Any]]] = {}
    open_replies: dict[str, dict[str, Any]] = {}
    speaking = ""
    for event in events:
        if isinstance(event, InvocationStart) and event.scope is None and event.agent:
            speaking = event.agent
        path = event.scope.path if event.scope is not None else speaking
        if isinstance(event, AssistantEvent | ToolCall):
            reply = open_replies.get(path)
            if reply is None or (isinstance(event, AssistantEvent) and reply["tool_calls"]):
                reply = open_replies[path] = {"text": "", "tool_calls": []}
                replies.setdefault(path, []).append(reply)
            if isinstance(event, AssistantEvent):
                reply["text"] += event.text
            else:
                reply["tool_calls"].append({"name": event.name, "args": event.args})
        elif not isinstance(event, ReasoningEvent):
            open_replies.pop(path, None)
        if isinstance(event, InvocationFailed) and event.scope is None \
                and event.code in MODEL_FAILURES:  # the model's call failed there
            replies.setdefault(path, []).append({"failure": {
                "message": event.message, "code": event.code, "retryable": event.retryable}})
        if isinstance(event, HandoffEvent) and event.scope is None:
            speaking = event.to_agent
    return replies


class _Replies:
    """An agent's recorded replies, played back in order: a reply streams as a scripted one
    does, a recorded failure of the model fails the call again; a call past them fails
    (``script_exhausted``), and the replay's notes name it."""

    provider = ScriptedModel.provider
    model = "recorded"

    def __init__(self, replies: list[dict[str, Any]], path: str) -> None:
        self.replies = [{k: v for k, v in r.items() if v} or {"text": ""} for r in replies]
        self.path = path
        self.requests: list[ModelRequest] = []

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[ModelChunk]:
        self.requests.append(request)
        position = len(self.requests) - 1
        if position >= len(self.replies):
            raise ModelError(f"unexpected model call #{position + 1}: the recording has "
                             f"{len(self.replies)} replies of agent {self.path}",
                             code="script_exhausted", retryable=False)
        reply = self.replies[position]
        failure = reply.get("failure")
        if failure is not None:
            raise ModelError(failure["message"], code=failure["code"],
                             retryable=failure["retryable"])
        return ScriptedModel([reply]).stream(request, signal=signal)


class _RecordedTools:
    """The recorded results, by :data:`CallKey` of the calls that ran: the n-th call of a
    tool by an agent that ran (succeeded, or raised) in the replay gets the n-th of the
    recording's. The timers a recorded call set under its call id (the way a tool names a
    timer so a retry converges on one) are set again under the replay's call, as far ahead:
    the replay's timer deliveries find them. Its other effects (state) are not made."""

    def __init__(self, recorded: list[Event], notes: list[str]) -> None:
        results: dict[str, ToolResult] = {}
        for event in recorded:
            if isinstance(event, ToolResult) and not event.preliminary:
                results[event.call_id] = event
        keys = call_keys(recorded)
        self._timers: dict[str, list[TimerSet]] = {}
        for event in recorded:
            if isinstance(event, TimerSet):
                for call_id in keys:
                    if call_id in event.name:
                        self._timers.setdefault(call_id, []).append(event)
        self._ran: dict[tuple[str, str], list[ToolResult]] = {}
        for call_id, (path, name, _) in keys.items():
            result = results.get(call_id)
            if result is not None and _ran(result):
                self._ran.setdefault((path, name), []).append(result)
        self._given: dict[str, ToolResult | None] = {}
        self._counts: Counter[tuple[str, str]] = Counter()
        self._notes = notes

    def runner(self, path: str, name: str) -> Fake:
        def execute(ctx: ToolContext) -> Any:
            if ctx.call_id not in self._given:  # (a call run again gets the same result)
                position = self._counts[path, name]
                self._counts[path, name] += 1
                ran = self._ran.get((path, name), [])
                self._given[ctx.call_id] = ran[position] if position < len(ran) else None
                if position >= len(ran):
                    self._notes.append(f"no recorded result for {_ordinal((path, name, position))}"
                                       f" (the recording has {len(ran)} of its results)")
            result = self._given[ctx.call_id]
            if result is None:
                raise LookupError(f"the recording has no result for this call of {name}")
            for timer in self._timers.get(result.call_id, []):
                ctx.session.schedule(timer.name.replace(result.call_id, ctx.call_id),
                                     delay=max(timer.fire_at - timer.ts, 0) / 1000,
                                     message=timer.message, tool_input=timer.tool_input)
            if result.error is not None:
                raise _Recorded(_unprefixed(result.error, name))
            return result.result
        return execute


class _Recorded(Exception):
    """A recorded tool failure, raised again (its message as the tool's was)."""


def _ran(result: ToolResult) -> bool:
    """Whether the tool's own code made ``result``: it returned, or it raised (refusals —
    a denial, invalid arguments, a stop — never reached it)."""
    return not result.denied and (result.error is None
                                  or result.error.startswith(f"{result.name} failed: "))


def _unprefixed(error: str, name: str) -> str:
    return re.sub(rf"^{re.escape(name)} failed: ", "", error)
