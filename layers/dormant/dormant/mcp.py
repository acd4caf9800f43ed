"""MCP tools: a Model Context Protocol server's tools as an agent's, over streamable HTTP.

``MCPServer(url)`` is a tool source (:class:`dormant.tools.ToolSource`): list it beside an
agent's tools. Its tools are listed once per process, on the first turn that needs them, and
each becomes a :class:`dormant.tools.Tool` whose arguments are the server's ``inputSchema``.
A call carries the dormant call id as its idempotency key, in the request's ``_meta`` under
:data:`IDEMPOTENCY_KEY`, so a server can run a rerun call (a retry, a takeover) once.

The ``mcp`` package (``pip install 'dormant[mcp]'``) is imported only when a server is
connected to: an app's import and its agents' build (a Lambda cold start) never load it.
"""

from __future__ import annotations

import asyncio
import importlib.util
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar, cast
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict

from dormant.errors import ConfigError, DormantError, ToolSourceUnavailable
from dormant.tools import APPROVAL_POLICIES, Aborted, Signal, Tool, ToolContext

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from mcp import Client
    from mcp.client.context import ClientRequestContext
    from mcp_types import (
        CallToolResult,
        ContentBlock,
        ElicitRequestParams,
        ElicitResult,
        RequestParamsMeta,
    )
    from mcp_types import Tool as ListedTool

__all__ = ["IDEMPOTENCY_KEY", "MCPServer"]

#: The ``_meta`` key of a ``tools/call`` request that holds the dormant call id: the same for
#: every run of one call (a retry, a takeover after a crash, an approval decided in another
#: process), so a server that keys its side effect on it does it once.
IDEMPOTENCY_KEY = "dormant/idempotency_key"
#: Seconds the listing may take (it runs before the turn's first model call).
LIST_TIMEOUT = 10.0
#: Seconds a call may take when the turn has no deadline.
CALL_TIMEOUT = 300.0
#: How often a running call looks at the turn's signal (a stop, the deadline).
ABORT_POLL = 0.05
#: Pages of ``tools/list`` read at most (a server whose cursor never ends cannot hang a turn).
MAX_PAGES = 100

Headers = Mapping[str, str] | Callable[[], Mapping[str, str]]
T = TypeVar("T")


class _Arguments(BaseModel):
    """The pydantic face of an MCP tool's arguments: anything; the server's JSON Schema
    (``Tool.json_schema``) is what they are checked against."""

    model_config = ConfigDict(extra="allow")


class _CallFailed(Exception):
    """A call the server refused or failed: the tool phase makes it the call's error."""


