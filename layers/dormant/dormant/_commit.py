"""THE commit policy: how a turn's slice reaches the store, and what is reported.

Every committing path calls this module — the handlers, ``app.sessions.commit / merge /
append``, the test kit — so one rule decides:

- ``committed``: the version matched;
- ``merged``: the version moved and no newer user message landed: re-read the head, put the
  slice on top of it, write again;
- ``superseded``: a newer user message landed meanwhile, or the slice's inputs no longer fit
  the newer head. What changed the world stays: if tools ran, the slice up to the last tool
  result is merged and the invocation ends ``superseded``; only the reply is dropped;
- ``failed``: the store could not be written after bounded retries. A deterministic refusal
  (``StoreError.retryable`` False) is not retried at all.

Two more rules live here. A **claim** (:meth:`CommitPolicy.claim`) writes an approval decision
or an answer before the tool it unlocks runs; a lost claim re-reads and either claims again
or refuses (``already_decided`` / ``already_answered``), so a side effect runs once per
decision. And the reported outcome is the **truth**: after an ambiguous failure (a timeout
once the request was sent) the policy re-reads and asks the store whether its own slice
landed before it writes again or reports anything.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dormant._ids import new_id
from dormant._inputs import CommitStatus
from dormant.errors import (
    DormantError,
    DuplicateMessage,
    InputError,
    ResumeError,
    RetryRefused,
    StoreError,
)
from dormant.events import (
    Event,
    InvocationEnd,
    InvocationStart,
    RetryEvent,
    TimerCancelled,
    TimerSet,
    ToolCall,
    ToolResult,
    UserEvent,
)
from dormant.types import CommitResult, StoredSession

if TYPE_CHECKING:
    from dormant._head import Head
    from dormant.session import Session
    from dormant.stores._base import Store

__all__ = ["STORE_ATTEMPTS", "CommitPolicy", "CommitStatus", "Hold", "LostClaim", "Outcome"]

log = logging.getLogger("dormant")


#: Attempts at one write when the store fails transiently (not conflicts), and the first
#: backoff (doubled per attempt).
STORE_ATTEMPTS = 3
STORE_BACKOFF = 0.05
#: Re-reads when other writers keep landing first (each lost race is somebody's progress).
MERGE_ATTEMPTS = 32

HandOver = Callable[[str, list[TimerSet | TimerCancelled]], None]


class LostClaim(Exception):
    """Another writer landed first on the version a claim was decided on: decide again."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id} moved while a claim was written")


@dataclass(frozen=True)
class Outcome:
    """What the policy did with a slice: ``status``, the version written (None if nothing
    was), and for ``failed`` the store's error."""

    status: CommitStatus
    version: int | None = None
    error: StoreError | None = None


@dataclass(frozen=True)
class Hold:
    """The lease a turn's own writes carry while it runs (its write-ahead): a head that
    leaves ``invocation`` running says the process ``holder`` holds it until ``lease`` (epoch
    ms). Stamped on the head each attempt writes, after any rebase onto a newer head."""

    invocation: str
    lease: int
    holder: str

    def stamp(self, head: Head) -> None:
        if head.running and head.open_invocation == self.invocation:
            head.lease, head.holder = self.lease, self.holder


