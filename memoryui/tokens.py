"""Personal API tokens: created by people in the dashboard, shown once, kept as a sha256,
named, expiring, revocable, scoped to named workspaces.

A token acts as its owner: the owner's role in a workspace applies exactly as in the
browser, and only in the workspaces the token names.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from .models import ApiToken, AuditEvent, Workspace

PREFIX = "mui_"
# Last-used times are written at most this often per token (one UPDATE, not one per call).
LAST_USED_RESOLUTION = timedelta(seconds=60)


@dataclass
class NewToken:
    token: ApiToken
    secret: str  # shown once; never stored


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def create_token(
    user: Any, name: str, workspaces: list[str], *, expires_at: datetime | None = None
) -> NewToken:
    secret = PREFIX + secrets.token_urlsafe(32)  # 256 bits
    token = ApiToken.objects.create(
        user=user,
        name=name.strip()[:100],
        prefix=secret[: len(PREFIX) + 6],
        secret_sha256=digest(secret),
        workspaces=sorted(set(workspaces)),
        expires_at=expires_at,
    )
    for workspace in Workspace.objects.filter(name__in=token.workspaces):
        AuditEvent.record(workspace, "token.create", user=user, target=token.name)
    return NewToken(token, secret)


def revoke(token: ApiToken, *, user: Any) -> None:
    if token.revoked_at is None:
        ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
        for workspace in Workspace.objects.filter(name__in=token.workspaces):
            AuditEvent.record(workspace, "token.revoke", user=user, target=token.name)


def authenticate(secret: str) -> ApiToken | None:
    """The active token with this secret (its owner active too), or None."""
    if not secret.startswith(PREFIX) or len(secret) > 200:
        return None
    token = ApiToken.objects.select_related("user").filter(secret_sha256=digest(secret)).first()
    if token is None or not token.is_active or not token.user.is_active:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def in_scope(token: ApiToken | None, workspace_name: str) -> bool:
    return token is not None and workspace_name in token.workspaces
