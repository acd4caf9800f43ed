"""The steps of a test-kit script (:func:`dormant.testing.run_test`): what each one says,
and the checks a script gets before anything runs (:func:`controls_by_reply`).

Each step function returns a small frozen value (``UserStep``, ``ModelStep``, ...); a script
is a list of them (:data:`Step`). ``stop``, ``steer`` and ``pause(after=N)`` return a
:class:`~dormant.testing._drivers.Control`, which acts on the next ``model`` reply while it
streams.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dormant._inputs import IfBusy
from dormant.models.scripted import ScriptError, arg_pieces
from dormant.testing._drivers import Control

__all__ = [
    "PIECES",
    "ApprovalStep",
    "ConflictStep",
    "CrashStep",
    "InterruptStep",
    "ModelErrorStep",
    "ModelStep",
    "PauseStep",
    "RedeliverStep",
    "RespondStep",
    "ResumeStep",
    "RetryStep",
    "Step",
    "TimerStep",
    "ToolInputStep",
    "ToolResultStep",
    "UserStep",
    "controls_by_agent",
    "controls_by_reply",
]


@dataclass(frozen=True)
class UserStep:
    text: str
    id: str | None = None
    if_busy: IfBusy | None = None


@dataclass(frozen=True)
class ModelStep:
    reply: str | dict[str, Any]
    #: The agent whose model gives this reply (a path or a name); None: the session agent.
    agent: str | None = None


@dataclass(frozen=True)
class ToolInputStep:
    answers: dict[str, Any]
    #: Only the calls of this agent (a path or a name); None: any agent's.
    agent: str | None = None


@dataclass(frozen=True)
class ToolResultStep:
    call: str
    result: Any
    is_error: bool
    agent: str | None = None


@dataclass(frozen=True)
class ApprovalStep:
    #: Decisions keyed by tool name, call id or approval id; the key ``None`` decides every
    #: pending request (``approve()`` / ``deny()`` with no name).
    decisions: dict[str | None, Any]
    #: Only the requests of this agent (a path or a name); None: any agent's.
    agent: str | None = None


@dataclass(frozen=True)
class ModelErrorStep:
    message: str
    retryable: bool
    agent: str | None = None


@dataclass(frozen=True)
class RetryStep:
    retry_id: str | None


@dataclass(frozen=True)
class ConflictStep:
    pass


@dataclass(frozen=True)
class RedeliverStep:
    pass


@dataclass(frozen=True)
class CrashStep:
    pass


@dataclass(frozen=True)
class PauseStep:
    pass


@dataclass(frozen=True)
class ResumeStep:
    pass


@dataclass(frozen=True)
class InterruptStep:
    owner: str | None


@dataclass(frozen=True)
class RespondStep:
    input_id: str
    value: Any


@dataclass(frozen=True)
class TimerStep:
    name: str


#: The pieces :class:`ScriptedModel` streams a reply's text in (a word and the space after it):
#: what ``after=`` counts.
PIECES = re.compile(r"\S+\s*|\s+")

#: A script's step.
Step = (UserStep | ModelStep | ToolInputStep | ToolResultStep | ApprovalStep | ModelErrorStep
        | RetryStep | ConflictStep | RedeliverStep | CrashStep | Control | PauseStep | ResumeStep
        | InterruptStep | RespondStep | TimerStep)


def user(text: str, *, id: str | None = None) -> UserStep:
    """A user message (or the message that resumes a ``yields=True`` agent). To a session
    that waits (on a yield, an approval, an input request), failed or is paused, it lands in
    the inbox (status ``queued``) and runs once the session is free — as :func:`message`."""
    return UserStep(text, id)


def message(text: str, *, id: str | None = None,
            if_busy: IfBusy | None = None) -> UserStep:
    """A user message sent while the session may be waiting: it runs at once when the session
    is free, else lands in the inbox (``session.inbox``; the step's result has status
    ``queued``) and runs after the session frees up (the inbox drains after the step that
    frees it; script a ``model`` reply for it). ``if_busy="reject"`` makes the refusal the
    step's result instead (``pending_input``, ``session_failed``, ``session_paused``);
    ``"interrupt"`` ends the waiting response and runs this message."""
    return UserStep(text, id, if_busy)


def model(text: str | dict[str, Any] | None = None, *,
          tool_calls: Sequence[dict[str, Any]] | None = None,
          thought: str | None = None, usage: dict[str, int] | None = None,
          agent: str | None = None) -> ModelStep:
    """One model reply: text, tool calls (``[{"name": ..., "args": {...}}]``) or both.
    ``usage``: the tokens the call reports (``{"input_tokens": 12, "output_tokens": 3}``;
    also ``cached_tokens``, ``reasoning_tokens``), priced by the app's price table under
    the model name ``scripted``.

    ``agent``: the agent whose model replies — a sub-agent the script's agent reaches
    through its tools (``Agent.as_tool``), by name (``"billing"``) or path
    (``"concierge/billing"``), an agent it may hand the conversation over to
    (``handoffs=[...]``) or one it delegates to (``Agent.as_delegate``: it runs a child
    session), by its own name. Each agent's replies are consumed in script order
    by its own model calls; None: the script's agent's (after a hand-off too). A name no
    reachable agent has fails the run with a :class:`ScriptError` before anything runs.

    A dict in the seeds' shape is accepted too: ``model({"tool_calls": [...]})``."""
    if isinstance(text, dict):
        calls = text.get("tool_calls", text.get("toolCalls"))
        return model(text.get("text"), tool_calls=calls, thought=text.get("thought"),
                     usage=text.get("usage"), agent=agent)
    if text is None and not tool_calls:
        raise ScriptError("model(...) needs text or tool_calls")
    if tool_calls is None and thought is None and usage is None:
        return ModelStep(text or "", agent)
    reply: dict[str, Any] = {"text": text or ""}
    if tool_calls:
        reply["tool_calls"] = [dict(call) for call in tool_calls]
    if thought:
        reply["thought"] = thought
    if usage is not None:
        reply["usage"] = dict(usage)
    return ModelStep(reply, agent)


