"""Reading a session back: when a windowed query has read enough, and turning the items it
read into ledger events. Pure functions: no client here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dormant.errors import StoreError
from dormant.events import Event, load_events
from dormant.stores._dynamodb import layout as lay
from dormant.stores._dynamodb.offload import is_pointer
from dormant.types import SessionSummary

__all__ = ["decode", "items_needed", "remaining_limit", "summary"]

_Items = list[dict[str, Any]]


def items_needed(items: _Items, start: int, seq: int) -> int | None:
    """How many of the event items read so far (newest first) a window starting at position
    ``start`` needs, or None if it is not complete yet."""
    if start >= seq:
        return 0
    for index, item in enumerate(items):
        first, part = lay.parse_slice_key(item[lay.SK]["S"])
        if first <= start and part in (None, 0):
            return index + 1
    return None


def remaining_limit(items: _Items, start: int, seq: int) -> int:
    """``Limit`` for the next page: at most one item per missing event, plus a spare."""
    oldest = lay.parse_slice_key(items[-1][lay.SK]["S"])[0] if items else seq
    return max(oldest - start, 1) + 1


def decode(session_id: str, items: _Items, start: int, seq: int, now_s: int,
           fetch: Callable[[dict[str, Any]], Any]) -> tuple[list[Event], int]:
    """The events from position ``start`` on (fewer if older history has expired), and the
    position of the first. ``fetch`` reads an event offloaded to S3."""
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
            if piece.first_seq + offset >= start:
                raw.append(fetch(value) if is_pointer(value) else value)
    return load_events(raw), first


def summary(item: dict[str, Any]) -> SessionSummary:
    """A ``by_owner`` index item as a ``sessions.list`` line."""
    return SessionSummary(
        session_id=item[lay.PK]["S"],
        version=int(item[lay.VERSION]["N"]),
        status=item[lay.STATUS]["S"] if item[lay.STATUS]["S"] in ("awaiting_input", "failed")
        else "active",
        updated_at=int(item[lay.UPDATED]["N"]),
        principal=lay.principal_of(item[lay.OWNER]["S"]),
    )
