"""The Bookings sample after a change, for ``dormant eval``'s tests: looking a stay up now
waits for a person's approval too (``build(store=None, model=None) -> (app, agent)``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dormant.samples.bookings import build as bookings


def build(store: Any = None, model: Any = None) -> Any:
    app, agent = bookings(store=store, model=model)
    return app, replace(agent, tool_approval={**(agent.tool_approval or {}),
                                              "lookup_stay": "user-approval"})


def checks() -> list[Any]:
    """A team's own checks: only that no stay is upgraded to a penthouse."""

    def no_penthouse(replayed: Any) -> str | None:
        rooms = [e.args.get("room") for e in replayed if e.type == "tool_call"
                 and e.name == "upgrade_room"]
        return "upgraded to the penthouse" if "penthouse" in rooms else None

    return [no_penthouse]
