"""The code blocks of README.md and docs/**/*.md, read for ``tests/unit/test_docs_blocks.py``:
each fenced block's language, code, the markers above it and the output the page shows for it,
and how to compare that output with what running the block prints.

Markers are HTML comments on the lines right above a fence (invisible on GitHub and on the
site): ``<!-- fragment: why -->``, ``<!-- name: NAME -->``, ``<!-- continues -->`` and
``<!-- continues: NAME -->``. The test module's docstring says what each means.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The languages whose blocks must run or be marked.
PYTHON = frozenset({"python", "py"})
SHELL = frozenset({"console", "bash", "sh", "shell", "shell-session"})
#: The languages of a block that shows the output of the block above it.
OUTPUT = frozenset({"text", "output", "json"})

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
_MARKER = re.compile(r"^\s*<!--\s*(?P<kind>[\w-]+)\s*(?::\s*(?P<value>.*?))?\s*-->\s*$")
KINDS = ("fragment", "name", "continues")

#: Placeholders for what differs from run to run: ids, timestamps, dates, durations,
#: temporary paths.
VOLATILE = [
    (re.compile(r"\b(call|inv|evt|apr|inp|msg|retry)_[0-9a-f]{8,}(_[0-9a-z]+)*"), r"\1_<id>"),
    (re.compile(r"\b1[78]\d{11}\b"), "<ms>"),  # epoch milliseconds, 2023 to 2033
    (re.compile(r"\b\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\b"), "<date> UTC"),
    (re.compile(r"\b\d\d:\d\d:\d\d\.\d{3}\b"), "<time>"),
    (re.compile(r"· \d+ ms\b"), "· <n> ms"),  # a turn's time, as the inspector shows it
    (re.compile(r"/tmp/[\w./-]*"), "<tmp>"),
    (re.compile(r"\b(localhost|127\.0\.0\.1):\d+\b"), r"\1:<port>"),
]


@dataclass(frozen=True)
class Marker:
    kind: str
    value: str | None
    line: int


@dataclass(frozen=True)
class Block:
    """One fenced block: ``path`` relative to the checkout, ``line`` its opening fence's."""

    path: str
    line: int
    lang: str
    code: str
    markers: tuple[Marker, ...] = ()
    #: The text of the ```text/```output/```json block right below it (blank lines between).
    output: str | None = None
    #: The ``## `` heading the block is under ("" before the first).
    section: str = ""
    errors: tuple[str, ...] = field(default=())

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"

    def marker(self, kind: str) -> Marker | None:
        return next((m for m in self.markers if m.kind == kind), None)


def doc_files(root: Path = ROOT) -> list[Path]:
    """README.md and every page under docs/, in a stable order."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def read_blocks(path: Path, root: Path = ROOT) -> list[Block]:
    """Every fenced block of ``path``, of any language, in page order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    rel = path.relative_to(root).as_posix()
    raw: list[tuple[int, int, str, str]] = []  # (fence index, closing index, lang, section)
    section = ""
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if lines[i].startswith("## "):
            section = lines[i]
        if fence is None:
            i += 1
            continue
        close = re.compile(r"^ {0,3}" + re.escape(fence["fence"][0]) + "{"
                           + str(len(fence["fence"])) + r",}\s*$")
        end = next((j for j in range(i + 1, len(lines)) if close.match(lines[j])), len(lines))
        raw.append((i, end, fence["lang"].lower(), section))
        i = end + 1
    blocks = []
    for n, (start, end, lang, sec) in enumerate(raw):
        markers, errors = _markers(lines, start)
        output = None
        if n + 1 < len(raw) and raw[n + 1][2] in OUTPUT and not _markers(lines, raw[n + 1][0])[0]:
            nxt = raw[n + 1][0]
            if all(not line.strip() for line in lines[end + 1:nxt]):
                output = "\n".join(lines[nxt + 1:raw[n + 1][1]])
        indent = len(_FENCE.match(lines[start])["indent"])  # type: ignore[index]
        code = "\n".join(line[indent:] if line[:indent].isspace() else line
                         for line in lines[start + 1:end])
        blocks.append(Block(rel, start + 1, lang, code + "\n", tuple(markers), output, sec,
                            tuple(errors)))
    return blocks


def _markers(lines: list[str], fence: int) -> tuple[list[Marker], list[str]]:
    """The marker comments on the lines right above ``fence`` (nearest last), and what is wrong
    with them."""
    markers: list[Marker] = []
    errors: list[str] = []
    i = fence - 1
    while i >= 0:
        found = _MARKER.match(lines[i])
        if found is None:
            break
        kind, value = found["kind"], found["value"] or None
        if kind not in KINDS:
            errors.append(f"line {i + 1}: unknown marker <!-- {kind} -->; "
                          f"the markers are {', '.join(KINDS)}")
        elif kind in ("fragment", "name") and not value:
            what = "why it cannot run, in a few words" if kind == "fragment" else "a name"
            errors.append(f"line {i + 1}: <!-- {kind}: ... --> needs {what}")
        markers.insert(0, Marker(kind, value, i + 1))
        i -= 1
    return markers, errors


def normalize(text: str) -> str:
    """``text`` with what differs from run to run replaced by placeholders, trailing blanks off."""
    for pattern, placeholder in VOLATILE:
        text = pattern.sub(placeholder, text)
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def matches(documented: str, actual: str) -> bool:
    """Whether ``actual`` is what ``documented`` shows: once both are normalized, equal line for
    line, where ``…`` in a line stands for any text and a line of ``…`` alone for any lines."""
    if not normalize(documented):
        return not normalize(actual)
    pattern = []
    for line in normalize(documented).splitlines():
        if line.strip() == "…":
            pattern.append(r"(?:[^\n]*\n)*?")
        else:
            pattern.append(r"[^\n]*?".join(re.escape(part) for part in line.split("…"))
                           + r"\n")
    return re.fullmatch("".join(pattern), normalize(actual) + "\n") is not None
