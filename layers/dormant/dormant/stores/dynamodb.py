"""The production store: one DynamoDB table, one conditional write per commit.

Cost per ordinary turn is the physical floor: one ``Query`` (descending, with a ``Limit``
sized to the agent's history window and the head's checkpoint chain: it returns the control
record, then the newest version items) and one conditional ``PutItem`` of one version item
holding the turn's events and the head (under 1 KB for a text turn: 1 write unit, and one
index write). Commits that carry a client's message id or a retry id (a guard item each), an
oversize payload (parts), or migrate an old-layout session are one ``TransactWriteItems``.
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
"""

from __future__ import annotations

import builtins
import contextlib
import json
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    ParamValidationError,
)

from dormant._head import TURN_INDEX_SIZE, Head
from dormant._lru import Lru
from dormant.errors import ConfigError, SessionNotFound, StoreError
from dormant.events import Event, load_events
from dormant.settings import Settings
from dormant.stores._base import commit_head, once_keys
from dormant.stores._dynamodb import layout as lay
from dormant.stores._dynamodb import reads, writes
from dormant.stores._dynamodb.offload import Offloader, is_pointer
from dormant.stores._dynamodb.window import WindowEstimator
from dormant.types import CommitResult, Control, SessionSummary, StoredSession

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_s3.client import S3Client

__all__ = ["DynamoDBStore"]

#: Application-level attempts of one commit when DynamoDB reports a ``TransactionConflict``
#: (another transaction touched the item at that instant: not a version conflict) or
#: throttling inside a transaction. botocore already retried transport errors and 5xx.
TRANSACTION_ATTEMPTS = 4
RETRY_BACKOFF = 0.025
#: Cancellation reasons that say "try the same transaction again", not "you lost".
_RETRYABLE = frozenset({
    "TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded",
    "RequestLimitExceeded",
})
_DELETE_ATTEMPTS = 3
#: Sessions whose head this process remembers (to write the next version as a delta).
_MEMO_SIZE = 4096
#: Turns a compacting read without ``turns`` first asks for when no head is remembered.
COMPACTED_GUESS = 8

