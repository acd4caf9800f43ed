"""What a parked call expects is in the ledger: every store gives it back.

A yielding tool's ``tool_yield`` records the JSON Schema of its ``yield_schema``
(``input_schema``). Read back from the store by a second instance (so it is decoded, not
remembered), the session says what the call waits for with no app code at hand: its event,
``sessions show`` (``render_session`` with no ``expects``) and ``GET /sessions/{id}``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pydantic import BaseModel

import dormant
from dormant._inspect import render_session, session_json
from dormant.events import ToolYield
from dormant.http import build_resolver
from dormant.models import ScriptedModel
from dormant.stores import Store
from tests._http import get


class Question(BaseModel):
    q: str


class Stay(BaseModel):
    answer: str
    nights: int


def _agent(app: dormant.App) -> dormant.Agent:
    ask = app.tool(name="ask_guest", description="Ask the guest", schema=Question,
                   yield_schema=Stay)
    return app.agent(name="concierge", tools=[ask], model=ScriptedModel([
        {"tool_calls": [{"name": "ask_guest", "args": {"q": "Which night?"},
                         "id": "call_q"}]}]))


@contextmanager
def _reopened(store: Store) -> Iterator[Store]:
    """A second instance on the same storage: what it reads it decodes."""
    from dormant.stores import DynamoDBStore, SqliteStore

    if isinstance(store, SqliteStore):
        again = SqliteStore(store.path)
        try:
            yield again
        finally:
            again.close()
    elif isinstance(store, DynamoDBStore):
        yield DynamoDBStore(store.table_name, client=store._client)
    else:
        yield store


def test_a_parked_call_reads_back_what_it_expects_from_every_store(store: Store) -> None:
    writer = dormant.App(name="schemas", store=store)
    parked = writer.handler.rest(agent=_agent(writer))({"session_id": "s1",
                                                        "input": {"message": "book"}})
    assert parked.status == "yielded_tool"

    with _reopened(store) as again:
        reader = dormant.App(name="schemas", store=again)
        session = reader.sessions.get("s1")
        assert session is not None
        (yielded,) = [e for e in session.events if isinstance(e, ToolYield)]
        shown = render_session(session)
        as_json = session_json(session)
        resolver = build_resolver(reader, _agent(reader))
        status, view = get(resolver, "/sessions/s1")

    assert yielded.input_schema == Stay.model_json_schema()
    assert "ask_guest [call_q] waits for input" in shown
    assert "expects input {answer: string, nights: integer}" in shown
    assert as_json["yieldedTools"][0]["inputSchema"] == Stay.model_json_schema()
    assert status == 200
    assert view["yieldedTools"] == [{"callId": "call_q", "name": "ask_guest",
                                     "args": {"q": "Which night?"},
                                     "inputSchema": Stay.model_json_schema()}]
