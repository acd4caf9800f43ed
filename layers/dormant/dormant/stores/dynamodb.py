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
"""

from __future__ import annotations

import builtins
import contextlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    ParamValidationError,
)

from dormant._head import Head
from dormant._lru import Lru
from dormant.errors import ConfigError, StoreError
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

    def load(self, session_id: str, *, turns: int | None = None) -> StoredSession | None:
        now_s = int(self._clock())
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": session_id}},
            "ScanIndexForward": False,
            "ConsistentRead": True,
        }
        if turns is not None:
            request["Limit"] = self._limit(session_id, turns)
        fetch = self._offloader.get if self._offloader else _no_bucket(session_id)
        items: _Items = []
        while True:
            page = self._call("read session", session_id, self._client.query, **request)
            items.extend(page.get("Items", []))
            exhausted = "LastEvaluatedKey" not in page
            found = reads.read(session_id, items, turns, now_s, exhausted, fetch)
            if found is not None:
                break
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
            if turns is not None:
                request["Limit"] = max(int(request["Limit"]), 4) * 2
        if found.known is not None:
            self._memo.put(session_id, found.known)
        head = found.head
        if head is None:
            return None
        if turns is not None and turns > 0:
            start = head.window_start(turns)
            in_window = sum(1 for t in head.turn_starts if t >= start)
            self._window.observe(session_id, max(in_window, 1), max(found.used, 1))
        control = _control_of(found.control, now_s) if found.control is not None else None
        return StoredSession(head, found.events, found.first_seq, control)

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
        for version in reads.versions_of(items):
            if version.item is None or not version.complete or version.deleted \
                    or lay.expired(version.item, now_s):
                continue
            events = [fetch(e) if is_pointer(e) else e for e in version.events()]
            if key in once_keys(load_events(events)):
                return True
        return False

    def landed(self, session_id: str, seq: int, event_id: str) -> bool:
        """The version item whose events start at ``seq`` names ``event_id`` first (its JSON,
        or its S3 key); an old-layout slice the same way."""
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
            for version in reads.versions_of(items):
                if not version.complete:
                    continue
                if version.first_seq == seq:
                    first = version.doc()["ev"][:1]
                    return bool(first) and event_id in json.dumps(first[0])
                if version.first_seq < seq:
                    return False
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
        layout: the ``~head`` goes first, conditioned on its version, then the rest."""
        now_s = int(self._clock())
        for _ in range(_DELETE_ATTEMPTS):
            items = self._keys_of(session_id)
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
                kept = self._mark_deleted(session_id, newest, now_s)
                if kept is None:
                    continue
            else:
                existed, kept = False, newest
            gone = [i for i in items if i is not head
                    and (kept is None or i[lay.SK] != kept[lay.SK])]
            marked = kept is not None and newest is not None and lay.DELETED not in newest
            self._delete_items(session_id, [i for i in gone if not (marked and i is newest)])
            offloaded = [key for item in gone for key in item.get(lay.OFFLOADED, {}).get("SS", [])]
            if offloaded:
                self._call("delete offloaded events", session_id, self._offload().delete,
                           offloaded)
            base = lay.parse_version_key(kept[lay.SK]["S"])[0] if kept is not None else 0
            self._memo.put(session_id, writes.Known(version=0, base=base))
            self._window.forget(session_id)
            return existed
        raise StoreError(f"session {session_id} kept changing while being deleted; retry")

    def _mark_deleted(self, session_id: str, newest: dict[str, Any],
                      now_s: int) -> dict[str, Any] | None:
        """One transaction: the deletion marker takes the key after ``newest`` and ``newest``
        (the head) goes, so the session reads as deleted at once and a commit in flight at
        its version is refused. None if a commit landed meanwhile."""
        key = lay.parse_version_key(newest[lay.SK]["S"])[0] + 1
        marker: dict[str, Any] = {lay.PK: {"S": session_id}, lay.SK: {"S": lay.version_key(key)},
                                  lay.DELETED: {"N": "1"}}
        if self.ttl_seconds:
            marker[lay.TTL_ATTRIBUTE] = {"N": str(now_s + self.ttl_seconds)}
        try:
            self._client.transact_write_items(TransactItems=[
                {"Put": {"TableName": self.table_name, "Item": marker,
                         "ConditionExpression": "attribute_not_exists(#pk)",
                         "ExpressionAttributeNames": {"#pk": lay.PK}}},
                {"Delete": {"TableName": self.table_name,
                            "Key": {lay.PK: newest[lay.PK], lay.SK: newest[lay.SK]},
                            "ConditionExpression": "attribute_exists(#pk)",
                            "ExpressionAttributeNames": {"#pk": lay.PK}}},
            ])
        except ClientError as error:
            if _code(error) == "TransactionCanceledException":
                return None  # a commit took the key (or a racing delete did): look again
            raise _store_error("delete", session_id, error) from error
        except BotoCoreError as error:
            raise _store_error("delete", session_id, error) from error
        return marker

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
            "ProjectionExpression": "pk, sk, ver, #s3, #ttl, #lx, #del, #mv",
            "ExpressionAttributeNames": {"#s3": lay.OFFLOADED, "#ttl": lay.TTL_ATTRIBUTE,
                                         "#lx": lay.LOGICAL_EXPIRY, "#del": lay.DELETED,
                                         "#mv": lay.MOVED},
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
        for start in range(0, len(items), 25):
            pending: Any = {self.table_name: [
                {"DeleteRequest": {"Key": {lay.PK: item[lay.PK], lay.SK: item[lay.SK]}}}
                for item in items[start:start + 25]]}
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