_Items = list[dict[str, Any]]


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
        self.table_name = table_name
        self.bucket = bucket
        self.ttl_seconds = ttl_seconds
        self._client = client if client is not None else _dynamodb_client(region_name)
        self._offload_above = offload_above
        self._transaction_limit = transaction_limit
        self._clock = clock
        self._window = WindowEstimator()
        self._memo: Lru[writes.Known] = Lru(_MEMO_SIZE)
        self._offloader = None if bucket is None else Offloader(
            bucket, offload_prefix,
            (lambda: s3_client) if s3_client is not None else (lambda: _s3_client(region_name)))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *,
                 client: DynamoDBClient | None = None,
                 s3_client: S3Client | None = None) -> DynamoDBStore:
        """The store the environment describes: ``DORMANT_TABLE``, ``DORMANT_BUCKET``,
        ``DORMANT_SESSION_TTL_DAYS``."""
        settings = Settings.from_env(env)
        if not settings.table:
            raise ConfigError("DORMANT_TABLE is not set: name the DynamoDB table to use")
        ttl = settings.session_ttl_days * 86_400 if settings.session_ttl_days else None
        return cls(settings.table, client, bucket=settings.bucket, s3_client=s3_client,
                   ttl_seconds=ttl)

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
            if _code(error) == "ResourceInUseException":
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
        fetch = self._offloader.get if self._offloader else _no_bucket(session_id)
        items: _Items = []
        while True:
            page = self._call("read session", session_id, self._client.query, **request)
            items.extend(page.get("Items", []))
            exhausted = "LastEvaluatedKey" not in page
            found = reads.read(session_id, items, turns, now_s, exhausted, fetch,
                               compacted=compacted)
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
        events, first, used = found.events, found.first_seq, found.used
        if head.lineage and start < head.fork_point and first == head.fork_point:
            # The window reaches below the fork point (and the fork's own events reach down
            # to it): the rest is its sources', one Query per segment read.
            inherited, first, more = self._inherited(head, start, now_s, fetch,
                                                     windowed=limit is not None)
            events, used = inherited + events, used + more
        if (turns is not None and turns > 0) or (
                turns is None and compacted and head.turns_since(start) is not None):
            in_window = sum(1 for t in head.turn_starts if t >= start)
            self._window.observe(session_id, max(in_window, 1), max(used, 1))
        control = _control_of(found.control, now_s) if found.control is not None else None
        return StoredSession(head, events, first, control)

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

    def _inherited(self, head: Head, start: int, now_s: int, fetch: reads.Fetch, *,
                   windowed: bool) -> tuple[builtins.list[Event], int, int]:
        """A fork's events from ``start`` up to its fork point, read from the sessions its
        lineage names (newest segment first: where older history has aged out, nothing
        older joins the window), the position of the first, and the version items read."""
        spans: builtins.list[tuple[dict[str, Any], int, int]] = []
        below = 0
        for segment in head.lineage:
            end = int(segment["end"])
            if start < end:
                spans.append((segment, max(start, below), end))
            below = end
        pieces: builtins.list[builtins.list[Any]] = []
        first, used = head.fork_point, 0
        for segment, low, end in reversed(spans):
            got = self._segment(head, segment, low, end, now_s, fetch, windowed=windowed)
            pieces.append(got.raw)
            first, used = got.first, used + got.used
            if got.first > low:
                break
        return load_events([event for piece in reversed(pieces) for event in piece]), first, used

    def _segment(self, head: Head, segment: dict[str, Any], low: int, end: int, now_s: int,
                 fetch: reads.Fetch, *, windowed: bool) -> reads.Segment:
        """Positions ``low`` … ``end - 1`` of a lineage segment: one descending Query of its
        source's version items from the segment's version down (a windowed read's ``Limit``
        sized to the turns it spans, doubling if short), and for a source migrated from the
        old layout, one more for the slices below its first version item."""
        source = str(segment["session"])
        base, version = int(segment.get("base", 0)), int(segment["version"])
        request: dict[str, Any] = {
            "TableName": self.table_name, "ConsistentRead": True, "ScanIndexForward": False,
            "KeyConditionExpression": "pk = :pk AND sk BETWEEN :lo AND :hi",
            "ExpressionAttributeValues": {
                ":pk": {"S": source}, ":lo": {"S": lay.version_key(base + 1)},
                ":hi": {"S": lay.version_key(base + version) + "#~"}},  # and its parts
        }
        if windowed:
            spanned = sum(1 for t in head.turn_starts if low <= t < end)
            request["Limit"] = self._window.limit(head.session_id, max(spanned, 1))
        items: _Items = []
        while True:
            page = self._call("read a fork's history", head.session_id, self._client.query,
                              **request)
            items.extend(page.get("Items", []))
            got = reads.segment(source, items, low, end, now_s, "LastEvaluatedKey" not in page,
                                fetch)
            if got is not None:
                break
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
            if "Limit" in request:
                request["Limit"] = max(int(request["Limit"]), 4) * 2
        if got.first > low and not got.aged and base == 0:
            older, first = self._slices(source, low, got.first, now_s, fetch)
            got = reads.Segment(older + got.raw, first, False, got.used + 1)
        if got.first > low and not got.aged and not self.ttl_seconds:
            raise StoreError(f"session {head.session_id}: what it inherits from session "
                             f"{source} (positions {low}-{got.first - 1}) is missing from the "
                             "table", retryable=False)
        return got

    def _slices(self, session_id: str, start: int, seq: int, now_s: int,
                fetch: reads.Fetch) -> tuple[builtins.list[Any], int]:
        """An old layout's events from ``start`` to ``seq`` (its slices, newest first, read
        until the one holding ``start``) and the position of the first."""
        request: dict[str, Any] = {
            "TableName": self.table_name, "ConsistentRead": True, "ScanIndexForward": False,
            "KeyConditionExpression": "pk = :pk AND sk BETWEEN :lo AND :hi",
            "ExpressionAttributeValues": {":pk": {"S": session_id},
                                          ":lo": {"S": lay.EVENT_PREFIX},
                                          ":hi": {"S": lay.slice_key(seq)}},
        }
        items: _Items = []
        while True:
            page = self._call("read a fork's history", session_id, self._client.query,
                              **request)
            items.extend(page.get("Items", []))
            if "LastEvaluatedKey" not in page or reads.items_needed(items, start,
                                                                     seq) is not None:
                break
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        raw, first = reads.decode(session_id, items, start, seq, now_s, fetch, load=False)
        return list(raw), first

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
        """Reads the ``by_owner`` index newest first: it holds an entry per version item, so a
        session's first entry is its newest; later ones are skipped."""
        now_s = int(self._clock())
        if principal is not None:
            request: dict[str, Any] = {
                "TableName": self.table_name,
                "IndexName": lay.INDEX_NAME,
                "KeyConditionExpression": "#own = :own",
                "ExpressionAttributeNames": {"#own": lay.OWNER},
                "ExpressionAttributeValues": {":own": {"S": lay.owner_key(principal, "")}},
                "ScanIndexForward": False,
                "Limit": 2 * limit + 10,
            }
            read = self._client.query
        else:
            request = {"TableName": self.table_name, "IndexName": lay.INDEX_NAME}
            read = self._client.scan  # type: ignore[assignment]
        newest: dict[str, dict[str, Any]] = {}
        while True:
            page = self._call("list sessions", principal or "*", read, **request)
            for item in page.get("Items", []):
                sid = item[lay.PK]["S"]
                seen = newest.get(sid)
                if seen is None or int(item[lay.UPDATED]["N"]) > int(seen[lay.UPDATED]["N"]):
                    newest[sid] = item
            live = sum(1 for item in newest.values() if not self._index_expired(item, now_s))
            if "LastEvaluatedKey" not in page or (principal is not None and live >= limit):
                break
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        found = [reads.summary(item) for item in newest.values()
                 if not self._index_expired(item, now_s)]
        found.sort(key=lambda s: s.updated_at, reverse=True)
        return found[:limit]

    def _index_expired(self, item: dict[str, Any], now_s: int) -> bool:
        """An index entry's session has expired: the index projects ``expires_at``, not a
        version item's logical expiry ``lx``, which is ``expires_at`` less this store's
        margin (see ``layout``)."""
        if lay.is_version_item(item) and lay.TTL_ATTRIBUTE in item and self.ttl_seconds:
            stamp = int(item[lay.TTL_ATTRIBUTE]["N"]) - self.ttl_seconds // 4 - 1
            return stamp <= now_s
        return lay.expired(item, now_s)

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
        if expected_version == 0 and known.stale:
            self._purge_expired(sid, now_s)
        if written.lineage and known.head is not None:
            written.lineage = _stored_lineage(written.lineage, known.head.get("lineage") or [])
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
            self._call("offload an event", sid, self._offload().put, key, text)
        if commit.single and not guards:
            result = self._put_one(written, commit.put)
        else:
            result = self._transact(written, commit, guards, expected_version)
        if result.ok and commit.known is not None:
            self._memo.put(sid, commit.known)
        elif result.conflict:
            self._memo.pop(sid)
        if result.conflict and commit.uploads:
            self._forget_uploads([key for key, _ in commit.uploads])
        return result

    def _known_at(self, session_id: str) -> writes.Known:
        """What this process did not remember of a session: read its head (a commit or a
        control write without a read before it in this process)."""
        self.load(session_id, turns=0)
        known = self._memo.get(session_id)
        return known if known is not None else writes.Known(version=0)

    def _transact(self, written: Head, commit: writes.Commit, guards: _Items,
                  expected_version: int) -> CommitResult:
        token = writes.request_token(self.table_name, written, expected_version, 0)
        actions: builtins.list[Any] = [{"Put": commit.put}]
        actions += [{"Put": part} for part in commit.parts]
        actions += [{"Put": extra} for extra in commit.extra]
        actions += [{"Put": guard} for guard in guards]
        first_extra = 1 + len(commit.parts)
        first_guard = first_extra + len(commit.extra)
        for attempt in range(1, TRANSACTION_ATTEMPTS + 1):
            try:
                self._client.transact_write_items(TransactItems=actions,
                                                  ClientRequestToken=token)
                return CommitResult(ok=True, version=written.version)
            except ClientError as error:
                if _code(error) != "TransactionCanceledException":
                    raise _store_error("commit", written.session_id, error) from error
                reasons = error.response.get("CancellationReasons") or []
                failed = [i for i, r in enumerate(reasons)
                          if r.get("Code") == "ConditionalCheckFailed"]
                if failed:
                    held = next((guards[i - first_guard]["Item"][lay.SK]["S"]
                                 for i in failed if i >= first_guard), None)
                    if 0 in failed:
                        refused = self._refused(dict(reasons[0].get("Item") or {}) or None)
                    elif any(first_extra <= i < first_guard for i in failed):
                        # the old layout's head moved (or another writer migrated it)
                        refused = CommitResult(ok=False, conflict=True,
                                               current_version=expected_version + 1)
                    else:
                        refused = CommitResult(ok=False, current_version=expected_version)
                    if held is not None:
                        refused = refused.model_copy(
                            update={"duplicate": held.removeprefix(lay.GUARD_PREFIX)})
                    return refused
                codes = {r.get("Code") for r in reasons} - {"None", None}
                retryable = codes <= _RETRYABLE
                if not retryable or attempt == TRANSACTION_ATTEMPTS:
                    raise StoreError(
                        f"commit to session {written.session_id} was cancelled "
                        f"({', '.join(sorted(str(c) for c in codes))}) after {attempt} "
                        "attempt(s); nothing was written", retryable=retryable) from error
            except BotoCoreError as error:
                raise _store_error("commit", written.session_id, error) from error
            time.sleep(RETRY_BACKOFF * 2 ** (attempt - 1))
        raise AssertionError("unreachable")

    def _put_one(self, written: Head, put: dict[str, Any]) -> CommitResult:
        """The version item alone: one conditional ``PutItem``. A ``TransactionConflict`` (a
        transaction was touching the key at that instant) wrote nothing: try again."""
        for attempt in range(1, TRANSACTION_ATTEMPTS + 1):
            try:
                self._client.put_item(**put)
                return CommitResult(ok=True, version=written.version)
            except ClientError as error:
                code = _code(error)
                if code == "ConditionalCheckFailedException":
                    old: Any = error.response.get("Item")
                    return self._refused(old)
                if code != "TransactionConflictException" or attempt == TRANSACTION_ATTEMPTS:
                    raise _store_error("commit", written.session_id, error) from error
            except BotoCoreError as error:
                raise _store_error("commit", written.session_id, error) from error
            time.sleep(RETRY_BACKOFF * 2 ** (attempt - 1))
        raise AssertionError("unreachable")

    def _refused(self, old: dict[str, Any] | None) -> CommitResult:
        """The version key was taken: the item DynamoDB returned names the version that took
        it (the head may be further on: the merge that follows reads it); a deletion marker,
        or an expired item, says there is no session: version 0."""
        if old is None or lay.DELETED in old or lay.expired(old, int(self._clock())):
            return CommitResult(ok=False, conflict=True, current_version=0)
        if lay.VERSION in old:
            return CommitResult(ok=False, conflict=True, current_version=int(old[lay.VERSION]["N"]))
        version, _ = lay.parse_version_key(old[lay.SK]["S"])
        return CommitResult(ok=False, conflict=True, current_version=version)

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
        sid = head.session_id
        now_s = int(self._clock())
        known = self._memo.get(sid)
        if known is None or known.version != 0:
            known = self._known_at(sid)
            if known.version != 0:
                return CommitResult(ok=False, conflict=True, current_version=known.version)
        if known.stale:
            self._purge_expired(sid, now_s)
        anchor_id = (str(head.fork_of["session"]) if head.fork_of
                     else str(head.lineage[-1]["session"]) if head.lineage else None)
        fresh = False
        for attempt in range(1, TRANSACTION_ATTEMPTS + 1):
            anchor = (self._live_source(anchor_id, fresh=fresh)
                      if head.lineage and anchor_id is not None else None)
            lineage = [self._based(segment, anchor_id, anchor) for segment in head.lineage]
            written = commit_head(head.model_copy(update={"lineage": lineage}), 0)
            commit = writes.plan_commit(
                self.table_name, written, (), known, 0, now_s=now_s,
                ttl_seconds=self.ttl_seconds, offloader=self._offloader,
                offload_above=self._offload_above, transaction_limit=self._transaction_limit,
                guards=0)
            plan = writes.fork_plan(
                self.table_name, commit, sid, lineage,
                (anchor_id, anchor.base, anchor.version)
                if anchor is not None and anchor_id is not None else None,
                now_s=now_s, ttl_seconds=self.ttl_seconds, token=uuid.uuid4().hex)
            try:
                actions: Any = plan.actions
                self._client.transact_write_items(TransactItems=actions)
            except ClientError as error:
                if _code(error) != "TransactionCanceledException":
                    raise _store_error("fork", sid, error) from error
                reasons = error.response.get("CancellationReasons") or []
                failed = {i for i, r in enumerate(reasons)
                          if r.get("Code") == "ConditionalCheckFailed"}
                if failed & plan.creates:
                    refused = self._refused(dict(reasons[0].get("Item") or {}) or None)
                    if refused.current_version:
                        return refused
                    # A deletion marker or an expired item holds the key: what this process
                    # knew of the id is stale. Read it again.
                    self._memo.pop(sid)
                    known = self._known_at(sid)
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
                retryable = codes <= _RETRYABLE
                if not retryable or attempt == TRANSACTION_ATTEMPTS:
                    raise StoreError(
                        f"fork {sid} was cancelled ({', '.join(sorted(str(c) for c in codes))})"
                        f" after {attempt} attempt(s); nothing was written",
                        retryable=retryable) from error
            except BotoCoreError as error:
                raise _store_error("fork", sid, error) from error
            else:
                if commit.known is not None:
                    self._memo.put(sid, commit.known)
                return CommitResult(ok=True, version=written.version)
            time.sleep(RETRY_BACKOFF * 2 ** (attempt - 1))
        raise StoreError(f"session {anchor_id} kept moving while {sid} was forked from it; "
                         "retry", retryable=True)

    def _live_source(self, session_id: str, *, fresh: bool) -> writes.Known:
        """What this process knows of a live session a fork reads (read again when not known,
        or ``fresh``); :class:`SessionNotFound` if there is none."""
        known = None if fresh else self._memo.get(session_id)
        if known is None or known.version == 0:
            known = self._known_at(session_id)
        if known.version == 0:
            raise SessionNotFound(session_id)
        if known.legacy or known.head is None:
            raise StoreError(f"session {session_id} is still in the old DynamoDB layout: it "
                             "can be forked once its next commit has moved it to version "
                             "items", retryable=False)
        return known

    def _based(self, segment: dict[str, Any], anchor_id: str | None,
               anchor: writes.Known | None) -> dict[str, Any]:
        """A lineage segment as this store writes it: with ``base``, the key offset of the
        incarnation it names (one copied from the source's lineage has it already; the
        source's own segment takes it from the live source, if that is the incarnation the
        segment names)."""
        if "base" in segment:
            return dict(segment)
        source = str(segment["session"])
        known = anchor if source == anchor_id and anchor is not None else self._live_source(
            source, fresh=False)
        assert known.head is not None  # _live_source refuses a head it does not hold
        if int(known.head.get("created_at", 0)) != int(segment["created_at"]):
            raise SessionNotFound(source)  # deleted, and another session has the id now
        return {**segment, "base": known.base}

    def version_end(self, session_id: str, version: int) -> int | None:
        """The version item's first position plus its events: one Query of that item (and its
        parts), at the key this process remembers for the session's incarnation (read first
        when it remembers nothing). Versions an old-layout session wrote have no version
        item: None."""
        if version < 1:
            return None
        known = self._memo.get(session_id)
        if known is None or known.version == 0:
            known = self._known_at(session_id)
            if known.version == 0:
                return None
        if known.head is not None and version == known.version:
            return int(known.head["seq"])
        request: dict[str, Any] = {
            "TableName": self.table_name, "ConsistentRead": True,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :v)",
            "ExpressionAttributeValues": {
                ":pk": {"S": session_id}, ":v": {"S": lay.version_key(known.base + version)}},
        }
        items: _Items = []
        while True:
            page = self._call("read a version", session_id, self._client.query, **request)
            items.extend(page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                break
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        found = next((v for v in reads.versions_of(items) if v.item is not None), None)
        if (found is None or found.deleted or not found.complete
                or lay.expired(found.item or {}, int(self._clock()))
                or found.base != known.base):
            return None
        return found.first_seq + len(found.doc()["ev"])

    # --- once-only ids and landed commits -------------------------------------------------------

    def has_once(self, session_id: str, key: str) -> bool:
        """The guard item of ``key``; for an id in dormant's minted shape (landed without a
        guard), the version items' events: a read of the whole partition, paid only when a
        client echoes such an id back past the head's digest window."""
        item = self._call("read a message guard", session_id, self._client.get_item,
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
        fetch = self._offloader.get if self._offloader else _no_bucket(session_id)
        items: _Items = []
        while True:
            page = self._call("look for a message id", session_id, self._client.query,
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
        items: _Items = []
        while True:
            page = self._call("read a commit", session_id, self._client.query, **request)
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
        page = self._call(
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
        found = self._call("read the control record", session_id, self._client.get_item,
                           TableName=self.table_name, ConsistentRead=True,
                           Key={lay.PK: {"S": session_id}, lay.SK: {"S": lay.CONTROL_SK}})
        item = found.get("Item")
        return _control_of(item, int(self._clock())) if item is not None else None

    def write_control(self, session_id: str, control: Control, *, head_version: int) -> bool:
        """One ``TransactWriteItems``: ``ConditionCheck``s that the head is still at
        ``head_version`` (see ``layout``) and the ``Put`` of the record, conditioned on the
        revision it replaces. An expired head or record (TTL, not deleted yet) counts as
        absent, as everywhere in this store."""
        if control.rev < 1:
            return False  # no stored revision is ever below 0
        known = self._memo.get(session_id)
        if known is None or known.version != head_version:
            known = self._known_at(session_id)
            if known.version != head_version:
                return False
        now_s = int(self._clock())
        expires_at = now_s + self.ttl_seconds if self.ttl_seconds else None
        item = lay.control_item(session_id, control.rev, control.model_dump_json(), expires_at)
        actions: builtins.list[Any] = [
            {"ConditionCheck": check} for check in writes.head_checks(
                self.table_name, session_id, known, head_version, now_s)]
        actions.append({"Put": writes.control_put(self.table_name, item, control.rev, now_s)})
        for attempt in range(1, TRANSACTION_ATTEMPTS + 1):
            try:
                self._client.transact_write_items(TransactItems=actions)
                return True
            except ClientError as error:
                if _code(error) != "TransactionCanceledException":
                    raise _store_error("write the control record", session_id,
                                       error) from error
                reasons = error.response.get("CancellationReasons") or []
                codes = {r.get("Code") for r in reasons} - {"None", None}
                if "ConditionalCheckFailed" in codes:
                    self._memo.pop(session_id)
                    return False  # the head or the record moved: the caller re-reads
                retryable = codes <= _RETRYABLE
                if not retryable or attempt == TRANSACTION_ATTEMPTS:
                    raise StoreError(
                        f"the control record of session {session_id} was not written "
                        f"({', '.join(sorted(str(c) for c in codes))}) after {attempt} "
                        "attempt(s)", retryable=retryable) from error
            except BotoCoreError as error:
                raise _store_error("write the control record", session_id, error) from error
            time.sleep(RETRY_BACKOFF * 2 ** (attempt - 1))
        raise AssertionError("unreachable")

    def _forget_uploads(self, keys: builtins.list[str]) -> None:
        """A refused commit leaves nothing behind: its offloaded events go too (best effort:
        an object left over is unreachable, never read)."""
        if self._offloader is not None:
            with contextlib.suppress(ClientError, BotoCoreError):
                self._offloader.delete(keys)

    def _offload(self) -> Offloader:
        if self._offloader is None:
            raise StoreError(f"table {self.table_name} holds events in S3 but the store has no "
                             "bucket; configure DORMANT_BUCKET", retryable=False)
        return self._offloader

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
        now_s = int(self._clock())
        for _ in range(_DELETE_ATTEMPTS):
            items = self._keys_of(session_id)
            holds = lay.fork_holds(items, now_s)
            head = next((i for i in items if lay.is_legacy_head(i)), None)
            mains = [i for i in items if lay.is_version_item(i)
                     and lay.parse_version_key(i[lay.SK]["S"])[1] == 0]
            newest = max(mains, key=lambda i: lay.parse_version_key(i[lay.SK]["S"])[0],
                         default=None)
            kept: dict[str, Any] | None = None
            if head is not None:
                existed = not lay.expired(head, now_s)
                if not self._delete_if("delete", session_id, head, "ver = :v",
                                       {":v": head[lay.VERSION]}):
                    continue  # a commit landed meanwhile: list its items too
            elif newest is not None and lay.DELETED not in newest:
                existed = not lay.expired(newest, now_s)
                mark_key = lay.fork_mark_key(lay.incarnation_of(newest))
                kept = self._mark_deleted(
                    session_id, newest, now_s, keep=lay.held(newest, holds, now_s),
                    mark=next((i for i in items if i[lay.SK]["S"] == mark_key), None))
                if kept is None:
                    continue
            else:
                existed, kept = False, newest
            gone = [i for i in items if i is not head
                    and (kept is None or i[lay.SK] != kept[lay.SK])
                    and not lay.held(i, holds, now_s)]
            marked = kept is not None and newest is not None and lay.DELETED not in newest
            self._delete_items(session_id, [i for i in gone if not (marked and i is newest)])
            offloaded = [key for item in gone for key in item.get(lay.OFFLOADED, {}).get("SS", [])]
            if offloaded:
                self._call("delete offloaded events", session_id, self._offload().delete,
                           offloaded)
            shown = [i for i in mains if lay.OWNER in i and lay.held(i, holds, now_s)]
            if shown:
                self._hide(session_id, shown)
            for source, source_base in _lineage_of(items, newest):
                self._release(source, source_base, session_id)
            if marked and newest is not None and lay.incarnation_of(newest) in holds:
                # Forks read it: a fork deleted since the keys were read (its reference gone
                # before the marker was there) may have been the last; look again now.
                self._collect(session_id, lay.incarnation_of(newest))
            base = lay.parse_version_key(kept[lay.SK]["S"])[0] if kept is not None else 0
            self._memo.put(session_id, writes.Known(version=0, base=base))
            self._window.forget(session_id)
            return existed
        raise StoreError(f"session {session_id} kept changing while being deleted; retry")

    def _mark_deleted(self, session_id: str, newest: dict[str, Any], now_s: int, *,
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
        if self.ttl_seconds:
            marker[lay.TTL_ATTRIBUTE] = {"N": str(now_s + self.ttl_seconds)}
        actions: Any = [{"Put": {"TableName": self.table_name, "Item": marker,
                                 "ConditionExpression": "attribute_not_exists(#pk)",
                                 "ExpressionAttributeNames": {"#pk": lay.PK}}}]
        if not keep:
            actions.append({"Delete": {"TableName": self.table_name,
                                       "Key": {lay.PK: newest[lay.PK], lay.SK: newest[lay.SK]},
                                       "ConditionExpression": "attribute_exists(#pk)",
                                       "ExpressionAttributeNames": {"#pk": lay.PK}}})
        check: dict[str, Any] = {
            "TableName": self.table_name,
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
            self._client.transact_write_items(TransactItems=actions)
        except ClientError as error:
            if _code(error) == "TransactionCanceledException":
                return None  # a commit took the key, a fork was made, or a delete raced
            raise _store_error("delete", session_id, error) from error
        except BotoCoreError as error:
            raise _store_error("delete", session_id, error) from error
        return marker

    def _hide(self, session_id: str, shown: _Items) -> None:
        """Take kept version items out of ``list``'s index (it holds the items with ``own``):
        each is written again without it (read whole first: the delete read keys only)."""
        wanted = {item[lay.SK]["S"] for item in shown}
        low = min(wanted)
        request: dict[str, Any] = {
            "TableName": self.table_name, "ConsistentRead": True,
            "KeyConditionExpression": "pk = :pk AND sk BETWEEN :lo AND :hi",
            "FilterExpression": "attribute_exists(#own)",
            "ExpressionAttributeNames": {"#own": lay.OWNER},
            "ExpressionAttributeValues": {":pk": {"S": session_id}, ":lo": {"S": low},
                                          ":hi": {"S": max(wanted)}},
        }
        whole: _Items = []
        while True:
            page = self._call("read session", session_id, self._client.query, **request)
            whole += [i for i in page.get("Items", []) if i[lay.SK]["S"] in wanted]
            if "LastEvaluatedKey" not in page:
                break
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        self._batch(session_id, [{"PutRequest": {"Item": {
            k: v for k, v in item.items() if k != lay.OWNER}}} for item in whole])

    def _release(self, source: str, base: int, fork_id: str) -> None:
        """Fork ``fork_id`` (deleted) no longer reads ``source``'s incarnation at ``base``: its
        reference goes first, then, if that incarnation is deleted and no other fork reads it,
        its kept items go (:meth:`_collect`). In that order, and a delete of the source
        marks it before it looks at the references, so of a fork's delete and its source's
        running side by side one at least sees the other's effect."""
        self._call("release a fork's reference", source, self._client.delete_item,
                   TableName=self.table_name,
                   Key={lay.PK: {"S": source}, lay.SK: {"S": lay.fork_ref_key(base, fork_id)}})
        self._collect(source, base)

    def _collect(self, session_id: str, base: int) -> None:
        """Delete the kept items of the session's incarnation at ``base`` (version items and
        parts, their offloaded events, a first incarnation's old-layout slices) if it is
        deleted (or expired) and no fork reads it any more."""
        now_s = int(self._clock())
        if self._referenced(session_id, base, now_s) or self._live(session_id, base, now_s):
            return
        request: dict[str, Any] = {
            "TableName": self.table_name, "ConsistentRead": True,
            "KeyConditionExpression": "pk = :pk AND sk BETWEEN :lo AND :hi",
            "ExpressionAttributeValues": {":pk": {"S": session_id},
                                          ":lo": {"S": lay.version_key(base + 1)},
                                          ":hi": {"S": lay.VERSION_PREFIX + "~"}},
            "ProjectionExpression": "pk, sk, ver, #s3, #del",
            "ExpressionAttributeNames": {"#s3": lay.OFFLOADED, "#del": lay.DELETED},
        }
        gone: _Items = []
        ended = False
        while not ended:
            page = self._call("read session", session_id, self._client.query, **request)
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
                page = self._call("read session", session_id, self._client.query, **slices)
                gone += [i for i in page.get("Items", []) if lay.is_event_item(i)]
                if "LastEvaluatedKey" not in page:
                    break
                slices["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        self._delete_items(session_id, gone)
        offloaded = [key for item in gone for key in item.get(lay.OFFLOADED, {}).get("SS", [])]
        if offloaded:
            self._call("delete offloaded events", session_id, self._offload().delete, offloaded)

    def _referenced(self, session_id: str, base: int, now_s: int) -> bool:
        """Whether a fork's (live) reference names the incarnation at ``base``."""
        request: dict[str, Any] = {
            "TableName": self.table_name, "ConsistentRead": True,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :ref)",
            "ExpressionAttributeValues": {":pk": {"S": session_id},
                                          ":ref": {"S": lay.fork_ref_prefix(base)}},
        }
        while True:
            page = self._call("read fork references", session_id, self._client.query,
                              **request)
            if any(not lay.expired(item, now_s) for item in page.get("Items", [])):
                return True
            if "LastEvaluatedKey" not in page:
                return False
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _live(self, session_id: str, base: int, now_s: int) -> bool:
        """Whether the session's newest version item is a live one of the incarnation at
        ``base`` (not a deletion marker, not expired, not a later incarnation's)."""
        request: dict[str, Any] = {
            "TableName": self.table_name, "ConsistentRead": True, "ScanIndexForward": False,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :v)",
            "ExpressionAttributeValues": {":pk": {"S": session_id},
                                          ":v": {"S": lay.VERSION_PREFIX}},
            "ProjectionExpression": "pk, sk, ver, #del, #lx, #ttl",
            "ExpressionAttributeNames": {"#del": lay.DELETED, "#lx": lay.LOGICAL_EXPIRY,
                                         "#ttl": lay.TTL_ATTRIBUTE},
            "Limit": 8,
        }
        while True:
            page = self._call("read session", session_id, self._client.query, **request)
            for item in page.get("Items", []):
                if lay.parse_version_key(item[lay.SK]["S"])[1] == 0:  # parts sort above it
                    return (lay.DELETED not in item and not lay.expired(item, now_s)
                            and lay.incarnation_of(item) == base)
            if "LastEvaluatedKey" not in page:
                return False
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _delete_if(self, what: str, session_id: str, item: dict[str, Any], condition: str,
                   values: dict[str, Any], names: dict[str, str] | None = None) -> bool:
        try:
            self._client.delete_item(
                TableName=self.table_name, Key={lay.PK: item[lay.PK], lay.SK: item[lay.SK]},
                ConditionExpression=condition, ExpressionAttributeValues=values,
                **({"ExpressionAttributeNames": names} if names else {}))  # type: ignore[arg-type]
        except ClientError as error:
            if _code(error) == "ConditionalCheckFailedException":
                return False
            raise _store_error(what, session_id, error) from error
        except BotoCoreError as error:
            raise _store_error(what, session_id, error) from error
        return True

    def _purge_expired(self, session_id: str, now_s: int) -> None:
        """Delete the items of an expired session (each only if it is still expired, so a
        session created meanwhile under the same id loses nothing)."""
        offloaded: builtins.list[str] = []
        for item in self._keys_of(session_id):
            if not lay.expired(item, now_s):
                continue
            if self._delete_if(
                    "clear an expired session", session_id, item,
                    "(attribute_exists(#lx) AND #lx <= :now) OR "
                    "(attribute_not_exists(#lx) AND #ttl <= :now)",
                    {":now": {"N": str(now_s)}},
                    {"#lx": lay.LOGICAL_EXPIRY, "#ttl": lay.TTL_ATTRIBUTE}):
                offloaded += item.get(lay.OFFLOADED, {}).get("SS", [])
        if offloaded:
            self._forget_uploads(offloaded)

    def _keys_of(self, session_id: str) -> _Items:
        request: dict[str, Any] = {
            "TableName": self.table_name,
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
        items: _Items = []
        while True:
            page = self._call("read session", session_id, self._client.query, **request)
            items.extend(page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                return items
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _delete_items(self, session_id: str, items: _Items) -> None:
        self._batch(session_id, [
            {"DeleteRequest": {"Key": {lay.PK: item[lay.PK], lay.SK: item[lay.SK]}}}
            for item in items])

    def _batch(self, session_id: str, requests: _Items) -> None:
        """``BatchWriteItem``, 25 requests a call, unprocessed ones sent again."""
        for start in range(0, len(requests), 25):
            pending: Any = {self.table_name: requests[start:start + 25]}
            for attempt in range(5):
                result = self._call("delete session", session_id, self._client.batch_write_item,
                                    RequestItems=pending)
                pending = result.get("UnprocessedItems") or {}
                if not pending:
                    break
                time.sleep(RETRY_BACKOFF * 2 ** attempt)
            if pending:
                raise StoreError(f"session {session_id}: some items could not be deleted "
                                 "(throttled); retry the delete")

    # --- plumbing ------------------------------------------------------------------------------

    def _call(self, what: str, session_id: str, fn: Callable[..., Any], *args: Any,
              **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (ClientError, BotoCoreError) as error:
            raise _store_error(what, session_id, error) from error

    def __repr__(self) -> str:
        return f"DynamoDBStore({self.table_name!r}, bucket={self.bucket!r})"


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


#: Error codes that mean "this request will never succeed": not retried by commit policies.
_DETERMINISTIC = frozenset({
    "AccessDeniedException", "AccessDenied", "ResourceNotFoundException", "NoSuchBucket",
    "ValidationException", "UnrecognizedClientException", "InvalidSignatureException",
    "MissingAuthenticationTokenException", "SerializationException",
    "ItemCollectionSizeLimitExceededException", "InvalidAccessKeyId",
})


def _store_error(what: str, session_id: str, error: Exception) -> StoreError:
    if isinstance(error, ClientError):
        retryable = _code(error) not in _DETERMINISTIC
    else:  # a timeout or a dropped connection may have landed; a bad parameter never will
        retryable = not isinstance(error, ParamValidationError | NoCredentialsError)
    return StoreError(f"DynamoDB could not {what} for session {session_id}: {error}",
                      retryable=retryable)


def _control_of(item: dict[str, Any], now_s: int) -> Control | None:
    """The control record a ``~ctl`` item holds (None once it expired)."""
    if lay.expired(item, now_s):
        return None
    return Control.model_validate_json(item[lay.CONTROL]["S"])


def _stored_lineage(given: builtins.list[dict[str, Any]],
                    stored: builtins.list[dict[str, Any]]) -> builtins.list[dict[str, Any]]:
    """The lineage to write: a session's never changes, but the head a caller commits may be
    the one ``fork`` was given (``App.fork`` returns it), without the keys this store added
    (``base``): the stored segments then, when they are the same segments."""
    def plain(segment: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in segment.items() if k != "base"}

    if [plain(s) for s in given] == [plain(s) for s in stored]:
        return [dict(s) for s in stored]
    return given


def _lineage_of(items: _Items, newest: dict[str, Any] | None) -> builtins.list[tuple[str, int]]:
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


def _no_bucket(session_id: str) -> Callable[[dict[str, Any]], Any]:
    def fail(_: dict[str, Any]) -> Any:
        raise StoreError(f"session {session_id} has events stored in S3 but the store has no "
                         "bucket; configure DORMANT_BUCKET", retryable=False)

    return fail


def _dynamodb_client(region_name: str | None) -> DynamoDBClient:
    import boto3
    from botocore.config import Config

    config = Config(retries={"mode": "standard", "max_attempts": 5},
                    connect_timeout=3, read_timeout=10)
    return boto3.client("dynamodb", region_name=region_name, config=config)


def _s3_client(region_name: str | None) -> S3Client:
    import boto3
    from botocore.config import Config

    return boto3.client("s3", region_name=region_name,
                        config=Config(retries={"mode": "standard", "max_attempts": 5}))
