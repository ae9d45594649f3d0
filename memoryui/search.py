"""Full-text search over transcripts, raw memories and rollout summaries.

PostgreSQL uses its full-text search: an English ``tsvector`` beside each document,
GIN-indexed (migrations 0003 and 0043). An import does not compute it: it writes the
documents with no vector, and ``index_pending`` fills them once the import has committed
(a task the import queues, and the beat's sweep after a lost one). Computing vectors was
half of the database's work of an import, and an import holds its workspace's lock until
it commits. Until its vector is there, a document is matched as other databases match
every document: each word of the query as a case-insensitive substring. A search never
misses a new rollout; it may find a little more or less of one for those seconds (no
stemming, no phrase), and ``index_pending_in`` lets a page say so.
"""

from functools import partial
from typing import Any

from django.core.cache import cache
from django.db import connection, transaction
from django.db.models import QuerySet

from . import task_queue
from .models import Layout, SearchDocument, Workspace

# Documents given their vector per transaction: a batch's row locks are held for well
# under a second, so an import that updates one of them waits little.
INDEX_BATCH = 500
ANALYZE_AFTER = 1000
# How long a queued task stands for the imports after it (a lost one's mark lapses).
QUEUED_SECONDS = 120


def full_text() -> bool:
    """Whether this database searches by vectors (PostgreSQL) rather than substrings."""
    return connection.vendor == "postgresql"


def _words(query: str) -> list[str]:
    return [w for w in (word.strip('"') for word in query.split()) if w]


def _like(word: str) -> str:
    escaped = word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def matching_documents(layout: Layout, query: str) -> QuerySet[SearchDocument]:
    documents = SearchDocument.objects.filter(layout=layout)
    if full_text():
        words = _words(query)
        # No word (a query of quotes alone) matches nothing, as its vector query does.
        pending = " AND ".join(["search IS NULL", *["body ILIKE %s"] * len(words)])
        pending = pending if words else "FALSE"
        return documents.extra(
            where=[f"(search @@ websearch_to_tsquery('english', %s) OR ({pending}))"],
            params=[query, *map(_like, words)],
        )
    for word in _words(query):
        documents = documents.filter(body__icontains=word)
    return documents


def matching_rollout_ids(layout: Layout, query: str) -> QuerySet[SearchDocument, Any]:
    return matching_documents(layout, query).values("rollout_id")


def index_pending_in(layout: Layout) -> bool:
    """Whether some of the layout's documents still wait for their vector (one look-up
    in the index of those documents)."""
    if not full_text():
        return False
    return SearchDocument.objects.filter(layout=layout).extra(where=["search IS NULL"]).exists()


def _queued(workspace_id: int) -> str:
    return f"memoryui:search-vectors-queued:{workspace_id}"


def index_soon(workspace: Workspace) -> None:
    """Once the current transaction commits (an import's), have a worker give the
    documents it wrote their vectors. Nothing to do where search needs none."""
    if full_text():
        transaction.on_commit(partial(_queue, workspace.pk))


def _queue(workspace_id: int) -> None:
    # One task waits per workspace (where the cache is shared, as Redis is in
    # production): it computes every vector missing when it starts, so 50 sandboxes
    # persisting meanwhile add no task each. The mark lapses, and beat's sweep runs
    # besides, should the task be lost.
    if not cache.add(_queued(workspace_id), 1, QUEUED_SECONDS):
        return
    sent = task_queue.send_best_effort(
        "memoryui.tasks.index_search", workspace_id, what="the search vectors of an import"
    )
    if not sent:
        cache.delete(_queued(workspace_id))  # beat's sweep will do it


def index_pending(workspace_id: int | None = None) -> int:
    """Give every document that has none its vector (those of one workspace, or all),
    a batch per transaction; returns how many. Batches locked by another indexer are
    left to it (``SKIP LOCKED``), so indexers never wait for each other, and an import
    that changes a document's body while it waits here has it indexed again (migration
    0043's trigger clears the vector)."""
    if not full_text():
        return 0
    if workspace_id is not None:
        cache.delete(_queued(workspace_id))  # what commits from now on queues a task again
    table = connection.ops.quote_name(SearchDocument._meta.db_table)
    layouts = connection.ops.quote_name(Layout._meta.db_table)
    scope, params = "", []
    if workspace_id is not None:
        scope = f"AND layout_id IN (SELECT id FROM {layouts} WHERE workspace_id = %s)"
        params = [workspace_id]
    indexed = 0
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET search = to_tsvector('english', body) WHERE id IN "
                f"(SELECT id FROM {table} WHERE search IS NULL {scope} "
                "LIMIT %s FOR UPDATE SKIP LOCKED)",
                [*params, INDEX_BATCH],
            )
            done = cursor.rowcount
        indexed += done
        if done < INDEX_BATCH:
            break
    if indexed > ANALYZE_AFTER:
        # The import's ANALYZE saw every new document without a vector: with those
        # statistics the planner would read the search's "not yet indexed" side as the
        # whole layout, and scan it.
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {table}")
    return indexed
