"""How a script's steps become deliveries: each step, in order, as the request a client would
send (answers by tool name or call id, decisions by approval id, call id or tool name). A step
answering an agent that runs child sessions (a delegate: ``agent="researcher"``) goes to the
child session of that agent which waits."""

from __future__ import annotations

from typing import Any

from dormant._ids import new_id
from dormant.models.scripted import ScriptError
from dormant.session import Session
from dormant.testing._agents import agent_paths, delegated, resolve_agent
from dormant.testing._drivers import Driver
from dormant.testing.steps import (
    ApprovalStep,
    ConflictStep,
    CrashStep,
    InterruptStep,
    PauseStep,
    RedeliverStep,
    RespondStep,
    ResumeStep,
    RetryStep,
    Step,
    TimerStep,
    ToolInputStep,
    ToolResultStep,
    UserStep,
)

__all__ = ["play"]


def play(driver: Driver, steps: list[Step]) -> None:
    """Deliver ``steps`` to ``driver`` in order."""
    where = _Where(driver)
    for step in steps:
        if isinstance(step, UserStep):
            # The id is minted here so a redelivery resends it, wherever the message went.
            given: dict[str, Any] = {"message": step.text,
                                     "message_id": step.id or new_id("msg")}
            if step.if_busy is not None:
                given["if_busy"] = step.if_busy
            driver.deliver(given)
        elif isinstance(step, ToolInputStep):
            session = where(step.agent, "tool_input(...)")
            driver.deliver({"tools": _answer(session, step.answers,
                                             _Mine(where.active(session), step.agent))},
                           where.target(session))
        elif isinstance(step, ToolResultStep):
            session = where(step.agent, "tool_result(...)")
            call = _deferred(session, step.call, _Mine(where.active(session), step.agent))
            driver.deliver({"tool_results": [{"call_id": call,
                                              "result": step.result,
                                              "is_error": step.is_error}]},
                           where.target(session))
        elif isinstance(step, ApprovalStep):
            session = where(step.agent, "approval(...)")
            driver.deliver({"approvals": _decide(session, step.decisions,
                                                 _Mine(where.active(session), step.agent))},
                           where.target(session))
        elif isinstance(step, RetryStep):
            driver.deliver({"retry": {"retry_id": step.retry_id or new_id("retry")}})
        elif isinstance(step, ConflictStep):
            driver.conflict_next = True
        elif isinstance(step, CrashStep):
            driver.crash_next = True
        elif isinstance(step, RedeliverStep):
            driver.redeliver()
        elif isinstance(step, PauseStep):
            driver.deliver({"pause": True})
        elif isinstance(step, ResumeStep):
            driver.deliver({"resume": True})
        elif isinstance(step, InterruptStep):
            owner = step.owner or _waited_on(driver.session())
            driver.deliver({"interrupt": {"owner": owner}})
        elif isinstance(step, RespondStep):
            driver.deliver({"inputs": [{"input_id": step.input_id, "value": step.value}]})
        elif isinstance(step, TimerStep):
            driver.timer(step.name)


def _waited_on(session: Session) -> str:
    """What ``interrupt()`` ends by default: the first pending call or approval, else the
    first input request, else the failed invocation."""
    head = session.head
    for call in head.unresolved():
        return call.approval_id or call.call_id
    for item in head.inputs:
        return str(item["input_id"])
    if head.failed and head.open_invocation is not None:
        return head.open_invocation
    raise ScriptError("interrupt(): the session waits on nothing (no pending call, approval, "
                      "input request or failed invocation); name the owner")


class _Where:
    """The session a step answering ``agent``'s pending items acts on: the script's, or for
    an agent that runs child sessions (a delegate, or one of its hand-off team, or a
    sub-agent of theirs) the one child session of that agent which waits."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver
        self.paths = agent_paths(driver.agent)
        self.delegates = delegated(driver.agent)

    def __call__(self, agent: str | None, what: str) -> Session:
        session = self.driver.session()
        if agent is None or not self.delegates:
            return session
        try:
            root = resolve_agent(self.paths, agent, what).split("/", 1)[0]
        except ScriptError:  # no agent of that name: matched as given, among the script's
            return session
        if root not in self.delegates:
            return session
        children = [c for c in self.driver.children() if _run_by(c) == root]
        waiting = [c for c in children if c.head.open_invocation is not None]
        if len(waiting) == 1:
            return waiting[0]
        ids = {c.session_id for c in waiting}
        known = ", ".join(f"{c.session_id} ({'waits' if c.session_id in ids else 'ended'})"
                          for c in children) or "none"
        raise ScriptError(f"{what} for agent {agent!r}: a delegate's pending items are "
                          f"answered on its child session, and {len(waiting)} of its child "
                          f"sessions wait (one must); its child sessions: {known}")

    def active(self, session: Session) -> str:
        """The name of the session's agent now: the one a hand-off left in charge, else the
        agent it was started with (whose pending items carry no path): the script's, or a
        child session's delegate."""
        return session.head.agent or _run_by(session) or self.driver.agent.name

    def target(self, session: Session) -> str | None:
        """Where a delivery for ``session`` goes (None: the script's session)."""
        return None if session.session_id == self.driver.session_id else session.session_id


