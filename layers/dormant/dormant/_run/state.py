"""What one turn shares: :class:`RunState`, passed explicitly to every phase of the run
(:mod:`dormant._run.loop` and :mod:`dormant._run.tools`), with the few helpers they all need."""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Literal

from dormant._timing import Recorder
from dormant.agent import Agent, ErrorHandler, Hook, HookContext
from dormant.events import (
    NO_USAGE,
    Event,
    InvocationEnd,
    InvocationFailed,
    InvocationYield,
    PauseEvent,
    Scope,
    StreamEvent,
    Usage,
)
from dormant.session import Session
from dormant.tools import Signal, Tool

__all__ = ["ClaimCompaction", "Clock", "Overtaken", "RunState", "Start", "WriteAhead"]

Clock = Callable[[], int]
#: The events that end a request's turn: each keeps what the turn took (``timing``).
_ENDINGS = frozenset({InvocationEnd, InvocationYield, InvocationFailed, PauseEvent})
#: Claims the compaction of ledger positions ``covered_from`` … ``tail_start`` for this turn:
#: True, this turn summarises them; False, another turn does (this one does not pay for it).
ClaimCompaction = Callable[["RunState", int, int], bool]
#: Commits the turn's slice so far (the step's calls included) before the step's tools run,
#: so a tool that runs has its call in the ledger whatever happens to this request next.
#: Raises :class:`Overtaken` when the turn must end there instead (its tools do not run).
WriteAhead = Callable[[], None]


class Overtaken(Exception):
    """The turn's write-ahead found it superseded (a newer message landed while its model
    ran): the step's tools do not run and the turn ends there. The write-ahead's owner knows
    what was written (the commit policy's outcome)."""


@dataclass(slots=True)
class Start:
    """Where a turn carries on from, once the request room wrote its invocation's opening
    into the session's slice (a new invocation, a resumed one, a retry) or a claim committed
    it: what the opening decided, as a value (the shape of openai-agents' ``NextStep``).

    ``next``: ``model`` (call the model), ``tools`` (first settle the parked step's tools that
    have not run: answered yields, decided approvals, a stranded step's calls), ``wait`` (the
    parked step still waits for answers: nothing runs). ``hooks``: the ``before_agent`` hooks
    run first (not on a retry, a continued pause or a takeover: the agent already started).
    ``state``: the request's state writes, applied first. ``trigger``: the ledger event that
    started the turn (what a tool sees as ``ToolContext.event``)."""

    invocation_id: str | None
    next: Literal["model", "tools", "wait"] = "model"
    hooks: bool = True
    state: dict[str, Any] | None = None
    trigger: Event | None = None


