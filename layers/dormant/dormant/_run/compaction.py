"""Compaction: before a model call, fold older turns into a summary when the history outgrows
the agent's budget (:class:`dormant.Compaction`).

The summary is a ``compaction`` ledger event in the turn's slice, so it commits with the turn
(and with the progress a failed turn keeps: a retry finds it committed and does not pay for
it again). It covers the ledger from the previous compaction's tail up to the start of the
``keep_last``-th most recent turn, and folds the previous summary in, so one summary is in
force at a time. The head remembers where its tail starts (``Head.compacted_to``); every
store reads from there on, so what a compacted session reads per turn stays flat.

Concurrent turns over one session due for compaction would each pay for the same summary, so
the summariser runs only for a turn that claimed the range first (:func:`claim_in`, a
conditional write of the session's control record); the others send the uncompacted history
this time. The commit policy drops a summary that still lands second (``Session.rebase``).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING

from dormant._context import history_messages, latest_summary, summary_message, to_messages
from dormant._ids import now_ms
from dormant._run.state import ClaimCompaction, RunState
from dormant.agent import Compaction
from dormant.errors import ConfigError, StoreError
from dormant.events import CompactionEvent, Event, StreamEvent, UserEvent
from dormant.models._base import (
    AssistantMessage,
    Message,
    ModelError,
    ModelRequest,
    TextDelta,
    ToolMessage,
    UsageChunk,
    UserMessage,
)
from dormant.types import Control, ControlCompaction

if TYPE_CHECKING:
    from dormant.stores._base import Store

__all__ = ["claim_in", "compact_if_due", "estimate_tokens"]

log = logging.getLogger("dormant")

#: The estimator's ratio: characters of message text (and tool arguments) per token.
CHARS_PER_TOKEN = 4
#: How long a compaction claim holds when the turn has no deadline (ms): the longest a
#: claimer that died keeps other turns from summarising.
CLAIM_LEASE_MS = 120_000
#: What the summarising model is asked, after the transcript.
_ASK = "Summarise the conversation above as instructed."


def estimate_tokens(messages: Sequence[Message]) -> int:
    """Tokens ``messages`` are estimated to take: their characters (texts, tool arguments
    and results as JSON) over four, rounded up, plus four a message for its framing. Crude
    and provider-neutral on purpose: budgets are a bound, not a bill."""
    chars = 0
    for message in messages:
        match message:
            case UserMessage() | ToolMessage():
                chars += len(message.text if isinstance(message, UserMessage)
                             else message.content)
            case AssistantMessage():
                chars += len(message.text)
                for call in message.tool_calls:
                    chars += len(call.name) + len(json.dumps(call.args, ensure_ascii=False))
        chars += CHARS_PER_TOKEN * 4
    return math.ceil(chars / CHARS_PER_TOKEN)


def compact_if_due(run: RunState) -> Generator[StreamEvent, None, None]:
    """Emit a ``compaction`` event when the agent's history is over budget and there are
    turns older than the ``keep_last`` most recent to fold, and this turn claimed them (see
    :func:`claim_in`; another turn's claim: the budget is soft, nothing is summarised)."""
    compaction = run.agent.compaction
    if compaction is None:
        return
    session = run.session
    head = session.head
    if len(head.turn_starts) < compaction.keep_last:
        return
    tail = head.turn_starts[-compaction.keep_last]
    older_from = max(head.compacted_to, session.first_seq)
    if tail <= older_from:
        return
    if not _over_budget(run, compaction):
        return
    if run.claim_compaction is not None and not run.claim_compaction(run, older_from, tail):
        return
    previous = latest_summary(session, head.seq)
    older = _events(run, older_from, tail)
    messages = ([summary_message(previous.summary)] if previous is not None else [])
    messages += to_messages(older)
    summary = _summarize(run, compaction, messages)
    turns = sum(1 for start in head.turn_starts if older_from <= start < tail)
    yield run.emit(CompactionEvent(invocation_id=run.invocation_id, summary=summary,
                                   tail_start=tail, covered_from=older_from, turns=turns,
                                   estimated_tokens=estimate_tokens(messages)))


def claim_in(store: Store) -> ClaimCompaction:
    """How a turn claims a compaction in ``store``: once per range, before the summariser
    is paid.

    The claim is the control record's next revision with ``compaction`` set, written at the
    head version the turn loaded: of the turns that loaded one head, exactly one wins. A
    turn finding another invocation's unexpired claim for this range or a later one does not
    write at all; an expired claim (its claimer died) is taken over. The lease runs to the
    turn's deadline (:data:`CLAIM_LEASE_MS` without one). A lost write, or a store that
    fails, means no summary this time: the next turn due tries again."""
    def claim(run: RunState, covered_from: int, tail_start: int) -> bool:
        session = run.session
        base = session.control or Control()
        now = now_ms()
        held = base.compaction
        if held is not None and held.until > now and held.tail_start >= tail_start \
                and (held.invocation_id is None or held.invocation_id != run.invocation_id):
            return False
        left = run.signal.remaining()
        lease = CLAIM_LEASE_MS if left is None else math.ceil(left * 1000)
        rev = base.rev + 1
        record = base.model_copy(update={"rev": rev, "compaction": ControlCompaction(
            tail_start=tail_start, covered_from=covered_from, until=now + lease, rev=rev,
            invocation_id=run.invocation_id)})
        try:
            won = store.write_control(session.session_id, record,
                                      head_version=session.version)
        except StoreError as error:
            log.warning("could not claim the compaction; not compacting this turn: %s",
                        error, extra={"session_id": session.session_id})
            return False
        if won:
            session.control = record
        return won
    return claim


def _over_budget(run: RunState, compaction: Compaction) -> bool:
    head = run.session.head
    if compaction.max_turns is not None and _turns_since(run, head.compacted_to) \
            > compaction.max_turns:
        return True
    if compaction.max_tokens is not None:
        sent = history_messages(run.session, run.agent.history_turns, head.seq, compacted=True)
        return estimate_tokens(sent) > compaction.max_tokens
    return False


def _turns_since(run: RunState, position: int) -> int:
    """Turns begun at or after ``position``: the head's index says, while it reaches back so
    far; past it, the window the turn loaded (every user event begins a turn)."""
    session = run.session
    counted = session.head.turns_since(position)
    if counted is not None:
        return counted
    return sum(1 for event in _events(run, position, session.head.seq)
               if isinstance(event, UserEvent))


def _events(run: RunState, start: int, end: int) -> list[Event]:
    """Ledger positions ``start`` … ``end - 1`` from what the session loaded and the turn's
    own slice."""
    session = run.session
    first, base = session.first_seq, session.base_seq
    loaded = session.loaded_events[max(start - first, 0):max(min(end, base) - first, 0)]
    added = session.new_events[max(start - base, 0):max(end - base, 0)]
    return [*loaded, *added]


def _summarize(run: RunState, compaction: Compaction, messages: list[Message]) -> str:
    if callable(compaction.summarize):
        summary = compaction.summarize(messages)
        if not isinstance(summary, str) or not summary.strip():
            raise ConfigError(f"agent {run.agent.name!r}: Compaction(summarize=...) must "
                              f"return a non-empty str, got {summary!r}")
        return summary
    model = compaction.model if compaction.model is not None else run.agent.model
    if model is None:
        raise ConfigError(f"agent {run.agent.name!r} has no model to summarise with: give "
                          "Compaction(model=...) or summarize=a function")
    request = ModelRequest(system=[compaction.instruction], tools=[],
                           messages=[UserMessage(transcript(messages)), UserMessage(_ASK)],
                           step=0)
    parts: list[str] = []
    for chunk in model.stream(request, signal=run.signal):
        run.signal.raise_if_aborted()
        if isinstance(chunk, TextDelta):
            parts.append(chunk.text)
        elif isinstance(chunk, UsageChunk):
            run.usage = run.usage + chunk.usage
    summary = "".join(parts).strip()
    if not summary:
        raise ModelError("the model returned an empty summary when asked to compact the "
                         "conversation", code="summary_empty", retryable=True)
    return summary


def transcript(messages: Sequence[Message]) -> str:
    """The messages as one plain-text transcript: what a summarising model is given (plain
    text travels to any provider, tool calls and all, with no tool definitions sent)."""
    lines: list[str] = []
    for message in messages:
        match message:
            case UserMessage(role="system"):
                lines.append(f"[note] {message.text}")
            case UserMessage():
                lines.append(f"User: {message.text}")
            case AssistantMessage():
                if message.text:
                    lines.append(f"Assistant: {message.text}")
                for call in message.tool_calls:
                    args = json.dumps(call.args, ensure_ascii=False)
                    lines.append(f"Assistant called {call.name}({args})")
            case ToolMessage():
                verb = "failed" if message.is_error else "returned"
                lines.append(f"Tool {message.name} {verb}: {message.content}")
    return "\n".join(lines)