def tool_input(answers: dict[str, Any], *, agent: str | None = None) -> ToolInputStep:
    """Answers for the calls that yielded, keyed by tool name or by call id. ``agent``
    (a path like ``"concierge/billing"``, or an agent's name): only that agent's calls are
    matched by tool name — for two agents waiting on a tool of the same name."""
    return ToolInputStep(dict(answers), agent)


def tool_result(call: str, result: Any = None, *, is_error: bool = False,
                agent: str | None = None) -> ToolResultStep:
    """The result of a deferred call (``app.tool(..., deferred=True)``), as trusted server
    code supplies it: ``call`` is the tool's name or the call id (by id when the tool was
    called twice in a step). ``is_error``: ``result`` is an error the model reads. The
    parked turn resumes once every call of its step is settled: script the ``model`` reply
    that follows. ``agent``: only that agent's deferred calls are matched by name."""
    return ToolResultStep(call, result, is_error, agent)


#: The seeds call this step ``input(...)``; importing it by that name shadows the builtin only
#: where you ask for it (``from dormant.testing import input``).
input = tool_input


def approval(decisions: dict[str, bool | dict[str, Any]], *,
             agent: str | None = None) -> ApprovalStep:
    """Decisions on pending approval requests, keyed by tool name, call id or approval id:
    ``True`` / ``False``, or ``{"approved": False, "reason": "not today"}``. ``agent``: only
    that agent's requests (a path like ``"concierge/billing"``, or an agent's name)."""
    keyed: dict[str | None, Any] = {key: value for key, value in decisions.items()}
    return ApprovalStep(keyed, agent)


