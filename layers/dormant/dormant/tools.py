"""Tools: what an agent can call, and the context a tool runs in."""

from __future__ import annotations

import contextvars
import inspect
import json
import re
import threading
import time
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, get_type_hints, runtime_checkable

from pydantic import BaseModel, ConfigDict, create_model

from dormant._inputs import NOT_IN_TOOL_NAME, TOOL_NAME_PATTERN
from dormant.errors import ConfigError, DormantError

if TYPE_CHECKING:
    from dormant.session import Session

__all__ = [
    "APPROVAL_POLICIES",
    "TOOL_NAME",
    "Signal",
    "Tool",
    "ToolContext",
    "ToolSource",
    "handler_context",
    "make_tool",
    "run_with_handler_context",
]

T = TypeVar("T")


class Signal:
    """A cooperative abort flag. Long tools should check ``aborted`` and stop."""

    __slots__ = ("_event", "deadline", "stop_rev", "stop_seen", "stopped")

    def __init__(self, timeout: float | None = None) -> None:
        self._event: threading.Event | None = None  # made on first need: most turns never
        #: ``time.monotonic()`` past which the turn counts as aborted (its timeout).
        self.deadline = None if timeout is None else time.monotonic() + timeout
        #: True once a stop (from any process, through the session's control record) asked
        #: the turn to end; ``stop_seen`` is the stream frontier the client had rendered and
        #: ``stop_rev`` the control revision the stop came with.
        self.stopped = False
        self.stop_seen: int | None = None
        self.stop_rev = 0

    @property
    def _flag(self) -> threading.Event:
        if self._event is None:
            self._event = threading.Event()
        return self._event

    @property
    def aborted(self) -> bool:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self._flag.set()
        return self._event is not None and self._event.is_set()

    @property
    def expired(self) -> bool:
        """True once the deadline passed (the turn ran out of time rather than being aborted)."""
        return self.deadline is not None and time.monotonic() >= self.deadline

    def remaining(self) -> float | None:
        """Seconds left before the deadline (None: no deadline)."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.monotonic())

    def abort(self) -> None:
        self._flag.set()

    def stop(self, seen: int | None = None, rev: int = 0) -> None:
        """A stop: abort, remembering the client's frontier (``seen``) for the rewind."""
        self.stop_seen, self.stop_rev, self.stopped = seen, rev, True
        self._flag.set()

    def raise_if_aborted(self) -> None:
        if self.aborted:
            raise Aborted("the turn was aborted")

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds, waking early on abort or deadline. True if aborted."""
        remaining = self.remaining()
        if remaining is not None and remaining < timeout:
            self._flag.wait(remaining)
            return self.aborted
        return self._flag.wait(timeout)


class Aborted(DormantError):
    """The turn was aborted (by ``.abort()`` or its timeout)."""

    code = "aborted"


@dataclass
class ToolContext:
    """What a tool's ``prepare`` / ``execute`` / ``finalize`` receive.

    ``args``: the validated schema instance; ``state``: the session's state (mutate it);
    ``input``: the validated ``yield_schema`` instance after a pause, else None; ``call_id``:
    the call's id, the idempotency key for side effects; ``attempt``: 1 for a first run,
    2 after the first retry of the invocation (``input.retry``), and so on; ``event``: the
    ledger event that triggered the turn (the user message, the timer firing, the answer…);
    ``signal``: set when the turn is stopped or aborted (long tools should check it).
    """

    args: Any
    state: dict[str, Any]
    call_id: str
    session: Session
    tool: str
    invocation_id: str | None = None
    input: Any = None
    attempt: int = 1
    signal: Signal = field(default_factory=Signal)
    event: Any = None


#: The context of the tool running on this thread (``handler_context()`` reads it).
CURRENT_TOOL: contextvars.ContextVar[ToolContext] = contextvars.ContextVar("dormant_tool_context")


def handler_context() -> ToolContext:
    """The running tool's context, from anywhere below its ``execute``.

    Raises :class:`dormant.errors.DormantError` outside a tool execution.
    """
    try:
        return CURRENT_TOOL.get()
    except LookupError:
        raise DormantError("handler_context() called outside a tool execution") from None


def run_with_handler_context(ctx: ToolContext, fn: Callable[[], T]) -> T:
    """Call ``fn`` with ``handler_context()`` returning ``ctx`` (for tests of tool helpers)."""
    token = CURRENT_TOOL.set(ctx)
    try:
        return fn()
    finally:
        CURRENT_TOOL.reset(token)


Step = Callable[[ToolContext], Any]


@dataclass(frozen=True, eq=False)
class Tool:
    """A tool an agent may call. Build it with ``app.tool(...)``."""

    name: str
    description: str
    schema: type[BaseModel]
    yield_schema: type[BaseModel] | None = None
    prepare: Step | None = None
    execute: Step | None = None
    finalize: Step | None = None
    #: The call's result comes from outside the turn (a provider-executed tool, a long job,
    #: a callback): calling it parks the turn until trusted code supplies the result.
    deferred: bool = False
    #: The arguments' JSON Schema as another system gave it (an MCP server's ``inputSchema``):
    #: sent to the model as it is, and the arguments are checked against it
    #: (:func:`dormant._schema.schema_errors`) instead of through ``schema``; the tool then
    #: receives them as a dict (``ToolContext.args``). None: ``schema`` is the contract.
    json_schema: dict[str, Any] | None = None
    #: The tool's own metadata (a JSON object, ``app.tool(..., metadata={...})``): recorded on
    #: each of its calls (``tool_call.tool_metadata``) and shown with them; never sent to a
    #: model as part of the tool's spec.
    metadata: dict[str, Any] | None = None
    #: The agent this tool runs (``Agent.as_tool``): a call runs it as a sub-agent inside
    #: the caller's turn, and its final reply is the call's result. None: an ordinary tool.
    agent: Any = None
    #: The agent this tool delegates to (``Agent.as_delegate``): a call is deferred, and the
    #: agent runs it in a child session once the caller's turn has committed; the child's
    #: end is the call's result. None: not a delegation.
    delegate: Any = None

    @property
    def yields(self) -> bool:
        return self.yield_schema is not None

    def parameters(self) -> dict[str, Any]:
        """The JSON Schema of the arguments, as sent to a model."""
        if self.json_schema is not None:
            return self.json_schema
        return _schema_cache(self.schema)

    def input_schema(self) -> dict[str, Any] | None:
        """The JSON Schema of the answer a yielding tool waits for (its ``yield_schema``), as
        its ``tool_yield`` event records it; None for a tool that does not yield."""
        return None if self.yield_schema is None else _schema_cache(self.yield_schema)


#: What an approval policy may be (``tool_approval``, ``MCPServer(approval=...)``): one of
#: these, or a function of the validated arguments returning one of them.
APPROVAL_POLICIES = ("user-approval", "approved")


#: What every model accepts as a tool name (Bedrock's rule, and OpenAI's): an agent's own tool
#: must be named so; an MCP server's tools are mapped to it (:mod:`dormant.mcp`).
TOOL_NAME = re.compile(TOOL_NAME_PATTERN)
#: A character no tool name may hold (sanitising replaces each with ``_``).
NOT_IN_NAME = re.compile(NOT_IN_TOOL_NAME)


@runtime_checkable
class ToolSource(Protocol):
    """Tools an agent gets from elsewhere (an MCP server: :class:`dormant.mcp.MCPServer`),
    listed beside its own in ``app.agent(tools=[...])``.

    The agent asks ``list_tools`` when a turn first needs its tools, never when it is built
    (that is a Lambda cold start), and keeps what it got for the life of the process. A
    source that cannot list raises :class:`dormant.errors.ToolSourceUnavailable`: the turn
    fails before any model call, and the next turn asks again.
    """

    #: Names the source in errors and logs (never a credential).
    label: str
    #: Tool name -> approval policy, as for the agent's ``tool_approval``.
    approval: Mapping[str, Any]

    def list_tools(self) -> Sequence[Tool]:
        """The source's tools (a source may cache them; the agent does too)."""
        ...


