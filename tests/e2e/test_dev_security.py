"""Who can drive ``dormant dev``: its own pages and local clients, not another site's page.

The server trusts ``X-Principal``, so a page of any other origin open in the same browser
must neither read its sessions nor write to them. In headless Chromium, a page served by a
second HTTP server (another origin) tries both against a real ``dormant dev`` process: its
reads fail (no CORS for it), its "simple" POSTs (``text/plain``, or no content type, which
skip the CORS pre-flight) are refused with 403 ``forbidden_origin`` and change nothing; with
``--allow-origin`` naming that page's origin, the same page reads, streams included.

Over plain HTTP: a foreign ``Host`` (DNS rebinding) is refused, a method without a handler is
a JSON 405, a malformed request a JSON 400, a connection that sends no request in time (or
dribbles one) is closed while a stream runs on, a full pool of threads frees itself, and a
port already in use is one line on stderr and exit status 2.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, Response

from dormant._devserver import DevServer as InProcessServer
from dormant.http import build_resolver
from dormant.samples.bookings import build
from dormant.stores import SqliteStore
from tests._http import raw_request
from tests._timing import scaled

from .conftest import ROOT, DevServer
from .test_console import browser, open_page  # noqa: F401  (the module's browser fixture)

#: The attacking page: every attempt's outcome as JavaScript sees it, in ``window.results``.
ATTACK_PAGE = """<!doctype html><title>another site</title>
<script type="module">
const q = new URLSearchParams(location.search);
const target = q.get("target"), sessionId = q.get("session"), approvalId = q.get("approval");
const results = {};
async function attempt(name, send) {
  try {
    const response = await send();
    results[name] = {status: response.status, type: response.type,
                     body: response.type === "opaque" ? null : await response.text()};
  } catch (error) {
    results[name] = {error: String(error)};
  }
}
const approve = JSON.stringify({sessionId, approvals: [{approvalId, approved: true}]});
const message = JSON.stringify({sessionId, message: "upgrade my room BK-9 to a suite"});
await attempt("read", () => fetch(`${target}/sessions/${sessionId}`,
                                  {headers: {"X-Principal": "local"}}));
