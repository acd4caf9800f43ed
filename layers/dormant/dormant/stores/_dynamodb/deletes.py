"""Deleting a session, and keeping what its forks still read.

A delete retires the session at once, in a bounded number of requests whatever its length:
the head read (one ``Query`` with a small ``Limit``), the references forks hold on its
incarnation and its fork mark, then one transaction: a deletion marker takes the next
version's key (so a commit in flight is refused and a later session under the id numbers its
items after it), the head goes (unless a fork reads it) and so does the control record. The
marker carries the session's owner key and a ``deleted`` status while the rest remains, so
``list`` (which keeps each session's newest index entry) no longer shows the session.

The rest of the partition goes by :func:`purge` steps, each bounded (:data:`PURGE_PAGE`
items read, at most as many deleted), each idempotent, each returning the cursor of the next:
on AWS the store hands them to the webhook queue (``DynamoDBStore.purge_later``), one record
per step; without one they run inline. Items a fork reads (its reference is in the
partition, see ``layout``) stay, out of ``list``'s index; a purge that meets a retired fork's
first version item releases its references on its sources first and purges those too, so the
last fork released takes a deleted incarnation's kept items with it. :func:`purge_expired`
clears an expired session's items before a new one is written under its id.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from dormant._ids import now_ms
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
    query_all,
    store_error,
)
from dormant.stores._dynamodb.window import WindowEstimator
from dormant.stores._dynamodb.writes import Known

__all__ = ["PURGE_PAGE", "PurgeLater", "delete", "purge", "purge_all", "purge_expired"]

#: Reads of the partition a delete makes before giving up when commits keep landing.
_DELETE_ATTEMPTS = 3


#: Items a background purge step reads (and deletes, at most) at once: 4 ``BatchWriteItem``.
PURGE_PAGE = 100

#: Where a delete hands the rest of a retired partition: called with the session id and the
#: cursor of the next purge step (None: from the start). None: the purge runs inline.
PurgeLater = Callable[[str, "str | None"], None]


def delete(table: Table, memo: Lru[Known], window: WindowEstimator, session_id: str,
           later: PurgeLater | None = None) -> bool:
    """``DynamoDBStore.delete``: read the head (one ``Query`` with a small ``Limit``), the
    references forks hold on its incarnation and its fork mark, and retire it in one
    transaction (the marker, or an old layout's conditioned delete); read again and start
    over when a commit or a fork landed meanwhile. The rest of the partition goes by
    :func:`purge` steps: handed to ``later``, or run here. Whether the session existed."""
    now_s = int(table.clock())
    for _ in range(_DELETE_ATTEMPTS):
        head, newest = _newest(table, session_id)
        kept: dict[str, Any] | None = None
        if head is not None and lay.is_legacy_head(head):
            existed = not lay.expired(head, now_s)
            if not _delete_if(table, "delete", session_id, head, "ver = :v",
                              {":v": head[lay.VERSION]}):
                continue  # a commit landed meanwhile
        elif newest is not None and lay.DELETED not in newest:
            existed = not lay.expired(newest, now_s)
            base = lay.incarnation_of(newest)
            holds = lay.fork_holds(_references(table, session_id, base), now_s)
            mark = call("read the fork mark", session_id, table.client.get_item,
                        TableName=table.name, ConsistentRead=True,
                        Key={lay.PK: {"S": session_id},
                             lay.SK: {"S": lay.fork_mark_key(base)}}).get("Item")
            kept = _mark_deleted(table, session_id, newest, now_s,
                                 keep=lay.held(newest, holds, now_s), mark=mark)
            if kept is None:
                continue
            offloaded = newest.get(lay.OFFLOADED, {}).get("SS", [])
            if offloaded and not lay.held(newest, holds, now_s):  # its item went just now
                call("delete offloaded events", session_id, table.offload().delete,
                     offloaded)
        else:
            existed, kept = False, newest
        if later is not None:
            later(session_id, None)
        else:
            purge_all(table, session_id)
        base_key = lay.parse_version_key(kept[lay.SK]["S"])[0] if kept is not None else 0
        memo.put(session_id, Known(version=0, base=base_key))
        window.forget(session_id)
        return existed
    raise StoreError(f"session {session_id} kept changing while being deleted; retry")


def _newest(table: Table, session_id: str) -> tuple[dict[str, Any] | None,
                                                   dict[str, Any] | None]:
    """The old layout's ``~head`` (if any) and the newest version item (parts skipped): a
    descending ``Query`` with a small ``Limit``, paged on only past a big payload's parts."""
    request: dict[str, Any] = {
        "TableName": table.name, "ConsistentRead": True, "ScanIndexForward": False,
        "KeyConditionExpression": "pk = :pk AND sk >= :v",
        "ExpressionAttributeValues": {":pk": {"S": session_id},
                                      ":v": {"S": lay.VERSION_PREFIX}},
        "ProjectionExpression": _KEYS,
        "ExpressionAttributeNames": dict(_NAMES),
        "Limit": 8,
    }
    head: dict[str, Any] | None = None
    while True:
        page = call("read session", session_id, table.client.query, **request)
        for item in page.get("Items", []):
            if lay.head_sk_is(item):
                head = item
            elif lay.is_version_item(item) and lay.parse_version_key(item[lay.SK]["S"])[1] == 0:
                return head, item
        if "LastEvaluatedKey" not in page:
            return head, None
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _references(table: Table, session_id: str, base: int | None = None) -> Items:
    """The partition's fork references (those to the incarnation at ``base``, or all) and
    fork marks: a ``Query`` of the ``#f#`` keys, as many as forks were made of it."""
    prefix = lay.FORK_PREFIX if base is None else lay.fork_ref_prefix(base)
    request: dict[str, Any] = {
        "TableName": table.name, "ConsistentRead": True,
        "KeyConditionExpression": "pk = :pk AND begins_with(sk, :ref)",
        "ExpressionAttributeValues": {":pk": {"S": session_id}, ":ref": {"S": prefix}},
    }
    return query_all(table, "read fork references", session_id, request)


def purge_all(table: Table, session_id: str) -> None:
    """Every :func:`purge` step of the partition, here (no background to hand them to)."""
    cursor = purge(table, session_id, None, None)
    while cursor is not None:
        cursor = purge(table, session_id, cursor, None)


def purge(table: Table, session_id: str, after: str | None,
          later: PurgeLater | None) -> str | None:
    """One bounded step of clearing a partition's retired items: read the fork references
    and the head, then up to :data:`PURGE_PAGE` items in key order from ``after``, and delete
    those of retired incarnations no fork reads (kept ones are written again without
    ``own``, out of ``list``). A retired fork's first version item releases its references
    on its sources first (and purges them: ``later``, or here). The cursor of the next step,
    or None when the partition holds nothing more to clear. Idempotent: a step run twice, or
    cut half way, deletes nothing twice that matters and leaves nothing behind."""
    now_s = int(table.clock())
    refs = _references(table, session_id)
    holds = lay.fork_holds(refs, now_s)
    head, newest = _newest(table, session_id)
    live = (newest is not None and lay.DELETED not in newest) or (
        newest is None and head is not None and lay.is_legacy_head(head))
    bound = 0 if newest is None else (
        lay.incarnation_of(newest) if live else lay.parse_version_key(newest[lay.SK]["S"])[0])
    if live and bound == 0:
        return None  # one live incarnation: nothing retired
    request: dict[str, Any] = {
        "TableName": table.name, "ConsistentRead": True,
        "KeyConditionExpression": "pk = :pk", "Limit": PURGE_PAGE,
        "ExpressionAttributeValues": {":pk": {"S": session_id}},
        "ProjectionExpression": _KEYS, "ExpressionAttributeNames": dict(_NAMES),
    }
    if after is not None:
        request["ExclusiveStartKey"] = {lay.PK: {"S": session_id}, lay.SK: {"S": after}}
    page = call("read session", session_id, table.client.query, **request)
    retired = [i for i in page.get("Items", []) if _retired(i, bound, live, now_s)]
    lineages = [i for i in retired if lay.LINEAGE in i]
    if after is None and newest is not None and not live and lay.LINEAGE in newest:
        lineages.append(newest)  # a fork deleted at its first version: its marker says
    for item in lineages:
        for source, source_base in json.loads(item[lay.LINEAGE]["S"]):
            call("release a fork's reference", str(source), table.client.delete_item,
                 TableName=table.name,
                 Key={lay.PK: {"S": str(source)},
                      lay.SK: {"S": lay.fork_ref_key(int(source_base), session_id)}})
            if later is not None:
                later(str(source), None)
            else:
                purge_all(table, str(source))
    gone = [i for i in retired if not lay.held(i, holds, now_s)]
    _delete_items(table, session_id, gone)
    offloaded = [key for item in gone for key in item.get(lay.OFFLOADED, {}).get("SS", [])]
    if offloaded:
        call("delete offloaded events", session_id, table.offload().delete, offloaded)
    shown = [i for i in retired if lay.OWNER in i and lay.is_version_item(i)
             and lay.held(i, holds, now_s)]
    if shown:
        _hide(table, session_id, shown)
    if "LastEvaluatedKey" in page:
        return str(page["LastEvaluatedKey"][lay.SK]["S"])
    if newest is not None and not live and lay.OWNER in newest:
        _unlist(table, session_id, newest)
    return None


def _retired(item: dict[str, Any], bound: int, live: bool, now_s: int) -> bool:
    """Whether ``item`` belongs to a retired incarnation: version items (and parts, and
    markers) below ``bound`` (the newest marker's key, or the live incarnation's offset),
    a first incarnation's old slices once it is retired, fork marks of retired
    incarnations, expired references; with no live incarnation, the guards, the control
    record and an old layout's head too."""
    sk = item[lay.SK]["S"]
    if lay.is_version_item(item):
        return lay.parse_version_key(sk)[0] < bound
    if sk.startswith(lay.FORK_PREFIX):
        if lay.is_fork_ref(item):
            return lay.expired(item, now_s)  # a live one goes with its fork's delete
        return int(sk[len(lay.FORK_PREFIX):]) < bound
    if lay.is_event_item(item):
        return bound > 0 or not live
    return not live


def _unlist(table: Table, session_id: str, marker: dict[str, Any]) -> None:
    """The purge is over: the marker leaves ``list``'s index (written again without the
    owner key it carried meanwhile, to hide its session's older entries)."""
    item = {k: v for k, v in marker.items()
            if k in (lay.PK, lay.SK, lay.DELETED, lay.TTL_ATTRIBUTE)}
    try:
        table.client.put_item(TableName=table.name, Item=item,
                              ConditionExpression="attribute_exists(#del)",
                              ExpressionAttributeNames={"#del": lay.DELETED})
    except ClientError as error:
        if code(error) != "ConditionalCheckFailedException":
            raise store_error("delete", session_id, error) from error
    except BotoCoreError as error:
        raise store_error("delete", session_id, error) from error


#: What a delete and a purge read of an item: keys, expiry, markers, ownership, lineage, fork
#: marks, S3 keys.
_KEYS = "pk, sk, ver, #s3, #ttl, #lx, #del, #mv, #own, #lin, #tok"
_NAMES = {"#s3": lay.OFFLOADED, "#ttl": lay.TTL_ATTRIBUTE, "#lx": lay.LOGICAL_EXPIRY,
          "#del": lay.DELETED, "#mv": lay.MOVED, "#own": lay.OWNER, "#lin": lay.LINEAGE,
          "#tok": lay.TOKEN}


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
                              lay.DELETED: {"N": "1"},
                              lay.UPDATED: {"N": str(now_ms())}}  # when (``list`` re-asks)
    if lay.LINEAGE in newest and not keep:  # a fork's first item: the purge releases these
        marker[lay.LINEAGE] = newest[lay.LINEAGE]
    if lay.OWNER in newest:  # the session's newest entry in ``list``'s index, until purged
        marker.update({lay.OWNER: newest[lay.OWNER], lay.STATUS: {"S": "deleted"}})
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
    actions.append({"Delete": {"TableName": table.name,  # no stop or pause outlives it
                               "Key": {lay.PK: newest[lay.PK], lay.SK: {"S": lay.CONTROL_SK}}}})
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
    return query_all(table, "read session", session_id, request)


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
