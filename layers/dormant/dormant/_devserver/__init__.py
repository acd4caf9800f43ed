"""``dormant dev``'s HTTP server: the API resolver, served over plain HTTP on localhost.

Each HTTP request becomes an API Gateway REST proxy event and goes through
``resolver.resolve(event, context)`` — the same resolver the ``api`` Lambda runs, so there is one
route table. The principal comes from the ``X-Principal`` header (default ``local``) and is put
where API Gateway's authorizer puts it (``requestContext.authorizer.principalId``).

``POST /agui`` streams: the Lambda context this server passes carries a writer
(:data:`dormant.http.SSE_WRITER_ATTRIBUTE`); the ``/agui`` route, after validating the request
like any other, hands each encoded event to that writer, which sends it as one HTTP chunk and
flushes. Errors found before the first event (a bad body, an unknown session) still come back
as ordinary JSON responses. On Lambda there is no writer and the route returns the whole body.
``GET /sessions/{id}/events?follow=true`` streams through the same writer (a feed per commit).

A browser asking for ``/`` gets the console instead (``dormant._console``: the built page and its
``/assets/``), which uses the same API as any client; every other request, ``/`` from an API
client included, goes to the resolver.

Each request gets a fresh id (``requestContext.requestId``, as API Gateway gives one): a
server-side failure's answer names it, and the log record with the detail carries it. The
server listens with a backlog of :data:`LISTEN_BACKLOG`, so a burst of clients connecting at
once waits to be accepted instead of being reset.

Work a request cannot finish (``App.hand_on``: the rest of a session's inbox, a deadline
retry) goes to this server's :class:`Worker`: a daemon thread that runs each handed-on request
through the REST handler the routes use, one at a time, as AWS's webhook queue would.

The requests running a turn are held in :class:`~dormant._devserver.inflight.InFlight` while
they are served, so a stop can say which it cut off; ``serve_app`` swaps the resolver for a
rebuilt one (``dormant dev --reload``, :mod:`~dormant._devserver.reload`), the requests under
way finishing on the old one.

Who can drive it: the server trusts whoever sends ``X-Principal``, so it must answer only its
own console and the clients on this machine, never a page another site opened in the
browser. Before the resolver, it refuses

- a ``Host`` it does not answer to (421 ``forbidden_host``; see :class:`HostRule`): a page
  of another site that rebinds its own name to 127.0.0.1 sends its own name;
- an ``Origin`` that is neither the server's own nor one passed as ``allow_origins`` (403
  ``forbidden_origin``): a cross-site form or ``text/plain`` POST needs no CORS pre-flight,
  so CORS alone would not stop it writing. A request with no ``Origin`` (curl, the SDKs) is
  not a browser page's and passes.

CORS headers are sent only for ``allow_origins`` (:func:`dev_cors` is the resolver's rule,
the streamed answers follow the same). A method the server has no handler for, and any
request the standard library refuses itself (a malformed request line, headers too long), is
answered in the API's JSON error shape. Connections are served by a fixed pool of threads
(``threads``); a connection that sends no complete request within ``idle_timeout`` seconds
(an idle keep-alive, a request dribbled byte by byte) is closed, so none holds a thread for
long. The limit is on reading a request only: a streamed answer runs as long as it runs.
"""

from dormant._devserver.guard import (
    DEFAULT_PRINCIPAL,
    IDLE_TIMEOUT,
    LISTEN_BACKLOG,
    THREADS,
    HostRule,
    dev_cors,
    normalize_origin,
)
from dormant._devserver.proxy import to_proxy_event
from dormant._devserver.server import DevServer
from dormant._devserver.worker import Worker

__all__ = ["DEFAULT_PRINCIPAL", "IDLE_TIMEOUT", "LISTEN_BACKLOG", "THREADS", "DevServer",
           "HostRule", "Worker", "dev_cors", "normalize_origin", "to_proxy_event"]
