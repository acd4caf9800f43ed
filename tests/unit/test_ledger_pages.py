"""The ledger routes page: ``GET /sessions/{id}/events`` and ``GET /sessions/{id}?events=true``
answer at most ``limit`` events and a ``next`` cursor, and read only the page from the store,
so a 5,000-turn session costs what a 10-turn one does. ``/docs`` is a small cached page."""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

import dormant
from dormant._fold import apply
from dormant._follow import MAX_LIMIT
from dormant._head import Head
from dormant._ids import new_id
from dormant.events import Event
from dormant.http import SSE_WRITER_ATTRIBUTE, build_resolver
from dormant.models import ScriptedModel
from dormant.stores import DynamoDBStore, MemoryStore, Store
from dormant.stores._base import commit_head
from dormant.stores._dynamodb import layout
from tests.conformance._dynamodb import dynamodb_in_process
from tests.conformance.conftest import STORE_FACTORIES

SID = "session_paged"


FACTORIES = {name: STORE_FACTORIES[name][1] for name in ("memory", "sqlite", "dynamodb-moto")}


@pytest.fixture(params=sorted(FACTORIES))
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    yield from FACTORIES[request.param]()


def _app(store: Store) -> tuple[dormant.App, Any]:
    app = dormant.App(name="pages", store=store)
    agent = app.agent(name="a", model=ScriptedModel(["fine"] * 4))
    return app, build_resolver(app, agent)


def _first_turn(app: dormant.App, session_id: str) -> list[Event]:
    """One real turn (through the REST handler); its events, the template of the rest."""
    agent = app.agent(name="seed", model=ScriptedModel(["a reply of a few words"]))
    reply = app.handler.rest(agent=agent)({"session_id": session_id,
                                           "input": {"message": "hello there"}})
    assert reply.status == "completed"
    stored = app.store.load(session_id, turns=None)
    assert stored is not None
    return stored.events


def _extend(store: Store, session_id: str, turns: int, template: list[Event]) -> Head:
    """``turns`` more turns like ``template``, written straight through ``store.append`` (one
    commit each, fresh ids): how a long session is made in seconds."""
    stored = store.load(session_id, turns=0)
    assert stored is not None
    head = stored.head
    for _ in range(turns):
        invocation = new_id("inv")
        events = []
        for event in template:
            update: dict[str, Any] = {"id": new_id("ev")}
            if getattr(event, "invocation_id", None):
                update["invocation_id"] = invocation
            if event.type == "user":
                update["message_id"] = new_id("msg")
            events.append(event.model_copy(update=update))
        version, head = head.version, head.clone()
        for event in events:
            apply(head, event)
        assert store.append(head, events, expected_version=version).ok
        head = commit_head(head, version, events)
    return head


def _session(app: dormant.App, session_id: str, turns: int) -> None:
    _extend(app.store, session_id, turns - 1, _first_turn(app, session_id))


def _request(resolver: Any, path: str, query: dict[str, str] | None = None,
             headers: dict[str, str] | None = None, context: Any = None) -> dict[str, Any]:
    return resolver.resolve({  # type: ignore[no-any-return]
        "resource": path, "path": path, "httpMethod": "GET", "headers": headers or {},
        "multiValueHeaders": {k: [v] for k, v in (headers or {}).items()},
        "queryStringParameters": query or None,
        "multiValueQueryStringParameters": {k: [v] for k, v in query.items()} if query else None,
        "pathParameters": None, "stageVariables": None, "body": None, "isBase64Encoded": False,
        "requestContext": {"resourcePath": path, "httpMethod": "GET", "path": path,
                           "stage": "test", "requestId": "r-1", "authorizer": {},
                           "identity": {}},
    }, context)


def _get(resolver: Any, path: str, **query: str) -> tuple[int, Any]:
    out = _request(resolver, path, query)
    return out["statusCode"], json.loads(out["body"])


def _ids(store: Store, session_id: str) -> list[str]:
    stored = store.load(session_id, turns=None)
    assert stored is not None
    return [e.id for e in stored.events]


def _walk(resolver: Any, path: str, first: dict[str, str], limit: int) -> tuple[
        list[str], int]:
    """Follow ``next`` from the first page to the last: the event ids in order, and pages."""
    query, seen, pages = dict(first), [], 0
    while True:
        status, body = _get(resolver, path, limit=str(limit), **query)
        assert status == 200, body
        assert len(body["events"]) <= limit
        seen += [e["id"] for e in body["events"]]
        pages += 1
        if body.get("next") is None:
            return seen, pages
        query = {k: v for k, v in first.items() if k != "after"} | {"cursor": body["next"]}


