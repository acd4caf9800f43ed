"""Agents together in the console, in headless Chromium against a real ``dormant dev`` serving
the concierge sample (:mod:`dormant.samples.concierge`, on its rule models): a sub-agent's
work is a nested card under the call it runs for, with its own conversation and its approval
answered in place; a hand-off (a real one: the sample's concierge hands over to billing when
asked) is a divider naming the agent handed to, whose replies carry its name; a delegation (also
real: the concierge delegates an audit to its auditor, in a child session) links the parent
and the child's pages, and the delegated call's card to the child.

The nested card's screenshot is ``console-subagent.png`` among the run's artifacts: the
docs' picture (``docs/images/console-subagent.png``) is a copy of it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from .conftest import ROOT, DevServer
from .test_console import (
    ARTIFACTS,
    PNG,
    WAIT,
    api,
    assert_accessible,
    browser,
    conversation,
    evidence,
    open_page,
    send,
    show_details,
)

__all__ = ["browser"]  # the module's Chromium, shared with test_console

CONCIERGE = "dormant.samples.concierge:build"
PICTURE = ROOT / "docs" / "images" / "console-subagent.png"
SESSION = "session_refund"
ANSWER = "Billing says: Refunded 120.00 EUR on invoice INV-7."
AUDITED = "The audit is done: No anomalies in 3 invoices."


@pytest.fixture
def concierge_server(tmp_path: Path) -> Iterator[DevServer]:
    server = DevServer(tmp_path / "concierge.db", CONCIERGE).start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def concierge_page(browser: Browser, concierge_server: DevServer) -> Iterator[Page]:
    yield from open_page(browser, concierge_server, bypass_csp=True)


def own_types(page: Page) -> list[str]:
    """The event types the session's own conversation shows (not its sub-agents' cards)."""
    types: list[str] = conversation(page).locator(":scope > li[data-types]").evaluate_all(
        "nodes => nodes.flatMap(n => n.dataset.types.split(' ').filter(Boolean))")
    return types


def said(where: Locator, label: str, text: str) -> Locator:
    """A bubble of the ledger (not the live stream) directly in the list ``where``, by who
    said it and what."""
    return where.locator(":scope > li.bubble").filter(
        has=where.page.locator(".who", has_text=re.compile(f"^{re.escape(label)}$"))
    ).filter(has_text=text)


def picture(card: Locator) -> None:
    """The nested card in its conversation, for the docs."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / "console-subagent.png"
    card.scroll_into_view_if_needed()
    card.locator("xpath=ancestor::ol[@aria-label='Timeline']").screenshot(path=str(path))
    data = path.read_bytes()
    assert data[:8] == PNG and 5_000 < len(data) < 200_000, len(data)


def test_a_sub_agents_work_is_a_nested_card_with_its_approval_inline(
        concierge_page: Page, concierge_server: DevServer) -> None:
    page = concierge_page
    page.goto("/#/sessions/refund")
    send(page, "refund invoice INV-7")

    # The ledger's rendering (the live stream may show the sub-agent's words in the parent's
    # bubble until it is replaced): the billing card, under the concierge's call of billing.
    card = conversation(page).locator("section.subagent[data-path='concierge/billing']")
    expect(card).to_be_visible(timeout=WAIT)
    timeline = conversation(page)
    call = card.locator("xpath=parent::li")
    expect(call).to_have_class("tool-entry")
    expect(call.locator("xpath=parent::ol")).to_have_attribute("aria-label", "Timeline")
    summary = call.locator(":scope > details.tool summary")
    expect(summary).to_contain_text("billing")
    expect(summary.locator(".chip")).to_have_text("billing waits for you")
    expect(card.locator(".subagent-head")).to_contain_text("billing")
    expect(card.locator(".subagent-path")).to_have_text("concierge/billing")
    expect(card.locator(".subagent-task")).to_contain_text("refund invoice INV-7")
    inner = card.get_by_role("list", name="billing's conversation")
    expect(inner.locator(":scope > li.tool-entry details.tool summary .tool-name")).to_have_text(
        ["lookup_invoice", "refund"])
    # Its approval, in its card, saying which agent asked.
    approval = card.get_by_role("article").filter(has_text="refund wants approval")
    expect(approval).to_contain_text("asked by concierge/billing")
    expect(approval).to_contain_text("12000")
    pending = api(concierge_server, "GET", f"/sessions/{SESSION}").json()["pendingApprovals"]
    assert [(a["tool"], a["agent"]) for a in pending] == [("refund", "concierge/billing")]
    # The concierge's own conversation: its message and its call, nothing of billing's.
    assert own_types(page) == ["user", "tool_call"]
    expect(timeline.locator(":scope > li.ask-entry")).to_have_count(0)
    assert_accessible(page, "a sub-agent's card waiting for approval")
    evidence(page, "40-subagent-approval")
    picture(card)

    # Approved in the card: billing refunds, its answer is the call's result, the concierge
    # passes it on.
    approval.get_by_label("Reason (optional)").fill("duplicate charge")
    approval.get_by_role("button", name="Approve").click()
    expect(said(timeline, "assistant", ANSWER)).to_be_visible(timeout=WAIT)
    expect(approval).to_have_count(0)
    expect(said(inner, "approval of refund", "approved: duplicate charge")).to_be_visible()
    expect(said(inner, "billing", "Refunded 120.00 EUR on invoice INV-7.")).to_be_visible()
    expect(card.locator(".subagent-head .chip")).to_have_text("done")
    expect(summary.locator(".chip")).to_have_text("returned")
    expect(inner.locator("details.tool summary .chip")).to_have_text(
        ["returned", "approved · returned"])
    assert own_types(page) == ["user", "tool_call", "tool_result", "assistant"]
    assert_accessible(page, "a sub-agent's card, done")
    evidence(page, "41-subagent-done")


