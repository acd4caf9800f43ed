"""S3 calls per request on a session holding one offloaded event (``bench/dynamodb_cost.py``).

A session whose first turn's tool returned 50 KB (over ``offload_above``: the event lives in
S3, the version item keeps a pointer and a stub), then one request of each kind, each in a
new process (a new store and S3 client, as a cold Lambda has) and again in the process that
served the one before (warm). The same requests run against the store's eager ``load`` (every
load reads the window's offloaded events), side by side, to show what deferring saves.
``GetObject`` calls are counted as botocore sends them (``before-call``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

#: What each request is: a label, its REST body, and whether a model runs.
REQUESTS: list[tuple[str, dict[str, Any]]] = [
    ("pause (no model)", {"input": {"pause": True}}),
    ("a message while paused: queued (no model)", {"input": {"message": "and then?"}}),
    ("resume: the queued message runs (model reads the history)", {"input": {"resume": True}}),
    ("a message (model reads the history)", {"input": {"message": "what did it say?"}}),
]
BIG = "x" * 50_000
OFFLOAD_ABOVE = 10_000


@dataclass
class OffloadRow:
    request: str
    deferred_cold: int
    deferred_warm: int
    eager_cold: int
    eager_warm: int


def measure_offload() -> list[OffloadRow]:
    """The ``GetObject`` calls of each request in :data:`REQUESTS`, deferred and eager, cold
    and warm (moto in-process; the caller set fake credentials)."""
    from moto import mock_aws

    cells: dict[tuple[str, bool, bool], int] = {}
    for deferred in (True, False):
        for warm in (False, True):
            with mock_aws():
                _run(deferred, warm, cells)
    return [OffloadRow(label, cells[label, True, False], cells[label, True, True],
                       cells[label, False, False], cells[label, False, True])
            for label, _ in REQUESTS]


def _run(deferred: bool, warm: bool, cells: dict[tuple[str, bool, bool], int]) -> None:
    import boto3

    boto3.client("s3").create_bucket(Bucket="bench-ledger")
    first = _Process(deferred, [{"tool_calls": [{"name": "fetch", "args": {"ref": "doc"}}]},
                                "Read it."])
    first.store.ensure_table()
    done = first.send({"input": {"message": "read the doc"}})
    if done.commit_status != "committed" or first.calls["PutObject"] != 1:
        raise SystemExit(f"the offloading turn did not land one S3 object: {done}")
    process = first
    for label, body in REQUESTS:
        if not warm:
            process = _Process(deferred, [])
        process.model.add("Noted.")
        before = process.calls["GetObject"]
        response = process.send(body)
        if response.status == "error":
            raise SystemExit(f"{label}: {response}")
        cells[label, deferred, warm] = process.calls["GetObject"] - before


class _Process:
    """One process: its own store, S3 client and app."""

    def __init__(self, deferred: bool, replies: list[Any]) -> None:
        import boto3
        from pydantic import BaseModel

        import dormant
        from dormant.models import ScriptedModel
        from dormant.stores import DynamoDBStore

        class Ref(BaseModel):
            ref: str

        class Eager(DynamoDBStore):
            """Loaded with ``load`` (a store that overrides it is loaded with it)."""

            def load(self, session_id: str, **kwargs: Any) -> Any:
                return super().load(session_id, **kwargs)

        class Reading(ScriptedModel):
            """Reads its whole request, as a provider's client does when it sends it."""

            def stream(self, request: Any, **kwargs: Any) -> Any:
                repr(request.messages)
                return super().stream(request, **kwargs)

        s3 = boto3.client("s3")
        self.calls: Counter[str] = Counter()
        s3.meta.events.register("before-call.s3.*", self._count)
        kind = DynamoDBStore if deferred else Eager
        self.store = kind("bench-offload", bucket="bench-ledger", s3_client=s3,
                          offload_above=OFFLOAD_ABOVE)
        app = dormant.App(name="bench", store=self.store)
        fetch = app.tool(name="fetch", description="Fetch a document", schema=Ref,
                         execute=lambda ctx: BIG)
        self.model = Reading(replies)
        self.rest = app.handler.rest(agent=app.agent(name="reader", model=self.model,
                                                     tools=[fetch]))

    def _count(self, model: Any, **_: Any) -> None:
        self.calls[model.name] += 1

    def send(self, body: dict[str, Any]) -> Any:
        return self.rest({"session_id": "offload", **body})


def offload_table(rows: list[OffloadRow]) -> str:
    lines = [
        "| request | S3 reads, deferred (new process) | deferred (warm process) | "
        "eager (new process) | eager (warm process) |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(f"| {row.request} | {row.deferred_cold} | {row.deferred_warm} | "
                     f"{row.eager_cold} | {row.eager_warm} |")
    return "\n".join(lines)
