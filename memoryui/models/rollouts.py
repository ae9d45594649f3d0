"""What the importer parsed from a layout's files: its rollouts, the raw memories and
rollout summaries phase one wrote for them, and the text search reads."""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import models

from .workspaces import Layout, WorkspaceFile

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Rollout(models.Model):
    """One ``<sessions_dir>/<rollout_id>.jsonl``: one or more run segments."""

    # These tables index (layout, rollout_id) or more; an index of the layout alone
    # would repeat that index's first column and cost every import. Their layout is
    # their file's (copied for those indexes): a row goes with its file, whose key the
    # database checks, and Django's own cascade deletes it with its layout. In these
    # four tables the database does not check the copy: each check is a look-up per
    # row when an import commits (0.14 s of a 10,000-rollout import, bench/README.md).
    layout = models.ForeignKey(
        Layout,
        on_delete=models.CASCADE,
        related_name="rollouts",
        db_index=False,
        db_constraint=False,
    )
    file = models.OneToOneField(WorkspaceFile, on_delete=models.CASCADE, related_name="rollout")
    rollout_id = models.CharField(max_length=128)
    segment_count = models.PositiveIntegerField(default=0)
    item_count = models.PositiveIntegerField(default=0)
    updated_at_raw = models.CharField(max_length=64, blank=True)
    updated_at = models.DateTimeField(null=True, blank=True)
    # Denormalised for fast lists and charts: the day of updated_at (UTC), and a sort
    # key that puts rollouts without a date last (the epoch) in "most recent" order.
    updated_day = models.DateField(null=True, blank=True)
    sort_at = models.DateTimeField(default=EPOCH)
    terminal_state = models.CharField(max_length=32, blank=True)
    title = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-sort_at", "-rollout_id"]
        constraints = [
            models.UniqueConstraint(fields=["layout", "rollout_id"], name="rollout_unique_id")
        ]
        indexes = [
            models.Index(fields=["layout", "sort_at", "rollout_id"], name="rollout_recent"),
            models.Index(
                fields=["layout", "terminal_state", "sort_at", "rollout_id"],
                name="rollout_state_recent",
            ),
            # Covers the layout overview's rollouts per day and state.
            models.Index(fields=["layout", "updated_day", "terminal_state"], name="rollout_day"),
        ]

    def __str__(self) -> str:
        return self.rollout_id


class RawMemory(models.Model):
    """``<memories_dir>/raw_memories/<rollout_id>.md``: phase one's memory of a rollout."""

    layout = models.ForeignKey(
        Layout,
        on_delete=models.CASCADE,
        related_name="raw_memories",
        db_index=False,
        db_constraint=False,
    )
    file = models.OneToOneField(WorkspaceFile, on_delete=models.CASCADE, related_name="raw_memory")
    rollout_id = models.CharField(max_length=128)
    updated_at_raw = models.CharField(max_length=64, blank=True)
    rollout_path = models.CharField(max_length=1024, blank=True)
    rollout_summary_file = models.CharField(max_length=1024, blank=True)
    terminal_state = models.CharField(max_length=32, blank=True)

    class Meta:
        ordering = ["-updated_at_raw", "rollout_id"]
        verbose_name_plural = "raw memories"
        # "Does this rollout have a raw memory?" for each row of the rollout list.
        indexes = [models.Index(fields=["layout", "rollout_id"], name="raw_memory_of_rollout")]

    def __str__(self) -> str:
        return self.rollout_id


class RolloutSummary(models.Model):
    """``<memories_dir>/rollout_summaries/<rollout_id>_<slug>.md``."""

    layout = models.ForeignKey(
        Layout,
        on_delete=models.CASCADE,
        related_name="rollout_summaries",
        db_index=False,
        db_constraint=False,
    )
    file = models.OneToOneField(
        WorkspaceFile, on_delete=models.CASCADE, related_name="rollout_summary"
    )
    rollout_id = models.CharField(max_length=128)
    slug = models.CharField(max_length=128, blank=True)
    session_id = models.CharField(max_length=128, blank=True)
    updated_at_raw = models.CharField(max_length=64, blank=True)
    terminal_state = models.CharField(max_length=32, blank=True)

    class Meta:
        ordering = ["-updated_at_raw", "rollout_id"]
        verbose_name_plural = "rollout summaries"
        indexes = [models.Index(fields=["layout", "rollout_id"], name="summary_of_rollout")]

    def __str__(self) -> str:
        return f"{self.rollout_id}_{self.slug}"


class SearchDocument(models.Model):
    """Searchable text of a transcript, raw memory or rollout summary. PostgreSQL
    searches it with a full-text index; SQLite with a substring scan."""

    class Kind(models.TextChoices):
        TRANSCRIPT = "transcript", "Transcript"
        RAW_MEMORY = "raw_memory", "Raw memory"
        SUMMARY = "summary", "Rollout summary"

    # Its own index kept: SQLite plans the search's body scan better with it than with
    # (layout, rollout_id) alone (bench_pages "rollouts, search": 24 ms with it, 30 without).
    layout = models.ForeignKey(
        Layout, on_delete=models.CASCADE, related_name="search_documents", db_constraint=False
    )
    file = models.OneToOneField(
        WorkspaceFile, on_delete=models.CASCADE, related_name="search_document"
    )
    rollout_id = models.CharField(max_length=128)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    body = models.TextField()

    class Meta:
        indexes = [models.Index(fields=["layout", "rollout_id"])]

    def __str__(self) -> str:
        return f"{self.kind}: {self.rollout_id}"
