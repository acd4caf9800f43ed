"""POST /turns with Accept: text/event-stream: the turn's events, then its result."""

from __future__ import annotations

import json
from typing import Any

import pytest

import dormant
from dormant.http import build_resolver, wants_event_stream
from dormant.models import ScriptedModel
from tests.unit.test_http_api import COGNITO, _event

SSE = "text/event-stream"


def _resolver() -> Any:
    app = dormant.App(name="sse-test")
    agent = app.agent(name="a", model=ScriptedModel(["one two three"] * 10))
    return build_resolver(app, agent, require_principal=True)


def _post(resolver: Any, body: dict[str, Any], accept: str | None,
          authorizer: dict[str, Any] = COGNITO) -> dict[str, Any]:
    event = _event("POST", "/turns", body, authorizer=authorizer)
    if accept is not None:
        event["headers"]["Accept"] = accept
        event["multiValueHeaders"]["Accept"] = [accept]
    out: dict[str, Any] = resolver.resolve(event, None)
    return out


def _frames(body: str) -> list[dict[str, str]]:
    frames = []
    for block in body.strip().split("\n\n"):
        fields = {}
        for line in block.splitlines():
            name, _, value = line.partition(": ")
            fields[name] = value
        frames.append(fields)
    return frames


def test_the_turns_events_come_as_they_were_produced_then_the_result() -> None:
    resolver = _resolver()
    out = _post(resolver, {"sessionId": "session_sse_1", "message": "hi"}, SSE)
    assert out["statusCode"] == 200
    assert out["multiValueHeaders"]["Content-Type"] == [SSE]
    frames = _frames(out["body"])
    assert [f["event"] for f in frames[:2]] == ["invocation_start", "user"]
    assert frames[-1]["event"] == "result" and "id" not in frames[-1]
    events = [json.loads(f["data"]) for f in frames[:-1]]
    assert [e["type"] for e in events] == [f["event"] for f in frames[:-1]]
    assert [int(f["id"]) for f in frames[:-1]] == list(range(1, len(events) + 1))
    deltas = "".join(e["delta"] for e in events if e["type"] == "assistant_delta")
    result = json.loads(frames[-1]["data"])
    assert deltas == result["output"]["text"] == "one two three"
    # The result is the body the same request answers as JSON, plus its HTTP status.
    plain = _post(resolver, {"sessionId": "session_sse_2", "message": "hi"}, None)
    body = json.loads(plain["body"])
    assert result["httpStatus"] == plain["statusCode"] == 200
    assert set(result) - {"httpStatus"} == set(body)
    assert result["status"] == body["status"] == "completed"


def test_a_refused_turn_answers_the_json_error_not_a_stream() -> None:
    resolver = _resolver()
    assert _post(resolver, {"sessionId": "session_sse_3", "message": "mine"}, SSE)[
        "statusCode"] == 200
    other = {"claims": {"sub": "someone-else"}}
    refused = _post(resolver, {"sessionId": "session_sse_3", "message": "x"}, SSE, other)
    assert refused["statusCode"] == 404
    assert json.loads(refused["body"])["code"] == "session_not_found"
    anonymous = _post(resolver, {"sessionId": "session_sse_3", "message": "x"}, SSE, {})
    assert anonymous["statusCode"] == 401


@pytest.mark.parametrize(("accept", "streams"), [
    (None, False),
    ("application/json", False),
    ("text/event-stream", True),
    ("Text/Event-Stream", True),
    ("text/event-stream;q=0.5, application/json", False),
    ("application/json;q=0.2, text/event-stream", True),
    ("text/event-stream, application/json", True),
    ("application/json, text/event-stream", False),
    ("text/event-stream;q=0", False),
    ("*/*", False),
])
def test_the_accept_header_decides_json_or_events(accept: str | None, streams: bool) -> None:
    headers = {} if accept is None else {"accept": accept}
    assert wants_event_stream(headers) is streams
