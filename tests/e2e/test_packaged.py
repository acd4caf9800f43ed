"""dormant as a user installs it: a wheel (not this checkout, not editable) in a fresh venv.

The wheel must hold everything ``dormant dev`` and ``dormant new`` read at run time: the
Bookings sample, and the scaffold's data, whose ``template.yaml``, ``events/``,
``layer-requirements.txt`` and ``xray/`` are links to the repository's files in a checkout and
must be real files in the wheel. From an empty directory, with nothing of the checkout on the
path, the installed ``dormant dev`` then serves the sample's pause-and-resume loop over HTTP.
"""

from __future__ import annotations

import importlib.util
import os
import stat
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

import dormant
from dormant.scaffold import project_template
from tests._dev import dev_process

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCAFFOLD = ROOT / "layers" / "dormant" / "dormant" / "scaffold"
BUILD_TIMEOUT = 300
INSTALL_TIMEOUT = 900  # a cold pip cache downloads boto3 and Powertools


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path

    @property
    def dormant(self) -> str:
        return str(self.venv / "bin" / "dormant")

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")


def _user_env() -> dict[str, str]:
    """The environment of a user's shell: no key, nothing of this checkout or its venv."""
    dropped = {"OPENAI_API_KEY", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}
    return {k: v for k, v in os.environ.items()
            if k not in dropped and not k.startswith("DORMANT_")}


def _run(*command: str | Path, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(c) for c in command], cwd=cwd, env=_user_env(),
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command} failed:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """A wheel of this repository, installed with its ``aws`` extra into a fresh venv."""
    source = _source_copy(tmp_path_factory.mktemp("source"))
    out = tmp_path_factory.mktemp("wheel")
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", out, source,
         cwd=out, timeout=BUILD_TIMEOUT)
    [wheel] = out.glob("dormant-*.whl")
    venv = tmp_path_factory.mktemp("venv") / "venv"
    _run(sys.executable, "-m", "venv", venv, cwd=out, timeout=BUILD_TIMEOUT)
    _run(venv / "bin" / "python", "-m", "pip", "install", "--quiet", f"{wheel}[aws]",
         cwd=out, timeout=INSTALL_TIMEOUT)
    return Installed(wheel, venv)


def _source_copy(into: Path) -> Path:
    """The checkout's files as they are now, links kept as links (``.ci/dist.py``'s copy, the
    one the release is built from): setuptools builds in the source tree, and this one has no
    stale ``build/`` to leak into the wheel, nor a second test run building beside this one."""
    spec = importlib.util.spec_from_file_location("_ci_dist", ROOT / ".ci" / "dist.py")
    assert spec is not None and spec.loader is not None
    dist = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dist)
    return dist.source_copy(into)  # type: ignore[no-any-return]


def _scaffold_data() -> dict[str, bytes]:
    """What ``dormant/scaffold/`` holds in this checkout, links followed."""
    data: dict[str, bytes] = {}
    for folder, dirs, files in os.walk(SCAFFOLD, followlinks=True):
        dirs[:] = [d for d in dirs if d != "__pycache__" and not d.startswith(".")]
        for name in files:
            if name.startswith(".") or name.endswith(".pyc"):
                continue
            path = Path(folder, name)
            data[f"dormant/scaffold/{path.relative_to(SCAFFOLD).as_posix()}"] = path.read_bytes()
    return data


