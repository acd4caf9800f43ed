"""The tool phase of a model step: validate, hold for approval, prepare yields, execute
(independent calls concurrently, or one at a time on an agent's ``tool_lane``), settle a
parked step on resume. Results in call order.

A generator tool's preliminary outputs are ledger events too (``tool_result`` with
``preliminary``), emitted as they are produced: the phase is a generator of events on the
caller's thread, and calls running in threads hand their outputs to it through a queue.

Every function takes the turn's :class:`~dormant._run.state.RunState` explicitly."""

from __future__ import annotations

import inspect
import json
import queue
import threading
from collections.abc import Callable, Generator
from contextvars import copy_context
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, RootModel, ValidationError

from dormant._head import PendingCall
from dormant._ids import new_id
from dormant._inputs import ClientTool
from dormant._patch import apply_patch, json_copy, make_patch, to_json_value
from dormant._run.state import RunState
from dormant._schema import schema_errors
from dormant._timing import ToolRecorder
from dormant.agent import AgentInput, HookContext
from dormant.errors import describe_validation
from dormant.events import (
    ApprovalRequested,
    Scope,
    StateDelta,
    StreamEvent,
    ToolDeferred,
    ToolResult,
    ToolYield,
)
from dormant.models._base import DENIED
from dormant.results import ErrorResult, YieldedToolResult
from dormant.session import child_session_id
from dormant.tools import APPROVAL_POLICIES, CURRENT_TOOL, Aborted, Tool, ToolContext

__all__ = ["Call", "ClientAnswer", "client_tool", "resume_tools", "run_tools", "state_delta",
           "written_ahead"]

#: What a call's thread puts on the queue once it is done (after its preliminary outputs).
_DONE = object()

#: A call's preliminary outputs (JSON values), as :func:`_execute` produces them.
Outputs = Generator[Any, None, None]


@dataclass
class Call:
    """A tool call as the tool phase handles it."""

    call_id: str
    name: str
    args: Any
    tool: Tool | None = None
    #: The validated arguments: an instance of the tool's schema, or (a tool with a
    #: ``json_schema``, an MCP server's) the arguments' dict.
    parsed: BaseModel | dict[str, Any] | None = None
    error: str | None = None
    result: Any = None
    prepared: Any = None
    approval_id: str | None = None
    denied: bool = False
    #: The call's state writes (a JSON Patch against the step's starting state), applied
    #: only if it returned: a tool that raises leaves no state change behind.
    patch: list[dict[str, Any]] | None = None
    #: True once its ``execute`` (or a ``before_tool`` hook standing in) was called.
    ran: bool = False
    #: A call to a client's tool (``tool_call.dynamic``): it parks for the client's answer.
    dynamic: bool = False
    #: The model's provider ran the call (a Bedrock server tool): never run here (one whose
    #: result came in the response never reaches the tool phase).
    provider_executed: bool = False
    provider_metadata: dict[str, Any] | None = None
    #: Its run was timed (:func:`_execute`): what it took is in the turn's timing already.
    timed: bool = False
    #: The class of the exception that failed it, if one did.
    error_type: str | None = None
    #: It runs because a person approved it.
    approved: bool = False
    #: A call of an agent used as a tool whose sub-agent parked: it has no result yet (it
    #: waits on the sub-agent's pending items, which the session lists).
    waiting: bool = False


# --- a model step's calls ----------------------------------------------------------------------


