"""The agents a script can reach: the session agent and, recursively, the sub-agents its tools
run (``Agent.as_tool``), each named by its path (``"concierge/billing"``, as the events'
``scope.path`` names it). The kit gives each one its own scripted model
(``model(..., agent="billing")``), so the script says which agent a reply is for."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace

from dormant.agent import Agent
from dormant.models.scripted import ScriptError

__all__ = ["agent_paths", "rebuild", "resolve_agent"]


def _children(agent: Agent) -> Iterator[tuple[str, Agent]]:
    """(tool name, sub-agent) for each agent ``agent`` can hand work to. Hand-off targets
    (``Agent.handoffs``, once they exist) are one more ``yield from`` here, plus their
    rebuild in :func:`_rebuild`."""
    for name, tool in agent.tools.items():
        if isinstance(tool.agent, Agent):
            yield name, tool.agent


def agent_paths(agent: Agent) -> dict[str, Agent]:
    """Path -> agent, for ``agent`` and every agent it reaches (depth first, each path once:
    an agent that reaches itself again is not followed further)."""
    found: dict[str, Agent] = {}

    def walk(current: Agent, path: str, seen: tuple[int, ...]) -> None:
        found[path] = current
        for _, sub in _children(current):
            if id(sub) not in seen:
                walk(sub, f"{path}/{sub.name}", (*seen, id(sub)))

    walk(agent, agent.name, (id(agent),))
    return found


def resolve_agent(paths: Mapping[str, Agent], key: str, what: str) -> str:
    """The path ``key`` names: a path, or the name of exactly one reachable agent."""
    if key in paths:
        return key
    named = [path for path, agent in paths.items() if agent.name == key]
    if len(named) == 1:
        return named[0]
    reachable = ", ".join(paths)
    if named:
        raise ScriptError(f"{what}: agent {key!r} is reached by {len(named)} paths "
                          f"({', '.join(named)}); name it by its path")
    raise ScriptError(f"{what}: no agent {key!r} is reachable from the script's agent; "
                      f"reachable: {reachable}")


def rebuild(agent: Agent, change: Callable[[str, Agent], Agent],
            path: str | None = None) -> Agent:
    """``agent`` and every agent it reaches, each passed through ``change(path, agent)`` (the
    tools that run sub-agents are copied with their rebuilt agents; nothing is changed in
    place)."""
    path = path if path is not None else agent.name
    return _rebuild(agent, change, path, (id(agent),))


def _rebuild(agent: Agent, change: Callable[[str, Agent], Agent], path: str,
             seen: tuple[int, ...]) -> Agent:
    tools = dict(agent.tools)
    for name, sub in _children(agent):
        if id(sub) not in seen:  # as agent_paths walks
            tools[name] = replace(tools[name], agent=_rebuild(
                sub, change, f"{path}/{sub.name}", (*seen, id(sub))))
    return change(path, replace(agent, tools=tools) if tools != agent.tools else agent)
