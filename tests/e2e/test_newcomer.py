"""The README's "Your own agent", as a newcomer types it: in a fresh venv, install the wheel
with the extras the README names, ``dormant new shop``, then the README's test command in the
project. The commands are read from the README itself, so a README whose commands stop working
fails here; the hint ``dormant new`` prints must name the same test command.

Then the project goes to Lambda with no package index holding dormant: its ``sam build``, with
no ``DORMANT=``, installs into the layer the very wheel the venv's dormant came from (copied
into the project by ``dormant new``).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

import dormant
from dormant.scaffold import PROJECT_EXTRAS, DormantSource
from tests._sam import sam_cli, sam_env

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT = 300
INSTALL_TIMEOUT = 900  # a cold pip cache downloads boto3, Powertools and openai
TEST_TIMEOUT = 300
SAM_BUILD_TIMEOUT = 900  # the layer's packages for two architectures, from a cold pip cache
#: The line pytest ends a passing run with, as ``-ra`` leaves it: ``==== 4 passed in 0.61s ====``.
SUMMARY = re.compile(r"=+ (\d+) passed in [\d.]+s =+\s*$")


@dataclass(frozen=True)
class Commands:
    """The README's "Your own agent" commands, each as its words (comments dropped)."""

    install: list[str]
    new: list[str]
    test: list[str]


def _section_commands(readme: str) -> list[list[str]]:
    """The commands of the first ``bash`` block under "## Your own agent", ``&&`` split."""
    section = readme.split("\n## Your own agent\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block is not None, "no bash block in the README's 'Your own agent'"
    commands: list[list[str]] = []
    for line in block.group(1).splitlines():
        for part in line.split("&&"):
            words = shlex.split(part, comments=True)
            if words:
                commands.append(words)
    return commands


def _readme_commands() -> Commands:
    commands = _section_commands((ROOT / "README.md").read_text())
    [install] = [c for c in commands if c[:2] == ["pip", "install"]]
    [new] = [c for c in commands if c[:2] == ["dormant", "new"]]
    [test] = [c for c in commands if "pytest" in c]
    assert commands.index(install) < commands.index(new) < commands.index(test), commands
    return Commands(install, new, test)


def _user_env(venv: Path) -> dict[str, str]:
    """A user's shell with ``venv`` activated: no key, nothing of this checkout or its venv."""
    dropped = {"OPENAI_API_KEY", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}
    env = {k: v for k, v in os.environ.items()
           if k not in dropped and not k.startswith("DORMANT_")}
    ours = str(Path(sys.executable).parent)
    rest = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != ours]
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *rest])
    env["VIRTUAL_ENV"] = str(venv)
    return env


def _run(command: list[str], cwd: Path, env: dict[str, str],
         timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, f"{done.args} failed:\n{done.stdout}\n{done.stderr}"
    return done


def _source_copy(into: Path) -> Path:
    """The checkout's files as they are now (tracked, and new ones git does not ignore), links
    kept as links, so the wheel is built from a clean tree (as tests/e2e/test_packaged.py
    does)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=ROOT, capture_output=True, check=True,
                            timeout=60).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.exists() or source.is_symlink():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name, follow_symlinks=False)
    return into


def build_wheel(factory: pytest.TempPathFactory) -> Path:
    """This repository's wheel, built from a clean copy of the checkout."""
    source = _source_copy(factory.mktemp("source"))
    out = factory.mktemp("wheel")
    _ok(_run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out),
              str(source)], out, os.environ.copy(), BUILD_TIMEOUT))
    [wheel] = out.glob("dormant-*.whl")
    return wheel


