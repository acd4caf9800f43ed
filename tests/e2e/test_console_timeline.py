"""A turn's time and money in the console, in headless Chromium against a real ``dormant dev``
serving :mod:`tests.e2e.priced_app` (a model that reports its tokens, with a price): each
turn's timeline (closed, then open: its bars on one time axis, its tokens and cost), the
session's totals in its header (the head's ``usage`` when the server sends it, else the sum of
the turns' timings) and what each turn changed in the state.

The open timeline's screenshot is ``console-timeline.png`` among the run's artifacts: the
README's picture (``docs/images/console-timeline.png``) is a copy of it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Browser, FloatRect, Locator, Page, Route, expect

from .conftest import ROOT, DevServer
from .test_console import (
    ARTIFACTS,
    PNG,
    WAIT,
    assert_accessible,
    browser,
    bubble,
    conversation,
    evidence,
    open_page,
    send,
)

__all__ = ["browser"]  # the module's Chromium, shared with test_console

PRICED = Path(__file__).with_name("priced_app.py")
PICTURE = ROOT / "docs" / "images" / "console-timeline.png"


@contextmanager
def priced_server(tmp_path: Path, **env: str) -> Iterator[DevServer]:
    server = DevServer(tmp_path / "priced.db", PRICED, env=env).start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def priced_page(browser: Browser, tmp_path: Path) -> Iterator[Page]:
    with priced_server(tmp_path) as server:
        yield from open_page(browser, server, bypass_csp=True)


@pytest.fixture
def unpriced_page(browser: Browser, tmp_path: Path) -> Iterator[Page]:
    with priced_server(tmp_path, DORMANT_TEST_UNPRICED="1") as server:
        yield from open_page(browser, server)


def timelines(page: Page) -> Locator:
    return conversation(page).locator("details.turn-timing")


def rows(timeline: Locator) -> Locator:
    return timeline.get_by_role("list", name="What the turn took").locator(":scope > li")


def box(row: Locator) -> FloatRect:
    found = row.locator(".timing-bar").bounding_box()
    assert found, "the bar is not shown"
    return found


def totals(page: Page) -> Locator:
    return page.get_by_label("Tokens and cost")


def test_a_turns_timeline_shows_its_bars_tokens_and_cost(priced_page: Page) -> None:
    page = priced_page
    page.goto("/#/sessions/metered")
    send(page, "buy milk")
    expect(bubble(page, "assistant", 'Noted: "buy milk"')).to_be_visible(timeout=WAIT)

    # One timeline per turn, closed: its time, tokens and cost on one line.
    timeline = timelines(page)
    expect(timeline).to_have_count(1, timeout=WAIT)
    expect(timeline).not_to_have_attribute("open", "")
    summary = timeline.locator("summary")
    expect(summary).to_contain_text("Timeline")
    expect(summary).to_contain_text("2,600 in · 120 out tokens · cost 0.0096")
    expect(rows(timeline).first).to_be_hidden()

    # Open: a bar for each phase, model call and tool, in the order they started, then the commit.
    summary.click()
    expect(timeline).to_have_attribute("open", "")
    listed = rows(timeline)
    expect(listed.locator(".timing-label")).to_have_text([
        "load", "model call 1 metered-1", "write-ahead", "tool note", "model call 2 metered-1",
        "commit"])
    first_call, tool, second_call, commit = (listed.nth(n) for n in (1, 3, 4, 5))
    expect(first_call).to_contain_text("first token after")
    expect(first_call).to_contain_text(
        "1,200 in · 80 out tokens · cost 0.0048 · finished: tool_calls")
    expect(second_call).to_contain_text("1,400 in · 40 out tokens · cost 0.0048 · finished: stop")
    expect(tool).to_contain_text("result")
    expect(commit).to_contain_text("commit follows, from ")
    # ...on one time axis: the tool runs after the first call and before the second; each
    # call's first token is marked on its bar; the commit comes last.
    for call in (first_call, second_call):
        mark = call.locator(".timing-mark").bounding_box()
        bar = box(call)
        assert mark and bar["x"] <= mark["x"] <= bar["x"] + bar["width"] + 1, (mark, bar)
    assert box(first_call)["x"] + box(first_call)["width"] <= box(tool)["x"] + 1
    assert box(tool)["x"] + box(tool)["width"] <= box(second_call)["x"] + 1
    assert box(second_call)["x"] < box(commit)["x"]
    expect(timeline.locator(".timing-total")).to_contain_text(
        "2,600 in · 120 out tokens · cost 0.0096")
    assert_accessible(page, "a turn's timeline, open")
    picture(timeline)

    # The header sums the session's turns; the state panel says what each one changed.
    expect(totals(page)).to_have_text(
        "used 2,720 tokens (2,600 in · 120 out) · cost 0.0096 over 1 timed turn")
    send(page, "buy eggs")
    expect(bubble(page, "assistant", 'Noted: "buy eggs"')).to_be_visible(timeout=WAIT)
    expect(timelines(page)).to_have_count(2, timeout=WAIT)
    expect(totals(page)).to_have_text(
        "used 5,440 tokens (5,200 in · 240 out) · cost 0.0192 over 2 timed turns")
    changes = page.get_by_role("region", name="State").get_by_role(
        "list", name="What each turn changed").locator(":scope > li")
    expect(changes).to_have_count(2)
    expect(changes.nth(0)).to_contain_text("Turn 1")
    expect(changes.nth(0).locator("li")).to_have_text(["set note to buy milk"])
    expect(changes.nth(1)).to_contain_text("Turn 2")
    expect(changes.nth(1).locator("li")).to_have_text(["changed note to buy eggs"])
    evidence(page, "30-turn-timelines")


def picture(timeline: Locator) -> None:
    """The open turn with its timeline, for the README: the conversation's part that shows it."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / "console-timeline.png"
    timeline.scroll_into_view_if_needed()
    timeline.locator("xpath=ancestor::ol[contains(@class, 'conversation')]").screenshot(
        path=str(path))
    data = path.read_bytes()
    assert data[:8] == PNG and 5_000 < len(data) < 200_000, len(data)


