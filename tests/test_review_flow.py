"""Reviewing a proposal entry by entry: decisions in place (the card and the progress
bar only), undo, "viewed", filters, pins, the submit-review summary and its choice for
undecided entries, and query counts that do not grow with the proposal."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils.html import escape

from generation import review
from memoryui import curation, review_cards
from memoryui.models import (
    ApprovedEntry,
    AuditEvent,
    Comment,
    EntryDecision,
    EntryView,
    Membership,
    Pin,
    Proposal,
    RejectedEntry,
    Role,
)
from tests.factories import make_user
from tests.review_world import MD, build, head

pytestmark = pytest.mark.django_db
HX = {"HTTP_HX_REQUEST": "true"}


def member(layout, role: Role, name: str | None = None):  # type: ignore[no-untyped-def]
    user = make_user(name or role.value)
    Membership.objects.create(workspace=layout.workspace, user=user, role=role)
    return user


def client_for(user) -> Client:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(user)
    return client


def url(name: str, proposal: Proposal) -> str:
    layout = proposal.layout
    return reverse(f"memoryui:{name}", args=[layout.workspace.name, layout.pk, proposal.pk])


def keys(proposal: Proposal) -> list[str]:
    """The task groups' heads (what the model rewords here), in order."""
    return [e.key for e in review.entries(proposal.memory_md) if not e.group]


def current_md(proposal: Proposal) -> str:
    return curation.text_of(curation.latest(proposal.layout, MD))


@pytest.fixture
def reviewer(layout):  # type: ignore[no-untyped-def]
    return member(layout, Role.REVIEWER)


@pytest.fixture
def proposal(layout):  # type: ignore[no-untyped-def]
    return build(layout, 60)


def test_an_htmx_decision_answers_with_the_card_and_the_progress_bar_only(proposal, reviewer):
    client = client_for(reviewer)
    key = keys(proposal)[30]

    response = client.post(
        url("proposal_decide", proposal),
        {"document": MD, "key": key, "decision": "reject", "page": 2, "anchor": "x"},
        **HX,
    )

    body = response.content.decode()
    assert response.status_code == 200
    assert "<html" not in body and "Forgetting ledger" not in body
    assert body.count("<article") == 1 and "group 030" in body
    assert 'aria-pressed="true" class="decide reject"' in body  # the decision shows
    assert 'id="review-progress" class="review-progress" hx-swap-oob="true"' in body
    assert "1 of 60 decided" in body
    assert len(body) < 20_000
    assert EntryDecision.objects.get(proposal=proposal, key=key).decision == "reject"


def test_without_javascript_a_decision_goes_back_to_the_same_page_filter_and_entry(
    proposal, reviewer
):
    client = client_for(reviewer)
    key = keys(proposal)[55]

    response = client.post(
        url("proposal_decide", proposal),
        {
            "document": MD,
            "key": key,
            "decision": "accept",
            "page": 3,
            "show": "undecided",
            "anchor": "entry-memory_md-abc",
        },
    )

    assert response.status_code == 302
    assert response["Location"] == (
        url("proposal_review", proposal) + "?show=undecided&page_memory_md=3#entry-memory_md-abc"
    )
    page = client.get(response["Location"]).content.decode()
    assert "page 3 of 3" in page  # 59 undecided left: still three pages
    assert "show=undecided&amp;page_memory_md=2" in page  # the pager keeps the filter


def test_undo_makes_the_entry_undecided_again_and_is_audited(proposal, reviewer):
    client = client_for(reviewer)
    key = keys(proposal)[0]
    decide = {"document": MD, "key": key, "decision": "accept", "edited_text": "# Task Group: x\n"}
    client.post(url("proposal_decide", proposal), decide, **HX)

    response = client.post(url("proposal_undo", proposal), {"document": MD, "key": key}, **HX)

    body = response.content.decode()
    assert not EntryDecision.objects.filter(proposal=proposal, key=key).exists()
    assert 'aria-pressed="false" class="decide accept"' in body and ">Undo<" not in body
    assert "0 of 60 decided" in body
    event = AuditEvent.objects.get(action="entry.undo")
    assert event.target == key and event.detail["undone"] == "accept" and event.detail["edited"]


