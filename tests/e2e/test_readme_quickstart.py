"""The README's quick start, run as written: every ```bash block of its "Quick start" section
runs, and what it prints must have the shape of the output block (```json or ```text) that
follows it.

What differs from pasting the blocks into two terminals, and nothing else:

- The block that runs ``dormant dev`` runs in the background with ``--port 0 --db
  <workdir>/dormant.db`` added right after ``dormant dev`` (any free port; the database where
  the other blocks run, as it is in the server's own terminal), and is stopped at the end.
  Its first line, the start-up line, is its output.
- In the other blocks ``localhost:8000`` and ``127.0.0.1:8000`` become the port the server
  printed.
- Those blocks run in ONE bash process, in order, with ``printf '\\n@@block N@@\\n'`` between
  them, so a variable one block sets (``CALL=...``) is there for the next; the output is split
  on the markers.
- Every block runs in the same working directory, with the venv's ``bin`` first on ``PATH``,
  ``TMPDIR`` inside the test's temporary directory (for ``mktemp``), and neither
  ``OPENAI_API_KEY`` (the demo model must serve) nor ``DORMANT_DB`` set.

Shapes: JSON must have the same keys, the same value types and the same values, except ids
(``call_…``, ``inv_…``, ``evt_…``) and timestamps (keys ending in ``At``, and ``ts``). Text is
compared line by line once ids, times, dates, the database's directory and the port are
replaced by placeholders. A README whose documented output drifts from what the commands print
fails here with the difference.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .conftest import ROOT, STARTUP_TIMEOUT, _first_line

README = ROOT / "README.md"
SECTION = "## Quick start"
SERVER = re.compile(r"\bdormant dev\b")
READY = re.compile(r"^dormant dev: serving \S+ on http://[\w.]+:(\d+) ")
DOCUMENTED_PORT = re.compile(r"\b(localhost|127\.0\.0\.1):8000\b")
MARKER = re.compile(r"\n?@@block (\d+)@@\n")
#: Placeholders for what differs from run to run, applied to text and to JSON strings alike.
VOLATILE = [
    (re.compile(r"\bcall_[0-9a-f]{8,}"), "call_<id>"),
    (re.compile(r"\binv_[0-9a-f]{8,}"), "inv_<id>"),
    (re.compile(r"\bevt_[0-9a-f]{8,}(_[0-9a-f]+)?"), "evt_<id>"),
    (re.compile(r"\b\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\b"), "<date> UTC"),
    (re.compile(r"\b\d\d:\d\d:\d\d\.\d{3}\b"), "<time>"),
    (re.compile(r"· \d+ ms\b"), "· <n> ms"),  # a turn's time, as the inspector shows it
    (re.compile(r"\S+/dormant\.db\b"), "<dir>/dormant.db"),
    (re.compile(r"\b(localhost|127\.0\.0\.1):\d+\b"), r"\1:<port>"),
]
#: JSON keys whose numbers are times, not facts.
TIME_KEY = re.compile(r"(At|^ts)$")


@dataclass(frozen=True)
class Step:
    """One ```bash block and the output block after it."""

    number: int
    command: str
    kind: str  # "json" or "text"
    expected: str


def quick_start(readme: str) -> list[Step]:
    """The quick start's command blocks, each with the output block that follows it."""
    assert SECTION in readme, f"README.md has no {SECTION!r} section"
    section = readme.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```(\w*)\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    steps: list[Step] = []
    for index, (lang, body) in enumerate(blocks):
        if lang != "bash":
            continue
        following = blocks[index + 1] if index + 1 < len(blocks) else ("", "")
        assert following[0] in ("json", "text"), (
            f"quick start block {len(steps) + 1} ({body.strip()[:60]!r}) is not followed by "
            f"its output in a ```json or ```text block")
        steps.append(Step(len(steps) + 1, body.strip(), following[0], following[1].strip("\n")))
    return steps


