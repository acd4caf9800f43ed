"""The ``api`` function, driven by the events/ payloads against in-process moto."""

from __future__ import annotations

import json
from typing import Any

from tests.functions.conftest import (
    Deployment,
    FakeLambdaContext,
    api_body,
    as_principal,
    load_event,
    with_body,
)

SESSION = "session_thread-42"


def _resume_event(call_id: str) -> dict[str, Any]:
    """events/api_post_turn_resume.json with the call id the first turn yielded."""
    event = load_event("api_post_turn_resume.json")
    body = api_body(event)
    body["tools"][0]["callId"] = call_id
    return with_body(event, body)


def test_post_turns_yields_and_the_resume_event_finishes_the_booking(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    api = deployed.cold_start("api")

    first = api.handler(load_event("api_post_turn.json"), context)
    assert first["statusCode"] == 200, first["body"]
    paused = api_body(first)
    assert paused["sessionId"] == SESSION
    assert paused["status"] == "yielded_tool"
    [call] = paused["yieldedTools"]
    assert (call["name"], call["args"]) == ("ask_guest", {"q": "Which night?"})

    second = api.handler(_resume_event(call["callId"]), FakeLambdaContext())
    assert second["statusCode"] == 200, second["body"]
    done = api_body(second)
    assert (done["status"], done["output"]["text"]) == ("completed", "Booked for Friday.")
    assert "warning" not in done  # a clean commit


def test_get_session_event_shows_the_ledger_to_its_owner_only(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    api = deployed.cold_start("api")
    api.handler(load_event("api_post_turn.json"), context)

    own = api.handler(load_event("api_get_session.json"), context)
    assert own["statusCode"] == 200, own["body"]
    view = api_body(own)
    assert (view["sessionId"], view["status"], view["version"]) == (
        SESSION, "awaiting_input", 1)
    assert [e["type"] for e in view["events"]] == [
        "invocation_start", "user", "tool_call", "tool_yield", "invocation_yield"]
    assert view["events"][1]["message_id"] == "msg-0001"

    stranger = api.handler(as_principal(load_event("api_get_session.json"), "someone-else"),
                           context)
    assert stranger["statusCode"] == 404
    assert api_body(stranger)["code"] == "session_not_found"


def test_a_stranger_cannot_post_into_someone_elses_session(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    api = deployed.cold_start("api")
    api.handler(load_event("api_post_turn.json"), context)
    before = deployed.session(SESSION)

    reply = api.handler(as_principal(load_event("api_post_turn.json"), "someone-else"), context)

    assert reply["statusCode"] == 404
    assert deployed.session(SESSION).version == before.version


def test_no_authorizer_claims_is_401_and_writes_nothing(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    api = deployed.cold_start("api")

    reply = api.handler(as_principal(load_event("api_post_turn.json"), None), context)

    assert reply["statusCode"] == 401
    assert api_body(reply)["code"] == "unauthorized"
    assert deployed.session(SESSION) is None


def test_delete_session_event_forgets_the_session(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    api = deployed.cold_start("api")
    api.handler(load_event("api_post_turn.json"), context)

    deleted = api.handler(load_event("api_delete_session.json"), context)

    assert deleted["statusCode"] == 200, deleted["body"]
    assert api_body(deleted) == {"sessionId": SESSION, "deleted": True}
    assert deployed.session(SESSION) is None
    assert api.handler(load_event("api_get_session.json"), context)["statusCode"] == 404


def test_fork_event_forks_the_callers_session_copy_on_write(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    api = deployed.cold_start("api")
    api.handler(load_event("api_post_turn.json"), context)

    forked = api.handler(load_event("api_post_fork.json"), context)

    assert forked["statusCode"] == 201, forked["body"]
    body = api_body(forked)
    assert body["sessionId"] == "session_thread-42-b" and body["version"] == 1
    assert body["forkOf"]["session"] == SESSION and body["forkOf"]["version"] == 1
    source, fork = deployed.session(SESSION), deployed.session("session_thread-42-b")
    assert source is not None and fork is not None
    assert [e.id for e in fork.events] == [e.id for e in source.events]
    assert fork.principal == source.principal


def test_docs_event_serves_the_openapi_page_without_a_principal(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    api = deployed.cold_start("api")

    reply = api.handler(load_event("api_get_docs.json"), context)

    assert reply["statusCode"] == 200
    assert "swagger" in reply["body"].lower()


def test_a_client_mistake_is_a_4xx_with_a_code(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    api = deployed.cold_start("api")
    event = with_body(load_event("api_post_turn.json"), {"sessionId": "thread-42", "bogus": 1})

    reply = api.handler(event, context)

    assert 400 <= reply["statusCode"] < 500
    assert api_body(reply)["code"]
    assert deployed.session(SESSION) is None


def test_agui_event_answers_a_buffered_event_stream(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    api = deployed.cold_start("api")

    reply = api.handler(load_event("api_post_agui.json"), context)

    assert reply["statusCode"] == 200, reply["body"]
    assert reply["multiValueHeaders"]["Content-Type"] == ["text/event-stream"]
    types = [json.loads(line[len("data: "):])["type"]
             for line in reply["body"].splitlines() if line.startswith("data: ")]
    assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED"
    assert "TOOL_CALL_START" in types  # the concierge looked the stay up
    session = deployed.session("thread-43")
    assert session.principal == "7d9c2a5e-4f1b-4c3a-9e8d-1a2b3c4d5e6f"


def test_library_logs_come_out_as_the_function_s_structured_json(
        deployed: Deployment) -> None:
    import logging

    deployed.cold_start("api")
    library = logging.getLogger("dormant")
    record = library.makeRecord("dormant", logging.WARNING, __file__, 1, "probe", None, None,
                                extra={"session_id": "session_probe"})

    (handler,) = library.handlers
    assert handler.formatter is not None
    formatted = json.loads(handler.formatter.format(record))
    assert (formatted["message"], formatted["session_id"], formatted["level"]) == (
        "probe", "session_probe", "WARNING")