def test_undo_is_refused_while_another_reviewer_holds_the_proposal(proposal, reviewer, layout):
    key = keys(proposal)[0]
    curation.decide(proposal, MD, key, "reject", user=reviewer)
    other = member(layout, Role.REVIEWER, "other")
    curation.reserve(proposal, other)

    response = client_for(reviewer).post(
        url("proposal_undo", proposal), {"document": MD, "key": key}, **HX
    )

    assert response.status_code == 409
    assert response["HX-Retarget"] == "#review-notice"
    assert "other is reviewing this proposal" in response.content.decode()
    assert EntryDecision.objects.filter(proposal=proposal, key=key).exists()


def test_any_member_marks_entries_viewed_but_only_reviewers_decide(proposal, layout):
    viewer = client_for(member(layout, Role.VIEWER))
    key = keys(proposal)[1]

    marked = viewer.post(url("proposal_viewed", proposal), {"document": MD, "key": key}, **HX)
    decided = viewer.post(
        url("proposal_decide", proposal), {"document": MD, "key": key, "decision": "accept"}
    )
    pinned = viewer.post(url("proposal_pin", proposal), {"document": MD, "key": key})

    assert marked.status_code == 200 and "1 viewed" in marked.content.decode()
    assert "☑ Viewed" in marked.content.decode()
    assert 'aria-keyshortcuts="a"' not in marked.content.decode()  # no decision buttons
    assert decided.status_code == pinned.status_code == 403
    assert EntryView.objects.filter(proposal=proposal, key=key).count() == 1
    assert not EntryDecision.objects.exists() and not Pin.objects.exists()
    off = viewer.post(
        url("proposal_viewed", proposal), {"document": MD, "key": key, "action": "off"}
    )
    assert off.status_code == 302 and not EntryView.objects.exists()


def test_viewed_of_an_entry_the_proposal_does_not_have_is_a_404(proposal, reviewer):
    response = client_for(reviewer).post(
        url("proposal_viewed", proposal), {"document": MD, "key": "task_group:nope"}
    )
    assert response.status_code == 404


def test_filters_list_undecided_changed_and_flagged_entries(layout, reviewer):
    added = "# Task Group: brand new\n\nscope: new\n"
    proposal = build(layout, 4, extra=added)
    k = keys(proposal)
    curation.decide(proposal, MD, k[0], "accept", user=reviewer)
    curation.set_pin(layout, MD, k[1], True, user=reviewer)
    RejectedEntry.objects.create(layout=layout, document=MD, key=k[2], text="old", title="g")
    ApprovedEntry.objects.create(layout=layout, document=MD, key=k[3], text="approved before")
    client = client_for(reviewer)

    def titles(show: str) -> list[str]:
        page = client.get(url("proposal_review", proposal) + f"?show={show}").content.decode()
        return re.findall(r'<b class="entry-title">([^<]+)</b>', page)

    assert titles("undecided") == ["group 001", "group 002", "group 003", "brand new"]
    assert titles("changed") == ["group 000", "group 001", "group 002", "group 003"]
    # pinned, rejected before, approved with another text, citing no rollout (unsupported)
    assert titles("flagged") == ["group 001", "group 002", "group 003", "brand new"]
    bad = client.get(url("proposal_review", proposal) + "?show=nonsense")
    assert bad.status_code == 400


def test_an_editor_pins_an_entry_from_the_review_page_in_place(layout):
    proposal = build(layout, 3, extra="# Task Group: brand new\n\nscope: new\n")
    editor = client_for(member(layout, Role.EDITOR))
    k = keys(proposal)

    response = editor.post(url("proposal_pin", proposal), {"document": MD, "key": k[0]}, **HX)
    new_entry = editor.post(url("proposal_pin", proposal), {"document": MD, "key": k[3]}, **HX)

    assert response.status_code == 200
    assert ">pinned</span>" in response.content.decode() and ">Unpin<" in response.content.decode()
    assert list(Pin.objects.values_list("key", flat=True)) == [k[0]]
    assert new_entry.status_code == 400  # not in the current document yet
    unpin = editor.post(
        url("proposal_pin", proposal), {"document": MD, "key": k[0], "action": "unpin"}
    )
    assert unpin.status_code == 302 and not Pin.objects.exists()


