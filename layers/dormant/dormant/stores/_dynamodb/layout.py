"""How a session is laid out in one DynamoDB table.

One partition per session (``pk`` = session id). **Each commit writes one item, keyed by the
version it creates**; that item holds the commit's new events *and* the session head as of that
version, so the newest version item *is* the head::

    pk=session_x  sk=#o#r:retry-7        (a guard: retry id retry-7 landed)
    pk=session_x  sk=e#000000000000      n=4  ev=[...]       (old layout: a slice, read only)
    pk=session_x  sk=e#v0000000001  b=<payload: events 0-3, the whole head>  own=-#3 ua=...
    pk=session_x  sk=e#v0000000002  b=<payload: events 4-7, the head's delta, "l">  ua=...
    pk=session_x  sk=e#v0000000003  b=<the payload's first 390 KB>  parts=2  own=... s3=[...]
    pk=session_x  sk=e#v0000000003#001  b=<the rest>
    pk=session_x  sk=~ctl                rev=2  ctl={"rev":2,"stop":{...},"pause":2,...}
    pk=session_x  sk=~head               ver=3  moved=1   (old layout's head, once migrated)

Why one item: a write costs 1 unit per started KB of a ``PutItem``, and 2 per started KB of
*each* item of a transaction. The old layout (a ``~head`` item of 1-2 KB rewritten on every
commit, plus one slice item, plus a guard for the minted message id) made an ordinary turn a
3-item transaction of 6-8 units, and moved the head's index entry (2 index writes). Now an
ordinary turn is one conditional ``PutItem`` of about 250 bytes: **1 write unit**, and no
index write (the index is sparse, see ``list`` below; ``bench/dynamodb_cost.py`` prices
both).

Concurrency is the key: a commit at expected version ``v`` writes ``e#v<v+1>`` with
``attribute_not_exists(pk)``; two writers at the same version write the same key, exactly one
wins, and the loser gets the winner's item back (``ALL_OLD``), so its version needs no second
read. ``e#v`` sorts after every old-layout slice (``e#0…``) and before ``~ctl``/``~head``, so
one descending ``Query`` with a ``Limit`` meets the (old) head and the control record first,
then the newest version items, then old slices. The cleanup function's stream filter
(``template.yaml``) passes the removals of items whose ``s3`` names offloaded objects, in
either layout.

The payload (``b``, binary) is ``dormant.stores._dynamodb.codec``'s compact encoding: short
events (no repeated invocation id, no default values, times as small differences from the
item's ``ua``), DEFLATE with a preset dictionary when smaller. Its first byte names its format:
items written by earlier releases (format 1) read as they were written. The head is stored
whole only in *checkpoint* items: the first, whenever the chain of deltas behind it would reach
:data:`CHECKPOINT_EVERY` items, and whenever the writer does not hold the previous head (this
process did not read or write it); other items carry the head's *delta* against a fixed
prediction from the previous head and the item's events, which for an ordinary turn is empty.
So the head does not grow the items with history: its windows (turn starts, commit positions,
message and invocation digests: about 450 bytes) are stored once per checkpoint, and a load
rebuilds the head from the newest checkpoint forward (at most ``CHECKPOINT_EVERY`` items, which
a windowed read's ``Limit`` always covers). The period trades the two reads: a full-history
read pays ~450 bytes per ``CHECKPOINT_EVERY`` turns, a windowed one reads up to
``CHECKPOINT_EVERY`` items (~240 bytes each) whatever its window. What must fit DynamoDB's
limits is judged on the events' JSON, uncompressed: a payload over an item is split into parts
(``#001``…, bytes, written in the same transaction as the version item); an event too large for
the transaction goes to S3 (``s3`` names its key, for ``delete`` and the cleanup function) and
the payload keeps ``{"$s3": {"b", "k"}}``.

Guards (``#o#`` + a once-only id: ``m:<message id>``, ``r:<retry id>``) are written, with a
condition that none exists, in the same transaction as the version item carrying the id, so
an id lands once for the session's life. Not for ids in the shape dormant mints
(``msg_<16 hex>_<hex>``: a message sent without an id): no client can have sent that id
before it was minted, so what keeps it once is the version key and the
head's message digests; and should a client later echo it back past the digest window,
``has_once`` finds it in the version items' events (a read of the partition: dear, but only
for that echo). That is what keeps an ordinary turn one item.

``list``: the ``by_owner`` index (keys ``own``, owner, and ``ua``, updated at in ms) is
sparse. Every version item carries ``ua`` (and ``st`` when not ``active``), but ``own`` only
the session's first, and the first whose ``ua`` is :data:`LIST_REFRESH_MS` past the last
entry's; the others' payloads say when that entry was written (``"l"``: ms before their own
``ua``; format 1 items carry it as an attribute, ``li``), so the next writer knows when one is
due. An ordinary turn writes no index entry (items of earlier releases all carry ``own``: more
entries, read the same way). ``list`` reads the index newest first and, per session met, its
newest item (version from the key or ``ver``, status ``st``, time ``ua``, expiry ``lx``, the
deletion marker ``del``): what it shows is the head's, never an entry's. No session changed
later than its newest entry's ``ua`` plus ``LIST_REFRESH_MS``, so ``list`` stops once it holds
``limit`` sessions newer than the entry it is at plus that: newest first, exact. An old
layout's ``~head`` (rewritten on every commit) is its own entry and lists as it is.

The control item (``~ctl``) is what other requests (stop, steer, pause) ask of the turn running
in another process. ``rev`` (N) is its revision, ``ctl`` the record's JSON, ``expires_at``
counted from its last write. It stays small (about 300 bytes; at its fullest, eight steers,
about 1.3 KB: one read unit) because a running turn reads it about once a second, with a
strongly consistent ``GetItem``. Writers replace it in one ``TransactWriteItems``: a ``Put``
conditioned on the revision it replaces and ``ConditionCheck``s that the head is still at the
writer's version ``v``: ``e#v<v+1>`` does not exist and, for ``v > 0``, ``e#v<v>`` does (an
old-layout session: its ``~head`` has ``ver = v``). Commits never write it.

TTL (optional): ``expires_at`` is the physical deletion time; ``lx`` the logical one, what
reads honour (an item past ``lx`` reads as gone). Version items get ``expires_at = lx +
ttl/4``, and a writer starts a new checkpoint when its chain's checkpoint is older than
``ttl/4``: so the items a live head is rebuilt from are never deleted under it.

Deleting a session puts a *deletion marker* on the key after its newest version item (in one
transaction with that item's removal), then removes the rest: a commit still in flight at the
deleted version is refused, and a session created again under the id (after a delete, or
after its predecessor expired) numbers its items after the old ones, so leftovers TTL has not
removed yet never mix in. Such an incarnation's items carry ``ver`` (the head's version; the
key minus ``ver`` is the offset).

Forks (``dormant._fork``) copy nothing. A fork's first version item is a checkpoint whose head
names, in ``lineage``, the incarnations it reads (each segment as the store wrote it also
carries ``base``, that incarnation's key offset); the item carries ``lin`` (S, the JSON list of
``[session, base]`` pairs) so ``delete`` knows, from the keys it reads anyway, which references
to release. Each session of the lineage holds a *reference item* per fork that reads it::

    pk=session_x  sk=#f#0000000000#session_y  ver=4   (fork session_y reads versions 1-4)

    pk=session_x  sk=#f#0000000000            tok=<random>  (a fork mark, see below)

``#f#`` sorts below the guards and every event key, so a descending load never reaches it
(only a whole-partition read does, as it reaches the guards). The fork's transaction writes
its version item (create-only), the references, a ``ConditionCheck`` that each segment's last
version item is still there, and, on the session it forks from (the *anchor*), checks that its
head is still the newest item (``e#v<base+v>`` there, ``e#v<base+v+1>`` absent) and a fresh
*fork mark* of that incarnation (``#f#<base>``, a random ``tok``): a delete's marker
transaction checks that the mark is as the delete read it (the same ``tok``, or none), so a fork
landing between a delete's read and its marker refuses the marker, and the delete looks again
(only ``Put``, ``Delete`` and ``ConditionCheck``: the functions' role has no ``UpdateItem``). A
delete that finds references keeps the version items (and parts, and S3 objects, and an old
layout's slices) they read, out of sight: the deletion marker still takes the next key (the id
reads as deleted, is free at once, and a new session numbers its items after it), and the kept
items are written again without ``own``, so ``list`` no longer sees them. Deleting a fork
deletes its references; the last reference to a deleted incarnation takes that incarnation's
kept items with it.

Sessions written by the old layout (a ``~head`` item with the head's JSON, ``e#<position>``
slices of JSON events) load as before. Their next commit migrates them: one transaction puts
the first version item (a checkpoint) and replaces ``~head`` by a small tombstone (``moved``;
conditioned on the old head still at the version read; its ``ver`` is the next version, so an
old writer still running, whose Put is conditioned on ``ver`` = the version it read, is
refused). Old slices and guards stay where they are and are read as before.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CHECKPOINT_EVERY",
    "CHUNK_BYTES",
    "CONTROL_SK",
    "HEAD_SK",
    "INDEX_NAME",
    "ITEM_LIMIT",
    "LIST_REFRESH_MS",
    "TRANSACTION_ACTIONS",
    "TRANSACTION_LIMIT",
    "TTL_ATTRIBUTE",
    "Slice",
    "assemble",
    "control_item",
    "fork_mark_key",
    "fork_ref_base",
    "fork_ref_key",
    "fork_ref_prefix",
    "head_sk_is",
    "incarnation_of",
    "is_below_versions",
    "is_control_item",
    "is_fork_ref",
    "is_legacy_head",
    "is_minted",
    "is_version_item",
    "item_size",
    "owner_key",
    "parse_version_key",
    "principal_of",
    "slice_key",
    "table_definition",
    "version_key",
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
#: Version items: ``e#v`` + the version, zero padded (``e#v`` sorts after every old slice key,
#: ``e#`` + digits, and before ``~ctl``).
VERSION_PREFIX = "e#v"
VERSION_DIGITS = 10
GUARD_PREFIX = "#o#"
#: Fork references (``#f#`` + an incarnation's key offset + ``#`` + the fork's id): sort below
#: the guards (``f`` < ``o``) and every ``e#`` key, so no descending load reads them.
FORK_PREFIX = "#f#"
#: On a fork's first version item: the JSON list of ``[session, base]`` its lineage reads.
LINEAGE = "lin"
#: A fork mark's token (S): a fresh one per fork made of the incarnation (see the docstring).
TOKEN = "tok"
#: A version item's payload (B): events and head, see ``codec``.
PAYLOAD = "b"
#: A version item's logical expiry (N, epoch seconds; with a TTL): what reads honour.
LOGICAL_EXPIRY = "lx"
#: Set on the old layout's ``~head`` once its session moved to version items.
MOVED = "moved"
#: A version item that marks its session deleted (``delete``): it holds the next version's
#: key, so a commit still in flight at the deleted head's version is refused.
DELETED = "del"
# A session created again under an id whose previous session was deleted or expired numbers
# its version items after that one's (its keys are offset): those items carry ``ver``, the
# head's version (the offset is the key minus ``ver``; ``list``'s index projects ``ver``).
#: A version item carries the whole head at least every this many versions.
CHECKPOINT_EVERY = 24
#: Attribute holding the TTL (epoch seconds). Enable TTL on it (the template does).
TTL_ATTRIBUTE = "expires_at"
INDEX_NAME = "by_owner"
OWNER = "own"
UPDATED = "ua"
#: On a format 1 version item without ``own`` (not in ``list``'s index): the updated-at (ms)
#: of its session's newest index entry, so the next writer knows when the entry is due again
#: (read only: format 2 keeps it in the payload, see ``codec``).
LISTED = "li"
#: A session's ``by_owner`` entry is written again (its version item carries ``own``) once
#: its last one is this old (ms): so an entry is never older than its session's last commit
#: by this much, which is what lets ``list`` stop reading the index (see ``list``).
LIST_REFRESH_MS = 900_000
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
#: Payload bytes per item: the item limit minus room for keys and attribute names.
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


def version_key(version: int, part: int | None = None) -> str:
    key = f"{VERSION_PREFIX}{version:0{VERSION_DIGITS}d}"
    return key if not part else f"{key}#{part:03d}"


def parse_version_key(sk: str) -> tuple[int, int]:
    """``(version, part)`` of a version item's sort key (part 0: the version item itself)."""
    body = sk[len(VERSION_PREFIX):]
    version, _, part = body.partition("#")
    return int(version), (int(part) if part else 0)