# --- comparing shapes -------------------------------------------------------------------------


def normalised(text: str) -> str:
    for pattern, placeholder in VOLATILE:
        text = pattern.sub(placeholder, text)
    return text


def json_differences(expected: Any, actual: Any, path: str = "$") -> list[str]:
    """Where ``actual`` differs from ``expected`` beyond ids and timestamps (empty: none)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        problems = [f"{path}: key {key!r} missing" for key in expected if key not in actual]
        problems += [f"{path}: unexpected key {key!r}" for key in actual if key not in expected]
        for key in expected.keys() & actual.keys():
            if TIME_KEY.search(key) and _number(expected[key]) and _number(actual[key]):
                continue
            problems += json_differences(expected[key], actual[key], f"{path}.{key}")
        return problems
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{path}: {len(expected)} items documented, {len(actual)} printed"]
        return [problem for i, (e, a) in enumerate(zip(expected, actual, strict=True))
                for problem in json_differences(e, a, f"{path}[{i}]")]
    if type(expected) is not type(actual):
        return [f"{path}: documented {type(expected).__name__} {expected!r}, "
                f"printed {type(actual).__name__} {actual!r}"]
    if isinstance(expected, str):
        expected, actual = normalised(expected), normalised(actual)
    return [] if expected == actual else [f"{path}: documented {expected!r}, printed {actual!r}"]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def text_differences(expected: str, actual: str) -> list[str]:
    """A unified diff of the normalised lines (empty: the same)."""
    documented = [line.rstrip() for line in normalised(expected.strip("\n")).splitlines()]
    printed = [line.rstrip() for line in normalised(actual.strip("\n")).splitlines()]
    return list(difflib.unified_diff(documented, printed, "README.md", "printed", lineterm=""))


def differences(step: Step, printed: str) -> list[str]:
    if step.kind == "text":
        return text_differences(step.expected, printed)
    try:
        expected = json.loads(step.expected)
    except ValueError as error:
        return [f"the README's ```json block is not JSON: {error}"]
    try:
        actual = json.loads(printed)
    except ValueError:
        return [f"printed no JSON: {printed!r}"]
    return json_differences(expected, actual)


# --- running the blocks -----------------------------------------------------------------------


def _environment(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "DORMANT_DB")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    (tmp_path / "tmp").mkdir()
    env["TMPDIR"] = str(tmp_path / "tmp")
    return env


def _script(steps: list[Step], port: int) -> str:
    parts = [f"printf '\\n@@block {step.number}@@\\n'\n"
             f"{DOCUMENTED_PORT.sub(lambda m: f'{m.group(1)}:{port}', step.command)}"
             for step in steps]
    return "\n".join(parts) + "\n"


def _split(output: str) -> dict[int, str]:
    pieces = MARKER.split(output)
    return {int(number): text.strip("\n") for number, text in zip(pieces[1::2], pieces[2::2],
                                                                    strict=True)}


def _report(step: Step, printed: str, problems: list[str]) -> str:
    return (f"README quick start, block {step.number}:\n{step.command}\n\n"
            f"what it printed differs from the documented ```{step.kind} block:\n  "
            + "\n  ".join(problems) + f"\n\nprinted:\n{printed}\n")


def test_the_readme_quick_start_prints_what_it_documents(tmp_path: Path) -> None:
    # The quick start's commands use curl, as its readers do (.ci/run installs it if missing).
    assert shutil.which("curl"), "the README's quick start needs curl on PATH"
    steps = quick_start(README.read_text(encoding="utf-8"))
    [server] = [step for step in steps if SERVER.search(step.command)]
    others = [step for step in steps if step is not server]
    assert len(others) >= 3, "the quick start should send, answer and inspect"
    env, workdir = _environment(tmp_path), tmp_path / "work"
    workdir.mkdir()
    database = shlex.quote(str(workdir / "dormant.db"))
    command = SERVER.sub(f"dormant dev --port 0 --db {database}", server.command, count=1)
    with (tmp_path / "server.log").open("w") as log:
        proc = subprocess.Popen(["bash", "-c", command], cwd=workdir, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=log, start_new_session=True)
    try:
        assert proc.stdout is not None
        startup = _first_line(proc.stdout, STARTUP_TIMEOUT)
        ready = READY.match(startup)
        assert ready, (f"{command!r} did not start: {startup!r}\n"
                       f"{(tmp_path / 'server.log').read_text()}")
        problems = differences(server, startup)
        assert not problems, _report(server, startup, problems)

        done = subprocess.run(["bash", "-c", _script(others, int(ready.group(1)))],
                              cwd=workdir, env=env, capture_output=True, text=True, timeout=60)
        printed = _split(done.stdout)
        reports = [_report(step, printed.get(step.number, ""), problems) for step in others
                   if (problems := differences(step, printed.get(step.number, "")))]
        assert not reports, "\n".join(reports) + f"stderr of the blocks:\n{done.stderr}"
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen[str]) -> None:
    """Stop the server's process group (bash and ``dormant dev``, started in a session of
    their own), politely first."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


