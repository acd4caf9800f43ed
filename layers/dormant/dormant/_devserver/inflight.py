"""The turns ``dormant dev`` is running, and what to tell its user when it stops under them.

Each request that runs a turn (``POST /turns``, ``/agui``, ``/voice``) is held in
:class:`InFlight` while the resolver serves it. When the server is stopped (Ctrl-C) with
some still running, :func:`interrupted` says for each which session it was, what was sent
and what becomes of it: a turn whose claim the session head shows committed is taken over by
the next ``dormant dev`` on the same database (its start-up re-arms the claim's wake-up);
any other was cut off before it committed anything, and the line gives the command that sends
it again.
"""

from __future__ import annotations

import json
import shlex
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from dormant._devserver.guard import DEFAULT_PRINCIPAL, PRINCIPAL_HEADER

__all__ = ["TURN_ROUTES", "InFlight", "Turn", "interrupted"]

#: The routes whose requests run a turn.
TURN_ROUTES = frozenset({"/turns", "/agui", "/voice"})
#: How much of a message the report repeats when it cannot give the whole request.
_SHOWN = 200


@dataclass(frozen=True)
class Turn:
    """One request running a turn: its route, body and caller."""

    path: str
    query: str
    body: bytes
    principal: str
    started: float

    @property
    def fields(self) -> dict[str, Any]:
        """The JSON body (empty when it is not a JSON object: audio, a broken body)."""
        try:
            parsed = json.loads(self.body)
        except ValueError:
            return {}
        return parsed if isinstance(parsed, dict) else {}

    @property
    def session_id(self) -> str | None:
        """The session the request names, as it named it (None: it named none)."""
        fields = self.fields
        named = fields.get("threadId") if self.path == "/agui" else fields.get("sessionId")
        if named is None:
            named = next(iter(parse_qs(self.query).get("sessionId", [])), None)
        return named if isinstance(named, str) and named else None


class InFlight:
    """The turn requests being served, each from its start to its answer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._turns: dict[int, Turn] = {}

    def start(self, method: str, target: str, principal: str, body: bytes) -> int | None:
        """Hold a request if it runs a turn: its ticket for :meth:`end`, else None."""
        url = urlsplit(target)
        if method != "POST" or url.path not in TURN_ROUTES:
            return None
        turn = Turn(url.path, url.query, body, principal, time.time())
        with self._lock:
            ticket = id(turn)
            self._turns[ticket] = turn
        return ticket

    def end(self, ticket: int | None) -> None:
        if ticket is not None:
            with self._lock:
                self._turns.pop(ticket, None)

    def running(self) -> list[Turn]:
        """The turns still being served, oldest first."""
        with self._lock:
            return sorted(self._turns.values(), key=lambda turn: turn.started)


def interrupted(turns: list[Turn], store: Any, url: str, db: str) -> list[str]:
    """One line per turn cut off by a stop: its session, what was sent, what becomes of it
    and, when nothing of it was committed, how to send it again."""
    from dormant.errors import InputError
    from dormant.session import normalize_session_id

    lines = []
    for turn in turns:
        named = turn.session_id
        try:
            session = normalize_session_id(named) if named else None
        except InputError:
            session = None
        stored = store.load(session, turns=0) if session else None
        sent = _sent(turn)
        head = f"stopped in the middle of a turn of {session or 'a new session'} ({sent})"
        if stored is not None and stored.head.running:
            lines.append(f"{head}: its claim is committed, so the next dormant dev on {db} "
                         f"takes the turn over and finishes it; nothing to resend")
        else:
            lines.append(f"{head}: nothing of it was committed; send it again "
                         f"{_resend(turn, session, url)}")
    return lines


def _sent(turn: Turn) -> str:
    """What the request sent, in a few words: the route and the message or answers."""
    fields = turn.fields
    if turn.path == "/agui":
        text = _last_user_text(fields)
        return f"POST /agui, the message {_quoted(text)}" if text else "POST /agui"
    if turn.path == "/voice":
        return "POST /voice, a recording"
    said = [f"the message {_quoted(fields['message'])}"] \
        if isinstance(fields.get("message"), str) else []
    said += [f"{len(fields[key])} {key}" for key in ("tools", "approvals", "inputs")
             if isinstance(fields.get(key), list) and fields[key]]
    return "POST /turns" + (f", {', '.join(said)}" if said else "")


def _resend(turn: Turn, session: str | None, url: str) -> str:
    """The command (or console action) that sends the turn again."""
    principal = "" if turn.principal == DEFAULT_PRINCIPAL \
        else f" -H {shlex.quote(f'{PRINCIPAL_HEADER}: {turn.principal}')}"
    console = f"{url}/#/sessions/{session.removeprefix('session_')}" if session else f"{url}/"
    if turn.path == "/voice":
        return f"from the console (record it again): {console}"
    if turn.path == "/agui":
        text = _last_user_text(turn.fields)
        if not text:
            return f"from the console: {console}"
        body = {"sessionId": session, "message": text} if session else {"message": text}
    else:
        body = turn.fields
    data = json.dumps(body, ensure_ascii=False, separators=(", ", ": "))
    return (f"with: curl -s {url}/turns -H 'content-type: application/json'{principal} "
            f"-d {shlex.quote(data)}  (or from the console: {console})")


def _last_user_text(fields: Mapping[str, Any]) -> str | None:
    messages = fields.get("messages")
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else None
    return None


def _quoted(text: str) -> str:
    one = " ".join(text.split())
    return json.dumps(one if len(one) <= _SHOWN else one[:_SHOWN] + "…", ensure_ascii=False)
