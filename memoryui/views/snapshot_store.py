"""The remote snapshot store's policy for a workspace (admins): whether an upload starts
a generation run, and whether sandboxes are served agent memory nobody has reviewed yet.
The store itself is ``memoryui.snapshot_store``; the form is on the webhooks page, beside
the other settings of what leaves the workspace."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from ..models import AuditEvent, Role, SnapshotStorePolicy
from ..roles import workspace_view
from .common import HtmxHttpRequest


@workspace_view(Role.ADMIN)
@require_POST
def snapshot_store_policy(request: HtmxHttpRequest, name: str) -> HttpResponse:
    """Set the remote snapshot store's policies (admins): generate on upload, and
    whether sandboxes get unreviewed agent memory (by default they do not)."""
    workspace = request.workspace
    generate = request.POST.get("generate_on_upload") == "on"
    unreviewed = request.POST.get("serve_unreviewed") == "on"
    SnapshotStorePolicy.objects.update_or_create(
        workspace=workspace,
        defaults={"generate_on_upload": generate, "serve_unreviewed": unreviewed},
    )
    AuditEvent.record(
        workspace,
        "snapshot_store.policy",
        user=request.user,
        generate_on_upload=generate,
        serve_unreviewed=unreviewed,
    )
    messages.info(
        request,
        ("Uploads now start a generation run. " if generate else "Uploads start no run. ")
        + (
            "Sandboxes get the latest memory, unreviewed agent changes included."
            if unreviewed
            else "Sandboxes get approved memory only."
        ),
    )
    return redirect("memoryui:webhook_list", name=name)
