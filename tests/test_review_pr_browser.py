"""Reviewing like a pull request, in Chromium: *Request changes* from the submit dialog
by keyboard, and what the next proposal shows of it.

MEMORYUI_SCREENSHOTS=<dir> the tests also save screenshots there."""

from __future__ import annotations

import pytest

from memoryui.models import Comment, EntryDecision, Membership, Proposal, RejectedEntry
from tests.review_world import build
from tests.test_agent_proposals_browser import shot
from tests.test_browser import browser, log_in  # noqa: F401 - the module's fixture
from tests.test_review_browser import (  # noqa: F401 - the module's fixture
    Hold,
    focused,
    open_page,
    review_layout,
    review_url,
    settled,
    until,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_request_changes_by_keyboard_closes_the_proposal_and_the_next_one_shows_it(
    browser,  # noqa: F811
    live_server,
    review_layout,  # noqa: F811
):
    proposal = build(review_layout, 4)
    context, page = open_page(browser)
    try:
        log_in(page, live_server)
        page.goto(review_url(live_server, proposal))
        page.keyboard.press("j")
        card = focused(page)
        page.keyboard.press("r")
        settled(page, card, "reject")
        page.keyboard.press("s")
        page.wait_for_selector("#review-dialog[open] #request-changes")
        page.focus("#request-changes summary")
        page.keyboard.press("Enter")  # opens the fold
        page.keyboard.press("Tab")  # to the message
        assert page.evaluate("document.activeElement.id") == "changes-message"
        page.keyboard.type("Keep group 000 as people wrote it.")
        shot(page, "request-changes-dialog")
        with page.expect_navigation():
            page.keyboard.press("Control+Enter")
        page.wait_for_selector("#changes-requested")
        assert "Changes requested" in page.inner_text("h1")
        assert "Keep group 000 as people wrote it." in page.inner_text("#changes-requested")
        assert not page.locator("#submit-review").count()  # closed: nothing to approve

        proposal.refresh_from_db()
        assert proposal.status == Proposal.Status.CHANGES_REQUESTED
        assert RejectedEntry.objects.filter(proposal=proposal).count() == 1

        user = Membership.objects.get().user
        second = build(review_layout, 4, user=user)
        page.goto(review_url(live_server, second))
        notice = page.inner_text("#answering-request")
        assert notice == (
            f"Changes requested on proposal #{proposal.pk} by ada: "
            "Keep group 000 as people wrote it."
        )
        shot(page, "review-answering-request")
        with page.expect_navigation():
            page.click(f"#answering-request a >> text=proposal #{proposal.pk}")
        assert page.url.endswith(f"/proposals/{proposal.pk}/")
    finally:
        context.close()


def test_a_line_comment_by_keyboard_is_shown_at_its_line_and_kept_on_reload(
    browser,  # noqa: F811
    live_server,
    review_layout,  # noqa: F811
):
    proposal = build(review_layout, 3)
    context, page = open_page(browser)
    try:
        log_in(page, live_server)
        page.goto(review_url(live_server, proposal))
        page.keyboard.press("j")
        page.keyboard.press("j")  # the second entry
        card = focused(page)
        page.keyboard.press("c")
        page.keyboard.type("Which model is this?")
        page.keyboard.press("Tab")  # to "On line"
        page.keyboard.type("3")
        page.keyboard.press("Control+Enter")
        row = f"#{card} table.diff tr.line-comments"
        page.wait_for_selector(row)
        # Right under the diff's line 3, the one it is about.
        above = page.evaluate(
            "sel => document.querySelector(sel).previousElementSibling.innerText", row
        )
        assert "scope: model 1" in above and "3" in above
        assert "Which model is this?" in page.inner_text(row)
        page.reload()
        page.wait_for_selector(row)
        assert "rita" not in page.inner_text(row) and "ada" in page.inner_text(row)
        # A click on a right-hand line number starts a comment on that line.
        page.click(f"#{card} table.diff tr:first-child td.no >> nth=1")
        assert page.input_value(f"#{card} details.comment-form input[name=line]") == "1"
        assert page.evaluate("document.activeElement.name") == "text"
        page.evaluate("id => document.getElementById(id).scrollIntoView()", card)
        shot(page, "review-line-comment")
    finally:
        context.close()
    comment = Comment.objects.get()
    assert (comment.line, comment.line_text) == (3, "scope: model 1")


def test_keys_typed_while_the_edit_form_loads_are_its_text_never_decisions(
    browser,  # noqa: F811
    live_server,
    review_layout,  # noqa: F811
):
    proposal = build(review_layout, 3)
    context, page = open_page(browser)
    edit_form = Hold(page, "**/edit/?*")
    try:
        log_in(page, live_server)
        page.goto(review_url(live_server, proposal))
        edit_form.armed = True  # its answer waits
        page.keyboard.press("j")
        card = focused(page)
        page.keyboard.press("e")
        page.keyboard.type(" ar")  # a (accept) and r (reject), were they shortcuts
        edit_form.wait(page, "the edit form's request")
        assert page.get_attribute(f"#{card}", "data-decided") == ""
        edit_form.held[0].continue_()
        until(page, "() => document.activeElement.name === 'edited_text'")
        assert page.input_value(f"#{card} textarea[name=edited_text]").endswith(" ar")
        page.keyboard.press("Control+Enter")
        settled(page, card, "edited")
    finally:
        context.close()
    assert EntryDecision.objects.get().edited_text.endswith(" ar")


@pytest.mark.parametrize("slower", [1, 6], ids=["as-is", "cpu-6x-slower"])
def test_keys_typed_while_an_action_is_on_its_way_run_in_order_once_it_is_done(
    browser,  # noqa: F811
    live_server,
    review_layout,  # noqa: F811
    slower: int,
):
    """An undo whose answer is slow, then "a" for the same entry and "a" for the next:
    htmx would drop a second request from the card's form, and the focus moves only
    once the undo is done; the keys wait their turn and both entries are accepted.
    Also on a slow computer (Chromium's CPU six times slower), where the page's live
    refreshes and its own answers overlap most."""
    proposal = build(review_layout, 3)
    context, page = open_page(browser)
    context.new_cdp_session(page).send("Emulation.setCPUThrottlingRate", {"rate": slower})
    undo = Hold(page, "**/undo/")
    try:
        log_in(page, live_server)
        page.goto(review_url(live_server, proposal))
        page.keyboard.press("n")
        first = focused(page)
        page.keyboard.press("r")
        settled(page, first, "reject")
        second = focused(page)
        page.keyboard.press("k")
        assert focused(page) == first
        undo.armed = True  # its answer waits
        page.keyboard.press("u")
        undo.wait(page, "the undo")
        page.keyboard.press("a")  # this entry, again
        page.keyboard.press("a")  # then the next one
        page.wait_for_timeout(300)
        assert page.get_attribute(f"#{second}", "data-decided") == ""
        undo.held[0].continue_()
        settled(page, first, "accept")
        settled(page, second, "accept")
    finally:
        context.close()
    decided = dict(EntryDecision.objects.values_list("key", "decision"))
    assert sorted(decided.values()) == ["accept", "accept"]
