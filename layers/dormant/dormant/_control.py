"""The control record: what other requests ask of the turn running now, and its poller.

What only the **running turn** can do — stop it, steer it, pause it at its next step
boundary — is an :class:`~dormant._decide.Ask` (decided in :mod:`dormant._decide`), written
here to the session's small *control record* with a conditional write (the head must still
be at the version the decision was made on). The running turn polls that record
(:class:`ControlWatch`, default every second) and acts on it; a turn that starts later takes
up what is still pending (:func:`dormant._decide.take_pending`).

A turn still running at its first poll also **announces** itself there
(:attr:`Control.running <dormant.types.Control.running>`): a client that did not start it
learns its invocation id, to stop it, before its first commit. A turn that ends sooner writes
nothing. The announcement is never cleared: :func:`dormant._decide.announced` reads it as live
only while the head is still at the version the turn started from and has not seen the
invocation end.
"""

from __future__ import annotations

import logging
import math
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from dormant._decide import Ask, live, running, stale_stop
from dormant._ids import now_ms
from dormant.errors import InputError, NotRunning, StoreError
from dormant.types import Control, ControlRunning, ControlSteer, ControlStop

if TYPE_CHECKING:
    from dormant.session import Session
    from dormant.stores._base import Store
    from dormant.tools import Signal

__all__ = [
    "DEFAULT_POLL_INTERVAL",
    "MAX_STEERS",
    "ControlWatch",
    "write_asks",
]

log = logging.getLogger("dormant")

#: Seconds between two reads of the control record by a running turn (0: never).
DEFAULT_POLL_INTERVAL = 1.0
#: Steers a control record holds at most (the oldest pending ones are kept).
MAX_STEERS = 8
#: Conditional writes of the control record before giving up (each lost one is a commit).
WRITE_ATTEMPTS = 8


# --- the running turn's announcement -------------------------------------------------------------


# --- writing the control record ------------------------------------------------------------------


def write_asks(store: Store, session: Session, reload: Callable[[], Session | None]) -> int:
    """Write the session's asks to its control record, conditionally on the head version the
    decision was made on. A lost race re-reads and decides again (a stop for an invocation
    that has ended meanwhile is refused: :class:`NotRunning`). Returns the revision written."""
    asks = list(session.control_asks)
    current = session
    for _ in range(WRITE_ATTEMPTS):
        base = current.control or Control()
        record = _with(base, asks, current)
        if store.write_control(current.session_id, record, head_version=current.version):
            session.control = record
            session.control_asks = []
            return record.rev
        fresh = reload()
        if fresh is None:  # no head yet (its first turn may be running): the record alone
            fresh = type(session).new(session.session_id, principal=session.principal)
            fresh.control = store.read_control(session.session_id)
        current = fresh
        for ask in asks:
            if ask.kind in ("stop", "steer") and ask.invocation_id is not None \
                    and not running(current, ask.invocation_id, resumable=ask.kind == "stop"):
                raise NotRunning(current.session_id, ask.invocation_id)
    raise StoreError(f"session {session.session_id}: the control record kept changing; "
                     "try again")


def _with(base: Control, asks: list[Ask], session: Session) -> Control:
    """The next revision of ``base`` with ``asks`` added and what the ledger took up
    dropped. A compaction claim stays while its lease runs and the ledger has not taken it
    up (dropping it sooner would let a racing turn pay for the same summary again)."""
    head = session.head
    rev = base.rev + 1
    at = now_ms()
    claim = base.compaction
    if claim is not None and (head.compacted_to >= claim.tail_start or claim.until <= at):
        claim = None
    stop = base.stop if base.stop is not None \
        and running(session, base.stop.invocation_id, resumable=True) else None
    pause_rev = base.pause if base.pause is not None and base.pause != head.control_rev else None
    steers = [s for s in base.steers if not head.has_message(s.id)]
    for ask in asks:
        if ask.kind == "stop":
            assert ask.invocation_id is not None
            stop = ControlStop(invocation_id=ask.invocation_id, seen=ask.seen, rev=rev, at=at)
        elif ask.kind == "steer":
            assert ask.invocation_id is not None and ask.id is not None and ask.text
            steers = [s for s in steers if s.id != ask.id]
            steers.append(ControlSteer(id=ask.id, text=ask.text,
                                       invocation_id=ask.invocation_id, rev=rev, at=at))
        elif ask.kind == "pause":
            pause_rev = rev
        elif ask.kind == "unpause":
            pause_rev = None
    if len(steers) > MAX_STEERS:
        raise InputError(f"session {session.session_id} already holds {MAX_STEERS} steers "
                         "the running turn has not taken; wait for it")
    return Control(rev=rev, stop=stop, pause=pause_rev, steers=steers, compaction=claim,
                   running=live(base.running, session))


