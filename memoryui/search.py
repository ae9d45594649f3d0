"""Full-text search over transcripts, raw memories and rollout summaries.

PostgreSQL uses its full-text search (a stored, GIN-indexed English ``tsvector``
column beside each document, see migration 0003); other databases fall back to a
case-insensitive substring match of every word, which is slower but finds the same
kind of thing.
"""

from typing import Any

from django.db import connection
from django.db.models import QuerySet

from .models import Layout, SearchDocument


def matching_documents(layout: Layout, query: str) -> QuerySet[SearchDocument]:
    documents = SearchDocument.objects.filter(layout=layout)
    if connection.vendor == "postgresql":
        return documents.extra(
            where=["search @@ websearch_to_tsquery('english', %s)"],
            params=[query],
        )
    for word in query.split():
        documents = documents.filter(body__icontains=word.strip('"'))
    return documents


def matching_rollout_ids(layout: Layout, query: str) -> QuerySet[SearchDocument, Any]:
    return matching_documents(layout, query).values("rollout_id")
