"""The run loop: one turn of an agent against a session, as a generator of stream events.

The generator appends every ledger event to the session's uncommitted slice (where the head
fold checks it) before yielding it, and returns the :data:`RunResult`. It never writes to a
store: committing is the caller's business (``app.sessions.commit`` or a handler).

Every function takes the turn's :class:`~dormant._run.state.RunState` explicitly; the tool
phase of a step lives in :mod:`dormant._run.tools`.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Generator, Sequence
from typing import Any

from dormant._context import history_messages, scoped_messages
from dormant._head import call_scope
from dormant._ids import new_id, now_ms
from dormant._inputs import ClientContext, ClientTool
from dormant._patch import to_json_value
from dormant._run.compaction import compact_if_due
from dormant._run.state import ClaimCompaction, Clock, Overtaken, RunState, Start, WriteAhead
from dormant._run.tools import (
    Call,
    client_tool,
    resume_tools,
    run_tools,
    state_delta,
    written_ahead,
)
from dormant._timing import CallRecorder, Recorder
from dormant.agent import Agent, ClientPart, ErrorHandler, Hook, HookContext, System, client_notes
from dormant.errors import InputError
from dormant.events import (
    NO_USAGE,
    AssistantDelta,
    AssistantEvent,
    AudioDelta,
    ErrorEvent,
    HandoffEvent,
    InvocationEnd,
    InvocationFailed,
    InvocationYield,
    ModelEnd,
    ModelStart,
    PauseEvent,
    ReasoningEvent,
    SteerEvent,
    StopRequested,
    StreamEvent,
    ToolCall,
    ToolCallDraft,
    ToolResult,
    Usage,
    UserEvent,
)
from dormant.events import ThoughtDelta as ThoughtDeltaEvent
from dormant.models._base import (
    AudioChunk,
    Message,
    Model,
    ModelError,
    ModelRequest,
    ReasoningChunk,
    ResponseInfo,
    TextDelta,
    ThoughtDelta,
    ToolCallChunk,
    ToolCallDelta,
    ToolResultChunk,
    ToolSpec,
    UsageChunk,
    identify,
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

__all__ = ["Start", "derive_call_id", "drain", "run_turn"]

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
    return _guarded(run, start)


def _still_waiting(run: RunState) -> Stream:
    """Some calls of the parked step are still unanswered: nothing to run yet."""
    yield from ()
    return _finish_yield_tool(run)


def _guarded(run: RunState, start: Start) -> Stream:
    # The agent's tool sources (MCP servers) are listed here, on the first turn that needs
    # them. One that cannot list fails the turn before anything runs, and the turn writes
    # nothing, even after a claim (an approval decided, a step reopened): what the claim
    # committed stays for a later request or the lease's takeover to run, with the same
    # call ids, once the source answers again.
    run.agent.toolset()
    run.team = run.team or run.agent.team()  # (a hand-off naming no agent fails here)
    run.session.window.defer_events()  # timers tools ask for wait for flush (call order)
    try:
        return (yield from _body(run, start))
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


def _boundary(run: RunState) -> Generator[StreamEvent, None, RunResult | None]:
    """A step boundary: a pause asked meanwhile parks the session here (the invocation
    stays open; ``resume`` continues it); steers asked meanwhile join the conversation.
    The control record is read here first: a control sent while the tools ran may not have
    been polled yet, and the next model step is what it is meant to come before."""
    watch = run.watch
    if watch is None:
        return None
    watch.at_boundary()
    run.signal.raise_if_aborted()  # a stop that read found: before the model is called again
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


def _loop(run: RunState) -> Stream:
    step = 0
    while True:
        agent = run.agent  # (a hand-off changes it between steps)
        run.signal.raise_if_aborted()
        if step > 0:
            paused = yield from _boundary(run)
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
        moves = [call for call in calls if run.scope is None
                 and agent.handoff_target(call.name) is not None]
        if moves:
            calls = [call for call in calls if all(call is not move for move in moves)]
        elif not calls:
            if run.watch is not None and run.watch.steers_waiting \
                    and (yield from _take_steers(run)):
                continue  # a steer arrived as the model answered: one more step
            return (yield from _settle(run))
        yielded = False
        if calls:
            yielded = yield from run_tools(run, calls)
            yield from run.flush()
        if moves:
            yield from _hand_over(run, moves, blocked=yielded)
        if yielded:
            if run.scope is None:  # (a sub-agent's caller parks: it waits on this one)
                yield run.emit(InvocationYield(invocation_id=run.invocation_id,
                                               reason="tool"))
            return _finish_yield_tool(run)


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
    invocation_id = run.invocation_id
    signal = run.signal
    scope = run.scope
    yield ModelStart(invocation_id=invocation_id, step=step, scope=scope)
    reply_id = new_id("evt")
    thought_id = new_id("thought")
    run.deltas = []
    run.deltas_id = reply_id
    run.drafts = {}
    parts: list[str] = []
    calls: list[Call] = []
    provided: dict[str, ToolResultChunk] = {}
    reasoning: list[dict[str, Any]] = []
    provider = ""
    usage = NO_USAGE
    timed = _timed(run, model, step, request)
    try:
        for chunk in model.stream(request, signal=signal):
            if signal.aborted:
                raise Aborted("the turn was aborted")
            if timed is not None and timed.first is None:
                timed.chunk()
            if isinstance(chunk, TextDelta):
                if chunk.text:
                    parts.append(chunk.text)
                    delta = AssistantDelta(invocation_id=invocation_id, message_id=reply_id,
                                           delta=chunk.text, scope=scope)
                    run.deltas.append(delta)
                    yield delta
            elif isinstance(chunk, ThoughtDelta):
                yield ThoughtDeltaEvent(invocation_id=invocation_id, message_id=thought_id,
                                        delta=chunk.text, scope=scope)
            elif isinstance(chunk, AudioChunk):
                if chunk.data:  # stream-only: the ledger keeps the transcript, not the audio
                    yield AudioDelta(invocation_id=invocation_id, message_id=reply_id,
                                     data=base64.b64encode(chunk.data).decode("ascii"),
                                     format=chunk.format, rate=chunk.rate, scope=scope)
            elif isinstance(chunk, ToolCallDelta):
                _draft(run, chunk)
            elif isinstance(chunk, ToolCallChunk):
                _drafted(run, chunk)
                calls.append(_parse_call(chunk))
            elif isinstance(chunk, ToolResultChunk):
                provided[chunk.call_id] = chunk
            elif isinstance(chunk, ReasoningChunk):
                reasoning.append(chunk.item)
                provider = chunk.provider
            elif isinstance(chunk, UsageChunk) and _counts(chunk.usage):
                usage = usage + chunk.usage
            elif isinstance(chunk, ResponseInfo) and timed is not None:
                timed.response(model=chunk.model, response_id=chunk.response_id,
                               finish_reason=chunk.finish_reason)
        if signal.aborted:  # the model stopped early because the turn was stopped or aborted
            raise Aborted("the turn was aborted")
    except BaseException as error:
        if timed is not None:
            timed.end(usage, error=_error_code(run, error))
        raise
    if timed is not None:
        if timed.recorder.content:  # (before the end: an ended span takes no more)
            from dormant._run.content import output_content  # (content capture only)

            timed.content(output_content("".join(parts), calls, timed.finish_reason))
        usage = timed.end(usage)
    if _counts(usage):
        run.usage = run.usage + usage
    yield ModelEnd(invocation_id=invocation_id, step=step, usage=usage, scope=scope)
    run.deltas = []
    run.drafts = {}
    text = "".join(parts)
    _call_hooks(run, "after_model", request=request, text=text)
    if reasoning:
        yield run.emit(ReasoningEvent(invocation_id=invocation_id, items=reasoning,
                                      provider=provider))
    if text:
        run.said.append(text)
        yield run.emit(AssistantEvent(id=reply_id, invocation_id=invocation_id, text=text))
    position = run.session.head.calls
    tools = run.agent.toolset().tools
    ran_there: list[tuple[Call, ToolResultChunk]] = []
    for index, call in enumerate(calls):
        if not call.call_id:
            call.call_id = derive_call_id(invocation_id, position, index)
        if call.provider_executed:
            result = provided.get(call.call_id)
            if result is not None:
                ran_there.append((call, result))
            else:
                _unprovided(run, call)
        tool = tools.get(call.name)
        call.dynamic = tool is None and call.name in run.client_tools \
            and not call.provider_executed
        yield run.emit(ToolCall(invocation_id=invocation_id, call_id=call.call_id,
                                name=call.name, args=call.args, dynamic=call.dynamic,
                                provider_executed=call.provider_executed,
                                provider_metadata=call.provider_metadata,
                                tool_metadata=tool.metadata if tool is not None else None))
    # The provider's results land with the calls, before any tool of the step runs (or is
    # written ahead): those calls are settled, and the step's join waits only for the rest.
    for call, result in ran_there:
        yield run.emit(_provider_result(run, call, result))
    return [call for call in calls if all(call is not done for done, _ in ran_there)]


def _timed(run: RunState, model: Model, step: int, request: ModelRequest
           ) -> CallRecorder | None:
    """The step's model call, timed (None: the turn has no recorder)."""
    recorder = run.recorder
    if recorder is None:
        return None
    provider, name = identify(model)
    timed = recorder.call(step, provider=provider, model=name)
    if recorder.content:
        from dormant._run.content import request_content  # (content capture only)

        timed.content(request_content(request))
    return timed


