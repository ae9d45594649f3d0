"""Viewed marks carry over to the layout's next proposal, like a pull request's viewed
files: kept on the entries whose proposed text is unchanged since, reset on those the
next proposal changes again."""

import pytest
from django.test import Client

from generation import review
from memoryui import curation
from memoryui.models import EntryView, MemoryVersion, Role
from tests.review_world import entry, proposal_over
from tests.test_curation import member, url

MD = MemoryVersion.Document.MEMORY_MD


@pytest.mark.django_db
def test_viewed_marks_carry_to_the_next_proposal_for_entries_unchanged_since(layout):
    reviewer = member(Role.REVIEWER, layout)
    base = review.join([entry(i, f"person {i}") for i in range(3)])
    first = proposal_over(layout, base, review.join([entry(i, f"model {i}") for i in range(3)]))
    keys = [c.key for c in review.compare(base, first.memory_md) if c.status != "unchanged"]
    for key in keys:
        EntryView.objects.create(proposal=first, document=MD, key=key, user=reviewer)
    # The next consolidation changes entry 1 again and leaves 0 and 2 as first proposed.
    again = [entry(0, "model 0"), entry(1, "model 1, once more"), entry(2, "model 2")]
    second = proposal_over(layout, base, review.join(again))

    carried = curation.carry_views(second)
    client = Client()
    client.force_login(reviewer)
    page = client.get(url("proposal_review", layout, second.pk)).content.decode()

    viewed = set(EntryView.objects.filter(proposal=second).values_list("key", flat=True))
    assert carried == 2 and viewed == {keys[0], keys[2]}
    assert "0 of 3 decided</b> · 2 viewed" in page
