"""What a commit writes: the version item (and its parts, its guards, a migration's
tombstone), what a fork's transaction holds, what a control write sends, the request token.

Pure functions: no client here. ``dormant.stores.dynamodb`` sends what they build.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dormant._head import Head
from dormant.errors import StoreError
from dormant.events import Event
from dormant.stores._base import status_of
from dormant.stores._dynamodb import codec
from dormant.stores._dynamodb import layout as lay
from dormant.stores._dynamodb.offload import Offloader

__all__ = [
    "Commit",
    "ForkPlan",
    "Known",
    "absent_or_expired",
    "control_put",
    "fork_plan",
    "guard_puts",
    "head_checks",
    "plan_commit",
    "request_token",
]


@dataclass(frozen=True)
class Known:
    """What this process last read or wrote of a session: enough to write the next version as
    a delta, at the right key, in the right layout."""

    #: The head's version, and the key offset of its incarnation (``e#v`` = base + version).
    version: int
    base: int = 0
    #: The session is still in the old layout (its ``~head`` holds it): the next commit
    #: migrates it. ``stale_head``: an old-layout ``~head`` that expired, still in the table.
    legacy: bool = False
    stale_head: bool = False
    #: Items of an expired session are still in the table (TTL is lazy): the next session
    #: under the id clears them first.
    stale: bool = False
    #: The head's JSON at ``version`` (None: unknown, the next item is a checkpoint).
    head: dict[str, Any] | None = None
    #: The version of the checkpoint the head's chain starts at, and when it was written (ms).
    #: The version of the checkpoint the head's chain starts at, and its logical expiry (with
    #: a TTL: a chain is cut before its checkpoint nears deletion).
    checkpoint: int = 0
    checkpoint_lx: int | None = None
    #: The updated-at (ms) of the session's newest ``by_owner`` entry (None: unknown, the
    #: next version item carries one).
    listed_at: int | None = None


@dataclass
class Commit:
    """One commit's writes: the version item (conditional), what rides with it, what goes to
    S3, and what the process knows once it landed."""

    put: dict[str, Any]
    parts: list[dict[str, Any]] = field(default_factory=list)
    extra: list[dict[str, Any]] = field(default_factory=list)
    uploads: list[tuple[str, str]] = field(default_factory=list)
    known: Known | None = None

    @property
    def single(self) -> bool:
        return not self.parts and not self.extra


def plan_commit(table: str, written: Head, events: Sequence[Event], known: Known | None,
                expected_version: int, *, now_s: int, ttl_seconds: int | None,
                offloader: Offloader | None, offload_above: int | None,
                transaction_limit: int, guards: int) -> Commit:
    """The version item of ``written`` (and its parts), as a delta when ``known`` holds the
    head at ``expected_version`` and the chain may grow, else as a checkpoint."""
    sid = written.session_id
    base = known.base if known is not None else 0
    first_seq = written.seq - len(events)
    head_json = written.model_dump(mode="json")
    prev = known if known is not None and known.version == expected_version else None
    lx = now_s + ttl_seconds if ttl_seconds is not None else None
    delta_ok = (prev is not None and prev.head is not None and not prev.legacy
                and written.version - prev.checkpoint < lay.CHECKPOINT_EVERY
                and (ttl_seconds is None or lx is None or (
                    prev.checkpoint_lx is not None
                    and lx - prev.checkpoint_lx < ttl_seconds // 4)))
    dumped = [event.model_dump(mode="json") for event in events]
    texts = [json.dumps(d, separators=(",", ":"), ensure_ascii=False) for d in dumped]
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
    checkpoint, checkpoint_lx = written.version, lx
    if delta_ok and prev is not None:
        checkpoint, checkpoint_lx = prev.checkpoint, prev.checkpoint_lx
    expires_at = lx + ttl_seconds // 4 + 1 if lx is not None and ttl_seconds else None
    migrates = (known is not None and known.version == expected_version
                and (known.legacy or known.stale_head))
    # The actions of the transaction ``commits`` sends: the version item, its parts, a
    # migration's tombstone, a guard per once-only id. Guards cannot move to S3: too many of
    # them is the commit's own limit, and nothing is uploaded for it.
    fixed = 1 + int(migrates) + guards
    if fixed > lay.TRANSACTION_ACTIONS:
        moving = ", the old layout's head it replaces" if migrates else ""
        raise StoreError(
            f"session {sid}: this commit carries {guards} client message or retry ids, each "
            f"landing once through a guard item in the commit's transaction: with its version "
            f"item{moving} that is {fixed} actions, over DynamoDB's "
            f"{lay.TRANSACTION_ACTIONS} per transaction; commit at most "
            f"{lay.TRANSACTION_ACTIONS - fixed + guards} such ids at a time", retryable=False)
    # What must fit DynamoDB's limits is judged on the events' JSON, uncompressed, as it
    # always was: compression saves write units, it is not room (and a reader never inflates
    # a giant event from the table: those live in S3).
    budget = transaction_limit - 2_000 * (guards + 2)

    # The index entry: on the session's first item, and again once the last is due (the
    # listing reads the head itself for its version, status and time).
    listed = (prev.listed_at if prev is not None and prev.head is not None
              and prev.head.get("principal") == written.principal else None)
    if listed is None or written.updated_at - listed >= lay.LIST_REFRESH_MS:
        listed = None

    def payload() -> bytes:
        shown = [offloader.pointer_doc(keys[i], dumped[i]) if offloader and i in keys else dumped[i]
                 for i in range(len(dumped))]
        doc: dict[str, Any] = {"s": first_seq}
        if listed is not None:  # not in the index: when its session's entry was written
            doc["l"] = written.updated_at - listed
        if delta_ok and prev is not None and prev.head is not None:
            predicted = codec.predict(prev.head, shown, first_seq, written.version,
                                      written.updated_at)
            delta = codec.head_delta(head_json, predicted)
            if delta:
                doc["d"] = delta
        else:
            doc["h"] = codec.encode_head(head_json)
        shared, compact = codec.encode_events(shown, written.updated_at)
        doc["ev"] = compact
        if shared is not None:
            doc["i"] = shared
        return codec.pack(doc)

    while True:
        raw = sum(sizes[i] if i not in keys else 200 for i in range(len(sizes)))
        if raw <= budget:
            packed = payload()
            actions = fixed + max(1, -(-len(packed) // lay.CHUNK_BYTES)) - 1
            if actions <= lay.TRANSACTION_ACTIONS:
                break
        rest = [i for i in range(len(texts)) if i not in keys]
        if not rest:
            raise StoreError(f"session {sid}: this commit's {len(events)} events do not fit "
                             "one DynamoDB transaction (100 actions, 4 MB) even with every "
                             "event in S3: their pointers alone are too many",
                             retryable=False)
        largest = max(rest, key=lambda i: sizes[i])
        keys[largest] = key(largest)
    put, parts = _version_items(table, written, base, packed,
                                [keys[i] for i in sorted(keys)], expires_at, lx,
                                indexed=listed is None)
    landed = Known(version=written.version, base=base, head=head_json,
                   checkpoint=checkpoint, checkpoint_lx=checkpoint_lx,
                   listed_at=written.updated_at if listed is None else listed)
    commit = Commit(put=put, parts=parts, known=landed,
                    uploads=[(keys[i], texts[i]) for i in sorted(keys)])
    if migrates and known is not None:
        commit.extra.append(_tombstone(table, sid, expected_version, known.legacy, now_s))
    return commit


@dataclass
class ForkPlan:
    """A fork's ``TransactWriteItems``, and what a cancellation reason at each index means."""

    actions: list[dict[str, Any]]
    #: Indexes of the fork's own creation (its version item, and an expired old head's
    #: tombstone): a failure there means the id is taken.
    creates: set[int]
    #: Indexes of the anchor's checks: a failure there means it moved on (or went).
    anchor: set[int]
    #: Index -> the lineage session whose kept items a failure there says are gone.
    sources: dict[int, str]