def test_the_wheel_holds_the_sample_and_the_scaffold_as_real_files(
        installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        entries = {info.filename: info for info in wheel.infolist()}
        expected = _scaffold_data()
        for name in ("template.yaml", "layer-requirements.txt", "events/api_post_turn.json",
                     "xray/Makefile", "files/functions/app.py", "files/tests/test_app.py"):
            assert f"dormant/scaffold/{name}" in expected  # the walk found the linked data
        assert sorted(set(expected) - set(entries)) == []
        for name, content in expected.items():
            assert not stat.S_ISLNK(entries[name].external_attr >> 16), f"{name} is a link"
            assert wheel.read(name) == content, f"{name} differs from the checkout's"
        assert wheel.read("dormant/scaffold/template.yaml") == (ROOT / "template.yaml").read_bytes()
        assert wheel.read("dormant/scaffold/layer-requirements.txt") == (
            ROOT / "layers" / "dormant" / "requirements.txt").read_bytes()
        assert wheel.read("dormant/samples/bookings.py") == (
            ROOT / "layers" / "dormant" / "dormant" / "samples" / "bookings.py").read_bytes()


def test_the_wheel_carries_the_built_console(installed: Installed) -> None:
    web = ROOT / "layers" / "dormant" / "dormant" / "_web"
    built = sorted(p.relative_to(web).as_posix() for p in web.rglob("*") if p.is_file())
    assert "index.html" in built and any(name.endswith(".js") for name in built), built
    with zipfile.ZipFile(installed.wheel) as wheel:
        for name in built:
            assert wheel.read(f"dormant/_web/{name}") == (web / name).read_bytes(), name


def test_the_venv_runs_the_installed_copy(installed: Installed, tmp_path: Path) -> None:
    where = _run(installed.python, "-c", "import dormant; print(dormant.__file__)",
                 cwd=tmp_path, timeout=60).stdout.strip()
    assert Path(where).is_relative_to(installed.venv), where
    done = _run(installed.dormant, "--version", cwd=tmp_path, timeout=60)
    assert done.stdout == f"dormant {dormant.__version__}\n"


_EXTRAS_PROBE = """
from dormant.errors import ConfigError
from dormant.mcp import MCPServer
from dormant.models import BedrockModel
print(BedrockModel("amazon.nova-pro-v1:0").model)
try:
    MCPServer("http://127.0.0.1:9/mcp")
except ConfigError as missing:
    print(missing)
"""


def test_the_aws_install_has_bedrock_and_says_what_mcp_needs(installed: Installed,
                                                            tmp_path: Path) -> None:
    done = _run(installed.python, "-c", _EXTRAS_PROBE, cwd=tmp_path, timeout=60)

    assert done.stdout.splitlines() == [
        "amazon.nova-pro-v1:0",
        "MCPServer needs the mcp package: pip install 'dormant[mcp]'"]


@pytest.fixture
def served(installed: Installed, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """The installed ``dormant dev`` on its defaults, started in an empty directory."""
    empty = tmp_path / "empty"
    empty.mkdir()
    command = [installed.dormant, "dev", "--port", "0", "--quiet"]
    with dev_process(command, cwd=empty, env=_user_env(), log=tmp_path / "dev.log") as (
            proc, line, url):
        assert "bookings/concierge" in line and "the demo model" in line, line
        assert f"sessions in SQLite at {empty.resolve() / 'dormant.db'}" in line, line
        yield proc, url


def test_dev_from_an_empty_directory_pauses_and_resumes_over_http(
        served: tuple[subprocess.Popen[str], str]) -> None:
    proc, url = served
    paused = httpx.post(f"{url}/turns", json={"sessionId": "s1", "message": "book me in"},
                        timeout=30)
    assert paused.status_code == 200, paused.text
    assert paused.json()["status"] == "yielded_tool"
    [call] = paused.json()["yieldedTools"]
    assert call["name"] == "ask_guest" and call["args"] == {"q": "Which night?"}

    answer = {"callId": call["callId"], "input": {"answer": "Friday"}}
    resumed = httpx.post(f"{url}/turns", json={"sessionId": "s1", "tools": [answer]},
                         timeout=30)
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["status"] == "completed"
    assert resumed.json()["output"]["text"] == "Booked for Friday."

    # The console, from the wheel's files: no Node.js on a user's machine.
    console = httpx.get(f"{url}/", headers={"Accept": "text/html"}, timeout=30)
    assert console.status_code == 200 and "<title>dormant console</title>" in console.text
    script = console.text.split('src="', 1)[1].split('"', 1)[0]
    assert httpx.get(f"{url}{script}", timeout=30).status_code == 200

    proc.terminate()
    assert proc.wait(timeout=30) == 0


def test_new_writes_a_project_of_real_files(installed: Installed, tmp_path: Path) -> None:
    done = _run(installed.dormant, "new", "shop", cwd=tmp_path, timeout=60)
    project = tmp_path / "shop"
    assert f"created {project.resolve()}" in done.stdout
    paths = [Path(folder, name) for folder, dirs, files in os.walk(project)
             for name in [*dirs, *files]]
    assert [p for p in paths if p.is_symlink()] == []
    assert {"template.yaml", "functions/app.py", "tests/test_app.py", "events/wake-timer.json",
            "layers/dormant/requirements.txt", "layers/xray/Makefile"} <= {
        p.relative_to(project).as_posix() for p in paths}
    template = (project / "template.yaml").read_text()
    assert "DORMANT_APP: app:build" in template
    assert template == project_template((ROOT / "template.yaml").read_text())
