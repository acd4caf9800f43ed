"""``POST /sessions/{id}/replay``: ``dormant dev``'s own route, which the ``api`` Lambda has not.

It answers the question a person asks after changing an agent's prompt, tools or model: what
would the agent do now with what this session's people said? The stored session is loaded
whole and replayed (:func:`dormant.testing.replay`) against the agent the server serves now,
with its current model, on a fresh in-memory store: the recorded session is never written,
and nothing runs in the dev database. ``tools`` says how tools run: ``recorded`` (the default)
plays the recorded results back, so a replay touches nothing outside; ``real`` runs them.

The answer puts each input's turn side by side, recorded and replayed, with what changed, the
inputs that no longer fit (orphans) and both ledgers, for the console's replay view. The
session must be visible to the caller exactly as ``GET /sessions/{id}`` checks (another
principal's is 404). A replay that fails — the agent's own code raising — answers 500 with
what it raised: on a developer's machine the message is theirs to read.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal
from urllib.parse import unquote

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body, Path
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from dormant.agent import Agent
from dormant.app import App
from dormant.errors import SessionNotFound
from dormant.events import Event
from dormant.http import (
    SESSION_ID_SCHEMA,
    answers,
    checked_session_id,
    principal_of,
    public_events,
)
from dormant.session import Session
from dormant.testing import Orphan, TurnOutcome, replay

__all__ = ["ReplayAnswer", "ReplayRequest", "ReplayedTurn", "add_replay_route", "replay_answer"]

log = logging.getLogger("dormant.dev")

ROUTE = "/sessions/<session_id>/replay"
SUMMARY = "Replay a session against the current agent (dormant dev only)"
DESCRIPTION = ("The session's recorded inputs sent again to the agent served now, on a fresh "
               "in-memory store (the session is not changed), each turn side by side with the "
               "recorded one. `tools`: `recorded` (default) plays the recorded results back; "
               "`real` runs the tools.")


class _Wire(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class ReplayRequest(_Wire):
    """What to replay with (the body is optional)."""

    tools: Literal["recorded", "real"] = Field(
        default="recorded", description="recorded: the recorded tool results are played back "
        "(nothing outside is touched); real: the tools run")


class ReplayedTurn(_Wire):
    """One recorded input and the turn it set off, recorded and replayed."""

    index: int = Field(description="The input's position among the recording's inputs")
    input: str = Field(description="The input, in words")
    recorded: TurnOutcome
    replayed: TurnOutcome | None = Field(description="None: the input was not delivered (an "
                                                     "orphan)")
    changes: list[str] = Field(description="What differs, a line per field (none: the same)")
    text_score: float = Field(description="How alike the two texts are, 0 to 1")


class ReplayAnswer(_Wire):
    """The session replayed against the current agent, turn by turn."""

    session_id: str
    agent: str = Field(description="The agent replayed against (the one served now)")
    tools: Literal["recorded", "real"]
    changed: bool = Field(description="Whether any turn changed or any input no longer fits")
    tools_changed: int = Field(description="How many turns called other tools, or the same "
                                           "with other arguments")
    new_approvals: list[str] = Field(description="Approvals the replay asked that the "
                                                 "recording did not (by tool)")
    text_score: float = Field(description="The turns' text scores, averaged")
    turns: list[ReplayedTurn]
    orphans: list[Orphan]
    notes: list[str] = Field(description="What else the replay could not do as recorded")
    recorded: list[dict[str, Any]] = Field(description="The recorded ledger's events")
    replayed: list[dict[str, Any]] = Field(description="The replay's ledger's events")


def replay_answer(session: Session, agent: Agent, tools: Literal["recorded", "real"]
                  ) -> ReplayAnswer:
    """Replay ``session`` against ``agent`` on a fresh memory store, as the route answers it."""
    replayed = replay(session, agent, tools=tools)
    diff = replayed.diff
    turns = [ReplayedTurn(index=turn.index, input=turn.recorded.input, recorded=turn.recorded,
                          replayed=turn.replayed, changes=turn.changes,
                          text_score=turn.text_score)
             for turn in diff.turns]
    return ReplayAnswer(
        session_id=session.session_id, agent=agent.name, tools=tools, changed=diff.changed,
        tools_changed=diff.tools_changed, new_approvals=diff.new_approvals,
        text_score=round(diff.text_score, 3), turns=turns, orphans=list(diff.orphans),
        notes=list(replayed.notes), recorded=_shown(replayed.recorded),
        replayed=_shown(replayed.events))


def _shown(events: list[Event]) -> list[dict[str, Any]]:
    return public_events([event.model_dump(mode="json") for event in events])


def add_replay_route(resolver: Any, app: App, agent: Agent) -> None:
    """Serve ``POST /sessions/{id}/replay`` on ``resolver`` (the one ``dormant dev`` built for
    ``app`` and ``agent``; never the ``api`` Lambda's)."""

    @resolver.post(ROUTE, summary=SUMMARY, tags=["sessions"],  # type: ignore[untyped-decorator]
                   description=DESCRIPTION,
                   responses=answers("the session replayed", ReplayAnswer, 400, 401, 404, 422))
    def post_replay(
        session_id: Annotated[str, Path(description="The session to replay",
                                        json_schema_extra=SESSION_ID_SCHEMA)],
        request: Annotated[ReplayRequest | None, Body(embed=False)] = None,
    ) -> Response[Any]:
        principal = principal_of(resolver.current_event.raw_event)
        sid = checked_session_id(unquote(session_id))
        session = app.sessions.load(sid, turns=None)
        if session is None or not session.head.visible_to(principal):
            raise SessionNotFound(sid)
        tools = (request or ReplayRequest()).tools
        try:
            answer = replay_answer(session, agent, tools)
        except Exception as error:  # the agent's code failed: say what it raised
            log.warning("replaying %s failed", sid, exc_info=error)
            return Response(status_code=500, content_type="application/json",
                            body={"code": "replay_failed", "sessionId": sid,
                                  "message": f"the replay failed: {type(error).__name__}: "
                                             f"{error}"})
        return Response(status_code=200, content_type="application/json",
                        body=answer.model_dump(by_alias=True, mode="json"))