def is_version_item(item: dict[str, Any]) -> bool:
    return bool(item.get(SK, {}).get("S", "").startswith(VERSION_PREFIX))


#: The shape of a message id dormant mints (``dormant._ids.new_id("msg")``).
_MINTED = re.compile(r"m:msg_[0-9a-f]{16}_[0-9a-f]+")


def is_minted(once_key: str) -> bool:
    """Whether a once-only key names a message id in the shape dormant mints (no guard item
    is written for those, see the module docstring)."""
    return _MINTED.fullmatch(once_key) is not None


def slice_key(first_seq: int, part: int | None = None) -> str:
    key = f"{EVENT_PREFIX}{first_seq:012d}"
    return key if part is None else f"{key}#{part:03d}"


def guard_key(key: str) -> str:
    """The sort key of the guard item of a once-only id."""
    return GUARD_PREFIX + key


def fork_ref_prefix(base: int) -> str:
    """The sort key prefix of the references to the incarnation at key offset ``base``."""
    return f"{FORK_PREFIX}{base:0{VERSION_DIGITS}d}#"


def fork_ref_key(base: int, fork_id: str) -> str:
    """The sort key of fork ``fork_id``'s reference to the incarnation at offset ``base``."""
    return fork_ref_prefix(base) + fork_id


