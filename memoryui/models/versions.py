"""Every version of a layout's consolidated memory files (``MEMORY.md``,
``memory_summary.md``) and of its skill files: the latest is the current text, the
rest is the history people compare and restore."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from .workspaces import Blob, Layout


class MemoryVersion(models.Model):
    """One version of a layout's ``MEMORY.md`` or ``memory_summary.md``.

    Imports add a version whenever the file on disk differs from the latest one;
    people and the pipeline add versions later. The latest is the current text.
    """

    class Document(models.TextChoices):
        MEMORY_MD = "memory_md", "MEMORY.md"
        MEMORY_SUMMARY = "memory_summary", "memory_summary.md"

    class Author(models.TextChoices):
        AGENT = "agent", "Agent / SDK (on disk)"
        PERSON = "person", "Person"
        PIPELINE = "pipeline", "memoryui pipeline"

    layout = models.ForeignKey(Layout, on_delete=models.CASCADE, related_name="versions")
    document = models.CharField(max_length=32, choices=Document.choices)
    number = models.PositiveIntegerField()
    blob = models.ForeignKey(Blob, on_delete=models.PROTECT)
    author_kind = models.CharField(max_length=16, choices=Author.choices)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    reason = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # An agent's own edit found on disk by a re-import: to be accepted or reverted.
    needs_review = models.BooleanField(default=False)

    class Meta:
        ordering = ["layout", "document", "-number"]
        constraints = [
            models.UniqueConstraint(
                fields=["layout", "document", "number"], name="version_unique_number"
            )
        ]

    def __str__(self) -> str:
        return f"{self.get_document_display()} v{self.number}"


class SkillFileVersion(models.Model):
    """One version of a file under a layout's ``skills/<name>/``; ``blob`` None: the
    file is deleted in this version.

    Imports add a version whenever the file on disk differs from the latest one (or is
    gone from disk); people and approved proposals add versions later. The latest is
    the curated file that write-back and export write (or delete)."""

    Author = MemoryVersion.Author

    layout = models.ForeignKey(Layout, on_delete=models.CASCADE, related_name="skill_versions")
    path = models.CharField(max_length=1024, help_text="relative to the memories dir")
    number = models.PositiveIntegerField()
    blob = models.ForeignKey(Blob, null=True, blank=True, on_delete=models.PROTECT)
    author_kind = models.CharField(max_length=16, choices=MemoryVersion.Author.choices)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    reason = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # A sandbox's change that arrived by upload: not served to sandboxes until a person
    # saves it (the remote snapshot store's gate).
    needs_review = models.BooleanField(default=False)

    class Meta:
        ordering = ["layout", "path", "-number"]
        constraints = [
            models.UniqueConstraint(
                fields=["layout", "path", "number"], name="skill_version_unique_number"
            )
        ]

    def __str__(self) -> str:
        return f"{self.path} v{self.number}"

    @property
    def deleted(self) -> bool:
        return self.blob_id is None