def _error_code(run: RunState, error: BaseException) -> str:
    """A failed model call's code, as its timing and span keep it."""
    if isinstance(error, ModelError):
        return error.code
    if isinstance(error, Aborted):
        signal = run.signal
        return "stopped" if signal.stopped else "deadline" if signal.expired else "aborted"
    return type(error).__name__


def _unprovided(run: RunState, call: Call) -> None:
    """A call the provider ran whose result did not come in the response: it waits as a
    deferred call when the agent declares a deferred tool of its name (trusted code supplies
    the result), else its result is an error the model reads on the next step."""
    tool = run.agent.toolset().tools.get(call.name)
    if tool is None or not tool.deferred:
        call.error = (f"{call.name} ran on the model's provider, but its result did not come "
                      "in the response")


def _provider_result(run: RunState, call: Call, result: ToolResultChunk) -> ToolResult:
    """A provider-executed call's ``tool_result``, as the provider returned it."""
    metadata = to_json_value(result.provider_metadata) if result.provider_metadata else None
    if result.is_error:
        return ToolResult(invocation_id=run.invocation_id, call_id=call.call_id,
                          name=call.name, error=str(result.result) or "(no output)",
                          provider_executed=True, provider_metadata=metadata)
    return ToolResult(invocation_id=run.invocation_id, call_id=call.call_id, name=call.name,
                      result=to_json_value(result.result), provider_executed=True,
                      provider_metadata=metadata)


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


