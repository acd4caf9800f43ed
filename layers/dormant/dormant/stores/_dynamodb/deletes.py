"""Deleting a session, and keeping what its forks still read.

A delete retires the session at once (a deletion marker takes the next version's key, so a
commit in flight is refused and a later session under the id numbers its items after it),
then deletes the rest of its partition. Items a fork reads (its reference is in the
partition, see ``layout``) stay, out of ``list``'s index; a fork's own delete releases its
references, and the last one released takes a deleted incarnation's kept items with it
(:func:`_collect`). :func:`purge_expired` clears an expired session's items before a new one
is written under its id.
"""

from __future__ import annotations

import json
import time
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from dormant._lru import Lru
from dormant.errors import StoreError
from dormant.stores._dynamodb import layout as lay
from dormant.stores._dynamodb import writes
from dormant.stores._dynamodb.table import (
    RETRY_BACKOFF,
    Items,
    Table,
    call,
    code,
    store_error,
)
from dormant.stores._dynamodb.window import WindowEstimator
from dormant.stores._dynamodb.writes import Known

__all__ = ["delete", "purge_expired"]

#: Reads of the partition a delete makes before giving up when commits keep landing.
_DELETE_ATTEMPTS = 3


def delete(table: Table, memo: Lru[Known], window: WindowEstimator, session_id: str) -> bool:
    """``DynamoDBStore.delete``: read the partition's keys, retire the head (the marker, or
    an old layout's conditioned delete), then delete what no fork holds; read again and
    start over when a commit or a fork landed meanwhile. Whether the session existed."""
    now_s = int(table.clock())
    for _ in range(_DELETE_ATTEMPTS):
        items = _keys_of(table, session_id)
        holds = lay.fork_holds(items, now_s)
        head = next((i for i in items if lay.is_legacy_head(i)), None)
        mains = [i for i in items if lay.is_version_item(i)
                 and lay.parse_version_key(i[lay.SK]["S"])[1] == 0]
        newest = max(mains, key=lambda i: lay.parse_version_key(i[lay.SK]["S"])[0],
                     default=None)
        kept: dict[str, Any] | None = None
        if head is not None:
            existed = not lay.expired(head, now_s)
            if not _delete_if(table, "delete", session_id, head, "ver = :v",
                              {":v": head[lay.VERSION]}):
                continue  # a commit landed meanwhile: list its items too
        elif newest is not None and lay.DELETED not in newest:
            existed = not lay.expired(newest, now_s)
            mark_key = lay.fork_mark_key(lay.incarnation_of(newest))
            kept = _mark_deleted(
                table, session_id, newest, now_s, keep=lay.held(newest, holds, now_s),
                mark=next((i for i in items if i[lay.SK]["S"] == mark_key), None))
            if kept is None:
                continue
        else:
            existed, kept = False, newest
        gone = [i for i in items if i is not head
                and (kept is None or i[lay.SK] != kept[lay.SK])
                and not lay.held(i, holds, now_s)]
        marked = kept is not None and newest is not None and lay.DELETED not in newest
        _delete_items(table, session_id, [i for i in gone if not (marked and i is newest)])
        offloaded = [key for item in gone for key in item.get(lay.OFFLOADED, {}).get("SS", [])]
        if offloaded:
            call("delete offloaded events", session_id, table.offload().delete, offloaded)
        shown = [i for i in mains if lay.OWNER in i and lay.held(i, holds, now_s)]
        if shown:
            _hide(table, session_id, shown)
        for source, source_base in _lineage_of(items, newest):
            _release(table, source, source_base, session_id)
        if marked and newest is not None and lay.incarnation_of(newest) in holds:
            # Forks read it: a fork deleted since the keys were read (its reference gone
            # before the marker was there) may have been the last; look again now.
            _collect(table, session_id, lay.incarnation_of(newest))
        base = lay.parse_version_key(kept[lay.SK]["S"])[0] if kept is not None else 0
        memo.put(session_id, Known(version=0, base=base))
        window.forget(session_id)
        return existed
    raise StoreError(f"session {session_id} kept changing while being deleted; retry")


