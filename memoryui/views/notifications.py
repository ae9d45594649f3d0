"""Watching a workspace (mail for what waits for people there), and the one-click
unsubscribe that every such mail links to (``memoryui.notifications``)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_not_required
from django.core import signing
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from .. import notifications
from ..models import Role, Watch
from ..roles import signed_in, workspace_view
from .common import HtmxHttpRequest


@workspace_view(Role.VIEWER)
@require_http_methods(["GET", "POST"])
def watch(request: HtmxHttpRequest, name: str) -> HttpResponse:
    """GET: whether you watch this workspace, and how. POST mode=each|daily|off."""
    workspace = request.workspace
    user = signed_in(request)
    current = Watch.objects.filter(user=user, workspace=workspace).first()
    status = 200
    if request.method == "POST":
        mode = request.POST.get("mode", "")
        if mode == "off":
            if current is not None:
                current.delete()
            messages.success(request, f"You no longer get mail about {workspace.name}.")
            return redirect("memoryui:watch", name=workspace.name)
        if mode in Watch.Mode.values:
            if not user.email:
                messages.error(request, "Your account has no e-mail address: ask an admin.")
                status = 400
            else:
                Watch.objects.update_or_create(
                    user=user, workspace=workspace, defaults={"mode": mode}
                )
                messages.success(request, f"You watch {workspace.name}: {Watch.Mode(mode).label}.")
                return redirect("memoryui:watch", name=workspace.name)
        else:
            messages.error(request, "Choose each, daily or off.")
            status = 400
    return render(
        request,
        "memoryui/watch.html",
        {
            "workspace": workspace,
            "watch": current,
            "modes": Watch.Mode.choices,
            "events": notifications.EVENTS.values(),
        },
        status=status,
    )


@login_not_required
@csrf_exempt  # RFC 8058: the mail client POSTs "List-Unsubscribe=One-Click", no cookie
@require_http_methods(["GET", "POST"])
def unsubscribe(request: HttpRequest, token: str) -> HttpResponse:
    """GET: a page with one button (link checkers that open every link unsubscribe
    nobody). POST: end the watch the signed token names; once."""
    try:
        signing.loads(token, salt=notifications.UNSUBSCRIBE_SALT)
    except signing.BadSignature:
        return render(
            request,
            "memoryui/unsubscribe.html",
            {"state": "invalid"},
            status=400,
        )
    if request.method == "GET":
        return render(request, "memoryui/unsubscribe.html", {"state": "confirm", "token": token})
    ended = notifications.unsubscribe(token)
    return render(
        request,
        "memoryui/unsubscribe.html",
        {"state": "done" if ended else "already", "watch": ended},
        status=200 if ended else 410,
    )
