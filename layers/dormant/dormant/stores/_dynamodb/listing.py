"""Listing sessions: the sparse ``by_owner`` index read newest first, each listed session's
newest item for its line (see :func:`list_sessions`), and a deleted session's purge asked
for again when its index entry outlived it."""

from __future__ import annotations

from typing import Any

from dormant.stores._dynamodb import layout as lay
from dormant.stores._dynamodb import reads
from dormant.stores._dynamodb.deletes import PurgeLater
from dormant.stores._dynamodb.table import Items, Table, call
from dormant.types import SessionSummary

__all__ = ["deleted", "list_sessions"]


def list_sessions(table: Table, principal: str | None, limit: int,
                  purge_later: PurgeLater | None) -> list[SessionSummary]:
    """Reads the ``by_owner`` index newest first, then each session's newest item.

    The index is sparse: a session's version item carries the index keys when it is the
    session's first and again once its last entry is ``LIST_REFRESH_MS`` old (one index
    write per session and quarter hour of activity, not one per turn); so an entry says
    which sessions are the principal's and, within ``LIST_REFRESH_MS``, when they last
    changed. Each listed session's version, status and time come from its newest item
    (one eventually consistent ``Query`` of its key range, a few dozen bytes), and the
    reading stops once ``limit`` sessions are known newer than any entry not yet read
    could make a session. ``list()`` without a principal scans the index."""
    now_s = int(table.clock())
    if principal is not None:
        request: dict[str, Any] = {
            "TableName": table.name,
            "IndexName": lay.INDEX_NAME,
            "KeyConditionExpression": "#own = :own",
            "ExpressionAttributeNames": {"#own": lay.OWNER},
            "ExpressionAttributeValues": {":own": {"S": lay.owner_key(principal, "")}},
            "ScanIndexForward": False,
            "Limit": 2 * limit + 10,
        }
        read = table.client.query
    else:
        request = {"TableName": table.name, "IndexName": lay.INDEX_NAME}
        read = table.client.scan  # type: ignore[assignment]
    done: set[str] = set()
    found: list[SessionSummary] = []
    pending: Items = []
    exhausted = False
    while True:
        if not pending and not exhausted:
            page = call("list sessions", principal or "*", read, **request)
            pending = list(page.get("Items", []))
            if "LastEvaluatedKey" in page:
                request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
            else:
                exhausted = True
            if principal is None:  # a scan: every entry, then newest first
                while not exhausted:
                    page = call("list sessions", "*", read, **request)
                    pending += page.get("Items", [])
                    if "LastEvaluatedKey" not in page:
                        exhausted = True
                    else:
                        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
                pending.sort(key=lambda i: int(i[lay.UPDATED]["N"]), reverse=True)
        if not pending:
            break
        entry = pending.pop(0)
        # No session whose newest entry is this one or older changed after it plus the
        # refresh period: with ``limit`` sessions newer than that, the listing is whole.
        bound = int(entry[lay.UPDATED]["N"]) + lay.LIST_REFRESH_MS
        if len(found) >= limit and sorted(
                (s.updated_at for s in found), reverse=True)[limit - 1] >= bound:
            break
        sid = entry[lay.PK]["S"]
        if sid in done:
            continue
        listed = _listed(table, entry, now_s, purge_later)
        if listed is False:
            continue  # an entry of an incarnation that is gone: a newer one may follow
        done.add(sid)
        if isinstance(listed, SessionSummary):
            found.append(listed)
    found.sort(key=lambda s: (s.updated_at, s.version), reverse=True)
    return found[:limit]

def _listed(table: Table, entry: dict[str, Any], now_s: int,
            purge_later: PurgeLater | None) -> SessionSummary | bool | None:
    """The ``list`` line of the session an index entry names, from its newest item: None
    when it is deleted or expired; False when the entry is of an older incarnation than
    the newest item's (its session was deleted and made again)."""
    sid = entry[lay.PK]["S"]
    if lay.is_control_item(entry):  # a first turn's announcement
        return _first_turn(table, entry, now_s)
    if not lay.is_version_item(entry):  # an old layout's head: rewritten on every commit
        if _index_expired(table, entry, now_s) or deleted(entry):
            return None
        return reads.summary(entry)
    if deleted(entry):
        _purge_again(table, purge_later, entry)
        return None
    newest = _newest(table, sid)
    if newest is not None and lay.DELETED in newest:
        # the entry is a deleted incarnation's: not purged yet
        _purge_again(table, purge_later, newest)
        return None
    if newest is None or lay.expired(newest, now_s):
        return None
    if lay.incarnation_of(newest) != lay.incarnation_of(entry):
        return False
    return reads.summary({**newest, lay.OWNER: entry[lay.OWNER]})


