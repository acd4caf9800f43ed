"""The ``dormant`` command: a local server and a session inspector.

::

    dormant dev [--host 127.0.0.1] [--port 8000] [--db PATH] [--app functions/bookings.py]
    dormant sessions list [--db PATH] [--principal P] [--limit N] [--json]
    dormant sessions show ID [--db PATH] [--json]

``dev`` serves the app file's agent through :func:`dormant.http.build_resolver` (the routes of
the ``api`` Lambda) on a SQLite store, so a paused session survives a restart. Timers fire from
a :class:`~dormant.schedulers.local.LocalScheduler` delivering to the agent's wake handler; at
start-up it re-arms the timers pending in the store, so they survive a restart too. The app
file defines ``build(store=None, model=None)`` returning ``(app, agent)``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

from dormant.settings import Settings

__all__ = ["main"]

DEFAULT_APP = "functions/bookings.py"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dormant`` script."""
    parser = _parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        return _usage(parser)
    try:
        code: int = args.run(args)
    except _CliError as error:
        print(f"dormant: {error}", file=sys.stderr)
        return 2
    return code


class _CliError(Exception):
    """A mistake on the command line (exit status 2, message on stderr)."""


def _parser() -> argparse.ArgumentParser:
    settings = Settings.from_env()
    parser = argparse.ArgumentParser(prog="dormant", description="Durable AI agents, locally.")
    commands = parser.add_subparsers(title="commands")

    dev = commands.add_parser("dev", help="serve the API on localhost (SQLite store, local "
                                          "timers)")
    dev.add_argument("--host", default="127.0.0.1")
    dev.add_argument("--port", type=int, default=8000)
    dev.add_argument("--db", default=settings.db_path,
                     help="SQLite file (default: $DORMANT_DB or %(default)s)")
    dev.add_argument("--app", default=DEFAULT_APP,
                     help="Python file with build(store=..., model=...) -> (app, agent) "
                          "(default: %(default)s)")
    dev.add_argument("--client-state", action="append", default=[], metavar="KEY",
                     help="a session state key clients may write through the API's `state` "
                          "(repeat for more; default: none, any client state write is refused)")
    dev.add_argument("--quiet", action="store_true", help="do not log each request")
    dev.set_defaults(run=_dev)

    sessions = commands.add_parser("sessions", help="inspect stored sessions")
    which = sessions.add_subparsers(title="sessions commands")
    sessions.set_defaults(run=lambda _: _usage(sessions))
    listing = which.add_parser("list", help="sessions, newest first")
    listing.add_argument("--db", default=settings.db_path)
    listing.add_argument("--principal", default=None)
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(run=_list)
    show = which.add_parser("show", help="one session's ledger as a timeline")
    show.add_argument("session_id")
    show.add_argument("--db", default=settings.db_path)
    show.add_argument("--json", action="store_true")
    show.add_argument("--app", default=DEFAULT_APP,
                      help="app file, to describe what pending tools expect (optional)")
    show.set_defaults(run=_show)
    return parser


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


# --- dormant dev ------------------------------------------------------------------------------


def load_app_module(path: str | Path) -> ModuleType:
    """Import an app file by path, under its own module name (so its siblings can import it)."""
    file = Path(path).resolve()
    if not file.is_file():
        raise _CliError(f"no app file at {path} (pass --app path/to/app.py; run from the "
                        f"repository root for the default {DEFAULT_APP})")
    if str(file.parent) not in sys.path:
        sys.path.insert(0, str(file.parent))
    spec = importlib.util.spec_from_file_location(file.stem, file)
    if spec is None or spec.loader is None:
        raise _CliError(f"cannot import {file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[file.stem] = module
    spec.loader.exec_module(module)
    if not callable(getattr(module, "build", None)):
        raise _CliError(f"{file} has no build(store=None, model=None) -> (app, agent)")
    return module


def _dev(args: argparse.Namespace) -> int:
    from dormant._devserver import DevServer
    from dormant.http import build_resolver
    from dormant.schedulers.local import LocalScheduler
    from dormant.stores import SqliteStore

    module = load_app_module(args.app)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    db = Path(args.db).resolve()
    store = SqliteStore(db)
    app, agent = module.build(store=store)
    describe = getattr(module, "describe_model", None)
    model = describe(agent.model) if callable(describe) else type(agent.model).__name__
    timeout = Settings.from_env().turn_timeout
    resolver = build_resolver(app, agent, timeout=timeout, client_state=args.client_state)
    try:
        server = DevServer((args.host, args.port), resolver)
    except OSError as error:
        store.close()
        raise _CliError(f"cannot listen on {args.host}:{args.port}: {error}") from error
    # Timers of committed turns fire here, as the wake Lambda's turns do on AWS.
    scheduler = LocalScheduler(app.handler.wake(agent=agent, timeout=timeout))
    app.scheduler = scheduler
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)  # even when started with SIGINT ignored (`cmd &`)
    try:
        rearmed = scheduler.recover(store)
        print(f"dormant dev: serving {app.name}/{agent.name} on {server.url} "
              f"(model: {model}; sessions in SQLite at {db}; timers served locally, "
              f"{rearmed} pending re-armed). "
              f"API description: {server.url}/  Stop with Ctrl-C.", flush=True)
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        scheduler.close()
        server.server_close()
        store.close()
    return 0


def _stop(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


# --- dormant sessions -------------------------------------------------------------------------


def _store(db: str) -> Any:
    from dormant.stores import SqliteStore

    if not Path(db).is_file():
        raise _CliError(f"no database at {Path(db).resolve()} (pass --db, or run dormant dev "
                        f"first)")
    return SqliteStore(db)


def _list(args: argparse.Namespace) -> int:
    from dormant._inspect import render_list

    store = _store(args.db)
    try:
        summaries = store.list(principal=args.principal, limit=args.limit)
    finally:
        store.close()
    if args.json:
        print(json.dumps([s.model_dump(by_alias=True, mode="json") for s in summaries],
                         indent=2))
    else:
        print(render_list(summaries))
    return 0


def _show(args: argparse.Namespace) -> int:
    from dormant._inspect import render_session, session_json
    from dormant.errors import InputError
    from dormant.session import Session, normalize_session_id

    try:
        sid = normalize_session_id(args.session_id)
    except InputError as error:
        raise _CliError(str(error)) from error
    store = _store(args.db)
    try:
        stored = store.load(sid, turns=None)
    finally:
        store.close()
    if stored is None:
        print(f"dormant: session {sid} not found in {Path(args.db).resolve()}", file=sys.stderr)
        return 1
    session = Session.from_stored(stored)
    if args.json:
        print(json.dumps(session_json(session), indent=2, ensure_ascii=False))
    else:
        print(render_session(session, expects=_expected_inputs(args.app)))
    return 0


def _expected_inputs(app_file: str) -> dict[str, str]:
    """What each yielding tool of the app expects, e.g. ``{"ask_guest": "{answer: string}"}``.
    Best effort: without a loadable app file the timeline simply omits it."""
    if not Path(app_file).is_file():
        return {}
    try:
        from dormant.stores import MemoryStore

        _, agent = load_app_module(app_file).build(store=MemoryStore())
    except Exception:
        return {}
    expects = {}
    for name, tool in agent.tools.items():
        if tool.yield_schema is not None:
            props = tool.yield_schema.model_json_schema().get("properties", {})
            fields = ", ".join(f"{key}: {spec.get('type', 'any')}" for key, spec in props.items())
            expects[name] = "{" + fields + "}"
    return expects


if __name__ == "__main__":
    sys.exit(main())