def run_tools(run: RunState, calls: list[Call]) -> Generator[StreamEvent, None, bool]:
    """Validate, hold calls for approval, prepare yielding calls, park deferred ones, execute
    the others; events in call order. True if the step parks (a yield, an approval request
    or a deferred call)."""
    work: dict[str, Any] = json_copy(run.session.state)
    runnable: list[Call] = []
    agents: list[Call] = []
    for call in calls:
        _resolve(run, call)
        if call.error is not None:
            continue
        assert call.tool is not None
        if call.tool.deferred:
            # Its result comes from outside the turn: the step parks on it, once approved
            # where a policy asks (a result cannot land before the call is admitted).
            if _needs_approval(run, call):
                call.approval_id = new_id("apr")
            continue
        if call.tool.yields:
            _prepare(run, call, work)
        elif _needs_approval(run, call):
            call.approval_id = new_id("apr")
        elif call.tool.agent is not None:
            agents.append(call)  # (its sub-agent's own tools write ahead as they run)
        else:
            runnable.append(call)
    if runnable and run.write_ahead is not None:
        run.write_ahead()  # the calls land before anything of theirs runs
    yield from _execute_all(run, runnable, work)
    yield from state_delta(run, work)
    for call in agents:  # after the state writes: a sub-agent writes the session's state
        yield from _run_agent(run, call)
    ran = any(call.ran for call in calls)
    parks = False
    for call in calls:
        _outcome(run, call)
        if call.waiting:
            parks = True
        elif call.approval_id is not None:
            parks = True
            yield run.emit(ApprovalRequested(
                invocation_id=run.invocation_id, approval_id=call.approval_id,
                call_id=call.call_id, name=call.name, args=call.args))
        elif call.error is None and call.tool is not None and call.tool.deferred:
            parks = True
            yield run.emit(_deferred(run, call))
        elif call.error is None and call.tool is not None and call.tool.yields:
            parks = True
            yield run.emit(ToolYield(invocation_id=run.invocation_id, call_id=call.call_id,
                                     name=call.name, args=call.prepared,
                                     input_schema=json_copy(call.tool.input_schema())))
        else:
            yield run.emit(_tool_result(run, call))
    if ran:
        run.note_effects()  # (the loop marks the slice once the step's timers are in)
    return parks


def _execute_all(run: RunState, runnable: list[Call],
                 work: dict[str, Any]) -> Generator[StreamEvent, None, None]:
    """Run the calls; emit their preliminary outputs as they come.

    On a ``tool_lane`` (or for a single call) they run here, one at a time in call order,
    each seeing the state the previous ones wrote. Otherwise they run concurrently, one
    short-lived thread per call (no cap shared with other turns), each in a copy of this
    context and of the state; their writes are applied afterwards, in call order."""
    if run.agent.tool_lane is not None or len(runnable) < 2:
        for call in runnable:
            yield from _run_here(run, call, work, None)
            _apply(work, call)
        return
    yield from _run_threads(run, runnable, work)
    for call in runnable:
        _apply(work, call)


def _run_here(run: RunState, call: Call, work: dict[str, Any],
              answer: Any) -> Generator[StreamEvent, None, None]:
    for output in _execute(run, call, work, answer):
        yield run.emit(_preliminary(run, call, output))


def _run_threads(run: RunState, calls: list[Call],
                 work: dict[str, Any]) -> Generator[StreamEvent, None, None]:
    """One thread per call; this thread emits their outputs (the ledger is appended to
    here only) until every call is done, then joins them. ``work`` is only read."""
    outbox: queue.SimpleQueue[tuple[Call, Any]] = queue.SimpleQueue()
    failures: list[BaseException] = []

    def work_on(call: Call) -> None:
        try:
            for output in _execute(run, call, work, None):
                outbox.put((call, output))
        except BaseException as error:  # re-raised on the turn's thread
            failures.append(error)
        finally:
            outbox.put((call, _DONE))

    threads = [threading.Thread(target=copy_context().run, args=(work_on, call),
                                name=f"dormant-tool-{call.name}", daemon=True)
               for call in calls]
    for thread in threads:
        thread.start()
    running = len(threads)
    while running:
        call, output = outbox.get()
        if output is _DONE:
            running -= 1
        else:
            yield run.emit(_preliminary(run, call, output))
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def _needs_approval(run: RunState, call: Call) -> bool:
    policy = run.agent.toolset().approval.get(call.name)
    if policy is None:
        return False
    try:
        decision = policy(call.parsed) if callable(policy) else policy
    except Exception as error:
        call.error = f"the approval policy for {call.name} failed: {error}"
        return False
    if decision not in APPROVAL_POLICIES:
        call.error = (f"the approval policy for {call.name} returned {decision!r}; "
                      "expected 'user-approval' or 'approved'")
        return False
    return bool(decision == "user-approval")


