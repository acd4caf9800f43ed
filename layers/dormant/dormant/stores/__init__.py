"""Where a sleeping agent lives: one :class:`Store` protocol, several backends.

``MemoryStore`` is importable at no cost; the SQLite and DynamoDB stores are imported on first
use so the Lambda import path loads only the backend it runs on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dormant.stores._base import Store, commit_head
from dormant.stores.memory import MemoryStore

if TYPE_CHECKING:
    from dormant.stores.dynamodb import DynamoDBStore
    from dormant.stores.sqlite import SqliteStore

__all__ = ["DynamoDBStore", "MemoryStore", "SqliteStore", "Store", "commit_head"]


def __getattr__(name: str) -> Any:
    if name == "DynamoDBStore":
        from dormant.stores.dynamodb import DynamoDBStore

        return DynamoDBStore
    if name == "SqliteStore":
        from dormant.stores.sqlite import SqliteStore

        return SqliteStore
    raise AttributeError(f"module 'dormant.stores' has no attribute {name!r}")
