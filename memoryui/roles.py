"""Who may do what in a workspace. Checked in the views, on the server, for every action.

Staff and superusers are admins of every workspace. Other people get the role of their
membership; a logged-in person without one gets ``MEMORYUI_DEFAULT_ROLE`` (``viewer``
by default, ``none`` for no access at all).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import Http404

from .models import ROLE_ORDER, Membership, Role, Workspace


def role_of(user: Any, workspace: Workspace) -> Role | None:
    if not getattr(user, "is_authenticated", False):
        return None
    if user.is_staff or user.is_superuser:
        return Role.ADMIN
    memberships = getattr(user, "_memoryui_roles", None)
    if memberships is None:  # one query per request, however many workspaces are shown
        memberships = user._memoryui_roles = dict(
            Membership.objects.filter(user=user).values_list("workspace_id", "role")
        )
    role = memberships.get(workspace.pk)
    if role:
        return Role(role)
    default = settings.MEMORYUI_DEFAULT_ROLE
    return Role(default) if default != "none" else None


def has_role(user: Any, workspace: Workspace, needed: Role) -> bool:
    role = role_of(user, workspace)
    return role is not None and ROLE_ORDER.index(role) >= ROLE_ORDER.index(needed)


def require_role(user: Any, workspace: Workspace, needed: Role) -> None:
    """Raise 404 for people who may not see the workspace, 403 for a missing role."""
    role = role_of(user, workspace)
    if role is None:
        raise Http404("No such workspace.")
    if ROLE_ORDER.index(role) < ROLE_ORDER.index(needed):
        raise PermissionDenied(f"This needs the {needed.label.split(' ')[0].lower()} role.")
