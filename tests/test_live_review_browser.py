"""Live review in Chromium, two people on one proposal's review page, each in a browser
context of their own: one decides a card and the other sees it within 2 seconds without
a reload, while the other's unsaved edit of another card stays as typed; each sees where
the other is."""

from __future__ import annotations

import os
import time
from itertools import pairwise
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from memoryui import curation, live_polls, live_review
from memoryui.models import Membership, Role
from tests.factories import make_user
from tests.review_world import build
from tests.test_browser import browser, log_in  # noqa: F401 - the module's fixture
from tests.test_review_browser import open_page, review_layout, review_url, until  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = os.environ.get("MEMORYUI_SCREENSHOTS")  # a folder: keep the page's picture


def waited(page, predicate: str, arg=None, timeout: float = 2.0) -> float:  # type: ignore[no-untyped-def]
    """Seconds until ``predicate`` held (at most ``timeout``)."""
    started = time.monotonic()
    until(page, predicate, arg, timeout=timeout)
    return time.monotonic() - started


def ada_and_bob(browser, live_server, layout, entries: int):  # type: ignore[no-untyped-def]  # noqa: F811
    """A proposal of ``entries`` entries, bob a reviewer too, and a page of each of them
    (a browser context apiece): (proposal, its review URL, ada's and bob's contexts and
    pages)."""
    proposal = build(layout, entries)
    Membership.objects.create(workspace=layout.workspace, user=make_user("bob"), role=Role.REVIEWER)
    ada_context, ada = open_page(browser)
    bob_context, bob = open_page(browser)
    return proposal, review_url(live_server, proposal), ada_context, ada, bob_context, bob


class FirstCardFetch:
    """A page's first live card fetch, held: the server's answer is taken when the page
    asks and given to the page later (``give``); later fetches go through. Routed
    before the page loads (Chromium may let a request pass a route added later)."""

    def __init__(self, page) -> None:  # type: ignore[no-untyped-def]
        self.page = page
        self.held: list = []  # type: ignore[type-arg]
        page.route("**/live/card/?*", self._route)

    def _route(self, route) -> None:  # type: ignore[no-untyped-def]
        if self.held:
            route.continue_()
            return
        self.held.append((route, route.fetch()))

    def wait(self, what: str) -> str:
        """Until the page has asked; the answer the server made then."""
        deadline = time.monotonic() + 5
        while not self.held:
            assert time.monotonic() < deadline, f"the page never fetched {what}"
            self.page.wait_for_timeout(50)
        return self.held[0][1].text()

    def give(self) -> None:
        route, answer = self.held[0]
        route.fulfill(response=answer)


def both_on(url, live_server, ada, bob) -> None:  # type: ignore[no-untyped-def]
    """Ada and bob logged in, each on ``url``."""
    log_in(ada, live_server, "ada")
    log_in(bob, live_server, "bob")
    ada.goto(url)
    bob.goto(url)


