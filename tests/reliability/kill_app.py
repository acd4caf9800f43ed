"""An app for ``kill -9`` tests of ``dormant dev``: one slow tool under a person's approval.

``run_job`` is approved by a person first (``tool_approval``), then sleeps
``DORMANT_TEST_TOOL_SECONDS`` (default 1.5) so a test can kill the server while it runs. Each
real run appends a line to the file ``DORMANT_TEST_RUNS`` names (its call id and the epoch ms
it started at), outside the store, so a test counts how often and when the side effect really
happened across processes. The model
calls the tool for a message that asks to "run the job" and answers every other message (and
the tool's result) with plain text.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, Field

import dormant
from dormant.models.rules import Reply, RuleModel, ToolOutcome
from dormant.stores import Store

RUNS = "DORMANT_TEST_RUNS"
TOOL_SECONDS = "DORMANT_TEST_TOOL_SECONDS"


class Job(BaseModel):
    name: str = Field(min_length=1, description="The job to run")


def _run_job(ctx: dormant.ToolContext) -> dict[str, Any]:
    runs = os.environ.get(RUNS)
    if runs:
        with Path(runs).open("a") as out:  # one line per real run, flushed before the sleep
            out.write(f"{ctx.call_id} {time.time_ns() // 1_000_000}\n")
    time.sleep(float(os.environ.get(TOOL_SECONDS) or 1.5))
    return {"job": ctx.args.name, "status": "done"}


class JobModel(RuleModel):
    """Calls ``run_job`` when asked to run the job; echoes everything else."""

    def reply(self, text: str) -> Reply:
        if "run the job" in text.lower():
            return self.call("run_job", {"name": "nightly"})
        return f"Noted: {text}"

    def after_tool(self, result: ToolOutcome) -> Reply:
        return f"The job is {result.data.get('status', 'done')}."


class KillApp(NamedTuple):
    app: dormant.App
    agent: dormant.Agent


def build(store: Store | None = None, model: Any = None) -> KillApp:
    app = dormant.App(name="killable", store=store)
    run_job = app.tool(name="run_job", description="Run a slow job (a person approves it)",
                       schema=Job, execute=_run_job)
    agent = app.agent(name="worker", model=model or JobModel(), tools=[run_job],
                      tool_approval={"run_job": "user-approval"})
    return KillApp(app, agent)


def describe_model(model: Any) -> str:
    return type(model).__name__
