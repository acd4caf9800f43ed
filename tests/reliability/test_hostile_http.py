"""Hostile HTTP input: every client mistake is a 4xx with a stable code and writes nothing; no
failure on the server side shows its exception text to the client.

Each case goes through the API resolver as API Gateway delivers it (REST proxy events, with
``isBase64Encoded`` bodies where API Gateway would send them) and, where the transport matters
(raw bytes, framing), through ``dormant dev`` over a real socket. Refusals are checked against
the session's version and ledger: nothing written.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.event_handler.exceptions import BadRequestError
from pydantic import BaseModel

import dormant
from dormant._devserver import DevServer as InProcessServer
from dormant.http import build_resolver
from dormant.models import ModelError, ScriptedModel
from dormant.stores import MemoryStore
from tests._http import raw_request as _raw
from tests.e2e.conftest import DevServer

#: What a provider's error text can hold: a key fragment, an organisation id, a trace.
SECRET = ("Error code: 401 - Incorrect API key provided: sk-proj-a1b2c3. You are in "
          "organization org-7Hq2SecretOrg. Traceback (most recent call last): File \"x.py\"")
SECRET_BITS = ("sk-proj-a1b2c3", "org-7Hq2SecretOrg", "Traceback")
REQUEST_ID = "c0ffee00-1234-4abc-9def-000000000001"

VALID_AGUI = {"runId": "r1", "state": {}, "tools": [], "context": [], "forwardedProps": {}}


class Question(BaseModel):
    q: str


class Answer(BaseModel):
    answer: str


class Stay(BaseModel):
    ref: str


class Failing:
    """Answers from a script, then fails every later call with ``error``."""

    def __init__(self, script: list[Any], error: Exception) -> None:
        self.scripted = ScriptedModel(script)
        self.left = len(script)
        self.error = error

    def stream(self, request: Any, *, signal: Any) -> Iterator[Any]:
        if self.left == 0:
            raise self.error
        self.left -= 1
        yield from self.scripted.stream(request, signal=signal)


def _api(model: Any = None) -> tuple[dormant.App, Any]:
    app = dormant.App(name="hostile", store=MemoryStore())
    ask = app.tool(name="ask_guest", description="Ask", schema=Question, yield_schema=Answer)

    def lookup(ctx: dormant.ToolContext) -> dict[str, Any]:
        return {"nights": 3}

    stay = app.tool(name="lookup_stay", description="Look up", schema=Stay, execute=lookup)
    model = model or ScriptedModel(
        [{"tool_calls": [{"name": "ask_guest", "args": {"q": "Which night?"}}]}, "Booked."] * 20)
    agent = app.agent(name="concierge", model=model, tools=[ask, stay])
    return app, build_resolver(app, agent)


def _event(method: str, path: str, body: str | bytes | None = None, *,
           content_type: str | None = "application/json", base64_body: bool = False,
           query: dict[str, str] | None = None, principal: str = "alice") -> dict[str, Any]:
    if isinstance(body, bytes) or (base64_body and body is not None):
        raw = body if isinstance(body, bytes) else body.encode()
        text: str | None = base64.b64encode(raw).decode()
        base64_body = True
    else:
        text = body
    headers = {"Content-Type": content_type} if content_type else {}
    return {
        "resource": path, "path": path, "httpMethod": method,
        "headers": headers, "multiValueHeaders": {k: [v] for k, v in headers.items()},
        "queryStringParameters": query, "multiValueQueryStringParameters":
            {k: [v] for k, v in query.items()} if query else None,
        "pathParameters": None, "stageVariables": None,
        "requestContext": {"resourcePath": path, "httpMethod": method, "path": path,
                           "stage": "test", "requestId": REQUEST_ID,
                           "authorizer": {"principalId": principal}, "identity": {}},
        "body": text, "isBase64Encoded": base64_body,
    }


def _call(resolver: Any, event: dict[str, Any]) -> tuple[int, Any, dict[str, Any]]:
    out = resolver.resolve(event, None)
    headers = {k.lower(): (v[0] if isinstance(v, list) else v)
               for k, v in {**(out.get("headers") or {}),
                            **(out.get("multiValueHeaders") or {})}.items()}
    body = out["body"]
    parsed = json.loads(body) if body.startswith(("{", "[")) else body
    return out["statusCode"], parsed, headers


def _post(resolver: Any, path: str, body: Any, **kwargs: Any) -> tuple[int, Any, dict[str, Any]]:
    return _call(resolver, _event("POST", path, json.dumps(body), **kwargs))


def _ledger(app: dormant.App, session_id: str) -> tuple[int, list[str]]:
    session = app.sessions.load(session_id, turns=None)
    assert session is not None
    return session.version, [e.id for e in session.events]


def _parked(app: dormant.App, resolver: Any, session_id: str = "s1") -> tuple[int, list[str]]:
    status, body, _ = _post(resolver, "/turns", {"sessionId": session_id, "message": "book"})
    assert (status, body["status"]) == (200, "yielded_tool"), body
    return _ledger(app, session_id)


def _agui(thread_id: str, text: str = "hello") -> dict[str, Any]:
    return {**VALID_AGUI, "threadId": thread_id,
            "messages": [{"id": "m-1", "role": "user", "content": text}]}


def _sse(body: str) -> list[dict[str, Any]]:
    return [json.loads(line[len("data: "):]) for line in body.splitlines()
            if line.startswith("data: ")]


# --- bodies that are not text, or not JSON a store can hold ----------------------------------

NOT_UTF8 = [
    pytest.param(b'{"sessionId": "s1", "message": "caf\xe9"}', id="latin-1"),
    pytest.param(b'{"sessionId": "s1", "message": "\xff\xfe"}', id="stray-bytes"),
    pytest.param(b'{"sessionId": "s1", "message": "\xed\xa0\x80"}', id="encoded-surrogate"),
    pytest.param(b'{"sessionId": "s1", "message": "\xc0\xaf"}', id="overlong"),
]


@pytest.mark.parametrize("raw", NOT_UTF8)
@pytest.mark.parametrize("route", ["/turns", "/agui"])
def test_a_base64_body_that_is_not_utf8_is_400_invalid_body_and_writes_nothing(
        route: str, raw: bytes) -> None:
    app, resolver = _api()
    before = _parked(app, resolver)
    if route == "/agui":
        raw = raw.replace(b'"sessionId"', b'"threadId"').replace(
            b'"message": ', b'"runId": "r", "messages": [], "x": ')

    status, body, _ = _call(resolver, _event("POST", route, raw))

    assert (status, body["code"]) == (400, "invalid_body"), body
    assert "UTF-8" in body["message"]
    assert _ledger(app, "s1") == before


@pytest.mark.parametrize("route", ["/turns", "/agui"])
def test_a_text_body_holding_lone_surrogates_is_400_invalid_body(route: str) -> None:
    app, resolver = _api()
    before = _parked(app, resolver)

    status, body, _ = _call(resolver, _event(
        "POST", route, '{"sessionId": "s1", "message": "half \udcff a character"}'))

    assert (status, body["code"]) == (400, "invalid_body"), body
    assert _ledger(app, "s1") == before


def test_a_body_marked_base64_that_is_not_base64_is_400_invalid_body() -> None:
    app, resolver = _api()
    event = _event("POST", "/turns", '{"message": "hi"}')
    event["isBase64Encoded"] = True

    status, body, _ = _call(resolver, event)

    assert (status, body["code"]) == (400, "invalid_body")
    assert app.sessions.list() == []


JSON_NO_STORE_CAN_HOLD = [
    pytest.param('{"sessionId": "s1", "message": "\\ud800 alone"}', "surrogate",
                 id="lone-\\u-escape"),
    pytest.param('{"sessionId": "s1", "message": "hi", "state": {"n": NaN}}', "NaN", id="NaN"),
    pytest.param('{"sessionId": "s1", "message": "hi", "state": {"n": 1e999}}', "range",
                 id="float-out-of-range"),
    pytest.param('{"sessionId": "s1", "message": "hi", "state": {"n": ' + "9" * 5000 + "}}",
                 "digits", id="5000-digit-integer"),
    pytest.param('{"sessionId": "s1", "message": "hi", "state": {"n": ' + "[" * 200
                 + "]" * 200 + "}}", "nested", id="nested-200-deep"),
    pytest.param("[" * 100_000 + "]" * 100_000, "nested", id="nested-100000-deep"),
]


@pytest.mark.parametrize(("text", "reason"), JSON_NO_STORE_CAN_HOLD)
@pytest.mark.parametrize("route", ["/turns", "/agui"])
def test_json_that_no_store_can_hold_is_400_invalid_json_and_writes_nothing(
        route: str, text: str, reason: str) -> None:
    app, resolver = _api()
    before = _parked(app, resolver)

    status, body, _ = _call(resolver, _event("POST", route, text))

    assert (status, body["code"]) == (400, "invalid_json"), body
    assert reason in body["message"]
    assert _ledger(app, "s1") == before


# --- no exception text in any public answer --------------------------------------------------

SERVER_FAILURES = [
    pytest.param(ModelError(SECRET), 502, "model_error", id="model-provider-error"),
    pytest.param(RuntimeError(SECRET), 500, "run_error", id="a-bug"),
]


@pytest.mark.parametrize(("error", "status", "code"), SERVER_FAILURES)
def test_a_failed_turn_answers_a_code_and_request_id_never_the_exception_text(
        error: Exception, status: int, code: str, caplog: pytest.LogCaptureFixture) -> None:
    app, resolver = _api(Failing([], error))

    with caplog.at_level(logging.INFO, logger="dormant"):
        answer, body, _ = _post(resolver, "/turns", {"sessionId": "s1", "message": "hi"})

    assert (answer, body["code"], body["requestId"]) == (status, code, REQUEST_ID)
    assert REQUEST_ID in body["message"]
    assert not any(bit in json.dumps(body) for bit in SECRET_BITS)
    # The detail is in the log, with the request id that ties it to the answer.
    assert any(REQUEST_ID in r.getMessage() and "org-7Hq2SecretOrg" in r.getMessage()
               for r in caplog.records)
    assert app.sessions.load("s1", turns=0) is None  # failed before any tool ran: nothing written


@pytest.mark.parametrize(("error", "status", "code"), SERVER_FAILURES)
def test_a_failed_agui_run_ends_in_run_error_with_a_code_never_the_exception_text(
        error: Exception, status: int, code: str, caplog: pytest.LogCaptureFixture) -> None:
    _, resolver = _api(Failing([], error))

    with caplog.at_level(logging.INFO, logger="dormant"):
        answer, body, _ = _post(resolver, "/agui", _agui("s1"))

    assert answer == 200  # the stream had started: the failure is its RUN_ERROR
    events = _sse(body)
    assert [e["type"] for e in events][-1] == "RUN_ERROR"
    assert events[-1]["code"] == code
    assert REQUEST_ID in events[-1]["message"]
    assert not any(bit in body for bit in SECRET_BITS)
    assert any(REQUEST_ID in r.getMessage() and "org-7Hq2SecretOrg" in r.getMessage()
               for r in caplog.records)


def test_a_failure_after_a_tool_ran_keeps_the_progress_and_hides_the_text_everywhere() -> None:
    lookup = {"tool_calls": [{"name": "lookup_stay", "args": {"ref": "BK-1"}}]}
    _, resolver = _api(Failing([lookup], ModelError(SECRET)))

    status, body, _ = _post(resolver, "/turns", {"sessionId": "s1", "message": "how long?"})
    _, shown, _ = _call(resolver, _event("GET", "/sessions/s1", query={"events": "true"}))
    _, feed, _ = _call(resolver, _event("GET", "/sessions/s1/events", query={"after": "0"}))

    assert (status, body["status"], body["code"]) == (200, "error", "model_error")
    assert body["requestId"] == REQUEST_ID and REQUEST_ID in body["error"]
    failed = [e for e in shown["events"] if e["type"] == "invocation_failed"]
    assert [e["code"] for e in failed] == ["model_error"]  # the progress was kept
    assert [e["type"] for e in feed["events"]] == [e["type"] for e in shown["events"]]
    for answer in (body, shown, feed):
        assert not any(bit in json.dumps(answer) for bit in SECRET_BITS), answer


def test_an_unexpected_error_under_a_route_is_500_internal_error_without_its_text(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    app, resolver = _api()

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(SECRET)

    monkeypatch.setattr(app.sessions, "load", broken)
    with caplog.at_level(logging.INFO, logger="dormant"):
        status, body, _ = _call(resolver, _event("GET", "/sessions/s1"))

    assert (status, body["code"], body["requestId"]) == (500, "internal_error", REQUEST_ID)
    assert not any(bit in json.dumps(body) for bit in SECRET_BITS)
    assert "org-7Hq2SecretOrg" in caplog.text


def test_a_client_error_powertools_raises_under_a_route_stays_a_4xx(
        monkeypatch: pytest.MonkeyPatch) -> None:
    app, resolver = _api()

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise BadRequestError("the request is malformed")

    monkeypatch.setattr(app.sessions, "load", refuse)
    status, body, _ = _call(resolver, _event("GET", "/sessions/s1"))

    assert (status, body["code"]) == (400, "invalid_input")


def test_client_mistakes_keep_their_helpful_messages() -> None:
    app, resolver = _api()
    _parked(app, resolver)

    bad_id = _post(resolver, "/turns", {"sessionId": "no spaces", "message": "hi"})
    busy = _post(resolver, "/turns", {"sessionId": "s1", "message": "again", "ifBusy": "reject"})
    wrong = _post(resolver, "/turns", {"sessionId": "s1", "message": 5})

    assert (bad_id[0], bad_id[1]["code"]) == (400, "invalid_input")
    assert "no spaces" in bad_id[1]["message"]
    assert (busy[0], busy[1]["code"]) == (409, "awaiting_input")
    assert "ask_guest" in busy[1]["message"]
    assert (wrong[0], wrong[1]["code"]) == (422, "validation_error")
    assert wrong[1]["fields"][0]["field"] == "message"
    for _, body, _ in (bad_id, busy, wrong):
        assert "requestId" not in body


# --- AG-UI refuses what REST refuses, before its stream starts -------------------------------

BAD_THREAD_IDS = ["no spaces", "", "x" * 121, "session_", "semi;colon", "caf\u00e9",
                  "line\nbreak", "trailing\n"]


@pytest.mark.parametrize("thread_id", BAD_THREAD_IDS)
def test_agui_with_a_bad_thread_id_is_the_400_rest_gives_and_no_stream(thread_id: str) -> None:
    app, resolver = _api()

    agui = _post(resolver, "/agui", _agui(thread_id))
    rest = _post(resolver, "/turns", {"sessionId": thread_id, "message": "hello"})

    assert agui[0] == rest[0] == 400
    assert agui[1]["code"] == rest[1]["code"] == "invalid_input"
    assert agui[2]["content-type"] == "application/json"
    assert app.sessions.list() == []


@pytest.mark.parametrize(("who", "state", "status", "code"), [
    ("mallory", None, 404, "session_not_found"),
    ("alice", {"isAdmin": True}, 422, "server_only"),
])
def test_agui_refused_once_the_session_is_read_gives_the_json_error_rest_gives(
        who: str, state: dict[str, Any] | None, status: int, code: str) -> None:
    app, resolver = _api()
    before = _parked(app, resolver)
    agui = {**_agui("s1"), **({"state": state} if state else {})}
    turn = {"sessionId": "s1", "message": "hello", **({"state": state} if state else {})}

    streamed = _call(resolver, _event("POST", "/agui", json.dumps(agui), principal=who))
    rest = _call(resolver, _event("POST", "/turns", json.dumps(turn), principal=who))

    assert (streamed[0], streamed[1]["code"]) == (rest[0], rest[1]["code"]) == (status, code)
    assert streamed[2]["content-type"] == "application/json"
    assert _ledger(app, "s1") == before


def test_agui_with_a_body_that_is_not_a_run_agent_input_is_422_and_no_stream() -> None:
    app, resolver = _api()

    status, body, headers = _post(resolver, "/agui", {"threadId": "t1"})

    assert (status, body["code"]) == (422, "validation_error")
    assert {f["field"] for f in body["fields"]} >= {"runId", "messages"}
    assert headers["content-type"] == "application/json"
    assert app.sessions.list() == []


# --- methods and media types -----------------------------------------------------------------

WRONG_METHODS = [
    ("PUT", "/turns", "POST"), ("PATCH", "/turns", "POST"), ("GET", "/turns", "POST"),
    ("DELETE", "/turns", "POST"), ("GET", "/agui", "POST"), ("PUT", "/agui", "POST"),
    ("PUT", "/sessions/s1", "DELETE, GET"), ("POST", "/sessions/s1", "DELETE, GET"),
    ("POST", "/sessions", "GET"), ("DELETE", "/sessions/s1/events", "GET"),
]


@pytest.mark.parametrize(("method", "path", "allow"), WRONG_METHODS)
def test_a_known_path_with_another_method_is_405_with_allow_and_writes_nothing(
        method: str, path: str, allow: str) -> None:
    app, resolver = _api()
    before = _parked(app, resolver)

    status, body, headers = _call(resolver, _event(
        method, path, json.dumps({"sessionId": "s1", "message": "hi"})))

    assert (status, body["code"], headers["allow"]) == (405, "method_not_allowed", allow)
    assert _ledger(app, "s1") == before


@pytest.mark.parametrize("path", ["/turn", "/sessions/s1/ledger", "/nope", "/turns/s1"])
def test_an_unknown_path_stays_404_not_found(path: str) -> None:
    _, resolver = _api()

    status, body, headers = _call(resolver, _event("PUT", path, "{}"))

    assert (status, body["code"]) == (404, "not_found")
    assert "allow" not in headers


NOT_JSON = ["application/x-www-form-urlencoded", "text/plain", "multipart/form-data; boundary=x",
            "application/xml", "text/json", "application/json-patch+json"]


@pytest.mark.parametrize("content_type", NOT_JSON)
@pytest.mark.parametrize("route", ["/turns", "/agui"])
def test_a_body_in_another_media_type_than_json_is_415_and_writes_nothing(
        route: str, content_type: str) -> None:
    app, resolver = _api()
    before = _parked(app, resolver)
    body = {"sessionId": "s1", "message": "hi"} if route == "/turns" else _agui("s1")

    status, answer, _ = _post(resolver, route, body, content_type=content_type)

    assert (status, answer["code"]) == (415, "unsupported_media_type"), answer
    assert _ledger(app, "s1") == before


@pytest.mark.parametrize("content_type", [None, "application/json; charset=utf-8",
                                          "Application/JSON"])
def test_a_json_body_without_a_content_type_or_with_parameters_is_read_as_json(
        content_type: str | None) -> None:
    _, resolver = _api()

    status, body, _ = _post(resolver, "/turns", {"sessionId": "s2", "message": "hi"},
                            content_type=content_type)

    assert (status, body["status"]) == (200, "yielded_tool")


# --- the same over a real socket: dormant dev ------------------------------------------------


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    server = DevServer(Path(tmp_path_factory.mktemp("hostile")) / "dormant.db").start()
    try:
        yield server
    finally:
        server.kill()




def _dev_version(dev: DevServer, session_id: str) -> int:
    status, body, _ = _raw(dev.url, "GET", f"/sessions/{session_id}")
    assert status == 200, body
    version: int = body["version"]
    return version


@pytest.mark.parametrize("route", ["/turns", "/agui"])
def test_dev_answers_raw_bytes_that_are_not_utf8_with_400_invalid_body(dev: DevServer,
                                                                        route: str) -> None:
    session = f"raw-{route[1:]}"
    status, body, _ = _raw(dev.url, "POST", "/turns",
                           json.dumps({"sessionId": session, "message": "book me in"}).encode())
    assert status == 200, body
    before = _dev_version(dev, session)

    status, body, _ = _raw(dev.url, "POST", route,
                           b'{"sessionId": "%s", "message": "\xff"}' % session.encode())

    assert (status, body["code"]) == (400, "invalid_body")
    assert _dev_version(dev, session) == before


def test_dev_answers_405_415_and_broken_framing_with_json_codes(dev: DevServer) -> None:
    put = _raw(dev.url, "PUT", "/turns", b"{}")
    head = _raw(dev.url, "HEAD", "/turns")
    form = _raw(dev.url, "POST", "/turns", b"message=hi",
                {"Content-Type": "application/x-www-form-urlencoded"})
    text = _raw(dev.url, "POST", "/agui", b"hi", {"Content-Type": "text/plain"})

    assert (put[0], put[1]["code"], put[2]["allow"]) == (405, "method_not_allowed", "POST")
    assert (head[0], head[2]["allow"]) == (405, "POST")
    assert (form[0], form[1]["code"]) == (415, "unsupported_media_type")
    assert (text[0], text[1]["code"]) == (415, "unsupported_media_type")


@pytest.mark.parametrize("length", ["-1", "ten", "1e3"])
def test_dev_answers_a_content_length_that_is_not_a_size_with_400(dev: DevServer,
                                                                  length: str) -> None:
    host, port = dev.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.putrequest("POST", "/turns")
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Content-Length", length)
        connection.endheaders()
        response = connection.getresponse()
        body = json.loads(response.read())
    finally:
        connection.close()

    assert (response.status, body["code"]) == (400, "invalid_body")


def test_dev_names_its_own_request_id_in_a_server_failure(caplog: pytest.LogCaptureFixture
                                                          ) -> None:
    _, resolver = _api(Failing([], ModelError(SECRET)))
    server = InProcessServer(("127.0.0.1", 0), resolver)
    import threading

    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with caplog.at_level(logging.INFO, logger="dormant"):
            status, body, _ = _raw(server.url, "POST", "/turns",
                                   json.dumps({"sessionId": "s1", "message": "hi"}).encode())
    finally:
        server.shutdown()
        server.server_close()

    assert (status, body["code"]) == (502, "model_error")
    assert re.fullmatch(r"[0-9a-f-]{36}", body["requestId"])
    assert body["requestId"] in body["message"]
    assert not any(bit in json.dumps(body) for bit in SECRET_BITS)
    assert any(body["requestId"] in r.getMessage() and "org-7Hq2SecretOrg" in r.getMessage()
               for r in caplog.records)
