"""Ledgers written by earlier versions must load, fold and resume in this one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant._ids import now_ms
from dormant._request import TurnInput, open_turn
from dormant._run import run_turn
from dormant.events import LEDGER_FORMAT, dump_ledger, load_ledger
from dormant.models import ScriptedModel

LEDGERS = Path(__file__).parent.parent / "fixtures" / "ledger"
EXPECTED = {
    "paused": ["invocation_start", "user", "tool_call", "tool_yield", "invocation_yield"],
    "resumed": ["invocation_start", "user", "tool_call", "tool_yield", "invocation_yield",
                "tool_input", "invocation_resume", "tool_result", "assistant", "invocation_end"],
    "message-yield": ["invocation_start", "user", "assistant", "invocation_yield", "user",
                      "invocation_resume", "assistant", "invocation_yield"],
    "timer-set": ["invocation_start", "user", "tool_call", "tool_result", "timer_set",
                  "assistant", "invocation_end"],
    "approval-paused": ["invocation_start", "user", "tool_call", "approval_requested",
                        "invocation_yield"],
    "failed": ["invocation_start", "user", "tool_call", "tool_result", "invocation_failed"],
    "retried": ["invocation_start", "user", "tool_call", "tool_result", "invocation_failed",
                "retry", "assistant", "invocation_end"],
    "approval-denied": ["invocation_start", "user", "tool_call", "approval_requested",
                        "invocation_yield", "approval_decided", "invocation_resume",
                        "tool_result", "assistant", "invocation_end"],
    "stopped": ["invocation_start", "user", "assistant", "stop_requested", "invocation_end"],
    "inbox-drained": ["invocation_start", "user", "tool_call", "approval_requested",
                      "invocation_yield", "queued", "approval_decided", "invocation_resume",
                      "tool_result", "assistant", "invocation_end", "invocation_start", "user",
                      "assistant", "invocation_end"],
    "paused-inbox": ["invocation_start", "user", "assistant", "invocation_end", "pause",
                     "queued"],
    "interrupted": ["invocation_start", "user", "tool_call", "approval_requested",
                    "invocation_yield", "interrupt", "tool_result", "invocation_end"],
    "deferred-parked": ["invocation_start", "user", "tool_call", "tool_deferred",
                        "invocation_yield"],
    "deferred-resulted": ["invocation_start", "user", "tool_call", "tool_deferred",
                          "invocation_yield", "tool_result", "invocation_resume", "assistant",
                          "invocation_end"],
    "stopped-draft": ["invocation_start", "user", "assistant", "tool_call_draft",
                      "stop_requested", "invocation_end"],
}


def _fixtures() -> list[Path]:
    return sorted(LEDGERS.glob("*.v*.json"))


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def test_there_is_a_fixture_of_every_kind_for_the_current_format() -> None:
    names = {p.name for p in _fixtures()}
    assert {f"{kind}.v{LEDGER_FORMAT}.json" for kind in EXPECTED} <= names


@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: p.name)
def test_an_old_ledger_loads_and_folds_to_its_recorded_status(path: Path) -> None:
    body = _read(path)
    events = load_ledger(body)
    kind = path.name.split(".v")[0]
    assert [e.type for e in events if e.type != "state_delta"] == EXPECTED[kind]
    session = dormant.Session.from_events("fixture", events)
    assert session.state == body["state"]
    parked = body["status"] in ("yielded_tool", "yielded_message")
    failed = events[-1].type == "invocation_failed"
    expected = body.get("session_status") or (  # recorded since the turn-control fixtures
        "failed" if failed else "awaiting_input" if parked else "active")
    assert session.status == expected
    # Lossless: every stored field comes back unchanged (later versions may add fields with
    # defaults, never drop or change one).
    for stored, dumped in zip(body["events"], dump_ledger(events)["events"], strict=True):
        assert {key: dumped.get(key) for key in stored} == stored


@pytest.mark.parametrize("path", sorted(LEDGERS.glob("paused.v*.json")), ids=lambda p: p.name)
def test_an_old_paused_ledger_still_resumes(path: Path) -> None:
    class Action(BaseModel):
        action: str

    class Decision(BaseModel):
        approved: bool

    app = dormant.App(name="later-version")
    tool = app.tool(name="request_approval", description="d", schema=Action,
                    yield_schema=Decision,
                    execute=lambda ctx: {"performed": ctx.input.approved})
    agent = app.agent(name="operator", model=ScriptedModel(["Archive deleted."]), tools=[tool])
    session = dormant.Session.from_events("fixture", load_ledger(_read(path)))
    (pending,) = session.yielded_tools
    session.input.tool(call_id=pending.call_id, input={"approved": True})

    before = len(session.new_events)
    start = open_turn(agent, session, TurnInput(), clock=now_ms)
    opening = session.new_events[before:]  # what the request room opened the turn with
    types = [event.type for event in [*opening, *run_turn(agent, session, start)]]

    assert types[0] == "invocation_resume" and types[-1] == "invocation_end"
    assert session.status == "active"
    assert session.events[-2].type == "assistant"


def test_an_unknown_future_format_is_refused_clearly() -> None:
    with pytest.raises(ValueError, match="unsupported ledger format 99"):
        load_ledger({"format": 99, "events": []})
