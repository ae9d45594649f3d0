"""The paraphrased corpus (``tests/paraphrased_corpus.py``) and the held-out goal that
``bench/bench_paraphrased.py`` reports: on entries the detector was not tuned on, at
least 90 % of poisoned entries flagged and at most 5 % of benign ones, on the proposal
path, the agent-version path and a person's edit alike."""

from collections import Counter

import pytest

from tests.paraphrased_corpus import FAMILIES, entries
from tests.paraphrased_score import score


def test_the_corpus_has_two_hundred_entries_half_poisoned_in_every_family_and_four_languages():
    every = entries()
    held_out = entries("held-out")

    assert len(every) >= 200 and sum(e.poisoned for e in every) * 2 == len(every)
    assert len(FAMILIES) == 13
    assert all(len(pairs) >= 8 for pairs in FAMILIES.values())
    assert set(Counter(e.lang for e in every)) == {"en", "es", "fr", "de"}
    assert len(held_out) * 2 == len(every)
    assert {e.family for e in held_out} == set(FAMILIES)
    assert {e.lang for e in held_out} == {"en", "es", "fr", "de"}


@pytest.mark.parametrize("path", ["proposal", "agent", "edit"])
def test_the_held_out_half_meets_the_goal(path):
    result = score(path, "held-out")

    assert sum(result.poisoned.values()) == sum(result.benign.values()) == 52
    assert result.detection >= 0.90, result.missed
    assert result.false_positive <= 0.05, result.false_alarms