def record_live(page: Page) -> None:
    """Keep what the page shows as streaming of a hand-off, as it changes: each live
    divider's line and the label of each live reply (proof the stream said it, before the
    ledger replaced it)."""
    page.evaluate("""() => {
      window.__seen = [];
      new MutationObserver(() => {
        for (const node of document.querySelectorAll('[data-live="handoff"]')) {
          window.__seen.push(`divider ${node.dataset.agent}: ${node.textContent}`);
        }
        for (const node of document.querySelectorAll('[data-live="assistant"] .who')) {
          window.__seen.push(`reply by ${node.textContent}`);
        }
      }).observe(document.body, {subtree: true, childList: true, characterData: true});
    }""")


def seen_live(page: Page) -> list[str]:
    """What :func:`record_live` kept, each once, in the order first seen; then forgotten."""
    seen: list[str] = page.evaluate("() => window.__seen.splice(0)")
    return list(dict.fromkeys(seen))


def test_a_hand_off_is_a_divider_and_the_agent_handed_to_answers(
        concierge_page: Page, concierge_server: DevServer) -> None:
    """A real hand-off: the concierge's rule model calls ``transfer_to_billing`` when asked
    for billing, billing answers from then on, and hands back when the customer is done."""
    page = concierge_page
    page.goto("/#/sessions/desk")
    timeline = conversation(page)
    dividers = timeline.locator(":scope > li[data-type=handoff]")
    record_live(page)
    send(page, "let me talk to billing")

    expect(dividers).to_have_text(
        ["Handed over to billing: the customer asked to talk to billing"], timeout=WAIT)
    expect(dividers).to_have_attribute("data-agent", "billing")
    # The agent handed to answers the same turn: its bubble says its name.
    expect(said(timeline, "billing", "Billing here: which invoice can I help with?")) \
        .to_be_visible()
    # The hand-off's call (transfer_to_billing) is the divider, not a card of its own.
    assert own_types(page) == ["user", "handoff", "assistant"]
    assert seen_live(page) == ["divider billing: Handed over to billing: the customer asked "
                               "to talk to billing", "reply by billing"]

    # Billing answers on, as the session's agent: its own call, no sub-agent card.
    send(page, "what is invoice INV-8?")
    expect(said(timeline, "billing", "Invoice INV-8 is for 45.00 EUR, paid.")).to_be_visible(
        timeout=WAIT)
    expect(timeline.locator("section.subagent")).to_have_count(0)
    assert seen_live(page) == ["reply by billing"]
    events = api(concierge_server, "GET", "/sessions/session_desk?events=true").json()["events"]
    [move] = [e for e in events if e["type"] == "handoff"]
    assert (move["from_agent"], move["to_agent"]) == ("concierge", "billing")
    assert_accessible(page, "a hand-off divider")
    evidence(page, "42-handoff")

    # Done with billing: it hands back, and the concierge answers again.
    send(page, "thanks, that's all")
    expect(dividers).to_have_text(
        ["Handed over to billing: the customer asked to talk to billing",
         "Handed over to concierge: the customer is done with billing"], timeout=WAIT)
    expect(dividers.last).to_have_attribute("data-agent", "concierge")
    expect(said(timeline, "concierge", "Welcome back! Anything else I can help with?")) \
        .to_be_visible()
    assert own_types(page) == ["user", "handoff", "assistant",
                               "user", "tool_call", "tool_result", "assistant",
                               "user", "handoff", "assistant"]
    assert seen_live(page) == ["divider concierge: Handed over to concierge: the customer "
                               "is done with billing", "reply by concierge"]
    # With Details on, nothing is left out: the hand-off calls show as cards too.
    show_details(page)
    expect(timeline.locator("details.tool summary .tool-name")).to_have_text(
        ["transfer_to_billing", "lookup_invoice", "transfer_to_concierge"])
    evidence(page, "43-handback-details")


