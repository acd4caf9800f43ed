"""The local scheduler: timers fired by a thread, for ``dormant dev``.

One background thread keeps a heap of :class:`~dormant.schedulers.TimerDelivery` ordered by
``fire_at`` and hands each one, when due, to ``deliver`` (in ``dormant dev``, the app's
``app.handler.wake(agent=...)``). It keeps nothing on disk: timers live in each session's head,
so at start-up :meth:`LocalScheduler.recover` re-arms every pending timer from the store, and a
timer survives a restart of the server. A timer that came due while the server was down fires
as soon as it is re-armed. :meth:`~LocalScheduler.recover` also arms a claim's lease wake-up
(:data:`~dormant.schedulers.LEASE_TIMER`, kept only in memory) for every session whose head shows
a claimed invocation running: its claimer may have been a server killed before it committed,
and the wake-up takes the stranded invocation over once the lease ran out.

Delivery is at least once: the wake path refuses a delivery that is no longer pending (code
``stale_timer``) and writes nothing, so a repeat is harmless; a repeat that ran beside the
first delivery (both read the timer pending) and lost the race gets the same refusal, so it
counts as done too, never as a failure to retry. A delivery that raises, or whose
turn did not land (an error result other than ``stale_timer``, or a superseded commit), is
retried a bounded number of times with exponential backoff; then it is logged and dropped
from memory, and stays listed in its session until the next :meth:`~LocalScheduler.recover`.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable
from typing import Any

from dormant._ids import now_ms
from dormant.schedulers._base import LEASE_GRACE_MS, LEASE_TIMER, TimerDelivery

__all__ = ["LocalScheduler"]

log = logging.getLogger("dormant.scheduler")

#: Deliveries tried per firing before giving up, and the first retry's delay (it doubles).
ATTEMPTS = 5
BACKOFF_SECONDS = 1.0
#: ``store.list`` page asked for by :meth:`LocalScheduler.recover` (local stores: all sessions).
RECOVER_LIMIT = 1_000_000

_Key = tuple[str, str]


class LocalScheduler:
    """A :class:`~dormant.schedulers.Scheduler` that fires timers in this process.

    ``LocalScheduler(deliver)`` starts its thread at once; ``deliver(delivery)`` is called on
    that thread, one delivery at a time, earliest ``fire_at`` first (ties in the order set).
    ``clock`` returns epoch milliseconds (tests pass a fake one and call :meth:`nudge` after
    moving it). ``attempts`` and ``backoff`` bound the retries of a failed delivery.
    Use it as a context manager, or call :meth:`close`, to stop the thread.
    """

    def __init__(self, deliver: Callable[[TimerDelivery], Any], *,
                 clock: Callable[[], int] = now_ms, attempts: int = ATTEMPTS,
                 backoff: float = BACKOFF_SECONDS, name: str = "dormant-timers") -> None:
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        if backoff < 0:
            raise ValueError("backoff must not be negative (seconds)")
        self._deliver = deliver
        self._clock = clock
        self._attempts = attempts
        self._backoff_ms = int(backoff * 1000)
        self._cond = threading.Condition()
        #: The current firing of each timer: key -> (due, seq, delivery, attempt).
        self._current: dict[_Key, tuple[int, int, TimerDelivery, int]] = {}
        #: (due, seq, key); an entry whose seq is no longer current is skipped (lazy delete).
        self._heap: list[tuple[int, int, _Key]] = []
        self._seq = itertools.count()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # --- the Scheduler protocol ----------------------------------------------------------------

    def set(self, delivery: TimerDelivery) -> None:
        """Arm ``delivery``; a timer of the same session and name is replaced (idempotent)."""
        key = (delivery.session_id, delivery.name)
        with self._cond:
            self._check_open()
            current = self._current.get(key)
            if current is not None and current[2] == delivery:
                return  # the same timer again: converge, keep its place and attempts
            self._arm(key, delivery.fire_at, delivery, attempt=1)

    def cancel(self, session_id: str, name: str) -> None:
        """Disarm a timer (no error if there is none)."""
        with self._cond:
            self._current.pop((session_id, name), None)
            self._cond.notify()

    # --- the rest ------------------------------------------------------------------------------

    def recover(self, store: Any, *, sole: bool = False) -> int:
        """Re-arm every pending timer found in ``store``'s sessions (each session head keeps
        its timers), and a lease wake-up (:data:`~dormant.schedulers.LEASE_TIMER`) for each
        session whose head shows a claimed invocation running: it fires just after the lease
        (at once if that is past) and takes the invocation over if its claimer died. Call it
        at start-up; returns how many timers were armed, wake-ups included. ``sole``: this
        process is the only one serving ``store``, so every claim found at start-up is an
        earlier run's, dead: its wake-up fires at once."""
        armed = 0
        for summary in store.list(limit=RECOVER_LIMIT):
            stored = store.load(summary.session_id, turns=0)
            if stored is None:  # deleted since it was listed
                continue
            for timer in stored.head.timers.values():
                self.set(TimerDelivery.of(stored.head.session_id, timer))
                armed += 1
            if stored.head.running:  # its wake-up was in the memory of whoever claimed it
                fire_at = self._clock() if sole \
                    else max(stored.head.lease + LEASE_GRACE_MS, self._clock())
                self.set(TimerDelivery(session_id=stored.head.session_id, name=LEASE_TIMER,
                                       fire_at=fire_at))
                armed += 1
        if armed:
            log.info("re-armed %d pending timer(s) from the store", armed)
        return armed

    def pending(self) -> list[TimerDelivery]:
        """The armed timers, earliest first (a retried one included until it lands)."""
        with self._cond:
            entries = sorted(self._current.values(), key=lambda entry: entry[:2])
        return [entry[2] for entry in entries]

    def nudge(self) -> None:
        """Re-read the clock now (after a fake clock moved, or the system clock jumped)."""
        with self._cond:
            self._cond.notify()

    def close(self, timeout: float = 5.0) -> None:
        """Stop the thread; a delivery under way finishes first (up to ``timeout`` seconds).
        Armed timers are dropped from memory; they stay in their sessions."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> LocalScheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the thread ----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this LocalScheduler is closed; timers are kept in the "
                               "sessions and re-armed by the next one's recover()")

    def _arm(self, key: _Key, due: int, delivery: TimerDelivery, *, attempt: int) -> None:
        seq = next(self._seq)
        self._current[key] = (due, seq, delivery, attempt)
        heapq.heappush(self._heap, (due, seq, key))
        self._cond.notify()

    def _is_current(self, entry: tuple[int, int, _Key]) -> bool:
        current = self._current.get(entry[2])
        return current is not None and current[1] == entry[1]

    def _next_due(self) -> tuple[_Key, TimerDelivery, int] | None:
        """Wait for the earliest timer to come due and take it; None once closed."""
        with self._cond:
            while not self._closed:
                while self._heap and not self._is_current(self._heap[0]):
                    heapq.heappop(self._heap)  # replaced or cancelled since it was pushed
                if not self._heap:
                    self._cond.wait()
                    continue
                due, _, key = self._heap[0]
                wait_ms = due - self._clock()
                if wait_ms > 0:
                    self._cond.wait(wait_ms / 1000)
                    continue
                heapq.heappop(self._heap)
                _, _, delivery, attempt = self._current.pop(key)
                return key, delivery, attempt
        return None

    def _run(self) -> None:
        while (taken := self._next_due()) is not None:
            key, delivery, attempt = taken
            try:
                problem = _problem(self._deliver(delivery))
            except Exception as error:
                problem = f"{type(error).__name__}: {error}"
                log.debug("timer delivery raised", exc_info=True)
            if problem is not None:
                self._retry(key, delivery, attempt, problem)

    def _retry(self, key: _Key, delivery: TimerDelivery, attempt: int, problem: str) -> None:
        where = f"timer {delivery.name!r} of session {delivery.session_id}"
        with self._cond:
            if self._closed or key in self._current:  # closing, or re-set meanwhile
                return
            if attempt >= self._attempts:
                log.error("%s could not be delivered after %d attempts (%s); it stays in the "
                          "session and is re-armed at the next start", where, attempt, problem)
                return
            delay = self._backoff_ms * 2 ** (attempt - 1)
            log.warning("%s: delivery attempt %d failed (%s); retrying in %.1fs", where,
                        attempt, problem, delay / 1000)
            self._arm(key, self._clock() + delay, delivery, attempt=attempt + 1)


def _problem(result: Any) -> str | None:
    """Why a wake result means the firing did not land (None: it landed, or it was stale)."""
    if getattr(result, "status", None) == "error":
        code = getattr(result, "code", None)
        if code == "stale_timer":  # cancelled, replaced or already delivered: nothing to do
            return None
        return f"{code}: {getattr(result, 'error', '')}"
    if getattr(result, "commit_status", None) in ("superseded", "failed"):
        return f"the turn was {result.commit_status}"
    return None