def _first_turn(table: Table, entry: dict[str, Any], now_s: int) -> SessionSummary | bool | None:
    """The ``list`` line of a session whose first turn announced itself (the control item's
    entry): version 0, ``active``, while the session has no live version item; once it has,
    False (that item's own entry lists it)."""
    if lay.expired(entry, now_s):
        return None
    newest = _newest(table, entry[lay.PK]["S"])
    if newest is not None and lay.DELETED not in newest and not lay.expired(newest, now_s):
        return False
    return SessionSummary(session_id=entry[lay.PK]["S"], version=0, status="active",
                          updated_at=int(entry[lay.UPDATED]["N"]),
                          principal=lay.principal_of(entry[lay.OWNER]["S"]))


def _newest(table: Table, sid: str) -> dict[str, Any] | None:
    """The session's newest version item (the keys and what a list line needs), or None."""
    request: dict[str, Any] = {
        "TableName": table.name,
        "KeyConditionExpression": "pk = :pk AND sk BETWEEN :lo AND :hi",
        "ExpressionAttributeValues": {":pk": {"S": sid}, ":lo": {"S": lay.VERSION_PREFIX},
                                      ":hi": {"S": lay.VERSION_PREFIX + "~"}},
        "ProjectionExpression": "pk, sk, #ua, #st, #ver, #lx, #ttl, #del",
        "ExpressionAttributeNames": {"#ua": lay.UPDATED, "#st": lay.STATUS,
                                     "#ver": lay.VERSION, "#lx": lay.LOGICAL_EXPIRY,
                                     "#ttl": lay.TTL_ATTRIBUTE, "#del": lay.DELETED},
        "ScanIndexForward": False, "Limit": 4,
    }
    while True:
        page = call("list sessions", sid, table.client.query, **request)
        newest = next((i for i in page.get("Items", [])
                       if lay.parse_version_key(i[lay.SK]["S"])[1] == 0), None)
        if newest is not None or "LastEvaluatedKey" not in page:
            return newest
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

def _purge_again(table: Table, purge_later: PurgeLater | None,
                 marker: dict[str, Any]) -> None:
    """An index entry of a deleted session (the marker's own, or an item of the deleted
    incarnation): its purge has not finished (the purge deletes those items, and takes
    the marker out of the index last). :data:`~layout.LIST_REFRESH_MS` after the delete
    (the marker's ``ua``; a marker without one is older), a step lost (its send failed,
    its record dead-lettered) is likely: hand the purge on again. Inline purges (no
    ``purge_later``) are not run from a listing."""
    if purge_later is None:
        return
    deleted_ms = int(marker.get(lay.UPDATED, {}).get("N", "0"))
    if int(table.clock() * 1000) - deleted_ms >= lay.LIST_REFRESH_MS:
        purge_later(marker[lay.PK]["S"], None)

def _index_expired(table: Table, item: dict[str, Any], now_s: int) -> bool:
    """An index entry's session has expired: the index projects ``expires_at``, not a
    version item's logical expiry ``lx``, which is ``expires_at`` less this store's
    margin (see ``layout``)."""
    if lay.is_version_item(item) and lay.TTL_ATTRIBUTE in item and table.ttl_seconds:
        stamp = int(item[lay.TTL_ATTRIBUTE]["N"]) - table.ttl_seconds // 4 - 1
        return stamp <= now_s
    return lay.expired(item, now_s)


def deleted(item: dict[str, Any]) -> bool:
    """An index entry of a deletion marker (its session's newest until purged)."""
    return bool(item.get(lay.STATUS, {}).get("S") == "deleted")
