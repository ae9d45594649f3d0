"""Who may do what in a workspace. Checked in the views, on the server, for every action.

Staff and superusers are admins of every workspace. Other people get the role of their
membership; a logged-in person without one gets ``MEMORYUI_DEFAULT_ROLE`` (``viewer``
by default, ``none`` for no access at all).

Every view under ``w/<name>/`` is wrapped in :func:`workspace_view`, which resolves the
workspace (and the layout, for routes under ``layouts/<layout_pk>/``) and enforces the
view's role before the view runs. :func:`unguarded_workspace_routes` (a system check and
a test) finds any such route whose view is not wrapped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest
from django.http.response import HttpResponseBase
from django.urls import URLPattern, URLResolver, get_resolver

from .models import ROLE_ORDER, Layout, Membership, Role, Workspace

# The same answer for a workspace that does not exist and one the person may not see,
# so that a 404 does not tell which names exist.
NOT_FOUND = "No such workspace."
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def signed_in(request: HttpRequest) -> User:
    """The person behind a request that the login middleware let through."""
    user = request.user
    if not isinstance(user, User):
        raise PermissionDenied("Sign in first.")
    return user


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
        raise Http404(NOT_FOUND)
    if ROLE_ORDER.index(role) < ROLE_ORDER.index(needed):
        raise PermissionDenied(f"This needs the {role_name(needed)} role.")


def role_name(role: Role) -> str:
    return role.label.split(" ")[0].lower()


View = Callable[..., HttpResponseBase]


def workspace_view(role: Role, *, post: Role | None = None) -> Callable[[View], View]:
    """Wrap a view under ``w/<name>/``: resolve ``request.workspace`` (and
    ``request.layout`` when the route has a ``layout_pk``), then answer 404 to people
    who may not see the workspace, exactly as for a name that does not exist, and 403
    to people below ``role`` (below ``post`` for POST and other unsafe methods)."""
    post_role = post or role

    def decorator(view: View) -> View:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            # No name, id or key contains NUL (PostgreSQL cannot even compare text with
            # one), and no id is past a 64-bit integer (SQLite cannot take one).
            if any(
                ("\x00" in v) if isinstance(v, str) else not 0 <= v < 2**63 for v in kwargs.values()
            ):
                raise Http404(NOT_FOUND)
            layout = None
            if "layout_pk" in kwargs:
                layout = (
                    Layout.objects.select_related("workspace")
                    .filter(pk=kwargs["layout_pk"], workspace__name=kwargs["name"])
                    .first()
                )
                workspace = layout.workspace if layout else None
            else:
                workspace = Workspace.objects.filter(name=kwargs["name"]).first()
            if workspace is None:
                raise Http404(NOT_FOUND)
            require_role(
                request.user, workspace, role if request.method in SAFE_METHODS else post_role
            )
            request.workspace = workspace  # type: ignore[attr-defined]
            request.layout = layout  # type: ignore[attr-defined]
            return view(request, *args, **kwargs)

        wrapper.workspace_roles = (role, post_role)  # type: ignore[attr-defined]
        return wrapper

    return decorator


def workspace_routes(
    resolver: URLResolver | None = None, prefix: str = ""
) -> Iterator[tuple[str, URLPattern]]:
    """Every route of the URLconf whose path names a workspace, with its full path."""
    if resolver is None:
        resolver = get_resolver()
    for entry in resolver.url_patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from workspace_routes(entry, route)
        elif "<str:name>" in route:
            yield route, entry


def unguarded_workspace_routes() -> list[str]:
    return [
        route
        for route, pattern in workspace_routes()
        if not hasattr(pattern.callback, "workspace_roles")
    ]
