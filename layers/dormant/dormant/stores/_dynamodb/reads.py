"""Reading a session back: the head rebuilt from the newest version items, the events of the
window the caller asked for, and whether the items read so far are enough. Sessions still in
the old layout (``~head`` + ``e#`` slices) read as before. A fork's own items hold its events
from its fork point on; :func:`segment` reads what it inherits from a source's items. Pure
functions: no client here."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dormant._head import Head
from dormant.errors import StoreError
from dormant.events import Event, load_event, load_events
from dormant.stores._dynamodb import codec
from dormant.stores._dynamodb import layout as lay
from dormant.stores._dynamodb.offload import is_pointer, stand_in
from dormant.stores._dynamodb.writes import Known
from dormant.types import SessionSummary

__all__ = ["Found", "Later", "Paged", "Segment", "Version", "decode", "items_needed", "page",
           "read", "realise", "segment", "summary", "versions_of"]

_Items = list[dict[str, Any]]
Fetch = Callable[[dict[str, Any]], Any]
#: Offloaded events a load left in S3: by their index in the events it returned (where a
#: stand-in holds their place), what reads each.
Later = dict[int, Callable[[], Event]]


@dataclass
class Version:
    """One version item as read, its parts assembled."""

    key: int
    item: dict[str, Any] | None = None
    pieces: dict[int, bytes] = field(default_factory=dict)
    _doc: dict[str, Any] | None = None
    _events: list[dict[str, Any]] | None = None

    @property
    def complete(self) -> bool:
        if self.item is None:
            return False
        parts = int(self.item.get(lay.PARTS, {}).get("N", "1"))
        return all(i in self.pieces for i in range(parts))

    def doc(self) -> dict[str, Any]:
        if self._doc is None:
            assert self.item is not None
            parts = int(self.item.get(lay.PARTS, {}).get("N", "1"))
            self._doc = codec.unpack(b"".join(self.pieces[i] for i in range(parts)))
        return self._doc

    def events(self) -> list[dict[str, Any]]:
        """The item's events' JSON forms (S3 pointers as stored), decoded once; callers read
        them, never change them."""
        if self._events is None:
            doc = self.doc()
            if codec.format_of(self.pieces[0]) == 1:
                self._events = codec.decode_events_format1(doc.get("i"), doc["ev"])
            else:
                self._events = codec.decode_events(doc.get("i"), doc["ev"], self.updated_at)
        return self._events

    @property
    def first_seq(self) -> int:
        return int(self.doc()["s"])

    @property
    def deleted(self) -> bool:
        return self.item is not None and lay.DELETED in self.item

    @property
    def base(self) -> int:
        """The key offset of the item's incarnation: key - version (``ver``, written only
        when the offset is not 0)."""
        if self.item is None or lay.VERSION not in self.item:
            return 0
        return self.key - int(self.item[lay.VERSION]["N"])

    @property
    def updated_at(self) -> int:
        return int(self.item[lay.UPDATED]["N"]) if self.item else 0

    @property
    def listed_at(self) -> int | None:
        """The updated-at (ms) of the newest ``by_owner`` entry as of this version item: its
        own when it carries the index keys, else what it names (format 2: the payload's
        ``l``, ms before its ``ua``; format 1: the ``li`` attribute)."""
        item = self.item or {}
        if lay.OWNER in item and lay.UPDATED in item:
            return int(item[lay.UPDATED]["N"])
        if lay.LISTED in item:
            return int(item[lay.LISTED]["N"])
        before = self.doc().get("l") if self.item is not None else None
        return self.updated_at - int(before) if before is not None else None


@dataclass
class Found:
    """What a load read: the head, the window's events, and what the process now knows."""

    head: Head | None
    events: list[Event] = field(default_factory=list)
    first_seq: int = 0
    known: Known | None = None
    #: Event items the window needed (for the window estimator).
    used: int = 0
    control: dict[str, Any] | None = None
    later: Later = field(default_factory=dict)


