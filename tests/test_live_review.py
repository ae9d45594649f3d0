"""Live review's endpoint: 304 while nothing changed on the proposal, the changed entry
(and its card) after another reviewer's decision, undo or comment; who else is on the
page and at which card; roles and login; a bounded number of queries per poll."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from memoryui import curation, live_review, tasks
from memoryui.importer import import_workspace
from memoryui.models import (
    Layout,
    Membership,
    Proposal,
    ReviewChange,
    ReviewPresence,
    Role,
)
from memoryui.review_cards import key_slug
from tests.factories import make_user
from tests.review_world import MD, build

HTMX = {"HX-Request": "true"}


@pytest.fixture
def review_layout(db, workspace_copy):  # type: ignore[no-untyped-def]
    import_workspace(workspace_copy("small-a"), "a")
    return Layout.objects.select_related("workspace").get(
        workspace__name="a", memories_dir="memories/engineering"
    )


def member(layout: Layout, name: str, role: str = Role.REVIEWER):  # type: ignore[no-untyped-def]
    user = make_user(name)
    Membership.objects.create(workspace=layout.workspace, user=user, role=role)
    return user


def client_of(user) -> Client:  # type: ignore[no-untyped-def]
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


def live_url(proposal: Proposal) -> str:
    args = ["a", proposal.layout_id, proposal.pk]
    return reverse("memoryui:proposal_live", args=args)


def keys(proposal: Proposal) -> list[str]:
    return [c.key for c in curation.decidable(curation.document_reviews(proposal)[0])]


def test_unchanged_is_304_and_another_reviewers_decision_is_200_with_the_card(
    review_layout, django_assert_max_num_queries
):
    proposal = build(review_layout, 30)
    ada, bob = member(review_layout, "ada"), member(review_layout, "bob")
    page = client_of(ada)
    first = page.get(live_url(proposal), {"drawn": int(timezone.now().timestamp()), "at": ""})
    assert first.status_code == 200
    body = first.json()
    assert body["changes"] == [] and body["people"] == [] and body["status"] == "pending"
    etag, cursor = first["ETag"], body["cursor"]

    with django_assert_max_num_queries(6):  # session, user, layout+workspace, role, state (2)
        again = page.get(
            live_url(proposal), {"since": cursor, "at": ""}, headers={"If-None-Match": etag}
        )
    assert again.status_code == 304 and again.content == b""
    # The ETag's stamp part is new (ada's presence came meanwhile), what it stands on is not.
    assert again["ETag"].split(".")[1] == etag.split(".")[1]
    etag = again["ETag"]

    key = keys(proposal)[4]
    curation.decide(proposal, MD, key, "accept", user=bob, edited_text="scope: bob's words\n")
    with django_assert_max_num_queries(7):  # and the changes since
        changed = page.get(
            live_url(proposal), {"since": cursor, "at": ""}, headers={"If-None-Match": etag}
        )
    assert changed.status_code == 200 and changed["ETag"] != etag
    card = f"entry-{MD}-{key_slug(key)}"
    assert changed.json()["changes"] == [{"document": MD, "key": key, "card": card, "n": 1}]

    # The card the page then fetches shows bob's decision and his text.
    fresh = page.get(
        reverse("memoryui:proposal_live_card", args=["a", review_layout.pk, proposal.pk]),
        {"document": MD, "key": key},
        headers=HTMX,
    )
    assert fresh.status_code == 200
    html = fresh.content.decode()
    assert f'id="{card}"' in html and "by bob" in html and "bob&#x27;s words" in html
    assert 'id="review-progress"' in html and "1 of 30 decided" in html

    # Nothing since: 304 again with the new ETag.
    cursor = changed.json()["cursor"]
    assert (
        page.get(
            live_url(proposal),
            {"since": cursor, "at": ""},
            headers={"If-None-Match": changed["ETag"]},
        ).status_code
        == 304
    )


def test_undo_and_a_comment_are_changes_and_a_page_drawn_before_them_gets_them(review_layout):
    proposal = build(review_layout, 5)
    ada, bob = member(review_layout, "ada"), member(review_layout, "bob")
    drawn = int(timezone.now().timestamp())
    first, second = keys(proposal)[:2]
    curation.decide(proposal, MD, first, "reject", user=bob)
    curation.undo_decision(proposal, MD, first, user=bob)
    curation.add_comment(proposal, "look at this", user=bob, document=MD, key=second)
    body = client_of(ada).get(live_url(proposal), {"drawn": drawn}).json()
    assert [(c["key"], c["n"]) for c in body["changes"]] == [(first, 2), (second, 1)]
    assert body["cursor"] == ReviewChange.objects.filter(proposal=proposal).latest("id").pk


def test_presence_shows_the_others_at_their_card_and_expires(review_layout):
    proposal = build(review_layout, 5)
    ada, bob = member(review_layout, "ada"), member(review_layout, "bob", Role.VIEWER)
    card = f"entry-{MD}-{key_slug(keys(proposal)[2])}"
    assert client_of(bob).get(live_url(proposal), {"at": card}).status_code == 200

    seen = client_of(ada).get(live_url(proposal), {"at": ""})
    assert seen.json()["people"] == [{"name": "bob", "card": card}]
    # Ada does not see herself; bob sees her, on no card.
    assert client_of(bob).get(live_url(proposal), {"at": card}).json()["people"] == [
        {"name": "ada", "card": ""}
    ]
    ReviewPresence.objects.filter(user=bob).update(
        seen_at=timezone.now() - timedelta(seconds=live_review.PRESENCE_SECONDS + 1)
    )
    gone = client_of(ada).get(live_url(proposal), headers={"If-None-Match": seen["ETag"]})
    assert gone.status_code == 200 and gone.json()["people"] == []


def test_presence_is_written_only_when_the_card_changes_or_gets_old(
    review_layout, django_assert_num_queries
):
    proposal = build(review_layout, 5)
    ada = member(review_layout, "ada")
    live_review.state(proposal.pk, review_layout, ada, card="entry-memory_md-000000000000")
    with django_assert_num_queries(2):  # the proposal, the presences: no write
        live_review.state(proposal.pk, review_layout, ada, card="entry-memory_md-000000000000")
    with django_assert_num_queries(3):  # moved: one update
        live_review.state(proposal.pk, review_layout, ada, card="entry-memory_md-111111111111")
    assert ReviewPresence.objects.get().card == "entry-memory_md-111111111111"


def test_login_and_workspace_membership_are_required(review_layout, settings):
    settings.MEMORYUI_DEFAULT_ROLE = "none"
    proposal = build(review_layout, 3)
    anonymous = Client().get(live_url(proposal))
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    stranger = client_of(make_user("mallory"))
    assert stranger.get(live_url(proposal)).status_code == 404
    card_url = reverse("memoryui:proposal_live_card", args=["a", review_layout.pk, proposal.pk])
    assert stranger.get(card_url, {"document": MD, "key": keys(proposal)[0]}).status_code == 404
    assert ReviewPresence.objects.count() == 0


def test_a_viewer_gets_the_card_without_decision_forms(review_layout):
    proposal = build(review_layout, 3)
    viewer = member(review_layout, "vic", Role.VIEWER)
    card_url = reverse("memoryui:proposal_live_card", args=["a", review_layout.pk, proposal.pk])
    html = client_of(viewer).get(card_url, {"document": MD, "key": keys(proposal)[0]}).content
    assert b"data-entry" in html and b'name="decision"' not in html
    assert client_of(viewer).post(live_url(proposal)).status_code == 405


def test_bad_values_are_refused_and_another_layouts_proposal_is_not_found(review_layout):
    proposal = build(review_layout, 3)
    page = client_of(member(review_layout, "ada"))
    assert page.get(live_url(proposal), {"at": "<script>"}).status_code == 400
    assert page.get(live_url(proposal), {"since": "-1"}).status_code == 400
    other = Layout.objects.exclude(pk=review_layout.pk).filter(workspace__name="a").first()
    assert other is not None
    wrong = reverse("memoryui:proposal_live", args=["a", other.pk, proposal.pk])
    assert page.get(wrong).status_code == 404


def test_deleting_a_proposal_with_decisions_leaves_no_change_behind(review_layout):
    proposal = build(review_layout, 3)
    curation.decide(proposal, MD, keys(proposal)[0], "accept", user=member(review_layout, "ada"))
    proposal.delete()
    assert ReviewChange.objects.count() == 0


def test_a_pin_is_a_change_of_its_entry_in_every_pending_proposal_of_the_layout(review_layout):
    first, second = build(review_layout, 4), build(review_layout, 4)
    Proposal.objects.filter(pk=first.pk).update(status=Proposal.Status.REJECTED)
    key = keys(second)[1]
    curation.set_pin(review_layout, MD, key, True, user=member(review_layout, "ada"))
    assert list(ReviewChange.objects.values_list("proposal_id", "document", "key")) == [
        (second.pk, MD, key)
    ]


def test_a_closing_page_takes_its_person_off_the_others_pages_at_once(review_layout):
    proposal = build(review_layout, 5)
    ada, bob = member(review_layout, "ada"), member(review_layout, "bob")
    leave = reverse("memoryui:proposal_live_leave", args=["a", review_layout.pk, proposal.pk])
    card = f"entry-{MD}-{key_slug(keys(proposal)[1])}"
    page = Client(enforce_csrf_checks=True)
    page.force_login(bob)
    assert page.get(live_url(proposal), {"at": card}).status_code == 200
    assert client_of(ada).get(live_url(proposal), {"at": ""}).json()["people"] == [
        {"name": "bob", "card": card}
    ]

    # What sendBeacon sends: a form with the page's CSRF token (and its cookie).
    review = page.get(
        reverse("memoryui:proposal_review", args=["a", review_layout.pk, proposal.pk])
    )
    csrf = review.content.decode().split('data-csrf="', 1)[1].split('"', 1)[0]
    assert f'data-leave-url="{leave}"' in review.content.decode()
    assert page.post(leave).status_code == 403  # no token: refused, bob still there
    assert ReviewPresence.objects.filter(user=bob).exists()
    assert page.post(leave, {"csrfmiddlewaretoken": csrf}).status_code == 204
    assert client_of(ada).get(live_url(proposal), {"at": ""}).json()["people"] == []


def test_the_heartbeat_prunes_old_changes_of_decided_proposals_and_old_presences(
    review_layout,
):
    decided, pending = build(review_layout, 3), build(review_layout, 3)
    bob = member(review_layout, "bob")
    for proposal in (decided, pending):
        curation.decide(proposal, MD, keys(proposal)[0], "reject", user=bob)
        live_review.state(proposal.pk, review_layout, bob, card="")
    Proposal.objects.filter(pk=decided.pk).update(status=Proposal.Status.REJECTED)
    old = timezone.now() - live_review.PRUNE_AFTER - timedelta(minutes=1)
    ReviewChange.objects.update(at=old)
    ReviewPresence.objects.filter(proposal=pending).update(seen_at=old)
    tasks.heartbeat()
    assert not ReviewChange.objects.filter(proposal=decided).exists()
    assert ReviewChange.objects.filter(proposal=pending).count() == 1
    assert list(ReviewPresence.objects.values_list("proposal_id", flat=True)) == [decided.pk]
