"""The table the store's request-sending modules talk to, and how DynamoDB's failures become
:class:`StoreError`.

``DynamoDBStore`` owns the client, the table's name, the clock, the TTL and the offloader.
``commits``, ``forks`` and ``deletes`` send requests for it; they take those as one
:class:`Table` rather than the store itself, so each says what it touches and none reaches
back into the store. The retry constants live here because every transaction the store sends
(commits, forks, control writes) retries the same way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    ParamValidationError,
)

from dormant.errors import StoreError
from dormant.stores._dynamodb.offload import Offloader

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

__all__ = [
    "RETRYABLE",
    "RETRY_BACKOFF",
    "TRANSACTION_ATTEMPTS",
    "Items",
    "Table",
    "call",
    "code",
    "no_bucket",
    "query_all",
    "store_error",
]

#: Application-level attempts of one commit when DynamoDB reports a ``TransactionConflict``
#: (another transaction touched the item at that instant: not a version conflict) or
#: throttling inside a transaction. botocore already retried transport errors and 5xx.
TRANSACTION_ATTEMPTS = 4
RETRY_BACKOFF = 0.025
#: Cancellation reasons that say "try the same transaction again", not "you lost".
RETRYABLE = frozenset({
    "TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded",
    "RequestLimitExceeded",
})
#: Error codes that mean "this request will never succeed": not retried by commit policies.
_DETERMINISTIC = frozenset({
    "AccessDeniedException", "AccessDenied", "ResourceNotFoundException", "NoSuchBucket",
    "ValidationException", "UnrecognizedClientException", "InvalidSignatureException",
    "MissingAuthenticationTokenException", "SerializationException",
    "ItemCollectionSizeLimitExceededException", "InvalidAccessKeyId",
})

Items = list[dict[str, Any]]


@dataclass(frozen=True)
class Table:
    """What a request needs of the store: the store builds one from its own attributes each
    time it hands work out, so those attributes stay the one place these values live."""

    client: DynamoDBClient
    name: str
    clock: Callable[[], float]
    ttl_seconds: int | None
    offloader: Offloader | None

    def offload(self) -> Offloader:
        """The offloader, for a table that holds events in S3; :class:`StoreError` without
        one (nothing can be read or deleted there)."""
        if self.offloader is None:
            raise StoreError(f"table {self.name} holds events in S3 but the store has no "
                             "bucket; configure DORMANT_BUCKET", retryable=False)
        return self.offloader

    def forget_uploads(self, keys: list[str]) -> None:
        """A refused commit leaves nothing behind: its offloaded events go too (best effort:
        an object left over is unreachable, never read)."""
        if self.offloader is not None:
            with contextlib.suppress(ClientError, BotoCoreError):
                self.offloader.delete(keys)


def call(what: str, session_id: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, a botocore failure raised as :class:`StoreError` naming
    ``what`` was being done for ``session_id``."""
    try:
        return fn(*args, **kwargs)
    except (ClientError, BotoCoreError) as error:
        raise store_error(what, session_id, error) from error


def query_all(table: Table, what: str, session_id: str, request: dict[str, Any]) -> Items:
    """Every item a ``Query`` (``request``) finds, page after page, in order."""
    request = dict(request)
    items: Items = []
    while True:
        page = call(what, session_id, table.client.query, **request)
        items.extend(page.get("Items", []))
        if "LastEvaluatedKey" not in page:
            return items
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def store_error(what: str, session_id: str, error: Exception) -> StoreError:
    if isinstance(error, ClientError):
        retryable = code(error) not in _DETERMINISTIC
    else:  # a timeout or a dropped connection may have landed; a bad parameter never will
        retryable = not isinstance(error, ParamValidationError | NoCredentialsError)
    return StoreError(f"DynamoDB could not {what} for session {session_id}: {error}",
                      retryable=retryable)


def no_bucket(session_id: str) -> Callable[[dict[str, Any]], Any]:
    """A ``fetch`` for a store without a bucket: reading an offloaded event is a
    configuration error."""
    def fail(_: dict[str, Any]) -> Any:
        raise StoreError(f"session {session_id} has events stored in S3 but the store has no "
                         "bucket; configure DORMANT_BUCKET", retryable=False)

    return fail