def fork_plan(table: str, commit: Commit, fork_id: str, lineage: Sequence[dict[str, Any]],
              anchor: tuple[str, int, int] | None, *, now_s: int, ttl_seconds: int | None,
              token: str) -> ForkPlan:
    """The fork's transaction: its version item (create-only, carrying ``lin``); on the
    anchor ``(session, base, version)`` (the session forked from, which must still be live:
    its references keep the older segments' items) checks that its head is that version and
    the newest, and its fork mark with ``token``; per lineage incarnation a check that the
    last version item it reads is still there, and the fork's reference item (see
    ``layout``)."""
    reads: dict[tuple[str, int], int] = {}
    for segment in lineage:
        incarnation = (str(segment["session"]), int(segment["base"]))
        reads[incarnation] = max(reads.get(incarnation, 0), int(segment["version"]))
    put = {**commit.put, "Item": {
        **commit.put["Item"],
        lay.LINEAGE: {"S": json.dumps([list(pair) for pair in reads], separators=(",", ":"))}}}
    actions: list[dict[str, Any]] = [{"Put": put}]
    actions += [{"Put": part} for part in commit.parts]
    creates = {0} | {len(actions) + i for i in range(len(commit.extra))}
    actions += [{"Put": extra} for extra in commit.extra]

    def key(session_id: str, sk: str) -> dict[str, Any]:
        return {lay.PK: {"S": session_id}, lay.SK: {"S": sk}}

    # A reference outlives every item it keeps (those were written before now), so one that
    # expired keeps nothing TTL has not taken already.
    expires_at = now_s + ttl_seconds + ttl_seconds // 4 + 1 if ttl_seconds else None
    anchored: set[int] = set()
    anchor_key: tuple[str, int] | None = None
    if anchor is not None and reads:
        sid, base, version = anchor
        anchor_key = (sid, base + version)
        anchored = {len(actions), len(actions) + 1}
        actions.append({"ConditionCheck": {
            "TableName": table, "Key": key(sid, lay.version_key(base + version)),
            "ConditionExpression": "attribute_exists(#pk) AND attribute_not_exists(#del) "
                                   "AND (attribute_not_exists(#lx) OR #lx > :now)",
            "ExpressionAttributeNames": {"#pk": lay.PK, "#del": lay.DELETED,
                                         "#lx": lay.LOGICAL_EXPIRY},
            "ExpressionAttributeValues": {":now": {"N": str(now_s)}},
        }})
        actions.append({"ConditionCheck": {
            "TableName": table, "Key": key(sid, lay.version_key(base + version + 1)),
            "ConditionExpression": "attribute_not_exists(#pk)",
            "ExpressionAttributeNames": {"#pk": lay.PK},
        }})
        mark: dict[str, Any] = {**key(sid, lay.fork_mark_key(base)), lay.TOKEN: {"S": token}}
        if expires_at is not None:
            mark[lay.TTL_ATTRIBUTE] = {"N": str(expires_at)}
        actions.append({"Put": {"TableName": table, "Item": mark}})
    sources: dict[int, str] = {}
    for (sid, base), version in reads.items():
        if (sid, base + version) == anchor_key:
            continue  # the anchor's check is on that item already (one action per item)
        sources[len(actions)] = sid
        actions.append({"ConditionCheck": {
            "TableName": table, "Key": key(sid, lay.version_key(base + version)),
            "ConditionExpression": "attribute_exists(#pk)",
            "ExpressionAttributeNames": {"#pk": lay.PK},
        }})
    for (sid, base), version in reads.items():
        item: dict[str, Any] = {**key(sid, lay.fork_ref_key(base, fork_id)),
                                lay.VERSION: {"N": str(version)}}
        if expires_at is not None:
            item[lay.TTL_ATTRIBUTE] = {"N": str(expires_at)}
        actions.append({"Put": {"TableName": table, "Item": item}})
    if len(actions) > lay.TRANSACTION_ACTIONS:
        raise StoreError(f"session {fork_id}: a fork of {len(reads)} lineage sessions does not "
                         "fit one DynamoDB transaction", retryable=False)
    return ForkPlan(actions, creates, anchored, sources)


