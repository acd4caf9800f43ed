""""Replay against the current agent" in headless Chromium against a real ``dormant dev``: a
session recorded while it served :mod:`tests.e2e.replay_app` (upgrade to a suite, asking which
night), then the server restarted on the same database serving the changed agent (a deluxe
room, no question), and the session's page replays it: the side-by-side view marks the changed
upgrade and says the guest's answer was not replayed, and the recorded session is unchanged.

The view's screenshot is ``console-replay.png`` among the run's artifacts: the docs' picture
(``docs/images/console-replay.png``) is a copy of it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from .conftest import ROOT, DevServer
from .test_console import ARTIFACTS, PNG, WAIT, api, assert_accessible, browser, open_page

__all__ = ["browser"]  # the module's Chromium, shared with test_console

APP = Path(__file__).with_name("replay_app.py")
CHANGED = "DORMANT_TEST_REPLAY_CHANGED"
PICTURE = ROOT / "docs" / "images" / "console-replay.png"


@pytest.fixture
def replay_server(tmp_path: Path) -> Iterator[DevServer]:
    server = DevServer(tmp_path / "replay.db", APP, env={CHANGED: ""}).start()
    try:
        yield server
    finally:
        server.kill()


def record(server: DevServer, session: str) -> list[dict[str, Any]]:
    """Upgrade BK-1 (approved), then change a night (the guest says which): the ledger."""
    def turn(body: dict[str, Any]) -> dict[str, Any]:
        answer = api(server, "POST", "/turns", {"sessionId": session, **body})
        assert answer.status_code == 200, answer.text
        reply: dict[str, Any] = answer.json()
        return reply

    approval = turn({"message": "upgrade BK-1 to a suite"})["pendingApprovals"][0]
    turn({"approvals": [{"approvalId": approval["approvalId"], "approved": True}]})
    call = turn({"message": "and change a night"})["yieldedTools"][0]
    assert turn({"tools": [{"callId": call["callId"], "input": {"answer": "the 2nd"}}]})[
        "status"] == "completed"
    return ledger(server, session)


def ledger(server: DevServer, session: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = api(server, "GET", f"/sessions/{session}/events").json()[
        "events"]
    return events


def row(view: Locator, number: int) -> Locator:
    return view.locator("tbody tr").nth(number - 1)


def test_a_session_replayed_against_the_changed_agent_shows_what_changed(
        browser: Browser, replay_server: DevServer) -> None:
    recorded = record(replay_server, "stay")
    replay_server.env[CHANGED] = "1"
    replay_server.restart()  # the same database, the changed agent
    assert "concierge model (changed)" in replay_server.startup_line

    for page in open_page(browser, replay_server, bypass_csp=True):
        check_the_replay(page)
    assert ledger(replay_server, "stay") == recorded  # the replay wrote nothing here


def check_the_replay(page: Page) -> None:
    page.goto("/#/sessions/stay")
    button = page.get_by_role("button", name="Replay against the current agent")
    expect(button).to_be_enabled(timeout=WAIT)
    button.click()

    view = page.get_by_role("region", name="Replay against the current agent")
    expect(view).to_be_visible(timeout=WAIT)
    expect(view.get_by_role("heading", name="Replay against the current agent")).to_be_focused()
    expect(view.locator(".replay-summary")).to_have_text(
        "3 of 4 turns changed · tool calls changed in 3 · new approvals: none · text score 0.50")
    expect(view.get_by_role("columnheader")).to_have_text(
        ["Input", "Recorded", "Replayed (current agent)"])
    expect(view.locator("tbody tr")).to_have_count(4)

    # The upgrade: the same tool with another room, marked, its tools highlighted.
    upgrade = row(view, 1)
    expect(upgrade).to_have_class("replay-turn changed")
    expect(upgrade.get_by_role("rowheader")).to_contain_text("message 'upgrade BK-1 to a suite'")
    expect(upgrade.locator(".badge")).to_have_text("changed")
    recorded_cell, replayed_cell = upgrade.locator("td").nth(0), upgrade.locator("td").nth(1)
    expect(recorded_cell.locator(".replay-tools li")).to_have_text(
        ['upgrade_room({"ref": "BK-1", "room": "suite"})'])
    expect(replayed_cell.locator(".replay-tools li")).to_have_text(
        ['upgrade_room({"ref": "BK-1", "room": "deluxe"})'])
    expect(replayed_cell.locator(".replay-field.differs dt")).to_have_text(
        ["Tools (differs)"])
    expect(replayed_cell.locator(".replay-field").nth(1)).to_contain_text("upgrade_room")

    # The approval is the same turn both ways.
    approval = row(view, 2)
    expect(approval).to_have_class("replay-turn")
    expect(approval.locator(".badge")).to_have_text("same")
    expect(approval.locator(".differs")).to_have_count(0)

    # The new agent changes the night without asking: the guest's answer was not replayed.
    night = row(view, 3)
    expect(night.locator("td").nth(0).locator(".replay-field").nth(2)).to_contain_text(
        "ask_guest")
    expect(night.locator("td").nth(1)).to_contain_text("I moved your stay by one night.")
    expect(night.locator("td").nth(1).locator(".replay-field.differs dt")).to_have_text(
        ["Tools (differs)", "Questions asked (differs)", "Status (differs)", "Text (differs)"])
    answer = row(view, 4)
    expect(answer.get_by_role("rowheader")).to_contain_text("answer ask_guest")
    expect(answer.locator("td").nth(1)).to_have_text(
        "not replayed: the replay never made the recording's call 1 of ask_guest")

    assert_accessible(page, "the replay view")
    picture(view)

    # Close: back to the session, its conversation as recorded.
    view.get_by_role("button", name="Close replay").click()
    expect(view).to_be_hidden()
    expect(button).to_be_focused()
    expect(page.get_by_role("heading", name="Conversation")).to_be_visible()


def picture(view: Locator) -> None:
    """The replay view, for the docs."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / "console-replay.png"
    view.screenshot(path=str(path))
    data = path.read_bytes()
    assert data[:8] == PNG and 5_000 < len(data) < 200_000, len(data)


def test_the_docs_picture_of_a_replay_is_small() -> None:
    data = PICTURE.read_bytes()
    assert data[:8] == PNG and len(data) < 200_000, len(data)
    assert f"]({PICTURE.relative_to(ROOT).as_posix().removeprefix('docs/')})" in (
        ROOT / "docs" / "dev-server.md").read_text()
