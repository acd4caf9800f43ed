"""How many items a windowed read should ask for, learned from earlier reads.

The head says where a ``turns``-turn window starts, but the head comes back in the same query
as the events, so the query's ``Limit`` has to be guessed up front. A guess too small costs a
second request; too large costs a few unneeded items. The guess is items-per-turn as last seen
for the session (or, for a session this process has not read, across sessions), with headroom.

The query meets the head first and the session's control record (if it has one) second, before
any event: the ``Limit`` always keeps a slot for it, so a session with a control record still
reads its window in one request (a session without one reads one more event item instead).
"""

from __future__ import annotations

import math
import threading

from dormant._lru import Lru

__all__ = ["WindowEstimator"]

#: Items per turn assumed before anything was observed: one slice per commit, two commits for
#: a turn that yields and resumes.
DEFAULT_ITEMS_PER_TURN = 2.0
HEADROOM = 1.25
#: Items before the first event in a descending query: the head, and the control record.
HEAD_AND_CONTROL = 2
MEMO_SIZE = 4096


class WindowEstimator:
    """Thread-safe, bounded memory of items-per-turn per session."""

    def __init__(self) -> None:
        self._per_session: Lru[float] = Lru(MEMO_SIZE)
        self._overall = DEFAULT_ITEMS_PER_TURN
        self._lock = threading.Lock()

    def limit(self, session_id: str, turns: int) -> int:
        """``Limit`` for a query reading the head, the control record and ``turns`` turns of
        events (for ``turns <= 0``: the head and the control record only, which the query
        must then restrict itself to, see ``DynamoDBStore.load``)."""
        if turns <= 0:
            return HEAD_AND_CONTROL
        known = self._per_session.get(session_id)
        per_turn = self._overall if known is None else known
        return HEAD_AND_CONTROL + max(1, math.ceil(turns * per_turn * HEADROOM)) + 1

    def observe(self, session_id: str, turns: int, items: int) -> None:
        """A read of ``turns`` turns needed ``items`` event items."""
        if turns <= 0:
            return
        per_turn = max(items, 1) / turns
        self._per_session.put(session_id, per_turn)
        with self._lock:
            self._overall = 0.8 * self._overall + 0.2 * per_turn

    def forget(self, session_id: str) -> None:
        self._per_session.pop(session_id)
