"""Sending a commit and reading its refusal.

``writes`` builds what a commit writes; this module sends it: the version item alone as one
conditional ``PutItem``, or the whole commit (parts, guards, a migration's items) as one
``TransactWriteItems``, each tried again while DynamoDB says the same request may yet succeed
(a ``TransactionConflict``, throttling). A refusal comes from the key, never from a read
before the write: :func:`refused` reads the version that took it from the item DynamoDB
returned (``forks`` reads a refused fork the same way).
"""

from __future__ import annotations

import time
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from dormant._head import Head
from dormant.errors import StoreError
from dormant.stores._dynamodb import layout as lay
from dormant.stores._dynamodb import writes
from dormant.stores._dynamodb.table import (
    RETRY_BACKOFF,
    RETRYABLE,
    TRANSACTION_ATTEMPTS,
    Items,
    Table,
    code,
    store_error,
)
from dormant.types import CommitResult

__all__ = ["refused", "send"]


def send(table: Table, written: Head, commit: writes.Commit, guards: Items,
         expected_version: int) -> CommitResult:
    """Write ``commit`` (and the once-only ids' ``guards``) at ``expected_version``: one
    ``PutItem`` when the version item is all it writes, else one transaction."""
    if commit.single and not guards:
        return _put_one(table, written, commit.put)
    return _transact(table, written, commit, guards, expected_version)


def _transact(table: Table, written: Head, commit: writes.Commit, guards: Items,
              expected_version: int) -> CommitResult:
    """The commit as one ``TransactWriteItems``: the version item first (its refusal names
    the version that took the key), then its parts, a migration's items, the guards. One
    ``ClientRequestToken`` across the retries, so a retry after a lost response is not a
    second write."""
    token = writes.request_token(table.name, written, expected_version, 0)
    actions: list[Any] = [{"Put": commit.put}]
    actions += [{"Put": part} for part in commit.parts]
    actions += [{"Put": extra} for extra in commit.extra]
    actions += [{"Put": guard} for guard in guards]
    first_extra = 1 + len(commit.parts)
    first_guard = first_extra + len(commit.extra)
    for attempt in range(1, TRANSACTION_ATTEMPTS + 1):
        try:
            table.client.transact_write_items(TransactItems=actions,
                                              ClientRequestToken=token)
            return CommitResult(ok=True, version=written.version)
        except ClientError as error:
            if code(error) != "TransactionCanceledException":
                raise store_error("commit", written.session_id, error) from error
            reasons = error.response.get("CancellationReasons") or []
            failed = [i for i, r in enumerate(reasons)
                      if r.get("Code") == "ConditionalCheckFailed"]
            if failed:
                held = next((guards[i - first_guard]["Item"][lay.SK]["S"]
                             for i in failed if i >= first_guard), None)
                if 0 in failed:
                    result = refused(table, dict(reasons[0].get("Item") or {}) or None)
                elif any(first_extra <= i < first_guard for i in failed):
                    # the old layout's head moved (or another writer migrated it)
                    result = CommitResult(ok=False, conflict=True,
                                          current_version=expected_version + 1)
                else:
                    result = CommitResult(ok=False, current_version=expected_version)
                if held is not None:
                    result = result.model_copy(
                        update={"duplicate": held.removeprefix(lay.GUARD_PREFIX)})
                return result
            codes = {r.get("Code") for r in reasons} - {"None", None}
            retryable = codes <= RETRYABLE
            if not retryable or attempt == TRANSACTION_ATTEMPTS:
                raise StoreError(
                    f"commit to session {written.session_id} was cancelled "
                    f"({', '.join(sorted(str(c) for c in codes))}) after {attempt} "
                    "attempt(s); nothing was written", retryable=retryable) from error
        except BotoCoreError as error:
            raise store_error("commit", written.session_id, error) from error
        time.sleep(RETRY_BACKOFF * 2 ** (attempt - 1))
    raise AssertionError("unreachable")


def _put_one(table: Table, written: Head, put: dict[str, Any]) -> CommitResult:
    """The version item alone: one conditional ``PutItem``. A ``TransactionConflict`` (a
    transaction was touching the key at that instant) wrote nothing: try again."""
    for attempt in range(1, TRANSACTION_ATTEMPTS + 1):
        try:
            table.client.put_item(**put)
            return CommitResult(ok=True, version=written.version)
        except ClientError as error:
            reason = code(error)
            if reason == "ConditionalCheckFailedException":
                old: Any = error.response.get("Item")
                return refused(table, old)
            if reason != "TransactionConflictException" or attempt == TRANSACTION_ATTEMPTS:
                raise store_error("commit", written.session_id, error) from error
        except BotoCoreError as error:
            raise store_error("commit", written.session_id, error) from error
        time.sleep(RETRY_BACKOFF * 2 ** (attempt - 1))
    raise AssertionError("unreachable")


def refused(table: Table, old: dict[str, Any] | None) -> CommitResult:
    """The version key was taken: the item DynamoDB returned names the version that took
    it (the head may be further on: the merge that follows reads it); a deletion marker,
    or an expired item, says there is no session: version 0."""
    if old is None or lay.DELETED in old or lay.expired(old, int(table.clock())):
        return CommitResult(ok=False, conflict=True, current_version=0)
    if lay.VERSION in old:
        return CommitResult(ok=False, conflict=True, current_version=int(old[lay.VERSION]["N"]))
    version, _ = lay.parse_version_key(old[lay.SK]["S"])
    return CommitResult(ok=False, conflict=True, current_version=version)