# --- the resume of a parked step ---------------------------------------------------------------


def written_ahead(run: RunState) -> list[Call]:
    """The open step's calls that landed before their tools ran (a write-ahead) and that
    nothing settled, held or parked since: the step's request ended before its results
    landed (its process died, its deadline cut it). They run again as the step they were,
    under the same call ids. Empty for a parked step (its calls are held or answered)."""
    step = run.session.head.scoped(run.scope_id)
    if any(c.yielded or c.approval_id is not None or c.deferred for c in step) \
            or all(c.settled for c in step):
        return []
    # A settled call here is one the provider ran (its result lands with the calls, before
    # the write-ahead); the step's own results land together, after its tools ran.
    return [Call(call_id=c.call_id, name=c.name, args=c.args, dynamic=c.dynamic)
            for c in step if not c.settled]


def resume_tools(run: RunState) -> Generator[StreamEvent, None, bool]:
    """Settle the parked step in call order: execute/finalize answered yields, run approved
    calls, record denials. An approved deferred call is admitted and parks (its
    ``tool_deferred``); True if one did, so the step waits again."""
    work: dict[str, Any] = json_copy(run.session.state)
    done: list[Call] = []
    approved: list[Call] = []
    admitted: list[Call] = []
    agents: list[Call] = []
    for pending in run.session.head.scoped(run.scope_id):
        if pending.settled or pending.deferred:
            continue  # (a deferred call that waits: its result lands from outside)
        if pending.approval_id is not None:
            call = Call(call_id=pending.call_id, name=pending.name, args=pending.args,
                        approved=pending.approved)
            if pending.approved:
                _resolve(run, call)
                if call.error is None and call.tool is not None and call.tool.deferred:
                    admitted.append(call)
                    continue
                if call.error is None:
                    (agents if call.tool is not None and call.tool.agent is not None
                     else approved).append(call)
            else:
                call.denied = True
                call.error = DENIED + (
                    f": {pending.reason}" if pending.reason else "")
            done.append(call)
            continue
        if not pending.yielded:
            if pending.dynamic:
                continue
            # An agent's call whose sub-agent parked (or whose request ended while it ran):
            # the sub-agent carries on from its ledger.
            call = Call(call_id=pending.call_id, name=pending.name, args=pending.args)
            _resolve(run, call)
            if call.error is None and call.tool is not None and call.tool.agent is not None:
                agents.append(call)
                done.append(call)
            continue
        done.append((yield from _answer_yield(run, pending, work)))
    yield from _execute_all(run, approved, work)
    yield from state_delta(run, work)
    for call in agents:  # after the state writes: a sub-agent writes the session's state
        yield from _run_agent(run, call)
    waiting = False
    for call in done:  # already in call order: the loop walked the step
        _outcome(run, call)
        if call.waiting:
            waiting = True
            continue
        yield run.emit(_tool_result(run, call))
    for call in admitted:
        _outcome(run, call)
        yield run.emit(_deferred(run, call))
    if any(call.ran for call in done) or run.session.claimed:
        run.note_effects()  # a claimed decision is committed: its results are progress too
    return bool(admitted) or waiting


def _deferred(run: RunState, call: Call) -> ToolDeferred:
    """A deferred call parks; a delegation's names the child session that will run it."""
    tool = call.tool
    child = (child_session_id(run.session.session_id, call.call_id)
             if tool is not None and tool.delegate is not None else None)
    return ToolDeferred(invocation_id=run.invocation_id, call_id=call.call_id, name=call.name,
                        args=to_json_value(call.parsed), delegate=child)


