"""The AG-UI adapter's options, SSE framing, and the stock ``RunAgentInput`` mapping."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from ag_ui.core import BaseEvent, RunAgentInput
from ag_ui_validate.pytest_plugin import assert_valid_agui
from ag_ui_validate.transport import TransportOptions, sse_items, validate_body
from pydantic import BaseModel

import dormant
from dormant.agui import (
    SSE_CONTENT_TYPE,
    AgUIAdapter,
    encode_sse,
    from_run_agent_input,
)
from dormant.models import ScriptedModel


def wire(events: list[BaseEvent]) -> list[dict[str, Any]]:
    return [json.loads(event.model_dump_json(by_alias=True)) for event in events]


def conformant(events: list[BaseEvent]) -> list[dict[str, Any]]:
    data = wire(events)
    assert_valid_agui(data, max_warnings=0)
    return data


class Question(BaseModel):
    q: str


class Answer(BaseModel):
    answer: str


ASK = {"name": "ask_guest", "args": {"q": "Which night?"}, "id": "call_ask"}


@pytest.fixture()
def app() -> dormant.App:
    return dormant.App(name="bookings")


@pytest.fixture()
def ask_guest(app: dormant.App) -> dormant.Tool:
    return app.tool(name="ask_guest", description="Ask the guest a question",
                    schema=Question, yield_schema=Answer)


def concierge(app: dormant.App, ask_guest: dormant.Tool, replies: list[Any]) -> dormant.Agent:
    return app.agent("concierge", model=ScriptedModel(replies),
                     context=[app.context.history()], tools=[ask_guest])


def protocol(app: dormant.App, agent: dormant.Agent, session_id: str, message: str,
             **options: Any) -> list[BaseEvent]:
    """The seed's hand-written loop: a turn, an adapter with options, the result at the end."""
    live = app.handler.turn(agent=agent)({"session_id": session_id,
                                          "input": {"message": message}})
    adapter = AgUIAdapter(session_id, live.invocation_id, **options)
    events: list[BaseEvent] = [adapter.run_started()]
    for event in live:
        events.extend(adapter.transform(event))
    assert live.result is not None
    events.extend(adapter.finish(live.result))
    return events


# --- adapter options -------------------------------------------------------------------------


def test_steps_bracket_each_model_step_with_its_tool_calls(app, ask_guest):
    agent = concierge(app, ask_guest, [{"tool_calls": [ASK]}])

    events = protocol(app, agent, "session_steps", "book", include_steps=True)

    data = conformant(events)
    kinds = [e["type"] for e in data]
    assert kinds[:2] == ["RUN_STARTED", "STEP_STARTED"]
    assert kinds.index("TOOL_CALL_END") < kinds.index("STEP_FINISHED") < kinds.index("CUSTOM")
    assert {e["stepName"] for e in data if e["type"].startswith("STEP_")} == {"step_1"}


def test_steps_close_when_the_next_step_starts(app, ask_guest):
    lookup = app.tool(name="lookup", description="Look up", schema=Question,
                      execute=lambda ctx: "found")
    agent = app.agent("concierge", model=ScriptedModel([
        {"tool_calls": [{"name": "lookup", "args": {"q": "x"}}]}, "Found it."]),
        tools=[lookup])

    data = conformant(protocol(app, agent, "session_two_steps", "look", include_steps=True))

    steps = [(e["type"], e["stepName"]) for e in data if e["type"].startswith("STEP_")]
    assert steps == [("STEP_STARTED", "step_1"), ("STEP_FINISHED", "step_1"),
                     ("STEP_STARTED", "step_2"), ("STEP_FINISHED", "step_2")]


def test_reasoning_off_drops_thoughts(app, ask_guest):
    agent = concierge(app, ask_guest, [{"thought": "private", "text": "Hi."}])

    data = conformant(protocol(app, agent, "session_quiet", "hi", reasoning=False))

    assert not [e for e in data if e["type"].startswith("REASONING")]
    assert "private" not in json.dumps(data)


def test_raw_events_attach_the_dormant_event(app, ask_guest):
    agent = concierge(app, ask_guest, ["Hi."])

    data = conformant(protocol(app, agent, "session_raw", "hi", raw_events=True))

    by_type = {e["type"]: e for e in data}
    assert by_type["TEXT_MESSAGE_START"]["rawEvent"]["type"] == "assistant_delta"
    assert by_type["TEXT_MESSAGE_END"]["rawEvent"]["type"] == "model_end"
    assert "rawEvent" not in by_type["RUN_STARTED"]
    # every raw event carries its stream position: the largest one received is a stop's `seen`
    seqs = [e["rawEvent"]["seq"] for e in data if "rawEvent" in e]
    assert seqs == sorted(seqs) and seqs[0] >= 1


def test_a_tool_transformer_rewrites_what_the_interrupt_shows(app, ask_guest):
    agent = concierge(app, ask_guest, [{"tool_calls": [ASK]}])

    def show(tool: dormant.YieldedTool) -> Any:
        return {"prompt": tool.args["q"].upper(), "call": tool.call_id}

    data = conformant(protocol(app, agent, "session_tf", "book",
                               tool_transformers={"ask_guest": show}))

    custom, finished = data[-2], data[-1]
    shown = {"prompt": "WHICH NIGHT?", "call": "call_ask"}
    assert custom["value"]["yieldedTools"] == [
        {"callId": "call_ask", "name": "ask_guest", "args": shown}]
    assert finished["outcome"]["interrupts"][0]["metadata"]["args"] == shown
    assert app.sessions.get("session_tf").yielded_tools[0].args == {"q": "Which night?"}