@pytest.mark.parametrize("quick", [False, True], ids=["full-path", "quick-304"])
def test_a_decision_reaches_the_other_page_in_two_seconds_and_keeps_its_typed_edit(
    browser,  # noqa: F811
    live_server,
    review_layout,  # noqa: F811
    tmp_path: Path,
    quick: bool,
    settings,
    monkeypatch,
):
    """Both ways a poll is answered: every poll by the view (no shared cache), and the
    unchanged ones from the cache's stamp before the session is read."""
    settings.MEMORYUI_LIVE_FAST_POLLS = quick
    quick_answers = []

    class Counted(live_polls.HttpResponseNotModified):
        def __init__(self) -> None:
            super().__init__()
            quick_answers.append(1)

    monkeypatch.setattr(live_polls, "HttpResponseNotModified", Counted)
    proposal, url, ada_context, ada, bob_context, bob = ada_and_bob(
        browser, live_server, review_layout, 12
    )
    try:
        both_on(url, live_server, ada, bob)
        cards = ada.locator("article[data-entry]")
        first, edited, looked_at = (cards.nth(i).get_attribute("id") for i in (0, 3, 6))

        # Bob starts an edit of one card and leaves it unsaved, the cursor in it.
        bob.click(f"#{edited} details.edit-then-accept summary")
        area = f"#{edited} textarea[name=edited_text]"
        bob.click(area)
        bob.keyboard.press("Control+End")
        bob.keyboard.type(" (bob was here)")
        typed = bob.input_value(area)

        # Ada is at another card: bob sees her there, and she sees him at his.
        ada.click(f"#{looked_at} .entry-title")
        ada.focus(f"#{looked_at}")
        assert (
            waited(bob, "id => !!document.querySelector(`#${id} [data-presence=ada]`)", looked_at)
            < 2
        )
        waited(ada, "id => !!document.querySelector(`#${id} [data-presence=bob]`)", edited)
        assert "bob" in ada.inner_text("#live-people")

        # Ada accepts the first card; bob's page shows it, by ada, within 2 s.
        ada.click(f"#{first} button.decide.accept")
        ada.wait_for_selector(f"#{first}[data-decided='accept']")
        seconds = waited(
            bob,
            """id => { const c = document.getElementById(id);
                return c && c.dataset.decided === 'accept' && c.innerText.includes('by ada'); }""",
            first,
        )
        assert seconds < 2
        assert "1 of 12 decided" in bob.inner_text("#review-progress")

        # Ada accepts a card with her edit: bob sees her text.
        second = cards.nth(1).get_attribute("id")
        ada.click(f"#{second} details.edit-then-accept summary")
        ada.fill(
            f"#{second} textarea[name=edited_text]",
            "# Task Group: group 001\n\nscope: ada's words\n",
        )
        ada.click(f"#{second} details.edit-then-accept button[type=submit]")
        ada.wait_for_selector(f"#{second}[data-decided='edited']")
        waited(bob, "id => document.getElementById(id).dataset.decided === 'edited'", second)
        assert "ada's words" in bob.inner_text(f"#{second}")

        # Bob's edit is as he left it: typed, open, focused; no reload happened.
        assert bob.input_value(area) == typed
        assert bob.evaluate(f"document.querySelector('#{edited} details.edit-then-accept').open")
        assert bob.evaluate("document.activeElement.name") == "edited_text"
        assert bob.evaluate("document.activeElement.closest('article').id") == edited
        if SCREENSHOTS:
            bob.evaluate("id => document.getElementById(id).scrollIntoView()", second)
            bob.screenshot(path=str(Path(SCREENSHOTS) / "live-review-presence.png"))

        # And he can still send it.
        bob.click(f"#{edited} details.edit-then-accept button[type=submit]")
        bob.wait_for_selector(f"#{edited}[data-decided='edited']")
        waited(ada, "id => document.getElementById(id).dataset.decided === 'edited'", edited)

        # Ada reserves the proposal (from another tab, say): bob's page says so.
        curation.reserve(proposal, get_user_model().objects.get(username="ada"))
        waited(bob, "() => document.getElementById('live-notice').innerText.includes('ada is')")
        assert ada.inner_text("#live-notice") == ""
        # The pages sat still meanwhile for a while: their polls were answered early.
        time.sleep(2)
        assert bool(quick_answers) == quick

        # Bob closes his page (navigates away): ada's page drops him within 2 s.
        bob.goto("about:blank")
        assert waited(ada, "() => !document.getElementById('live-people').innerText") < 2
        assert not ada.locator("[data-presence=bob]").count()
    finally:
        ada_context.close()
        bob_context.close()
    decisions = {d.key: (d.user.username, d.edited_text) for d in proposal.decisions.all()}
    assert len(decisions) == 3
    assert any(user == "bob" and "(bob was here)" in text for user, text in decisions.values())


