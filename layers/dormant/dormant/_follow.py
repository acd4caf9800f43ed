"""Following a session: the committed ledger events after a version a client already holds.

``GET /sessions/{id}/events?after=VERSION[&wait=N]`` answers :func:`events_after`; ``dormant
dev`` also streams it (``&follow=true``). A client keeps the version of the last feed it
applied and asks for what came after it; the head remembers where each of its recent commits
began (:attr:`dormant._head.Head.commit_seqs`), so the answer starts exactly at version
``after + 1``. A version older than that window cannot be placed: the feed is then the whole
ledger with ``resync`` set, and the client replaces what it holds.

Pure library code: no HTTP framework here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from dormant._head import Head, SessionStatus, status_of
from dormant.errors import InputError, SessionNotFound
from dormant.session import normalize_session_id

if TYPE_CHECKING:
    from dormant.app import App
    from dormant.types import StoredSession

__all__ = ["DEFAULT_POLL", "Feed", "events_after", "start_of"]

#: How often a waiting :func:`events_after` re-reads the head (seconds).
DEFAULT_POLL = 0.25


class Feed(BaseModel):
    """What a follower receives: the session's ``version`` and ``status`` now, and the
    committed events after the version it asked about (``resync``: the whole ledger, because
    that version is older than the head remembers; replace what you hold)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    session_id: str
    version: int = Field(description="The session's version these events bring you to.")
    status: SessionStatus
    events: list[dict[str, Any]] = Field(
        default_factory=list, description="Ledger events, oldest first (JSON form).")
    resync: bool = Field(
        default=False, description="True: `events` is the whole ledger (the version asked "
        "about is older than the head remembers); replace what you hold.")

    def wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")


def start_of(head: Head, after: int) -> int | None:
    """The ledger position where version ``after + 1`` began (0 for ``after == 0``), or None
    when that version is older than the head's commit window. ``after`` must be below
    ``head.version``."""
    if after <= 0:
        return 0
    index = len(head.commit_seqs) - 1 - (head.version - (after + 1))
    if index < 0:
        return None
    return head.commit_seqs[index]


def events_after(app: App, session_id: str, after: int, *, wait: float = 0.0,
                 principal: str | None = None, poll: float = DEFAULT_POLL,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> Feed:
    """The committed events of ``session_id`` after version ``after``.

    While the session is at ``after`` (or below), waits up to ``wait`` seconds for a commit,
    re-reading the head every ``poll`` seconds; still nothing then: an empty feed at the
    current version. Raises :class:`SessionNotFound` for no such session, or one owned by
    another ``principal`` (None: not scoped), and :class:`InputError` for a negative
    ``after``, ``wait`` or ``poll``.
    """
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise InputError(f"after must be a version (an integer >= 0), not {after!r}")
    if not (math.isfinite(wait) and wait >= 0):
        raise InputError(f"wait must be a number of seconds >= 0, not {wait!r}")
    if not (math.isfinite(poll) and poll > 0):
        raise InputError(f"poll must be a number of seconds > 0, not {poll!r}")
    sid = normalize_session_id(session_id)
    head = _head(app, sid, principal)
    deadline = clock() + wait
    while head.version <= after:
        left = deadline - clock()
        if left <= 0:
            return _feed(head, [], resync=False)
        sleep(min(poll, left))
        head = _head(app, sid, principal)
    return _read(app, sid, head, after, principal)


def _head(app: App, sid: str, principal: str | None) -> Head:
    session = app.sessions.load(sid, turns=0)
    return _visible(session.head if session is not None else None, sid, principal)


def _visible(head: Head | None, sid: str, principal: str | None) -> Head:
    """The head, if the caller may see it (the rule of every session route)."""
    if head is None or not head.visible_to(principal):
        raise SessionNotFound(sid)
    return head


def _read(app: App, sid: str, head: Head, after: int, principal: str | None) -> Feed:
    """The events after ``after``, read with the smallest ledger window that holds them: a
    windowed read first, the whole ledger when the window does not reach back far enough
    (the head may have moved between the reads)."""
    turns = _turns_from(head, start_of(head, after))
    if turns is not None:
        feed = _slice(_load(app, sid, turns, principal), after)
        if feed is not None:
            return feed
    whole = _slice(_load(app, sid, None, principal), after)
    assert whole is not None  # a whole ledger starts at position 0: every start is in it
    return whole


def _load(app: App, sid: str, turns: int | None, principal: str | None) -> StoredSession:
    stored = app.store.load(sid, turns=turns)
    _visible(stored.head if stored is not None else None, sid, principal)
    assert stored is not None
    return stored


def _slice(stored: StoredSession, after: int) -> Feed | None:
    """The feed after ``after`` from what ``stored`` holds; None if it starts too late."""
    head = stored.head
    if head.version <= after:  # cannot happen (versions only grow) unless recreated
        return _feed(head, [], resync=False)
    start = start_of(head, after)
    if start is None:  # too old to place: the whole ledger, the client starts over
        return _feed(head, stored.events, resync=True) if stored.first_seq == 0 else None
    if start < stored.first_seq:
        return None
    return _feed(head, stored.events[start - stored.first_seq:], resync=False)


def _turns_from(head: Head, start: int | None) -> int | None:
    """How many recent turns a windowed read needs to begin at or before ``start`` (None:
    the whole ledger)."""
    if start is None or start <= 0:
        return None
    starts = head.turn_starts
    for back in range(1, len(starts) + 1):
        if starts[-back] <= start:
            return back
    return None


def _feed(head: Head, events: list[Any], *, resync: bool) -> Feed:
    return Feed(session_id=head.session_id, version=head.version, status=status_of(head),
                events=[e.model_dump(mode="json") for e in events], resync=resync)
