"""The application object: tools, agents, sessions and handlers hang off it."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, overload

from pydantic import BaseModel

from dormant._commit import CommitPolicy
from dormant._control import write_asks
from dormant._decide import EventType
from dormant._fork import fork_head, fork_of_head
from dormant._ids import now_ms
from dormant._inputs import AppEventInput, HandlerInput, Input, ToolResultInput
from dormant._request import TurnInput, open_turn
from dormant._run import drain, run_turn
from dormant._timing import Price, price_table
from dormant.agent import (
    DEFAULT_MAX_STEPS,
    Agent,
    ContextBuilders,
    ContextItem,
    Hook,
    HookFn,
    Roster,
    build_agent,
)
from dormant.errors import ConfigError, InputError, SessionExists, SessionNotFound
from dormant.events import TimerCancelled, TimerSet
from dormant.results import RunResult
from dormant.schedulers import Scheduler, TimerDelivery, check_timer, hand_over
from dormant.session import Session, mint_session_id, normalize_session_id
from dormant.stores._base import Store
from dormant.stores.memory import MemoryStore
from dormant.tools import Step, Tool, ToolSource, make_tool, tool_from_function
from dormant.types import CommitResult, SessionSummary, StoredSession

if TYPE_CHECKING:
    from dormant._measure import Meter
    from dormant.handlers import Handlers
    from dormant.models._base import Model

__all__ = ["App", "Sessions"]

#: How often ``append`` re-reads the head when other writers keep landing first.
MERGE_ATTEMPTS = 5


def _deferring(store: Store) -> Callable[..., Any] | None:
    """The store's ``load_deferred`` (a load that leaves large events where they live until
    they are read), when the class whose ``load`` the store runs offers it beside it: a store
    that wraps or overrides ``load`` (its class, or the instance itself) is loaded with its
    own ``load``, whatever it forwards."""
    if "load" in getattr(store, "__dict__", ()):
        return None
    for cls in type(store).__mro__:
        if "load" in cls.__dict__:
            found = cls.__dict__.get("load_deferred")
            return found.__get__(store) if callable(found) else None
    return None


class Sessions:
    """``app.sessions``: create, read, commit and merge sessions in the app's store."""

    def __init__(self, store: Store, scheduler: Callable[[], Scheduler | None] | None = None,
                 events: dict[str, EventType] | None = None) -> None:
        self._store = store
        self._scheduler = scheduler or (lambda: None)
        #: The app's declared event types (``app.event``): shared, so later declarations count.
        self._events: dict[str, EventType] = events if events is not None else {}
        #: Where work that does not fit one request goes (the app's ``hand_on``), read when
        #: it is needed: an append that settles a parked step hands its resume on.
        self._hand_on: Callable[[], Callable[[HandlerInput], None] | None] = lambda: None
        #: The app's one commit policy: every committing path goes through it.
        self.policy = CommitPolicy(store, self._hand_over)

    def _hand_over(self, session_id: str,
                   timers: builtins.list[TimerSet | TimerCancelled]) -> None:
        hand_over(self._scheduler(), session_id, timers)

    def bind(self, session: Session) -> Session:
        """Bind ``session`` to this app: its declared event types (``append_event``) and its
        scheduler's check of the timers it asks for (``schedule``)."""
        session.event_types = self._events
        session.timer_check = self._check_timer
        return session

    def _check_timer(self, delivery: TimerDelivery, in_turn: bool) -> None:
        check_timer(self._scheduler(), delivery, in_turn=in_turn)

    def arm(self, session_id: str, name: str, fire_at: int) -> None:
        """Set a wake-up of the session at ``fire_at`` (epoch ms) outside its ledger (a
        claim's lease timer: its delivery runs an empty request). No scheduler: nothing to
        do (the next request on the session does what the wake-up would)."""
        scheduler = self._scheduler()
        if scheduler is not None:
            hand_over(scheduler, session_id, [TimerSet(name=name, fire_at=fire_at)])

    def disarm(self, session_id: str, name: str) -> None:
        """Cancel a wake-up :meth:`arm` set (its claim committed in time: it has nothing to
        take over). One that cannot be cancelled fires later and does nothing."""
        scheduler = self._scheduler()
        if scheduler is not None:
            hand_over(scheduler, session_id, [TimerCancelled(name=name)])

    def create(self, session_id: str | None = None, state: dict[str, Any] | None = None, *,
               owner: str | None = None, principal: str | None = None) -> Session:
        """Create and commit an empty session (``InputError`` if the id is taken).

        ``owner``: the principal the session belongs to, the only one the public API lets
        reach it (``principal=`` is the same argument under its older name). A session created
        without one is reachable by no public principal, only by trusted server code.
        """
        sid = normalize_session_id(session_id) if session_id else mint_session_id()
        session = self.bind(Session.new(sid, state=state, principal=_owner(owner, principal)))
        result = self.commit(session)
        if not result.ok:
            raise SessionExists(sid)
        return session

    def get(self, session_id: str) -> Session | None:
        """The session with its whole ledger, or None."""
        stored = self._store.load(normalize_session_id(session_id), turns=None)
        return self.bind(Session.from_stored(stored)) if stored is not None else None

    def load(self, session_id: str, *, turns: int | None,
             compacted: bool = False) -> Session | None:
        """The session with only the last ``turns`` turns of its ledger (the turn path);
        ``compacted``: none of what the latest compaction summarised."""
        sid = normalize_session_id(session_id)
        deferring = _deferring(self._store)
        if deferring is not None:  # large events stay where they live until they are read
            loaded = deferring(sid, turns=turns, compacted=compacted)
            return self.bind(Session.from_stored(*loaded)) if loaded is not None else None
        stored = self._store.load(sid, turns=turns, compacted=compacted)
        return self.bind(Session.from_stored(stored)) if stored is not None else None

    def commit(self, session: Session) -> CommitResult:
        """Write the session's uncommitted slice iff nobody committed since it was loaded.

        A refusal is returned (``ok=False, conflict=True, current_version``), not raised, and
        writes nothing. What the session asks of a turn running elsewhere (``input.stop``,
        ``input.steer``, ``input.pause`` for a running invocation) is written to its control
        record once the slice landed (raises :class:`dormant.errors.NotRunning` if the
        invocation ended meanwhile).
        """
        asks_only = bool(session.control_asks) and not session.dirty and session.version > 0
        result = CommitResult(ok=True, version=session.version) if asks_only \
            else self.policy.write(session)
        if result.ok and session.control_asks:
            sid = session.session_id
            write_asks(self._store, session, lambda: self.load(sid, turns=0))
        return result

    def merge(self, session: Session, *, turns: int | None = None,
              compacted: bool = False) -> CommitResult:
        """Re-read the head and append the uncommitted slice onto it.

        Raises :class:`dormant.errors.InputError` / ``ResumeError`` when the slice no longer
        fits the newer head (e.g. it answers a call somebody else answered); nothing is written
        then.
        """
        return self.policy.merge(session, turns=turns, compacted=compacted)

    def append(self, session_id: str, text: str | None = None, *, id: str | None = None,
               owner: str | None = None, principal: str | None = None,
               tool_results: Sequence[dict[str, Any] | ToolResultInput] | None = None,
               events: Sequence[dict[str, Any] | AppEventInput] | None = None
               ) -> CommitResult:
        """Append a user message from trusted server code and commit it, without running a
        turn (a later turn takes it up). The session is created when new. A message whose
        ``id`` the session already holds is a redelivery: nothing is written and the result
        is ``ok`` at the current version. While the session cannot take it (it waits for
        tool input, an approval or an input request, failed, or is paused) the message goes
        to the session's inbox and runs when the session is free.

        ``owner`` (or its older name ``principal``) scopes the append: a new session is created
        owned by it, and an existing session must be its (else :class:`SessionNotFound`,
        nothing written). Without it the append is unscoped and a new session has no owner.

        ``tool_results``: results of deferred calls (``[{call_id, result, is_error}]``),
        checked like ``session.input.tool_result`` (a call that is not a waiting deferred
        call raises :class:`~dormant.errors.NotPending`, one already resulted
        :class:`~dormant.errors.AlreadyAnswered`; nothing written). Once they settle the
        parked step, the next request on the session resumes it (the app's ``hand_on``, when
        set, is handed that request at once).

        ``events``: application events (``[{name, data, id}]``), each checked against the
        type ``app.event`` declared (undeclared or not fitting: :class:`~dormant.errors.
        EventRefused`, nothing written); an ``id`` the session already holds is skipped (it
        landed once). No turn runs for them.
        """
        sid = normalize_session_id(session_id)
        owner = _owner(owner, principal)
        results = [r if isinstance(r, ToolResultInput) else ToolResultInput.model_validate(r)
                   for r in tool_results or ()]
        appended = [e if isinstance(e, AppEventInput) else AppEventInput.model_validate(e)
                    for e in events or ()]
        if text is None and not results and not appended:
            raise InputError("append needs a text, tool_results or events")
        result = CommitResult(ok=False, conflict=True)
        for _ in range(MERGE_ATTEMPTS):
            session = self.load(sid, turns=0) or self.bind(Session.new(sid, principal=owner))
            if not session.head.visible_to(owner):
                raise SessionNotFound(sid)
            for given in appended:
                if given.id is None or not self.holds_event(session, given.id):
                    session.append_event(given.name, given.data, id=given.id)
            if text is None and not results and not session.dirty:
                return CommitResult(ok=True, version=session.version)  # all landed already
            if text is not None and id is not None and self.holds_message(session, id):
                return CommitResult(ok=True, version=session.version)
            for supplied in results:
                session.input.tool_result(supplied.call_id, supplied.result, supplied.is_error)
            if text is not None:
                session.append(text, id=id)
            result = self.commit(session)
            if result.ok and results:
                self._resume_later(session)
            if result.ok or result.duplicate is not None:  # a duplicate: it landed already
                return CommitResult(ok=True, version=result.version or result.current_version)
        return result

    def _resume_later(self, session: Session) -> None:
        """Hand on the resume of a step the append settled (when the app hands work on)."""
        head = session.head
        hand_on = self._hand_on()
        if hand_on is not None and head.parked == "tool" and not head.unresolved():
            hand_on(HandlerInput(session_id=session.session_id, input=Input()))

    def holds_event(self, session: Session, event_id: str) -> bool:
        """Whether an application event with ``event_id`` ever landed in ``session``."""
        return self._holds(session, session.head.has_event(event_id), "e:" + event_id)

    def holds_message(self, session: Session, message_id: str) -> bool:
        """Whether ``message_id`` ever landed in ``session``: the head's recent ids answer
        alone while they are all the session ever had; past that, the store's key does."""
        return self._holds(session, session.head.has_message(message_id), "m:" + message_id)

    def _holds(self, session: Session, in_head: bool, once_key: str) -> bool:
        """An id the head remembers landed; one it does not may have landed before the
        head's recent ids begin, which the store's once-key answers."""
        head = session.head
        if in_head:
            return True
        if head.knows_every_message or head.version == 0:
            return False
        return self._store.has_once(session.session_id, once_key)

    def fork(self, session_id: str, at_version: int | None = None,
             new_session_id: str | None = None, *, owner: str | None = None,
             history: bool = True) -> Session:
        """A new session whose history is ``session_id``'s up to ``at_version`` (default: its
        current version), copy-on-write: the fork reads the source's events and writes only
        its own, so writes to either never appear in the other. Edit-and-resend is a fork at
        the version before a message, then the edited message.

        ``owner``: the principal asking (the public API passes it): the source must be theirs
        (else :class:`SessionNotFound`) and the fork is owned by them; without it (trusted
        code) the fork has the source's owner. ``new_session_id``: the fork's id (minted when
        None; ``InputError`` if taken). ``history=False`` returns the fork's head alone (its
        events are read on its next load): a fork of the current version then reads the
        source's head and nothing more, whatever the session's age (``POST
        /sessions/{id}/fork`` does this)."""
        sid = normalize_session_id(session_id)
        new_sid = normalize_session_id(new_session_id) if new_session_id else mint_session_id()
        if owner is not None and (not isinstance(owner, str) or not owner):
            raise ValueError(f"owner must be a non-empty string, got {owner!r}")
        # The head alone (no events) says the version; a fork of it folds nothing more.
        source = self._store.load(sid, turns=0)
        if source is None or not source.head.visible_to(owner):
            raise SessionNotFound(sid)
        head = source.head
        at = head.version if at_version is None else at_version
        if isinstance(at, bool) or not isinstance(at, int) or not 1 <= at <= head.version:
            raise InputError(f"session {sid} has versions 1-{head.version}; cannot fork at "
                             f"{at_version!r}")
        owned = owner if owner is not None else head.principal
        if at == head.version:
            end = head.seq
            fork = fork_of_head(head, new_sid, owned)
        else:  # an earlier head is folded afresh from the events up to it
            whole = self._store.load(sid, turns=None)
            ends = self._store.version_end(sid, at)
            if whole is None or ends is None:
                raise InputError(f"session {sid}: version {at} is not in the store any more")
            end = ends
            fork = fork_head(whole, at, end, new_sid, owned)
        result = self._store.fork(fork)
        if not result.ok:
            raise SessionExists(new_sid)
        written = fork.model_copy(update={"version": result.version})
        if history:
            loaded = self._store.load(new_sid)
            if loaded is not None:
                return Session.from_stored(loaded)
        # The fork's head; its history is the source's, read on its next load.
        return Session.from_stored(StoredSession(written, [], end))

    def delete(self, session_id: str) -> bool:
        """Delete the session. Its forks keep working: what they read of it is kept, out of
        sight, until the last of them is deleted; the id is free for a new session at once.
        Its child sessions (``Agent.as_delegate``), and theirs, are deleted with it: they are
        its work, answering only to it (:meth:`children` lists them first)."""
        sid = normalize_session_id(session_id)
        children = self.children(sid)
        deleted = self._store.delete(sid)
        for child in children:
            self._store.delete(child)
        return deleted

    def children(self, session_id: str) -> builtins.list[str]:
        """The ids of the session's child sessions (``Agent.as_delegate``) and of theirs,
        depth first, that are still stored: what :meth:`delete` deletes with it."""
        found: builtins.list[str] = []
        waiting = [normalize_session_id(session_id)]
        while waiting:
            parent = waiting.pop()
            session = self.load(parent, turns=0)
            for child in reversed(session.head.children if session is not None else []):
                sid = child["session"]
                stored = self._store.load(sid, turns=0) if sid not in found else None
                # (a fork's head lists its source's children: they are not the fork's)
                if stored is not None and (stored.head.parent or {}).get("session") == parent:
                    found.append(sid)
                    waiting.append(sid)
        return found

    def list(self, *, principal: str | None = None, limit: int = 100) -> builtins.list[
            SessionSummary]:
        return self._store.list(principal=principal, limit=limit)


