"""Request changes: the third outcome of a review. The proposal closes without applying,
the reviewer's message is kept (audited, a webhook event), the next proposal of the
layout shows it, and phase two's model is told it with the entries the reviewer
rejected."""

import pytest
from django.test import Client
from django.urls import reverse

from generation import prompts, review
from memoryui import curation, pipeline, tokens, webhooks
from memoryui.models import (
    AuditEvent,
    Layout,
    Membership,
    MemoryVersion,
    Proposal,
    RejectedEntry,
    Role,
    Webhook,
)
from tests.factories import make_user
from tests.test_curation import append_to_memory_md

MD = MemoryVersion.Document.MEMORY_MD
MESSAGE = "Keep the deploy steps in one group; the rollback note is wrong."


def member(role: Role, layout: Layout, name: str):
    user = make_user(name)
    Membership.objects.create(workspace=layout.workspace, user=user, role=role)
    return user


def url(name: str, layout: Layout, *args) -> str:
    return reverse(f"memoryui:{name}", args=[layout.workspace.name, layout.pk, *args])


def proposal_for(layout: Layout) -> Proposal:
    run = pipeline.start_run(layout, reextract=True)
    pipeline.run_inline(run.pk, threads=1, sleep=lambda s: None)
    return Proposal.objects.get(run=run)


def rejected_change(proposal: Proposal) -> review.Change:
    changes = review.compare(curation.text_of(proposal.base_memory_md), proposal.memory_md)
    return next(c for c in changes if c.proposed and c.status in ("added", "changed"))


@pytest.mark.django_db
def test_requesting_changes_closes_the_proposal_unapplied_and_the_next_one_shows_the_message(
    model, layout
):
    first = proposal_for(layout)
    before = curation.text_of(curation.latest(layout, MD))
    reviewer = member(Role.REVIEWER, layout, "rita")
    client = Client()
    client.force_login(reviewer)
    change = rejected_change(first)
    curation.decide(first, MD, change.key, "reject", user=reviewer)
    hook = Webhook.objects.create(
        workspace=layout.workspace,
        url="http://127.0.0.1:9/hook",
        events=["proposal.changes_requested"],
        secret=webhooks.new_secret(),
    )

    empty = client.post(url("proposal_request_changes", layout, first.pk), {"message": " "})
    assert empty.status_code == 400
    answer = client.post(url("proposal_request_changes", layout, first.pk), {"message": MESSAGE})

    assert answer.status_code == 302
    first.refresh_from_db()
    assert first.status == Proposal.Status.CHANGES_REQUESTED
    assert first.review_message == MESSAGE and first.decided_by == reviewer
    assert curation.text_of(curation.latest(layout, MD)) == before  # nothing applied
    assert RejectedEntry.objects.filter(proposal=first, key=change.key).exists()
    event = AuditEvent.objects.get(action="proposal.request_changes")
    assert event.detail["message"] == MESSAGE
    delivery = hook.deliveries.get()
    assert delivery.event == "proposal.changes_requested"
    assert delivery.payload["data"]["detail"]["message"] == MESSAGE
    page = client.get(url("proposal_review", layout, first.pk)).content.decode()
    assert "Changes requested</b> by rita" in page and "rollback note is wrong" in page

    model.script(*append_to_memory_md("# Task Group: second\n\nscope: a second look\n"))
    second = proposal_for(layout)
    page = client.get(url("proposal_review", layout, second.pk)).content.decode()
    first_url = url("proposal_review", layout, first.pk)
    assert f'Changes requested on <a href="{first_url}">proposal #{first.pk}</a> by rita' in page
    assert "the rollback note is wrong." in page


