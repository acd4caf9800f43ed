"""``dormant new NAME``: the project a user starts from is complete, its tests pass, its code is
lint- and type-clean, its Lambda functions and template are the repository's own (but for the
one setting naming the app), and ``sam validate --lint`` accepts it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import dormant
from dormant._appspec import build_app
from dormant.cli import main
from dormant.scaffold import (
    FUNCTIONS,
    PROJECT_APP_SETTING,
    SAMPLE_APP_SETTING,
    TEST_COMMAND,
    dormant_source,
    entry_point,
)
from tests._sam import sam_cli, sam_env

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
#: What these tests keep between runs: mypy's cache.
CACHE = Path.home() / ".cache" / "dormant-tests"
EVENTS = ("api_post_turn.json", "api_get_session.json", "api_delete_session.json",
          "api_post_fork.json", "api_get_docs.json", "webhook_sqs_fifo_batch.json",
          "wake-timer.json", "cleanup_ddb_stream_remove.json")
PROJECT_FILES = {
    ".gitignore", "README.md", "pyproject.toml", "template.yaml",
    "functions/app.py", "tests/test_app.py",
    "layers/dormant/Makefile", "layers/dormant/requirements.txt",
    "layers/dormant/constraints.txt",
    "layers/xray/Makefile", "layers/xray/requirements.txt",
    *(f"functions/{f}/{name}" for f in FUNCTIONS for name in ("__init__.py", "app.py")),
    *(f"events/{event}" for event in EVENTS),
}
#: The wheel a project gets: these tests run dormant from this checkout, so it is packed from it.
WHEEL = f"layers/dormant/dormant-{dormant.__version__}-py3-none-any.whl"
#: The generated project's commands run as a user's would: no key, nothing of this checkout.
ENV = {k: v for k, v in os.environ.items() if k not in {"OPENAI_API_KEY", "PYTHONPATH"}}


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def _run(command: list[str | Path], cwd: Path, *, timeout: float = 120,
         env: dict[str, str] = ENV) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    parent = tmp_path_factory.mktemp("projects")
    assert main(["new", "shop", "--dir", str(parent)]) == 0
    return parent / "shop"


def test_new_says_where_it_created_the_project(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["new", "shop", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"dormant new: created {tmp_path / 'shop'}\n")
    assert "dormant dev --app functions/app.py" in out
    assert (f"Its layer installs {dormant_source().describe()} (layers/dormant/Makefile: "
            "DORMANT).\n") in out


def test_the_layer_installs_a_wheel_of_the_dormant_that_made_it(project: Path,
                                                                tmp_path: Path) -> None:
    """Run from this checkout, ``dormant new`` packs it: the Makefile's default installs that
    wheel (named by the Makefile's own directory), and pip, offline, installs this package."""
    assert dormant_source().kind == "packed"
    makefile = (project / "layers/dormant/Makefile").read_text()
    assert (f"\nDORMANT ?= $(dir $(abspath $(lastword $(MAKEFILE_LIST))))"
            f"{Path(WHEEL).name}\n") in makefile
    target = tmp_path / "target"
    done = _run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                 "--disable-pip-version-check", "--target", target, project / WHEEL], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    ours = Path(dormant.__file__).parent
    sources = list(ours.rglob("*.py"))
    assert len(sources) > 50
    for path in sources:
        name = path.relative_to(ours)
        assert (target / "dormant" / name).read_bytes() == path.read_bytes(), name
    assert (target / "dormant/scaffold/template.yaml").read_text() == (
        ROOT / "template.yaml").read_text()


def test_the_project_has_every_file_with_its_name_filled_in(project: Path) -> None:
    assert _files(project) == {*PROJECT_FILES, WHEEL}
    assert [p for p in project.rglob("*") if p.is_symlink()] == []
    for name in PROJECT_FILES:
        assert "{{" not in (project / name).read_text(), name
    assert (project / "README.md").read_text().startswith("# shop\n")
    for part in ("requirements.txt", "constraints.txt"):  # the same pinned versions
        assert (project / "layers/dormant" / part).read_text() == (
            ROOT / "layers/dormant" / part).read_text()
    assert "-c constraints.txt" in (project / "layers/dormant/Makefile").read_text()
    for part in ("Makefile", "requirements.txt"):
        assert (project / "layers/xray" / part).read_text() == (
            ROOT / "layers/xray" / part).read_text()


def test_the_sample_events_are_the_repositorys_with_a_first_message_for_this_agent(
        project: Path) -> None:
    for event in EVENTS:
        ours, theirs = (json.loads((root / "events" / event).read_text())
                        for root in (project, ROOT))
        if event == "api_post_turn.json":
            assert json.loads(ours.pop("body"))["message"] == "refund order A-1042"
            theirs.pop("body")
        assert ours == theirs, event


def test_the_projects_tests_pass(project: Path) -> None:
    done = _run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider"], project)
    assert done.returncode == 0, done.stdout + done.stderr
    # the project's own addopts (-ra) end the run with its summary line
    assert re.search(r"=+ 5 passed in [\d.]+s =+\s*$", done.stdout), done.stdout


