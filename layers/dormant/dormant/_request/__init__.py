"""The request room: one request, from its opening to its end.

:func:`serve` is the one request executor, which the handlers'
:class:`~dormant._turn.TurnStream` and the test kit's in-process driver both run: open the
request, run its turn under a control watch, commit, write what it asks of a turn running
elsewhere, then drain the inbox or hand it on (:mod:`dormant._request.serve`).

:func:`open_request` (:mod:`dormant._request.opening`) loads the session, applies the
request's inputs (the decisions are :mod:`dormant._decide`'s), **claims** what must land
before anything runs, and opens the turn's invocation in the slice
(:mod:`dormant._request.invocation`: every opening, claimed or not, is written here; the run
loop only carries on from the :class:`~dormant._run.Start` it returns).

A claim is one conditional write at the version the request read (``CommitPolicy.claim``),
never merged: of two requests racing to end or reopen one response, one lands; the other
decides again from the newer head, where its input either still applies (it claims again)
or is refused by the decision itself (409 naming what happened). Claimed are: a decision or
an answer that lets a tool run or settles a step, an ending (interrupt, a stop of a waiting
response, send-now), a reopening (a retry, a resume of a paused invocation), the start of
the inbox's next message, and the takeover of a stranded invocation.

A claim that lets a turn run carries a **lease**: the epoch ms its request promised to
commit by (``Head.lease``), and a wake-up timer (:data:`LEASE_TIMER`) armed just after it.
When the claimer dies first, the next request on the session, the inbox's hand-on or that
timer finds the invocation stranded and takes it over: it re-runs the unfinished step with
the same call ids (the tools' idempotency key) and drains the inbox.
"""

from dormant._request.host import (
    DEFAULT_HEARTBEAT,
    DEFAULT_LEASE,
    Host,
    RequestRules,
    SessionsPort,
    derive_invocation,
)
from dormant._request.invocation import TurnInput, open_turn
from dormant._request.opening import CLAIM_ATTEMPTS, Opened, open_request
from dormant._request.serve import (
    DEADLINE_MARGIN,
    DRAIN_BUDGET,
    MAX_DRAIN,
    Served,
    Serving,
    serve,
)
from dormant.schedulers import LEASE_GRACE_MS, LEASE_TIMER

__all__ = [
    "CLAIM_ATTEMPTS",
    "DEADLINE_MARGIN",
    "DEFAULT_HEARTBEAT",
    "DEFAULT_LEASE",
    "DRAIN_BUDGET",
    "LEASE_GRACE_MS",
    "LEASE_TIMER",
    "MAX_DRAIN",
    "Host",
    "Opened",
    "RequestRules",
    "Served",
    "Serving",
    "SessionsPort",
    "TurnInput",
    "derive_invocation",
    "open_request",
    "open_turn",
    "serve",
]