await attempt("readSimple", () => fetch(`${target}/sessions/${sessionId}`));
await attempt("approvePlain", () => fetch(`${target}/turns`, {
  method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"}, body: approve}));
await attempt("approveUntyped", () => fetch(`${target}/turns`, {
  method: "POST", mode: "no-cors", body: new Blob([approve])}));
await attempt("messagePlain", () => fetch(`${target}/agui`, {
  method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"},
  body: JSON.stringify({threadId: sessionId, runId: "r1", state: {}, tools: [], context: [],
                        forwardedProps: {}, messages: [
                          {id: "m1", role: "user", content: "upgrade my room BK-9"}]})}));
await attempt("messageUntyped", () => fetch(`${target}/turns`, {
  method: "POST", mode: "no-cors", body: new Blob([message])}));
if (q.get("follow")) {
  await attempt("follow", async () => {
    const response = await fetch(`${target}/sessions/${sessionId}/events?follow=true`,
                                 {headers: {"X-Principal": "local"}});
    const reader = response.body.getReader();
    const first = await reader.read();
    await reader.cancel();
    return {status: response.status, type: response.type,
            text: async () => new TextDecoder().decode(first.value)};
  });
}
window.results = results;
</script>
"""
POSTS = ("approvePlain", "approveUntyped", "messagePlain", "messageUntyped")


@pytest.fixture
def foreign_site(tmp_path: Path) -> Iterator[str]:
    """Another origin: a plain HTTP server on another port, serving the attacking page."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "attack.html").write_text(ATTACK_PAGE)
    handler = partial(SimpleHTTPRequestHandler, directory=str(site))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _paused_on_approval(server: DevServer, session_id: str) -> dict[str, Any]:
    """A session waiting on the approval of ``upgrade_room`` (the demo model's answer)."""
    turn = httpx.post(f"{server.url}/turns", timeout=60, json={
        "sessionId": session_id, "message": "upgrade my room BK-7 to a suite"})
    assert turn.status_code == 200, turn.text
    view = _session(server, session_id)
    assert [a["tool"] for a in view["pendingApprovals"]] == ["upgrade_room"], view
    return view


def _session(server: DevServer, session_id: str) -> dict[str, Any]:
    got = httpx.get(f"{server.url}/sessions/{session_id}", params={"events": "true"},
                    timeout=60)
    assert got.status_code == 200, got.text
    view: dict[str, Any] = got.json()
    return view


def _attack(page: Page, site: str, server: DevServer, view: dict[str, Any], *,
            follow: bool = False) -> tuple[dict[str, Any], dict[str, list[int]]]:
    """Open the attacking page against ``server``; what its script saw, and the statuses the
    browser's network layer got per attempt's path (what the script may not see)."""
    statuses: dict[str, list[int]] = {}

    def seen(response: Response) -> None:
        if response.url.startswith(server.url):
            path = response.url.removeprefix(server.url).split("?", 1)[0]
            statuses.setdefault(f"{response.request.method} {path}", []).append(
                response.status)

    page.on("response", seen)
    approval = view["pendingApprovals"][0]["approvalId"]
    query = f"target={server.url}&session={view['sessionId']}&approval={approval}"
    page.goto(f"{site}/attack.html?{query}" + ("&follow=1" if follow else ""))
    page.wait_for_function("() => window.results !== undefined", timeout=60_000)
    results: dict[str, Any] = page.evaluate("() => window.results")
    return results, statuses


def test_a_page_of_another_origin_can_neither_read_nor_write(
        browser: Browser, dev_server: DevServer, foreign_site: str) -> None:  # noqa: F811
    before = _paused_on_approval(dev_server, "victim")

    for page in open_page(browser, dev_server):
        results, statuses = _attack(page, foreign_site, dev_server, before)

    # Reads: the browser withholds the answer (no CORS for this origin), with or without
    # the pre-flight X-Principal asks for.
    assert set(results["read"]) == {"error"}, results["read"]
    assert set(results["readSimple"]) == {"error"}, results["readSimple"]
    # Writes that need no pre-flight reach the server, which refuses them: 403, every one.
    for name in POSTS:
        assert results[name]["type"] == "opaque", (name, results[name])
    assert statuses["POST /turns"] == [403, 403, 403], statuses
    assert statuses["POST /agui"] == [403], statuses
    assert set(statuses.get("OPTIONS /sessions/session_victim", [403])) == {403}, statuses
    # Nothing was written: the same version and events, the approval still pending, the
    # upgrade never ran.
    after = _session(dev_server, "victim")
    assert after["version"] == before["version"]
    assert after["events"] == before["events"]
    assert after["pendingApprovals"] == before["pendingApprovals"]
    assert not [e for e in after["events"] if e.get("type") == "tool_result"
                and e.get("name") == "upgrade_room"], after["events"]


def test_an_allowed_origin_reads_and_follows(browser: Browser, tmp_path: Path,  # noqa: F811
                                            foreign_site: str) -> None:
    dev = DevServer(tmp_path / "allowed.db", args=("--allow-origin", foreign_site)).start()
    try:
        view = _paused_on_approval(dev, "shared")
        for page in open_page(browser, dev):
            results, _ = _attack(page, foreign_site, dev, view, follow=True)
        # Those pages may read: the API's answer, and the followed stream's first feed.
        assert results["read"]["status"] == 200, results["read"]
        assert json.loads(results["read"]["body"])["sessionId"] == "session_shared"
        assert results["follow"]["status"] == 200, results["follow"]
        assert "data: " in results["follow"]["body"], results["follow"]
        # ...and what they send as JSON runs like any client's (the CORS pre-flight passes).
        allowed = httpx.options(f"{dev.url}/turns", headers={
            "Origin": foreign_site, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type, x-principal"}, timeout=30)
        assert allowed.headers["access-control-allow-origin"] == foreign_site
        assert "X-Principal" in allowed.headers["access-control-allow-headers"]
        # Another origin still gets nothing.
        other = httpx.get(f"{dev.url}/sessions", headers={"Origin": "http://localhost:1"},
                          timeout=30)
        assert (other.status_code, other.json()["code"]) == (403, "forbidden_origin")
    finally:
        dev.kill()


def test_the_default_sends_no_cors_headers_to_anyone(shared_server: DevServer) -> None:
    own = httpx.post(f"{shared_server.url}/turns", timeout=60,
                     headers={"Origin": shared_server.url},
                     json={"sessionId": "own-page", "message": "hello"})
    local = httpx.get(f"{shared_server.url}/sessions", timeout=30)

    assert own.status_code == 200, own.text  # the console's own page: its own origin
    assert local.status_code == 200
    for response in (own, local):
        assert not [h for h in response.headers if h.lower().startswith("access-control-")]


# --- over plain HTTP ---------------------------------------------------------------------------


def _raw(url: str, method: str, path: str, headers: dict[str, str] | None = None
         ) -> tuple[int, dict[str, Any], dict[str, str]]:
    return raw_request(url, method, path, headers=headers)


def test_a_foreign_host_is_refused_and_the_loopback_names_are_not(
        shared_server: DevServer) -> None:
    port = shared_server.port
    status, body, _ = _raw(shared_server.url, "GET", "/sessions",
                           {"Host": f"evil.example:{port}"})
    assert (status, body["code"]) == (421, "forbidden_host")
    assert f"127.0.0.1:{port}" in body["message"] and "evil.example" in body["message"]
    assert _raw(shared_server.url, "GET", "/sessions", {"Host": "evil.example"})[0] == 421
    assert _raw(shared_server.url, "GET", "/sessions", {"Host": "localhost:1"})[0] == 421

    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}",
                 f"LOCALHOST:{port}"):
        assert _raw(shared_server.url, "GET", "/sessions", {"Host": host})[0] == 200, host


@pytest.mark.parametrize(("method", "path", "allow"), [
    ("TRACE", "/sessions", "GET"),
    ("FOO", "/turns", "POST"),
    ("CONNECT", "/nowhere", "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT"),
])
def test_a_method_without_a_handler_is_a_json_405_with_allow(
        shared_server: DevServer, method: str, path: str, allow: str) -> None:
    status, body, headers = _raw(shared_server.url, method, path)

    assert (status, body["code"], headers["allow"]) == (405, "method_not_allowed", allow)
    assert headers["content-type"] == "application/json"
    assert method in body["message"]


def test_a_malformed_request_line_is_a_json_400(shared_server: DevServer) -> None:
    with socket.create_connection(("127.0.0.1", shared_server.port), timeout=30) as sock:
        sock.sendall(b"GARBAGE / HTTP/9.9.9\r\n\r\n")
        answer = _read_all(sock)

    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), answer
    assert b"application/json" in head
    assert json.loads(body)["code"] == "bad_request"


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


IDLE = 1.0  # the in-process server's idle timeout, seconds


@pytest.fixture
def quick(tmp_path: Path) -> Iterator[InProcessServer]:
    """An in-process ``dormant dev`` server (Bookings, demo model) with a 1 s idle timeout,
    two threads and a followed stream's keep-alive every 0.2 s."""
    store = SqliteStore(tmp_path / "quick.db")
    app, agent = build(store=store)
    server = InProcessServer(("127.0.0.1", 0), build_resolver(app, agent, keepalive=0.2),
                             idle_timeout=IDLE, threads=2)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
        store.close()


def _closed_within(sock: socket.socket, seconds: float) -> float:
    """Seconds until the server closed ``sock`` (its end of stream); fails past ``seconds``."""
    started = time.monotonic()
    sock.settimeout(seconds)
    assert _read_all(sock) == b""
    return time.monotonic() - started


def test_a_silent_connection_is_closed_by_the_server(quick: InProcessServer) -> None:
    port = quick.server_address[1]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        waited = _closed_within(sock, scaled(10))
    assert waited >= IDLE * 0.8, waited


def test_a_dribbled_request_is_cut_although_bytes_keep_coming(quick: InProcessServer) -> None:
    port = quick.server_address[1]
    request = f"GET /sessions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Pad: {'x' * 200}\r\n"
    cut = threading.Event()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        def dribble() -> None:
            for byte in request.encode():
                try:
                    sock.send(bytes([byte]))
                except OSError:
                    cut.set()
                    return
                if cut.wait(0.05):
                    return

        sender = threading.Thread(target=dribble, daemon=True)
        sender.start()
        waited = _closed_within(sock, scaled(10))
        cut.set()
        sender.join(10)
    # The whole request would take 12 s at this pace; each byte came well within the limit.
    assert waited < len(request) * 0.05 / 2, waited


def test_a_stream_outlives_the_idle_timeout(quick: InProcessServer) -> None:
    posted = httpx.post(f"{quick.url}/turns", json={"sessionId": "s", "message": "hello"},
                        timeout=30)
    assert posted.status_code == 200, posted.text
    version = httpx.get(f"{quick.url}/sessions/s", timeout=30).json()["version"]
    later = threading.Timer(3 * IDLE, lambda: httpx.post(
        f"{quick.url}/turns", json={"sessionId": "s", "message": "again"}, timeout=30))
    data: list[str] = []
    with httpx.stream("GET", f"{quick.url}/sessions/s/events",
                      params={"follow": "true", "after": str(version)},
                      timeout=scaled(30)) as stream:
        assert stream.status_code == 200
        later.start()
        for line in stream.iter_lines():
            if line.startswith("data: "):
                data.append(line)
                break
    later.join(30)
    # The commit made three idle timeouts after the stream began still reached it.
    assert data and json.loads(data[0].removeprefix("data: "))["version"] > version, data


def test_connections_that_hold_every_thread_are_freed_by_the_timeout(
        quick: InProcessServer) -> None:
    port = quick.server_address[1]
    holders = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(2)]
    try:
        # Both threads are held by connections that say nothing; a third client is served
        # once the idle timeout has closed them.
        answered = httpx.get(f"{quick.url}/sessions", timeout=scaled(30))
        assert answered.status_code == 200
        for holder in holders:
            _closed_within(holder, scaled(10))
    finally:
        for holder in holders:
            holder.close()


def test_the_page_is_told_what_the_installation_lacks(quick: InProcessServer) -> None:
    quick.lacking = 'POST /agui needs "ag-ui-protocol" <here>'
    page = httpx.get(f"{quick.url}/", headers={"Accept": "text/html"}, timeout=30)

    assert page.status_code == 200
    head = page.text.split("</head>", 1)[0]
    assert ('<meta name="dormant-missing" content="POST /agui needs &quot;ag-ui-protocol&quot; '
            '&lt;here&gt;">') in head
    assert page.headers["content-security-policy"].startswith("default-src 'self'")


def test_the_page_is_told_it_may_send_controls_over_agui(quick: InProcessServer) -> None:
    # Advertised in the page the console loads anyway, so the console never probes for it
    # (a probe is a request the server refuses: a 422 in its log and the browser's console).
    page = httpx.get(f"{quick.url}/", headers={"Accept": "text/html"}, timeout=30)
    head = page.text.split("</head>", 1)[0]
    assert '<meta name="dormant-capabilities" content="agui-controls">' in head
    assert "dormant-missing" not in head

    quick.lacking = "POST /agui needs ag-ui-protocol"
    page = httpx.get(f"{quick.url}/", headers={"Accept": "text/html"}, timeout=30)
    head = page.text.split("</head>", 1)[0]
    assert "dormant-capabilities" not in head and "dormant-missing" in head


def test_a_port_in_use_is_one_line_and_status_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "dormant.cli", "dev", "--port", str(port),
             "--db", str(tmp_path / "busy.db")],
            cwd=ROOT, capture_output=True, text=True, timeout=scaled(60))

    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("dormant: ") and f"127.0.0.1:{port}" in lines[0], lines
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert not (tmp_path / "busy.db").exists()  # nothing was served: no database left