def test_an_edit_then_accept_shows_the_edit_as_what_approval_applies(proposal, reviewer):
    key = keys(proposal)[0]
    edited = head(0, "edited by a reviewer")

    body = (
        client_for(reviewer)
        .post(
            url("proposal_decide", proposal),
            {"document": MD, "key": key, "decision": "accept", "edited_text": edited},
            **HX,
        )
        .content.decode()
    )

    assert "your text is what approval applies" in body
    assert "<ins>edited</ins>" in body or "<ins>edited by a reviewer</ins>" in body
    # The card's "Edit, then accept" fold loads the reviewer's text to edit further.
    assert 'name="edited_text"' not in body
    form = (
        client_for(reviewer)
        .get(url("proposal_edit", proposal), {"document": MD, "key": key}, **HX)
        .content.decode()
    )
    textarea = re.search(r'<textarea name="edited_text"[^>]*>([^<]*)</textarea>', form)
    assert textarea and "edited by a reviewer" in textarea.group(1)
    assert f'<input type="hidden" name="key" value="{escape(key)}">' in form
    page = client_for(reviewer).get(url("proposal_edit", proposal), {"document": MD, "key": key})
    assert page.status_code == 200 and "edited by a reviewer" in page.content.decode()


def test_the_submit_summary_counts_the_review(proposal, reviewer):
    k = keys(proposal)
    curation.decide(proposal, MD, k[0], "accept", user=reviewer)
    curation.decide(proposal, MD, k[1], "accept", user=reviewer, edited_text=head(1, "e"))
    curation.decide(proposal, MD, k[2], "reject", user=reviewer)
    curation.set_viewed(proposal, MD, k[3], True, user=reviewer)

    page = client_for(reviewer).get(url("proposal_approve", proposal)).content.decode()
    counts = dict(re.findall(r'data-count="(\w+)">(\d+)<', page))

    assert counts == {
        "accepted": "2",
        "edited": "1",
        "rejected": "1",
        "undecided": "57",
        "not_viewed": "56",  # deciding an entry views it
        "total": "60",
    }
    assert "take the model's text" in page and "keep the current text" in page
    assert Proposal.objects.get().status == "pending"  # a GET decides nothing


@pytest.mark.parametrize("choice", ["accept", "reject"])
def test_approving_takes_the_model_or_the_current_text_for_undecided_entries(
    proposal, reviewer, choice
):
    k = keys(proposal)
    curation.decide(proposal, MD, k[0], "reject", user=reviewer)
    curation.decide(proposal, MD, k[1], "accept", user=reviewer)

    response = client_for(reviewer).post(url("proposal_approve", proposal), {"undecided": choice})

    assert response.status_code == 302
    text = current_md(proposal)
    assert "scope: person 0\n" in text and "scope: model 1\n" in text
    undecided = [
        f"scope: {'model' if choice == 'accept' else 'person'} {i}\n" for i in range(2, 60)
    ]
    assert all(line in text for line in undecided)
    event = AuditEvent.objects.get(action="proposal.approve")
    assert event.detail["undecided"] == choice
    assert event.detail["counts"]["undecided"] == 58 and event.detail["counts"]["rejected"] == 1


def test_approve_refuses_an_unknown_choice(proposal, reviewer):
    response = client_for(reviewer).post(url("proposal_approve", proposal), {"undecided": "x"})
    assert response.status_code == 400
    assert Proposal.objects.get().status == "pending"


def test_rejecting_the_proposal_asks_first_and_says_what_it_does(proposal, reviewer):
    client = client_for(reviewer)
    curation.decide(proposal, MD, keys(proposal)[0], "accept", user=reviewer)

    page = client.get(url("proposal_reject", proposal)).content.decode()

    assert "stay exactly as they are now" in page and "the 1 entry decision made so far" in page
    assert Proposal.objects.get().status == "pending"
    client.post(url("proposal_reject", proposal))
    assert Proposal.objects.get().status == "rejected"


def test_many_citations_fold_and_long_entries_fold(layout, reviewer):
    long = "# Task Group: long\n\nscope: l\n\n" + "".join(f"- line {i}\n" for i in range(90))
    proposal = build(layout, 2, cites={1: 177}, extra=long)

    page = client_for(reviewer).get(url("proposal_review", proposal)).content.decode()

    assert '<details class="cites-fold"><summary>177 cited rollouts</summary>' in page
    assert "54 more lines" in page  # 94 lines: 40 shown, the rest folded
    # Each changed entry, rendered on demand: two task groups' heads, the task that now
    # cites 177 rollouts, the new group.
    assert page.count('<details class="rendered"') == 4


