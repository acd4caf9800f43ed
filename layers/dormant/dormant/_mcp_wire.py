"""How :mod:`dormant.mcp` reaches a server: one background event loop for every MCP
connection of the process, a short connection per request over HTTP (streamable or legacy
SSE), and one long-lived child process per stdio server, restarted when it dies.

Imported by :mod:`dormant.mcp` only once a server is connected to; the ``mcp`` package is
imported inside the functions here, so that import stays off a Lambda cold start too.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal as signals
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from concurrent.futures import Future
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Sequence

    from mcp import Client
    from mcp.client.context import ClientRequestContext
    from mcp_types import ContentBlock, ElicitRequestParams, ElicitResult

T = TypeVar("T")
logger = logging.getLogger("dormant.mcp")

#: The JSON-RPC error code dormant's stdio transport answers a request with when the server's
#: answer is a line longer than the transport reads (the line itself is read and dropped).
TOO_LARGE = -32099
#: Seconds a stdio server has to exit once its stdin is closed, then after SIGTERM.
EXIT_GRACE = 2.0
#: HTTP answers that say the URL is no MCP endpoint of this transport (retrying cannot help).
WRONG_PLACE = frozenset({404, 405, 406, 410, 415})
#: Characters of one stderr line of a stdio server that go to the log.
STDERR_LINE = 2000


# --- the loop ------------------------------------------------------------------------------------


class _Loop:
    """An asyncio loop on a daemon thread, started on first use. A stdio server's session
    lives here across turns; every other MCP request runs here too, so a tool's thread only
    waits on a future (and reads progress from a queue)."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = 0
        self._lock = threading.Lock()

    def submit(self, fn: Callable[[], Awaitable[T]]) -> Future[T]:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():  # a forked child has no thread
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="dormant-mcp",
                                 daemon=True).start()
                self._loop, self._pid = loop, os.getpid()

        async def run() -> T:
            return await fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop)


LOOP = _Loop()


# --- endpoints -----------------------------------------------------------------------------------


@dataclass
class Seen:
    """What the HTTP transport saw of the server's answers (status, content type), for
    telling a misconfiguration (a 404, a 405, an HTML page) from an outage."""

    answers: list[tuple[int, str]] = field(default_factory=list)


@dataclass(frozen=True)
class Http:
    """A server over HTTP: ``sse`` False is streamable HTTP, True the legacy SSE transport."""

    url: str
    headers: Callable[[], Mapping[str, str]]
    sse: bool = False


@dataclass(frozen=True)
class Stdio:
    """A server run as a child process speaking MCP on its stdin and stdout."""

    command: str
    args: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str | None
    label: str


