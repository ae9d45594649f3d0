"""What reaches memoryui from outside, or goes out: personal API tokens, the remote
snapshot store's uploads and policy, and webhooks with their deliveries."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from .workspaces import ImportJob, ImportRun, Workspace


class ApiToken(models.Model):
    """A personal API token: its secret is shown once and kept only as a sha256."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, help_text="The token's first characters, to tell it")
    secret_sha256 = models.CharField(max_length=64, unique=True)
    workspaces = models.JSONField(default=list, help_text="names of the workspaces it may reach")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None and (
            self.expires_at is None or self.expires_at > timezone.now()
        )


class UploadedSnapshot(models.Model):
    """A workspace archive a sandbox uploaded to the remote snapshot store."""

    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="uploaded_snapshots"
    )
    snapshot_id = models.CharField(max_length=128)
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    path = models.CharField(max_length=1024)
    uploaded_at = models.DateTimeField(default=timezone.now)
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    import_run = models.ForeignKey(
        ImportRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    import_job = models.ForeignKey(
        "ImportJob", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # What its last download served it: {"<layout pk>": {"<document>": version number}},
    # the base of the agent's next change (``memoryui.agent_proposals``).
    served = models.JSONField(default=dict, blank=True)
    # The raw memories and rollout summaries its uploads brought new or changed (its
    # own, not what it was served and sent back): {workspace path: sha256}; and those
    # of them another sandbox uploaded since with other bytes (one rollout id, two
    # sandboxes), which its downloads serve as it uploaded them: ``kept_files``.
    own_files = models.JSONField(default=dict, blank=True)
    kept_files = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-uploaded_at", "-pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "snapshot_id"], name="uploaded_snapshot_unique_id"
            )
        ]

    def __str__(self) -> str:
        return f"{self.workspace.name}/{self.snapshot_id}"


class UploadedSnapshotIndex(models.Model):
    """Where each member of a plain-tar upload sits in it (``generation.tree``'s
    ``IndexedMember`` rows, made while the upload was checked), so that a sandbox's
    download copies those members by offset instead of parsing the archive again.
    ``sha256``: the upload it was made of; each member's header is checked again
    before its offset is trusted. Kept apart from ``UploadedSnapshot`` so that listing
    uploads never loads it."""

    snapshot = models.OneToOneField(
        UploadedSnapshot, on_delete=models.CASCADE, related_name="member_index"
    )
    sha256 = models.CharField(max_length=64)
    members = models.BinaryField()  # zlib-compressed JSON: one list per member

    def __str__(self) -> str:
        return f"member index of {self.snapshot}"


class ImportJobIndex(models.Model):
    """The member index of a sandbox upload's merge job, kept until the job is done: a
    newer upload of the same sandbox replaces its ``UploadedSnapshotIndex`` while the
    older upload's merge may still be queued, and that merge reads its members by
    these offsets instead of parsing the archive (each header checked, as there)."""

    job = models.OneToOneField(ImportJob, on_delete=models.CASCADE, related_name="+")
    members = models.BinaryField()  # as UploadedSnapshotIndex.members

    def __str__(self) -> str:
        return f"member index of import job {self.job_id}"


class Webhook(models.Model):
    """A receiver of a workspace's events, signed with its secret."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="webhooks")
    url = models.URLField(max_length=1000)
    secret = models.CharField(max_length=100)
    events = models.JSONField(default=list, help_text="event names; empty: every event")
    active = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["workspace", "pk"]

    def __str__(self) -> str:
        return f"webhook {self.origin}"

    def clean(self) -> None:
        """The admin's check: the same refusals as the webhooks page."""
        from ..outbound import Refused, validate_target  # noqa: PLC0415 (deferred: loads the HTTP client)

        try:
            validate_target(self.url)
        except Refused as exc:
            raise ValidationError({"url": f"This receiver is refused: {exc}."}) from exc

    @property
    def origin(self) -> str:
        """What pages and the audit log show: never the path, query or credentials."""
        from ..outbound import origin  # noqa: PLC0415 (deferred: loads the HTTP client)

        return origin(self.url)


class WebhookDelivery(models.Model):
    """One event sent to one webhook, and every attempt at it."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed"

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=64)
    payload = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.event} to {self.webhook.url}"


class WebhookAttempt(models.Model):
    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveSmallIntegerField()
    at = models.DateTimeField(default=timezone.now)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    retry_in = models.FloatField(null=True, blank=True, help_text="seconds until the next try")

    class Meta:
        ordering = ["delivery", "number"]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.delivery_id}"


class SnapshotStorePolicy(models.Model):
    """What the remote snapshot store does after a workspace's upload is imported."""

    workspace = models.OneToOneField(
        Workspace, on_delete=models.CASCADE, related_name="snapshot_store_policy"
    )
    generate_on_upload = models.BooleanField(
        default=False,
        help_text="Start a generation run for every layout after each upload.",
    )
    serve_unreviewed = models.BooleanField(
        default=False,
        help_text="Serve sandboxes the latest memory, agent changes not yet reviewed "
        "included (by default they get the latest approved memory only).",
    )

    def __str__(self) -> str:
        return f"snapshot store policy of {self.workspace}"
