"""How a session is laid out in one DynamoDB table.

One partition per session (``pk`` = session id). The sort key puts the session's ledger in
order and its head last, its control record just before the head, so one descending ``Query``
with a ``Limit`` reads the head, then the control record, then the newest events::

    pk=session_x  sk=e#000000000000            n=4  ev=[{...}, {...}, {...}, {...}]
    pk=session_x  sk=e#000000000004#000  parts=3  n=2  ev=<first 390 KB of the slice>
    pk=session_x  sk=e#000000000004#001  parts=3       ev=<next 390 KB>
    pk=session_x  sk=e#000000000004#002  parts=3       ev=<the rest>
    pk=session_x  sk=~ctl                rev=2  ctl={"rev":2,"stop":{...},"pause":2,...}
    pk=session_x  sk=~head               ver=3  ua=...  st=active  own=p:alice  head={...}
    pk=session_x  sk=#o#m:msg-42       (a guard: message id msg-42 landed)

Guards (``#o#`` + a once-only id: ``m:<message id>``, ``r:<retry id>``) are written, with a
condition that none exists, in the same transaction as the slice that carries the id, so an id
lands once for the session's life. ``#`` sorts before ``e``: a descending query meets them
only after the whole ledger, so windowed reads never touch them.

Each commit writes one *slice* item holding its new events (a JSON array, keyed by the position
of its first event), so a turn's write is the new events and nothing else, and the per-item
1 KB write rounding is paid once per commit rather than once per event. A slice over the item
budget is split into parts (UTF-8 safe) written in the same transaction; an event too large for
the transaction is replaced in the array by ``{"$s3": {"b": bucket, "k": key}}`` and stored in
S3. ``own`` (the owner key) and ``ua`` (updated at, ms) feed the ``by_owner`` index that
``list`` reads; only head items carry them, so the index stays small.

The control item (``~ctl``; ``~head`` > ``~ctl`` > every ``e#`` key, so a descending query
meets it second, right after the head) is the session's control record: what other requests
(stop, steer, pause) ask of the turn running in another process. ``rev`` (N) is its revision,
``ctl`` the record's JSON, ``expires_at`` set like the head's when the store has a TTL (counted
from the record's last write; an expired record reads, and is overwritten, as none). It stays
small (a stop, a pause and a short steer: about 300 bytes; at its fullest, eight steers, about
1.3 KB: one read unit either way) because a running turn reads it about once a second.

That poll is a ``GetItem`` with ``ConsistentRead=True`` (1 read unit, twice an eventually
consistent read's): an eventually consistent read may return the record as it was before the
latest write, so a stop or a steer could go unseen for a while, and the turn would run on
(calling the model, running tools) past what was asked of it. Writers replace the record whole
in one ``TransactWriteItems``: a ``ConditionCheck`` that the head is still at the version the
writer decided on (``ver = :v``; ``attribute_not_exists(pk)`` for version 0, no session yet)
and a ``Put`` conditioned on the revision it replaces (``rev = :prev``;
``attribute_not_exists(pk)`` for revision 1). Commits never write it, so a turn's transaction
does not grow, and ``load``'s one query returns it with the head (the window estimator's
``Limit`` keeps a slot for it). It carries no ``own``/``ua``, so ``list``'s index never sees
it; ``delete`` removes it with the rest of the partition.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CHUNK_BYTES",
    "CONTROL_SK",
    "HEAD_SK",
    "INDEX_NAME",
    "ITEM_LIMIT",
    "TRANSACTION_ACTIONS",
    "TRANSACTION_LIMIT",
    "TTL_ATTRIBUTE",
    "Slice",
    "assemble",
    "control_item",
    "head_sk_is",
    "is_control_item",
    "item_size",
    "owner_key",
    "principal_of",
    "slice_items",
    "slice_key",
    "split_utf8",
    "table_definition",
]

PK = "pk"
SK = "sk"
#: The head's sort key: ``~`` sorts after every ``e#`` event key, so the head comes first in a
#: descending query.
HEAD_SK = "~head"
#: The control record's sort key: sorts right before the head (``~head`` > ``~ctl``) and after
#: every event key, so a descending query reads it second.
CONTROL_SK = "~ctl"
EVENT_PREFIX = "e#"
GUARD_PREFIX = "#o#"
#: Attribute holding the TTL (epoch seconds). Enable TTL on it (the template does).
TTL_ATTRIBUTE = "expires_at"
INDEX_NAME = "by_owner"
OWNER = "own"
UPDATED = "ua"
VERSION = "ver"
STATUS = "st"
HEAD = "head"
EVENTS = "ev"
COUNT = "n"
PARTS = "parts"
OFFLOADED = "s3"
#: The control item's revision (N) and its JSON (S).
REV = "rev"
CONTROL = "ctl"
#: Owner keys of sessions without a principal are spread over this many index partitions, so
#: a busy principal-less app does not funnel every commit's index write into one partition.
UNOWNED_SHARDS = 16

#: DynamoDB's item size limit as moto enforces it (AWS allows 409,600 bytes: this is stricter).
ITEM_LIMIT = 400_000
#: Bytes of slice text per item: the item limit minus room for keys and attribute names.
CHUNK_BYTES = 390_000
#: TransactWriteItems limits: actions per call, and total bytes (4 MB; moto does not enforce
#: it, so the store does, with headroom for request framing).
TRANSACTION_ACTIONS = 100
TRANSACTION_LIMIT = 4_000_000

KEY_SCHEMA: list[dict[str, str]] = [
    {"AttributeName": PK, "KeyType": "HASH"},
    {"AttributeName": SK, "KeyType": "RANGE"},
]


def table_definition() -> dict[str, Any]:
    """The table as ``create_table`` (and the SAM template's ``AWS::DynamoDB::Table``) declares
    it: key schema, attribute definitions, the ``by_owner`` index, on-demand billing."""
    return {
        "AttributeDefinitions": [
            {"AttributeName": PK, "AttributeType": "S"},
            {"AttributeName": SK, "AttributeType": "S"},
            {"AttributeName": OWNER, "AttributeType": "S"},
            {"AttributeName": UPDATED, "AttributeType": "N"},
        ],
        "KeySchema": [dict(k) for k in KEY_SCHEMA],
        "GlobalSecondaryIndexes": [{
            "IndexName": INDEX_NAME,
            "KeySchema": [
                {"AttributeName": OWNER, "KeyType": "HASH"},
                {"AttributeName": UPDATED, "KeyType": "RANGE"},
            ],
            "Projection": {
                "ProjectionType": "INCLUDE",
                "NonKeyAttributes": [VERSION, STATUS, TTL_ATTRIBUTE],
            },
        }],
        "BillingMode": "PAY_PER_REQUEST",
    }


def owner_key(principal: str | None, session_id: str) -> str:
    """The ``by_owner`` partition of a session's head."""
    if principal is not None:
        return "p:" + principal
    shard = hashlib.sha256(session_id.encode()).digest()[0] % UNOWNED_SHARDS
    return f"-#{shard}"


def principal_of(owner: str) -> str | None:
    return owner[2:] if owner.startswith("p:") else None


def slice_key(first_seq: int, part: int | None = None) -> str:
    key = f"{EVENT_PREFIX}{first_seq:012d}"
    return key if part is None else f"{key}#{part:03d}"


def guard_key(key: str) -> str:
    """The sort key of the guard item of a once-only id."""
    return GUARD_PREFIX + key


def is_event_item(item: dict[str, Any]) -> bool:
    return bool(item.get(SK, {}).get("S", "").startswith(EVENT_PREFIX))


def head_sk_is(item: dict[str, Any]) -> bool:
    return bool(item.get(SK, {}).get("S") == HEAD_SK)


def is_control_item(item: dict[str, Any]) -> bool:
    return bool(item.get(SK, {}).get("S") == CONTROL_SK)


def control_item(session_id: str, rev: int, body: str,
                 expires_at: int | None) -> dict[str, Any]:
    """The control record as stored: its revision (for the write condition) and its JSON."""
    item: dict[str, Any] = {
        PK: {"S": session_id},
        SK: {"S": CONTROL_SK},
        REV: {"N": str(rev)},
        CONTROL: {"S": body},
    }
    if expires_at is not None:
        item[TTL_ATTRIBUTE] = {"N": str(expires_at)}
    return item


def parse_slice_key(sk: str) -> tuple[int, int | None]:
    """``(first_seq, part)`` of an event item's sort key (part None: not chunked)."""
    body = sk[len(EVENT_PREFIX):]
    seq, _, part = body.partition("#")
    return int(seq), (int(part) if part else None)


def item_size(item: dict[str, Any]) -> int:
    """An item's size as DynamoDB counts it (names + values), for the string and number
    attributes this layout uses; lists of strings count their elements."""
    total = 0
    for name, value in item.items():
        total += len(name.encode())
        if "S" in value:
            total += len(value["S"].encode())
        elif "N" in value:
            total += len(value["N"]) // 2 + 2
        elif "SS" in value:
            total += sum(len(s.encode()) for s in value["SS"])
        else:
            total += len(json.dumps(value))
    return total


def split_utf8(text: str, limit: int) -> list[str]:
    """``text`` cut into pieces of at most ``limit`` UTF-8 bytes, never inside a character."""
    data = text.encode()
    pieces: list[str] = []
    start = 0
    while start < len(data):
        end = min(start + limit, len(data))
        while end < len(data) and data[end] & 0xC0 == 0x80:  # continuation byte: back off
            end -= 1
        pieces.append(data[start:end].decode())
        start = end
    return pieces or [""]


def slice_items(session_id: str, first_seq: int, texts: Sequence[str], offloaded: Sequence[str],
                expires_at: int | None, chunk_bytes: int = CHUNK_BYTES) -> list[dict[str, Any]]:
    """The item(s) holding one commit's events (``texts``: each event's JSON, or its S3
    pointer)."""
    body = "[" + ",".join(texts) + "]"
    pieces = [body] if len(body.encode()) <= chunk_bytes else split_utf8(body, chunk_bytes)
    items: list[dict[str, Any]] = []
    for index, piece in enumerate(pieces):
        part = index if len(pieces) > 1 else None
        item: dict[str, Any] = {
            PK: {"S": session_id},
            SK: {"S": slice_key(first_seq, part)},
            EVENTS: {"S": piece},
        }
        if index == 0:
            item[COUNT] = {"N": str(len(texts))}
            if offloaded:
                item[OFFLOADED] = {"SS": list(offloaded)}
        if part is not None:
            item[PARTS] = {"N": str(len(pieces))}
        if expires_at is not None:
            item[TTL_ATTRIBUTE] = {"N": str(expires_at)}
        items.append(item)
    return items


@dataclass
class Slice:
    """One commit's events as read back: position of the first, and the raw JSON array."""

    first_seq: int
    parts: int = 1
    pieces: dict[int, str] = field(default_factory=dict)
    expired: bool = False

    @property
    def complete(self) -> bool:
        return len(self.pieces) == self.parts

    def decoded(self) -> list[Any]:
        return list(json.loads("".join(self.pieces[i] for i in range(self.parts))))


def assemble(items: Sequence[dict[str, Any]], now_s: int) -> list[Slice]:
    """Event items (any order) grouped into slices, oldest first; expired items mark their
    slice expired."""
    slices: dict[int, Slice] = {}
    for item in items:
        first, part = parse_slice_key(item[SK]["S"])
        entry = slices.setdefault(first, Slice(first))
        if part is not None:
            entry.parts = int(item[PARTS]["N"])
        entry.pieces[part or 0] = item[EVENTS]["S"]
        if expired(item, now_s):
            entry.expired = True
    return [slices[k] for k in sorted(slices)]


def expired(item: dict[str, Any], now_s: int) -> bool:
    """TTL deletion is lazy: an item past its ``expires_at`` still reads until it is removed."""
    stamp = item.get(TTL_ATTRIBUTE)
    return stamp is not None and int(stamp["N"]) <= now_s