def test_the_rendered_view_of_an_entry_shows_the_reviewers_edit(proposal, reviewer):
    client = client_for(reviewer)
    key = keys(proposal)[0]
    curation.decide(proposal, MD, key, "accept", user=reviewer, edited_text=head(0, "**mine**"))
    query = {"document": MD, "key": key}

    fragment = client.get(url("proposal_entry", proposal), query, **HX).content.decode()
    page = client.get(url("proposal_entry", proposal), query).content.decode()

    assert "<strong>mine</strong>" in fragment and "<html" not in fragment
    assert "<strong>mine</strong>" in page and "Back to the review" in page
    missing = client.get(url("proposal_entry", proposal), {"document": MD, "key": "nope"})
    assert missing.status_code == 404


def test_a_cards_forms_and_links_name_the_entry_by_the_cards_id(proposal, reviewer):
    # What the card sends (its id, not the entry's title) reaches the entry it shows:
    # a decision without JavaScript, and the comment form's page a fold links to.
    client = client_for(reviewer)
    key = keys(proposal)[2]
    card = f"{MD}-{review_cards.key_slug(key)}"
    page = client.get(url("proposal_review", proposal)).content.decode()

    decided = client.post(url("proposal_decide", proposal), {"entry": card, "decision": "reject"})
    form = client.get(url("proposal_comment_form", proposal), {"entry": card}).content.decode()
    unknown = client.get(url("proposal_comment_form", proposal), {"entry": f"{MD}-000000000000"})

    assert f'name="entry" value="{card}"' in page and f"comment/form/?entry={card}" in page
    assert f'name="key" value="{escape(key)}"' not in page
    assert decided.status_code == 302 and decided["Location"].endswith(f"#entry-{card}")
    assert proposal.decisions.get(key=key).decision == "reject"
    assert '<textarea name="text"' in form and f'name="key" value="{escape(key)}"' in form
    assert unknown.status_code == 400


def _queries(client: Client, proposal: Proposal) -> tuple[int, int]:
    key = keys(proposal)[3]
    with CaptureQueriesContext(connection) as decide:
        response = client.post(
            url("proposal_decide", proposal),
            {"document": MD, "key": key, "decision": "accept"},
            **HX,
        )
        assert response.status_code == 200
    with CaptureQueriesContext(connection) as page:
        assert client.get(url("proposal_review", proposal) + "?page_memory_md=2").status_code == 200
    return len(decide), len(page)


def test_query_counts_do_not_grow_with_the_proposal(layout, reviewer):
    client = client_for(reviewer)
    small = _queries(client, build(layout, 25))
    Proposal.objects.all().delete()
    large = _queries(client, build(layout, 200))

    assert small == large
    # The decision round trip (savepoints included; one read of the entry's checks; one
    # of the decision another reviewer may have made meanwhile; the proposal's decisions
    # and the documents' current versions, since a decision can make or unmake a
    # duplicate with any other entry; the oldest MEMORY.md version with reads, for the
    # card's "read N times"; the change row open review pages poll for; and, the first
    # time this process meets the proposal's texts, their lint kept in the database: one
    # read, and one write when this process is the one that scanned them).
    assert small[0] <= 39


def test_a_comment_on_an_entry_updates_its_card_in_place(proposal, reviewer):
    key = keys(proposal)[2]
    response = client_for(reviewer).post(
        url("proposal_comment", proposal),
        {"document": MD, "key": key, "text": "Is this still true?"},
        **HX,
    )
    body = response.content.decode()
    assert body.count("<article") == 1 and "Is this still true?" in body
    assert "Comment (1)" in body and "hx-swap-oob" in body
    assert Comment.objects.get().key == key


@pytest.mark.parametrize(
    ("action", "data"),
    [
        ("proposal_undo", {}),
        ("proposal_viewed", {}),
        ("proposal_pin", {}),
        ("proposal_comment", {"text": "a note"}),
    ],
)
def test_without_javascript_every_entry_action_comes_back_to_the_page_and_entry(
    layout, proposal, action, data
):
    editor = client_for(member(layout, Role.EDITOR))
    key = keys(proposal)[40]
    curation.decide(proposal, MD, key, "accept", user=None)
    response = editor.post(
        url(action, proposal),
        {"document": MD, "key": key, "page": 2, "show": "changed", "anchor": "entry-x", **data},
    )
    assert response.status_code == 302
    assert response["Location"] == (
        url("proposal_review", proposal) + "?show=changed&page_memory_md=2#entry-x"
    )


