"""A workspace's webhooks page (admins): receivers, the delivery log with every attempt,
and redelivery."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from . import outbound, webhooks
from .models import (
    AuditEvent,
    Role,
    SnapshotStorePolicy,
    Webhook,
    WebhookDelivery,
    Workspace,
)
from .roles import signed_in, workspace_view

DELIVERIES_SHOWN = 50


class WebhookForm(forms.Form):
    url = forms.URLField(
        label="Receiver URL",
        max_length=1000,
        assume_scheme="https",
        widget=forms.URLInput(
            attrs={"placeholder": "https://ci.example.com/memoryui-hook", "size": 60}
        ),
    )
    events = forms.MultipleChoiceField(
        choices=webhooks.EVENTS,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every event.",
    )

    def clean_url(self) -> str:
        url = self.cleaned_data["url"]
        try:
            outbound.validate_target(url)
        except outbound.Refused as exc:
            raise forms.ValidationError(f"This receiver is refused: {exc}.") from exc
        return url


def _workspace(request: HttpRequest, name: str) -> Workspace:
    """The route's workspace, resolved (and the admin role checked) by ``workspace_view``."""
    return request.workspace  # type: ignore[attr-defined]


@workspace_view(Role.ADMIN)
@require_http_methods(["GET", "POST"])
def webhook_list(request: HttpRequest, name: str) -> HttpResponse:
    workspace = _workspace(request, name)
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
def webhook_delete(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    workspace = _workspace(request, name)
    hook = get_object_or_404(Webhook, pk=pk, workspace=workspace)
    AuditEvent.record(workspace, "webhook.delete", user=request.user, target=hook.origin)
    hook.delete()
    messages.info(request, "Webhook removed.")
    return redirect("memoryui:webhook_list", name=name)


@workspace_view(Role.ADMIN)
@require_POST
def webhook_redeliver(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    workspace = _workspace(request, name)
    delivery = get_object_or_404(WebhookDelivery, pk=pk, webhook__workspace=workspace)
    webhooks.redeliver(delivery)
    messages.info(request, f"Delivery {delivery.pk} ({delivery.event}) queued again.")
    return redirect("memoryui:webhook_list", name=name)


@workspace_view(Role.ADMIN)
@require_POST
def snapshot_store_policy(request: HttpRequest, name: str) -> HttpResponse:
    """Set the remote snapshot store's policies (admins): generate on upload, and
    whether sandboxes get unreviewed agent memory (by default they do not)."""
    workspace = _workspace(request, name)
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
