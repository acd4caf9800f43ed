"""A realtime model's agent waits for the next message after each reply, with no ``yields=``
given, on every store (the model: the Realtime API over a local WebSocket server)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import dormant
from dormant.models import OpenAIRealtimeModel
from dormant.stores import Store
from tests.unit.realtime_fake import FakeRealtime, reply


@pytest.fixture
def fake() -> Iterator[FakeRealtime]:
    server = FakeRealtime()
    yield server
    server.close()
    assert server.unused == 0, "scripted sessions were left unused"


def test_a_realtime_agent_yields_after_each_reply_on_every_store(
        store: Store, fake: FakeRealtime) -> None:
    app = dormant.App(name="realtime", store=store)
    model = OpenAIRealtimeModel("gpt-realtime", base_url=fake.base_url, api_key="test-key",
                                timeout=10)
    agent = app.agent("concierge", model=model)
    rest = app.handler.rest(agent=agent)
    fake.script(reply("Which date?"), reply("Booked for Tuesday."))

    asked = rest({"session_id": "rt-1", "input": {"message": "book me a room"}})
    answered = rest({"session_id": "rt-1", "input": {"message": "Tuesday"}})

    assert (asked.status, answered.status) == ("yielded_message", "yielded_message")
    assert answered.output.text == "Booked for Tuesday."
    stored = dormant.App(store=store).sessions.get("rt-1")  # as another process reads it
    assert stored is not None and stored.status == "awaiting_input"
    assert [e.type for e in stored.events if e.type != "state_delta"] == [
        "invocation_start", "user", "assistant", "invocation_yield",
        "user", "invocation_resume", "assistant", "invocation_yield"]