class MCPServer:
    """The tools of an MCP server reached over streamable HTTP, as a tool source.

    ``headers``: HTTP headers sent with each request (``Authorization``, say), or a function
    returning them, called for each connection (so a secret is read when needed; header values
    are never logged). ``tools``: the names of the server's tools the agent may use (None: all
    it lists). ``approval``: tool name -> ``"user-approval"`` | ``"approved"`` | a function of
    the arguments (a dict), as for the agent's ``tool_approval`` (which may name these tools
    too, and wins).

    A call's ``isError`` result or JSON-RPC error is the call's error (the model sees it; the
    turn goes on). A server that cannot list its tools fails the turn before any model call
    (:class:`dormant.errors.ToolSourceUnavailable`, retryable). An elicitation the server asks
    for mid-call is declined (see the "MCP tools" section of ``docs/models.md``).
    """

    def __init__(self, url: str, *, headers: Headers | None = None,
                 tools: Sequence[str] | None = None,
                 approval: Mapping[str, Any] | None = None) -> None:
        if importlib.util.find_spec("mcp") is None:  # finds it, does not import it
            raise ConfigError("MCPServer needs the mcp package: pip install 'dormant[mcp]'")
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"MCPServer needs an http(s) URL, got {_shown(url)}")
        if headers is not None and not callable(headers) and not isinstance(headers, Mapping):
            raise ConfigError("MCPServer(headers=...) takes a dict or a function returning one")
        if tools is not None and (isinstance(tools, str)
                                  or not all(isinstance(t, str) and t for t in tools)):
            raise ConfigError("MCPServer(tools=...) takes a list of tool names")
        self.url = url
        #: The server in errors and logs: scheme, host, port and path; no credentials, no query.
        self.label = _label(url)
        self.allowed: frozenset[str] | None = None if tools is None else frozenset(tools)
        self.approval: dict[str, Any] = dict(approval or {})
        for name, policy in self.approval.items():
            if not callable(policy) and policy not in APPROVAL_POLICIES:
                raise ConfigError(f"{self!r}: the approval policy for {name!r} must be "
                                  "'user-approval', 'approved' or a function of the arguments")
            if self.allowed is not None and name not in self.allowed:
                raise ConfigError(f"{self!r}: approval names {name!r}, which tools= leaves out")
        self._headers = headers
        self._tools: tuple[Tool, ...] | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"MCPServer({self.label})"

    # --- listing -----------------------------------------------------------------------------

    def list_tools(self) -> Sequence[Tool]:
        """The server's tools (those ``tools=`` allows), listed on the first call and kept for
        the life of the process. Raises :class:`ToolSourceUnavailable` if the server cannot
        be reached or listed; nothing is kept then, and the next call tries again."""
        with self._lock:
            if self._tools is None:
                self._tools = self._listed()
            return self._tools

    def _listed(self) -> tuple[Tool, ...]:
        try:
            listed = _run_async(self._list)
        except DormantError:
            raise
        except Exception as error:  # unreachable, refused, timed out, not an MCP server
            raise ToolSourceUnavailable(self.label, self._reason(error)) from None
        by_name = {tool.name: tool for tool in listed}
        missing = sorted((self.allowed or frozenset()) - set(by_name))
        if missing:
            raise ToolSourceUnavailable(self.label, f"it lists no tool named {missing}")
        return tuple(self._tool(tool) for name, tool in by_name.items()
                     if self.allowed is None or name in self.allowed)

    async def _list(self) -> list[ListedTool]:
        import anyio

        tools: list[ListedTool] = []
        with anyio.fail_after(LIST_TIMEOUT):
            async with self._client(LIST_TIMEOUT) as client:
                cursor: str | None = None
                for _ in range(MAX_PAGES):
                    page = await client.list_tools(cursor=cursor)
                    tools += page.tools
                    cursor = page.next_cursor
                    if cursor is None:
                        break
        return tools

    def _tool(self, listed: ListedTool) -> Tool:
        name = listed.name

        def execute(ctx: ToolContext) -> Any:
            return self.call(name, ctx.args, ctx.call_id, ctx.signal)

        return Tool(name=name, description=listed.description or "", schema=_Arguments,
                    execute=execute, json_schema=dict(listed.input_schema))

    # --- calling -----------------------------------------------------------------------------

    def call(self, name: str, args: Any, call_id: str, signal: Signal) -> Any:
        """Call tool ``name`` on the server (``tools/call``) with ``call_id`` as its
        idempotency key, within the turn's time left; return its result (its
        ``structuredContent``, else its text). Raises for an error result, a JSON-RPC error
        or a failed connection (the call's error), :class:`Aborted` once ``signal`` is set.

        One short connection per call: tools run on worker threads, each call in an event
        loop of its own, and a client session belongs to the loop it was opened in."""
        signal.raise_if_aborted()
        remaining = signal.remaining()
        timeout = CALL_TIMEOUT if remaining is None else max(remaining, 0.001)

        async def run() -> CallToolResult | None:
            return await self._call(name, args, call_id, signal, timeout)

        try:
            result = _run_async(run)
        except Exception as error:
            leaf = _leaf(error)
            if isinstance(leaf, Aborted) or signal.aborted:
                raise Aborted("the turn was aborted") from None
            if isinstance(leaf, TimeoutError):
                raise _CallFailed(f"{self.label} did not answer within {timeout:.1f}s") from None
            raise _CallFailed(self._reason(leaf)) from None
        if result is None:  # the signal cut it
            raise Aborted("the turn was aborted")
        if result.is_error:
            raise _CallFailed(_text(result.content) or f"{self.label} reported an error")
        if result.structured_content is not None:
            return result.structured_content
        return _text(result.content)

    async def _call(self, name: str, args: Any, call_id: str, signal: Signal,
                    timeout: float) -> CallToolResult | None:
        import anyio

        result: CallToolResult | None = None
        async with anyio.create_task_group() as group:

            async def watch() -> None:  # a stop or the deadline cancels the call
                while not signal.aborted:
                    await anyio.sleep(ABORT_POLL)
                group.cancel_scope.cancel()

            group.start_soon(watch)
            try:
                with anyio.fail_after(timeout):
                    async with self._client(timeout) as client:
                        result = await client.call_tool(
                            name, args, read_timeout_seconds=timeout,
                            meta=cast("RequestParamsMeta", {IDEMPOTENCY_KEY: call_id}))
            finally:
                group.cancel_scope.cancel()
        return result

    # --- the connection ----------------------------------------------------------------------

    @asynccontextmanager
    async def _client(self, timeout: float) -> AsyncIterator[Client]:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        headers = self._headers() if callable(self._headers) else self._headers
        if headers is not None and not isinstance(headers, Mapping):
            raise ConfigError(f"{self!r}: the headers function must return a dict")
        http = httpx2.AsyncClient(headers=dict(headers or {}), timeout=httpx2.Timeout(timeout))
        async with http, Client(streamable_http_client(self.url, http_client=http),
                                elicitation_callback=_decline, cache=None,
                                read_timeout_seconds=timeout) as client:
            yield client

    def _reason(self, error: BaseException) -> str:
        """What went wrong, for an error message: never the URL's credentials or query."""
        leaf = _leaf(error)
        text = str(leaf).replace(self.url, self.label)
        return f"{type(leaf).__name__}: {text}" if text else type(leaf).__name__


