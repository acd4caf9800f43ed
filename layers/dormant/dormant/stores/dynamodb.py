"""The production store: one DynamoDB table, one conditional write per commit.

Cost per ordinary turn is the physical floor: one ``Query`` (descending, with a ``Limit``
sized to the agent's history window and the head's checkpoint chain: it returns the control
record, then the newest version items) and one conditional ``PutItem`` of one version item
holding the turn's events and the head (under 1 KB for a text turn: 1 write unit; the
``by_owner`` index is sparse, so no index write but once a quarter hour of a session's use).
Commits that carry a client's message id or a retry id (a guard item each), an oversize
payload (parts), or migrate an old-layout session are one ``TransactWriteItems``.
History is never rewritten; a ``history(limit=N)`` agent reads the same bytes at turn 10 and
turn 10,000. The item layout is described in ``dormant.stores._dynamodb.layout``.

The session's control record (stop / steer / pause for the turn running elsewhere) is one small
item read by the same ``Query`` (so a turn pays nothing more for it), polled by a running turn
with one strongly consistent ``GetItem`` (1 read unit), and written by other requests with one
``TransactWriteItems`` (the head's version checked, the record's revision conditioned).

A compacting read (``load(compacted=True)``) starts at the latest compaction's tail; without
``turns`` its ``Limit`` is sized to the turns since then, as the remembered head counts them,
so a compacted session too reads the same items per turn at turn 100 and turn 2,000 (one
``Query`` when the estimate holds; a process that remembers nothing starts from a modest guess
and pages on, doubling).

Forks copy nothing (``layout`` describes the items). Creating one is one ``TransactWriteItems``;
its ordinary turns, whose window lies within its own events, cost exactly what any session's
do. **A window that reaches below the fork point costs one more ``Query`` per lineage segment
it reads** (each in its source's partition, over that incarnation's version items up to the
segment's version; one more again for the slices of a source migrated from the old layout).
A delete keeps what forks read, out of sight; a fork's delete releases it. Sessions no fork
reads delete as before, at the same cost.

This module is the store's face: reading, planning a commit, the control record, the once-only
ids. What it sends lives in ``_dynamodb``: ``commits`` (sending a commit, reading a refusal),
``forks`` (creating one, reading lineage segments, version ends), ``deletes`` (deleting,
keeping what forks read, releasing, purging), over ``table`` (the client and its errors);
``meter`` counts what the requests cost (:meth:`DynamoDBStore.counters`).
"""

from __future__ import annotations

import builtins
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from botocore.exceptions import BotoCoreError, ClientError

from dormant._clients import aws_client
from dormant._head import TURN_INDEX_SIZE, Head
from dormant._lru import Lru
from dormant.errors import ConfigError, StoreError
from dormant.events import Event, load_events
from dormant.settings import Settings
from dormant.stores._base import LedgerPage, commit_head, once_keys
from dormant.stores._dynamodb import commits, deletes, forks, listing, reads, writes
from dormant.stores._dynamodb import control as controls
from dormant.stores._dynamodb import layout as lay
from dormant.stores._dynamodb.meter import Meter, meter
from dormant.stores._dynamodb.offload import Offloader, is_pointer
from dormant.stores._dynamodb.reads import Later

# TRANSACTION_ATTEMPTS and RETRY_BACKOFF (from ``table``, with the other retry rules every
# transaction shares) are still importable from here, where they were first named.
from dormant.stores._dynamodb.table import RETRY_BACKOFF as RETRY_BACKOFF
from dormant.stores._dynamodb.table import TRANSACTION_ATTEMPTS as TRANSACTION_ATTEMPTS
from dormant.stores._dynamodb.table import (
    Items,
    Table,
    call,
    code,
    no_bucket,
)
from dormant.stores._dynamodb.window import WindowEstimator
from dormant.types import CommitResult, Control, SessionSummary, StoredSession

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_s3.client import S3Client

__all__ = ["DynamoDBStore"]

