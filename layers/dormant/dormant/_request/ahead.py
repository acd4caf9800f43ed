"""The write-ahead of a tool step: before a step's tools run, the turn's slice so far (the
step's calls included) lands as the turn's claim.

A tool that ran then has its call in the ledger whatever becomes of its request: a crash
leaves the invocation running under a lease that runs out (a heartbeat after the process
died), and whoever takes it over runs the step's calls again under the same ids (the tools'
idempotency key); a stop or an interrupt settles them. One write per tool step, on top of
the turn's end: a turn that runs no tool writes nothing before its end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from dormant._commit import Hold, Outcome
from dormant._ids import BOOT
from dormant._request.opening import claim_lease
from dormant._run import Overtaken
from dormant._timing import Recorder
from dormant.errors import StoreError
from dormant.schedulers import LEASE_GRACE_MS, lease_timer

if TYPE_CHECKING:
    from dormant._control import ControlWatch
    from dormant._request.host import Host
    from dormant.session import Session

__all__ = ["WriteAhead"]


class WriteAhead:
    """A turn's write-ahead (``RunState.write_ahead``), called by the tool phase before a
    step's tools run. ``lease``: seconds the request has left, asked at each write (None:
    no deadline, ``default_lease`` then); ``heartbeat``: the claim's
    (0: none, the lease lasts the request); ``watch``: the turn's control watch, whose
    announcement and heartbeat follow the head the write moved.

    The commit policy writes it (merged onto a newer head, or superseded, as any turn's
    commit): superseded, the step's tools do not run and the turn ends there (``outcome``
    then holds what was written); a store that cannot be written fails the turn before they
    run. The first write-ahead of a request that claimed nothing yet arms the lease's
    wake-up timer (``armed``), which the request cancels once its turn committed.
    ``recorder``: times each write (the ``write_ahead`` phase)."""

    def __init__(self, host: Host, session: Session, *, lease: Callable[[], float | None],
                 heartbeat: float, watch: ControlWatch, default_lease: float,
                 recorder: Recorder) -> None:
        self.host = host
        self.recorder = recorder
        self.session = session
        self.lease = lease
        self.default_lease = default_lease
        self.heartbeat = heartbeat
        self.watch = watch
        #: Set when a write-ahead found the turn superseded: the request's outcome.
        self.outcome: Outcome | None = None
        #: The lease wake-up the first write-ahead armed (None: none yet, or the request's
        #: claim armed one already).
        self.armed: str | None = None
        self._armed = session.claimed  # (the request's claim armed the wake-up)

    def __call__(self) -> None:
        session, host = self.session, self.host
        invocation = session.head.open_invocation
        if not session.dirty or invocation is None:
            return  # the calls are in the ledger already (a takeover runs them again)
        left = self.lease()
        until, held = claim_lease(host, self.default_lease if left is None else left,
                                  self.heartbeat)
        with self.recorder.phase("write_ahead") as phase:
            outcome = host.sessions.policy.commit(session, hold=Hold(invocation, held, BOOT))
            phase.attributes["dormant.commit.status"] = outcome.status
        if outcome.status == "failed":
            raise outcome.error or StoreError(
                f"session {session.session_id} could not be written", retryable=True)
        if outcome.status == "superseded":
            self.outcome = outcome
            raise Overtaken(session.session_id)
        session.claimed = True
        session.window.mark_effects()  # a failure from here keeps what landed, and no more
        self.watch.claimed(session.version, self.heartbeat)
        if not self._armed:
            self._armed = True
            self.armed = lease_timer(session.version)
            host.sessions.arm(session.session_id, self.armed, until + LEASE_GRACE_MS)
