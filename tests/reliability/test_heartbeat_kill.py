"""``kill -9`` of a process that runs a claimed turn, on a store other processes share (as
Lambda functions do): the claim's lease runs out one heartbeat after the kill, not at the
request's deadline.

One process parks a session on the approval of a slow tool. A second process (a plain
Python worker, not ``dormant dev``: nothing there knows the claim is dead but its lease)
approves it with a handler whose heartbeat is 1 s, and runs the tool. While the tool runs,
well past the claim's first lease, the session reads as running and not stranded: the
worker's heartbeat renews the lease. The worker is then killed with SIGKILL. Within one
heartbeat (plus a read's slack) the session reads stranded, and a stop from the first
process ends the invocation at once, in its own request.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from dormant._ids import now_ms
from dormant.stores.sqlite import SqliteStore
from tests.reliability.kill_app import RUNS, TOOL_SECONDS, build

#: The worker's heartbeat, and how often its control thread reads (beats need half of it).
HEARTBEAT = 1.0
POLL_INTERVAL = 0.1
#: How long the session must read live while the tool runs (several heartbeats).
ALIVE_FOR = 3.0
#: Seconds past the kill by which the session must read stranded: one heartbeat, and the
#: slack of a beat that was due as the worker died.
STRANDED_WITHIN = HEARTBEAT + 1.0
SESSION = "beat"

WORKER = textwrap.dedent("""
    import sys
    from dormant.stores.sqlite import SqliteStore
    from tests.reliability.kill_app import build

    app, agent = build(SqliteStore(sys.argv[1]))
    rest = app.handler.rest(agent=agent, heartbeat=float(sys.argv[3]),
                            poll_interval=float(sys.argv[4]))
    rest({"session_id": sys.argv[5], "input": {"approvals": [
        {"approval_id": sys.argv[2], "approved": True}]}})
""")


def _wait(check: object, within: float, what: str) -> float:
    """Poll ``check`` until true; the seconds it took."""
    started = time.monotonic()
    while not check():  # type: ignore[operator]
        assert time.monotonic() - started < within, f"{what} within {within} s"
        time.sleep(0.02)
    return time.monotonic() - started


def test_a_killed_claims_lease_runs_out_one_heartbeat_after_the_kill(tmp_path: Path) -> None:
    database, runs = tmp_path / "dormant.db", tmp_path / "runs.txt"
    app, agent = build(SqliteStore(str(database)))
    rest = app.handler.rest(agent=agent)
    parked = rest({"session_id": SESSION, "input": {"message": "please run the job"}})
    assert parked.status == "yielded_tool", parked  # (an approval is a yield)
    session = app.sessions.load(SESSION, turns=None)
    assert session is not None
    [approval] = session.pending_approvals
    invocation = session.open_invocation

    env = {**os.environ, RUNS: str(runs), TOOL_SECONDS: "60",
           "PYTHONPATH": os.pathsep.join([str(Path.cwd()), os.environ.get("PYTHONPATH", "")])}
    worker = subprocess.Popen([sys.executable, "-c", WORKER, str(database),
                               approval.approval_id, str(HEARTBEAT), str(POLL_INTERVAL), SESSION],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        _wait(lambda: runs.exists() and runs.read_text().strip(), 30.0,
              "the approved tool starts in the worker")
        claimed = app.sessions.load(SESSION, turns=0)
        assert claimed is not None and claimed.head.running
        first_lease = claimed.head.lease
        assert first_lease <= now_ms() + HEARTBEAT * 1000, \
            "a claim with a heartbeat holds a lease of one heartbeat, not its deadline's"

        alive_until = time.monotonic() + ALIVE_FOR
        while time.monotonic() < alive_until:  # the heartbeat keeps the claim's lease ahead
            live = app.sessions.load(SESSION, turns=0)
            assert live is not None and live.head.running and not live.head.stranded(now_ms())
            time.sleep(0.1)
        renewed = app.sessions.load(SESSION, turns=0)
        assert renewed is not None and renewed.head.lease > first_lease + 1000
        assert worker.poll() is None, worker.stdout.read() if worker.stdout else ""
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
    killed = time.monotonic()

    def stranded() -> bool:
        current = app.sessions.load(SESSION, turns=0)
        assert current is not None and current.head.running
        return current.head.stranded(now_ms())

    _wait(stranded, STRANDED_WITHIN, "the killed claim reads stranded")
    stopped = rest({"session_id": SESSION, "input": {"stop": {"invocation_id": invocation}}})
    assert stopped.status == "stopped", stopped
    assert time.monotonic() - killed < STRANDED_WITHIN + 5.0
    ended = app.sessions.load(SESSION, turns=None)
    assert ended is not None and not ended.head.running and ended.open_invocation is None
    assert [line.split()[0] for line in runs.read_text().splitlines()] == [approval.call_id]