#: Sessions whose head this process remembers (to write the next version as a delta).
_MEMO_SIZE = 4096
#: Turns a compacting read without ``turns`` first asks for when no head is remembered.
COMPACTED_GUESS = 8
#: Events per version item a ledger page's first ``Query`` assumes (pages double from there).
PAGE_EVENTS_PER_ITEM = 4


class DynamoDBStore:
    """Sessions in one DynamoDB table (see :meth:`table_definition`).

    ``client``: a boto3 DynamoDB client (default: one with botocore's ``standard`` retry mode;
    boto3 honours ``AWS_ENDPOINT_URL_DYNAMODB``, so ``sam local`` and moto server need no
    code). ``bucket`` (default ``DORMANT_BUCKET`` via :meth:`from_env`): where events too
    large for a transaction go; without one such a commit raises :class:`StoreError`.
    ``ttl_seconds``: every item carries ``expires_at`` (epoch seconds) = its write time plus
    this, so an idle session expires ``ttl_seconds`` after its last commit, and in a session
    that lives longer, history older than that ages out (the head, rewritten on every commit,
    never does). Expired items are filtered on read: DynamoDB deletes them lazily.
    ``offload_above``: events larger than this many bytes go to S3 even when chunking would
    fit them (default: only what the transaction cannot hold).
    """

    #: The table's primary key, as the SAM template declares it.
    TABLE_KEY_SCHEMA: ClassVar[builtins.list[dict[str, str]]] = lay.KEY_SCHEMA
    #: The attribute TTL is enabled on (epoch seconds).
    TTL_ATTRIBUTE: ClassVar[str] = lay.TTL_ATTRIBUTE
    #: The global secondary index ``list`` reads (heads only: owner key, updated-at).
    INDEX_NAME: ClassVar[str] = lay.INDEX_NAME

    def __init__(
        self,
        table_name: str,
        client: DynamoDBClient | None = None,
        *,
        bucket: str | None = None,
        s3_client: S3Client | None = None,
        ttl_seconds: int | None = None,
        region_name: str | None = None,
        offload_prefix: str = "ledger/",
        offload_above: int | None = None,
        transaction_limit: int = lay.TRANSACTION_LIMIT,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not table_name:
            raise ConfigError("DynamoDBStore needs a table name (DORMANT_TABLE)")
        if ttl_seconds is not None and ttl_seconds <= 0:
            raise ConfigError(f"ttl_seconds must be positive, got {ttl_seconds}")
        if offload_above is not None and (isinstance(offload_above, bool)
                                          or not isinstance(offload_above, int)
                                          or offload_above <= 0):
            raise ConfigError("offload_above must be a positive number of bytes (None: "
                              f"offload only what one transaction cannot hold), got "
                              f"{offload_above!r}")
        self.table_name = table_name
        self.bucket = bucket
        self.ttl_seconds = ttl_seconds
        self._client = client if client is not None else _dynamodb_client(region_name)
        self._meters: builtins.list[Meter] = [meter(self._client)]
        self._offload_above = offload_above
        self._transaction_limit = transaction_limit
        self._clock = clock
        self._window = WindowEstimator()
        #: Where ``delete`` hands the rest of a retired partition (``purge`` steps): called
        #: with the session id and the next step's cursor. None: the steps run inline.
        self.purge_later: deletes.PurgeLater | None = None
        self._memo: Lru[writes.Known] = Lru(_MEMO_SIZE)
        self._offloader = None if bucket is None else Offloader(
            bucket, offload_prefix, lambda: self._metered(
                s3_client if s3_client is not None else _s3_client(region_name)))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *,
                 client: DynamoDBClient | None = None,
                 s3_client: S3Client | None = None) -> DynamoDBStore:
        """The store the environment describes: ``DORMANT_TABLE``, ``DORMANT_BUCKET``,
        ``DORMANT_SESSION_TTL_DAYS``, ``DORMANT_OFFLOAD_ABOVE`` (bytes; events over it go to
        the bucket)."""
        try:
            settings = Settings.from_env(env)
        except ValueError as error:
            raise ConfigError(str(error)) from error
        if not settings.table:
            raise ConfigError("DORMANT_TABLE is not set: name the DynamoDB table to use")
        ttl = settings.session_ttl_days * 86_400 if settings.session_ttl_days else None
        if settings.offload_above is not None and not settings.bucket:
            raise ConfigError(f"DORMANT_OFFLOAD_ABOVE is {settings.offload_above} but "
                              "DORMANT_BUCKET is not set: name the S3 bucket events over it "
                              "go to")
        return cls(settings.table, client, bucket=settings.bucket, s3_client=s3_client,
                   ttl_seconds=ttl, offload_above=settings.offload_above)

    @classmethod
    def table_definition(cls) -> dict[str, Any]:
        """``AttributeDefinitions``, ``KeySchema``, ``GlobalSecondaryIndexes`` and
        ``BillingMode`` exactly as ``ensure_table`` creates them; the SAM template's table
        must declare the same (plus TTL on :attr:`TTL_ATTRIBUTE`)."""
        return lay.table_definition()

    def ensure_table(self) -> bool:
        """Create the table (on-demand, TTL on ``expires_at``) unless it exists; ``True`` if it
        was created. For local runs and tests: deployed tables come from the template."""
        try:
            self._client.create_table(TableName=self.table_name, **self.table_definition())
        except ClientError as error:
            if code(error) == "ResourceInUseException":
                return False
            raise StoreError(f"could not create table {self.table_name}: {error}") from error
        try:
            self._client.get_waiter("table_exists").wait(
                TableName=self.table_name, WaiterConfig={"Delay": 1, "MaxAttempts": 120})
            self._client.update_time_to_live(
                TableName=self.table_name,
                TimeToLiveSpecification={"Enabled": True, "AttributeName": lay.TTL_ATTRIBUTE})
        except (ClientError, BotoCoreError) as error:
            raise StoreError(f"table {self.table_name} was created but is not ready: "
                             f"{error}") from error
        return True

    # --- reading -------------------------------------------------------------------------------

    def load(self, session_id: str, *, turns: int | None = None,
             compacted: bool = False) -> StoredSession | None:
        loaded = self._load(session_id, turns, compacted, defer=False)
        return loaded[0] if loaded is not None else None

    def load_deferred(self, session_id: str, *, turns: int | None = None,
                      compacted: bool = False) -> tuple[StoredSession, Later] | None:
        """:meth:`load`, leaving the window's offloaded events in S3 until they are read: a
        stand-in (the event's type and id) holds each one's place in the events, and the
        second value reads it, by its index there. What the app's sessions load (a request
        that reads no event body, a stop or a queued message, reads nothing from S3)."""
        return self._load(session_id, turns, compacted, defer=True)

    def _load(self, session_id: str, turns: int | None, compacted: bool,
              defer: bool) -> tuple[StoredSession, Later] | None:
        now_s = int(self._clock())
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": session_id}},
            "ScanIndexForward": False,
            "ConsistentRead": True,
        }
        limit = (self._limit(session_id, turns) if turns is not None
                 else self._compacted_limit(session_id) if compacted else None)
        if limit is not None:
            request["Limit"] = limit
        fetch = self._offloader.get if self._offloader else no_bucket(session_id)
        items: Items = []
        while True:
            page = call("read session", session_id, self._client.query, **request)
            items.extend(page.get("Items", []))
            exhausted = "LastEvaluatedKey" not in page
            found = reads.read(session_id, items, turns, now_s, exhausted, fetch,
                               compacted=compacted, defer=defer)
            if found is not None:
                break
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
            if "Limit" in request:
                request["Limit"] = max(int(request["Limit"]), 4) * 2
        if found.known is not None:
            self._memo.put(session_id, found.known)
        head = found.head
        if head is None:
            return None
        start = head.window_start(turns, compacted=compacted)
        events, first, used, later = found.events, found.first_seq, found.used, found.later
        if head.lineage and start < head.fork_point and first == head.fork_point:
            # The window reaches below the fork point (and the fork's own events reach down
            # to it): the rest is its sources', one Query per segment read.
            inherited, first, more = forks.inherited(self._table, self._window, head, start,
                                                     now_s, fetch, windowed=limit is not None)
            events, used = inherited + events, used + more
            later = {len(inherited) + i: read_it for i, read_it in later.items()}
        if (turns is not None and turns > 0) or (
                turns is None and compacted and head.turns_since(start) is not None):
            in_window = sum(1 for t in head.turn_starts if t >= start)
            self._window.observe(session_id, max(in_window, 1), max(used, 1))
        control = (controls.control_of(found.control, now_s) if found.control is not None
                   else None)
        return StoredSession(head, events, first, control), later

    def read_page(self, head: Head, after: int, skip: int, limit: int) -> LedgerPage | None:
        """At most ``limit`` events from ``skip`` after version ``after``'s end, up to
        ``head`` (see :class:`dormant.stores._base.LedgerPage`): one ascending ``Query`` of
        the version items from ``after + 1`` on, its ``Limit`` sized to the page (another,
        doubled, when the versions held fewer events than guessed), whatever the session's
        age. Not bounded: a fork's positions below its fork point (read from its sources as
        ``load`` reads them), and versions an old-layout session wrote (None: no version
        items to page)."""
        sid = head.session_id
        if after >= head.version:
            return LedgerPage([], head.seq, None)
        known = self._memo.get(sid)
        if known is None or known.version == 0:
            known = self._known_at(sid)
        if known.version == 0 or known.legacy:
            return None
        now_s = int(self._clock())
        fetch = self._offloader.get if self._offloader else no_bucket(sid)
        start: int | None = None
        if after == 0 and head.fork_point > 0:
            if skip < head.fork_point:
                inherited, first, _ = forks.inherited(self._table, self._window, head, skip,
                                                      now_s, fetch, windowed=False)
                taken = inherited[:limit]
                end = first + len(taken)
                cursor = (0, end) if end < head.fork_point else (1, 0)
                return LedgerPage(taken, first, None if cursor == (head.version, 0)
                                  else cursor)
            after, skip = 1, skip - head.fork_point  # a fork's version 1 holds no events
            start = head.fork_point
            if after >= head.version:
                return LedgerPage([], head.seq, None)
        elif after == 0:
            start = 0
        request: dict[str, Any] = {
            "TableName": self.table_name, "ConsistentRead": True,
            "KeyConditionExpression": "pk = :pk AND sk BETWEEN :lo AND :hi",
            "ExpressionAttributeValues": {
                ":pk": {"S": sid}, ":lo": {"S": lay.version_key(known.base + after + 1)},
                ":hi": {"S": lay.version_key(known.base + head.version) + "#~"}},  # its parts
            "Limit": min(1000, (skip + limit) // PAGE_EVENTS_PER_ITEM + 2),
        }
        items: Items = []
        while True:
            reply = call("read a ledger page", sid, self._client.query, **request)
            items.extend(reply.get("Items", []))
            got = reads.page(items, known.base, after, skip, limit, head.version, now_s,
                             "LastEvaluatedKey" not in reply, fetch, start=start)
            if got is not None:
                break
            request["ExclusiveStartKey"] = reply["LastEvaluatedKey"]
            request["Limit"] = min(1000, int(request["Limit"]) * 2)
        if not got.placed:
            return None
        return LedgerPage(load_events(got.raw), got.first, got.next)

    def _compacted_limit(self, session_id: str) -> int | None:
        """A compacting read's ``Limit`` when no ``turns`` bound it: sized to the turns since
        the latest compaction's tail, as the remembered head counts them (so a compacted
        session reads the same items at turn 100 and turn 2,000); a modest guess when no
        head is remembered (pages double from there). None: the whole ledger (never
        compacted, and more turns than the head's index holds)."""
        known = self._memo.get(session_id)
        if known is None or known.head is None:
            return self._limit(session_id, COMPACTED_GUESS)
        tail = int(known.head.get("compacted_to", 0))
        since = Head(session_id=session_id,
                     turn_starts=list(known.head.get("turn_starts", []))).turns_since(tail)
        if since is None:
            return self._limit(session_id, TURN_INDEX_SIZE) if tail else None
        return self._limit(session_id, since)

    def _limit(self, session_id: str, turns: int) -> int:
        """A windowed read's ``Limit``: the control record and an old head, then enough version
        items for the window and for the head's chain back to its checkpoint."""
        known = self._memo.get(session_id)
        chain = (known.version - known.checkpoint + 2 if known is not None
                 and known.head is not None else lay.CHECKPOINT_EVERY)
        window = self._window.limit(session_id, turns) if turns > 0 else 0
        return max(window, 2 + min(chain, lay.CHECKPOINT_EVERY))

    def list(self, *, principal: str | None = None,
             limit: int = 100) -> builtins.list[SessionSummary]:
        """Reads the ``by_owner`` index newest first, then each session's newest item (see
        :func:`~dormant.stores._dynamodb.listing.list_sessions`). ``list()`` without a
        principal scans the index."""
        return listing.list_sessions(self._table, principal, limit, self.purge_later)

    # --- writing -------------------------------------------------------------------------------

    def append(self, head: Head, events: Sequence[Event], *, expected_version: int) -> CommitResult:
        written = commit_head(head, expected_version, events)
        sid = head.session_id
        now_s = int(self._clock())
        known = self._memo.get(sid)
        if known is None or (known.version == 0) != (expected_version == 0):
            # Nothing known, or known not to exist while the caller holds a head (or the
            # reverse): read first, so a commit never lands under a deletion marker or an
            # expired session's items. Otherwise a stale version is refused by the key.
            known = self._known_at(sid)
            if known.version != expected_version:
                return CommitResult(ok=False, conflict=True, current_version=known.version)
        if expected_version and known.head is not None \
                and known.head.get("created_at", 0) != head.created_at:
            # the session as known is another incarnation (deleted and made again under the
            # id) than the one ``head`` continues; one this process did not see yet has its
            # deletion marker at this head's next key, which refuses the write
            self._memo.pop(sid)
            return CommitResult(ok=False, conflict=True, current_version=known.version)
        if expected_version == 0 and known.stale:
            deletes.purge_expired(self._table, sid, now_s)
        if written.lineage and known.head is not None:
            written.lineage = forks.stored_lineage(written.lineage, known.head.get("lineage") or [])
        expires_at = now_s + self.ttl_seconds if self.ttl_seconds else None
        guards = writes.guard_puts(self.table_name, sid,
                                   [k for k in once_keys(events) if not lay.is_minted(k)],
                                   expires_at, now_s)
        commit = writes.plan_commit(
            self.table_name, written, events, known, expected_version, now_s=now_s,
            ttl_seconds=self.ttl_seconds, offloader=self._offloader,
            offload_above=self._offload_above, transaction_limit=self._transaction_limit,
            guards=len(guards))
        for key, text in commit.uploads:
            call("offload an event", sid, self._table.offload().put, key, text)
        result = commits.send(self._table, written, commit, guards, expected_version)
        if result.ok and commit.known is not None:
            self._memo.put(sid, commit.known)
        elif result.conflict:
            self._memo.pop(sid)
        if result.conflict and commit.uploads:
            self._table.forget_uploads([key for key, _ in commit.uploads])
        return result

    def _known_at(self, session_id: str) -> writes.Known:
        """What this process did not remember of a session: read its head (a commit or a
        control write without a read before it in this process)."""
        self.load(session_id, turns=0)
        known = self._memo.get(session_id)
        return known if known is not None else writes.Known(version=0)

    # --- forks ----------------------------------------------------------------------------------

    def fork(self, head: Head) -> CommitResult:
        """One ``TransactWriteItems`` (see ``layout``): the fork's version item, create-only;
        on the session it is forked from (the *anchor*, which must still be live: while it
        is, its own references keep the older segments' items) checks that its head is the
        newest item, and a fresh fork mark, so a delete in flight refuses its marker and looks
        again; per lineage incarnation a check that the last version item it reads is there,
        and the fork's reference item. The segments are written with ``base``, the
        incarnation's key offset (a session re-created under an id numbers its items after
        the previous one's). The anchor's head comes from what this process remembers (the
        caller just loaded it), else one Query; if it moved meanwhile, read again and retry.
        An anchor still in the old layout cannot be forked until its next commit moves it to
        version items (:class:`StoreError`)."""
        return forks.fork(self._table, self._memo, self._known_at, head,
                          offload_above=self._offload_above,
                          transaction_limit=self._transaction_limit)

    def version_end(self, session_id: str, version: int) -> int | None:
        """The version item's first position plus its events: one Query of that item (and its
        parts), at the key this process remembers for the session's incarnation (read first
        when it remembers nothing). Versions an old-layout session wrote have no version
        item: None."""
        return forks.version_end(self._table, self._memo, self._known_at, session_id, version)

    # --- once-only ids and landed commits -------------------------------------------------------

    def has_once(self, session_id: str, key: str) -> bool:
        """The guard item of ``key``; for an id in dormant's minted shape (landed without a
        guard), the version items' events: a read of the whole partition, paid only when a
        client echoes such an id back past the head's digest window."""
        item = call("read a message guard", session_id, self._client.get_item,
                          TableName=self.table_name, ConsistentRead=True,
                          Key={lay.PK: {"S": session_id}, lay.SK: {"S": lay.guard_key(key)}})
        found = item.get("Item")
        now_s = int(self._clock())
        if found is not None and not lay.expired(found, now_s):
            return True
        if not lay.is_minted(key):
            return False
        request: dict[str, Any] = {
            "TableName": self.table_name, "ConsistentRead": True,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :v)",
            "ExpressionAttributeValues": {":pk": {"S": session_id},
                                          ":v": {"S": lay.VERSION_PREFIX}},
        }
        fetch = self._offloader.get if self._offloader else no_bucket(session_id)
        items: Items = []
        while True:
            page = call("look for a message id", session_id, self._client.query,
                              **request)
            items.extend(page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                break
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        versions = [v for v in reads.versions_of(items) if v.item is not None]
        if not versions or versions[0].deleted:
            return False
        base = versions[0].base  # this incarnation's: items a fork keeps of an older one are not
        for version in versions:
            if version.key <= base:
                break
            if not version.complete or lay.expired(version.item or {}, now_s):
                continue
            events = [fetch(e) if is_pointer(e) else e for e in version.events()]
            if key in once_keys(load_events(events)):
                return True
        return False

    def landed(self, session_id: str, seq: int, event_id: str) -> bool:
        """The version item whose events start at ``seq`` names ``event_id`` first (its JSON,
        or its S3 key); an old-layout slice the same way. Only the session's own commits: a
        fork's positions below its fork point (and an older incarnation's kept items) are not
        its commits."""
        request: dict[str, Any] = {
            "TableName": self.table_name, "ConsistentRead": True, "ScanIndexForward": False,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :v)",
            "ExpressionAttributeValues": {":pk": {"S": session_id},
                                          ":v": {"S": lay.VERSION_PREFIX}},
            "Limit": 8,
        }
        items: Items = []
        while True:
            page = call("read a commit", session_id, self._client.query, **request)
            items.extend(page.get("Items", []))
            base: int | None = None
            for version in reads.versions_of(items):
                if version.item is not None and base is None:
                    if version.deleted:
                        return False
                    base = version.base  # the newest item's incarnation
                if base is not None and version.key <= base:
                    return False  # an older incarnation's item
                if not version.complete:
                    continue
                if version.first_seq == seq:
                    first = version.doc()["ev"][:1]
                    return bool(first) and event_id in json.dumps(first[0])
                if version.first_seq < seq or (base is not None and version.key == base + 1):
                    return False  # past it, or past the incarnation's first version
            if "LastEvaluatedKey" not in page:
                break
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        page = call(
            "read a commit", session_id, self._client.query, TableName=self.table_name,
            ConsistentRead=True, Limit=1,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :sk)",
            ExpressionAttributeValues={":pk": {"S": session_id},
                                       ":sk": {"S": lay.slice_key(seq)}})
        found = page.get("Items", [])
        return bool(found) and event_id in found[0][lay.EVENTS]["S"][:1024]

    # --- the control record ------------------------------------------------------------------

    def read_control(self, session_id: str) -> Control | None:
        """One ``GetItem``, strongly consistent (an eventually consistent read may miss a stop
        for a while); an expired record (TTL) reads as none."""
        return controls.read_control(self._table, session_id)

    def write_control(self, session_id: str, control: Control, *, head_version: int) -> bool:
        """One ``TransactWriteItems``: ``ConditionCheck``s that the head is still at
        ``head_version`` (see ``layout``) and the ``Put`` of the record, conditioned on the
        revision it replaces. An expired head or record (TTL, not deleted yet) counts as
        absent, as everywhere in this store."""
        return controls.write_control(self._table, self._memo, self._known_at, session_id,
                                      control, head_version)

    # --- deleting ------------------------------------------------------------------------------

    def delete(self, session_id: str) -> bool:
        """Removes every item of the session. Version items: a deletion marker takes the next
        version's key first (so a commit still in flight at the head's version is refused,
        and a later session under the id numbers its items after it), then the rest goes. Old
        layout: the ``~head`` goes first, conditioned on its version, then the rest.

        Items forks still read (their references are in the partition, see ``layout``) stay,
        out of ``list``'s index; a fork's delete releases its references, and the last one
        of a deleted incarnation takes that incarnation's kept items with it. A session no
        fork reads deletes exactly as before (its references, its lineage: none)."""
        return deletes.delete(self._table, self._memo, self._window, session_id,
                              self.purge_later)

    def purge(self, session_id: str, after: str | None = None) -> str | None:
        """One bounded step of clearing what deleted incarnations of ``session_id`` left
        (``deletes.purge``): the cursor of the next step, None when there is nothing more.
        Idempotent: safe to run again, after a crash, or for a session that is live."""
        return deletes.purge(self._table, session_id, after, self.purge_later)

    # --- what it cost -------------------------------------------------------------------------

    def counters(self) -> tuple[int, float]:
        """The requests this store's clients made on the calling thread so far (DynamoDB's,
        and S3's once an event was offloaded or read from there), and the capacity units
        DynamoDB said they consumed: what each phase of a turn's timing records as the
        difference. Every request the store sends asks DynamoDB for its consumed capacity
        (``ReturnConsumedCapacity=TOTAL``, free of charge). See ``_dynamodb.meter``."""
        requests, capacity = 0, 0.0
        for one in self._meters:
            more, units = one.totals()
            requests, capacity = requests + more, capacity + units
        return requests, capacity

    def _metered(self, client: S3Client) -> S3Client:
        self._meters.append(meter(client))
        return client

    # --- plumbing ------------------------------------------------------------------------------

    @property
    def _table(self) -> Table:
        """What ``commits``, ``forks`` and ``deletes`` send requests with, built from this
        store's attributes at each use (they stay the one place those values live)."""
        return Table(self._client, self.table_name, self._clock, self.ttl_seconds,
                     self._offloader)

    def __repr__(self) -> str:
        return f"DynamoDBStore({self.table_name!r}, bucket={self.bucket!r})"


def _dynamodb_client(region_name: str | None) -> DynamoDBClient:
    return aws_client("dynamodb", region_name=region_name,  # type: ignore[no-any-return]
                      retries={"mode": "standard", "max_attempts": 5},
                      connect_timeout=3, read_timeout=10)


def _s3_client(region_name: str | None) -> S3Client:
    return aws_client("s3", region_name=region_name,  # type: ignore[no-any-return]
                      retries={"mode": "standard", "max_attempts": 5})
