"""Forks: creating one, and reading what it inherits.

A fork copies nothing (``layout`` describes its items): :func:`fork` writes its first version
item, its references on the sessions its lineage reads and a fresh mark on its anchor in one
``TransactWriteItems``; :func:`inherited` reads the positions below its fork point from those
sessions' items, one ``Query`` per lineage segment, when a window reaches down there;
:func:`version_end` says where a version's events end (what a fork of that version inherits).
The store's ordinary reads and writes never come here for a session whose window lies within
its own events, so a fork's ordinary turns cost what any session's do.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from dormant._head import Head
from dormant._lru import Lru
from dormant.errors import SessionNotFound, StoreError
from dormant.events import Event, load_events
from dormant.stores._base import commit_head
from dormant.stores._dynamodb import commits, deletes, reads, writes
from dormant.stores._dynamodb import layout as lay
from dormant.stores._dynamodb.table import (
    RETRY_BACKOFF,
    RETRYABLE,
    TRANSACTION_ATTEMPTS,
    Items,
    Table,
    call,
    code,
    query_all,
    store_error,
)
from dormant.stores._dynamodb.window import WindowEstimator
from dormant.stores._dynamodb.writes import Known
from dormant.types import CommitResult

__all__ = ["KnownAt", "fork", "inherited", "stored_lineage", "version_end"]

#: Reads a session's head when the memo holds nothing usable of it (the store's own load: it
#: refills the memo), and returns what is then known.
KnownAt = Callable[[str], Known]


def fork(table: Table, memo: Lru[Known], known_at: KnownAt, head: Head, *,
         offload_above: int | None, transaction_limit: int) -> CommitResult:
    """Create ``head``'s fork (``DynamoDBStore.fork`` says what its transaction holds):
    ``known_at`` reads what ``memo`` does not hold of a session; a refused transaction is read
    again (the fork's key stale, the anchor moved) and retried, a lineage source gone raises
    :class:`SessionNotFound`."""
    sid = head.session_id
    now_s = int(table.clock())
    known = memo.get(sid)
    if known is None or known.version != 0:
        known = known_at(sid)
        if known.version != 0:
            return CommitResult(ok=False, conflict=True, current_version=known.version)
    if known.stale:
        deletes.purge_expired(table, sid, now_s)
    anchor_id = (str(head.fork_of["session"]) if head.fork_of
                 else str(head.lineage[-1]["session"]) if head.lineage else None)
    fresh = False
    for attempt in range(1, TRANSACTION_ATTEMPTS + 1):
        anchor = (_live_source(memo, known_at, anchor_id, fresh=fresh)
                  if head.lineage and anchor_id is not None else None)
        lineage = [_based(memo, known_at, segment, anchor_id, anchor) for segment in head.lineage]
        written = commit_head(head.model_copy(update={"lineage": lineage}), 0)
        commit = writes.plan_commit(
            table.name, written, (), known, 0, now_s=now_s,
            ttl_seconds=table.ttl_seconds, offloader=table.offloader,
            offload_above=offload_above, transaction_limit=transaction_limit,
            guards=0)
        plan = writes.fork_plan(
            table.name, commit, sid, lineage,
            (anchor_id, anchor.base, anchor.version)
            if anchor is not None and anchor_id is not None else None,
            now_s=now_s, ttl_seconds=table.ttl_seconds, token=uuid.uuid4().hex)
        try:
            actions: Any = plan.actions
            table.client.transact_write_items(TransactItems=actions)
        except ClientError as error:
            if code(error) != "TransactionCanceledException":
                raise store_error("fork", sid, error) from error
            reasons = error.response.get("CancellationReasons") or []
            failed = {i for i, r in enumerate(reasons)
                      if r.get("Code") == "ConditionalCheckFailed"}
            if failed & plan.creates:
                refused = commits.refused(table, dict(reasons[0].get("Item") or {}) or None)
                if refused.current_version:
                    return refused
                # A deletion marker or an expired item holds the key: what this process
                # knew of the id is stale. Read it again.
                memo.pop(sid)
                known = known_at(sid)
                if known.version != 0:
                    return CommitResult(ok=False, conflict=True,
                                        current_version=known.version)
                continue
            gone = next((plan.sources[i] for i in sorted(failed) if i in plan.sources),
                        None)
            if gone is not None:
                raise SessionNotFound(gone) from error
            if failed & plan.anchor:
                fresh = True  # the anchor moved on, or went: read it again
                continue
            codes = {r.get("Code") for r in reasons} - {"None", None}
            retryable = codes <= RETRYABLE
            if not retryable or attempt == TRANSACTION_ATTEMPTS:
                raise StoreError(
                    f"fork {sid} was cancelled ({', '.join(sorted(str(c) for c in codes))})"
                    f" after {attempt} attempt(s); nothing was written",
                    retryable=retryable) from error
        except BotoCoreError as error:
            raise store_error("fork", sid, error) from error
        else:
            if commit.known is not None:
                memo.put(sid, commit.known)
            return CommitResult(ok=True, version=written.version)
        time.sleep(RETRY_BACKOFF * 2 ** (attempt - 1))
    raise StoreError(f"session {anchor_id} kept moving while {sid} was forked from it; "
                     "retry", retryable=True)


def _live_source(memo: Lru[Known], known_at: KnownAt, session_id: str, *,
                 fresh: bool) -> Known:
    """What this process knows of a live session a fork reads (read again when not known,
    or ``fresh``); :class:`SessionNotFound` if there is none."""
    known = None if fresh else memo.get(session_id)
    if known is None or known.version == 0:
        known = known_at(session_id)
    if known.version == 0:
        raise SessionNotFound(session_id)
    if known.legacy or known.head is None:
        raise StoreError(f"session {session_id} is still in the old DynamoDB layout: it "
                         "can be forked once its next commit has moved it to version "
                         "items", retryable=False)
    return known


def _based(memo: Lru[Known], known_at: KnownAt, segment: dict[str, Any], anchor_id: str | None,
           anchor: Known | None) -> dict[str, Any]:
    """A lineage segment as this store writes it: with ``base``, the key offset of the
    incarnation it names (one copied from the source's lineage has it already; the
    source's own segment takes it from the live source, if that is the incarnation the
    segment names)."""
    if "base" in segment:
        return dict(segment)
    source = str(segment["session"])
    known = anchor if source == anchor_id and anchor is not None else _live_source(
        memo, known_at, source, fresh=False)
    assert known.head is not None  # _live_source refuses a head it does not hold
    if int(known.head.get("created_at", 0)) != int(segment["created_at"]):
        raise SessionNotFound(source)  # deleted, and another session has the id now
    return {**segment, "base": known.base}


def version_end(table: Table, memo: Lru[Known], known_at: KnownAt, session_id: str,
                version: int) -> int | None:
    """``DynamoDBStore.version_end``: the head ``memo`` holds answers for its own version;
    any other is one Query of that version item and its parts."""
    if version < 1:
        return None
    known = memo.get(session_id)
    if known is None or known.version == 0:
        known = known_at(session_id)
        if known.version == 0:
            return None
    if known.head is not None and version == known.version:
        return int(known.head["seq"])
    request: dict[str, Any] = {
        "TableName": table.name, "ConsistentRead": True,
        "KeyConditionExpression": "pk = :pk AND begins_with(sk, :v)",
        "ExpressionAttributeValues": {
            ":pk": {"S": session_id}, ":v": {"S": lay.version_key(known.base + version)}},
    }
    items = query_all(table, "read a version", session_id, request)
    found = next((v for v in reads.versions_of(items) if v.item is not None), None)
    if (found is None or found.deleted or not found.complete
            or lay.expired(found.item or {}, int(table.clock()))
            or found.base != known.base):
        return None
    return found.first_seq + len(found.doc()["ev"])


def inherited(table: Table, window: WindowEstimator, head: Head, start: int, now_s: int,
              fetch: reads.Fetch, *, windowed: bool) -> tuple[list[Event], int, int]:
    """A fork's events from ``start`` up to its fork point, read from the sessions its
    lineage names (newest segment first: where older history has aged out, nothing
    older joins the window), the position of the first, and the version items read."""
    spans: list[tuple[dict[str, Any], int, int]] = []
    below = 0
    for segment in head.lineage:
        end = int(segment["end"])
        if start < end:
            spans.append((segment, max(start, below), end))
        below = end
    pieces: list[list[Any]] = []
    first, used = head.fork_point, 0
    for segment, low, end in reversed(spans):
        got = _segment(table, window, head, segment, low, end, now_s, fetch,
                       windowed=windowed)
        pieces.append(got.raw)
        first, used = got.first, used + got.used
        if got.first > low:
            break
    return load_events([event for piece in reversed(pieces) for event in piece]), first, used


def _segment(table: Table, window: WindowEstimator, head: Head, segment: dict[str, Any],
             low: int, end: int, now_s: int, fetch: reads.Fetch, *,
             windowed: bool) -> reads.Segment:
    """Positions ``low`` … ``end - 1`` of a lineage segment: one descending Query of its
    source's version items from the segment's version down (a windowed read's ``Limit``
    sized to the turns it spans, doubling if short), and for a source migrated from the
    old layout, one more for the slices below its first version item."""
    source = str(segment["session"])
    base, version = int(segment.get("base", 0)), int(segment["version"])
    request: dict[str, Any] = {
        "TableName": table.name, "ConsistentRead": True, "ScanIndexForward": False,
        "KeyConditionExpression": "pk = :pk AND sk BETWEEN :lo AND :hi",
        "ExpressionAttributeValues": {
            ":pk": {"S": source}, ":lo": {"S": lay.version_key(base + 1)},
            ":hi": {"S": lay.version_key(base + version) + "#~"}},  # and its parts
    }
    if windowed:
        spanned = sum(1 for t in head.turn_starts if low <= t < end)
        request["Limit"] = window.limit(head.session_id, max(spanned, 1))
    items: Items = []
    while True:
        page = call("read a fork's history", head.session_id, table.client.query, **request)
        items.extend(page.get("Items", []))
        got = reads.segment(source, items, low, end, now_s, "LastEvaluatedKey" not in page,
                            fetch)
        if got is not None:
            break
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        if "Limit" in request:
            request["Limit"] = max(int(request["Limit"]), 4) * 2
    if got.first > low and not got.aged and base == 0:
        older, first = _slices(table, source, low, got.first, now_s, fetch)
        got = reads.Segment(older + got.raw, first, False, got.used + 1)
    if got.first > low and not got.aged and not table.ttl_seconds:
        raise StoreError(f"session {head.session_id}: what it inherits from session "
                         f"{source} (positions {low}-{got.first - 1}) is missing from the "
                         "table", retryable=False)
    return got


def _slices(table: Table, session_id: str, start: int, seq: int, now_s: int,
            fetch: reads.Fetch) -> tuple[list[Any], int]:
    """An old layout's events from ``start`` to ``seq`` (its slices, newest first, read
    until the one holding ``start``) and the position of the first."""
    request: dict[str, Any] = {
        "TableName": table.name, "ConsistentRead": True, "ScanIndexForward": False,
        "KeyConditionExpression": "pk = :pk AND sk BETWEEN :lo AND :hi",
        "ExpressionAttributeValues": {":pk": {"S": session_id},
                                      ":lo": {"S": lay.EVENT_PREFIX},
                                      ":hi": {"S": lay.slice_key(seq)}},
    }
    items: Items = []
    while True:
        page = call("read a fork's history", session_id, table.client.query, **request)
        items.extend(page.get("Items", []))
        if "LastEvaluatedKey" not in page or reads.items_needed(items, start,
                                                                 seq) is not None:
            break
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    raw, first = reads.decode(session_id, items, start, seq, now_s, fetch, load=False)
    return list(raw), first


def stored_lineage(given: list[dict[str, Any]],
                   stored: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lineage to write: a session's never changes, but the head a caller commits may be
    the one ``fork`` was given (``App.fork`` returns it), without the keys this store added
    (``base``): the stored segments then, when they are the same segments."""
    def plain(segment: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in segment.items() if k != "base"}

    if [plain(s) for s in given] == [plain(s) for s in stored]:
        return [dict(s) for s in stored]
    return given