# --- the running turn's side ---------------------------------------------------------------------


class ControlWatch:
    """Polls the session's control record for the running turn.

    A stop for the running invocation sets the turn's :class:`~dormant.tools.Signal` (tools
    and model calls see it at once); a pause and steers wait for the run loop's next step
    boundary (:meth:`take_steers`, :attr:`pause_rev`). The first read happens one interval in:
    a turn that ends sooner never reads. The reads run on the process's one control thread
    (:class:`_Poller`): starting a turn costs a heap push, not a thread. Each step boundary
    reads once more, on the turn's own thread (:meth:`at_boundary`).

    Given the turn's ``session``, the first scheduled read also announces the turn in the
    record (:meth:`announce`): one conditional write, only for a turn running past its first
    interval (a step boundary's read never announces, so a short turn writes nothing).

    With a ``heartbeat`` (seconds; the turn holds a claim, or is the session's first), the
    announcement carries it (:attr:`ControlRunning.until`, ``heartbeat`` past ``clock()``)
    and the scheduled reads renew it every half heartbeat: a claim's lease then runs out
    ``heartbeat`` after its process died rather than at its request's deadline.
    """

    def __init__(self, store: Store, session_id: str, invocation: Callable[[], str | None],
                 signal: Signal, *, interval: float, control_rev: int,
                 session: Session | None = None, heartbeat: float = 0.0,
                 clock: Callable[[], int] = now_ms) -> None:
        self._store = store
        self._session_id = session_id
        self._invocation = invocation
        self._signal = signal
        self._interval = interval
        self._control_rev = control_rev
        self._lock = threading.Lock()
        #: Held while a read is in progress, so :meth:`close` can wait for it.
        self._reading = threading.Lock()
        self._steers: dict[str, ControlSteer] = {}
        self._taken: set[str] = set()
        self._closed = False
        #: When the last read began (``time.monotonic()``; None: none yet).
        self._read_at: float | None = None
        #: The revision of a pause the turn has not taken yet (None: none asked).
        self.pause_rev: int | None = None
        #: The turn's session (None: it is not announced), the head version it started
        #: from, when it started, and whether the first scheduled read happened.
        self._session = session
        self._version = session.version if session is not None else 0
        self._since = now_ms()
        self._first = True
        #: What the last read returned.
        self._seen: Control | None = None
        #: The invocation a session's first turn announced as it started (None: none).
        self._opened: str | None = None
        #: The heartbeat in ms (0: none), the clock it is read on, and when the next beat is
        #: due.
        self._heartbeat = int(heartbeat * 1000) if session is not None else 0
        self._clock = clock
        self._beat_due = 0  # (set by the announcement: the first beat)

    @property
    def closed(self) -> bool:
        return self._closed

    def start(self) -> ControlWatch:
        """Start polling. A session's first turn names itself in the control record now,
        before it runs: until it commits, that record is all a reader can find of the session
        (one conditional write, on the first turn only)."""
        if self._interval > 0:
            if self._session is not None and self._version == 0:
                with self._reading:
                    self._first = False
                    self._opened = self.announce()
            _POLLER.add(self, time.monotonic() + self._interval)
        return self

    def close(self) -> None:
        """Stop polling; returns once a read in progress has finished (so the caller may
        close the store)."""
        self._closed = True
        if self._interval <= 0:
            return
        _POLLER.remove(self)
        if sys.is_finalizing():  # the control thread is frozen: nothing of it to wait for
            return
        if not _POLLER.is_current() and self._reading.acquire(timeout=5.0):
            self._reading.release()

    def claimed(self, version: int, heartbeat: float) -> None:
        """The turn's own write (a step's write-ahead) moved the head to ``version`` and
        holds a claim there: its announcement and heartbeat follow (the next beat is due half
        a ``heartbeat`` on, at ``version``; 0: none)."""
        with self._reading:
            self._version = version
            self._heartbeat = int(heartbeat * 1000) if self._session is not None else 0
            self._beat_due = self._clock() + self._heartbeat // 2 if self._heartbeat else 0

    def tick(self) -> float | None:
        """One scheduled read (on the control thread): when to read next, None to stop."""
        with self._reading:
            if self._closed or not self.poll():
                return None
            if self._first:
                self._first = False
                self.announce()
            elif self._beat_due and self._clock() >= self._beat_due:
                self.announce(renew=True)
        return time.monotonic() + self._interval

    def at_boundary(self) -> None:
        """One read at a step boundary, on the turn's thread: a pause or steer sent since the
        last scheduled read (a tool may return well within an interval of it) is taken up
        before the next model call rather than after it. Nothing when polling is off. A read
        in progress on the control thread is waited for (``_reading``: the two never apply
        at once) and then done again, as it may have begun before the control was written;
        only one the control thread began after the boundary came stands in for it."""
        if self._interval <= 0 or self._closed:
            return
        reached = time.monotonic()
        with self._reading:
            if self._read_at is not None and self._read_at >= reached:
                return
            try:
                self.poll()
            except Exception:  # a failed extra read must not fail the turn: the poller goes on
                log.exception("control read at a step boundary failed",
                              extra={"session_id": self._session_id})

    def poll(self) -> bool:
        """Read the control record once and act on what concerns this turn. False when
        polling should end: the turn is gone, or the store refuses for good."""
        if self._invocation() is None:
            return False  # the turn was dropped before it ended (its stream abandoned)
        self._read_at = time.monotonic()  # a read begun now sees every write done before it
        try:
            control = self._store.read_control(self._session_id)
        except StoreError as error:
            log.warning("could not read the control record: %s", error,
                        extra={"session_id": self._session_id})
            return error.retryable
        self._seen = control
        self.apply(control)
        return True

    def apply(self, control: Control | None) -> None:
        if control is None:
            return
        invocation = self._invocation()
        if control.stop is not None and invocation is not None \
                and control.stop.invocation_id == invocation and not self._signal.stopped \
                and not stale_stop(control.stop, self._since):
            self._signal.stop(control.stop.seen, control.stop.rev)
        with self._lock:
            if control.pause is not None and control.pause != self._control_rev:
                self.pause_rev = control.pause
            for item in control.steers:
                if item.invocation_id == invocation and item.id not in self._taken:
                    self._steers.setdefault(item.id, item)

    def retract(self) -> None:
        """A session's first turn that ended with nothing committed (aborted, failed before
        any tool) takes back the announcement it made as it started, so the session it never
        wrote does not read as running (one conditional write, at no head). Never raises."""
        invocation = self._opened
        if invocation is None:
            return
        self._opened = None
        try:
            control = self._store.read_control(self._session_id)
            for _ in range(WRITE_ATTEMPTS):
                if control is None or control.running is None \
                        or control.running.invocation_id != invocation:
                    return
                record = control.model_copy(update={"rev": control.rev + 1, "running": None})
                if self._store.write_control(self._session_id, record, head_version=0):
                    return
                rev = control.rev
                control = self._store.read_control(self._session_id)
                if control is not None and control.rev == rev:
                    return  # the record did not move, so a head exists now: it is moot
        except Exception:  # the record then reads as running until the session's first commit
            log.exception("could not take back the first turn's announcement",
                          extra={"session_id": self._session_id})

    def announce(self, *, renew: bool = False) -> str | None:
        """Name this turn in the control record, unless the record read last already does
        (``renew``: its heartbeat is due, so it is written again): the record's next revision
        with ``running`` set, written at the head version the turn started from, as every
        writer does. A lost race (another writer added a stop, a steer, a pause meanwhile) is
        re-read, acted on and tried again, at most :data:`WRITE_ATTEMPTS` times; a head that
        moved on ends it (the announcement would read as ended). Never raises: a turn that
        could not announce itself runs on (only a client that did not start it cannot stop
        it; a claim whose heartbeat was not renewed may be taken over). Returns the
        invocation announced (None: none)."""
        session, invocation = self._session, self._invocation()
        if session is None or invocation is None or self._signal.stopped:
            return None
        now = self._clock() if self._heartbeat else 0
        entry = ControlRunning(invocation_id=invocation, since=self._since,
                               version=self._version, principal=session.head.principal,
                               until=now + self._heartbeat if self._heartbeat else 0)
        control = self._seen
        try:
            for _ in range(WRITE_ATTEMPTS):
                held = control.running if control is not None else None
                if held is not None and held.invocation_id == invocation \
                        and held.version == entry.version \
                        and held.until >= (entry.until if renew else 0):
                    return invocation  # (an invocation resumed: announced again, anew)
                base = control or Control()
                record = base.model_copy(update={"rev": base.rev + 1, "running": entry})
                if self._store.write_control(self._session_id, record,
                                             head_version=self._version):
                    self._adopt(session, base, record)
                    self._seen = record
                    if self._heartbeat:
                        self._beat_due = now + self._heartbeat // 2
                    return invocation
                control = self._store.read_control(self._session_id)
                if (control.rev if control is not None else 0) == base.rev:
                    return None  # the record did not move, so the head did
                self.apply(control)
        except Exception:  # announcing is a courtesy to other clients: the turn goes on
            log.exception("could not announce the running turn in the control record",
                          extra={"session_id": self._session_id})
            return None
        log.warning("could not announce the running turn: the control record kept changing",
                    extra={"session_id": self._session_id})
        return None

    @staticmethod
    def _adopt(session: Session, base: Control, record: Control) -> None:
        """Let the turn's session hold the announced revision when it held the one the
        announcement replaced (nothing else changed in between), so the turn's own later
        writes (a compaction claim) are not refused for its announcement."""
        held = session.control
        if (held.rev if held is not None else 0) == base.rev:
            session.control = record

    @property
    def steers_waiting(self) -> bool:
        """Whether a read found steers :meth:`take_steers` has not handed out yet."""
        return bool(self._steers)

    def take_steers(self) -> list[ControlSteer]:
        """The steers seen since the last call, oldest first (each is taken once)."""
        if not self._steers:  # (a steer the poller adds as this returns waits for the next)
            return []
        with self._lock:
            taken = sorted(self._steers.values(), key=lambda s: s.rev)
            self._steers.clear()
            self._taken.update(s.id for s in taken)
        return taken


