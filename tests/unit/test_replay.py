"""Replaying a recorded session against an agent (``dormant.testing.replay``): the inputs
it sends again, matched by position, what no longer fits, and the turn-by-turn diff."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from dormant.events import AppEvent, InputResponse, QueuedEvent, TimerFired, UserEvent
from dormant.models.scripted import ScriptedModel
from dormant.samples import bookings, concierge
from dormant.testing import (
    approve,
    deny,
    model,
    replay,
    run_test,
    timer,
    tool_input,
    user,
)
from dormant.testing._replay import outside_inputs, recorded_replies
from dormant.tools import ToolContext
from tests.fixtures.make_ledgers import HERE, cases

UPGRADE = {"name": "upgrade_room", "args": {"ref": "BK-1", "room": "suite"}}
LOOKUP = {"name": "lookup_stay", "args": {"ref": "BK-1"}}
ASK = {"name": "ask_guest", "args": {"q": "Which night?"}}
NEW_PROMPT = "Always look the stay up before you change it."


def bookings_session(session_id: str | None = None) -> Any:
    """A Bookings session: an upgrade a person approves, then a question and its answer."""
    _, agent = bookings.build()
    return run_test(agent, [
        user("upgrade BK-1 to a suite"), model(tool_calls=[UPGRADE]), approve(),
        model("Upgraded to a suite."),
        user("and move one night"), model(tool_calls=[ASK]),
        tool_input({"ask_guest": {"answer": "the 2nd"}}), model("Moved the 2nd."),
    ], session_id=session_id).session


def _with_prompt(agent: Any, prompt: str, model: Any) -> Any:
    app, _ = bookings.build()
    return replace(agent, model=model, context=[app.context.system(prompt),
                                                app.context.history(limit=20)])


def test_a_changed_prompt_shows_the_changed_tool_call_in_the_diff() -> None:
    recorded = bookings_session()
    _, agent = bookings.build()
    scripted = ScriptedModel([{"tool_calls": [LOOKUP, UPGRADE]}, "Looked it up, upgraded.",
                              {"tool_calls": [ASK]}, "Moved the 2nd."])
    changed = _with_prompt(agent, NEW_PROMPT, scripted)

    replayed = replay(recorded, changed)

    assert NEW_PROMPT in scripted.requests[0].system  # the changed agent is what ran
    first, approved, message, answered = replayed.diff.turns
    assert first.tools_changed
    assert first.changes == [
        'tools: upgrade_room({"ref": "BK-1", "room": "suite"}) -> '
        'lookup_stay({"ref": "BK-1"}), upgrade_room({"ref": "BK-1", "room": "suite"})']
    assert first.replayed is not None and first.replayed.approvals == ["upgrade_room"]
    assert approved.changes == ['text: "Upgraded to a suite." -> "Looked it up, upgraded."']
    assert not message.changed and not answered.changed
    assert replayed.diff.tools_changed == 1 and replayed.diff.new_approvals == []
    assert replayed.orphans == []
    # the new ledger: the lookup ran, with no recorded result to give back (it fails, noted)
    assert replayed.notes == ["no recorded result for call 1 of lookup_stay (the recording "
                              "has 0 of its results)"]
    assert [e.name for e in replayed if e.type == "tool_call"] == [
        "lookup_stay", "upgrade_room", "ask_guest"]


def test_a_replay_is_its_new_ledger_and_leaves_the_recording_alone() -> None:
    recorded = bookings_session()
    before = [e.model_dump() for e in recorded.events]

    replayed = replay(recorded, bookings.build()[1], model="recorded")

    assert [e.model_dump() for e in recorded.events] == before
    assert replayed.events == list(replayed) and replayed.session.events == list(replayed)
    assert [e.type for e in replayed] == [e.type for e in recorded.events]
    assert not replayed.diff.changed
    assert replayed.session.session_id == recorded.session_id  # the same invocation ids too
    assert [e.invocation_id for e in replayed] == [e.invocation_id for e in recorded.events]


def test_an_answer_to_a_question_the_new_agent_never_asks_is_reported_not_sent() -> None:
    recorded = bookings_session()
    never_asks = ScriptedModel([{"tool_calls": [UPGRADE]}, "Upgraded to a suite.",
                                "Which night? Any will do: I moved the 1st."])

    replayed = replay(recorded, _with_prompt(bookings.build()[1], NEW_PROMPT, never_asks))

    [orphan] = replayed.orphans
    assert orphan.index == 3 and orphan.input == "answer ask_guest"
    assert orphan.reason == "the replay never made the recording's call 1 of ask_guest"
    assert replayed.turns[3] is None and replayed.diff.turns[3].changes == [
        "not replayed: the input no longer fits (see orphans)"]
    asked = replayed.diff.turns[2]
    assert asked.changes[:2] == ['tools: ask_guest({"q": "Which night?"}) -> none',
                                 "questions: ask_guest -> none"]
    assert not any(e.type == "tool_input" for e in replayed)  # nothing was guessed
    assert "orphan: answer ask_guest" in str(replayed.diff)


def test_an_answer_to_a_question_that_does_not_wait_is_an_orphan() -> None:
    recorded = bookings_session()
    # the new agent asks, but with arguments the tool refuses: its call ends in an error
    asks_badly = ScriptedModel([{"tool_calls": [UPGRADE]}, "Upgraded to a suite.",
                                {"tool_calls": [dict(ASK, args={"question": "Which?"})]},
                                "Sorry, I could not ask."])

    replayed = replay(recorded, replace(bookings.build()[1], model=asks_badly))

    assert [o.reason for o in replayed.orphans] == [
        "the replay's call 1 of ask_guest does not wait for an answer"]


def test_a_denial_is_sent_to_the_call_at_the_same_position() -> None:
    _, agent = bookings.build()
    recorded = run_test(agent, [
        user("upgrade BK-1 to a suite"), model(tool_calls=[UPGRADE]),
        deny("upgrade_room", reason="no suites left"), model("Sorry, no suites left."),
    ]).session
    other_room = dict(UPGRADE, args={"ref": "BK-1", "room": "deluxe"})

    replayed = replay(recorded, replace(agent, model=ScriptedModel(
        [{"tool_calls": [other_room]}, "Sorry."])))

    [decided] = [e for e in replayed if e.type == "approval_decided"]
    assert decided.approved is False and decided.reason == "no suites left"
    [result] = [e for e in replayed if e.type == "tool_result"]
    assert result.denied and result.call_id == decided.call_id


def test_recorded_tools_touch_nothing_real_tools_run_fakes_replace_one() -> None:
    runs: list[str] = []
    app, agent = bookings.build()
    counted = app.tool(name="lookup_stay", description="Look up a booking",
                       schema=bookings.StayRef,
                       execute=lambda ctx: runs.append(ctx.args.ref) or {"nights": 9})
    agent = replace(agent, tools={**agent.tools, "lookup_stay": counted})
    recorded = run_test(agent, [user("how long is BK-1?"), model(tool_calls=[LOOKUP]),
                                model("Nine nights.")]).session
    assert runs == ["BK-1"]

    played = replay(recorded, agent, model="recorded")
    assert runs == ["BK-1"]  # the recorded result came back instead
    assert [e.result for e in played if e.type == "tool_result"] == [{"nights": 9}]

    real = replay(recorded, agent, model="recorded", tools="real")
    assert runs == ["BK-1", "BK-1"]
    assert not real.diff.changed

    def fake(ctx: ToolContext) -> dict[str, int]:
        return {"nights": 2}

    faked = replay(recorded, agent, model="recorded", fakes={"lookup_stay": fake})
    assert runs == ["BK-1", "BK-1"]
    assert [e.result for e in faked if e.type == "tool_result"] == [{"nights": 2}]
    with pytest.raises(ValueError, match="no_such_tool"):
        replay(recorded, agent, fakes={"no_such_tool": fake})


def test_a_call_past_the_recorded_results_fails_and_is_noted() -> None:
    recorded = run_test(bookings.build()[1], [
        user("how long is BK-1?"), model(tool_calls=[LOOKUP]), model("Three nights.")]).session
    twice = ScriptedModel([{"tool_calls": [LOOKUP, dict(LOOKUP, args={"ref": "BK-2"})]},
                           "BK-1 three nights; BK-2 unknown."])

    replayed = replay(recorded, replace(bookings.build()[1], model=twice))

    assert replayed.notes == ["no recorded result for call 2 of lookup_stay (the recording "
                              "has 1 of its results)"]
    results = [e for e in replayed if e.type == "tool_result"]
    assert results[0].result == {"ref": "BK-1", "nights": 3}
    assert results[1].error is not None and "no result" in results[1].error


def test_more_model_calls_than_recorded_replies_are_noted() -> None:
    recorded = run_test(bookings.build()[1], [user("hi"), model("Hello.")]).session
    calls_a_tool = replace(bookings.build()[1], model=ScriptedModel([{"tool_calls": [LOOKUP]}]))

    replayed = replay(recorded, calls_a_tool)

    assert replayed.diff.turns[0].replayed is not None
    assert replayed.diff.turns[0].replayed.status == "failed"
    assert replayed.diff.turns[0].changes[-2:] == ["status: completed -> failed",
                                                   'text: "Hello." -> ""']


def test_a_timer_named_after_its_call_fires_under_the_replays_call() -> None:
    _, agent = bookings.build()
    remind = {"name": "set_reminder", "args": {"delay_seconds": 60, "reminder": "check out"}}
    asked = [user("remind me in a minute to check out", id="m-1"), model(tool_calls=[remind]),
             model("I will remind you.")]
    first = run_test(agent, asked, session_id="session_remind")  # (call ids derive from ids)
    [call] = [e.call_id for e in first.events if e.type == "tool_call"]
    recorded = run_test(agent, [*asked, timer(f"reminder:{call}"), model("Reminder: check out.")],
                        session_id="session_remind").session
    [fired] = [e for e in recorded.events if isinstance(e, TimerFired)]
    assert [i.kind for i in outside_inputs(recorded.events)] == ["message", "timer"]

    replayed = replay(recorded, agent, model="recorded", session_id="session_other")

    [again] = [e for e in replayed if isinstance(e, TimerFired)]
    [mine] = [e.call_id for e in replayed if e.type == "tool_call"]
    assert mine != call and again.name == f"reminder:{mine}" != fired.name
    assert not replayed.diff.changed and replayed.orphans == []
    assert [e.text for e in replayed if e.type == "user"][-1] == "Reminder: check out"


def test_a_sub_agents_approval_is_matched_by_its_path() -> None:
    _, entry = concierge.build()
    recorded = run_test(entry, [
        user("refund invoice INV-7"),
        model(tool_calls=[{"name": "billing", "args": {"input": "refund INV-7"}}]),
        model(tool_calls=[{"name": "refund", "args": {"invoice": "INV-7", "amount_cents": 1}}],
              agent="concierge/billing"),
        approve("refund", agent="concierge/billing"),
        model("Refunded INV-7.", agent="concierge/billing"), model("Billing refunded INV-7."),
    ]).session
    replies = recorded_replies(recorded.events)
    assert [r["text"] for r in replies["concierge/billing"]] == ["", "Refunded INV-7."]

    replayed = replay(recorded, entry, model="recorded")

    assert not replayed.diff.changed, str(replayed.diff)
    [decided] = [e for e in replayed if e.type == "approval_decided"]
    assert decided.approved
    assert replayed.diff.turns[0].recorded.approvals == ["concierge/billing: refund"]


def test_the_golden_ledgers_replay_with_their_recorded_replies_and_results() -> None:
    """Every golden fixture replays against the agent that recorded it with nothing changed
    (its interrupts, pauses, retries and model failures included), but those a stop sent into
    a running turn shaped, which say so."""
    controlled = {"stopped", "stopped-draft"}
    for name, (agent, _) in cases().items():
        ledger = json.loads((HERE / f"{name}.v1.json").read_text())
        replayed = replay(ledger, agent, model="recorded")
        assert replayed.orphans == [], name
        if name in controlled:
            assert replayed.diff.changed, name
            assert replayed.notes == [
                "the recording's stop (1x) sent into a running turn is not replayed: where it "
                "fell cannot be played back"], name
        else:
            assert not replayed.diff.changed, f"{name}:\n{replayed.diff}"


def test_outside_inputs_name_each_kind_once() -> None:
    events = [
        UserEvent(text="hi", message_id="m1"),
        QueuedEvent(text="later", message_id="m2", position=0),
        UserEvent(text="later", message_id="m2", queued=True),
        AppEvent(name="crm.updated", data={"id": 1}, event_id="e1"),
        InputResponse(input_id="size", value="L"),
    ]

    found = outside_inputs(events)

    assert [(i.kind, i.described) for i in found] == [
        ("message", "message 'hi'"), ("message", "message 'later'"),
        ("event", "event crm.updated"), ("input", "input size")]


def test_what_replay_takes_and_refuses() -> None:
    recorded = run_test(bookings.build()[1], [user("hi"), model("Hello.")]).session
    agent = bookings.build()[1]
    dumped = {"format": 1, "events": [e.model_dump(mode="json") for e in recorded.events]}
    for source in (recorded, recorded.events, dumped, dumped["events"]):
        assert not replay(source, agent, model="recorded").diff.changed
    with pytest.raises(TypeError, match="expected a list of ledger events"):
        replay("session_x", agent)
    with pytest.raises(ValueError, match="tools must be"):
        replay(recorded, agent, tools="fake")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="model:"):
        replay(recorded, agent, model="replayed")  # type: ignore[arg-type]


def _front_desk(model: Any) -> tuple[Any, Any]:
    """An app whose agent books a room once a person approves, and hears CRM updates."""
    import dormant

    app = dormant.App(name="desk")
    app.event("crm.updated", {"type": "object"})
    book = app.tool(name="upgrade_room", description="Upgrade a room",
                    schema=bookings.RoomUpgrade, execute=lambda ctx: {"ok": True})
    return app, app.agent(name="desk", model=model, tools=[book],
                          tool_approval={"upgrade_room": "user-approval"})


def test_trusted_inputs_and_turn_control_at_rest_are_replayed() -> None:
    """An app event, an input request trusted code made and its answer, a pause and a resume
    at rest (a message queued between), and a stop of a waiting invocation: each is sent again,
    and the replay of the same agent changes nothing."""
    app, agent = _front_desk(ScriptedModel([
        {"tool_calls": [UPGRADE]}, "Any news?", {"tool_calls": [UPGRADE]}]))
    rest = app.handler.rest(agent=agent)

    def send(**given: Any) -> Any:
        return rest({"session_id": "desk-1", "input": given})

    assert send(message="upgrade BK-1", message_id="m-1").status == "yielded_tool"
    send(stop={"invocation_id": app.sessions.get("desk-1").open_invocation})
    send(events=[{"name": "crm.updated", "data": {"id": 7}, "id": "evt-7"}])
    asking = app.sessions.get("desk-1")
    asking.request_input("size", {"type": "string"}, "Which size?")
    assert app.sessions.commit(asking).ok
    send(inputs=[{"input_id": "size", "value": "L"}])
    assert send(pause=True).status == "paused"
    assert send(message="anything new?", message_id="m-2").status == "queued"
    assert send(resume=True).status == "completed"  # the queued message runs
    assert send(message="upgrade BK-1 again", message_id="m-3").status == "yielded_tool"
    recorded = app.sessions.get("desk-1")
    kinds = [i.kind for i in outside_inputs(recorded.events)]
    assert kinds == ["message", "stop", "event", "ask", "input", "pause", "message", "resume",
                     "message"]

    same = replay(recorded, agent, model="recorded")

    assert same.orphans == [] and same.notes == [] and not same.diff.changed, str(same.diff)
    assert [e.type for e in same] == [e.type for e in recorded.events]
    never_waits = replace(agent, tool_approval={}, model=ScriptedModel(
        [{"tool_calls": [UPGRADE]}, "Upgraded.", "Any news?", {"tool_calls": [UPGRADE]},
         "Upgraded again."]))
    changed = replay(recorded, never_waits)
    assert [(o.input, o.reason) for o in changed.orphans] == [
        ("stop", "no invocation waits in the replay")]


def test_the_state_before_the_first_input_is_the_replays_too() -> None:
    import dormant

    app = dormant.App(name="state")
    seen: list[Any] = []
    peek = app.tool(name="lookup_stay", description="Look", schema=bookings.StayRef,
                    execute=lambda ctx: seen.append(dict(ctx.state)) or {"ok": True})
    agent = app.agent(name="clerk", tools=[peek])
    recorded = run_test(agent, [user("look BK-1 up"), model(tool_calls=[LOOKUP]),
                                model("Done.")]).session

    replayed = replay(recorded, agent, model="recorded", tools="real", state={"tier": "gold"})

    assert seen == [{}, {"tier": "gold"}] and replayed.session.state == {"tier": "gold"}
