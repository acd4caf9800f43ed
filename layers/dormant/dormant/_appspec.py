"""Where an app comes from: ``dormant dev --app``, ``DORMANT_APP`` on Lambda.

An *app spec* names a factory, ``build(store=..., model=...) -> (app, agent)``:

- ``path/to/app.py`` or ``path/to/app.py:attribute`` — a file, imported under its own module
  name with its directory on ``sys.path`` (so it can import its siblings);
- ``package.module`` or ``package.module:attribute`` — an importable module.

The attribute defaults to ``build``. The factory is called with ``store=`` (and ``model=``
only when one is given, so a factory that always picks its own model need not take it) and
must return the pair ``(app, agent)`` (a tuple or a ``NamedTuple``). Every way this can go
wrong is an :class:`AppSpecError` whose message says what to fix. The app's own code raising
(at import, in ``build``) is the app's exception, as it was raised; run through
:func:`app_code` (``dormant dev``), it is an :class:`AppSpecError` of one line instead,
naming the exception and the app's line that raised it (:func:`failure`).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from dormant.agent import Agent
    from dormant.app import App
    from dormant.models import Model
    from dormant.stores import Store

__all__ = ["EXTRAS", "SAMPLE", "AppSpecError", "app_code", "build_app", "failure",
           "load_attribute", "load_factory", "missing_extra", "shown"]

_T = TypeVar("_T")

#: The Bookings sample that ships in the package.
SAMPLE = "dormant.samples.bookings:build"
DEFAULT_ATTRIBUTE = "build"


class AppSpecError(Exception):
    """The app spec names nothing usable (message says what and how to fix it)."""


def load_attribute(spec: str, *, default: str | None = DEFAULT_ATTRIBUTE) -> Any:
    """The object ``spec`` names (``file.py[:attr]`` or ``module[:attr]``)."""
    target, _, attribute = spec.partition(":") if not _is_windows_drive(spec) else (spec, "", "")
    attribute = attribute or (default or "")
    if not target:
        raise AppSpecError(f"{spec!r} names no file or module")
    module = _import_file(target) if _looks_like_file(target) else _import_module(target)
    if not attribute:
        return module
    try:
        found = module
        for part in attribute.split("."):
            found = getattr(found, part)
    except AttributeError:
        raise AppSpecError(f"{target} has no attribute {attribute!r}") from None
    return found


def load_factory(spec: str) -> Callable[..., Any]:
    """The app factory ``spec`` names."""
    factory = load_attribute(spec)
    if not callable(factory):
        raise AppSpecError(f"{spec} is a {type(factory).__name__}, not a factory: it must be "
                           f"a function build(store=None, model=None) -> (app, agent)")
    return factory  # type: ignore[no-any-return]


def build_app(app: str | Callable[..., Any], *, store: Store | None, model: Model | None = None,
              spec: str | None = None) -> tuple[App, Agent]:
    """Call the factory ``app`` (or the one that spec names) and check what it returns;
    ``spec`` names a factory passed in, for messages."""
    from dormant.agent import Agent
    from dormant.app import App

    factory = load_factory(app) if isinstance(app, str) else app
    spec = spec or (app if isinstance(app, str) else getattr(app, "__qualname__", repr(app)))
    kwargs: dict[str, Any] = {"store": store}
    if model is not None:
        kwargs["model"] = model
    try:  # the call's shape is checked before the call: a TypeError inside it is the app's
        inspect.signature(factory).bind(**kwargs)
    except TypeError as error:
        raise AppSpecError(f"{spec}: {error} (an app factory takes store= and model= keyword "
                           f"arguments)") from error
    except ValueError:  # no signature to read (a builtin): let the call say
        pass
    built = factory(**kwargs)
    pair = tuple(built) if isinstance(built, tuple | list) else None
    if pair is None or len(pair) != 2 or not isinstance(pair[0], App) \
            or not isinstance(pair[1], Agent):
        raise AppSpecError(f"{spec} returned {_describe(built)}; it must return "
                           f"(app, agent): a dormant.App and one of its agents")
    return pair[0], pair[1]


def _describe(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, tuple | list):
        return f"a {len(value)}-item {type(value).__name__}"
    return f"a {type(value).__name__}"


def _is_windows_drive(spec: str) -> bool:
    return len(spec) > 2 and spec[1] == ":" and spec[2] in "\\/"


def _looks_like_file(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target


def _import_file(target: str) -> Any:
    file = Path(target).expanduser().resolve()
    if not file.is_file():
        raise AppSpecError(f"no app file at {target}")
    taken = sys.modules.get(file.stem)
    if taken is not None and getattr(taken, "__file__", None) != str(file):
        raise AppSpecError(f"{target}: its module name {file.stem!r} is already another "
                           f"module's ({getattr(taken, '__file__', None) or 'built in'}); "
                           f"rename the file")
    if str(file.parent) not in sys.path:
        sys.path.insert(0, str(file.parent))
    spec = importlib.util.spec_from_file_location(file.stem, file)
    if spec is None or spec.loader is None:
        raise AppSpecError(f"cannot import {file} (not a Python file)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[file.stem] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(file.stem, None)
        raise
    return module


def _import_module(target: str) -> Any:
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as error:
        if error.name and (target == error.name or target.startswith(error.name + ".")):
            raise AppSpecError(f"no module named {target!r} (pass a file path such as "
                               f"app.py, or a module importable from here)") from None
        raise


# --- what the app's own failure says ----------------------------------------------------------

#: The extra that installs each optional package dormant (or an app) may import.
EXTRAS = {"openai": "openai", "boto3": "aws", "botocore": "aws", "aws_lambda_powertools": "aws",
          "ag_ui": "agui", "mcp": "mcp", "opentelemetry": "otel"}
#: How much of an app's exception message :func:`failure` keeps.
_SAID = 300
_DORMANT = Path(__file__).resolve().parent


def app_code(spec: str, call: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
    """``call(*args, **kwargs)``, which runs the app's own code (its import, its ``build``):
    whatever that raises is an :class:`AppSpecError` of one line, :func:`failure` (the
    original is its cause)."""
    try:
        return call(*args, **kwargs)
    except AppSpecError:
        raise
    except Exception as error:
        raise AppSpecError(failure(spec, error)) from error


def failure(spec: str, error: BaseException) -> str:
    """One line for an exception the app's code raised: a missing optional package says
    which extra installs it; a syntax error, the file and line; anything else, its type,
    message and the innermost line outside dormant that raised it."""
    missing = missing_extra(error)
    if missing is not None:
        return f"{spec}: {missing}"
    if isinstance(error, SyntaxError):
        return (f"{spec}: cannot import {shown(error.filename or '?')}: "
                f"{type(error).__name__} at line {error.lineno}: {error.msg}")
    said = " ".join(str(error).split())
    said = f"{said[:_SAID]}…" if len(said) > _SAID else said
    where = _raised_at(error)
    return (f"{spec} failed: {type(error).__name__}{': ' + said if said else ''}"
            f"{f' (at {where})' if where else ''}")


def missing_extra(error: BaseException) -> str | None:
    """Which extra to install, when ``error`` (or what caused it) is an optional package that
    is not installed: dormant's own ``ImportError`` already says it, a bare
    ``ModuleNotFoundError`` (an app's ``import openai``) gets the hint here; else None."""
    seen: BaseException | None = error
    visited: set[int] = set()
    while seen is not None and id(seen) not in visited:
        visited.add(id(seen))
        if isinstance(seen, ImportError):
            package = (seen.name or "").partition(".")[0]
            if "pip install 'dormant[" in str(seen):
                return str(seen)
            if isinstance(seen, ModuleNotFoundError) and package in EXTRAS:
                return (f"the {package} package is not installed: "
                        f"pip install 'dormant[{EXTRAS[package]}]'")
        seen = seen.__cause__ or seen.__context__
    return None


def _raised_at(error: BaseException) -> str | None:
    """``file, line N`` of the innermost frame outside dormant and the import machinery."""
    found = None
    for frame, line in traceback.walk_tb(error.__traceback__):
        file = frame.f_code.co_filename
        if file.startswith("<") or _DORMANT in Path(file).resolve().parents:
            continue
        found = f"{shown(file)}, line {line}"
    return found


def shown(file: str | Path) -> str:
    """``file`` as a person at this terminal reads it: relative to the working directory when
    it is under it, else as given (what each ``dormant`` command's lines name a file by)."""
    path = Path(file)
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(file)
