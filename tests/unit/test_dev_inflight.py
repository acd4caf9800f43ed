"""What ``dormant dev`` says of the turns a stop cuts off (``dormant._devserver.inflight``)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from dormant._devserver.inflight import InFlight, interrupted

URL = "http://127.0.0.1:8000"


class Heads:
    """A store's ``load`` as :func:`interrupted` reads it: the sessions whose head shows a
    committed claim (``running``)."""

    def __init__(self, *running: str) -> None:
        self.running = set(running)

    def load(self, session_id: str, *, turns: int) -> Any:
        return SimpleNamespace(head=SimpleNamespace(running=session_id in self.running))


def _cut_off(store: Heads, *requests: tuple[str, str, dict[str, Any] | bytes]) -> list[str]:
    flight = InFlight()
    for target, principal, body in requests:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        flight.start("POST", target, principal, raw)
    return interrupted(flight.running(), store, URL, "dormant.db")


def test_a_claimed_turn_is_left_to_the_next_start() -> None:
    [line] = _cut_off(Heads("session_a"), ("/turns", "local", {
        "sessionId": "a", "approvals": [{"approvalId": "apr_1", "approved": True}]}))
    assert line == ("stopped in the middle of a turn of session_a (POST /turns, 1 approvals): "
                    "its claim is committed, so the next dormant dev on dormant.db takes the "
                    "turn over and finishes it; nothing to resend")


def test_an_unclaimed_turn_gets_its_command_with_its_principal() -> None:
    [line] = _cut_off(Heads(), ("/turns", "ann o'neil", {"sessionId": "b", "message": "hi"}))
    assert line.endswith("send it again with: curl -s http://127.0.0.1:8000/turns -H "
                         "'content-type: application/json' -H 'X-Principal: ann o'\"'\"'neil' "
                         "-d '{\"sessionId\": \"b\", \"message\": \"hi\"}'  (or from the "
                         "console: http://127.0.0.1:8000/#/sessions/b)")


def test_a_recording_is_sent_again_from_the_console() -> None:
    [line] = _cut_off(Heads(), ("/voice?sessionId=v", "local", b"\x00\x01audio"))
    assert line == ("stopped in the middle of a turn of session_v (POST /voice, a recording): "
                    "nothing of it was committed; send it again from the console (record it "
                    "again): http://127.0.0.1:8000/#/sessions/v")


def test_only_turns_are_held_and_each_until_its_answer() -> None:
    flight = InFlight()
    assert flight.start("GET", "/sessions/a", "local", b"") is None
    assert flight.start("POST", "/sessions/a/fork", "local", b"{}") is None
    ticket = flight.start("POST", "/turns", "local", b'{"sessionId": "a", "message": "x"}')
    assert [turn.session_id for turn in flight.running()] == ["a"]
    flight.end(ticket)
    assert flight.running() == []
