"""A deterministic simulator of the request protocol: the engine.

Requests run on their own threads, but one at a time: every store call a request makes is an
*interleaving point* where it parks and the scheduler picks which request moves next. The
choice comes from a :class:`Chooser`: a seeded random one, or the exhaustive explorer, which
enumerates every schedule of a small set of requests by re-running them from scratch with each
prefix of choices (stateless model checking, as FoundationDB and TigerBeetle test their
protocols). At any point the scheduler may instead *crash* a parked request: its store call
and every later one raise :class:`SimCrash`, so it writes nothing more, and the simulated
clock jumps past its lease.

Time is simulated too: the app's clock reads :attr:`Sim.now`, which moves one millisecond per
scheduling step and jumps on a crash, so a lease runs out only when the schedule says so.

Only the request threads may call the store while a schedule runs; a call from any other
thread (a background poller, a tool's own thread) would make a schedule unrepeatable, and is
reported as a failure of the schedule.
"""

from __future__ import annotations

import random
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CURRENT",
    "WRITES",
    "Chooser",
    "Exhaustive",
    "Random",
    "Request",
    "Sim",
    "SimCrash",
    "SimStore",
    "Step",
]

#: The request whose thread (or tool thread: they run in a copy of its context) runs now.
CURRENT: ContextVar[Request | None] = ContextVar("sim_request", default=None)
#: Store calls that write. The rest only read, and two reads commute.
WRITES = frozenset({"append", "fork", "write_control", "delete"})
#: Wall-clock seconds a request may take between two points before the schedule is declared
#: stuck (a request blocked on something other than the store: a lock a parked one holds).
STUCK_AFTER = 30.0


class SimCrash(BaseException):
    """The request's process died here. A BaseException, so the library's ``except
    Exception`` handlers do not turn it into a failure that gets written."""


@dataclass(frozen=True)
class Step:
    """One scheduling decision: ``step`` a request to its next point, or ``crash`` it."""

    action: str
    request: int

    def __str__(self) -> str:
        return f"{self.action}:{self.request}"


@dataclass
class Request:
    """One request of a schedule: a name for reports and the call that makes it (on its own
    thread). ``result``: what the call returned; ``error``: what it raised."""

    name: str
    call: Callable[[], Any]
    index: int = 0
    result: Any = None
    error: BaseException | None = None
    crashed: bool = False
    done: bool = False
    #: The store call it is parked at ("" before its first, while it runs).
    pending: str = ""
    ops: list[str] = field(default_factory=list)
    crash_at: bool = False
    #: What the world noted when it made its first store call (see ``Sim.observe``).
    seen: Any = None
    thread: threading.Thread | None = None
    go: threading.Event = field(default_factory=threading.Event)

    @property
    def live(self) -> bool:
        return not self.done


class Chooser:
    """Picks the next step among the enabled ones."""

    def choose(self, options: Sequence[Step], requests: Sequence[Request]) -> Step:
        raise NotImplementedError


class Random(Chooser):
    """A seeded random schedule; ``crash_rate``: the chance a step is a crash instead (at
    most ``crashes`` per schedule)."""

    def __init__(self, seed: int, *, crash_rate: float = 0.05, crashes: int = 1,
                 stall_rate: float = 0.0) -> None:
        self.rng = random.Random(seed)
        self.crash_rate = crash_rate
        self.crashes = crashes
        self.stall_rate = stall_rate

    def choose(self, options: Sequence[Step], requests: Sequence[Request]) -> Step:
        steps = [o for o in options if o.action == "step"]
        crashes = [o for o in options if o.action == "crash"]
        if crashes and self.crashes > 0 and self.rng.random() < self.crash_rate:
            self.crashes -= 1
            return self.rng.choice(crashes)
        chosen = self.rng.choice(steps)
        if self.stall_rate and self.rng.random() < self.stall_rate:
            return Step("stall", chosen.request)
        return chosen


class Exhaustive(Chooser):
    """Every schedule, one run each: a depth-first walk over the tree of choices.

    Each run follows ``prefix`` and then takes the first option at every new node; after the
    run, :meth:`advance` moves to the next unexplored branch (False once there is none).
    ``crashes``: how many crashes one schedule may hold.
    """

    def __init__(self, *, crashes: int = 1) -> None:
        self.crashes = crashes
        self.prefix: list[int] = []
        #: (chosen index, number of options) at each node of the last run.
        self.path: list[tuple[int, int]] = []
        self._left = crashes

    def reset(self) -> None:
        self.path = []
        self._left = self.crashes

    def choose(self, options: Sequence[Step], requests: Sequence[Request]) -> Step:
        allowed = [o for o in options if o.action == "step" or self._left > 0]
        depth = len(self.path)
        index = self.prefix[depth] if depth < len(self.prefix) else 0
        self.path.append((index, len(allowed)))
        chosen = allowed[index]
        if chosen.action == "crash":
            self._left -= 1
        return chosen

    def advance(self) -> bool:
        """The next schedule's prefix: the deepest node with an option not taken yet."""
        path = self.path
        while path:
            index, count = path[-1]
            if index + 1 < count:
                self.prefix = [i for i, _ in path[:-1]] + [index + 1]
                return True
            path = path[:-1]
        return False


