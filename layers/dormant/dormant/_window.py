"""A session's ledger as one request holds it: the loaded window of committed events, the
head they fold to, and the slice not committed yet.

:class:`~dormant.session.Session` is what apps and tools read and write through; the engine
moves the :class:`Window` under it: the commit policy (:mod:`dormant._commit`) marks a slice
committed or puts it on a newer head, and the run loop (:mod:`dormant._run`) marks what
changed the world, rewinds a failed step, and holds back what tools record until their phase
ends.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping

from dormant._fold import apply, apply_detached
from dormant._head import COMMIT_WINDOW, Head
from dormant.events import CompactionEvent, Event, SteerEvent, UserEvent
from dormant.types import Control, StoredSession

__all__ = ["Window"]


class Window:
    """The ledger window, its head and the uncommitted slice (``new``).

    ``loaded`` holds ledger positions ``first_seq`` … ``base_seq - 1``; the slice lands at
    ``base_seq`` if the store is still at ``base_version``. Events the store left where they
    live (``later``: a large event in S3, by its index in ``events``) are read the first time
    ``loaded`` is: a request that reads no event (a stop, a queued message) never reads
    them."""

    __slots__ = ("_deferred", "_effects", "_later", "_loaded", "_lock", "base_seq",
                 "base_version", "control", "first_seq", "head", "new", "spare_ids")

    def __init__(self, head: Head, events: list[Event] | None = None, first_seq: int = 0,
                 later: Mapping[int, Callable[[], Event]] | None = None) -> None:
        self.head = head
        self._loaded = events if events is not None else []
        self._later = dict(later) if later else None
        self.first_seq = first_seq
        self.base_version = head.version
        self.base_seq = head.seq
        self.new: list[Event] = []
        #: How much of the slice changed the world (ends with the last ran tool's result),
        #: and the head as it stood there: what a failed or superseded turn keeps.
        self._effects: tuple[int, Head] | None = None
        #: Ids of messages this turn took up that are not its own (steers, and steers that
        #: missed their invocation, run first): another request may land one of them first,
        #: and then this turn drops it at its commit instead of being refused as a duplicate.
        self.spare_ids: set[str] = set()
        #: The session's control record as loaded (None: none).
        self.control: Control | None = None
        self._lock = threading.Lock()
        #: Not None while a run is active: events recorded by tools wait here.
        self._deferred: list[Event] | None = None

    @property
    def loaded(self) -> list[Event]:
        """The committed events loaded (every one read in full)."""
        if self._later:
            with self._lock:  # tools running side by side read it once
                for index, read in sorted(self._later.items()):
                    self._loaded[index] = read()
                    del self._later[index]
        return self._loaded

    @property
    def loaded_count(self) -> int:
        """How many committed events are loaded (none of them read from where they live)."""
        return len(self._loaded)

    @property
    def dirty(self) -> bool:
        return bool(self.new) or self.base_seq != self.head.seq

    @property
    def effects_end(self) -> int:
        """Length of the slice prefix that changed the world (0: no tool ran)."""
        return self._effects[0] if self._effects is not None else 0

    # --- the slice ---------------------------------------------------------------------------

    def append(self, event: Event) -> None:
        """Fold ``event`` into the head (raises, adding nothing, if it does not fit) and add
        it to the slice."""
        apply(self.head, event)
        self.new.append(event)

    def extend(self, events: Iterable[Event]) -> None:
        for event in events:
            self.append(event)

    def record(self, event: Event) -> None:
        """During a run (a tool calling ``schedule``) ``event`` waits for the run, which
        emits it in order after the tool phase; otherwise it is appended now."""
        with self._lock:
            if self._deferred is not None:
                self._deferred.append(event)
                return
        self.append(event)

    @property
    def in_turn(self) -> bool:
        """Whether a run is active (events tools record wait for it)."""
        with self._lock:
            return self._deferred is not None

    def defer_events(self) -> None:
        """A run starts: events tools record wait for it (:meth:`take_deferred`)."""
        with self._lock:
            self._deferred = []

    def stop_deferring(self) -> None:
        """The run is over: events are appended as they are recorded again."""
        with self._lock:
            self._deferred = None

    @property
    def has_deferred(self) -> bool:
        """Whether tools recorded events the run has not taken yet (read without the lock:
        a tool that records one later is taken at the next phase's end, as before)."""
        return bool(self._deferred)

    def take_deferred(self) -> list[Event]:
        """The events tools recorded since the last call (the run emits them in order)."""
        with self._lock:
            taken, self._deferred = self._deferred or [], []
        return taken

    # --- what the commit policy (dormant._commit) and the run loop move ------------------------

    def mark_committed(self, version: int) -> None:
        """The slice landed at ``version``: it becomes part of the loaded ledger."""
        self._loaded.extend(self.new)  # loaded is always this window's own list
        self.new = []
        starts = self.head.commit_seqs  # where this version began (as the store wrote it)
        self.head.commit_seqs = [*starts, self.base_seq][-COMMIT_WINDOW:]
        self._effects = None
        self.head.version = version
        self.base_version = version
        self.base_seq = self.head.seq

    def rebase(self, stored: StoredSession, *, events: list[Event] | None = None,
               detached: bool = False) -> None:
        """Put the uncommitted slice (or ``events`` in its place) on top of a newer head.

        Raises (and changes nothing) if it no longer fits: an answer to a call somebody else
        answered, a message the head already holds. ``detached``: ``events`` are a closed
        invocation recorded beside the head's own (see :func:`dormant._fold.apply_detached`).

        A ``compaction`` the newer head already made (it compacted this range or a later one:
        ``compacted_to >= tail_start``) is dropped from the slice: a racing turn's summary
        landed first, and the ledger keeps one summary per range. Likewise a steer (or a
        missed steer this turn ran first, :attr:`spare_ids`) whose id the newer head already
        holds: it landed once, elsewhere. Here, because only here is each event met with the
        head it will land on."""
        head = stored.head
        given = self.new if events is None else list(events)
        fold = apply_detached if detached else apply
        pending: list[Event] = []
        dropped: list[int] = []
        landed = {e.message_id for e in given if isinstance(e, UserEvent)
                  and e.message_id in self.spare_ids and head.has_message(e.message_id)}
        for index, event in enumerate(given):
            if isinstance(event, CompactionEvent) and head.compacted_to >= event.tail_start:
                dropped.append(index)
                continue
            if isinstance(event, UserEvent | SteerEvent) and event.message_id in landed:
                dropped.append(index)  # a steer another request landed first: it is there
                continue
            fold(head, event)
            pending.append(event)
        self.head = head
        self.new = pending
        if events is not None:
            self._effects = None
        elif self._effects is not None and dropped:  # it still ends after the same event
            length, at = self._effects
            self._effects = (length - sum(1 for index in dropped if index < length), at)
        self._loaded, self._later = stored.events, None
        self.first_seq = stored.first_seq
        if stored.control is not None:
            self.control = stored.control
        self.base_version = head.version
        self.base_seq = head.seq - len(pending)

    def replace_new(self, old: Event, new: Event) -> None:
        """Put ``new`` in the uncommitted slice where ``old`` is (the commit policy, before it
        puts the slice on a newer head: an event must say something else there)."""
        self.new[self.new.index(old)] = new

    def mark_effects(self) -> None:
        """Tools ran: everything in the slice so far is what a failure must keep."""
        self._effects = (len(self.new), self.head.clone())

    def rewind_to_effects(self) -> None:
        """Drop what the slice gained after the last :meth:`mark_effects` (a failed step's
        uncommitted output)."""
        if self._effects is None:
            return
        length, head = self._effects
        if length < len(self.new):
            del self.new[length:]
            self.head = head.clone()