def realise(raw: list[Any], fetch: Fetch, *, defer: bool = False) -> tuple[list[Event], Later]:
    """Ledger events from their JSON forms and S3 pointers: the pointers' events fetched, or
    with ``defer`` (a pointer with a stub) a stand-in in their place and how to read them."""
    pointers = [i for i, value in enumerate(raw) if is_pointer(value)]
    if not pointers:
        return load_events(raw), {}
    stand = {i: stand_in(raw[i]) for i in pointers} if defer else {}
    if not defer or any(e is None for e in stand.values()):
        return load_events([fetch(v) if is_pointer(v) else v for v in raw]), {}
    bodies = iter(load_events([v for v in raw if not is_pointer(v)]))
    events = [stand[i] if i in stand else next(bodies) for i in range(len(raw))]
    later: Later = {i: functools.partial(_fetched, fetch, raw[i]) for i in pointers}
    return events, later  # type: ignore[return-value]


def _fetched(fetch: Fetch, pointer: dict[str, Any]) -> Event:
    return load_event(fetch(pointer))


def _payload(value: dict[str, Any]) -> bytes:
    data = value["B"]
    return data if isinstance(data, bytes) else bytes(data)


def versions_of(items: _Items) -> list[Version]:
    """The version items among ``items``, newest first."""
    found: dict[int, Version] = {}
    for item in items:
        if not lay.is_version_item(item):
            continue
        key, part = lay.parse_version_key(item[lay.SK]["S"])
        entry = found.setdefault(key, Version(key))
        if part == 0:
            entry.item = item
        if lay.PAYLOAD in item:
            entry.pieces[part] = _payload(item[lay.PAYLOAD])
    return [found[k] for k in sorted(found, reverse=True)]


def read(session_id: str, items: _Items, turns: int | None, now_s: int, exhausted: bool,
         fetch: Fetch, *, compacted: bool = False, defer: bool = False) -> Found | None:
    """The session the items read so far (a descending query's, oldest last) hold, or None
    when more items are needed (``exhausted``: there are no more). A fork's window is read
    here down to its fork point at most: what it inherits is in other partitions
    (:func:`segment`). ``defer``: offloaded events stay in S3 (:func:`realise`)."""
    control = next((i for i in items if lay.is_control_item(i)), None)
    head_item = next((i for i in items if lay.head_sk_is(i)), None)
    if head_item is not None and lay.is_legacy_head(head_item):
        if lay.expired(head_item, now_s):
            return Found(None, known=Known(version=0, stale_head=True, stale=True),
                         control=control)
        return _legacy(session_id, head_item, items, turns, now_s, exhausted, fetch, control,
                       compacted)
    versions = [v for v in versions_of(items) if v.item is not None]
    if not versions:
        return Found(None, known=Known(version=0), control=control) if exhausted else None
    newest = versions[0]
    if newest.deleted or lay.expired(newest.item or {}, now_s):
        return Found(None, known=Known(version=0, base=newest.key, stale=not newest.deleted),
                     control=control)
    base = newest.base
    mine = [v for v in versions if v.key > base]
    chain: list[Version] = []
    for version in mine:
        if not version.complete:
            raise StoreError(f"session {session_id}: version {version.key - base} is "
                             "incomplete in the table")
        chain.append(version)
        if "h" in version.doc():
            break
    else:
        if not exhausted:
            return None
        raise StoreError(f"session {session_id}: no checkpoint of the head below version "
                         f"{newest.key - base}: the table is incomplete")
    chain.reverse()
    checkpoint = chain[0]
    full = codec.decode_head(checkpoint.doc()["h"], session_id, checkpoint.key - base,
                             checkpoint.updated_at)
    for version in chain[1:]:
        predicted = codec.predict(full, version.events(), version.first_seq,
                                  version.key - base, version.updated_at)
        full = codec.apply_delta(predicted, version.doc().get("d", {}))
    # The head handed out is the caller's to change in place; what this process remembers
    # (to write the next version as a delta) must stay as stored.
    head = Head.model_validate(copy.deepcopy(full))
    stamp = (checkpoint.item or {}).get(lay.LOGICAL_EXPIRY)
    known = Known(version=head.version, base=base, head=full, checkpoint=checkpoint.key - base,
                  checkpoint_lx=int(stamp["N"]) if stamp else None,
                  listed_at=newest.listed_at)
    # The session's own items start at its fork point (0: not a fork).
    start = max(head.window_start(turns, compacted=compacted), head.fork_point)
    window: list[Version] = []
    aged = False
    for version in mine:
        if lay.expired(version.item or {}, now_s):
            aged = True  # older history aged out (TTL): the ledger starts after it
            break
        if not version.complete:
            raise StoreError(f"session {session_id}: version {version.key - base} is "
                             "incomplete in the table")
        window.append(version)
        if version.first_seq <= start:
            break
    oldest = window[-1].first_seq if window else head.seq
    raw: list[Any] = []
    first = max(start, oldest)
    used = len(window)
    if oldest > start and not aged:
        below = exhausted or len(mine) < len(versions) or any(
            lay.is_below_versions(i) for i in items)
        if not below:
            return None  # more of this session's version items to read
        if base == 0 and oldest > 0 and not head.lineage:
            # A migrated session: older history is in the old layout's slices.
            slices = [i for i in items if lay.is_event_item(i)]
            if items_needed(slices, start, oldest) is None and not exhausted:
                return None
            legacy, first = decode(session_id, slices, start, oldest, now_s, fetch,
                                   load=False)
            raw.extend(legacy)
            used += len(slices)
    legacy_end = len(raw)  # the old layout's events are fetched as they are decoded
    for version in reversed(window):
        for offset, value in enumerate(version.events()):
            if version.first_seq + offset >= first:
                raw.append(value)
    events, later = realise(raw[legacy_end:] if legacy_end else raw, fetch, defer=defer)
    if legacy_end:
        events = load_events(raw[:legacy_end]) + events
        later = {legacy_end + i: read_it for i, read_it in later.items()}
    return Found(head, events, first if raw else head.seq, known, used, control, later)


