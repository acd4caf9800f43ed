"""What a commit writes: the head item, the slice item(s), the conditional Put, the token;
and what a control write sends: the head's version check and the control record's Put.

Pure functions: no client here. ``dormant.stores.dynamodb`` sends what they build.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from typing import Any

from dormant._head import Head
from dormant.errors import StoreError
from dormant.events import Event
from dormant.stores._base import status_of
from dormant.stores._dynamodb import layout as lay
from dormant.stores._dynamodb.offload import Offloader

__all__ = [
    "Plan",
    "conditional_put",
    "control_put",
    "guard_puts",
    "head_at",
    "head_item",
    "plan_slice",
    "request_token",
]

#: A commit's slice items, and the events that go to S3 instead: (key, event JSON).
Plan = tuple[list[dict[str, Any]], list[tuple[str, str]]]


def head_item(written: Head, expires_at: int | None) -> dict[str, Any]:
    """The head as stored: its JSON plus the attributes conditions and ``list`` read."""
    item: dict[str, Any] = {
        lay.PK: {"S": written.session_id},
        lay.SK: {"S": lay.HEAD_SK},
        lay.VERSION: {"N": str(written.version)},
        lay.UPDATED: {"N": str(written.updated_at)},
        lay.STATUS: {"S": status_of(written)},
        lay.OWNER: {"S": lay.owner_key(written.principal, written.session_id)},
        lay.HEAD: {"S": written.model_dump_json()},
    }
    if expires_at is not None:
        item[lay.TTL_ATTRIBUTE] = {"N": str(expires_at)}
    size = lay.item_size(item)
    if size > lay.ITEM_LIMIT:
        raise StoreError(
            f"session {written.session_id}: its head (state and pending calls) is {size} "
            f"bytes, over DynamoDB's {lay.ITEM_LIMIT}-byte item limit; keep large data in "
            "events or tool results, not in session state", retryable=False)
    return item


def plan_slice(written: Head, events: Sequence[Event], head: dict[str, Any],
               expires_at: int | None, offloader: Offloader | None, offload_above: int | None,
               transaction_limit: int) -> Plan:
    """The items of this commit's slice, and the events that go to S3 instead.

    Chunking keeps any slice under the item limit; what would push the transaction past 100
    actions or ``transaction_limit`` bytes is offloaded, largest event first (and anything over
    ``offload_above`` bytes, when set).
    """
    if not events:
        return [], []
    sid = written.session_id
    first_seq = written.seq - len(events)
    texts = [event.model_dump_json() for event in events]
    sizes = [len(text.encode()) for text in texts]

    def key(index: int) -> str:
        if offloader is None:
            raise StoreError(
                f"session {sid}: this commit's events ({sum(sizes)} bytes) do not fit one "
                "DynamoDB transaction; configure an S3 bucket (DORMANT_BUCKET) for large "
                "events", retryable=False)
        return offloader.key(sid, first_seq + index, events[index].id)

    keys: dict[int, str] = {}
    if offload_above is not None and offloader is not None:
        keys = {i: key(i) for i, size in enumerate(sizes) if size > offload_above}
    budget = transaction_limit - lay.item_size(head)
    while True:
        shown = [offloader.pointer(keys[i]) if offloader and i in keys else text
                 for i, text in enumerate(texts)]
        items = lay.slice_items(sid, first_seq, shown, [keys[i] for i in sorted(keys)],
                                expires_at)
        if (len(items) < lay.TRANSACTION_ACTIONS
                and sum(lay.item_size(item) for item in items) <= budget):
            return items, [(keys[i], texts[i]) for i in sorted(keys)]
        rest = [i for i in range(len(texts)) if i not in keys]
        if not rest:
            raise StoreError(f"session {sid}: this commit has too many events for one "
                             "DynamoDB transaction, even with every event in S3",
                             retryable=False)
        largest = max(rest, key=lambda i: sizes[i])
        keys[largest] = key(largest)


def guard_puts(table: str, session_id: str, keys: Sequence[str], expires_at: int | None,
               now_s: int) -> list[dict[str, Any]]:
    """One conditional Put per once-only id: refused if the session already holds it (an
    expired guard, left for TTL to delete, no longer counts)."""
    puts: list[dict[str, Any]] = []
    for key in keys:
        item: dict[str, Any] = {lay.PK: {"S": session_id}, lay.SK: {"S": lay.guard_key(key)}}
        if expires_at is not None:
            item[lay.TTL_ATTRIBUTE] = {"N": str(expires_at)}
        puts.append({
            "TableName": table,
            "Item": item,
            "ConditionExpression": "attribute_not_exists(#pk) OR #ttl <= :now",
            "ExpressionAttributeNames": {"#pk": lay.PK, "#ttl": lay.TTL_ATTRIBUTE},
            "ExpressionAttributeValues": {":now": {"N": str(now_s)}},
        })
    return puts


def conditional_put(table: str, item: dict[str, Any], expected_version: int) -> dict[str, Any]:
    """The head's Put: version ``expected_version`` must be current (0: no head at all; an
    expired head is cleared first, see ``DynamoDBStore.append``). A refusal returns the stored
    head (``ALL_OLD``), so its version needs no second read."""
    put: dict[str, Any] = {
        "TableName": table,
        "Item": item,
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        "ExpressionAttributeNames": {"#v": lay.VERSION},
    }
    if expected_version == 0:
        put["ConditionExpression"] = "attribute_not_exists(#v)"
    else:
        put["ConditionExpression"] = "#v = :v"
        put["ExpressionAttributeValues"] = {":v": {"N": str(expected_version)}}
    return put


def head_at(table: str, session_id: str, version: int, now_s: int) -> dict[str, Any]:
    """A ``ConditionCheck`` that the session's head is at ``version`` (0: there is no head,
    or only an expired one TTL has not deleted yet)."""
    check: dict[str, Any] = {
        "TableName": table,
        "Key": {lay.PK: {"S": session_id}, lay.SK: {"S": lay.HEAD_SK}},
    }
    if version == 0:
        check["ConditionExpression"] = "attribute_not_exists(#pk) OR #ttl <= :now"
        check["ExpressionAttributeNames"] = {"#pk": lay.PK, "#ttl": lay.TTL_ATTRIBUTE}
        check["ExpressionAttributeValues"] = {":now": {"N": str(now_s)}}
    else:
        check["ConditionExpression"] = "#v = :v"
        check["ExpressionAttributeNames"] = {"#v": lay.VERSION}
        check["ExpressionAttributeValues"] = {":v": {"N": str(version)}}
    return check


def control_put(table: str, item: dict[str, Any], rev: int, now_s: int) -> dict[str, Any]:
    """The control record's Put: it replaces revision ``rev - 1`` (for revision 1: no record,
    or only an expired one)."""
    put: dict[str, Any] = {"TableName": table, "Item": item}
    if rev <= 1:
        put["ConditionExpression"] = "attribute_not_exists(#pk) OR #ttl <= :now"
        put["ExpressionAttributeNames"] = {"#pk": lay.PK, "#ttl": lay.TTL_ATTRIBUTE}
        put["ExpressionAttributeValues"] = {":now": {"N": str(now_s)}}
    else:
        put["ConditionExpression"] = "#rev = :prev AND (attribute_not_exists(#ttl) OR #ttl > :now)"
        put["ExpressionAttributeNames"] = {"#rev": lay.REV, "#ttl": lay.TTL_ATTRIBUTE}
        put["ExpressionAttributeValues"] = {":prev": {"N": str(rev - 1)},
                                            ":now": {"N": str(now_s)}}
    return put


def request_token(table: str, written: Head, expected_version: int, round_: int) -> str:
    """A ClientRequestToken stable across this commit's retries, distinct for any other."""
    seed = (f"{table}|{written.session_id}|{expected_version}|{written.last_event}|"
            f"{written.seq}|{written.updated_at}|{round_}")
    return str(uuid.UUID(bytes=hashlib.sha256(seed.encode()).digest()[:16]))
