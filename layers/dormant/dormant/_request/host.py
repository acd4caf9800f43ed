"""What the request room sees of the app (:class:`Host`, :class:`SessionsPort`), a handler's
rules for its requests (:class:`RequestRules`), and the invocation ids a request derives."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel

from dormant._inputs import HandlerInput

if TYPE_CHECKING:
    from dormant._commit import CommitPolicy
    from dormant._measure import Meter
    from dormant._timing import Prices
    from dormant.session import Session
    from dormant.stores._base import Store

__all__ = ["DEFAULT_HEARTBEAT", "DEFAULT_LEASE", "Host", "RequestRules", "SessionsPort",
           "derive_invocation"]

#: Seconds a claim's lease lasts when the request has no deadline of its own (a Lambda's
#: remaining time or the handler's ``timeout`` set one).
DEFAULT_LEASE = 120.0
#: Seconds a claim's lease runs past the running turn's last heartbeat (it renews every half
#: of this): how soon after a crash another request may take the invocation over.
DEFAULT_HEARTBEAT = 10.0


class SessionsPort(Protocol):
    """What a request needs of ``app.sessions``."""

    policy: CommitPolicy

    def load(self, session_id: str, *, turns: int | None,
             compacted: bool = False) -> Session | None: ...

    def holds_message(self, session: Session, message_id: str) -> bool: ...

    def arm(self, session_id: str, name: str, fire_at: int) -> None: ...

    def disarm(self, session_id: str, name: str) -> None: ...

    def bind(self, session: Session) -> Session: ...


class Host(Protocol):
    """What the request room and :class:`~dormant._turn.TurnStream` see of the app: its
    sessions, store and clock, and where work that does not fit one request is handed on."""

    @property
    def sessions(self) -> SessionsPort: ...

    @property
    def store(self) -> Store: ...

    @property
    def clock(self) -> Callable[[], int]: ...

    @property
    def hand_on(self) -> Callable[[HandlerInput], None] | None: ...

    @property
    def meter(self) -> Meter | None:
        """Where each request, once ended, is counted (:mod:`dormant._measure`)."""
        ...

    @property
    def prices(self) -> Prices:
        """The app's price table (:class:`~dormant.Price` by model name)."""
        ...

    @property
    def sole(self) -> bool:
        """Whether this process is the only one serving the store (``dormant dev``): a claim
        another boot holds is then dead (see :data:`dormant._ids.BOOT`)."""
        ...


@dataclass(frozen=True)
class RequestRules:
    """A handler's rules for its requests: the state schema, the state keys public clients
    may write, the claim's lease when the request has no deadline, and its heartbeat (0:
    none; the lease then runs to the request's deadline)."""

    schema: type[BaseModel] | None = None
    client_state: frozenset[str] = frozenset()
    lease: float = DEFAULT_LEASE
    heartbeat: float = 0.0


def derive_invocation(session_id: str, key: str) -> str:
    """An invocation id derived from the session and a message id (a redelivery, or the run
    of a queued message, gets the same id and so the same derived call ids)."""
    seed = f"{session_id.removeprefix('session_')}|{key}".encode()
    return "inv_" + hashlib.blake2b(seed, digest_size=8).hexdigest()
