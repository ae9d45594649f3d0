"""An agent's proposal reviewed in Chromium by keyboard alone: the demo's sandbox
consolidation (sample/small-a-sandbox) from the first page after login to its approval
through the submit dialog, the flagged task rejected, the removed task kept. With
MEMORYUI_SCREENSHOTS=<dir> the test also saves the README's review screenshots there."""

from __future__ import annotations

from pathlib import Path

import pytest

from memoryui import curation
from memoryui.demo import prepare_demo_workspace
from memoryui.models import Layout, Membership, Proposal, Role
from memoryui.review_cards import key_slug
from memoryui.served_memory import served_layouts
from tests.factories import make_user
from tests.review_world import MD
from tests.test_browser import browser, log_in  # noqa: F401 - the module's fixture
from tests.test_entry_checks_browser import SHOTS
from tests.test_review_browser import focused, open_page, settled, swapped, until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def shot(page, name: str) -> None:  # type: ignore[no-untyped-def]
    """What the window shows, as ``<MEMORYUI_SCREENSHOTS>/<name>.png``."""
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"))


def test_an_agents_proposal_reviewed_by_keyboard_through_the_submit_dialog(
    browser,  # noqa: F811
    live_server,
    settings,
    tmp_path,
):
    settings.VAR_DIR = tmp_path / "var"
    workspace = prepare_demo_workspace()
    Membership.objects.create(workspace=workspace, user=make_user("ada"), role=Role.ADMIN)
    (proposal,) = Proposal.objects.all()
    layout = Layout.objects.get(pk=proposal.layout_id)
    decisions: dict[str, str] = {}
    for doc in curation.document_reviews(proposal):
        for change in curation.decidable(doc):
            card = f"entry-{doc.document}-{key_slug(change.key)}"
            # Keep what the agent removed, leave out what it added (the flagged task
            # among it), take its edits and merge; the GTM knowledge with an edit.
            if "trial_events counts" in change.proposed:
                decisions[card] = "edit"
            elif change.status in ("added", "removed") and doc.document == MD:
                decisions[card] = "reject"
            else:
                decisions[card] = "accept"
    context, page = open_page(browser)
    mouse: list[int] = []
    try:
        log_in(page, live_server)
        page.wait_for_selector("#awaiting-review")
        page.evaluate(
            "for (const t of ['mousedown', 'click']) document.addEventListener(t, "
            "e => { if (e.detail > 0) window.__mouse = (window.__mouse || 0) + 1; }, true)"
        )
        # From the first page to the review: Tab to its link, Enter.
        for _ in range(40):
            page.keyboard.press("Tab")
            if page.evaluate("document.activeElement.closest('#awaiting-review') !== null"):
                break
        with page.expect_navigation():
            page.keyboard.press("Enter")
        assert f"/proposals/{proposal.pk}/" in page.url
        assert "sandbox upload" in page.inner_text("main")
        page.keyboard.press("n")  # the first undecided entry
        for _ in range(len(decisions)):
            card = focused(page)
            if decisions[card] == "edit":
                page.keyboard.press("e")
                until(page, "() => document.activeElement.name === 'edited_text'")
                page.keyboard.press("Control+End")
                page.keyboard.type("- checked with the analytics team [Task 1]\n")
                page.keyboard.press("Control+Enter")
                settled(page, card, "edited")
            else:
                page.keyboard.press("a" if decisions[card] == "accept" else "r")
                settled(page, card, decisions[card])
        assert f"{len(decisions)} of {len(decisions)} decided" in page.inner_text(
            "#review-progress"
        )
        page.evaluate("document.querySelector(\"[data-decided='edited']\").scrollIntoView()")
        shot(page, "proposal-review")
        page.keyboard.press("s")  # the submit dialog
        page.wait_for_selector("#review-dialog[open] #approve-summary")
        swapped(page)
        shot(page, "review-submit")
        until(page, "() => document.activeElement.id === 'confirm-approve'")
        with page.expect_navigation():
            page.keyboard.press("Enter")
        mouse.append(page.evaluate("window.__mouse || 0"))
    finally:
        context.close()

    assert mouse == [0]
    proposal.refresh_from_db()
    assert proposal.status == "approved"
    (served,) = [s for s in served_layouts(workspace) if s.layout.pk == layout.pk]
    text = served.files["memories/MEMORY.md"].decode()
    assert "checked with the analytics team" in text and "trial_events counts" in text
    assert "record-user-preferences" in text  # the removal rejected
    assert "curl" not in text and "ledger-sync restarts" not in text
