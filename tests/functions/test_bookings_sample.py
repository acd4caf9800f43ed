"""The Bookings sample and its demo model: small, rule-based, and honest about what it does."""

from __future__ import annotations

from typing import Any

import pytest

import dormant
from dormant._ids import now_ms
from dormant.schedulers import RecordingScheduler


@pytest.fixture
def ask() -> Any:
    import bookings

    app, concierge = bookings.build(env={})
    return app.handler.rest(agent=concierge, response={"events": True})


def _turn(ask: Any, session_id: str, **input: Any) -> dict[str, Any]:
    return ask({"session_id": session_id, "input": input}).wire()  # type: ignore[no-any-return]


def test_booking_asks_which_night_then_books_the_answer(ask: Any) -> None:
    paused = _turn(ask, "book", message="Can you book me in for one night?")
    assert paused["status"] == "yielded_tool"
    [call] = paused["yieldedTools"]
    assert (call["name"], call["args"]) == ("ask_guest", {"q": "Which night?"})
    done = _turn(ask, "book", tools=[{"call_id": call["callId"], "input": {"answer": "Friday"}}])
    assert done["status"] == "completed"
    assert done["output"]["text"] == "Booked for Friday."


def test_a_question_about_the_stay_looks_it_up(ask: Any) -> None:
    done = _turn(ask, "stay", message="How long is my stay BK-1042?")
    assert [e["type"] for e in done["events"] if e["type"].startswith("tool")] == [
        "tool_call", "tool_result"]
    assert done["output"]["text"] == "Your stay BK-1042 is 3 nights."


@pytest.mark.parametrize(("decision", "reply"), [
    ({"approved": True}, "Done: cancel booking BK-7."),
    ({"approved": False, "note": "not now"}, "Understood, I won't cancel booking BK-7."),
])
def test_a_cancellation_waits_for_approval(ask: Any, decision: dict[str, Any],
                                           reply: str) -> None:
    paused = _turn(ask, "cancel", message="Please cancel booking BK-7")
    [call] = paused["yieldedTools"]
    assert (call["name"], call["args"]) == ("request_approval",
                                            {"action": "cancel booking BK-7"})
    done = _turn(ask, "cancel", tools=[{"call_id": call["callId"], "input": decision}])
    assert done["output"]["text"] == reply


def test_a_reminder_is_scheduled_then_delivered_as_a_message() -> None:
    import bookings

    scheduler = RecordingScheduler()
    app, concierge = bookings.build(env={}, scheduler=scheduler)
    rest = app.handler.rest(agent=concierge, response={"events": True})
    before = now_ms()

    done = _turn(rest, "remind", message="Remind me in 30 seconds to check out.")

    assert done["status"] == "completed"
    assert done["output"]["text"] == "OK, I'll remind you in 30 seconds: check out."
    [call] = [e for e in done["events"] if e["type"] == "tool_call"]
    assert (call["name"], call["args"]) == ("set_reminder",
                                            {"delay_seconds": 30, "reminder": "check out"})
    [timer] = scheduler.timers.values()
    assert (timer.session_id, timer.name) == ("session_remind", f"reminder:{call['call_id']}")
    assert timer.message == "Reminder: check out"
    assert before + 30_000 <= timer.fire_at <= now_ms() + 30_000

    wake = app.handler.wake(agent=concierge)
    woke = wake(timer)
    again = wake(timer)  # at-least-once delivery: the second one changes nothing

    assert woke.status == "completed" and woke.output.text == "Reminder: check out"
    assert again.code == "stale_timer"
    session = app.sessions.get("remind")
    assert session is not None and session.timers == []
    assert [e.text for e in session.events if e.type == "user"] == [
        "Remind me in 30 seconds to check out.", "Reminder: check out"]


@pytest.mark.parametrize(("message", "args"), [
    ("remind me in 1 second to stretch", {"delay_seconds": 1, "reminder": "stretch"}),
    ("Please remind me in 2 minutes to book a table!",
     {"delay_seconds": 120, "reminder": "book a table"}),
    ("remind me in 1 hour about the cancel policy",
     {"delay_seconds": 3600, "reminder": "the cancel policy"}),
])
def test_a_reminder_request_is_read_before_other_intents(ask: Any, message: str,
                                                         args: dict[str, Any]) -> None:
    done = _turn(ask, "remind-parse", message=message)
    assert [(e["name"], e["args"]) for e in done["events"] if e["type"] == "tool_call"] == [
        ("set_reminder", args)]


def test_a_vague_or_too_long_reminder_is_not_set(ask: Any) -> None:
    vague = _turn(ask, "vague", message="remind me later")
    assert "Tell me when and what" in vague["output"]["text"]
    assert not any(e["type"] == "tool_call" for e in vague["events"])
    too_long = _turn(ask, "too-long", message="remind me in 9999999 seconds to leave")
    assert "less than or equal to 518400" in too_long["output"]["text"]  # six days
    assert not any(e["type"] == "timer_set" for e in too_long["events"])


def test_a_wrong_answer_reaches_the_model_as_invalid_input(ask: Any) -> None:
    call = _turn(ask, "wrong", message="book me in")["yieldedTools"][0]
    done = _turn(ask, "wrong", tools=[{"call_id": call["callId"], "input": {"night": "Fri"}}])
    assert done["status"] == "completed"
    assert "Invalid input" in done["output"]["text"]


def test_anything_else_gets_help(ask: Any) -> None:
    assert "book me in" in _turn(ask, "hi", message="hello")["output"]["text"]


def test_the_model_is_openai_when_a_key_is_set_else_the_demo() -> None:
    import bookings

    from dormant.models import OpenAIModel

    _, served = bookings.build(env={"OPENAI_API_KEY": "sk-test-not-a-real-key"})
    _, demo = bookings.build(env={})
    assert isinstance(served.model, OpenAIModel)
    assert isinstance(demo.model, bookings.DemoModel)
    assert "demo model" in bookings.describe_model(demo.model)
    assert isinstance(demo, dormant.Agent)