def approve(name: str | None = None, *, reason: str | None = None,
            agent: str | None = None) -> ApprovalStep:
    """Approve what waits for approval: every pending request (no ``name``), or the one
    ``name`` names (a tool name, call id or approval id). The tool then runs; script the
    :func:`model` reply that follows. With nothing pending (or nothing ``name`` names) the
    run fails with a :class:`ScriptError` that lists what is pending.

    A sub-agent's requests are pending too (each names its agent's path): ``agent``
    (``"concierge/billing"``, or an agent's name) picks among that agent's only — for two
    agents waiting on a tool of the same name. The session agent is named by its own name.
    A delegate's requests wait in its child session: ``agent="researcher"`` (a delegate's
    name, or a path under it) sends the decision there, to the one child session of that
    agent that waits (the step's result is the child's request's)."""
    return ApprovalStep({name: {"approved": True, "reason": reason}}, agent)


def deny(name: str | None = None, *, reason: str | None = None,
         agent: str | None = None) -> ApprovalStep:
    """Deny what waits for approval (as :func:`approve` picks it): the tool never runs, and
    the model reads the denial (with ``reason``) as the call's result."""
    return ApprovalStep({name: {"approved": False, "reason": reason}}, agent)


def model_error(message: str = "the model provider failed", *,
                retryable: bool = True, agent: str | None = None) -> ModelErrorStep:
    """The next model call fails (a :class:`~dormant.models.ModelError`). Before any tool ran
    the turn writes nothing; after, its finished steps are kept and the session is
    ``failed`` until :func:`retry`. ``agent``: the agent whose model call fails (as
    :func:`model`)."""
    return ModelErrorStep(message, retryable, agent)


def retry(retry_id: str | None = None) -> RetryStep:
    """Retry the failed invocation: its failed model call runs again (the next ``model``
    step answers it); finished tools are not run again. ``retry_id`` defaults to a fresh id."""
    return RetryStep(retry_id)


def conflict() -> ConflictStep:
    """The next commit is refused as if another writer had landed first (the version moves,
    no newer message): the commit policy merges it (``commit_status == "merged"``)."""
    return ConflictStep()


def crash() -> CrashStep:
    """The next delivery's process dies (a ``kill -9``) after its claim committed and before
    its turn commits. The point it dies at is its first model call, just before the model is
    asked: what the claim committed stays (a decision, an answer, a retry, the start of a
    queued message), a tool the claim let run has already run, and nothing the turn did
    after the claim is committed. The step's result is an error with code ``crashed``.

    Its claim's lease then runs out (the kit's clock moves past it): the next step — any
    delivery, e.g. a :func:`message`, which is queued — finds the invocation stranded, takes
    it over in the same request and drains the inbox. The takeover re-runs the unfinished
    step under the same call ids (a tool that ran before the crash runs again with the same
    ``ctx.call_id``, its idempotency key; its result lands in the ledger once), so script the
    :func:`model` replies the takeover needs, then those of the queued messages.

    A delivery that claims nothing (a fresh message: its turn writes nothing until it ends)
    dies having written nothing: the message is lost (:func:`redeliver` sends it again). A
    next delivery that calls no model is a :class:`ScriptError`."""
    return CrashStep()


def stop(*, after: int = 0, seen: int | None = None) -> Control:
    """Stop the *next* model reply once it streamed ``after`` pieces (words): a stop for the
    running invocation is sent as its own request (``{"stop": {"invocation_id": ...,
    "seen": ...}}``) while the reply streams, and the reply waits (up to 5 s) until the turn
    took it from the session's control record. The turn ends ``stopped``; the reply keeps its
    first ``seen`` pieces (None: all it streamed). The pieces of a tool call scripted with
    ``"stream_args": True`` count after the words: a stop among them leaves the call a
    ``tool_call_draft`` in the ledger, out of the conversation.

    Through the handlers, ``seen`` needs the stopped turn to be the step's own (not one the
    inbox or a timer ran)."""
    _count("stop", after)
    if seen is not None:
        _count("stop: seen", seen)
        if seen > after:
            raise ScriptError(f"stop(after={after}, seen={seen}): the client cannot have seen "
                              "more pieces than the reply streamed")
    return Control("stop", after, seen=seen)


