"""What keeps the service observable and its output checked: worker heartbeats
(``/healthz``), operation counters (``/metrics``), and the lint's results and the
findings admins allowed, which write-back and export consult."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from .workspaces import Workspace


class WorkerHeartbeat(models.Model):
    """When a Celery worker last ran the heartbeat task that Celery beat sends: a fresh
    one means beat and a worker are both alive (``/healthz``)."""

    name = models.CharField(max_length=100, unique=True)
    seen_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} at {self.seen_at:%Y-%m-%d %H:%M:%S}"


class LintAllowance(models.Model):
    """An admin let a lint finding through for one content of its file: write-back and
    export honor it until the file's content changes (then the finding asks again)."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    finding_id = models.CharField(max_length=64)
    kind = models.CharField(max_length=32)
    path = models.CharField(max_length=1024, help_text="relative to the workspace")
    sha256 = models.CharField(max_length=64, help_text="the file's content it was given for")
    allowed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor = models.CharField(max_length=150)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "finding_id", "sha256"], name="lint_allowance_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.finding_id} in {self.path} ({self.sha256[:12]})"


class LintResult(models.Model):
    """What the lint found in one content of a file (``generation.lint.lint_file``), kept
    so that write-back and export, in whichever process they run, scan only content never
    scanned before. ``key``: the lint's version, the path, the content's sha256 and the
    workspace's layouts, hashed (each is part of what the lint looks at)."""

    key = models.CharField(max_length=64, primary_key=True)
    findings = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"lint result {self.key[:12]} ({len(self.findings)} findings)"


class OperationStat(models.Model):
    """How often an operation ended one way, and the seconds it took in all: counters
    every process (web, workers) adds to, which /metrics exports (see observability)."""

    operation = models.CharField(max_length=64)
    outcome = models.CharField(max_length=16)
    count = models.BigIntegerField(default=0)
    seconds = models.FloatField(default=0.0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["operation", "outcome"], name="operation_outcome")
        ]

    def __str__(self) -> str:
        return f"{self.operation} {self.outcome}: {self.count}"
