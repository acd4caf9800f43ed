"""One turn per request: load the session, run a turn, commit, answer.

``app.handler.turn`` is the atom (a lazy stream of events with a result at the end, see
:class:`TurnStream`); ``rest`` drains it into a JSON body; ``agui`` translates it into AG-UI
events.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from dormant._turn import TurnStream, _Config
from dormant._turn_wire import (
    ApprovalDecision,
    CommitStatus,
    HandlerInput,
    Input,
    ResponseOptions,
    RestResponse,
    RetryRequest,
    TimerRef,
    ToolAnswer,
    TurnResult,
)
from dormant.schedulers import TimerDelivery

if TYPE_CHECKING:
    from dormant.app import App

__all__ = [
    "ApprovalDecision",
    "CommitStatus",
    "HandlerInput",
    "Handlers",
    "Input",
    "ResponseOptions",
    "RestResponse",
    "RetryRequest",
    "ToolAnswer",
    "TurnResult",
    "TurnStream",
]


class TurnHandler(Protocol):
    """``app.handler.turn(...)``: a request (and optionally the Lambda time left) -> a lazy
    :class:`TurnStream`."""

    def __call__(self, request: HandlerInput | dict[str, Any], *,
                 remaining_time: float | None = None) -> TurnStream: ...


class RestHandler(Protocol):
    """``app.handler.rest(...)``: a request (and optionally the Lambda time left: the turn
    ends as a retryable ``deadline`` failure that margin before it) -> a :class:`RestResponse`."""

    def __call__(self, request: HandlerInput | dict[str, Any], *,
                 remaining_time: float | None = None) -> RestResponse: ...


class Handlers:
    """``app.handler``: builds per-request functions from a config."""

    def __init__(self, app: App) -> None:
        self._app = app

    def turn(self, **config: Any) -> TurnHandler:
        """``handler(input) -> TurnStream`` (lazy)."""
        cfg = _Config(self._app, **config)

        def handle(request: HandlerInput | dict[str, Any], *,
                   remaining_time: float | None = None) -> TurnStream:
            return TurnStream(cfg, request, remaining_time=remaining_time)

        return handle

    def rest(self, **config: Any) -> RestHandler:
        """``handler(input) -> RestResponse``: the turn, drained and committed."""
        cfg = _Config(self._app, **config)

        def handle(request: HandlerInput | dict[str, Any], *,
                   remaining_time: float | None = None) -> RestResponse:
            stream = TurnStream(cfg, request, remaining_time=remaining_time)
            result = stream.run()
            return to_rest(result, stream, cfg.response)

        return handle

    def wake(self, **config: Any) -> Callable[[TimerDelivery | dict[str, Any]], TurnResult]:
        """``handler(delivery) -> TurnResult``: a fired timer appends its message (or tool
        input) and runs a turn. A delivery for a timer that is no longer pending (cancelled,
        replaced, already delivered) is refused with code ``stale_timer`` and writes nothing."""
        cfg = _Config(self._app, **config)

        def handle(delivery: TimerDelivery | dict[str, Any]) -> TurnResult:
            fired = (delivery if isinstance(delivery, TimerDelivery)
                     else TimerDelivery.model_validate(delivery))
            answers = ([ToolAnswer(call_id=str(fired.tool_input["call_id"]),
                                   input=fired.tool_input.get("input"))]
                       if fired.tool_input else None)
            request = HandlerInput(session_id=fired.session_id, input=Input(
                message=fired.message, message_id=fired.message_id, tools=answers,
                timer=TimerRef(name=fired.name, fire_at=fired.fire_at)))
            return TurnStream(cfg, request).run()

        return handle

    def agui(self, **config: Any) -> Callable[[HandlerInput | dict[str, Any]], Iterator[Any]]:
        """``handler(input) -> iterator of ag_ui.core events`` (needs ``ag-ui-protocol``)."""
        from dormant.agui import agui_handler

        return agui_handler(_Config(self._app, **config))


def to_rest(result: TurnResult, stream: TurnStream, options: ResponseOptions) -> RestResponse:
    return RestResponse(
        session_id=result.session_id,
        status=result.status,
        output=result.output,
        yielded_tools=result.yielded_tools if result.status == "yielded_tool" else None,
        pending_approvals=result.pending_approvals or None,
        error=result.error,
        code=result.code if result.status == "error" else None,
        retryable=result.retryable if result.status == "error" else None,
        warning=result.warning,
        invocation_id=result.invocation_id,
        queued=result.queued,
        handed_on=result.handed_on,
        drained=result.drained,
        commit_status=result.commit_status,
        version=result.version,
        events=[{**e.model_dump(mode="json"), "seq": e.seq} for e in stream.events]
        if options.events else None,
        usage=result.usage if options.usage else None,
        state=result.state if options.state else None,
    )
