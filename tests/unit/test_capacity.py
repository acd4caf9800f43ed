"""The capacity arithmetic the DynamoDB benchmarks price requests with (bench/_capacity.py)."""

from __future__ import annotations

import pytest

from bench._capacity import index_write_units, item_bytes, read_units, write_units


def test_item_size_counts_names_and_values() -> None:
    assert item_bytes({"pk": {"S": "abc"}}) == 2 + 3
    assert item_bytes({"é": {"S": "é"}}) == 2 + 2  # UTF-8 bytes, names included
    assert item_bytes({"n": {"N": "12345"}}) == 1 + 3 + 1  # 5 digits: 3 bytes + 1
    assert item_bytes({"n": {"N": "-0.0100"}}) == 1 + 1 + 1  # zeros trimmed: "1"
    assert item_bytes({"b": {"B": b"\x00\x01\x02"}}) == 1 + 3
    assert item_bytes({"b": {"B": "AAEC"}}) == 1 + 3  # the wire's base64
    assert item_bytes({"t": {"BOOL": True}, "z": {"NULL": True}}) == 2 + 2
    assert item_bytes({"s": {"SS": ["ab", "c"]}}) == 1 + 3
    assert item_bytes({"l": {"L": [{"S": "ab"}, {"N": "1"}]}}) == 1 + 3 + (1 + 2) + (1 + 2)
    assert item_bytes({"m": {"M": {"k": {"S": "v"}}}}) == 1 + 3 + 1 + 1 + 1


def test_put_item_costs_a_unit_per_started_kb() -> None:
    def put(size: int) -> float:
        return write_units("PutItem", {"Item": {"pk": {"S": "x" * (size - 2)}}})

    assert put(1024) == 1
    assert put(1025) == 2
    assert put(2048) == 2
    assert put(10) == 1
    small = {"Item": {"pk": {"S": "x"}}}
    assert write_units("PutItem", small, old_items=[3000]) == 3  # the larger of old and new


def test_transactions_cost_twice_per_item() -> None:
    head = {"pk": {"S": "x" * 1500}}
    event = {"pk": {"S": "y" * 500}}
    params = {"TransactItems": [
        {"Put": {"Item": head}},
        {"Put": {"Item": event}},
        {"ConditionCheck": {"Key": {"pk": {"S": "s"}}}},
    ]}
    assert write_units("TransactWriteItems", params) == 2 * 2 + 2 * 1 + 2 * 1


def test_update_delete_and_batch() -> None:
    key = {"Key": {"pk": {"S": "s"}}}
    assert write_units("DeleteItem", key) == 1
    assert write_units("DeleteItem", key, old_items=[5000]) == 5
    update = {**key, "ExpressionAttributeValues": {":v": {"S": "x" * 2000}}}
    assert write_units("UpdateItem", update) == 2
    batch = {"RequestItems": {"t": [{"PutRequest": {"Item": {"pk": {"S": "x" * 1100}}}},
                                   {"DeleteRequest": {"Key": {"pk": {"S": "y"}}}}]}}
    assert write_units("BatchWriteItem", batch) == 3
    with pytest.raises(ValueError):
        write_units("Query", {})


def test_index_writes_only_for_items_carrying_the_index_key() -> None:
    keys = ["own", "ua", "pk", "sk"]
    with_key = {"pk": {"S": "s"}, "sk": {"S": "v"}, "own": {"S": "p:a"}, "ua": {"N": "1"},
                "big": {"S": "x" * 5000}}
    assert index_write_units(with_key, keys, ["ver"]) == 1  # "big" is not projected
    assert index_write_units(with_key, keys, ["big"]) == 5  # 5,019 + 100 bytes
    assert index_write_units(with_key, keys, moved=True) == 2
    assert index_write_units({"pk": {"S": "s"}, "sk": {"S": "v"}}, keys) == 0


def test_read_units_round_the_sum_to_4_kb() -> None:
    assert read_units(0, consistent=True) == 1
    assert read_units(4096, consistent=True) == 1
    assert read_units(4097, consistent=True) == 2
    assert read_units(4097, consistent=False) == 1
    assert read_units(100, consistent=False) == 0.5
