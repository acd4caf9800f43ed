"""``dormant new NAME``: a project of the user's own, serving their app on AWS.

What it writes comes from this package's data, so it is the same whether dormant was installed
from a wheel or is a checkout:

- ``files/``: the user's app (``functions/app.py``), its tests, ``pyproject.toml`` (pytest
  settings), README, ``.gitignore``, and the layer's Makefile, which installs dormant itself
  (``DORMANT``): the dormant this command runs from, as a wheel beside the Makefile, or the
  release from the package index (:mod:`dormant.scaffold._layer` decides which);
- ``template.yaml``, ``events/``, ``layer-requirements.txt`` (and ``layer-constraints.txt``, the
  versions it is pinned to) and ``xray/``: the very files the dormant repository deploys its
  sample with (in a checkout, links to them), with the one
  setting that names the app, ``DORMANT_APP``, pointing at the user's ``app:build``;
- the Lambda entry points, ``functions/<name>/app.py`` (:func:`entry_point`: one import each,
  the same text as the repository's own).

``{{name}}``, ``{{version}}`` and ``{{dormant}}`` in the files become the project's name,
dormant's version and what its layer installs as dormant (:attr:`DormantSource.requirement`);
``{{install}}``, the ``pip install`` line that puts that same dormant in the project's venv.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path

from dormant.scaffold._layer import DormantSource, dormant_source, write_wheel

__all__ = ["BEDROCK_MODEL", "FUNCTIONS", "MODELS", "PROJECT_EXTRAS", "SAMPLE_APP_SETTING",
           "TEST_COMMAND", "DormantSource", "ScaffoldError", "create_project", "dormant_source",
           "entry_point", "project_template"]

#: The Lambda functions a project has: ``functions/<name>/app.py``, ``Handler: <name>/app.handler``.
FUNCTIONS = ("api", "stream", "webhook", "wake", "cleanup")
#: How the repository's template names its app; a project's names ``app:build``.
SAMPLE_APP_SETTING = "DORMANT_APP: bookings:build"
PROJECT_APP_SETTING = "DORMANT_APP: app:build"
#: How a project's tests run, as its README says and ``dormant new`` prints: ``python -m`` runs
#: the pytest of the venv's interpreter (the ``test`` extra), never another one on ``PATH``.
TEST_COMMAND = "python -m pytest"
#: The extras a project's venv installs dormant with (its README's ``pip install`` line).
PROJECT_EXTRAS = "aws,openai,test"
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,62}$")
#: The models ``dormant new --model`` deploys on.
MODELS = ("openai", "bedrock")
#: The Bedrock model a ``--model bedrock`` project deploys on (its template's
#: ``BedrockModelId`` default): Amazon Nova Pro through the US cross-region inference profile.
BEDROCK_MODEL = "us.amazon.nova-pro-v1:0"
_BEDROCK_DEFAULT = '  BedrockModelId:\n    Type: String\n    Default: ""'
_OPENAI_DEFAULT = "  OpenAISecretName:\n    Type: String\n    Default: dormant/openai-api-key"
#: The sample events a project gets, and the message its first turn sends.
_EVENTS = ("api_post_turn.json", "api_get_session.json", "api_delete_session.json",
           "api_post_fork.json", "api_get_docs.json", "webhook_sqs_fifo_batch.json",
           "wake-timer.json", "cleanup_ddb_stream_remove.json")
_FIRST_MESSAGE = "refund order A-1042"


class ScaffoldError(Exception):
    """The project cannot be created (message says why)."""


def create_project(name: str, parent: Path, *, model: str = "openai",
                   source: DormantSource | None = None) -> Path:
    """Create ``parent/name`` holding a new project; returns its path. ``model``: what its
    template deploys by default, ``"openai"`` (the key from a secret) or ``"bedrock"``
    (:data:`BEDROCK_MODEL`, through the functions' own role; no secret). ``source``: the
    dormant its layer installs (:func:`dormant_source`, the running one, when None)."""
    from dormant import __version__

    source = source or dormant_source()
    if not _NAME.match(name):
        raise ScaffoldError(f"{name!r} is not a project name: start with a letter, then "
                            f"letters, digits, '-' or '_' (at most 63)")
    if model not in MODELS:
        raise ScaffoldError(f"--model must be one of {', '.join(MODELS)}, got {model!r}")
    if not parent.is_dir():
        raise ScaffoldError(f"no directory {parent} to create {name} in")
    root = (parent / name).resolve()
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise ScaffoldError(f"{root} already exists and is not empty")
    data = resources.files(__name__)
    files: dict[str, str] = {}
    _collect(data / "files", "", files)
    files[".gitignore"] = files.pop("gitignore")
    files["template.yaml"] = project_template((data / "template.yaml").read_text(), model)
    files["layers/dormant/requirements.txt"] = (data / "layer-requirements.txt").read_text()
    files["layers/dormant/constraints.txt"] = (data / "layer-constraints.txt").read_text()
    for part in ("Makefile", "requirements.txt"):
        files[f"layers/xray/{part}"] = (data / "xray" / part).read_text()
    for function in FUNCTIONS:
        files[f"functions/{function}/__init__.py"] = ""
        files[f"functions/{function}/app.py"] = entry_point(function)
    for event in _EVENTS:
        files[f"events/{event}"] = _event(event, (data / "events" / event).read_text())
    for relative, text in sorted(files.items()):
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("{{name}}", name).replace("{{version}}", __version__)
                        .replace("{{dormant}}", source.requirement)
                        .replace("{{install}}", source.install(PROJECT_EXTRAS)))
    write_wheel(source, root / "layers" / "dormant")
    return root


def entry_point(function: str) -> str:
    """The text of ``functions/<function>/app.py``: the handler, from :mod:`dormant.aws`, imported
    with the garbage collector off (nothing a cold start builds is garbage; the function
    module turns it back on, see :func:`dormant.aws.initialised`)."""
    return (f'"""The ``{function}`` Lambda function (template.yaml: '
            f'``Handler: {function}/app.handler``).\n\n'
            f"Everything it does is :mod:`dormant.aws.{function}`; the app it serves is the one "
            f"the ``DORMANT_APP``\nsetting names (template.yaml, Globals).\n"
            f'"""\n\nimport gc\n\n'
            "gc.disable()  # until the cold start is built: dormant.aws.initialised() resumes it\n"
            f'from dormant.aws.{function} import handler  # noqa: E402\n\n__all__ = ["handler"]\n')


def project_template(template: str, model: str = "openai") -> str:
    """The repository's ``template.yaml`` as a project's: its app is ``app:build``; with
    ``model="bedrock"`` it deploys on :data:`BEDROCK_MODEL` and reads no OpenAI secret."""
    replacements = [(SAMPLE_APP_SETTING, PROJECT_APP_SETTING)]
    if model == "bedrock":
        replacements += [(_BEDROCK_DEFAULT, _BEDROCK_DEFAULT.replace('""', BEDROCK_MODEL)),
                         (_OPENAI_DEFAULT, _OPENAI_DEFAULT.split("Default:")[0] + 'Default: ""')]
    for old, new in replacements:
        if template.count(old) != 1:
            raise ScaffoldError(f"template.yaml must hold {old!r} exactly once")
        template = template.replace(old, new)
    return template


def _collect(folder: Traversable, prefix: str, into: dict[str, str]) -> None:
    for entry in folder.iterdir():
        if entry.name == "__pycache__" or entry.name.startswith("."):
            continue  # a checkout's caches (.ruff_cache: files/ has a ruff config of its own)
        if entry.is_dir():
            _collect(entry, f"{prefix}{entry.name}/", into)
        else:
            into[f"{prefix}{entry.name}"] = entry.read_text()


def _event(name: str, text: str) -> str:
    """A sample event as a project's: the first turn sends a message its agent acts on."""
    if name != "api_post_turn.json":
        return text
    event = json.loads(text)
    body = json.loads(event["body"])
    body["message"] = _FIRST_MESSAGE
    event["body"] = json.dumps(body)
    return json.dumps(event, indent=2) + "\n"
