"""Agents, their context recipe, and hooks."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from dormant._head import TURN_INDEX_SIZE
from dormant._inputs import ClientContext
from dormant.errors import ConfigError, DormantError, ToolSourceUnavailable
from dormant.models._base import ToolSpec
from dormant.tools import APPROVAL_POLICIES, TOOL_NAME, Tool, ToolSource

if TYPE_CHECKING:
    from dormant._decide import EventType
    from dormant.events import AppEvent
    from dormant.models._base import Model, ModelRequest
    from dormant.session import Session
    from dormant.tools import ToolContext

__all__ = ["Agent", "AgentInput", "ClientPart", "Compaction", "ContextBuilders",
           "HandoffInput", "History", "Hook", "HookContext", "System", "Toolset",
           "client_notes"]

DEFAULT_MAX_STEPS = 16

#: A hand-off tool's name is this prefix and its target agent's name.
HANDOFF_PREFIX = "transfer_to_"

#: The agents an app made, by name (``app.agent``): what a hand-off named by its agent's
#: name resolves among. Several agents may share a name; only resolving such a name fails.
Roster = dict[str, list["Agent"]]

#: The tool lanes an agent may name: ``"tools"`` runs its tools one at a time, in call order.
TOOL_LANES = ("tools",)


@dataclass(frozen=True)
class System:
    """A system prompt: text, or a function of the session returning text."""

    text: str | Callable[[Session], str]

    def render(self, session: Session) -> str:
        return self.text(session) if callable(self.text) else self.text


#: What the model is asked when ``Compaction(summarize=None)``: the default instruction.
DEFAULT_SUMMARY_INSTRUCTION = (
    "You compact a long conversation between a user and an assistant that uses tools. Write "
    "a concise summary of the transcript you are given that lets the assistant carry on "
    "without it: the user's goals and preferences, decisions made, facts learned (names, "
    "dates, ids, amounts), tool results that still matter, and anything promised or still "
    "open. Write plain prose or bullets, no preamble.")


@dataclass(frozen=True)
class Compaction:
    """When the conversation outgrows a budget, older turns are folded into a summary.

    ``max_turns``: compact when more turns than this follow the last summary; ``max_tokens``:
    when the history sent (summary included) is estimated above this many tokens (about four
    characters a token: :func:`dormant.estimate_tokens`). At least one budget is needed.
    ``keep_last``: turns kept as they are (the current one included). ``summarize``: the
    instruction a model call summarises with (None: a default one), or a function of the
    messages to fold (the previous summary first, as a system message) returning the summary.
    ``model``: the model that summarises (None: the agent's own).

    The summary is a ``compaction`` event committed with the turn that made it; later turns
    send it and what follows it, and the stores read only that, so a compacted session's
    reads stay flat however long it lives. Nothing is deleted from the ledger.
    """

    max_turns: int | None = None
    max_tokens: int | None = None
    keep_last: int = 4
    summarize: str | Callable[[list[Any]], str] | None = None
    model: Any = None

    def __post_init__(self) -> None:
        for name in ("max_turns", "max_tokens", "keep_last"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise ConfigError(f"Compaction({name}=...) must be a positive int, got "
                                  f"{value!r}")
        if self.keep_last > TURN_INDEX_SIZE:
            raise ConfigError(f"Compaction(keep_last={self.keep_last}) may keep at most "
                              f"{TURN_INDEX_SIZE} turns")
        if self.max_turns is None and self.max_tokens is None:
            raise ConfigError("Compaction needs a budget: max_turns=N, max_tokens=N or both")
        if self.max_turns is not None and self.max_turns <= self.keep_last:
            raise ConfigError(f"Compaction(max_turns={self.max_turns}) must exceed "
                              f"keep_last={self.keep_last}: each compaction keeps that many "
                              "turns")
        if self.summarize is not None and not isinstance(self.summarize, str) \
                and not callable(self.summarize):
            raise ConfigError("Compaction(summarize=...) must be an instruction (str), a "
                              f"function of the messages, or None; got {self.summarize!r}")

    @property
    def instruction(self) -> str:
        return self.summarize if isinstance(self.summarize, str) else \
            DEFAULT_SUMMARY_INSTRUCTION


@dataclass(frozen=True)
class History:
    """The conversation: all of it (``limit=None``) or the ``limit`` most recent turns; with
    ``compact``, the latest summary and what follows it (see :class:`Compaction`).
    ``app_events``: application events are part of it, each a system note where it sits in
    the ledger (``True``), or the text a function of the event returns (None: skipped);
    ``False`` (the default): the model never sees them."""

    limit: int | None = None
    compact: Compaction | None = None
    app_events: bool | Callable[[AppEvent], str | None] = False


def client_notes(items: Sequence[ClientContext]) -> str | None:
    """The default text of a client's context (AG-UI ``context``): one system part listing
    each item as ``- description: value``, introduced as the client's (the model should not
    take it for the app's own instructions); None when there is none."""
    if not items:
        return None
    lines = "\n".join(f"- {item.description}: {item.value}" for item in items)
    return f"Context from the user's application (given by the client):\n{lines}"


@dataclass(frozen=True)
class ClientPart:
    """Where the context a client gives a run (AG-UI ``context``) enters the model's system
    prompts, and as what text: ``render`` maps the items to text (None: left out). An agent
    whose recipe has no ``ClientPart`` gets the default one after its system prompts."""

    render: Callable[[Sequence[ClientContext]], str | None] = client_notes


ContextItem = System | History | ClientPart


class ContextBuilders:
    """``app.context``: the pieces an agent's context is made of."""

    @staticmethod
    def system(text: str | Callable[[Session], str]) -> System:
        return System(text)

    @staticmethod
    def history(limit: int | None = None, *, compact: Compaction | None = None,
                app_events: bool | Callable[[AppEvent], str | None] = False) -> History:
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise ConfigError(f"history(limit=...) must be a positive int or None, got {limit!r}")
        if compact is not None and not isinstance(compact, Compaction):
            raise ConfigError(f"history(compact=...) takes a dormant.Compaction, got "
                              f"{compact!r}")
        if not isinstance(app_events, bool) and not callable(app_events):
            raise ConfigError("history(app_events=...) takes True, False or a function of the "
                              f"event returning text; got {app_events!r}")
        return History(limit, compact, app_events)

    @staticmethod
    def client(render: Callable[[Sequence[ClientContext]], str | None] = client_notes
               ) -> ClientPart:
        """The client's context (AG-UI ``context`` items) as a system part, where this sits
        in the recipe; ``render`` makes the text (return None to leave it out: an agent that
        must not read a public client's context)."""
        if not callable(render):
            raise ConfigError(f"context.client(render=...) takes a function of the items, "
                              f"got {render!r}")
        return ClientPart(render)


@dataclass
class HookContext:
    """What a hook receives (one positional argument). Fields not relevant to a hook are None.

    ``before_agent`` may return a ``str``: it becomes the run's reply and no model is called.
    ``before_tool`` may return a value: it becomes the tool's result and the tool is skipped.
    ``after_tool`` may return a value: it replaces the tool's result.
    ``event``: the ledger event that triggered the turn (the user message, a timer firing,
    an application event the request brought…), as tools see it (``ToolContext.event``);
    ``session.app_events`` lists the application events the session holds.
    """

    agent: Agent
    session: Session
    invocation_id: str | None
    state: dict[str, Any]
    request: ModelRequest | None = None
    text: str | None = None
    tool: ToolContext | None = None
    result: Any = None
    error: str | None = None
    event: Any = None


HookFn = Callable[[HookContext], Any]


@dataclass(frozen=True)
class Hook:
    """Callbacks around a run. Each is called with one :class:`HookContext`."""

    before_agent: HookFn | None = None
    after_agent: HookFn | None = None
    before_model: HookFn | None = None
    after_model: HookFn | None = None
    before_tool: HookFn | None = None
    after_tool: HookFn | None = None

    @classmethod
    def coerce(cls, value: Hook | dict[str, HookFn]) -> Hook:
        if isinstance(value, Hook):
            return value
        if isinstance(value, dict):
            unknown = set(value) - set(cls.__dataclass_fields__)
            if unknown:
                raise ConfigError(f"unknown hook names: {sorted(unknown)}")
            return cls(**value)
        raise ConfigError(f"a hook must be a dormant.Hook or a dict, got {value!r}")


ErrorHandler = Callable[[BaseException, HookContext], "str | None"]

@dataclass(frozen=True)
class Toolset:
    """An agent's tools as a turn uses them: its own and its tool sources', by name; their
    specs as a model is sent them; the approval policy of each tool that has one (a
    source's ``approval``, then the agent's ``tool_approval``, which wins)."""

    tools: dict[str, Tool]
    specs: list[ToolSpec]
    approval: dict[str, Any]


class AgentInput(BaseModel):
    """What a call of an agent used as a tool (``Agent.as_tool``) gives it."""

    model_config = ConfigDict(extra="forbid")

    input: str = Field(description="What the agent should do, in words: its first message.")


class HandoffInput(BaseModel):
    """What a hand-off call (``transfer_to_<agent>``) gives: optionally, why."""

    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(default=None,
                               description="Why the conversation goes to that agent.")


@dataclass(eq=False)
class Agent:
    """An agent: a model, a context recipe, tools. Build it with ``app.agent(...)``."""

    name: str
    model: Model | None
    context: Sequence[ContextItem]
    tools: dict[str, Tool]
    #: Park after each reply that ends the turn, waiting for the next message (status
    #: ``yielded_message``) instead of ending the invocation. None: True for a realtime model
    #: (one whose ``realtime`` attribute is true), else False; resolved when the agent is made.
    yields: bool | None = None
    #: Tool name -> ``"user-approval"`` | ``"approved"`` | a function of the validated args
    #: returning one of those (it must be deterministic over its input).
    tool_approval: dict[str, Any] | None = None
    hooks: tuple[Hook, ...] = ()
    max_steps: int = DEFAULT_MAX_STEPS
    app_hooks: tuple[Hook, ...] = field(default=(), repr=False)
    #: None: the independent calls of a model step run concurrently. ``"tools"``: the
    #: agent's tools run one at a time, in call order (each sees the state the previous
    #: ones wrote).
    tool_lane: str | None = None
    #: The declared event types of the app the agent belongs to (``app.event``); None: an
    #: agent made outside an app.
    app_events: dict[str, EventType] | None = field(default=None, repr=False)
    has_history: bool = field(init=False, repr=False)
    places_client_context: bool = field(init=False, repr=False)
    history_turns: int | None = field(init=False, repr=False)
    #: How many recent turns a request loads for this agent alone (its history's, at least
    #: the current turn's when it has agents as tools); :attr:`load_turns` is its team's.
    own_turns: int | None = field(init=False, repr=False)
    #: The context's compaction (None: the history is never compacted).
    compaction: Compaction | None = field(init=False, repr=False)
    tool_specs: list[ToolSpec] = field(init=False, repr=False)
    #: How the history shows application events (see :class:`History`).
    app_event_view: bool | Callable[[AppEvent], str | None] = field(init=False, repr=False)
    #: Where more tools come from (MCP servers), listed on the first turn that needs them
    #: (:meth:`toolset`). ``tools`` and ``tool_specs`` hold the agent's own tools only.
    sources: tuple[ToolSource, ...] = field(default=(), repr=False)
    #: The agents this one may hand the conversation over to: each an Agent or an agent's
    #: name, resolved among the agents of its app (``roster``) on first use.
    handoffs: tuple[Agent | str, ...] = ()
    roster: Roster | None = field(default=None, repr=False)
    #: The hand-off tools' specs (``transfer_to_<agent>``), offered beside the agent's tools
    #: when it is the session's agent (never to a sub-agent run as a tool).
    handoff_specs: list[ToolSpec] = field(init=False, repr=False)
    _handoff_names: dict[str, str] = field(init=False, repr=False)
    _team: dict[str, Agent] | None = field(init=False, repr=False, default=None)
    _toolset: Toolset | None = field(init=False, repr=False, default=None)
    _toolset_lock: threading.Lock = field(init=False, repr=False,
                                          default_factory=threading.Lock)

    def __post_init__(self) -> None:
        _check_tool_lane(self.name, self.tool_lane)
        if self.yields is None:  # a conversation with a realtime model waits for its reply
            self.yields = is_realtime(self.model)
        # Derived once: the turn path reads these on every model call.
        self.has_history = any(isinstance(item, History) for item in self.context)
        #: The recipe says where a client's context goes (else: after the system prompts).
        self.places_client_context = any(isinstance(item, ClientPart) for item in self.context)
        self.history_turns = _history_turns(self.context)
        # A sub-agent that parked carries on from its events, all after the latest message:
        # an agent with agents as tools loads at least that turn, whatever its model sees.
        self.own_turns = self.history_turns if self.history_turns is None or not any(
            tool.agent is not None for tool in self.tools.values()) \
            else max(self.history_turns, 1)
        self.compaction = next((item.compact for item in self.context
                                if isinstance(item, History) and item.compact is not None),
                               None)
        self.tool_specs = [ToolSpec(t.name, t.description, t.parameters())
                           for t in self.tools.values()]
        self.app_event_view = next((item.app_events for item in self.context
                                    if isinstance(item, History) and item.app_events), False)
        if not self.sources:  # nothing to list: the toolset is the agent's own tools
            self._toolset = Toolset(self.tools, self.tool_specs, dict(self.tool_approval or {}))
        self._handoff_names = {}
        for target in self.handoffs:
            name = target.name if isinstance(target, Agent) else target
            tool_name = HANDOFF_PREFIX + name
            if not TOOL_NAME.fullmatch(tool_name) or tool_name in self.tools \
                    or tool_name in self._handoff_names:
                raise ConfigError(f"agent {self.name!r}: cannot hand over to {name!r}: its "
                                  f"tool {tool_name!r} is not a tool name, or taken twice")
            self._handoff_names[tool_name] = name
        self.handoff_specs = [
            ToolSpec(tool_name, f"Hand the conversation over to the {name} agent: it answers "
                                "the user from here on, seeing the whole conversation. Say "
                                "why in `reason`.", HandoffInput.model_json_schema())
            for tool_name, name in self._handoff_names.items()]

    def handoff_target(self, tool_name: str) -> str | None:
        """The agent a call of ``tool_name`` hands over to (None: no hand-off tool)."""
        return self._handoff_names.get(tool_name)

    def handoff(self, name: str) -> Agent:
        """The agent this one hands over to by ``name``: one it was given, else the only
        agent of that name its app made. Raises :class:`ConfigError` for a name it may not
        hand over to, none of its app's agents, or several."""
        for target in self.handoffs:
            if isinstance(target, Agent) and target.name == name:
                return target
        if name not in self._handoff_names.values():
            raise ConfigError(f"agent {self.name!r} may not hand over to {name!r}")
        found = (self.roster or {}).get(name, [])
        if len(found) != 1:
            why = "no agent of its app is" if not found else \
                f"{len(found)} agents of its app are"
            raise ConfigError(f"agent {self.name!r} hands over to {name!r}, but {why} named "
                              f"{name!r}; pass the Agent itself in handoffs=[...]")
        return found[0]

    def team(self) -> dict[str, Agent]:
        """This agent and every agent reachable from it through hand-offs, by name: the
        agents a handler serving it runs. A name is one agent in a team: the first reached
        from this one (itself first) is the one a hand-off of that name goes to. Resolved
        (and checked: :meth:`handoff`) on first use, then kept."""
        team = self._team
        if team is None:
            team = {self.name: self}
            todo = [self]
            while todo:
                agent = todo.pop(0)
                for name in agent._handoff_names.values():
                    if name not in team:
                        team[name] = target = agent.handoff(name)
                        todo.append(target)
            self._team = team
        return team

    def active(self, name: str | None) -> Agent:
        """The agent that runs a session whose active agent is ``name`` (``Head.agent``),
        when this agent is the entry: that one if it is of this agent's team, else this
        one."""
        if not name or name == self.name or not self.handoffs:
            return self
        return self.team().get(name, self)

    @property
    def load_turns(self) -> int | None:
        """How many recent turns a request loads for this agent's team (None: all): enough
        for whichever of them runs."""
        limits = [agent.own_turns for agent in self.team().values()]
        return None if None in limits else max(limit or 0 for limit in limits)

    @property
    def load_compacted(self) -> bool:
        """Whether a request may load from the latest summary: only when every agent of the
        team compacts (one that does not reads the whole history)."""
        return all(agent.compaction is not None for agent in self.team().values())

    def as_tool(self, name: str | None = None, description: str | None = None) -> Tool:
        """This agent as a tool for another agent's ``tools=[...]``: a call runs it as a
        sub-agent inside the caller's turn, with its own instructions and history (the
        caller's model sees neither), on the same session's ledger (its events carry a
        ``scope`` naming it and the call). Its tools' approvals, yields and deferred calls
        are the session's pending items, answered as ever; the answer resumes the sub-agent
        where it stopped, then the caller. Its final reply is the call's result.

        ``name``: the tool's name (default: the agent's); ``description``: what the calling
        model is told the tool does (default: one naming the agent)."""
        tool_name = self.name if name is None else name
        if not isinstance(tool_name, str) or not TOOL_NAME.fullmatch(tool_name):
            raise ConfigError(f"agent {self.name!r}: as_tool(name={tool_name!r}) must be a "
                              "tool name: letters, digits, '_' and '-', at most 64")
        if description is not None and not isinstance(description, str):
            raise ConfigError(f"agent {self.name!r}: as_tool(description=...) must be text")
        return Tool(name=tool_name,
                    description=description or f"Ask the {self.name} agent. Say in `input` "
                                               "what it should do; it answers in text.",
                    schema=AgentInput, agent=self)

    def as_delegate(self, name: str | None = None, description: str | None = None) -> Tool:
        """This agent as a deferred tool for another agent's ``tools=[...]``: a call parks the
        caller (``tool_deferred``, approval policies first, as for any deferred tool); once
        the caller's turn has committed, this agent runs the call's ``input`` in a child
        session of its own (same principal; linked both ways: ``parent``, ``children``),
        in-process or handed on (``App.hand_on``, the webhook queue). The child's end is the
        call's result, supplied to the parent through the trusted path (once, whatever the
        retries), and the parent resumes. A child that parks leaves the parent waiting; its
        pending items are answered on the child session.

        ``name``: the tool's name (default: the agent's); ``description``: what the calling
        model is told the tool does (default: one naming the agent)."""
        tool = self.as_tool(name, description)
        return Tool(name=tool.name, description=tool.description, schema=AgentInput,
                    deferred=True, delegate=self)

    def delegates(self) -> dict[str, Agent]:
        """The agents this one delegates to (``as_delegate``), and theirs, by name: whom a
        child session of a session this agent serves is run by. Its hand-off team's, its
        sub-agents' and its delegates' own delegations count (any of them may make the
        call)."""
        found: dict[str, Agent] = {}
        seen: set[int] = set()
        waiting = [self]
        while waiting:
            agent = waiting.pop()
            if id(agent) in seen:
                continue
            seen.add(id(agent))
            if agent.handoffs:
                waiting.extend(agent.team().values())
            for tool in agent.tools.values():
                if tool.delegate is not None:
                    found.setdefault(tool.delegate.name, tool.delegate)
                waiting.extend(other for other in (tool.delegate, tool.agent)
                               if other is not None)
        return found

    def toolset(self) -> Toolset:
        """The agent's tools with its sources' (an MCP server's), resolved on first use and
        kept for the life of the process. Raises :class:`ToolSourceUnavailable` if a source
        cannot list its tools, :class:`ConfigError` for two tools of one name or an approval
        policy naming no tool; nothing is kept then, and the next call tries again."""
        found = self._toolset
        if found is not None:
            return found
        with self._toolset_lock:  # concurrent first turns list each source once
            if self._toolset is None:
                self._toolset = _resolve_toolset(self)
            return self._toolset


def _resolve_toolset(agent: Agent) -> Toolset:
    tools = dict(agent.tools)
    origin = dict.fromkeys(tools, "its own tools")
    approval: dict[str, Any] = {}
    for source in agent.sources:
        try:
            listed = source.list_tools()
        except DormantError:
            raise
        except Exception as error:  # a source's own failure: name the source, not the secret
            raise ToolSourceUnavailable(source.label, type(error).__name__) from error
        own_name = getattr(source, "server_name", None)  # a source that renames its tools
        for tool in listed:
            if tool.name in tools:
                called = own_name(tool.name) if callable(own_name) else tool.name
                as_listed = f", which it calls {called!r}" if called != tool.name else ""
                raise ConfigError(f"agent {agent.name!r}: two tools are named {tool.name!r} "
                                  f"(one from {origin[tool.name]}, one from {source.label}"
                                  f"{as_listed}); allow only one of them "
                                  "(MCPServer(tools=[...]), or rename=/prefix=)")
            tools[tool.name] = tool
            origin[tool.name] = source.label
        approval.update(source.approval)
    approval.update(agent.tool_approval or {})
    unknown = sorted(set(approval) - set(tools))
    if unknown:
        raise ConfigError(f"agent {agent.name!r}: an approval policy names {unknown}, which "
                          f"are none of its tools ({', '.join(sorted(tools)) or 'none'})")
    specs = [ToolSpec(t.name, t.description, t.parameters()) for t in tools.values()]
    return Toolset(tools, specs, approval)


def is_realtime(model: object) -> bool:
    """Whether ``model`` is a realtime model (its ``realtime`` attribute is true): agents of
    one yield for the next message by default."""
    return bool(getattr(model, "realtime", False))


def _check_tool_lane(agent: str, lane: object) -> None:
    if lane is not None and lane not in TOOL_LANES:
        raise ConfigError(f"agent {agent!r}: tool_lane must be None (independent tools run "
                          f"concurrently) or 'tools' (one at a time), got {lane!r}")


def _history_turns(context: Sequence[ContextItem]) -> int | None:
    """How many recent turns the context needs loaded (None: all; 0: none)."""
    turns: int | None = 0
    for item in context:
        if isinstance(item, History):
            if item.limit is None:
                return None
            turns = max(turns or 0, item.limit)
    return turns


def build_agent(
    *,
    name: str,
    model: Model | None,
    context: Sequence[ContextItem] | None,
    tools: Sequence[Tool | ToolSource] | None,
    yields: bool | None,
    tool_approval: dict[str, Any] | None,
    hooks: Sequence[Hook | dict[str, HookFn]] | None,
    max_steps: int,
    app_hooks: tuple[Hook, ...],
    tool_lane: str | None = None,
    app_events: dict[str, EventType] | None = None,
    handoffs: Sequence[Agent | str] | None = None,
    roster: Roster | None = None,
) -> Agent:
    if not name:
        raise ConfigError("an agent needs a name")
    _check_tool_lane(name, tool_lane)
    if yields is not None and not isinstance(yields, bool):
        raise ConfigError(f"agent {name!r}: yields must be True, False or None (None: True for "
                          f"a realtime model), got {yields!r}")
    if not isinstance(max_steps, int) or max_steps < 1:
        raise ConfigError(f"agent {name!r}: max_steps must be a positive int")
    by_name: dict[str, Tool] = {}
    sources: list[ToolSource] = []
    for tool in tools or ():
        if not isinstance(tool, Tool):
            if isinstance(tool, ToolSource):  # listed on the first turn, not now
                sources.append(tool)
                continue
            raise ConfigError(f"agent {name!r}: {tool!r} is not a tool made by app.tool "
                              "(nor a tool source such as dormant.mcp.MCPServer)")
        if tool.name in by_name:
            raise ConfigError(f"agent {name!r}: two tools are named {tool.name!r}")
        by_name[tool.name] = tool
    items = list(context if context is not None else [History()])
    for item in items:
        if not isinstance(item, System | History | ClientPart):
            raise ConfigError(f"agent {name!r}: unknown context item {item!r}")
    provider_run = set(getattr(model, "system_tools", None) or ())
    for tool_name, policy in (tool_approval or {}).items():
        if tool_name in provider_run:
            raise ConfigError(f"agent {name!r}: {tool_name!r} is one of the model's system "
                              "tools, which the provider runs inside the model call before "
                              "dormant sees it, so no approval can be asked first; remove its "
                              "approval policy, or leave it out of system_tools")
        if tool_name not in by_name and not sources:  # a source's tool is checked at listing
            raise ConfigError(f"agent {name!r}: tool_approval names {tool_name!r}, which is not "
                              f"one of its tools ({', '.join(sorted(by_name)) or 'none'})")
        if tool_name in by_name and by_name[tool_name].yields:
            raise ConfigError(f"agent {name!r}: {tool_name!r} yields (it already waits for a "
                              "human); approval policies apply to tools that run directly")
        if not callable(policy) and policy not in APPROVAL_POLICIES:
            raise ConfigError(f"agent {name!r}: the policy for {tool_name!r} must be "
                              "'user-approval', 'approved' or a function of the arguments")
    for target in handoffs or ():
        if not isinstance(target, Agent | str) or not target:
            raise ConfigError(f"agent {name!r}: handoffs=[...] lists agents or agents' names, "
                              f"got {target!r}")
    agent = Agent(name=name, model=model, context=items, tools=by_name, yields=yields,
                  tool_approval=tool_approval, hooks=tuple(Hook.coerce(h) for h in hooks or ()),
                  max_steps=max_steps, app_hooks=app_hooks, tool_lane=tool_lane,
                  app_events=app_events, sources=tuple(sources), handoffs=tuple(handoffs or ()),
                  roster=roster)
    if roster is not None:
        roster.setdefault(name, []).append(agent)
    return agent
