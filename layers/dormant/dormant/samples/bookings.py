"""The Bookings concierge: the sample app ``dormant dev`` and the Lambda functions serve by
default (``dormant.samples.bookings:build``).

``build(store=None, model=None, scheduler=None)`` returns the app and its ``concierge`` agent.
The model is ``BedrockModel`` when ``DORMANT_BEDROCK_MODEL`` is set, ``OpenAIModel`` when
``OPENAI_API_KEY`` is, otherwise :class:`DemoModel`: a
small, honest, rule-based model (no network) that exercises the same tools a real model would,
and tells a long story slowly on request (something to stop, steer or pause in ``dormant dev``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from pydantic import BaseModel, Field

import dormant
from dormant.models import Model, ModelChunk, ModelRequest, TextDelta
from dormant.models.rules import Reply, RuleModel, ToolOutcome
from dormant.schedulers import Scheduler
from dormant.settings import ENV, Settings
from dormant.stores import Store
from dormant.tools import Signal, ToolContext

__all__ = ["Bookings", "DemoModel", "build", "describe_model"]

SYSTEM = ("You are a hotel booking concierge. Use lookup_stay for questions about an existing "
          "booking, ask_guest when you need something only the guest knows (e.g. which night), "
          "request_approval before cancelling or changing a booking, upgrade_room when the "
          "guest asks for a better room (a person approves each upgrade before it is made; "
          "if it is denied, say so and why), and set_reminder when the guest asks to be "
          "reminded of something later. A message starting with 'Reminder:' is a reminder you "
          "set coming due: pass it on to the guest.")
HISTORY_TURNS = 20
#: The longest reminder: six days (EventBridge one-time schedules allow more).
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


class RoomUpgrade(BaseModel):
    ref: str = Field(description="The booking reference, e.g. BK-1042")
    room: str = Field(min_length=1, description="The room to upgrade to, e.g. suite")


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


def _upgrade_room(ctx: ToolContext) -> dict[str, Any]:
    # Runs only once a person approved this call (the agent's tool_approval policy).
    return {"ref": ctx.args.ref, "room": ctx.args.room, "status": "upgraded"}


def _set_reminder(ctx: ToolContext) -> dict[str, Any]:
    # Named after the call id (the idempotency key): a retried turn converges on one
    # timer, and the reminder arrives as a user message when it comes due.
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
    upgrade_room = app.tool(name="upgrade_room", description="Upgrade a booking's room "
                            "(a person approves it first)", schema=RoomUpgrade,
                            execute=_upgrade_room)
    set_reminder = app.tool(name="set_reminder", description="Remind the guest of something "
                            "later: the reminder arrives as a message", schema=ReminderRequest,
                            execute=_set_reminder)
    concierge = app.agent(
        name="concierge",
        model=model if model is not None else default_model(env),
        context=[app.context.system(SYSTEM), app.context.history(limit=HISTORY_TURNS)],
        tools=[lookup_stay, ask_guest, request_approval, upgrade_room, set_reminder],
        tool_approval={"upgrade_room": "user-approval"},
    )
    return Bookings(app, concierge)


def default_model(env: Mapping[str, str] | None = None) -> Model:
    """``BedrockModel`` when ``DORMANT_BEDROCK_MODEL`` is set, ``OpenAIModel`` when
    ``OPENAI_API_KEY`` is, else :class:`DemoModel`."""
    env = os.environ if env is None else env
    settings = Settings.from_env(env)
    if settings.bedrock_model:
        from dormant.models import BedrockModel

        return BedrockModel(settings.bedrock_model)
    key = env.get(ENV.OPENAI_API_KEY)
    if key:
        from dormant.models import OpenAIModel

        model: Model = OpenAIModel(settings.openai_model, api_key=key,
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
#: The room asked for after "upgrade": "upgrade my room to a suite" -> "suite".
_ROOM = re.compile(r"\bupgrade\b.*?\bto\s+(?:an?\s+|the\s+)?([a-z]+)", re.DOTALL)
_DUE = "reminder:"
_HELP = ("I'm the demo concierge (no OPENAI_API_KEY is set, so a small rule-based model is "
         "answering). Try \"book me in\", \"how long is my stay BK-1042?\", "
         "\"cancel booking BK-1042\", \"upgrade BK-1042 to a suite\", "
         "\"remind me in 30 seconds to check out\" or "
         "\"tell me a long story\" (then stop it, or steer it with \"make it shorter\").")
_STORY = re.compile(r"\bstor(?:y|ies)\b", re.IGNORECASE)
_THE_END = "The end: the guest checked out happy."


class _Story(str):
    """What :meth:`DemoModel.reply` answers when asked for a story: :meth:`DemoModel.stream`
    streams the story slowly instead of this text."""


_STORY_TIME = _Story("(the story)")

#: Seconds between two words of the story (slow enough to stop, steer or pause by hand).
STORY_DELAY = 0.05


class DemoModel(RuleModel):
    """A rule-based :class:`dormant.models.Model` for running the sample with no key.

    It reads the conversation like a model would and answers from fixed rules
    (:class:`~dormant.models.RuleModel`): a booking request asks the guest which night
    (``ask_guest``), then books it; a question about the length of a stay calls
    ``lookup_stay``; a cancellation asks for approval (``request_approval``); "upgrade BK-7
    to a suite" calls ``upgrade_room``, which the agent's approval policy holds for a
    person's decision (approved: ``Upgraded BK-7 to a suite.``; denied: it says so, with the
    reason given); "remind me in N seconds to X" calls ``set_reminder``, and when the
    reminder comes due (the message ``Reminder: X``) it passes it on.

    Asked for a story ("tell me a long story"), it streams a long one (some seventy sentences
    about a hotel guest) one word every ``story_delay`` seconds, waiting on the turn's signal:
    a stop ends it at once. A steer joins when the story's step ends; one asking for it
    "shorter" gets the ending (``The end: the guest checked out happy.``).
    """

    def __init__(self, story_delay: float = STORY_DELAY) -> None:
        if story_delay < 0:
            raise ValueError("story_delay must be >= 0 seconds")
        self.story_delay = story_delay

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[ModelChunk]:
        answer = self.answer(request)
        if isinstance(answer, _Story):
            return _slowly(story(), self.story_delay, signal)
        return self.play(answer)

    def reply(self, text: str) -> Reply:
        lowered = text.lower()
        if not lowered.startswith(_DUE) and "remind" not in lowered:
            if _STORY.search(text):
                return _STORY_TIME
            if "shorter" in lowered:  # e.g. a steer while the story streamed
                return _THE_END
        return _reply_to(lowered, text)

    def after_tool(self, result: ToolOutcome) -> Reply:
        return _after_tool(result)


def _reply_to(lowered: str, text: str) -> Reply:
    ref_match = _REF.search(text)
    ref = ref_match.group(1) if ref_match else "BK-1042"
    if lowered.startswith(_DUE):  # a reminder set earlier has come due
        return (text.strip())
    if "remind" in lowered:
        return _remind(text)
    if "cancel" in lowered:
        return RuleModel.call("request_approval", {"action": f"cancel booking {ref}"})
    if "upgrade" in lowered:  # before "stay" and "book": "upgrade my booking", "my stay"
        room = _ROOM.search(lowered)
        return RuleModel.call("upgrade_room", {"ref": ref,
                                               "room": room.group(1) if room else "suite"})
    if "how long" in lowered or "nights" in lowered or "stay" in lowered:
        return RuleModel.call("lookup_stay", {"ref": ref})
    if "book" in lowered or "reserve" in lowered:
        return RuleModel.call("ask_guest", {"q": "Which night?"})
    return (_HELP)


def _remind(text: str) -> Reply:
    match = _REMIND.search(text)
    what = match.group(3).strip().rstrip(".!?").strip() if match else ""
    if match is None or not what:
        return ("Tell me when and what, e.g. \"remind me in 30 seconds to check out\".")
    seconds = int(match.group(1)) * _UNIT_SECONDS[match.group(2)[0].lower()]
    return RuleModel.call("set_reminder", {"delay_seconds": seconds, "reminder": what})


def _after_tool(result: ToolOutcome) -> str:
    if result.name == "upgrade_room":
        return _upgraded(result)
    if result.is_error:
        return f"That didn't work: {result.content}"
    data = result.data
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


def _upgraded(result: ToolOutcome) -> str:
    """What came of an upgrade: made (approved), not approved (and why, when the person
    said), or failed. A denied call's result is only the denial, so the booking reference
    comes from the call the model made."""
    asked = result.args if isinstance(result.args, dict) else {}
    ref = asked.get("ref", "the booking")
    if result.denied:
        why = (result.reason or "").strip().rstrip(".")
        return f"The upgrade of {ref} was not approved." + (f" The reason given: {why}."
                                                            if why else "")
    data = result.data
    if result.is_error or not isinstance(data, dict) or data.get("status") != "upgraded":
        return f"The upgrade of {ref} didn't work: {result.content}"
    room = str(data.get("room"))
    article = "an" if room[:1] in tuple("aeiou") else "a"
    return f"Upgraded {data.get('ref')} to {article} {room}."


def _slowly(text: str, delay: float, signal: Signal) -> Iterator[ModelChunk]:
    """Stream ``text`` a word every ``delay`` seconds; a stop (or abort) ends it at once."""
    for index, piece in enumerate(_WORDS.findall(text)):
        if index and delay and signal.wait(delay):
            return  # stopped: the run loop keeps what the client saw
        yield TextDelta(piece)


# --- the demo model's story ---------------------------------------------------------------------

#: The parts of the guest's stay: when, where, what she notices, whom she meets (and their
#: short name), what they talk about, how it goes, what she takes away.
_STAY = [
    ("late on a rainy Thursday", "the lobby of the Hotel Linden",
     "the smell of cedar and wet umbrellas", "Tomas, the night porter", "Tomas",
     "the trains that no longer stop in town", "Mara laughed more than she expected to",
     "a brass key with a green tassel"),
    ("that first evening", "room 412", "a window that looked over the tram depot",
     "a housekeeper named Ines", "Ines", "how to coax the old radiator into life",
     "Mara listened more than she spoke", "a spare blanket that smelled of lavender"),
    ("at dinner", "the dining room under the glass roof", "a piano nobody seemed to play",
     "a retired conductor at the next table", "The conductor",
     "the one concert he never finished", "Mara forgot her soup had gone cold",
     "the name of a waltz she meant to look up"),
    ("near midnight", "the library on the mezzanine", "a guest book from 1962",
     "a student who could not sleep either", "The student",
     "the strangers who had signed the book before them", "Mara felt oddly at home",
     "a line of her own in the old guest book"),
    ("at breakfast", "the terrace above the square", "the baker's cart arriving late",
     "the manager, Mrs Okafor", "Mrs Okafor", "why the hotel still wound every clock by hand",
     "Mara asked more questions than was polite", "a map with three cafes circled in pencil"),
    ("on the last morning", "the front desk", "that her suitcase felt lighter than before",
     "Tomas again, at the end of his shift", "Tomas", "whether the rain would ever stop",
     "Mara found she did not want to leave", "a postcard of the hotel, stamped and ready"),
]
_SCENE = [
    "It was {when} when Mara found herself in {where}.",
    "The first thing she noticed was {notice}.",
    "She stood still for a moment and let the place settle around her.",
    "Before long she was talking with {who}.",
    "They spoke about {topic}, slowly, the way people do when nobody is in a hurry.",
    "{mood}.",
    "{name} told her that the hotel remembered every guest, in its own way.",
    "She was not sure she believed it, but she liked the idea.",
    "Outside, the town went on with its business without her.",
    "When she finally moved on, she took with her {keep}.",
    "It seemed a small thing, yet she kept turning it over in her mind.",
]


def story() -> str:
    """The demo model's long story (some seventy sentences): a guest's stay at an old hotel,
    part by part, built from the parts of the stay and one scene's sentences."""
    sentences = ["Once upon a time, a traveller named Mara booked three nights at an old hotel "
                 "she had chosen for its name alone."]
    for when, where, notice, who, name, topic, mood, keep in _STAY:
        sentences += [line.format(when=when, where=where, notice=notice, who=who, name=name,
                                  topic=topic, mood=mood, keep=keep) for line in _SCENE]
    sentences.append("On the tram to the station she read the postcard one last time, and "
                     "decided to come back in the spring.")
    return " ".join(sentences)
