"""Sessions written by the old DynamoDB layout (``~head`` + ``e#<position>`` slices of JSON
events) load, and keep working: their next commit migrates them to version items.

The items are real: ``tests/fixtures/dynamodb/legacy_session.json`` was captured from the old
layout's code (see ``capture_legacy_session.py`` beside it).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

import dormant
from dormant._head import Head
from dormant.events import UserEvent, load_events
from dormant.models import ScriptedModel
from dormant.stores import DynamoDBStore
from dormant.types import Control
from tests._moto import aws_env, in_process_aws, put_items, session_items

TABLE = "dormant-legacy"
SID = "session_legacy"
FIXTURE = json.loads((Path(__file__).parents[1] / "fixtures" / "dynamodb"
                      / "legacy_session.json").read_text())


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[DynamoDBStore]:
    aws_env(monkeypatch)
    with in_process_aws():
        store = DynamoDBStore(TABLE)
        store.ensure_table()
        put_items(TABLE, FIXTURE["items"])
        yield store


def _items() -> dict[str, dict[str, Any]]:
    return session_items(TABLE, SID)


def _texts(store: DynamoDBStore) -> list[str]:
    stored = store.load(SID)
    assert stored is not None
    return [e.text for e in stored.events if isinstance(e, UserEvent)]


def _rest(store: DynamoDBStore, *replies: str) -> Any:
    app = dormant.App(name="legacy", store=store)
    return app.handler.rest(agent=app.agent(name="support", model=ScriptedModel(list(replies))))


def test_an_old_layout_session_loads_exactly_as_it_was_written(store: DynamoDBStore) -> None:
    stored = store.load(SID)

    assert stored is not None
    assert stored.head == Head.model_validate(FIXTURE["head"])
    assert stored.events == load_events(FIXTURE["events"])
    assert stored.control is not None and stored.control.rev == 1
    windowed = store.load(SID, turns=1)
    assert windowed is not None and windowed.head == stored.head
    assert [e.text for e in windowed.events if isinstance(e, UserEvent)] == ["bye"]


def test_its_next_turn_migrates_it_and_later_turns_are_one_item_each(
        store: DynamoDBStore) -> None:
    rest = _rest(store, "Welcome back.", "Still here.")
    before = FIXTURE["head"]["version"]

    reply = rest({"session_id": "legacy", "principal": "alice",
                  "input": {"message": "back again"}})

    assert (reply.status, reply.commit_status) == ("completed", "committed")
    items = _items()
    assert items["~head"]["moved"] == {"N": "1"} and "head" not in items["~head"]
    assert f"e#v{before + 1:010d}" in items
    assert [sk for sk in items if sk.startswith("e#0")] == [
        "e#000000000000", "e#000000000004", "e#000000000011", "e#000000000015"]  # kept
    assert _texts(store) == ["hi", "is T-1 open?", "two nights please", "bye", "back again"]
    stored = store.load(SID)
    assert stored is not None and stored.head.version == before + 1
    assert stored.head.state == {"tier": "gold"} and stored.head.principal == "alice"

    reply = rest({"session_id": "legacy", "principal": "alice",
                  "input": {"message": "and again"}})
    assert reply.commit_status == "committed"
    assert _texts(store)[-2:] == ["back again", "and again"]
    windowed = store.load(SID, turns=3)
    assert windowed is not None and [
        e.text for e in windowed.events if isinstance(e, UserEvent)] == [
        "bye", "back again", "and again"]


def test_an_old_writer_still_running_cannot_commit_beside_the_migrated_session(
        store: DynamoDBStore) -> None:
    old_head = FIXTURE["items"][-1]
    assert old_head["sk"] == {"S": "~head"}
    assert _rest(store, "Hello.")({"session_id": "legacy", "principal": "alice",
                                   "input": {"message": "new code"}}).commit_status \
        == "committed"

    # The old layout's commit: its head's Put, conditioned on the version it read.
    with pytest.raises(ClientError) as refused:
        boto3.client("dynamodb").put_item(
            TableName=TABLE, Item=old_head, ConditionExpression="#v = :v",
            ExpressionAttributeNames={"#v": "ver"},
            ExpressionAttributeValues={":v": old_head["ver"]})

    assert refused.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert _texts(store)[-1] == "new code"


def test_message_ids_the_old_layout_guarded_still_land_once(store: DynamoDBStore) -> None:
    rest = _rest(store)

    reply = rest({"session_id": "legacy", "principal": "alice",
                  "input": {"message": "hi", "messageId": "m-1"}})

    assert reply.code == "duplicate_message"
    assert store.has_once(SID, "m:m-1") and store.has_once(SID, "m:m-4")


def test_list_shows_it_once_before_and_after_the_migration(store: DynamoDBStore) -> None:
    app = dormant.App(store=store)
    before = app.sessions.list(principal="alice")
    assert [(s.session_id, s.version) for s in before] == [(SID, 4)]

    assert _rest(store, "Hi.")({"session_id": "legacy", "principal": "alice",
                                "input": {"message": "again"}}).commit_status == "committed"

    after = app.sessions.list(principal="alice")
    assert [(s.session_id, s.version) for s in after] == [(SID, 5)]
    assert after[0].updated_at > before[0].updated_at


def test_control_writes_follow_the_old_head_then_the_version_items(
        store: DynamoDBStore) -> None:
    stored = store.load(SID, turns=0)
    assert stored is not None and stored.head.version == 4
    assert store.write_control(SID, Control(rev=2), head_version=3) is False  # not its version
    assert store.write_control(SID, Control(rev=2), head_version=4) is True

    assert _rest(store, "Hi.")({"session_id": "legacy", "principal": "alice",
                                "input": {"message": "again"}}).commit_status == "committed"

    assert store.write_control(SID, Control(rev=3), head_version=4) is False  # it moved
    assert store.write_control(SID, Control(rev=3), head_version=5) is True
    assert store.read_control(SID) == Control(rev=3)


def test_a_migrated_session_deletes_whole(store: DynamoDBStore) -> None:
    assert _rest(store, "Hi.")({"session_id": "legacy", "principal": "alice",
                                "input": {"message": "again"}}).commit_status == "committed"

    assert store.delete(SID) is True

    assert store.load(SID) is None
    assert [item.get("del") for item in _items().values()] == [{"N": "1"}]  # the marker
    assert dormant.App(store=store).sessions.list(principal="alice") == []


def test_an_unmigrated_session_deletes_whole(store: DynamoDBStore) -> None:
    assert store.delete(SID) is True
    assert store.load(SID) is None and _items() == {}
