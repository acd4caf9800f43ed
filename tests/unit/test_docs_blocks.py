"""Every Python and shell block of README.md and docs/**/*.md runs, or is marked a fragment on
purpose; where the page shows a block's output, the block prints it. One case per block, its id
the block's ``file:line``.

The rules, as docs/development.md states them for writers:

- A ```python (or ```py) block runs as written, alone, in a fresh ``python`` in an empty
  directory (no AWS or OpenAI credentials, no ``DORMANT_*`` setting), and must exit 0 within
  60 s.
- A block that uses what an earlier block of the same page defined says so on the line right
  above its fence: ``<!-- continues -->`` (the page's previous Python block) or
  ``<!-- continues: NAME -->`` (the block marked ``<!-- name: NAME -->``). It then runs after
  that block's code (and what that one continues), in the same process; the earlier block is
  still a case of its own.
- Its output, where the page shows it, must match what it prints: the ```text (```output,
  ```json) block right below it (nothing but blank lines between), or else comment lines right
  below a ``print(...)`` line (``# completed Refunded.``), which then together are all it
  prints. Ids (``call_…``, ``apr_…``), epoch milliseconds, dates, times, temporary paths and
  ports are placeholders; ``…`` in a documented line stands for any text, a line of ``…`` alone
  for any lines.
- ```console and ```shell-session blocks (``$ command`` lines, each followed by what it
  prints) and ```bash, ```sh, ```shell blocks (the whole block one command, its output the
  ```text block below it, if any) run per page, in page order, in one ``bash`` against one
  ``dormant dev`` the test starts in an empty directory, serving the Bookings sample on its
  demo model, at the port the blocks' ``localhost:8000`` is changed to. A block whose command
  starts ``dormant dev`` is that server: its output is the start-up line. These cases are
  ``slow``.
- ``<!-- fragment: why -->`` on the line right above a fence marks a block that is not run (it
  needs AWS, a key, Docker, a real person, or it is one piece of a larger program); the reason
  is required, and a Python fragment must still compile. Blocks in ``ELSEWHERE``'s sections
  are run, their output compared, by the test it names.
- The blocks of a section in ``STAND_INS`` (a remote service the page says its output came
  from a local stand-in for) run with the environment that stand-in gives (its URL, a dummy
  key).

Run: ``pytest -q tests/unit/test_docs_blocks.py`` (``-m "not slow"`` leaves out the blocks
that need a server: the console blocks and those run against a stand-in).
"""

from __future__ import annotations

import difflib
import itertools
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import pytest

import dormant
from tests._dev import dev_process
from tests._docs_blocks import (
    PYTHON,
    ROOT,
    SHELL,
    Block,
    doc_files,
    matches,
    normalize,
    read_blocks,
)

#: Sections whose blocks another test runs and compares (the section, then that test).
ELSEWHERE = {
    ("README.md", "## Quick start"): "tests/e2e/test_readme_quickstart.py",
    ("README.md", "## Your own agent"): "tests/e2e/test_newcomer.py",
}


@contextmanager
def _realtime() -> Iterator[dict[str, str]]:
    """The suite's Realtime API stand-in, answering as the page shows: a question, then a
    spoken booking."""
    from tests.unit.realtime_fake import FakeRealtime, audio_reply, reply

    fake = FakeRealtime()
    fake.script(reply("Which night would you like?"),
                audio_reply("Booked for Tuesday.", [bytes(4800), bytes(4800)]))
    try:
        yield {"OPENAI_API_KEY": "sk-local-stand-in", "OPENAI_BASE_URL": fake.base_url}
    finally:
        fake.close()


@contextmanager
def _mcp() -> Iterator[dict[str, str]]:
    """The suite's MCP server (``tests/mcp_server.py``), as the page says it ran."""
    from tests.mcp_server import RunningServer

    server = RunningServer().start()
    try:
        yield {"WEATHER_MCP_URL": server.url, "WEATHER_TOKEN": "local"}
    finally:
        server.stop()


