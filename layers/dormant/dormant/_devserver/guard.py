"""Who may drive ``dormant dev``, and for how long: the ``Host`` names it answers to
(:class:`HostRule`), the ``Origin`` of the pages it serves (:func:`normalize_origin`,
:func:`dev_cors`), the size of a request it reads, and the idle time a connection may take to
send one (:class:`Deadlines`) on a fixed pool of threads."""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from aws_lambda_powertools.event_handler import CORSConfig

from dormant.http._voice import HEADERS

__all__ = ["DEFAULT_PRINCIPAL", "IDLE_TIMEOUT", "LISTEN_BACKLOG", "LOOPBACK_NAMES",
           "PRINCIPAL_HEADER", "THREADS", "TRANSPORT_LIMIT", "Deadlines", "HostRule",
           "cut_connection", "dev_cors", "is_ip", "normalize_origin", "origin_or_none",
           "split_host"]

#: Who a request is when it names nobody, and the header that names someone.
DEFAULT_PRINCIPAL = "local"
PRINCIPAL_HEADER = "X-Principal"
#: Bodies past this are refused before being read (API Gateway's own payload limit).
TRANSPORT_LIMIT = 10 * 1024 * 1024
#: Connections the kernel holds for ``accept`` while every thread is busy starting others.
#: The stdlib's default (5) resets connections when a burst of clients (a browser opening a
#: page, a test with 32 threads) arrives at once.
LISTEN_BACKLOG = 1024
#: Seconds a connection may take to send a whole request (or sit idle between two).
IDLE_TIMEOUT = 10.0
#: Threads serving connections: at most this many requests are served at once.
THREADS = 32
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")



def normalize_origin(value: str) -> str:
    """``value`` as a browser sends it in ``Origin`` (``http://localhost:5173``: scheme, host,
    port unless the scheme's default, lower case, no path); ValueError when it is not one."""
    url = urlsplit(value.strip())
    try:
        port = url.port
    except ValueError as error:
        raise ValueError(f"{value!r} is not an origin: {error}") from None
    if url.scheme not in ("http", "https") or not url.hostname or url.path not in ("", "/") \
            or url.query or url.fragment or url.username is not None:
        raise ValueError(f"{value!r} is not an origin (scheme://host[:port], e.g. "
                         f"http://localhost:5173)")
    host = f"[{url.hostname}]" if ":" in url.hostname else url.hostname
    default = {"http": 80, "https": 443}[url.scheme]
    return f"{url.scheme}://{host}" + (f":{port}" if port not in (None, default) else "")


def origin_or_none(value: str) -> str | None:
    """``value`` normalised as :func:`normalize_origin` does, or None when it is not one."""
    try:
        return normalize_origin(value)
    except ValueError:
        return None


def dev_cors(origins: Sequence[str]) -> CORSConfig | Literal[False]:
    """The resolver's CORS rule for ``dormant dev``: none at all (same origin only) unless
    ``origins`` are given, then those origins exactly, ``X-Principal`` allowed."""
    if not origins:
        return False
    first, *rest = [normalize_origin(origin) for origin in origins]
    return CORSConfig(allow_origin=first, extra_origins=rest, allow_headers=[PRINCIPAL_HEADER],
                      expose_headers=list(HEADERS))


def split_host(value: str) -> tuple[str, int | None] | None:
    """``Host``'s name and port (None: no port), or None when it is not ``name[:port]``."""
    value = value.strip().lower()
    if value.startswith("["):
        name, bracket, rest = value[1:].partition("]")
        if not bracket:
            return None
    else:
        name, colon, port = value.partition(":")
        rest = colon + port
    if not rest:
        return name, None
    if rest[0] == ":" and rest[1:].isdigit():
        return name, int(rest[1:])
    return None


def is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class HostRule:
    """The ``Host`` values a server bound to one address answers to.

    Bound to a loopback address: ``127.0.0.1``, ``localhost`` and ``[::1]`` (and the address
    itself). Bound to one other address: that address. Bound to every interface (``0.0.0.0``,
    ``::``): any IP literal, ``localhost`` and the machine's own names. Always on the bound
    port (no port: only when that is 80), plus the ``extra`` names (``--allow-host``).
    """

    names: frozenset[str]
    port: int
    any_ip: bool = False

    @classmethod
    def of(cls, address: str, port: int, extra: Iterable[str] = (),
           own_names: Iterable[str] = ()) -> HostRule:
        """The rule for a server bound to ``address`` (an IP) and ``port``; ``own_names``:
        the machine's names, for a server on every interface."""
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        names = {str(ip)}
        if ip.is_loopback:
            names.update(LOOPBACK_NAMES)
        elif ip.is_unspecified:
            names.update(("localhost", *own_names))
        names.update(extra)
        return cls(frozenset(name.lower().strip("[]") for name in names if name), port,
                   ip.is_unspecified)

    def accepts(self, host: str) -> bool:
        """Whether a request whose ``Host`` header is ``host`` is this server's."""
        split = split_host(host)
        if split is None:
            return False
        name, port = split
        if port != self.port and not (port is None and self.port == 80):
            return False
        return name in self.names or (self.any_ip and is_ip(name))

    def describe(self) -> str:
        """The accepted hosts, for a refusal's message."""
        shown = sorted(f"[{name}]" if ":" in name else name for name in self.names)
        if self.any_ip:
            shown.insert(0, "any IP address")
        return ", ".join(f"{name}:{self.port}" for name in shown)


class Deadlines:
    """Closes connections whose request has not arrived by its deadline.

    A socket timeout bounds each read, not a request: a client sending one byte every few
    seconds would hold its thread for ever. This one thread shuts such a connection down
    (the blocked read then sees the end of the stream), whatever the pace of its bytes.
    """

    def __init__(self) -> None:
        self._due: dict[socket.socket, float] = {}
        self._changed = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._watch, name="dormant-dev-deadlines",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def arm(self, connection: socket.socket, seconds: float) -> None:
        with self._changed:
            self._due[connection] = time.monotonic() + seconds
            self._changed.notify()

    def disarm(self, connection: socket.socket) -> None:
        with self._changed:
            self._due.pop(connection, None)

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify()

    def _watch(self) -> None:
        with self._changed:
            while not self._closed:
                now = time.monotonic()
                for connection, due in list(self._due.items()):
                    if due <= now:
                        del self._due[connection]
                        cut_connection(connection)
                upcoming = min(self._due.values(), default=None)
                self._changed.wait(None if upcoming is None else max(upcoming - now, 0.01))


def cut_connection(connection: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already gone
        connection.shutdown(socket.SHUT_RDWR)


