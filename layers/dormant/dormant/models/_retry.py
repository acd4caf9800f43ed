"""When a model adapter retries a failed call: the backoff between attempts, the longest
``Retry-After`` waited out, and whether the wait still fits the turn's time budget.

Shared by the adapters that run their own bounded retry loop inside a turn (their clients'
retries are turned off so the turn's deadline holds): :func:`with_retries` is that loop. It
asks :func:`retry_delay` how long to wait, :func:`refusal` whether to wait at all, and then
waits on the turn's signal (``signal.wait(delay)``), which an abort cuts short. Free of any
provider package: the adapter says what a failure is (:class:`Verdict`) and what error it
becomes.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from dormant.tools import Aborted, Signal

__all__ = [
    "BACKOFF",
    "BACKOFF_CAP",
    "RETRY_AFTER_CAP",
    "TIMEOUT_RETRIES",
    "Verdict",
    "attempts",
    "backoff",
    "refusal",
    "retry_delay",
    "with_retries",
]

T = TypeVar("T")

#: Backoff between retries: first delay, cap (seconds). A server's ``Retry-After`` wins.
BACKOFF = 0.5
BACKOFF_CAP = 8.0
#: The longest ``Retry-After`` (seconds) waited out; a server asking for more fails the call
#: at once (still marked retryable) rather than holding the turn for minutes.
RETRY_AFTER_CAP = 20.0
#: Retries after a request timeout: it has already used the whole request timeout, so one
#: more try at most.
TIMEOUT_RETRIES = 1


def backoff(attempt: int) -> float:
    """Exponential backoff with jitter (half to all of it) after failed attempt ``attempt``
    (0 for the first), for a failure with no ``Retry-After``."""
    delay: float = min(BACKOFF_CAP, BACKOFF * 2 ** attempt)
    return delay * (0.5 + random.random() / 2)


def retry_delay(attempt: int, asked: float | None) -> float:
    """Seconds to wait before the next attempt: what the server asked for, else backoff."""
    return asked if asked is not None else backoff(attempt)


def refusal(delay: float, asked: float | None, remaining: float | None, made: int) -> str:
    """Why the next attempt is not worth waiting for (a note for the error), or ``""`` when
    it is: the wait does not fit the time left in the turn (``remaining``, None: no
    deadline), or the server asked for longer than :data:`RETRY_AFTER_CAP`. ``made``: the
    attempts made so far."""
    if remaining is not None and delay >= remaining:
        wait = (f"the {asked:g} s the server asked to wait" if asked is not None
                else "the backoff")
        return (f"no time left in the turn ({remaining:.1f} s) for {wait}; not retried after "
                f"{attempts(made)}")
    if asked is not None and asked > RETRY_AFTER_CAP:
        return (f"the server asked to wait {asked:g} s, longer than the {RETRY_AFTER_CAP:g} s "
                f"dormant waits; not retried after {attempts(made)}")
    return ""


def attempts(count: int) -> str:
    """``"1 attempt"``, ``"3 attempts"``: for error notes."""
    return f"{count} attempt" + ("s" if count != 1 else "")


@dataclass(frozen=True)
class Verdict:
    """What a failed attempt was, as the adapter reads its provider's error."""

    #: Whether the same call can succeed if sent again (a 429, a 5xx, a dropped connection).
    retryable: bool
    #: The attempt timed out (it used the whole request timeout: retried once at most).
    timeout: bool = False
    #: The seconds the server asked to wait (``Retry-After``), if it did.
    retry_after: float | None = None


def with_retries(attempt: Callable[[], T], *, signal: Signal, max_retries: int,
                 judge: Callable[[Exception], Verdict | None],
                 fail: Callable[[Exception, str], Exception]) -> tuple[T, int]:
    """Call ``attempt`` until it succeeds: its value, and how many attempts it took.

    ``judge`` reads a failure (None: not the provider's, raised as it is); a failure that is
    not retryable, the last of ``1 + max_retries`` attempts, a second timeout, or one whose
    wait does not fit the turn (:func:`refusal`) is raised as ``fail(failure, note)``, the
    note saying why it was not retried. An abort, before an attempt or during a wait, raises
    :class:`~dormant.tools.Aborted`."""
    made = 0
    timeouts = 0
    while True:
        signal.raise_if_aborted()
        try:
            return attempt(), made + 1
        except Exception as failure:
            verdict = judge(failure)
            if verdict is None:
                raise
            if signal.aborted:  # a read cut short by the turn's deadline or a stop
                raise Aborted("the turn was aborted") from failure
            made += 1
            note = _last(verdict, made, max_retries, timeouts)
            if verdict.timeout:
                timeouts += 1
            delay = retry_delay(made - 1, verdict.retry_after)
            if note is None:
                note = refusal(delay, verdict.retry_after, signal.remaining(), made) or None
            if note is not None:
                raise fail(failure, note) from failure
            if signal.wait(delay):
                raise Aborted("the turn was aborted") from failure


def _last(verdict: Verdict, made: int, max_retries: int, timeouts: int) -> str | None:
    """Why attempt ``made`` is the last (``""``: it is not worth retrying at all), or None."""
    if not verdict.retryable:
        return ""
    if made > max_retries:
        return f"gave up after {attempts(made)}, max_retries={max_retries}"
    if verdict.timeout and timeouts >= TIMEOUT_RETRIES:  # each used the whole request timeout
        return f"gave up after {attempts(made)}; a timed-out request is retried once"
    return None
