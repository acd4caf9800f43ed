"""What one request's turn took, as it runs: the :class:`Recorder`.

The request executor makes one per request. It times the store phases (load, claim, a
step's write-ahead, the commit), each model call (its first chunk, its end, its tokens, and
its cost by the app's price table, :class:`Price`) and each tool run, and hands the run loop
the :class:`~dormant.events.TurnTiming` it keeps on the event that ends the turn. The ledger
is where the console and ``dormant sessions show`` read it.

The records it builds are trusted (its own values): they are constructed, not validated.

A :class:`Sink` sees the same moments as they happen: the OpenTelemetry bridge
(:mod:`dormant._otel`) turns them into spans and metrics. With no sink the recorder only
reads the clock.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dormant._ids import now_ms
from dormant.errors import ConfigError, describe_validation, is_client_error
from dormant.events import (
    NO_USAGE,
    CallTiming,
    Event,
    InvocationStart,
    PhaseTiming,
    SpanRef,
    ToolTiming,
    TurnTiming,
    Usage,
)

__all__ = ["OTEL_MODULES", "CallRecorder", "Counters", "Price", "Prices", "Recorder", "Sink",
           "SinkSpan", "ToolRecorder", "otel_loaded", "outcome_of", "parked_spans",
           "price_table"]

#: A turn's outcome by its result's status (an error's is decided by its code).
_OUTCOMES = {"completed": "completed", "yielded_tool": "yielded",
             "yielded_message": "yielded", "stopped": "stopped", "paused": "paused",
             "interrupted": "interrupted"}

#: The OpenTelemetry modules an app that set it up has imported (dormant never does).
OTEL_MODULES = ("opentelemetry.trace", "opentelemetry.metrics")

#: A store's running totals on this thread: requests made, capacity units consumed.
Counters = tuple[int, float]


class Price(BaseModel):
    """What a model's tokens cost, in your currency per million tokens: ``input``,
    ``output`` (reasoning included), and ``cached`` input (tokens the provider read from its
    prompt cache; None: the input price)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached: float | None = Field(default=None, ge=0)

    def cost(self, usage: Usage) -> float:
        """What ``usage`` costs at this price."""
        cached = min(usage.cached_tokens, usage.input_tokens)
        cached_price = self.input if self.cached is None else self.cached
        total = ((usage.input_tokens - cached) * self.input + cached * cached_price
                 + usage.output_tokens * self.output)
        return round(total / 1_000_000, 10)


#: A price table: the model's name (as the agent's model names it, or as the provider
#: answered) to its :class:`Price`.
Prices = Mapping[str, Price]


def otel_loaded() -> bool:
    """Whether this process imported OpenTelemetry's API (only then is there a provider to
    look for, and the bridge, :mod:`dormant._otel`, worth importing)."""
    modules = sys.modules
    return OTEL_MODULES[0] in modules or OTEL_MODULES[1] in modules


def outcome_of(status: str, code: str | None = None) -> str:
    """A request's outcome, by its result's ``status`` (or, for a request that ran no turn,
    what it did) and an error's ``code``: ``completed``, ``yielded``, ``stopped``,
    ``paused``, ``interrupted``, ``deadline``, ``aborted``, ``refused`` (the client's
    mistake), ``failed`` (the server's), or what a request that ran none did."""
    if status == "error":
        return code if code in ("deadline", "aborted") else \
            "refused" if is_client_error(code) else "failed"
    return _OUTCOMES.get(status, status)


def price_table(prices: Mapping[str, Price | Mapping[str, Any]] | None) -> dict[str, Price]:
    """``App(prices=...)`` checked: each value a :class:`Price` or a mapping of its fields.
    Raises :class:`~dormant.errors.ConfigError` naming the model whose price does not fit."""
    table: dict[str, Price] = {}
    for model, price in (prices or {}).items():
        if not isinstance(model, str) or not model:
            raise ConfigError(f"prices: a model name must be a non-empty string, not "
                              f"{model!r}")
        try:
            table[model] = price if isinstance(price, Price) else Price.model_validate(price)
        except ValidationError as error:
            raise ConfigError(f"prices[{model!r}]: {describe_validation(error)}") from None
    return table


#: The most spans a request's span links to (the latest parkings of its invocation).
MAX_LINKS = 8