def fork_mark_key(base: int) -> str:
    """The sort key of the fork mark of the incarnation at offset ``base``."""
    return f"{FORK_PREFIX}{base:0{VERSION_DIGITS}d}"


def is_fork_ref(item: dict[str, Any]) -> bool:
    """A fork's reference item (not a fork mark: its key ends at the offset)."""
    sk = item.get(SK, {}).get("S", "")
    return bool(sk.startswith(FORK_PREFIX) and len(sk) > len(FORK_PREFIX) + VERSION_DIGITS)


def fork_ref_base(item: dict[str, Any]) -> int:
    """The key offset of the incarnation a reference item holds."""
    return int(item[SK]["S"][len(FORK_PREFIX):len(FORK_PREFIX) + VERSION_DIGITS])


def is_below_versions(item: dict[str, Any]) -> bool:
    """An item a descending query meets only after every version item: an old layout's
    slice, a guard, a fork reference."""
    sk = item.get(SK, {}).get("S", "")
    return bool(sk < VERSION_PREFIX)


def incarnation_of(item: dict[str, Any]) -> int:
    """The key offset of a version item's incarnation: its key less ``ver`` (written only
    when the offset is not 0)."""
    key, _ = parse_version_key(item[SK]["S"])
    return key - int(item[VERSION]["N"]) if VERSION in item else 0


