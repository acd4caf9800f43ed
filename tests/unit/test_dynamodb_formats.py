"""Version items written in payload format 1 (items already in users' tables) load into the
same events and head as when they were written, and a session of them commits on in format 2.

The items are real: ``tests/fixtures/dynamodb/format1_session.json`` was captured from the
code that wrote format 1 (see ``capture_format1_session.py`` beside it): 31 versions, two
checkpoints, head deltas, a tool under approval, a principal, ``li`` on the items outside
``list``'s index.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import dormant
from dormant._head import Head
from dormant.events import UserEvent, load_events
from dormant.models import ScriptedModel
from dormant.stores import DynamoDBStore
from dormant.stores._dynamodb import codec, layout, reads
from tests._moto import aws_env, in_process_aws, put_items, session_items

TABLE = "dormant-format1"
SID = "session_format1"
FIXTURE = json.loads((Path(__file__).parents[1] / "fixtures" / "dynamodb"
                      / "format1_session.json").read_text())
#: The fixture's last version and when it was written (ms).
LAST = FIXTURE["head"]["version"]
WRITTEN = FIXTURE["head"]["updated_at"]


def _stored(item: dict[str, Any]) -> dict[str, Any]:
    """A fixture item as boto3 takes it (binary values are base64 in the file)."""
    return {name: ({"B": base64.b64decode(value["B"])} if "B" in value else value)
            for name, value in item.items()}


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The heads' clock (ms), a minute after the fixture's last commit."""
    now = [WRITTEN + 60_000]
    monkeypatch.setattr("dormant.stores._base.now_ms", lambda: now[0])
    return now


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch, clock: list[int]) -> Iterator[DynamoDBStore]:
    aws_env(monkeypatch)
    with in_process_aws():
        store = DynamoDBStore(TABLE)
        store.ensure_table()
        put_items(TABLE, [_stored(item) for item in FIXTURE["items"]])
        yield store


def _items() -> dict[str, dict[str, Any]]:
    return session_items(TABLE, SID)


def _texts(store: DynamoDBStore, **load: Any) -> list[str]:
    stored = store.load(SID, **load)
    assert stored is not None
    return [e.text for e in stored.events if isinstance(e, UserEvent)]


def _rest(store: DynamoDBStore, *replies: str) -> Any:
    app = dormant.App(name="format1", store=store)
    return app.handler.rest(agent=app.agent(name="concierge",
                                            model=ScriptedModel(list(replies))))


def _turn(rest: Any, text: str) -> None:
    reply = rest({"session_id": "format1", "principal": "alice", "input": {"message": text}})
    assert (reply.status, reply.commit_status) == ("completed", "committed"), reply


def test_the_fixture_is_format_1() -> None:
    payloads = [base64.b64decode(i["b"]["B"]) for i in FIXTURE["items"] if "b" in i]
    assert len(payloads) == LAST
    assert {codec.format_of(p) for p in payloads} == {1}
    assert {p[0] for p in payloads} <= {codec.RAW, codec.DEFLATE}


def test_format_1_items_decode_into_the_events_they_were_written_as() -> None:
    """Item by item, with the format 1 decoder (each ``ts`` absolute): the captured events,
    in order, ``ts`` included."""
    versions = reads.versions_of([_stored(i) for i in FIXTURE["items"]])
    decoded = [event for version in reversed(versions) for event in version.events()]

    assert load_events(decoded) == load_events(FIXTURE["events"])
    assert [e["ts"] for e in decoded] == [e["ts"] for e in FIXTURE["events"]]


def test_a_format_1_session_loads_exactly_as_it_was_written(store: DynamoDBStore) -> None:
    stored = store.load(SID)

    assert stored is not None
    assert stored.head == Head.model_validate(FIXTURE["head"])
    assert stored.events == load_events(FIXTURE["events"])
    windowed = store.load(SID, turns=2)
    assert windowed is not None and windowed.head == stored.head
    assert [e.text for e in windowed.events if isinstance(e, UserEvent)] == [
        "message 25", "message 26"]
    page = store.read_page(stored.head, 0, 0, 12)
    assert page is not None and page.events == stored.events[:12]


def test_it_commits_on_in_format_2_and_loads_whole_mixed(store: DynamoDBStore,
                                                         clock: list[int]) -> None:
    rest = _rest(store, "Welcome back.", "Still here.")

    _turn(rest, "back again")
    clock[0] += 1_000
    _turn(rest, "and again")

    items = _items()
    for version in (LAST + 1, LAST + 2):
        item = items[layout.version_key(version)]
        assert codec.format_of(item["b"]["B"]) == 2
        # Within a quarter hour of the entry the format 1 item names (its ``li``): no new
        # index entry, and the payload (not an ``li``) says when that entry was written.
        assert "own" not in item and "li" not in item
        assert int(item["ua"]["N"]) - codec.unpack(item["b"]["B"])["l"] == int(
            items[layout.version_key(1)]["ua"]["N"])
    fresh = DynamoDBStore(TABLE)  # nothing remembered: the head's chain crosses formats
    expected = [e.text for e in load_events(FIXTURE["events"]) if isinstance(e, UserEvent)]
    assert _texts(fresh) == [*expected, "back again", "and again"]
    assert _texts(fresh, turns=3) == ["message 26", "back again", "and again"]
    stored = fresh.load(SID)
    assert stored is not None and stored.head.version == LAST + 2
    assert stored.events[:len(FIXTURE["events"])] == load_events(FIXTURE["events"])
    assert stored.head.state == FIXTURE["head"]["state"] and stored.head.principal == "alice"
    listed = dormant.App(store=fresh).sessions.list(principal="alice")
    assert [(s.session_id, s.version) for s in listed] == [(SID, LAST + 2)]

    clock[0] += 1_000
    _turn(_rest(fresh, "Once more."), "once more")  # and the fresh reader commits on
    assert _texts(store, turns=1) == ["once more"]


def test_a_checkpoint_in_format_2_follows_the_format_1_chain(store: DynamoDBStore,
                                                             clock: list[int]) -> None:
    rest = _rest(store, *[f"Reply {n}." for n in range(layout.CHECKPOINT_EVERY)])
    for n in range(layout.CHECKPOINT_EVERY):
        clock[0] += 1_000
        _turn(rest, f"later {n}")

    items = _items()
    checkpoints = [sk for sk, item in items.items() if "b" in item
                   and codec.format_of(item["b"]["B"]) == 2
                   and "h" in codec.unpack(item["b"]["B"])]
    assert checkpoints == [layout.version_key(2 * layout.CHECKPOINT_EVERY + 1)]
    fresh = DynamoDBStore(TABLE)
    stored = fresh.load(SID, turns=1)
    assert stored is not None and stored.head.version == LAST + layout.CHECKPOINT_EVERY
    assert stored.head.updated_at == clock[0]
    assert stored.head == store.load(SID, turns=1).head  # type: ignore[union-attr]
