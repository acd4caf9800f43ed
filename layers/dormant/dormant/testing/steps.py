"""The steps of a test-kit script (:func:`dormant.testing.run_test`): what each one says,
and the checks a script gets before anything runs (:func:`controls_by_reply`).

Each step function returns a small frozen value (``UserStep``, ``ModelStep``, ...); a script
is a list of them (:data:`Step`). ``stop``, ``steer`` and ``pause(after=N)`` return a
:class:`~dormant.testing._drivers.Control`, which acts on the next ``model`` reply while it
streams.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
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


@dataclass(frozen=True)
class ToolInputStep:
    answers: dict[str, Any]


@dataclass(frozen=True)
class ToolResultStep:
    call: str
    result: Any
    is_error: bool


@dataclass(frozen=True)
class ApprovalStep:
    #: Decisions keyed by tool name, call id or approval id; the key ``None`` decides every
    #: pending request (``approve()`` / ``deny()`` with no name).
    decisions: dict[str | None, Any]


@dataclass(frozen=True)
class ModelErrorStep:
    message: str
    retryable: bool


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
          thought: str | None = None, usage: dict[str, int] | None = None) -> ModelStep:
    """One model reply: text, tool calls (``[{"name": ..., "args": {...}}]``) or both.
    ``usage``: the tokens the call reports (``{"input_tokens": 12, "output_tokens": 3}``;
    also ``cached_tokens``, ``reasoning_tokens``), priced by the app's price table under
    the model name ``scripted``.

    A dict in the seeds' shape is accepted too: ``model({"tool_calls": [...]})``."""
    if isinstance(text, dict):
        calls = text.get("tool_calls", text.get("toolCalls"))
        return model(text.get("text"), tool_calls=calls, thought=text.get("thought"),
                     usage=text.get("usage"))
    if text is None and not tool_calls:
        raise ScriptError("model(...) needs text or tool_calls")
    if tool_calls is None and thought is None and usage is None:
        return ModelStep(text or "")
    reply: dict[str, Any] = {"text": text or ""}
    if tool_calls:
        reply["tool_calls"] = [dict(call) for call in tool_calls]
    if thought:
        reply["thought"] = thought
    if usage is not None:
        reply["usage"] = dict(usage)
    return ModelStep(reply)


def tool_input(answers: dict[str, Any]) -> ToolInputStep:
    """Answers for the calls that yielded, keyed by tool name or by call id."""
    return ToolInputStep(dict(answers))


def tool_result(call: str, result: Any = None, *, is_error: bool = False) -> ToolResultStep:
    """The result of a deferred call (``app.tool(..., deferred=True)``), as trusted server
    code supplies it: ``call`` is the tool's name or the call id (by id when the tool was
    called twice in a step). ``is_error``: ``result`` is an error the model reads. The
    parked turn resumes once every call of its step is settled: script the ``model`` reply
    that follows."""
    return ToolResultStep(call, result, is_error)


#: The seeds call this step ``input(...)``; importing it by that name shadows the builtin only
#: where you ask for it (``from dormant.testing import input``).
input = tool_input


def approval(decisions: dict[str, bool | dict[str, Any]]) -> ApprovalStep:
    """Decisions on pending approval requests, keyed by tool name, call id or approval id:
    ``True`` / ``False``, or ``{"approved": False, "reason": "not today"}``."""
    keyed: dict[str | None, Any] = {key: value for key, value in decisions.items()}
    return ApprovalStep(keyed)


def approve(name: str | None = None, *, reason: str | None = None) -> ApprovalStep:
    """Approve what waits for approval: every pending request (no ``name``), or the one
    ``name`` names (a tool name, call id or approval id). The tool then runs; script the
    :func:`model` reply that follows. With nothing pending (or nothing ``name`` names) the
    run fails with a :class:`ScriptError` that lists what is pending."""
    return ApprovalStep({name: {"approved": True, "reason": reason}})


def deny(name: str | None = None, *, reason: str | None = None) -> ApprovalStep:
    """Deny what waits for approval (as :func:`approve` picks it): the tool never runs, and
    the model reads the denial (with ``reason``) as the call's result."""
    return ApprovalStep({name: {"approved": False, "reason": reason}})


def model_error(message: str = "the model provider failed", *,
                retryable: bool = True) -> ModelErrorStep:
    """The next model call fails (a :class:`~dormant.models.ModelError`). Before any tool ran
    the turn writes nothing; after, its finished steps are kept and the session is
    ``failed`` until :func:`retry`."""
    return ModelErrorStep(message, retryable)


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
    (each acts on the next ``model`` step after it)."""
    by_reply: dict[int, list[Control]] = {}
    waiting: list[Control] = []
    position = 0
    for step in steps:
        if isinstance(step, Control):
            waiting.append(step)
        elif isinstance(step, ModelErrorStep):
            if waiting:
                raise ScriptError(f"{waiting[0].describe()} acts on the next model(...) reply, "
                                  "but the next model call is a model_error(...)")
            position += 1
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
            if waiting:
                by_reply[position] = waiting
                waiting = []
            position += 1
    if waiting:
        raise ScriptError(f"{waiting[0].describe()} needs a model(...) reply after it to act on")
    return by_reply


