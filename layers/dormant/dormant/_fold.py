"""The fold: each ledger event's rule, applied to the session head.

Every event passes through :func:`apply` exactly once on its way into a session, and again
when a refused commit is merged onto a newer head: that second pass is where an input that is
no longer valid (an answer to a call somebody else answered) is caught. One handler per event
type (``_on_<event>``), found by the event's class in one table (the shape of Temporal's
``_apply_<job>``): an event type with no handler (an assistant reply, ...) changes nothing the
head keeps but its position.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dormant._head import (
    DIGEST_ANSWERED,
    DIGEST_DECIDED,
    DIGEST_EVENT,
    DIGEST_INPUT,
    INVOCATION_WINDOW,
    MESSAGE_ID_WINDOW,
    TURN_INDEX_SIZE,
    Head,
    PendingCall,
    message_digest,
    preview_of,
)
from dormant._patch import apply_patch
from dormant.errors import (
    AlreadyAnswered,
    AlreadyDecided,
    DuplicateMessage,
    InputError,
    NotPending,
    NotRunning,
    PendingInputError,
    ResumeError,
    SessionFailed,
    SessionPaused,
    SessionRunning,
    StaleTimer,
)
from dormant.events import (
    AppEvent,
    ApprovalDecided,
    ApprovalRequested,
    CompactionEvent,
    Event,
    HandoffEvent,
    InputRequested,
    InputResponse,
    InterruptEvent,
    InvocationEnd,
    InvocationFailed,
    InvocationResume,
    InvocationStart,
    InvocationYield,
    PauseEvent,
    QueuedEvent,
    QueueEdit,
    QueueMove,
    QueueRemove,
    QueueSendNow,
    ResumeEvent,
    RetryEvent,
    SeedEvent,
    StateDelta,
    SteerEvent,
    StopRequested,
    TimerCancelled,
    TimerFired,
    TimerSet,
    ToolCall,
    ToolDeferred,
    ToolInput,
    ToolResult,
    ToolYield,
    TurnTiming,
    UserEvent,
    sum_cost,
)

__all__ = ["apply", "apply_detached"]


def apply(head: Head, event: Event) -> None:
    """Fold ``event`` into ``head`` in place, refusing transitions the ledger cannot make."""
    handler = _HANDLERS.get(type(event))
    if handler is not None:
        handler(head, event)
    head.seq += 1
    head.last_event = event.id


def apply_detached(head: Head, event: Event) -> None:
    """Fold ``event`` as a record of a closed invocation that lands beside the head's own
    (a superseded turn's kept tool results): it moves the ledger position, lands its message
    ids once, applies its state and timer changes, and leaves the head's open invocation, its
    step and its parking alone."""
    match event:
        case UserEvent():
            position = head.queued(event.message_id) if event.queued else None
            if position is not None:
                del head.queue[position]
            elif not event.queued:
                digest = message_digest(event.message_id)
                if digest in head.message_ids:
                    raise DuplicateMessage(head.session_id, event.message_id)
                _remember(head, digest)
            head.turn_starts.append(head.seq)
            del head.turn_starts[:-TURN_INDEX_SIZE]
            head.last_user_ts = max(head.last_user_ts, event.ts)
        case StateDelta():
            apply_patch(head.state, event.patch)
        case TimerSet():
            head.timers[event.name] = event.model_dump(
                mode="json", include={"name", "fire_at", "message", "message_id", "tool_input"})
        case TimerCancelled() | TimerFired():
            head.timers.pop(event.name, None)
    head.seq += 1
    head.last_event = event.id


# --- one handler per event -----------------------------------------------------------------


def _on_invocation_start(head: Head, event: InvocationStart) -> None:
    _refuse_if_parked_on_tools(head)
    _refuse_if_failed(head)
    _refuse_if_running(head)
    _refuse_if_paused(head)
    if event.invocation_id is not None:
        _remember_invocation(head, event.invocation_id)
    head.open_invocation = event.invocation_id
    head.lease = 0
    head.takeovers = 0
    head.retries = 0
    head.calls = 0
    head.agent = event.agent or head.agent
    head.parked = None
    head.step = []
    head.inbox = 0


def _on_handoff(head: Head, event: HandoffEvent) -> None:
    head.agent = event.to_agent  # later requests run it (the handler's entry agent's team)


def _on_invocation_end(head: Head, event: InvocationEnd) -> None:
    if event.invocation_id is not None and event.invocation_id != head.open_invocation:
        # an invocation ends once: a second ending (two requests raced to end it)
        # is refused, never appended after the first
        raise NotRunning(head.session_id, event.invocation_id)
    head.lease = 0
    head.open_invocation = None
    head.parked = None
    head.step = []
    head.failed = False
    if event.timing is not None:
        _count_usage(head, event.timing)


def _on_tool_call(head: Head, event: ToolCall) -> None:
    head.calls += 1
    scope = event.scope
    if scope is None:
        if all(c.settled for c in head.step):
            head.step = []
        head.step.append(PendingCall(call_id=event.call_id, name=event.name, args=event.args,
                                     dynamic=event.dynamic))
        return
    # A sub-agent's call joins its parent's step, which waits on it; the sub-agent's
    # earlier steps, all settled, leave it.
    parent = scope.call_id
    if all(c.settled for c in head.step if c.scope == parent):
        gone = {parent}
        for c in head.step:  # (a call's own sub-agent's calls come after it)
            if c.scope in gone:
                gone.add(c.call_id)
        head.step = [c for c in head.step if c.scope is None or c.scope not in gone]
    head.step.append(PendingCall(call_id=event.call_id, name=event.name, args=event.args,
                                 dynamic=event.dynamic, scope=parent, path=scope.path))


def _on_tool_yield(head: Head, event: ToolYield) -> None:
    call = _known_call(head, event.call_id)
    call.yielded = True
    call.prepared = event.args


def _on_tool_deferred(head: Head, event: ToolDeferred) -> None:
    _known_call(head, event.call_id).deferred = True
    if event.delegate is not None:
        head.children = [*head.children, {"session": event.delegate, "call_id": event.call_id}]


def _on_invocation_yield(head: Head, event: InvocationYield) -> None:
    head.parked = event.reason
    head.lease = 0
    if event.timing is not None:
        _count_usage(head, event.timing)


def _on_approval_requested(head: Head, event: ApprovalRequested) -> None:
    _known_call(head, event.call_id).approval_id = event.approval_id


def _on_timer_set(head: Head, event: TimerSet) -> None:
    head.timers[event.name] = event.model_dump(
        mode="json", include={"name", "fire_at", "message", "message_id", "tool_input"})


def _on_timer_cancelled(head: Head, event: TimerCancelled) -> None:
    head.timers.pop(event.name, None)


def _on_tool_result(head: Head, event: ToolResult) -> None:
    settled = head.call(event.call_id)
    if event.deferred:
        _deferred_result(head, event, settled)
    if settled is not None and settled.settled and not event.preliminary:
        raise AlreadyAnswered(head.session_id, event.call_id)  # one final result
    if settled is not None and not event.preliminary:
        if (settled.yielded and not settled.answered) or settled.deferred:
            # Ended with no answer (a stop, an interrupt): a late answer is told
            # "already answered" once the step is gone, not "not awaiting input".
            _settle(head, message_digest(DIGEST_ANSWERED + event.call_id))
        if settled.approval_id is not None and not settled.decided:
            _settle(head, message_digest(DIGEST_DECIDED + settled.approval_id))  # likewise
        settled.settled = True


def _on_state_delta(head: Head, event: StateDelta) -> None:
    apply_patch(head.state, event.patch)


def _on_invocation_failed(head: Head, event: InvocationFailed) -> None:
    head.failed = True
    head.parked = None
    head.lease = 0
    if event.timing is not None:
        _count_usage(head, event.timing)


def _on_queued(head: Head, event: QueuedEvent) -> None:
    _remember_once(head, event.message_id)
    item = {"id": event.message_id, "text": event.text, "queued_at": event.ts}
    if event.audio:
        item["audio"] = True
    head.queue.insert(max(0, min(event.position, len(head.queue))), item)


def _on_queue_edit(head: Head, event: QueueEdit) -> None:
    head.queue[_queued(head, event.message_id)]["text"] = event.text


def _on_queue_move(head: Head, event: QueueMove) -> None:
    moved = head.queue.pop(_queued(head, event.message_id))
    head.queue.insert(max(0, min(event.position, len(head.queue))), moved)


def _on_queue_remove(head: Head, event: QueueRemove) -> None:
    del head.queue[_queued(head, event.message_id)]


def _on_queue_send_now(head: Head, event: QueueSendNow) -> None:
    head.queue.insert(0, head.queue.pop(_queued(head, event.message_id)))


def _on_seed(head: Head, event: SeedEvent) -> None:
    _remember_once(head, event.message_id)


def _on_app_event(head: Head, event: AppEvent) -> None:
    if event.event_id is not None:  # an id lands once, like a message id
        digest = message_digest(DIGEST_EVENT + event.event_id)
        if digest in head.message_ids:
            raise DuplicateMessage(head.session_id, event.event_id)
        _remember(head, digest)


def _on_compaction(head: Head, event: CompactionEvent) -> None:
    if not 0 <= event.tail_start <= head.seq:
        raise InputError(f"a compaction's tail starts at {event.tail_start}, outside "
                         f"the ledger of session {head.session_id}")
    # merged after a newer one (two turns raced): the newer summary stays in force
    head.compacted_to = max(head.compacted_to, event.tail_start)
    head.compactions += 1


def _on_input_requested(head: Head, event: InputRequested) -> None:
    if head.pending_input(event.input_id) is not None:
        raise InputError(f"input {event.input_id} is already requested in session "
                         f"{head.session_id}")
    head.inputs.append({"input_id": event.input_id, "schema": event.input_schema,
                        "prompt": event.prompt})


def _on_input_response(head: Head, event: InputResponse) -> None:
    _respond(head, event.input_id)


def _on_pause(head: Head, event: PauseEvent) -> None:
    head.paused = True
    head.lease = 0
    if event.rev:
        head.control_rev = event.rev  # the control record's pause is taken up
    if event.timing is not None:
        _count_usage(head, event.timing)


def _count_usage(head: Head, timing: TurnTiming) -> None:
    """Add a timed turn's tokens and cost to the session's (``Head.usage``: a
    :class:`~dormant.events.Usage` as a dict, and ``turns``). The head's own sums are
    trusted: added up as they are (this runs in the fold, once a turn)."""
    summed = head.usage or {}
    usage = timing.usage
    head.usage = {
        "input_tokens": summed.get("input_tokens", 0) + usage.input_tokens,
        "output_tokens": summed.get("output_tokens", 0) + usage.output_tokens,
        "cached_tokens": summed.get("cached_tokens", 0) + usage.cached_tokens,
        "reasoning_tokens": summed.get("reasoning_tokens", 0) + usage.reasoning_tokens,
        "cost": sum_cost(summed.get("cost"), usage.cost),
        "turns": summed.get("turns", 0) + 1}


def _on_resume(head: Head, event: ResumeEvent) -> None:
    if not head.paused:
        raise NotPending(f"session {head.session_id} is not paused: nothing to resume")
    head.paused = False
    if event.rev:
        head.control_rev = event.rev  # a pause asked in the record is over


def _on_interrupt(head: Head, event: InterruptEvent) -> None:
    _interrupt(head, event.owner)


def _on_stop_requested(head: Head, event: StopRequested) -> None:
    if event.invocation_id is None or head.open_invocation != event.invocation_id:
        raise NotRunning(head.session_id, str(event.invocation_id))
    head.parked = None


def _on_steer(head: Head, event: SteerEvent) -> None:
    if event.invocation_id is None or head.open_invocation != event.invocation_id:
        raise NotRunning(head.session_id, str(event.invocation_id),
                         "a steer joins only the invocation it names")


# --- what the handlers share -----------------------------------------------------------------


def _refuse_if_parked_on_tools(head: Head) -> None:
    if head.parked == "tool":
        pending = [(c.call_id, c.name) for c in head.unresolved()]
        raise PendingInputError(head.session_id, pending)


def _remember_invocation(head: Head, invocation_id: str) -> None:
    head.invocations.append(message_digest(invocation_id))
    del head.invocations[:-INVOCATION_WINDOW]


def _remember_once(head: Head, message_id: str) -> None:
    digest = message_digest(message_id)
    if digest in head.message_ids:
        raise DuplicateMessage(head.session_id, message_id)
    _remember(head, digest)


def _queued(head: Head, message_id: str) -> int:
    position = head.queued(message_id)
    if position is None:
        raise NotPending(f"message {message_id} is not queued in session {head.session_id}"
                         + (" (inbox: " + ", ".join(q["id"] for q in head.queue) + ")"
                            if head.queue else " (the inbox is empty)"))
    return position


def _respond(head: Head, input_id: str) -> None:
    answered = message_digest(DIGEST_INPUT + input_id)
    item = head.pending_input(input_id)
    if item is None:
        if answered in head.settled_ids:
            raise AlreadyAnswered(head.session_id, input_id)
        raise NotPending(f"input {input_id} is not requested in session {head.session_id}"
                         + (" (pending: " + ", ".join(i["input_id"] for i in head.inputs) + ")"
                            if head.inputs else " (no input request is open)"))
    head.inputs.remove(item)
    _settle(head, answered)


def _interrupt(head: Head, owner: str) -> None:
    """Check that ``owner`` names what the session waits on now (one id, so a delayed
    interrupt cannot end later work); an input request it names is closed here, a waiting
    or failed invocation is ended by the events that follow."""
    if head.pending_input(owner) is not None:
        head.inputs = [i for i in head.inputs if i["input_id"] != owner]
        _settle(head, message_digest(DIGEST_INPUT + owner))
        return
    if head.open_invocation == owner and (head.failed or head.parked is None):
        return  # a failed invocation, or one left running (its turn may have died)
    if head.parked == "tool" and any(
            owner in (c.call_id, c.approval_id) for c in head.unresolved()):
        return
    waiting = [c.call_id for c in head.unresolved()] + [
        c.approval_id for c in head.unresolved() if c.approval_id] + [
        i["input_id"] for i in head.inputs] + (
        [head.open_invocation] if head.open_invocation and (head.failed or head.parked is None)
        else [])
    raise NotPending(f"interrupt {owner} refused in session {head.session_id}: it is not what "
                     "the session waits on" + (f" (waiting on: {', '.join(waiting)})"
                                               if waiting else " (nothing is waiting)"))


def _refuse_if_running(head: Head) -> None:
    """Another invocation is running (its claim committed): a new one cannot start beside it.
    A request that read the session before that claim and merges onto it lands here: its
    turn is superseded, its message not run beside the other."""
    if head.open_invocation is not None and head.parked is None and not head.paused:
        raise SessionRunning(head.session_id, head.open_invocation)


def _refuse_if_paused(head: Head) -> None:
    """Nothing new starts while the session is paused (messages wait in the inbox). A turn
    that read the session before the pause landed and merges onto it lands here: it is
    superseded, and what its tools did is kept beside the paused invocation."""
    if head.paused:
        raise SessionPaused(head.session_id)


def _refuse_if_failed(head: Head) -> None:
    if head.failed:
        raise SessionFailed(head.session_id, head.open_invocation)


def _on_user(head: Head, event: UserEvent) -> None:
    if event.steer:  # taken by the running invocation at a step boundary
        if head.open_invocation is None or head.open_invocation != event.invocation_id:
            raise NotRunning(head.session_id, str(event.invocation_id),
                             "a steer joins only the invocation it names")
        _remember_once(head, event.message_id)
        head.turn_starts.append(head.seq)
        del head.turn_starts[:-TURN_INDEX_SIZE]
        head.last_user_ts = max(head.last_user_ts, event.ts)
        return
    _refuse_if_parked_on_tools(head)
    if event.queued:  # it leaves the inbox (its id landed when it was queued)
        position = head.queued(event.message_id)
        if position is None:
            raise NotPending(f"message {event.message_id} is no longer queued in session "
                             f"{head.session_id} (it ran, or was removed)")
        _refuse_if_failed(head)
        del head.queue[position]
    else:
        digest = message_digest(event.message_id)
        if digest in head.message_ids:
            raise DuplicateMessage(head.session_id, event.message_id)
        _refuse_if_failed(head)
        _remember(head, digest)
    head.turn_starts.append(head.seq)
    del head.turn_starts[:-TURN_INDEX_SIZE]
    head.last_user_ts = max(head.last_user_ts, event.ts)
    if head.preview is None:
        head.preview = preview_of(event.text)
    if head.open_invocation is None or head.parked == "message":
        head.inbox += 1


def _settle(head: Head, digest: str) -> None:
    head.settled_ids.append(digest)
    del head.settled_ids[:-MESSAGE_ID_WINDOW]


def _remember(head: Head, digest: str) -> None:
    head.message_ids.append(digest)
    del head.message_ids[:-MESSAGE_ID_WINDOW]
    if head.messages >= 0:
        head.messages += 1


def _on_retry(head: Head, event: RetryEvent) -> None:
    _remember(head, head.admit_retry(event.retry_id, event.invocation_id))
    head.failed = False
    head.retries += 1


def _on_tool_input(head: Head, event: ToolInput) -> None:
    call = head.call(event.call_id)
    answered = message_digest(DIGEST_ANSWERED + event.call_id)
    if (call is not None and call.yielded and (call.answered or call.settled)) or (
            call is None and answered in head.settled_ids):
        raise AlreadyAnswered(head.session_id, event.call_id)
    if call is not None and call.deferred:
        raise NotPending(f"call {event.call_id} ({call.name}) is deferred: its result comes "
                         "from trusted server code (input.tool_result), not a tool input")
    if call is None or not call.yielded or call.settled:
        raise NotPending(
            f"call {event.call_id} is not awaiting input in session {head.session_id}"
            + _awaiting(head)
        )
    call.answered = True
    call.input = event.input
    _settle(head, answered)


def _deferred_result(head: Head, event: ToolResult, call: PendingCall | None) -> None:
    """A result supplied from outside lands only on a deferred call that still waits for it:
    once (a redelivery is told "already answered", also after the step moved on)."""
    if (call is not None and call.deferred and call.settled) or (
            call is None and message_digest(DIGEST_ANSWERED + event.call_id) in head.settled_ids):
        raise AlreadyAnswered(head.session_id, event.call_id)
    if call is None or not call.deferred or head.parked != "tool" or event.preliminary:
        waiting = ", ".join(f"{c.name} {c.call_id}" for c in head.pending_deferred())
        raise NotPending(
            f"call {event.call_id} is not a deferred call waiting for its result in session "
            f"{head.session_id}" + (f" (waiting: {waiting})" if waiting
                                    else " (no deferred call is waiting)"))


def _on_approval_decided(head: Head, event: ApprovalDecided) -> None:
    call = head.approval(event.approval_id)
    decided = message_digest(DIGEST_DECIDED + event.approval_id)
    if (call is not None and (call.decided or call.settled)) or (
            call is None and decided in head.settled_ids):
        raise AlreadyDecided(head.session_id, event.approval_id)
    if call is None:
        pending = ", ".join(f"{c.approval_id} ({c.name})" for c in head.pending_approvals())
        raise NotPending(
            f"approval {event.approval_id} is not pending in session {head.session_id}"
            + (f" (pending: {pending})" if pending else " (no approval is pending)")
        )
    call.decided = True
    call.approved = event.approved
    call.reason = event.reason
    _settle(head, decided)


def _on_timer_fired(head: Head, event: TimerFired) -> None:
    timer = head.timers.get(event.name)
    if timer is None or timer["fire_at"] != event.fire_at:
        raise StaleTimer(head.session_id, event.name)
    del head.timers[event.name]


def _on_invocation_resume(head: Head, event: InvocationResume) -> None:
    if head.parked is None or head.open_invocation != event.invocation_id:
        raise ResumeError(
            f"invocation {event.invocation_id} of session {head.session_id} is not parked"
        )
    if head.parked == "tool" and head.unresolved():
        names = ", ".join(c.call_id for c in head.unresolved())
        raise ResumeError(f"session {head.session_id} still awaits input for {names}")
    head.parked = None
    head.inbox = 0


def _known_call(head: Head, call_id: str) -> PendingCall:
    call = head.call(call_id)
    if call is None:
        raise InputError(f"call {call_id} is not part of the open step of {head.session_id}")
    return call


def _awaiting(head: Head) -> str:
    pending = head.pending_yields()
    if not pending:
        return " (nothing is awaiting input)"
    return " (awaiting: " + ", ".join(f"{c.name} {c.call_id}" for c in pending) + ")"


#: Each event type's handler, by class (an event's class is exactly one of these).
_HANDLERS: dict[type[Any], Callable[[Head, Any], None]] = {
    UserEvent: _on_user,
    InvocationStart: _on_invocation_start,
    InvocationEnd: _on_invocation_end,
    ToolCall: _on_tool_call,
    ToolYield: _on_tool_yield,
    ToolDeferred: _on_tool_deferred,
    InvocationYield: _on_invocation_yield,
    ToolInput: _on_tool_input,
    ApprovalRequested: _on_approval_requested,
    ApprovalDecided: _on_approval_decided,
    TimerSet: _on_timer_set,
    TimerCancelled: _on_timer_cancelled,
    TimerFired: _on_timer_fired,
    InvocationResume: _on_invocation_resume,
    ToolResult: _on_tool_result,
    StateDelta: _on_state_delta,
    InvocationFailed: _on_invocation_failed,
    RetryEvent: _on_retry,
    QueuedEvent: _on_queued,
    QueueEdit: _on_queue_edit,
    QueueMove: _on_queue_move,
    QueueRemove: _on_queue_remove,
    QueueSendNow: _on_queue_send_now,
    SeedEvent: _on_seed,
    AppEvent: _on_app_event,
    CompactionEvent: _on_compaction,
    InputRequested: _on_input_requested,
    InputResponse: _on_input_response,
    PauseEvent: _on_pause,
    ResumeEvent: _on_resume,
    InterruptEvent: _on_interrupt,
    StopRequested: _on_stop_requested,
    SteerEvent: _on_steer,
    HandoffEvent: _on_handoff,
}