def derive_call_id(invocation_id: str | None, position: int, index: int) -> str:
    """A call id from where the call sits: the invocation, the number of calls the invocation
    made before this step (``position``) and its index in the step. A rerun of the same step
    (a retry resent, a redelivered message: same invocation, same committed calls) gets the
    same ids, so side effects keyed by call id run once."""
    seed = f"{invocation_id}|{position}|{index}".encode()
    return "call_" + hashlib.blake2b(seed, digest_size=8).hexdigest()


def _failure(error: Exception) -> tuple[str, bool]:
    """The code and retryability an ``invocation_failed`` records for ``error``."""
    if isinstance(error, ModelError):
        return error.code, error.retryable
    return str(getattr(error, "code", "run_error")), True


def _draft(run: RunState, chunk: ToolCallDelta) -> None:
    """A fragment of a call still streaming: kept until its whole call arrives."""
    draft = run.drafts.setdefault(chunk.index, {"call_id": "", "name": "", "args": []})
    draft["call_id"] = draft["call_id"] or chunk.call_id
    draft["name"] = draft["name"] or chunk.name
    if chunk.args:
        draft["args"].append(chunk.args)


def _drafted(run: RunState, chunk: ToolCallChunk) -> None:
    """A whole call arrived: its draft (same call id, else the oldest) is no draft now."""
    drafts = run.drafts
    if not drafts:
        return
    index = next((i for i, d in drafts.items() if chunk.call_id and d["call_id"] == chunk.call_id),
                 next(iter(drafts)))
    del drafts[index]


def _parse_call(chunk: ToolCallChunk) -> Call:
    args = chunk.args
    error: str | None = None
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as bad:
            error = f"Invalid arguments for {chunk.name}: not JSON ({bad.msg})"
    if error is None:
        args = to_json_value(args)
    metadata = to_json_value(chunk.provider_metadata) if chunk.provider_metadata else None
    return Call(chunk.call_id, chunk.name, args, error=error,
                provider_executed=chunk.provider_executed, provider_metadata=metadata)


def _counts(usage: Usage) -> bool:
    return bool(usage.input_tokens or usage.output_tokens or usage.cached_tokens)
