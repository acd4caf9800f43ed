"""Reading a session's ledger in conformance tests."""

from __future__ import annotations

import dormant
from dormant.events import Event


def ledger(app: dormant.App, session_id: str) -> list[Event]:
    """The session's whole ledger (it must exist)."""
    session = app.sessions.get(session_id)
    assert session is not None, f"no session {session_id}"
    return session.events


def types(events: list[Event]) -> list[str]:
    """The events' types, less ``state_delta`` (how state moved is not what these check)."""
    return [e.type for e in events if e.type != "state_delta"]
