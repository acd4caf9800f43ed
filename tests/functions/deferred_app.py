"""An app with a deferred tool, for the webhook function's deferred-result test
(``DORMANT_APP`` names this file): the agent starts a report job, whose result a trusted
producer sends later over the webhook queue (``events/webhook_sqs_fifo_tool_result.json``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

import dormant
from dormant.models import ScriptedModel


class Report(BaseModel):
    topic: str


def build(store: Any = None, model: Any = None, **_: Any) -> tuple[dormant.App, Any]:
    app = dormant.App(name="deferred-test", store=store)
    report = app.tool(name="build_report", description="Start a report job (it calls back)",
                      schema=Report, deferred=True)
    agent = app.agent(name="analyst", tools=[report], model=ScriptedModel([
        {"tool_calls": [{"name": "build_report", "args": {"topic": "occupancy"},
                         "id": "call_0000000000000041"}]},
        "Your report is ready: s3://reports/41.pdf"], strict=False))
    return app, agent
