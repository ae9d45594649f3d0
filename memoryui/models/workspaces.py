"""A workspace, its layouts and the files imported from it, and the imports that
brought them: every file's exact bytes (``Blob``), kept because a sandbox's disk can
change or vanish. Models never parse files; ``generation.tree`` does, and
``memoryui.importer`` stores the results."""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.core.validators import MaxValueValidator
from django.db import models
from django.urls import reverse
from django.utils import timezone

from generation.kinds import FileKind


class Workspace(models.Model):
    class SourceKind(models.TextChoices):
        DIRECTORY = "directory", "Directory"
        SNAPSHOT = "snapshot", "Snapshot archive"

    name = models.CharField(max_length=100, unique=True)
    source_kind = models.CharField(max_length=16, choices=SourceKind.choices)
    source_path = models.CharField(max_length=1024)
    created_at = models.DateTimeField(auto_now_add=True)
    last_imported_at = models.DateTimeField(null=True, blank=True)
    # When an import last wrote the workspace's rows (files, rollouts, reads, versions):
    # the stamp the figures pages keep are keyed on (``memoryui.figures``). An import
    # that found a directory listed as the previous one left it writes none, and keeps
    # them (a scheduled sync of an unchanged tree).
    rows_written_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Scheduled sync: Celery beat re-imports the workspace every this many minutes, so
    # what sandboxes write shows up without anyone running a command.
    sync_interval_minutes = models.PositiveIntegerField(
        "sync every (minutes)",
        default=0,
        validators=[MaxValueValidator(7 * 24 * 60)],
        help_text="Re-import from the source every this many minutes; 0 turns it off.",
    )
    # When the next sync is due (None: off). A beat claims a workspace by moving this
    # forward with a conditional update, so no two beats import it at once.
    next_sync_at = models.DateTimeField(null=True, blank=True)
    # The poisoning flags' allow-list: hosts this workspace legitimately uses (with
    # their subdomains), beside the well-known ones generation/data ships.
    known_hosts = models.TextField(
        blank=True,
        default="",
        help_text="Hosts the workspace uses, one a line: an address there is not an "
        "unknown destination (a URL carrying a variable still is).",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("memoryui:workspace_detail", args=[self.name])

    def allowed_hosts(self) -> frozenset[str]:
        return frozenset(h.strip().lower() for h in self.known_hosts.split() if h.strip())


class LayoutQuerySet(models.QuerySet["Layout"]):
    def present(self) -> LayoutQuerySet:
        return self.filter(missing_since__isnull=True)


class Layout(models.Model):
    """One agent's memory inside a workspace: a memories dir and its sessions dir."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="layouts")
    memories_dir = models.CharField(max_length=512)
    sessions_dir = models.CharField(max_length=512)
    missing_since = models.DateTimeField(null=True, blank=True)

    objects = LayoutQuerySet.as_manager()

    class Meta:
        ordering = ["workspace", "memories_dir"]
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "memories_dir"], name="layout_unique_memories_dir"
            )
        ]

    def __str__(self) -> str:
        return f"{self.workspace.name}: {self.memories_dir}"


class Blob(models.Model):
    """File content, stored once per distinct sha256."""

    sha256 = models.CharField(max_length=64, primary_key=True)
    size = models.BigIntegerField()
    data = models.BinaryField()

    def __str__(self) -> str:
        return f"{self.sha256[:12]} ({self.size} bytes)"

    @classmethod
    def store(cls, data: bytes) -> str:
        """Keep ``data`` (once per distinct content); its sha256, the blob's key."""
        digest = hashlib.sha256(data).hexdigest()
        cls.objects.get_or_create(sha256=digest, defaults={"size": len(data), "data": data})
        return digest


class FileQuerySet(models.QuerySet["WorkspaceFile"]):
    def present(self) -> FileQuerySet:
        return self.filter(missing_since__isnull=True)

    def with_problems(self) -> FileQuerySet:
        return self.exclude(problem="")


class WorkspaceFile(models.Model):
    """A file (or directory) of an imported workspace, as it was last seen on disk."""

    # One list of kinds, generation.tree's; the stubs know only the class form.
    Kind = models.TextChoices("Kind", [(k.name, k.value) for k in FileKind])  # type: ignore[call-overload]

    # No index of their own for these two: (workspace, path), (workspace, kind) and
    # (layout, kind) below begin with them, and an import writes every index per file.
    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="files", db_index=False
    )
    layout = models.ForeignKey(
        Layout,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="files",
        db_index=False,
    )
    path = models.CharField(max_length=1024)
    kind = models.CharField(max_length=32, choices=Kind.choices)
    # No index: nothing looks files up by their content (a blob is never deleted while a
    # file holds it), and an import writes every index once per file.
    blob = models.ForeignKey(Blob, null=True, blank=True, on_delete=models.PROTECT, db_index=False)
    size = models.BigIntegerField(default=0)
    mode = models.IntegerField(default=0o644)
    mtime_ns = models.BigIntegerField(default=0)
    problem = models.TextField(blank=True, help_text="Why this file was not taken as it is.")
    first_seen_at = models.DateTimeField(default=timezone.now)
    changed_at = models.DateTimeField(default=timezone.now)
    missing_since = models.DateTimeField(null=True, blank=True)

    objects = FileQuerySet.as_manager()

    class Meta:
        ordering = ["workspace", "path"]
        constraints = [
            models.UniqueConstraint(fields=["workspace", "path"], name="file_unique_path")
        ]
        indexes = [
            models.Index(fields=["layout", "kind"]),
            models.Index(fields=["workspace", "kind"], name="file_workspace_kind"),
            # Files gone from disk: few, looked up on every workspace and layout page.
            models.Index(
                fields=["layout"], condition=models.Q(missing_since__isnull=False), name="file_gone"
            ),
            models.Index(
                fields=["workspace"],
                condition=models.Q(missing_since__isnull=False),
                name="file_gone_workspace",
            ),
        ]

    def __str__(self) -> str:
        return self.path

    @property
    def sha256(self) -> str:
        return self.blob_id or ""


