"""``app.handler.agui``: one turn per request, as one AG-UI run, ready to write down SSE."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from typing import Any

from ag_ui.core import BaseEvent, RunAgentInput
from ag_ui.encoder import EventEncoder
from pydantic import ValidationError

from dormant._ids import new_id
from dormant._inputs import HandlerInput
from dormant._turn import TurnConfig, TurnStream
from dormant._turn_wire import TurnResult
from dormant.agui._adapter import AgUIAdapter
from dormant.events import StreamEvent

__all__ = ["SSE_CONTENT_TYPE", "AgUIRun", "agui_handler", "encode_sse", "run_ids"]

#: The media type of :func:`encode_sse`'s output.
SSE_CONTENT_TYPE = "text/event-stream"

log = logging.getLogger("dormant")

#: The events that open (or reopen) an invocation. A ``resume`` opens one only when it
#: continues a paused invocation (it names it); it is recorded, not streamed.
_OPENERS = ("invocation_start", "invocation_resume", "retry", "resume")


def _opens(event: StreamEvent) -> bool:
    return event.type in _OPENERS and (event.type != "resume" or event.invocation_id is not None)


class AgUIRun(Iterator[BaseEvent]):
    """One request's AG-UI run: iterate it for ``ag_ui.core`` events.

    Lazy like the :class:`~dormant.TurnStream` it wraps (``turn``): nothing runs until it is
    iterated. ``abort()`` stops the turn (the run then ends as the turn does: ``RUN_ERROR``,
    code ``aborted``, when nothing was written). ``close()`` is a client that hung up: it
    stops the turn as a stop would (:meth:`~dormant.TurnStream.stop`): the user's message and
    the text the client was sent are kept, the invocation ends ``stopped``; the iteration
    ends and the turn underneath is run to that end, which comes at its next check of the
    signal, unless another thread is iterating the run: that thread then sees the stop.
    ``hang_up()`` is the stop alone, from any thread. ``echo``: the client's
    ``RunAgentInput`` (or its JSON): ``RUN_STARTED`` and the run's end carry its
    ``threadId``, ``runId`` and ``parentRunId``, and ``RUN_STARTED.metadata`` the server's own
    (``sessionId``, ``dormantRunId``, ``dormantParentRunId``) beside ``invocationId``.
    ``result`` is the turn's result once it has ended;
    ``adapter`` the :class:`AgUIAdapter` in use once the run has started. ``request_id``
    names the request in the log record of a server-side failure, and in its ``RUN_ERROR``
    (whose message never carries the failure's own text: see :meth:`AgUIAdapter.finish`).
    ``remaining_time``: seconds the request has left (a Lambda invocation's), as
    :class:`~dormant.TurnStream` takes it: the turn ends as a retryable ``deadline`` failure,
    progress kept, before the platform would kill it.
    """

    def __init__(self, config: TurnConfig, request: HandlerInput | dict[str, Any], *,
                 request_id: str | None = None, positions: bool = False,
                 remaining_time: float | None = None,
                 echo: RunAgentInput | Mapping[str, Any] | None = None) -> None:
        self.turn = TurnStream(config, request, remaining_time=remaining_time)
        self.request_id = request_id
        self.positions = positions
        self._echo = _client_ids(echo)
        #: The stream position of the last event whose AG-UI events the client took (the
        #: ``seen`` of the stop a hang-up is).
        self._seen: int | None = None
        self.turn.capture_start = True  # the opening snapshots need the head at turn start
        self.adapter: AgUIAdapter | None = None
        self._yield_schemas = {  # (of every agent the handler may run: its hand-offs')
            name: tool.yield_schema.model_json_schema()
            for agent in reversed(config.agent.team().values())
            for name, tool in agent.tools.items() if tool.yield_schema is not None
        }
        self._client_tools = [name for name in _client_tool_names(request)
                              if name not in config.agent.tools]  # the agent's keep theirs
        self._gen: Generator[BaseEvent, None, None] | None = None

    @property
    def result(self) -> TurnResult | None:
        """The turn's :class:`~dormant.TurnResult` once the run has ended, else None."""
        return self.turn.result

    def abort(self) -> None:
        """Stop the turn (:meth:`~dormant.TurnStream.abort`): the run goes on to the ending
        the turn then reaches."""
        self.turn.abort()

    def hang_up(self) -> None:
        """The client is gone: stop the turn (from any thread), keeping what the client was
        sent (see the class docs)."""
        if self.turn.result is None:
            self.turn.stop(self._seen)

    def close(self) -> None:
        """Stop early (the client hung up): stop the turn as :meth:`hang_up` does, end the
        iteration, and let the turn run to the end its stop leads to."""
        turn = self.turn
        self.hang_up()
        started, self._gen = self._gen, self._gen or _nothing()
        if started is None:  # never iterated: the turn never ran
            return
        try:
            started.close()
        except ValueError:  # another thread is iterating the run: it runs into the abort
            return
        if turn.result is None:
            try:
                for _ in turn:  # the turn stops at its next check of the abort
                    pass
            except Exception:
                log.exception("the aborted turn failed while it stopped",
                              extra={"session_id": turn.session_id})

    def __iter__(self) -> AgUIRun:
        return self

    def __next__(self) -> BaseEvent:
        if self._gen is None:
            self._gen = self._drive()
        return next(self._gen)

    def _drive(self) -> Generator[BaseEvent, None, None]:
        turn = self.turn
        try:
            # Read up to the first event past the user messages (the one that opens or
            # reopens the invocation, if any): by then the session is loaded and the run's
            # ids are known. A turn that streams nothing (a queued message, a control, a
            # refusal) is read whole.
            opening: list[StreamEvent] = []
            for event in turn:
                opening.append(event)
                if event.type != "user":
                    break
            run_id, parent_run_id = run_ids(turn, opening)
            thread_id = turn.session_id or (turn.result.session_id if turn.result else "")
            metadata: dict[str, Any] = {}
            if self._echo is not None:
                metadata = {"sessionId": thread_id, "dormantRunId": run_id}
                if parent_run_id is not None:
                    metadata["dormantParentRunId"] = parent_run_id
                thread_id, run_id, parent_run_id = self._echo
            adapter = self.adapter = AgUIAdapter(thread_id, run_id, parent_run_id=parent_run_id,
                                                 invocation_id=invocation_of(turn, opening),
                                                 yield_schemas=self._yield_schemas,
                                                 client_tools=self._client_tools,
                                                 request_id=self.request_id,
                                                 positions=self.positions, metadata=metadata)
            yield adapter.run_started()
            start = turn.start_head
            if start is not None:
                yield adapter.state_snapshot(start.state)
                if start.parked == "tool" and turn.session is not None and any(
                        e.type == "invocation_resume" for e in opening):
                    loaded = turn.session.events[:start.seq - turn.session.first_seq]
                    yield adapter.messages_snapshot(loaded, start.step)
            for event in itertools.chain(opening, turn):
                yield from adapter.transform(event)
                # resumed: the client took this event's AG-UI events
                self._seen = event.seq if event.seq is not None else self._seen
            assert turn.result is not None
            yield from adapter.finish(turn.result)
        finally:
            if turn.result is None:  # closed early: the client is gone
                self.hang_up()


def _client_tool_names(request: HandlerInput | dict[str, Any]) -> list[str]:
    """The names of the tools the client offered this run (its run input's ``tools``)."""
    try:
        parsed = HandlerInput.model_validate(request)
    except ValidationError:  # the turn refuses the body, naming what is wrong
        return []
    return [tool.name for tool in parsed.input.client_tools or ()]


def _client_ids(echo: RunAgentInput | Mapping[str, Any] | None
                ) -> tuple[str, str, str | None] | None:
    """A client's ``threadId``, ``runId`` and ``parentRunId``, to echo (None: none given)."""
    if echo is None:
        return None
    if isinstance(echo, RunAgentInput):
        return echo.thread_id, echo.run_id, echo.parent_run_id
    thread, run, parent = echo.get("threadId"), echo.get("runId"), echo.get("parentRunId")
    if not isinstance(thread, str) or not isinstance(run, str):
        return None
    return thread, run, parent if isinstance(parent, str) else None


def _nothing() -> Generator[BaseEvent, None, None]:
    yield from ()


def run_ids(turn: TurnStream, opening: Sequence[StreamEvent]) -> tuple[str, str | None]:
    """The AG-UI ``runId`` and ``parentRunId`` of a turn (see the package docs), from the
    events read so far (``opening``) and the session the turn loaded.

    The run that starts an invocation is the invocation id, with no parent. A later run of
    the same invocation (it reopens an invocation parked on tools or on the next message,
    retries a failed one, or continues a paused one) is ``<invocation id>:<id of the event
    that reopened it>`` (``invocation_resume``, ``retry`` or ``resume``). A run that opens
    nothing but concerns an invocation (see :func:`invocation_of`: a message queued behind
    it, a control aimed at it) is ``<invocation id>:<fresh suffix>``. The parent of either is
    the run that last opened the invocation, as the loaded ledger shows it, else the
    invocation's first run. Any other run is the turn's own id, with no parent.
    """
    opener = _opener(turn, opening)
    if opener is not None and opener.type == "invocation_start":
        return opener.invocation_id or turn.invocation_id, None
    invocation = invocation_of(turn, opening)
    known = _known(turn, invocation)
    if opener is None and not known and invocation == turn.invocation_id:
        return invocation, None
    run_id = f"{invocation}:{opener.id if opener is not None else new_id('run')}"
    parent: str | None = invocation if known or opener is not None else None
    events = turn.session.events if turn.session is not None else []
    for event in reversed(events):
        if (event.invocation_id != invocation or not _opens(event)
                or (opener is not None and event.id == opener.id)):
            continue
        if event.type != "invocation_start":
            parent = f"{invocation}:{event.id}"
        break
    return run_id, parent


def invocation_of(turn: TurnStream, opening: Sequence[StreamEvent]) -> str:
    """The invocation a run belongs to (``RUN_STARTED.metadata.invocationId``): the one it
    opens or reopens. A run that opens none belongs to the invocation its result names when
    the session knows it (a stopped or interrupted invocation), else to the session's open
    invocation (the one a queued message waits behind), else to the invocation its result
    names (a control's target, running elsewhere), else to none: then it is the turn's own
    id."""
    opener = _opener(turn, opening)
    if opener is not None and opener.invocation_id is not None:
        return opener.invocation_id
    named = turn.result.invocation_id if turn.result is not None else None
    if named is not None and _known(turn, named):
        return named
    start = turn.start_head
    if start is not None and start.open_invocation is not None:
        return start.open_invocation
    return named or turn.invocation_id


def _opener(turn: TurnStream, opening: Sequence[StreamEvent]) -> StreamEvent | None:
    """The event that opened or reopened the run's invocation: streamed, or recorded by the
    request before the turn ran (a ``resume`` that continues a paused invocation)."""
    found = next((e for e in opening if _opens(e)), None)
    if found is None and turn.session is not None:
        found = next((e for e in turn.session.new_events if _opens(e)), None)
    return found


def _known(turn: TurnStream, invocation: str) -> bool:
    """Whether the session knows the invocation: open at turn start, or in its ledger."""
    start = turn.start_head
    if start is not None and start.open_invocation == invocation:
        return True
    events = turn.session.events if turn.session is not None else []
    return any(e.invocation_id == invocation for e in events)


def agui_handler(config: TurnConfig) -> Callable[..., AgUIRun]:
    """``handler(request, *, request_id=None, positions=False, remaining_time=None,
    echo=None) -> AgUIRun``: a thin loop over the turn, translated by :class:`AgUIAdapter`
    (``positions``: each event carries its stream position, ``rawEvent.seq``, which a stop's
    ``seen`` counts; ``remaining_time``: the request's deadline, and ``echo``: the client's
    ``RunAgentInput`` whose ids the run carries, see :class:`AgUIRun`; for the
    adapter's other options (steps, raw events, transformers, reasoning off) write the loop
    yourself)."""

    def handle(request: HandlerInput | dict[str, Any], *, request_id: str | None = None,
               positions: bool = False, remaining_time: float | None = None,
               echo: RunAgentInput | Mapping[str, Any] | None = None) -> AgUIRun:
        return AgUIRun(config, request, request_id=request_id, positions=positions,
                       remaining_time=remaining_time, echo=echo)

    return handle


def encode_sse(events: Iterable[BaseEvent]) -> Iterator[str]:
    """Frame AG-UI events for a ``text/event-stream`` response (``data: <json>`` + blank
    line each), with the protocol package's encoder."""
    encoder = EventEncoder()
    for event in events:
        yield encoder.encode(event)
