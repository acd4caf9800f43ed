"""The ``dormant`` command as a user meets it: each ordinary mistake is one line on stderr,
``dormant: ...``, and exit status 2, never a traceback.

Each case runs ``python -m dormant.cli`` as a subprocess, so the exit status, stderr and pipes
are the real ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import dormant
from dormant.models import ScriptedModel
from dormant.stores import SqliteStore
from tests._dev import dev_process, one_dormant_line

#: The environment the commands run in: no OpenAI key (nothing may reach the network).
ENV = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
TIMEOUT = 60

APP = '''\
import dormant
from dormant.models import ScriptedModel


def build(store=None, model=None):
    app = dormant.App(name="echo", store=store)
    return app, app.agent(name="echo", model=model or ScriptedModel(["The app's own reply."]))
'''
RETURNS_NONE = '''\
def build(store=None, model=None):
    return None
'''
NO_BUILD = "ANSWER = 42\n"
RAISES = '''\
import os

raise RuntimeError("the app's own bug")
'''
BROKEN_SYNTAX = "def build(store=None, model=None):\n    return (app, agent\n\nx = 1\n"
BUILD_RAISES = '''\
def build(store=None, model=None):
    settings = {}
    return settings["missing"]
'''

#: Each mistake, run in a directory holding the files above (see ``workdir``), and a part of
#: the one line it must print.
MISTAKES: dict[str, tuple[list[str], str]] = {
    "port out of range": (["dev", "--port", "99999"], "99999 is not a port"),
    "port not a number": (["dev", "--port", "abc"], "'abc' is not a port number"),
    "db in a missing directory": (["dev", "--db", "missing/dir/x.db"], "no directory"),
    "dev on a file that is not a database": (["dev", "--db", "notes.txt"], "not a database"),
    "list on a file that is not a database": (["sessions", "list", "--db", "notes.txt"],
                                              "not a database"),
    "list on a missing database": (["sessions", "list", "--db", "missing.db"],
                                   "no database at"),
    "app whose build returns None": (["dev", "--app", "returns_none.py"], "returned None"),
    "app module that does not exist": (["dev", "--app", "no_such_module:build"],
                                       "no module named 'no_such_module'"),
    "app file without build": (["dev", "--app", "no_build.py"], "no attribute 'build'"),
    "app file without the attribute": (["dev", "--app", "app.py:missing_attr"],
                                       "no attribute 'missing_attr'"),
    "scripted model file missing": (["dev", "--model", "scripted:missing.json"],
                                    "cannot read missing.json"),
    "scripted model not a list": (["dev", "--model", "scripted:object.json"],
                                  "must hold a JSON list of replies"),
    "session id with bad characters": (["sessions", "show", "bad id!"],
                                       "invalid session id 'bad id!'"),
    "limit of zero": (["sessions", "list", "--limit", "0"], "0 must be at least 1"),
    "app file named as a module in use": (["dev", "--app", "clash/json.py"],
                                          "its module name 'json' is already another module's"),
    "list on another program's database": (["sessions", "list", "--db", "other.db"],
                                           "another program's SQLite database"),
    "dev on another program's database": (["dev", "--db", "other.db"],
                                          "another program's SQLite database"),
    "app file that raises on import": (
        ["dev", "--app", "raises.py"],
        "raises.py failed: RuntimeError: the app's own bug (at raises.py, line 3)"),
    "app module that raises on import": (
        ["dev", "--app", "raises:build"],
        "raises:build failed: RuntimeError: the app's own bug (at raises.py, line 3)"),
    "app file with a syntax error": (
        ["dev", "--app", "broken_syntax.py"],
        "broken_syntax.py: cannot import broken_syntax.py: SyntaxError at line 2: "),
    "app whose build raises": (
        ["dev", "--app", "build_raises.py"],
        "build_raises.py failed: KeyError: 'missing' (at build_raises.py, line 3)"),
}
NOTES = "Shopping list: eggs, flour, a bigger pipe buffer.\n" * 4


def _other_program_database() -> bytes:
    """The bytes of a SQLite database some other program made (one table of its own)."""
    import sqlite3
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "other.db"
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE recipes (name TEXT)")
        db.execute("INSERT INTO recipes VALUES ('bread')")
        db.commit()
        db.close()
        return path.read_bytes()


OTHER_DB = _other_program_database()


def _dormant(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dormant.cli", *args], cwd=cwd, env=ENV,
                          capture_output=True, text=True, timeout=TIMEOUT)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "clash").mkdir()  # not beside the others: `python -m` puts the cwd on the path
    (tmp_path / "clash" / "json.py").write_text(APP)
    (tmp_path / "returns_none.py").write_text(RETURNS_NONE)
    (tmp_path / "no_build.py").write_text(NO_BUILD)
    (tmp_path / "raises.py").write_text(RAISES)
    (tmp_path / "broken_syntax.py").write_text(BROKEN_SYNTAX)
    (tmp_path / "build_raises.py").write_text(BUILD_RAISES)
    (tmp_path / "notes.txt").write_text(NOTES)
    (tmp_path / "object.json").write_text(json.dumps({"text": "a reply, not a list"}))
    (tmp_path / "replies.json").write_text(json.dumps(["Scripted hello."]))
    (tmp_path / "other.db").write_bytes(OTHER_DB)
    return tmp_path


@pytest.mark.parametrize("mistake", MISTAKES)
def test_a_mistake_is_one_line_and_exit_2(mistake: str, workdir: Path) -> None:
    args, says = MISTAKES[mistake]
    before = {p.name for p in workdir.iterdir()}
    done = _dormant(*args, cwd=workdir)
    assert "Traceback" not in done.stderr
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("dormant: ") and done.stderr.count("\n") == 1, done.stderr
    assert says in done.stderr
    assert done.stdout == ""
    # Nothing made or changed on the way out: no database (an app that cannot be loaded is
    # found before the database is opened), no directory, no -wal/-shm beside the notes or the
    # other program's database, both intact.
    assert {p.name for p in workdir.iterdir()} - before == set()
    assert (workdir / "notes.txt").read_text() == NOTES
    assert (workdir / "other.db").read_bytes() == OTHER_DB


def test_version(tmp_path: Path) -> None:
    done = _dormant("--version", cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"dormant {dormant.__version__}\n",
                                                           "")


def test_dev_help_shows_the_defaults(tmp_path: Path) -> None:
    done = _dormant("dev", "--help", cwd=tmp_path)
    assert done.returncode == 0
    shown = " ".join(done.stdout.split())  # argparse wraps to the terminal's width
    assert "port to listen on (default: 8000)" in shown
    assert "interface to listen on (default: 127.0.0.1)" in shown
    assert "(default: dormant.samples.bookings:build)" in shown
    assert "--reload serve the app anew when one of its files changes" in shown
    assert "naming any turn it cuts off and how to send it again" in shown
    assert "(default: None)" not in shown and "(default: False)" not in shown


def test_a_closed_pipe_is_not_a_traceback(tmp_path: Path) -> None:
    """``| head -c 10`` closes the pipe after ten bytes; the listing is larger than a pipe's
    buffer (64 KiB), so the command is still writing when it does."""
    db = tmp_path / "many.db"
    store = SqliteStore(db)
    app = dormant.App(name="cli", store=store)
    count = 400
    agent = app.agent(name="concierge", model=ScriptedModel(["Hello there."] * count))
    rest = app.handler.rest(agent=agent)
    for i in range(count):
        rest({"session_id": f"s{i:03d}-" + "x" * 100, "input": {"message": "hi"}})
    store.close()
    command = (f"set +o pipefail; {sys.executable} -m dormant.cli sessions list --json "
               f"--limit 1000 --db {db} | head -c 10")
    done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=ENV, capture_output=True,
                          text=True, timeout=TIMEOUT)
    assert done.stderr == ""
    assert done.stdout == '[\n  {\n    '
    listed = _dormant("sessions", "list", "--json", "--limit", "1000", "--db", str(db),
                      cwd=tmp_path)
    assert len(json.loads(listed.stdout)) == count
    assert len(listed.stdout) > 64 * 1024  # larger than the pipe's buffer, or this tests nothing


@pytest.fixture
def served(workdir: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``dormant dev`` on the app file ``app.py``, played by ``scripted:replies.json``."""
    command = [sys.executable, "-m", "dormant.cli", "dev", "--app", "app.py", "--model",
               "scripted:replies.json", "--port", "0", "--db", "dev.db", "--quiet"]
    with dev_process(command, cwd=workdir, env=ENV, log=workdir / "dev.log") as (
            proc, line, url):
        assert line.startswith("dormant dev: serving echo/echo on http://"), line
        yield proc, url


