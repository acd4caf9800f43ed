"""What each turn of a session came to, and how a replay's turns differ from the recording's.

A *turn* here is what one outside input set off: the ledger's events from that input to the
next one (a message, an answer, a decision…; :func:`dormant.testing._replay.outside_inputs`
finds them). Its :class:`TurnOutcome` is what a person reviewing a change asks of it: which
tools it called (name and arguments), which approvals and questions it asked, how it ended and
what it said. :func:`compare` pairs the recording's turns with the replay's, input by input.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dormant.events import (
    ApprovalRequested,
    AssistantEvent,
    Event,
    InputRequested,
    InvocationEnd,
    InvocationFailed,
    InvocationResume,
    InvocationStart,
    InvocationYield,
    PauseEvent,
    QueuedEvent,
    RetryEvent,
    ToolCall,
    ToolYield,
)

__all__ = [
    "OPENS",
    "SETTLES",
    "Orphan",
    "ReplayDiff",
    "TurnDiff",
    "TurnOutcome",
    "compare",
    "outcome",
    "text_score",
]

#: The session-level events after which a turn runs, and those after which none does (a
#: pause taken while one runs parks it too).
OPENS = (InvocationStart, InvocationResume, RetryEvent)
SETTLES = (InvocationEnd, InvocationYield, InvocationFailed)


class TurnOutcome(BaseModel):
    """What one outside input set off. A sub-agent's items are prefixed with its path
    (``"concierge/billing: refund(...)"``)."""

    model_config = ConfigDict(frozen=True)

    input: str = Field(description="The input, in words (``message 'hi'``, ``approve "
                                   "upgrade_room``…).")
    tools: list[str] = Field(default_factory=list,
                             description="Each tool call, ``name({args as JSON})``, in order.")
    approvals: list[str] = Field(default_factory=list,
                                 description="The tools whose calls waited for an approval.")
    questions: list[str] = Field(default_factory=list,
                                 description="What was asked of people: the yielded tools "
                                             "(by name) and the input requests (by id).")
    status: str = Field(description="How it ended: completed, yielded_tool, yielded_message, "
                                    "failed, stopped, interrupted, paused, queued, or recorded "
                                    "(nothing ran).")
    text: str = Field(default="", description="What the session's agent said, its replies "
                                              "joined by a blank line.")


class Orphan(BaseModel):
    """A recorded input the replay could not deliver: what it answers is not waiting there."""

    model_config = ConfigDict(frozen=True)

    index: int = Field(description="The input's position among the recording's inputs.")
    input: str
    reason: str


class TurnDiff(BaseModel):
    """One input's turn, recorded and replayed (``replayed`` None: it was not delivered)."""

    model_config = ConfigDict(frozen=True)

    index: int
    recorded: TurnOutcome
    replayed: TurnOutcome | None
    changes: list[str] = Field(default_factory=list,
                               description="What differs, a line per field.")
    text_score: float = Field(description="How alike the two texts are, 0 to 1 (difflib's "
                                          "ratio; 1 when both are empty).")

    @property
    def changed(self) -> bool:
        return bool(self.changes)

    @property
    def tools_changed(self) -> bool:
        return self.replayed is None or self.replayed.tools != self.recorded.tools

    @property
    def new_approvals(self) -> list[str]:
        """The approvals the replay asked that the recording's turn did not (by tool)."""
        if self.replayed is None:
            return []
        left = list(self.recorded.approvals)
        new = []
        for name in self.replayed.approvals:
            if name in left:
                left.remove(name)
            else:
                new.append(name)
        return new


