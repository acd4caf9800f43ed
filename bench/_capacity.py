"""DynamoDB capacity arithmetic: item sizes, write units, read units, by DynamoDB's rules.

Pure functions over what a boto3 client sends (typed attribute values, ``{"S": "..."}``), so a
benchmark can price every request it observes without asking DynamoDB:

- **Item size** (``item_bytes``): the UTF-8 length of every attribute *name* plus its value:
  strings their UTF-8 bytes; binary its raw bytes; numbers about one byte per two significant
  digits plus one; booleans and null one byte; lists and maps 3 bytes plus one byte per
  element plus the elements (a map's element counts its key too); sets their elements.
- **Write units** (``write_units``): a standard write of an item costs one unit per started
  KB (1,024 bytes) of the item (``PutItem`` of a replaced item: the larger of old and new;
  ``UpdateItem``: the larger of the item before and after; ``DeleteItem``: the deleted item);
  a transaction costs two units per started KB of *each* item it touches, ``ConditionCheck``
  included. A write refused by its condition still costs what it would have.
- **Index writes** (``index_write_units``): a global secondary index pays its own write per
  item that carries the index key: one unit per started KB of the index entry (index and
  table keys, projected attributes, plus 100 bytes), two when an update moves the entry
  (a delete of the old entry and a put of the new one).
- **Read units** (``read_units``): one unit per started 4 KB read strongly consistently, half
  that eventually consistently; a ``Query`` rounds the *sum* of the items it returns once (not
  per item); ``GetItem`` rounds its one item; nothing read still costs the minimum unit.

References: "Read/write capacity mode" and "Item sizes and formats" in the DynamoDB
developer guide; "Managing capacity for transactions" (twice per item).
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "INDEX_ENTRY_OVERHEAD",
    "READ_UNIT",
    "WRITE_UNIT",
    "index_write_units",
    "item_bytes",
    "read_units",
    "value_bytes",
    "write_units",
]

#: Bytes per write unit (a started KB costs a whole unit).
WRITE_UNIT = 1024
#: Bytes per read unit (strongly consistent; eventually consistent reads cost half).
READ_UNIT = 4096
#: Per-entry overhead DynamoDB adds to a global secondary index entry's size.
INDEX_ENTRY_OVERHEAD = 100

Item = Mapping[str, Mapping[str, Any]]


def _number_bytes(text: str) -> int:
    digits = text.strip().lstrip("+-").lower()
    mantissa, _, exponent = digits.partition("e")
    del exponent  # the exponent does not add significant digits
    significant = mantissa.replace(".", "").lstrip("0").rstrip("0")
    return math.ceil(len(significant) / 2) + 1


def _binary_bytes(value: Any) -> int:
    if isinstance(value, bytes | bytearray | memoryview):
        return len(bytes(value))
    return len(base64.b64decode(value))  # the wire (JSON) form is base64


def value_bytes(value: Mapping[str, Any]) -> int:
    """The size of one typed attribute value (without its name)."""
    (kind, inner), = value.items()
    if kind == "S":
        return len(str(inner).encode())
    if kind == "N":
        return _number_bytes(str(inner))
    if kind == "B":
        return _binary_bytes(inner)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(str(s).encode()) for s in inner)
    if kind == "NS":
        return sum(_number_bytes(str(n)) for n in inner)
    if kind == "BS":
        return sum(_binary_bytes(b) for b in inner)
    if kind == "L":
        return 3 + sum(1 + value_bytes(element) for element in inner)
    if kind == "M":
        return 3 + sum(1 + len(name.encode()) + value_bytes(element)
                       for name, element in inner.items())
    raise ValueError(f"unknown DynamoDB attribute type {kind!r}")


def item_bytes(item: Item) -> int:
    """An item's size as DynamoDB counts it: attribute names plus values."""
    return sum(len(name.encode()) + value_bytes(value) for name, value in item.items())


def _units(size: int, unit: int = WRITE_UNIT) -> int:
    return max(1, math.ceil(size / unit))


def _key_bytes(params: Mapping[str, Any]) -> int:
    return item_bytes(params.get("Key") or {})


def _action_size(kind: str, action: Mapping[str, Any], old: int) -> int:
    if kind == "Put":
        return max(item_bytes(action["Item"]), old)
    if kind == "Update":
        values = action.get("ExpressionAttributeValues") or {}
        return max(_key_bytes(action) + sum(value_bytes(v) for v in values.values()), old)
    return max(_key_bytes(action), old)  # Delete, ConditionCheck: the item as stored


def write_units(operation: str, params: Mapping[str, Any], *,
                old_items: Sequence[int] = ()) -> float:
    """Write units one request consumes (``params``: the request's parameters as a boto3
    client takes them, or its JSON body).

    ``old_items``: sizes (bytes) of the items as stored before the write, in the request's
    order (one for ``PutItem`` / ``UpdateItem`` / ``DeleteItem``, one per action of a
    transaction, one per request of a batch); missing sizes count as nothing stored, so
    ``DeleteItem`` and ``ConditionCheck`` fall back to the key's size (at least a unit).
    ``UpdateItem`` without the old size prices the key plus the values it sets.
    """
    olds = list(old_items)

    def old(index: int) -> int:
        return olds[index] if index < len(olds) else 0

    if operation == "PutItem":
        return float(_units(_action_size("Put", params, old(0))))
    if operation == "UpdateItem":
        return float(_units(_action_size("Update", params, old(0))))
    if operation == "DeleteItem":
        return float(_units(_action_size("Delete", params, old(0))))
    if operation == "TransactWriteItems":
        total = 0
        for index, entry in enumerate(params["TransactItems"]):
            (kind, action), = entry.items()
            total += 2 * _units(_action_size(kind, action, old(index)))
        return float(total)
    if operation == "BatchWriteItem":
        total, index = 0, 0
        for requests in params["RequestItems"].values():
            for request in requests:
                if "PutRequest" in request:
                    total += _units(max(item_bytes(request["PutRequest"]["Item"]), old(index)))
                else:
                    total += _units(max(_key_bytes(request["DeleteRequest"]), old(index)))
                index += 1
        return float(total)
    raise ValueError(f"{operation} is not a write operation")


def index_write_units(item: Item, key_attributes: Sequence[str],
                      projected: Sequence[str] = (), *, moved: bool = False) -> float:
    """Write units a global secondary index pays for one table write of ``item``: nothing if
    the item lacks an index key attribute; else one unit per started KB of the entry (the
    index and table key attributes and ``projected``, plus 100 bytes), twice when the write
    moves an existing entry (``moved``: old entry deleted, new put).

    ``key_attributes``: the index key and then the table key attribute names.
    """
    if not all(name in item for name in key_attributes):
        return 0.0
    names = list(dict.fromkeys([*key_attributes, *projected]))
    entry = {name: item[name] for name in names if name in item}
    units = _units(item_bytes(entry) + INDEX_ENTRY_OVERHEAD)
    return float(units * (2 if moved else 1))


def read_units(size: int, consistent: bool) -> float:
    """Read units of one read returning ``size`` bytes of items (a ``Query``: the sum of its
    items; a ``GetItem``: its item): one per started 4 KB, halved when eventually consistent,
    at least the minimum unit."""
    units = _units(size, READ_UNIT)
    return float(units) if consistent else units / 2