class ImportRun(models.Model):
    """One run of the importer over a workspace, with the report it printed."""

    class Status(models.TextChoices):
        OK = "ok", "Imported"
        WITH_ERRORS = "with_errors", "Imported with errors"
        FAILED = "failed", "Nothing imported"

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="imports")
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices)
    added = models.PositiveIntegerField(default=0)
    changed = models.PositiveIntegerField(default=0)
    unchanged = models.PositiveIntegerField(default=0)
    missing = models.PositiveIntegerField(default=0)
    report = models.JSONField(default=dict)
    triggered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    scheduled = models.BooleanField(default=False, help_text="Run by the scheduled sync.")

    class Meta:
        ordering = ["-started_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.workspace.name} @ {self.started_at:%Y-%m-%d %H:%M}"

    @property
    def errors(self) -> list[dict[str, str]]:
        return list(self.report.get("errors", []))

    @property
    def new_versions(self) -> list[str]:
        return list(self.report.get("new_versions", []))


class ImportJobQuerySet(models.QuerySet["ImportJob"]):
    def later_uploads(self, workspace_id: int, sandbox: str, after: int) -> ImportJobQuerySet:
        """The uploads of one sandbox (its snapshot id) to a workspace queued after the
        job ``after``: a backlog is merged newest first, and an older upload merged after
        a later one only fills in what the workspace lacks."""
        return self.filter(
            workspace_id=workspace_id, kind=ImportJob.Kind.SANDBOX, original_name=sandbox
        ).filter(pk__gt=after)


class ImportJob(models.Model):
    """A workspace being created from the dashboard, from an uploaded snapshot or a
    registered directory, and imported by a Celery task."""

    class Kind(models.TextChoices):
        UPLOAD = "upload", "Uploaded snapshot"
        DIRECTORY = "directory", "Registered directory"
        SANDBOX = "sandbox", "Sandbox upload (remote snapshot store)"

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Importing"
        DONE = "done", "Imported"
        FAILED = "failed", "Failed"

    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    source_path = models.CharField(max_length=1024)
    original_name = models.CharField(max_length=255, blank=True)
    size = models.BigIntegerField(default=0)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    error = models.TextField(blank=True)
    workspace = models.ForeignKey(
        Workspace, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    run = models.ForeignKey(
        ImportRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # A worker holds a running job under a lease it renews (``pipeline.renewing``); once
    # it has run out (the worker died), the task sent again by beat, or redelivered by
    # the broker, takes the job over. ``attempts`` counts the claims: the holder's token.
    lease_until = models.DateTimeField(null=True, blank=True)
    dispatched_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    taken_over_at = models.DateTimeField(null=True, blank=True)

    objects = ImportJobQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [
            # A sandbox's uploads by status: the later ones queued or merged, looked up
            # by each merge (a workspace's sandboxes persist thousands of times a day).
            models.Index(
                fields=["workspace", "original_name", "status"], name="importjob_sandbox_status"
            ),
            # The few queued or running, among them (``workspaces.imports_pending``).
            models.Index(
                fields=["workspace"],
                condition=models.Q(status__in=["queued", "running"]),
                name="importjob_pending",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.name} ({self.status})"

    @property
    def is_active(self) -> bool:
        return self.status in (self.Status.QUEUED, self.Status.RUNNING)
