"""A bounded map shared by a process's threads: what it remembers of recent sessions."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Lru"]

V = TypeVar("V")


class Lru(Generic[V]):
    """Values by key, the least recently used dropped first once the values' total
    ``weight`` (1 each by default) passes ``capacity``; a value heavier than ``capacity`` is
    not kept. Safe across threads."""

    def __init__(self, capacity: int, weight: Callable[[V], int] | None = None) -> None:
        self._capacity = capacity
        self._weight = weight or (lambda _: 1)
        self._values: OrderedDict[str, V] = OrderedDict()
        self._total = 0
        self._lock = threading.Lock()

    def get(self, key: str) -> V | None:
        with self._lock:
            value = self._values.get(key)
            if value is not None:
                self._values.move_to_end(key)
            return value

    def put(self, key: str, value: V) -> None:
        weight = self._weight(value)
        with self._lock:
            self._drop(key)
            if weight > self._capacity:
                return
            self._values[key] = value
            self._total += weight
            while self._total > self._capacity:
                _, dropped = self._values.popitem(last=False)
                self._total -= self._weight(dropped)

    def pop(self, key: str) -> None:
        with self._lock:
            self._drop(key)

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
            self._total = 0

    def _drop(self, key: str) -> None:
        old = self._values.pop(key, None)
        if old is not None:
            self._total -= self._weight(old)
