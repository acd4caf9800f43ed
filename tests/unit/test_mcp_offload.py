"""A large MCP result within ``max_result_bytes`` is an ordinary ledger event: on the
DynamoDB store (the offload tests' setup: moto, a bucket) it goes to S3 like any large tool
result when it is over ``offload_above``, and is chunked into the table's items otherwise
(the store's default offloads only what one transaction cannot hold); either way it reads
back whole in a new process."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

import dormant
from dormant.mcp import MCPServer
from dormant.models import ScriptedModel
from dormant.stores import DynamoDBStore
from tests._moto import dynamodb_engine

TABLE = "dormant-mcp-offload"
BUCKET = "dormant-mcp-offload-ledger"
SERVER = str(Path(__file__).resolve().parents[2] / "tests" / "mcp_stdio_server.py")


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with dynamodb_engine("moto", monkeypatch, table=TABLE, bucket=BUCKET):
        DynamoDBStore(TABLE).ensure_table()
        yield


@pytest.mark.parametrize(("offload_above", "in_s3"), [(65_536, True), (None, False)])
def test_a_600_kb_mcp_result_is_stored_like_any_large_result_and_read_back_whole(
        aws: None, offload_above: int | None, in_s3: bool) -> None:
    store = DynamoDBStore(TABLE, bucket=BUCKET, offload_above=offload_above)
    app = dormant.App(name="mcp-offload", store=store)
    model = ScriptedModel([{"tool_calls": [{"name": "big", "args": {"megabytes": 0.6},
                                            "id": "call_big"}]}, "Read it."])
    agent = app.agent("a", model=model,
                      tools=[MCPServer.stdio(sys.executable, args=[SERVER], tools=["big"])])

    result = app.handler.turn(agent=agent)({"session_id": "big1",
                                            "input": {"message": "all of it"}}).run()

    assert result.status == "completed", result.error
    objects = boto3.client("s3").list_objects_v2(Bucket=BUCKET).get("Contents", [])
    assert [o["Key"].startswith("ledger/session_big1/") for o in objects] == [True] * in_s3
    assert all(o["Size"] > 600_000 for o in objects)
    fresh = dormant.App(name="mcp-offload", store=DynamoDBStore(TABLE, bucket=BUCKET))
    loaded = fresh.sessions.get("big1")
    assert loaded is not None
    (done,) = [e for e in loaded.events if e.type == "tool_result"]
    assert done.error is None and done.result == {"result": "x" * 600_000}
