"""The run loop: one turn of an agent against a session, as a generator of stream events.

The generator appends every ledger event to the session's uncommitted slice (where the head
fold checks it) before yielding it, and returns the :data:`RunResult`. It never writes to a
store: committing is the caller's business (``app.sessions.commit`` or a handler).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import copy_context
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from dormant._context import history_window, to_messages
from dormant._ids import new_id, now_ms
from dormant._patch import make_patch, to_json_value
from dormant.agent import Agent, ErrorHandler, Hook, HookContext, System
from dormant.errors import DuplicateMessage, InputError, PendingInputError, describe_validation
from dormant.events import (
    ApprovalRequested,
    AssistantDelta,
    AssistantEvent,
    ErrorEvent,
    Event,
    InvocationEnd,
    InvocationResume,
    InvocationStart,
    InvocationYield,
    ModelEnd,
    ModelStart,
    StateDelta,
    StreamEvent,
    ToolCall,
    ToolResult,
    ToolYield,
    Usage,
    UserEvent,
)
from dormant.events import ThoughtDelta as ThoughtDeltaEvent
from dormant.models._base import (
    Message,
    ModelRequest,
    TextDelta,
    ThoughtDelta,
    ToolCallChunk,
    UsageChunk,
)
from dormant.results import (
    CompletedResult,
    ErrorResult,
    Output,
    OutputItem,
    RunResult,
    YieldedMessageResult,
    YieldedToolResult,
)
from dormant.session import Session
from dormant.tools import Aborted, Signal, Tool, ToolContext, _current

__all__ = ["TurnInput", "run_turn"]

Clock = Callable[[], int]
Stream = Generator[StreamEvent, None, RunResult]

_pool: ThreadPoolExecutor | None = None


def _counts(usage: Usage) -> bool:
    return bool(usage.input_tokens or usage.output_tokens or usage.cached_tokens)


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="dormant-tool")
    return _pool


@dataclass
class TurnInput:
    """What starts or resumes a turn (already applied answers live in the session)."""

    message: str | None = None
    message_id: str | None = None
    state: dict[str, Any] | None = None
    invocation_id: str | None = None


@dataclass
class _Call:
    """A tool call as the tool phase handles it."""

    call_id: str
    name: str
    args: Any
    tool: Tool | None = None
    parsed: BaseModel | None = None
    error: str | None = None
    result: Any = None
    prepared: Any = None
    approval_id: str | None = None
    denied: bool = False


def run_turn(
    agent: Agent,
    session: Session,
    turn: TurnInput,
    *,
    hooks: Sequence[Hook] = (),
    error_handlers: Sequence[ErrorHandler] = (),
    signal: Signal | None = None,
    clock: Clock = now_ms,
) -> Stream:
    """Run one turn. Raises :class:`InputError` (before writing anything) for bad input."""
    run = _Run(agent, session, tuple(agent.app_hooks) + tuple(agent.hooks) + tuple(hooks),
               tuple(error_handlers), signal or Signal(), clock)
    return run.start(turn)


class _Run:
    def __init__(self, agent: Agent, session: Session, hooks: tuple[Hook, ...],
                 error_handlers: tuple[ErrorHandler, ...], signal: Signal, clock: Clock) -> None:
        self.agent = agent
        self.session = session
        self.hooks = hooks
        self.error_handlers = error_handlers
        self.signal = signal
        self.clock = clock
        self.invocation_id: str | None = None
        self.said: list[str] = []
        self.usage = Usage()

    # --- entry ---------------------------------------------------------------------------------

    def start(self, turn: TurnInput) -> Stream:
        """Check the input eagerly (so a refusal raises before anything is yielded)."""
        head = self.session.head
        if turn.message is not None:
            # A message already in the session is a redelivery, whatever the session does now
            # (e.g. it parked on a tool the message led to): say so before anything else.
            if turn.message_id is not None and head.has_message(turn.message_id):
                raise DuplicateMessage(head.session_id, turn.message_id)
            if head.parked == "tool":
                pending = [(c.call_id, c.name) for c in head.unresolved()]
                raise PendingInputError(head.session_id, pending)
            if not isinstance(turn.message, str) or not turn.message:
                raise InputError("a message must be a non-empty string")
        elif head.parked == "tool":
            if head.unresolved():
                return self._still_waiting()
        elif head.inbox == 0:
            raise InputError(
                f"nothing to run in session {head.session_id}: send a message"
                + (" (the session waits for one)" if head.parked == "message" else "")
            )
        return self._guarded(turn)

    def _still_waiting(self) -> Stream:
        self.invocation_id = self.session.head.open_invocation
        return self._finish_yield_tool()
        yield  # pragma: no cover  (makes this a generator)

    def _guarded(self, turn: TurnInput) -> Stream:
        self.session._deferred = []  # timers tools ask for wait for _flush (call order)
        try:
            return (yield from self._body(turn))
        except Aborted:
            raise
        except Exception as error:
            recovered = self._recover(error)
            if recovered is None:
                raise
            return (yield from self._reply_and_end(recovered))
        finally:
            self.session._deferred = None

    def _flush(self) -> Generator[StreamEvent, None, None]:
        """Emit what tools and hooks recorded on the session (``schedule``) since last time."""
        for event in self.session._take_deferred():
            yield self._emit(event)

    def _recover(self, error: Exception) -> str | None:
        for handler in self.error_handlers:
            text = handler(error, self._hook_context())
            if isinstance(text, str):
                return text
        return None

    def _emit(self, event: Event) -> Event:
        self.session._append(event)
        return event

    def _body(self, turn: TurnInput) -> Stream:
        head = self.session.head
        resuming_tools = False
        if turn.message is not None:
            if head.parked == "message":
                self.invocation_id = head.open_invocation
                yield self._emit(self._user(turn))
                yield self._emit(InvocationResume(invocation_id=self.invocation_id))
            else:
                self.invocation_id = turn.invocation_id or new_id("inv")
                yield self._emit(InvocationStart(invocation_id=self.invocation_id,
                                                 agent=self.agent.name))
                yield self._emit(self._user(turn))
        elif head.parked is not None:
            self.invocation_id = head.open_invocation
            resuming_tools = head.parked == "tool"
            yield self._emit(InvocationResume(invocation_id=self.invocation_id))
        else:
            self.invocation_id = turn.invocation_id or new_id("inv")
            yield self._emit(InvocationStart(invocation_id=self.invocation_id,
                                             agent=self.agent.name))
        if turn.state:
            yield from self._state_delta({**self.session.state, **turn.state})
        if resuming_tools:
            yield from self._resume_tools()
            yield from self._flush()
        for hook in self.hooks:
            if hook.before_agent is not None:
                replaced = hook.before_agent(self._hook_context())
                if isinstance(replaced, str):
                    return (yield from self._reply_and_end(replaced))
        return (yield from self._loop())

    def _user(self, turn: TurnInput) -> UserEvent:
        assert turn.message is not None
        return UserEvent(text=turn.message, message_id=turn.message_id or new_id("msg"),
                         invocation_id=self.invocation_id, ts=self.clock())

    # --- the model loop ------------------------------------------------------------------------

    def _loop(self) -> Stream:
        step = 0
        while True:
            self.signal.raise_if_aborted()
            if step >= self.agent.max_steps:
                message = (f"agent {self.agent.name!r} reached max_steps={self.agent.max_steps} "
                           "without finishing; raise max_steps or check for a tool loop")
                yield self._emit(ErrorEvent(invocation_id=self.invocation_id, message=message,
                                            code="max_steps"))
                yield self._emit(InvocationEnd(invocation_id=self.invocation_id, status="error"))
                return self._result(ErrorResult(error=message, code="max_steps"))
            step += 1
            calls = yield from self._model_step(step)
            if not calls:
                return (yield from self._settle())
            yielded = yield from self._run_tools(calls)
            yield from self._flush()
            if yielded:
                yield self._emit(InvocationYield(invocation_id=self.invocation_id, reason="tool"))
                return self._finish_yield_tool()

    def _model_step(self, step: int) -> Generator[StreamEvent, None, list[_Call]]:
        model = self.agent.model
        if model is None:
            raise InputError(f"agent {self.agent.name!r} has no model and no hook answered")
        request = self._request(step)
        self._call_hooks("before_model", request=request)
        yield ModelStart(invocation_id=self.invocation_id, step=step)
        reply_id = new_id("evt")
        thought_id = new_id("thought")
        parts: list[str] = []
        calls: list[_Call] = []
        usage = Usage()
        for chunk in model.stream(request, signal=self.signal):
            if self.signal.aborted:
                raise Aborted("the turn was aborted")
            if isinstance(chunk, TextDelta):
                if chunk.text:
                    parts.append(chunk.text)
                    yield AssistantDelta(invocation_id=self.invocation_id, message_id=reply_id,
                                         delta=chunk.text)
            elif isinstance(chunk, ThoughtDelta):
                yield ThoughtDeltaEvent(invocation_id=self.invocation_id, message_id=thought_id,
                                        delta=chunk.text)
            elif isinstance(chunk, ToolCallChunk):
                calls.append(_parse_call(chunk))
            elif isinstance(chunk, UsageChunk) and _counts(chunk.usage):
                usage = usage + chunk.usage
        if _counts(usage):
            self.usage = self.usage + usage
        yield ModelEnd(invocation_id=self.invocation_id, step=step, usage=usage)
        text = "".join(parts)
        self._call_hooks("after_model", request=request, text=text)
        if text:
            self.said.append(text)
            yield self._emit(AssistantEvent(id=reply_id, invocation_id=self.invocation_id,
                                            text=text))
        for call in calls:
            yield self._emit(ToolCall(invocation_id=self.invocation_id, call_id=call.call_id,
                                      name=call.name, args=call.args))
        return calls

    def _settle(self) -> Stream:
        """The model answered without tools: end, or park for the next message."""
        self._call_hooks("after_agent")
        yield from self._flush()
        if self.agent.yields:
            yield self._emit(InvocationYield(invocation_id=self.invocation_id, reason="message"))
            assert self.invocation_id is not None
            return self._result(YieldedMessageResult(yielded_invocation_id=self.invocation_id))
        yield self._emit(InvocationEnd(invocation_id=self.invocation_id))
        return self._result(CompletedResult())

    def _reply_and_end(self, text: str) -> Stream:
        self.said.append(text)
        yield self._emit(AssistantEvent(invocation_id=self.invocation_id, text=text))
        return (yield from self._settle())

    # --- tools ---------------------------------------------------------------------------------

    def _run_tools(self, calls: list[_Call]) -> Generator[StreamEvent, None, bool]:
        """Validate, hold calls for approval, prepare yielding calls, execute the others;
        events in call order. True if the step parks (a yield or an approval request)."""
        work = copy.deepcopy(self.session.state)
        runnable: list[_Call] = []
        for call in calls:
            self._resolve(call)
            if call.error is not None:
                continue
            assert call.tool is not None
            if call.tool.yields:
                self._prepare(call, work)
            elif self._needs_approval(call):
                call.approval_id = new_id("apr")
            else:
                runnable.append(call)
        self._execute_all(runnable, work)
        yield from self._state_delta(work)
        parks = False
        for call in calls:
            if call.approval_id is not None:
                parks = True
                yield self._emit(ApprovalRequested(
                    invocation_id=self.invocation_id, approval_id=call.approval_id,
                    call_id=call.call_id, name=call.name, args=call.args))
            elif call.error is None and call.tool is not None and call.tool.yields:
                parks = True
                yield self._emit(ToolYield(invocation_id=self.invocation_id, call_id=call.call_id,
                                           name=call.name, args=call.prepared))
            else:
                yield self._emit(self._tool_result(call))
        return parks

    def _execute_all(self, runnable: list[_Call], work: dict[str, Any]) -> None:
        """Independent calls run concurrently (each in a copy of this context)."""
        if len(runnable) > 1:
            futures = [_executor().submit(copy_context().run, self._execute, c, work, None)
                       for c in runnable]
            for future in futures:
                future.result()
        else:
            for call in runnable:
                self._execute(call, work, None)

    def _needs_approval(self, call: _Call) -> bool:
        policy = (self.agent.tool_approval or {}).get(call.name)
        if policy is None:
            return False
        decision = policy(call.parsed) if callable(policy) else policy
        if decision not in ("user-approval", "approved"):
            call.error = (f"the approval policy for {call.name} returned {decision!r}; "
                          "expected 'user-approval' or 'approved'")
            return False
        return bool(decision == "user-approval")

    def _resume_tools(self) -> Generator[StreamEvent, None, None]:
        """Settle the parked step in call order: execute/finalize answered yields, run approved
        calls, record denials."""
        work = copy.deepcopy(self.session.state)
        done: list[_Call] = []
        approved: list[_Call] = []
        for pending in self.session.head.step:
            if pending.settled:
                continue
            if pending.approval_id is not None:
                call = _Call(call_id=pending.call_id, name=pending.name, args=pending.args)
                if pending.approved:
                    self._resolve(call)
                    if call.error is None:
                        approved.append(call)
                else:
                    call.denied = True
                    call.error = "Denied by the user" + (
                        f": {pending.reason}" if pending.reason else "")
                done.append(call)
                continue
            if not pending.yielded:
                continue
            args = pending.prepared if pending.prepared is not None else pending.args
            call = _Call(call_id=pending.call_id, name=pending.name, args=args)
            self._resolve(call)
            if call.error is None:
                assert call.tool is not None and call.tool.yield_schema is not None
                try:
                    answer = call.tool.yield_schema.model_validate(pending.input)
                except ValidationError as error:
                    reason = describe_validation(error, "(root)")
                    call.error = f"Invalid input for {call.name}: {reason}"
                    self._finalize(call, work, None)
                else:
                    self._execute(call, work, answer)
            done.append(call)
        self._execute_all(approved, work)
        yield from self._state_delta(work)
        for call in done:  # already in call order: the loop walked the step
            yield self._emit(self._tool_result(call))

    def _resolve(self, call: _Call) -> None:
        if call.error is not None:
            return
        tool = self.agent.tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(self.agent.tools)) or "none"
            call.error = f"Unknown tool {call.name!r}. Available tools: {known}"
            return
        call.tool = tool
        try:
            call.parsed = tool.schema.model_validate(call.args)
        except ValidationError as error:
            reason = describe_validation(error, "(root)")
            call.error = f"Invalid arguments for {call.name}: {reason}"

    def _context(self, call: _Call, work: dict[str, Any], answer: Any) -> ToolContext:
        return ToolContext(args=call.parsed, state=work, call_id=call.call_id,
                           session=self.session, tool=call.name,
                           invocation_id=self.invocation_id, input=answer, signal=self.signal)

    def _prepare(self, call: _Call, work: dict[str, Any]) -> None:
        assert call.tool is not None
        ctx = self._context(call, work, None)
        prepared: Any = call.parsed
        if call.tool.prepare is not None:
            try:
                returned = _in_context(ctx, call.tool.prepare)
            except Exception as error:
                call.error = f"{call.name} failed before pausing: {error}"
                return
            if returned is not None:
                prepared = returned
        call.prepared = to_json_value(prepared)

    def _execute(self, call: _Call, work: dict[str, Any], answer: Any) -> None:
        assert call.tool is not None
        ctx = self._context(call, work, answer)
        tool_hook = self._hook_context(tool=ctx)
        try:
            result = self._before_tool(tool_hook)
            if result is None:
                if call.tool.execute is not None:
                    result = _in_context(ctx, call.tool.execute)
                else:
                    result = answer
            for hook in self.hooks:
                if hook.after_tool is not None:
                    tool_hook.result = result
                    replaced = hook.after_tool(tool_hook)
                    if replaced is not None:
                        result = replaced
            call.result = to_json_value(result)
        except Aborted:
            raise
        except Exception as error:
            call.error = f"{call.name} failed: {error}"
        self._finalize(call, work, answer)

    def _finalize(self, call: _Call, work: dict[str, Any], answer: Any) -> None:
        if call.tool is None or call.tool.finalize is None:
            return
        finalize = call.tool.finalize
        try:
            _in_context(self._context(call, work, answer), finalize)
        except Exception as error:
            if call.error is None:
                call.error = f"{call.name} failed while finalizing: {error}"

    def _before_tool(self, ctx: HookContext) -> Any:
        for hook in self.hooks:
            if hook.before_tool is not None:
                result = hook.before_tool(ctx)
                if result is not None:
                    return result
        return None

    def _tool_result(self, call: _Call) -> ToolResult:
        return ToolResult(invocation_id=self.invocation_id, call_id=call.call_id, name=call.name,
                          result=None if call.error else call.result, error=call.error,
                          denied=call.denied)

    def _state_delta(self, work: dict[str, Any]) -> Generator[StreamEvent, None, None]:
        patch = make_patch(self.session.state, work)
        if patch:
            yield self._emit(StateDelta(invocation_id=self.invocation_id, patch=patch))

    # --- results and context -------------------------------------------------------------------

    def _finish_yield_tool(self) -> RunResult:
        return self._result(YieldedToolResult(yielded_tools=self.session.yielded_tools,
                                              pending_approvals=self.session.pending_approvals))

    def _result(self, result: RunResult) -> RunResult:
        # Filled in place: the result was made a moment ago by this run and nobody holds it.
        said = self.said
        object.__setattr__(result, "output", Output(
            items=[OutputItem(text=text) for text in said], text=said[-1] if said else ""))
        object.__setattr__(result, "invocation_id", self.invocation_id)
        object.__setattr__(result, "usage", self.usage)
        object.__setattr__(result, "session_", self.session)
        return result

    def _hook_context(self, **fields: Any) -> HookContext:
        return HookContext(agent=self.agent, session=self.session,
                           invocation_id=self.invocation_id, state=self.session.state, **fields)

    def _call_hooks(self, name: str, **fields: Any) -> None:
        ctx: HookContext | None = None
        for hook in self.hooks:
            fn = getattr(hook, name)
            if fn is not None:
                ctx = ctx or self._hook_context(**fields)
                fn(ctx)

    def _request(self, step: int) -> ModelRequest:
        system = [item.render(self.session) for item in self.agent.context
                  if isinstance(item, System)]
        tools = self.agent.tool_specs
        has_history = self.agent.has_history
        limit = self.agent.history_turns
        session = self.session
        seen = session.head.seq  # the lazy read below must not see later events

        def messages() -> list[Message]:
            if not has_history:
                return []
            return to_messages(history_window(session, limit, seen))

        return ModelRequest(system=system, tools=tools, messages=messages, step=step)


def _in_context(ctx: ToolContext, fn: Callable[[ToolContext], Any]) -> Any:
    token = _current.set(ctx)
    try:
        return fn(ctx)
    finally:
        _current.reset(token)


def _parse_call(chunk: ToolCallChunk) -> _Call:
    args = chunk.args
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as error:
            return _Call(chunk.call_id, chunk.name, args,
                         error=f"Invalid arguments for {chunk.name}: not JSON ({error.msg})")
    return _Call(chunk.call_id, chunk.name, to_json_value(args))