def test_the_readme_and_the_hint_name_one_install_and_one_test_command(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What ``dormant new`` prints is what the project's README says: the ``test`` extra
    installs pytest, and ``python -m pytest`` runs the venv's."""
    assert main(["new", "shop", "--dir", str(tmp_path)]) == 0
    hint = capsys.readouterr().out
    readme = (tmp_path / "shop" / "README.md").read_text()
    install = dormant_source().install("aws,openai,test")
    assert f"\n{install}\n" in readme  # the same dormant as the layer's
    wheel = dormant_source().wheel_name
    assert install == ('pip install "dormant[aws,openai,test]"' if wheel is None else
                       f'pip install "./layers/dormant/{wheel}[aws,openai,test]"')
    assert wheel is None or (tmp_path / "shop" / "layers" / "dormant" / wheel).is_file()
    assert f"#   {install}\n" in (tmp_path / "shop" / "pyproject.toml").read_text()
    assert f"\n{TEST_COMMAND}  " in readme
    assert f"\n  {TEST_COMMAND}  " in hint and "pytest -q" not in hint
    assert '"pytest>=8"' in (ROOT / "pyproject.toml").read_text().split(
        "[project.optional-dependencies]")[1].split("\ntest = [")[1].split("]")[0]


def test_the_projects_code_is_lint_and_type_clean(project: Path) -> None:
    """What users start from passes ruff on the project's own settings, and mypy --strict."""
    linted = _run([BIN / "ruff", "check", "--no-cache", "."], project)
    assert linted.returncode == 0, linted.stdout + linted.stderr
    typed = _run([BIN / "mypy", "--strict", "--cache-dir", CACHE / "mypy", "functions/app.py",
                  "tests/test_app.py"], project)
    assert typed.returncode == 0, typed.stdout + typed.stderr


def test_the_lambda_entry_points_are_the_repositorys(project: Path) -> None:
    for function in FUNCTIONS:
        text = (project / "functions" / function / "app.py").read_text()
        assert text == entry_point(function)
        assert text == (ROOT / "functions" / function / "app.py").read_text()


def test_the_template_is_the_repositorys_but_for_the_app_setting(project: Path) -> None:
    ours = (project / "template.yaml").read_text().splitlines()
    theirs = (ROOT / "template.yaml").read_text().splitlines()
    assert len(ours) == len(theirs)
    differing = [(a.strip(), b.strip()) for a, b in zip(ours, theirs, strict=True) if a != b]
    assert differing == [(PROJECT_APP_SETTING, SAMPLE_APP_SETTING)]


def test_a_bedrock_project_deploys_on_bedrock_and_reads_no_secret(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dormant.scaffold import BEDROCK_MODEL

    assert main(["new", "shop", "--dir", str(tmp_path), "--model", "bedrock"]) == 0

    assert BEDROCK_MODEL in capsys.readouterr().out
    ours = (tmp_path / "shop" / "template.yaml").read_text().splitlines()
    theirs = (ROOT / "template.yaml").read_text().splitlines()
    differing = [(a.strip(), b.strip()) for a, b in zip(ours, theirs, strict=True) if a != b]
    assert differing == [('Default: ""', "Default: dormant/openai-api-key"),
                         (f"Default: {BEDROCK_MODEL}", 'Default: ""'),
                         (PROJECT_APP_SETTING, SAMPLE_APP_SETTING)]


def test_new_refuses_a_model_it_cannot_deploy(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["new", "shop", "--dir", str(tmp_path), "--model", "gemini"])

    assert exited.value.code == 2
    assert "invalid choice: 'gemini'" in capsys.readouterr().err
    assert not (tmp_path / "shop").exists()


def test_dormant_dev_can_load_the_projects_app(project: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the app's directory goes on the path
    monkeypatch.setitem(sys.modules, "app", sys.modules.get("app"))  # ... and its module here
    app, agent = build_app(str(project / "functions" / "app.py"), store=None)
    assert isinstance(app, dormant.App) and isinstance(agent, dormant.Agent)
    assert app.name == "shop" and type(agent.model).__name__ == "LocalModel"


# --- sam validate --lint ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def sam() -> Path:
    return sam_cli()


def test_sam_validates_the_projects_template(project: Path, sam: Path) -> None:
    done = _run([sam, "validate", "--lint"], project, timeout=300, env=sam_env(ENV))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "is a valid SAM Template" in done.stdout + done.stderr


# --- refusals ---------------------------------------------------------------------------------


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.startswith("dormant: ") and err.count("\n") == 1, err
    return err


def test_new_refuses_a_directory_that_is_not_empty(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    mine = tmp_path / "shop" / "notes.txt"
    mine.parent.mkdir()
    mine.write_text("mine")
    assert main(["new", "shop", "--dir", str(tmp_path)]) == 2
    assert "already exists and is not empty" in _one_line_error(capsys)
    assert _files(tmp_path) == {"shop/notes.txt"}
    assert mine.read_text() == "mine"


def test_new_fills_an_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "shop").mkdir()
    assert main(["new", "shop", "--dir", str(tmp_path)]) == 0
    assert _files(tmp_path / "shop") == {*PROJECT_FILES, WHEEL}


@pytest.mark.parametrize("name", ["1bad", "a/b", "../up", ""])
def test_new_refuses_a_bad_name(name: str, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["new", name, "--dir", str(tmp_path)]) == 2
    assert "is not a project name" in _one_line_error(capsys)
    assert list(tmp_path.iterdir()) == []


def test_new_refuses_a_missing_parent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["new", "shop", "--dir", str(tmp_path / "nowhere")]) == 2
    assert "no directory" in _one_line_error(capsys)
    assert list(tmp_path.iterdir()) == []