def test_the_header_takes_the_sessions_usage_from_the_server_when_it_sends_it(
        priced_page: Page) -> None:
    page = priced_page
    page.goto("/#/sessions/told")
    send(page, "buy milk")
    expect(timelines(page)).to_have_count(1, timeout=WAIT)

    told = {"inputTokens": 50_000, "outputTokens": 7_000, "cachedTokens": 1_000,
            "reasoningTokens": 0, "cost": 1.25, "turns": 9}

    def with_usage(route: Route) -> None:
        answer = route.fetch()
        body = answer.json()
        body["usage"] = told
        route.fulfill(response=answer, body=json.dumps(body))

    page.route(re.compile(r"/sessions/session_told(\?.*)?$"), with_usage)
    page.reload()
    expect(totals(page)).to_have_text(
        "used 57,000 tokens (50,000 in (1,000 cached) · 7,000 out) · cost 1.2500 "
        "over 9 timed turns", timeout=WAIT)


def test_an_unpriced_turn_shows_its_tokens_and_no_cost(unpriced_page: Page) -> None:
    page = unpriced_page
    page.goto("/#/sessions/unpriced")
    send(page, "buy milk")
    timeline = timelines(page)
    expect(timeline).to_have_count(1, timeout=WAIT)
    expect(timeline.locator("summary")).to_contain_text("2,600 in · 120 out tokens · cost —")
    expect(totals(page)).to_have_text(
        "used 2,720 tokens (2,600 in · 120 out) · cost — over 1 timed turn")


def test_the_readme_picture_of_a_timeline_is_small() -> None:
    data = PICTURE.read_bytes()
    assert data[:8] == PNG and len(data) < 200_000, len(data)
    assert f"]({PICTURE.relative_to(ROOT)})" in (ROOT / "README.md").read_text()