class CommitPolicy:
    """The one commit policy of an app (``app.sessions.policy``)."""

    def __init__(self, store: Store, hand_over: HandOver, *, attempts: int = STORE_ATTEMPTS,
                 backoff: float = STORE_BACKOFF, merge_attempts: int = MERGE_ATTEMPTS) -> None:
        self.store = store
        self._hand_over = hand_over
        self.attempts = attempts
        self.backoff = backoff
        self.merge_attempts = merge_attempts

    # --- one write -------------------------------------------------------------------------

    def write(self, session: Session) -> CommitResult:
        """One conditional write of the uncommitted slice at the loaded version. A refusal is
        data; on success the session moves to the new version and its timers are handed to
        the scheduler (timers take effect only once their turn is committed)."""
        slice_ = session.new_events
        result = self.store.append(session.head, slice_, expected_version=session.version)
        if result.ok:
            assert result.version is not None
            self._landed(session, slice_, result.version)
        return result

    def _landed(self, session: Session, slice_: Sequence[Event], version: int) -> None:
        session.window.mark_committed(version)
        timers: list[TimerSet | TimerCancelled] = [
            e for e in slice_ if isinstance(e, TimerSet | TimerCancelled)]
        if timers:
            self._hand_over(session.session_id, timers)

    # --- the handler's commit ----------------------------------------------------------------

    def commit(self, session: Session, *, hold: Hold | None = None) -> Outcome:
        """Commit a turn's slice: committed, merged, superseded or failed. ``hold``: the
        lease the written head carries while it leaves the turn's invocation running.

        Raises :class:`DuplicateMessage` when the slice's message already landed (a
        concurrent or late redelivery), :class:`RetryRefused` when its retry did: nothing
        of its turn is written, but what changed the world is (:meth:`_keep_refused`).
        """
        try:
            return self._commit(session, hold)
        except (DuplicateMessage, RetryRefused):
            self._keep_refused(session)
            raise

    def _commit(self, session: Session, hold: Hold | None) -> Outcome:
        if not session.dirty:
            return Outcome("committed", session.version)
        own_ts: int | None = None  # (read at the first lost race, before any rebase)
        merged = False
        writer = _Writer(self, session, hold=hold)
        while True:
            outcome = writer.attempt()
            if outcome is not None:
                return _merged(outcome) if merged and outcome.status == "committed" else outcome
            stored = writer.stored
            assert stored is not None
            if not merged:
                own_ts = max((e.ts for e in session.new_events if isinstance(e, UserEvent)),
                             default=None)
            _take_queued(session, stored)
            _refuse_duplicates(session, stored)
            if own_ts is not None and stored.head.last_user_ts > own_ts:
                return self._supersede(session, stored)
            settled = self._settled_first(session)
            if settled:
                # another runner of its invocation (a takeover, another delivery) landed
                # results of its calls first: it records only what nobody else did
                return self._supersede(session, stored, settled)
            try:
                session.window.rebase(stored)
            except DuplicateMessage:
                raise
            except (InputError, ResumeError) as error:
                log.info("turn superseded: its inputs no longer fit the session (%s)", error,
                         extra={"session_id": session.session_id})
                return self._supersede(session, stored)
            merged = True

    def _supersede(self, session: Session, stored: StoredSession,
                   settled: set[str] | None = None) -> Outcome:
        """Drop the reply, keep what changed the world: the slice up to its last ran tool's
        result, closed by ``invocation_end(superseded)``. Nothing ran: drop it all."""
        keep = session.window.effects_end
        if keep == 0:
            return Outcome("superseded")
        kept = self._unsettled(session, session.new_events[:keep], settled)
        if not kept:
            return Outcome("superseded")
        invocation = kept[-1].invocation_id
        if not _ended_in(stored, invocation):  # an invocation ends once
            kept.append(InvocationEnd(invocation_id=invocation, status="superseded"))
        writer = _Writer(self, session)
        while True:
            # Recorded beside whatever the newer head is doing (it may be parked on its own
            # tools, or failed): a closed invocation that changes none of that.
            try:
                session.window.rebase(stored, events=kept, detached=True)
            except DuplicateMessage:
                raise
            except DormantError as error:
                log.error("tools ran in a superseded turn but their results no longer fit "
                          "the session; they are not recorded: %s", error,
                          extra={"session_id": session.session_id})
                return Outcome("superseded")
            outcome = writer.attempt()
            if outcome is not None:
                if outcome.status in ("committed", "merged"):
                    return Outcome("superseded", outcome.version)
                return outcome
            assert writer.stored is not None
            stored = writer.stored

    def _settled_first(self, session: Session) -> set[str]:
        """The calls the ledger holds a final result of, when this slice has a final result
        of one of them too (else empty; the ledger is read only when the slice has any: a
        lost race of a turn whose tools ran)."""
        mine = _finals(session.new_events)
        if not mine:
            return set()
        settled = _finals(self._ledger(session.session_id))
        return settled if settled & mine else set()

    def _ledger(self, session_id: str) -> list[Event]:
        stored = self.store.load(session_id)
        return stored.events if stored is not None else []

    def _unsettled(self, session: Session, kept: list[Event],
                   settled: set[str] | None = None) -> list[Event]:
        """``kept`` without the calls the ledger already holds a final result of
        (``settled``, when already read): a request whose claim was taken over (its lease ran
        out while it still worked: a lost heartbeat) ran the same calls, under the same ids,
        as the request that took it over, which landed them first. Empty when no call of its
        own is left."""
        if not any(isinstance(e, ToolResult) for e in kept):
            return kept
        if settled is None:
            settled = _finals(self._ledger(session.session_id))
        if not settled:
            return kept
        kept = [e for e in kept
                if not (isinstance(e, ToolCall | ToolResult) and e.call_id in settled)]
        return kept if _finals(kept) else []

    def _keep_refused(self, session: Session) -> None:
        """A turn refused as a duplicate (its message or retry landed through another
        delivery) keeps the tools it ran: the results of calls the ledger holds no final
        result of are written as a closed invocation of their own beside the session's,
        ended ``superseded``. The calls keep their ids (the tools' idempotency keys), so a
        call the other delivery settled is not written twice. Nothing ran: nothing is
        written. A store that cannot be written loses them, as it would the turn."""
        keep = session.window.effects_end
        if keep == 0:
            return
        stored = self.store.load(session.session_id)
        if _gone(session, stored):
            return  # the session is gone (deleted; perhaps made again): so is what it ran
        assert stored is not None
        settled = _finals(stored.events)
        ran = [e for e in session.new_events[:keep] if isinstance(e, ToolCall | ToolResult)
               and e.call_id not in settled]
        finals = _finals(ran)
        ran = [e for e in ran if e.call_id in finals]
        if not ran:
            return
        invocation = new_id("inv")
        kept: list[Event] = [InvocationStart(invocation_id=invocation),
                             *(e.model_copy(update={"invocation_id": invocation}) for e in ran),
                             InvocationEnd(invocation_id=invocation, status="superseded")]
        writer = _Writer(self, session)
        while True:
            try:
                session.window.rebase(stored, events=kept, detached=True)
            except DormantError as error:
                log.error("tools ran in a turn refused as a duplicate but their results no "
                          "longer fit the session; they are not recorded: %s", error,
                          extra={"session_id": session.session_id})
                return
            outcome = writer.attempt()
            if outcome is not None:
                if outcome.status == "failed":
                    log.error("tools ran in a turn refused as a duplicate but the store "
                              "could not record them: %s", outcome.error,
                              extra={"session_id": session.session_id})
                return
            assert writer.stored is not None
            stored = writer.stored

    # --- claims ----------------------------------------------------------------------------

    def claim(self, session: Session) -> Outcome:
        """Write what a request decided before anything it unlocks runs: a decision or an
        answer, an ending (interrupt, stop of a waiting response, send-now), a reopening
        (a settled step, a retry, a resume, a takeover) or the start of a queued message.

        One conditional write at the version the decision was made on, never merged: a lost
        race raises :class:`LostClaim` and the caller decides again from the newer head
        (still valid there: it claims again; not: the decision itself refuses, 409). A store
        that cannot be written raises :class:`StoreError`: nothing runs either.
        """
        outcome = _Writer(self, session, turns=0).attempt()
        if outcome is None:
            raise LostClaim(session.session_id)
        if outcome.status == "failed":
            assert outcome.error is not None
            raise outcome.error
        session.claimed = True
        return outcome

    # --- merge (``app.sessions.merge``) -------------------------------------------------------

    def merge(self, session: Session, *, turns: int | None = None,
              compacted: bool = False) -> CommitResult:
        """Re-read the head and append the slice onto it, until it lands (bounded).

        Raises :class:`InputError` / ``ResumeError`` when the slice no longer fits the newer
        head; nothing is written then.
        """
        result = CommitResult(ok=False, conflict=True, current_version=session.version)
        for _ in range(self.merge_attempts):
            stored = self.store.load(session.session_id, turns=turns, compacted=compacted)
            if _gone(session, stored):
                raise InputError(f"session {session.session_id} no longer exists")
            assert stored is not None
            session.window.rebase(stored)
            result = self.write(session)
            if result.ok:
                return result
            if result.duplicate is not None:
                raise _duplicate(session.session_id, result.duplicate)
        return result