@contextmanager
def _bedrock() -> Iterator[dict[str, str]]:
    """The suite's Bedrock stand-in: a reasoning block and a tool call, then the answer."""
    from tests.bedrock_fake import Call, FakeBedrock, converse_stream

    fake = FakeBedrock()
    fake.script(converse_stream(calls=[Call("lookup_stay", {"booking": "B-7"}, "tooluse_1")],
                                reasoning="The guest asks about B-7: look it up.",
                                signature="sig", usage=(345, 20, 128)),
                converse_stream("B-7 is a three-night stay.", usage=(345, 16, 128)))
    try:
        yield {"AWS_ENDPOINT_URL_BEDROCK_RUNTIME": fake.url, "AWS_REGION": "us-east-1",
               "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}
    finally:
        fake.close()


#: Sections whose blocks call a remote service and run against the suite's local stand-in for
#: it (the page says its output came from one): the section, then the environment it gives.
STAND_INS: Mapping[tuple[str, str], Callable[[], AbstractContextManager[dict[str, str]]]] = {
    ("docs/models.md", "## OpenAIRealtimeModel: the Realtime API, text and audio"): _realtime,
    ("docs/models.md", "## Amazon Bedrock"): _bedrock,
    ("docs/models.md", "## MCP tools: a Model Context Protocol server's tools"): _mcp,
}
PYTHON_TIMEOUT = 60
SHELL_TIMEOUT = 120
SPLIT = "@@docs-block@@"
DOCUMENTED_PORT = re.compile(r"\b(localhost|127\.0\.0\.1):8000\b")
HOW_TO_MARK = (
    "Fix the block so that it runs as written, or, if it cannot run on purpose (it needs AWS, a "
    "key, Docker, a person; it is a piece of a larger program), put this line right above its "
    "opening fence:\n    <!-- fragment: <why, in a few words> -->\n"
    "A block that uses names an earlier block of the page defines: <!-- continues --> above it "
    "(after the previous Python block) or <!-- continues: NAME --> (after the block marked "
    "<!-- name: NAME -->). The rules: tests/unit/test_docs_blocks.py, docs/development.md.")

ALL = [block for path in doc_files() for block in read_blocks(path)]
CHECKED = [block for block in ALL if block.lang in PYTHON | SHELL]


def _page(block: Block) -> list[Block]:
    return [b for b in ALL if b.path == block.path]


def _elsewhere(block: Block) -> str | None:
    return ELSEWHERE.get((block.path, block.section))


def _shell_runs(block: Block) -> bool:
    return (block.lang in SHELL and block.marker("fragment") is None
            and _elsewhere(block) is None)


def _param(block: Block) -> object:
    starts_a_server = _shell_runs(block) or (
        block.marker("fragment") is None and (block.path, block.section) in STAND_INS)
    marks = [pytest.mark.slow] if starts_a_server else []
    return pytest.param(block, id=block.id, marks=marks)


# --- Python blocks ----------------------------------------------------------------------------


def chain(block: Block) -> list[Block]:
    """The blocks that run for ``block``: what it continues (recursively), then itself."""
    seen = [block]
    while (marker := seen[0].marker("continues")) is not None:
        earlier = [b for b in _page(seen[0]) if b.line < seen[0].line and b.lang in PYTHON]
        if marker.value:
            named = [b for b in earlier if (m := b.marker("name")) and m.value == marker.value]
            assert named, (f"{block.id}: <!-- continues: {marker.value} --> (line {marker.line}) "
                           f"names no earlier Python block of the page marked "
                           f"<!-- name: {marker.value} -->")
            target = named[-1]
        else:
            assert earlier, f"{block.id}: <!-- continues --> but no Python block above it"
            target = earlier[-1]
        assert target.marker("fragment") is None, (
            f"{block.id} continues {target.id}, which is marked a fragment: it does not run")
        seen.insert(0, target)
    return seen


def commented_output(code: str) -> str | None:
    """The comment lines right below ``print(...)`` lines, as the output they document."""
    lines = code.splitlines()
    shown = [line.strip()[2:] for above, line in itertools.pairwise(lines)
             if above.lstrip().startswith("print(") and line.lstrip().startswith("# ")]
    return "\n".join(shown) if shown else None


def _env() -> dict[str, str]:
    """The environment a reader's shell would have: no credentials, no settings of dormant's,
    the dormant under test importable."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "OPENAI_", "DORMANT_")) and k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(Path(dormant.__file__).resolve().parents[1])
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def run_python(block: Block, workdir: Path) -> str:
    """Run ``block`` (after what it continues) as a script; what its own part printed."""
    parts = chain(block)
    script = f'\nprint("\\n{SPLIT}")\n'.join(part.code for part in parts)
    (workdir / "block.py").write_text(script, encoding="utf-8")
    where = " after " + ", ".join(p.id for p in parts[:-1]) if len(parts) > 1 else ""
    stand_in = STAND_INS.get((block.path, block.section))
    try:
        with (stand_in() if stand_in else nullcontext({})) as service:
            done = subprocess.run([sys.executable, "block.py"], cwd=workdir,
                                  env=_env() | service, capture_output=True, text=True,
                                  timeout=PYTHON_TIMEOUT)
    except subprocess.TimeoutExpired as timeout:
        pytest.fail(f"{block.id}: the ```{block.lang} block{where} did not exit within "
                    f"{PYTHON_TIMEOUT} s (something it starts keeps the process alive?); "
                    f"it printed:\n{_text(timeout.stdout)}{_text(timeout.stderr)}\n{HOW_TO_MARK}")
    if done.returncode != 0:
        pytest.fail(f"{block.id}: the ```{block.lang} block{where} failed (exit "
                    f"{done.returncode}) when run as written:\n{done.stderr[-3000:]}\n"
                    f"{HOW_TO_MARK}")
    return done.stdout.split(f"\n{SPLIT}\n")[-1]


def _text(data: bytes | str | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def check_output(block: Block, documented: str, printed: str, what: str) -> None:
    if matches(documented, printed):
        return
    diff = "\n".join(difflib.unified_diff(normalize(documented).splitlines(),
                                          normalize(printed).splitlines(),
                                          "documented", "printed", lineterm=""))
    pytest.fail(f"{block.id}: {what} is not what the page shows (ids, times and paths are "
                f"placeholders, `…` any text):\n{diff}\n"
                f"Update the page's output to what the block prints, or the block.")


# --- shell blocks -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    block: Block
    text: str
    documented: str | None  # None: the page shows no output for it


def commands(block: Block) -> list[Command]:
    """A ```console block's ``$`` commands (with ``\\`` continuations) and what follows each;
    any other shell block: one command, its output the block below it."""
    if block.lang not in ("console", "shell-session"):
        return [Command(block, block.code, block.output)]
    found: list[Command] = []
    lines = block.code.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            i += 1
            continue
        text = [lines[i][2:]]
        while text[-1].endswith("\\") and i + 1 < len(lines):
            i += 1
            text.append(lines[i])
        i += 1
        shown = []
        while i < len(lines) and not lines[i].startswith("$ "):
            shown.append(lines[i])
            i += 1
        found.append(Command(block, "\n".join(text), "\n".join(shown)))
    assert found, f"{block.id}: a ```console block with no `$ ` command line"
    return found


def _starts_server(command: Command) -> bool:
    return re.search(r"(^|&&|;)\s*dormant dev\s*$", command.text) is not None


class ShellSessions:
    """Per page, its shell blocks run once (on the first case that asks), each command's output
    kept for its block's case."""

    def __init__(self, tmp: pytest.TempPathFactory) -> None:
        self._tmp = tmp
        self._printed: dict[str, dict[int, str]] = {}

    def printed(self, block: Block) -> list[tuple[Command, str]]:
        if block.path not in self._printed:
            self._printed[block.path] = self._run(block.path)
        mine = [c for c in self._all(block.path) if c.block == block]
        outputs = self._printed[block.path]
        first = self._all(block.path).index(mine[0])
        return [(c, outputs.get(first + n, "")) for n, c in enumerate(mine)]

    def _all(self, path: str) -> list[Command]:
        return [c for b in ALL if b.path == path and _shell_runs(b) for c in commands(b)]

    def _run(self, path: str) -> dict[int, str]:
        workdir = self._tmp.mktemp("shell")
        env = _env() | {"TMPDIR": str(workdir)}
        dormant_dev = [str(Path(sys.executable).parent / "dormant"), "dev", "--port", "0",
                       "--db", str(workdir / "dormant.db")]
        with dev_process(dormant_dev, cwd=workdir, env=env, log=workdir / "server.log") as (
                _, startup, url):
            host = url.removeprefix("http://").rstrip("/")
            script, outputs = ["cd " + str(workdir)], {}
            for n, command in enumerate(self._all(path)):
                if _starts_server(command):
                    outputs[n] = startup
                    continue
                script += [f"printf '\\n{SPLIT}{n}\\n'",
                           DOCUMENTED_PORT.sub(host, command.text)]
            done = subprocess.run(["bash", "-c", "\n".join(script)], cwd=workdir, env=env,
                                  capture_output=True, text=True, timeout=SHELL_TIMEOUT)
        pieces = re.split(rf"\n{SPLIT}(\d+)\n", "\n" + done.stdout)
        outputs |= {int(n): text for n, text in zip(pieces[1::2], pieces[2::2], strict=True)}
        return outputs


@pytest.fixture(scope="session")
def shell_sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ShellSessions]:
    yield ShellSessions(tmp_path_factory)


