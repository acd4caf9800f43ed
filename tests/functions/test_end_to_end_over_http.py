"""The api function end to end over the wire: boto3 talks HTTP to a moto server.

The functions find the server only through ``AWS_ENDPOINT_URL_*`` (as under ``sam local`` with
a local DynamoDB), so this runs the same code path a deployed function does, request framing
and all.
"""

from __future__ import annotations

from tests.functions.conftest import (
    Deployment,
    FakeLambdaContext,
    api_body,
    load_event,
    with_body,
)


def test_post_that_yields_then_a_resume_then_get_shows_the_ledger(
        deployed_over_http: Deployment) -> None:
    api = deployed_over_http.cold_start("api")

    paused = api_body(api.handler(load_event("api_post_turn.json"), FakeLambdaContext()))
    assert paused["status"] == "yielded_tool", paused
    [call] = paused["yieldedTools"]

    resume = load_event("api_post_turn_resume.json")
    body = api_body(resume)
    body["tools"][0]["callId"] = call["callId"]
    # A new execution environment answers: nothing of the first turn is held in memory.
    api = deployed_over_http.cold_start("api")
    done = api_body(api.handler(with_body(resume, body), FakeLambdaContext()))
    assert (done["status"], done["output"]["text"]) == ("completed", "Booked for Friday.")

    shown = api.handler(load_event("api_get_session.json"), FakeLambdaContext())
    assert shown["statusCode"] == 200, shown["body"]
    view = api_body(shown)
    # three versions: the turn that yielded, the answer's claim (committed before the turn
    # ran on), the resumed turn's commit
    assert (view["status"], view["version"]) == ("active", 3)
    assert "running" not in view
    assert [e["type"] for e in view["events"] if e["type"] != "state_delta"] == [
        "invocation_start", "user", "tool_call", "tool_yield", "invocation_yield",
        "tool_input", "invocation_resume", "tool_result", "assistant", "invocation_end"]
    [result] = [e for e in view["events"] if e["type"] == "tool_result"]
    assert result["call_id"] == call["callId"]
