"""Memory usage in Chromium: a viewer filters MEMORY.md to the entries no agent read,
then follows a rollout's read to the entry it printed. With
MEMORYUI_SCREENSHOTS=<dir> the test also saves screenshots there."""

from __future__ import annotations

from pathlib import Path

import pytest
from agents.sandbox.util.token_truncation import formatted_truncate_text_with_token_count
from django.urls import reverse

from memoryui import forgetting
from memoryui.importer import import_workspace
from memoryui.models import Membership, Role
from tests.factories import make_user
from tests.test_browser import browser, log_in  # noqa: F401 - the module's fixture
from tests.test_entry_checks_browser import shot
from tests.test_memory_usage import (  # noqa: F401 - used_layout: a fixture
    BILLING,
    DEPLOYS,
    MEMORY_MD,
    ORDERS,
    ROLLBACK,
    aged,
    rollout_line,
    used_layout,
    write_rollout,
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


def test_a_viewer_sees_that_a_cut_output_read_only_the_head_and_tail_of_memory(
    browser,  # noqa: F811
    live_server,
    used_layout,  # noqa: F811
):
    """An agent's ``cat MEMORY.md`` the shell tool cut to its ``max_output_tokens``: the
    rollout page says so, and links only the entries of the head and tail it showed."""
    Membership.objects.create(
        workspace=used_layout.workspace, user=make_user("ada"), role=Role.VIEWER
    )
    output, _ = formatted_truncate_text_with_token_count(MEMORY_MD, 20)
    root = Path(used_layout.workspace.source_path)
    write_rollout(
        root,
        "r-cut",
        rollout_line(
            "r-cut", "2026-11-05T10:00:00+00:00", "completed", ("cat memories/MEMORY.md", output)
        ),
    )
    import_workspace(root, "agents")
    context, page = open_page(browser)
    try:
        log_in(page, live_server)
        args = ["agents", used_layout.pk, "r-cut"]
        page.goto(live_server.url + reverse("memoryui:rollout_detail", args=args))
        reads = page.locator(".memory-reads").first
        assert "(the head and tail of a cut output)" in reads.inner_text()
        assert reads.locator("a").all_inner_texts()[1:] == [DEPLOYS, ORDERS]
        shot(page, "usage-rollout-cut")
    finally:
        context.close()