def parked_spans(events: Sequence[Event], invocation_id: str | None
                 ) -> list[tuple[SpanRef, str]]:
    """The spans of the requests that parked ``invocation_id`` before (``parked``: an
    ending's ``timing.span``) or claimed its reopening (``claimed``: a reopening's
    ``span``), the latest first: what a request carrying the invocation on links to. The
    search ends where the invocation began, or at an earlier invocation's event."""
    refs: list[tuple[SpanRef, str]] = []
    if invocation_id is None:
        return refs
    for event in reversed(events):
        if event.invocation_id != invocation_id:
            if event.invocation_id is not None:
                break  # an earlier invocation's: this one is not in the window (a fresh one)
            continue  # (an append between its requests: a decision, an answer)
        if isinstance(event, InvocationStart) or len(refs) == MAX_LINKS:
            break
        timing = getattr(event, "timing", None)
        claimed: SpanRef | None = getattr(event, "span", None)
        if timing is not None and timing.span is not None:
            refs.append((timing.span, "parked"))
        elif claimed is not None:
            refs.append((claimed, "claimed"))
    return refs


class SinkSpan(Protocol):
    """One span of a :class:`Sink` (an OpenTelemetry span, through the bridge)."""

    def child(self, name: str, attributes: Mapping[str, Any], *,
              client: bool = False) -> SinkSpan: ...

    def set(self, attributes: Mapping[str, Any]) -> None: ...

    def link(self, ref: SpanRef, why: str) -> None: ...

    def ref(self) -> SpanRef | None: ...

    def current(self) -> contextlib.AbstractContextManager[None]:
        """Make this span the current one while the block runs (a tool's own spans nest)."""
        ...

    def end(self, error: str | None = None) -> None: ...


class Sink(Protocol):
    """Where a request's spans and metrics go as it runs. ``content``: whether message
    contents may be recorded (the conventions' capture switch; off by default)."""

    content: bool

    def turn(self, agent: str, attributes: Mapping[str, Any]) -> SinkSpan:
        """Start the request's ``invoke_agent`` span (a child of the current span, if any)."""
        ...

    def call_done(self, call: CallTiming, seconds: float) -> None:
        """A model call ended: its tokens and duration, as metrics."""
        ...

    def turn_done(self, agent: str, outcome: str, seconds: float) -> None:
        """The request ended: its duration by outcome, as a metric."""
        ...