def test_dev_serves_an_app_file_on_the_scripted_model(
        served: tuple[subprocess.Popen[str], str]) -> None:
    proc, url = served
    reply = httpx.post(f"{url}/turns", json={"sessionId": "s1", "message": "hi"}, timeout=30)
    assert reply.status_code == 200, reply.text
    assert reply.json()["status"] == "completed"
    assert reply.json()["output"]["text"] == "Scripted hello."  # --model, not the app's own
    # The script has one reply: the next call is a failed model call, not a crashed server.
    spent = httpx.post(f"{url}/turns", json={"sessionId": "s2", "message": "hi"}, timeout=30)
    assert (spent.status_code, spent.json()["code"]) == (502, "model_error"), spent.text
    proc.terminate()
    assert proc.wait(timeout=TIMEOUT) == 0


#: ``dormant dev`` where Powertools is not installed (``pip install dormant`` with no extra):
#: a finder refuses the package before the command runs.
WITHOUT_POWERTOOLS = '''\
import importlib.abc, sys

class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "aws_lambda_powertools":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Absent())
from dormant.cli import main
sys.exit(main(["dev", "--port", "0"]))
'''


def test_dev_without_the_aws_extra_says_what_to_install(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", WITHOUT_POWERTOOLS], cwd=tmp_path, env=ENV,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert "Traceback" not in done.stderr
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("dormant: ") and done.stderr.count("\n") == 1, done.stderr
    assert "pip install 'dormant[aws]'" in done.stderr
    assert list(tmp_path.iterdir()) == []  # no database made for a server that cannot start


#: ``import openai`` fails in the command's process (as without the ``openai`` extra):
#: Python's ``site`` imports this file first from the path's front.
WITHOUT_OPENAI = 'import sys\nsys.modules["openai"] = None\n'


NEEDS_OPENAI = "dormant.models.OpenAIModel needs the openai package: pip install 'dormant[openai]'"


@pytest.mark.parametrize(("args", "says"), [
    # the sample picks OpenAI because a key is set
    ([], f"dormant.samples.bookings:build: {NEEDS_OPENAI}"),
    (["--model", "openai"], NEEDS_OPENAI),
    (["--app", "uses_openai.py"],  # an app importing the package itself
     "uses_openai.py: the openai package is not installed: pip install 'dormant[openai]'"),
], ids=["the sample", "--model openai", "an app's import"])
def test_openai_with_a_key_and_no_openai_package_says_which_extra(
        args: list[str], says: str, tmp_path: Path) -> None:
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(WITHOUT_OPENAI)
    work = tmp_path / "work"
    work.mkdir()
    (work / "uses_openai.py").write_text("import openai\n\n\ndef build(store=None, model=None):"
                                         "\n    raise AssertionError('never built')\n")
    path = os.pathsep.join(p for p in (str(shim), ENV.get("PYTHONPATH")) if p)
    env = {**ENV, "PYTHONPATH": path, "OPENAI_API_KEY": "sk-test-not-a-key"}
    done = subprocess.run([sys.executable, "-m", "dormant.cli", "dev", "--port", "0", *args],
                          cwd=work, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert one_dormant_line(done) == f"dormant: {says}\n"
    assert [p.name for p in work.iterdir()] == ["uses_openai.py"]  # no database left behind


#: The capabilities that let root write (and search) where a file's mode says no:
#: ``CAP_DAC_OVERRIDE`` and ``CAP_DAC_READ_SEARCH`` (linux/capability.h), and prctl's
#: ``PR_CAPBSET_DROP``.
_DAC_CAPABILITIES = (1, 2)
_PR_CAPBSET_DROP = 24


def _without_root_override() -> None:
    """In the child, before it runs the command: drop the capabilities by which root ignores
    a file's mode, so a ``chmod``-ed directory refuses it as it refuses any user."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for capability in _DAC_CAPABILITIES:
        if libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _dormant_bound(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``dormant ...`` bound by file modes, root or not (root writes anywhere otherwise)."""
    privileged = os.geteuid() == 0
    return subprocess.run([sys.executable, "-m", "dormant.cli", *args], cwd=cwd, env=ENV,
                          capture_output=True, text=True, timeout=TIMEOUT,
                          preexec_fn=_without_root_override if privileged else None)


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    """A directory ``chmod 555`` (given its write bit back at the end, for the clean-up)."""
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o555)
    yield folder
    folder.chmod(0o755)


def test_new_in_a_directory_it_cannot_write_names_it(read_only: Path) -> None:
    locked = read_only
    said = one_dormant_line(_dormant_bound("new", "shop", cwd=locked))
    assert said == (f"dormant: cannot create shop in {locked}: Permission denied "
                    f"({locked / 'shop'}); pass --dir a directory you can write\n")
    assert list(locked.iterdir()) == []


def test_dev_in_a_read_only_directory_names_it_and_db(read_only: Path) -> None:
    locked = read_only
    said = one_dormant_line(_dormant_bound("dev", "--port", "0", cwd=locked))
    assert said.startswith(f"dormant: cannot open the database {locked / 'dormant.db'}: this "
                           f"user may not write in its directory {locked} (permission denied")
    assert said.endswith("; pass --db to put the sessions elsewhere, e.g. --db ~/dormant.db\n")
    assert list(locked.iterdir()) == []


def test_a_read_only_database_is_not_called_another_kind_of_file(tmp_path: Path) -> None:
    db = tmp_path / "kept" / "dormant.db"
    db.parent.mkdir()
    SqliteStore(db).close()
    db.chmod(0o444)
    db.parent.chmod(0o555)
    try:
        served = one_dormant_line(_dormant_bound("dev", "--port", "0", "--db", str(db),
                                                  cwd=tmp_path))
        listed = one_dormant_line(_dormant_bound("sessions", "list", "--db", str(db),
                                                  cwd=tmp_path))
    finally:
        db.parent.chmod(0o755)
    refusal = f"dormant: cannot open the database {db}: this user may not write the file {db} " \
              f"(permission denied); "
    assert served == refusal + "pass --db to put the sessions elsewhere, e.g. --db ~/dormant.db\n"
    assert listed == refusal + "copy it to a directory you can write and pass --db with the " \
                               "copy's path\n"


def test_dev_where_no_file_can_be_made_names_the_place_and_db(tmp_path: Path) -> None:
    """/proc takes no new file, whoever asks (root included); elsewhere there is no /proc
    to make one in: either way no file can be made there."""
    said = one_dormant_line(_dormant("dev", "--port", "0", "--db", "/proc/dormant.db",
                                      cwd=tmp_path))
    assert said.startswith("dormant: cannot open the database /proc/dormant.db: ")
    assert "/proc" in said.split(": ", 2)[2]
    assert said.endswith("pass --db to put the sessions elsewhere, e.g. --db ~/dormant.db\n")
