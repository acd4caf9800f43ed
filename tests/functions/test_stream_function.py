"""The streaming function end to end: a real runtime process behind emulated API Gateway.

``bootstrap-stream`` (the function's ``AWS_LAMBDA_EXEC_WRAPPER``) starts dormant's streaming
loop against :class:`tests._gateway.Gateway`, which speaks the Lambda Runtime API on one side
and API Gateway's REST proxy (Cognito authorizer, transfer mode ``STREAM`` or ``BUFFERED``) on
the other; boto3 in the function reaches moto over HTTP. The model
(``tests/functions/stream_app.py``) streams a word every ``STREAM_TEST_DELAY`` seconds.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests._gateway import Gateway
from tests.functions.conftest import (
    Deployment,
    FakeLambdaContext,
    as_principal,
    load_event,
    with_body,
)

ROOT = Path(__file__).resolve().parents[2]
WRAPPER = ROOT / "layers" / "dormant" / "dormant" / "aws" / "bootstrap-stream"
APP = Path(__file__).with_name("stream_app.py")
TOKENS = {"alice-token": "alice", "bob-token": "bob"}


@contextmanager
def running(words: int = 5, delay: float = 0.2, *, mode: str = "STREAM",
            timeout_s: float = 900.0, fail: bool = False,
            printed: list[str] | None = None) -> Iterator[Gateway]:
    """The gateway, and the function's runtime process serving it until the block ends
    (``fail``: its model fails after its words; ``printed``: gets what the process
    printed, once it ended)."""
    with Gateway(TOKENS, mode=mode, timeout_s=timeout_s) as gateway:
        env = {**os.environ, "AWS_LAMBDA_RUNTIME_API": gateway.runtime_api,
               "LAMBDA_TASK_ROOT": str(ROOT / "functions"), "DORMANT_APP": str(APP),
               "AWS_LAMBDA_FUNCTION_NAME": "dormant-stream",
               "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1024",
               "STREAM_TEST_WORDS": str(words), "STREAM_TEST_DELAY": str(delay),
               **({"STREAM_TEST_FAIL": "1"} if fail else {})}
        # As template.yaml sets it: no turn timeout of its own (the api function's 25 s is
        # for API Gateway's buffered 29 s); the invocation's deadline bounds the turn.
        env.pop("DORMANT_TURN_TIMEOUT", None)
        process = subprocess.Popen([str(WRAPPER), sys.executable, "/var/runtime/bootstrap.py"],
                                   env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            yield gateway
        finally:
            process.kill()
            output = process.communicate(timeout=10)[0].decode(errors="replace")
            if printed is not None:
                printed.append(output)
            if os.environ.get("STREAM_TEST_SHOW"):
                print(output)
            if gateway.init_errors:
                raise AssertionError(f"init failed: {gateway.init_errors}\n{output}")


def post(gateway: Gateway, path: str, body: dict[str, Any], *, token: str | None = "alice-token",
         accept: str | None = None, timeout: float = 120) -> http.client.HTTPResponse:
    return request(gateway, "POST", path, body, token=token, accept=accept, timeout=timeout)


def request(gateway: Gateway, method: str, path: str, body: dict[str, Any] | None = None, *,
            token: str | None = "alice-token", accept: str | None = None,
            timeout: float = 120) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection(gateway.url.removeprefix("http://"), timeout=timeout)
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if accept is not None:
        headers["Accept"] = accept
    conn.request(method, path, body=None if body is None else json.dumps(body),
                 headers=headers)
    reply = conn.getresponse()
    reply.connection = conn  # type: ignore[attr-defined]  # to hang up with
    return reply


def frames(reply: http.client.HTTPResponse) -> Iterator[tuple[float, dict[str, str]]]:
    """Each server-sent event as it arrives: (arrival time, its fields)."""
    fields: dict[str, str] = {}
    while True:
        line = reply.readline()
        if not line:
            return
        text = line.decode().rstrip("\r\n")
        if not text:
            if fields:
                yield time.monotonic(), fields
                fields = {}
            continue
        name, _, value = text.partition(":")
        fields[name] = value.strip()


def agui_input(thread: str, text: str = "hello") -> dict[str, Any]:
    return {"threadId": thread, "runId": "run-1", "state": {}, "tools": [], "context": [],
            "forwardedProps": {},
            "messages": [{"id": "m1", "role": "user", "content": text}]}


def test_agui_events_leave_as_they_happen(deployed_over_http: Deployment) -> None:
    delay = 0.4
    with running(words=5, delay=delay) as gateway:
        sent = time.monotonic()
        reply = post(gateway, "/agui", agui_input("session_stream_a"))
        assert reply.status == 200
        assert reply.getheader("Content-Type") == "text/event-stream"
        seen = [(at - sent, json.loads(f["data"])) for at, f in frames(reply)]
    kinds = [event["type"] for _, event in seen]
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED", kinds
    tokens = [at for at, event in seen if event["type"] == "TEXT_MESSAGE_CONTENT"]
    assert len(tokens) == 5
    started = seen[0][0]
    # The first event leaves before the model's first token exists (it comes `delay` later)...
    assert tokens[0] - started >= delay * 0.75, (started, tokens)
    # ...and each token as the model produces it, not in one body at the end.
    gaps = [b - a for a, b in itertools.pairwise(tokens)]
    assert all(gap >= delay * 0.5 for gap in gaps), gaps
    text = "".join(e["delta"] for _, e in seen if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "w0 w1 w2 w3 w4 "
    assert deployed_over_http.session("session_stream_a").owner == "alice"


def test_the_buffered_integration_holds_everything_to_the_end(
        deployed_over_http: Deployment) -> None:
    delay = 0.3
    with running(words=4, delay=delay, mode="BUFFERED") as gateway:
        sent = time.monotonic()
        reply = post(gateway, "/agui", agui_input("session_stream_b"))
        arrivals = [at - sent for at, _ in frames(reply)]
    assert reply.status == 200
    # Nothing arrives before the whole turn ran: the first byte waits for the last token.
    assert arrivals[0] >= 4 * delay * 0.9, arrivals
    assert arrivals[-1] - arrivals[0] < delay, arrivals


def test_turns_stream_their_events_then_the_result(deployed_over_http: Deployment) -> None:
    with running(words=3, delay=0.2) as gateway:
        reply = post(gateway, "/turns", {"sessionId": "session_stream_c", "message": "hi"},
                     accept="text/event-stream")
        assert reply.status == 200
        assert reply.getheader("Content-Type") == "text/event-stream"
        seen = [fields for _, fields in frames(reply)]
        # Without the Accept, the same route answers its JSON body whole, through the stream.
        again = post(gateway, "/turns", {"sessionId": "session_stream_c", "message": "again"})
        body = json.loads(again.read())
    kinds = [f["event"] for f in seen]
    assert kinds[0] == "invocation_start" and kinds[-1] == "result", kinds
    assert kinds.count("assistant_delta") == 3, kinds
    ids = [int(f["id"]) for f in seen if "id" in f]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    result = json.loads(seen[-1]["data"])
    assert (result["httpStatus"], result["status"], result["output"]["text"]) == (
        200, "completed", "w0 w1 w2 ")
    assert again.status == 200 and again.getheader("Content-Type") == "application/json"
    assert (body["status"], body["sessionId"]) == ("completed", "session_stream_c")


def test_refusals_match_the_buffered_routes(deployed_over_http: Deployment) -> None:
    api = deployed_over_http.cold_start("api")

    def buffered(path: str, body: dict[str, Any]) -> tuple[int, str]:
        """What the buffered api function answers bob."""
        event = as_principal(with_body(load_event("api_post_turn.json"), body), "bob")
        event["path"] = event["resource"] = event["requestContext"]["resourcePath"] = path
        answer = api.handler(event, FakeLambdaContext())
        return answer["statusCode"], json.loads(answer["body"])["code"]

    with running(words=1, delay=0.0) as gateway:
        # No token: the authorizer answers; the function is never invoked.
        anonymous = post(gateway, "/agui", agui_input("session_stream_d"), token=None)
        assert anonymous.status == 401
        assert gateway.invoked == 0
        assert post(gateway, "/turns", {"sessionId": "session_stream_d",
                                        "message": "mine"}).status == 200
        asked = [("/agui", agui_input("session_stream_d"), None),
                 ("/turns", {"sessionId": "session_stream_d", "message": "x"},
                  "text/event-stream"),
                 ("/turns", {"sessionId": "session_stream_d", "nope": 1}, None)]
        streamed = []
        for path, body, accept in asked:
            reply = post(gateway, path, body, token="bob-token", accept=accept)
            streamed.append((reply.status, reply.getheader("Content-Type"),
                             json.loads(reply.read())["code"]))
    expected = [(*buffered(path, body), ) for path, body, _ in asked]
    assert [(status, code) for status, _, code in streamed] == expected
    assert {kind for _, kind, _ in streamed} == {"application/json"}
    assert [status for status, _ in expected] == [404, 404, 422]
    session = deployed_over_http.session("session_stream_d")
    assert [e.type for e in session.events].count("user") == 1  # bob wrote nothing


def test_a_client_that_hangs_up_stops_the_turn(deployed_over_http: Deployment) -> None:
    with running(words=60, delay=0.25) as gateway:
        reply = post(gateway, "/agui", agui_input("session_stream_e"))
        for _, fields in frames(reply):
            if json.loads(fields["data"])["type"] == "TEXT_MESSAGE_CONTENT":
                break
        hung_up = time.monotonic()
        reply.close()
        reply.connection.close()  # type: ignore[attr-defined]
        # The function stops the turn and is free again (it serves one request at a time)
        # long before the model would have finished.
        shown = request(gateway, "GET", "/sessions/session_stream_e", timeout=30)
        assert time.monotonic() - hung_up < 60 * 0.25 / 2
        # A hang-up is a stop: the user's message is kept, the invocation ended stopped.
        assert shown.status == 200, shown.read()
    kept = deployed_over_http.session("session_stream_e")
    assert kept is not None
    types = [e.type for e in kept.events]
    assert types[:2] == ["invocation_start", "user"]
    assert types[-2:] == ["stop_requested", "invocation_end"]
    assert kept.events[-1].status == "stopped"
    said = [e.text for e in kept.events if e.type == "assistant"]
    assert len(said) <= 1 and len("".join(said).split()) < 60  # at most what was streamed


@pytest.mark.parametrize("route", ["turns-events", "turns", "agui"])
def test_the_deadline_hands_the_turn_on(deployed_over_http: Deployment, route: str) -> None:
    """Every route that runs a turn bounds it by the invocation's deadline: the turn ends as
    a retryable ``deadline`` failure and its input goes on to the webhook queue."""
    session = f"session_stream_g_{route.replace('-', '_')}"
    # 8 s to the invocation's deadline, 5 of them kept for the commit: the turn gets 3.
    with running(words=40, delay=0.25, timeout_s=8.0) as gateway:
        if route == "agui":
            reply = post(gateway, "/agui", agui_input(session, "long"))
            [ended] = [json.loads(f["data"]) for _, f in frames(reply)][-1:]
            assert (ended["type"], ended["code"]) == ("RUN_ERROR", "deadline"), ended
        else:
            reply = post(gateway, "/turns", {"sessionId": session, "message": "long"},
                         accept="text/event-stream" if route == "turns-events" else None)
            if route == "turns":  # nothing was written: the turn's error, as its status
                assert reply.status == 504
                result = json.loads(reply.read())
                assert (result["code"], result["retryable"]) == ("deadline", True), result
            else:
                result = json.loads([fields for _, fields in frames(reply)][-1]["data"])
                assert (result["status"], result["code"], result["retryable"]) == (
                    "error", "deadline", True), result
            assert result["handedOn"] is True, result
    [handed] = [json.loads(m["Body"]) for m in deployed_over_http.queued()]
    assert (handed["kind"], handed["sessionId"]) == ("hand_on", session)
    # Nothing was written (a text turn cut short keeps nothing): the message itself goes on.
    assert handed["input"]["message"] == "long", handed


def _emf(printed: str) -> list[dict[str, Any]]:
    """The CloudWatch embedded-metric-format records among the lines a process printed."""
    lines = (json.loads(line) for line in printed.splitlines() if line.startswith('{"_aws"'))
    return [record for record in lines if "CloudWatchMetrics" in record["_aws"]]


@pytest.mark.parametrize("route", ["turns-events", "agui"])
def test_a_turn_that_fails_mid_stream_is_counted_as_failed(deployed_over_http: Deployment,
                                                          route: str) -> None:
    """Lambda counts a stream that ends in an error as a success (its ``Errors`` do not
    move): the function's own metrics say the turn failed, and why, named by function."""
    printed: list[str] = []
    session = f"session_stream_fail_{route.replace('-', '_')}"
    with running(words=3, delay=0.05, fail=True, printed=printed) as gateway:
        if route == "agui":
            reply = post(gateway, "/agui", agui_input(session))
            kinds = [json.loads(f["data"])["type"] for _, f in frames(reply)]
            assert "TEXT_MESSAGE_CONTENT" in kinds and kinds[-1] == "RUN_ERROR", kinds
        else:
            reply = post(gateway, "/turns", {"sessionId": session, "message": "hi"},
                         accept="text/event-stream")
            seen = [fields for _, fields in frames(reply)]
            assert any(f["event"] == "assistant_delta" for f in seen)
            assert json.loads(seen[-1]["data"])["code"] == "run_error"
        assert reply.status == 200  # the stream had started: its status was sent
    records = _emf(printed[0])
    counted = [r for r in records if "Turns" in r]
    assert len(counted) == 1, records
    [turn] = counted
    assert (turn["Turns"], turn["TurnsFailed"]) == ([1.0], [1.0]), turn
    assert "TurnsCompleted" not in turn
    assert (turn["FunctionName"], turn["service"], turn["_aws"]["CloudWatchMetrics"][0][
        "Namespace"]) == ("dormant-stream", "dormant", "Dormant")
    [by_code] = [r for r in records if "TurnsFailedByCode" in r]
    assert (by_code["code"], by_code["FunctionName"]) == ("run_error", "dormant-stream")