class Recorder:
    """One request's timings (see the module). ``clock``: epoch milliseconds (the app's);
    ``prices``: the app's price table; ``sink``: where spans go (None: none); ``store``:
    the store's name, as the phases' spans say it; ``counters``: the store's running totals
    on this thread (None: it reports none)."""

    def __init__(self, *, agent: str = "", clock: Callable[[], int] = now_ms,
                 prices: Prices | None = None, sink: Sink | None = None, store: str = "",
                 counters: Callable[[], Counters] | None = None) -> None:
        self.agent = agent
        self.store = store
        self.clock = clock
        self.prices = prices or {}
        self.sink = sink
        self.counters = counters
        self.started = clock()
        self.phases: list[PhaseTiming] = []
        self.calls: list[CallTiming] = []
        self.tools: list[ToolTiming] = []
        self.usage = NO_USAGE
        self.span: SinkSpan | None = None
        if sink is not None:
            self.span = sink.turn(agent, {"gen_ai.operation.name": "invoke_agent",
                                          "gen_ai.agent.name": agent})

    @property
    def content(self) -> bool:
        """Whether message contents go to the trace."""
        return self.sink is not None and self.sink.content

    def offset(self) -> int:
        """Milliseconds since the request began."""
        return max(self.clock() - self.started, 0)

    # --- the request -----------------------------------------------------------------------

    def phase(self, name: str) -> Phase:
        """Time a store phase (``load``, ``claim``, ``write_ahead``, ``commit``) as a ``with``
        block; what it says of itself goes in :attr:`Phase.attributes`."""
        return Phase(self, name)

    def opened(self, *, session_id: str, invocation_id: str | None,
               links: Iterable[tuple[SpanRef, str]] = ()) -> None:
        """The request knows its session and invocation: the turn's span says so and links
        to the spans of the requests that parked the invocation or claimed it before (each
        with why: ``parked``, ``claimed``; :func:`parked_spans`)."""
        span = self.span
        if span is None:
            return
        attributes: dict[str, Any] = {"gen_ai.conversation.id": session_id}
        if invocation_id is not None:
            attributes["dormant.invocation.id"] = invocation_id
        span.set(attributes)
        own = span.ref()
        for ref, why in links:
            if ref != own:  # (its own claim, committed before the turn runs)
                span.link(ref, why)

    def span_ref(self) -> SpanRef | None:
        """The request's span, for a later request to link to (None: not traced)."""
        return self.span.ref() if self.span is not None else None

    def timing(self) -> TurnTiming:
        """The turn's timing so far, for the event that ends it."""
        return TurnTiming(
            started=self.started, elapsed_ms=self.offset(), phases=list(self.phases),
            model_calls=list(self.calls), tools=list(self.tools), usage=self.usage,
            span=self.span_ref())

    def close(self, *, outcome: str, commit: str | None = None,
              code: str | None = None) -> None:
        """The request ended (``outcome`` as :class:`~dormant._measure.TurnMeasure` says it;
        ``commit``: how it reached the store; ``code``: a failure's)."""
        sink, span = self.sink, self.span
        if sink is None or span is None:
            return
        attributes: dict[str, Any] = {"dormant.turn.outcome": outcome}
        if commit is not None:
            attributes["dormant.commit.status"] = commit
        usage = self.usage
        if self.calls:
            attributes.update(_usage_attributes(usage))
        if usage.cost is not None:
            attributes["dormant.usage.cost"] = usage.cost
        span.set(attributes)
        span.end(code if outcome in ("failed", "deadline", "aborted") else None)
        self.span = None
        sink.turn_done(self.agent, outcome, self.offset() / 1000)

    # --- model calls and tools -------------------------------------------------------------

    def call(self, step: int, *, provider: str, model: str) -> CallRecorder:
        """Time one model call of step ``step``."""
        return CallRecorder(self, step, provider, model)

    def tool(self, call_id: str, name: str, *, description: str | None = None) -> ToolRecorder:
        """Time one tool run."""
        return ToolRecorder(self, call_id, name, description)

    def price(self, usage: Usage, *names: str | None) -> Usage:
        """``usage`` with its cost, by the first of ``names`` the price table has."""
        for name in names:
            price = self.prices.get(name) if name else None
            if price is not None:
                return usage.model_copy(update={"cost": price.cost(usage)})
        return usage


class Phase:
    """A store phase being timed (:meth:`Recorder.phase`)."""

    def __init__(self, recorder: Recorder, name: str) -> None:
        self.recorder = recorder
        self.name = name
        self.attributes: dict[str, Any] = {}

    def __enter__(self) -> Phase:
        recorder = self.recorder
        self.start = recorder.offset()
        self.before = recorder.counters() if recorder.counters is not None else None
        span = recorder.span
        self.span = span.child(f"dormant.{self.name}", {"dormant.phase": self.name,
                                                        "dormant.store": recorder.store}) \
            if span is not None else None
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        recorder = self.recorder
        requests = capacity = None
        if self.before is not None and recorder.counters is not None:
            after = recorder.counters()
            requests, capacity = after[0] - self.before[0], after[1] - self.before[1]
        duration = recorder.offset() - self.start
        if self.name != "commit":  # (the commit comes after the event that keeps the timing)
            recorder.phases.append(PhaseTiming(
                name=self.name, start_ms=self.start, duration_ms=duration, requests=requests,
                capacity=round(capacity, 3) if capacity else None))
        span = self.span
        if span is not None:
            attributes = dict(self.attributes)
            if requests is not None:
                attributes["dormant.store.requests"] = requests
            if capacity:
                attributes["aws.dynamodb.consumed_capacity"] = round(capacity, 3)
            span.set(attributes)
            span.end(kind.__name__ if kind is not None else None)


