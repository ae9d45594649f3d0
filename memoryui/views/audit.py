"""A workspace's audit log: every change and decision, filtered, paged, or as CSV
(cells a spreadsheet would run as a formula are defused)."""

from __future__ import annotations

import csv

from django.core.paginator import Paginator
from django.http import StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.views.decorators.http import require_GET

from .. import audit, forms
from ..models import AuditEvent, Role, Workspace
from ..roles import workspace_view
from .common import HtmxHttpRequest, bad_request


@workspace_view(Role.VIEWER)
@require_GET
def audit_log(request: HtmxHttpRequest, name: str) -> HttpResponseBase:
    workspace = request.workspace
    events = AuditEvent.objects.filter(workspace=workspace).select_related("layout")
    form = forms.AuditFilterForm(request.GET)
    if not form.is_valid():
        return bad_request(request, form, workspace=workspace)
    action, actor = form.cleaned_data["action"], form.cleaned_data["actor"]
    if action:
        events = events.filter(action__startswith=action)
    if actor:
        events = events.filter(actor=actor)
    if form.cleaned_data["format"] == "csv":
        return _csv(events, workspace)
    paging = forms.PageForm(request.GET)
    if not paging.is_valid():
        return bad_request(request, paging, workspace=workspace)
    page = Paginator(events, 100).get_page(paging.cleaned_data["page"])
    return render(
        request,
        "memoryui/audit.html",
        {
            "workspace": workspace,
            "page": page,
            "rows": [(e, audit.describe(e), audit.detail_items(e.detail)) for e in page],
            "action": action,
            "actor": actor,
            "actions": AuditEvent.objects.filter(workspace=workspace)
            .order_by()
            .values_list("action", flat=True)
            .distinct(),
        },
    )


class _Echo:
    def write(self, value: str) -> str:
        return value


def _csv(events, workspace: Workspace) -> StreamingHttpResponse:
    writer = csv.writer(_Echo())
    header = ["time", "actor", "action", "layout", "target", "detail", "detail_json"]

    def rows():
        yield writer.writerow(header)
        for e in events.iterator(chunk_size=1000):
            yield writer.writerow(
                [
                    e.created_at.isoformat(),
                    _csv_safe(e.actor),
                    _csv_safe(e.action),
                    _csv_safe(e.layout.memories_dir if e.layout else ""),
                    _csv_safe(e.target),
                    _csv_safe(audit.readable(e)),
                    _csv_safe(audit.as_json(e.detail)),
                ]
            )

    response = StreamingHttpResponse(rows(), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="{workspace.name}-audit.csv"'
    return response


def _csv_safe(value: str) -> str:
    """Cells that a spreadsheet would run as a formula are quoted with an apostrophe."""
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value