def is_event_item(item: dict[str, Any]) -> bool:
    """An old layout's slice item (``e#`` + a position)."""
    sk = item.get(SK, {}).get("S", "")
    return bool(sk.startswith(EVENT_PREFIX) and not sk.startswith(VERSION_PREFIX))


def head_sk_is(item: dict[str, Any]) -> bool:
    return bool(item.get(SK, {}).get("S") == HEAD_SK)


def is_legacy_head(item: dict[str, Any]) -> bool:
    """An old layout's head that still holds its session (not a migrated tombstone)."""
    return head_sk_is(item) and MOVED not in item


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
        elif "B" in value:
            total += len(value["B"])
        else:
            total += len(json.dumps(value))
    return total


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
    """TTL deletion is lazy: an item past its expiry still reads until it is removed. A
    version item's expiry is its logical one (``lx``), others' ``expires_at``."""
    stamp = item.get(LOGICAL_EXPIRY) or item.get(TTL_ATTRIBUTE)
    return stamp is not None and int(stamp["N"]) <= now_s


def fork_holds(items: Sequence[dict[str, Any]], now_s: int) -> dict[int, int]:
    """Per incarnation (key offset) that live fork references among ``items`` name, the
    highest version any of them reads (an expired reference, left for TTL, holds nothing)."""
    holds: dict[int, int] = {}
    for item in items:
        if is_fork_ref(item) and not expired(item, now_s):
            base = fork_ref_base(item)
            holds[base] = max(holds.get(base, 0), int(item[VERSION]["N"]))
    return holds


def held(item: dict[str, Any], holds: dict[int, int], now_s: int) -> bool:
    """Whether a delete keeps ``item`` for the forks that read it: a live reference, a version
    item (or part) of a held incarnation up to the highest version read (incarnations own
    disjoint key ranges, so the key alone says), an old layout's slice of a held first
    incarnation (a migrated session's history before its first version item)."""
    if is_fork_ref(item):
        return not expired(item, now_s)
    if is_version_item(item):
        key, _ = parse_version_key(item[SK]["S"])
        return DELETED not in item and any(base < key <= base + top
                                           for base, top in holds.items())
    return is_event_item(item) and 0 in holds