def test_a_delegations_sessions_are_links(
        concierge_page: Page, concierge_server: DevServer) -> None:
    """A real delegation: asked for an audit, the concierge's rule model calls ``audit``
    (``auditor.as_delegate``), its turn parks, the auditor runs the task in a child session
    (on ``dormant dev``'s worker) and its answer resumes the concierge. The two pages link to
    each other, and the parked call's card to the child."""
    page = concierge_page
    page.goto("/#/sessions/acct")
    timeline = conversation(page)
    send(page, "audit my account")

    # The ledger's answer, once the child's end resumed the concierge (no reload needed).
    expect(said(timeline, "assistant", AUDITED)).to_be_visible(timeout=WAIT)
    [child] = api(concierge_server, "GET", "/sessions/session_acct").json()["children"]
    child_id, call_id = child["sessionId"], child["callId"]
    short = child_id.removeprefix("session_")
    meta = page.locator(".meta")
    expect(meta).to_contain_text(f"delegated to {short}")
    expect(meta.get_by_role("link", name=short)).to_have_attribute(
        "href", f"#/sessions/{child_id}")
    # The delegated call's card says where it ran, with a link to the child.
    call = timeline.locator(":scope > li.tool-entry").filter(
        has=page.locator(".tool-name", has_text=re.compile("^audit$")))
    expect(call.locator("details.tool summary .chip")).to_have_text("returned")
    ran = call.locator(".delegation")
    expect(ran).to_have_text(f"ran in child session {short}")
    expect(ran.get_by_role("link", name=short)).to_have_attribute("href", f"#/sessions/{child_id}")
    assert own_types(page) == ["user", "tool_call", "tool_deferred", "tool_result", "assistant"]
    assert_accessible(page, "a delegating session")
    evidence(page, "44-delegation-parent")

    # Followed: the child's page names its parent, with a link back, and shows the task as
    # the user's message and the auditor's work and reply.
    meta.get_by_role("link", name=short).click()
    expect(page.locator("#session-title")).to_have_text(short, timeout=WAIT)
    child_meta = page.locator(".meta")
    expect(child_meta).to_contain_text("delegated from acct")
    expect(child_meta.get_by_role("link", name="acct")).to_have_attribute(
        "href", "#/sessions/session_acct")
    expect(child_meta).not_to_contain_text("delegated to")
    inner = conversation(page)
    expect(said(inner, "user", "audit my account")).to_be_visible(timeout=WAIT)
    expect(said(inner, "assistant", "No anomalies in 3 invoices.")).to_be_visible()
    expect(inner.locator("details.tool summary .tool-name")).to_have_text(["list_invoices"])
    assert own_types(page) == ["user", "tool_call", "tool_result", "assistant"]
    head = api(concierge_server, "GET", f"/sessions/{child_id}").json()
    assert head["parent"] == {"sessionId": "session_acct", "callId": call_id}
    assert_accessible(page, "a child session")
    evidence(page, "45-delegation-child")

    # And back to the parent by its link.
    child_meta.get_by_role("link", name="acct").click()
    expect(said(conversation(page), "assistant", AUDITED)).to_be_visible(timeout=WAIT)


def test_the_docs_picture_of_a_sub_agent_is_small() -> None:
    data = PICTURE.read_bytes()
    assert data[:8] == PNG and len(data) < 200_000, len(data)
    assert f"]({PICTURE.relative_to(ROOT / 'docs')})" in (ROOT / "docs" / "dev-server.md") \
        .read_text()