def _mark_deleted(table: Table, session_id: str, newest: dict[str, Any], now_s: int, *,
                  keep: bool = False,
                  mark: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """One transaction: the deletion marker takes the key after ``newest`` and ``newest``
    (the head) goes, so the session reads as deleted at once and a commit in flight at
    its version is refused; and the incarnation's fork mark is as the delete read it
    (``mark``, or none), so no fork was made since. None if a commit landed meanwhile, or
    a fork. ``keep``: forks read ``newest``, so it stays."""
    key = lay.parse_version_key(newest[lay.SK]["S"])[0] + 1
    marker: dict[str, Any] = {lay.PK: {"S": session_id}, lay.SK: {"S": lay.version_key(key)},
                              lay.DELETED: {"N": "1"}}
    if table.ttl_seconds:
        marker[lay.TTL_ATTRIBUTE] = {"N": str(now_s + table.ttl_seconds)}
    actions: Any = [{"Put": {"TableName": table.name, "Item": marker,
                             "ConditionExpression": "attribute_not_exists(#pk)",
                             "ExpressionAttributeNames": {"#pk": lay.PK}}}]
    if not keep:
        actions.append({"Delete": {"TableName": table.name,
                                   "Key": {lay.PK: newest[lay.PK], lay.SK: newest[lay.SK]},
                                   "ConditionExpression": "attribute_exists(#pk)",
                                   "ExpressionAttributeNames": {"#pk": lay.PK}}})
    check: dict[str, Any] = {
        "TableName": table.name,
        "Key": {lay.PK: newest[lay.PK],
                lay.SK: {"S": lay.fork_mark_key(lay.incarnation_of(newest))}}}
    if mark is not None and not lay.expired(mark, now_s):
        check.update(ConditionExpression="#tok = :tok",
                     ExpressionAttributeNames={"#tok": lay.TOKEN},
                     ExpressionAttributeValues={":tok": mark[lay.TOKEN]})
    else:
        check.update(writes.absent_or_expired(now_s))
    actions.append({"ConditionCheck": check})
    try:
        table.client.transact_write_items(TransactItems=actions)
    except ClientError as error:
        if code(error) == "TransactionCanceledException":
            return None  # a commit took the key, a fork was made, or a delete raced
        raise store_error("delete", session_id, error) from error
    except BotoCoreError as error:
        raise store_error("delete", session_id, error) from error
    return marker


def _hide(table: Table, session_id: str, shown: Items) -> None:
    """Take kept version items out of ``list``'s index (it holds the items with ``own``):
    each is written again without it (read whole first: the delete read keys only)."""
    wanted = {item[lay.SK]["S"] for item in shown}
    low = min(wanted)
    request: dict[str, Any] = {
        "TableName": table.name, "ConsistentRead": True,
        "KeyConditionExpression": "pk = :pk AND sk BETWEEN :lo AND :hi",
        "FilterExpression": "attribute_exists(#own)",
        "ExpressionAttributeNames": {"#own": lay.OWNER},
        "ExpressionAttributeValues": {":pk": {"S": session_id}, ":lo": {"S": low},
                                      ":hi": {"S": max(wanted)}},
    }
    whole: Items = []
    while True:
        page = call("read session", session_id, table.client.query, **request)
        whole += [i for i in page.get("Items", []) if i[lay.SK]["S"] in wanted]
        if "LastEvaluatedKey" not in page:
            break
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    _batch(table, session_id, [{"PutRequest": {"Item": {
        k: v for k, v in item.items() if k != lay.OWNER}}} for item in whole])


def _release(table: Table, source: str, base: int, fork_id: str) -> None:
    """Fork ``fork_id`` (deleted) no longer reads ``source``'s incarnation at ``base``: its
    reference goes first, then, if that incarnation is deleted and no other fork reads it,
    its kept items go (:func:`_collect`). In that order, and a delete of the source
    marks it before it looks at the references, so of a fork's delete and its source's
    running side by side one at least sees the other's effect."""
    call("release a fork's reference", source, table.client.delete_item,
         TableName=table.name,
         Key={lay.PK: {"S": source}, lay.SK: {"S": lay.fork_ref_key(base, fork_id)}})
    _collect(table, source, base)


def _collect(table: Table, session_id: str, base: int) -> None:
    """Delete the kept items of the session's incarnation at ``base`` (version items and
    parts, their offloaded events, a first incarnation's old-layout slices) if it is
    deleted (or expired) and no fork reads it any more."""
    now_s = int(table.clock())
    if _referenced(table, session_id, base, now_s) or _live(table, session_id, base, now_s):
        return
    request: dict[str, Any] = {
        "TableName": table.name, "ConsistentRead": True,
        "KeyConditionExpression": "pk = :pk AND sk BETWEEN :lo AND :hi",
        "ExpressionAttributeValues": {":pk": {"S": session_id},
                                      ":lo": {"S": lay.version_key(base + 1)},
                                      ":hi": {"S": lay.VERSION_PREFIX + "~"}},
        "ProjectionExpression": "pk, sk, ver, #s3, #del",
        "ExpressionAttributeNames": {"#s3": lay.OFFLOADED, "#del": lay.DELETED},
    }
    gone: Items = []
    ended = False
    while not ended:
        page = call("read session", session_id, table.client.query, **request)
        for item in page.get("Items", []):
            if lay.parse_version_key(item[lay.SK]["S"])[1] == 0 and (
                    lay.DELETED in item or lay.incarnation_of(item) != base):
                ended = True  # the incarnation's marker, or the next one's items
                break
            gone.append(item)
        if "LastEvaluatedKey" not in page:
            break
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    if base == 0:
        slices = {**request, "ExpressionAttributeValues": {
            ":pk": {"S": session_id}, ":lo": {"S": lay.EVENT_PREFIX},
            ":hi": {"S": lay.VERSION_PREFIX}}}
        slices.pop("ExclusiveStartKey", None)
        while True:
            page = call("read session", session_id, table.client.query, **slices)
            gone += [i for i in page.get("Items", []) if lay.is_event_item(i)]
            if "LastEvaluatedKey" not in page:
                break
            slices["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    _delete_items(table, session_id, gone)
    offloaded = [key for item in gone for key in item.get(lay.OFFLOADED, {}).get("SS", [])]
    if offloaded:
        call("delete offloaded events", session_id, table.offload().delete, offloaded)


def _referenced(table: Table, session_id: str, base: int, now_s: int) -> bool:
    """Whether a fork's (live) reference names the incarnation at ``base``."""
    request: dict[str, Any] = {
        "TableName": table.name, "ConsistentRead": True,
        "KeyConditionExpression": "pk = :pk AND begins_with(sk, :ref)",
        "ExpressionAttributeValues": {":pk": {"S": session_id},
                                      ":ref": {"S": lay.fork_ref_prefix(base)}},
    }
    while True:
        page = call("read fork references", session_id, table.client.query, **request)
        if any(not lay.expired(item, now_s) for item in page.get("Items", [])):
            return True
        if "LastEvaluatedKey" not in page:
            return False
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _live(table: Table, session_id: str, base: int, now_s: int) -> bool:
    """Whether the session's newest version item is a live one of the incarnation at
    ``base`` (not a deletion marker, not expired, not a later incarnation's)."""
    request: dict[str, Any] = {
        "TableName": table.name, "ConsistentRead": True, "ScanIndexForward": False,
        "KeyConditionExpression": "pk = :pk AND begins_with(sk, :v)",
        "ExpressionAttributeValues": {":pk": {"S": session_id},
                                      ":v": {"S": lay.VERSION_PREFIX}},
        "ProjectionExpression": "pk, sk, ver, #del, #lx, #ttl",
        "ExpressionAttributeNames": {"#del": lay.DELETED, "#lx": lay.LOGICAL_EXPIRY,
                                     "#ttl": lay.TTL_ATTRIBUTE},
        "Limit": 8,
    }
    while True:
        page = call("read session", session_id, table.client.query, **request)
        for item in page.get("Items", []):
            if lay.parse_version_key(item[lay.SK]["S"])[1] == 0:  # parts sort above it
                return (lay.DELETED not in item and not lay.expired(item, now_s)
                        and lay.incarnation_of(item) == base)
        if "LastEvaluatedKey" not in page:
            return False
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _delete_if(table: Table, what: str, session_id: str, item: dict[str, Any],
               condition: str, values: dict[str, Any],
               names: dict[str, str] | None = None) -> bool:
    """Delete ``item`` if ``condition`` still holds; ``False`` if it no longer does (a
    write landed since the item was read)."""
    try:
        table.client.delete_item(
            TableName=table.name, Key={lay.PK: item[lay.PK], lay.SK: item[lay.SK]},
            ConditionExpression=condition, ExpressionAttributeValues=values,
            **({"ExpressionAttributeNames": names} if names else {}))  # type: ignore[arg-type]
    except ClientError as error:
        if code(error) == "ConditionalCheckFailedException":
            return False
        raise store_error(what, session_id, error) from error
    except BotoCoreError as error:
        raise store_error(what, session_id, error) from error
    return True


def purge_expired(table: Table, session_id: str, now_s: int) -> None:
    """Delete the items of an expired session (each only if it is still expired, so a
    session created meanwhile under the same id loses nothing)."""
    offloaded: list[str] = []
    for item in _keys_of(table, session_id):
        if not lay.expired(item, now_s):
            continue
        if _delete_if(
                table, "clear an expired session", session_id, item,
                "(attribute_exists(#lx) AND #lx <= :now) OR "
                "(attribute_not_exists(#lx) AND #ttl <= :now)",
                {":now": {"N": str(now_s)}},
                {"#lx": lay.LOGICAL_EXPIRY, "#ttl": lay.TTL_ATTRIBUTE}):
            offloaded += item.get(lay.OFFLOADED, {}).get("SS", [])
    if offloaded:
        table.forget_uploads(offloaded)


def _keys_of(table: Table, session_id: str) -> Items:
    """Every item of the partition, newest first, projected to what a delete decides by
    (keys, expiry, markers, ownership, lineage, fork marks) and what it must clean up (S3
    keys)."""
    request: dict[str, Any] = {
        "TableName": table.name,
        "KeyConditionExpression": "pk = :pk",
        "ExpressionAttributeValues": {":pk": {"S": session_id}},
        "ProjectionExpression": "pk, sk, ver, #s3, #ttl, #lx, #del, #mv, #own, #lin, #tok",
        "ExpressionAttributeNames": {"#s3": lay.OFFLOADED, "#ttl": lay.TTL_ATTRIBUTE,
                                     "#lx": lay.LOGICAL_EXPIRY, "#del": lay.DELETED,
                                     "#mv": lay.MOVED, "#own": lay.OWNER,
                                     "#lin": lay.LINEAGE, "#tok": lay.TOKEN},
        "ScanIndexForward": False,
        "ConsistentRead": True,
    }
    items: Items = []
    while True:
        page = call("read session", session_id, table.client.query, **request)
        items.extend(page.get("Items", []))
        if "LastEvaluatedKey" not in page:
            return items
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _delete_items(table: Table, session_id: str, items: Items) -> None:
    """Delete ``items`` by key, unconditionally: whoever calls has already retired the
    incarnation they belong to."""
    _batch(table, session_id, [
        {"DeleteRequest": {"Key": {lay.PK: item[lay.PK], lay.SK: item[lay.SK]}}}
        for item in items])


def _batch(table: Table, session_id: str, requests: Items) -> None:
    """``BatchWriteItem``, 25 requests a call, unprocessed ones sent again."""
    for start in range(0, len(requests), 25):
        pending: Any = {table.name: requests[start:start + 25]}
        for attempt in range(5):
            result = call("delete session", session_id, table.client.batch_write_item,
                          RequestItems=pending)
            pending = result.get("UnprocessedItems") or {}
            if not pending:
                break
            time.sleep(RETRY_BACKOFF * 2 ** attempt)
        if pending:
            raise StoreError(f"session {session_id}: some items could not be deleted "
                             "(throttled); retry the delete")


def _lineage_of(items: Items, newest: dict[str, Any] | None) -> list[tuple[str, int]]:
    """The ``(session, base)`` pairs whose references the delete of the session's newest
    incarnation releases: its first version item's ``lin`` (a fork's; none otherwise). When
    the newest item is a deletion marker already (a delete that stopped half way, done
    again), the incarnation below it."""
    if newest is None:
        return []
    top = lay.parse_version_key(newest[lay.SK]["S"])[0]
    below = [i for i in items if lay.is_version_item(i) and lay.DELETED not in i
             and lay.parse_version_key(i[lay.SK]["S"])[1] == 0
             and lay.parse_version_key(i[lay.SK]["S"])[0] <= top]
    if not below:
        return []
    current = max(below, key=lambda i: lay.parse_version_key(i[lay.SK]["S"])[0])
    base = lay.incarnation_of(current)
    first = next((i for i in below if lay.parse_version_key(i[lay.SK]["S"])[0] == base + 1
                  and lay.LINEAGE in i), None)
    if first is None:
        return []
    return [(str(source), int(source_base))
            for source, source_base in json.loads(first[lay.LINEAGE]["S"])]