def _run_by(session: Session) -> str | None:
    """The agent a child session runs now (None: not a child session)."""
    parent = session.head.parent
    return None if parent is None else session.head.agent or parent.get("agent")


class _Mine:
    """Which agent's pending items a step picks among: ``agent`` (a path such as
    ``"concierge/billing"``, or the last part of one: an agent's name) or, None, any agent's.
    A pending item of the session's agent has no path: its path is that agent's name (after
    a hand-off, the target's)."""

    def __init__(self, root: str, agent: str | None) -> None:
        self.root = root
        self.agent = agent

    def __call__(self, path: str | None) -> bool:
        path = path or self.root
        return self.agent is None or self.agent in (path, path.rsplit("/", 1)[-1])

    def named(self, path: str | None) -> str:
        """How a pending item is listed in a complaint: with its agent's path."""
        return f" in {path}" if path else ""


def _answer(session: Session, answers: dict[str, Any], mine: _Mine) -> list[dict[str, Any]]:
    pending = [p for p in session.yielded_tools if mine(p.agent)]
    given: list[dict[str, Any]] = []
    for key, value in answers.items():
        by_id = [p for p in pending if p.call_id == key]
        by_name = [p for p in pending if p.name == key]
        if by_id:
            target = by_id[0]
        elif len(by_name) == 1:
            target = by_name[0]
        elif by_name:
            ids = ", ".join(p.call_id for p in by_name)
            raise ScriptError(f"{key!r} yielded {len(by_name)} times; answer by call id: {ids}")
        else:
            waiting = ", ".join(f"{p.name} ({p.call_id}{mine.named(p.agent)})"
                                for p in session.yielded_tools) or "nothing"
            raise ScriptError(f"tool_input for {key!r}{_among(mine)}, but the run waits on "
                              f"{waiting}")
        given.append({"call_id": target.call_id, "input": value})
    return given


def _among(mine: _Mine) -> str:
    return "" if mine.agent is None else f" (agent {mine.agent})"


def _deferred(session: Session, key: str, mine: _Mine) -> str:
    """The call id of the waiting deferred call ``key`` names (by id or by tool name); a key
    that names none is passed on as it is (the request refuses it, as production would)."""
    pending = [p for p in session.deferred_tools if mine(p.agent)]
    by_name = [p for p in pending if p.name == key]
    if any(p.call_id == key for p in pending) or not by_name:
        return key
    if len(by_name) > 1:
        ids = ", ".join(p.call_id for p in by_name)
        raise ScriptError(f"{key!r} was called {len(by_name)} times; give the result by "
                          f"call id: {ids}")
    return by_name[0].call_id


def _decide(session: Session, decisions: dict[str | None, Any],
            mine: _Mine) -> list[dict[str, Any]]:
    """The wire decisions (``approvals``) for ``decisions``: each key names one pending
    request (approval id, call id, else tool name) of the agent ``mine`` picks; ``None``
    names every such pending one."""
    pending = [p for p in session.pending_approvals if mine(p.agent)]
    given: list[dict[str, Any]] = []
    for key, value in decisions.items():
        if key is None:
            matches = list(pending)
        else:
            matches = [p for p in pending if key in (p.approval_id, p.call_id)] or \
                [p for p in pending if p.tool == key]
        if not matches or (key is not None and len(matches) != 1):
            waiting = ", ".join(f"{p.tool} ({p.approval_id}{mine.named(p.agent)})"
                                for p in session.pending_approvals) or "nothing"
            what = ("a decision on every pending approval" if key is None
                    else f"approval for {key!r}") + _among(mine)
            raise ScriptError(f"{what} matches {len(matches)} pending requests; "
                              f"pending: {waiting}")
        decision = value if isinstance(value, dict) else {"approved": value}
        given.extend({"approval_id": match.approval_id, "approved": decision["approved"],
                      "reason": decision.get("reason")} for match in matches)
    return given


