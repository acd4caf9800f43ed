"""MCP tools: a Model Context Protocol server's tools as an agent's.

``MCPServer(url)`` (streamable HTTP), ``MCPServer.sse(url)`` (the legacy SSE transport) and
``MCPServer.stdio(command, args=[...])`` (a child process) are tool sources
(:class:`dormant.tools.ToolSource`): list one beside an agent's tools. Its tools are listed once
per process, on the first turn that needs them, and each becomes a :class:`dormant.tools.Tool`
whose arguments are the server's ``inputSchema``, under a name every model accepts. A call
carries the dormant call id as its idempotency key, in the request's ``_meta`` under
:data:`IDEMPOTENCY_KEY`, so a server can run a rerun call (a retry, a takeover) once.

The ``mcp`` package (``pip install 'dormant[mcp]'``) is imported only when a server is
connected to: an app's import and its agents' build (a Lambda cold start) never load it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import threading
from collections.abc import Callable, Generator, Mapping, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict

from dormant._mcp_names import checked_prefix, checked_rename, clash, model_tool_name
from dormant.errors import (
    ConfigError,
    DormantError,
    ToolSourceMisconfigured,
    ToolSourceUnavailable,
)
from dormant.tools import APPROVAL_POLICIES, Aborted, Signal, Tool, ToolContext

if TYPE_CHECKING:
    from mcp import Client
    from mcp_types import CallToolResult, RequestParamsMeta
    from mcp_types import Tool as ListedTool

    from dormant._mcp_wire import Http, Seen, Stdio, StdioSession

__all__ = ["IDEMPOTENCY_KEY", "MAX_RESULT_BYTES", "MCPServer", "model_tool_name"]

#: The ``_meta`` key of a ``tools/call`` request that holds the dormant call id: the same for
#: every run of one call (a retry, a takeover after a crash, an approval decided in another
#: process), so a server that keys its side effect on it does it once.
IDEMPOTENCY_KEY = "dormant/idempotency_key"
#: Seconds the listing may take (it runs before the turn's first model call; for a stdio
#: server it includes starting the process).
LIST_TIMEOUT = 10.0
#: Seconds a call may take when the turn has no deadline.
CALL_TIMEOUT = 300.0
#: How often a running call looks at the turn's signal (a stop, the deadline).
ABORT_POLL = 0.05
#: Pages of ``tools/list`` read at most (a server whose cursor never ends cannot hang a turn).
MAX_PAGES = 100
#: The default ``max_result_bytes``: a call's result (as JSON, UTF-8) larger than this is the
#: call's error, not its result.
MAX_RESULT_BYTES = 1 << 20


Headers = Mapping[str, str] | Callable[[], Mapping[str, str]]


class _Arguments(BaseModel):
    """The pydantic face of an MCP tool's arguments: anything; the server's JSON Schema
    (``Tool.json_schema``) is what they are checked against."""

    model_config = ConfigDict(extra="allow")


class _CallFailed(Exception):
    """A call the server refused or failed: the tool phase makes it the call's error."""


_DONE = object()


