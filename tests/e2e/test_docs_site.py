"""The documentation site, built as CI builds it: ``mkdocs build --strict`` over mkdocs.yml.

A broken link between pages, an anchor that does not exist or a docstring griffe cannot read
fails the build. What is built must be a site a reader can use: the API reference of the
package face with the real docstrings in it, the search index, and every name a documented
module exports (its ``__all__``) on some reference page, so a new public name or module cannot
be left out of the reference unnoticed.
"""

from __future__ import annotations

import html
import importlib
import inspect
import json
import os
import pkgutil
import re
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

import dormant

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"
BUILD_TIMEOUT = 300
#: Top-level modules with no reference page, each for a reason docs/reference/index.md gives.
NOT_REFERENCED = frozenset({"cli", "scaffold", "samples", "scheduling"})
#: ``::: dormant.x`` and the options under it, up to the next directive or heading.
_DIRECTIVE = re.compile(r"^::: (\S+)\n((?:(?!:::|#).*\n?)*)", re.MULTILINE)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    started = time.monotonic()
    built = subprocess.run(
        # Not --quiet: it hides the warnings from the count --strict fails on (MkDocs 1.6).
        [sys.executable, "-m", "mkdocs", "build", "--strict",
         "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=BUILD_TIMEOUT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{built.stdout}{built.stderr}"
    print(f"mkdocs build --strict: {time.monotonic() - started:.1f} s")
    return out


def _letters(text: str) -> str:
    """Text without whitespace: a docstring and its rendering compare equal whatever the tags."""
    return "".join(text.split())


def _text(page: Path) -> str:
    """A built page's text, tags dropped."""
    return _letters(html.unescape(re.sub(r"<[^>]+>", " ", page.read_text())))


def _first_line(obj: object) -> str:
    """The first line of a docstring as the reference renders it: literals and roles as text."""
    line = (inspect.getdoc(obj) or "").split("\n\n")[0]
    line = re.sub(r":\w+:`~?([^`]+)`", lambda m: m[1].rsplit(".", 1)[-1], line)
    return _letters(line.replace("``", ""))


def _inventory(site: Path) -> set[str]:
    """The names the site's objects.inv lists (every object the reference rendered)."""
    *header, body = site.joinpath("objects.inv").read_bytes().split(b"\n", 4)
    assert header[0] == b"# Sphinx inventory version 2"
    return {line.split(" ", 1)[0] for line in zlib.decompress(body).decode().splitlines()}


def _directives() -> dict[str, str]:
    """Each ``::: module`` of the reference pages, with the options written under it."""
    found: dict[str, str] = {}
    for page in sorted(REFERENCE.glob("*.md")):
        for match in _DIRECTIVE.finditer(page.read_text()):
            found[match[1]] = match[2]
    return found


@pytest.mark.parametrize("name", ["App", "Agent"])
def test_the_package_face_s_reference_has_each_class_with_its_docstring(
        site: Path, name: str) -> None:
    page = site / "reference" / "dormant" / "index.html"
    assert f'id="dormant.{name}"' in page.read_text()
    first = _first_line(getattr(dormant, name))
    assert first, f"dormant.{name} has no docstring"
    assert first in _text(page)


def test_the_site_has_a_search_index_over_the_guides_and_the_reference(site: Path) -> None:
    index = json.loads(site.joinpath("search", "search_index.json").read_text())
    locations = {doc["location"].split("#")[0] for doc in index["docs"]}
    assert {"", "dev-server/", "api/", "reference/dormant/"} <= locations
    assert any("dormant.Agent" in doc["location"] for doc in index["docs"])


def test_every_public_module_has_a_reference_page() -> None:
    public = {info.name for info in pkgutil.iter_modules(dormant.__path__)
              if not info.name.startswith("_")}
    documented = {path.split(".")[1] for path in _directives() if path.count(".") >= 1}
    assert public - NOT_REFERENCED - documented == set()
    assert public >= NOT_REFERENCED, "a module named in NOT_REFERENCED no longer exists"


def test_every_name_a_documented_module_exports_is_in_the_reference(site: Path) -> None:
    inventory = _inventory(site)
    missing = []
    for path, options in _directives().items():
        if "members: false" in options or "._" in path:
            continue
        module = importlib.import_module(path)
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            where = {f"{path}.{name}", f"{getattr(obj, '__module__', '')}."
                     f"{getattr(obj, '__qualname__', '')}"}
            if name in dormant.__all__ and getattr(dormant, name) is obj:
                where.add(f"dormant.{name}")
            if not where & inventory:
                missing.append(f"{path}.{name}")
    assert missing == [], "exported but on no reference page (docs/reference/*.md)"
