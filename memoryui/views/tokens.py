"""The dashboard page where people create, list and revoke their API tokens."""

from __future__ import annotations

from datetime import timedelta

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from .. import tokens
from ..forms import TokenForm
from ..models import ApiToken, Role, Workspace
from ..roles import has_role, signed_in


def _visible(request: HttpRequest) -> list[str]:
    return [w.name for w in Workspace.objects.all() if has_role(request.user, w, Role.VIEWER)]


@require_http_methods(["GET", "POST"])
def token_list(request: HttpRequest) -> HttpResponse:
    names = _visible(request)
    form = TokenForm(request.POST or None, workspaces=names)
    created = None
    status = 200
    if request.method == "POST":
        if form.is_valid():
            days = form.cleaned_data["expires_in_days"]
            created = tokens.create_token(
                request.user,
                form.cleaned_data["name"],
                form.cleaned_data["workspaces"],
                expires_at=timezone.now() + timedelta(days=int(days)) if days else None,
            )
            form = TokenForm(workspaces=names)
        else:
            status = 400
    return render(
        request,
        "memoryui/tokens.html",
        {
            "form": form,
            "created": created,
            "tokens": ApiToken.objects.filter(user=signed_in(request)),
            "now": timezone.now(),
        },
        status=status,
    )


@require_POST
def token_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    token = get_object_or_404(ApiToken, pk=pk, user=request.user)
    tokens.revoke(token, user=request.user)
    return redirect("memoryui:token_list")