async def decline(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
    """An elicitation the server asks for mid-call: declined. A durable turn cannot hold a
    server's question open across processes; a yielding dormant tool asks the human."""
    from mcp_types import ElicitResult

    return ElicitResult(action="decline")


@asynccontextmanager
async def http_client(endpoint: Http, timeout: float, seen: Seen) -> AsyncIterator[Client]:
    """A client over one short HTTP connection (the initialize handshake, then the request)."""
    import httpx2
    from mcp import Client

    headers = dict(endpoint.headers())

    async def note(response: httpx2.Response) -> None:
        seen.answers.append((response.status_code,
                             response.headers.get("content-type", "").lower()))

    def make(headers: dict[str, str] | None = None, timeout: httpx2.Timeout | None = None,
             auth: httpx2.Auth | None = None) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(headers=headers, timeout=timeout, auth=auth,
                                  event_hooks={"response": [note]})

    if endpoint.sse:
        from mcp.client.sse import sse_client

        transport: Any = sse_client(endpoint.url, headers=headers, timeout=timeout,
                                    sse_read_timeout=timeout, httpx_client_factory=make)
        async with Client(transport, elicitation_callback=decline, cache=None, mode="legacy",
                          read_timeout_seconds=timeout) as client:
            yield client
        return
    from mcp.client.streamable_http import streamable_http_client

    http = make(headers, httpx2.Timeout(timeout))
    async with http, Client(streamable_http_client(endpoint.url, http_client=http),
                            elicitation_callback=decline, cache=None, mode="legacy",
                            read_timeout_seconds=timeout) as client:
        yield client


def misconfiguration(endpoint: Http | Stdio, error: BaseException,
                     seen: Seen) -> tuple[str, str] | None:
    """(what is wrong, what to fix) if a failed listing says the address or command is
    wrong: a stdio command that cannot be run; an HTTP answer that no MCP server of this
    transport is there (:data:`WRONG_PLACE`, or a page neither JSON nor an event stream).
    None: the server is down or failing (a refused connection, a timeout, a 5xx)."""
    if isinstance(endpoint, Stdio):
        if isinstance(error, (FileNotFoundError, PermissionError, NotADirectoryError)):
            return (f"cannot run {endpoint.command!r}: {type(error).__name__}",
                    "check the command, that it is installed, and cwd")
        return None
    response = getattr(error, "response", None)
    answers = [*seen.answers, *([(response.status_code, "")] if response is not None else [])]
    wrong = next((status for status, _ in answers if status in WRONG_PLACE), None)
    kind = next((kind for status, kind in answers if status == 200 and kind
                 and not kind.startswith(("application/json", "text/event-stream"))), None)
    if wrong is None and kind is None:
        return None
    what = f"it answered HTTP {wrong}" if wrong is not None else \
        f"it answered with {(kind or '').split(';')[0]}"
    if endpoint.sse:
        fix = ("check the URL's path (a legacy SSE server's is often /sse); for a server "
               "that speaks streamable HTTP, use MCPServer(url)")
    else:
        fix = ("check the URL's path (often /mcp); for a server that speaks only the "
               "legacy SSE transport, use MCPServer.sse(url)")
    return f"{what}, so no MCP server of this transport is there", fix


def leaf(error: BaseException) -> BaseException:
    """The first real error inside task-group wrappers (``ExceptionGroup``)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def text_of(content: Sequence[ContentBlock]) -> str:
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


# --- stdio ---------------------------------------------------------------------------------------


class StdioSession:
    """One stdio server's child process and its open MCP session, kept on :data:`LOOP` from
    the first request until the process exits (then the next request starts a new one).

    Every method runs on the loop's thread."""

    def __init__(self, endpoint: Stdio, max_line: int) -> None:
        self.endpoint = endpoint
        self.max_line = max_line
        self._client: Client | None = None
        self._ended: asyncio.Event | None = None
        self._lock: asyncio.Lock | None = None
        #: The running child's process id (None: none runs).
        self.pid: int | None = None

    async def client(self, timeout: float) -> Client:
        """The open session, started (or restarted, if the process exited) within
        ``timeout``."""
        for _ in range(5):  # an exit already readable on the pipe is seen before it is used
            await asyncio.sleep(0)
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._client is not None and self._ended is not None and not self._ended.is_set():
                return self._client
            started: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
            ended = asyncio.Event()
            task = asyncio.ensure_future(self._hold(started, ended))
            try:
                client = await asyncio.wait_for(asyncio.shield(started), timeout)
            except BaseException:
                ended.set()
                task.cancel()
                raise
            self._client, self._ended = client, ended
            return client

    async def _hold(self, started: asyncio.Future[Client], ended: asyncio.Event) -> None:
        from mcp import Client

        try:
            transport = _stdio_transport(self, ended)
            async with Client(transport, elicitation_callback=decline, cache=None,
                              mode="legacy") as client:
                started.set_result(client)
                await ended.wait()
        except BaseException as error:
            if not started.done():
                started.set_exception(error if isinstance(error, Exception)
                                      else RuntimeError(repr(error)))
            elif not isinstance(error, asyncio.CancelledError):
                logger.info("MCP server %s ended: %s", self.endpoint.label, type(error).__name__)
        finally:
            ended.set()
            self.pid = None


@asynccontextmanager
async def _stdio_transport(session: StdioSession, ended: asyncio.Event) -> AsyncIterator[Any]:
    """The child process's stdout as a stream of JSON-RPC messages, one per line, and its
    stdin as one to write to. A line over ``session.max_line`` bytes is dropped as it is read
    (never held whole); the request it answered gets a :data:`TOO_LARGE` error instead. The
    child's stderr goes to the log, a line at a time. (The ``mcp`` package's own stdio client
    rejoins a long line chunk by chunk, in time quadratic in its length.)"""
    import anyio
    from mcp.client.stdio import get_default_environment
    from mcp.shared.message import SessionMessage

    endpoint = session.endpoint
    process = await anyio.open_process(
        [endpoint.command, *endpoint.args], cwd=endpoint.cwd, start_new_session=True,
        env={**get_default_environment(), **endpoint.env})
    session.pid = process.pid
    read_writer, read_stream = anyio.create_memory_object_stream[Any](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def stdout() -> None:
        assert process.stdout is not None
        try:
            async with read_writer:
                async for line, size in _lines(process.stdout, session.max_line):
                    await read_writer.send(_message(line, size, session.max_line))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            ended.set()

    async def stderr() -> None:
        assert process.stderr is not None
        async for line, _size in _lines(process.stderr, STDERR_LINE):
            text = line.decode(errors="replace")
            logger.info("MCP server %s stderr: %s", endpoint.label, text)

    async def stdin() -> None:
        assert process.stdin is not None
        try:
            async with write_reader:
                async for message in write_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(data.encode() + b"\n")
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await read_writer.aclose()

    async with anyio.create_task_group() as group:
        group.start_soon(stdout)
        group.start_soon(stderr)
        group.start_soon(stdin)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process)
            group.cancel_scope.cancel()


async def _lines(stream: Any, limit: int) -> AsyncIterator[tuple[bytes, int]]:
    """Each line of ``stream`` (without its newline) and its size in bytes. Of a line over
    ``limit`` bytes only the first ``limit`` are kept; the rest is counted and dropped."""
    import anyio

    line = bytearray()
    size = 0
    while True:
        try:
            chunk = await stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError,
                OSError):
            return
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            size += len(piece)
            room = limit - len(line)
            if room > 0:
                line += piece[:room]
            if end < 0:
                break
            start = end + 1
            if size:
                yield bytes(line), size
            line, size = bytearray(), 0