class MCPServer:
    """The tools of an MCP server, as a tool source. ``MCPServer(url)`` speaks streamable
    HTTP; :meth:`sse` the legacy SSE transport; :meth:`stdio` runs the server as a child
    process. Every one takes these options:

    ``tools``: the server's names of the tools the agent may use (None: all it lists).
    ``approval``: the server's tool name -> ``"user-approval"`` | ``"approved"`` | a function
    of the arguments (a dict), as for the agent's ``tool_approval`` (which names tools as the
    model sees them, may name these too, and wins). ``tools`` and ``approval`` always use the
    server's own names; the model, the ledger and ``tool_approval`` see the mapped ones.
    ``prefix``: put before each name, with ``_`` (``prefix="fs"``: ``files.read`` ->
    ``fs_files_read``). ``rename``: the server's name -> the model's, used as given (no prefix).
    Every other name is mapped by :func:`model_tool_name` to ``[a-zA-Z0-9_-]{1,64}``, which
    every model accepts. Two tools mapped to one name are a :class:`ConfigError`.
    ``max_result_bytes``: a result larger than this (as JSON) is the call's error, naming
    its size and the limit; the result is never kept (default :data:`MAX_RESULT_BYTES`).

    A call's ``isError`` result or JSON-RPC error is the call's error (the model sees it; the
    turn goes on). A server that cannot list its tools fails the turn before any model call:
    :class:`dormant.errors.ToolSourceUnavailable` (retryable) when it is down or failing,
    :class:`dormant.errors.ToolSourceMisconfigured` (not retryable) when the address answers
    that no MCP server of this transport is there (a 404, a 405, an HTML page) or the command
    cannot be run. An elicitation the server asks for mid-call is declined; a call's progress
    notifications are its preliminary outputs (see the "MCP tools" section of
    ``docs/models.md``).
    """

    def __init__(self, url: str, *, headers: Headers | None = None,
                 tools: Sequence[str] | None = None,
                 approval: Mapping[str, Any] | None = None, prefix: str | None = None,
                 rename: Mapping[str, str] | None = None,
                 max_result_bytes: int = MAX_RESULT_BYTES) -> None:
        self._setup(_http(url, headers, sse=False), tools, approval, prefix, rename,
                    max_result_bytes)
        #: The server's URL (streamable HTTP or SSE); None for a stdio server.
        self.url: str | None = url

    @classmethod
    def sse(cls, url: str, *, headers: Headers | None = None,
            tools: Sequence[str] | None = None, approval: Mapping[str, Any] | None = None,
            prefix: str | None = None, rename: Mapping[str, str] | None = None,
            max_result_bytes: int = MAX_RESULT_BYTES) -> MCPServer:
        """A server that speaks only MCP's legacy SSE transport (``GET`` an event stream at
        ``url``, often ``.../sse``; ``POST`` to the endpoint it names). One short connection
        per listing and per call, as for streamable HTTP."""
        server = cls.__new__(cls)
        server._setup(_http(url, headers, sse=True), tools, approval, prefix, rename,
                      max_result_bytes)
        server.url = url
        return server

    @classmethod
    def stdio(cls, command: str, args: Sequence[str] = (), *,
              env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
              tools: Sequence[str] | None = None, approval: Mapping[str, Any] | None = None,
              prefix: str | None = None, rename: Mapping[str, str] | None = None,
              max_result_bytes: int = MAX_RESULT_BYTES) -> MCPServer:
        """A server run as a child process (``command`` with ``args``, in ``cwd``) that
        speaks MCP on its stdin and stdout: most servers installed locally
        (``npx -y @modelcontextprotocol/server-everything``, ``python server.py``).

        The process is started on the first listing or call of this object and kept, with
        its MCP session open, for the life of this process (across turns); if it exits, the
        next listing or call starts it again. It gets a minimal environment (``PATH``,
        ``HOME``…) plus ``env``; its stderr goes to the ``dormant.mcp`` logger, a line at a
        time. For ``dormant dev`` and tests: a Lambda function has no long-lived child."""
        from dormant._mcp_wire import Stdio

        _require_mcp()
        if not isinstance(command, str) or not command:
            raise ConfigError("MCPServer.stdio needs a command (a program to run)")
        if isinstance(args, str) or not all(isinstance(a, str) for a in args):
            raise ConfigError(f"MCPServer.stdio({command!r}, args=...) takes a list of strings")
        if env is not None and not (isinstance(env, Mapping) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
            raise ConfigError(f"MCPServer.stdio({command!r}, env=...) takes a dict of strings")
        shown = " ".join([os.path.basename(command), *(os.path.basename(a)
                                                       for a in list(args)[:1])])
        endpoint = Stdio(command=command, args=tuple(args), env=dict(env or {}),
                         cwd=None if cwd is None else os.fspath(cwd), label=f"stdio:{shown}")
        server = cls.__new__(cls)
        server._setup(endpoint, tools, approval, prefix, rename, max_result_bytes)
        server.url = None
        return server

    def _setup(self, endpoint: Http | Stdio, tools: Sequence[str] | None,
               approval: Mapping[str, Any] | None, prefix: str | None,
               rename: Mapping[str, str] | None, max_result_bytes: int) -> None:
        from dormant._mcp_wire import Http

        self._endpoint = endpoint
        #: The server in errors and logs: scheme, host, port and path (no credentials, no
        #: query); for a stdio server ``stdio:`` and the program (no arguments past the first,
        #: no environment).
        self.label = _label(endpoint.url) if isinstance(endpoint, Http) else endpoint.label
        if tools is not None and (isinstance(tools, str)
                                  or not all(isinstance(t, str) and t for t in tools)):
            raise ConfigError(f"{self!r}: tools= takes a list of tool names")
        self.allowed: frozenset[str] | None = None if tools is None else frozenset(tools)
        self.prefix = checked_prefix(repr(self), prefix)
        self.rename: dict[str, str] = checked_rename(repr(self), rename)
        if isinstance(max_result_bytes, bool) or not isinstance(max_result_bytes, int) \
                or max_result_bytes < 1:
            raise ConfigError(f"{self!r}: max_result_bytes must be a positive number of bytes, "
                              f"got {max_result_bytes!r}")
        self.max_result_bytes = max_result_bytes
        given = dict(approval or {})
        for name, policy in given.items():
            if not callable(policy) and policy not in APPROVAL_POLICIES:
                raise ConfigError(f"{self!r}: the approval policy for {name!r} must be "
                                  "'user-approval', 'approved' or a function of the arguments")
            if self.allowed is not None and name not in self.allowed:
                raise ConfigError(f"{self!r}: approval names {name!r}, which tools= leaves out")
        #: Approval policies by the name the model sees (``approval=`` names the server's).
        self.approval: dict[str, Any] = {}
        owner: dict[str, str] = {}
        for name, policy in given.items():
            mapped = self.model_name(name)
            if mapped in owner:
                raise ConfigError(clash(repr(self), mapped, owner[mapped], name))
            owner[mapped] = name
            self.approval[mapped] = policy
        self._tools: tuple[Tool, ...] | None = None
        self._lock = threading.Lock()
        self._stdio: StdioSession | None = None
        self._server_names: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"MCPServer({self.label})"

    def model_name(self, name: str) -> str:
        """The name the model sees for the server's tool ``name``."""
        return model_tool_name(name, self.prefix, self.rename)

    def server_name(self, name: str) -> str:
        """The server's own name of the tool the model knows as ``name`` (the reverse of
        :meth:`model_name`, for the tools listed so far; ``name`` itself if none matches)."""
        return self._server_names.get(name, name)

    # --- listing -----------------------------------------------------------------------------

    def list_tools(self) -> Sequence[Tool]:
        """The server's tools (those ``tools=`` allows), under the names the model sees,
        listed on the first call and kept for the life of the process. Raises
        :class:`ToolSourceUnavailable` if the server cannot be reached or listed,
        :class:`ToolSourceMisconfigured` if the address or command is wrong, and
        :class:`ConfigError` if two of its tools map to one name; nothing is kept then, and
        the next call tries again."""
        with self._lock:
            if self._tools is None:
                self._tools = self._listed()
            return self._tools

    def _listed(self) -> tuple[Tool, ...]:
        from dormant._mcp_wire import LOOP, Seen

        seen = Seen()
        try:
            listed = LOOP.submit(lambda: self._list(seen)).result()
        except DormantError:
            raise
        except Exception as error:  # unreachable, refused, timed out, not an MCP server
            raise self._listing_error(error, seen) from None
        by_name = {tool.name: tool for tool in listed}
        missing = sorted(((self.allowed or frozenset()) | set(self.rename)) - set(by_name))
        if missing:
            raise ToolSourceUnavailable(self.label, f"it lists no tool named {missing}")
        kept = [tool for name, tool in by_name.items()
                if self.allowed is None or name in self.allowed]
        owner: dict[str, str] = {}
        for tool in kept:
            mapped = self.model_name(tool.name)
            if mapped in owner:
                raise ConfigError(clash(repr(self), mapped, owner[mapped], tool.name))
            owner[mapped] = tool.name
        self._server_names = owner
        return tuple(self._tool(tool) for tool in kept)

    async def _list(self, seen: Seen) -> list[ListedTool]:
        import anyio
        from mcp_types import CONNECTION_CLOSED

        from dormant._mcp_wire import leaf

        for attempt in (1, 2):
            tools: list[ListedTool] = []
            try:
                with anyio.fail_after(LIST_TIMEOUT):
                    async with self._client(LIST_TIMEOUT, seen) as client:
                        cursor: str | None = None
                        for _ in range(MAX_PAGES):
                            page = await client.list_tools(cursor=cursor)
                            tools += page.tools
                            cursor = page.next_cursor
                            if cursor is None:
                                break
                return tools
            except Exception as error:  # a stdio server that just died: list once more
                if attempt == 2 or self._stdio is None \
                        or getattr(leaf(error), "code", None) != CONNECTION_CLOSED:
                    raise
        raise AssertionError("unreachable")

    def _listing_error(self, error: BaseException, seen: Seen) -> DormantError:
        """What a failed listing means: a wrong address or command (not retryable), or an
        unavailable server (retryable)."""
        from dormant._mcp_wire import leaf, misconfiguration

        cause = leaf(error)
        wrong = misconfiguration(self._endpoint, cause, seen)
        if wrong is not None:
            return ToolSourceMisconfigured(self.label, *wrong)
        return ToolSourceUnavailable(self.label, self._reason(cause))

    def _tool(self, listed: ListedTool) -> Tool:
        name = listed.name

        def execute(ctx: ToolContext) -> Generator[dict[str, Any], None, Any]:
            return self._calling(name, ctx.args, ctx.call_id, ctx.signal)

        return Tool(name=self.model_name(name), description=listed.description or "",
                    schema=_Arguments, execute=execute, json_schema=dict(listed.input_schema))

    # --- calling -----------------------------------------------------------------------------

    def call(self, name: str, args: Any, call_id: str, signal: Signal) -> Any:
        """Call the server's tool ``name`` (its own name: ``tools/call``) with ``call_id`` as
        its idempotency key, within the turn's time left; return its result (its
        ``structuredContent``, else its text). Raises for an error result, a JSON-RPC error,
        a result over ``max_result_bytes`` or a failed connection (the call's error),
        :class:`Aborted` once ``signal`` is set. Progress notifications are dropped (the
        agent's tool yields them: see :meth:`list_tools`)."""
        gen = self._calling(name, args, call_id, signal)
        while True:
            try:
                next(gen)
            except StopIteration as done:
                return done.value

    def _calling(self, name: str, args: Any, call_id: str,
                 signal: Signal) -> Generator[dict[str, Any], None, Any]:
        """The call as a generator tool: each progress notification the server sends for it
        is yielded (``{"progress": p, "total": t, "message": m}``), then its result is
        returned. The call runs on the MCP loop; this thread reads its progress."""
        from dormant._mcp_wire import LOOP

        signal.raise_if_aborted()
        remaining = signal.remaining()
        timeout = CALL_TIMEOUT if remaining is None else max(remaining, 0.001)
        updates: queue.SimpleQueue[Any] = queue.SimpleQueue()

        async def progress(done: float, total: float | None, message: str | None) -> None:
            updates.put({"progress": done, "total": total, "message": message})

        future = LOOP.submit(lambda: self._call(name, args, call_id, signal, timeout, progress))
        future.add_done_callback(lambda _: updates.put(_DONE))
        while (update := updates.get()) is not _DONE:
            yield update
        return self._result(future, signal, timeout)

    def _result(self, future: Future[CallToolResult | None], signal: Signal,
                timeout: float) -> Any:
        from mcp_types import CONNECTION_CLOSED

        from dormant._mcp_wire import TOO_LARGE, leaf, text_of

        try:
            result = future.result()
        except Exception as error:
            cause = leaf(error)
            if isinstance(cause, Aborted) or signal.aborted:
                raise Aborted("the turn was aborted") from None
            if isinstance(cause, TimeoutError):
                raise _CallFailed(f"{self.label} did not answer within {timeout:.1f}s") from None
            if self._stdio is not None and getattr(cause, "code", None) == CONNECTION_CLOSED:
                raise _CallFailed(f"{self.label} exited during the call (the next call starts "
                                  "it again)") from None
            if getattr(cause, "code", None) == TOO_LARGE:
                raise _CallFailed(f"{getattr(cause, 'message', cause)} (max_result_bytes="
                                  f"{self.max_result_bytes}): the result is not kept; ask "
                                  "for less") from None
            raise _CallFailed(self._reason(cause)) from None
        if result is None:  # the signal cut it
            raise Aborted("the turn was aborted")
        if result.is_error:
            raise _CallFailed(text_of(result.content) or f"{self.label} reported an error")
        value = result.structured_content if result.structured_content is not None \
            else text_of(result.content)
        size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
        if size > self.max_result_bytes:
            raise _CallFailed(f"the result is {size} bytes of JSON, over the "
                              f"max_result_bytes={self.max_result_bytes} of {self.label}: "
                              "the result is not kept; ask for less")
        return value

    async def _call(self, name: str, args: Any, call_id: str, signal: Signal,
                    timeout: float, progress: Any) -> CallToolResult | None:
        import anyio

        from dormant._mcp_wire import Seen

        result: CallToolResult | None = None
        async with anyio.create_task_group() as group:

            async def watch() -> None:  # a stop or the deadline cancels the call
                while not signal.aborted:
                    await anyio.sleep(ABORT_POLL)
                group.cancel_scope.cancel()

            group.start_soon(watch)
            try:
                with anyio.fail_after(timeout):
                    async with self._client(timeout, Seen()) as client:
                        result = await client.call_tool(
                            name, args, read_timeout_seconds=timeout,
                            progress_callback=progress,
                            meta=cast("RequestParamsMeta", {IDEMPOTENCY_KEY: call_id}))
            finally:
                group.cancel_scope.cancel()
        return result

    # --- the connection ----------------------------------------------------------------------

    def _client(self, timeout: float, seen: Seen) -> Any:
        """An async context manager giving a connected client: a short HTTP connection, or
        the stdio server's long-lived session (started or restarted as needed)."""
        from contextlib import asynccontextmanager

        from dormant._mcp_wire import Http, StdioSession, http_client

        endpoint = self._endpoint
        if isinstance(endpoint, Http):
            return http_client(endpoint, timeout, seen)
        if self._stdio is None:
            self._stdio = StdioSession(endpoint, max_line=4 * self.max_result_bytes + (1 << 20))
        stdio = self._stdio

        @asynccontextmanager
        async def held() -> Any:
            client: Client = await stdio.client(timeout)
            yield client

        return held()

    def _reason(self, error: BaseException) -> str:
        """What went wrong, for an error message: never the URL's credentials or query."""
        from dormant._mcp_wire import leaf

        cause = leaf(error)
        text = str(cause)
        if self.url:
            text = text.replace(self.url, self.label)
        return f"{type(cause).__name__}: {text}" if text else type(cause).__name__


def _http(url: str, headers: Headers | None, *, sse: bool) -> Http:
    from dormant._mcp_wire import Http

    _require_mcp()
    parts = urlsplit(url) if isinstance(url, str) else None
    what = "MCPServer.sse" if sse else "MCPServer"
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{what} needs an http(s) URL, got {_shown(url)}")
    if headers is not None and not callable(headers) and not isinstance(headers, Mapping):
        raise ConfigError(f"{what}(headers=...) takes a dict or a function returning one")
    label = _label(url)

    def read() -> Mapping[str, str]:
        given = headers() if callable(headers) else headers
        if given is not None and not isinstance(given, Mapping):
            raise ConfigError(f"MCPServer({label}): the headers function must return a dict")
        return given or {}

    return Http(url=url, headers=read, sse=sse)


def _require_mcp() -> None:
    if importlib.util.find_spec("mcp") is None:  # finds it, does not import it
        raise ConfigError("MCPServer needs the mcp package: pip install 'dormant[mcp]'")


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
