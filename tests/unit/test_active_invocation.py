"""A turn running anywhere can be stopped from anywhere; AG-UI runs carry POST /turns' fields;
the sessions list shows each session's first message.

- A turn still running at its first poll of the control record names itself there (one
  conditional write); ``GET /sessions/{id}`` shows it as ``activeInvocation`` and another
  client's stop for it is accepted and ends it. A turn that ends sooner writes nothing, and
  an announcement the session has moved past reads as nothing.
- ``forwardedProps.dormant`` holds ``retry``, ``resume``, ``queue``, ``inputs``, ``pause``,
  ``interrupt`` and ``ifBusy`` as ``POST /turns`` spells them; the run they start streams;
  an unknown key is a 422 naming it.
- ``preview``: the first user message, on one line, cut to 100 characters.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant._control import ControlWatch
from dormant._decide import PENDING_STOP_MS, announced
from dormant._head import PREVIEW_CHARS, preview_of
from dormant._ids import now_ms
from dormant.agui import from_run_agent_input
from dormant.errors import InputError, ServerOnly
from dormant.http import build_resolver
from dormant.models import ScriptedModel
from dormant.models._base import ModelChunk, ModelError, ModelRequest, TextDelta
from dormant.stores import MemoryStore
from dormant.tools import Signal
from dormant.types import Control, ControlRunning, ControlStop
from tests.unit.test_http_turn_control import _event

POLL = 0.05


class Wait(BaseModel):
    seconds: float


def _call(resolver: Any, method: str, path: str, body: Any = None, **query: str
          ) -> tuple[int, Any]:
    out = resolver.resolve(_event(method, path, body, query=query or None), None)
    raw = out["body"]
    return out["statusCode"], json.loads(raw) if raw.startswith(("{", "[")) else raw


class _Desk:
    """An app whose ``wait`` tool runs until its signal stops it (or ``seconds`` pass)."""

    def __init__(self) -> None:
        self.store = MemoryStore()
        self.app = dormant.App(name="desk", store=self.store)
        self.started = threading.Event()

        def wait(ctx: dormant.ToolContext) -> str:
            self.started.set()
            ctx.signal.wait(ctx.args.seconds)
            return "waited"

        self.tool = tool = self.app.tool(name="wait", description="Wait", schema=Wait,
                                         execute=wait)
        self.agent = self.app.agent(name="desk", tools=[tool], model=ScriptedModel(["Hello."] + [
            {"tool_calls": [{"name": "wait", "args": {"seconds": 30}}]}, "Done."] * 4))
        self.resolver = build_resolver(self.app, self.agent, poll_interval=POLL)

    def open(self, session: str) -> None:
        """The session, by a first quick turn (a session exists once it committed once)."""
        status, body = _call(self.resolver, "POST", "/turns", {"sessionId": session,
                                                                "message": "hello"})
        assert (status, body["status"]) == (200, "completed"), body


@pytest.fixture
def desk() -> _Desk:
    return _Desk()


def _until(check: Any, seconds: float = 10.0) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(POLL / 2)
    raise AssertionError(f"not within {seconds} s")


def _announced(desk: _Desk, session_id: str, invocation: str) -> None:
    """Wait until the control record names ``invocation`` (its turn's first scheduled read
    writes it; the head shows a turn whose tool step landed before that)."""
    def names() -> bool:
        record = desk.store.read_control(session_id)
        return record is not None and record.running is not None \
            and record.running.invocation_id == invocation

    _until(names)


def _stop_from_here(resolver: Any, session_id: str, invocation: str,
                    teller: threading.Thread) -> None:
    """Stop ``invocation``, running in ``teller``'s request: accepted (202), and the turn
    ends within 10 s."""
    status, body = _call(resolver, "POST", "/turns", {
        "sessionId": session_id, "stop": {"invocationId": invocation}})
    assert (status, body["status"]) == (202, "accepted"), body
    teller.join(10)


def test_a_turn_started_by_another_client_is_named_and_stopped_from_here(desk: _Desk) -> None:
    desk.open("s")
    answers: list[tuple[int, Any]] = []
    started = int(time.time() * 1000)
    teller = threading.Thread(target=lambda: answers.append(_call(
        desk.resolver, "POST", "/turns", {"sessionId": "s", "message": "wait for me"})))
    teller.start()
    try:
        view = _until(lambda: (v := _call(desk.resolver, "GET", "/sessions/s"))[0] == 200
                      and v[1]["activeInvocation"] and v[1])
        active = view["activeInvocation"]
        assert active["invocationId"].startswith("inv_")
        assert started - 1000 <= active["since"] <= int(time.time() * 1000)
        _announced(desk, "session_s", active["invocationId"])

        _stop_from_here(desk.resolver, "s", active["invocationId"], teller)
    finally:
        teller.join()

    [(status, ended)] = answers
    assert (status, ended["status"]) == (200, "stopped"), ended
    _, after = _call(desk.resolver, "GET", "/sessions/s")
    assert after["activeInvocation"] is None
    # The record still names the turn: the head that moved on is what makes it stale.
    record = desk.store.read_control("session_s")
    assert record is not None and record.running is not None
    session = desk.app.sessions.load("session_s", turns=None)
    assert session is not None and announced(session) is None


def test_a_sessions_first_turn_is_shown_and_stopped_from_another_client_while_it_runs(
        desk: _Desk) -> None:
    """A session exists to readers from its first request: its first turn shows in
    ``GET /sessions/{id}`` and the list while it runs (here its tool waits, its call landed
    before it ran: version 1), and a stop by the invocation id read there ends it. (Before
    anything landed, its announcement alone names it: see the tests below.)"""
    desk.agent = desk.app.agent(name="first", tools=[desk.tool], model=ScriptedModel([
        {"tool_calls": [{"name": "wait", "args": {"seconds": 30}}]}, "Done."]))
    resolver = build_resolver(desk.app, desk.agent, poll_interval=POLL)
    answers: list[tuple[int, Any]] = []
    teller = threading.Thread(target=lambda: answers.append(_call(
        resolver, "POST", "/turns", {"sessionId": "new", "message": "wait for me"},
        )))
    teller.start()
    try:
        assert desk.started.wait(10)
        status, view = _call(resolver, "GET", "/sessions/new")
        assert status == 200 and view["version"] == 1 and view["status"] == "active", view
        active = view["activeInvocation"]["invocationId"]
        status, listed = _call(resolver, "GET", "/sessions")
        assert status == 200 and [(s["sessionId"], s["version"], s["status"])
                                  for s in listed["sessions"]] == [("session_new", 1, "active")]
        status, detailed = _call(resolver, "GET", "/sessions", detail="true")
        [line] = detailed["sessions"]
        assert (line["sessionId"], line["version"], line["status"]) == ("session_new", 1,
                                                                        "active"), line

        _stop_from_here(resolver, "new", active, teller)
    finally:
        teller.join()
    [(status, ended)] = answers
    assert (status, ended["status"]) == (200, "stopped"), ended


def test_a_first_turn_whose_process_died_is_gone_one_heartbeat_later() -> None:
    """A first turn announces itself with a heartbeat: once that ran out, its process died
    before it wrote anything, and the session is neither listed nor found."""
    store = MemoryStore()
    now = [1_800_000_000_000]
    app = dormant.App(name="died", store=store, clock=lambda: now[0])
    agent = app.agent(name="died", model=ScriptedModel(["Hello."]))
    resolver = build_resolver(app, agent)
    running = ControlRunning(invocation_id="inv_dead", since=now[0], until=now[0] + 10_000,
                             principal="ann")  # (the caller ``_call`` sends as)
    assert store.write_control("session_d", Control(rev=1, running=running), head_version=0)
    assert _call(resolver, "GET", "/sessions/d")[0] == 200
    assert [s["sessionId"] for s in _call(resolver, "GET", "/sessions")[1]["sessions"]] == [
        "session_d"]

    now[0] += 10_000
    assert _call(resolver, "GET", "/sessions/d")[0] == 404
    assert _call(resolver, "GET", "/sessions")[1]["sessions"] == []
    assert _call(resolver, "GET", "/sessions", detail="true")[1]["sessions"] == []


def test_a_first_turn_that_writes_nothing_takes_its_announcement_back() -> None:
    """A session's first turn abandoned before anything was committed was never there: the
    session reads 404 again, and a pause for it is refused."""
    store = MemoryStore()
    app = dormant.App(name="gone", store=store)
    agent = app.agent(name="gone", model=ScriptedModel(["one two three four five"]))
    stream = app.handler.turn(agent=agent, poll_interval=POLL)(
        {"session_id": "gone", "input": {"message": "hi"}})
    events = iter(stream)
    next(events)
    named = store.read_control("session_gone")
    assert named is not None and named.running is not None  # it announced itself

    stream.abort()
    assert [e for e in events if e.type == "invocation_end"] == []

    assert app.sessions.get("gone") is None
    control = store.read_control("session_gone")
    assert control is not None and control.running is None
    resolver = build_resolver(app, agent)
    assert _call(resolver, "GET", "/sessions/gone")[0] == 404
    status, body = _call(resolver, "POST", "/turns", {"sessionId": "gone", "pause": True})
    assert (status, body["code"]) == (404, "session_not_found")


def test_a_turn_that_ends_within_its_first_poll_writes_no_control_record() -> None:
    """But a session's first turn, which names itself as it starts: until it commits, the
    record is all a reader can find of the session."""
    store = MemoryStore()
    app = dormant.App(name="quick", store=store)
    agent = app.agent(name="quick", model=ScriptedModel(["Hello.", "Again."]))
    resolver = build_resolver(app, agent)  # the default interval: a second
    status, body = _call(resolver, "POST", "/turns", {"sessionId": "q", "message": "hi"})
    first = store.read_control("session_q")
    assert first is not None and first.running is not None and first.running.version == 0

    status, body = _call(resolver, "POST", "/turns", {"sessionId": "q", "message": "again"})

    assert (status, body["status"]) == (200, "completed")
    assert store.read_control("session_q") == first
    assert _call(resolver, "GET", "/sessions/q")[1]["activeInvocation"] is None


def test_a_stop_that_matches_nothing_yet_says_so_and_shows_until_it_matches() -> None:
    """On a free session a turn that has not announced itself yet may be running any
    invocation: a stop naming one the session is not known to run is kept (202 `accepted`),
    its answer says it matched nothing yet, and the session shows it as ``pendingStop``. An
    invocation the session ran and ended is refused (409)."""
    store = MemoryStore()
    app = dormant.App(name="idle", store=store)
    agent = app.agent(name="idle", model=ScriptedModel(["Hello.", "Again."]))
    resolver = build_resolver(app, agent, poll_interval=0)
    status, done = _call(resolver, "POST", "/turns", {"sessionId": "i", "message": "hi"})
    assert (status, done["status"]) == (200, "completed")
    assert _call(resolver, "GET", "/sessions/i")[1].get("pendingStop") is None

    status, body = _call(resolver, "POST", "/turns", {
        "sessionId": "i", "stop": {"invocationId": "inv_not_yet"}})
    assert (status, body["status"]) == (202, "accepted"), body
    assert "inv_not_yet" in body["warning"] and "waits" in body["warning"], body
    view = _call(resolver, "GET", "/sessions/i")[1]
    assert view["pendingStop"]["invocationId"] == "inv_not_yet", view

    ran = app.sessions.get("i")
    assert ran is not None
    [ended] = {e.invocation_id for e in ran.events if e.type == "invocation_end"}
    status, body = _call(resolver, "POST", "/turns", {
        "sessionId": "i", "stop": {"invocationId": ended}})
    assert (status, body["code"]) == (409, "not_running"), body


def test_a_stop_that_matched_nothing_for_a_minute_is_stale() -> None:
    """A pending stop waits a minute at most: then the session no longer shows it, and a
    turn of its invocation that starts later is not stopped by it; one still within the
    minute stops that turn as soon as it reads the record."""
    store = MemoryStore()
    app = dormant.App(name="stale", store=store)
    agent = app.agent(name="stale", model=ScriptedModel(["Hello."]))
    resolver = build_resolver(app, agent, poll_interval=0)
    assert _call(resolver, "POST", "/turns", {"sessionId": "o", "message": "hi"})[0] == 200
    now = now_ms()
    old = ControlStop(invocation_id="inv_late", rev=1, at=now - PENDING_STOP_MS - 1)
    assert store.write_control("session_o", Control(rev=1, stop=old), head_version=1)
    assert _call(resolver, "GET", "/sessions/o")[1].get("pendingStop") is None

    fresh = old.model_copy(update={"at": now})
    assert store.write_control("session_o", Control(rev=2, stop=fresh), head_version=1)
    assert _call(resolver, "GET", "/sessions/o")[1]["pendingStop"]["invocationId"] == "inv_late"
    for held, stops in ((old, False), (fresh, True)):
        signal = Signal()
        watch = ControlWatch(store, "session_o", lambda: "inv_late", signal, interval=0,
                             control_rev=0)
        watch.apply(Control(rev=1, stop=held))
        assert signal.stopped is stops


def test_a_steer_sent_after_the_announcement_is_kept_beside_it(desk: _Desk) -> None:
    """The announcement is one more revision of the record: a steer written after it (at the
    next revision) keeps it, and the turn still stops by the id it announced."""
    desk.open("t")
    answers: list[tuple[int, Any]] = []
    teller = threading.Thread(target=lambda: answers.append(_call(
        desk.resolver, "POST", "/turns", {"sessionId": "t", "message": "wait"})))
    teller.start()
    try:
        view = _until(lambda: (v := _call(desk.resolver, "GET", "/sessions/t"))[1].get(
            "activeInvocation") and v[1])
        invocation = view["activeInvocation"]["invocationId"]
        _announced(desk, "session_t", invocation)
        status, _ = _call(desk.resolver, "POST", "/turns", {"sessionId": "t", "steer": {
            "text": "hurry", "invocationId": invocation, "id": "steer-1"}})
        assert status == 202
        record = desk.store.read_control("session_t")
        assert record is not None and record.running is not None
        assert record.running.invocation_id == invocation
        assert [steer.text for steer in record.steers] == ["hurry"]
        assert _call(desk.resolver, "GET", "/sessions/t")[1]["activeInvocation"][
            "invocationId"] == invocation
        status, _ = _call(desk.resolver, "POST", "/turns", {
            "sessionId": "t", "stop": {"invocationId": invocation}})
        assert status == 202
        teller.join(10)
    finally:
        teller.join()
    assert answers[0][1]["status"] == "stopped", answers


# --- forwardedProps.dormant ---------------------------------------------------------------------


def _run(**dormant_props: Any) -> dict[str, Any]:
    return {"threadId": "a", "runId": "r", "messages": [], "tools": [], "context": [],
            "state": {}, "forwardedProps": {"dormant": dormant_props}}


def test_forwarded_props_carry_the_turn_fields_as_post_turns_spells_them() -> None:
    request = from_run_agent_input(_run(
        positions=True, retry={"retryId": "retry-1"}, resume=True, pause=False,
        interrupt={"owner": "call_1"}, queue=[{"op": "send_now", "id": "msg_1"}],
        inputs=[{"inputId": "size", "value": 3}], ifBusy="interrupt"))

    given = request.input
    assert given.retry is not None and given.retry.retry_id == "retry-1"
    assert (given.resume, given.pause, given.if_busy) == (True, False, "interrupt")
    assert given.interrupt is not None and given.interrupt.owner == "call_1"
    assert given.queue is not None and given.queue[0].op == "send_now"
    assert given.inputs is not None and given.inputs[0].input_id == "size"
    assert request.public is True


@pytest.mark.parametrize(("props", "named"), [
    ({"consoleProbe": True}, "forwardedProps.dormant.consoleProbe"),
    ({"stop": {"invocationId": "inv_1"}}, "forwardedProps.dormant.stop"),
    ({"retry": {"retryId": 5}}, "forwardedProps.dormant.retry.retryId"),
])
def test_what_forwarded_props_may_not_say_is_refused_by_name(props: dict[str, Any],
                                                             named: str) -> None:
    with pytest.raises(InputError, match=named.replace(".", r"\.")):
        from_run_agent_input(_run(**props))
    with pytest.raises(ServerOnly):
        from_run_agent_input(_run(events=[{"name": "x", "data": {}}]))


class _FailsAfterATool:
    """Calls ``note``, fails its next call (so the failure has a tool result to keep), then
    answers."""

    def __init__(self) -> None:
        self.calls = 0

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[ModelChunk]:
        self.calls += 1
        if self.calls == 1:
            return ScriptedModel([{"tool_calls": [{"name": "note", "args": {"seconds": 0}}]}]
                                 ).stream(request, signal=signal)
        if self.calls == 2:
            raise ModelError("the model provider is unavailable (a test outage)")
        return iter([TextDelta("Recovered.")])


def test_a_retry_over_agui_streams_the_rerun_and_an_unknown_key_is_a_422() -> None:
    app = dormant.App(name="retry", store=MemoryStore())
    note = app.tool(name="note", description="Note", schema=Wait, execute=lambda ctx: "noted")
    agent = app.agent(name="retry", model=_FailsAfterATool(), tools=[note])
    resolver = build_resolver(app, agent)
    status, failed = _call(resolver, "POST", "/turns", {"sessionId": "f", "message": "go"})
    assert (status, failed["status"]) == (200, "error"), failed  # committed as failed
    assert _call(resolver, "GET", "/sessions/f")[1]["status"] == "failed"

    probe = _run(consoleProbe=True)
    status, refused = _call(resolver, "POST", "/agui", probe)
    assert status == 422 and "consoleProbe" in json.dumps(refused), refused

    body = _run(retry={"retryId": "retry-1"}, positions=True) | {"threadId": "f"}
    out = resolver.resolve(_event("POST", "/agui", body), None)
    assert out["statusCode"] == 200, out
    events = [json.loads(line.removeprefix("data: ")) for line in out["body"].splitlines()
              if line.startswith("data: ")]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED", kinds
    assert "".join(e.get("delta", "") for e in events
                   if e["type"] == "TEXT_MESSAGE_CONTENT") == "Recovered."
    assert all("seq" in e["rawEvent"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    _, view = _call(resolver, "GET", "/sessions/f", events="true")
    assert view["status"] == "active"
    assert [e["retry_id"] for e in view["events"] if e["type"] == "retry"] == ["retry-1"]


# --- preview -------------------------------------------------------------------------------------


def test_the_preview_is_the_first_message_on_one_line_and_cut() -> None:
    assert preview_of("  book\nme   in ") == "book me in"
    long = "word " * 60
    cut = preview_of(long)
    assert len(cut) == PREVIEW_CHARS and cut.endswith("…") and cut.startswith("word word")


def test_sessions_show_their_first_message_not_a_later_one() -> None:
    app = dormant.App(name="preview", store=MemoryStore())
    agent = app.agent(name="preview", model=ScriptedModel(["One.", "Two."]))
    resolver = build_resolver(app, agent)
    _call(resolver, "POST", "/turns", {"sessionId": "p", "message": "first\nquestion"})
    _call(resolver, "POST", "/turns", {"sessionId": "p", "message": "second"})
    _call(resolver, "POST", "/turns", {"sessionId": "empty", "pause": True})

    _, listed = _call(resolver, "GET", "/sessions", detail="true")
    lines = {line["sessionId"]: line for line in listed["sessions"]}
    assert lines["session_p"]["preview"] == "first question"
    assert "preview" not in lines.get("session_empty", {})
    assert _call(resolver, "GET", "/sessions/p")[1]["preview"] == "first question"
    _, plain = _call(resolver, "GET", "/sessions")
    assert all("preview" not in line for line in plain["sessions"])


def test_a_turn_that_announced_itself_still_claims_a_compaction_later_in_it() -> None:
    """The announcement moves the control record on; the turn's own session follows it, so a
    compaction the same turn claims after it (its second model step, once a long tool result
    put it over budget) is written at the right revision and lands with the turn."""
    store = MemoryStore()
    app = dormant.App(name="announce-compact", store=store)
    summaries: list[int] = []

    def summarize(messages: list[Any]) -> str:
        summaries.append(len(messages))
        return "They talked."

    def slow(ctx: dormant.ToolContext) -> str:
        time.sleep(ctx.args.seconds)  # past the first poll: the turn announces itself
        return "y" * 2000

    tool = app.tool(name="slow", description="Slow", schema=Wait, execute=slow)
    agent = app.agent(name="a", tools=[tool], model=ScriptedModel(
        ["one", "two", {"tool_calls": [{"name": "slow", "args": {"seconds": 6 * POLL}}]},
         "Done."]), context=[app.context.history(compact=dormant.Compaction(
             max_tokens=300, keep_last=1, summarize=summarize))])
    turn = app.handler.rest(agent=agent, poll_interval=POLL)
    for message in ("first", "second"):
        assert turn({"session_id": "c", "input": {"message": message}}).status == "completed"

    ended = turn({"session_id": "c", "input": {"message": "run the slow one"}})

    assert (ended.status, ended.commit_status) == ("completed", "committed")
    record = store.read_control("session_c")
    assert record is not None and record.running is not None  # it did announce itself
    assert record.compaction is not None and summaries == [4]  # ...and then claimed
    session = app.sessions.load("session_c", turns=None)
    assert session is not None and session.head.compactions == 1
