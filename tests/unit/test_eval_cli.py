"""``dormant eval SET --app APP``: a set exported from SQLite replayed against the app's
agent, the table, the exit status, JUnit XML, and each option's mistakes."""

from __future__ import annotations

import logging
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from dormant.cli import main
from dormant.samples.bookings import build
from dormant.stores.sqlite import SqliteStore

CHANGED = str(Path(__file__).with_name("eval_app.py"))
LEDGERS = Path(__file__).parents[1] / "fixtures" / "ledger"


@pytest.fixture
def exported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """Two Bookings sessions (the demo model) recorded in SQLite and exported: ana asks how
    long her stay is, ben upgrades his room once a person approves."""
    store = SqliteStore(str(tmp_path / "dormant.db"))
    app, agent = build(store=store)
    turn = app.handler.rest(agent=agent)
    turn({"session_id": "ana", "input": {"message": "how long is my stay BK-1042?"}})
    parked = turn({"session_id": "ben", "input": {"message": "upgrade BK-7 to a suite"}}).wire()
    [approval] = parked["pendingApprovals"]
    turn({"session_id": "ben", "input": {"approvals": [
        {"approvalId": approval["approvalId"], "approved": True}]}})
    store.close()
    out = tmp_path / "last-week.json"
    assert main(["sessions", "export", "--db", str(tmp_path / "dormant.db"), "--since", "7d",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    return out


def test_an_unchanged_agent_passes_every_case(exported: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", str(exported)]) == 0

    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["case", "turns"]
    assert sorted(line.split()[0] for line in lines[1:3]) == ["session_ana", "session_ben"]
    assert all(line.split()[-1] == "pass" for line in lines[1:3])
    assert lines[3] == "2 cases: 2 passed, 0 failed"
    assert "dormant eval: [1/2] session_" in err and "dormant eval: [2/2] session_" in err


def test_a_changed_agent_fails_its_case_exits_1_and_writes_junit(
        exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junit = tmp_path / "eval.xml"

    code = main(["eval", str(exported), "--app", CHANGED, "--junit", str(junit), "--quiet"])

    out, err = capsys.readouterr()
    assert code == 1
    rows = {line.split()[0]: line for line in out.splitlines()[1:3]}
    assert rows["session_ben"].split()[-1] == "pass"
    ana = rows["session_ana"]
    assert "lookup_stay" in ana and "FAIL (no_new_approvals, same_status)" in ana
    assert "2 cases: 1 passed, 1 failed" in out
    assert ("FAIL session_ana\n  no_new_approvals: turn 1 (message 'how long is my stay "
            "BK-1042?'): new approval of lookup_stay") in out
    assert err == f"dormant eval: JUnit XML written to {junit}\n"
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("failures")) == ("2", "1")
    failures = {case.get("name"): case.find("failure") for case in suite.findall("testcase")}
    assert failures["session_ben"] is None
    failure = failures["session_ana"]
    assert failure is not None and failure.get("message") == "no_new_approvals, same_status"


def test_a_teams_own_checks_replace_the_defaults(exported: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", str(exported), "--app", CHANGED, "--checks", f"{CHANGED}:checks",
                 "--quiet"]) == 0
    assert "2 cases: 2 passed, 0 failed" in capsys.readouterr().out


def test_recorded_replies_and_a_text_floor(exported: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", str(exported), "--model", "recorded", "--min-text-score", "1",
                 "--quiet"]) == 0
    assert "2 cases: 2 passed, 0 failed" in capsys.readouterr().out


def test_the_golden_ledgers_are_a_set(capsys: pytest.CaptureFixture[str]) -> None:
    """The project's golden ledgers, replayed against the Bookings sample they were not
    recorded with: each case is reported, and the command fails."""
    assert main(["eval", str(LEDGERS), "--quiet", "--model", "recorded"]) == 1
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[-1] for line in out.splitlines()[1:16]}
    assert len(rows) == 15 and "15 cases: 4 passed, 11 failed" in out
    # the sample has request_approval (with its recorded results), not close_ticket
    assert {name for name, verdict in rows.items() if verdict == "pass"} == {
        "paused.v1", "paused-inbox.v1", "resumed.v1", "timer-set.v1"}
    assert ("FAIL retried.v1\n  no_orphans: retry: the replay's turn did not fail: there is "
            "nothing to retry") in out  # (its first turn failed before writing anything)
    assert ("FAIL approval-denied.v1\n  no_orphans: deny close_ticket: the replay's call 1 of "
            "close_ticket does not wait for an approval") in out  # (an unknown tool here)


@pytest.mark.parametrize(("argv", "said"), [
    (["eval", "no-such-set.json"], "no-such-set.json"),
    (["eval", "{set}", "--min-text-score", "2"], "2 is not a score (0 to 1)"),
    (["eval", "{set}", "--tools", "fake"], "invalid choice: 'fake'"),
    (["eval", "{set}", "--app", "no_such_module_here"], "no_such_module_here"),
    (["eval", "{set}", "--checks", "no_such_module_here:checks"], "no_such_module_here"),
    (["eval", "{empty}"], "empty holds no *.json eval set or ledger files"),
])
def test_each_mistake_is_one_line_and_exit_2(argv: list[str], said: str, exported: Path,
                                              tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    argv = [a.format(set=exported, empty=empty) for a in argv]

    try:
        code = main(argv)
    except SystemExit as exited:  # (argparse's own mistakes end the parse)
        code = int(exited.code or 0)

    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("dormant: ") and said in err and len(err.strip().splitlines()) == 1


def test_a_judge_model_reads_each_turns_texts(exported: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    verdicts = tmp_path / "verdicts.json"
    verdicts.write_text('["PASS: the same answer", "FAIL: it no longer says how long"]')

    code = main(["eval", str(exported), "--judge", f"scripted:{verdicts}", "--quiet"])

    out = capsys.readouterr().out
    assert code == 1 and "2 cases: 1 passed, 1 failed" in out
    assert ("FAIL session_ana\n  judge: turn 1 (message 'how long is my stay BK-1042?'): "
            "judged FAIL: it no longer says how long") in out


def test_the_replays_log_quiet_only_while_eval_runs(exported: Path) -> None:
    """A failed turn in a replay is a row of the table, not a log line; the process's
    logging is as it was afterwards (a caller's own logs included)."""
    logger = logging.getLogger("dormant")
    before = logger.level

    assert main(["eval", str(exported), "--quiet"]) == 0

    assert logger.level == before
