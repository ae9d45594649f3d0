"""Documents and skill files keep their history through one set of rules
(``memoryui.versioning``): numbered from the latest, a save on a stale base refused, and
content the file already holds recognised as no change."""

import pytest
from django.db import transaction

from memoryui import curation, skills, versioning
from memoryui.models import MemoryVersion, SkillFileVersion
from tests.factories import make_user

pytestmark = pytest.mark.django_db

KINDS = [
    (MemoryVersion, {"document": MemoryVersion.Document.MEMORY_MD}, curation.StaleVersion),
    (SkillFileVersion, {"path": "skills/deploy/SKILL.md"}, skills.StaleSkill),
]


@pytest.mark.parametrize(("model", "key", "stale"), KINDS)
def test_a_version_follows_the_latest_and_a_stale_base_is_refused(layout, model, key, stale):
    user = make_user()
    before = versioning.latest(model, layout, **key)
    based_on = before.number if before else None
    with transaction.atomic():
        current = versioning.locked_latest(model, layout, based_on, stale, **key)
        made = versioning.create(
            model,
            layout,
            current,
            b"one\n",
            user=user,
            author_kind="person",
            reason="x" * 600,
            **key,
        )

    assert made.number == (based_on or 0) + 1
    assert versioning.latest(model, layout, **key) == made
    assert versioning.content(made) == b"one\n" and len(made.reason) == 500
    assert versioning.unchanged(made, b"one\n") and not versioning.unchanged(made, b"two\n")
    with pytest.raises(stale) as refused, transaction.atomic():
        versioning.locked_latest(model, layout, based_on, stale, **key)
    assert refused.value.latest == made


def test_a_deletion_is_a_version_without_content_and_deleting_nothing_is_no_change(layout):
    key = {"path": "skills/deploy/SKILL.md"}
    assert versioning.unchanged(None, None) and not versioning.unchanged(None, b"")
    first = versioning.create(
        SkillFileVersion, layout, None, b"a\n", user=None, author_kind="agent", reason="", **key
    )
    gone = versioning.create(
        SkillFileVersion, layout, first, None, user=None, author_kind="agent", reason="", **key
    )
    assert gone.number == 2 and versioning.content(gone) is None
    assert versioning.unchanged(gone, None) and not versioning.unchanged(gone, b"a\n")
