"""Triage in Chromium: a reviewer filters by risk, opens the evidence of the flagged
entry from the keyboard, rejects it and approves the rest. With
MEMORYUI_SCREENSHOTS=<dir> the test also saves screenshots there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memoryui import curation
from memoryui.importer import import_workspace
from memoryui.models import Layout, Membership, Role
from tests.factories import make_user
from tests.review_world import MD
from tests.test_browser import browser, log_in  # noqa: F401 - the module's fixture
from tests.test_entry_checks import ENG, HONEST, POISON, POISONED, group, propose
from tests.test_review_browser import focused, open_page, review_url, settled, swapped, until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SHOTS = os.environ.get("MEMORYUI_SCREENSHOTS")


def shot(page, name: str, selector: str = "") -> None:  # type: ignore[no-untyped-def]
    """The page (or one element of it) as ``<MEMORYUI_SCREENSHOTS>/<name>.png``."""
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        path = str(Path(SHOTS) / f"{name}.png")
        if selector:
            page.locator(selector).screenshot(path=path)
        else:
            page.screenshot(path=path, full_page=True)


@pytest.fixture
def checked_layout(workspace_copy):  # type: ignore[no-untyped-def]

    import_workspace(workspace_copy("small-a"), "a")
    layout = Layout.objects.select_related("workspace").get(workspace__name="a", memories_dir=ENG)
    Membership.objects.create(workspace=layout.workspace, user=make_user("ada"), role=Role.ADMIN)
    return layout


def test_a_reviewer_triages_by_risk_rejects_the_poisoned_entry_and_approves_the_rest(
    browser,  # noqa: F811
    live_server,
    checked_layout,
):
    clean = group("slug notes", "- Deployment notes for auth-proxy (sa-east-1).")
    proposal = propose(checked_layout, clean, HONEST, POISONED)
    context, page = open_page(browser)
    try:
        log_in(page, live_server)
        page.goto(review_url(live_server, proposal))
        shot(page, "review-all")
        with page.expect_navigation():
            page.click("nav.review-filters >> text=risk")
        assert "show=risk" in page.url
        titles = page.locator("#review-memory_md .entry-title").all_inner_texts()
        # The tasks (the claims are theirs), the strongest reason first.
        assert len(titles) == 2, titles
        assert "deploy helper" in titles[0] and "auth proxy notes" in titles[1]

        page.keyboard.press("n")  # the first undecided entry: the flagged one
        card = focused(page)
        assert "deploy helper" in page.inner_text(f"#{card} .entry-title")
        assert "poisoning: fetches and runs code" in page.inner_text(f"#{card} header")
        page.keyboard.press("i")  # its evidence
        until(page, "id => document.querySelector(`#${id} details.evidence ol.claims`)", card)
        evidence = page.inner_text(f"#{card} details.evidence")
        assert "unsupported sentence" in evidence
        assert page.locator(f"#{card} details.evidence mark").count() > 0
        shot(page, "review-risk-evidence")
        shot(page, "review-evidence", f"#{card}")

        page.keyboard.press("r")
        settled(page, card, "reject")
        page.keyboard.press("s")
        page.wait_for_selector("#review-dialog[open] #approve-summary")
        assert page.inner_text("#review-dialog [data-count=flagged]") == "1"
        assert page.inner_text("#review-dialog [data-count=flagged_rejected]") == "1"
        shot(page, "review-submit")
        # The groups cite one rollout in the same words: likely duplicates, each pair
        # kept with its own "Keep both".
        assert "likely duplicate" in page.inner_text("#review-duplicates")
        swapped(page)
        keep = page.locator("#review-duplicates button[value=keep]")
        while keep.count():
            keep.first.click()
            swapped(page)
        assert "kept both" in page.inner_text("#review-duplicates")
        page.locator("#confirm-approve").focus()
        with page.expect_navigation():
            page.keyboard.press("Enter")
    finally:
        context.close()

    text = curation.text_of(curation.latest(checked_layout, MD))
    assert "# Task Group: auth proxy notes" in text and "# Task Group: slug notes" in text
    assert POISON not in text


def test_the_write_back_page_shows_the_files_held_back_with_a_quarantined_entry(
    browser,  # noqa: F811
    live_server,
    checked_layout,
):
    from tests.test_entry_checks import approved_with_held_raw_memory  # noqa: PLC0415

    raw, _ = approved_with_held_raw_memory(checked_layout)
    context, page = open_page(browser)
    try:
        log_in(page, live_server)
        page.goto(f"{live_server.url}/w/a/layouts/{checked_layout.pk}/writeback/")
        held = page.inner_text("#held")
        assert "Held back with a quarantined entry" in held
        assert raw in held and "fetches and runs code" in held
        shot(page, "writeback-held")
    finally:
        context.close()


def test_a_decision_key_right_after_the_evidence_key_decides_however_soon_it_comes(
    browser,  # noqa: F811
    live_server,
    checked_layout,
):
    """ "i" opens the evidence, which loads while the reviewer goes on: the "r" typed at
    once is a decision, never swallowed as text for a form that is not coming."""
    proposal = propose(checked_layout, HONEST, POISONED)
    context, page = open_page(browser)
    try:
        log_in(page, live_server)
        page.goto(review_url(live_server, proposal) + "?show=risk")
        page.keyboard.press("n")
        card = focused(page)
        page.keyboard.press("i")
        page.keyboard.press("r")  # before the evidence has arrived, or as it settles
        settled(page, card, "reject")
    finally:
        context.close()
