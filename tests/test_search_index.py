"""The rollouts' search on PostgreSQL while a worker computes the search vectors of what
an import just wrote, and after (``memoryui.search``)."""

import re

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from memoryui import search
from memoryui.celery import app
from memoryui.importer import import_workspace
from memoryui.models import Layout, SearchDocument
from tests.factories import make_user

pytestmark = [pytest.mark.django_db, pytest.mark.postgresql]

RAW = "memories/engineering/raw_memories/deploy-auth-proxy-dc4ee6.md"


@pytest.fixture
def reviewer(client):
    client.force_login(make_user())
    return client


def engineering(workspace: str = "a") -> Layout:
    return Layout.objects.select_related("workspace").get(
        workspace__name=workspace, memories_dir="memories/engineering"
    )


def rollouts_found(client, layout: Layout, query: str) -> tuple[int, bool, int]:
    """What the rollouts page says for ``query``: the rollouts found, whether it says
    the search is still being indexed, and the text matches it ran."""
    page = reverse("memoryui:rollout_list", args=[layout.workspace.name, layout.pk])
    with CaptureQueriesContext(connection) as queries:
        html = client.get(page, {"q": query}).content.decode()
    matches = sum("websearch_to_tsquery" in q["sql"] for q in queries.captured_queries)
    found = re.search(r"(\d+) rollouts? matching", html)
    assert found, html
    return int(found[1]), 'id="search-indexing"' in html, matches


def unindexed(workspace: str) -> int:
    return (
        SearchDocument.objects.filter(layout__workspace__name=workspace)
        .extra(where=["search IS NULL"])
        .count()
    )


def test_a_new_rollout_is_found_at_once_and_by_its_word_forms_once_indexed(
    reviewer, workspace_copy, django_capture_on_commit_callbacks, eager
):
    ws = workspace_copy("small-a")
    raw = ws / RAW
    raw.write_text(raw.read_text() + "\n- zanzibarium: the deploys were flaky\n")
    with django_capture_on_commit_callbacks() as after_commit:
        import_workspace(ws, "a")
    layout = engineering()

    # Committed, before the worker's task: every document waits for its vector, and the
    # search still finds the new rollout, word for word, saying so.
    assert unindexed("a") == SearchDocument.objects.filter(layout__workspace__name="a").count()
    assert rollouts_found(reviewer, layout, "zanzibarium")[:2] == (1, True)
    assert rollouts_found(reviewer, layout, "flakiness")[:2] == (0, True)  # no word forms yet
    assert rollouts_found(reviewer, layout, "zanz%rium")[:2] == (0, True)  # as typed, no wildcard
    assert rollouts_found(reviewer, layout, '""')[:2] == (0, True)
    assert rollouts_found(reviewer, layout, "zanzibarium")[2] == 1  # matched again: not kept

    for callback in after_commit:  # the import's commit sends the task; eager runs it here
        callback()

    assert unindexed("a") == 0
    assert rollouts_found(reviewer, layout, "zanzibarium") == (1, False, 1)
    assert rollouts_found(reviewer, layout, "flakiness") == (1, False, 1)  # flaky, its stem
    assert rollouts_found(reviewer, layout, "flakiness") == (1, False, 0)  # kept to the next import


def test_a_changed_text_loses_its_vector_and_gets_a_new_one(workspace_copy, fixtures_dir):
    ws = workspace_copy("small-a")
    import_workspace(ws, "a")
    import_workspace(fixtures_dir / "small-a" / "workspace", "other")
    assert search.index_pending(None) == SearchDocument.objects.count()

    raw = ws / RAW
    raw.write_text(raw.read_text() + "\n- quokkafication of the proxy\n")
    import_workspace(ws, "a")

    changed = SearchDocument.objects.get(layout__workspace__name="a", body__contains="quokka")
    assert unindexed("a") == 1 and changed.pk in search.matching_documents(
        changed.layout, "quokkafication"
    ).values_list("pk", flat=True)  # found word for word meanwhile
    assert search.index_pending(engineering("other").workspace_id) == 0  # not another's
    assert search.index_pending(engineering("a").workspace_id) == 1
    assert list(
        search.matching_documents(changed.layout, "quokkafications").values_list("pk", flat=True)
    ) == [changed.pk]  # by its vector now


def test_the_vectors_a_lost_task_left_are_computed_by_the_beat(workspace_copy):
    import_workspace(workspace_copy("small-a"), "a")  # its task never ran (rolled back here)
    assert unindexed("a") > 0

    entry = settings.CELERY_BEAT_SCHEDULE["index-search"]
    assert entry["schedule"] <= 60
    app.tasks[entry["task"]]()

    assert unindexed("a") == 0


def test_imports_committed_before_the_task_starts_share_one_task(
    workspace_copy, django_capture_on_commit_callbacks, monkeypatch
):
    """Sandboxes persisting every few seconds to one workspace queue one task between
    them, not one a persist: the task computes every vector missing when it starts."""
    sent = []
    monkeypatch.setattr(app.tasks["memoryui.tasks.index_search"], "delay", sent.append)
    ws, raw = workspace_copy("small-a"), RAW

    def persist(line: str) -> None:
        (ws / raw).write_text((ws / raw).read_text() + f"\n- {line}\n")
        with django_capture_on_commit_callbacks(execute=True):
            import_workspace(ws, "a")

    persist("first")
    workspace_id = engineering().workspace_id
    persist("second")
    persist("third")
    assert sent == [workspace_id]

    assert search.index_pending(workspace_id) > 0  # the task starts
    persist("fourth")  # after its start: a task of its own
    assert sent == [workspace_id, workspace_id]
    assert unindexed("a") == 1