# --- the cases --------------------------------------------------------------------------------


@pytest.mark.parametrize("block", [_param(b) for b in CHECKED])
def test_block_runs_or_is_marked(block: Block, tmp_path: Path, request: pytest.FixtureRequest,
                                 ) -> None:
    assert not block.errors, f"{block.id}: " + "; ".join(block.errors)
    if block.marker("fragment") is not None:
        if block.lang in PYTHON:  # a fragment is a piece of Python still
            compile(block.code, block.id, "exec")
        return
    if (test := _elsewhere(block)) is not None:
        assert block.section.removeprefix("## ") in (ROOT / test).read_text(encoding="utf-8"), (
            f"{block.id}: {test} should run the blocks of {block.section!r}, but does not name "
            f"that section")
        return
    if block.lang in PYTHON:
        printed = run_python(block, tmp_path)
        if block.output is not None:
            check_output(block, block.output, printed, "what the block prints")
        elif (shown := commented_output(block.code)) is not None:
            check_output(block, shown, printed, "what the block prints")
        return
    sessions: ShellSessions = request.getfixturevalue("shell_sessions")
    for command, printed in sessions.printed(block):
        if command.documented is not None:
            check_output(block, command.documented, printed,
                         f"what `{command.text.splitlines()[0]}` prints")