def test_an_approval_refused_from_the_dialog_leads_back_to_the_review(proposal, reviewer, layout):
    curation.reserve(proposal, member(layout, Role.REVIEWER, "other"))
    client = client_for(reviewer)

    held = client.post(url("proposal_approve", proposal), {"undecided": "accept"}, **HX)

    assert held.status_code == 409 and held["HX-Retarget"] == "#review-notice"
    assert "other is reviewing this proposal" in held.content.decode()
    assert Proposal.objects.get().status == "pending"
    Proposal.objects.update(reserved_by=None, reserved_until=None)
    done = client.post(url("proposal_approve", proposal), {"undecided": "accept"}, **HX)
    assert done.status_code == 204
    assert done["HX-Redirect"] == reverse("memoryui:memory_md", args=["a", layout.pk])


def test_entries_with_a_lint_finding_or_citing_only_forgotten_rollouts_are_flagged(
    layout, reviewer
):
    secret = "# Task Group: leaked\n\naws_access_key_id=AKIAZ3MSJV4WWNKWW123\n"
    proposal = build(layout, 3, extra=secret)
    proposal.removed = ["r1-0"]  # group 001 cites only r1-0, which this run forgets
    proposal.save(update_fields=["removed"])
    client = client_for(reviewer)

    page = client.get(url("proposal_review", proposal) + "?show=flagged").content.decode()
    cards = dict(re.findall(r'<b class="entry-title">([^<]+)</b>(.*?)</header>', page, flags=re.S))

    assert sorted(cards) == ["group 001", "leaked"]
    assert ">stale</span>" in cards["group 001"] and ">lint</a>" not in cards["group 001"]
    assert ">lint</a>" in cards["leaked"] and ">stale</span>" not in cards["leaked"]
    # The card an htmx decision answers with keeps its flag.
    leaked = next(k for k in keys(proposal) if "leaked" in k)
    card = client.post(
        url("proposal_decide", proposal),
        {"document": MD, "key": leaked, "decision": "reject"},
        headers={"HX-Request": "true"},
    ).content.decode()
    assert ">lint</a>" in card


def test_the_entries_come_first_and_the_ledger_and_discussion_are_linked_from_the_top(
    proposal, reviewer
):
    proposal.removed = ["r9-0"]
    proposal.save(update_fields=["removed"])
    curation.add_comment(proposal, "Looks right.", user=reviewer)

    page = client_for(reviewer).get(url("proposal_review", proposal)).content.decode()

    first_entry = page.index('class="entry review-entry')
    assert first_entry < page.index('id="ledger"') and first_entry < page.index('id="discussion"')
    header = page[: page.index('id="reservation"')]
    assert '<a href="#ledger">1 forgotten</a>' in header
    assert '<a href="#discussion">1 comment</a>' in header


def test_the_ledger_links_each_rollout_and_lets_an_editor_protect_or_unprotect_it(proposal):
    editor = member(proposal.layout, Role.EDITOR, "ledger-editor")
    proposal.removed, proposal.retained = ["r9-0"], ["r9-1"]
    proposal.save(update_fields=["removed", "retained"])
    curation.set_protected(proposal.layout, "r9-1", True, user=editor)

    page = client_for(editor).get(url("proposal_review", proposal)).content.decode()

    ledger = page[page.index('id="ledger"') : page.index('id="discussion"')]
    layout = proposal.layout
    for rid in ("r9-0", "r9-1"):
        link = reverse("memoryui:rollout_detail", args=[layout.workspace.name, layout.pk, rid])
        assert f'<a href="{link}">{rid}</a>' in ledger
        assert f'name="rollout_id" value="{rid}"' in ledger
    assert ledger.count('<span class="badge pin">protected</span>') == 1
    assert 'value="unprotect">unprotect</button>' in ledger
    assert 'value="protect">protect</button>' in ledger
    assert reverse("memoryui:protect", args=[layout.workspace.name, layout.pk]) in ledger


def test_the_review_page_shows_the_proposals_text_as_it_is_now(proposal, reviewer):
    client = client_for(reviewer)
    before = client.get(url("proposal_review", proposal)).content.decode()
    total = int(re.search(r"<b>0 of (\d+) decided</b>", before).group(1))
    added = "# Task Group: Freshly added group\n\nscope: new\n"
    Proposal.objects.filter(pk=proposal.pk).update(memory_md=proposal.memory_md + "\n" + added)

    page = client.get(url("proposal_review", proposal)).content.decode()

    assert f"<b>0 of {total + 1} decided</b>" in page
