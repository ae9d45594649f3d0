"""Comments on one line of an entry: recorded with the line's number and text, shown
under that line in the card's diff (after a reload too), given by the API, and shown as
"outdated" with their original line once an edit takes the line away."""

import re

import pytest
from django.test import Client
from django.urls import reverse

from memoryui import curation, tokens
from memoryui.models import Comment, Membership, Role
from memoryui.review_cards import key_slug
from tests.factories import make_user
from tests.review_world import MD, build

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(layout):
    proposal = build(layout, 3)
    reviewer = make_user("rita")
    Membership.objects.create(workspace=layout.workspace, user=reviewer, role=Role.REVIEWER)
    client = Client()
    client.force_login(reviewer)
    key = curation.decidable(curation.document_reviews(proposal)[0])[1].key
    return proposal, reviewer, client, key


def url(name, proposal) -> str:
    return reverse(f"memoryui:{name}", args=["a", proposal.layout_id, proposal.pk])


def card_html(page: str, key: str) -> str:
    start = page.index(f'id="entry-{MD}-{key_slug(key)}"')
    return page[start : page.index("</article>", start)]


def api_comments(proposal, user) -> list[dict]:
    secret = tokens.create_token(user, "test", ["a"]).secret
    path = f"/api/workspaces/a/layouts/{proposal.layout_id}/proposals/{proposal.pk}"
    return Client().get(path, HTTP_AUTHORIZATION=f"Bearer {secret}").json()["comments"]


def test_a_line_comment_is_shown_under_its_line_after_a_reload_and_in_the_api(world):
    proposal, reviewer, client, key = world
    answer = client.post(
        url("proposal_comment", proposal),
        {"document": MD, "key": key, "line": 3, "text": "Which model?"},
        HTTP_HX_REQUEST="true",
    )

    assert answer.status_code == 200
    comment = Comment.objects.get()
    assert (comment.key, comment.line, comment.line_text) == (key, 3, "scope: model 1")
    for html in (answer.content.decode(), client.get(url("proposal_review", proposal)).content):
        card = card_html(html if isinstance(html, str) else html.decode(), key)
        # The row of line 3 on the right, then the comment's row.
        assert re.search(
            r'<td class="no">3</td><td class="r">[^\n]*</td></tr>\s*'
            r'<tr class="line-comments"><td colspan="4"><div class="comment"><b>rita</b> '
            r'<span class="muted">on line 3</span><div>Which model\?</div>',
            card,
        ), card
        assert "Comment (1)" in card
    (out,) = api_comments(proposal, reviewer)
    assert out["key"] == key and out["line"] == out["at_line"] == 3
    assert out["line_text"] == "scope: model 1" and out["outdated"] is False
    assert out["author"] == "rita" and out["text"] == "Which model?"


def test_an_edit_that_takes_the_line_away_leaves_the_comment_outdated(world):
    proposal, reviewer, client, key = world
    client.post(
        url("proposal_comment", proposal),
        {"document": MD, "key": key, "line": 3, "text": "Which model?"},
    )
    curation.decide(
        proposal,
        MD,
        key,
        "accept",
        user=reviewer,
        edited_text="# Task Group: group 001\n\nscope: the reviewer's words\n",
    )

    card = card_html(client.get(url("proposal_review", proposal)).content.decode(), key)
    assert 'class="line-comments"' not in card
    assert re.search(
        r'<div class="comment outdated">.*<span class="badge warn"[^>]*>outdated</span> '
        r'on line 3: <code class="comment-line">scope: model 1</code><div>Which model\?</div>',
        card,
    ), card
    (out,) = api_comments(proposal, reviewer)
    assert out["outdated"] is True and out["at_line"] is None and out["line"] == 3


def test_a_comment_follows_its_line_when_an_edit_moves_it(world):
    proposal, reviewer, client, key = world
    client.post(
        url("proposal_comment", proposal),
        {"document": MD, "key": key, "line": 3, "text": "Which model?"},
    )
    curation.decide(
        proposal,
        MD,
        key,
        "accept",
        user=reviewer,
        edited_text="# Task Group: group 001\n\nnote: first\n\nscope: model 1\n",
    )
    (out,) = api_comments(proposal, reviewer)
    assert (out["line"], out["at_line"], out["outdated"]) == (3, 5, False)


def test_a_line_past_the_entry_or_a_viewer_is_refused(world):
    proposal, _, client, key = world
    past = client.post(
        url("proposal_comment", proposal),
        {"document": MD, "key": key, "line": 99, "text": "?"},
    )
    assert past.status_code == 400 and "there is no line 99" in past.content.decode()
    viewer = make_user("vic")
    Membership.objects.create(workspace=proposal.layout.workspace, user=viewer, role=Role.VIEWER)
    as_viewer = Client()
    as_viewer.force_login(viewer)
    refused = as_viewer.post(
        url("proposal_comment", proposal), {"document": MD, "key": key, "line": 3, "text": "?"}
    )
    assert refused.status_code == 403
    assert not Comment.objects.exists()


def test_line_comments_add_no_query_per_card(world, django_assert_max_num_queries):
    proposal, reviewer, client, key = world
    client.get(url("proposal_review", proposal))  # warm the caches
    with django_assert_max_num_queries(60) as before:
        client.get(url("proposal_review", proposal))
    for line in (1, 3):
        curation.add_comment(
            proposal, "note", user=reviewer, document=MD, key=key, line=line, line_text="x"
        )
    with django_assert_max_num_queries(len(before.captured_queries)):
        client.get(url("proposal_review", proposal))