# --- the cursor walks the ledger once ---------------------------------------------------------


def test_the_cursor_walks_the_whole_ledger_once_on_both_routes(store: Store) -> None:
    app, resolver = _app(store)
    _session(app, SID, 23)
    ledger = _ids(store, SID)
    assert len(ledger) == len(set(ledger)) > 7 * 10  # pages of 7 split versions
    for path, first in ((f"/sessions/{SID}/events", {"after": "0"}),
                        (f"/sessions/{SID}", {"events": "true"})):
        seen, pages = _walk(resolver, path, first, 7)
        assert seen == ledger, path  # every event once, in order: no gap, no duplicate
        assert pages == -(-len(ledger) // 7)
    # from a version on: exactly what follows that version's end, however old it is
    end = store.version_end(SID, 3)
    assert end is not None
    seen, _ = _walk(resolver, f"/sessions/{SID}/events", {"after": "3"}, 5)
    assert seen == ledger[end:]
    # the last page says you have everything; the next poll is empty at the same version
    status, last = _get(resolver, f"/sessions/{SID}/events", after="23")
    assert (status, last["events"], last["next"], last["version"]) == (200, [], None, 23)


def test_a_forks_pages_walk_what_it_inherits_then_its_own(store: Store) -> None:
    app, resolver = _app(store)
    template = _first_turn(app, SID)
    _extend(store, SID, 11, template)
    fork = app.sessions.fork(SID, at_version=6, new_session_id="session_paged_fork")
    _extend(store, fork.session_id, 4, template)
    _extend(store, SID, 2, template)  # the source moves on: none of it is the fork's
    ledger = _ids(store, fork.session_id)
    seen, _ = _walk(resolver, f"/sessions/{fork.session_id}/events", {"after": "0"}, 6)
    assert seen == ledger and len(ledger) == len(set(ledger))
    seen, _ = _walk(resolver, f"/sessions/{fork.session_id}", {"events": "true"}, 9)
    assert seen == ledger


def test_dev_follow_streams_every_page_then_waits(store: Store,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dormant.http._routes.FOLLOW_KEEPALIVE", 0.05)
    app, resolver = _app(store)
    _session(app, SID, 9)
    feeds: list[dict[str, Any]] = []

    def writer(chunk: str) -> None:
        if chunk.startswith("data: "):
            feeds.append(json.loads(chunk[6:]))
        elif "keep-alive" in chunk:
            raise OSError("the client hung up")  # caught up: hang up at the first keep-alive

    context = SimpleNamespace(**{SSE_WRITER_ATTRIBUTE: writer})
    out = _request(resolver, f"/sessions/{SID}/events",
                   {"after": "0", "follow": "true", "limit": "5"}, context=context)
    assert out["statusCode"] == 200
    assert [e["id"] for f in feeds for e in f["events"]] == _ids(store, SID)
    assert all(len(f["events"]) <= 5 for f in feeds)
    assert feeds[-1]["next"] is None and all(f["next"] for f in feeds[:-1])


# --- bad paging parameters ----------------------------------------------------------------------


@pytest.mark.parametrize("path", [f"/sessions/{SID}/events", f"/sessions/{SID}"])
@pytest.mark.parametrize(("query", "field"), [
    ({"limit": "0"}, "limit"), ({"limit": str(MAX_LIMIT + 1)}, "limit"),
    ({"limit": "ten"}, "limit"), ({"cursor": "3.x"}, "cursor"), ({"cursor": "-1"}, "cursor")])
def test_a_bad_limit_or_cursor_is_a_422_naming_it(path: str, query: dict[str, str],
                                                  field: str) -> None:
    app, resolver = _app(MemoryStore())
    _session(app, SID, 2)
    status, body = _get(resolver, path, events="true", **query)
    assert status == 422 and body["code"] == "validation_error"
    assert [f["field"] for f in body["fields"]] == [f"query.{field}"]


def test_after_and_cursor_together_is_a_400() -> None:
    app, resolver = _app(MemoryStore())
    _session(app, SID, 2)
    status, body = _get(resolver, f"/sessions/{SID}/events", after="1", cursor="1")
    assert (status, body["code"]) == (400, "invalid_input")


# --- bounded work: 10 turns and 5,000 cost the same ------------------------------------------


class _Wire:
    """The DynamoDB requests a store's client sends, and the items each Query returned."""

    def __init__(self, client: Any) -> None:
        self.operations: list[str] = []
        self.items: list[int] = []
        client.meta.events.register("before-call.dynamodb", self._call)
        client.meta.events.register("after-call.dynamodb.Query", self._query)

    def _call(self, model: Any, **_: Any) -> None:
        self.operations.append(model.name)

    def _query(self, parsed: dict[str, Any], **_: Any) -> None:
        self.items.append(int(parsed.get("Count", 0)))

    def measure(self, resolver: Any, path: str, query: dict[str, str]) -> tuple[
            list[str], int, int, dict[str, Any]]:
        """The requests one GET sends, the items they read, its body's bytes, its body."""
        self.operations.clear()
        self.items.clear()
        out = _request(resolver, path, query)
        assert out["statusCode"] == 200, out["body"]
        return list(self.operations), sum(self.items), len(out["body"]), json.loads(out["body"])


def test_ledger_routes_cost_the_same_at_10_and_5000_turns() -> None:
    measured: dict[int, dict[str, tuple[list[str], int, int]]] = {}
    for turns in (10, 5000):
        for store in dynamodb_in_process():
            assert isinstance(store, DynamoDBStore)
            app, resolver = _app(store)
            sid = f"session_long_{turns}"
            _session(app, sid, turns)
            fresh = DynamoDBStore(store.table_name)  # a cold process: remembers nothing
            app, resolver = _app(fresh)
            wire = _Wire(fresh._client)
            middle = str(turns // 2)
            routes = {
                "events from 0": (f"/sessions/{sid}/events", {"after": "0", "limit": "20"}),
                "events from the middle": (f"/sessions/{sid}/events",
                                           {"after": middle, "limit": "20"}),
                "events near the end": (f"/sessions/{sid}/events",
                                        {"after": str(turns - 5), "limit": "20"}),
                "session with events": (f"/sessions/{sid}", {"events": "true", "limit": "20"}),
            }
            measured[turns] = {}
            for name, (path, query) in routes.items():
                operations, items, size, body = wire.measure(resolver, path, query)
                assert len(body["events"]) == 20, name
                measured[turns][name] = (operations, items, size)
            # the cursor's page too: the second page from 0
            _, _, _, first = wire.measure(resolver, f"/sessions/{sid}/events",
                                          {"after": "0", "limit": "20"})
            operations, items, size, body = wire.measure(
                resolver, f"/sessions/{sid}/events", {"cursor": first["next"], "limit": "20"})
            assert len(body["events"]) == 20
            measured[turns]["second page"] = (operations, items, size)
    for name, (operations, items, size) in measured[10].items():
        long_operations, long_items, long_size = measured[5000][name]
        assert long_operations == operations, name  # the same requests
        assert operations.count("Query") <= 3, (name, operations)
        # The items read: the head's (its checkpoint chain: at most CHECKPOINT_EVERY version
        # items, whatever the age) and the page's, never the history before the page.
        assert long_items <= 2 * layout.CHECKPOINT_EVERY + 20 // 4 + 2, (name, long_items)
        assert long_items <= items + layout.CHECKPOINT_EVERY, (name, items, long_items)
        assert size / 1.25 <= long_size <= size * 1.25, (name, size, long_size)


# --- /docs ----------------------------------------------------------------------------------------


def test_docs_is_a_small_static_page_with_caching(monkeypatch: pytest.MonkeyPatch) -> None:
    app = dormant.App(name="pages", store=MemoryStore())
    agent = app.agent(name="a", model=ScriptedModel(["fine"]))
    resolver = build_resolver(app, agent, require_principal=True)  # /docs needs nobody
    # Serving the page builds no OpenAPI description (the page fetches it from GET /).
    monkeypatch.setattr(resolver, "get_openapi_schema",
                        lambda *a, **k: pytest.fail("/docs built the description"))
    monkeypatch.setattr(resolver, "get_openapi_json_schema",
                        lambda *a, **k: pytest.fail("/docs built the description"))
    first = _request(resolver, "/docs")
    headers = {k.lower(): v[0] for k, v in first["multiValueHeaders"].items()}
    assert first["statusCode"] == 200
    assert headers["content-type"].startswith("text/html")
    assert len(first["body"]) < 4_000  # not the ~1.9 MB inline bundle
    assert "swagger-ui" in first["body"].lower() and "https://" in first["body"]
    assert "max-age=" in headers["cache-control"] and headers["etag"].startswith('"')
    assert _request(resolver, "/docs")["body"] == first["body"]  # built once, the same
    again = _request(resolver, "/docs", headers={"If-None-Match": headers["etag"]})
    assert (again["statusCode"], again["body"]) == (304, "")
    other = _request(resolver, "/docs", headers={"if-none-match": '"something-else"'})
    assert other["statusCode"] == 200 and other["body"] == first["body"]
