"""The agents a script can reach, each named by its path as the events' ``scope.path`` names
it: the session agent and the agents it may hand the conversation over to (its hand-off
team, :meth:`Agent.team`), each by its own name (a hand-off target becomes the session's
agent: its sub-agents' paths start with its name, ``"billing/ledger"``), the agents it
delegates to (``Agent.as_delegate``, :meth:`Agent.delegates`), each by its own name too (a
delegate is its child session's own agent), and under each, recursively, the sub-agents its
tools run (``Agent.as_tool``: ``"concierge/billing"``). The kit gives each one its own
scripted model (``model(..., agent="billing")``), so the script says which agent a reply is
for."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import replace

from dormant.agent import Agent, Roster
from dormant.models.scripted import ScriptError

__all__ = ["agent_paths", "delegated", "rebuild", "resolve_agent"]


def _children(agent: Agent) -> Iterator[tuple[str, Agent]]:
    """(tool name, sub-agent) for each agent ``agent`` runs as a tool. Its hand-off targets
    are no children: they are roots of their own (:func:`_roots`)."""
    for name, tool in agent.tools.items():
        if isinstance(tool.agent, Agent):
            yield name, tool.agent


def _team(agent: Agent) -> dict[str, Agent]:
    """The agents that may be the session's when ``agent`` is the entry: ``agent`` and its
    hand-off team, by name, as a request resolves them (:meth:`Agent.team`, which follows
    cycles once). A sub-agent is never offered its hand-offs, so only the team's are
    followed."""
    return agent.team() if agent.handoffs else {agent.name: agent}


def _roots(agent: Agent) -> dict[str, Agent]:
    """The agents named by their own name: ``agent``'s team, then the agents it (or any of
    them, or their sub-agents) delegates to, each with its own team (it is the entry of its
    child session), and theirs in turn. A name is the first agent reached of that name, as
    :meth:`Agent.delegates` resolves it."""
    found = dict(_team(agent))
    waiting = list(found.values())
    while waiting:
        for name, delegate in waiting.pop(0).delegates().items():
            if name not in found:
                for member_name, member in _team(delegate).items():
                    if member_name not in found:
                        found[member_name] = member
                        waiting.append(member)
    return found


def delegated(agent: Agent) -> set[str]:
    """The names of the agents reached only through a delegation: they run child sessions,
    never the script's own (a delegate, and its hand-off team)."""
    return set(_roots(agent)) - set(_team(agent))


def agent_paths(agent: Agent) -> dict[str, Agent]:
    """Path -> agent, for ``agent``, its hand-off team, the agents they delegate to (and
    their teams) and every agent these run as tools (depth first, each path once: an agent
    that reaches itself again is not followed further)."""
    found: dict[str, Agent] = {}

    def walk(current: Agent, path: str, seen: tuple[int, ...]) -> None:
        found[path] = current
        for _, sub in _children(current):
            if id(sub) not in seen:
                walk(sub, f"{path}/{sub.name}", (*seen, id(sub)))

    for name, root in _roots(agent).items():
        walk(root, name, (id(root),))
    return found


def resolve_agent(paths: Mapping[str, Agent], key: str, what: str,
                  delegates: Collection[str] = ()) -> str:
    """The path ``key`` names: a path, or the name of exactly one reachable agent.
    ``delegates``: the roots that run child sessions (:func:`delegated`), for the
    complaints."""
    if key in paths:
        return key
    named = [path for path, agent in paths.items() if agent.name == key]
    if len(named) == 1:
        return named[0]
    reachable = ", ".join(paths)
    if named:
        raise ScriptError(f"{what}: agent {key!r} is reached by {len(named)} paths "
                          f"({', '.join(named)}); name it by its path")
    last = key.rsplit("/", 1)[-1]
    if "/" in key and last in delegates:  # a delegate named as if run as a tool
        raise ScriptError(f"{what}: no agent {key!r} is reachable from the script's agent; "
                          f"{last!r} is a delegate, named by its own name (it is its child "
                          f"session's agent): agent={last!r}; reachable: {reachable}")
    if "/" in key and last in paths:  # a hand-off target named as if run as a tool
        raise ScriptError(f"{what}: no agent {key!r} is reachable from the script's agent; "
                          f"{last!r} is a hand-off target, named by its own name (it becomes "
                          f"the session's agent): agent={last!r}; reachable: {reachable}")
    raise ScriptError(f"{what}: no agent {key!r} is reachable from the script's agent; "
                      f"reachable: {reachable}")


def rebuild(agent: Agent, change: Callable[[str, Agent], Agent]) -> Agent:
    """``agent`` and every agent it reaches, each passed through ``change(path, agent)``;
    nothing is changed in place. The tools that run sub-agents are copied with their rebuilt
    agents; the hand-off team's copies hand over to one another (cycles included: each
    names its targets, resolved among the copies by a roster of the kit's own), so the
    copied entry's :meth:`Agent.team` is the copies, and a hand-off in a kit run reaches
    the rebuilt target. The tools that delegate are copied with the rebuilt delegates (set
    once every copy is made, so a delegation cycle reaches copies too): the copied entry's
    :meth:`Agent.delegates`, among which the executor finds a child session's agent, are
    the copies."""
    roots = _roots(agent)
    if len(roots) == 1 and not agent.handoffs:
        return _rebuild(agent, change, agent.name, (id(agent),), None, [])
    roster: Roster = {}
    made: list[Agent] = []
    copies: dict[int, Agent] = {}  # id(a root) -> its copy: what a delegation tool gets
    for name, root in roots.items():
        copies[id(root)] = _rebuild(root, change, name, (id(root),),
                                    roster if root.handoffs else None, made)
        roster[name] = [copies[id(root)]]
    for copy in made:
        for name, tool in list(copy.tools.items()):
            if tool.delegate is not None and id(tool.delegate) in copies:
                copy.tools[name] = replace(tool, delegate=copies[id(tool.delegate)])
    return copies[id(agent)]


def _rebuild(agent: Agent, change: Callable[[str, Agent], Agent], path: str,
             seen: tuple[int, ...], roster: Roster | None, made: list[Agent]) -> Agent:
    """``agent`` (at ``path``) and its sub-agents rebuilt; ``roster``: ``agent`` is of a
    hand-off team, whose copies its hand-offs resolve among (by name). Each copy whose
    tools delegate is added to ``made`` (with a tools dict of its own, the caller then
    points at the rebuilt delegates)."""
    tools = dict(agent.tools)
    for name, sub in _children(agent):
        if id(sub) not in seen:  # as agent_paths walks
            tools[name] = replace(tools[name], agent=_rebuild(
                sub, change, f"{path}/{sub.name}", (*seen, id(sub)), None, made))
    delegates = any(tool.delegate is not None for tool in tools.values())
    if roster is not None:
        targets = tuple(target.name if isinstance(target, Agent) else target
                        for target in agent.handoffs)
        copy = change(path, replace(agent, tools=tools, handoffs=targets, roster=roster))
    else:
        copy = change(path, replace(agent, tools=tools)
                      if delegates or tools != agent.tools else agent)
    if delegates:
        if copy.tools is agent.tools:  # (a change that kept the original's tools)
            copy = replace(copy, tools=dict(copy.tools))
        made.append(copy)
    return copy
