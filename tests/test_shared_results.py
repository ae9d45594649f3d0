"""A large document's entries and the comparison of two, shared by a deployment's
processes (``generation.shared_results``, ``memoryui.review_cache``): a web process
started anew reads what another process computed instead of parsing and comparing again."""

from __future__ import annotations

import logging

import pytest
import redis
from django.test import Client, override_settings

from generation import review, shared_results
from generation.review import comparison, document
from memoryui import curation, entry_lineage, review_cache
from memoryui.curation import reviews
from memoryui.importer import import_workspace
from memoryui.models import Layout, MemoryVersion, Role
from tests.conftest import REDIS_URL
from tests.review_world import entry, proposal_over
from tests.test_curation import member, url

MD = MemoryVersion.Document.MEMORY_MD
BASE = review.join(entry(i, f"person {i}") for i in range(40))
PROPOSED = review.join(entry(i, f"model {i}" if i % 3 else f"person {i}") for i in range(40))


class DictStore:
    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}
        self.reads = 0

    def get(self, key: str) -> bytes | None:
        self.reads += 1
        return self.values.get(key)

    def set(self, key: str, value: bytes) -> None:
        self.values[key] = value


@pytest.fixture
def computed(monkeypatch):
    """How many times this process parsed a document into entries and compared two."""
    counts = {"entries": 0, "compare": 0}
    parse, compare = document._parsed_entries, comparison._compared

    def counting_parse(text: str):  # type: ignore[no-untyped-def]
        counts["entries"] += 1
        return parse(text)

    def counting_compare(current: str, proposed: str, pairing: bool):  # type: ignore[no-untyped-def]
        counts["compare"] += 1
        return compare(current, proposed, pairing)

    monkeypatch.setattr(document, "_parsed_entries", counting_parse)
    monkeypatch.setattr(comparison, "_compared", counting_compare)
    as_a_new_process()
    yield counts
    as_a_new_process()


@pytest.fixture
def shared(monkeypatch):
    """Every text counts as large; the store is given back to what settings say after."""
    monkeypatch.setattr(shared_results, "SHARED_FROM", 1)
    yield
    review_cache.share_if_shared()


def as_a_new_process() -> None:
    """Forget the entries and comparisons this process keeps, as a process started anew."""
    document._entries.cache_clear()
    comparison._compare.cache_clear()
    comparison._changed.cache_clear()
    entry_lineage.earlier_keys.cache_clear()


def test_a_new_process_reads_the_entries_and_the_comparison_another_computed(computed, shared):
    store = DictStore()
    shared_results.keep_in(store)
    first = review.compare(BASE, PROPOSED)
    assert computed == {"entries": 2, "compare": 1}
    assert len(store.values) == 3  # both documents' entries, and their comparison

    as_a_new_process()
    again = review.compare(BASE, PROPOSED)
    entries = review.entries(PROPOSED)
    assert computed == {"entries": 2, "compare": 1}  # nothing computed again
    assert again == first
    assert [e.key for e in entries] == [c.key for c in first]
    assert {c.status for c in again} == {"changed", "unchanged"}


def test_small_documents_are_computed_where_they_are_needed(computed):
    store = DictStore()
    shared_results.keep_in(store)
    try:
        review.compare(BASE, PROPOSED)
    finally:
        shared_results.keep_in(None)
    assert len(BASE) + len(PROPOSED) < shared_results.SHARED_FROM
    assert store.values == {} and store.reads == 0
    assert computed == {"entries": 2, "compare": 1}


def test_a_damaged_shared_result_is_computed_again(computed, shared, caplog):
    store = DictStore()
    shared_results.keep_in(store)
    expected = review.compare(BASE, PROPOSED)
    for key in store.values:
        store.values[key] = b"not a compressed pickle"

    as_a_new_process()
    with caplog.at_level(logging.WARNING):
        assert review.compare(BASE, PROPOSED) == expected
    assert computed == {"entries": 4, "compare": 2}
    assert "could not be read" in caplog.text


def test_results_stored_by_other_code_are_not_read(computed, shared, monkeypatch):
    """A release that changes the parser or the comparison makes new keys: what the
    earlier one stored is never taken for its own."""
    store = DictStore()
    shared_results.keep_in(store)
    review.compare(BASE, PROPOSED)
    monkeypatch.setattr(shared_results, "code_digest", lambda: "another-release")

    as_a_new_process()
    review.compare(BASE, PROPOSED)
    assert computed == {"entries": 4, "compare": 2}
    assert len(store.values) == 6


def test_the_code_digest_follows_the_parser_and_the_reviews_source():
    from pathlib import Path  # noqa: PLC0415 (this test alone)

    sources = Path(shared_results.__file__).parent
    digest = shared_results.code_digest.__wrapped__()
    assert digest == shared_results.code_digest()
    assert (sources / "memory_md.py").is_file() and (sources / "review" / "comparison.py").is_file()


REDIS_CACHE = {
    "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
}