class _Writer:
    """Bounded attempts at writing one slice, telling lost races from store failures.

    :meth:`attempt` returns an :class:`Outcome` when done (written, or failed for good), or
    None when another writer won: ``stored`` then holds the newer head for the caller to
    rebase onto.
    """

    def __init__(self, policy: CommitPolicy, session: Session, *, turns: int | None = 0,
                 compacted: bool = False, hold: Hold | None = None) -> None:
        self.policy = policy
        self.session = session
        self.hold = hold
        self.turns = turns
        self.compacted = compacted
        self.stored: StoredSession | None = None
        self.failures = 0
        self.conflicts = 0
        #: The incarnation the slice was made on: when the session was created (a session
        #: deleted and made again under its id is another one), None for a new session.
        self.born = session.head.created_at if session.version > 0 else None

    def attempt(self) -> Outcome | None:
        policy, session = self.policy, self.session
        while True:
            slice_ = session.new_events
            expected, first_seq = session.version, session.base_seq
            ambiguous = False
            if self.hold is not None:
                self.hold.stamp(session.head)
            try:
                try:
                    result = policy.write(session)
                except (StoreError, DuplicateMessage, RetryRefused):
                    raise
                except Exception as unexpected:  # a store that raised something else: treat
                    # it as a transient failure whose write may or may not have landed
                    raise StoreError(f"the store failed: {unexpected!r}") from unexpected
            except StoreError as error:
                if not error.retryable:
                    log.error("commit refused for good: %s", error,
                              extra={"session_id": session.session_id})
                    return Outcome("failed", error=error)
                self.failures += 1
                log.warning("commit failed (attempt %d): %s", self.failures, error,
                            extra={"session_id": session.session_id})
                if self.failures >= policy.attempts:
                    return Outcome("failed", error=error)
                time.sleep(policy.backoff * 2 ** (self.failures - 1))
                ambiguous = True
            else:
                if result.ok:
                    return Outcome("committed", result.version)
                if result.duplicate is not None and not result.conflict:
                    raise _duplicate(session.session_id, result.duplicate)
                # the version moved (perhaps with the id landing too): the newer head decides
                self.conflicts += 1
                if self.conflicts > policy.merge_attempts:
                    return Outcome("failed", error=StoreError(
                        f"session {session.session_id}: other writers kept landing first "
                        f"({self.conflicts} times); giving up", retryable=True))
            try:
                stored = policy.store.load(session.session_id, turns=self.turns,
                                           compacted=self.compacted)
            except StoreError as error:
                if not error.retryable:
                    return Outcome("failed", error=error)
                self.failures += 1
                if self.failures >= policy.attempts:
                    return Outcome("failed", error=error)
                continue
            if ambiguous and slice_ and stored is not None \
                    and stored.head.version > expected \
                    and policy.store.landed(session.session_id, first_seq, slice_[0].id):
                # The "failed" write landed after all: report it as what it was.
                policy._landed(session, slice_, expected + 1)
                return Outcome("committed", expected + 1)
            if stored is None and expected == 0:
                continue  # a new session whose first write did not land: try again
            if stored is None or (self.born is not None
                                  and stored.head.created_at != self.born):
                # what the slice was made on is gone: it fits no other session of the id
                return Outcome("failed", error=StoreError(
                    f"session {session.session_id} was deleted while this turn ran",
                    retryable=False))
            if stored.head.version == expected:
                continue  # nothing landed and nobody moved: the same write again
            self.stored = stored
            return None


