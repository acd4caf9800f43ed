"""Ids stay unique across Lambda SnapStart restores: every environment restored from one
snapshot starts with the snapshot's memory, so the id seed is re-made after each restore
(``snapshot_restore_py.register_after_restore``, which the Lambda runtime provides)."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterator

import pytest

from dormant import _ids


@pytest.fixture
def restore_hooks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Callable[[], None]]]:
    """A stand-in for the runtime's ``snapshot_restore_py``: records what is registered."""
    hooks: list[Callable[[], None]] = []
    module = types.ModuleType("snapshot_restore_py")
    module.register_after_restore = hooks.append  # type: ignore[attr-defined]
    module.register_before_snapshot = lambda hook: None  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "snapshot_restore_py", module)
    yield hooks


def test_after_a_restore_ids_come_from_a_new_seed(
        restore_hooks: list[Callable[[], None]]) -> None:
    assert _ids.register_snapshot_restore_hook() is True
    [hook] = restore_hooks
    snapshot_seed = _ids.new_id("call").split("_")[1]
    hook()  # what the runtime does in each environment restored from the snapshot
    restored = _ids.new_id("call")
    _, seed, counter = restored.split("_")
    assert seed != snapshot_seed and len(seed) == 16
    assert counter == "1"  # the counter restarts with the seed


def test_two_restores_of_one_snapshot_mint_different_ids(
        restore_hooks: list[Callable[[], None]], monkeypatch: pytest.MonkeyPatch) -> None:
    import itertools

    _ids.register_snapshot_restore_hook()
    [hook] = restore_hooks
    snapshot = _ids._seed, 7  # the memory every restored environment starts from
    minted = set()
    for _ in range(2):  # two environments restored from the same snapshot
        monkeypatch.setattr(_ids, "_seed", snapshot[0])
        monkeypatch.setattr(_ids, "_counter", itertools.count(snapshot[1]))
        hook()
        minted.add(_ids.new_id("evt"))
    assert len(minted) == 2


def test_without_the_runtime_module_nothing_is_registered(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "snapshot_restore_py", None)  # import fails
    assert _ids.register_snapshot_restore_hook() is False
    assert _ids.new_id("x").startswith("x_")
