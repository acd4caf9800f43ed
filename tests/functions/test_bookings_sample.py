"""The Bookings sample and its demo model: small, rule-based, and honest about what it does."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import dormant
from dormant._ids import now_ms
from dormant.schedulers import RecordingScheduler, is_lease_timer


@pytest.fixture
def ask() -> Any:
    from dormant.samples import bookings

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


@pytest.fixture
def upgrades(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[str]]:
    """The sample's REST handler, and the call ids ``upgrade_room`` actually ran for."""
    from dormant.samples import bookings

    ran: list[str] = []
    real = bookings._upgrade_room

    def counted(ctx: Any) -> Any:
        ran.append(ctx.call_id)
        return real(ctx)

    monkeypatch.setattr(bookings, "_upgrade_room", counted)
    app, concierge = bookings.build(env={})
    return app.handler.rest(agent=concierge, response={"events": True}), ran


def _asked_to_upgrade(ask: Any, session_id: str) -> dict[str, Any]:
    paused = _turn(ask, session_id, message="upgrade my room BK-7 to a suite")
    assert paused["status"] == "yielded_tool" and not paused.get("yieldedTools")
    [approval] = paused["pendingApprovals"]
    assert (approval["tool"], approval["args"]) == ("upgrade_room",
                                                    {"ref": "BK-7", "room": "suite"})
    return approval  # type: ignore[no-any-return]


def test_an_upgrade_waits_for_a_real_approval_and_runs_once_approved(
        upgrades: tuple[Any, list[str]]) -> None:
    ask, ran = upgrades
    approval = _asked_to_upgrade(ask, "upgrade")
    assert ran == []  # held by the approval policy, not run

    done = _turn(ask, "upgrade", approvals=[{"approval_id": approval["approvalId"],
                                             "approved": True}])

    assert done["status"] == "completed"
    assert done["output"]["text"] == "Upgraded BK-7 to a suite."
    assert ran == [approval["callId"]]
    [result] = [e for e in done["events"] if e["type"] == "tool_result"]
    assert result["result"] == {"ref": "BK-7", "room": "suite", "status": "upgraded"}


def test_a_denied_upgrade_never_runs_and_the_reply_says_why(
        upgrades: tuple[Any, list[str]]) -> None:
    ask, ran = upgrades
    approval = _asked_to_upgrade(ask, "denied")

    done = _turn(ask, "denied", approvals=[{"approval_id": approval["approvalId"],
                                            "approved": False,
                                            "reason": "no suites free that week"}])

    assert done["status"] == "completed"
    assert done["output"]["text"] == ("The upgrade of BK-7 was not approved. "
                                      "The reason given: no suites free that week.")
    assert ran == []
    [result] = [e for e in done["events"] if e["type"] == "tool_result"]
    assert result["denied"] is True and result.get("result") is None


def test_a_denial_without_a_reason_says_only_that(ask: Any) -> None:
    approval = _asked_to_upgrade(ask, "curt")
    done = _turn(ask, "curt", approvals=[{"approval_id": approval["approvalId"],
                                          "approved": False}])
    assert done["output"]["text"] == "The upgrade of BK-7 was not approved."


@pytest.mark.parametrize(("message", "args"), [
    ("Could you upgrade my booking BK-12?", {"ref": "BK-12", "room": "suite"}),
    ("upgrade my stay to an executive room", {"ref": "BK-1042", "room": "executive"}),
    ("I'd like to upgrade to the penthouse", {"ref": "BK-1042", "room": "penthouse"}),
])
def test_an_upgrade_is_read_before_the_stay_and_booking_rules(
        ask: Any, message: str, args: dict[str, Any]) -> None:
    paused = _turn(ask, "upgrade-parse", message=message)
    assert [(a["tool"], a["args"]) for a in paused["pendingApprovals"]] == [
        ("upgrade_room", args)]


def test_a_reminder_is_scheduled_then_delivered_as_a_message() -> None:
    from dormant.samples import bookings

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
    # the reminder; the wake-up of the lease the tool step's write-ahead held was cancelled
    # once the turn committed
    [timer] = scheduler.timers.values()
    assert [(c[0], c[2]) for c in scheduler.calls if is_lease_timer(c[2])] == [
        ("set", "dormant.lease.1"), ("cancel", "dormant.lease.1")]
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
    from dormant.models import OpenAIModel
    from dormant.samples import bookings

    _, served = bookings.build(env={"OPENAI_API_KEY": "sk-test-not-a-real-key"})
    _, demo = bookings.build(env={})
    assert isinstance(served.model, OpenAIModel)
    assert isinstance(demo.model, bookings.DemoModel)
    assert "demo model" in bookings.describe_model(demo.model)
    assert isinstance(demo, dormant.Agent)


# --- the slow story (something to stop, steer or pause) ----------------------------------------


def _story_app(delay: float) -> Any:
    from dormant.samples import bookings

    return bookings.build(model=bookings.DemoModel(story_delay=delay))


def _types(events: list[Any]) -> list[str]:
    return [e.type for e in events]


