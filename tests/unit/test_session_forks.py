"""Forks through every entry point: ``app.sessions.fork``, ``POST /sessions/{id}/fork``,
``dormant sessions show``; and edit-and-resend, which is a fork plus a message."""

from __future__ import annotations

from typing import Any

import pytest

import dormant
from dormant._inspect import render_session, session_json
from dormant.events import UserEvent
from dormant.http import build_resolver
from dormant.models import ScriptedModel
from tests.unit.test_http_api import COGNITO, _call, _event

OTHER = {"claims": {"sub": "user-2"}}


def _served(replies: int = 10) -> tuple[dormant.App, Any]:
    app = dormant.App(name="forks")
    agent = app.agent(name="echo", model=ScriptedModel([f"reply {n}" for n in range(replies)]))
    return app, build_resolver(app, agent=agent)


def _texts(session: dormant.Session) -> list[str]:
    return [e.text for e in session.events if isinstance(e, UserEvent)]


def test_post_fork_makes_a_fork_owned_by_the_caller_at_a_version() -> None:
    app, resolver = _served()
    for text in ("first", "second", "third"):
        status, _ = _call(resolver, _event("POST", "/turns", {"sessionId": "s1",
                                                               "message": text},
                                           authorizer=COGNITO))
        assert status == 200
    status, body = _call(resolver, _event("POST", "/sessions/s1/fork",
                                          {"atVersion": 2, "sessionId": "s1-edit"},
                                          authorizer=COGNITO))
    assert status == 201, body
    assert body == {"sessionId": "session_s1-edit", "version": 1,
                    "forkOf": {"session": "session_s1", "version": 2, "seq": 8}}
    fork = app.sessions.get("s1-edit")
    assert fork is not None and fork.principal == "user-1"
    assert _texts(fork) == ["first", "second"]
    status, view = _call(resolver, _event("GET", "/sessions/s1-edit", authorizer=COGNITO))
    assert status == 200 and view["forkOf"]["session"] == "session_s1"


def test_post_fork_of_another_principals_session_is_404_and_writes_nothing() -> None:
    app, resolver = _served()
    _call(resolver, _event("POST", "/turns", {"sessionId": "mine", "message": "hi"},
                           authorizer=COGNITO))
    status, body = _call(resolver, _event("POST", "/sessions/mine/fork", {"sessionId": "theirs"},
                                          authorizer=OTHER))
    assert status == 404 and body["code"] == "session_not_found"
    assert app.sessions.get("theirs") is None


@pytest.mark.parametrize(("body", "status", "code"), [
    ({"atVersion": 0}, 422, "validation_error"),
    ({"atVersion": 9}, 400, "invalid_input"),
    ({"sessionId": "bad id!"}, 400, "invalid_input"),
    ({"sessionId": "taken"}, 409, "session_exists"),
    ({"unknown": 1}, 422, "validation_error"),
])
def test_post_fork_refuses_bad_requests_with_a_4xx(body: dict[str, Any], status: int,
                                                   code: str) -> None:
    app, resolver = _served()
    for sid in ("src", "taken"):
        _call(resolver, _event("POST", "/turns", {"sessionId": sid, "message": "hi"},
                               authorizer=COGNITO))
    before = len(app.sessions.list())
    got, answer = _call(resolver, _event("POST", "/sessions/src/fork", body,
                                         authorizer=COGNITO))
    assert (got, answer["code"]) == (status, code), answer
    assert len(app.sessions.list()) == before


def test_an_empty_fork_body_forks_the_current_version_under_a_minted_id() -> None:
    _, resolver = _served()
    _call(resolver, _event("POST", "/turns", {"sessionId": "src", "message": "hi"},
                           authorizer=COGNITO))
    status, body = _call(resolver, _event("POST", "/sessions/src/fork", authorizer=COGNITO))
    assert status == 201 and body["sessionId"].startswith("session_")
    assert body["forkOf"] == {"session": "session_src", "version": 1, "seq": 4}


def test_edit_and_resend_is_a_fork_before_the_message_then_the_edited_message() -> None:
    app = dormant.App(name="edit")
    agent = app.agent(name="echo", model=ScriptedModel(["hello", "Paris it is", "Rome it is"]))
    turn = app.handler.rest(agent=agent)
    turn({"session_id": "trip", "input": {"message": "hi"}})
    turn({"session_id": "trip", "input": {"message": "book Paris"}})
    before = app.sessions.get("trip")
    assert before is not None
    fork = app.sessions.fork("trip", at_version=before.version - 1, new_session_id="trip-2")
    answer = turn({"session_id": fork.session_id, "input": {"message": "book Rome"}})
    assert answer.output.text == "Rome it is"
    edited = app.sessions.get("trip-2")
    original = app.sessions.get("trip")
    assert edited is not None and original is not None
    assert _texts(edited) == ["hi", "book Rome"]
    assert _texts(original) == ["hi", "book Paris"]


def test_sessions_show_marks_the_fork_point() -> None:
    app = dormant.App(name="show")
    agent = app.agent(name="echo", model=ScriptedModel(["one", "two"]))
    turn = app.handler.rest(agent=agent)
    turn({"session_id": "base", "input": {"message": "hi"}})
    fork = app.sessions.fork("base", new_session_id="branch")
    turn({"session_id": fork.session_id, "input": {"message": "on the branch"}})
    branch = app.sessions.get("branch")
    assert branch is not None
    text = render_session(branch)
    assert "fork of session_base at version 1" in text
    lines = text.splitlines()
    marker = next(i for i, line in enumerate(lines) if "forked here" in line)
    assert "user: hi" in "\n".join(lines[:marker])
    assert "user: on the branch" in "\n".join(lines[marker:])
    assert session_json(branch)["forkOf"] == {"session": "session_base", "version": 1,
                                              "seq": 4}


def _chain(app: dormant.App) -> None:
    """A source, a fork of it and a fork of that, each with a turn of its own; the source and
    the middle deleted first."""
    agent = app.agent(name="echo", model=ScriptedModel([f"r{n}" for n in range(6)]))
    turn = app.handler.rest(agent=agent)
    turn({"session_id": "root", "input": {"message": "at the root"}})
    app.sessions.fork("root", new_session_id="middle")
    turn({"session_id": "middle", "input": {"message": "in the middle"}})
    app.sessions.fork("middle", new_session_id="leaf")
    assert app.sessions.delete("root") and app.sessions.delete("middle")
    leaf = app.sessions.get("leaf")
    assert leaf is not None and _texts(leaf) == ["at the root", "in the middle"]


def test_the_last_fork_deleted_takes_what_it_kept_alive_with_it_in_memory() -> None:
    store = dormant.stores.MemoryStore()
    app = dormant.App(name="gc", store=store)
    _chain(app)
    assert len(store._retired) == 2  # root's and middle's events, for the leaf
    assert app.sessions.delete("leaf")
    assert store._retired == {} and store._forks == {} and store._rows == {}


def test_the_last_fork_deleted_takes_what_it_kept_alive_with_it_in_sqlite(
        tmp_path: Any) -> None:
    import sqlite3

    store = dormant.stores.SqliteStore(tmp_path / "gc.db")
    app = dormant.App(name="gc", store=store)
    _chain(app)
    with sqlite3.connect(tmp_path / "gc.db") as conn:
        archived = {sid for (sid,) in conn.execute("SELECT DISTINCT session_id FROM events")}
    assert {sid.split("@")[0] for sid in archived} == {"~session_root", "~session_middle"}
    assert app.sessions.delete("leaf")
    with sqlite3.connect(tmp_path / "gc.db") as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM forks").fetchone() == (0,)
    store.close()