_SCHEMAS: dict[type[BaseModel], dict[str, Any]] = {}


def _schema_cache(model: type[BaseModel]) -> dict[str, Any]:
    schema = _SCHEMAS.get(model)
    if schema is None:
        schema = model.model_json_schema()
        _SCHEMAS[model] = schema
    return schema


def make_tool(
    *,
    name: str,
    description: str = "",
    schema: type[BaseModel] | None = None,
    yield_schema: type[BaseModel] | None = None,
    prepare: Step | None = None,
    execute: Step | None = None,
    finalize: Step | None = None,
    deferred: bool = False,
    metadata: Mapping[str, Any] | None = None,
) -> Tool:
    """Validate a tool declaration (the explicit form of ``app.tool``).

    ``deferred=True``: the call's result comes from outside the turn; calling it parks the
    turn (``yielded_tool``) until trusted code supplies the result
    (``session.input.tool_result``). It takes no ``execute``, ``yield_schema``, ``prepare``
    or ``finalize``.

    ``execute`` may be a generator function: each value it yields is a preliminary output
    (a ``tool_result`` event with ``preliminary=True``, not what the model reads as the
    call's result), and the value it returns is the call's result.

    ``metadata``: a JSON object recorded on every call of the tool (``tool_call.tool_metadata``).
    """
    if not name or not isinstance(name, str):
        raise ConfigError("a tool needs a name")
    if not TOOL_NAME.fullmatch(name):
        raise ConfigError(f"tool {name!r}: a tool name must be 1 to 64 characters of a-z, A-Z, "
                          "0-9, _ and - (Bedrock and OpenAI refuse any other, so every turn "
                          f"offering it would fail); name it, say, {_suggested(name)!r}")
    kept = _metadata(name, metadata)
    if deferred:
        given = [what for what, value in (("execute", execute), ("yield_schema", yield_schema),
                                          ("prepare", prepare), ("finalize", finalize))
                 if value is not None]
        if given:
            raise ConfigError(f"tool {name!r} is deferred: its result comes from outside the "
                              f"turn, so it takes no {', '.join(given)}")
    elif execute is None and yield_schema is None:
        raise ConfigError(f"tool {name!r} needs an execute or a yield_schema")
    for what, step in (("prepare", prepare), ("finalize", finalize)):
        if inspect.isgeneratorfunction(step):
            raise ConfigError(f"tool {name!r}: {what} cannot be a generator function "
                              "(only execute may yield preliminary outputs)")
    if schema is None:
        schema = create_model(f"{name}_args", __config__=ConfigDict(extra="forbid"))
    _require_model(name, "schema", schema)
    if yield_schema is not None:
        _require_model(name, "yield_schema", yield_schema)
    return Tool(name=name, description=description, schema=schema, yield_schema=yield_schema,
                prepare=prepare, execute=execute, finalize=finalize, deferred=deferred,
                metadata=kept)