def _answer_yield(run: RunState, pending: PendingCall,
                  work: dict[str, Any]) -> Generator[StreamEvent, None, Call]:
    """An answered yield: execute it with the answer (or, if the answer is invalid, only
    finalize), its state writes applied to ``work`` at once, in call order."""
    args = pending.prepared if pending.prepared is not None else pending.args
    call = Call(call_id=pending.call_id, name=pending.name, args=args, dynamic=pending.dynamic)
    _resolve(run, call)
    if call.error is None:
        assert call.tool is not None and call.tool.yield_schema is not None
        try:
            answer = call.tool.yield_schema.model_validate(pending.input)
        except ValidationError as error:
            reason = describe_validation(error, "(root)")
            call.error = f"Invalid input for {call.name}: {reason}"
            finalized = _finalize(run, call, work, None)
            call.patch = make_patch(work, finalized) or None
            _apply(work, call)
        else:
            yield from _run_here(run, call, work, answer)
            _apply(work, call)
    return call


# --- a call of an agent used as a tool ----------------------------------------------------------


def _run_agent(run: RunState, call: Call) -> Generator[StreamEvent, None, None]:
    """Run (or carry on) the sub-agent of ``call`` inside this turn: its events carry its
    scope; its reply becomes the call's result; it parks, and the call waits, when its
    tools wait for a person or for a deferred result."""
    assert call.tool is not None and run.sub_run is not None
    agent = call.tool.agent
    parent = run.scope.path if run.scope is not None else run.agent.name
    scope = Scope(agent=agent.name, call_id=call.call_id, path=f"{parent}/{agent.name}")
    task = call.parsed.input if isinstance(call.parsed, AgentInput) else str(call.args)
    sub = run.child(agent, scope, task)
    timed = run.recorder.tool(call.call_id, call.name, description=call.tool.description) \
        if run.recorder is not None else None
    try:
        ended = yield from run.sub_run(sub)
    except Aborted as error:  # a stop or the deadline reached the sub-agent
        call.error = _cut(run, call)
        call.error_type = type(error).__name__
    else:
        if isinstance(ended, YieldedToolResult):
            call.waiting = True
        elif isinstance(ended, ErrorResult):
            call.error = f"{call.name} failed: {ended.error}"
        else:
            call.result = ended.output.text
    finally:
        call.ran = sub.ran
        if sub.ran:
            run.ran = True
        run.usage = run.usage + sub.usage
    if timed is not None:
        call.timed = True
        timed.end("yielded" if call.waiting else "error" if call.error is not None
                  else "result", error_type=call.error_type)


# --- one call ----------------------------------------------------------------------------------


def _resolve(run: RunState, call: Call) -> None:
    if call.error is not None:
        return
    tools = run.agent.toolset().tools
    tool = _client_tool_of(run, call) if call.dynamic else tools.get(call.name)
    if tool is None:
        known = ", ".join(sorted({*tools, *run.client_tools})) or "none"
        call.error = f"Unknown tool {call.name!r}. Available tools: {known}"
        return
    call.tool = tool
    if tool.json_schema is not None:  # a schema given as JSON (an MCP server's), not a model
        problems = schema_errors(call.args, tool.json_schema, "(root)")
        if problems:
            call.error = f"Invalid arguments for {call.name}: {'; '.join(problems)}"
        else:
            call.parsed = call.args
        return
    try:
        call.parsed = tool.schema.model_validate(call.args)
    except ValidationError as error:
        reason = describe_validation(error, "(root)")
        call.error = f"Invalid arguments for {call.name}: {reason}"


class ClientAnswer(RootModel[Any]):
    """What a client's tool waits for: whatever the client answers (AG-UI's ``tool`` message
    content, or a resume payload); it becomes the call's result as given."""


def client_tool(spec: ClientTool) -> Tool:
    """A client's tool (an AG-UI front-end tool) as the tool phase runs it: its arguments
    are checked against the client's JSON Schema, the call parks as a yield (nothing runs
    here), and the client's answer is its result."""
    return Tool(name=spec.name, description=spec.description, schema=ClientAnswer,
                yield_schema=ClientAnswer, json_schema=spec.parameters)


