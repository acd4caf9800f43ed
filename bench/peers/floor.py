"""The floor: a hand-rolled ledger, no framework. A session is a list of pydantic messages and
a version; a turn loads the list, calls the model (which reads the whole history), and appends
the new messages under a version check. SQLite and DynamoDB keep one row per turn, keyed by
(session, version): the key is the version check.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Literal

# Run as a script in a framework's own venv: its folder comes off the path (it shares names
# with the packages it measures), the repository's root goes last (for bench.peers._common).
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE] + [str(_HERE.parents[1])]

from bench.peers._common import (  # noqa: E402
    CONTENTION_MODEL_SECONDS,
    MESSAGE,
    REPLY,
    Figures,
    contention_outcomes,
    dynamodb_checkpoints,
    median_us,
    read_history,
    run,
    samples_us,
    seeded_once,
    spread,
    timed,
)


def _types() -> Any:
    from pydantic import BaseModel, TypeAdapter

    class Message(BaseModel):
        role: Literal["user", "assistant", "tool"]
        text: str = ""
        tool: str | None = None
        call_id: str | None = None

    return Message, TypeAdapter(list[Message])


class Conflict(Exception):
    """Another turn committed this version first."""


class Ledger:
    """``{session: (version, [Message])}``; ``commit`` refuses a stale version."""

    def __init__(self) -> None:
        self.Message, _ = _types()
        self.rows: dict[str, tuple[int, list[Any]]] = {}
        self.pending: dict[str, str] = {}

    def load(self, sid: str) -> tuple[int, list[Any]]:
        return self.rows.get(sid, (0, []))

    def commit(self, sid: str, version: int, new: list[Any]) -> None:
        current, messages = self.rows.get(sid, (0, []))
        if current != version:
            raise Conflict(sid)
        messages.extend(new)
        self.rows[sid] = (version + 1, messages)


def _model(history: list[Any]) -> Any:
    read_history([m.text for m in history])


def _turn(ledger: Ledger, sid: str = "bench", text: str = MESSAGE) -> None:
    version, history = ledger.load(sid)
    user = ledger.Message(role="user", text=text)
    _model([*history, user])
    ledger.commit(sid, version, [user, ledger.Message(role="assistant", text=REPLY)])


def _seeded(history: int) -> Ledger:
    ledger = Ledger()
    for n in range(history):
        _turn(ledger, text=f"{n}: {MESSAGE}")
    return ledger


def text(params: dict[str, Any]) -> Figures:
    def sample(turns: int) -> float:
        ledger = _seeded(1)
        return timed(lambda: _turn(ledger), turns)

    return {"us_per_turn": median_us(sample, params["turns"], params["repeats"])}


def tool(params: dict[str, Any]) -> Figures:
    def once(ledger: Ledger) -> None:
        version, history = ledger.load("bench")
        user = ledger.Message(role="user", text=MESSAGE)
        _model([*history, user])
        call = ledger.Message(role="assistant", tool="lookup_stay", call_id="c1")
        result = ledger.Message(role="tool", call_id="c1",
                                text=json.dumps({"ref": "B-1", "nights": 3}))
        _model([*history, user, call, result])
        ledger.commit("bench", version,
                      [user, call, result, ledger.Message(role="assistant", text=REPLY)])

    def sample(turns: int) -> float:
        ledger = _seeded(1)
        return timed(lambda: once(ledger), turns)

    return {"us_per_turn": median_us(sample, params["turns"], params["repeats"])}


def pause(params: dict[str, Any]) -> Figures:
    def once(ledger: Ledger) -> None:
        version, history = ledger.load("bench")
        user = ledger.Message(role="user", text="Book me in")
        _model([*history, user])
        call = ledger.Message(role="assistant", tool="ask_guest", call_id="c1")
        ledger.commit("bench", version, [user, call])
        ledger.pending["bench"] = "c1"
        version, history = ledger.load("bench")
        answer = ledger.Message(role="tool", call_id=ledger.pending.pop("bench"),
                                text=json.dumps({"answer": "Friday"}))
        _model([*history, answer])
        ledger.commit("bench", version,
                      [answer, ledger.Message(role="assistant", text="Booked for Friday.")])

    def sample(turns: int) -> float:
        ledger = _seeded(1)
        return timed(lambda: once(ledger), turns)

    return {"us_per_turn": median_us(sample, params["turns"], params["repeats"]),
            "mechanism": "a pending call id kept in the row; the answer resumes it"}


def growth(params: dict[str, Any]) -> Figures:
    def at(history: int) -> float:
        def sample(turns: int) -> float:
            ledger = _seeded(history)
            return timed(lambda: _turn(ledger), turns)

        return median_us(sample, params["turns"], params["repeats"])

    return {"persistence": "a dict of lists", **{str(h): at(h) for h in params["histories"]}}


class SqliteLedger:
    """One row per turn: (session, version) is the primary key, so a stale commit fails."""

    def __init__(self, path: str) -> None:
        self.Message, self.adapter = _types()
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")  # as dormant's SqliteStore
        self.db.execute("CREATE TABLE IF NOT EXISTS turns (session TEXT, version INTEGER, "
                        "messages TEXT, PRIMARY KEY (session, version))")

    def turn(self, text: str = MESSAGE) -> None:
        rows = self.db.execute("SELECT version, messages FROM turns WHERE session = ? "
                               "ORDER BY version", ("bench",)).fetchall()
        # One parse for the whole history: the rows' JSON arrays joined into one.
        history = self.adapter.validate_json("[" + ",".join(blob[1:-1] for _, blob in rows
                                                            if blob != "[]") + "]")
        user = self.Message(role="user", text=text)
        _model([*history, user])
        new = [user, self.Message(role="assistant", text=REPLY)]
        self.db.execute("INSERT INTO turns VALUES (?, ?, ?)",
                        ("bench", len(rows) + 1, self.adapter.dump_json(new).decode()))


def sqlite(params: dict[str, Any]) -> Figures:
    folder = tempfile.mkdtemp(prefix="floor-bench-")

    def seed(history: int) -> SqliteLedger:
        ledger = SqliteLedger(os.path.join(folder, f"{history}-{time.time_ns()}.db"))
        for n in range(history):
            ledger.turn(f"{n}: {MESSAGE}")
        return ledger

    def at(history: int) -> list[float]:
        setup = seeded_once(lambda: seed(history))

        def sample(turns: int) -> float:
            return timed(setup().turn, turns)

        return samples_us(sample, params["turns"], params["repeats"])

    samples = {str(h): at(h) for h in params["histories"]}
    return {"persistence": "a row per turn, keyed by (session, version)",
            **{h: statistics.median(values) for h, values in samples.items()},
            "spread": {h: spread(values) for h, values in samples.items()}}


def coldstart(params: dict[str, Any]) -> Figures:
    _turn(Ledger())
    return {}


class DynamoLedger:
    """One item per turn, ``(pk=session, sk=version)``; a conditional put is the check."""

    def __init__(self, table: str) -> None:
        import boto3

        self.Message, self.adapter = _types()
        self.client = boto3.client("dynamodb")
        self.table = table
        with contextlib.suppress(self.client.exceptions.ResourceInUseException):
            self.client.create_table(
                TableName=table, BillingMode="PAY_PER_REQUEST",
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"},
                           {"AttributeName": "sk", "KeyType": "RANGE"}],
                AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                      {"AttributeName": "sk", "AttributeType": "N"}])

    def load(self) -> tuple[int, list[Any]]:
        items: list[dict[str, Any]] = []
        query: dict[str, Any] = {
            "TableName": self.table, "KeyConditionExpression": "pk = :s",
            "ExpressionAttributeValues": {":s": {"S": "bench"}}}
        while True:
            page = self.client.query(**query)
            items += page["Items"]
            if "LastEvaluatedKey" not in page:
                break
            query["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        history = [m for item in items for m in self.adapter.validate_json(item["m"]["S"])]
        return len(items), history

    def commit(self, version: int, new: list[Any]) -> None:
        try:
            self.client.put_item(
                TableName=self.table, ConditionExpression="attribute_not_exists(sk)",
                Item={"pk": {"S": "bench"}, "sk": {"N": str(version + 1)},
                      "m": {"S": self.adapter.dump_json(new).decode()}})
        except self.client.exceptions.ConditionalCheckFailedException as error:
            raise Conflict("bench") from error

    def turn(self, text: str = MESSAGE, think: float = 0.0) -> None:
        version, history = self.load()
        user = self.Message(role="user", text=text)
        _model([*history, user])
        time.sleep(think)
        self.commit(version, [user, self.Message(role="assistant", text=REPLY)])


def dynamodb(params: dict[str, Any]) -> Figures:
    ledger = DynamoLedger("floor-bench")
    return {"persistence": "one conditional PutItem per turn, one Query of the session",
            "turns": dynamodb_checkpoints(lambda n: ledger.turn(f"{n}: {MESSAGE}"),
                                          params["checkpoints"], params["samples"])}


def contention(params: dict[str, Any]) -> Figures:
    n = params["n"]
    DynamoLedger("floor-contention").turn("seed")
    ledgers = [DynamoLedger("floor-contention") for _ in range(n)]
    sent = [f"concurrent message {i}" for i in range(n)]
    results = [""] * n
    barrier = threading.Barrier(n)

    def one(i: int) -> None:
        barrier.wait()
        try:
            ledgers[i].turn(sent[i], think=CONTENTION_MODEL_SECONDS)
            results[i] = "committed"
        except Conflict:
            results[i] = "refused"
        except Exception as error:  # counted, not hidden
            results[i] = f"error: {type(error).__name__}"

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    _, history = DynamoLedger("floor-contention").load()
    texts = [m.text for m in history if m.role == "user"]
    return {"persistence": "conditional PutItem on (session, version)",
            **contention_outcomes(results, texts, sent)}


if __name__ == "__main__":
    run({"text": text, "tool": tool, "pause": pause, "growth": growth, "sqlite": sqlite,
         "coldstart": coldstart, "dynamodb": dynamodb, "contention": contention})
