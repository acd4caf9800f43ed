"""What ``dormant dev`` serves: the app an app spec names, built on the store, its routes and
the scheduler firing its timers; with ``--reload``, built again after each save to its files
and handed to the running server."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dormant._appspec import AppSpecError, app_code, build_app, load_factory, shown
from dormant._devserver.reload import Reloader, Watcher, forget_modules
from dormant._devserver.replay import add_replay_route
from dormant.http import build_resolver
from dormant.schedulers.local import LocalScheduler

__all__ = ["Serving"]


class Serving:
    """The app ``spec`` names on ``store`` (``model``: instead of the app's own), served with
    ``cors`` and ``client_state`` and a turn ``timeout``; :attr:`scheduler` fires its timers.

    The app's own failures are :class:`AppSpecError` lines (:func:`dormant._appspec.app_code`).
    """

    def __init__(self, spec: str, store: Any, *, model: Any, cors: Any,
                 client_state: Sequence[str], timeout: float | None) -> None:
        self.spec = spec
        self.store = store
        self.model = model
        self.cors = cors
        self.client_state = list(client_state)
        self.timeout = timeout
        self.app: Any = None
        self.scheduler: Any = None

    def load(self) -> Callable[..., Any]:
        """The app's factory (importing the app)."""
        return app_code(self.spec, load_factory, self.spec)

    def build(self, factory: Callable[..., Any]) -> tuple[Any, Any, Any]:
        """The app and agent ``factory`` builds, and the resolver serving them: the API's
        routes and ``dormant dev``'s own (``POST /sessions/{id}/replay``)."""
        app, agent = app_code(self.spec, build_app, factory, store=self.store, model=self.model,
                              spec=self.spec)
        resolver = build_resolver(app, agent, timeout=self.timeout,
                                  client_state=self.client_state, cors=self.cors)
        add_replay_route(resolver, app, agent)
        return app, agent, resolver

    def arm(self, app: Any, agent: Any) -> None:
        """Fire the app's timers here, as the wake Lambda's turns do on AWS."""
        self.app = app
        self.scheduler = LocalScheduler(app.handler.wake(agent=agent, timeout=self.timeout))
        app.scheduler = self.scheduler
        app.sole = True  # one process serves this database: an earlier run's claims are dead

    def watch(self, factory: Callable[..., Any], server: Any) -> Reloader:
        """Reload the app into ``server`` whenever one of its files changes."""
        module = sys.modules[factory.__module__]
        root = Path(module.__file__ or ".").resolve().parent
        watcher = Watcher(root)
        _say(f"dormant dev: reloading on a change to the .py files under {root}")
        return Reloader(watcher, lambda changed: self.reload(changed, watcher, server)).start()

    def reload(self, changed: list[Path], watcher: Watcher, server: Any) -> None:
        """The app as its files now read, served from the next request on; when it cannot
        be loaded, one line says why and the app as it was goes on serving."""
        saved = ", ".join(shown(path) for path in changed[:3]) + \
            (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
        forget_modules(set(watcher.seen) | set(changed))
        try:
            app, agent, resolver = self.build(self.load())
        except AppSpecError as error:
            _say(f"dormant: {error} (after {saved} changed; still serving the app as it was: "
                 f"fix it and save)")
            return
        old_app, old = self.app, self.scheduler
        server.serve_app(resolver)
        self.arm(app, agent)
        old_app.scheduler = self.scheduler  # for the turns it is still running
        old.close()  # its timers are in their sessions: the new one re-arms them
        self.scheduler.recover(self.store)  # not sole: this process's own claims are live
        _say(f"dormant dev: {saved} changed: reloaded, serving {app.name}/{agent.name}")


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)

