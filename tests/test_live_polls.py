"""Live review's quick 304: a poll with the page's token and the proposal's current stamp
is answered without the database; a change (a decision, a status, someone moving) makes
the next poll a full 200; a token forged, expired, of another person, page or card goes
the full way (login, role); a member removed gets "nothing changed" for the token's few
seconds at most, never data."""

from __future__ import annotations

import time

import pytest
from django.core import signing
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memoryui import curation, live_polls
from memoryui.importer import import_workspace
from memoryui.models import Layout, Membership, Proposal
from memoryui.review_cards import key_slug
from tests.factories import make_user
from tests.review_world import MD, build
from tests.test_live_review import client_of, keys, live_url, member

TOKEN = live_polls.TOKEN_HEADER


@pytest.fixture
def review_layout(db, workspace_copy):  # type: ignore[no-untyped-def]
    import_workspace(workspace_copy("small-a"), "a")
    return Layout.objects.get(workspace__name="a", memories_dir="memories/engineering")


@pytest.fixture(autouse=True, params=["memory", "redis"])
def fast_polls(request, settings):  # type: ignore[no-untyped-def]
    """Each test with the memory cache (one test process shares it) and with Redis, as
    production runs it (the tests' Redis database, emptied around each test)."""
    settings.MEMORYUI_LIVE_FAST_POLLS = True
    if request.param == "memory":
        backend = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    else:
        url = request.getfixturevalue("broker")
        backend = {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": url}
    settings.CACHES = {"default": backend}


def settled(page: Client, proposal: Proposal, at: str = "") -> tuple[str, str, int]:
    """Poll until the page's own arrival no longer moves the stamp: its ETag, token, cursor."""
    first = page.get(live_url(proposal), {"drawn": int(timezone.now().timestamp()), "at": at})
    assert first.status_code == 200
    cursor = first.json()["cursor"]
    again = page.get(
        live_url(proposal), {"since": cursor, "at": at}, headers={"If-None-Match": first["ETag"]}
    )
    assert again.status_code == 304
    return again["ETag"], again[TOKEN], cursor


def poll(page: Client, proposal: Proposal, etag: str, token: str, cursor: int, at: str = ""):  # type: ignore[no-untyped-def]
    with CaptureQueriesContext(connection) as queries:
        answer = page.get(
            live_url(proposal),
            {"since": cursor, "at": at},
            headers={"If-None-Match": etag, TOKEN: token},
        )
    return answer, len(queries)


def test_an_unchanged_poll_with_its_token_is_304_without_a_query(review_layout):
    proposal = build(review_layout, 5)
    page = client_of(member(review_layout, "ada"))
    etag, token, cursor = settled(page, proposal)
    answer, queries = poll(page, proposal, etag, token, cursor)
    assert answer.status_code == 304 and answer.content == b"" and queries == 0
    assert answer["ETag"] == etag


def test_without_a_shared_cache_every_poll_takes_the_full_path(review_layout, settings):
    settings.MEMORYUI_LIVE_FAST_POLLS = False
    proposal = build(review_layout, 5)
    page = client_of(member(review_layout, "ada"))
    etag, token, cursor = settled(page, proposal)
    answer, queries = poll(page, proposal, etag, token, cursor)
    assert answer.status_code == 304 and queries >= 4


def test_another_reviewers_decision_makes_the_next_poll_a_200_with_the_change(review_layout):
    proposal = build(review_layout, 5)
    bob = member(review_layout, "bob")
    page = client_of(member(review_layout, "ada"))
    etag, token, cursor = settled(page, proposal)
    key = keys(proposal)[1]
    curation.decide(proposal, MD, key, "reject", user=bob)
    answer, queries = poll(page, proposal, etag, token, cursor)
    assert answer.status_code == 200 and queries > 0
    assert [c["key"] for c in answer.json()["changes"]] == [key]
    assert answer["ETag"] != etag


def test_a_proposal_approved_or_reserved_meanwhile_makes_the_next_poll_a_200(review_layout):
    proposal = build(review_layout, 5)
    bob = member(review_layout, "bob")
    page = client_of(member(review_layout, "ada"))
    etag, token, cursor = settled(page, proposal)
    curation.reserve(proposal, bob)
    answer, _ = poll(page, proposal, etag, token, cursor)
    assert answer.status_code == 200 and answer.json()["reserved_by"] == "bob"
    etag, token = answer["ETag"], answer[TOKEN]
    curation.reject_proposal(proposal, user=bob)
    answer, _ = poll(page, proposal, etag, token, cursor)
    assert answer.status_code == 200 and answer.json()["status"] == "rejected"


def test_someone_moving_to_another_card_makes_the_others_next_poll_a_200(review_layout):
    proposal = build(review_layout, 5)
    page = client_of(member(review_layout, "ada"))
    bob = client_of(member(review_layout, "bob"))
    card = f"entry-{MD}-{key_slug(keys(proposal)[3])}"
    settled(bob, proposal)
    etag, token, cursor = settled(page, proposal)
    assert bob.get(live_url(proposal), {"since": cursor, "at": card}).status_code == 200
    answer, _ = poll(page, proposal, etag, token, cursor)
    assert answer.status_code == 200 and answer.json()["people"] == [{"name": "bob", "card": card}]


def test_a_token_of_another_card_page_or_session_or_forged_takes_the_full_path(review_layout):
    proposal = build(review_layout, 5)
    other = build(review_layout, 3)
    ada = member(review_layout, "ada")
    page = client_of(ada)
    etag, token, cursor = settled(page, proposal)
    # Moved to a card: the full path (it records the move, so the answer is 304 or 200).
    _, queries = poll(page, proposal, etag, token, cursor, at=f"entry-{MD}-{'0' * 12}")
    assert queries > 0
    etag, token, cursor = settled(page, proposal)
    # The token of another proposal's page.
    _, _, _ = settled(page, other)
    other_token = page.get(live_url(other), {"at": ""})[TOKEN]
    _, queries = poll(page, proposal, etag, other_token, cursor)
    assert queries > 0
    # Forged: the right fields, signed with another key or salt.
    forged = signing.dumps([live_url(proposal), "", "x" * 32], salt="something-else")
    _, queries = poll(page, proposal, etag, forged, cursor)
    assert queries > 0
    _, queries = poll(page, proposal, etag, token[:-2] + "xx", cursor)
    assert queries > 0
    # Ada's own token from another session of hers (another browser): the full path.
    _, queries = poll(client_of(ada), proposal, etag, token, cursor)
    assert queries > 0


def test_a_stolen_token_gives_an_outsider_or_a_signed_out_browser_nothing(review_layout, settings):
    settings.MEMORYUI_DEFAULT_ROLE = "none"
    proposal = build(review_layout, 5)
    page = client_of(member(review_layout, "ada"))
    etag, token, cursor = settled(page, proposal)
    outsider = client_of(make_user("mallory"))
    answer, _ = poll(outsider, proposal, etag, token, cursor)
    assert answer.status_code == 404 and TOKEN not in answer
    anonymous, _ = poll(Client(), proposal, etag, token, cursor)
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    page.logout()  # the session ends: its cookie with it
    answer, _ = poll(page, proposal, etag, token, cursor)
    assert answer.status_code == 302


def test_a_removed_member_is_told_nothing_changed_for_the_tokens_seconds_then_refused(
    review_layout, monkeypatch, settings
):
    settings.MEMORYUI_DEFAULT_ROLE = "none"
    proposal = build(review_layout, 5)
    ada = member(review_layout, "ada")
    page = client_of(ada)
    etag, token, cursor = settled(page, proposal)
    Membership.objects.filter(user=ada).delete()
    answer, queries = poll(page, proposal, etag, token, cursor)
    assert answer.status_code == 304 and answer.content == b"" and queries == 0
    later = time.time() + live_polls.TOKEN_SECONDS + 1
    monkeypatch.setattr(signing.time, "time", lambda: later)
    answer, queries = poll(page, proposal, etag, token, cursor)
    assert answer.status_code == 404 and queries > 0


def test_an_expired_token_takes_the_full_path_and_gets_a_new_one(review_layout, monkeypatch):
    proposal = build(review_layout, 5)
    page = client_of(member(review_layout, "ada"))
    etag, token, cursor = settled(page, proposal)
    later = time.time() + live_polls.TOKEN_SECONDS + 1
    monkeypatch.setattr(signing.time, "time", lambda: later)
    answer, queries = poll(page, proposal, etag, token, cursor)
    assert answer.status_code == 304 and queries > 0 and TOKEN in answer
    answer, queries = poll(page, proposal, answer["ETag"], answer[TOKEN], cursor)
    assert answer.status_code == 304 and queries == 0