def test_run_interrupted_needs_a_yielded_tool():
    with pytest.raises(ValueError, match="needs a yielded tool or a pending approval"):
        AgUIAdapter("session_x", "inv_x").run_interrupted([])


# --- SSE -------------------------------------------------------------------------------------


async def _chunks(text: str, size: int) -> AsyncIterator[bytes]:
    data = text.encode()
    for start in range(0, len(data), size):
        yield data[start:start + size]


async def _parse(text: str) -> list[Any]:
    return [item async for item in sse_items(_chunks(text, 7))]


def test_sse_frames_parse_back_into_the_events_and_pass_the_transport_checks(app, ask_guest):
    agent = concierge(app, ask_guest, [{"thought": "hmm", "text": "Let me ask.",
                                        "tool_calls": [ASK]}])
    events = list(app.handler.agui(agent=agent)({"input": {"message": "book"}}))

    body = "".join(encode_sse(events))

    items = asyncio.run(_parse(body))
    assert [item.kind for item in items] == ["event"] * len(events)
    assert [json.loads(item.data) for item in items] == wire(events)
    checked = asyncio.run(validate_body(_chunks(body, 64), SSE_CONTENT_TYPE,
                                        TransportOptions(recorded=True)))
    assert checked.event_count == len(events)
    assert checked.report.summary.errors == 0, checked.report.diagnostics
    assert checked.report.summary.warnings == 0, checked.report.diagnostics


# --- RunAgentInput ---------------------------------------------------------------------------


def body(**fields: Any) -> dict[str, Any]:
    return {"threadId": "thread-7", "runId": "client-run-1", "state": {}, "tools": [],
            "context": [], "forwardedProps": {}, "messages": [], **fields}


def test_the_last_user_message_is_the_input():
    request = from_run_agent_input(body(messages=[
        {"id": "m1", "role": "user", "content": "earlier"},
        {"id": "m2", "role": "assistant", "content": "reply"},
        {"id": "m3", "role": "user", "content": "book a room"},
    ]), principal="alice")

    assert request.session_id == "thread-7"
    assert request.principal == "alice"
    assert (request.input.message, request.input.message_id) == ("book a room", "m3")
    assert request.input.tools is None and request.input.state is None


def test_text_parts_of_a_user_message_are_joined():
    request = from_run_agent_input(body(messages=[{"id": "m1", "role": "user", "content": [
        {"type": "text", "text": "book"}, {"type": "text", "text": "a room"}]}]))

    assert request.input.message == "book\na room"


def test_a_conversation_ending_with_the_assistant_brings_no_message():
    request = from_run_agent_input(body(messages=[
        {"id": "m1", "role": "user", "content": "hi"},
        {"id": "m2", "role": "assistant", "content": "hello"}]))

    assert request.input.message is None


def test_resume_entries_answer_the_calls_and_the_history_is_not_resent():
    request = from_run_agent_input(RunAgentInput.model_validate(body(
        messages=[{"id": "m1", "role": "user", "content": "book"}],
        resume=[{"interruptId": "call_a", "status": "resolved", "payload": {"answer": "Fri"}},
                {"interruptId": "call_b", "status": "cancelled"}])))

    assert request.input.message is None
    assert [(a.call_id, a.input) for a in request.input.tools] == [
        ("call_a", {"answer": "Fri"}), ("call_b", None)]


def test_a_non_empty_state_is_merged_into_the_session_state():
    assert from_run_agent_input(body(state={"room": 12})).input.state == {"room": 12}
    assert from_run_agent_input(body(state={})).input.state is None


def test_a_body_that_is_not_a_run_agent_input_is_an_input_error():
    with pytest.raises(dormant.InputError, match=r"threadId|thread_id"):
        from_run_agent_input({"messages": []})


def test_a_stock_client_can_pause_and_resume_through_run_agent_input(app, ask_guest):
    agent = concierge(app, ask_guest, [{"tool_calls": [ASK]}, "Booked for Friday."])
    handle = app.handler.agui(agent=agent)
    history = [{"id": "m1", "role": "user", "content": "book a room"}]

    first = conformant(list(handle(from_run_agent_input(body(messages=history)))))
    interrupts = first[-1]["outcome"]["interrupts"]
    resume = [{"interruptId": i["id"], "status": "resolved", "payload": {"answer": "Friday"}}
              for i in interrupts]
    second = conformant(list(handle(from_run_agent_input(body(messages=history,
                                                              resume=resume)))))

    assert first[0]["threadId"] == second[0]["threadId"] == "session_thread-7"
    assert second[0]["parentRunId"] == first[0]["runId"]
    text = "".join(e["delta"] for e in second if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "Booked for Friday."
    assert second[-1]["result"] == {"commitStatus": "committed", "status": "completed"}


# --- cold start ------------------------------------------------------------------------------


def test_importing_dormant_does_not_import_ag_ui():
    code = ("import sys, dormant\n"
            "app = dormant.App(name='x')\n"
            "agent = app.agent('a', tools=[])\n"
            "app.handler.turn(agent=agent); app.handler.rest(agent=agent)\n"
            "assert 'ag_ui' not in sys.modules, 'ag_ui imported by dormant'\n"
            "app.handler.agui(agent=agent)\n"
            "assert 'ag_ui' in sys.modules\n")

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)

    assert done.returncode == 0, done.stderr
