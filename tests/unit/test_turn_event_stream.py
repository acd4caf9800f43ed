"""POST /turns with Accept: text/event-stream: the turn's events, then its result."""

from __future__ import annotations

import itertools
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


class _Recorded:
    """A streaming server's writer (the Lambda context attribute the SSE routes look for):
    what was written, when; ``fail_comments``: a client that hangs up while the turn is
    quiet (the first keep-alive comment finds it gone)."""

    def __init__(self, *, fail_comments: bool = False) -> None:
        import time

        self.sent: list[tuple[float, str]] = []
        self.fail_comments = fail_comments
        self.clock = time.monotonic
        self.failed = False

    def __call__(self, text: str) -> None:
        if self.failed or (self.fail_comments and text.startswith(":")):
            self.failed = True
            raise BrokenPipeError("the client hung up")
        self.sent.append((self.clock(), text))


def _slow_resolver(keepalive: float, ran: list[str]) -> Any:
    from pydantic import BaseModel

    class Nothing(BaseModel):
        pass

    def slow(ctx: dormant.ToolContext) -> dict[str, str]:
        ended = ctx.signal.wait(3.0)  # a tool that runs a while, stopping early on an abort
        ran.append("aborted" if ended else "finished")
        return {"done": "yes"}

    app = dormant.App(name="sse-keepalive")
    tool = app.tool(name="slow", description="Slow", schema=Nothing, execute=slow)
    agent = app.agent(name="a", tools=[tool], model=ScriptedModel(
        [{"tool_calls": [{"name": "slow", "args": {}}]}, "done"] * 5))
    return build_resolver(app, agent, require_principal=True, keepalive=keepalive)


def _streamed(resolver: Any, writer: _Recorded, body: dict[str, Any]) -> dict[str, Any]:
    from dormant.http import SSE_WRITER_ATTRIBUTE

    class Context:
        aws_request_id = "r-keepalive"

    context = Context()
    setattr(context, SSE_WRITER_ATTRIBUTE, writer)
    event = _event("POST", "/turns", body, authorizer=COGNITO)
    event["headers"]["Accept"] = SSE
    out: dict[str, Any] = resolver.resolve(event, context)
    return out


def test_a_quiet_stream_sends_keepalive_comments_while_a_tool_runs() -> None:
    ran: list[str] = []
    writer = _Recorded()
    out = _streamed(_slow_resolver(0.2, ran), writer,
                    {"sessionId": "session_sse_keep", "message": "go"})
    assert out["statusCode"] == 200 and ran == ["finished"]
    texts = [text for _, text in writer.sent]
    kinds = [t.split("\n")[1].removeprefix("event: ") if t.startswith("id:") else
             t.split("\n")[0] for t in texts]
    call, result = kinds.index("tool_call"), kinds.index("tool_result")
    # the 3 s tool is covered by comments every 0.2 s, and only while nothing else is sent
    comments = [k for k in kinds[call:result] if k == ": keepalive"]
    assert len(comments) >= 5, kinds
    assert ": keepalive" not in kinds[:call]
    assert kinds[-1].startswith("event: result")
    times = [at for at, _ in writer.sent]
    assert max(b - a for a, b in itertools.pairwise(times)) < 1.5


def test_a_client_gone_while_a_tool_runs_aborts_the_turn_at_once() -> None:
    import time

    ran: list[str] = []
    started = time.monotonic()
    _streamed(_slow_resolver(0.2, ran), _Recorded(fail_comments=True),
              {"sessionId": "session_sse_gone", "message": "go"})
    assert ran == ["aborted"]
    assert time.monotonic() - started < 2.5  # not the tool's 3 s


def test_no_keepalive_when_turned_off() -> None:
    ran: list[str] = []
    writer = _Recorded()
    _streamed(_slow_resolver(0, ran), writer, {"sessionId": "session_sse_off", "message": "go"})
    assert ran == ["finished"]
    assert not [t for _, t in writer.sent if t.startswith(":")]
