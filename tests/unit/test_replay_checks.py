"""Checks of a replay and a set of them evaluated: the built-in checks, a team's own, the LLM
judge, and the report's table and JUnit XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dormant.models.scripted import ScriptedModel
from dormant.samples import bookings
from dormant.testing import (
    Replay,
    evaluate,
    judge,
    model,
    no_new_approvals,
    no_orphans,
    replay,
    run_test,
    same_questions,
    same_status,
    same_tools,
    similar_text,
    user,
)
from dormant.testing._checks import run_checks
from tests.unit.test_replay import ASK, LOOKUP, UPGRADE, bookings_session


def _changed(replies: list[Any]) -> Any:
    return replace(bookings.build()[1], model=ScriptedModel(replies))


def _replayed(replies: list[Any]) -> Replay:
    return replay(bookings_session(), _changed(replies))


SAME = [{"tool_calls": [UPGRADE]}, "Upgraded to a suite.", {"tool_calls": [ASK]},
        "Moved the 2nd."]
LOOKS_FIRST = [{"tool_calls": [LOOKUP]}, "BK-1 is three nights; which room?",
               "Moved a night.", ]


def test_the_built_in_checks_pass_an_unchanged_replay() -> None:
    replayed = _replayed(SAME)
    checks = [no_orphans(), same_tools(), no_new_approvals(), same_questions(), same_status(),
              similar_text(1.0)]

    results = run_checks(replayed, checks)

    assert [(r.name, r.passed, r.reasons) for r in results] == [
        ("no_orphans", True, []), ("same_tools", True, []), ("no_new_approvals", True, []),
        ("same_questions", True, []), ("same_status", True, []),
        ("similar_text(1)", True, [])]


def test_the_built_in_checks_say_which_turn_failed_and_why() -> None:
    replayed = _replayed(LOOKS_FIRST)

    results = {r.name: r.reasons for r in run_checks(replayed, [
        no_orphans(), same_tools(), same_questions(), same_status(), similar_text(0.9)])}

    assert results["same_tools"] == [
        "turn 1 (message 'upgrade BK-1 to a suite'): tools upgrade_room({\"ref\": \"BK-1\", "
        "\"room\": \"suite\"}) -> lookup_stay({\"ref\": \"BK-1\"})",
        "turn 3 (message 'and move one night'): tools ask_guest({\"q\": \"Which night?\"}) "
        "-> none"]
    assert results["no_orphans"] == [
        "approve upgrade_room: the replay never made the recording's call 1 of upgrade_room",
        "answer ask_guest: the replay never made the recording's call 1 of ask_guest"]
    assert results["same_questions"] == [
        "turn 3 (message 'and move one night'): questions ask_guest -> none"]
    assert results["same_status"] == [
        "turn 1 (message 'upgrade BK-1 to a suite'): status yielded_tool -> completed",
        "turn 3 (message 'and move one night'): status yielded_tool -> completed"]
    assert len(results["similar_text(0.9)"]) == 2


def test_a_new_approval_fails_no_new_approvals() -> None:
    _, agent = bookings.build()
    recorded = run_test(agent, [user("what about BK-1?"), model(tool_calls=[LOOKUP]),
                                model("Three nights.")]).session
    upgrades = replace(agent, model=ScriptedModel([{"tool_calls": [UPGRADE]}]))

    [result] = run_checks(replay(recorded, upgrades), [no_new_approvals()])

    assert result.reasons == [
        "turn 1 (message 'what about BK-1?'): new approval of upgrade_room"]


def test_a_teams_own_checks_are_plain_functions() -> None:
    replayed = _replayed(SAME)

    def never_upgrades(run: Replay) -> str | None:
        upgraded = [e for e in run if e.type == "tool_call" and e.name == "upgrade_room"]
        return f"upgraded {len(upgraded)} times" if upgraded else None

    def fine(run: Replay) -> bool:
        return True

    def broken(run: Replay) -> None:
        raise KeyError("oops")

    results = run_checks(replayed, [never_upgrades, fine, broken, lambda run: False])

    assert [(r.name, r.passed, r.reasons) for r in results] == [
        ("never_upgrades", False, ["upgraded 1 times"]), ("fine", True, []),
        ("broken", False, ["the check raised KeyError: 'oops'"]),
        ("<lambda>", False, ["failed"])]
    with pytest.raises(ValueError, match="0 to 1"):
        similar_text(1.5)


def test_the_judge_reads_both_texts_against_the_criteria() -> None:
    replayed = _replayed([{"tool_calls": [UPGRADE]}, "Done.", {"tool_calls": [ASK]},
                          "Moved the 2nd."])
    verdicts = ScriptedModel(["FAIL: it does not say which room", "PASS: same answer"])

    [result] = run_checks(replayed, [judge(verdicts, criteria="Say what was changed.")])

    assert result.reasons == [
        "turn 2 (approve upgrade_room): judged FAIL: it does not say which room"]
    asked = verdicts.requests[0]
    assert "PASS or FAIL" in asked.system[0]
    [question] = asked.messages
    assert "Criteria: Say what was changed." in question.text
    assert "RECORDED: Upgraded to a suite." in question.text and "NEW: Done." in question.text
    unsure = ScriptedModel(["Maybe?", "PASS"])
    [result] = run_checks(replayed, [judge(unsure)])
    assert result.reasons == ["turn 2 (approve upgrade_room): the judge answered neither "
                              "PASS nor FAIL: 'Maybe?'"]


def test_evaluate_tables_each_case_and_writes_junit(tmp_path: Path) -> None:
    cases = [bookings_session("session_one"), bookings_session("session_two")]
    agent = _changed(SAME + LOOKS_FIRST)  # the first case replays the same, the second not
    lines: list[str] = []

    report = evaluate(cases, agent, progress=lines.append)

    assert not report.passed and [c.name for c in report.failed] == ["session_two"]
    one, two = report.cases
    assert one.passed and (one.turns, one.tools_changed, one.orphans) == (4, 0, 0)
    assert (two.turns, two.tools_changed, two.orphans, two.questions_changed) == (4, 4, 2, 1)
    assert lines[0].startswith("[1/2] session_one: pass (")
    assert lines[1].startswith("[2/2] session_two: FAIL (no_orphans, same_tools, "
                               "same_questions, same_status) (")
    table = report.table()
    assert table.splitlines()[0].split() == [
        "case", "turns", "tools", "changed", "new", "approvals", "questions", "changed",
        "orphans", "text", "score", "result"]
    assert "2 cases: 1 passed, 1 failed" in table
    assert "FAIL session_two\n  no_orphans: approve upgrade_room:" in table

    report.junit(tmp_path / "eval.xml")
    suite = ET.parse(tmp_path / "eval.xml").getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "1", "0")
    passed, failed = suite.findall("testcase")
    assert passed.get("name") == "session_one" and passed.find("failure") is None
    failure = failed.find("failure")
    assert failure is not None and failure.get("message") == (
        "no_orphans, same_tools, same_questions, same_status")
    assert "same_tools: turn 1" in (failure.text or "")
    assert "turn 1 (message 'upgrade BK-1 to a suite'): changed" in (
        failed.findtext("system-out") or "")


def test_a_case_whose_replay_raises_is_an_error_not_a_crash(tmp_path: Path) -> None:
    report = evaluate([{"format": 99, "events": []}], bookings.build()[1])

    [case] = report.cases
    assert not case.passed and case.error is not None and "unsupported ledger format" in case.error
    report.junit(tmp_path / "eval.xml")
    suite = ET.parse(tmp_path / "eval.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("errors") == "1"
    assert "ERROR" in report.table()
