"""The console after exactly the README's install: a fresh venv gets this repository's wheel
with the extras the README's first ``pip install`` names, ``dormant dev`` starts from an empty
directory (nothing of this checkout on its path), and Chromium sends, answers and approves.

An install that lacks what ``POST /agui`` needs would start with a ``dormant dev:`` line
saying so and a page that says so; neither may appear, and each action must stream through
``POST /agui``.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from tests._timing import scaled

from .conftest import ROOT, _first_line
from .test_console import WAIT, bubble, open_page, send
from .test_console import browser as browser  # the module's browser fixture
from .test_newcomer import _user_env, wheel_venv

pytestmark = pytest.mark.slow

_READY = re.compile(r"^dormant dev: serving \S+ on (http://\S+) ")


def _readme_install() -> list[str]:
    """The README's first ``pip install "dormant[...]"`` command, as its words."""
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.startswith('pip install "dormant['):
            return shlex.split(line, comments=True)
    raise AssertionError("the README installs no dormant")


@dataclass
class Served:
    url: str
    process: subprocess.Popen[str]
    stderr: Path


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    install = _readme_install()
    assert [w for w in install if w.startswith("dormant[")] == ["dormant[aws,openai]"], install
    venv = wheel_venv(tmp_path_factory, install)
    env = _user_env(venv)

    work = tmp_path_factory.mktemp("work")
    stderr = work / "dev.log"
    with stderr.open("w") as log:
        process = subprocess.Popen(
            [str(venv / "bin" / "dormant"), "dev", "--port", "0", "--quiet"], cwd=work,
            env=env, text=True, stdout=subprocess.PIPE, stderr=log)
    try:
        assert process.stdout is not None
        line = _first_line(process.stdout, scaled(60))
        match = _READY.match(line)
        assert match, f"dormant dev did not start: {line!r}\n{stderr.read_text()}"
        yield Served(match.group(1), process, stderr)
    finally:
        process.kill()
        process.wait(30)


def test_the_console_sends_answers_and_approves_after_the_readmes_install(
        browser: Browser, installed: Served) -> None:
    assert "dormant dev:" not in installed.stderr.read_text()  # nothing said to be missing
    streamed: list[int] = []
    for page in open_page(browser, installed):  # type: ignore[arg-type]
        page.on("response", lambda response: streamed.append(response.status)
                if response.url.endswith("/agui") else None)
        page.goto("/#/sessions/installed")
        expect(page.get_by_role("heading", level=1)).to_have_text("installed")
        assert page.locator('meta[name="dormant-missing"]').count() == 0
        # ...and says what the page may count on: controls over POST /agui, never probed.
        assert page.locator('meta[name="dormant-capabilities"]').get_attribute("content") \
            == "agui-controls"

        send(page, "book me in")
        form = page.get_by_role("article").filter(has_text="ask_guest asks")
        form.get_by_label("Answer").fill("Friday")
        form.get_by_role("button", name="Send answer").click()
        expect(bubble(page, "assistant", "Booked for Friday.")).to_be_visible(timeout=WAIT)

        send(page, "upgrade my room BK-7 to a suite")
        card = page.get_by_role("article").filter(has_text="upgrade_room wants approval")
        card.get_by_role("button", name="Approve").click()
        expect(bubble(page, "assistant", "Upgraded BK-7 to a suite.")).to_be_visible(
            timeout=WAIT)
        expect(page.get_by_role("alert")).to_have_count(0)
        # The message, the answer, the message and the decision: four streamed runs.
        assert streamed.count(200) >= 4 and all(s == 200 for s in streamed), streamed
        # The list names the agent and says the session is idle, its turn over.
        page.get_by_role("link", name="All sessions").click()
        row = page.get_by_role("table").locator("tbody tr").filter(has_text="installed")
        expect(row.locator("td.agent")).to_have_text("concierge", timeout=WAIT)
        expect(row.locator(".badge")).to_have_text("idle")