@dataclass
class Segment:
    """What a source's version items read so far give of a fork's inherited positions."""

    #: The events' JSON (offloaded ones fetched), positions ``first`` … ``end - 1``.
    raw: list[Any]
    first: int
    #: Older history of the source aged out (TTL): nothing before ``first`` is left.
    aged: bool
    #: Version items used (for the window estimator).
    used: int


def segment(source_id: str, items: _Items, start: int, end: int, now_s: int, exhausted: bool,
            fetch: Fetch) -> Segment | None:
    """Positions ``start`` … ``end - 1`` of a lineage segment from its source's version items
    (a descending query's over the incarnation's keys up to the segment's version), or None
    when more items are needed. Positions below the incarnation's first version item (a
    session migrated from the old layout) are not here: ``first`` says where they stop."""
    window: list[Version] = []
    aged = False
    for version in versions_of(items):
        if version.item is None:  # only parts so far: the page ended inside a version
            if exhausted:
                raise StoreError(f"session {source_id}: version item {version.key} is "
                                 "missing from the table")
            return None
        if lay.expired(version.item, now_s):
            aged = True
            break
        if not version.complete:
            raise StoreError(f"session {source_id}: version item {version.key} is incomplete "
                             "in the table")
        window.append(version)
        if version.first_seq <= start:
            break
    else:
        if not exhausted:
            return None
    oldest = window[-1].first_seq if window else end
    first = min(max(start, oldest), end)
    raw: list[Any] = []
    for version in reversed(window):
        for offset, value in enumerate(version.events()):
            if first <= version.first_seq + offset < end:
                raw.append(fetch(value) if is_pointer(value) else value)
    return Segment(raw, first, aged, len(window))


@dataclass
class Paged:
    """A ledger page from version items read in ascending order (``placed`` False: the items
    do not hold the versions the page asked for one after the other, e.g. an old layout's
    history, or history aged out: the caller reads the ledger another way)."""

    raw: list[Any] = field(default_factory=list)
    first: int = 0
    next: tuple[int, int] | None = None
    placed: bool = True