@dataclass(slots=True, eq=False)
class RunState:
    """One turn of an agent against a session: its inputs and what it has done so far."""

    agent: Agent
    session: Session
    hooks: tuple[Hook, ...]
    error_handlers: tuple[ErrorHandler, ...]
    signal: Signal
    clock: Clock
    invocation_id: str | None = None
    said: list[str] = field(default_factory=list)
    usage: Usage = NO_USAGE
    #: True once a tool's side effect may have happened in this turn: from then on a
    #: failure commits the finished steps instead of writing nothing.
    ran: bool = False
    #: Tools ran since the slice was last marked as what a failure keeps (see :meth:`flush`).
    unmarked: bool = False
    #: What other requests ask of this turn (stop, pause, steers), polled from the
    #: session's control record (:class:`dormant._control.ControlWatch`); None: nobody can.
    watch: Any = None
    #: How the turn claims a compaction before paying for the summary (see
    #: :func:`dormant._run.compaction.claim_in`); None: no store to claim in, it just compacts.
    claim_compaction: ClaimCompaction | None = None
    #: How the turn records a step's calls before their tools run (None: it writes nothing
    #: before its end; whoever runs it commits it then).
    write_ahead: WriteAhead | None = None
    #: The current model step's text deltas as streamed (a stop keeps those the client saw),
    #: and the id its assistant event takes.
    deltas: list[Any] = field(default_factory=list)
    deltas_id: str | None = None
    #: The current model step's tool calls still streaming (``ToolCallDelta`` fragments, by
    #: index: ``{"call_id", "name", "args"}``), until their whole call arrives: a stop keeps
    #: them as ``tool_call_draft`` events.
    drafts: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: The ledger event that triggered the turn (what a tool sees as ``ToolContext.event``).
    trigger: Event | None = None
    #: Tools the request's client offers (AG-UI front-end tools), by name: a call to one
    #: parks as a yield the client answers. The agent's own tools win a name.
    client_tools: dict[str, Tool] = field(default_factory=dict)
    #: The system part made of the client's context (AG-UI ``context``), if any.
    client_notes: str | None = None
    #: What times the turn's model calls and tools (None: nothing is timed, e.g.
    #: ``app.run``); the event that ends the turn keeps its timing.
    recorder: Recorder | None = None
    #: A sub-agent's run (``Agent.as_tool``): which agent, for which call of its parent.
    #: Every event it emits carries it. None: the session's own agent.
    scope: Scope | None = None
    #: A sub-agent's run: what its caller asked of it (its first message).
    task: str = ""
    #: How a sub-agent's run is carried on (the run loop's; set by :func:`run_turn`): an
    #: agent used as a tool runs through it, from the tool phase.
    sub_run: Callable[[RunState], Generator[StreamEvent, None, Any]] | None = None
    #: The hooks the turn's caller added (a handler's): kept when a hand-off changes the
    #: agent, whose own hooks replace the previous agent's.
    turn_hooks: tuple[Hook, ...] = ()
    #: The agents the turn may hand over to, by name (the entry agent's team: see
    #: :meth:`~dormant.agent.Agent.team`); empty: the agent's own hand-offs resolve.
    team: dict[str, Agent] = field(default_factory=dict)

    def hand_over(self, agent: Agent) -> None:
        """A hand-off: the rest of the turn runs ``agent``, with its hooks."""
        self.agent = agent
        self.hooks = tuple(agent.app_hooks) + tuple(agent.hooks) + self.turn_hooks

    @property
    def scope_id(self) -> str | None:
        """The parent's call this run serves (None: the session's own agent)."""
        return None if self.scope is None else self.scope.call_id

    def emit(self, event: Event) -> Event:
        """Append a ledger event to the session's uncommitted slice, and hand it back to
        yield. The event that ends the turn carries its timing; a sub-agent's events carry
        its scope."""
        if self.scope is not None:
            if event.scope is None:
                event = event.model_copy(update={"scope": self.scope})
        elif self.recorder is not None and type(event) in _ENDINGS and event.invocation_id:
            # Filled in place: every event emitted here was made a moment ago by this run,
            # and nobody else holds it yet (a copy would cost more than the event did).
            event.__dict__["timing"] = self.recorder.timing()
            event.__pydantic_fields_set__.add("timing")
        self.session.add_event(event)
        return event

    def child(self, agent: Agent, scope: Scope, task: str) -> RunState:
        """A sub-agent's run inside this one: the same session, signal, clock, recorder and
        write-ahead (its tools' calls land like this run's); its own agent, hooks and
        words. No control watch: a stop reaches it through the shared signal, and a pause
        or a steer waits for the session's agent's next step boundary."""
        sub = RunState(agent, self.session, tuple(agent.app_hooks) + tuple(agent.hooks),
                       self.error_handlers, self.signal, self.clock, self.invocation_id)
        sub.write_ahead = self.write_ahead
        sub.recorder = self.recorder
        sub.trigger = self.trigger
        sub.scope = scope
        sub.task = task
        sub.sub_run = self.sub_run
        return sub

    def hook_context(self, **fields: Any) -> HookContext:
        fields.setdefault("event", self.trigger)
        return HookContext(agent=self.agent, session=self.session,
                           invocation_id=self.invocation_id, state=self.session.state, **fields)

    def note_effects(self) -> None:
        """Tools of this step ran: once the step's results and the timers its tools asked
        for are in the slice (:meth:`flush`), that is what a failure keeps."""
        self.ran = True
        self.unmarked = True

    def flush(self) -> Generator[StreamEvent, None, None]:
        """Emit what tools and hooks recorded on the session (``schedule``) since last time."""
        for event in self.session.window.take_deferred():
            yield self.emit(event)
        if self.unmarked:
            self.unmarked = False
            self.session.window.mark_effects()
