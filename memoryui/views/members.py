"""The members page of a workspace: its admins add people, change roles, remove them."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from ..forms import AddMemberForm, MemberForm
from ..members import MemberError, add_member, change_role, remove_member
from ..models import Membership, Role
from ..roles import workspace_view
from .common import HtmxHttpRequest, bad_request


@workspace_view(Role.ADMIN)
@require_http_methods(["GET", "POST"])
def members(request: HtmxHttpRequest, name: str) -> HttpResponse:
    """GET: the members and their roles. POST: add an existing account."""
    workspace = request.workspace
    form = AddMemberForm(request.POST or None)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                add_member(
                    workspace,
                    form.cleaned_data["username"],
                    form.cleaned_data["role"],
                    user=request.user,
                )
            except MemberError as exc:
                form.add_error("username", str(exc))
            else:
                messages.success(
                    request,
                    f"{form.cleaned_data['username']} is now "
                    f"{_a(form.cleaned_data['role'])} of {workspace.name}.",
                )
                return redirect("memoryui:members", name=name)
        status = 400
    rows = Membership.objects.filter(workspace=workspace).select_related("user")
    return render(
        request,
        "memoryui/members.html",
        {
            "workspace": workspace,
            "members": rows.order_by("user__username"),
            "form": form,
            # Short names: the paragraph above the table says what each role may do.
            "roles": [(role.value, role.value.capitalize()) for role in Role],
            "default_role": settings.MEMORYUI_DEFAULT_ROLE,
        },
        status=status,
    )


@workspace_view(Role.ADMIN)
@require_POST
def member(request: HtmxHttpRequest, name: str, user_pk: int) -> HttpResponse:
    """Change a member's role (``role``) or remove them (``remove``)."""
    membership = get_object_or_404(
        Membership.objects.select_related("user"), workspace=request.workspace, user_id=user_pk
    )
    back = reverse("memoryui:members", args=[name])
    form = MemberForm(request.POST)
    if not form.is_valid():
        return bad_request(request, form, back=back, workspace=request.workspace)
    username = membership.user.get_username()
    try:
        if form.cleaned_data["remove"]:
            remove_member(membership, user=request.user)
            messages.success(request, f"{username} is no longer a member of {name}.")
        elif form.cleaned_data["role"]:
            change_role(membership, form.cleaned_data["role"], user=request.user)
            messages.success(request, f"{username} is now {_a(form.cleaned_data['role'])}.")
    except MemberError as exc:
        return bad_request(request, str(exc), back=back, workspace=request.workspace)
    return redirect(back)


def _a(role: str) -> str:
    return f"{'an' if role == Role.ADMIN else 'a'} {role}"
