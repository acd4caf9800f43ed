"""``app.handler.agui``: each way a turn can end, as an AG-UI run that passes the validator."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from ag_ui.core import BaseEvent
from ag_ui_validate.pytest_plugin import assert_valid_agui
from pydantic import BaseModel

import dormant
from dormant.models import ModelError, ScriptedModel
from dormant.models._base import ModelChunk, ModelRequest, TextDelta
from dormant.tools import Signal

# --- helpers ---------------------------------------------------------------------------------


def wire(events: list[BaseEvent]) -> list[dict[str, Any]]:
    """The events as a client receives them (camelCase JSON objects)."""
    return [json.loads(event.model_dump_json(by_alias=True)) for event in events]


def types(events: list[BaseEvent]) -> list[str]:
    return [event.type.value for event in events]


def squeeze(kinds: list[str]) -> list[str]:
    """Collapse runs of one streamed type (``TEXT_MESSAGE_CONTENT`` x3 -> once)."""
    out: list[str] = []
    for kind in kinds:
        if not out or out[-1] != kind or not kind.endswith("_CONTENT"):
            out.append(kind)
    return out


def conformant(events: list[BaseEvent]) -> list[dict[str, Any]]:
    """Assert the stream passes ag-ui-validate with no error and no warning; return its JSON."""
    data = wire(events)
    assert_valid_agui(data, max_warnings=0)
    return data


def one(data: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [event for event in data if event["type"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


class Question(BaseModel):
    q: str


class Answer(BaseModel):
    answer: str


class Nights(BaseModel):
    nights: int


def _prepare(ctx: dormant.ToolContext) -> Any:
    ctx.state["asking"] = ctx.args.q
    return ctx.args


def _finalize(ctx: dormant.ToolContext) -> None:
    ctx.state.pop("asking", None)


def _record_stay(ctx: dormant.ToolContext) -> Any:
    ctx.state["nights"] = ctx.args.nights
    return {"nights": ctx.args.nights, "total": 120 * ctx.args.nights}


ASK = {"name": "ask_guest", "args": {"q": "Which night?"}, "id": "call_ask"}


@pytest.fixture()
def app() -> dormant.App:
    return dormant.App(name="bookings")


@pytest.fixture()
def tools(app: dormant.App) -> list[dormant.Tool]:
    ask_guest = app.tool(name="ask_guest", description="Ask the guest a question",
                         schema=Question, yield_schema=Answer, prepare=_prepare,
                         finalize=_finalize)
    record_stay = app.tool(name="record_stay", description="Record the stay",
                           schema=Nights, execute=_record_stay)
    return [ask_guest, record_stay]


def agent(app: dormant.App, tools: list[dormant.Tool], replies: list[Any],
          **options: Any) -> dormant.Agent:
    return app.agent("concierge", model=ScriptedModel(replies),
                     context=[app.context.history()], tools=tools, **options)


def run(app: dormant.App, agent: dormant.Agent, request: dict[str, Any],
        **config: Any) -> list[BaseEvent]:
    return list(app.handler.agui(agent=agent, **config)(request))


# --- finished --------------------------------------------------------------------------------


def test_a_finished_turn_is_one_run_bracketed_by_started_and_finished(app, tools):
    concierge = agent(app, tools, ["Hello there."])
    handle = app.handler.agui(agent=concierge)

    stream = handle({"session_id": "thread-42", "input": {"message": "hi"}})
    events = list(stream)

    assert types(events) == ["RUN_STARTED", "STATE_SNAPSHOT", "TEXT_MESSAGE_START",
                             "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_CONTENT",
                             "TEXT_MESSAGE_END", "RUN_FINISHED"]
    data = conformant(events)
    started, finished = data[0], data[-1]
    assert started["threadId"] == "session_thread-42" == finished["threadId"]
    assert started["runId"] == stream.result.invocation_id == finished["runId"]
    assert "parentRunId" not in started
    assert data[1]["snapshot"] == {}
    assert finished["result"] == {"commitStatus": "committed", "status": "completed"}
    assert "".join(e["delta"] for e in data if e["type"] == "TEXT_MESSAGE_CONTENT") \
        == "Hello there."
    assert app.sessions.get("thread-42").version == 1


def test_a_reply_that_was_not_streamed_is_no_text_message(app, tools):
    concierge = app.agent("concierge", tools=tools,
                          hooks=[dormant.Hook(before_agent=lambda ctx: "Stood down.")])

    events = run(app, concierge, {"input": {"message": "hi"}})

    assert types(events) == ["RUN_STARTED", "STATE_SNAPSHOT", "RUN_FINISHED"]
    conformant(events)


def test_tool_calls_state_deltas_and_results_are_translated_in_order(app, tools):
    concierge = agent(app, tools, [
        {"text": "Recording.", "tool_calls": [{"name": "record_stay", "args": {"nights": 3},
                                               "id": "call_rec"}]},
        "Three nights: 360.",
    ])

    events = run(app, concierge, {"session_id": "s1", "input": {"message": "3 nights"}})

    assert squeeze(types(events)) == [
        "RUN_STARTED", "STATE_SNAPSHOT",
        "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
        "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END",
        "STATE_DELTA", "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    data = conformant(events)
    start = one(data, "TOOL_CALL_START")
    assert start["toolCallId"] == "call_rec" and start["toolCallName"] == "record_stay"
    assert start["parentMessageId"] == data[2]["messageId"]  # the text of the same step
    assert json.loads(one(data, "TOOL_CALL_ARGS")["delta"]) == {"nights": 3}
    assert one(data, "STATE_DELTA")["delta"] == [{"op": "add", "path": "/nights", "value": 3}]
    assert json.loads(one(data, "TOOL_CALL_RESULT")["content"]) == {"nights": 3, "total": 360}


def test_input_state_is_a_delta_on_the_snapshot_of_the_state_at_turn_start(app, tools):
    app.sessions.create("s-state", state={"guest": "Ada"})
    concierge = agent(app, tools, ["Noted."])

    events = run(app, concierge, {"session_id": "s-state",
                                  "input": {"message": "hi", "state": {"room": 12}}})

    data = conformant(events)
    assert one(data, "STATE_SNAPSHOT")["snapshot"] == {"guest": "Ada"}
    assert one(data, "STATE_DELTA")["delta"] == [{"op": "add", "path": "/room", "value": 12}]


def test_thoughts_become_reasoning_events_before_the_text(app, tools):
    concierge = agent(app, tools, [{"thought": "A greeting.", "text": "Hi."}])

    events = run(app, concierge, {"input": {"message": "hi"}})

    assert types(events) == [
        "RUN_STARTED", "STATE_SNAPSHOT",
        "REASONING_START", "REASONING_MESSAGE_START", "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END", "REASONING_END",
        "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_FINISHED",
    ]
    data = conformant(events)
    assert one(data, "REASONING_MESSAGE_CONTENT")["delta"] == "A greeting."
    assert one(data, "REASONING_MESSAGE_START")["role"] == "reasoning"


def test_a_message_yield_finishes_the_run_and_the_next_message_is_its_child(app, tools):
    concierge = agent(app, tools, ["What name?", "Thanks, Ada."], yields=True)
    handle = app.handler.agui(agent=concierge)

    first = list(handle({"session_id": "s-chat", "input": {"message": "hi"}}))
    second = list(handle({"session_id": "s-chat", "input": {"message": "Ada"}}))

    first_data, second_data = conformant(first), conformant(second)
    assert first_data[-1]["type"] == "RUN_FINISHED" and "outcome" not in first_data[-1]
    assert second_data[0]["parentRunId"] == first_data[0]["runId"]
    assert second_data[0]["runId"].startswith(first_data[0]["runId"] + ":")


# --- interrupted and resumed -----------------------------------------------------------------


def test_a_yield_ends_with_run_interrupted_then_an_interrupt_outcome(app, tools):
    concierge = agent(app, tools, [{"text": "Let me ask.", "tool_calls": [ASK]}])

    events = run(app, concierge, {"session_id": "s-book", "input": {"message": "book"}})

    assert squeeze(types(events)) == [
        "RUN_STARTED", "STATE_SNAPSHOT",
        "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
        "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END",
        "STATE_DELTA", "CUSTOM", "RUN_FINISHED",
    ]
    data = conformant(events)
    custom, finished = data[-2], data[-1]
    assert custom["name"] == "RUN_INTERRUPTED"
    assert custom["value"]["callIds"] == ["call_ask"]
    assert custom["value"]["yieldedTools"] == [
        {"callId": "call_ask", "name": "ask_guest", "args": {"q": "Which night?"}}]
    assert finished["result"] == {"commitStatus": "committed",
                                  "status": "yielded_tool"}
    assert finished["outcome"]["type"] == "interrupt"
    [interrupt] = finished["outcome"]["interrupts"]
    assert interrupt["id"] == interrupt["toolCallId"] == "call_ask"
    assert interrupt["responseSchema"]["required"] == ["answer"]
    assert not any(e["type"] == "RUN_ERROR" for e in data)


def test_a_resumed_run_is_a_child_run_that_settles_the_earlier_call(app, tools):
    concierge = agent(app, tools, [{"tool_calls": [ASK]}, "Booked for Friday."])
    handle = app.handler.agui(agent=concierge)
    first = list(handle({"session_id": "s-book", "input": {"message": "book"}}))

    resumed = handle({"session_id": "s-book", "input": {
        "tools": [{"call_id": "call_ask", "input": {"answer": "Friday"}}]}})
    second = list(resumed)

    assert squeeze(types(second)) == [
        "RUN_STARTED", "STATE_SNAPSHOT", "MESSAGES_SNAPSHOT",
        "STATE_DELTA", "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_FINISHED",
    ]
    first_data, data = conformant(first), conformant(second)
    conformant(first + second)  # one recorded stream of two runs is valid too
    assert data[0]["runId"] != first_data[0]["runId"]
    assert data[0]["parentRunId"] == first_data[0]["runId"] == resumed.result.invocation_id
    assert data[1]["snapshot"] == {"asking": "Which night?"}  # written by prepare
    [user, assistant] = one(data, "MESSAGES_SNAPSHOT")["messages"]
    assert user == {"id": user["id"], "role": "user", "content": "book"}
    assert [call["id"] for call in assistant["toolCalls"]] == ["call_ask"]
    result = one(data, "TOOL_CALL_RESULT")
    assert result["toolCallId"] == "call_ask"
    assert json.loads(result["content"]) == {"answer": "Friday"}
    assert data[-1]["result"] == {"commitStatus": "committed", "status": "completed"}


def test_every_resume_names_the_run_it_resumes_as_its_parent(app, tools):
    second_ask = {**ASK, "id": "call_ask_2"}
    concierge = agent(app, tools, [{"tool_calls": [ASK]}, {"tool_calls": [second_ask]}, "Done."])
    handle = app.handler.agui(agent=concierge)
    answer = {"answer": "Friday"}

    runs = [wire(list(handle({"session_id": "s-twice", "input": request})))
            for request in ({"message": "book"},
                            {"tools": [{"call_id": "call_ask", "input": answer}]},
                            {"tools": [{"call_id": "call_ask_2", "input": answer}]})]

    starts = [run_[0] for run_ in runs]
    assert len({start["runId"] for start in starts}) == 3
    assert "parentRunId" not in starts[0]
    assert starts[1]["parentRunId"] == starts[0]["runId"]
    assert starts[2]["parentRunId"] == starts[1]["runId"]
    assert [run_[-1]["type"] for run_ in runs] == ["RUN_FINISHED"] * 3


def test_a_partial_answer_interrupts_again_with_the_calls_still_waiting(app, tools):
    both = [ASK, {**ASK, "id": "call_ask_2", "args": {"q": "How many?"}}]
    concierge = agent(app, tools, [{"tool_calls": both}])
    handle = app.handler.agui(agent=concierge)
    first = wire(list(handle({"session_id": "s-two", "input": {"message": "book"}})))

    events = list(handle({"session_id": "s-two", "input": {
        "tools": [{"call_id": "call_ask", "input": {"answer": "Friday"}}]}}))

    assert types(events) == ["RUN_STARTED", "STATE_SNAPSHOT", "CUSTOM", "RUN_FINISHED"]
    data = conformant(events)
    assert data[0]["parentRunId"] == first[0]["runId"]
    assert data[-2]["value"]["callIds"] == ["call_ask_2"]
    assert [i["id"] for i in data[-1]["outcome"]["interrupts"]] == ["call_ask_2"]


def test_a_message_to_a_session_parked_on_a_tool_is_queued_in_a_run_of_that_invocation(
        app, tools):
    concierge = agent(app, tools, [{"tool_calls": [ASK]}])
    handle = app.handler.agui(agent=concierge)
    first = wire(list(handle({"session_id": "s-park", "input": {"message": "book"}})))

    stream = handle({"session_id": "s-park", "input": {"message": "hello?",
                                                       "message_id": "m-later"}})
    events = list(stream)

    assert types(events) == ["RUN_STARTED", "STATE_SNAPSHOT", "CUSTOM", "RUN_FINISHED"]
    data = conformant(events)
    started, queued, finished = data[0], data[2], data[3]
    invocation = first[0]["runId"]
    assert started["runId"].startswith(invocation + ":")
    assert started["parentRunId"] == invocation
    assert started["metadata"] == {"invocationId": invocation}
    assert (queued["name"], queued["value"]) == ("QUEUED", {"id": "m-later", "position": 0})
    assert finished["result"]["status"] == "queued"
    assert finished["result"]["queued"] == {"id": "m-later", "position": 0}
    assert stream.result.status == "queued"


def test_a_message_that_may_not_wait_is_a_run_error(app, tools):
    concierge = agent(app, tools, [{"tool_calls": [ASK]}])
    handle = app.handler.agui(agent=concierge)
    list(handle({"session_id": "s-park", "input": {"message": "book"}}))

    events = list(handle({"session_id": "s-park",
                          "input": {"message": "hello?", "if_busy": "reject"}}))

    assert types(events) == ["RUN_STARTED", "STATE_SNAPSHOT", "RUN_ERROR"]
    assert "call_ask" in conformant(events)[-1]["message"]


# --- failed and aborted ----------------------------------------------------------------------


class Breaking:
    """A model that streams some text, then fails."""

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[ModelChunk]:
        yield TextDelta("Half a ")
        raise RuntimeError("the model connection dropped")


def test_a_model_that_raises_ends_the_run_with_run_error_and_writes_nothing(app, tools, caplog):
    concierge = app.agent("concierge", model=Breaking(), tools=tools)

    events = run(app, concierge, {"session_id": "s-broken", "input": {"message": "hi"}})

    assert types(events) == ["RUN_STARTED", "STATE_SNAPSHOT", "TEXT_MESSAGE_START",
                             "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_ERROR"]
    data = conformant(events)
    # The exception's text is the server's business: the log has it, the client does not.
    assert "the model connection dropped" not in data[-1]["message"]
    assert "the model connection dropped" in caplog.text
    assert data[-1]["code"] == "run_error"
    assert data[-1]["metadata"]["retryable"] is True  # as POST /turns's error body says it
    assert app.sessions.get("s-broken") is None


class Overflowing:
    """A model whose provider refuses the request for good (the context is too long)."""

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[ModelChunk]:
        raise ModelError("prompt is 210k tokens (secret-ish detail)", code="context_overflow",
                         retryable=False)


def test_a_run_error_says_whether_a_retry_can_help_and_where_the_log_has_it(app, tools):
    concierge = app.agent("concierge", model=Overflowing(), tools=tools)
    stream = app.handler.agui(agent=concierge)(
        {"session_id": "s-overflow", "input": {"message": "hi"}}, request_id="req-42")

    data = conformant(list(stream))

    assert data[-1]["type"] == "RUN_ERROR" and data[-1]["code"] == "context_overflow"
    assert data[-1]["metadata"] == {"retryable": False, "requestId": "req-42"}
    assert "secret-ish" not in json.dumps(data[-1])


def test_a_hook_that_raises_ends_the_run_with_run_error(app, tools, caplog):
    def refuse(ctx: dormant.HookContext) -> None:
        raise ValueError("no models today")

    concierge = agent(app, tools, ["never said"], hooks=[dormant.Hook(before_model=refuse)])

    events = run(app, concierge, {"input": {"message": "hi"}})

    assert types(events) == ["RUN_STARTED", "STATE_SNAPSHOT", "RUN_ERROR"]
    assert "no models today" not in conformant(events)[-1]["message"]
    assert "no models today" in caplog.text


def test_an_aborted_run_ends_with_run_error_and_no_run_finished(app, tools):
    concierge = agent(app, tools, ["one two three four five"])
    stream = app.handler.agui(agent=concierge)({"session_id": "s-abort",
                                                "input": {"message": "hi"}})

    events: list[BaseEvent] = []
    for event in stream:
        events.append(event)
        if event.type.value == "TEXT_MESSAGE_CONTENT":
            stream.abort()

    assert types(events) == ["RUN_STARTED", "STATE_SNAPSHOT", "TEXT_MESSAGE_START",
                             "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_ERROR"]
    assert conformant(events)[-1]["code"] == "aborted"
    assert stream.result.commit_status is None
    assert app.sessions.get("s-abort") is None


def test_a_turn_past_its_timeout_ends_with_run_error(app):
    def wait_for_abort(ctx: dormant.ToolContext) -> Any:
        ctx.signal.wait(30)  # returns when the turn's deadline passes
        return "late"

    slow = app.tool(name="slow", description="Takes its time", schema=Nights,
                    execute=wait_for_abort)
    concierge = agent(app, [slow], [{"tool_calls": [{"name": "slow", "args": {"nights": 1}}]},
                                    "unreached"])

    events = run(app, concierge, {"session_id": "s-slow", "input": {"message": "hi"}},
                 timeout=2.0)  # time for the tool to start (its write-ahead lands) under load

    assert types(events)[-1] == "RUN_ERROR"
    assert "RUN_FINISHED" not in types(events)
    assert conformant(events)[-1]["code"] == "deadline"
    kept = app.sessions.get("s-slow")  # the tool ran: its result is kept, the session failed
    assert kept is not None and kept.status == "failed"
    assert [e.type for e in kept.events][-2:] == ["tool_result", "invocation_failed"]


def test_a_client_that_hangs_up_keeps_what_a_stop_keeps(app, tools):
    concierge = agent(app, tools, ["one two three"])
    stream = app.handler.agui(agent=concierge)({"session_id": "s-gone",
                                                "input": {"message": "hi"}})

    taken = [next(stream)]
    while [type(e).__name__ for e in taken].count("TextMessageContentEvent") < 2:
        taken.append(next(stream))
    stream.close()  # what the server does when writing the last event taken failed

    assert list(stream) == []
    result = stream.turn.run()
    assert (result.status, result.commit_status) == ("stopped", "committed")
    kept = app.sessions.get("s-gone")
    assert kept is not None
    assert [e.type for e in kept.events] == [
        "invocation_start", "user", "assistant", "stop_requested", "invocation_end"]
    # the user's message, and the text the client was sent: not the delta whose write failed
    shown = [e.delta for e in taken if type(e).__name__ == "TextMessageContentEvent"]
    assert kept.events[1].text == "hi"
    assert kept.events[2].text == shown[0] != "".join(shown)
    assert kept.events[-1].status == "stopped"


def test_a_client_that_hangs_up_before_anything_streamed_keeps_its_message(app, tools):
    concierge = agent(app, tools, ["one two three"])
    stream = app.handler.agui(agent=concierge)({"session_id": "s-gone",
                                                "input": {"message": "hi"}})

    next(stream), next(stream)  # RUN_STARTED, STATE_SNAPSHOT
    stream.close()

    assert stream.turn.run().status == "stopped"
    kept = app.sessions.get("s-gone")
    assert kept is not None
    assert [e.type for e in kept.events] == [
        "invocation_start", "user", "stop_requested", "invocation_end"]


def test_a_bad_request_is_a_run_error_run(app, tools):
    concierge = agent(app, tools, [])

    events = run(app, concierge, {"session_id": "bad id!", "input": {"message": "hi"}})

    assert types(events) == ["RUN_STARTED", "RUN_ERROR"]
    assert "invalid session id" in conformant(events)[-1]["message"]


def test_a_superseded_turn_finishes_without_an_interrupt(tools):
    ticks = iter(range(1_000, 2_000))
    app = dormant.App(name="bookings", clock=lambda: next(ticks))
    newer = app.handler.rest(agent=app.agent("fast", hooks=[
        dormant.Hook(before_agent=lambda ctx: "fast answer")]))
    overtaken: list[str] = []

    def newer_message_lands(ctx: dormant.HookContext) -> None:
        if not overtaken:
            overtaken.append(newer({"session_id": "s-race",
                                    "input": {"message": "newer"}}).status)

    concierge = agent(app, tools, [{"tool_calls": [ASK]}],
                      hooks=[dormant.Hook(before_model=newer_message_lands)])

    events = run(app, concierge, {"session_id": "s-race", "input": {"message": "older"}})

    data = conformant(events)
    assert overtaken == ["completed"]
    assert data[-1]["type"] == "RUN_FINISHED"
    assert data[-1]["result"] == {"commitStatus": "superseded",
                                  "status": "yielded_tool"}
    assert "outcome" not in data[-1]
    assert not [e for e in data if e["type"] == "CUSTOM"]
    assert app.sessions.get("s-race").yielded_tools == []


def test_an_agent_without_history_still_tells_the_client_about_the_parked_calls(app, tools):
    concierge = app.agent("concierge", model=ScriptedModel([{"tool_calls": [ASK]}, "Done."]),
                          context=[app.context.system("Be brief.")], tools=tools)
    handle = app.handler.agui(agent=concierge)
    first = wire(list(handle({"session_id": "s-nohist", "input": {"message": "book"}})))

    events = list(handle({"session_id": "s-nohist", "input": {
        "tools": [{"call_id": "call_ask", "input": {"answer": "Friday"}}]}}))

    data = conformant(events)  # the result's call is known from the snapshot
    [message] = one(data, "MESSAGES_SNAPSHOT")["messages"]
    assert [call["id"] for call in message["toolCalls"]] == ["call_ask"]
    assert json.loads(message["toolCalls"][0]["function"]["arguments"]) == {"q": "Which night?"}
    assert data[0]["parentRunId"] == first[0]["runId"]
