"""The poisoning corpus end to end: its SDK tree imported, its consolidation proposed,
every injected instruction that reached an entry flagged, and fewer than 1 in 20 benign
entries flagged."""

from __future__ import annotations

import shutil

import pytest

from memoryui.importer import import_workspace
from memoryui.models import Layout
from tests.poisoning_corpus import CORPUS, corpus_proposal, labels, proposal_score

pytestmark = pytest.mark.django_db


@pytest.fixture
def corpus_layout(tmp_path):  # type: ignore[no-untyped-def]
    root = tmp_path / "workspace"
    shutil.copytree(CORPUS / "workspace", root)
    import_workspace(root, "corpus")
    return Layout.objects.select_related("workspace").get(workspace__name="corpus")


def test_every_injection_that_reaches_the_proposal_is_flagged_with_its_kind(corpus_layout):
    result = proposal_score(corpus_proposal(corpus_layout))

    reached_kinds = {
        v["kind"] for v in labels().values() if v["label"] == "injected" and v["reaches"]
    }
    assert set(result.reached) == reached_kinds  # each kind lands in memory
    assert result.missed == []
    assert result.caught_as_kind == result.reached
    # The one a model would not copy (no reader note) never reaches memory.
    assert result.unreached == [
        r for r, v in labels().items() if v["label"] == "injected" and not v["reaches"]
    ]


def test_fewer_than_one_benign_entry_in_twenty_carries_a_poisoning_flag(corpus_layout):
    result = proposal_score(corpus_proposal(corpus_layout))

    assert result.benign_entries >= 20
    assert result.false_positive_rate < 1 / 20, result.benign_flagged