async def _decline(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
    """An elicitation the server asks for mid-call: declined. A durable turn cannot hold a
    server's question open across processes; a yielding dormant tool asks the human."""
    from mcp_types import ElicitResult

    return ElicitResult(action="decline")


def _run_async(fn: Callable[[], Awaitable[T]]) -> T:
    """Run ``fn`` in an event loop of its own: here, or on a helper thread if this thread
    already runs one (a turn driven from async code)."""
    import anyio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return anyio.run(fn)
    with ThreadPoolExecutor(1, thread_name_prefix="dormant-mcp") as pool:
        return pool.submit(anyio.run, fn).result()


def _leaf(error: BaseException) -> BaseException:
    """The first real error inside task-group wrappers (``ExceptionGroup``)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def _text(content: Sequence[ContentBlock]) -> str:
    """A result's content as text: its texts joined; other content described in brackets."""
    parts: list[str] = []
    for block in content:
        kind = getattr(block, "type", "content")
        if kind == "text":
            parts.append(str(getattr(block, "text", "")))
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} {getattr(block, 'mime_type', '')}]".replace(" ]", "]"))
        elif kind == "resource_link":
            parts.append(f"[resource {getattr(block, 'uri', '')}]")
        elif kind == "resource":
            inner = getattr(block, "resource", None)
            text = getattr(inner, "text", None)
            parts.append(text if isinstance(text, str) else
                         f"[resource {getattr(inner, 'uri', '')}]")
        else:
            parts.append(f"[{kind}]")
    return "\n".join(parts)


def _label(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def _shown(url: object) -> str:
    if isinstance(url, str):
        try:
            return repr(_label(url))
        except ValueError:
            return "an invalid URL"
    return repr(type(url).__name__)
