"""The run loop: one turn of an agent against a session, as a generator of stream events.

The generator appends every ledger event to the session's uncommitted slice (where the head
fold checks it) before yielding it, and returns the :data:`RunResult`. It never writes to a
store: committing is the caller's business (``app.sessions.commit`` or a handler).

Every function takes the turn's :class:`~dormant._run.state.RunState` explicitly; the tool
phase of a step lives in :mod:`dormant._run.tools`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Sequence
from typing import Any

from dormant._context import history_messages, scoped_messages
from dormant._head import call_scope
from dormant._ids import new_id, now_ms
from dormant._inputs import ClientContext, ClientTool
from dormant._run.compaction import compact_if_due
from dormant._run.state import ClaimCompaction, Clock, Overtaken, RunState, Start, WriteAhead
from dormant._run.step import ModelStep, derive_call_id
from dormant._run.tools import (
    Call,
    client_tool,
    resume_tools,
    run_tools,
    state_delta,
    written_ahead,
)
from dormant._timing import Recorder
from dormant.agent import Agent, ClientPart, ErrorHandler, Hook, HookContext, System, client_notes
from dormant.errors import InputError
from dormant.events import (
    AssistantEvent,
    ErrorEvent,
    HandoffEvent,
    InvocationEnd,
    InvocationFailed,
    InvocationYield,
    ModelStart,
    PauseEvent,
    SteerEvent,
    StopRequested,
    StreamEvent,
    ToolCallDraft,
    ToolResult,
    UserEvent,
)
from dormant.models._base import (
    Message,
    ModelError,
    ModelRequest,
    ToolSpec,
)
from dormant.results import (
    CompletedResult,
    ErrorResult,
    Output,
    OutputItem,
    PausedResult,
    RunResult,
    StoppedResult,
    YieldedMessageResult,
    YieldedToolResult,
)
from dormant.session import Session
from dormant.tools import Aborted, Signal

__all__ = ["FAST_PATH", "Start", "derive_call_id", "drain", "ordinary", "run_turn"]

Stream = Generator[StreamEvent, None, RunResult]


def run_turn(
    agent: Agent,
    session: Session,
    start: Start,
    *,
    hooks: Sequence[Hook] = (),
    error_handlers: Sequence[ErrorHandler] = (),
    signal: Signal | None = None,
    clock: Clock = now_ms,
    watch: Any = None,
    claim_compaction: ClaimCompaction | None = None,
    write_ahead: WriteAhead | None = None,
    client_tools: Sequence[ClientTool] = (),
    client_context: Sequence[ClientContext] = (),
    recorder: Recorder | None = None,
    team: dict[str, Agent] | None = None,
) -> Stream:
    """Carry a turn on from ``start``: its invocation is open in ``session`` already (the
    request room, :func:`dormant._request.open_turn`, wrote the opening or a claim committed
    it). ``claim_compaction``: how concurrent turns agree on which one summarises (the
    handlers pass :func:`dormant._run.compaction.claim_in` of their store).
    ``write_ahead``: how a step's calls are recorded before its tools run (the request
    executor's; None: nothing is written before the turn ends). ``client_tools`` and
    ``client_context``: what the request's client offers this turn (AG-UI front-end tools and
    ``context``). ``team``: the agents a hand-off goes to, by name (the handler's entry
    agent's :meth:`~dormant.agent.Agent.team`; None: ``agent``'s own)."""
    run = RunState(agent, session, tuple(agent.app_hooks) + tuple(agent.hooks) + tuple(hooks),
                   tuple(error_handlers), signal or Signal(), clock)
    run.watch = watch
    run.claim_compaction = claim_compaction
    run.write_ahead = write_ahead
    run.recorder = recorder
    run.invocation_id = start.invocation_id
    run.trigger = start.trigger
    run.sub_run = _sub_body
    run.turn_hooks = tuple(hooks)
    if team is not None:
        run.team = team
    if client_tools:
        run.client_tools = {spec.name: client_tool(spec) for spec in client_tools}
    if client_context:
        run.client_notes = _client_notes(agent, client_context)
    if start.next == "wait":
        return _still_waiting(run)
    return _guarded(run, start, _ordinary if FAST_PATH and ordinary(run, start) else _body)


#: Whether an ordinary turn takes the flat loop (:func:`ordinary`); the general path runs
#: the same turn to the same ledger, byte for byte (``DORMANT_FAST_PATH=0`` turns it off:
#: the tests compare the two).
FAST_PATH = os.environ.get("DORMANT_FAST_PATH", "1") != "0"


def ordinary(run: RunState, start: Start) -> bool:
    """Whether the turn is an ordinary one, as its start decides: it calls the model first
    (no parked step to settle, no state to write) and its agent does not compact its
    history (hooks, tools and hand-offs are the general path's own helpers, called from
    the flat loop)."""
    return (start.next == "model" and not start.state and run.agent.compaction is None
            and run.scope is None)


def _still_waiting(run: RunState) -> Stream:
    """Some calls of the parked step are still unanswered: nothing to run yet."""
    yield from ()
    return _finish_yield_tool(run)


def _guarded(run: RunState, start: Start,
             body: Callable[[RunState, Start], Stream]) -> Stream:
    # The agent's tool sources (MCP servers) are listed here, on the first turn that needs
    # them. One that cannot list fails the turn before anything runs, and the turn writes
    # nothing, even after a claim (an approval decided, a step reopened): what the claim
    # committed stays for a later request or the lease's takeover to run, with the same
    # call ids, once the source answers again.
    run.agent.toolset()
    run.team = run.team or run.agent.team()  # (a hand-off naming no agent fails here)
    run.session.window.defer_events()  # timers tools ask for wait for flush (call order)
    try:
        return (yield from body(run, start))
    except Overtaken:  # superseded before the step's tools ran: what the turn said is all
        return _result(run, CompletedResult())
    except Aborted as error:
        if run.signal.stopped:
            return (yield from _stopped(run))
        if not run.ran and not run.session.claimed:
            raise  # an aborted turn that changed nothing writes nothing
        code = "deadline" if run.signal.expired else "aborted"
        return (yield from _failed(run, code, str(error), retryable=True))
    except Exception as error:
        recovered = _recover(run, error)
        if recovered is not None:
            return (yield from _reply_and_end(run, recovered))
        if not run.ran and not run.session.claimed:
            raise
        code, retryable = _failure(error)
        return (yield from _failed(run, code, f"{error}", retryable=retryable))
    finally:
        run.session.window.stop_deferring()


def _failed(run: RunState, code: str, message: str, *, retryable: bool) -> Stream:
    """A tool ran, then the turn failed: keep every finished step (what changed the
    world), drop the failed step's uncommitted output, record why. The session is
    ``failed`` until a retry reruns the failed model call."""
    run.session.window.rewind_to_effects()
    run.session.window.take_deferred()
    yield run.emit(InvocationFailed(invocation_id=run.invocation_id, code=code,
                                    message=message, retryable=retryable))
    return _result(run, ErrorResult(error=message, code=code, retryable=retryable))


def _stopped(run: RunState) -> Stream:
    """A stop took effect: keep what the client saw of the step in flight (its text up to
    the frontier ``seen``), give calls that did not finish an error result ``stopped``, drop
    calls the model had not finished from the conversation (their streamed argument text is
    kept as ``tool_call_draft`` events), end ``stopped``."""
    signal = run.signal
    seen = signal.stop_seen
    yield from run.flush()
    text = "".join(d.delta for d in run.deltas
                   if seen is None or d.seq is None or d.seq <= seen)
    run.deltas = []
    if text:
        run.said.append(text)
        yield run.emit(AssistantEvent(id=run.deltas_id or new_id("evt"),
                                      invocation_id=run.invocation_id, text=text))
    for draft in run.drafts.values():  # not calls: kept in the ledger, out of the conversation
        yield run.emit(ToolCallDraft(invocation_id=run.invocation_id,
                                     call_id=draft["call_id"] or None, name=draft["name"],
                                     args_text="".join(draft["args"])))
    run.drafts = {}
    for call in list(run.session.head.step):
        if not call.settled:  # (a sub-agent's too: each result in its agent's scope)
            yield run.emit(ToolResult(invocation_id=run.invocation_id, call_id=call.call_id,
                                      name=call.name, error="stopped",
                                      scope=call_scope(call)))
    yield run.emit(StopRequested(invocation_id=run.invocation_id, seen=seen,
                                 rev=signal.stop_rev))
    yield run.emit(InvocationEnd(invocation_id=run.invocation_id, status="stopped"))
    return _result(run, StoppedResult())


def _boundary(run: RunState, *, read: bool = True
              ) -> Generator[StreamEvent, None, RunResult | None]:
    """A step boundary: a pause asked meanwhile parks the session here (the invocation
    stays open; ``resume`` continues it); steers asked meanwhile join the conversation.
    The control record is read here first (``read``: not when the ordinary turn's loop
    read it already): a control sent while the tools ran may not have been polled yet, and
    the next model step is what it is meant to come before."""
    watch = run.watch
    if watch is None:
        return None
    if read:
        watch.at_boundary()
        run.signal.raise_if_aborted()  # a stop it found: before the model is called again
    if watch.pause_rev is not None:
        yield run.emit(PauseEvent(invocation_id=run.invocation_id, rev=watch.pause_rev))
        watch.pause_rev = None
        return _result(run, PausedResult())
    yield from _take_steers(run)
    return None


def _take_steers(run: RunState) -> Generator[StreamEvent, None, bool]:
    """Emit the steers the control record holds for this invocation; True if any."""
    watch = run.watch
    head = run.session.head
    # a steer whose id already landed (sent again as a message, say) is not taken twice
    steers = [s for s in (watch.take_steers() if watch is not None else [])
              if not head.has_message(s.id)]
    for steer in steers:
        run.session.spare_ids.add(steer.id)
        yield run.emit(SteerEvent(invocation_id=run.invocation_id, message_id=steer.id,
                                  rev=steer.rev))
        event = UserEvent(text=steer.text, message_id=steer.id, steer=True,
                          invocation_id=run.invocation_id, ts=run.clock())
        run.trigger = event
        yield run.emit(event)
    return bool(steers)


def _recover(run: RunState, error: Exception) -> str | None:
    for handler in run.error_handlers:
        text = handler(error, run.hook_context())
        if isinstance(text, str):
            return text
    return None


def _body(run: RunState, start: Start) -> Stream:
    if start.state:
        yield from state_delta(run, {**run.session.state, **start.state})
    if start.next == "tools":
        calls = written_ahead(run)
        if calls:  # a step whose calls landed before its tools ran, then its request ended
            parks = yield from run_tools(run, calls)
            yield from run.flush()
            if parks:
                yield run.emit(InvocationYield(invocation_id=run.invocation_id, reason="tool"))
                return _finish_yield_tool(run)
        else:
            parks = yield from resume_tools(run)
            yield from run.flush()
            if parks:  # an approved deferred call was admitted: it waits for its result
                yield run.emit(InvocationYield(invocation_id=run.invocation_id, reason="tool"))
                return _finish_yield_tool(run)
    replaced = _before_agent(run) if start.hooks else None
    if replaced is not None:
        return (yield from _reply_and_end(run, replaced))
    return (yield from _loop(run))


def _sub_body(run: RunState) -> Stream:
    """A sub-agent's run (an agent used as a tool), carried on from its ledger: first the
    step it parked on, if any (answered yields, decided approvals, calls written ahead
    whose request ended), then its model loop. It ends in a :class:`CompletedResult` (its
    reply is the call's result), an :class:`ErrorResult`, or a :class:`YieldedToolResult`
    (it waits for answers: so does its caller's call)."""
    mine = run.session.head.scoped(run.scope_id)
    if mine and not all(call.settled for call in mine):
        calls = written_ahead(run)
        parks = yield from (run_tools(run, calls) if calls else resume_tools(run))
        yield from run.flush()
        if parks or any(call.scope == run.scope_id for call in run.session.head.unresolved()):
            return _finish_yield_tool(run)
    return (yield from _loop(run))


def _before_agent(run: RunState) -> str | None:
    """The ``before_agent`` hooks: the text of one that answers in the agent's place (then
    the model loop does not run), else None. (A function, not a generator around the loop:
    every event of the turn would pass through it.)"""
    for hook in run.hooks:
        if hook.before_agent is not None:
            replaced = hook.before_agent(run.hook_context())
            if isinstance(replaced, str):
                return replaced
    return None


# --- the model loop ------------------------------------------------------------------------------


def _loop(run: RunState, step: int = 0, *, read: bool = True) -> Stream:
    """The model loop from step ``step`` on (``read``: False when the ordinary turn's loop
    hands over at a boundary whose control record it read)."""
    while True:
        agent = run.agent  # (a hand-off changes it between steps)
        run.signal.raise_if_aborted()
        if step > 0:
            paused = yield from _boundary(run, read=read)
            read = True
            if paused is not None:
                return paused
        if step >= agent.max_steps:
            message = (f"agent {agent.name!r} reached max_steps={agent.max_steps} "
                       "without finishing; raise max_steps or check for a tool loop")
            yield run.emit(ErrorEvent(invocation_id=run.invocation_id, message=message,
                                      code="max_steps"))
            if run.scope is None:  # (a sub-agent's error is its caller's call's result)
                yield run.emit(InvocationEnd(invocation_id=run.invocation_id, status="error"))
            return _result(run, ErrorResult(error=message, code="max_steps"))
        step += 1
        calls = yield from _model_step(run, step)
        ended = yield from _after_model(run, calls)
        if ended is not None:
            return ended


def _after_model(run: RunState, calls: list[Call]) -> Generator[StreamEvent, None,
                                                                 RunResult | None]:
    """What a model step's calls come to: none ends the turn (or parks it for the next
    message), unless a steer arrived as the model answered; else the tools run, then the
    hand-offs. The turn's result if it ends or parks here; None: the next step runs."""
    agent = run.agent
    moves = [call for call in calls if run.scope is None
             and agent.handoff_target(call.name) is not None]
    if moves:
        calls = [call for call in calls if all(call is not move for move in moves)]
    elif not calls:
        if run.watch is not None and run.watch.steers_waiting \
                and (yield from _take_steers(run)):
            return None  # a steer arrived as the model answered: one more step
        return (yield from _settle(run))
    yielded = False
    if calls:
        yielded = yield from run_tools(run, calls)
        yield from run.flush()
    if moves:
        yield from _hand_over(run, moves, blocked=yielded)
    if yielded:
        if run.scope is None:  # (a sub-agent's caller parks: it waits on this one)
            yield run.emit(InvocationYield(invocation_id=run.invocation_id, reason="tool"))
        return _finish_yield_tool(run)
    return None


def _ordinary(run: RunState, start: Start) -> Stream:
    """The ordinary turn (see :func:`ordinary`), flat: one loop reads each model step's
    stream (its events pass through no generator of their own on the way to the request)
    and hands the step's calls to the tool phase (``_after_model``, the general path's).
    The moment something else happens, the general loop carries the turn on from there: a
    pause or a steer at a step boundary, ``max_steps`` reached, a hand-off (``_loop``); a
    call that yields, needs an approval or waits parks the step as it always does."""
    replaced = _before_agent(run) if start.hooks else None
    if replaced is not None:
        return (yield from _reply_and_end(run, replaced))
    agent = run.agent
    model = agent.model
    if model is None:
        raise InputError(f"agent {agent.name!r} has no model and no hook answered")
    signal = run.signal
    watch = run.watch
    step = 0
    while True:
        signal.raise_if_aborted()
        if step > 0 and watch is not None:
            watch.at_boundary()
            signal.raise_if_aborted()  # a stop it found: before the model is called again
            if watch.pause_rev is not None or watch.steers_waiting:
                return (yield from _loop(run, step, read=False))
        if step >= agent.max_steps:
            return (yield from _loop(run, step, read=False))
        step += 1
        request = _request(run, step)
        _call_hooks(run, "before_model", request=request)
        yield ModelStart(invocation_id=run.invocation_id, step=step)
        reading = ModelStep(run, step, model, request)
        try:
            for chunk in model.stream(request, signal=signal):
                event = reading.take(chunk)
                if event is not None:
                    yield event
            ended = reading.ended()
        except BaseException as error:
            reading.failed(error)
            raise
        yield ended
        _call_hooks(run, "after_model", request=request, text=reading.text)
        events, calls = reading.settled()
        for event in events:
            yield run.emit(event)
        result = yield from _after_model(run, calls)
        if result is not None:
            return result
        if run.agent is not agent:  # handed over: the next step runs the agent it went to
            return (yield from _loop(run, step))


def _hand_over(run: RunState, moves: list[Call], *, blocked: bool
               ) -> Generator[StreamEvent, None, None]:
    """The step's hand-off calls, after its other calls: the first hands the conversation
    over (its result, then a ``handoff`` event; the turn's next step runs the new agent),
    the others get an error result. A step whose other calls park hands over to nobody (the
    parked step is resumed by the agent that made it): the model may ask again."""
    agent = run.agent
    moved: str | None = None
    for call in moves:
        target = agent.handoff_target(call.name)
        assert target is not None
        args = call.args if isinstance(call.args, dict) else {}
        reason = args.get("reason")
        error = call.error
        if error is None and (set(args) - {"reason"} or not isinstance(reason, str | None)):
            error = f"Invalid arguments for {call.name}: only an optional text `reason`"
        if error is None and moved is not None:
            error = f"Not handed over: the conversation went to {moved} in this step."
        if error is None and blocked:
            error = ("Not handed over: other calls of this step wait for answers; hand over "
                     "again once they are answered.")
        if error is not None:
            yield run.emit(ToolResult(invocation_id=run.invocation_id, call_id=call.call_id,
                                      name=call.name, error=error))
            continue
        to = run.team.get(target) or agent.handoff(target)
        moved = to.name
        yield run.emit(ToolResult(invocation_id=run.invocation_id, call_id=call.call_id,
                                  name=call.name, result=f"Handed over to {to.name}."))
        yield run.emit(HandoffEvent(invocation_id=run.invocation_id, from_agent=agent.name,
                                    to_agent=to.name, call_id=call.call_id, reason=reason))
        run.hand_over(to)


def _model_step(run: RunState, step: int) -> Generator[StreamEvent, None, list[Call]]:
    model = run.agent.model
    if model is None:
        raise InputError(f"agent {run.agent.name!r} has no model and no hook answered")
    if run.agent.compaction is not None and run.scope is None:
        yield from compact_if_due(run)
    request = _request(run, step)
    _call_hooks(run, "before_model", request=request)
    yield ModelStart(invocation_id=run.invocation_id, step=step, scope=run.scope)
    reading = ModelStep(run, step, model, request)
    try:
        for chunk in model.stream(request, signal=run.signal):
            event = reading.take(chunk)
            if event is not None:
                yield event
        ended = reading.ended()
    except BaseException as error:
        reading.failed(error)
        raise
    yield ended
    _call_hooks(run, "after_model", request=request, text=reading.text)
    events, calls = reading.settled()
    for event in events:
        yield run.emit(event)
    return calls


def _settle(run: RunState) -> Stream:
    """The model answered without tools: end, or park for the next message."""
    _call_hooks(run, "after_agent")
    if run.unmarked or run.session.window.has_deferred:
        yield from run.flush()
    if run.scope is not None:  # a sub-agent's reply: its caller's call's result
        return _result(run, CompletedResult())
    if run.agent.yields:
        yield run.emit(InvocationYield(invocation_id=run.invocation_id, reason="message"))
        assert run.invocation_id is not None
        return _result(run, YieldedMessageResult(yielded_invocation_id=run.invocation_id))
    yield run.emit(InvocationEnd(invocation_id=run.invocation_id))
    watch = run.watch
    if watch is not None and watch.pause_rev is not None:  # asked during the last step
        yield run.emit(PauseEvent(invocation_id=None, rev=watch.pause_rev))
        watch.pause_rev = None
    return _result(run, CompletedResult())


def _reply_and_end(run: RunState, text: str) -> Stream:
    run.said.append(text)
    yield run.emit(AssistantEvent(invocation_id=run.invocation_id, text=text))
    return (yield from _settle(run))


# --- results and context -------------------------------------------------------------------------


def _finish_yield_tool(run: RunState) -> RunResult:
    return _result(run, YieldedToolResult(yielded_tools=run.session.yielded_tools,
                                          pending_approvals=run.session.pending_approvals,
                                          deferred_tools=run.session.deferred_tools))


def _result(run: RunState, result: RunResult) -> RunResult:
    # Filled in place: the result was made a moment ago by this run and nobody holds it.
    said = run.said
    object.__setattr__(result, "output", Output(
        items=[OutputItem(text=text) for text in said], text=said[-1] if said else ""))
    object.__setattr__(result, "invocation_id", run.invocation_id)
    object.__setattr__(result, "usage", run.usage)
    object.__setattr__(result, "session_", run.session)
    return result


def _call_hooks(run: RunState, name: str, **fields: Any) -> None:
    if not run.hooks:
        return
    ctx: HookContext | None = None
    for hook in run.hooks:
        fn = getattr(hook, name)
        if fn is not None:
            ctx = ctx or run.hook_context(**fields)
            fn(ctx)


def _request(run: RunState, step: int) -> ModelRequest:
    session = run.session
    agent = run.agent
    notes = run.client_notes
    if notes is None:
        system = [item.render(session) for item in agent.context if isinstance(item, System)]
    else:
        system = _system_with(agent, session, notes)
    toolset = agent.toolset()
    tools = toolset.specs
    if agent.handoff_specs and run.scope is None:  # (a sub-agent hands over to nobody)
        tools = tools + agent.handoff_specs
    if run.client_tools:
        tools = tools + [ToolSpec(tool.name, tool.description, tool.parameters())
                         for name, tool in run.client_tools.items()
                         if name not in toolset.tools and agent.handoff_target(name) is None]
    has_history = agent.has_history
    limit = agent.history_turns
    compacted = agent.compaction is not None
    view = agent.app_event_view
    seen = session.head.seq  # the lazy read below must not see later events
    scope = run.scope
    task = run.task

    def messages() -> list[Message]:
        if scope is not None:  # a sub-agent: its task, then its own events only
            return scoped_messages(session, scope.call_id, task, seen)
        if not has_history:
            return []
        return history_messages(session, limit, seen, compacted, view)

    return ModelRequest(system=system, tools=tools, messages=messages, step=step)


def _system_with(agent: Agent, session: Session, notes: str) -> list[str]:
    """The system prompts with a client's context (``notes``) where the agent's recipe puts
    it (its :class:`~dormant.agent.ClientPart`; else after them)."""
    system: list[str] = []
    for item in agent.context:
        if isinstance(item, System):
            system.append(item.render(session))
        elif isinstance(item, ClientPart):
            system.append(notes)
    if not agent.places_client_context:
        system.append(notes)
    return system


def _client_notes(agent: Agent, items: Sequence[ClientContext]) -> str | None:
    """The system part the client's context becomes, as the agent's recipe renders it."""
    part = next((item for item in agent.context if isinstance(item, ClientPart)), None)
    return (part.render if part is not None else client_notes)(items)


def drain(stream: Stream) -> RunResult:
    """Run a turn's stream to its end and return its result (no events kept)."""
    while True:
        try:
            next(stream)
        except StopIteration as stop:
            result: RunResult = stop.value
            return result


def _failure(error: Exception) -> tuple[str, bool]:
    """The code and retryability an ``invocation_failed`` records for ``error``."""
    if isinstance(error, ModelError):
        return error.code, error.retryable
    return str(getattr(error, "code", "run_error")), True
