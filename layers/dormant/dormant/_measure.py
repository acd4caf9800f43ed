"""What a request came to, for whoever counts turns (``App.meter``).

:func:`measure` reads it off what the request already kept, once it ended: the
:class:`~dormant._turn_wire.TurnResult` (the outcome, the commit, whether work was handed
on) and the turn's stream events (each model call's start and end, with its usage; each
tool result). Nothing is measured on the turn's own path. The deployed functions count it
as CloudWatch metrics (:class:`dormant.aws.metrics.TurnMetrics`); any object with a
``record(measure)`` method will do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from dormant._timing import outcome_of
from dormant._turn_wire import TurnResult
from dormant.events import ModelEnd, ModelStart, StreamEvent, ToolResult

__all__ = ["Meter", "ModelCall", "TurnMeasure", "measure"]


@dataclass(frozen=True)
class ModelCall:
    """One model call of the turn: how long it took, the tokens it used."""

    latency_ms: int
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class TurnMeasure:
    """One request, measured. ``outcome``: ``completed``, ``yielded`` (waits on a person or
    a tool result), ``stopped``, ``paused``, ``interrupted``, ``deadline`` (cut by its
    deadline, progress kept), ``aborted`` (its caller hung up), ``failed`` (a failure on the
    server side: ``code`` says which), ``refused`` (the client's mistake, a 4xx), or, for a
    request that ran no turn, what it did (``queued``, ``accepted``, ``recorded``…).
    ``ran``: whether a turn ran (or the request failed trying); ``commit``: how it reached
    the store (``merged`` and ``superseded`` lost a race to another writer first);
    ``claims_refused``: claims another writer's progress refused before one landed."""

    outcome: str
    code: str | None = None
    commit: str | None = None
    ran: bool = True
    handed_on: bool = False
    drained: int = 0
    claims_refused: int = 0
    tool_errors: int = 0
    model_calls: tuple[ModelCall, ...] = ()

    @property
    def commit_conflict(self) -> bool:
        """Whether another writer landed first (the turn merged onto it, or was superseded)."""
        return self.commit in ("merged", "superseded")


class Meter(Protocol):
    """Where measured requests go (``App.meter``). Called once per request, after it ended;
    an exception it raises is logged and the request goes on."""

    def record(self, measure: TurnMeasure) -> None: ...


def measure(result: TurnResult, events: Sequence[StreamEvent], *, started: bool,
            claims_refused: int = 0) -> TurnMeasure:
    """The :class:`TurnMeasure` of a request that ended in ``result``, whose turn streamed
    ``events`` (``started``: whether the request started a turn at all)."""
    status, code = result.status, result.code
    outcome = outcome_of(status, code)
    ran = started or outcome in ("deadline", "aborted", "failed")
    opened: dict[int, int] = {}  # each model call's start, by step
    calls: list[ModelCall] = []
    tool_errors = 0
    for event in events:
        if isinstance(event, ModelStart):
            opened[event.step] = event.ts
        elif isinstance(event, ModelEnd):
            usage = event.usage
            begun = opened.pop(event.step, event.ts)
            calls.append(ModelCall(latency_ms=max(event.ts - begun, 0),
                                   input_tokens=usage.input_tokens,
                                   output_tokens=usage.output_tokens))
        elif isinstance(event, ToolResult) and event.error is not None \
                and not event.denied and not event.preliminary:
            tool_errors += 1
    return TurnMeasure(outcome=outcome, code=code if status == "error" else None,
                       commit=result.commit_status, ran=ran,
                       handed_on=bool(result.handed_on), drained=len(result.drained or ()),
                       claims_refused=claims_refused, tool_errors=tool_errors,
                       model_calls=tuple(calls))
