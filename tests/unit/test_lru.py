"""dormant._lru.Lru: the bounded memory of recent sessions every cache in the package uses."""

from __future__ import annotations

from dormant._lru import Lru


def test_the_least_recently_used_goes_first() -> None:
    lru: Lru[int] = Lru(2)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.get("a") == 1  # "a" is now the most recent
    lru.put("c", 3)
    assert (lru.get("a"), lru.get("b"), lru.get("c")) == (1, None, 3)


def test_weights_bound_the_total_and_a_value_heavier_than_all_is_not_kept() -> None:
    lru: Lru[list[int]] = Lru(5, len)
    lru.put("a", [1, 2, 3])
    lru.put("b", [1, 2])
    lru.put("a", [1, 2, 3, 4])  # replacing counts the new weight only: 4 + 2 > 5
    assert lru.get("b") is None and lru.get("a") == [1, 2, 3, 4]
    lru.put("c", [0] * 6)
    assert lru.get("c") is None and lru.get("a") == [1, 2, 3, 4]
    lru.pop("a")
    lru.put("d", [0] * 5)
    assert lru.get("d") == [0] * 5
