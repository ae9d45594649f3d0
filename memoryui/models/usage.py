"""Which memory files and ``MEMORY.md`` entries agents read, found in the rollouts
(``generation.memory_reads``): one row per read, one per entry a read printed."""

from __future__ import annotations

from django.db import models

from .rollouts import Rollout
from .versions import MemoryVersion
from .workspaces import Layout


class MemoryRead(models.Model):
    """One read of one memory file by a call item of a rollout's run segment."""

    class Kind(models.TextChoices):
        MEMORY_SUMMARY = "memory_summary", "memory_summary.md"
        MEMORY_MD = "memory_md", "MEMORY.md"
        RAW_MEMORIES = "raw_memories", "Raw memories"
        ROLLOUT_SUMMARY = "rollout_summary", "Rollout summaries"
        SKILL = "skill", "Skills"

    # The layout is the rollout's (copied for the per-kind counts). Its rows go with the
    # rollout, whose key is the one the database checks; Django's own cascade deletes
    # them with a layout. The database checks no other key of these two tables: each
    # check is a look-up per row written, and an import writes a row per read and per
    # entry read (a quarter of what usage adds to a PostgreSQL import, bench/README.md).
    layout = models.ForeignKey(
        Layout,
        on_delete=models.CASCADE,
        related_name="memory_reads",
        db_index=False,
        db_constraint=False,
    )
    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="memory_reads")
    segment = models.PositiveIntegerField()
    item = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=Kind.choices)
    path = models.CharField(max_length=1024, help_text="relative to the memories dir")
    how = models.CharField(max_length=16)  # whole, range, cut, search, load_skill
    command = models.TextField(blank=True)
    # The segment's updated_at: when the run that read it ended.
    read_at = models.DateTimeField(null=True, blank=True)
    terminal_state = models.CharField(max_length=32, blank=True)
    # For MEMORY.md: the version the agent had then, and how many entries it printed.
    # A version is deleted only with its layout, whose reads go with it: no index needed
    # to find a version's reads (one fewer to write per read an import finds).
    version = models.ForeignKey(
        MemoryVersion,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        related_name="+",
        db_index=False,
        db_constraint=False,
    )
    entry_count = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["rollout", "segment", "item"]
        indexes = [models.Index(fields=["layout", "kind", "read_at"], name="memory_read_kind")]

    def __str__(self) -> str:
        return f"{self.rollout_id} {self.segment}/{self.item}: {self.path}"


class EntryRead(models.Model):
    """A ``MEMORY.md`` entry (by its ``generation.review`` key in ``version``) that a
    read printed; denormalised from the read for the per-entry counts."""

    read = models.ForeignKey(MemoryRead, on_delete=models.CASCADE, related_name="entries")
    # The layout, the version and the rollout are its read's (copied for the counts): a
    # row goes with its read when any of them is deleted, so none needs an index or a
    # key checked by the database of its own (fewer to write per entry an import finds
    # read).
    layout = models.ForeignKey(
        Layout, on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False
    )
    version = models.ForeignKey(
        MemoryVersion,
        on_delete=models.DO_NOTHING,
        related_name="+",
        db_index=False,
        db_constraint=False,
    )
    key = models.CharField(max_length=1000)
    rollout = models.ForeignKey(
        Rollout, on_delete=models.DO_NOTHING, related_name="+", db_index=False, db_constraint=False
    )
    segment = models.PositiveIntegerField()
    read_at = models.DateTimeField(null=True, blank=True)
    terminal_state = models.CharField(max_length=32, blank=True)

    class Meta:
        indexes = [models.Index(fields=["layout", "version", "key"], name="entry_read_key")]

    def __str__(self) -> str:
        return f"{self.key} read by {self.rollout_id}"