def _metadata(tool: str, metadata: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``metadata`` as the JSON object the ledger keeps (a copy), or a clear error."""
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping) or not all(isinstance(k, str) for k in metadata):
        raise ConfigError(f"tool {tool!r}: metadata must be a JSON object (a dict with string "
                          f"keys), got {type(metadata).__name__}")
    try:
        copied: dict[str, Any] = json.loads(json.dumps(dict(metadata), allow_nan=False))
    except (TypeError, ValueError) as error:
        raise ConfigError(f"tool {tool!r}: metadata must be JSON ({error})") from error
    return copied


def _suggested(name: str) -> str:
    return (NOT_IN_NAME.sub("_", name) or "_")[:64]


def _require_model(tool: str, what: str, value: Any) -> None:
    if not (isinstance(value, type) and issubclass(value, BaseModel)):
        raise ConfigError(f"tool {tool!r}: {what} must be a pydantic model class, got {value!r}")


def tool_from_function(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    yield_schema: type[BaseModel] | None = None,
    prepare: Step | None = None,
    finalize: Step | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Tool:
    """The decorator form: the schema comes from ``fn``'s typed signature.

    A parameter annotated ``ToolContext`` receives the context; every other parameter is an
    argument the model supplies. The docstring's first paragraph is the description. A
    generator function (say ``-> Iterator[dict]``) yields preliminary outputs and returns
    its result (see :func:`make_tool`).
    """
    tool_name = name or fn.__name__
    hints = _parameter_hints(fn)
    fields: dict[str, Any] = {}
    ctx_param: str | None = None
    for param in inspect.signature(fn).parameters.values():
        annotation = hints.get(param.name, Any)
        if annotation is ToolContext:
            ctx_param = param.name
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ConfigError(f"tool {tool_name!r}: *args/**kwargs cannot become a schema")
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, default)
    schema = create_model(f"{tool_name}_args", __config__=ConfigDict(extra="forbid"), **fields)
    doc = inspect.getdoc(fn) or ""
    summary = description if description is not None else doc.split("\n\n")[0].strip()

    def execute(ctx: ToolContext) -> Any:
        kwargs = {key: getattr(ctx.args, key) for key in fields}
        if ctx_param is not None:
            kwargs[ctx_param] = ctx
        return fn(**kwargs)

    return make_tool(name=tool_name, description=summary, schema=schema,
                     yield_schema=yield_schema, prepare=prepare, execute=execute,
                     finalize=finalize, metadata=metadata)


def _parameter_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """``fn``'s resolved annotations. Only the parameters' are needed: if the return
    annotation names a type the function's module imports for type checking only (a
    generator tool's ``Iterator[...]``, say), resolve the parameters' without it."""
    try:
        return get_type_hints(fn)
    except NameError:
        target = inspect.unwrap(fn)
        annotations = getattr(target, "__annotations__", None)
        if not isinstance(annotations, dict) or "return" not in annotations:
            raise
        shim = types.FunctionType((lambda: None).__code__, getattr(target, "__globals__", {}))
        shim.__annotations__ = {k: v for k, v in annotations.items() if k != "return"}
        return get_type_hints(shim)