def _owner(owner: str | None, principal: str | None) -> str | None:
    """``owner=``, or ``principal=`` (its older name); naming two different ones is a mistake."""
    if owner is not None and principal is not None and owner != principal:
        raise ValueError(f"owner={owner!r} and principal={principal!r} disagree: pass owner= only")
    owner = owner if owner is not None else principal
    if owner is not None and (not isinstance(owner, str) or not owner):
        raise ValueError(f"owner must be a non-empty string, got {owner!r}")
    return owner


class App:
    """A dormant application: ``App(name=..., store=...)`` (store defaults to memory).

    ``prices``: what each model's tokens cost, ``{model name: Price(input=..., output=...,
    cached=...)}`` (per million tokens, or a dict of those fields): turns, sessions and
    traces then say what they cost. A price that does not fit raises
    :class:`~dormant.errors.ConfigError` naming its model."""

    def __init__(
        self,
        name: str = "dormant",
        *,
        store: Store | None = None,
        hooks: Sequence[Hook | dict[str, HookFn]] | None = None,
        clock: Callable[[], int] | None = None,
        scheduler: Scheduler | None = None,
        prices: Mapping[str, Price | Mapping[str, Any]] | None = None,
    ) -> None:
        self.name = name
        #: What each model's tokens cost (:class:`~dormant.Price` by model name):
        #: turns and sessions add up their cost with it. None ships: prices change.
        self.prices: dict[str, Price] = price_table(prices)
        self.store: Store = store if store is not None else MemoryStore()
        #: The app's event types (``app.event``), by name.
        self.events: dict[str, EventType] = {}
        self.sessions = Sessions(self.store, lambda: self.scheduler, self.events)
        self.sessions._hand_on = lambda: self.hand_on
        self.context = ContextBuilders()
        self.hooks = tuple(Hook.coerce(h) for h in hooks or ())
        self.clock: Callable[[], int] = clock or now_ms
        #: Where timers of committed turns go (``EventBridgeScheduler`` on AWS, the local
        #: scheduler under ``dormant dev``); None: timers are recorded, not set.
        self.scheduler = scheduler
        #: Where work this request cannot finish goes to run in another invocation: the rest
        #: of a session's inbox, a turn cut by the deadline (as a retry). Called with a
        #: :class:`~dormant.handlers.HandlerInput` to run as one more request. AWS: the api
        #: function sends it to the webhook queue; ``dormant dev``: its worker thread. None:
        #: the request drains the inbox itself, however long that takes.
        self.hand_on: Callable[[HandlerInput], None] | None = None
        #: True when this process is the only one serving the store (``dormant dev`` sets
        #: it): a claim written by an earlier run of it is taken over at once, its lease not
        #: waited out.
        self.sole = False
        #: Where each request is counted once it ended (a ``record(measure)`` method, given
        #: a :class:`~dormant._measure.TurnMeasure`: its outcome, model calls, tool errors,
        #: claims refused, commit conflicts). The deployed functions count them as
        #: CloudWatch metrics (:class:`dormant.aws.metrics.TurnMetrics`). None: not counted.
        self.meter: Meter | None = None
        self._handler: Handlers | None = None
        #: The agents this app made, by name: what a hand-off naming an agent resolves
        #: among (``app.agent(..., handoffs=["billing"])``).
        self.agents: Roster = {}

    # --- declarations --------------------------------------------------------------------------

    @overload
    def tool(self, fn: Callable[..., Any], /) -> Tool: ...

    @overload
    def tool(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        schema: type[BaseModel] | None = None,
        yield_schema: type[BaseModel] | None = None,
        prepare: Step | None = None,
        execute: Step | None = None,
        finalize: Step | None = None,
        deferred: bool = False,
        metadata: dict[str, Any] | None = None,
    ) -> Any: ...

    def tool(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        schema: type[BaseModel] | None = None,
        yield_schema: type[BaseModel] | None = None,
        prepare: Step | None = None,
        execute: Step | None = None,
        finalize: Step | None = None,
        deferred: bool = False,
        metadata: dict[str, Any] | None = None,
    ) -> Any:
        """Declare a tool.

        Explicit form: ``app.tool(name=..., description=..., schema=Model, execute=fn)``
        (``yield_schema`` makes it yield; it needs ``execute`` or ``yield_schema``).
        Decorator form: ``@app.tool`` or ``@app.tool(description=...)`` on a typed function,
        whose signature becomes the schema. ``deferred=True`` (explicit form, with
        ``schema``): the result comes from outside the turn; a call parks the turn until
        trusted code supplies it (``session.input.tool_result``, ``Input(tool_results=...)``,
        ``app.sessions.append(..., tool_results=...)``). ``metadata``: a JSON object of
        your own about the tool (both forms), recorded on each of its calls as
        ``tool_call.tool_metadata`` and shown with them; never sent to the model.
        """
        if fn is not None:
            return tool_from_function(fn, name=name, description=description,
                                      yield_schema=yield_schema, prepare=prepare,
                                      finalize=finalize, metadata=metadata)
        if schema is not None or execute is not None or prepare is not None \
                or finalize is not None or deferred:
            return make_tool(name=name or "", description=description or "", schema=schema,
                             yield_schema=yield_schema, prepare=prepare, execute=execute,
                             finalize=finalize, deferred=deferred, metadata=metadata)

        def decorate(function: Callable[..., Any]) -> Tool:
            return tool_from_function(function, name=name, description=description,
                                      yield_schema=yield_schema, prepare=prepare,
                                      finalize=finalize, metadata=metadata)

        return decorate

    def event(self, name: str, schema: Any = None, *, description: str = "") -> EventType:
        """Declare an application event type of this app's contract (``ai.session.created``,
        ``crm.ticket_updated``…): ``schema`` is a JSON Schema dict or a pydantic model class
        (None: any JSON object). Trusted code appends one with ``session.append_event(name,
        data, id=...)``, ``Input(events=[{name, data, id}])`` or ``app.sessions.append(
        session_id, events=[...])``; its data is checked against ``schema`` and an id lands
        once. The public APIs refuse them (422)."""
        if name in self.events:
            raise ConfigError(f"event {name!r} is already declared")
        try:
            declared = EventType.declare(name, {"type": "object"} if schema is None else schema,
                                         description)
        except InputError as error:
            raise ConfigError(str(error)) from None
        self.events[name] = declared
        return declared

    def agent(
        self,
        name: str,
        model: Model | None = None,
        context: Sequence[ContextItem] | None = None,
        tools: Sequence[Tool | ToolSource] | None = None,
        *,
        yields: bool | None = None,
        tool_approval: dict[str, Any] | None = None,
        hooks: Sequence[Hook | dict[str, HookFn]] | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        tool_lane: str | None = None,
        handoffs: Sequence[Agent | str] | None = None,
    ) -> Agent:
        """Declare an agent (context defaults to ``[app.context.history()]``).

        ``yields=True`` parks the session after each reply that ends a turn, waiting for the
        next message (``yielded_message``); the default, None, is True for a realtime model
        (``OpenAIRealtimeModel``: a conversation) and False otherwise.

        ``tool_lane="tools"`` runs the agent's local tools one at a time, in call order (for
        tools that share a sandbox); by default independent tools run concurrently.

        ``tools`` may list tool sources beside tools (``dormant.mcp.MCPServer(url)``): their
        tools are listed on the first turn that needs them, once per process.

        ``handoffs``: the agents this one may hand the conversation over to, each an Agent
        or the name of one this app makes (a name lets two agents hand over to each other).
        The model hands over by calling ``transfer_to_<agent>``; the rest of the turn, and
        later requests to a handler serving this agent, run that agent until it hands back
        or on."""
        return build_agent(name=name, model=model, context=context, tools=tools, yields=yields,
                           tool_approval=tool_approval, hooks=hooks, max_steps=max_steps,
                           app_hooks=self.hooks, tool_lane=tool_lane, app_events=self.events,
                           handoffs=handoffs, roster=self.agents)

    # --- running -------------------------------------------------------------------------------

    def run(
        self,
        agent: Agent,
        *,
        session_id: str | None = None,
        message: str | None = None,
        session: Session | None = None,
        hooks: Sequence[Hook] = (),
    ) -> RunResult:
        """Run one turn; the result's ``session`` holds its events, uncommitted.

        Nothing is written until ``app.sessions.commit(result.session)``.
        """
        if session is None:
            sid = normalize_session_id(session_id) if session_id else mint_session_id()
            session = self.sessions.get(sid) or self.sessions.bind(Session.new(sid))
        runs = agent.active(session.head.agent)  # the agent a hand-off left in charge
        start = open_turn(runs, session, TurnInput(message=message), clock=self.clock)
        return drain(run_turn(runs, session, start, hooks=hooks, clock=self.clock,
                              team=agent.team()))

    @property
    def handler(self) -> Handlers:
        """``app.handler.turn / rest / agui``: one turn per request, committed for you."""
        if self._handler is None:
            from dormant.handlers import Handlers

            self._handler = Handlers(self)
        return self._handler