def test_a_slow_server_does_not_slow_the_polls_down_nor_gets_them_back_to_back(
    browser,  # noqa: F811
    live_server,
    review_layout,  # noqa: F811
    settings,
    monkeypatch,
):
    """The page polls once a second counted from each poll's start: an answer that
    takes 0.6 s does not make the others' changes take 1.6 s to show. An answer slower
    than the interval is followed by a short pause, never by the next poll at once."""
    settings.MEMORYUI_LIVE_FAST_POLLS = False  # every poll reaches the (slow) view
    delay = [0.6]
    real_state = live_review.state

    def slow_state(*args, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(delay[0])
        return real_state(*args, **kwargs)

    monkeypatch.setattr(live_review, "state", slow_state)
    proposal = build(review_layout, 3)
    context, page = open_page(browser)
    sent: list[float] = []
    page.on(
        "request",
        lambda request: "/live/?" in request.url and sent.append(time.monotonic()),
    )
    try:
        log_in(page, live_server, "ada")
        page.goto(review_url(live_server, proposal))
        page.wait_for_timeout(5000)
        quick = [b - a for a, b in pairwise(sent[1:])]
        assert len(quick) >= 2, sent
        assert all(0.85 < gap < 1.35 for gap in quick), quick  # 1.6 s if counted from the answer

        delay[0] = 1.3  # slower than the interval: answer, a pause, the next poll
        page.wait_for_timeout(1500)  # the polls sent before the change have been answered
        sent.clear()
        page.wait_for_timeout(6000)
        slow = [b - a for a, b in pairwise(sent)]
        assert len(slow) >= 2, sent
        assert all(1.45 < gap < 2.0 for gap in slow), slow
    finally:
        context.close()


def test_a_card_decided_while_a_live_refresh_of_it_was_on_its_way_keeps_the_decision(
    browser,  # noqa: F811
    live_server,
    review_layout,  # noqa: F811
):
    """Bob comments on a card; ada's page fetches the card to show his comment, and
    that answer is slow. Meanwhile ada accepts the card. The late answer (the card
    undecided, with bob's comment) never replaces her newer one: her page shows her
    accept throughout, and bob's comment too."""
    proposal, url, ada_context, ada, bob_context, bob = ada_and_bob(
        browser, live_server, review_layout, 4
    )
    fetch = FirstCardFetch(ada)
    try:
        both_on(url, live_server, ada, bob)
        card = ada.locator("article[data-entry]").nth(1).get_attribute("id")
        assert ada.get_attribute("#live-review", "data-card-url").endswith("/live/card/")

        bob.keyboard.press("j")
        bob.keyboard.press("j")
        assert bob.evaluate("document.activeElement.id") == card
        bob.keyboard.press("c")
        bob.keyboard.type("Is this still true?")
        bob.keyboard.press("Control+Enter")
        bob.wait_for_selector(f"#{card} :text('Is this still true?')")
        answer = fetch.wait("the card")

        ada.click(f"#{card} button.decide.accept")
        ada.wait_for_selector(f"#{card}[data-decided='accept']")
        assert "Is this still true?" in answer
        fetch.give()  # the late answer: undecided, with bob's comment
        shown = []  # what her card says over the next 1.5 s
        for _ in range(15):
            ada.wait_for_timeout(100)
            shown.append(ada.get_attribute(f"#{card}", "data-decided"))
        assert set(shown) == {"accept"}
        assert "Is this still true?" in ada.inner_text(f"#{card}")
    finally:
        ada_context.close()
        bob_context.close()
    decision = proposal.decisions.get()
    assert (decision.decision, decision.user.username) == ("accept", "ada")


def test_a_late_live_refresh_never_sets_the_progress_bar_back(
    browser,  # noqa: F811
    live_server,
    review_layout,  # noqa: F811
):
    """Bob accepts a card; ada's page fetches it to show his decision, and that answer
    is slow. Meanwhile ada accepts another card: her bar says 2 of 4. The late answer,
    whose bar said 1 of 4 when the server made it, never sets her bar back; his accept
    shows on the card."""
    proposal, url, ada_context, ada, bob_context, bob = ada_and_bob(
        browser, live_server, review_layout, 4
    )
    fetch = FirstCardFetch(ada)
    try:
        both_on(url, live_server, ada, bob)
        bobs, adas = (ada.locator("article[data-entry]").nth(i).get_attribute("id") for i in (1, 2))

        bob.keyboard.press("j")
        bob.keyboard.press("j")
        assert bob.evaluate("document.activeElement.id") == bobs
        bob.keyboard.press("a")
        bob.wait_for_selector(f"#{bobs}[data-decided='accept']")
        answer = fetch.wait("bob's card")

        ada.click(f"#{adas} button.decide.accept")
        ada.wait_for_selector(f"#{adas}[data-decided='accept']")
        assert "2 of 4 decided" in ada.inner_text("#review-progress")
        assert "1 of 4 decided" in answer  # made before ada's accept
        fetch.give()
        shown = []  # what her bar says over the next 1.5 s
        for _ in range(15):
            ada.wait_for_timeout(100)
            shown.append(ada.inner_text("#review-progress").split(" · ")[0])
        assert set(shown) == {"2 of 4 decided"}
        assert ada.get_attribute(f"#{bobs}", "data-decided") == "accept"
    finally:
        ada_context.close()
        bob_context.close()
    assert set(proposal.decisions.values_list("user__username", "decision")) == {
        ("bob", "accept"),
        ("ada", "accept"),
    }


def test_a_fold_read_open_stays_open_with_its_body_when_another_persons_decision_redraws_the_card(
    browser,  # noqa: F811
    live_server,
    review_layout,  # noqa: F811
):
    proposal, url, ada_context, ada, bob_context, bob = ada_and_bob(
        browser, live_server, review_layout, 3
    )
    try:
        both_on(url, live_server, ada, bob)
        card = bob.locator("article[data-entry]").first.get_attribute("id")
        rendered = f"#{card} details.rendered"
        bob.click(f"{rendered} summary")  # its body loads when opened
        bob.wait_for_selector(f"{rendered} .markdown h1 >> text=group 000")

        ada.click(f"#{card} button.decide.accept")
        waited(bob, "id => document.getElementById(id).dataset.decided === 'accept'", card)

        # The card bob reads was drawn again with ada's decision: his fold is still open
        # and shows the text (loaded again for the card as it is now).
        assert bob.evaluate(f"document.querySelector('{rendered}').open")
        bob.wait_for_selector(f"{rendered} .markdown h1 >> text=group 000", timeout=2000)
    finally:
        ada_context.close()
        bob_context.close()