def wheel_venv(factory: pytest.TempPathFactory, install: list[str],
               wheel: Path | None = None) -> Path:
    """A fresh venv with this repository's wheel (``wheel``, or one built now) installed by
    ``install`` (a README's ``pip install "dormant[...]"``: the package name replaced by the
    wheel's path, the extras kept): dormant comes from that file, its dependencies from the
    configured index."""
    wheel = wheel or build_wheel(factory)
    out = wheel.parent
    venv = factory.mktemp("venv") / "venv"
    _ok(_run([sys.executable, "-m", "venv", str(venv)], out, os.environ.copy(), BUILD_TIMEOUT))
    [package] = [w for w in install if w.startswith("dormant[")]
    command = [str(wheel) + package.removeprefix("dormant") if w == package else w
               for w in install]
    _ok(_run([*command, "--quiet"], out, _user_env(venv), INSTALL_TIMEOUT))
    return venv


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory)


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A fresh venv with the wheel installed by the "Your own agent" install command."""
    install = _readme_commands().install
    [package] = [w for w in install if w.startswith("dormant[")]
    assert "test" in package.removeprefix("dormant").strip("[]").split(","), install
    return wheel_venv(tmp_path_factory, install, wheel)


def test_a_new_projects_tests_pass_with_the_readmes_commands(venv: Path,
                                                             tmp_path: Path) -> None:
    commands = _readme_commands()
    env = _user_env(venv)
    empty = tmp_path / "work"
    empty.mkdir()

    created = _ok(_run(commands.new, empty, env, BUILD_TIMEOUT))
    project = empty / commands.new[2]
    assert (project / "tests" / "test_app.py").is_file()
    tested = _run(commands.test, project, env, TEST_TIMEOUT)

    assert tested.returncode == 0, tested.stdout + tested.stderr
    summary = SUMMARY.search(tested.stdout)
    assert summary is not None, f"no summary line at the end:\n{tested.stdout}"
    assert int(summary.group(1)) >= 4
    hinted = [line.split("#", 1)[0].split() for line in created.stdout.splitlines()
              if line.rstrip().endswith("# the agent's tests")]
    assert hinted == [commands.test], created.stdout


def test_a_new_project_builds_its_layer_from_the_wheel_dormant_came_from(
        venv: Path, wheel: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in _user_env(venv).items() if k != "DORMANT"}
    created = _ok(_run(["dormant", "new", "shop"], tmp_path, env, BUILD_TIMEOUT))
    project = tmp_path / "shop"
    assert f"Its layer installs the wheel it was installed from, {wheel} " in created.stdout
    copied = project / "layers" / "dormant" / wheel.name
    assert copied.read_bytes() == wheel.read_bytes()
    tested = _run(["python", "-m", "pytest"], project, env, TEST_TIMEOUT)
    assert tested.returncode == 0, tested.stdout + tested.stderr

    built = _run([str(sam_cli()), "build", "--build-dir", ".aws-sam/build"], project,
                 sam_env(env), SAM_BUILD_TIMEOUT)

    assert built.returncode == 0, built.stdout + built.stderr
    assert f"layers/dormant/{wheel.name}" in built.stdout + built.stderr  # what make installed
    layer = project / ".aws-sam" / "build" / "DormantLayer" / "python"
    [info] = layer.glob("dormant-*.dist-info")
    assert info.name == f"dormant-{dormant.__version__}.dist-info"
    with zipfile.ZipFile(wheel) as zipped:
        shipped = {name: zipped.read(name) for name in zipped.namelist()
                   if name.startswith("dormant/") and not name.endswith("/")}
    # The Makefile drops what Lambda has no use for (dormant new's files, the console).
    kept = {name: data for name, data in shipped.items()
            if not name.startswith(("dormant/scaffold/", "dormant/_web/"))
            and name != "dormant/_console.py"}
    assert len(kept) > 50 and "dormant/__init__.py" in kept
    for name, data in kept.items():
        assert (layer / name).read_bytes() == data, f"{name} is not the wheel's"


def test_the_projects_readme_names_the_same_commands() -> None:
    """The generated project's README says what this README says (no venv needed: the
    scaffold's README is the package's data)."""
    ours = _readme_commands()
    theirs = (ROOT / "layers/dormant/dormant/scaffold/files/README.md").read_text()
    lines = [_words(line) for line in theirs.splitlines()]
    # Its install line is the one that gets the project's own dormant ({{install}}): for a
    # dormant from the index, this README's line exactly.
    assert ["{{install}}"] in lines
    released = DormantSource(kind="index", version=dormant.__version__)
    assert _words(released.install(PROJECT_EXTRAS)) == ours.install
    assert ours.test in lines


def _words(line: str) -> list[str] | None:
    """A line's shell words (comments dropped); None for a line that is not one command."""
    try:
        return shlex.split(line, comments=True)
    except ValueError:  # an unbalanced quote: a line of a longer command
        return None
