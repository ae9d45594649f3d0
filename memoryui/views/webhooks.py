"""A workspace's webhooks page (admins): receivers, the delivery log with every attempt,
and redelivery. The page also holds the snapshot store's policy form, posted to
``snapshot_store``."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from .. import webhooks
from ..forms import WebhookForm
from ..models import (
    AuditEvent,
    Role,
    SnapshotStorePolicy,
    Webhook,
    WebhookDelivery,
)
from ..roles import signed_in, workspace_view
from .common import HtmxHttpRequest

DELIVERIES_SHOWN = 50


@workspace_view(Role.ADMIN)
@require_http_methods(["GET", "POST"])
def webhook_list(request: HtmxHttpRequest, name: str) -> HttpResponse:
    workspace = request.workspace
    form = WebhookForm(request.POST or None)
    created = None
    status = 200
    if request.method == "POST":
        if form.is_valid():
            created = Webhook.objects.create(
                workspace=workspace,
                url=form.cleaned_data["url"],
                events=form.cleaned_data["events"],
                secret=webhooks.new_secret(),
                created_by=signed_in(request),
            )
            AuditEvent.record(workspace, "webhook.create", user=request.user, target=created.origin)
            form = WebhookForm()
        else:
            status = 400
    deliveries = (
        WebhookDelivery.objects.filter(webhook__workspace=workspace)
        .select_related("webhook")
        .prefetch_related("attempts")[:DELIVERIES_SHOWN]
    )
    return render(
        request,
        "memoryui/webhooks.html",
        {
            "workspace": workspace,
            "form": form,
            "created": created,
            "hooks": Webhook.objects.filter(workspace=workspace),
            "deliveries": deliveries,
            "policy": SnapshotStorePolicy.objects.filter(workspace=workspace).first(),
        },
        status=status,
    )


@workspace_view(Role.ADMIN)
@require_POST
def webhook_delete(request: HtmxHttpRequest, name: str, pk: int) -> HttpResponse:
    workspace = request.workspace
    hook = get_object_or_404(Webhook, pk=pk, workspace=workspace)
    AuditEvent.record(workspace, "webhook.delete", user=request.user, target=hook.origin)
    webhooks.delete_webhook(hook)
    messages.info(request, "Webhook removed.")
    return redirect("memoryui:webhook_list", name=name)


@workspace_view(Role.ADMIN)
@require_POST
def webhook_redeliver(request: HtmxHttpRequest, name: str, pk: int) -> HttpResponse:
    workspace = request.workspace
    delivery = get_object_or_404(WebhookDelivery, pk=pk, webhook__workspace=workspace)
    webhooks.redeliver(delivery)
    messages.info(request, f"Delivery {delivery.pk} ({delivery.event}) queued again.")
    return redirect("memoryui:webhook_list", name=name)
