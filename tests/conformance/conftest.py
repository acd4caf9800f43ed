"""Every store runs the same suite. Add a backend here: one factory, one id.

A store class exported by ``dormant.stores`` that no factory covers fails
``test_every_store_is_covered`` — a backend cannot ship untested.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from dormant.stores import MemoryStore, Store

from ._dynamodb import dynamodb_in_process, dynamodb_server

StoreFactory = Callable[[], Iterator[Store]]


def _memory() -> Iterator[Store]:
    yield MemoryStore()


def _sqlite() -> Iterator[Store]:
    import tempfile

    from dormant.stores import SqliteStore

    with tempfile.TemporaryDirectory(prefix="dormant-sqlite-") as tmp:
        store = SqliteStore(f"{tmp}/conformance.db")
        try:
            yield store
        finally:
            store.close()


#: name -> (store class name, factory). Factories are generators: setup, yield, teardown.
STORE_FACTORIES: dict[str, tuple[str, StoreFactory]] = {
    "memory": ("MemoryStore", _memory),
    "dynamodb-moto": ("DynamoDBStore", dynamodb_in_process),
    "dynamodb-server": ("DynamoDBStore", dynamodb_server),
    "sqlite": ("SqliteStore", _sqlite),
}


@pytest.fixture(params=sorted(STORE_FACTORIES))
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    _, factory = STORE_FACTORIES[request.param]
    yield from factory()
