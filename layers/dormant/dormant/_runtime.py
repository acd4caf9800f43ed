"""The run loop: one turn of an agent against a session, as a generator of stream events.

The generator appends every ledger event to the session's uncommitted slice (where the head
fold checks it) before yielding it, and returns the :data:`RunResult`. It never writes to a
store: committing is the caller's business (``app.sessions.commit`` or a handler).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

from dormant._context import history_window, to_messages
from dormant._ids import new_id, now_ms
from dormant._patch import to_json_value
from dormant._toolphase import ToolPhase, _Call
from dormant.agent import Agent, ErrorHandler, Hook, HookContext, System
from dormant.errors import (
    DuplicateMessage,
    InputError,
    PendingInputError,
    RetryRefused,
    SessionFailed,
)
from dormant.events import (
    AssistantDelta,
    AssistantEvent,
    ErrorEvent,
    Event,
    InvocationEnd,
    InvocationFailed,
    InvocationResume,
    InvocationStart,
    InvocationYield,
    ModelEnd,
    ModelStart,
    RetryEvent,
    StreamEvent,
    ToolCall,
    Usage,
    UserEvent,
)
from dormant.events import ThoughtDelta as ThoughtDeltaEvent
from dormant.models._base import (
    Message,
    ModelError,
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
from dormant.tools import Aborted, Signal

__all__ = ["TurnInput", "run_turn"]

Clock = Callable[[], int]
Stream = Generator[StreamEvent, None, RunResult]



def _counts(usage: Usage) -> bool:
    return bool(usage.input_tokens or usage.output_tokens or usage.cached_tokens)


@dataclass
class TurnInput:
    """What starts or resumes a turn (already applied answers live in the session)."""

    message: str | None = None
    message_id: str | None = None
    state: dict[str, Any] | None = None
    invocation_id: str | None = None
    #: Rerun the failed invocation's failed model call (SPEC §8); lands once per id.
    retry_id: str | None = None




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


class _Run(ToolPhase):
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
        #: True once a tool's side effect may have happened in this turn: from then on a
        #: failure commits the finished steps instead of writing nothing.
        self.ran = False
        self._unmarked = False

    # --- entry ---------------------------------------------------------------------------------

    def start(self, turn: TurnInput) -> Stream:
        """Check the input eagerly (so a refusal raises before anything is yielded)."""
        head = self.session.head
        if turn.retry_id is not None:
            if head.has_retry(turn.retry_id):
                raise RetryRefused(head.session_id, turn.retry_id, duplicate=True)
            if not head.failed:
                raise RetryRefused(head.session_id, turn.retry_id)
            return self._guarded(turn)
        if turn.message is not None:
            # A message already in the session is a redelivery, whatever the session does now
            # (e.g. it parked on a tool the message led to): say so before anything else.
            if turn.message_id is not None and head.has_message(turn.message_id):
                raise DuplicateMessage(head.session_id, turn.message_id)
            if head.parked == "tool":
                pending = [(c.call_id, c.name) for c in head.unresolved()]
                raise PendingInputError(head.session_id, pending)
            if head.failed:
                raise SessionFailed(head.session_id, head.open_invocation)
            if not isinstance(turn.message, str) or not turn.message:
                raise InputError("a message must be a non-empty string")
        elif head.parked == "tool":
            if head.unresolved():
                return self._still_waiting()
        elif head.failed:
            raise SessionFailed(head.session_id, head.open_invocation)
        elif head.inbox == 0:
            raise InputError(
                f"nothing to run in session {head.session_id}: send a message"
                + (" (the session waits for one)" if head.parked == "message" else "")
            )
        return self._guarded(turn)

    def _still_waiting(self) -> Stream:
        """Some calls of the parked step are still unanswered: nothing to run yet."""
        yield from ()
        self.invocation_id = self.session.head.open_invocation
        return self._finish_yield_tool()

    def _guarded(self, turn: TurnInput) -> Stream:
        self.session._deferred = []  # timers tools ask for wait for _flush (call order)
        try:
            return (yield from self._body(turn))
        except Aborted as error:
            if not self.ran:
                raise  # seed 002: an aborted turn that changed nothing writes nothing
            code = "deadline" if self.signal.expired else "aborted"
            return (yield from self._failed(code, str(error), retryable=True))
        except Exception as error:
            recovered = self._recover(error)
            if recovered is not None:
                return (yield from self._reply_and_end(recovered))
            if not self.ran:
                raise
            code, retryable = _failure(error)
            return (yield from self._failed(code, f"{error}", retryable=retryable))
        finally:
            self.session._deferred = None

    def _failed(self, code: str, message: str, *, retryable: bool) -> Stream:
        """A tool ran, then the turn failed: keep every finished step (what changed the
        world), drop the failed step's uncommitted output, record why. The session is
        ``failed`` until a retry reruns the failed model call."""
        self.session.rewind_to_effects()
        self.session._take_deferred()
        yield self._emit(InvocationFailed(invocation_id=self.invocation_id, code=code,
                                          message=message, retryable=retryable))
        return self._result(ErrorResult(error=message, code=code))

    def _flush(self) -> Generator[StreamEvent, None, None]:
        """Emit what tools and hooks recorded on the session (``schedule``) since last time."""
        for event in self.session._take_deferred():
            yield self._emit(event)
        if self._unmarked:
            self._unmarked = False
            self.session.mark_effects()

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
        if turn.retry_id is not None:
            self.invocation_id = head.open_invocation
            yield self._emit(RetryEvent(invocation_id=self.invocation_id,
                                        retry_id=turn.retry_id))
            return (yield from self._loop())
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

    def _note_effects(self) -> None:
        """Tools of this step ran: once the step's results and the timers its tools asked
        for are in the slice (:meth:`_flush`), that is what a failure keeps."""
        self.ran = True
        self._unmarked = True

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
        position = self.session.head.seq
        for index, call in enumerate(calls):
            if not call.call_id:
                call.call_id = derive_call_id(self.invocation_id, position, index)
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


def derive_call_id(invocation_id: str | None, position: int, index: int) -> str:
    """A call id from where the call sits: the invocation, the ledger position of its step
    and its index. A rerun of the same step from the same ledger (a retry resent, a
    redelivered message) gets the same ids, so side effects keyed by call id run once."""
    seed = f"{invocation_id}|{position}|{index}".encode()
    return "call_" + hashlib.blake2b(seed, digest_size=8).hexdigest()


def _failure(error: Exception) -> tuple[str, bool]:
    """The code and retryability an ``invocation_failed`` records for ``error``."""
    if isinstance(error, ModelError):
        return error.code, error.retryable
    return str(getattr(error, "code", "run_error")), True


def _parse_call(chunk: ToolCallChunk) -> _Call:
    args = chunk.args
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as error:
            return _Call(chunk.call_id, chunk.name, args,
                         error=f"Invalid arguments for {chunk.name}: not JSON ({error.msg})")
    return _Call(chunk.call_id, chunk.name, to_json_value(args))
