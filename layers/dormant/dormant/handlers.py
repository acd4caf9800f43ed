"""One turn per request: load the session, run a turn, commit, answer.

``app.handler.turn`` is the atom (a lazy stream of events with a result at the end, see
:class:`TurnStream`); ``rest`` drains it into a JSON body; ``agui`` translates it into AG-UI
events.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError

from dormant._inputs import (
    ApprovalDecision,
    CommitStatus,
    Delegated,
    HandlerInput,
    Input,
    ResponseOptions,
    RetryRequest,
    TimerRef,
    ToolAnswer,
)
from dormant._request import Host
from dormant._turn import TurnConfig, TurnStream
from dormant._turn_wire import RestResponse, TurnResult, VoiceResponse
from dormant._voice import Voice, refused
from dormant.errors import InputError, StaleTimer, describe_validation
from dormant.events import StreamEvent
from dormant.models import ModelError
from dormant.schedulers import TimerDelivery

if TYPE_CHECKING:
    from dormant.session import Session

__all__ = [
    "ApprovalDecision",
    "CommitStatus",
    "Delegated",
    "HandlerInput",
    "Handlers",
    "Input",
    "ResponseOptions",
    "RestResponse",
    "RestStream",
    "RetryRequest",
    "ToolAnswer",
    "TurnResult",
    "TurnStream",
    "VoiceHandler",
    "VoiceResponse",
]

log = logging.getLogger("dormant")


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


class VoiceHandler(Protocol):
    """``app.handler.voice(...)``: a request whose input may carry ``audio`` (and optionally
    the Lambda time left) -> a :class:`VoiceResponse`."""

    def __call__(self, request: HandlerInput | dict[str, Any], *,
                 remaining_time: float | None = None) -> VoiceResponse: ...


class Handlers:
    """``app.handler``: builds per-request functions from a config."""

    def __init__(self, app: Host) -> None:
        self._app = app

    def turn(self, **config: Any) -> TurnHandler:
        """``handler(input) -> TurnStream`` (lazy)."""
        cfg = TurnConfig(self._app, **config)

        def handle(request: HandlerInput | dict[str, Any], *,
                   remaining_time: float | None = None) -> TurnStream:
            return TurnStream(cfg, request, remaining_time=remaining_time)

        return handle

    def rest(self, **config: Any) -> RestHandler:
        """``handler(input) -> RestResponse``: the turn, drained and committed."""
        cfg = TurnConfig(self._app, **config)

        def handle(request: HandlerInput | dict[str, Any], *,
                   remaining_time: float | None = None) -> RestResponse:
            stream = TurnStream(cfg, request, remaining_time=remaining_time)
            result = stream.run()
            return to_rest(result, stream, cfg.response)

        return handle

    def voice(self, *, transcriber: Any = None, speaker: Any = None,
              **config: Any) -> VoiceHandler:
        """``handler(input) -> VoiceResponse``: ``rest`` between a transcriber and a speaker.

        ``input.audio`` (``{"data": bytes or base64, "format": "wav" | "mp3" | "ogg" | "webm"
        | "flac" | "m4a"}``) is transcribed, and the transcript runs as the turn's message
        (its ``user`` event marked ``audio=True``; the audio is not stored); a request with no
        audio runs as in ``rest``. The reply is spoken. ``transcriber`` / ``speaker``: a
        :class:`~dormant.models.Transcriber` / :class:`~dormant.models.Speaker`; left out, a
        realtime agent model hears (``transcribe``) and speaks (its ``audio_delta`` events)
        itself, else OpenAI's audio APIs serve (the deployment's key). A failed transcription
        writes nothing (``model_error``); a failed speech keeps the committed turn and says
        so (``audio_error``)."""
        cfg = TurnConfig(self._app, **config)
        voice = Voice(cfg.agent.model, transcriber, speaker)

        def handle(request: HandlerInput | dict[str, Any], *,
                   remaining_time: float | None = None) -> VoiceResponse:
            try:
                heard, transcript = voice.hear(request)
            except (ModelError, InputError, ValidationError) as error:
                if isinstance(error, ValidationError):
                    error = InputError("invalid request: " + describe_validation(error))
                return refused(request, error)
            stream = TurnStream(cfg, heard, remaining_time=remaining_time)
            result = stream.run()
            return voice.answer(to_rest(result, stream, cfg.response), transcript,
                                stream.events)

        return handle

    def rest_stream(self, **config: Any) -> Callable[..., RestStream]:
        """``handler(input) -> RestStream``: the turn's stream events as they happen, then its
        REST response (``POST /turns`` with ``Accept: text/event-stream``)."""
        cfg = TurnConfig(self._app, **config)

        def handle(request: HandlerInput | dict[str, Any], *,
                   remaining_time: float | None = None) -> RestStream:
            return RestStream(TurnStream(cfg, request, remaining_time=remaining_time),
                              cfg.response)

        return handle

    def wake(self, **config: Any) -> Callable[[TimerDelivery | dict[str, Any]], TurnResult]:
        """``handler(delivery) -> TurnResult``: a fired timer appends its message (or tool
        input) and runs a turn. A delivery for a timer that is no longer pending (cancelled,
        replaced, already delivered) is refused with code ``stale_timer`` and writes nothing;
        so is one that ran beside another delivery of the same firing and lost the race (see
        :func:`_lost_to_its_twin`): a duplicate delivery is a no-op however the two overlap."""
        cfg = TurnConfig(self._app, **config)

        def handle(delivery: TimerDelivery | dict[str, Any]) -> TurnResult:
            fired = (delivery if isinstance(delivery, TimerDelivery)
                     else TimerDelivery.model_validate(delivery))
            answers = ([ToolAnswer(call_id=str(fired.tool_input["call_id"]),
                                   input=fired.tool_input.get("input"))]
                       if fired.tool_input else None)
            request = HandlerInput(session_id=fired.session_id, input=Input(
                message=fired.message, message_id=fired.message_id, tools=answers,
                timer=TimerRef(name=fired.name, fire_at=fired.fire_at)))
            return _lost_to_its_twin(self._app, fired, TurnStream(cfg, request).run())

        return handle

    def agui(self, **config: Any) -> Callable[[HandlerInput | dict[str, Any]], Iterator[Any]]:
        """``handler(input) -> iterator of ag_ui.core events`` (needs ``ag-ui-protocol``)."""
        from dormant.agui import agui_handler

        return agui_handler(TurnConfig(self._app, **config))


def _lost_to_its_twin(app: Host, fired: TimerDelivery, result: TurnResult) -> TurnResult:
    """A delivery that wrote nothing because another delivery of the same firing landed
    first (Scheduler delivers at least once, and two deliveries may read the timer pending
    before either commits) is reported as the ``stale_timer`` refusal a later repeat gets:
    that is what a retry of it would answer, so retrying it (or dead-lettering it) is waste.

    Only what a lost race leaves is looked at again (one read): a refusal or a superseded turn
    that wrote nothing. A failed write (``store_error``) or a failed run is left as it is: its
    timer may still be pending and a retry can deliver it."""
    if not _wrote_nothing_after_a_race(result) or not _consumes_a_ledger_timer(fired):
        return result
    session = app.sessions.load(fired.session_id, turns=0)
    if session is None or not _firing_landed(app, session, fired):
        return result
    log.info("timer %r: another delivery of this firing landed first; this one wrote nothing",
             fired.name, extra={"session_id": result.session_id})
    return TurnResult(session_id=result.session_id, status="error", code=StaleTimer.code,
                      error=str(StaleTimer(result.session_id, fired.name)),
                      invocation_id=result.invocation_id)


def _wrote_nothing_after_a_race(result: TurnResult) -> bool:
    """A refusal (``duplicate_message``, ``conflict``…: nothing to retry, nothing written) or
    a turn superseded with nothing kept; not a failure a retry can fix."""
    if result.landed:
        return False
    if result.status == "error":
        return (result.code != StaleTimer.code and result.commit_status is None
                and not result.retryable)
    return result.commit_status == "superseded"


def _consumes_a_ledger_timer(fired: TimerDelivery) -> bool:
    """A timer ``session.schedule`` set carries a message or a tool answer; a wake-up without
    either (a claim's lease timer) is not kept among the session's timers."""
    return fired.message is not None or fired.tool_input is not None


def _firing_landed(app: Host, session: Session, fired: TimerDelivery) -> bool:
    """The firing is no longer pending: its message is in the session, or the head no longer
    holds the timer at this time (delivered, or cancelled or replaced meanwhile)."""
    if fired.message_id is not None and app.sessions.holds_message(session, fired.message_id):
        return True
    timer = session.head.timers.get(fired.name)
    return timer is None or timer["fire_at"] != fired.fire_at


class RestStream(Iterator[StreamEvent]):
    """A turn streamed to a REST caller: iterate it for the turn's stream events (lazy, as
    :class:`TurnStream`); once exhausted, ``response`` is what ``rest`` would have answered.
    ``close()`` is a caller that hung up: the turn is stopped as a stop would
    (:meth:`TurnStream.stop`: the message and the text the caller was sent are kept, the
    invocation ends ``stopped``) and run to that end; ``hang_up()`` is the stop alone, from
    any thread. An event counts as sent once the caller asks for the next one."""

    def __init__(self, turn: TurnStream, options: ResponseOptions) -> None:
        self.turn = turn
        self._options = options
        self._seen: int | None = None
        self._last: int | None = None

    def __iter__(self) -> RestStream:
        return self

    def __next__(self) -> StreamEvent:
        if self._last is not None:
            self._seen = self._last
        event = next(self.turn)
        self._last = event.seq if event.seq is not None else self._last
        return event

    @property
    def result(self) -> TurnResult | None:
        return self.turn.result

    @property
    def response(self) -> RestResponse | None:
        result = self.turn.result
        return None if result is None else to_rest(result, self.turn, self._options)

    def abort(self) -> None:
        """Stop the turn (:meth:`TurnStream.abort`), from any thread: it ends at its next
        check of the abort."""
        self.turn.abort()

    def hang_up(self) -> None:
        """The caller is gone: stop the turn (from any thread), keeping what it was sent."""
        if self.turn.result is None:
            self.turn.stop(self._seen)

    def close(self) -> None:
        """The caller hung up: stop the turn (:meth:`hang_up`) and run it to that end."""
        self.hang_up()
        if self.turn.result is not None:
            return
        try:
            for _ in self.turn:  # it stops at its next check of the signal
                pass
        except Exception:
            log.exception("the stopped turn failed while it stopped",
                          extra={"session_id": self.turn.session_id})


def to_rest(result: TurnResult, stream: TurnStream, options: ResponseOptions) -> RestResponse:
    return RestResponse(
        session_id=result.session_id,
        status=result.status,
        output=result.output,
        yielded_tools=result.yielded_tools if result.status == "yielded_tool" else None,
        pending_approvals=result.pending_approvals or None,
        deferred_tools=result.deferred_tools or None,
        error=result.error,
        code=result.code if result.status == "error" else None,
        retryable=result.retryable if result.status == "error" else None,
        warning=result.warning,
        invocation_id=result.invocation_id,
        queued=result.queued,
        handed_on=result.handed_on,
        drained=result.drained,
        agent=result.agent,
        commit_status=result.commit_status,
        version=result.version,
        # a realtime model's audio is left out: the body keeps its words (the deltas and the
        # assistant event), not base64 sound; the event stream and the voice handler have it
        events=[{**e.model_dump(mode="json"), "seq": e.seq} for e in stream.events
                if e.type != "audio_delta"]
        if options.events else None,
        usage=result.usage if options.usage else None,
        state=result.state if options.state else None,
    )
