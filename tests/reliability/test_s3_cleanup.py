"""Offloaded S3 objects go with their session: the table's stream -> the cleanup function.

Sessions are written by a real ``DynamoDBStore`` (events over ``offload_above`` go to S3); the
stream records are built from the real items, removed from the table as TTL removes them, in
the shape Lambda delivers them (``StreamViewType: OLD_IMAGE``); the template's event filter is
applied to them as Lambda applies it. Every S3 call the function makes is checked against its
role in template.yaml (``iam_recorded``).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import boto3
import pytest

import dormant
from dormant.stores import DynamoDBStore
from tests.functions.conftest import Deployment, FakeLambdaContext, Recording, load_event
from tests.functions.test_template import props

SAMPLE = "cleanup_ddb_stream_remove.json"


def _store(deployed: Deployment) -> DynamoDBStore:
    """The deployment's store, offloading any event over 1 KB (as a large tool result is)."""
    return DynamoDBStore(deployed.table, bucket=deployed.bucket, offload_above=1_000)


def _write(deployed: Deployment, session_id: str, *texts: str) -> None:
    app = dormant.App(store=_store(deployed))
    for n, text in enumerate(texts):
        assert app.sessions.append(session_id, text, id=f"m-{n}").ok


def _items(deployed: Deployment, session_id: str) -> list[dict[str, Any]]:
    return boto3.client("dynamodb").query(
        TableName=deployed.table, KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": session_id}})["Items"]


def _objects(deployed: Deployment, session_id: str) -> set[str]:
    listed = boto3.client("s3").list_objects_v2(Bucket=deployed.bucket,
                                                Prefix=f"ledger/{session_id}/")
    return {o["Key"] for o in listed.get("Contents", [])}


def _json(value: Any) -> Any:
    """An item as a stream record carries it: binary values base64 encoded, as in JSON."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json(v) for v in value]
    return value


def _record(item: dict[str, Any], n: int, name: str = "REMOVE") -> dict[str, Any]:
    """The stream record of ``item``'s removal (or insertion), as Lambda delivers it."""
    item = _json(item)
    image = {"OldImage": item} if name == "REMOVE" else {}
    return {
        "eventID": f"event-{n}", "eventName": name, "eventVersion": "1.1",
        "eventSource": "aws:dynamodb", "awsRegion": "us-east-1",
        "dynamodb": {"ApproximateCreationDateTime": 1764547200,
                     "Keys": {"pk": item["pk"], "sk": item["sk"]}, **image,
                     "SequenceNumber": f"{1000 + n:021d}", "SizeBytes": 512,
                     "StreamViewType": "OLD_IMAGE"},
        "userIdentity": {"type": "Service", "principalId": "dynamodb.amazonaws.com"},
        "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/dormant-test/stream/"
                          "2026-01-01T00:00:00.000",
    }


def _expire(deployed: Deployment, session_id: str) -> list[dict[str, Any]]:
    """Remove the session's items as TTL does; the stream records of the removals."""
    client = boto3.client("dynamodb")
    records = []
    for n, item in enumerate(_items(deployed, session_id)):
        client.delete_item(TableName=deployed.table, Key={"pk": item["pk"], "sk": item["sk"]})
        records.append(_record(item, n))
    return records


# --- the event source's filter: what reaches the function ---------------------------------------


def _matches(pattern: Any, value: Any) -> bool:
    """Lambda event filtering (the EventBridge pattern language), for the subset the template's
    pattern uses: nested objects, lists of literal values, ``prefix`` and ``exists``. A list
    matches a leaf when one of its options matches it, or, the leaf being an array (a string
    set's ``SS``), one of its elements; an object (not a leaf) matches no list."""
    if isinstance(pattern, dict):
        if not isinstance(value, dict):
            return False
        for key, sub in pattern.items():
            if isinstance(sub, list) and any(
                    isinstance(o, dict) and "exists" in o for o in sub):
                [option] = sub
                if (key in value and not isinstance(value[key], dict)) != option["exists"]:
                    return False
            elif key not in value or not _matches(sub, value[key]):
                return False
        return True
    assert isinstance(pattern, list), pattern
    if isinstance(value, dict):
        return False
    leaves = value if isinstance(value, list) else [value]
    for option in pattern:
        if isinstance(option, dict):
            assert set(option) == {"prefix"}, f"this test does not evaluate {option}"
            if any(isinstance(leaf, str) and leaf.startswith(option["prefix"])
                   for leaf in leaves):
                return True
        elif option in leaves:
            return True
    return False


def test_the_filter_evaluator_follows_lambdas_rules_for_what_the_pattern_uses() -> None:
    """The evaluator itself, on the rules it claims (so a pass below means the pattern does
    what Lambda would make of it)."""
    prefix = {"SS": [{"prefix": "ledger/"}]}
    assert _matches(prefix, {"SS": ["other/a", "ledger/x/1.json"]})  # one element suffices
    assert not _matches(prefix, {"SS": ["other/a"]})
    assert not _matches(prefix, {"S": "ledger/x"})  # another type's key is not there
    assert not _matches({"s3": ["REMOVE"]}, {"s3": {"S": "REMOVE"}})  # an object is no leaf
    assert _matches({"a": ["x", "y"]}, {"a": "y", "b": 1})
    assert not _matches({"a": ["x"], "b": ["2"]}, {"a": "x", "b": 2})  # every key must match
    assert _matches({"a": [{"exists": False}]}, {"b": "x"})
    assert not _matches({"a": [{"exists": True}]}, {"b": "x"})


def _delivered(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The event Lambda invokes the function with: the records its filter passes."""
    [event] = props("CleanupFunction")["Events"].values()
    [filter_] = event["Properties"]["FilterCriteria"]["Filters"]
    pattern = json.loads(filter_["Pattern"])
    return {"Records": [r for r in records if _matches(pattern, r)]}


def _failures(reply: dict[str, Any]) -> list[str]:
    return [f["itemIdentifier"] for f in reply["batchItemFailures"]]


# --- the behaviour --------------------------------------------------------------------------------


def test_an_expired_session_s_objects_are_deleted_and_nobody_else_s(
        deployed: Deployment, context: FakeLambdaContext, iam_recorded: Recording) -> None:
    _write(deployed, "session_gone", "x" * 2_000, "short", "y" * 3_000)
    _write(deployed, "session_kept", "z" * 2_000)
    assert len(_objects(deployed, "session_gone")) == 2
    kept = _objects(deployed, "session_kept")
    cleanup = deployed.cold_start("cleanup")

    reply = cleanup.handler(_delivered(_expire(deployed, "session_gone")), context)

    assert _failures(reply) == []
    assert _objects(deployed, "session_gone") == set()
    assert _objects(deployed, "session_kept") == kept != set()
    assert iam_recorded.recorder.actions("cleanup") == {"s3:DeleteObject"}


def test_a_session_created_again_under_the_same_id_keeps_its_new_objects(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    _write(deployed, "session_again", "old " * 500)
    old = _objects(deployed, "session_again")
    removed = _expire(deployed, "session_again")
    _write(deployed, "session_again", "new " * 500)  # same id, same position, new event id
    new = _objects(deployed, "session_again") - old
    assert len(new) == 1

    reply = deployed.cold_start("cleanup").handler(_delivered(removed), context)

    assert _failures(reply) == []
    assert _objects(deployed, "session_again") == new
    assert deployed.session("session_again").events[-1].text == "new " * 500


def test_only_removals_of_items_naming_objects_reach_the_function(
        deployed: Deployment) -> None:
    """Version items (``e#v…``) and the old layout's slices (``e#<position>``) whose old image
    names offloaded keys pass the template's filter; items that name none (an ordinary turn's
    version item, a guard, the control record, an old slice of small events) do not, and
    neither do inserts and updates."""
    _write(deployed, "session_filtered", "x" * 2_000, "short")
    items = _items(deployed, "session_filtered")
    [guard, *_] = [i for i in items if i["sk"]["S"].startswith("#o#")]
    named = [i for i in items if i["sk"]["S"].startswith("e#v") and "s3" in i]
    plain = [i for i in items if i["sk"]["S"].startswith("e#v") and "s3" not in i]
    assert len(named) == len(plain) == 1  # the 2 KB message names its object, "short" none
    [version] = named
    control = {"pk": guard["pk"], "sk": {"S": "~ctl"}, "rev": {"N": "1"}}
    old_slice = {"pk": guard["pk"], "sk": {"S": "e#000000000000"}, "ev": {"S": "[]"}}
    old_offloaded = {**old_slice, "sk": {"S": "e#000000000007"},
                     "s3": {"SS": ["ledger/session_filtered/000000000007-evt_1.json"]}}

    delivered = _delivered([_record(guard, 1), _record(control, 2),
                            _record(version, 3, "INSERT"), _record(version, 4, "MODIFY"),
                            _record(version, 5), _record(old_slice, 6), _record(plain[0], 7),
                            _record(old_offloaded, 9)])

    assert [r["eventID"] for r in delivered["Records"]] == ["event-5", "event-9"]


def test_a_poison_record_fails_alone_and_deletes_nothing(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    _write(deployed, "session_a", "a" * 2_000)
    _write(deployed, "session_b", "b" * 2_000)
    _write(deployed, "session_victim", "v" * 2_000)
    victim = _objects(deployed, "session_victim")
    first, second = _expire(deployed, "session_a"), _expire(deployed, "session_b")
    # An item naming another session's object, and one without its old image.
    [stolen] = [r for r in second if "s3" in r["dynamodb"]["OldImage"]]
    foreign = json.loads(json.dumps(stolen))
    foreign["dynamodb"]["OldImage"]["s3"] = {"SS": sorted(victim)}
    foreign["dynamodb"]["SequenceNumber"] = "000000000000000009998"
    imageless = json.loads(json.dumps(stolen))
    del imageless["dynamodb"]["OldImage"]
    imageless["dynamodb"]["SequenceNumber"] = "000000000000000009999"
    # The filter never passes a record without the old image (it matches on it); a wider
    # filter, or one sent by hand, is still refused.
    assert _delivered([imageless]) == {"Records": []}
    batch = {"Records": [*_delivered([*first, foreign])["Records"], imageless,
                         *_delivered(second)["Records"]]}

    reply = deployed.cold_start("cleanup").handler(batch, context)

    assert _failures(reply) == ["000000000000000009998", "000000000000000009999"]
    assert _objects(deployed, "session_a") == _objects(deployed, "session_b") == set()
    assert _objects(deployed, "session_victim") == victim


def test_a_redelivered_removal_is_done_again_harmlessly(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    _write(deployed, "session_twice", "t" * 2_000)
    event = _delivered(_expire(deployed, "session_twice"))
    cleanup = deployed.cold_start("cleanup")
    assert _failures(cleanup.handler(event, context)) == []

    assert _failures(cleanup.handler(event, FakeLambdaContext())) == []
    assert _objects(deployed, "session_twice") == set()


def test_the_sample_event_deletes_the_objects_it_names(
        deployed: Deployment, context: FakeLambdaContext, iam_recorded: Recording) -> None:
    event = load_event(SAMPLE)
    [record] = event["Records"]
    keys = record["dynamodb"]["OldImage"]["s3"]["SS"]
    for key in keys:
        boto3.client("s3").put_object(Bucket=deployed.bucket, Key=key, Body=b"{}")
    session_id = record["dynamodb"]["Keys"]["pk"]["S"]
    assert _objects(deployed, session_id) == set(keys)
    assert _delivered(event["Records"]) == event  # the filter passes it

    reply = deployed.cold_start("cleanup").handler(event, context)

    assert _failures(reply) == []
    assert _objects(deployed, session_id) == set()
    assert {c.resource for c in iam_recorded.recorder.of("cleanup")} == {
        f"arn:aws:s3:::{deployed.bucket}/{key}" for key in keys}


class _RefusingS3:
    """An S3 client whose ``DeleteObjects`` answers 200 with per-key errors, as S3 does when
    it refuses some keys of a batch (moto never does)."""

    def __init__(self) -> None:
        self.deleted: list[list[str]] = []

    def delete_objects(self, *, Bucket: str, Delete: dict[str, Any]) -> dict[str, Any]:
        keys = [o["Key"] for o in Delete["Objects"]]
        self.deleted.append(keys)
        return {"Errors": [{"Key": k, "Code": "AccessDenied", "Message": "Access Denied"}
                           for k in keys]}


def test_objects_s3_refuses_to_delete_fail_their_record_so_it_is_retried(
        deployed: Deployment, context: FakeLambdaContext,
        monkeypatch: pytest.MonkeyPatch) -> None:
    _write(deployed, "session_refused", "r" * 2_000)
    event = _delivered(_expire(deployed, "session_refused"))
    cleanup = deployed.cold_start("cleanup")
    refusing = _RefusingS3()
    monkeypatch.setattr(cleanup, "_s3", refusing)

    reply = cleanup.handler(event, context)

    [record] = [r for r in event["Records"] if "s3" in r["dynamodb"]["OldImage"]]
    assert _failures(reply) == [record["dynamodb"]["SequenceNumber"]]
    assert refusing.deleted == [record["dynamodb"]["OldImage"]["s3"]["SS"]]
