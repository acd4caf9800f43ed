"""The browser console ``dormant dev`` serves at ``/``, driven in headless Chromium (Debian's
``/usr/bin/chromium``) with Playwright for Python, against a real ``dormant dev`` process.

Screenshots of each page land in ``$DORMANT_TEST_ARTIFACTS`` (default ``test-artifacts/console``
at the repository's root), kept as the run's artifacts. The main views are checked with
axe-core (``tests/e2e/js/node_modules/axe-core``), injected into the page: no serious or
critical violation, colour contrast included.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Locator, Page, expect, sync_playwright

from .conftest import JS, ROOT, DevServer
from .flaky_app import SECRET

FLAKY = Path(__file__).with_name("flaky_app.py")
AXE = JS / "node_modules" / "axe-core" / "axe.min.js"
PNG = b"\x89PNG\r\n\x1a\n"

CHROMIUM = os.environ.get("DORMANT_TEST_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(os.environ.get("DORMANT_TEST_ARTIFACTS", ROOT / "test-artifacts" / "console"))
#: Chromium as the machine's closed network wants it: no background calls home.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
WAIT = 15_000  # ms: how long an expectation may take before it fails


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert Path(CHROMIUM).is_file(), (
        f"no Chromium at {CHROMIUM}: apt-get install chromium (.ci/run does), or set "
        "DORMANT_TEST_CHROMIUM")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def server(dev_server: DevServer) -> DevServer:
    """The Bookings sample on its demo model (conftest's ``dev_server``)."""
    return dev_server


@pytest.fixture
def flaky_server(tmp_path: Path) -> Iterator[DevServer]:
    dev = DevServer(tmp_path / "flaky.db", FLAKY).start()
    try:
        yield dev
    finally:
        dev.kill()


@pytest.fixture
def hopeless_server(tmp_path: Path) -> Iterator[DevServer]:
    """The flaky app failing in a way a retry cannot get past (``context_overflow``)."""
    dev = DevServer(tmp_path / "hopeless.db", FLAKY, env={
        "DORMANT_TEST_FAILURE_CODE": "context_overflow",
        "DORMANT_TEST_FAILURE_RETRYABLE": "false"}).start()
    try:
        yield dev
    finally:
        dev.kill()


def open_page(browser: Browser, server: DevServer, *, bypass_csp: bool = False
              ) -> Iterator[Page]:
    """A page on ``server``; ``bypass_csp`` lets a test inject a script of its own (axe-core),
    which the console's Content-Security-Policy refuses otherwise."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=server.url,
                                  bypass_csp=bypass_csp)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield opened
    finally:
        context.close()
    assert not errors, f"the page threw: {errors}"


@pytest.fixture
def page(browser: Browser, server: DevServer) -> Iterator[Page]:
    yield from open_page(browser, server)


@pytest.fixture
def flaky_page(browser: Browser, flaky_server: DevServer) -> Iterator[Page]:
    yield from open_page(browser, flaky_server, bypass_csp=True)


@pytest.fixture
def checked_page(browser: Browser, server: DevServer) -> Iterator[Page]:
    """A page axe-core can be injected into."""
    yield from open_page(browser, server, bypass_csp=True)


def shot(page: Page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def evidence(page: Page, name: str) -> Path:
    """A screenshot kept as evidence of what a test saw: it must be a PNG with something in
    it (a blank page compresses to a few hundred bytes)."""
    path = shot(page, name)
    data = path.read_bytes()
    assert data[:8] == PNG and len(data) > 5_000, (path, len(data))
    return path


def axe_violations(page: Page) -> list[dict[str, Any]]:
    """axe-core's violations on the page as it is now: ``{id, impact, help, nodes}``."""
    assert AXE.is_file(), \
        "run `npm ci --prefix tests/e2e/js` first (scripts/setup-dev does): it brings axe-core"
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.add_script_tag(path=str(AXE))
    found: list[dict[str, Any]] = page.evaluate("""async () => {
      const result = await axe.run(document, {resultTypes: ['violations']});
      return result.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
        nodes: v.nodes.slice(0, 5).map(n => `${n.target.join(' ')}: ${n.failureSummary}`)}));
    }""")
    return found


def assert_accessible(page: Page, where: str) -> None:
    """No serious or critical axe-core violation (contrast, names, roles...) on the page."""
    serious = [v for v in axe_violations(page) if v["impact"] in ("serious", "critical")]
    assert not serious, f"{where}: " + "\n".join(
        f"{v['impact']} {v['id']} ({v['help']}): {v['nodes']}" for v in serious)


def send(page: Page, text: str) -> None:
    page.get_by_label("Message", exact=True).fill(text)
    page.get_by_role("button", name="Send", exact=True).click()


def record_live_text(page: Page) -> None:
    """Keep every text the page shows as streaming (``[data-live]`` entries), as it changes:
    proof that a reply arrived word by word over AG-UI, before the ledger replaced it."""
    page.evaluate("""() => {
      window.__live = [];
      new MutationObserver(() => {
        for (const node of document.querySelectorAll('[data-live="assistant"] .text')) {
          window.__live.push(node.textContent);
        }
      }).observe(document.body, {subtree: true, childList: true, characterData: true});
    }""")


def live_texts(page: Page) -> list[str]:
    texts: list[str] = page.evaluate("() => window.__live")
    return texts


def conversation(page: Page) -> Locator:
    """The session's conversation (what the page calls its timeline, for screen readers)."""
    return page.get_by_role("list", name="Timeline")


def show_details(page: Page, on: bool = True) -> None:
    """The Details toggle: the ledger's bookkeeping (runs, commits, timers...) shown or not."""
    toggle = page.get_by_role("button", name="Details")
    if (toggle.get_attribute("aria-pressed") == "true") != on:
        toggle.click()
    expect(toggle).to_have_attribute("aria-pressed", "true" if on else "false")


def timeline_types(page: Page) -> list[str]:
    """The ledger event types the conversation shows, in order (a tool card stands for its
    call, yield, approval and result)."""
    types: list[str] = page.locator("ol.conversation > li[data-types]").evaluate_all(
        "nodes => nodes.flatMap(n => n.dataset.types.split(' ').filter(Boolean))")
    return types


def bubble(page: Page, role: str, text: str) -> Locator:
    """A chat bubble of ``role`` (user or assistant) saying ``text``."""
    return conversation(page).locator(f"li.bubble.from-{role}").filter(has_text=text)


def api(server: DevServer, method: str, path: str, body: dict[str, Any] | None = None
        ) -> httpx.Response:
    return httpx.request(method, server.url + path, json=body, timeout=60)


def test_console_books_approves_and_stops_a_story(page: Page, server: DevServer) -> None:
    # The sessions page: nothing yet, and nothing is focused (no ring around the heading).
    page.goto("/")
    expect(page.get_by_role("heading", name="Sessions")).to_be_visible()
    expect(page.get_by_role("table")).to_contain_text("0 of 0 sessions")
    assert page.evaluate("() => document.activeElement === document.body")
    icon = page.locator('link[rel="icon"]').get_attribute("href")
    assert icon and icon.startswith("/assets/"), icon
    favicon = httpx.get(server.url + icon)
    assert favicon.status_code == 200 and favicon.headers["content-type"] == "image/svg+xml"
    shot(page, "01-sessions-empty")

    # A new session: no request follows it before it exists (no 404s while it is new).
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    failed: list[str] = []
    page.on("response", lambda response: failed.append(response.url)
            if response.status == 404 else None)
    page.get_by_role("link", name="New session").click()
    heading = page.get_by_role("heading", level=1)
    expect(heading).to_have_text(re.compile(r"^console-[0-9a-f]{12}$"))
    # After moving within the page, focus is on the new content, without a ring for a click.
    expect(page.locator("main")).to_be_focused()
    assert page.evaluate("() => getComputedStyle(document.activeElement).outlineStyle") == "none"
    session_id = f"session_{heading.inner_text()}"
    send_button = page.get_by_role("button", name="Send", exact=True)
    expect(send_button).to_be_disabled()
    assert float(send_button.evaluate("b => getComputedStyle(b).opacity")) < 0.6
    assert send_button.evaluate("b => getComputedStyle(b).cursor") == "not-allowed"
    # Not an event to wait for but a window to watch: a page polling a missing session (as
    # this one once did, every second) would ask for its feed in it.
    page.wait_for_timeout(1500)
    assert not [url for url in requests if "/events?" in url], requests

    # "book me in" parks on ask_guest: its answer form is in the conversation, where it asked.
    send(page, "book me in")
    expect(bubble(page, "user", "book me in")).to_be_visible()
    form = page.get_by_role("article").filter(has_text="ask_guest asks")
    expect(form).to_contain_text("Which night?")
    assert form.evaluate("a => a.closest('ol.conversation') !== null")
    answer = form.get_by_label("Answer")
    expect(answer).to_be_visible()
    # The browser validates before anything is sent: an empty answer is refused in place.
    form.get_by_role("button", name="Send answer").click()
    expect(form.get_by_text("Required.")).to_be_visible()
    expect(answer).to_have_attribute("aria-invalid", "true")
    expect(answer).to_be_focused()
    assert api(server, "GET", f"/sessions/{session_id}").json()["status"] == "awaiting_input"
    shot(page, "02-answer-form")

    # "Friday": the reply streams in as a chat bubble, then the committed ledger replaces it.
    record_live_text(page)
    answer.fill("Friday")
    form.get_by_role("button", name="Send answer").click()
    expect(bubble(page, "assistant", "Booked for Friday.")).to_be_visible(timeout=WAIT)
    assert "Booked for Friday." in live_texts(page)
    expect(bubble(page, "user", "Friday")).to_contain_text("answer to ask_guest")
    # Answered, the question stays, above its answer.
    asked = bubble(page, "assistant", "Which night?")
    expect(asked).to_contain_text("ask_guest asked")
    assert asked.evaluate(
        "(q, a) => !!(q.compareDocumentPosition(a) & Node.DOCUMENT_POSITION_FOLLOWING)",
        bubble(page, "user", "Friday").element_handle())
    # A session whose turn ended reads as idle, in words that are true.
    expect(page.get_by_text("Idle: the last turn ended. A message starts the next.")) \
        .to_be_visible()
    expect(page.locator(".meta .badge")).to_have_text("idle")
    expect(page.locator(".meta")).not_to_contain_text("waits for nothing")
    # Following starts once the session exists; it never asked for one that did not.
    assert any("/events?after=1&" in url for url in requests), requests
    # The one 404: the first read of a session that did not exist yet.
    assert len(failed) <= 1 and all("?events=true" in url for url in failed), failed
    # The bookkeeping stays out of the conversation until Details is on.
    timeline = conversation(page)
    expect(timeline.locator("li.log")).to_have_count(0)
    expect(timeline).not_to_contain_text("started")
    expect(timeline).not_to_contain_text("commit")
    assert timeline_types(page) == [
        "user", "tool_call", "tool_yield", "tool_result", "tool_input", "assistant"]
    shot(page, "03-booked")
    show_details(page)
    assert timeline_types(page)[:10] == [
        "invocation_start", "user", "tool_call", "tool_yield", "tool_result",
        "invocation_yield", "tool_input", "invocation_resume", "assistant", "invocation_end"]
    expect(timeline.locator("li[data-type=invocation_end]").first).to_contain_text(
        "commit: committed")
    expect(page.get_by_text(re.compile(r"^Raw ledger \(\d+ events\)$"))).to_be_visible()
    shot(page, "03-booked-details")
    show_details(page, on=False)

    # An approval, inline: what the tool wants to do, and Approve runs it once.
    send(page, "upgrade my room BK-7 to a suite")
    card = page.get_by_role("article").filter(has_text="upgrade_room wants approval")
    expect(card).to_contain_text("BK-7")
    expect(card).not_to_contain_text("waiting for tool input")
    assert card.evaluate("a => a.closest('ol.conversation') !== null")
    shot(page, "04-approval")
    card.get_by_label("Reason (optional)").fill("loyal guest")
    card.get_by_role("button", name="Approve").click()
    expect(bubble(page, "assistant", "Upgraded BK-7 to a suite.")).to_be_visible(timeout=WAIT)
    expect(bubble(page, "user", "approved: loyal guest")).to_contain_text(
        "approval of upgrade_room")
    expect(card).to_have_count(0)
    # A tool call is a card: its name and a line closed, its JSON pretty-printed open.
    tool = timeline.locator("details.tool").filter(has_text="upgrade_room")
    expect(tool.locator("summary")).to_contain_text("ref: BK-7, room: suite")
    expect(tool.locator("pre").first).not_to_be_visible()
    tool.locator("summary").click()
    args = tool.locator("pre").first.inner_text()
    assert args.startswith("{\n  ") and '"ref": "BK-7"' in args, args
    shot(page, "04-tool-card")

    # A stale decision: the page stops following the session, someone else decides, and the
    # console's Deny is refused by the server, which the page shows as it was said.
    following = re.compile(r"/events\?|/sessions/[^/?]+$")
    page.route(following, lambda route: route.abort())
    page.reload()
    send(page, "upgrade my room BK-8 to a suite")
    card = page.get_by_role("article").filter(has_text="upgrade_room wants approval")
    expect(card).to_contain_text("BK-8")
    approval_id = api(server, "GET", f"/sessions/{session_id}").json()[
        "pendingApprovals"][0]["approvalId"]
    decided = api(server, "POST", "/turns", {"sessionId": session_id, "approvals": [
        {"approvalId": approval_id, "approved": True}]})
    assert decided.status_code == 200, decided.text
    card.get_by_role("button", name="Deny").click()
    refusal = page.get_by_role("alert")
    expect(refusal).to_contain_text(approval_id)
    expect(refusal).to_contain_text(re.compile(r"already|not pending", re.IGNORECASE))
    expect(timeline).to_contain_text("Upgraded BK-8 to a suite.")  # the reload after it
    shot(page, "05-stale-decision")
    page.unroute(following)
    page.reload()

    # A long story, stopped mid-way: what was shown stays, the rest never comes.
    record_live_text(page)
    send(page, "tell me a long story")
    stop = page.get_by_role("button", name="Stop", exact=True)
    expect(stop).to_be_enabled(timeout=WAIT)
    page.wait_for_function(
        "() => (window.__live.at(-1) || '').split(' ').length > 12", timeout=WAIT)
    shot(page, "06-streaming")
    stops: list[dict[str, Any]] = []
    page.on("request", lambda request: stops.append(request.post_data_json)
            if request.url.endswith("/turns") and "stop" in (request.post_data or "") else None)
    # Read what the page shows and press Stop in one go (one task of the page's event loop).
    shown = page.evaluate("""() => {
      const text = document.querySelector('[data-live="assistant"] .text').textContent;
      [...document.querySelectorAll('button')].find(b => b.textContent === 'Stop').click();
      return text;
    }""")
    expect(timeline.locator("li[data-type=invocation_end]").last).to_contain_text(
        "Stopped", timeout=WAIT)
    told = timeline.locator("li[data-type=assistant]").last.inner_text()
    assert "Once upon a time" in told
    assert "decided to come back in the spring" not in told
    ledger = api(server, "GET", f"/sessions/{session_id}?events=true").json()["events"]
    stored = [e["text"] for e in ledger if e["type"] == "assistant"][-1]
    # The stop said how much the page had shown (`seen`), and exactly that much was kept.
    [sent] = stops
    assert isinstance(sent["stop"]["seen"], int) and sent["stop"]["seen"] > 12, sent
    assert stored.strip() == shown.strip() and len(stored.split()) > 12
    assert stored.strip() in told
    assert [e["type"] for e in ledger][-2:] == ["stop_requested", "invocation_end"]
    expect(page.get_by_text("Stop sent")).to_have_count(0, timeout=WAIT)  # the run is over
    shot(page, "07-stopped")

    # A turn that begins elsewhere (another client) shows up through the session's feed.
    elsewhere = api(server, "POST", "/turns", {"sessionId": session_id,
                                                "message": "how long is my stay BK-1042?"})
    assert elsewhere.status_code == 200, elsewhere.text
    expect(bubble(page, "assistant", "Your stay BK-1042 is 3 nights.")).to_be_visible(
        timeout=WAIT)

    # With Details on, the timeline a person follows: every kind of step, in order.
    show_details(page)
    types = timeline_types(page)
    for kind in ("approval_requested", "approval_decided", "stop_requested"):
        assert kind in types, types
    assert types.index("approval_requested") < types.index("approval_decided") \
        < types.index("stop_requested")

    # Back to the list: a session waiting on a person sorts first and says what it waits for.
    waiting = api(server, "POST", "/turns", {"sessionId": "waits", "message": "book me in"})
    assert waiting.json()["status"] == "yielded_tool"
    page.get_by_role("link", name="All sessions").click()
    rows = page.get_by_role("table").locator("tbody tr")
    expect(rows).to_have_count(2, timeout=WAIT)
    expect(rows.first.get_by_role("link")).to_have_text("waits")
    expect(rows.first).to_contain_text("awaiting input")
    expect(rows.first).to_contain_text("answer to ask_guest")
    expect(rows.nth(1).get_by_role("link")).to_have_text(session_id.removeprefix("session_"))
    page.get_by_label("Status").select_option("awaiting_input")
    expect(rows).to_have_count(1)
    shot(page, "08-sessions")


def test_inbox_queues_edits_and_sends_now(page: Page, server: DevServer) -> None:
    page.goto("/#/sessions/inbox-1")
    expect(page.get_by_role("heading", level=1)).to_have_text("inbox-1")
    send(page, "book me in")
    expect(page.get_by_role("article").filter(has_text="ask_guest asks")).to_be_visible()

    # The session waits: messages go to its inbox, in order.
    send(page, "first")
    expect(page.get_by_role("status")).to_contain_text("inbox")
    send(page, "is late checkout possible?")
    inbox = page.get_by_role("region", name=re.compile(r"^Inbox"))
    expect(inbox.get_by_role("listitem")).to_have_count(2, timeout=WAIT)

    # Edit one, move it first, remove the other, then send it now.
    second = inbox.get_by_label("Queued message 2", exact=True)
    second.fill("how long is my stay BK-9?")
    inbox.get_by_role("listitem").nth(1).get_by_role("button", name="Save").click()
    edited = "how long is my stay BK-9?"
    expect(inbox.get_by_label("Queued message 2", exact=True)).to_have_value(edited)
    inbox.get_by_role("button", name="Move queued message 2 up").click()
    expect(inbox.get_by_label("Queued message 1", exact=True)).to_have_value(edited)
    inbox.get_by_role("listitem").nth(1).get_by_role("button", name="Remove").click()
    expect(inbox.get_by_role("listitem")).to_have_count(1)
    shot(page, "09-inbox")
    inbox.get_by_role("button", name="Send now").click()
    expect(bubble(page, "assistant", "Your stay BK-9 is 3 nights.")).to_be_visible(timeout=WAIT)
    expect(page.get_by_role("region", name=re.compile(r"^Inbox"))).to_have_count(0)
    # Send now ended what the session waited for: the question was interrupted, not answered.
    show_details(page)
    expect(conversation(page).locator(
        "li[data-types~=interrupt], li[data-types~=queue_send_now]").first).to_be_attached(
        timeout=WAIT)  # the live bubble can come before the page re-reads the ledger
    types = timeline_types(page)
    assert "interrupt" in types or "queue_send_now" in types, types
    assert "tool_input" not in types


def test_every_control_has_a_label_and_the_keyboard_reaches_the_message_box(
        page: Page, server: DevServer) -> None:
    page.goto("/#/sessions/keys")
    send(page, "book me in")
    expect(page.get_by_role("article").filter(has_text="ask_guest asks")).to_be_visible()
    unlabelled = page.evaluate("""() => [...document.querySelectorAll('input, select, textarea')]
      .filter(el => !(el.labels && el.labels.length) && !el.getAttribute('aria-label'))
      .map(el => el.outerHTML)""")
    assert unlabelled == []
    # From the top of the content, Tab walks to the message box without a pointer.
    page.locator("main").focus()
    for _ in range(30):
        page.keyboard.press("Tab")
        if page.evaluate("() => document.activeElement.id") == "message":
            break
    else:
        pytest.fail("Tab never reached the message box")
    page.keyboard.type("how long is my stay BK-5?")
    page.keyboard.press("Enter")
    expect(page.get_by_role("status")).to_contain_text("inbox", timeout=WAIT)


def test_the_console_is_served_to_browsers_and_the_api_description_to_the_rest(
        server: DevServer) -> None:
    page = httpx.get(server.url + "/", headers={"Accept": "text/html"})
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    script = re.search(r'src="(/assets/[^"]+\.js)"', page.text)
    assert script, page.text
    asset = httpx.get(server.url + script.group(1))
    assert asset.status_code == 200
    assert asset.headers["content-type"].startswith("text/javascript")
    assert "immutable" in asset.headers["cache-control"]
    described = httpx.get(server.url + "/")
    assert described.json()["openapi"].startswith("3.")
    for probe in ("/assets/../pyproject.toml", "/assets/missing.js", "/assets/%2e%2e/x.js"):
        assert httpx.get(server.url + probe).status_code == 404, probe


def test_an_input_request_is_a_form_checked_in_the_browser_and_by_the_server(
        page: Page, server: DevServer) -> None:
    # Trusted server code (here: another process on the same SQLite file) asks for a budget.
    from dormant.samples.bookings import build
    from dormant.stores import SqliteStore

    store = SqliteStore(server.db)
    app, _ = build(store=store)
    session = app.sessions.create("budget-1", owner="local")
    session.request_input("budget", {"type": "integer", "minimum": 50, "title": "Budget"},
                          "Your budget per night?")
    assert app.sessions.commit(session).ok

    page.goto("/#/sessions/budget-1")
    card = page.get_by_role("article").filter(has_text="Your budget per night?")
    field = card.get_by_label("Budget")
    field.fill("20")
    card.get_by_role("button", name="Send response").click()
    expect(card.locator(".field-error")).to_contain_text("50")
    assert api(server, "GET", "/sessions/budget-1").json()["pendingInputs"], "nothing was sent"
    shot(page, "10-input-request")

    field.fill("300")
    card.get_by_role("button", name="Send response").click()
    expect(card).to_have_count(0, timeout=WAIT)
    expect(bubble(page, "user", "300")).to_contain_text("input: Your budget per night?")
    assert api(server, "GET", "/sessions/budget-1").json().get("pendingInputs", []) == []

    # A schema the form has no input kind for (a list) is a JSON field: parsed before sending.
    session = app.sessions.get("budget-1")
    assert session is not None
    session.request_input("extras", {"type": "array", "items": {"type": "string"},
                                     "title": "Extras"}, "Anything else?")
    assert app.sessions.commit(session).ok
    card = page.get_by_role("article").filter(has_text="Anything else?")
    extras = card.get_by_label("Extras")
    extras.fill('["breakfast"')
    card.get_by_role("button", name="Send response").click()
    expect(card.locator(".field-error")).to_have_text("Not valid JSON.", timeout=WAIT)
    expect(extras).to_have_attribute("aria-invalid", "true")
    extras.fill('["breakfast", 2]')
    card.get_by_role("button", name="Send response").click()
    expect(card.locator(".field-error")).to_contain_text("string")
    extras.fill('["breakfast"]')
    card.get_by_role("button", name="Send response").click()
    expect(card).to_have_count(0, timeout=WAIT)
    answered = bubble(page, "user", "breakfast")
    expect(answered).to_contain_text("input: Anything else?")
    # A list answer reads as a list, not as JSON.
    expect(answered.locator("ol.kv-list > li")).to_have_text(["breakfast"])
    expect(answered.locator("pre")).to_have_count(0)



def test_the_readme_shows_the_console() -> None:
    readme = (ROOT / "README.md").read_text()
    images = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", readme)
    assert any("console" in image for image in images), images
    for image in images:
        assert (ROOT / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", image


def agui_bodies(page: Page) -> list[dict[str, Any]]:
    """Collects the body of every POST /agui the page sends from now on."""
    bodies: list[dict[str, Any]] = []
    page.on("request", lambda request: bodies.append(request.post_data_json)
            if request.method == "POST" and request.url.endswith("/agui") else None)
    return bodies


def test_a_failed_turn_shows_its_code_and_retry_streams_it_to_the_end_with_no_422(
        flaky_page: Page, flaky_server: DevServer) -> None:
    page = flaky_page
    answered: list[tuple[int, str]] = []
    page.on("response", lambda response: answered.append((response.status, response.url)))
    said: list[str] = []
    page.on("console", lambda message: said.append(f"{message.type}: {message.text}"))
    page.goto("/#/sessions/flaky-1")
    send(page, "how long is my stay BK-1?")
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("model provider failed", timeout=WAIT)
    expect(alert.locator("code")).to_have_text("service_unavailable")
    expect(alert).to_contain_text("Retry can help")
    request_id = re.search(r"request id ([0-9a-f-]+)", alert.inner_text())
    assert request_id, alert.inner_text()

    # Inline, where the turn failed: its code, what failed, and that a retry can help.
    timeline = conversation(page)
    failure = timeline.locator("li[data-type=invocation_failed]")
    expect(failure).to_contain_text("The turn failed")
    expect(failure.locator("code")).to_have_text("service_unavailable")
    expect(failure).to_contain_text("the model provider failed")
    expect(failure.locator(".chip")).to_have_text("retryable")
    expect(failure).to_contain_text("Retry can help")
    expect(timeline.locator("li[data-types~=tool_result]")).to_contain_text("lookup_stay")
    expect(page.locator(".meta .badge")).to_have_text("failed")
    expect(page.locator(".meta")).to_contain_text("its last turn failed: Retry runs it again")
    # With Details on too; the failure's own text stays in the server's log, off the page.
    show_details(page)
    expect(failure).to_contain_text("service_unavailable")
    expect(failure).to_contain_text("invocation inv_")
    expect(failure).to_contain_text(f"request {request_id.group(1)}")  # what the log names
    page.get_by_text(re.compile(r"^Raw ledger")).click()
    expect(page.locator("details.raw pre")).to_contain_text('"code": "service_unavailable"')
    assert "llm-gw.internal" not in page.locator("body").inner_text()
    assert SECRET in flaky_server.log.read_text()
    evidence(page, "11-failed")
    assert_accessible(page, "a failed turn, Details on")
    show_details(page, on=False)

    # Retry goes through POST /agui, as a message does: its reply streams in. The page was
    # told it may (the capability is in the page it loaded): nothing is probed first.
    assert page.locator('meta[name="dormant-capabilities"]').get_attribute("content") \
        == "agui-controls"
    sent = agui_bodies(page)
    record_live_text(page)
    page.get_by_role("button", name="Retry").click()
    expect(bubble(page, "assistant", "Your stay BK-1 is 3 nights.")).to_be_visible(
        timeout=WAIT)
    assert len(sent) == 1 and "retry" in sent[0]["forwardedProps"]["dormant"], sent
    assert sent[0]["forwardedProps"]["dormant"]["positions"] is True
    assert sent[0]["forwardedProps"]["dormant"]["retry"]["retryId"].startswith("retry-")
    assert any("Your stay BK-1 is 3 nights." in text for text in live_texts(page))
    show_details(page)
    # The bubble streams in before the page re-reads the ledger: wait for the ledger's end.
    expect(timeline.locator("li[data-type=invocation_end]").last).to_contain_text(
        "ended (completed)", timeout=WAIT)
    types = timeline_types(page)
    assert types.count("tool_result") == 1, types  # the tool did not run again
    assert "retry" in types, types
    expect(page.get_by_role("button", name="Retry")).to_be_disabled()
    assert api(flaky_server, "GET", "/sessions/flaky-1").json()["status"] == "active"
    # No 422 anywhere: not in the answers the page got, not in its console, not in the log.
    assert not [(status, url) for status, url in answered if status == 422], answered
    # (the one error it logs is the 404 of reading the session before its first turn)
    assert not [line for line in said if "422" in line], said
    assert " 422 " not in flaky_server.log.read_text()


def test_a_failure_a_retry_cannot_help_says_so(
        browser: Browser, hopeless_server: DevServer) -> None:
    for page in open_page(browser, hopeless_server):
        page.goto("/#/sessions/hopeless-1")
        send(page, "how long is my stay BK-1?")
        failure = conversation(page).locator("li[data-type=invocation_failed]")
        expect(failure.locator("code")).to_have_text("context_overflow", timeout=WAIT)
        expect(failure.locator(".chip")).to_have_text("not retryable")
        expect(failure).to_contain_text("Retrying will not help")
        expect(failure).not_to_contain_text("Retry can help")
        expect(page.get_by_role("alert")).to_contain_text("Retrying will not help")
        expect(page.get_by_role("complementary")).to_contain_text(
            "The last turn failed, and retrying will not help")
        assert "llm-gw.internal" not in page.locator("body").inner_text()


def test_a_two_field_answer_reads_as_key_values_and_the_state_panel_shows_each_change(
        checked_page: Page, server: DevServer) -> None:
    page = checked_page
    page.goto("/#/sessions/cancel-1")
    send(page, "cancel booking BK-1042")
    form = page.get_by_role("article").filter(has_text="request_approval asks")
    expect(form).to_contain_text("cancel booking BK-1042", timeout=WAIT)

    # The state panel: what the session holds now, and the turn that wrote it.
    panel = page.get_by_role("region", name="State")
    now = panel.get_by_label("Current state")
    expect(now.locator("dt")).to_have_text(["pending_action"])
    expect(now.locator("dd")).to_have_text(["cancel booking BK-1042"])
    changes = panel.get_by_role("list", name="What each turn changed").locator(":scope > li")
    expect(changes).to_have_count(1)
    expect(changes.first).to_contain_text("Turn 1")
    expect(changes.first).to_contain_text("set pending_action to cancel booking BK-1042")
    assert_accessible(page, "a session waiting for a two-field answer")

    # A two-field answer: a checkbox and a note.
    form.get_by_label("Approved").check()
    form.get_by_label("Note").fill("the guest called twice")
    form.get_by_role("button", name="Send answer").click()
    expect(bubble(page, "assistant", "Done: cancel booking BK-1042.")).to_be_visible(
        timeout=WAIT)
    answer = bubble(page, "user", "the guest called twice")
    expect(answer).to_contain_text("answer to request_approval")
    # ...reads as key / value pairs, not as JSON.
    expect(answer.locator("dl.kv dt")).to_have_text(["approved", "note"])
    expect(answer.locator("dl.kv dd")).to_have_text(["true", "the guest called twice"])
    expect(answer.locator("pre")).to_have_count(0)
    assert "{" not in answer.inner_text()
    # ...and the question is kept, above it.
    asked = bubble(page, "assistant", "cancel booking BK-1042").filter(
        has_text="request_approval asked")
    expect(asked).to_have_count(1)
    assert asked.evaluate(
        "(q, a) => !!(q.compareDocumentPosition(a) & Node.DOCUMENT_POSITION_FOLLOWING)",
        answer.element_handle())
    evidence(page, "18-two-field-answer")

    # The answer's turn removed what the question's had set: the panel says both.
    expect(now).to_have_count(0)
    expect(panel).to_contain_text("Empty: nothing has been stored yet.")
    expect(changes.first.locator("li")).to_have_text([
        "set pending_action to cancel booking BK-1042", "removed pending_action"])
    assert api(server, "GET", "/sessions/cancel-1").json()["state"] == {}
    evidence(page, "19-state-panel")
    assert_accessible(page, "a session with a two-field answer")
    show_details(page)
    assert_accessible(page, "a session with a two-field answer, Details on")


def test_the_accessibility_check_sees_what_the_old_answer_bubble_did(
        checked_page: Page, server: DevServer) -> None:
    # The check can fail: white JSON on the near-white block inside a user's bubble (how a
    # structured answer once looked) is a serious contrast violation to axe-core.
    page = checked_page
    page.goto("/")
    expect(page.get_by_role("heading", name="Sessions")).to_be_visible()
    assert_accessible(page, "the empty sessions list")
    page.evaluate("""() => document.querySelector('main').insertAdjacentHTML('beforeend',
      '<div class="bubble from-user"><div class="said"><pre class="json">{"approved": true}' +
      '</pre></div></div>')""")
    found = {v["id"]: v["impact"] for v in axe_violations(page)}
    assert found.get("color-contrast") == "serious", found


def test_statuses_read_truthfully_and_the_list_names_the_agent(
        checked_page: Page, server: DevServer) -> None:
    page = checked_page
    for session, body in (("done", {"message": "how long is my stay BK-2?"}),
                          ("asks", {"message": "book me in"}),
                          ("held", {"message": "how long is my stay BK-3?"}),
                          ("held", {"pause": True})):
        answer = api(server, "POST", "/turns", {"sessionId": session, **body})
        assert answer.status_code in (200, 202), answer.text
    listed = {line["sessionId"]: line for line in
              api(server, "GET", "/sessions?detail=true").json()["sessions"]}
    assert {line["agent"] for line in listed.values()} == {"concierge"}
    assert listed["session_done"]["status"] == "active"
    assert listed["session_held"]["status"] == "paused", listed

    page.goto("/")
    rows = page.get_by_role("table").locator("tbody tr")
    expect(rows).to_have_count(3, timeout=WAIT)

    def row(name: str) -> Locator:
        return rows.filter(has=page.get_by_role("link", name=name, exact=True))

    # A session whose turn ended is idle, and says so: not "active", not "waits for nothing".
    expect(row("done").locator(".badge")).to_have_text("idle")
    expect(row("done")).to_contain_text("its last turn ended: a message starts the next")
    expect(row("asks").locator(".badge")).to_have_text("awaiting input")
    expect(row("asks")).to_contain_text("waits for an answer to ask_guest")
    expect(row("held").locator(".badge")).to_have_text("paused")
    expect(row("held")).to_contain_text("nothing runs until Resume")
    table = page.get_by_role("table")
    expect(table).not_to_contain_text("waits for nothing")
    expect(table.locator(".badge").filter(has_text=re.compile(r"^active$"))).to_have_count(0)
    # The agent that ran each session; the version only when asked for.
    headers = table.locator("thead th")
    expect(headers).to_have_text(["Session", "Agent", "Status", "Last activity"])
    for name in ("done", "asks", "held"):
        expect(row(name).locator("td.agent")).to_have_text("concierge")
    expect(table.locator("td.version")).to_have_count(0)
    assert_accessible(page, "the sessions list")
    page.get_by_label("Show versions").check()
    expect(headers).to_have_text(["Session", "Agent", "Status", "Version", "Last activity"])
    expect(row("done").locator("td.version")).to_have_text(
        str(listed["session_done"]["version"]))
    page.reload()  # the choice is remembered
    expect(page.get_by_role("table").locator("td.version")).to_have_count(3, timeout=WAIT)
    evidence(page, "20-sessions-statuses")

    # The session's own page words it the same way.
    row("done").get_by_role("link").click()
    expect(page.locator(".meta .badge")).to_have_text("idle")
    expect(page.get_by_text("Idle: the last turn ended. A message starts the next.")) \
        .to_be_visible()
    page.goto("/#/sessions/never-started")
    expect(page.locator(".meta .badge")).to_have_text("new")
    expect(page.get_by_text("Nothing has run yet: the first message starts the session.")) \
        .to_be_visible()
    assert_accessible(page, "a session not started yet")


def test_a_fork_is_marked_in_the_list_and_in_its_timeline(page: Page, server: DevServer) -> None:
    first = api(server, "POST", "/turns", {"sessionId": "origin",
                                            "message": "how long is my stay BK-3?"})
    assert first.json()["status"] == "completed", first.text
    fork = api(server, "POST", "/sessions/origin/fork", {"sessionId": "branch"})
    assert fork.status_code == 201, fork.text
    api(server, "POST", "/turns", {"sessionId": "branch", "message": "book me in"})

    at = api(server, "GET", "/sessions/origin").json()["version"]
    assert at == 2  # the turn's tool step wrote ahead, then its end landed

    page.goto("/")
    row = page.get_by_role("row").filter(has_text="branch")
    expect(row).to_contain_text(f"fork of origin@{at}", timeout=WAIT)
    row.get_by_role("link", name="branch").click()
    expect(page.locator(".meta")).to_contain_text(f"fork of origin at version {at}")
    timeline = page.get_by_role("list", name="Timeline")
    entries = timeline.get_by_role("listitem")
    texts = entries.all_inner_texts()
    marker = next(i for i, text in enumerate(texts) if "forked here" in text)
    # The inherited turn comes before the marker, the fork's own after it.
    assert any("BK-3" in text for text in texts[:marker]), texts
    assert any("book me in" in text for text in texts[marker:]), texts
    page.locator(".meta").get_by_role("link", name="origin").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("origin")
    expect(page.get_by_role("list", name="Timeline")).not_to_contain_text("forked here")


def test_a_message_sent_while_a_reply_streams_steers_that_run(
        page: Page, server: DevServer) -> None:
    page.goto("/#/sessions/steer-1")
    send(page, "tell me a long story")
    stop = page.get_by_role("button", name="Stop", exact=True)
    expect(stop).to_be_enabled(timeout=WAIT)
    posted: list[dict[str, Any]] = []
    page.on("request", lambda request: posted.append(request.post_data_json)
            if request.url.endswith("/turns") else None)
    page.get_by_label("Message", exact=True).fill("make it shorter")
    page.get_by_role("button", name="Steer", exact=True).click()
    expect(page.get_by_role("status")).to_contain_text("Steer sent")
    [steer] = posted
    running = steer["steer"]["invocationId"]
    assert steer["steer"]["text"] == "make it shorter" and running.startswith("inv_"), steer
    stop.click()
    timeline = conversation(page)
    expect(timeline.locator("li[data-type=invocation_end]").last).to_contain_text(
        "Stopped", timeout=WAIT)
    ledger = api(server, "GET", "/sessions/steer-1?events=true").json()["events"]
    assert {e["invocation_id"] for e in ledger if e["type"] == "invocation_start"} == {running}
    expect(page.get_by_role("button", name="Send", exact=True)).to_be_visible()


def test_stop_waiting_ends_a_parked_response(page: Page, server: DevServer) -> None:
    page.goto("/#/sessions/parked-1")
    send(page, "book me in")
    card = page.get_by_role("article").filter(has_text="ask_guest asks")
    expect(card).to_be_visible(timeout=WAIT)
    page.get_by_role("button", name="Stop waiting").click()
    expect(card).to_have_count(0, timeout=WAIT)
    timeline = conversation(page)
    expect(timeline.locator("li[data-type=invocation_end]").last).to_contain_text("Stopped")
    expect(timeline.locator("li[data-types~=tool_result]").last).to_contain_text("ask_guest")
    assert api(server, "GET", "/sessions/parked-1").json()["waiting"] == []


def test_the_timeline_shows_app_events_deferred_calls_and_stopped_drafts(
        page: Page, server: DevServer) -> None:
    # Trusted server code (another process on the same SQLite file) writes what only it may:
    # an application event, a call parked for its deferred result, a draft a stop cut short.
    from pydantic import BaseModel

    import dormant
    from dormant.models import ScriptedModel
    from dormant.stores import SqliteStore
    from dormant.testing import model, run_test, stop, user

    class Booking(BaseModel):
        room: str
        night: str

    store = SqliteStore(server.db)
    app = dormant.App(name="trusted", store=store)
    app.event("crm.ticket_updated", {"type": "object", "properties": {
        "ticket": {"type": "string"}}, "required": ["ticket"]})
    book = app.tool(name="book", description="Book a room", schema=Booking,
                    execute=lambda ctx: {"booked": ctx.args.room})
    check = app.tool(name="provider_check", description="Checked by the provider",
                     schema=Booking, deferred=True)
    agent = app.agent(name="concierge", model=ScriptedModel([]), tools=[book, check])
    session = app.sessions.create("trusted-1", owner="local")
    session.append_event("crm.ticket_updated", {"ticket": "T-42"}, id="evt-1")
    assert app.sessions.commit(session).ok
    run_test(agent, [
        user("book room 12 for friday"), stop(after=4),
        model("Let me book", tool_calls=[{"name": "book", "args": {"room": "12",
                                                                   "night": "friday"},
                                          "stream_args": True}]),
        user("check it with the provider"),
        model("Checking.", tool_calls=[{"name": "provider_check",
                                        "args": {"room": "12", "night": "friday"}}]),
    ], store=store, session_id="trusted-1")

    page.goto("/#/sessions/trusted-1")
    timeline = conversation(page)
    expect(timeline.locator("details.tool").filter(has_text="provider_check")).to_be_visible(
        timeout=WAIT)
    expect(timeline.locator("li[data-type=app_event]")).to_have_count(0)  # bookkeeping
    show_details(page)
    expect(timeline.locator("li[data-type=app_event]")).to_contain_text(
        'event crm.ticket_updated{"ticket":"T-42"}', timeout=WAIT)
    expect(timeline.locator("li[data-type=app_event]")).to_contain_text("[evt-1]")
    expect(timeline.locator("li[data-type=tool_call_draft]")).to_contain_text(
        'book was still streaming when stopped: {"room":')
    deferred = timeline.locator("li[data-types~=tool_deferred]")
    expect(deferred).to_contain_text("provider_check")
    expect(deferred).to_contain_text("waits for its result")
    shot(page, "13-trusted-events")


def test_stop_ends_a_turn_started_elsewhere(page: Page, server: DevServer) -> None:
    first = api(server, "POST", "/turns", {"sessionId": "told",
                                            "message": "how long is my stay BK-4?"})
    assert first.status_code == 200, first.text
    page.goto("/#/sessions/told")
    expect(bubble(page, "assistant", "Your stay BK-4 is 3 nights.")).to_be_visible()
    stop = page.get_by_role("button", name="Stop", exact=True)
    expect(stop).to_be_disabled()

    # Another client (curl, a webhook) starts a long story: the page did not start it.
    answers: list[httpx.Response] = []
    teller = threading.Thread(target=lambda: answers.append(api(
        server, "POST", "/turns", {"sessionId": "told", "message": "tell me a long story"})))
    teller.start()
    try:
        # The running turn announces itself: the page offers Stop for it.
        expect(stop).to_be_enabled(timeout=WAIT)
        expect(page.locator(".meta")).to_contain_text("a turn is running")
        shot(page, "14-running-elsewhere")
        stop.click()
        expect(page.get_by_role("status")).to_contain_text("Stop sent")
        teller.join(timeout=WAIT / 1000)
    finally:
        teller.join()
    [answer] = answers
    assert answer.json()["status"] == "stopped", answer.text
    timeline = conversation(page)
    expect(timeline.locator("li[data-type=invocation_end]").last).to_contain_text(
        "Stopped", timeout=WAIT)
    expect(bubble(page, "assistant", "Once upon a time")).to_be_visible()
    expect(page.get_by_text("Stop sent")).to_have_count(0, timeout=WAIT)
    expect(stop).to_be_disabled()
    ledger = api(server, "GET", "/sessions/told?events=true").json()["events"]
    assert [e["type"] for e in ledger][-2:] == ["stop_requested", "invocation_end"]
    assert ledger[-1]["status"] == "stopped"


def test_the_list_shows_each_sessions_first_message(page: Page, server: DevServer) -> None:
    long = "is late checkout possible " + "on the day I leave, " * 10
    for session, messages in (("short", ["how long is my stay BK-2?", "book me in"]),
                              ("long", [long])):
        for message in messages:
            answer = api(server, "POST", "/turns", {"sessionId": session, "message": message})
            assert answer.status_code in (200, 202), answer.text
    page.goto("/")
    rows = page.get_by_role("table").locator("tbody tr")
    expect(rows).to_have_count(2, timeout=WAIT)
    short = rows.filter(has=page.get_by_role("link", name="short", exact=True))
    expect(short.locator(".preview")).to_have_text("how long is my stay BK-2?")
    cut = rows.filter(has=page.get_by_role("link", name="long", exact=True)).locator(".preview")
    expect(cut).to_contain_text("is late checkout possible on the day I leave,")
    text = cut.inner_text()
    assert text.endswith("…") and len(text) <= 120, text
    shot(page, "15-sessions-preview")
    # The filter finds a session by its first message too.
    page.get_by_label("Filter").fill("BK-2")
    expect(rows).to_have_count(1)
    expect(rows.first.get_by_role("link")).to_have_text("short")
    shot(page, "15-sessions-filtered")


def no_horizontal_overflow(page: Page) -> None:
    widths = page.evaluate("() => [document.documentElement.scrollWidth, "
                           "document.documentElement.clientWidth]")
    assert widths[0] <= widths[1], widths


def test_at_phone_width_nothing_is_cut_off(browser: Browser, server: DevServer) -> None:
    api(server, "POST", "/turns", {"sessionId": "phone-2", "message": "book me in"})
    for message in ("book me in", "upgrade my room BK-7 to a suite"):
        api(server, "POST", "/turns", {"sessionId": "phone", "message": message,
                                       "ifBusy": "interrupt"})
    context = browser.new_context(viewport={"width": 390, "height": 844}, base_url=server.url,
                                  device_scale_factor=1, is_mobile=True, has_touch=True,
                                  bypass_csp=True)  # for axe-core
    try:
        page = context.new_page()
        page.goto("/")
        rows = page.get_by_role("table").locator("tbody tr")
        expect(rows).to_have_count(2, timeout=WAIT)
        expect(rows.first).to_contain_text("approval of upgrade_room")
        # The header keeps to two lines at most; the list's rows fit the screen.
        header = page.locator("header.top").bounding_box()
        assert header is not None and header["height"] < 100, header
        no_horizontal_overflow(page)
        shot(page, "16-phone-sessions")
        assert_accessible(page, "the sessions on a phone")

        rows.first.get_by_role("link").click()
        card = page.get_by_role("article").filter(has_text="upgrade_room wants approval")
        expect(card).to_be_visible()
        page.locator("details.tool").first.locator("summary").click()
        no_horizontal_overflow(page)
        box = card.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390, box
        shot(page, "17-phone-session")
        assert_accessible(page, "a session on a phone")
    finally:
        context.close()


def test_without_agui_support_the_page_says_so_and_uses_post_turns(
        page: Page, server: DevServer) -> None:
    # What `dormant dev` serves when its AG-UI support is not installed: the page with a
    # sentence saying so.
    sentence = "This server cannot stream turns: pip install 'dormant[agui]'."

    def with_notice(route: Any) -> None:
        served = route.fetch()
        html = served.text().replace(
            "<head>", f'<head><meta name="dormant-missing" content="{sentence}">', 1)
        route.fulfill(response=served, body=html)

    page.route(re.compile(r"/(#.*)?$"), with_notice)
    sent = agui_bodies(page)
    page.goto("/#/sessions/no-agui")
    expect(page.get_by_role("status").filter(has_text=sentence)).to_be_visible()
    send(page, "book me in")
    form = page.get_by_role("article").filter(has_text="ask_guest asks")
    form.get_by_label("Answer").fill("Friday")
    form.get_by_role("button", name="Send answer").click()
    expect(bubble(page, "assistant", "Booked for Friday.")).to_be_visible(timeout=WAIT)
    assert sent == [], sent

