"""The control record's item (``~ctl``): read strongly consistent, written in one transaction
with the checks that the head is still at the version the request decided on."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from dormant._lru import Lru
from dormant.errors import StoreError
from dormant.stores._dynamodb import layout as lay
from dormant.stores._dynamodb import writes
from dormant.stores._dynamodb.table import (
    RETRY_BACKOFF,
    RETRYABLE,
    TRANSACTION_ATTEMPTS,
    Table,
    call,
    code,
    store_error,
)
from dormant.types import Control

__all__ = ["control_of", "read_control", "write_control"]


def read_control(table: Table, session_id: str) -> Control | None:
    """One ``GetItem``, strongly consistent (an eventually consistent read may miss a stop
    for a while); an expired record (TTL) reads as none."""
    found = call("read the control record", session_id, table.client.get_item,
                       TableName=table.name, ConsistentRead=True,
                       Key={lay.PK: {"S": session_id}, lay.SK: {"S": lay.CONTROL_SK}})
    item = found.get("Item")
    return control_of(item, int(table.clock())) if item is not None else None

def write_control(table: Table, memo: Lru[writes.Known], known_at: Callable[[str], writes.Known],
                  session_id: str, control: Control, head_version: int) -> bool:
    """One ``TransactWriteItems``: ``ConditionCheck``s that the head is still at
    ``head_version`` (see ``layout``) and the ``Put`` of the record, conditioned on the
    revision it replaces. An expired head or record (TTL, not deleted yet) counts as
    absent, as everywhere in this store. A record that announces a session's first turn
    carries the ``by_owner`` index keys (any later write drops them)."""
    if control.rev < 1:
        return False  # no stored revision is ever below 0
    known = memo.get(session_id)
    if known is None or known.version != head_version:
        known = known_at(session_id)
        if known.version != head_version:
            return False
    now_s = int(table.clock())
    expires_at = now_s + table.ttl_seconds if table.ttl_seconds else None
    item = lay.control_item(session_id, control.rev, control.model_dump_json(), expires_at)
    first = control.running
    if head_version == 0 and first is not None and first.version == 0:
        # a session's first turn, announced: ``list`` finds the session by this entry until
        # its ledger has one of its own (see ``listing``)
        item[lay.OWNER] = {"S": lay.owner_key(first.principal, session_id)}
        item[lay.UPDATED] = {"N": str(first.since)}
    actions: list[Any] = [
        {"ConditionCheck": check} for check in writes.head_checks(
            table.name, session_id, known, head_version, now_s)]
    actions.append({"Put": writes.control_put(table.name, item, control.rev, now_s)})
    for attempt in range(1, TRANSACTION_ATTEMPTS + 1):
        try:
            table.client.transact_write_items(TransactItems=actions)
            return True
        except ClientError as error:
            if code(error) != "TransactionCanceledException":
                raise store_error("write the control record", session_id,
                                   error) from error
            reasons = error.response.get("CancellationReasons") or []
            codes = {r.get("Code") for r in reasons} - {"None", None}
            if "ConditionalCheckFailed" in codes:
                memo.pop(session_id)
                return False  # the head or the record moved: the caller re-reads
            retryable = codes <= RETRYABLE
            if not retryable or attempt == TRANSACTION_ATTEMPTS:
                raise StoreError(
                    f"the control record of session {session_id} was not written "
                    f"({', '.join(sorted(str(c) for c in codes))}) after {attempt} "
                    "attempt(s)", retryable=retryable) from error
        except BotoCoreError as error:
            raise store_error("write the control record", session_id, error) from error
        time.sleep(RETRY_BACKOFF * 2 ** (attempt - 1))
    raise AssertionError("unreachable")


def control_of(item: dict[str, Any], now_s: int) -> Control | None:
    """The control record a ``~ctl`` item holds (None once it expired)."""
    if lay.expired(item, now_s):
        return None
    return Control.model_validate_json(item[lay.CONTROL]["S"])
