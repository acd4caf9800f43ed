"""The session head: what the ledger folds to, kept beside it so no turn replays history.

The head's fields and the questions asked of it live here; each event's rule, the fold that
moves the head (``apply``), lives in :mod:`dormant._fold`.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import TypeAdapter

from dormant._patch import json_copy
from dormant.errors import RetryRefused
from dormant.events import (
    LEDGER_FORMAT,
    Scope,
)

__all__ = ["COMMIT_WINDOW", "DIGEST_ANSWERED", "DIGEST_DECIDED", "DIGEST_EVENT",
           "DIGEST_INPUT", "DIGEST_RETRY", "INVOCATION_WINDOW", "MESSAGE_ID_WINDOW",
           "PREVIEW_CHARS", "TURN_INDEX_SIZE", "Head", "PendingCall", "SessionStatus", "call_scope",
           "message_digest", "preview_of", "status_of"]

#: How many recent turn starts (user-event positions) the head remembers for windowed reads.
TURN_INDEX_SIZE = 64
#: The longest preview of a session's first message the head keeps (``Head.preview``).
PREVIEW_CHARS = 100
#: How many recent message ids the head remembers to land a redelivered message once.
MESSAGE_ID_WINDOW = 32
#: How many recent commits' starting positions the head remembers (``events?after=VERSION``).
COMMIT_WINDOW = 32
#: How many recent invocation ids the head remembers (a stop for one of them is refused).
INVOCATION_WINDOW = 16


@dataclass(slots=True)
class PendingCall:
    """One tool call of the step the invocation is in."""

    call_id: str
    name: str
    args: Any = None
    yielded: bool = False
    prepared: Any = None
    answered: bool = False
    input: Any = None
    settled: bool = False
    #: Set when the call waits for a human decision (a ``"user-approval"`` policy).
    approval_id: str | None = None
    decided: bool = False
    approved: bool = False
    reason: str | None = None
    #: A deferred tool's call: it waits for a result trusted code supplies from outside.
    deferred: bool = False
    #: A client's tool (``tool_call.dynamic``): its answer is its result.
    dynamic: bool = False
    #: A sub-agent's call: the parent's call it runs for (None: the session's own agent).
    scope: str | None = None
    #: A sub-agent's call: the agents from the session's down to the one that made it
    #: (``"concierge/billing"``).
    path: str | None = None


@dataclass(slots=True)
class Head:
    """A session's current fold. Stored with every commit; versioned with the ledger format.

    A slotted dataclass, not a pydantic model: the fold sets a few attributes per event on
    the hot path. JSON goes through one pydantic ``TypeAdapter``; the ``model_*`` methods
    keep pydantic's names so stores read and write it like any other wire type.
    """

    session_id: str
    format: int = LEDGER_FORMAT
    version: int = 0
    #: Events in the ledger (the next event's position).
    seq: int = 0
    state: dict[str, Any] = field(default_factory=dict)
    #: The session's owner (every session has one; None: reachable by no principal).
    principal: str | None = None
    created_at: int = 0
    updated_at: int = 0
    open_invocation: str | None = None
    agent: str | None = None
    parked: Literal["tool", "message"] | None = None
    step: list[PendingCall] = field(default_factory=list)
    #: User messages not yet taken up by a run.
    inbox: int = 0
    last_user_ts: int = 0
    turn_starts: list[int] = field(default_factory=list)
    #: Short digests of the most recent message ids (the head is rewritten on every commit:
    #: digests keep it small whatever ids clients choose).
    message_ids: list[str] = field(default_factory=list)
    #: Id of the ledger's last event (detects a commit that landed after all).
    last_event: str | None = None
    #: Timers set and not yet fired or cancelled: name -> the ``timer_set`` event's JSON.
    timers: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: True after ``invocation_failed`` until a ``retry`` reopens the invocation.
    failed: bool = False
    #: Once-only ids (message and retry ids) ever landed (-1: unknown, a head written before
    #: they were counted). While it is at most the digest window, ``message_ids`` is complete
    #: and no store read is needed to tell a redelivery.
    messages: int = -1
    #: Digests of the most recently decided approval ids and answered call ids: a late
    #: decision for one the step has moved past is told "already decided", not "unknown".
    settled_ids: list[str] = field(default_factory=list)
    #: Retries of the open invocation (``ToolContext.attempt`` is this plus one).
    retries: int = 0
    #: Tool calls the open invocation made so far (derived call ids count from here).
    calls: int = 0
    #: True while the session is paused (nothing runs; messages queue in the inbox).
    paused: bool = False
    #: The inbox: user messages waiting to run, in order: ``{"id", "text", "queued_at"}``.
    queue: list[dict[str, Any]] = field(default_factory=list)
    #: Input requests awaiting a response: ``{"input_id", "schema", "prompt"}``.
    inputs: list[dict[str, Any]] = field(default_factory=list)
    #: The revision of the last pause the ledger took up from the control record (or ended
    #: with a resume): the record's pause is pending while it names another revision (an
    #: identity, not an order: a record that expired starts its revisions again).
    control_rev: int = 0
    #: Digests of the most recent invocation ids (a stop naming one that ended is refused).
    invocations: list[str] = field(default_factory=list)
    #: Ledger positions where the most recent commits began (the last is this version's).
    commit_seqs: list[int] = field(default_factory=list)
    #: A fork's inherited history, oldest first: each segment ``{"session", "created_at",
    #: "version", "end"}`` says that the ledger positions from the previous segment's ``end``
    #: (0 for the first) up to ``end`` are the events of session ``session`` (the incarnation
    #: created at ``created_at``) as of its ``version``; positions from the last ``end`` on are
    #: this session's own. Empty for a session that is not a fork. Stores may add keys.
    lineage: list[dict[str, Any]] = field(default_factory=list)
    #: What this session was forked from: ``{"session", "version", "seq"}`` (None: not a
    #: fork). ``lineage`` is what reads need; this is what people are shown.
    fork_of: dict[str, Any] | None = None
    #: Ledger position where the latest compaction's tail starts (0: never compacted). The
    #: ``compaction`` event sits at or after it, so a compacting read from here finds it.
    compacted_to: int = 0
    #: Compactions the session has made (its own and, for a fork, its history's).
    compactions: int = 0
    #: While a claimed invocation runs (its claim committed, its end not yet): the epoch ms
    #: its claimer promised to commit by. Past it, the claimer is taken to have died and the
    #: next request takes the invocation over (:func:`stranded`). 0: no lease held.
    lease: int = 0
    #: Times the open invocation was taken over after its claimer died (0: never).
    takeovers: int = 0
    #: The session's first user message, shortened (:func:`preview_of`), for lists of
    #: sessions (None: no message yet). Set once: later messages leave it as it is.
    preview: str | None = None
    #: The boot id (:data:`dormant._ids.BOOT`) of the process whose claim holds the lease
    #: ("": none, or a claim written before claims named their process).
    holder: str = ""
    #: The tokens and cost of every turn the ledger timed, summed (``Usage``'s fields, and
    #: ``turns``: how many; None: none yet).
    usage: dict[str, Any] | None = None
    #: A child session's parent (``Agent.as_delegate``): ``{"session", "call_id", "agent"}``,
    #: set when the child is created by trusted code, never by a request (None: no parent).
    parent: dict[str, Any] | None = None
    #: The child sessions this session delegated calls to, oldest first:
    #: ``{"session", "call_id"}`` each (folded from ``tool_deferred.delegate``).
    children: list[dict[str, Any]] = field(default_factory=list)

    # --- JSON (pydantic-compatible names) ----------------------------------------------------

    @classmethod
    def model_validate_json(cls, data: str | bytes) -> Head:
        return _adapter().validate_json(data)

    @classmethod
    def model_validate(cls, data: Any) -> Head:
        return _adapter().validate_python(data)

    def model_dump_json(self) -> str:
        return _adapter().dump_json(self).decode()

    def model_dump(self, *, mode: Literal["json", "python"] = "python") -> dict[str, Any]:
        return _adapter().dump_python(self, mode=mode)  # type: ignore[no-any-return]

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> Head:
        copied = self.clone() if deep else self._copy(self.state, self.step, self.turn_starts,
                                                      self.message_ids)
        for key, value in (update or {}).items():
            setattr(copied, key, value)
        return copied

    def clone(self) -> Head:
        """An independent copy (what a fold may mutate is copied; strings are shared)."""
        return self._copy(
            json_copy(self.state) if self.state else {},
            [PendingCall(c.call_id, c.name, json_copy(c.args), c.yielded,
                         json_copy(c.prepared), c.answered, json_copy(c.input),
                         c.settled, c.approval_id, c.decided, c.approved, c.reason,
                         c.deferred, c.dynamic, c.scope, c.path)
             for c in self.step] if self.step else [],
            list(self.turn_starts),
            list(self.message_ids),
        )

    def _copy(self, state: dict[str, Any], step: list[PendingCall], turn_starts: list[int],
              message_ids: list[str]) -> Head:
        # Spelled out: dataclasses.replace re-inspects the fields on every call (hot path);
        # an empty container is not given a comprehension (each is a call of its own).
        return Head(self.session_id, self.format, self.version, self.seq, state, self.principal,
                    self.created_at, self.updated_at, self.open_invocation, self.agent,
                    self.parked, step, self.inbox, self.last_user_ts, turn_starts,
                    message_ids, self.last_event,
                    {name: dict(timer) for name, timer in self.timers.items()}
                    if self.timers else {},
                    self.failed, self.messages, list(self.settled_ids), self.retries,
                    self.calls, self.paused,
                    [dict(q) for q in self.queue] if self.queue else [],
                    [dict(i) for i in self.inputs] if self.inputs else [],
                    self.control_rev, list(self.invocations), list(self.commit_seqs),
                    [dict(s) for s in self.lineage] if self.lineage else [],
                    dict(self.fork_of) if self.fork_of else None, self.compacted_to,
                    self.compactions, self.lease, self.takeovers, self.preview, self.holder,
                    dict(self.usage) if self.usage else None,
                    dict(self.parent) if self.parent else None,
                    [dict(c) for c in self.children] if self.children else [])

    # --- reading -------------------------------------------------------------------------------

    def visible_to(self, principal: str | None) -> bool:
        """Whether a request scoped to ``principal`` may see this session: only its owner's
        may (an ownerless session is nobody's); ``None`` is trusted server code, unscoped."""
        return principal is None or self.principal == principal

    def window_start(self, turns: int | None, *, compacted: bool = False) -> int:
        """Position of the first event a ``turns``-turn history window needs (0: everything).
        ``compacted``: a compacting history's window, which starts no earlier than the latest
        compaction's tail (the summary stands for what is before it)."""
        if turns is None or turns > len(self.turn_starts):
            start = 0
        elif turns <= 0:
            return self.seq
        else:
            start = self.turn_starts[-turns]
        return max(start, self.compacted_to) if compacted else start

    @property
    def fork_point(self) -> int:
        """Where this session's own events begin (0: not a fork)."""
        return int(self.lineage[-1]["end"]) if self.lineage else 0

    def turns_since(self, position: int) -> int | None:
        """Turns that started at or after ledger position ``position`` (None: more than the
        head's turn index remembers)."""
        starts = self.turn_starts
        if starts and starts[0] >= position and len(starts) >= TURN_INDEX_SIZE:
            return None
        return sum(1 for start in starts if start >= position)

    def has_message(self, message_id: str) -> bool:
        """Whether a recent message carried ``message_id`` (the redelivery window)."""
        return message_digest(message_id) in self.message_ids

    def has_event(self, event_id: str) -> bool:
        """Whether a recent application event carried ``event_id`` (the redelivery window)."""
        return message_digest(DIGEST_EVENT + event_id) in self.message_ids

    def has_retry(self, retry_id: str) -> bool:
        """Whether a recent retry carried ``retry_id``."""
        return message_digest(DIGEST_RETRY + retry_id) in self.message_ids

    def admit_retry(self, retry_id: str, invocation_id: str | None) -> str:
        """The digest a retry of ``invocation_id`` lands under. Raises
        :class:`~dormant.errors.RetryRefused` for one that landed already, and for one of an
        invocation that is not the failed one."""
        digest = message_digest(DIGEST_RETRY + retry_id)
        if digest in self.message_ids:
            raise RetryRefused(self.session_id, retry_id, duplicate=True)
        if not self.failed or self.open_invocation != invocation_id:
            raise RetryRefused(self.session_id, retry_id)
        return digest

    @property
    def knows_every_message(self) -> bool:
        """True while the digest window holds every message id the session ever had: then
        ``has_message`` is the whole truth and a redelivery check needs no store read."""
        return 0 <= self.messages <= MESSAGE_ID_WINDOW

    def scoped(self, scope: str | None) -> list[PendingCall]:
        """The step's calls of one agent: the session's own (``scope`` None) or a sub-agent's
        running for the parent's call ``scope``."""
        return [c for c in self.step if c.scope == scope]

    def pending_yields(self) -> list[PendingCall]:
        """Yielded calls that have no input yet, in call order."""
        return [c for c in self.step if c.yielded and not c.answered and not c.settled]

    def pending_deferred(self) -> list[PendingCall]:
        """Deferred calls whose result has not arrived yet, in call order."""
        return [c for c in self.step if c.deferred and not c.settled]

    def pending_approvals(self) -> list[PendingCall]:
        """Calls whose approval request has no decision yet, in call order."""
        return [c for c in self.step
                if c.approval_id is not None and not c.decided and not c.settled]

    def unresolved(self) -> list[PendingCall]:
        """Everything the parked step waits for: unanswered yields, undecided approvals and
        deferred calls with no result yet."""
        return [c for c in self.step if not c.settled and (
            (c.yielded and not c.answered) or (c.approval_id is not None and not c.decided)
            or c.deferred)]

    def busy(self) -> str | None:
        """Why a user message cannot run now (it goes to the inbox), or None: ``paused``,
        ``failed``, ``tool`` (parked on yields or approvals), ``input`` (an input request
        is open), ``running`` (a resumed invocation is running: its claim is committed)."""
        if self.paused:
            return "paused"
        if self.failed:
            return "failed"
        if self.parked == "tool" and self.unresolved():
            return "tool"
        if self.inputs:
            return "input"
        if self.open_invocation is not None and self.parked is None:
            return "running"
        return None

    @property
    def running(self) -> bool:
        """Whether the open invocation was claimed and runs now (in some request): neither
        parked, failed nor paused. A turn that started fresh writes nothing until it ends, so
        the head shows only claimed runs."""
        return (self.open_invocation is not None and self.parked is None and not self.failed
                and not self.paused)

    def stranded(self, now: int) -> bool:
        """Whether the open invocation runs under a claim whose lease ran out at ``now``
        (epoch ms): its claimer died before committing, and the invocation is there to be
        taken over (a claim written before leases existed counts as run out)."""
        return self.running and self.lease <= now

    @property
    def free(self) -> bool:
        """Whether a queued message can run now: nothing is waited on, failed or paused,
        and no parked step is left to settle."""
        return self.busy() is None and (self.open_invocation is None
                                        or self.parked == "message")

    def knows_invocation(self, invocation_id: str) -> bool:
        """Whether ``invocation_id`` is one of the session's recent invocations."""
        return message_digest(invocation_id) in self.invocations

    def queued(self, message_id: str) -> int | None:
        """Position of a queued message in the inbox (None: not queued)."""
        for index, item in enumerate(self.queue):
            if item["id"] == message_id:
                return index
        return None

    def pending_input(self, input_id: str) -> dict[str, Any] | None:
        for item in self.inputs:
            if item["input_id"] == input_id:
                return item
        return None

    def approval(self, approval_id: str) -> PendingCall | None:
        for candidate in self.step:
            if candidate.approval_id == approval_id:
                return candidate
        return None

    def call(self, call_id: str) -> PendingCall | None:
        for candidate in self.step:
            if candidate.call_id == call_id:
                return candidate
        return None


def call_scope(call: PendingCall) -> Scope | None:
    """The scope a sub-agent's call's events carry (None: a call of the session's agent)."""
    if call.scope is None:
        return None
    path = call.path or ""
    return Scope(agent=path.rsplit("/", 1)[-1], call_id=call.scope, path=path)


@functools.cache
def _adapter() -> TypeAdapter[Head]:
    """Built on first use, not at import (a cold start that never reads JSON skips it)."""
    return TypeAdapter(Head)

SessionStatus = Literal["active", "awaiting_input", "failed", "paused"]


def status_of(head: Head) -> SessionStatus:
    """A session's status: ``paused``, ``failed``, ``awaiting_input`` (parked on a yield, an
    approval or a message yield, or an input request is open) or ``active``."""
    if head.paused:
        return "paused"
    if head.failed:
        return "failed"
    return "awaiting_input" if head.parked is not None or head.inputs else "active"


#: Prefixes that keep the digests of retry ids, decided approvals, answered calls, answered
#: input requests and application event ids apart from message ids (and each other).
DIGEST_RETRY = "\x00retry:"
DIGEST_DECIDED = "\x00decided:"
DIGEST_ANSWERED = "\x00answered:"
DIGEST_INPUT = "\x00input:"
DIGEST_EVENT = "\x00event:"


def message_digest(message_id: str) -> str:
    """A 48-bit digest of a message id: a false match within a 32-id window has odds of about
    one in 10^13, and the head (rewritten on every commit) stays small."""
    return hashlib.blake2b(message_id.encode(), digest_size=6).hexdigest()


def preview_of(text: str) -> str:
    """``text`` on one line, cut to :data:`PREVIEW_CHARS` characters (ending in "…" when cut)."""
    line = " ".join(text.split())
    if len(line) <= PREVIEW_CHARS:
        return line
    return line[:PREVIEW_CHARS - 1].rstrip() + "…"