def page(items: _Items, base: int, after: int, skip: int, limit: int, last: int, now_s: int,
         exhausted: bool, fetch: Fetch, *, start: int | None = None) -> Paged | None:
    """At most ``limit`` events from ``skip`` events after version ``after``'s end, from the
    version items of versions ``after + 1`` … ``last`` read so far (an ascending query's,
    over the incarnation at key offset ``base``), or None when more items are needed.
    ``start``, when known, is where version ``after + 1`` must begin. ``next`` is where the
    next page starts, as ``(version, skip)`` with ``skip`` inside the version after it."""
    at, skipping = after, skip  # the cursor: ``skipping`` events after version ``at``'s end
    position = start
    got = Paged()
    for version in reversed(versions_of(items)):
        if version.item is None or not version.complete:
            return Paged(placed=False) if exhausted else None  # else: the page cut a version
        if (version.key - base != at + 1 or version.deleted or version.base != base
                or lay.expired(version.item, now_s)
                or (position is not None and version.first_seq != position)):
            return Paged(placed=False)
        events = version.events()
        position = version.first_seq + len(events)
        if skipping >= len(events):
            at, skipping = at + 1, skipping - len(events)
            continue
        take = min(len(events) - skipping, limit - len(got.raw))
        if not got.raw:
            got.first = version.first_seq + skipping
        got.raw.extend(fetch(e) if is_pointer(e) else e
                       for e in events[skipping:skipping + take])
        at, skipping = (at + 1, 0) if skipping + take == len(events) else (at, skipping + take)
        if len(got.raw) >= limit:
            break
    if at < last and len(got.raw) < limit:
        return Paged(placed=False) if exhausted else None
    if not got.raw:
        got.first = position if position is not None else 0
    got.next = None if at >= last else (at, skipping)
    return got


def _legacy(session_id: str, head_item: dict[str, Any], items: _Items, turns: int | None,
            now_s: int, exhausted: bool, fetch: Fetch, control: dict[str, Any] | None,
            compacted: bool) -> Found | None:
    head = Head.model_validate_json(head_item[lay.HEAD]["S"])
    start = head.window_start(turns, compacted=compacted)
    slices = [i for i in items if lay.is_event_item(i)]
    needed = items_needed(slices, start, head.seq)
    if needed is None and not exhausted:
        return None
    events, first = decode(session_id, slices, start, head.seq, now_s, fetch)
    return Found(head, list(events), first,
                 Known(version=head.version, legacy=True), needed or 0, control)


def items_needed(items: _Items, start: int, seq: int) -> int | None:
    """How many of the old layout's slice items read so far (newest first) a window starting
    at position ``start`` needs, or None if it is not complete yet."""
    if start >= seq:
        return 0
    for index, item in enumerate(items):
        first, part = lay.parse_slice_key(item[lay.SK]["S"])
        if first <= start and part in (None, 0):
            return index + 1
    return None


def decode(session_id: str, items: _Items, start: int, seq: int, now_s: int,
           fetch: Fetch, *, load: bool = True) -> tuple[Any, int]:
    """The old layout's events from position ``start`` to ``seq`` (fewer if older history has
    expired), and the position of the first: ledger events (``load``), else their JSON."""
    kept: list[lay.Slice] = []
    for piece in reversed(lay.assemble(items, now_s)):
        if piece.first_seq >= seq:
            continue  # left behind by a delete racing a re-creation: not this ledger
        if piece.expired:
            break  # older history aged out (TTL): the ledger starts after it
        if not piece.complete:
            raise StoreError(f"session {session_id}: events at position {piece.first_seq} are "
                             "incomplete in the table")
        kept.append(piece)
        if piece.first_seq <= start:
            break
    kept.reverse()
    first = max(start, kept[0].first_seq) if kept else seq
    raw: list[Any] = []
    for piece in kept:
        for offset, value in enumerate(piece.decoded()):
            if first <= piece.first_seq + offset < seq:
                raw.append(fetch(value) if is_pointer(value) else value)
    return (load_events(raw) if load else raw), first


def summary(item: dict[str, Any]) -> SessionSummary:
    """A ``by_owner`` index entry as a ``sessions.list`` line: a version item's (version from
    its key) or an old-layout head's (``ver``)."""
    if lay.VERSION in item:  # an old-layout head, or a version item of a later incarnation
        version = int(item[lay.VERSION]["N"])
    else:
        version = lay.parse_version_key(item[lay.SK]["S"])[0]
    status = item.get(lay.STATUS, {}).get("S", "active")
    return SessionSummary(
        session_id=item[lay.PK]["S"],
        version=version,
        status=status if status in ("awaiting_input", "failed", "paused") else "active",
        updated_at=int(item[lay.UPDATED]["N"]),
        principal=lay.principal_of(item[lay.OWNER]["S"]),
    )
