"""The review page in Chromium: a whole 200-entry review by keyboard alone, decisions
that change nothing but their entry (no navigation, same scroll position), the
submit-review summary, and no horizontal overflow on a desktop or a phone."""

from __future__ import annotations

import time

import pytest
from django.urls import reverse

from generation import review
from memoryui import curation
from memoryui.importer import import_workspace
from memoryui.models import Comment, EntryView, Layout, Membership, Pin, Proposal, Role
from memoryui.review_cards import key_slug
from tests import test_reviewer_case as case
from tests.factories import make_user
from tests.review_world import MD, build, proposal_over
from tests.test_browser import browser, log_in  # noqa: F401 - the module's fixture
from tests.test_task_review import CHANGES, World, label

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def review_layout(workspace_copy):  # type: ignore[no-untyped-def]
    import_workspace(workspace_copy("small-a"), "a")
    layout = Layout.objects.select_related("workspace").get(
        workspace__name="a", memories_dir="memories/engineering"
    )
    Membership.objects.create(workspace=layout.workspace, user=make_user("ada"), role=Role.ADMIN)
    return layout


def open_page(browser, width: int = 1440, height: int = 900):  # type: ignore[no-untyped-def]  # noqa: F811
    context = browser.new_context(viewport={"width": width, "height": height})
    return context, context.new_page()


class Hold:
    """Requests to ``pattern`` whose answers wait while armed (``route.continue_()``
    sends one on). Routed from before the page loads: Chromium turns interception on
    for a page's requests asynchronously, so a route added later can miss a request
    the page sends right after (on a slow renderer, it often does)."""

    def __init__(self, page, pattern: str) -> None:  # type: ignore[no-untyped-def]
        self.armed = False
        self.held: list = []  # type: ignore[type-arg]
        page.route(pattern, self._route)

    def _route(self, route) -> None:  # type: ignore[no-untyped-def]
        if self.armed:
            self.held.append(route)
        else:
            route.continue_()

    def wait(self, page, what: str) -> None:  # type: ignore[no-untyped-def]
        for _ in range(50):  # the route's handler runs once the request goes out
            if self.held:
                return
            page.wait_for_timeout(100)
        raise AssertionError(f"{what} was not sent")


def review_url(live_server, proposal: Proposal, query: str = "") -> str:
    layout = proposal.layout
    path = reverse("memoryui:proposal_review", args=["a", layout.pk, proposal.pk])
    return f"{live_server.url}{path}{query}"


def swapped(page) -> None:  # type: ignore[no-untyped-def]
    """Wait until no htmx request, swap or settle is under way (htmx:afterSettle, where
    review.js moves the focus, has run)."""
    until(page, "() => !document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling')")


