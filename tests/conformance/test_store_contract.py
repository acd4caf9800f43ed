"""The store contract (``dormant.testing.StoreContract``) on every store this repo ships.

The checks themselves live in the package, so a third-party store runs the same ones; here each
factory of ``STORE_FACTORIES`` gets its ``Test...`` subclass, and a store defined outside the
package proves the shipped suite is usable from the outside.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import ClassVar

import pytest

from dormant._head import Head
from dormant.events import Event
from dormant.stores import MemoryStore, Store
from dormant.testing import StoreContract
from dormant.types import CommitResult, Control, SessionSummary, StoredSession

from .conftest import STORE_FACTORIES


def test_every_store_is_covered() -> None:
    import dormant.stores as stores

    covered = {cls for cls, _ in STORE_FACTORIES.values()}
    exported = {name for name in stores.__all__ if name.endswith("Store") and name != "Store"}
    importable = {name for name in exported if _importable(stores, name)}
    assert importable <= covered, f"stores without conformance: {importable - covered}"
    contracted = {cls.factory for cls in _FromFactory.__subclasses__()
                  if cls.__name__.startswith("Test")}
    missing = set(STORE_FACTORIES) - contracted
    assert not missing, f"factories without a StoreContract subclass here: {missing}"


def _importable(module: object, name: str) -> bool:
    try:
        getattr(module, name)
    except (ImportError, AttributeError):
        return False
    return True


class _FromFactory(StoreContract):
    """The contract on one of ``STORE_FACTORIES`` (not collected: no ``Test`` prefix)."""

    factory: ClassVar[str]

    @pytest.fixture
    def store(self) -> Iterator[Store]:
        _, make = STORE_FACTORIES[self.factory]
        yield from make()


class TestMemoryStore(_FromFactory):
    factory = "memory"


class TestSqliteStore(_FromFactory):
    factory = "sqlite"


class TestDynamoDBStoreOnMoto(_FromFactory):
    factory = "dynamodb-moto"


class TestDynamoDBStoreOnMotoServer(_FromFactory):
    factory = "dynamodb-server"


if "dynamodb-local" in STORE_FACTORIES:  # absent only outside CI, without Java or root

    class TestDynamoDBStoreOnDynamoDBLocal(_FromFactory):
        factory = "dynamodb-local"


class VendorStore:
    """A store from outside the package: its own class, only the ``Store`` protocol's methods
    (backed by a MemoryStore to stay small)."""

    def __init__(self) -> None:
        self._rows = MemoryStore()

    def load(self, session_id: str, *, turns: int | None = None,
             compacted: bool = False) -> StoredSession | None:
        return self._rows.load(session_id, turns=turns, compacted=compacted)

    def fork(self, head: Head) -> CommitResult:
        return self._rows.fork(head)

    def version_end(self, session_id: str, version: int) -> int | None:
        return self._rows.version_end(session_id, version)

    def append(self, head: Head, events: Sequence[Event], *, expected_version: int) -> CommitResult:
        return self._rows.append(head, events, expected_version=expected_version)

    def has_once(self, session_id: str, key: str) -> bool:
        return self._rows.has_once(session_id, key)

    def landed(self, session_id: str, seq: int, event_id: str) -> bool:
        return self._rows.landed(session_id, seq, event_id)

    def read_control(self, session_id: str) -> Control | None:
        return self._rows.read_control(session_id)

    def write_control(self, session_id: str, control: Control, *, head_version: int) -> bool:
        return self._rows.write_control(session_id, control, head_version=head_version)

    def delete(self, session_id: str) -> bool:
        return self._rows.delete(session_id)

    def list(self, *, principal: str | None = None, limit: int = 100) -> list[SessionSummary]:
        return self._rows.list(principal=principal, limit=limit)


class TestAThirdPartyStoreRunsTheShippedSuite(StoreContract):
    """Exactly what the README tells a backend author to write."""

    @pytest.fixture
    def store(self) -> Iterator[Store]:
        yield VendorStore()
