"""Who may do what in a workspace (roles, memberships), and the audit log of every
change and decision."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from .workspaces import Layout, Workspace


class Role(models.TextChoices):
    """What a person may do in a workspace; each role includes the ones before it."""

    VIEWER = "viewer", "Viewer (read)"
    REVIEWER = "reviewer", "Reviewer (approve and reject)"
    EDITOR = "editor", "Editor (edit and pin)"
    ADMIN = "admin", "Admin (settings, write-back, export, members)"


ROLE_ORDER = [Role.VIEWER, Role.REVIEWER, Role.EDITOR, Role.ADMIN]


class Membership(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="members")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "user"], name="membership_unique")
        ]

    def __str__(self) -> str:
        return f"{self.user} is {self.role} of {self.workspace}"


class AuditEvent(models.Model):
    """Every change and decision, by whom, when, on what."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="audit_events")
    layout = models.ForeignKey(
        Layout, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    actor = models.CharField(max_length=150, help_text="who: a username, 'pipeline' or 'agent'")
    action = models.CharField(max_length=64, db_index=True)
    target = models.CharField(max_length=1024, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["workspace", "-created_at"], name="audit_recent")]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.actor} {self.action} {self.target}"

    @classmethod
    def record(
        cls,
        workspace: Workspace,
        action: str,
        *,
        user: Any = None,
        actor: str = "",
        layout: Layout | None = None,
        target: str = "",
        **detail: Any,
    ) -> AuditEvent:
        person = user if getattr(user, "pk", None) else None
        return cls.objects.create(
            workspace=workspace,
            layout=layout,
            user=person,
            actor=actor or (person.get_username() if person else "system"),
            action=action,
            target=target[:1024],
            detail=detail,
        )


class PasswordResetRequest(models.Model):
    """A password-reset form sent (``user`` empty: counted per address) or a reset mail
    sent to an account (``user``): kept an hour, so that every web process limits them
    alike (``lockout.PasswordResetView``)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    address = models.GenericIPAddressField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    def __str__(self) -> str:
        return (
            f"password reset {'mail to ' + str(self.user) if self.user else 'from'} {self.address}"
        )
