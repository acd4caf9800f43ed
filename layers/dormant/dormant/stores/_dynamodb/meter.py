"""What the store's requests cost, counted as they return: ``DynamoDBStore.counters``.

A :class:`Meter` hangs on one client through botocore's event system: after each call it
adds one request and the capacity units DynamoDB said the call consumed to the calling
thread's totals (a dev server serves several threads with one store; a turn's phases read
their own thread's). On a DynamoDB client it also asks every request that can say what it
consumed to say it (``ReturnConsumedCapacity=TOTAL``, free of charge) unless the caller
asked otherwise. A call is counted once, however often botocore retried it; one that failed
counts too.

One meter per client: stores that share a client (or code of yours that uses the client a
store was given) share its totals, and its requests are asked for their capacity too.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

__all__ = ["Meter", "meter"]

_lock = threading.Lock()
_meters: weakref.WeakKeyDictionary[Any, Meter] = weakref.WeakKeyDictionary()


class _Totals(threading.local):
    """One thread's totals (the class attributes are every new thread's start)."""

    requests = 0
    capacity = 0.0


class Meter:
    """One client's requests and consumed capacity, per thread."""

    def __init__(self) -> None:
        self._totals = _Totals()

    def totals(self) -> tuple[int, float]:
        """This thread's requests so far, and the capacity units they consumed."""
        totals = self._totals
        return totals.requests, totals.capacity

    def called(self, parsed: Any = None, **_: Any) -> None:
        totals = self._totals
        totals.requests += 1
        consumed = parsed.get("ConsumedCapacity") if isinstance(parsed, dict) else None
        if consumed:
            totals.capacity += _units(consumed)


def _units(consumed: Any) -> float:
    """Capacity units in a response's ``ConsumedCapacity``: one table's (a dict), or each
    table's (a list, as batches and transactions answer)."""
    if isinstance(consumed, dict):
        return float(consumed.get("CapacityUnits") or 0.0)
    return float(sum(entry.get("CapacityUnits") or 0.0 for entry in consumed
                     if isinstance(entry, dict)))


def meter(client: Any) -> Meter:
    """The meter of ``client`` (hung on it on first use; a stand-in that is not a botocore
    client gets one that counts nothing)."""
    if getattr(getattr(client, "meta", None), "events", None) is None:
        return Meter()
    with _lock:
        found = _meters.get(client)
        if found is None:
            found = _meters[client] = Meter()
            events = client.meta.events
            events.register("after-call", found.called, unique_id="dormant-meter")
            events.register("after-call-error", found.called, unique_id="dormant-meter-error")
            if client.meta.service_model.service_name == "dynamodb":
                events.register("before-parameter-build.dynamodb", _ask_capacity,
                                unique_id="dormant-meter-capacity")
        return found


def _ask_capacity(params: dict[str, Any], model: Any, **_: Any) -> None:
    if "ReturnConsumedCapacity" not in params and model.input_shape is not None \
            and "ReturnConsumedCapacity" in model.input_shape.members:
        params["ReturnConsumedCapacity"] = "TOTAL"

