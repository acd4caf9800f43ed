"""A model made of rules: run your own agent locally with no key and no network.

Subclass :class:`RuleModel` and say what it answers::

    from dormant.models import RuleModel

    class LocalModel(RuleModel):
        def reply(self, text):                      # the user's latest message
            if "refund" in text.lower():
                return self.call("refund", {"order_id": "A-1", "amount": 20})
            return "Ask me for a refund."

        def after_tool(self, result):               # a tool's result came back
            return f"Refund {result.data.get('status', 'done')}."

``reply`` answers a user message and ``after_tool`` the result of the tool it called; each
returns text (streamed word by word, as a real model streams), or a tool call made with
:meth:`RuleModel.call`, or a list of tool calls. The agent's tools, approvals, yields and the
ledger all work as they do with a real model, so the rules exercise the same paths; only the
judgement is yours.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from dormant.models._base import (
    DENIED,
    AssistantMessage,
    ModelChunk,
    ModelRequest,
    TextDelta,
    ToolCallChunk,
    ToolMessage,
    UserMessage,
)
from dormant.tools import Signal

__all__ = ["DENIED", "Reply", "RuleModel", "ToolOutcome"]

_WORDS = re.compile(r"\S+\s*")

#: What a rule answers: text, one tool call, or several tool calls in one step.
Reply = str | ToolCallChunk | Sequence[ToolCallChunk]


@dataclass(frozen=True)
class ToolOutcome:
    """A tool's result as :meth:`RuleModel.after_tool` sees it."""

    name: str
    call_id: str
    #: The result as JSON text (what a real model reads), or the error's text.
    content: str
    is_error: bool
    #: The arguments the model called the tool with, as the conversation has them (None if
    #: the call is not in it): what a denied or failed call's result does not repeat.
    args: Any = None

    @property
    def denied(self) -> bool:
        """True when a person denied the call (an approval policy): the tool never ran."""
        return self.is_error and (self.content == DENIED or
                                  self.content.startswith(f"{DENIED}: "))

    @property
    def reason(self) -> str | None:
        """Why the call was denied, when the decision said (None otherwise)."""
        if not self.denied or self.content == DENIED:
            return None
        return self.content.removeprefix(f"{DENIED}: ") or None

    @property
    def data(self) -> Any:
        """The result parsed from JSON (the text itself when it is not JSON)."""
        try:
            return json.loads(self.content)
        except ValueError:
            return self.content


class RuleModel:
    """A :class:`~dormant.models.Model` answering from rules: override :meth:`reply` and
    :meth:`after_tool` (see the module's example)."""

    #: How traces and the price table name it (:func:`~dormant.models._base.identify`).
    provider = "dormant"
    model = "rules"

    def reply(self, text: str) -> Reply:
        """What to answer the user's latest message ``text`` (default: say what to do)."""
        return (f"No rule answers {text!r} yet: override {type(self).__name__}.reply "
                f"to say what this model does.")

    def after_tool(self, result: ToolOutcome) -> Reply:
        """What to say once a tool called by :meth:`reply` answered (default: its result)."""
        if result.is_error:
            return f"{result.name} failed: {result.content}"
        return f"{result.name} answered: {result.content}"

    @staticmethod
    def call(name: str, args: dict[str, Any] | None = None) -> ToolCallChunk:
        """A call of the tool ``name`` with ``args`` (to return from a rule)."""
        return ToolCallChunk(call_id=f"call_{os.urandom(8).hex()}", name=name, args=args or {})

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[ModelChunk]:
        """The :class:`~dormant.models.Model` protocol: the latest tool result since the
        user's last message goes to :meth:`after_tool`, else the message to :meth:`reply`."""
        return self.play(self.answer(request))

    def answer(self, request: ModelRequest) -> Reply:
        """The rule's answer to ``request`` (what :meth:`stream` streams)."""
        messages = request.messages
        last_user = max((i for i, m in enumerate(messages) if isinstance(m, UserMessage)),
                        default=-1)
        results = [m for m in messages[last_user + 1:] if isinstance(m, ToolMessage)]
        if results:
            last = results[-1]
            args = next((call.args for m in messages if isinstance(m, AssistantMessage)
                         for call in m.tool_calls if call.call_id == last.call_id), None)
            return self.after_tool(ToolOutcome(last.name, last.call_id, last.content,
                                               last.is_error, args))
        asked = messages[last_user] if last_user >= 0 else None
        return self.reply(asked.text if isinstance(asked, UserMessage) else "")


    @staticmethod
    def play(reply: Reply) -> Iterator[ModelChunk]:
        """``reply`` as the chunks a model streams (text word by word, then the calls)."""
        return _chunks(reply)


def _chunks(reply: Reply) -> Iterator[ModelChunk]:
    if isinstance(reply, str):
        for piece in _WORDS.findall(reply):
            yield TextDelta(piece)
    elif isinstance(reply, ToolCallChunk):
        yield reply
    else:
        for call in reply:
            if not isinstance(call, ToolCallChunk):
                raise TypeError(f"a rule answered {call!r}: return text, self.call(...) or a "
                                f"list of self.call(...)")
            yield call
