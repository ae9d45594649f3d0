"""What teams add to people: who an identity provider says a person is, which of its
groups give which workspace role (the OpenID Connect sign-in, ``memoryui.signin``)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from .people import Role
from .workspaces import Workspace


class GroupRole(models.Model):
    """Members of the provider's group ``group`` get ``role`` in ``workspace`` when they
    sign in (on top of ``MEMORYUI_OIDC_GROUP_ROLES``); managed in the Django admin."""

    group = models.CharField(max_length=200, help_text="the group's name in the groups claim")
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    role = models.CharField(max_length=16, choices=Role.choices)

    class Meta:
        ordering = ["group", "workspace__name"]
        constraints = [
            models.UniqueConstraint(fields=["group", "workspace"], name="group_role_unique")
        ]

    def __str__(self) -> str:
        return f"{self.group} -> {self.role} of {self.workspace}"


class ProviderIdentity(models.Model):
    """The account an identity provider's subject signs in to, and the memberships its
    group claim gave at the last sign-in ({workspace id: role}): the next sign-in takes
    back those its groups no longer give; memberships made by hand are not touched."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="provider_identity"
    )
    issuer = models.CharField(max_length=500)
    subject = models.CharField(max_length=255)
    granted = models.JSONField(default=dict, blank=True)
    last_sign_in = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="provider_identity_unique")
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"


class Watch(models.Model):
    """A member watches a workspace: mail for what waits for people there (a proposal to
    review, an agent's change held back, a failed run), each as it happens or once a day."""

    class Mode(models.TextChoices):
        EACH = "each", "A mail for each event"
        DAILY = "daily", "One daily digest"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="watches"
    )
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="watches")
    mode = models.CharField(max_length=8, choices=Mode.choices, default=Mode.EACH)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "workspace"], name="watch_unique")]

    def __str__(self) -> str:
        return f"{self.user} watches {self.workspace} ({self.mode})"


class Notification(models.Model):
    """One event for one watcher: mailed by the worker (``memoryui.notifications``), alone
    or in the next digest; kept with its tries."""

    watch = models.ForeignKey(Watch, on_delete=models.CASCADE, related_name="notifications")
    event = models.CharField(max_length=32)
    text = models.CharField(max_length=500)
    path = models.CharField(max_length=500, help_text="the page it links to")
    created_at = models.DateTimeField(auto_now_add=True)
    digest = models.BooleanField(default=False)
    sent_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    error = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["created_at", "pk"]
        indexes = [models.Index(fields=["digest", "sent_at"], name="notification_unsent")]

    def __str__(self) -> str:
        return f"{self.event} for {self.watch}"
