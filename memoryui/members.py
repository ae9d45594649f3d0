"""Who belongs to a workspace, with which role; managed by its admins. Every change is
an audit event. A workspace keeps at least one admin member: only staff (admins of
every workspace anyway) may remove or demote the last one."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction

from .models import AuditEvent, Membership, Role, Workspace


class MemberError(ValueError):
    """A change that was refused; the message says why."""


def _is_staff(user: Any) -> bool:
    return bool(user.is_staff or user.is_superuser)


def add_member(workspace: Workspace, username: str, role: str, *, user: Any) -> Membership:
    person = get_user_model().objects.filter(username=username).first()
    if person is None:
        raise MemberError(f"There is no account named {username!r}; nothing was changed.")
    with transaction.atomic():
        membership, created = Membership.objects.get_or_create(
            workspace=workspace, user=person, defaults={"role": role}
        )
        if not created:
            raise MemberError(
                f"{username} is already a member ({membership.role}); change the role below."
            )
        AuditEvent.record(workspace, "member.add", user=user, target=username, role=role)
    return membership


def change_role(membership: Membership, role: str, *, user: Any) -> None:
    with transaction.atomic():
        locked = _lock(membership)
        if locked.role == role:
            return
        if locked.role == Role.ADMIN:
            _keep_an_admin(locked, user, "demote")
        before, locked.role = locked.role, role
        locked.save(update_fields=["role"])
        AuditEvent.record(
            locked.workspace,
            "member.role",
            user=user,
            target=locked.user.get_username(),
            before=before,
            role=role,
        )


def remove_member(membership: Membership, *, user: Any) -> None:
    with transaction.atomic():
        locked = _lock(membership)
        if locked.role == Role.ADMIN:
            _keep_an_admin(locked, user, "remove")
        locked.delete()
        AuditEvent.record(
            locked.workspace,
            "member.remove",
            user=user,
            target=locked.user.get_username(),
            role=locked.role,
        )


def _lock(membership: Membership) -> Membership:
    """The membership as it is now, with the workspace row locked: two admins demoting
    each other at once cannot both succeed and leave no admin."""
    Workspace.objects.select_for_update().filter(pk=membership.workspace_id).first()
    try:
        return Membership.objects.select_related("user", "workspace").get(pk=membership.pk)
    except Membership.DoesNotExist:
        raise MemberError("That membership was removed meanwhile; nothing was changed.") from None


def _keep_an_admin(membership: Membership, user: Any, verb: str) -> None:
    others = (
        Membership.objects.filter(workspace_id=membership.workspace_id, role=Role.ADMIN)
        .exclude(pk=membership.pk)
        .exists()
    )
    if not others and not _is_staff(user):
        raise MemberError(
            f"{membership.user.get_username()} is the last admin of "
            f"{membership.workspace.name}: make someone else admin first "
            f"(only staff can {verb} the last admin)."
        )