@pytest.mark.django_db
def test_phase_two_is_told_the_request_and_the_rejected_entries(model, layout):
    first = proposal_for(layout)
    reviewer = member(Role.REVIEWER, layout, "rita")
    change = rejected_change(first)
    curation.decide(first, MD, change.key, "reject", user=reviewer)
    curation.request_changes(first, MESSAGE, user=reviewer)

    model.script(*append_to_memory_md("# Task Group: second\n\nscope: a second look\n"))
    proposal_for(layout)

    told = [r for r in model.requests if "tools" in r][-1]["input"][0]["content"]
    (feedback,) = prompts.extract_tagged(prompts.REVIEW_FEEDBACK_TAG, told)
    assert f"Changes requested on proposal #{first.pk}: {MESSAGE}" in feedback
    assert f"- {change.title}" in feedback
    assert change.proposed.strip() in [
        r.strip() for r in prompts.extract_tagged(prompts.REJECTED_TAG, told)
    ]


@pytest.mark.django_db
@pytest.mark.parametrize("outcome", ["approve", "reject"])
def test_a_later_proposal_decided_ends_the_feedback(model, layout, outcome):
    first = proposal_for(layout)
    reviewer = member(Role.REVIEWER, layout, "rita")
    curation.request_changes(first, MESSAGE, user=reviewer)
    model.script(*append_to_memory_md("# Task Group: second\n\nscope: a second look\n"))
    second = proposal_for(layout)
    assert curation.review_feedback(layout)[0].endswith(MESSAGE)
    if outcome == "approve":
        curation.approve(second, user=reviewer)
    else:
        curation.reject_proposal(second, user=reviewer)

    assert curation.review_feedback(layout) == ("", [])
    model.script(*append_to_memory_md("# Task Group: third\n\nscope: a third look\n"))
    proposal_for(layout)
    told = [r for r in model.requests if "tools" in r][-1]["input"][0]["content"]
    assert prompts.REVIEW_FEEDBACK_TAG not in told


@pytest.mark.django_db
def test_only_reviewers_request_changes_and_a_decided_proposal_refuses_it(model, layout):
    proposal = proposal_for(layout)
    viewer = Client()
    viewer.force_login(member(Role.VIEWER, layout, "vic"))
    reviewer = Client()
    reviewer.force_login(member(Role.REVIEWER, layout, "rita"))

    assert viewer.post(
        url("proposal_request_changes", layout, proposal.pk), {"message": MESSAGE}
    ).status_code in (403, 404)
    proposal.refresh_from_db()
    assert proposal.status == Proposal.Status.PENDING

    curation.reject_proposal(proposal, user=make_user("other"))
    late = reviewer.post(url("proposal_request_changes", layout, proposal.pk), {"message": "x"})
    assert late.status_code == 409
    proposal.refresh_from_db()
    assert proposal.status == Proposal.Status.REJECTED and proposal.review_message == ""


@pytest.mark.django_db
def test_the_api_requests_changes_like_the_dialog(model, layout):
    proposal = proposal_for(layout)
    viewer = member(Role.VIEWER, layout, "vic")
    reviewer = member(Role.REVIEWER, layout, "rita")
    path = f"/api/workspaces/a/layouts/{layout.pk}/proposals/{proposal.pk}/request-changes"

    def post(user, body):
        secret = tokens.create_token(user, "test", ["a"]).secret
        return Client().post(
            path, body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {secret}"
        )

    assert post(viewer, {"message": MESSAGE}).status_code == 403
    assert post(reviewer, {"message": "  "}).status_code == 422
    answer = post(reviewer, {"message": MESSAGE})

    assert answer.status_code == 200
    assert answer.json()["status"] == "changes_requested"
    assert answer.json()["review_message"] == MESSAGE
    listed = Client().get(
        f"/api/workspaces/a/layouts/{layout.pk}/proposals?status=changes_requested",
        HTTP_AUTHORIZATION=f"Bearer {tokens.create_token(viewer, 't', ['a']).secret}",
    )
    assert [p["id"] for p in listed.json()["items"]] == [proposal.pk]
    assert post(reviewer, {"message": MESSAGE}).status_code == 409