def steer(text: str, *, after: int = 0, id: str | None = None) -> Control:
    """Steer the running invocation: sent as its own request once the *next* model reply
    streamed ``after`` pieces; it joins at the next step boundary (a ``steer`` and a
    ``user`` event with ``steer=True`` inside the invocation), so script one more
    :func:`model` reply for the step it causes."""
    _count("steer", after)
    if not text:
        raise ScriptError("steer(...) needs a text")
    return Control("steer", after, text=text, id=id)


def pause(*, after: int | None = None) -> PauseStep | Control:
    """Pause the session. ``after=None``: a pause request between steps (no turn runs; the
    next request takes it up, messages queue until :func:`resume`). ``after=N``: a pause sent
    while the *next* model reply streams, after ``N`` pieces: the turn stops at its next step
    boundary with status ``paused`` (after a reply with no tool calls the invocation ends
    first, and the session is paused after it)."""
    if after is None:
        return PauseStep()
    _count("pause", after)
    return Control("pause", after)


def resume() -> ResumeStep:
    """Resume a paused session: an invocation paused between steps carries on (script its
    next :func:`model` reply), then the inbox drains."""
    return ResumeStep()


def interrupt(owner: str | None = None) -> InterruptStep:
    """Interrupt what the session waits on: ``owner`` names it (a pending call, approval or
    input id, or the failed invocation id); by default the first pending yielded call or
    approval, else the first input request, else the failed invocation."""
    return InterruptStep(owner)


def respond(input_id: str, value: Any) -> RespondStep:
    """Answer the input request ``input_id`` (``session.request_input``) with ``value``."""
    return RespondStep(input_id, value)


def timer(name: str) -> TimerStep:
    """The session's pending timer ``name`` fires now: its delivery goes through the wake
    path (``app.handler.wake`` through the handlers). A name not pending is a
    :class:`ScriptError` that says what is pending."""
    return TimerStep(name)


def _count(what: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ScriptError(f"{what}: expected a count of pieces >= 0, got {value!r}")


def redeliver() -> RedeliverStep:
    """The previous input arrives again (same message id, answer, decision or retry id): it
    must land once — the repeat is refused (``duplicate_message``, ``already_answered``…)
    and writes nothing."""
    return RedeliverStep()


def controls_by_reply(steps: list[Step]) -> dict[int, list[Control]]:
    """Model-call position -> the stops, steers and pauses sent while that reply streams
    (each acts on the next ``model`` step after it), counting every model step as one
    agent's."""
    return controls_by_agent(steps, lambda step: None).get(None, {})


def controls_by_agent(steps: list[Step], owner: Callable[[ModelStep | ModelErrorStep], Any],
                      ) -> dict[Any, dict[int, list[Control]]]:
    """Agent (``owner`` of a model step) -> its model-call position -> the stops, steers and
    pauses sent while that reply streams (each acts on the next ``model`` step after it,
    whichever agent's; positions count each agent's own model calls)."""
    by_agent: dict[Any, dict[int, list[Control]]] = {}
    positions: dict[Any, int] = {}
    waiting: list[Control] = []
    for step in steps:
        if isinstance(step, Control):
            waiting.append(step)
        elif isinstance(step, ModelErrorStep):
            if waiting:
                raise ScriptError(f"{waiting[0].describe()} acts on the next model(...) reply, "
                                  "but the next model call is a model_error(...)")
            key = owner(step)
            positions[key] = positions.get(key, 0) + 1
        elif isinstance(step, ModelStep):
            reply: dict[str, Any] = (step.reply if isinstance(step.reply, dict)
                                     else {"text": step.reply})
            calls: list[dict[str, Any]] = reply.get("tool_calls") or []
            pieces = len(PIECES.findall(reply.get("text") or "")) + sum(
                arg_pieces(call) for call in calls)
            for control in waiting:
                if control.after > pieces:
                    raise ScriptError(f"{control.describe()}: the next reply streams only "
                                      f"{pieces} pieces")
            key = owner(step)
            position = positions.get(key, 0)
            if waiting:
                by_agent.setdefault(key, {})[position] = waiting
                waiting = []
            positions[key] = position + 1
    if waiting:
        raise ScriptError(f"{waiting[0].describe()} needs a model(...) reply after it to act on")
    return by_agent
