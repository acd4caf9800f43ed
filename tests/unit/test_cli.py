"""``dormant sessions list|show``: the inspector, in-process."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import BaseModel

import dormant
from dormant.cli import main
from dormant.models import ScriptedModel
from dormant.stores import SqliteStore


class Question(BaseModel):
    q: str


class Answer(BaseModel):
    answer: str


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A SQLite file with one session paused on ``ask_guest`` and one finished."""
    path = tmp_path / "inspect.db"
    store = SqliteStore(path)
    app = dormant.App(name="cli", store=store)
    ask = app.tool(name="ask_guest", description="Ask", schema=Question, yield_schema=Answer)
    model = ScriptedModel([{"tool_calls": [{"name": "ask_guest", "args": {"q": "Which night?"},
                                            "id": "call_1"}]}, "Hello there."])
    agent = app.agent(name="concierge", model=model, tools=[ask])
    rest = app.handler.rest(agent=agent)
    rest({"session_id": "paused", "input": {"message": "book me in"}})
    rest({"session_id": "done", "input": {"message": "hi"}})
    store.close()
    return path


def test_list_shows_each_session_with_its_status(db: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sessions", "list", "--db", str(db)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["SESSION", "VERSION", "STATUS", "PRINCIPAL", "UPDATED"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert "awaiting input" in rows["session_paused"]
    assert "active" in rows["session_done"]


def test_show_tells_what_is_pending_and_how_to_answer(db: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sessions", "show", "paused", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "version 1 · awaiting input" in out
    assert "user: book me in" in out
    assert "ask_guest yielded: waits for input on {\"q\": \"Which night?\"}  [call_1]" in out
    assert "ask_guest [call_1] waits for input" in out
    assert "expects input {answer: string}" in out  # from the ledger: the tool's yield_schema
    assert '"callId": "call_1"' in out


def test_show_json_is_the_whole_ledger(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sessions", "show", "session_done", "--db", str(db), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["sessionId"] == "session_done" and shown["status"] == "active"
    assert [e["type"] for e in shown["events"]] == [
        "invocation_start", "user", "assistant", "invocation_end"]


def test_show_says_what_the_turns_used_and_cost(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    store = SqliteStore(tmp_path / "costs.db")
    app = dormant.App(name="cli", store=store,
                      prices={"scripted": {"input": 2, "output": 8, "cached": 0.5}})
    used = {"input_tokens": 1200, "output_tokens": 300, "cached_tokens": 1000,
            "reasoning_tokens": 100}
    agent = app.agent(name="concierge", model=ScriptedModel([
        {"text": "Hello.", "usage": used},
        {"text": "Bye.", "usage": {"input_tokens": 1500, "output_tokens": 40}}]))
    rest = app.handler.rest(agent=agent)
    rest({"session_id": "s1", "input": {"message": "hi"}})
    rest({"session_id": "s1", "input": {"message": "bye"}})
    store.close()

    assert main(["sessions", "show", "s1", "--db", str(tmp_path / "costs.db")]) == 0
    out = capsys.readouterr().out.splitlines()

    # 200 input at 2, 1,000 cached at 0.5, 300 output at 8; then 1,500 at 2 and 40 at 8
    assert out[3] == ("  usage: 2 turns · tokens 2,700 in (1,000 cached) / 340 out "
                      "(100 reasoning) · cost 0.00662")
    ends = [line.split("■ run ended (completed)")[1] for line in out if "■ run ended" in line]
    assert [re.sub(r"^ · \d+ ms", "", end) for end in ends] == [
        " · tokens 1,200 in / 300 out · cost 0.0033",
        " · tokens 1,500 in / 40 out · cost 0.00332"]
    assert main(["sessions", "show", "s1", "--db", str(tmp_path / "costs.db"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["usage"] == {
        "input_tokens": 2700, "output_tokens": 340, "cached_tokens": 1000,
        "reasoning_tokens": 100, "cost": pytest.approx(0.00662), "turns": 2}


def test_list_json(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sessions", "list", "--db", str(db), "--json"]) == 0
    assert {row["sessionId"] for row in json.loads(capsys.readouterr().out)} == {
        "session_paused", "session_done"}


def test_an_unknown_session_is_exit_1(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sessions", "show", "nobody", "--db", str(db)]) == 1
    assert "session_nobody not found" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["sessions", "list", "--db", "/nonexistent/dormant.db"],
    ["sessions", "show", "bad id!", "--db", "/nonexistent/dormant.db"],
    ["dev", "--app", "/nonexistent/app.py", "--db", "/tmp/unused.db"],
])
def test_command_line_mistakes_are_exit_2_with_a_message(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith("dormant: ")


def test_show_lists_pending_timers_and_what_became_of_the_others(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "timers.db"
    store = SqliteStore(path)
    app = dormant.App(name="cli", store=store)
    session = app.sessions.create("timed")
    session.schedule("reminder:call_1", at=datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC),
                     message="Reminder: stretch")
    session.schedule("answer", at=datetime(2031, 1, 1, tzinfo=UTC),
                     tool_input={"call_id": "call_9", "input": {"answer": "Friday"}})
    session.schedule("nudge", delay="5m", message="never sent")
    session.schedule("due", at=datetime(2020, 1, 1, tzinfo=UTC), message="Reminder: now")
    session.cancel_schedule("nudge")
    assert app.sessions.commit(session).ok
    [due] = [t for t in session.timers if t.name == "due"]
    agent = app.agent(name="a", hooks=[dormant.Hook(before_agent=lambda ctx: "ok")])
    assert app.handler.wake(agent=agent)(due).status == "completed"
    store.close()

    assert main(["sessions", "show", "timed", "--db", str(path)]) == 0
    out = capsys.readouterr().out

    assert ("⏱ timer reminder:call_1 set for 2030-01-02 03:04:05 UTC: message "
            "\"Reminder: stretch\"") in out
    assert "⏱ timer nudge cancelled" in out
    assert "⏱ timer due fired (due 2020-01-01 00:00:00 UTC)" in out
    assert "user: Reminder: now" in out
    timers = out.split("  timers:\n", 1)[1].splitlines()
    assert timers[:3] == [
        "    reminder:call_1 fires 2030-01-02 03:04:05 UTC: message \"Reminder: stretch\"",
        "    answer fires 2031-01-01 00:00:00 UTC: input for [call_9] {\"answer\": \"Friday\"}",
        ""]
    assert main(["sessions", "show", "timed", "--db", str(path), "--json"]) == 0
    assert [t["name"] for t in json.loads(capsys.readouterr().out)["timers"]] == [
        "reminder:call_1", "answer"]
