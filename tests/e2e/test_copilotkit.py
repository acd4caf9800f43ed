"""CopilotKit in front of ``dormant dev``: its runtime (``@copilotkit/runtime``'s Node HTTP
endpoint, one agent: an ``@ag-ui/client`` ``HttpAgent`` pointed at ``POST /agui``), driven by
CopilotKit's own front-end core (``@copilotkit/core``, what its React provider wraps), as a page
drives it. ``tests/e2e/js/copilotkit_client.mjs`` plays the page; what dormant kept is read
back here through its API."""

from __future__ import annotations

from .conftest import DevServer, ended_session, run_node

ANSWER = "The page said: confirmed (context: page=checkout) "


def test_a_frontend_action_runs_in_the_page_and_its_result_reaches_the_model(
        frontend_server: DevServer) -> None:
    """The model calls the page's frontend action; CopilotKit runs its handler and sends the
    result back on a follow-up run; the answer shows the result and the page's context."""
    seen = run_node("copilotkit_client.mjs", "tools", server=frontend_server)

    assert seen["executed"] == [{"room": "12"}], seen
    assert seen["answer"] == ANSWER, seen
    [first, second] = seen["runs"]
    assert first["sessionId"] == second["sessionId"]
    kept = ended_session(frontend_server, first["sessionId"])["events"]
    call = next(e for e in kept if e["type"] == "tool_call")
    assert (call["name"], call["args"], call["dynamic"]) == (
        "confirm_in_page", {"room": "12"}, True), call
    assert seen["tool"]["toolCallId"] == call["call_id"]
    result = next(e for e in kept if e["type"] == "tool_result")
    assert (result["call_id"], result["result"]) == (call["call_id"], "confirmed"), result
    assert [e["text"] for e in kept if e["type"] == "assistant"] == [ANSWER]
    assert kept[-1]["type"] == "invocation_end" and kept[-1]["status"] == "completed", kept[-1]


def test_copilotkits_stop_ends_the_run_keeping_the_message_and_the_text_streamed(
        frontend_server: DevServer) -> None:
    """Stop, as the chat's Stop button calls it, after the first delta of a slow answer: the
    runtime aborts its request to dormant, which takes the hang-up for a stop."""
    seen = run_node("copilotkit_client.mjs", "stop", server=frontend_server)

    assert seen["runtimeAborts"] == 1, seen
    [run] = seen["runs"]
    kept = ended_session(frontend_server, run["sessionId"])["events"]

    assert [e["text"] for e in kept if e["type"] == "user"] == ["tell me slowly"], kept
    said = [e["text"] for e in kept if e["type"] == "assistant"]
    assert len(said) == 1 and said[0].startswith(seen["text"]) and seen["text"], (seen, said)
    assert "word50" not in said[0], f"the turn ran on after the stop: {said[0]!r}"
    assert [e["type"] for e in kept][-2:] == ["stop_requested", "invocation_end"], kept
    assert kept[-1]["status"] == "stopped", kept[-1]
