"""An app whose agent delegates to another in a child session, for the webhook function's
delegation test (``DORMANT_APP`` names this file): the lead parks on its ``research`` call,
the researcher runs the task in a child session handed on over the webhook queue, and the
child's answer comes back to the lead over the same queue."""

from __future__ import annotations

from typing import Any

import dormant
from dormant.models import ScriptedModel


def build(store: Any = None, model: Any = None, **_: Any) -> tuple[dormant.App, Any]:
    app = dormant.App(name="delegate-test", store=store)
    research = app.agent(name="research", model=ScriptedModel(["Found 3 papers on tides."],
                                                              strict=False))
    lead = app.agent(name="lead", tools=[research.as_delegate()], model=ScriptedModel([
        {"tool_calls": [{"name": "research", "args": {"input": "find papers on tides"},
                         "id": "call_0000000000000051"}]},
        "The researcher found 3 papers on tides."], strict=False))
    return app, lead
