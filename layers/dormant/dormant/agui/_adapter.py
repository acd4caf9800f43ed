"""``AgUIAdapter``: dormant stream events in, AG-UI events out, for one AG-UI run."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from ag_ui.core import (
    PROTOCOL_VERSION,
    BaseEvent,
    CustomEvent,
    Interrupt,
    MessagesSnapshotEvent,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from dormant._ids import now_ms
from dormant._turn_wire import TurnResult
from dormant.agui._messages import CallLike, args_json, result_text, to_agui_messages
from dormant.errors import is_client_error, public_message
from dormant.events import (
    AppEvent,
    AssistantDelta,
    Event,
    ModelStart,
    QueuedEvent,
    SeedEvent,
    StateDelta,
    StreamEvent,
    ThoughtDelta,
    ToolCall,
    ToolResult,
    Usage,
    UserEvent,
)
from dormant.types import PendingApproval, YieldedTool

__all__ = [
    "CONTROL_ACCEPTED",
    "LEDGER_EVENT_PREFIX",
    "QUEUED",
    "RUN_INTERRUPTED",
    "SUBAGENT",
    "TOOL_PROGRESS",
    "AgUIAdapter",
    "ToolTransformer",
]

#: Name of the ``CUSTOM`` event a run that parked on yielded tools sends before it finishes.
#: The answer an approval interrupt expects (``resume`` payload).
_DECISION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["approved"],
}

RUN_INTERRUPTED = "RUN_INTERRUPTED"
#: ``CUSTOM`` name: a message went to the session's inbox (value: ``id``, ``position``).
QUEUED = "QUEUED"
#: ``CUSTOM`` name: a control (stop, steer, pause) was written for an invocation running in
#: another process (value: ``invocationId``).
CONTROL_ACCEPTED = "CONTROL_ACCEPTED"
#: ``CUSTOM`` name: a generator tool's preliminary output (value: ``toolCallId``,
#: ``toolCallName``, ``content``); the call's one ``TOOL_CALL_RESULT`` comes when it ends.
TOOL_PROGRESS = "TOOL_PROGRESS"
#: ``CUSTOM`` name: one event of a sub-agent (an agent used as a tool) — value: ``agent``
#: (its path, ``concierge/billing``), ``callId`` (its caller's call it runs for) and ``event``
#: (the dormant event's JSON form: its text deltas, tool calls and results...).
SUBAGENT = "dormant.subagent"
#: Prefix of the ``CUSTOM`` names of ledger events with no AG-UI counterpart (``dormant.pause``,
#: ``dormant.input_requested``, ...): the value is the event's JSON form.
LEDGER_EVENT_PREFIX = "dormant."

#: Ledger events of turn control that reach the client as ``CUSTOM`` ``dormant.<type>``; a
#: compaction too (its summary is context for the model, not a chat message).
_AS_CUSTOM = frozenset({
    "stop_requested", "pause", "resume", "interrupt", "queue_edit", "queue_move",
    "queue_remove", "queue_send_now", "input_requested", "input_response", "compaction",
    "tool_deferred", "tool_call_draft", "handoff",
})

log = logging.getLogger("dormant.agui")

#: Rewrites what the client is shown of a yielded call (its ``args``) in the interrupt.
ToolTransformer = Callable[[YieldedTool], Any]


class AgUIAdapter:
    """Translates one turn's stream events into the events of one AG-UI run.

    The calls, in order: :meth:`run_started`; :meth:`state_snapshot` (and, for a run that
    resumes parked tool calls, :meth:`messages_snapshot`); :meth:`transform` for every stream
    event; then one terminal call: :meth:`finish` (picks one of the three below from a
    :class:`~dormant.TurnResult`), or :meth:`run_finished`, :meth:`run_interrupted`,
    :meth:`run_error` directly. Every method returns AG-UI events (``ag_ui.core``) to send.

    Options: ``include_steps`` brackets each model step (the model call and the tool calls it
    asked for) with ``STEP_STARTED``/``STEP_FINISHED`` named ``step_<n>``; ``reasoning=False``
    drops the model's thought deltas (otherwise they become ``REASONING_*`` events);
    ``raw_events`` attaches the dormant event (its JSON form, with its stream position ``seq``:
    the largest a client received is the ``seen`` of a stop) as ``raw_event`` to every event
    translated from it; ``positions`` attaches only the position (``raw_event={"seq": n}``),
    for a client that renders the stream and may stop it; ``tool_transformers`` maps a
    yielding tool's name to a function of the :class:`~dormant.YieldedTool` whose return
    value is shown as that call's ``args`` in the interrupt; ``yield_schemas`` maps a
    yielding tool's name to the JSON Schema of the answer it expects (sent as the
    interrupt's ``responseSchema``); ``invocation_id`` is the
    invocation the run belongs to, sent as ``RUN_STARTED.metadata.invocationId`` (default: the
    run id; pass it when they differ, as for a run that reopens an invocation);
    ``request_id`` the request a server-side failure's ``RUN_ERROR`` and log record name;
    ``metadata``: more of ``RUN_STARTED.metadata``.

    Turn control: a steer's ``user`` event (``steer=True``) and a ``seed`` become a
    ``TEXT_MESSAGE_*`` of their role; a generator tool's preliminary result a ``CUSTOM``
    :data:`TOOL_PROGRESS` (the call's one ``TOOL_CALL_RESULT`` is its final result); a
    ``queued`` event a ``CUSTOM`` :data:`QUEUED`; an application event (``app.event``) a
    ``CUSTOM`` named after its type (value: ``data``, ``id``); the other control events
    (stop, pause, resume, interrupt, inbox edits, input requests and responses) and a
    hand-off a ``CUSTOM`` named ``dormant.<type>`` whose value is the event's JSON. How each
    turn status ends the run: see :meth:`finish`.

    Sub-agents (``Agent.as_tool``): the run's messages and tool calls are the session agent's
    conversation, as its model sees it — the call of a sub-agent is one ``TOOL_CALL_*`` and
    its final reply that call's ``TOOL_CALL_RESULT``. What the sub-agent does meanwhile (its
    events carry a ``scope``) is never merged into them: each of its events is one ``CUSTOM``
    :data:`SUBAGENT` (``agent``, ``callId``, ``event``), so its words are not appended to the
    caller's assistant message, its model steps are no ``STEP_*`` and its tool calls are not
    taken for the caller's (or for front-end tool calls). Its state changes are the
    session's: they stay ``STATE_DELTA``; an application event stays its own ``CUSTOM``. A
    sub-agent's pending approval or yield is an interrupt like any other (its
    ``metadata.agent`` names the path).

    The loop ``app.handler.agui`` runs, written by hand::

        live = app.handler.turn(agent=concierge)(request)
        adapter = AgUIAdapter(session_id, live.invocation_id, include_steps=True)
        yield adapter.run_started()
        for event in live:
            yield from adapter.transform(event)
        yield from adapter.finish(live.result)
    """

    def __init__(
        self,
        thread_id: str,
        run_id: str,
        *,
        parent_run_id: str | None = None,
        include_steps: bool = False,
        reasoning: bool = True,
        raw_events: bool = False,
        positions: bool = False,
        tool_transformers: Mapping[str, ToolTransformer] | None = None,
        yield_schemas: Mapping[str, dict[str, Any]] | None = None,
        client_tools: Iterable[str] = (),
        invocation_id: str | None = None,
        request_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        self.thread_id = thread_id
        self.metadata = dict(metadata or {})
        self.run_id = run_id
        self.invocation_id = invocation_id or run_id
        self.parent_run_id = parent_run_id
        self.include_steps = include_steps
        self.reasoning = reasoning
        self.raw_events = raw_events
        self.positions = positions
        self.tool_transformers = dict(tool_transformers or {})
        self.yield_schemas = dict(yield_schemas or {})
        #: The names of the client's own tools (the run input's ``tools``): a call to one is
        #: the client's to run, not an interrupt.
        self.client_tools = frozenset(client_tools)
        self.request_id = request_id
        self._text: str | None = None  # the open text message
        self._thought: str | None = None  # the open reasoning message
        self._thoughts: dict[str, int] = {}  # reasoning messages opened per thought id
        self._step: str | None = None  # the open step
        self._holder: str | None = None  # the message this step's tool calls hang under
        self._queued: set[str] = set()  # queued message ids already announced

    # --- opening -------------------------------------------------------------------------------

    def run_started(self) -> RunStartedEvent:
        """``RUN_STARTED``: ``threadId`` the session, ``runId`` this run, ``parentRunId`` the
        run this one resumes, ``metadata.invocationId`` the invocation (what a stop names)."""
        return RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id,
                               parent_run_id=self.parent_run_id,
                               metadata={"invocationId": self.invocation_id,
                                         **self.metadata},
                               protocol_version=PROTOCOL_VERSION, timestamp=now_ms())

    def state_snapshot(self, state: Any) -> StateSnapshotEvent:
        """``STATE_SNAPSHOT`` of the session state at turn start: the base later
        ``STATE_DELTA`` patches apply to."""
        return StateSnapshotEvent(snapshot=state, timestamp=now_ms())

    def messages_snapshot(self, events: Iterable[Event],
                          calls: Sequence[CallLike] = ()) -> MessagesSnapshotEvent:
        """``MESSAGES_SNAPSHOT`` of the conversation in ``events`` (ledger events), with the
        ``calls`` a resumed run settles added if ``events`` does not reach back to them."""
        return MessagesSnapshotEvent(messages=to_agui_messages(events, calls),
                                     timestamp=now_ms())

    # --- the turn ------------------------------------------------------------------------------

    def transform(self, event: StreamEvent) -> list[BaseEvent]:
        """The AG-UI events for one stream event (often none: the ledger's bookkeeping events
        have no AG-UI counterpart)."""
        out: list[BaseEvent] = []
        kind = event.type
        scope = getattr(event, "scope", None)
        if scope is not None and not isinstance(event, StateDelta | AppEvent):
            if kind != "audio_delta":  # (no audio in AG-UI)
                out.append(CustomEvent(name=SUBAGENT, value={
                    "agent": scope.path, "callId": scope.call_id,
                    "event": event.model_dump(mode="json")}, **self._meta(event)))
            return out
        if kind == "audio_delta":  # a realtime model's voice: AG-UI has no audio; its words
            return out             # stream as text (the transcript), which stays open
        if kind != "thought_delta":
            self._close_thought(out, event)
        if kind not in ("assistant_delta", "thought_delta"):
            self._close_text(out, event)
        match event:
            case ModelStart():
                self._holder = None
                if self.include_steps:
                    self._close_step(out, event)
                    self._step = f"step_{event.step}"
                    out.append(StepStartedEvent(step_name=self._step, **self._meta(event)))
            case AssistantDelta():
                if self._text != event.message_id:
                    self._close_text(out, event)
                    self._text = self._holder = event.message_id
                    out.append(TextMessageStartEvent(message_id=event.message_id,
                                                     role="assistant", **self._meta(event)))
                out.append(TextMessageContentEvent(message_id=event.message_id,
                                                   delta=event.delta, **self._meta(event)))
            case ThoughtDelta():
                if self.reasoning and event.delta:
                    self._open_thought(out, event, event.message_id)
                    assert self._thought is not None
                    out.append(ReasoningMessageContentEvent(message_id=self._thought,
                                                            delta=event.delta,
                                                            **self._meta(event)))
            case ToolCall():
                if self._holder is None:
                    self._holder = event.id
                meta = self._meta(event)
                out.append(ToolCallStartEvent(tool_call_id=event.call_id,
                                              tool_call_name=event.name,
                                              parent_message_id=self._holder, **meta))
                out.append(ToolCallArgsEvent(tool_call_id=event.call_id,
                                             delta=args_json(event.args), **meta))
                out.append(ToolCallEndEvent(tool_call_id=event.call_id, **meta))
            case ToolResult() if event.preliminary:
                out.append(CustomEvent(name=TOOL_PROGRESS, value={
                    "toolCallId": event.call_id, "toolCallName": event.name,
                    "content": result_text(event.result, event.error)}, **self._meta(event)))
            case ToolResult():
                out.append(ToolCallResultEvent(
                    message_id=event.id, tool_call_id=event.call_id, role="tool",
                    content=result_text(event.result, event.error), **self._meta(event)))
            case StateDelta():
                out.append(StateDeltaEvent(delta=event.patch, **self._meta(event)))
            case UserEvent() if event.steer:  # the run's own message is the client's already
                self._said(out, event, event.message_id, "user", event.text)
            case SeedEvent():
                self._said(out, event, event.message_id, event.role, event.text)
            case AppEvent():  # the app's own event type: a CUSTOM named after it
                out.append(CustomEvent(name=event.name, value={
                    "data": event.data, "id": event.event_id}, **self._meta(event)))
            case QueuedEvent():
                self._queued.add(event.message_id)
                out.append(CustomEvent(name=QUEUED, value={
                    "id": event.message_id, "position": event.position}, **self._meta(event)))
            case _ if kind in _AS_CUSTOM:
                out.append(CustomEvent(name=LEDGER_EVENT_PREFIX + kind,
                                       value=event.model_dump(mode="json"),
                                       **self._meta(event)))
            case _:
                pass
        return out

    # --- endings -------------------------------------------------------------------------------

    def finish(self, result: TurnResult) -> list[BaseEvent]:
        """The run's ending for a turn result (whatever is open is closed first):

        - ``error`` (failed, aborted, refused): ``RUN_ERROR``, no ``RUN_FINISHED``. A
          refusal of the client's input keeps its message; a failure on the server side (the
          model provider's, the store's, a bug: any code not a 4xx in
          :data:`dormant.errors.HTTP_STATUS`) is logged in full with :attr:`request_id`, and
          its ``RUN_ERROR`` says only what failed and under which request id;
        - ``yielded_tool`` with calls waiting (and stored): :meth:`run_interrupted`; a
          superseded turn was dropped whole, so it just finishes: there is nothing to answer;
        - ``queued``: ``CUSTOM`` :data:`QUEUED` (``id``, ``position``; once, if the stream did
          not announce it already), then ``RUN_FINISHED`` whose result adds ``queued``;
        - ``accepted``: ``CUSTOM`` :data:`CONTROL_ACCEPTED` (``invocationId``), then
          ``RUN_FINISHED``;
        - anything else (``completed``, ``yielded_message``, ``stopped``, ``paused``,
          ``interrupted``, ``recorded``): ``RUN_FINISHED``.

        Every ``RUN_FINISHED`` result is ``{"commitStatus": ..., "status": <turn status>}``,
        with ``agent`` (the agent that answered, after any hand-off) when a turn ran; a
        hand-off itself is a ``CUSTOM`` ``dormant.handoff`` (value: the ``handoff`` event,
        ``from_agent``, ``to_agent``, ``call_id``, ``reason``) where it happened.
        """
        status = result.status
        if status == "error":
            message = result.error or "the turn failed"
            if not is_client_error(result.code):
                log.error("request %s: turn of %s failed: %s: %s", self.request_id,
                          self.thread_id, result.code, message,
                          extra={"request_id": self.request_id, "session_id": self.thread_id})
                message = public_message(result.code, message, self.request_id)
            return self.run_error(message, code=result.code, retryable=result.retryable,
                                  request_id=None if is_client_error(result.code)
                                  else self.request_id)
        if (status == "yielded_tool"
                and (result.yielded_tools or result.pending_approvals)
                and result.commit_status != "superseded"):
            return self.run_interrupted(result.yielded_tools or [],
                                        approvals=result.pending_approvals or [],
                                        commit_status=result.commit_status, usage=result.usage,
                                        status=status, agent=result.agent)
        out = self._close_all()
        extra: dict[str, Any] = {}
        if result.agent is not None:
            extra["agent"] = result.agent
        if status == "queued" and result.queued is not None:
            ref = result.queued
            extra["queued"] = {"id": ref.id, "position": ref.position}
            if ref.id not in self._queued:
                self._queued.add(ref.id)
                out.append(CustomEvent(name=QUEUED, value=extra["queued"], timestamp=now_ms()))
        elif status == "accepted":
            out.append(CustomEvent(name=CONTROL_ACCEPTED, timestamp=now_ms(), value={
                "invocationId": result.invocation_id}))
        elif status == "yielded_tool" and result.deferred_tools:
            # deferred calls wait on trusted server code, not the client: no interrupt
            extra["deferredTools"] = [t.model_dump(by_alias=True, mode="json")
                                      for t in result.deferred_tools]
        out.extend(self.run_finished(result.commit_status, usage=result.usage, status=status,
                                     **extra))
        return out

    def run_finished(self, commit_status: str | None = None, *, usage: Usage | None = None,
                     status: str | None = None, **extra: Any) -> list[BaseEvent]:
        """``RUN_FINISHED`` with ``result: {commitStatus}`` (plus ``status`` when given, and
        any ``extra`` keys), after closing what is open."""
        out = self._close_all()
        out.append(RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id,
                                    result=_result(commit_status, status, **extra),
                                    usage=_usage(usage), timestamp=now_ms()))
        return out

    def run_interrupted(self, yielded: Sequence[YieldedTool], *,
                        approvals: Sequence[PendingApproval] = (),
                        commit_status: str | None = None,
                        usage: Usage | None = None,
                        status: str | None = None,
                        agent: str | None = None) -> list[BaseEvent]:
        """A ``CUSTOM`` named ``RUN_INTERRUPTED`` whose value names the waiting calls
        (``callIds``; ``yieldedTools`` with ``callId``, ``name``, ``args``; ``pendingApprovals``
        with ``approvalId``, ``callId``, ``tool``, ``args``), then ``RUN_FINISHED`` with an
        interrupt outcome: one interrupt per yielded call (its id the call id) and one per
        approval request (its id the approval id). Answer with ``resume`` entries of those
        ``interruptId``s (an approval's payload: ``{"approved": bool, "reason"?: str}``).

        A call to one of the client's own tools is no interrupt: AG-UI counts a run that
        stopped on a front-end tool call as completed, the client answering the calls it
        started with ``tool`` messages (a client refuses to run again past an interrupt its
        ``resume`` does not answer). When only such calls wait, ``RUN_FINISHED`` has no
        outcome (a success, whose ``pendingToolCallIds`` the client derives from the stream:
        clients before AG-UI 1.0, CopilotKit's among them, refuse that field)."""
        if not yielded and not approvals:
            raise ValueError("run_interrupted needs a yielded tool or a pending approval")
        out = self._close_all()
        shown = [(tool, self._shown_args(tool)) for tool in yielded]
        out.append(CustomEvent(name=RUN_INTERRUPTED, timestamp=now_ms(), value={
            "callIds": [tool.call_id for tool in yielded] + [a.call_id for a in approvals],
            "yieldedTools": [_agent({"callId": tool.call_id, "name": tool.name, "args": args},
                                    tool.agent) for tool, args in shown],
            "pendingApprovals": [a.model_dump(by_alias=True, mode="json") for a in approvals],
            "commitStatus": commit_status,
        }))
        interrupts = [
            Interrupt(id=tool.call_id, reason="tool_yield", tool_call_id=tool.call_id,
                      message=f"{tool.name} is waiting for input",
                      response_schema=self.yield_schemas.get(tool.name),
                      metadata=_agent({"toolName": tool.name, "args": args}, tool.agent))
            for tool, args in shown if tool.agent is not None
            or tool.name not in self.client_tools
        ] + [
            Interrupt(id=request.approval_id, reason="tool_approval",
                      tool_call_id=request.call_id,
                      message=f"{request.tool} needs approval before it runs",
                      response_schema=_DECISION_SCHEMA,
                      metadata=_agent({"toolName": request.tool, "args": request.args},
                                      request.agent))
            for request in approvals
        ]
        outcome = RunFinishedInterruptOutcome(interrupts=interrupts) if interrupts else None
        named = {"agent": agent} if agent is not None else {}
        out.append(RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id,
                                    result=_result(commit_status, status, **named),
                                    outcome=outcome,
                                    usage=_usage(usage), timestamp=now_ms()))
        return out

    def run_error(self, message: str, *, code: str | None = None,
                  retryable: bool | None = None, request_id: str | None = None
                  ) -> list[BaseEvent]:
        """``RUN_ERROR`` (and never ``RUN_FINISHED``): the turn failed or was aborted, and
        nothing of it was written. What the JSON error of ``POST /turns`` adds to the code
        and message rides in its ``metadata``: ``retryable`` (whether the same request can
        succeed later) and, for a server-side failure, ``requestId`` (the log's)."""
        out = self._close_all()
        extra = {key: value for key, value in (("retryable", retryable),
                                               ("requestId", request_id)) if value is not None}
        out.append(RunErrorEvent(message=message, code=code, timestamp=now_ms(),
                                 **({"metadata": extra} if extra else {})))
        return out

    # --- internals -----------------------------------------------------------------------------

    def _meta(self, event: StreamEvent) -> dict[str, Any]:
        meta: dict[str, Any] = {"timestamp": event.ts}
        if self.raw_events:  # with its stream position: what a stop's ``seen`` counts
            meta["raw_event"] = {**event.model_dump(mode="json"), "seq": event.seq}
        elif self.positions and event.seq is not None:
            meta["raw_event"] = {"seq": event.seq}
        return meta

    def _said(self, out: list[BaseEvent], event: StreamEvent, message_id: str,
              role: Literal["user", "system"], text: str) -> None:
        """A whole message as ``TEXT_MESSAGE_START/CONTENT/END`` (no content event when
        empty: the protocol wants non-empty deltas)."""
        meta = self._meta(event)
        out.append(TextMessageStartEvent(message_id=message_id, role=role, **meta))
        if text:
            out.append(TextMessageContentEvent(message_id=message_id, delta=text, **meta))
        out.append(TextMessageEndEvent(message_id=message_id, **meta))
        self._holder = None

    def _shown_args(self, tool: YieldedTool) -> Any:
        transformer = self.tool_transformers.get(tool.name)
        return tool.args if transformer is None else transformer(tool)

    def _open_thought(self, out: list[BaseEvent], event: StreamEvent, thought_id: str) -> None:
        if self._thought is not None:
            return
        count = self._thoughts.get(thought_id, 0)
        self._thoughts[thought_id] = count + 1
        self._thought = thought_id if count == 0 else f"{thought_id}.{count}"
        meta = self._meta(event)
        out.append(ReasoningStartEvent(message_id=self._thought, **meta))
        out.append(ReasoningMessageStartEvent(message_id=self._thought, role="reasoning",
                                              **meta))

    def _close_thought(self, out: list[BaseEvent], event: StreamEvent | None) -> None:
        if self._thought is None:
            return
        meta = {"timestamp": now_ms()} if event is None else self._meta(event)
        out.append(ReasoningMessageEndEvent(message_id=self._thought, **meta))
        out.append(ReasoningEndEvent(message_id=self._thought, **meta))
        self._thought = None

    def _close_text(self, out: list[BaseEvent], event: StreamEvent | None) -> None:
        if self._text is None:
            return
        meta = {"timestamp": now_ms()} if event is None else self._meta(event)
        out.append(TextMessageEndEvent(message_id=self._text, **meta))
        self._text = None

    def _close_step(self, out: list[BaseEvent], event: StreamEvent | None) -> None:
        if self._step is None:
            return
        meta = {"timestamp": now_ms()} if event is None else self._meta(event)
        out.append(StepFinishedEvent(step_name=self._step, **meta))
        self._step = None

    def _close_all(self) -> list[BaseEvent]:
        out: list[BaseEvent] = []
        self._close_thought(out, None)
        self._close_text(out, None)
        self._close_step(out, None)
        return out


def _agent(metadata: dict[str, Any], agent: str | None) -> dict[str, Any]:
    """An interrupt's metadata, naming the sub-agent that waits (none: the session agent)."""
    return metadata if agent is None else {**metadata, "agent": agent}


def _result(commit_status: str | None, status: str | None, **extra: Any) -> dict[str, Any]:
    result: dict[str, Any] = {"commitStatus": commit_status}
    if status is not None:
        result["status"] = status
    result.update(extra)
    return result


def _usage(usage: Usage | None) -> list[TokenUsage] | None:
    if usage is None or not (usage.input_tokens or usage.output_tokens):
        return None
    return [TokenUsage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                       total_tokens=usage.input_tokens + usage.output_tokens,
                       cached_input_tokens=usage.cached_tokens or None)]