@pytest.mark.django_db(transaction=True)
def test_the_first_review_in_a_new_web_process_reads_the_comparison_made_with_the_proposal(
    layout, eager, computed, shared, monkeypatch
):
    searches = []
    find_duplicates = reviews._find_duplicates
    monkeypatch.setattr(
        reviews, "_find_duplicates", lambda *a: searches.append(a) or find_duplicates(*a)
    )
    redis.Redis.from_url(REDIS_URL).flushdb()
    with override_settings(CACHES=REDIS_CACHE, CACHE_URL=REDIS_URL):
        review_cache.share_if_shared()
        # Made as the pipeline's worker makes it: its entries checked, its texts compared;
        # then a worker lints it and finds its duplicates (``tasks.lint_proposal``).
        proposal = proposal_over(layout, BASE, PROPOSED)
        assert computed["compare"] >= 1
        assert len(searches) == 2  # both documents'

        as_a_new_process()  # a web process started after it
        before = dict(computed)
        client = Client()
        client.force_login(member(Role.REVIEWER, layout))
        page = client.get(url("proposal_review", layout, proposal.pk))
    redis.Redis.from_url(REDIS_URL).flushdb()

    assert page.status_code == 200
    html = page.content.decode()
    assert "26 entries shown" in html  # the comparison read: every third entry unchanged
    assert html.count("review-entry status-changed") == 25  # its first page
    assert computed == before  # no parse, no comparison: read from the shared cache
    assert len(searches) == 2  # no search for duplicates either


def test_a_shared_cache_that_cannot_be_reached_costs_the_computing_only(computed, shared, caplog):
    closed = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",
        }
    }
    with override_settings(CACHES=closed, CACHE_URL="redis://127.0.0.1:1/0"):
        review_cache.share_if_shared()
        with caplog.at_level(logging.WARNING):
            changes = review.compare(BASE, PROPOSED)

    assert [c.key for c in changes] == [e.key for e in review.entries(PROPOSED)]
    assert computed == {"entries": 2, "compare": 1}
    assert "the shared cache could not be read" in caplog.text
    assert "the shared cache could not keep a review result" in caplog.text


def save(layout, text: str):  # type: ignore[no-untyped-def]
    current = curation.latest(layout, MD)
    return curation.save_document(
        layout, MD, text, user=None, reason="test", based_on=current.number if current else None
    )


@pytest.mark.django_db
def test_a_new_memory_version_is_compared_with_the_one_before_by_a_worker(
    layout, eager, computed, shared, django_capture_on_commit_callbacks
):
    store = DictStore()
    shared_results.keep_in(store)
    with django_capture_on_commit_callbacks(execute=True):
        before = save(layout, BASE)
    with django_capture_on_commit_callbacks(execute=True):
        after = save(layout, PROPOSED)  # its commit has a worker compare it with BASE
    assert computed["compare"] == 2  # each save's: BASE with the imported version, and
    compared = computed["compare"]  # PROPOSED with BASE

    as_a_new_process()
    forms = entry_lineage.lineage(layout, after, since=before.number)
    assert computed["compare"] == compared  # usage's lineage read the worker's comparison
    keys = [e.key for e in review.entries(PROPOSED)]
    assert {(after.pk, key): key for key in keys}.items() <= forms.items()
    assert {(before.pk, key): key for key in keys}.items() <= forms.items()


@pytest.mark.django_db
def test_a_version_is_not_compared_ahead_where_nothing_is_shared(
    layout, computed, django_capture_on_commit_callbacks
):
    shared_results.keep_in(None)
    save(layout, BASE)
    with django_capture_on_commit_callbacks(execute=False) as queued:
        save(layout, PROPOSED)
    assert [c.func.__name__ for c in queued if hasattr(c, "func")] == ["_lint_later"]
    assert computed["compare"] == 0


@pytest.mark.django_db
def test_a_memory_md_an_import_brings_is_compared_with_the_one_before_by_a_worker(
    ws, eager, computed, shared, django_capture_on_commit_callbacks
):
    store = DictStore()
    shared_results.keep_in(store)
    index = ws / "memories" / "engineering" / "MEMORY.md"
    index.write_text(BASE)
    with django_capture_on_commit_callbacks(execute=True):
        import_workspace(ws, "a")
    index.write_text(PROPOSED)
    with django_capture_on_commit_callbacks(execute=True):
        import_workspace(ws, "a")  # the agent's new version, compared by a worker
    compared = computed["compare"]
    assert compared >= 1

    layout = Layout.objects.get(workspace__name="a", memories_dir="memories/engineering")
    versions = list(layout.versions.filter(document=MD).order_by("number"))
    assert [curation.text_of(v) for v in versions[-2:]] == [BASE, PROPOSED]
    as_a_new_process()
    forms = entry_lineage.lineage(layout, versions[-1], since=versions[-2].number)
    assert computed["compare"] == compared  # read the worker's comparison
    assert len(forms) == 2 * len(review.entries(PROPOSED))
