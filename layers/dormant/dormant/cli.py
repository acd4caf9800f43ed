"""The ``dormant`` command: a local server, a project scaffold, a session inspector and evals.

::

    dormant dev [--host 127.0.0.1] [--port 8000] [--db dormant.db] [--app APP] [--model MODEL]
                [--reload] [--otlp URL]
    dormant new NAME [--dir PARENT] [--model openai|bedrock]
    dormant sessions list [--db PATH] [--principal P] [--limit N] [--json]
    dormant sessions show ID [--db PATH] [--json]
    dormant sessions export [ID ...] [--out FILE] [--db PATH | --table NAME] [--region R]
                [--endpoint-url URL] [--principal P] [--limit N] [--since DURATION]
                [--redact MODULE:FUNCTION]
    dormant eval SET [--app APP] [--model recorded|MODEL] [--tools recorded|real]
                [--checks MODULE:NAME] [--min-text-score X] [--judge MODEL] [--junit FILE]

``eval`` replays each recorded session of an eval set (what ``sessions export`` writes, a stored
ledger, or a directory of them) against the app's agent (:func:`dormant.testing.evaluate`),
prints a table of what changed, and exits 1 when a case fails its checks.

``dev`` serves an app's agent through :func:`dormant.http.build_resolver` (the routes of the
``api`` Lambda) on a SQLite store, so a paused session survives a restart. Timers fire from
a :class:`~dormant.schedulers.local.LocalScheduler` delivering to the agent's wake handler; at
start-up it re-arms the timers pending in the store, so they survive a restart too, and the
lease wake-up of each session left running (a server killed mid-turn), which takes that run
over once its lease is out. ``APP`` (default: the Bookings sample that ships in the package) is
a file or ``module:attribute`` naming ``build(store=None, model=None) -> (app, agent)``
(:mod:`dormant._appspec`).

``sessions export`` writes sessions, whole, from SQLite or a DynamoDB table to one JSON file,
an eval set (:mod:`dormant._evalset`), their texts and state passed through the app's
``--redact`` function.

``--reload`` serves the app anew after each save to its files (:mod:`dormant._devserver.reload`),
on the same port and store. ``--otlp URL`` (or ``OTEL_EXPORTER_OTLP_ENDPOINT``) exports each
turn's spans and metrics to an OTLP/HTTP collector (:mod:`dormant._devserver.otlp`). Ctrl-C
names each turn it cuts off and how to send it again (:mod:`dormant._devserver.inflight`), and
exits 130.

Every ordinary mistake (a bad option; an app that cannot be loaded, its own code raising
included; an optional package not installed; a database that is not one, or a place this user
may not write) is one line on stderr, ``dormant: ...``, and exit status 2: :func:`_one_line` is
the rule, in :func:`main`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sqlite3
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

from dormant import scaffold
from dormant._appspec import SAMPLE, AppSpecError, missing_extra, shown
from dormant.settings import ENV, Settings

if TYPE_CHECKING:
    from dormant._devserver.otlp import Exporting

__all__ = ["main"]

_N = TypeVar("_N", int, float)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dormant`` script."""
    parser = _parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        return _usage(parser)
    try:
        code: int = args.run(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (``dormant sessions list --json | head``): not an error of
        # ours to report. Point stdout at devnull so the interpreter's final flush is quiet.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except Exception as error:
        said = _one_line(error)
        if said is None:
            raise
        print(f"dormant: {said}", file=sys.stderr)
        return 2
    return code


class _CliError(Exception):
    """A mistake on the command line (exit status 2, message on stderr)."""


def _one_line(error: BaseException) -> str | None:
    """What ``dormant: ...`` says for ``error``, the one rule for every command; None when it
    is not an ordinary mistake (a bug: its traceback is shown).

    Ordinary: a :class:`_CliError` or :class:`AppSpecError`, raised where the mistake is
    found with the message to print (an app that cannot be loaded or whose own code raised:
    :func:`dormant._appspec.app_code`; a database that cannot be opened or written:
    :func:`_unwritable`), and an optional package missing anywhere in the error's chain
    (:func:`dormant._appspec.missing_extra`: which extra installs it)."""
    if isinstance(error, _CliError | AppSpecError):
        return str(error)
    return missing_extra(error)


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's default in ``--help``, where it has one to show (not None, False, [])."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or action.default == []:
            return action.help
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """argparse, with defaults in ``--help`` and its own errors as one ``dormant:`` line."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> Any:
        self.exit(2, f"dormant: {message} (see {self.prog} --help)\n")


def _counted(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _ranged(kind: Callable[[str], _N], low: _N, high: _N | None, what: str,
            refusal: str) -> Callable[[str], _N]:
    """An argparse type: ``kind(text)`` (else "not ``what``"), from ``low`` to ``high`` (None:
    no top; else ``refusal``, formatted with the value)."""

    def parse(text: str) -> _N:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(refusal.format(value))
        return value

    return parse


_port = _ranged(int, 0, 65535, "a port number", "{} is not a port (0-65535; 0: any free port)")
_positive = _ranged(int, 1, None, "a number", "{} must be at least 1")
_score = _ranged(float, 0.0, 1.0, "a number", "{:g} is not a score (0 to 1)")

#: ``--since`` units, in milliseconds.
_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}


def _duration(text: str) -> int:
    """A duration such as ``7d``, ``12h``, ``30m``, in milliseconds."""
    number, unit = text[:-1], text[-1:]
    if unit not in _UNITS or not number.isdigit():
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: a number and a unit, e.g. 7d, 12h, 30m "
            f"(units: {', '.join(_UNITS)})")
    return int(number) * _UNITS[unit]


def _parser() -> argparse.ArgumentParser:
    from dormant import __version__

    settings = Settings.from_env()
    parser = _Parser(prog="dormant", description="Durable AI agents: serve one locally, "
                     "start a project, inspect stored sessions.")
    parser.add_argument("--version", action="version", version=f"dormant {__version__}")
    commands = parser.add_subparsers(title="commands", parser_class=_Parser)

    dev = commands.add_parser("dev", help="serve an agent's API on localhost (SQLite store, "
                                          "local timers)",
                              description="Serve an agent's HTTP API on localhost: the same "
                              "routes as the api Lambda, sessions in SQLite, timers fired "
                              "locally. Ctrl-C stops it, naming any turn it cuts off and how "
                              "to send it again.")
    dev.add_argument("--host", default="127.0.0.1", help="interface to listen on")
    dev.add_argument("--port", type=_port, default=8000, help="port to listen on")
    dev.add_argument("--db", default=settings.db_path,
                     help=f"SQLite file of the sessions (its directory must exist and be "
                          f"writable: the -wal and -shm files go beside it; ${ENV.DB_PATH} "
                          f"sets the default)")
    dev.add_argument("--app", default=SAMPLE,
                     help="the app: a file (app.py, app.py:build) or module:attribute naming "
                          "build(store=None, model=None) -> (app, agent)")
    dev.add_argument("--model", default=None,
                     help="the model, instead of the app's own choice: openai[:NAME] (needs "
                          "OPENAI_API_KEY), bedrock[:MODEL_ID] (Amazon Bedrock in the AWS "
                          f"environment's region and credentials; no id: ${ENV.BEDROCK_MODEL}), "
                          "scripted:FILE.json (a JSON list of replies, one "
                          "per model call), or a file/module:attribute naming a Model or a "
                          "function returning one (default: the app's own)")
    dev.add_argument("--client-state", action="append", default=[], metavar="KEY",
                     help="a session state key clients may write through the API's `state` "
                          "(repeat for more; none: any client state write is refused)")
    dev.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                     help="another origin whose pages may call the API, e.g. "
                          "http://localhost:5173 for a front-end served elsewhere (repeat for "
                          "more; none: only the server's own pages and clients that send no "
                          "Origin)")
    dev.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                     help="another Host name the server answers to, besides its address's "
                          "(repeat for more)")
    dev.add_argument("--reload", action="store_true",
                     help="serve the app anew when one of its files changes (the .py files "
                          "under its module's directory); sessions are kept")
    dev.add_argument("--otlp", default=None, metavar="URL",
                     help="export each turn's OpenTelemetry spans and metrics over OTLP/HTTP to "
                          "the collector at this base URL (URL/v1/traces, URL/v1/metrics), "
                          "e.g. http://127.0.0.1:4318; needs the otel extra (default: "
                          "OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT "
                          "when set, else none)")
    dev.add_argument("--quiet", action="store_true", help="do not log each request")
    dev.set_defaults(run=_dev)

    new = commands.add_parser("new", help="create a project: your agent, its tests, a SAM "
                                          "template",
                              description="Create the directory NAME holding a project of "
                              "your own: functions/app.py (one agent, one tool, a local "
                              "model), a test using dormant.testing, template.yaml and the "
                              "Lambda functions serving your app, sample events, a README.")
    new.add_argument("name", help="the project's name (a directory of that name is created)")
    new.add_argument("--dir", default=".", help="where to create it")
    new.add_argument("--model", default="openai", choices=scaffold.MODELS,
                     help="what its template deploys on: openai (the key from a Secrets "
                          "Manager secret; the default) or bedrock (Amazon Bedrock through "
                          "the functions' own role, no key)")
    new.set_defaults(run=_new)

    sessions = commands.add_parser("sessions", help="inspect stored sessions")
    which = sessions.add_subparsers(title="sessions commands", parser_class=_Parser)
    sessions.set_defaults(run=lambda _: _usage(sessions))
    listing = which.add_parser("list", help="sessions, newest first")
    listing.add_argument("--db", default=settings.db_path, help="SQLite file of the sessions")
    listing.add_argument("--principal", default=None, help="only this principal's sessions")
    listing.add_argument("--limit", type=_positive, default=50, help="at most this many")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(run=_list)
    show = which.add_parser("show", help="one session's ledger as a timeline")
    show.add_argument("session_id")
    show.add_argument("--db", default=settings.db_path, help="SQLite file of the sessions")
    show.add_argument("--json", action="store_true", help="print the whole ledger as JSON")
    show.set_defaults(run=_show)
    export = which.add_parser(
        "export", help="write sessions to a JSON eval set",
        description="Write sessions, whole (state and ledger), to one JSON file: an eval set "
        "for dormant eval and dormant.testing.replay. Without IDs, the newest sessions (see "
        "--principal, --limit, --since).")
    export.add_argument("session_ids", nargs="*", metavar="ID",
                        help="sessions to export (with or without the session_ prefix)")
    export.add_argument("--out", default="-", help="the file to write (-: standard output)")
    where = export.add_mutually_exclusive_group()
    where.add_argument("--db", default=settings.db_path, help="SQLite file of the sessions")
    where.add_argument("--table", default=None,
                       help="a DynamoDB table of the sessions, instead of --db")
    export.add_argument("--region", default=None, help="the table's AWS region (default: the "
                        "AWS environment's)")
    export.add_argument("--endpoint-url", default=None, metavar="URL",
                        help="the DynamoDB endpoint, e.g. DynamoDB Local's http://localhost:8000")
    export.add_argument("--principal", default=None, help="only this principal's sessions")
    export.add_argument("--limit", type=_positive, default=None,
                        help="at most this many (without IDs; default 100)")
    export.add_argument("--since", type=_duration, default=None, metavar="DURATION",
                        help="only sessions updated within this long, e.g. 7d, 12h, 30m")
    export.add_argument("--redact", default=None, metavar="MODULE:FUNCTION",
                        help="a function redact(text) -> text applied to every message text "
                             "and state string (tool arguments and results are kept)")
    export.set_defaults(run=_export)

    evals = commands.add_parser(
        "eval", help="replay recorded sessions against an app's agent and check what changed",
        description="Replay every recorded session of SET (a file `dormant sessions export` "
        "wrote, a stored ledger, or a directory of them) against the app's agent on a memory "
        "store, print a table of what changed, and exit 1 when a case fails its checks.")
    evals.add_argument("set", metavar="SET", help="an exported set, a ledger file, or a "
                       "directory of them")
    evals.add_argument("--app", default=SAMPLE,
                       help="the app whose agent replays them: a file (functions/app.py) or "
                       "module, naming build(store=None, model=None) -> (app, agent)")
    evals.add_argument("--model", default=None,
                       help="the model to replay with: 'recorded' plays the recorded replies "
                       "back; else as dormant dev --model (default: the agent's own)")
    evals.add_argument("--tools", choices=("recorded", "real"), default="recorded",
                       help="'recorded' returns each call the recorded result of the call at "
                       "its position (nothing outside is touched); 'real' runs the tools")
    evals.add_argument("--checks", default=None, metavar="MODULE:NAME",
                       help="your checks: a list of functions of a replay (or a function "
                       "returning one), replacing the defaults (orphans, tools, approvals, "
                       "questions, status)")
    evals.add_argument("--min-text-score", type=_score, default=None, metavar="X",
                       help="also fail a turn whose text scores below X (0-1) against the "
                       "recording's")
    evals.add_argument("--judge", default=None, metavar="MODEL",
                       help="also have MODEL (as --model names one) judge each turn's text "
                       "against the recording's")
    evals.add_argument("--junit", default=None, metavar="FILE", help="write JUnit XML here")
    evals.add_argument("--quiet", action="store_true", help="no line per case on stderr")
    evals.set_defaults(run=_eval)
    return parser


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


# --- dormant dev ------------------------------------------------------------------------------


def _dev(args: argparse.Namespace) -> int:
    try:
        from dormant._devserver.otlp import Exporting, endpoints
    except ModuleNotFoundError as error:  # the API is Powertools' resolver: the aws extra
        if (error.name or "").partition(".")[0] != "aws_lambda_powertools":
            raise
        raise _CliError("dormant dev serves the API with AWS Lambda Powertools, which is not "
                        "installed: pip install 'dormant[aws]'") from error

    try:
        where = endpoints(args.otlp, os.environ)
    except ValueError as error:
        raise _CliError(str(error)) from error
    exporting = Exporting(where) if where is not None else None  # the otel extra, or its line
    try:
        return _serve(args, exporting)
    finally:
        if exporting is not None:  # what is left goes out before the command ends
            exporting.close()


def _serve(args: argparse.Namespace, exporting: Exporting | None) -> int:
    """``dormant dev``, its spans and metrics going where ``exporting`` sends them (None:
    nowhere)."""
    from dormant._devserver import DevServer, dev_cors
    from dormant._devserver.serving import Serving

    try:
        cors = dev_cors(args.allow_origin)
    except ValueError as error:
        raise _CliError(f"--allow-origin: {error}") from error
    model = _model(args.model) if args.model else None
    serving = Serving(args.app, None, model=model, cors=cors, client_state=args.client_state,
                      timeout=Settings.from_env().turn_timeout)
    factory = serving.load()  # before the database: a bad app leaves no file behind
    fresh = not Path(args.db).expanduser().exists()
    serving.store = store = _open_store(args.db, create=True)

    def give_back() -> None:
        store.close()
        if fresh:  # nothing was served: take back the database this start made
            for suffix in ("", "-wal", "-shm"):
                Path(f"{store.path}{suffix}").unlink(missing_ok=True)

    try:
        app, agent, resolver = serving.build(factory)
    except BaseException:
        give_back()
        raise
    if exporting is not None:
        exporting.start(app.name)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    describe = getattr(sys.modules.get(factory.__module__), "describe_model", None)
    served = describe(agent.model) if callable(describe) else _describe_model(agent.model)
    try:
        server = DevServer((args.host, args.port), resolver, allow_origins=args.allow_origin,
                           allow_hosts=args.allow_host)
    except OSError as error:
        give_back()
        raise _CliError(f"cannot listen on {args.host}:{args.port}: "
                        f"{error.strerror or error}") from error
    serving.arm(app, agent)
    stopped_by: list[int] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        stopped_by.append(signum)
        for each in (signal.SIGTERM, signal.SIGINT):  # a second one ends it there and then
            signal.signal(each, signal.SIG_DFL)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)  # even when started with SIGINT ignored (`cmd &`)
    cut_off: list[str] = []
    reloader = None
    try:
        rearmed = serving.scheduler.recover(store, sole=True)
        print(f"dormant dev: serving {app.name}/{agent.name} on {server.url} "
              f"(model: {served}; sessions in SQLite at {store.path}; timers served locally, "
              f"{rearmed} pending re-armed). "
              f"Console: {server.url}/  API description: {server.url}/docs  "
              f"Stop with Ctrl-C.", flush=True)
        if server.lacking:
            print(f"dormant dev: {server.lacking}", file=sys.stderr, flush=True)
        if exporting is not None:
            print(f"dormant dev: {exporting.where.describe()}", file=sys.stderr, flush=True)
        if args.reload:
            reloader = serving.watch(factory, server)
        server.serve_forever()
    except KeyboardInterrupt:
        cut_off = _cut_off(server, store, args.db)
    finally:
        if reloader is not None:
            reloader.close()
        serving.scheduler.close()
        server.server_close()
        if not cut_off:  # else the turns' threads still use it: the exit closes it for them
            store.close()
    # Ctrl-C ends the command as the signal would (128 + SIGINT); SIGTERM is a stop asked for.
    return 128 + signal.SIGINT if signal.SIGINT in stopped_by or not stopped_by else 0


def _cut_off(server: Any, store: Any, db: str) -> list[str]:
    """Say, on stderr, which turns the stop cuts off and how to send each again; what
    their threads log while the process ends is noise after that."""
    from dormant._devserver.inflight import interrupted

    lines = interrupted(server.in_flight.running(), store, server.url, db)
    for line in lines:
        print(f"dormant dev: {line}", file=sys.stderr, flush=True)
    if lines:
        logging.disable(logging.CRITICAL)
    return lines


def _model(spec: str) -> Any:
    """The model ``--model`` names (see its help)."""
    kind, _, rest = spec.partition(":")
    if kind == "openai":
        if not os.environ.get(ENV.OPENAI_API_KEY):
            raise _CliError("--model openai needs OPENAI_API_KEY in the environment")
        from dormant.models import OpenAIModel

        return OpenAIModel(rest or Settings.from_env().openai_model,
                           base_url=os.environ.get(ENV.OPENAI_BASE_URL) or None)
    if kind == "bedrock":
        model_id = rest or Settings.from_env().bedrock_model
        if not model_id:
            raise _CliError(f"--model bedrock needs a model id: --model bedrock:MODEL_ID, or "
                            f"{ENV.BEDROCK_MODEL} in the environment")
        from dormant.models import BedrockModel

        return BedrockModel(model_id)
    if kind == "scripted":
        return _scripted(rest)
    from dormant._appspec import load_attribute
    from dormant.models import Model

    found = load_attribute(spec, default=None)
    model = found() if callable(found) and not isinstance(found, Model) else found
    if not isinstance(model, Model):
        raise _CliError(f"--model {spec} is a {type(model).__name__}, not a model (a model "
                        f"has stream(request, *, signal); see dormant.models.Model)")
    return model


def _scripted(path: str) -> Any:
    from dormant.models import ScriptedModel, ScriptError

    if not path:
        raise _CliError("--model scripted: needs a file, e.g. --model scripted:replies.json")
    try:
        replies = json.loads(Path(path).read_text())
    except OSError as error:
        raise _CliError(f"cannot read {path}: {error.strerror or error}") from error
    except ValueError as error:
        raise _CliError(f"{path} is not JSON: {error}") from error
    if not isinstance(replies, list):
        raise _CliError(f"{path} must hold a JSON list of replies (a string, or "
                        f"{{\"text\": ..., \"tool_calls\": [{{\"name\": ..., \"args\": "
                        f"{{...}}}}]}}), one per model call")
    try:
        return ScriptedModel(replies, strict=False)
    except ScriptError as error:
        raise _CliError(f"{path}: {error}") from error


def _describe_model(model: Any) -> str:
    name = getattr(model, "model", None)
    described = f"{type(model).__name__}({name})" if name else type(model).__name__
    openai = sys.modules.get("dormant.models.openai")  # loaded if the app made one
    if openai is not None and isinstance(model, openai.OpenAIModel) \
            and not os.environ.get(ENV.OPENAI_API_KEY):
        described += (" with no OPENAI_API_KEY set: its calls will fail; set the key, or "
                      "pass --model scripted:FILE.json or a model of your own")
    return described


def _open_store(db: str, *, create: bool) -> Any:
    """The SQLite store at ``db``: its directory must exist (and, unless ``create``, the
    file); a file that is not a SQLite database is a mistake, not a traceback."""
    from dormant.errors import StoreError
    from dormant.stores import SqliteStore

    path = Path(db).expanduser().resolve()
    if not path.parent.is_dir():
        raise _CliError(f"no directory {path.parent} for the database {path} (create it, or "
                        f"pass --db in an existing directory)")
    if path.is_dir():
        raise _CliError(f"--db {db} is a directory, not a database file")
    if not create and not path.is_file():
        raise _CliError(f"no database at {path} (pass --db, or run dormant dev first)")
    _refuse_foreign(path, create=create)
    try:
        return SqliteStore(path)
    except StoreError as error:  # "cannot open PATH: file is not a database", a newer schema
        raise (_unwritable(path, error, create=create) or _CliError(str(error))) from error
    except sqlite3.DatabaseError as error:
        raise (_unwritable(path, error, create=create) or _CliError(
            f"{path} is not a dormant SQLite database ({error})")) from error


#: What SQLite says when it cannot create, open or write the file (or its -wal and -shm).
_CANNOT_WRITE = ("unable to open database file", "readonly database")


def _unwritable(path: Path, error: BaseException, *, create: bool) -> _CliError | None:
    """The one line for a database SQLite cannot open or write where it is (a read-only
    directory or file, a place no file can be made): which, and ``--db`` to go elsewhere;
    None for any other failure."""
    cause = error.__cause__ if isinstance(error.__cause__, sqlite3.Error) else error
    if not any(text in str(cause) for text in _CANNOT_WRITE):
        return None
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        why = f"this user may not write the file {path} (permission denied)"
    elif not os.access(path.parent, os.W_OK):
        why = (f"this user may not write in its directory {path.parent} (permission denied; "
               f"SQLite keeps the file and its -wal and -shm files there)")
    else:
        why = (f"SQLite cannot create or write it there ({cause}): the directory "
               f"{path.parent} must let this user create files")
    go = "pass --db to put the sessions elsewhere, e.g. --db ~/dormant.db" if create else \
        "copy it to a directory you can write and pass --db with the copy's path"
    return _CliError(f"cannot open the database {path}: {why}; {go}")


def _refuse_foreign(path: Path, *, create: bool) -> None:
    """Refuse, without writing to it, an existing file that is not dormant's database: not
    SQLite at all, or another program's SQLite database (opening it as a store would add
    dormant's tables to it)."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    try:
        with contextlib.closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as db:
            tables = {name for (name,) in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as error:
        raise (_unwritable(path, error, create=create) or _CliError(
            f"{path} is not a dormant SQLite database ({error})")) from error
    if tables and not {"sessions", "events"} <= tables:
        raise _CliError(f"{path} is another program's SQLite database (tables: "
                        f"{', '.join(sorted(tables)[:5])}), not dormant's: pass another --db")


# --- dormant new ------------------------------------------------------------------------------


def _new(args: argparse.Namespace) -> int:
    from dormant.scaffold import ScaffoldError, create_project, dormant_source

    source = dormant_source()
    try:
        created = create_project(args.name, Path(args.dir), model=args.model, source=source)
    except ScaffoldError as error:
        raise _CliError(str(error)) from error
    except OSError as error:  # a directory this user may not write, a full or read-only disk
        where = Path(args.dir).expanduser().resolve()
        raise _CliError(f"cannot create {args.name} in {where}: {error.strerror or error} "
                        f"({error.filename}); pass --dir a directory you can write") from error
    print(f"dormant new: created {created}\n"
          f"Its layer installs {source.describe()} (layers/dormant/Makefile: DORMANT).\n\n"
          f"  cd {shown(created)}\n"
          f"  {scaffold.TEST_COMMAND:<39}# the agent's tests\n"
          f"  dormant dev --app functions/app.py     # serve it on http://127.0.0.1:8000\n\n"
          f"Your agent is functions/app.py; README.md says how to deploy it"
          + (f" (on Amazon Bedrock: {scaffold.BEDROCK_MODEL}, the template's BedrockModelId)."
             if args.model == "bedrock" else "."))
    return 0


# --- dormant sessions -------------------------------------------------------------------------


def _list(args: argparse.Namespace) -> int:
    from dormant._inspect import render_list

    store = _open_store(args.db, create=False)
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
    store = _open_store(args.db, create=False)
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
        print(render_session(session))
    return 0


def _export(args: argparse.Namespace) -> int:
    from dormant._evalset import EvalSetError, export_sessions, write_set
    from dormant._ids import now_ms

    choosing = [flag for flag, value in (("--principal", args.principal),
                                         ("--limit", args.limit), ("--since", args.since))
                if value is not None]
    if args.session_ids and choosing:
        raise _CliError(f"{', '.join(choosing)} choose the newest sessions when no ID is "
                        "given; with IDs, those sessions are exported")
    redact = _redactor(args.redact) if args.redact else None
    source = f"dynamodb:{args.table}" if args.table is not None else f"--db {args.db}"
    try:
        store, source = _export_store(args)
        try:
            evalset = export_sessions(
                store, args.session_ids or None, principal=args.principal, limit=args.limit,
                since=now_ms() - args.since if args.since is not None else None,
                redact=redact, source=source)
        finally:
            close = getattr(store, "close", None)
            if callable(close):
                close()
    except EvalSetError as error:
        raise _CliError(str(error)) from error
    except Exception as error:
        said = _unreadable(error)
        if said is None:
            raise
        raise _CliError(f"cannot read the sessions in {source}: {said}") from error
    try:
        write_set(evalset, args.out)
    except OSError as error:
        raise _CliError(f"cannot write {args.out}: {error.strerror or error}") from error
    events = sum(len(case.ledger["events"]) for case in evalset.sessions)
    print(f"dormant: exported {_counted(len(evalset.sessions), 'session')} "
          f"({_counted(events, 'event')}) to "
          f"{'standard output' if args.out == '-' else args.out}", file=sys.stderr)
    return 0


def _unreadable(error: Exception) -> str | None:
    """What to say for a store that cannot be read (a table that is not there, no AWS region
    or credentials, an endpoint that does not answer); None for anything else (a bug)."""
    from dormant.errors import StoreError

    if isinstance(error, StoreError):
        return str(error)
    botocore = sys.modules.get("botocore.exceptions")
    if botocore is not None and isinstance(error, botocore.BotoCoreError | botocore.ClientError):
        return str(error)
    return None


def _export_store(args: argparse.Namespace) -> tuple[Any, str]:
    """The store ``sessions export`` reads, and how the eval set names it."""
    if args.table is None:
        if args.endpoint_url or args.region:
            raise _CliError("--region and --endpoint-url go with --table (a DynamoDB table)")
        store = _open_store(args.db, create=False)
        return store, f"sqlite:{store.path}"
    from dormant.stores import DynamoDBStore

    client: Any = None
    if args.endpoint_url:
        import botocore.session

        client = botocore.session.get_session().create_client(
            "dynamodb", region_name=args.region, endpoint_url=args.endpoint_url)
    return (DynamoDBStore(args.table, client, region_name=args.region),
            f"dynamodb:{args.table}")


def _redactor(spec: str) -> Any:
    """The function ``--redact`` names (``module:function`` or ``file.py:function``)."""
    from dormant._appspec import load_attribute

    if ":" not in spec:
        raise _CliError(f"--redact {spec}: name a function, MODULE:FUNCTION or FILE.py:FUNCTION")
    found = load_attribute(spec, default=None)
    if not callable(found):
        raise _CliError(f"--redact {spec} is a {type(found).__name__}, not a function "
                        f"redact(text) -> text")
    return found


# --- dormant eval -----------------------------------------------------------------------------


def _eval(args: argparse.Namespace) -> int:
    """Replay the set against the app's agent; the table on stdout, 1 when a case failed."""
    from dormant._appspec import app_code, build_app, load_attribute
    from dormant._evalset import read_set
    from dormant.testing import evaluate, judge, similar_text
    from dormant.testing._checks import DEFAULT_CHECKS

    try:
        cases = read_set(args.set)
    except (OSError, ValueError) as error:  # (each names the file)
        raise _CliError(str(error)) from error
    if not cases:
        raise _CliError(f"{args.set} holds no recorded sessions")
    model: Any = "recorded" if args.model == "recorded" else \
        (_model(args.model) if args.model else None)
    _, agent = app_code(args.app, build_app, args.app, store=None)
    if args.checks is not None:
        found = app_code(args.checks, load_attribute, args.checks, default=None)
        checks = list(found() if callable(found) else found)
    else:
        checks = [make() for make in DEFAULT_CHECKS]
    if args.min_text_score is not None:
        checks.append(similar_text(args.min_text_score))
    if args.judge is not None:
        checks.append(judge(_model(args.judge)))

    def said(line: str) -> None:
        print(f"dormant eval: {line}", file=sys.stderr, flush=True)

    # a turn that fails in a replay is a row of the table, not a log line (while it runs:
    # the level is the process's, which the caller may be using)
    logger = logging.getLogger("dormant")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        report = evaluate(cases, agent, model=model, tools=args.tools, checks=checks,
                          name=f"dormant eval {Path(args.set).name}",
                          progress=None if args.quiet else said)
    finally:
        logger.setLevel(level)
    print(report.table())
    if args.junit is not None:
        report.junit(args.junit)
        said(f"JUnit XML written to {shown(args.junit)}")
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())