def test_a_story_streams_word_by_word_as_one_long_reply() -> None:
    from dormant.samples import bookings

    app, concierge = _story_app(0.0)
    stream = app.handler.turn(agent=concierge)(
        {"session_id": "story", "input": {"message": "Tell me a LONG story, please"}})
    result = stream.run()

    assert result.status == "completed"
    text = result.output.text
    assert text == bookings.story() and text.count(".") >= 60
    assert "Mara" in text and "Hotel Linden" in text
    deltas = [e for e in stream.events if e.type == "assistant_delta"]
    assert len(deltas) == len(text.split()) > 500
    assert not any(e.type == "tool_call" for e in stream.events)


@pytest.mark.parametrize("text", ["Tell me a story", "any stories about this hotel?",
                                  "A LONG STORY please"])
def test_a_story_request_is_recognised(text: str) -> None:
    app, concierge = _story_app(0.0)
    done = app.handler.rest(agent=concierge)({"session_id": "s", "input": {"message": text}})
    assert done.output.text.startswith("Once upon a time")


def test_history_is_not_a_story(ask: Any) -> None:
    done = _turn(ask, "history", message="show my booking history")
    assert not done["output"]["text"].startswith("Once upon a time")


def test_the_story_is_slow_and_a_stop_from_another_request_ends_it_at_once() -> None:
    from dormant.samples import bookings

    app, concierge = _story_app(0.02)  # the whole story would take some 18 s
    stream = app.handler.turn(agent=concierge, poll_interval=0.05)(
        {"session_id": "story", "input": {"message": "tell me a long story"}})
    ran = threading.Thread(target=stream.run, daemon=True)
    ran.start()
    deadline = time.monotonic() + 5
    while sum(e.type == "assistant_delta" for e in list(stream.events)) < 5:
        assert time.monotonic() < deadline, "the story did not start streaming"
        time.sleep(0.01)
    began = time.monotonic()

    stop = app.handler.rest(agent=concierge)(
        {"session_id": "story", "input": {"stop": {"invocation_id": stream.invocation_id}}})
    ran.join(2.0)

    assert stop.status == "accepted"
    assert not ran.is_alive() and time.monotonic() - began < 2.0
    assert stream.result is not None and stream.result.status == "stopped"
    session = app.sessions.get("story")
    assert session is not None
    assert _types(session.events)[-2:] == ["stop_requested", "invocation_end"]
    assert session.events[-1].status == "stopped"
    [told] = [e.text for e in session.events if e.type == "assistant"]
    assert bookings.story().startswith(told) and 5 <= len(told.split()) < 200


def test_a_stop_does_not_wait_out_the_pause_between_two_words() -> None:
    app, concierge = _story_app(3.0)  # a word every 3 s: only a wait on the signal ends sooner
    stream = app.handler.turn(agent=concierge, poll_interval=0.05)(
        {"session_id": "slow", "input": {"message": "a story, please"}})
    ran = threading.Thread(target=stream.run, daemon=True)
    ran.start()
    deadline = time.monotonic() + 5
    while not any(e.type == "assistant_delta" for e in list(stream.events)):
        assert time.monotonic() < deadline, "the story did not start streaming"
        time.sleep(0.01)
    began = time.monotonic()

    app.handler.rest(agent=concierge)(
        {"session_id": "slow", "input": {"stop": {"invocation_id": stream.invocation_id}}})
    ran.join(2.0)

    assert not ran.is_alive() and time.monotonic() - began < 1.0
    assert stream.result is not None and stream.result.status == "stopped"
    session = app.sessions.get("slow")
    assert session is not None
    assert [e.text for e in session.events if e.type == "assistant"] == ["Once "]


def test_a_steer_asking_for_it_shorter_gets_the_ending() -> None:
    app, concierge = _story_app(0.001)
    stream = app.handler.turn(agent=concierge, poll_interval=0.02)(
        {"session_id": "steer", "input": {"message": "tell me a long story"}})
    ran = threading.Thread(target=stream.run, daemon=True)
    ran.start()
    deadline = time.monotonic() + 5
    while not any(e.type == "assistant_delta" for e in list(stream.events)):
        assert time.monotonic() < deadline, "the story did not start streaming"
        time.sleep(0.005)

    steered = app.handler.rest(agent=concierge)({"session_id": "steer", "input": {"steer": {
        "text": "make it shorter", "invocation_id": stream.invocation_id}}})
    ran.join(10.0)

    assert steered.status == "accepted" and stream.result is not None
    assert stream.result.status == "completed"
    assert stream.result.output.text == "The end: the guest checked out happy."
    session = app.sessions.get("steer")
    assert session is not None
    assert _types(session.events) == ["invocation_start", "user", "assistant", "steer", "user",
                                      "assistant", "invocation_end"]


def test_shorter_after_a_story_gets_the_ending_and_the_other_rules_still_hold() -> None:
    app, concierge = _story_app(0.0)
    rest = app.handler.rest(agent=concierge)

    def say(text: str) -> str:
        return str(rest({"session_id": "after", "input": {"message": text}}).output.text)

    assert say("tell me a story").startswith("Once upon a time")
    assert say("make it shorter") == "The end: the guest checked out happy."
    assert "book me in" in say("hello")
    assert say("How long is my stay BK-9?") == "Your stay BK-9 is 3 nights."


def test_the_story_delay_defaults_to_a_readable_pace_and_is_checked() -> None:
    from dormant.samples import bookings

    assert bookings.DemoModel().story_delay == bookings.STORY_DELAY == 0.05
    with pytest.raises(ValueError, match="story_delay"):
        bookings.DemoModel(story_delay=-1)
