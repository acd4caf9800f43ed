"""Following a session: the committed ledger events after a version a client already holds.

``GET /sessions/{id}/events?after=VERSION[&wait=N]`` answers :func:`events_after`; ``dormant
dev`` also streams it (``&follow=true``). A client keeps the version of the last feed it
applied and asks for what came after it; the head remembers where each of its recent commits
began (:attr:`dormant._head.Head.commit_seqs`), so the answer starts exactly at version
``after + 1``. A version older than that window cannot be placed: the feed is then the whole
ledger with ``resync`` set, and the client replaces what it holds.

Feeds page: at most ``limit`` events (:data:`DEFAULT_LIMIT`, at most :data:`MAX_LIMIT`), and
``next``, a cursor, when more follow (:func:`encode_cursor`: ``"V"`` or ``"V.K"``, the events
``K`` past version ``V``'s end). A store with ``read_page`` (all of dormant's) reads only the
page, whatever the session's age; the position of a version comes from the store then, so
any ``after`` is placed, however old.

Pure library code: no HTTP framework here.
"""

from __future__ import annotations

import math
import re
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

__all__ = ["CURSOR_PATTERN", "DEFAULT_LIMIT", "DEFAULT_POLL", "MAX_LIMIT", "Feed", "decode_cursor",
           "encode_cursor", "events_after", "page_after", "start_of"]

#: How often a waiting :func:`events_after` re-reads the head (seconds).
DEFAULT_POLL = 0.25
#: Events in a feed unless asked for fewer, and the most one may ask for.
DEFAULT_LIMIT = 200
MAX_LIMIT = 1000
#: What a cursor looks like on the wire (``encode_cursor``).
CURSOR_PATTERN = r"^[0-9]{1,12}(\.[0-9]{1,12})?$"
_CURSOR = re.compile(CURSOR_PATTERN)


class Feed(BaseModel):
    """What a follower receives: the session's ``version`` and ``status`` now, and the
    committed events after the version it asked about (``resync``: the whole ledger, because
    that version is older than the head remembers; replace what you hold)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, defer_build=True)

    session_id: str
    version: int = Field(description="The session's version these events bring you to.")
    status: SessionStatus
    events: list[dict[str, Any]] = Field(
        default_factory=list, description="Ledger events, oldest first (JSON form).")
    resync: bool = Field(
        default=False, description="True: `events` is the whole ledger (the version asked "
        "about is older than the head remembers); replace what you hold.")
    next: str | None = Field(
        default=None, description="More events follow: ask again with `cursor` set to "
        "this (`version` is then the session's, not yet yours). Null: you have every "
        "event up to `version`.")

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


def encode_cursor(after: int, skip: int) -> str:
    """The wire form of a page's start: ``skip`` events after version ``after``'s end."""
    return str(after) if skip == 0 else f"{after}.{skip}"


def decode_cursor(cursor: str) -> tuple[int, int]:
    """``(after, skip)`` of a cursor :func:`encode_cursor` made; :class:`InputError` for
    anything else."""
    if not isinstance(cursor, str) or not _CURSOR.match(cursor):
        raise InputError(f"cursor must be a `next` this API answered (like 12 or 12.3), "
                          f"not {cursor!r}")
    after, _, skip = cursor.partition(".")
    return int(after), int(skip or 0)


def _check_page(skip: int, limit: int) -> None:
    if isinstance(skip, bool) or not isinstance(skip, int) or skip < 0:
        raise InputError(f"skip must be an integer >= 0, not {skip!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InputError(f"limit must be an integer from 1 to {MAX_LIMIT}, not {limit!r}")


def events_after(app: App, session_id: str, after: int, *, wait: float = 0.0,
                 principal: str | None = None, poll: float = DEFAULT_POLL,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic,
                 skip: int = 0, limit: int = DEFAULT_LIMIT) -> Feed:
    """The committed events of ``session_id`` after version ``after`` (from ``skip`` events
    past its end: a cursor's second part), at most ``limit`` of them; ``next`` says where
    the next page starts when more follow.

    While the session is at ``after`` (or below), waits up to ``wait`` seconds for a commit,
    re-reading the head every ``poll`` seconds; still nothing then: an empty feed at the
    current version. Raises :class:`SessionNotFound` for no such session, or one owned by
    another ``principal`` (None: not scoped), and :class:`InputError` for a negative
    ``after``, ``wait``, ``poll`` or ``skip``, or a ``limit`` outside 1 … :data:`MAX_LIMIT`.
    """
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise InputError(f"after must be a version (an integer >= 0), not {after!r}")
    _check_page(skip, limit)
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
    return page_after(app, head, after, skip=skip, limit=limit, principal=principal)


def page_after(app: App, head: Head, after: int, *, skip: int = 0, limit: int = DEFAULT_LIMIT,
               principal: str | None = None) -> Feed:
    """The feed after ``after`` (and ``skip``) up to ``head``, a head the caller read and may
    see: the store's ``read_page`` when it has one and places ``after``, else a ledger read
    cut to the page."""
    _check_page(skip, limit)
    sid = head.session_id
    if head.version <= after:
        return _feed(head, [], resync=False)
    reader = getattr(app.store, "read_page", None)
    page = reader(head, after, skip, limit) if reader is not None else None
    if page is not None:
        feed = _feed(head, page.events, resync=False)
        feed.next = encode_cursor(*page.next) if page.next is not None else None
        return feed
    feed = _read(app, sid, head, after, principal)
    events = feed.events[skip:]
    feed.events = events[:limit]
    if len(events) > limit:  # a resync's events start at 0: its cursor counts from there
        feed.next = encode_cursor(0 if feed.resync else after, skip + limit)
    return feed


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
