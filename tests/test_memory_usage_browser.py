"""Memory usage in Chromium: a viewer filters MEMORY.md to the entries no agent read,
then follows a rollout's read to the entry it printed. With
MEMORYUI_SCREENSHOTS=<dir> the test also saves screenshots there."""

from __future__ import annotations

import pytest
from django.urls import reverse

from memoryui import forgetting
from memoryui.models import Membership, Role
from tests.factories import make_user
from tests.test_browser import browser, log_in  # noqa: F401 - the module's fixture
from tests.test_entry_checks_browser import shot
from tests.test_memory_usage import (  # noqa: F401 - used_layout: a fixture
    BILLING,
    ROLLBACK,
    aged,
    used_layout,
)
from tests.test_review_browser import open_page

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_viewer_finds_the_entries_never_read_and_follows_a_read_to_its_entry(
    browser,  # noqa: F811
    live_server,
    used_layout,  # noqa: F811
):
    Membership.objects.create(
        workspace=used_layout.workspace, user=make_user("ada"), role=Role.VIEWER
    )
    context, page = open_page(browser)
    try:
        log_in(page, live_server)
        args = ["agents", used_layout.pk]
        page.goto(live_server.url + reverse("memoryui:memory_md", args=args))
        assert page.locator(".entry-usage").first.inner_text().startswith("Read 3 times")
        shot(page, "usage-memory-md")
        page.select_option("select[name=usage]", "never")
        with page.expect_navigation():
            page.click("form.filters button[type=submit]")
        assert "usage=never" in page.url
        titles = page.locator("#entry-list h1").all_inner_texts()
        assert titles == ["Task Group: databases"]

        page.goto(live_server.url + reverse("memoryui:layout_usage", args=args))
        shot(page, "usage-page")
        page.goto(live_server.url + reverse("memoryui:rollout_detail", args=[*args, "r-ok"]))
        shot(page, "usage-rollout")
        with page.expect_navigation():
            page.locator(".memory-reads a", has_text=BILLING).first.click()
        assert page.locator("#entry-list").inner_text().count("Deploy billing") >= 1
    finally:
        context.close()


def test_a_forgetting_proposals_cards_say_how_often_each_removed_entry_was_read(
    browser,  # noqa: F811
    live_server,
    used_layout,  # noqa: F811
):
    Membership.objects.create(
        workspace=used_layout.workspace, user=make_user("ada"), role=Role.REVIEWER
    )
    aged(used_layout, {BILLING: 40, ROLLBACK: 5}, version_days_ago=100)
    proposal = forgetting.propose_forgetting(used_layout, 30, None)
    assert proposal is not None
    context, page = open_page(browser)
    try:
        log_in(page, live_server)
        page.goto(
            live_server.url
            + reverse("memoryui:proposal_review", args=["agents", used_layout.pk, proposal.pk])
        )
        shot(page, "usage-review")
        badges = page.locator("article.review-entry .entry-read").all_inner_texts()
        assert sorted(badges) == ["never read", "never read", "read 2 times"]
    finally:
        context.close()