def _client_tool_of(run: RunState, call: Call) -> Tool:
    """The tool of a dynamic call: the one the request's client offers by that name, or, for
    a parked call answered by a request that does not offer it again, a client tool of that
    name (its answer is its result whatever the tool's schema was; the arguments were
    checked when it was called)."""
    offered = run.client_tools.get(call.name)
    return offered if offered is not None else client_tool(ClientTool(name=call.name))


def _context(run: RunState, call: Call, work: dict[str, Any], answer: Any) -> ToolContext:
    return ToolContext(args=call.parsed, state=work, call_id=call.call_id,
                       session=run.session, tool=call.name,
                       invocation_id=run.invocation_id, input=answer, signal=run.signal,
                       attempt=run.session.head.retries + 1, event=run.trigger)


def _prepare(run: RunState, call: Call, work: dict[str, Any]) -> None:
    assert call.tool is not None
    prepared: Any = call.parsed
    if call.tool.prepare is not None:
        own: dict[str, Any] = json_copy(work)
        try:
            returned = _in_context(_context(run, call, own, None), call.tool.prepare)
        except Exception as error:
            call.error = f"{call.name} failed before pausing: {error}"
            return
        work.clear()
        work.update(own)
        if returned is not None:
            prepared = returned
    call.prepared = to_json_value(prepared)


def _execute(run: RunState, call: Call, work: dict[str, Any], answer: Any) -> Outputs:
    """Run one call on its own copy of ``work``, yielding a generator tool's preliminary
    outputs (JSON); its writes become ``call.patch``, kept only if it returns (and, for
    finalize's, if finalize returns). A call the turn's signal reached before it started
    does not start."""
    assert call.tool is not None
    own: dict[str, Any] = json_copy(work)
    recorder = run.recorder
    timed = recorder.tool(call.call_id, call.name, description=call.tool.description) \
        if recorder is not None else None
    if run.signal.aborted:
        call.error = _cut(run, call)
    else:
        ctx = _context(run, call, own, answer)
        tool_hook = run.hook_context(tool=ctx)
        try:
            result = _before_tool(run, tool_hook)
            if result is not None:
                call.ran = True
            elif call.tool.execute is not None:
                call.ran = True
                result = _in_context(ctx, call.tool.execute, timed)
                if inspect.isgenerator(result):
                    result = yield from _outputs(run, ctx, result, timed)
            else:
                result = answer
            for hook in run.hooks:
                if hook.after_tool is not None:
                    tool_hook.result = result
                    replaced = hook.after_tool(tool_hook)
                    if replaced is not None:
                        result = replaced
            call.result = to_json_value(result)
        except Aborted as error:
            # Cooperative cancellation: the call did not finish. The step still closes (its
            # result says so) and the run stops at the step boundary.
            call.error = _cut(run, call)
            call.error_type = type(error).__name__
        except Exception as error:
            call.error = f"{call.name} failed: {error}"
            call.error_type = type(error).__name__
    kept = work if call.error is not None else own
    kept = _finalize(run, call, kept, answer)
    patch = make_patch(work, kept)
    call.patch = patch or None
    if timed is not None:
        call.timed = True
        if recorder is not None and recorder.content:
            timed.content(_tool_content(call))
        timed.end("error" if call.error is not None else "result",
                  error_type=call.error_type, approved=call.approved or None)


def _outputs(run: RunState, ctx: ToolContext, produced: Generator[Any, Any, Any],
             timed: ToolRecorder | None) -> Generator[Any, None, Any]:
    """Drive a generator tool: yield each output (as JSON), return its return value. Once
    the turn's signal is set it is not resumed: it is closed and the call is cut."""
    try:
        while True:
            try:
                output = _in_context(ctx, lambda _: next(produced), timed)
            except StopIteration as stop:
                return stop.value
            yield to_json_value(output)
            if run.signal.aborted:
                raise Aborted("the turn was aborted")
    finally:
        _in_context(ctx, lambda _: produced.close(), timed)  # its cleanup sees its context