class Sim:
    """One schedule's world: the clock, the scheduler, the requests."""

    def __init__(self, chooser: Chooser, *, start_ms: int, lease_ms: int,
                 observe: Callable[[Request], None] = lambda request: None) -> None:
        self.chooser = chooser
        self.observe = observe
        self.now = start_ms
        self.lease_ms = lease_ms
        self.requests: list[Request] = []
        self.trace: list[str] = []
        self._local = threading.local()
        self._turn = threading.Condition()
        self._active: Request | None = None
        self.running = False
        self.stray: list[str] = []

    # --- what the app sees ------------------------------------------------------------------

    def clock(self) -> int:
        return self.now

    def point(self, op: str) -> None:
        """Called by the store proxy before each store call."""
        request: Request | None = getattr(self._local, "request", None)
        if request is None:
            if self.running:
                self.stray.append(f"{op} from thread {threading.current_thread().name}")
            return
        if request.crashed:
            raise SimCrash(request.name)
        request.pending = op
        with self._turn:
            self._active = None
            self._turn.notify_all()
        request.go.wait()
        request.go.clear()
        if request.crash_at:
            request.crashed = True
            raise SimCrash(request.name)
        self.observe(request)
        request.ops.append(op)
        self.trace.append(f"{request.index}:{op}")

    # --- the schedule -----------------------------------------------------------------------

    def run(self, requests: Sequence[Request]) -> None:
        """Run ``requests`` to their ends (or crashes) in the order the chooser picks."""
        self.requests = list(requests)
        for index, request in enumerate(self.requests):
            request.index = index
        self.running = True
        try:
            for request in self.requests:  # each runs to its first point, one at a time
                self._start(request)
            while True:
                live = [r for r in self.requests if r.live]
                if not live:
                    break
                options = [Step("step", r.index) for r in live]
                options += [Step("crash", r.index) for r in live]
                step = self.chooser.choose(options, self.requests)
                request = self.requests[step.request]
                self.now += 1
                if step.action == "crash":
                    self.trace.append(f"{request.index}:crash@{request.pending}")
                    request.crash_at = True
                    self.now += 2 * self.lease_ms
                elif step.action == "stall":  # alive, but its lease ran out (a lost beat)
                    self.trace.append(f"{request.index}:stall@{request.pending}")
                    self.now += 2 * self.lease_ms
                self._resume(request)
        finally:
            self.running = False

    def _start(self, request: Request) -> None:
        def body() -> None:
            self._local.request = request
            CURRENT.set(request)
            request.go.wait()
            request.go.clear()
            try:
                request.result = request.call()
            except SimCrash:
                request.crashed = True
            except BaseException as error:  # reported by the invariants
                request.error = error
            finally:
                request.done = True
                self._local.request = None
                with self._turn:
                    self._active = None
                    self._turn.notify_all()

        request.thread = threading.Thread(target=body, name=f"sim-{request.name}", daemon=True)
        request.thread.start()
        self._resume(request)

    def _resume(self, request: Request) -> None:
        with self._turn:
            self._active = request
            request.go.set()
            if not self._turn.wait_for(lambda: self._active is None, timeout=STUCK_AFTER):
                raise AssertionError(
                    f"request {request.name} neither reached a store call nor ended within "
                    f"{STUCK_AFTER} s: it waits on something outside the store "
                    f"(trace: {' '.join(self.trace)})\n{_stacks()}")
        if request.done and request.thread is not None:
            request.thread.join()


def _stacks() -> str:
    """Where every thread of the process is now: what a stuck request waits on."""
    frames = sys._current_frames()
    return "\n".join(
        f"thread {thread.name}:\n" + "".join(traceback.format_stack(frames[thread.ident]))
        for thread in threading.enumerate() if thread.ident in frames)


#: Store methods that ask nothing of the store's backend (a tally it keeps in the process):
#: not interleaving points.
LOCAL = frozenset({"counters"})


class SimStore:
    """A store whose every call is an interleaving point of ``sim`` (the rest of the store is
    the wrapped one's). ``writes``: every successful append, as (request name, version,
    event ids)."""

    def __init__(self, store: Any, sim: Sim | None = None) -> None:
        self._store = store
        self.sim = sim
        self.writes: list[tuple[str, int, list[str]]] = []

    @property
    def unwrapped(self) -> Any:
        """The store itself: what the invariants read (no interleaving point)."""
        return self._store

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._store, name)
        if not callable(attribute) or name.startswith("_") or name in LOCAL:
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            sim = self.sim
            if sim is not None:
                sim.point(name)
            result = attribute(*args, **kwargs)
            if name == "append" and getattr(result, "ok", False):
                request = getattr(sim._local, "request", None) if sim is not None else None
                events = args[1] if len(args) > 1 else kwargs["events"]
                self.writes.append((request.name if request is not None else "-",
                                    result.version, [e.id for e in events]))
            return result

        return call
