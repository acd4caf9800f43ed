"""The ``wake`` function given a claim's lease wake-up (``dormant.lease``): with nothing
stranded to take over, the library answers ``recorded`` and writes nothing; that is a
delivery done, not one to raise for (a raise is retried by Lambda, then dead-lettered)."""

from __future__ import annotations

import dormant
from dormant._ids import now_ms
from dormant.schedulers import LEASE_TIMER
from dormant.stores import DynamoDBStore
from tests.functions.conftest import Deployment, FakeLambdaContext


def test_a_lease_wake_up_with_nothing_stranded_returns_and_writes_nothing(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    app = dormant.App(store=DynamoDBStore(deployed.table, bucket=deployed.bucket))
    app.sessions.create("lease-idle")
    version = deployed.session("lease-idle").version
    event = {"sessionId": "session_lease-idle", "name": LEASE_TIMER, "fireAt": now_ms()}

    reply = deployed.cold_start("wake").handler(event, context)

    assert (reply["status"], reply["commitStatus"], reply["code"]) == ("recorded", None, None)
    assert deployed.session("lease-idle").version == version