def _version_items(table: str, written: Head, base: int, payload: bytes,
                   offloaded: list[str], expires_at: int | None, lx: int | None,
                   indexed: bool = True) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    sid = written.session_id
    key = base + written.version
    pieces = [payload[i:i + lay.CHUNK_BYTES]
              for i in range(0, len(payload), lay.CHUNK_BYTES)] or [b""]
    item: dict[str, Any] = {
        lay.PK: {"S": sid},
        lay.SK: {"S": lay.version_key(key)},
        lay.PAYLOAD: {"B": pieces[0]},
        lay.UPDATED: {"N": str(written.updated_at)},
    }
    if indexed:  # in ``list``'s index (``own`` and ``ua`` are its keys); else the payload
        item[lay.OWNER] = {"S": lay.owner_key(written.principal, sid)}  # says when it was
    status = status_of(written)
    if status != "active":
        item[lay.STATUS] = {"S": status}
    if base:  # a later incarnation: its version is not its key
        item[lay.VERSION] = {"N": str(written.version)}
    if len(pieces) > 1:
        item[lay.PARTS] = {"N": str(len(pieces))}
    if offloaded:
        item[lay.OFFLOADED] = {"SS": offloaded}
    if expires_at is not None and lx is not None:
        item[lay.TTL_ATTRIBUTE] = {"N": str(expires_at)}
        item[lay.LOGICAL_EXPIRY] = {"N": str(lx)}
    put = {
        "TableName": table,
        "Item": item,
        "ConditionExpression": "attribute_not_exists(#pk)",
        "ExpressionAttributeNames": {"#pk": lay.PK},
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    parts: list[dict[str, Any]] = []
    for index, piece in enumerate(pieces[1:], 1):
        part: dict[str, Any] = {lay.PK: {"S": sid}, lay.SK: {"S": lay.version_key(key, index)},
                                lay.PAYLOAD: {"B": piece}}
        if expires_at is not None:
            part[lay.TTL_ATTRIBUTE] = {"N": str(expires_at)}
        parts.append({"TableName": table, "Item": part})
    return put, parts


def _tombstone(table: str, session_id: str, version: int, live: bool,
               now_s: int) -> dict[str, Any]:
    """The old layout's ``~head`` replaced by a marker: conditioned on the old head still
    being at ``version`` (a live session migrating) or on its having expired (a new session
    under an id whose old-layout session expired)."""
    # ``ver`` is the version the session moved at: never the one an old writer read, so its
    # ``ver = :v`` Put is refused.
    put: dict[str, Any] = {
        "TableName": table,
        "Item": {lay.PK: {"S": session_id}, lay.SK: {"S": lay.HEAD_SK},
                 lay.VERSION: {"N": str(version + 1)}, lay.MOVED: {"N": "1"}},
    }
    if live:
        put["ConditionExpression"] = "#v = :v AND attribute_exists(#h)"
        put["ExpressionAttributeNames"] = {"#v": lay.VERSION, "#h": lay.HEAD}
        put["ExpressionAttributeValues"] = {":v": {"N": str(version)}}
    else:
        put.update(absent_or_expired(now_s))
    return put


def absent_or_expired(now_s: int) -> dict[str, Any]:
    """The condition of a Put that creates its item: none there, or only one TTL has expired
    (left for TTL to delete)."""
    return {"ConditionExpression": "attribute_not_exists(#pk) OR #ttl <= :now",
            "ExpressionAttributeNames": {"#pk": lay.PK, "#ttl": lay.TTL_ATTRIBUTE},
            "ExpressionAttributeValues": {":now": {"N": str(now_s)}}}


def guard_puts(table: str, session_id: str, keys: Sequence[str], expires_at: int | None,
               now_s: int) -> list[dict[str, Any]]:
    """One conditional Put per once-only id: refused if the session already holds it (an
    expired guard, left for TTL to delete, no longer counts)."""
    puts: list[dict[str, Any]] = []
    for key in keys:
        item: dict[str, Any] = {lay.PK: {"S": session_id}, lay.SK: {"S": lay.guard_key(key)}}
        if expires_at is not None:
            item[lay.TTL_ATTRIBUTE] = {"N": str(expires_at)}
        puts.append({"TableName": table, "Item": item, **absent_or_expired(now_s)})
    return puts


def head_checks(table: str, session_id: str, known: Known, version: int,
                now_s: int) -> list[dict[str, Any]]:
    """``ConditionCheck``s that the session's head is at ``version`` (0: there is no head):
    for version items, ``e#v<v+1>`` absent and ``e#v<v>`` present; for an old-layout session,
    its ``~head`` at ``ver = v``."""
    def key(sk: str) -> dict[str, Any]:
        return {lay.PK: {"S": session_id}, lay.SK: {"S": sk}}

    live_or_absent = {"#pk": lay.PK, "#lx": lay.LOGICAL_EXPIRY}
    if known.legacy:
        return [{
            "TableName": table, "Key": key(lay.HEAD_SK),
            "ConditionExpression": "#v = :v AND attribute_exists(#h)",
            "ExpressionAttributeNames": {"#v": lay.VERSION, "#h": lay.HEAD},
            "ExpressionAttributeValues": {":v": {"N": str(version)}},
        }]
    checks: list[dict[str, Any]] = [{
        "TableName": table, "Key": key(lay.version_key(known.base + version + 1)),
        "ConditionExpression": "attribute_not_exists(#pk)",
        "ExpressionAttributeNames": {"#pk": lay.PK},
    }]
    if version > 0:
        checks.append({
            "TableName": table, "Key": key(lay.version_key(known.base + version)),
            "ConditionExpression": "attribute_exists(#pk) AND attribute_not_exists(#del) "
                                   "AND (attribute_not_exists(#lx) OR #lx > :now)",
            "ExpressionAttributeNames": {**live_or_absent, "#del": lay.DELETED},
            "ExpressionAttributeValues": {":now": {"N": str(now_s)}},
        })
    elif known.stale_head:
        checks.append({
            "TableName": table, "Key": key(lay.HEAD_SK),
            "ConditionExpression": "attribute_not_exists(#h) OR #ttl <= :now",
            "ExpressionAttributeNames": {"#h": lay.HEAD, "#ttl": lay.TTL_ATTRIBUTE},
            "ExpressionAttributeValues": {":now": {"N": str(now_s)}},
        })
    return checks


def control_put(table: str, item: dict[str, Any], rev: int, now_s: int) -> dict[str, Any]:
    """The control record's Put: it replaces revision ``rev - 1`` (for revision 1: no record,
    or only an expired one)."""
    put: dict[str, Any] = {"TableName": table, "Item": item}
    if rev <= 1:
        put.update(absent_or_expired(now_s))
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