class _Poller:
    """The process's one control thread: reads each running turn's control record when due.

    ``_due`` maps each running turn's watch to when it reads next; a watch that closes
    leaves it at once. The thread sleeps until the earliest of those (``_wake_at``), and is
    woken only when a watch comes due sooner than that: a turn starting while the thread
    already sleeps until an earlier read (or while it reads) wakes nobody, so a turn that
    ends within an interval costs a dict entry, not a thread switch. Started on first use
    (and again in a forked child, where it does not exist); while no turn runs it waits
    without polling.
    """

    def __init__(self) -> None:
        self._wake = threading.Condition(threading.Lock())
        self._due: dict[ControlWatch, float] = {}
        #: When the thread's current wait ends (inf: it waits for a notify); -inf while it
        #: reads, as it looks at ``_due`` again before it waits.
        self._wake_at = math.inf
        self._thread: threading.Thread | None = None

    def add(self, watch: ControlWatch, due: float) -> None:
        with self._wake:
            self._due[watch] = due
            if self._thread is None or not self._thread.is_alive():
                self._wake_at = math.inf
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="dormant-control")
                self._thread.start()
            elif due < self._wake_at:
                self._wake.notify()

    def remove(self, watch: ControlWatch) -> None:
        """``watch`` reads no more (its thread, waking for it, finds nothing to do).

        Never waits long: at interpreter exit a turn stream left suspended is closed while
        the control thread (a daemon) may be frozen holding the lock. Then the entry stays;
        the closed watch is skipped when it comes due."""
        if not self._wake.acquire(timeout=1.0):
            return
        try:
            self._due.pop(watch, None)
        finally:
            self._wake.release()

    def is_current(self) -> bool:
        return threading.current_thread() is self._thread

    def _next(self) -> ControlWatch:
        with self._wake:
            while True:
                now = time.monotonic()
                if not self._due:
                    self._wake_at = math.inf
                    self._wake.wait()
                    continue
                watch, due = min(self._due.items(), key=_second)
                if due <= now:
                    del self._due[watch]
                    self._wake_at = -math.inf
                    return watch
                self._wake_at = due
                self._wake.wait(due - now)

    def _run(self) -> None:
        while True:
            watch = self._next()
            try:
                due = watch.tick()
            except Exception:  # one turn's failed read must not end the thread
                log.exception("control poll failed", extra={"session_id": watch._session_id})
                due = None
            if due is not None and not watch.closed:
                self.add(watch, due)


def _second(item: tuple[ControlWatch, float]) -> float:
    return item[1]


_POLLER = _Poller()
