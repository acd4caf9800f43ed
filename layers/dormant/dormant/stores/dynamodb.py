"""The production store: one DynamoDB table, one conditional transaction per commit.

Cost per ordinary turn is the physical floor: one ``Query`` (descending, with a ``Limit``
sized to the agent's history window: it returns the head, then the newest events) and one
``TransactWriteItems`` (the head, guarded by its version, plus one item holding the turn's new
events). History is never rewritten; a ``history(limit=N)`` agent reads the same bytes at turn
10 and turn 10,000. The item layout is described in ``dormant.stores._dynamodb.layout``.

The session's control record (stop / steer / pause for the turn running elsewhere) is one small
item read by the same ``Query`` (so a turn pays nothing more for it), polled by a running turn
with one strongly consistent ``GetItem`` (1 read unit), and written by other requests with one
``TransactWriteItems`` (the head's version checked, the record's revision conditioned).
"""

from __future__ import annotations

import builtins
import contextlib
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
from dormant.errors import ConfigError, StoreError
from dormant.events import Event
from dormant.settings import Settings
from dormant.stores._base import commit_head, once_keys
from dormant.stores._dynamodb import layout as lay
from dormant.stores._dynamodb import reads, writes
from dormant.stores._dynamodb.offload import Offloader
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
            request["Limit"] = self._window.limit(session_id, turns)
            if turns <= 0:  # the head and the control record, never an event item
                request["KeyConditionExpression"] = "pk = :pk AND sk >= :ctl"
                request["ExpressionAttributeValues"][":ctl"] = {"S": lay.CONTROL_SK}
        head: Head | None = None
        control: Control | None = None
        start = 0
        items: _Items = []
        while True:
            page = self._call("read session", session_id, self._client.query, **request)
            found = list(page.get("Items", []))
            if head is None:
                if not found or not lay.head_sk_is(found[0]) or lay.expired(found[0], now_s):
                    return None
                head = Head.model_validate_json(found.pop(0)[lay.HEAD]["S"])
                start = head.window_start(turns)
            for item in found:
                if lay.is_control_item(item):
                    control = _control_of(item, now_s)
            items.extend(item for item in found if lay.is_event_item(item))
            needed = reads.items_needed(items, start, head.seq)
            if needed is not None or "LastEvaluatedKey" not in page:
                break
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
            if turns is not None:
                request["Limit"] = reads.remaining_limit(items, start, head.seq)
        if turns is not None and needed is not None:
            in_window = sum(1 for t in head.turn_starts if t >= start)
            self._window.observe(session_id, max(in_window, 1), needed)
        fetch = self._offloader.get if self._offloader else _no_bucket(session_id)
        events, first_seq = reads.decode(session_id, items, start, head.seq, now_s, fetch)
        return StoredSession(head, events, first_seq, control)

    def list(self, *, principal: str | None = None,
             limit: int = 100) -> builtins.list[SessionSummary]:
        now_s = int(self._clock())
        if principal is not None:
            request: dict[str, Any] = {
                "TableName": self.table_name,
                "IndexName": lay.INDEX_NAME,
                "KeyConditionExpression": "#own = :own",
                "ExpressionAttributeNames": {"#own": lay.OWNER},
                "ExpressionAttributeValues": {":own": {"S": lay.owner_key(principal, "")}},
                "ScanIndexForward": False,
                "Limit": limit,
            }
            read = self._client.query
        else:
            request = {"TableName": self.table_name, "IndexName": lay.INDEX_NAME}
            read = self._client.scan  # type: ignore[assignment]
        found: builtins.list[SessionSummary] = []
        while True:
            page = self._call("list sessions", principal or "*", read, **request)
            found.extend(reads.summary(item) for item in page.get("Items", [])
                         if not lay.expired(item, now_s))
            if "LastEvaluatedKey" not in page or (principal is not None and len(found) >= limit):
                break
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        found.sort(key=lambda s: s.updated_at, reverse=True)
        return found[:limit]

    # --- writing -------------------------------------------------------------------------------

    def append(self, head: Head, events: Sequence[Event], *, expected_version: int) -> CommitResult:
        written = commit_head(head, expected_version, events)
        now_s = int(self._clock())
        expires_at = now_s + self.ttl_seconds if self.ttl_seconds else None
        head_item = writes.head_item(written, expires_at)
        items, uploads = writes.plan_slice(
            written, events, head_item, expires_at, self._offloader, self._offload_above,
            self._transaction_limit)
        put_head = writes.conditional_put(self.table_name, head_item, expected_version)
        guards = writes.guard_puts(self.table_name, head.session_id, once_keys(events),
                                   expires_at, now_s)
        for key, text in uploads:
            self._call("offload an event", head.session_id, self._offload().put, key, text)
        for round_ in range(2):
            try:
                if items or guards:
                    result = self._transact(written, put_head, items, guards,
                                            expected_version, round_)
                else:
                    result = self._put_head(written, put_head, expected_version)
                break
            except _ExpiredIncarnation:
                # The id is free (its session expired) but TTL has not removed the items yet:
                # clear them, so the new session's ledger never interleaves with the old one.
                self._purge_expired(head.session_id, now_s)
        else:
            result = CommitResult(ok=False, conflict=True, current_version=0)
        if result.conflict and uploads:
            self._forget_uploads([key for key, _ in uploads])
        return result

    def _transact(self, written: Head, put_head: dict[str, Any], items: _Items,
                  guards: _Items, expected_version: int, round_: int) -> CommitResult:
        token = writes.request_token(self.table_name, written, expected_version, round_)
        actions: builtins.list[Any] = [{"Put": put_head}]
        actions += [{"Put": {"TableName": self.table_name, "Item": item}} for item in items]
        actions += [{"Put": guard} for guard in guards]
        first_guard = 1 + len(items)
        for attempt in range(1, TRANSACTION_ATTEMPTS + 1):
            try:
                self._client.transact_write_items(TransactItems=actions,
                                                  ClientRequestToken=token)
                return CommitResult(ok=True, version=written.version)
            except ClientError as error:
                if _code(error) != "TransactionCanceledException":
                    raise _store_error("commit", written.session_id, error) from error
                reasons = error.response.get("CancellationReasons") or []
                first = reasons[0] if reasons else {}
                held = next((guards[i - first_guard]["Item"][lay.SK]["S"]
                             for i, reason in enumerate(reasons) if i >= first_guard
                             and reason.get("Code") == "ConditionalCheckFailed"), None)
                if held is not None or first.get("Code") == "ConditionalCheckFailed":
                    refused = (self._refused(dict(first.get("Item") or {}) or None,
                                             expected_version)
                               if first.get("Code") == "ConditionalCheckFailed"
                               else CommitResult(ok=False, current_version=expected_version))
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

    def _put_head(self, written: Head, put_head: dict[str, Any],
                  expected_version: int) -> CommitResult:
        try:
            self._client.put_item(**put_head)
        except ClientError as error:
            if _code(error) == "ConditionalCheckFailedException":
                old: Any = error.response.get("Item")
                return self._refused(old, expected_version)
            raise _store_error("commit", written.session_id, error) from error
        except BotoCoreError as error:
            raise _store_error("commit", written.session_id, error) from error
        return CommitResult(ok=True, version=written.version)

    def _refused(self, old: dict[str, Any] | None, expected_version: int) -> CommitResult:
        """The version check failed: the current version is in the item DynamoDB returned."""
        if old is None:
            return CommitResult(ok=False, conflict=True, current_version=0)
        if lay.expired(old, int(self._clock())):
            if expected_version == 0:
                raise _ExpiredIncarnation
            return CommitResult(ok=False, conflict=True, current_version=0)
        return CommitResult(ok=False, conflict=True, current_version=int(old[lay.VERSION]["N"]))

    # --- once-only ids and landed commits -------------------------------------------------------

    def has_once(self, session_id: str, key: str) -> bool:
        item = self._call("read a message guard", session_id, self._client.get_item,
                          TableName=self.table_name, ConsistentRead=True,
                          Key={lay.PK: {"S": session_id}, lay.SK: {"S": lay.guard_key(key)}})
        found = item.get("Item")
        return found is not None and not lay.expired(found, int(self._clock()))

    def landed(self, session_id: str, seq: int, event_id: str) -> bool:
        """The slice item starting at ``seq`` (or its first part) names ``event_id`` first:
        the event's JSON, or its S3 key, begins the item's array."""
        page = self._call(
            "read a commit", session_id, self._client.query, TableName=self.table_name,
            ConsistentRead=True, Limit=1,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :sk)",
            ExpressionAttributeValues={":pk": {"S": session_id},
                                       ":sk": {"S": lay.slice_key(seq)}})
        items = page.get("Items", [])
        return bool(items) and event_id in items[0][lay.EVENTS]["S"][:1024]

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
        """One ``TransactWriteItems``: a ``ConditionCheck`` of the head's version and the
        ``Put`` of the record, conditioned on the revision it replaces. An expired head or
        record (TTL, not deleted yet) counts as absent, as everywhere in this store."""
        if control.rev < 1:
            return False  # no stored revision is ever below 0
        now_s = int(self._clock())
        expires_at = now_s + self.ttl_seconds if self.ttl_seconds else None
        item = lay.control_item(session_id, control.rev, control.model_dump_json(), expires_at)
        actions: builtins.list[Any] = [
            {"ConditionCheck": writes.head_at(self.table_name, session_id, head_version, now_s)},
            {"Put": writes.control_put(self.table_name, item, control.rev, now_s)},
        ]
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
        now_s = int(self._clock())
        for _ in range(_DELETE_ATTEMPTS):
            items = self._keys_of(session_id)
            head = items[0] if items and lay.head_sk_is(items[0]) else None
            if head is not None:
                try:
                    self._client.delete_item(
                        TableName=self.table_name,
                        Key={lay.PK: head[lay.PK], lay.SK: head[lay.SK]},
                        ConditionExpression="ver = :v",
                        ExpressionAttributeValues={":v": head[lay.VERSION]},
                    )
                except ClientError as error:
                    if _code(error) == "ConditionalCheckFailedException":
                        continue  # a commit landed meanwhile: list its items too
                    raise _store_error("delete", session_id, error) from error
                except BotoCoreError as error:
                    raise _store_error("delete", session_id, error) from error
            rest = items[1:] if head is not None else items
            self._delete_items(session_id, rest)
            offloaded = [key for item in rest for key in item.get(lay.OFFLOADED, {}).get("SS", [])]
            if offloaded:
                self._call("delete offloaded events", session_id, self._offload().delete,
                           offloaded)
            self._window.forget(session_id)
            return head is not None and not lay.expired(head, now_s)
        raise StoreError(f"session {session_id} kept changing while being deleted; retry")

    def _purge_expired(self, session_id: str, now_s: int) -> None:
        """Delete the items of an expired session (each only if it is still expired, so a
        session created meanwhile under the same id loses nothing)."""
        offloaded: builtins.list[str] = []
        for item in self._keys_of(session_id):
            if not lay.expired(item, now_s):
                continue
            try:
                self._client.delete_item(
                    TableName=self.table_name,
                    Key={lay.PK: item[lay.PK], lay.SK: item[lay.SK]},
                    ConditionExpression="#ttl <= :now",
                    ExpressionAttributeNames={"#ttl": lay.TTL_ATTRIBUTE},
                    ExpressionAttributeValues={":now": {"N": str(now_s)}},
                )
            except ClientError as error:
                if _code(error) != "ConditionalCheckFailedException":
                    raise _store_error("clear an expired session", session_id, error) from error
            except BotoCoreError as error:
                raise _store_error("clear an expired session", session_id, error) from error
            offloaded += item.get(lay.OFFLOADED, {}).get("SS", [])
        if offloaded:
            self._forget_uploads(offloaded)

    def _keys_of(self, session_id: str) -> _Items:
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": session_id}},
            "ProjectionExpression": "pk, sk, ver, #s3, #ttl",
            "ExpressionAttributeNames": {"#s3": lay.OFFLOADED, "#ttl": lay.TTL_ATTRIBUTE},
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


class _ExpiredIncarnation(Exception):
    """A version-0 commit met the head of an expired session that TTL has not deleted yet."""


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