# --- the comparison itself can fail -----------------------------------------------------------

PAUSED = ('{"sessionId":"session_s1","status":"yielded_tool","output":{"items":[],"text":""},'
          '"yieldedTools":[{"callId":"call_131f57b4f9dc4f1f","name":"ask_guest",'
          '"args":{"q":"Which night?"}}]}')
DONE = ('{"sessionId":"session_s1","status":"completed","output":{"items":[{"type":"text",'
        '"text":"Booked for Friday."}],"text":"Booked for Friday."},"updatedAt":1796122150508}')


def test_json_outputs_match_whatever_the_ids_and_times() -> None:
    printed = DONE.replace("1796122150508", "1796999999999")
    assert json_differences(json.loads(DONE), json.loads(printed)) == []
    again = PAUSED.replace("call_131f57b4f9dc4f1f", "call_0123456789abcdef")
    assert json_differences(json.loads(PAUSED), json.loads(again)) == []


@pytest.mark.parametrize(("drifted", "problem"), [
    (DONE.replace("Booked for Friday.", "Booked for Saturday."),
     "$.output.text: documented 'Booked for Saturday.', printed 'Booked for Friday.'"),
    (PAUSED.replace('"yielded_tool"', '"completed"'),
     "$.status: documented 'completed', printed 'yielded_tool'"),
    (PAUSED.replace('"name":"ask_guest",', ''), "$.yieldedTools[0]: unexpected key 'name'"),
    (PAUSED.replace('"items":[]', '"items":{}'),
     "$.output.items: documented dict {}, printed list []"),
])
def test_a_documented_json_output_that_drifted_fails_naming_where(drifted: str,
                                                                   problem: str) -> None:
    printed = DONE if "Booked" in drifted else PAUSED
    assert problem in json_differences(json.loads(drifted), json.loads(printed))


def test_a_documented_text_output_that_drifted_fails_with_a_diff() -> None:
    documented = ("  10:49:10.557  assistant: Booked for Friday.\n"
                  "  10:49:10.557  ■ run ended (completed)")
    printed = ("  11:02:33.101  assistant: Booked for Friday.\n"
               "  11:02:33.102  ■ run ended (failed)")
    assert text_differences(documented, printed.replace("failed", "completed")) == []
    diff = text_differences(documented, printed)
    assert "-  <time>  ■ run ended (completed)" in diff
    assert "+  <time>  ■ run ended (failed)" in diff


def test_the_readme_states_the_test_command_ci_runs() -> None:
    # .ci/run runs `.venv/bin/pytest -q` "exactly as README.md states it".
    readme = README.read_text(encoding="utf-8")
    assert "```bash\npytest -q\n```" in readme
    assert ".ci/run" not in readme or ".venv/bin/pytest -q" in readme
