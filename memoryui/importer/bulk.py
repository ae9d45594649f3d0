"""The import's own bulk step: fresh planner statistics after a large import. The
bulk loading itself is ``memoryui.bulk`` (the memory reads of ``memoryui.usage`` go
through it too)."""

from __future__ import annotations

from django.db import connection

from ..models import (
    EntryRead,
    MemoryRead,
    RawMemory,
    Rollout,
    RolloutSummary,
    SearchDocument,
    WorkspaceFile,
)

ANALYZE_AFTER = 1000


def analyze_after(written: int) -> None:
    """On PostgreSQL, after a large import: fresh statistics, or the planner treats the
    new rows as absent until autovacuum gets round to it, and picks slow plans for the
    pages."""
    if connection.vendor != "postgresql" or written <= ANALYZE_AFTER:
        return
    with connection.cursor() as cursor:
        tables = (WorkspaceFile, Rollout, RawMemory, RolloutSummary, SearchDocument)
        for model in (*tables, MemoryRead, EntryRead):
            cursor.execute(f"ANALYZE {connection.ops.quote_name(model._meta.db_table)}")
