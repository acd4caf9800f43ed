"""Every store runs the same suite. Add a backend here: one factory, one id.

A store class exported by ``dormant.stores`` that no factory covers fails
``test_every_store_is_covered`` — a backend cannot ship untested.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Iterator

import pytest

from dormant.stores import MemoryStore, Store
from tests import _dynamodb_local

from ._capture import ledger_capture
from ._dynamodb import dynamodb_in_process, dynamodb_local, dynamodb_server

__all__ = ["ledger_capture"]  # (an autouse fixture: see _capture)

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

#: Why Amazon's DynamoDB Local is not in the matrix on this machine (None: it is). CI must
#: have it: there a missing piece fails the run instead of shrinking the matrix.
DYNAMODB_LOCAL_MISSING = _dynamodb_local.unavailable()
if DYNAMODB_LOCAL_MISSING is None:
    STORE_FACTORIES["dynamodb-local"] = ("DynamoDBStore", dynamodb_local)
elif os.environ.get("CI", "").lower() not in ("", "0", "false", "no"):
    raise RuntimeError(
        f"CI runs the store conformance suite on DynamoDB Local, but here it cannot run: "
        f"{DYNAMODB_LOCAL_MISSING}. .ci/run installs Java and the npm package; CI runs as root.")


@pytest.fixture(params=sorted(STORE_FACTORIES))
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    _, factory = STORE_FACTORIES[request.param]
    yield from factory()


def pytest_report_collectionfinish() -> list[str]:
    if DYNAMODB_LOCAL_MISSING is None:
        return []
    return [f"store matrix: dynamodb-local left out ({DYNAMODB_LOCAL_MISSING})"]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
        item: pytest.Item) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test that ran on DynamoDB Local shows the end of its log."""
    report = yield
    local = _dynamodb_local.running()
    on_local = "dynamodb-local" in item.nodeid or "DynamoDBLocal" in item.nodeid
    if report.failed and local is not None and on_local:
        report.sections.append(("DynamoDB Local log (tail)", local.log()))
    return report