@pytest.mark.parametrize("seconds", [60])
def test_a_turn_longer_than_api_gateways_buffered_limit_streams_to_its_end(
        deployed_over_http: Deployment, seconds: int) -> None:
    with running(words=seconds, delay=1.0) as gateway:
        sent = time.monotonic()
        reply = post(gateway, "/agui", agui_input("session_stream_h"), timeout=seconds + 60)
        seen = [(at - sent, json.loads(f["data"])) for at, f in frames(reply)]
    assert seen[-1][1]["type"] == "RUN_FINISHED"
    assert seen[-1][0] >= seconds
    tokens = [at for at, e in seen if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert len(tokens) == seconds and tokens[0] < 5  # the first came long before 29 s


def test_the_events_long_poll_and_follow_are_served_by_the_stream_function(
        deployed_over_http: Deployment) -> None:
    """``GET /sessions/{id}/events`` is the stream function's route (template.yaml): its
    long-poll (``wait=``, up to 20 s) holds this function's environment, not the api
    function's; the answer goes out whole, and ``follow=true`` streams the feed."""
    with running(words=1, delay=0.0) as gateway:
        made = post(gateway, "/turns", {"sessionId": "session_stream_i", "message": "hi"})
        assert json.loads(made.read())["status"] == "completed"
        # From the start: the turn's events at once.
        whole = json.loads(request(gateway, "GET",
                                   "/sessions/session_stream_i/events?after=0").read())
        version = whole["version"]
        assert version > 0 and whole["events"]
        # Nothing after the latest version: the poll waits its 1 s, then answers no events.
        sent = time.monotonic()
        polled = request(gateway, "GET",
                         f"/sessions/session_stream_i/events?after={version}&wait=1")
        feed = json.loads(polled.read())
        waited = time.monotonic() - sent
        assert (polled.status, polled.getheader("Content-Type")) == (200, "application/json")
        assert (feed["events"], feed["version"]) == ([], version)
        assert waited >= 0.9, waited
        # follow=true: the feed as server-sent events, the first page at once.
        followed = request(gateway, "GET",
                           "/sessions/session_stream_i/events?after=0&follow=true")
        assert followed.getheader("Content-Type") == "text/event-stream"
        first = next(fields for _, fields in frames(followed) if "data" in fields)
        assert json.loads(first["data"])["version"] == version
        followed.close()
        followed.connection.close()  # type: ignore[attr-defined]


def test_a_followed_session_s_stream_ends_before_the_deadline_saying_where_to_go_on(
        deployed_over_http: Deployment) -> None:
    """A follower never sees the invocation's timeout (an error to Lambda, and to the stream
    function's rollback alarms): the stream ends first, with ``event: reconnect`` naming
    the version to follow on from."""
    with running(words=1, delay=0.0, timeout_s=8.0) as gateway:
        made = post(gateway, "/turns", {"sessionId": "session_stream_j", "message": "hi"})
        assert json.loads(made.read())["status"] == "completed"
        sent = time.monotonic()
        followed = request(gateway, "GET",
                           "/sessions/session_stream_j/events?after=0&follow=true")
        seen = list(frames(followed))
        assert time.monotonic() - sent < 8.0  # ended by the function, not cut at 8 s
        first = next(f for _, f in seen if "data" in f and "event" not in f)  # the page
        last = seen[-1][1]
        version = json.loads(first["data"])["version"]
        assert last["event"] == "reconnect" and json.loads(last["data"]) == {"after": version}
        # the function is free again, and following on from there ends the same way
        again = list(frames(request(
            gateway, "GET", f"/sessions/session_stream_j/events?after={version}&follow=true")))
        assert [f.get("event") for _, f in again if "" not in f] == ["reconnect"]