def _finals(events: Sequence[Event]) -> set[str]:
    """The calls ``events`` hold a final result of."""
    return {e.call_id for e in events if isinstance(e, ToolResult) and not e.preliminary}


def _gone(session: Session, stored: StoredSession | None) -> bool:
    """Whether the session ``session`` was loaded from is gone from the store: deleted, and
    perhaps made again under its id (another incarnation: another ``created_at``)."""
    return stored is None or (session.version > 0
                              and stored.head.created_at != session.head.created_at)


def _ended_in(stored: StoredSession, invocation_id: str | None) -> bool:
    """Whether the newer head already ended ``invocation_id`` (another request ended it
    while this turn ran): it knows the invocation and it is no longer the open one."""
    head = stored.head
    return (invocation_id is not None and head.open_invocation != invocation_id
            and head.knows_invocation(invocation_id))


def _duplicate(session_id: str, key: str) -> InputError:
    """The refusal for a once-only id the session already holds (``m:`` / ``r:``)."""
    kind, _, value = key.partition(":")
    if kind == "r":
        return RetryRefused(session_id, value, duplicate=True)
    return DuplicateMessage(session_id, value)


def _merged(outcome: Outcome) -> Outcome:
    return Outcome("merged", outcome.version, outcome.error)


def _take_queued(session: Session, stored: StoredSession) -> None:
    """This turn ran a message that a redelivery meanwhile put in the inbox (the session
    began waiting after this turn had read it): the turn is that message's run, so it takes
    the message out of the inbox instead of being refused as a duplicate of it."""
    head = stored.head
    for event in session.new_events:
        if isinstance(event, UserEvent) and not event.queued and not event.steer \
                and head.queued(event.message_id) is not None:
            session.window.replace_new(event, event.model_copy(update={"queued": True}))


def _refuse_duplicates(session: Session, stored: StoredSession) -> None:
    """A message of this slice that the newer head already holds is a redelivery that lost
    the race: it is a duplicate, never a superseded turn."""
    for event in session.new_events:
        if isinstance(event, UserEvent) and not event.queued \
                and event.message_id not in session.spare_ids \
                and stored.head.has_message(event.message_id):
            raise DuplicateMessage(session.session_id, event.message_id)
        if isinstance(event, RetryEvent) and stored.head.has_retry(event.retry_id):
            raise RetryRefused(session.session_id, event.retry_id, duplicate=True)