_ID = re.compile(rb'^\s*\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*(-?\d+|"[^"\\]*")')


def _message(line: bytes, size: int, limit: int) -> Any:
    """A line as a JSON-RPC message (or the parse error, which the session reports); a line
    over ``limit`` (``line`` is then its head) as an error answer to the request it answers."""
    import mcp_types
    from mcp.shared.message import SessionMessage

    if size > limit:
        found = _ID.match(line[:256])
        if found is None:
            logger.warning("dropped a message of %d bytes from an MCP server (over %d)",
                           size, limit)
            return ValueError(f"a message of {size} bytes, over the limit of {limit}")
        raw = found.group(1)
        request_id: int | str = int(raw) if raw[:1] != b'"' else raw[1:-1].decode()
        error = mcp_types.ErrorData(code=TOO_LARGE, message=f"the server's answer was {size} "
                                    f"bytes, over the {limit} this connection reads")
        return SessionMessage(mcp_types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(
            line, by_name=False))
    except ValueError as error:
        return error


async def _stop(process: Any) -> None:
    """Close the child's stdin; SIGTERM its process group if it has not exited within
    :data:`EXIT_GRACE`, SIGKILL if it still has not."""
    import anyio

    if process.stdin is not None:
        with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
    for sig in (None, signals.SIGTERM, signals.SIGKILL):
        if sig is not None:
            try:
                os.killpg(process.pid, sig)
            except (ProcessLookupError, PermissionError):
                return
        with anyio.move_on_after(EXIT_GRACE):
            while process.returncode is None:
                await anyio.sleep(0.02)
        if process.returncode is not None:
            return
