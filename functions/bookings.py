"""The Bookings concierge of the seeds: the sample app the ``api``/``webhook`` functions and
``dormant dev`` serve.

``build(store=None, model=None, scheduler=None)`` returns the app and its ``concierge`` agent.
The model is ``OpenAIModel`` when ``OPENAI_API_KEY`` is set, otherwise :class:`DemoModel`: a
small, honest, rule-based model (no network) that exercises the same tools a real model would.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from pydantic import BaseModel, Field

import dormant
from dormant.models import (
    Model,
    ModelChunk,
    ModelRequest,
    TextDelta,
    ToolCallChunk,
    ToolMessage,
    UserMessage,
)
from dormant.schedulers import Scheduler
from dormant.settings import ENV, Settings
from dormant.stores import Store
from dormant.tools import Signal, ToolContext

__all__ = ["Bookings", "DemoModel", "build", "describe_model"]

SYSTEM = ("You are a hotel booking concierge. Use lookup_stay for questions about an existing "
          "booking, ask_guest when you need something only the guest knows (e.g. which night), "
          "request_approval before cancelling or changing a booking, and set_reminder when the "
          "guest asks to be reminded of something later. A message starting with 'Reminder:' is "
          "a reminder you set coming due: pass it on to the guest.")
HISTORY_TURNS = 20
#: The longest reminder (six days, the seed's limit; EventBridge one-time schedules allow more).
MAX_REMINDER_SECONDS = 6 * 24 * 60 * 60


# --- tools ------------------------------------------------------------------------------------


class StayRef(BaseModel):
    ref: str = Field(description="The booking reference, e.g. BK-1042")


class Question(BaseModel):
    q: str = Field(description="What to ask the guest")


class Answer(BaseModel):
    answer: str = Field(description="The guest's answer")


class Action(BaseModel):
    action: str = Field(description="What will be done once approved, in plain words")


class Decision(BaseModel):
    approved: bool
    note: str | None = None


class ReminderRequest(BaseModel):
    delay_seconds: int = Field(ge=1, le=MAX_REMINDER_SECONDS,
                               description="Seconds from now until the reminder (at most 6 days)")
    reminder: str = Field(min_length=1, max_length=500, description="What to remind the guest of")


def _lookup_stay(ctx: ToolContext) -> dict[str, Any]:
    return {"ref": ctx.args.ref, "nights": 3}


def _prepare_approval(ctx: ToolContext) -> Any:
    ctx.state["pending_action"] = ctx.args.action
    return ctx.args


def _execute_approval(ctx: ToolContext) -> dict[str, Any]:
    if not ctx.input or not ctx.input.approved:
        return {"action": ctx.args.action, "status": "declined"}
    return {"action": ctx.args.action, "status": "performed", "note": ctx.input.note}


def _finalize_approval(ctx: ToolContext) -> None:
    ctx.state.pop("pending_action", None)


def _set_reminder(ctx: ToolContext) -> dict[str, Any]:
    # Named after the call id (the seed's idempotency key): a retried turn converges on one
    # timer, and the reminder arrives as a user message when it comes due (SPEC §7).
    seconds, text = ctx.args.delay_seconds, ctx.args.reminder
    dormant.handler_context().session.schedule(
        f"reminder:{ctx.call_id}", delay=f"{seconds}s", message=f"Reminder: {text}")
    return {"scheduled": True, "delaySeconds": seconds, "reminder": text}


class Bookings(NamedTuple):
    """The sample: ``app, concierge = build()``."""

    app: dormant.App
    concierge: dormant.Agent


def build(store: Store | None = None, model: Model | None = None, *,
          env: Mapping[str, str] | None = None, scheduler: Scheduler | None = None) -> Bookings:
    """The Bookings app on ``store`` (memory when None), served by ``model`` (see module doc);
    reminders go to ``scheduler`` (``dormant dev`` sets its local one on ``app.scheduler``)."""
    app = dormant.App(name="bookings", store=store, scheduler=scheduler)
    lookup_stay = app.tool(name="lookup_stay", description="Look up a booking by its reference",
                           schema=StayRef, execute=_lookup_stay)
    ask_guest = app.tool(name="ask_guest", description="Ask the guest a question and wait for "
                         "the answer", schema=Question, yield_schema=Answer)
    request_approval = app.tool(
        name="request_approval",
        description="Ask a human to approve an action before performing it",
        schema=Action, yield_schema=Decision,
        prepare=_prepare_approval, execute=_execute_approval, finalize=_finalize_approval,
    )
    set_reminder = app.tool(name="set_reminder", description="Remind the guest of something "
                            "later: the reminder arrives as a message", schema=ReminderRequest,
                            execute=_set_reminder)
    concierge = app.agent(
        name="concierge",
        model=model if model is not None else default_model(env),
        context=[app.context.system(SYSTEM), app.context.history(limit=HISTORY_TURNS)],
        tools=[lookup_stay, ask_guest, request_approval, set_reminder],
    )
    return Bookings(app, concierge)


def default_model(env: Mapping[str, str] | None = None) -> Model:
    """``OpenAIModel`` when ``OPENAI_API_KEY`` is set, else :class:`DemoModel`."""
    env = os.environ if env is None else env
    key = env.get(ENV.OPENAI_API_KEY)
    if key:
        from dormant.models import OpenAIModel

        model: Model = OpenAIModel(Settings.from_env(env).openai_model, api_key=key,
                                   base_url=env.get(ENV.OPENAI_BASE_URL) or None)
        return model
    return DemoModel()


def describe_model(model: Any) -> str:
    """One line saying which model serves (for start-up logs)."""
    if isinstance(model, DemoModel):
        return "the demo model (rule-based, no network; set OPENAI_API_KEY to use OpenAI)"
    name = getattr(model, "model", None)
    return f"{type(model).__name__}({name})" if name else type(model).__name__


# --- the demo model ---------------------------------------------------------------------------

_WORDS = re.compile(r"\S+\s*")
_REF = re.compile(r"\b([A-Z]{2,}-?\d+)\b")
_REMIND = re.compile(r"\bremind me in (\d+)\s*(seconds?|secs?|s|minutes?|mins?|m|hours?|h)\b"
                     r"\s*(?:to\s+|that\s+|about\s+)?(.*)", re.IGNORECASE | re.DOTALL)
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600}
_DUE = "reminder:"
_HELP = ("I'm the demo concierge (no OPENAI_API_KEY is set, so a small rule-based model is "
         "answering). Try \"book me in\", \"how long is my stay BK-1042?\", "
         "\"cancel booking BK-1042\" or \"remind me in 30 seconds to check out\".")


class DemoModel:
    """A rule-based :class:`dormant.models.Model` for running the sample with no key.

    It reads the conversation like a model would and answers from fixed rules: a booking
    request asks the guest which night (``ask_guest``), then books it; a question about the
    length of a stay calls ``lookup_stay``; a cancellation asks for approval
    (``request_approval``); "remind me in N seconds to X" calls ``set_reminder``, and when the
    reminder comes due (the message ``Reminder: X``) it passes it on.
    """

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[ModelChunk]:
        messages = request.messages
        last_user = max((i for i, m in enumerate(messages) if isinstance(m, UserMessage)),
                        default=-1)
        results = [m for m in messages[last_user + 1:] if isinstance(m, ToolMessage)]
        if results:
            return _say(_after_tool(results[-1]))
        asked = messages[last_user] if last_user >= 0 else None
        text = asked.text if isinstance(asked, UserMessage) else ""
        return _reply_to(text.lower(), text)


def _reply_to(lowered: str, text: str) -> Iterator[ModelChunk]:
    ref_match = _REF.search(text)
    ref = ref_match.group(1) if ref_match else "BK-1042"
    if lowered.startswith(_DUE):  # a reminder set earlier has come due
        return _say(text.strip())
    if "remind" in lowered:
        return _remind(text)
    if "cancel" in lowered:
        return _call("request_approval", {"action": f"cancel booking {ref}"})
    if "how long" in lowered or "nights" in lowered or "stay" in lowered:
        return _call("lookup_stay", {"ref": ref})
    if "book" in lowered or "reserve" in lowered:
        return _call("ask_guest", {"q": "Which night?"})
    return _say(_HELP)


def _remind(text: str) -> Iterator[ModelChunk]:
    match = _REMIND.search(text)
    what = match.group(3).strip().rstrip(".!?").strip() if match else ""
    if match is None or not what:
        return _say("Tell me when and what, e.g. \"remind me in 30 seconds to check out\".")
    seconds = int(match.group(1)) * _UNIT_SECONDS[match.group(2)[0].lower()]
    return _call("set_reminder", {"delay_seconds": seconds, "reminder": what})


def _after_tool(result: ToolMessage) -> str:
    if result.is_error:
        return f"That didn't work: {result.content}"
    try:
        data = json.loads(result.content)
    except ValueError:
        data = result.content
    if result.name == "ask_guest" and isinstance(data, dict) and data.get("answer"):
        return f"Booked for {data['answer']}."
    if result.name == "set_reminder" and isinstance(data, dict) and data.get("scheduled"):
        seconds = data.get("delaySeconds")
        unit = "second" if seconds == 1 else "seconds"
        return f"OK, I'll remind you in {seconds} {unit}: {data.get('reminder')}."
    if result.name == "lookup_stay" and isinstance(data, dict):
        return f"Your stay {data.get('ref')} is {data.get('nights')} nights."
    if result.name == "request_approval" and isinstance(data, dict):
        if data.get("status") == "performed":
            return f"Done: {data.get('action')}."
        return f"Understood, I won't {data.get('action')}."
    return f"{result.name} answered: {result.content}"


def _say(text: str) -> Iterator[ModelChunk]:
    for piece in _WORDS.findall(text):
        yield TextDelta(piece)


def _call(name: str, args: dict[str, Any]) -> Iterator[ModelChunk]:
    yield ToolCallChunk(call_id=f"call_{os.urandom(8).hex()}", name=name, args=args)
