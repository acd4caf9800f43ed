"""``dormant dev --reload``: a save to the app's files serves the new code on the same port,
the sessions kept; a save that breaks the import says why in one line and the app as it was
goes on serving until the next good save."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from tests._timing import scaled

from .conftest import DevServer

#: Seconds a save may take to be served (the server looks twice a second).
RELOAD_WAIT = 10.0

APP = '''\
import dormant
from dormant.models import ScriptedModel

from replies import REPLY

SUFFIX = ""


def build(store=None, model=None):
    app = dormant.App(name="reloaded", store=store)
    agent = app.agent(name="echo", model=model or ScriptedModel([REPLY + SUFFIX] * 20))
    return app, agent
'''


def _turn(server: DevServer, text: str = "hi") -> str:
    reply = httpx.post(f"{server.url}/turns", json={"sessionId": "kept", "message": text},
                       timeout=30)
    assert reply.status_code == 200, reply.text
    said: str = reply.json()["output"]["text"]
    return said


def _save(path: Path, text: str, server: DevServer, expect: str) -> str:
    """Write ``path`` and wait for the server to say ``expect`` about it; the line it said."""
    before = server.log.read_text()
    path.write_text(text)
    deadline = time.monotonic() + scaled(RELOAD_WAIT)
    while True:
        new = server.log.read_text()[len(before):].splitlines()
        said = [line for line in new if expect in line]
        if said:
            return said[0]
        assert time.monotonic() < deadline, f"no {expect!r} after saving {path}:\n{new}"
        time.sleep(0.1)


def _assistant_texts(server: DevServer) -> list[Any]:
    ledger = httpx.get(f"{server.url}/sessions/kept", params={"events": "true"},
                       timeout=30).json()
    return [event["text"] for event in ledger["events"] if event["type"] == "assistant"]


def test_a_save_is_served_at_the_next_turn_and_a_broken_one_is_said_and_survived(
        tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    app, replies = project / "app.py", project / "replies.py"
    app.write_text(APP)
    replies.write_text('REPLY = "first"\n')
    server = DevServer(tmp_path / "reload.db", app, args=("--reload",)).start()
    try:
        port = server.port
        assert _turn(server) == "first"

        # The app module's own file: the next turn runs the new code, same port, same session.
        line = _save(app, APP.replace('SUFFIX = ""', 'SUFFIX = ", reloaded"'), server,
                     "changed: reloaded")
        assert line == f"dormant dev: {app} changed: reloaded, serving reloaded/echo"
        assert _turn(server) == "first, reloaded"
        assert server.port == port

        # A module it imports, saved broken: one line, no traceback, the last good code serves.
        line = _save(replies, 'REPLY = ("second"\n', server, "dormant: ")
        assert line.startswith(f"dormant: {app}: cannot import {replies}: SyntaxError at line 1")
        assert line.endswith(f"(after {replies} changed; still serving the app as it was: fix "
                             f"it and save)")
        assert _turn(server) == "first, reloaded"

        # Fixed: served again, and the session has every turn, old code's and new.
        _save(replies, 'REPLY = "second"\n', server, "changed: reloaded")
        assert _turn(server) == "second, reloaded"
        assert _assistant_texts(server) == ["first", "first, reloaded", "first, reloaded",
                                            "second, reloaded"]
        assert "Traceback" not in server.log.read_text()
    finally:
        server.kill()
