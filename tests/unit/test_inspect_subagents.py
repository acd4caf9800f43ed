"""``dormant sessions show`` of a session parked in a sub-agent: the sub-agent's events are
labelled with its agent path and indented under its caller's call; the pending approval says
which agent waits (the ``--json`` form carries ``agent``)."""

from __future__ import annotations

import re

from pydantic import BaseModel

import dormant
from dormant._inspect import render_session, session_json
from dormant.testing import approve, model, run_test, user


class Refund(BaseModel):
    booking: str


def _concierge() -> dormant.Agent:
    app = dormant.App(name="inspect")
    refund = app.tool(name="refund", description="Refund", schema=Refund,
                      execute=lambda ctx: {"refunded": ctx.args.booking})
    billing = app.agent(name="billing", tools=[refund],
                        tool_approval={"refund": "user-approval"})
    return app.agent(name="concierge", tools=[billing.as_tool()])


STEPS = [user("refund BK-1"),
         model(tool_calls=[{"name": "billing", "args": {"input": "refund BK-1"}}]),
         model(tool_calls=[{"name": "refund", "args": {"booking": "BK-1"}}], agent="billing")]


def _timeline(text: str) -> list[str]:
    """The timeline's lines with their clock cut off (what follows ``HH:MM:SS.mmm``)."""
    return [re.sub(r"^  \d\d:\d\d:\d\d\.\d{3}  ", "", line) for line in text.splitlines()
            if re.match(r"^  \d\d:\d\d:\d\d\.\d{3}  ", line)]


def test_a_sub_agents_events_are_labelled_and_indented_under_the_call() -> None:
    run = run_test(_concierge(), STEPS)
    lines = _timeline(render_session(run.session))
    calls = [line for line in lines if "called with" in line]
    assert calls[0].startswith("→ billing called with")
    assert calls[1].startswith("  [concierge/billing] → refund called with")
    assert any(line.startswith("  [concierge/billing] ⏸ refund needs approval")
               for line in lines)
    assert not any("[concierge/billing]" in line for line in lines
                   if "billing called" in line or "run waiting" in line)


def test_the_pending_approval_names_its_agent() -> None:
    run = run_test(_concierge(), STEPS)
    [request] = run.session.pending_approvals
    text = render_session(run.session)
    assert (f"    refund [{request.call_id}] in concierge/billing needs approval "
            f"{request.approval_id}") in text
    assert session_json(run.session)["pendingApprovals"][0]["agent"] == "concierge/billing"


def test_once_answered_the_sub_agent_and_its_caller_finish_in_the_timeline() -> None:
    run = run_test(_concierge(), [*STEPS, approve("refund", agent="billing"),
                                  model("Refunded BK-1.", agent="billing"),
                                  model("Done.")])
    text = render_session(run.session)
    lines = _timeline(text)
    assert "  [concierge/billing] ✓ refund returned {\"refunded\": \"BK-1\"}" in lines
    assert "  [concierge/billing] assistant: Refunded BK-1." in lines
    assert "✓ billing returned Refunded BK-1." in lines
    assert "assistant: Done." in lines
    assert "  pending: nothing" in text
