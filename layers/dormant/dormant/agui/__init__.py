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
``STATE_DELTA``, thought deltas ``REASONING_*``), and one ending: ``RUN_FINISHED`` with
``result: {"commitStatus": ...}`` when the turn finished (or parked for the next message); a
``CUSTOM`` named ``RUN_INTERRUPTED`` (value: ``callIds``, ``yieldedTools``,
``commitStatus``) then ``RUN_FINISHED`` with an interrupt outcome (one interrupt per waiting
call, interrupt id = call id) when it parked on yielded tools; ``RUN_ERROR`` with no
``RUN_FINISHED`` when it failed or was aborted (nothing was written).

Ids: ``threadId`` is the canonical session id. ``runId`` is the invocation id for the run that
starts an invocation. A run that reopens a parked invocation is a new AG-UI run,
``<invocation id>:<id of the invocation_resume event that reopened it>``, whose
``parentRunId`` names the run that parked it (the run that last opened the invocation, found
in the ledger the turn loaded; when the agent's history window does not reach back that far,
the invocation's first run, i.e. the invocation id). The ids are derived from the ledger, so
they are the same whichever process serves the request.

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

from dormant.agui._adapter import RUN_INTERRUPTED, AgUIAdapter, ToolTransformer
from dormant.agui._handler import SSE_CONTENT_TYPE, AgUIRun, agui_handler, encode_sse, run_ids
from dormant.agui._input import from_run_agent_input
from dormant.agui._messages import to_agui_messages

__all__ = [
    "RUN_INTERRUPTED",
    "SSE_CONTENT_TYPE",
    "AgUIAdapter",
    "AgUIRun",
    "ToolTransformer",
    "agui_handler",
    "encode_sse",
    "from_run_agent_input",
    "run_ids",
    "to_agui_messages",
]
