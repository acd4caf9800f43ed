"""``dormant dev`` under a burst: 64 clients connecting at the same instant are all served.

The stdlib server listens with a backlog of 5: a burst past what its accept loop drains in
time had connections reset. Each round here opens 64 connections released by one barrier, each
sending a request that runs a real turn (or reads a session), and every one must get its own
correct answer: no reset, no refused connection, no answer meant for another client.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dormant._devserver import LISTEN_BACKLOG
from dormant._devserver import DevServer as ServerClass
from tests.e2e.conftest import DevServer

CLIENTS = 64
ROUNDS = 3


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    server = DevServer(Path(tmp_path_factory.mktemp("burst")) / "dormant.db").start()
    try:
        yield server
    finally:
        server.kill()


def _burst(url: str, requests: list[tuple[str, str, dict[str, Any] | None]]
           ) -> list[tuple[int, Any] | BaseException]:
    """Send every request on its own connection, all released at once by a barrier."""
    host, port = url.removeprefix("http://").split(":")
    barrier = threading.Barrier(len(requests))
    results: list[tuple[int, Any] | BaseException] = [RuntimeError("not run")] * len(requests)

    def client(index: int) -> None:
        method, path, body = requests[index]
        connection = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            barrier.wait(timeout=60)
            connection.request(method, path, body=json.dumps(body) if body else None,
                               headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            results[index] = (response.status, json.loads(response.read()))
        except BaseException as error:  # a reset, a refusal: the result the test reports
            results[index] = error
        finally:
            connection.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


def test_the_server_listens_with_a_backlog_sized_for_bursts() -> None:
    assert ServerClass.request_queue_size == LISTEN_BACKLOG >= 4 * CLIENTS


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_64_clients_at_once_each_get_their_own_turn_and_none_is_reset(dev: DevServer,
                                                                       round_: int) -> None:
    sessions = [f"burst-{round_}-{i}" for i in range(CLIENTS)]

    results = _burst(dev.url, [("POST", "/turns", {"sessionId": s, "message": "book me in"})
                               for s in sessions])

    failures = [(s, r) for s, r in zip(sessions, results, strict=True)
                if not isinstance(r, tuple)]
    assert failures == []
    for session, result in zip(sessions, results, strict=True):
        assert isinstance(result, tuple)
        status, body = result
        assert status == 200, body
        assert body["sessionId"] == f"session_{session}"
        assert body["status"] == "yielded_tool"
        assert [c["name"] for c in body["yieldedTools"]] == ["ask_guest"]


def test_64_clients_at_once_reading_and_writing_mixed_get_correct_answers(dev: DevServer
                                                                           ) -> None:
    sessions = [f"mixed-{i}" for i in range(CLIENTS // 2)]
    for result in _burst(dev.url, [("POST", "/turns", {"sessionId": s, "message": "book me"})
                                   for s in sessions]):
        assert isinstance(result, tuple) and result[0] == 200, result
    requests: list[tuple[str, str, dict[str, Any] | None]] = []
    for session in sessions:
        requests.append(("GET", f"/sessions/{session}", None))
        requests.append(("POST", "/turns", {"sessionId": session, "message": "hello",
                                            "messageId": f"{session}-m2"}))

    results = _burst(dev.url, requests)

    assert [r for r in results if not isinstance(r, tuple)] == []
    for (method, path, _), result in zip(requests, results, strict=True):
        assert isinstance(result, tuple)
        status, body = result
        if method == "GET":
            session = path.rsplit("/", 1)[-1]
            assert status == 200 and body["sessionId"] == f"session_{session}", body
            assert body["status"] == "awaiting_input"
        else:
            assert status == 202 and body["status"] == "queued", body  # it waits on a call