def test_every_marker_is_above_a_block_it_applies_to() -> None:
    """A marker above a block of another language (```text, ```json) is a mistake."""
    wrong = [f"{b.id} (```{b.lang or 'plain'})" for b in ALL
             if b.markers and b.lang not in PYTHON | SHELL]
    assert not wrong, f"markers above blocks that are not run: {wrong}"


def test_the_collector_finds_the_blocks() -> None:
    """The reader sees every page's blocks (a parser that found none would pass everything)."""
    assert {b.path for b in CHECKED} >= {"README.md", "docs/api.md", "docs/models.md"}
    assert sum(b.lang in PYTHON for b in CHECKED) >= 30


# --- the collector's own rules ----------------------------------------------------------------


def _page_blocks(tmp_path: Path, text: str) -> list[Block]:
    (tmp_path / "docs").mkdir(exist_ok=True)
    page = tmp_path / "docs" / "page.md"
    page.write_text(text, encoding="utf-8")
    return read_blocks(page, tmp_path)


def test_a_fragment_marker_needs_its_reason_and_a_marker_must_be_known(tmp_path: Path) -> None:
    blocks = _page_blocks(tmp_path, "<!-- fragment: -->\n```python\nx\n```\n\n"
                                    "<!-- fragmnet: typo -->\n```bash\nls\n```\n\n"
                                    "<!-- fragment: needs AWS -->\n```bash\naws s3 ls\n```\n")
    assert [len(b.errors) for b in blocks] == [1, 1, 0]
    assert "needs why it cannot run" in blocks[0].errors[0]
    assert "unknown marker" in blocks[1].errors[0]


def test_a_block_output_is_the_text_block_right_below_it(tmp_path: Path) -> None:
    code, shown, later = _page_blocks(tmp_path, "```python\nprint(1)\n```\n\n```text\n1\n```\n\n"
                                                "Prose.\n\n```python\nprint(2)\n```\n")
    assert code.output == "1" and shown.lang == "text" and later.output is None


def test_documented_output_matches_with_ids_times_and_ellipses_as_placeholders() -> None:
    assert matches('{"callId":"call_9f179a10da0667d6","at":1796169718319}',
                   '{"callId":"call_0123456789abcdef","at":1796534444917}\n')
    assert matches("data: a\n\n…\n\ndata: end", "data: a\n\ndata: b\n\ndata: c\n\ndata: end")
    assert matches("assistant: I'm the demo…", "assistant: I'm the demo concierge")
    assert not matches("version 4", "version 6")
    assert not matches("", "something printed")


def test_an_unmarked_block_that_fails_says_where_and_how_to_mark_it(tmp_path: Path) -> None:
    [block] = _page_blocks(tmp_path, "```python\nundefined_name\n```\n")
    with pytest.raises(pytest.fail.Exception) as failed:
        run_python(block, tmp_path)
    assert "docs/page.md:1" in str(failed.value) and "NameError" in str(failed.value)
    assert "<!-- fragment: <why, in a few words> -->" in str(failed.value)


def test_a_block_that_never_exits_fails_instead_of_hanging(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "PYTHON_TIMEOUT", 1)
    [block] = _page_blocks(tmp_path, "```python\nimport time\ntime.sleep(60)\n```\n")
    with pytest.raises(pytest.fail.Exception, match="did not exit within 1 s"):
        run_python(block, tmp_path)