def _cut(run: RunState, call: Call) -> str:
    """The error of a call the signal cut (or kept from starting)."""
    return "stopped" if run.signal.stopped else f"{call.name} was aborted before it finished"


def _finalize(run: RunState, call: Call, work: dict[str, Any], answer: Any) -> dict[str, Any]:
    """Run ``finalize`` on a copy of ``work``: the copy if it returns, else ``work``."""
    if call.tool is None or call.tool.finalize is None:
        return work
    own: dict[str, Any] = json_copy(work)
    try:
        _in_context(_context(run, call, own, answer), call.tool.finalize)
    except Exception as error:
        if call.error is None:
            call.error = f"{call.name} failed while finalizing: {error}"
        return work
    return own


def _before_tool(run: RunState, ctx: HookContext) -> Any:
    for hook in run.hooks:
        if hook.before_tool is not None:
            result = hook.before_tool(ctx)
            if result is not None:
                return result
    return None


def _preliminary(run: RunState, call: Call, output: Any) -> ToolResult:
    return ToolResult(invocation_id=run.invocation_id, call_id=call.call_id, name=call.name,
                      result=output, preliminary=True)


def _tool_result(run: RunState, call: Call) -> ToolResult:
    return ToolResult(invocation_id=run.invocation_id, call_id=call.call_id, name=call.name,
                      result=None if call.error else call.result, error=call.error,
                      denied=call.denied)


# --- state -------------------------------------------------------------------------------------


def state_delta(run: RunState, work: dict[str, Any]) -> Generator[StreamEvent, None, None]:
    """Emit the difference between the session's state and ``work`` (nothing if none)."""
    patch = make_patch(run.session.state, work)
    if patch:
        yield run.emit(StateDelta(invocation_id=run.invocation_id, patch=patch))


def _apply(work: dict[str, Any], call: Call) -> None:
    if call.patch:
        apply_patch(work, call.patch)


def _in_context(ctx: ToolContext, fn: Callable[[ToolContext], Any],
                timed: ToolRecorder | None = None) -> Any:
    """Call ``fn`` as the current tool (``timed``: its span is the current one meanwhile)."""
    token = CURRENT_TOOL.set(ctx)
    try:
        if timed is None:
            return fn(ctx)
        with timed.running():
            return fn(ctx)
    finally:
        CURRENT_TOOL.reset(token)


# --- timing ------------------------------------------------------------------------------------


def _outcome(run: RunState, call: Call) -> None:
    """What came of a call its step did not run here (it waits for a decision, an answer or
    a result from outside; it was denied; it could not run), in the turn's timing. A call
    that ran has its timing already."""
    recorder = run.recorder
    if recorder is None or call.timed:
        return
    tool = call.tool
    if call.denied:
        outcome = "denied"
    elif call.error is not None:
        outcome = "error"
    elif call.approval_id is not None and not call.ran:
        outcome = "approval"
    elif tool is not None and tool.deferred:
        outcome = "deferred"
    elif tool is not None and tool.yields:
        outcome = "yielded"
    else:
        outcome = "result"
    timed = recorder.tool(call.call_id, call.name,
                          description=tool.description if tool is not None else None)
    if recorder.content:
        timed.content(_tool_content(call))
    timed.end(outcome, error_type=call.error_type, approved=False if call.denied else None)


def _tool_content(call: Call) -> dict[str, str]:
    """A call's arguments and result for its span (content capture only)."""
    content = {"gen_ai.tool.call.arguments": json.dumps(call.args, default=str)}
    if call.error is not None or call.result is not None:
        content["gen_ai.tool.call.result"] = call.error if call.error is not None \
            else json.dumps(call.result, default=str)
    return content