class ReplayDiff(BaseModel):
    """The recording and the replay, turn by turn, with the inputs that no longer fit."""

    model_config = ConfigDict(frozen=True)

    turns: list[TurnDiff]
    orphans: list[Orphan] = Field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.orphans) or any(turn.changed for turn in self.turns)

    @property
    def tools_changed(self) -> int:
        """How many turns called other tools, or the same with other arguments."""
        return sum(turn.tools_changed for turn in self.turns)

    @property
    def new_approvals(self) -> list[str]:
        return [name for turn in self.turns for name in turn.new_approvals]

    @property
    def text_score(self) -> float:
        """The turns' text scores, averaged (1.0 for no turns)."""
        scores = [turn.text_score for turn in self.turns]
        return sum(scores) / len(scores) if scores else 1.0

    def __str__(self) -> str:
        lines = []
        for turn in self.turns:
            mark = "changed" if turn.changed else "same"
            lines.append(f"turn {turn.index + 1} ({turn.recorded.input}): {mark}")
            lines.extend(f"  {change}" for change in turn.changes)
        lines.extend(f"orphan: {o.input}: {o.reason}" for o in self.orphans)
        return "\n".join(lines)


def outcome(events: Sequence[Event], described: str) -> TurnOutcome:
    """The outcome of ``events``, the turn one input (``described``) set off."""
    tools, approvals, questions, texts = [], [], [], []
    status = "recorded"
    running = False  # (a pause parks a running turn; one sent at rest only waits for the next)
    for event in events:
        prefix = f"{event.scope.path}: " if event.scope is not None else ""
        if isinstance(event, ToolCall):
            tools.append(f"{prefix}{event.name}({_args(event.args)})")
        elif isinstance(event, ApprovalRequested):
            approvals.append(f"{prefix}{event.name}")
        elif isinstance(event, ToolYield):
            questions.append(f"{prefix}{event.name}")
        elif isinstance(event, InputRequested):
            questions.append(f"{prefix}input {event.input_id}")
        elif isinstance(event, AssistantEvent) and event.scope is None:
            texts.append(event.text)
        if event.scope is not None:
            continue  # a sub-agent's ending is its call's, not the turn's
        if isinstance(event, OPENS):
            running = True
        elif isinstance(event, InvocationEnd):
            status, running = event.status, False
        elif isinstance(event, InvocationYield):
            status, running = f"yielded_{event.reason}", False
        elif isinstance(event, InvocationFailed):
            status, running = "failed", False
        elif isinstance(event, PauseEvent) and running:
            status, running = "paused", False
        elif isinstance(event, QueuedEvent) and status == "recorded":
            status = "queued"
    return TurnOutcome(input=described, tools=tools, approvals=approvals, questions=questions,
                       status=status, text="\n\n".join(texts))


def _args(args: Any) -> str:
    return json.dumps(args, sort_keys=True, separators=(", ", ": "), default=str)


def text_score(before: str, after: str) -> float:
    """How alike two texts are, 0 to 1: difflib's ratio over their words (1 when both are
    empty)."""
    if before == after:
        return 1.0
    return round(difflib.SequenceMatcher(None, before.split(), after.split()).ratio(), 3)


def compare(recorded: Sequence[TurnOutcome], replayed: Sequence[TurnOutcome | None],
            orphans: Sequence[Orphan] = ()) -> ReplayDiff:
    """Pair the recording's turns with the replay's, input by input."""
    turns = []
    for index, (before, after) in enumerate(zip(recorded, replayed, strict=True)):
        turns.append(TurnDiff(index=index, recorded=before, replayed=after,
                              changes=_changes(before, after),
                              text_score=text_score(before.text, after.text) if after else 0.0))
    return ReplayDiff(turns=turns, orphans=list(orphans))


def _changes(before: TurnOutcome, after: TurnOutcome | None) -> list[str]:
    if after is None:
        return ["not replayed: the input no longer fits (see orphans)"]
    changes = []
    for field in ("tools", "approvals", "questions"):
        was, now = getattr(before, field), getattr(after, field)
        if was != now:
            changes.append(f"{field}: {_listed(was)} -> {_listed(now)}")
    if before.status != after.status:
        changes.append(f"status: {before.status} -> {after.status}")
    if before.text != after.text:
        changes.append(f"text: {_quoted(before.text)} -> {_quoted(after.text)}")
    return changes


def _listed(items: list[str]) -> str:
    return ", ".join(items) if items else "none"


def _quoted(text: str, most: int = 80) -> str:
    return json.dumps(text if len(text) <= most else text[:most - 1] + "…", ensure_ascii=False)
