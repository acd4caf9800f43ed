"""``dormant sessions export`` and the eval-set file: sessions from SQLite and from DynamoDB
(moto in-process) written whole and read back, redaction of texts and state only, and the
mistakes each is one ``dormant:`` line for."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import dormant
from dormant._evalset import EvalSetError
from dormant._ids import now_ms
from dormant.cli import main
from dormant.events import StateDelta, ToolCall, ToolResult, dump_events, load_ledger
from dormant.models import ScriptedModel
from dormant.stores import DynamoDBStore, SqliteStore
from dormant.stores._base import Store
from dormant.testing import EvalSet, export_sessions, read_set, write_set
from dormant.tools import ToolContext
from tests._moto import aws_env, in_process_aws, shared_moto_server

TABLE = "dormant-export"
LEDGERS = Path(__file__).parents[1] / "fixtures" / "ledger"
REDACTED = "[redacted]"


class Note(BaseModel):
    text: str


def _note(ctx: ToolContext) -> dict[str, Any]:
    ctx.state["note"] = {"text": ctx.args.text, "tags": ["room", ctx.args.text]}
    return {"saved": ctx.args.text}


def record(store: Store) -> dormant.App:
    """Two sessions on ``store``: alice's, where a tool wrote the state, and bob's."""
    app = dormant.App(name="export", store=store)
    note = app.tool(name="note", description="Remember", schema=Note, execute=_note)
    model = ScriptedModel([
        {"tool_calls": [{"name": "note", "args": {"text": "room 12"}, "id": "call_1"}]},
        "Noted room 12.",
        "Hello bob.",
    ])
    agent = app.agent(name="concierge", model=model, tools=[note])
    rest = app.handler.rest(agent=agent)
    rest({"session_id": "alice-1", "principal": "alice",
          "input": {"message": "remember room 12"}})
    rest({"session_id": "bob-1", "principal": "bob", "input": {"message": "hi"}})
    return app


def assert_round_trip(store: Store, path: Path) -> None:
    cases = {case.session_id: case for case in read_set(path)}
    assert set(cases) == {"session_alice-1", "session_bob-1"}
    for sid, case in cases.items():
        stored = store.load(sid, turns=None)
        assert stored is not None
        assert dump_events(case.events()) == dump_events(stored.events)
        assert case.state == stored.head.state
        assert case.version == stored.head.version
        assert case.updated_at == stored.head.updated_at
        assert case.agent == "concierge" and case.status == "active"
        assert case.name == sid
    assert cases["session_alice-1"].principal == "alice"
    assert cases["session_bob-1"].principal == "bob"
    assert cases["session_alice-1"].state == {"note": {"text": "room 12",
                                                       "tags": ["room", "room 12"]}}


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "dormant.db"
    store = SqliteStore(path)
    record(store)
    store.close()
    yield path


@pytest.fixture
def dynamodb(monkeypatch: pytest.MonkeyPatch) -> Iterator[DynamoDBStore]:
    aws_env(monkeypatch)
    with in_process_aws():
        store = DynamoDBStore(TABLE)
        store.ensure_table()
        record(store)
        yield store


def test_export_from_sqlite_round_trips(db: Path, tmp_path: Path) -> None:
    store = SqliteStore(db)
    evalset = export_sessions(store, source="sqlite:test")
    assert [case.session_id for case in evalset.sessions] == [  # newest first
        summary.session_id for summary in store.list()]
    out = tmp_path / "set.json"
    write_set(evalset, out)
    written = json.loads(out.read_text())
    assert written["format"] == "dormant.sessions/1" and written["source"] == "sqlite:test"
    assert written["sessions"][0]["ledger"]["format"] == 1
    assert_round_trip(store, out)


def test_export_from_dynamodb_round_trips(dynamodb: DynamoDBStore, tmp_path: Path) -> None:
    out = tmp_path / "set.json"
    write_set(export_sessions(dynamodb, ["alice-1", "session_bob-1"]), out)
    assert_round_trip(dynamodb, out)


def test_cli_exports_a_dynamodb_table(dynamodb: DynamoDBStore, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "set.json"
    assert main(["sessions", "export", "--table", TABLE, "--out", str(out)]) == 0
    assert "exported 2 sessions" in capsys.readouterr().err
    assert json.loads(out.read_text())["source"] == f"dynamodb:{TABLE}"
    assert_round_trip(dynamodb, out)


def test_cli_exports_a_table_at_an_endpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    aws_env(monkeypatch)  # no AWS_ENDPOINT_URL: only --endpoint-url reaches the server
    server = shared_moto_server()
    table = "dormant-export-endpoint"
    store = DynamoDBStore(table, server.client("dynamodb"))
    store.ensure_table()
    record(store)
    out = tmp_path / "set.json"
    try:
        assert main(["sessions", "export", "--table", table, "--region", "us-east-1",
                     "--endpoint-url", server.url, "--out", str(out)]) == 0
        assert "exported 2 sessions" in capsys.readouterr().err
        assert_round_trip(store, out)
    finally:
        server.client("dynamodb").delete_table(TableName=table)


def test_cli_exports_sqlite_to_a_file(db: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "set.json"
    assert main(["sessions", "export", "--db", str(db), "--out", str(out)]) == 0
    store = SqliteStore(db)
    events = sum(len(store.load(sid, turns=None).events)  # type: ignore[union-attr]
                 for sid in ("session_alice-1", "session_bob-1"))
    assert capsys.readouterr().err == (
        f"dormant: exported 2 sessions ({events} events) to {out}\n")
    assert json.loads(out.read_text())["source"] == f"sqlite:{db.resolve()}"
    assert_round_trip(store, out)


def test_cli_exports_the_sessions_named_to_stdout(db: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sessions", "export", "alice-1", "--db", str(db)]) == 0
    printed = capsys.readouterr()
    evalset = EvalSet.model_validate_json(printed.out)
    assert [case.session_id for case in evalset.sessions] == ["session_alice-1"]
    assert "exported 1 session (" in printed.err and "standard output" in printed.err


def test_principal_limit_and_since_choose_the_sessions(db: Path) -> None:
    store = SqliteStore(db)
    assert [c.session_id for c in export_sessions(store, principal="alice").sessions] == [
        "session_alice-1"]
    assert [c.session_id for c in export_sessions(store, limit=1).sessions] == [
        store.list(limit=1)[0].session_id]
    assert len(export_sessions(store, since=now_ms() - 60_000).sessions) == 2
    assert export_sessions(store, since=now_ms() + 60_000).sessions == []


def test_cli_since_keeps_recent_sessions(db: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "set.json"
    assert main(["sessions", "export", "--db", str(db), "--since", "1h",
                 "--principal", "bob", "--out", str(out)]) == 0
    assert [c.session_id for c in read_set(out)] == ["session_bob-1"]


def test_a_listed_session_deleted_before_its_load_is_left_out(
        db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SqliteStore(db)
    load = store.load
    monkeypatch.setattr(store, "load", lambda sid, **kw: None if sid == "session_bob-1"
                        else load(sid, **kw))
    assert [c.session_id for c in export_sessions(store).sessions] == ["session_alice-1"]


def test_a_fork_is_exported_with_its_lineage(db: Path) -> None:
    store = SqliteStore(db)
    app = dormant.App(name="export", store=store)
    app.sessions.fork("alice-1", new_session_id="alice-fork")
    [case] = export_sessions(store, ["alice-fork"]).sessions
    source = store.load("session_alice-1", turns=None)
    assert source is not None
    assert dump_events(case.events()) == dump_events(source.events)
    assert case.state == source.head.state and case.principal == "alice"


def scrub(text: str) -> str:
    return REDACTED


def test_redaction_rewrites_texts_and_state_only(db: Path) -> None:
    store = SqliteStore(db)
    before = dump_events(store.load("session_alice-1", turns=None).events)  # type: ignore[union-attr]
    [case] = export_sessions(store, ["alice-1"], redact=scrub).sessions
    assert case.state == {"note": {"text": REDACTED, "tags": [REDACTED, REDACTED]}}
    events = case.events()
    texts = [e.text for e in events if e.type in ("user", "assistant")]  # type: ignore[union-attr]
    assert texts == [REDACTED, REDACTED]
    [delta] = [e for e in events if isinstance(e, StateDelta)]
    assert "room 12" not in json.dumps(delta.patch) and REDACTED in json.dumps(delta.patch)
    [call] = [e for e in events if isinstance(e, ToolCall)]
    [result] = [e for e in events if isinstance(e, ToolResult)]
    assert call.args == {"text": "room 12"}  # tool arguments and results are kept
    assert result.result == {"saved": "room 12"}
    after = store.load("session_alice-1", turns=None)
    assert after is not None and dump_events(after.events) == before  # the store untouched
    assert after.head.state["note"]["text"] == "room 12"


def test_redaction_rewrites_the_reasons_people_and_models_gave() -> None:
    app = dormant.App(name="reasons")
    note = app.tool(name="note", description="Remember", schema=Note, execute=_note)
    agent = app.agent(name="desk", tools=[note], tool_approval={"note": "user-approval"},
                      handoffs=["billing"], model=ScriptedModel([
                          {"tool_calls": [{"name": "note", "args": {"text": "room 12"}}]},
                          {"tool_calls": [{"name": "transfer_to_billing",
                                           "args": {"reason": "Ana's invoice"}}]},
                          "Billing here."]))
    app.agent(name="billing", model=ScriptedModel(["Billing here."]))
    rest = app.handler.rest(agent=agent)
    [approval] = rest({"session_id": "r-1", "input": {"message": "hi"}}).wire()[
        "pendingApprovals"]
    rest({"session_id": "r-1", "input": {"approvals": [{
        "approvalId": approval["approvalId"], "approved": False, "reason": "Ana said no"}]}})

    [case] = export_sessions(app.store, ["r-1"], redact=scrub).sessions

    reasons = [e.reason for e in case.events() if e.type in ("approval_decided", "handoff")]
    assert reasons == [REDACTED, REDACTED]  # (the calls' arguments and results are kept)


def test_cli_redacts_with_the_function_named(db: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    module = tmp_path / "redactor.py"
    module.write_text("def scrub(text):\n    return text.replace('room 12', 'ROOM')\n")
    out = tmp_path / "set.json"
    assert main(["sessions", "export", "alice-1", "--db", str(db), "--out", str(out),
                 "--redact", f"{module}:scrub"]) == 0
    [case] = read_set(out)
    assert case.state["note"]["text"] == "ROOM"
    assert [e.text for e in case.events() if e.type == "user"] == [  # type: ignore[union-attr]
        "remember ROOM"]


def test_an_unknown_session_is_named(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(EvalSetError, match="session session_nope not found"):
        export_sessions(SqliteStore(db), ["nope"])
    assert main(["sessions", "export", "alice-1", "nope", "--db", str(db)]) == 2
    printed = capsys.readouterr()
    assert printed.out == ""
    assert printed.err.startswith("dormant: session session_nope not found in sqlite:")


@pytest.mark.parametrize(("argv", "said"), [
    (["--since", "7x"], "'7x' is not a duration"),
    (["--since", "d"], "'d' is not a duration"),
    (["--limit", "0"], "0 must be at least 1"),
    (["--redact", "scrub"], "--redact scrub: name a function"),
    (["--redact", "os:sep"], "--redact os:sep is a str, not a function"),
    (["--redact", "no_such_module_xyz:scrub"], "no_such_module_xyz"),
    (["bad id!"], "invalid session id 'bad id!'"),
    (["--endpoint-url", "http://localhost:1"], "--region and --endpoint-url go with --table"),
    (["alice-1", "--since", "7d", "--limit", "3"],
     "--limit, --since choose the newest sessions when no ID is given"),
])
def test_mistakes_are_one_line(db: Path, capsys: pytest.CaptureFixture[str],
                               argv: list[str], said: str) -> None:
    try:
        code = main(["sessions", "export", "--db", str(db), *argv])
    except SystemExit as exit_:  # argparse's own errors
        code = int(exit_.code or 0)
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("dormant: ") and said in err and err.count("\n") == 1


def test_a_missing_database_is_not_created(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "none.db"
    assert main(["sessions", "export", "--db", str(missing)]) == 2
    assert capsys.readouterr().err.startswith(f"dormant: no database at {missing}")
    assert not missing.exists()


def test_read_set_reads_the_golden_ledgers() -> None:
    cases = read_set(LEDGERS)
    assert [case.name for case in cases] == sorted(p.stem for p in LEDGERS.glob("*.json"))
    assert len(cases) == 15
    for case in cases:
        ledger = json.loads((LEDGERS / f"{case.name}.json").read_text())
        assert dump_events(case.events()) == dump_events(load_ledger(ledger))
        assert case.ledger == ledger  # kept as written


def test_read_set_names_duplicates_by_file(db: Path, tmp_path: Path) -> None:
    evalset = export_sessions(SqliteStore(db), ["alice-1"])
    folder = tmp_path / "sets"
    folder.mkdir()
    write_set(evalset, folder / "monday.json")
    write_set(evalset, folder / "tuesday.json")
    assert [case.name for case in read_set(folder)] == [
        "session_alice-1", "tuesday/session_alice-1"]


@pytest.mark.parametrize(("content", "said"), [
    ("{not json", "is not JSON"),
    ('{"format": 1, "events": [{"type": "no_such_event"}]}', "is not a valid eval set"),
    ('{"format": "dormant.sessions/9", "sessions": []}', "is not an eval set"),
    ('{"format": "dormant.sessions/1", "sessions": [{}]}', "is not a valid eval set"),
    ("[]", "is not an eval set"),
])
def test_read_set_names_a_malformed_file(tmp_path: Path, content: str, said: str) -> None:
    bad = tmp_path / "broken.json"
    bad.write_text(content)
    with pytest.raises(EvalSetError, match=said) as raised:
        read_set(tmp_path)
    assert str(bad) in str(raised.value)


def test_read_set_refuses_a_path_with_nothing_to_read(tmp_path: Path) -> None:
    with pytest.raises(EvalSetError, match="no eval set at"):
        read_set(tmp_path / "absent.json")
    with pytest.raises(EvalSetError, match="holds no"):
        read_set(tmp_path)


def test_a_table_that_cannot_be_read_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    aws_env(monkeypatch)
    with in_process_aws():
        assert main(["sessions", "export", "--table", "no-such-table"]) == 2
        said = capsys.readouterr().err
        assert said.startswith("dormant: cannot read the sessions in dynamodb:no-such-table: ")
        assert "ResourceNotFoundException" in said and said.count("\n") == 1
        monkeypatch.delenv("AWS_DEFAULT_REGION")
        monkeypatch.delenv("AWS_REGION", raising=False)
        assert main(["sessions", "export", "--table", "no-such-table"]) == 2
        said = capsys.readouterr().err
        assert said.startswith("dormant: cannot read the sessions in dynamodb:no-such-table: ")
        assert "region" in said and said.count("\n") == 1