class CallRecorder:
    """One model call being timed (:meth:`Recorder.call`)."""

    def __init__(self, recorder: Recorder, step: int, provider: str, model: str) -> None:
        self.recorder = recorder
        self.step = step
        self.provider = provider
        self.model = model
        self.start = recorder.offset()
        self.first: int | None = None
        self.response_model: str | None = None
        self.response_id: str | None = None
        self.finish_reason: str | None = None
        self.span: SinkSpan | None = None
        span = recorder.span
        if span is not None:
            attributes: dict[str, Any] = {"gen_ai.operation.name": "chat",
                                          "gen_ai.request.model": model}
            if provider:
                attributes["gen_ai.provider.name"] = provider
            self.span = span.child(f"chat {model}".rstrip(), attributes, client=True)

    def chunk(self) -> None:
        """A chunk arrived (the first one sets the time to first token)."""
        if self.first is None:
            self.first = self.recorder.offset() - self.start

    def response(self, *, model: str | None = None, response_id: str | None = None,
                 finish_reason: str | None = None) -> None:
        """What the provider said of its response."""
        self.response_model = model or self.response_model
        self.response_id = response_id or self.response_id
        self.finish_reason = finish_reason or self.finish_reason

    def content(self, attributes: Mapping[str, Any]) -> None:
        """Message contents for the call's span (only when :attr:`Recorder.content`)."""
        if self.span is not None and self.recorder.content:
            self.span.set(attributes)

    def end(self, usage: Usage, *, error: str | None = None) -> Usage:
        """The call ended (``error``: the code of a failed one); ``usage`` with its cost."""
        recorder = self.recorder
        usage = recorder.price(usage, self.model, self.response_model)
        timing = CallTiming(
            step=self.step, provider=self.provider, model=self.model,
            response_model=self.response_model, response_id=self.response_id,
            finish_reason=self.finish_reason, start_ms=self.start,
            first_token_ms=self.first, duration_ms=recorder.offset() - self.start,
            usage=usage, error=error)
        recorder.calls.append(timing)
        recorder.usage = recorder.usage + usage
        span = self.span
        if span is not None:
            attributes = _usage_attributes(usage)
            if self.response_model:
                attributes["gen_ai.response.model"] = self.response_model
            if self.response_id:
                attributes["gen_ai.response.id"] = self.response_id
            if self.finish_reason:
                attributes["gen_ai.response.finish_reasons"] = (self.finish_reason,)
            if usage.cost is not None:
                attributes["dormant.usage.cost"] = usage.cost
            if self.first is not None:
                attributes["dormant.time_to_first_chunk_ms"] = self.first
            span.set(attributes)
            span.end(error)
            self.span = None
        if recorder.sink is not None:
            recorder.sink.call_done(timing, timing.duration_ms / 1000)
        return usage


class ToolRecorder:
    """One tool run being timed (:meth:`Recorder.tool`)."""

    def __init__(self, recorder: Recorder, call_id: str, name: str,
                 description: str | None) -> None:
        self.recorder = recorder
        self.call_id = call_id
        self.name = name
        self.start = recorder.offset()
        self.span: SinkSpan | None = None
        span = recorder.span
        if span is not None:
            attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                          "gen_ai.tool.call.id": call_id, "gen_ai.tool.type": "function"}
            if description:
                attributes["gen_ai.tool.description"] = description
            self.span = span.child(f"execute_tool {name}", attributes)

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """The tool's code runs in this block (its own spans are the tool span's children)."""
        if self.span is None:
            yield
            return
        with self.span.current():
            yield

    def content(self, attributes: Mapping[str, Any]) -> None:
        """Arguments and result for the tool's span (only when :attr:`Recorder.content`)."""
        if self.span is not None and self.recorder.content:
            self.span.set(attributes)

    def end(self, outcome: str = "result", *, error_type: str | None = None,
            approved: bool | None = None) -> None:
        """The run ended: ``result``, ``error``, ``yielded``, ``approval``, ``denied`` or
        ``deferred`` (``error_type``: the exception's class name, for an error;
        ``approved``: True, it ran once a person approved it; False, a person denied it)."""
        recorder = self.recorder
        recorder.tools.append(ToolTiming(
            call_id=self.call_id, name=self.name, start_ms=self.start,
            duration_ms=recorder.offset() - self.start, outcome=outcome,
            error_type=error_type))
        span = self.span
        if span is not None:
            attributes: dict[str, Any] = {"dormant.tool.outcome": outcome}
            if approved is not None:
                attributes["dormant.tool.approved"] = approved
            span.set(attributes)
            span.end((error_type or "tool_error") if outcome == "error" else None)
            self.span = None


def _usage_attributes(usage: Usage) -> dict[str, Any]:
    attributes: dict[str, Any] = {"gen_ai.usage.input_tokens": usage.input_tokens,
                                  "gen_ai.usage.output_tokens": usage.output_tokens}
    if usage.cached_tokens:
        attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cached_tokens
    if usage.reasoning_tokens:
        attributes["gen_ai.usage.reasoning.output_tokens"] = usage.reasoning_tokens
    return attributes