def until(page, predicate: str, arg=None, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    """Poll ``predicate`` (wait_for_function evaluates strings, which the page's CSP
    forbids)."""
    deadline = time.monotonic() + timeout
    while not page.evaluate(predicate, arg):
        assert time.monotonic() < deadline, predicate
        time.sleep(0.01)


def settled(page, card: str, expect: str) -> None:  # type: ignore[no-untyped-def]
    """The card shows the decision and the focus moved on (or, the page's last
    undecided entry decided, stays on it)."""
    until(
        page,
        """([id, expect]) => {
            const card = document.getElementById(id);
            const now = document.activeElement;
            const left = document.querySelectorAll("[data-entry][data-decided='']").length;
            return card && card.dataset.decided === expect
                && now.dataset.entry !== undefined
                && (now.id !== id || left === 0);
        }""",
        [card, expect],
    )


def focused(page) -> str:  # type: ignore[no-untyped-def]
    return page.evaluate("document.activeElement.id")


def test_a_whole_review_by_keyboard_from_opening_to_approval(
    browser,  # noqa: F811
    live_server,
    review_layout,
):
    proposal = build(review_layout, 200)
    context, page = open_page(browser)
    mouse_events: list[str] = []
    try:
        log_in(page, live_server)
        page.goto(review_url(live_server, proposal))
        page.evaluate(
            "for (const t of ['mousedown', 'click']) document.addEventListener(t, "
            "e => { if (e.detail > 0) window.__mouse = (window.__mouse || 0) + 1; }, true)"
        )

        def decide(key: str, expect: str) -> str:
            card = focused(page)
            page.keyboard.press(key)
            settled(page, card, expect)
            return card

        page.keyboard.press("n")  # the first undecided entry
        for i in range(190):
            if i and i % 25 == 0:  # the page is done: on to the next one
                with page.expect_navigation():
                    page.keyboard.press("n")
                until(page, "() => document.activeElement.dataset.entry !== undefined")
                mouse_events.append(str(page.evaluate("window.__mouse || 0")))
                page.evaluate(
                    "for (const t of ['mousedown', 'click']) document.addEventListener(t, "
                    "e => { if (e.detail > 0) window.__mouse = (window.__mouse || 0) + 1; }, true)"
                )
            assert f"group {i:03d}" in page.inner_text(f"#{focused(page)} .entry-title")
            if i == 3:  # reject, go back, undo, accept
                decide("r", "reject")
                page.keyboard.press("k")
                card = focused(page)
                page.keyboard.press("u")
                page.wait_for_selector(f"#{card}[data-decided='']")
                assert focused(page) == card
                # The undo's request over (its answer is swapped in before htmx lets
                # the card's form send again).
                until(page, "() => !document.querySelector('.htmx-request')")
                decide("a", "accept")
            elif i == 7:  # edit, then accept
                card = focused(page)
                page.keyboard.press("e")
                until(page, "() => document.activeElement.name === 'edited_text'")
                page.keyboard.press("Control+Home")
                page.keyboard.press("ArrowDown")
                page.keyboard.press("ArrowDown")
                page.keyboard.press("End")
                page.keyboard.type(" (edited)")
                page.keyboard.press("Control+Enter")
                settled(page, card, "edited")
            else:
                decide("r" if i % 5 == 0 else "a", "reject" if i % 5 == 0 else "accept")
        assert "190 of 200 decided" in page.inner_text("#review-progress")

        page.keyboard.press("s")  # submit the review: the summary, as a dialog
        page.wait_for_selector("#review-dialog[open] #approve-summary")
        swapped(page)  # the dialog's focus is on the choice for undecided entries
        assert page.inner_text("#review-dialog [data-count=undecided]") == "10"
        page.keyboard.press("ArrowDown")  # keep the current text of the undecided ten
        assert page.evaluate("document.activeElement.value") == "reject"
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.id") == "confirm-approve"
        with page.expect_navigation():
            page.keyboard.press("Enter")
        assert page.url == live_server.url + reverse(
            "memoryui:memory_md", args=["a", proposal.layout_id]
        )
        mouse_events.append(str(page.evaluate("window.__mouse || 0")))
    finally:
        context.close()

    assert set(mouse_events) == {"0"}
    proposal.refresh_from_db()
    assert proposal.status == "approved"
    text = curation.text_of(curation.latest(review_layout, MD))
    for i in range(200):
        if i == 7:
            expected = "scope: model 7 (edited)\n"
        elif i >= 190 or i % 5 == 0:
            expected = f"scope: person {i}\n"
        else:
            expected = f"scope: model {i}\n"
        assert expected in text, i


def test_a_decision_on_page_three_keeps_the_page_and_its_scroll_position(
    browser,  # noqa: F811
    live_server,
    review_layout,
):
    proposal = build(review_layout, 80)
    context, page = open_page(browser)
    navigations: list[str] = []
    try:
        log_in(page, live_server)
        url = review_url(live_server, proposal, "?page_memory_md=3")
        page.goto(url)
        page.on("framenavigated", lambda frame: navigations.append(frame.url))
        page.evaluate("window.__marker = 'still here'")
        cards = page.locator("article[data-entry]")
        target = cards.nth(5)
        card_id = target.get_attribute("id")
        next_id = cards.nth(6).get_attribute("id")
        page.evaluate(
            "id => window.scrollTo(0, document.getElementById(id).offsetTop - 120)", card_id
        )
        before = page.evaluate("window.scrollY")

        page.click(f"#{card_id} button.decide.accept")
        page.wait_for_selector(f"#{card_id}[data-decided='accept']")

        assert page.evaluate("window.__marker") == "still here"
        assert navigations == [] and page.url == url
        assert page.evaluate("window.scrollY") == before
        assert focused(page) == next_id  # on to the next undecided entry
        assert page.get_attribute(f"#{card_id} button.decide.accept", "aria-pressed") == "true"
        assert "1 of 80 decided" in page.inner_text("#review-progress")
        assert "page 3 of 4" in page.inner_text("#review-memory_md")
    finally:
        context.close()


def test_the_submit_summary_shows_the_counts_and_going_back_closes_it(
    browser,  # noqa: F811
    live_server,
    review_layout,
):
    proposal = build(review_layout, 12)
    keys = [c.key for c in curation.decidable(curation.document_reviews(proposal)[0])]
    user = Membership.objects.get().user
    curation.decide(proposal, MD, keys[0], "accept", user=user)
    curation.decide(proposal, MD, keys[1], "reject", user=user)
    context, page = open_page(browser)
    try:
        log_in(page, live_server)
        page.goto(review_url(live_server, proposal))
        page.keyboard.press("?")
        page.wait_for_selector("#review-help[open]")
        assert "next undecided entry" in page.inner_text("#review-help")
        page.keyboard.press("Escape")
        page.wait_for_selector("#review-help", state="hidden")
        page.keyboard.press("s")
        page.wait_for_selector("#review-dialog[open] #approve-summary")
        counts = {
            name: page.inner_text(f"#review-dialog [data-count={name}]")
            for name in ("accepted", "rejected", "undecided", "not_viewed")
        }
        # The two entries the person decided count as viewed by them.
        assert counts == {"accepted": "1", "rejected": "1", "undecided": "10", "not_viewed": "10"}
        page.keyboard.press("Escape")
        page.wait_for_selector("#review-dialog", state="hidden")
        assert Proposal.objects.get().status == "pending"
    finally:
        context.close()


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_no_horizontal_overflow_with_200_citations_and_long_lines(
    browser,  # noqa: F811
    live_server,
    review_layout,
    width,
    height,
):
    long = (
        "# Task Group: " + "unbroken" * 40 + "\n\nscope: " + "x" * 3000 + "\n\n"
        "- " + "/very/long/path" * 200 + "\n"
    )
    proposal = build(review_layout, 3, cites={1: 200}, extra=long)
    context, page = open_page(browser, width, height)
    try:
        log_in(page, live_server)
        page.goto(review_url(live_server, proposal))
        for details in page.locator("article[data-entry] details").all():
            details.evaluate("d => d.open = true")
        assert page.locator("details.cites-fold summary").first.inner_text() == (
            "200 cited rollouts"
        )
        sizes = page.evaluate(
            "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        assert sizes[0] <= sizes[1], sizes
    finally:
        context.close()


def test_shortcuts_mark_viewed_pin_comment_and_escape_cancels_an_edit(
    browser,  # noqa: F811
    live_server,
    review_layout,
):

    proposal = build(review_layout, 5)
    context, page = open_page(browser)
    try:
        log_in(page, live_server)
        page.goto(review_url(live_server, proposal))
        page.keyboard.press("j")
        page.keyboard.press("j")  # the second entry
        card = focused(page)
        assert "group 001" in page.inner_text(f"#{card} .entry-title")
        page.keyboard.press("v")
        page.wait_for_selector(f"#{card}.viewed")
        until(page, "id => document.activeElement.id === id", card)
        page.keyboard.press("p")
        page.wait_for_selector(f"#{card} .badge.pin")
        until(page, "id => document.activeElement.id === id", card)
        page.keyboard.press("e")
        until(page, "() => document.activeElement.name === 'edited_text'")
        page.keyboard.press("Escape")
        assert focused(page) == card
        assert not page.locator(f"#{card} details.edit-then-accept").evaluate("d => d.open")
        page.keyboard.press("c")
        page.keyboard.type("Check the date")
        page.keyboard.press("Control+Enter")
        page.wait_for_selector(f"#{card} .comment >> text=Check the date")
        assert "0 of 5 decided · 1 viewed" in page.inner_text("#review-progress")
        page.click(f"#{card} details.rendered summary")  # rendered when opened
        page.wait_for_selector(f"#{card} details.rendered .markdown h1 >> text=group 001")
        page.click("#reject-proposal")
        page.wait_for_selector("#review-dialog[open] #reject-confirm")
        assert "stay exactly as they are now" in page.inner_text("#reject-confirm")
    finally:
        context.close()
    assert EntryView.objects.count() == Pin.objects.count() == Comment.objects.count() == 1
    assert Proposal.objects.get().status == "pending"


def test_listing_undecided_entries_n_goes_on_to_the_next_undecided_ones(
    browser,  # noqa: F811
    live_server,
    review_layout,
):
    proposal = build(review_layout, 27)
    context, page = open_page(browser)
    try:
        log_in(page, live_server)
        page.goto(review_url(live_server, proposal, "?show=undecided"))
        page.keyboard.press("n")
        for _ in range(25):
            card = focused(page)
            page.keyboard.press("a")
            settled(page, card, "accept")
        with page.expect_navigation():
            page.keyboard.press("n")
        until(page, "() => document.activeElement.dataset.entry !== undefined")
        assert "group 025" in page.inner_text(f"#{focused(page)} .entry-title")
        assert page.locator("article[data-entry]").count() == 2  # the two left
    finally:
        context.close()


def test_reviewing_tasks_by_keyboard_to_approval_through_a_duplicate_warning(
    browser,  # noqa: F811
    live_server,
    review_layout,
    fixtures_dir,
):

    world = World(fixtures_dir)
    proposal = proposal_over(review_layout, world.base, world.apply(CHANGES | {"duplicate"}))
    changes = [c for c in review.compare(world.base, proposal.memory_md) if c.status != "unchanged"]
    labels = {
        f"entry-{MD}-{key_slug(c.key)}": "duplicate"
        if c.status == "added" and "again" in c.title
        else label(c, world)
        for c in changes
    }
    accepted = {"reword jobkit bug fixes", "insert", "rename", "merge", "duplicate"}
    context, page = open_page(browser)
    try:
        log_in(page, live_server)
        page.goto(review_url(live_server, proposal))
        page.keyboard.press("n")
        for _ in range(len(changes)):
            card = focused(page)
            key = "a" if labels[card] in accepted else "r"
            page.keyboard.press(key)
            settled(page, card, "accept" if key == "a" else "reject")
        # The meter comes with the decision's answer; a live poll that saw the decision
        # first may have drawn the card before that answer arrived.
        until(
            page,
            "(text) => document.getElementById('review-progress').innerText.includes(text)",
            f"{len(changes)} of {len(changes)} decided",
        )

        page.keyboard.press("s")
        page.wait_for_selector("#review-dialog[open] #review-duplicates")
        swapped(page)
        warning = page.inner_text("#review-duplicates")
        assert "1 likely duplicate" in warning and "again" in warning
        assert page.evaluate("document.activeElement.id") == "confirm-approve"
        page.keyboard.press("Enter")  # not ticked: refused, the dialog says so
        page.wait_for_selector("#review-dialog[open] #review-duplicates [role=alert]")
        swapped(page)  # the refusal's focus has moved before the keys go on
        until(page, "() => document.activeElement.id === 'confirm-approve'")
        # No blanket tick: the pair's own "Not a duplicate" lets approval through.
        assert page.locator("#duplicates-ok").count() == 0
        page.click("#review-duplicates button[value=different]")
        swapped(page)
        assert "not a duplicate" in page.inner_text("#review-duplicates")
        page.locator("#confirm-approve").focus()
        with page.expect_navigation():
            page.keyboard.press("Enter")
    finally:
        context.close()

    proposal.refresh_from_db()
    assert proposal.status == "approved"
    assert curation.text_of(curation.latest(review_layout, MD)) == world.apply(accepted)


def test_the_duplicate_badge_follows_the_decision_on_the_copy(
    live_server,
    browser,  # noqa: F811
    review_layout,
    fixtures_dir,
):
    world = World(fixtures_dir)
    proposal = proposal_over(review_layout, world.base, world.apply({"duplicate"}))
    [copy] = [c for c in review.compare(world.base, proposal.memory_md) if c.status == "added"]
    card = f"entry-{MD}-{key_slug(copy.key)}"
    context, page = open_page(browser)
    try:
        log_in(page, live_server)
        page.goto(review_url(live_server, proposal))
        page.click(f"#{card} button[value=reject]")
        settled(page, card, "reject")
        rejected = page.locator(f"#{card} .duplicate-of").count()
        page.click(f"#{card} button[value=accept]")
        settled(page, card, "accept")
        badge = page.inner_text(f"#{card} .duplicate-of")
        page.locator(f"#{card}").screenshot(path="/tmp/shots32/review-duplicate-badge.png")
    finally:
        context.close()

    assert rejected == 0  # a rejected copy duplicates nothing
    assert badge.startswith("duplicate of") and "Task 1: fix-slugify" in badge


def test_the_result_view_shows_a_rejected_deletions_task_back_with_its_number(
    live_server,
    browser,  # noqa: F811
    review_layout,
    fixtures_dir,
):
    base = case.sdk_groups(fixtures_dir)
    proposal = proposal_over(review_layout, base, case.proposal_of(base))
    [deletion] = [
        c
        for c in review.compare(base, proposal.memory_md)
        if c.status != "unchanged" and case.label(c) == "deletion"
    ]
    card = f"entry-{MD}-{key_slug(deletion.key)}"
    context, page = open_page(browser)
    try:
        log_in(page, live_server)
        page.goto(review_url(live_server, proposal, "?show=all"))
        page.click(f"#{card} button[value=reject]")
        settled(page, card, "reject")
        with page.expect_navigation():
            page.click("#result-link")
        written = page.eval_on_selector_all(
            f"#result-{MD} .line:not(.removed)", "lines => lines.map(l => l.textContent)"
        )
        page.screenshot(path="/tmp/shots32/proposal-result.png")
    finally:
        context.close()

    # The deleted task is back as Task 4 of its group, and each number is written once.
    menus = written[: written.index("# Task Group: jobkit bug fixes")]
    tasks = [line for line in menus if line.startswith("## Task ")]
    assert "## Task 4: fix-slugify-unicode, outcome success" in tasks
    assert [int(t.split()[2].rstrip(":")) for t in tasks] == list(range(1, len(tasks) + 1))
