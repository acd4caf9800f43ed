"""AG-UI: a turn as an AG-UI run (needs the ``agui`` extra, ``ag-ui-protocol``).

``app.handler.agui(agent=...)`` returns ``handler(request) -> AgUIRun``, an iterator of
``ag_ui.core`` events; :func:`encode_sse` frames them for a ``text/event-stream`` response and
:func:`from_run_agent_input` turns a stock client's ``RunAgentInput`` into the request::

    ui = app.handler.agui(agent=concierge)
    for frame in encode_sse(ui(from_run_agent_input(body))):
        response.write(frame)

Every run is bracketed the same way: ``RUN_STARTED``, ``STATE_SNAPSHOT`` (the session state at
turn start: the base the run's ``STATE_DELTA`` patches apply to), ``MESSAGES_SNAPSHOT`` when
the run resumes tool calls an earlier run made, then the turn translated (text deltas become
``TEXT_MESSAGE_*``, so a text message exists only if the model streamed; tool calls
``TOOL_CALL_START/ARGS/END``, tool results ``TOOL_CALL_RESULT``, state deltas
``STATE_DELTA``, thought deltas ``REASONING_*``; a generator tool's preliminary results
``CUSTOM`` ``TOOL_PROGRESS``, its final one the call's single ``TOOL_CALL_RESULT``; a steer's
user message and a seed ``TEXT_MESSAGE_*`` of their role; a queued message ``CUSTOM``
``QUEUED``; the other turn-control events, which have no AG-UI counterpart, ``CUSTOM``
``dormant.<event type>`` with the event's JSON; each event of a sub-agent, an agent used
as a tool, ``CUSTOM`` ``dormant.subagent`` — never part of the caller's messages), and one
ending, after whatever text or
reasoning is open is closed. Every ``RUN_FINISHED`` carries
``result: {"commitStatus": ..., "status": <the turn's status>}``:

- ``completed``, ``yielded_message`` (parked for the next message), ``stopped`` (a stop
  ended the invocation), ``paused``, ``interrupted`` (a waiting or failed response was
  ended), ``recorded`` (inputs recorded, no turn ran): ``RUN_FINISHED``;
- ``yielded_tool``: a ``CUSTOM`` named ``RUN_INTERRUPTED`` (value: ``callIds``,
  ``yieldedTools``, ``pendingApprovals``, ``commitStatus``) then ``RUN_FINISHED`` with an
  interrupt outcome (one interrupt per waiting call, interrupt id = call id), except a call
  to one of the client's own tools, which the client answers with a ``tool`` message: when
  only such calls wait, ``RUN_FINISHED`` has no outcome (a success);
- ``queued`` (the message went to the session's inbox): ``CUSTOM`` ``QUEUED`` (value:
  ``id``, ``position``) then ``RUN_FINISHED`` (its result adds ``queued``);
- ``accepted`` (a control was written for an invocation running elsewhere): ``CUSTOM``
  ``CONTROL_ACCEPTED`` (value: ``invocationId``) then ``RUN_FINISHED``;
- ``error`` (failed, aborted, refused): ``RUN_ERROR`` with no ``RUN_FINISHED``.

Ids: a run whose request is a client's ``RunAgentInput`` (the HTTP route passes it as
``echo``) carries that client's ``threadId``, ``runId`` and ``parentRunId``, and names the
server's own in ``RUN_STARTED.metadata``: ``sessionId``, ``dormantRunId`` and
``dormantParentRunId``, as described next. Otherwise ``threadId`` is the canonical session id
and the ids are the server's. The server's ``runId`` is the invocation id for the run that
starts an invocation. A run that reopens an invocation (parked, failed and retried, or
paused and resumed) is a new AG-UI run, ``<invocation id>:<id of the event that reopened
it>`` (``invocation_resume``, ``retry``, ``resume``), whose ``parentRunId`` names the run
before it (the run that last opened the invocation, found in the ledger the turn loaded;
when the agent's history window does not reach back that far, the invocation's first run,
i.e. the invocation id). A run that opens no invocation but concerns one (a message queued
behind it, a control aimed at it) is ``<invocation id>:<fresh suffix>`` with the same parent;
any other run is a fresh id. The ids are derived from the ledger, so they are the same
whichever process serves the request. Since a run's id is not always its invocation's,
``RUN_STARTED.metadata.invocationId`` names the invocation in every run: the id a stop
(``input.stop.invocation_id``) or a steer names.

A client that hangs up stops the turn: closing the :class:`AgUIRun` (what the HTTP route does
when the connection drops) stops it as a stop does (:meth:`~dormant.TurnStream.stop`): the
message and the text the client was sent are kept, and the invocation ends ``stopped``.

Front-end tools: the request's ``tools`` are offered to the model beside the agent's; a call
to one parks as a yield the client answers with a ``tool`` message (see
:func:`from_run_agent_input`); its ``context`` reaches the model as a system part.

``ag_ui`` is imported here, never by ``import dormant``: the Lambda path pays for it only
when it serves AG-UI.
"""

from __future__ import annotations

try:
    import ag_ui.core  # noqa: F401
except ImportError as error:
    raise ImportError(
        "dormant.agui needs the AG-UI protocol package: pip install 'dormant[agui]'"
    ) from error

from dormant.agui._adapter import (
    CONTROL_ACCEPTED,
    LEDGER_EVENT_PREFIX,
    QUEUED,
    RUN_INTERRUPTED,
    SUBAGENT,
    TOOL_PROGRESS,
    AgUIAdapter,
    ToolTransformer,
)
from dormant.agui._handler import SSE_CONTENT_TYPE, AgUIRun, agui_handler, encode_sse, run_ids
from dormant.agui._input import from_run_agent_input
from dormant.agui._messages import to_agui_messages

__all__ = [
    "CONTROL_ACCEPTED",
    "LEDGER_EVENT_PREFIX",
    "QUEUED",
    "RUN_INTERRUPTED",
    "SSE_CONTENT_TYPE",
    "SUBAGENT",
    "TOOL_PROGRESS",
    "AgUIAdapter",
    "AgUIRun",
    "ToolTransformer",
    "agui_handler",
    "encode_sse",
    "from_run_agent_input",
    "run_ids",
    "to_agui_messages",
]
