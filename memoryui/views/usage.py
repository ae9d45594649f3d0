"""A layout's memory usage: its MEMORY.md entries by how often agents read them, reads
per day of each kind of memory file, and "propose forgetting"."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Count
from django.db.models.functions import TruncDate
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from .. import curation, forgetting, usage
from ..forms import PageForm
from ..models import GenerationSettings, MemoryRead, MemoryVersion, Role
from ..roles import has_role, workspace_view
from .common import HtmxHttpRequest, bad_request

ENTRIES_PER_PAGE = 50
DAYS_SHOWN = 60


class ForgetForm(forms.Form):
    days = forms.IntegerField(min_value=1, max_value=3650)


@workspace_view(Role.VIEWER)
@require_GET
def layout_usage(request: HtmxHttpRequest, name: str, layout_pk: int) -> HttpResponse:
    layout = request.layout
    paging = PageForm(request.GET)
    if not paging.is_valid():
        return bad_request(request, paging, workspace=layout.workspace)
    version = curation.latest(layout, MemoryVersion.Document.MEMORY_MD)
    rows = usage.entries_by_reads(layout, version)
    page = Paginator(rows, ENTRIES_PER_PAGE).get_page(paging.cleaned_data["page"])
    per_day = (
        MemoryRead.objects.filter(layout=layout, read_at__isnull=False)
        .annotate(day=TruncDate("read_at"))
        .values("day", "kind")
        .annotate(n=Count("id"))
        .order_by("-day")
    )
    days: dict[object, dict[str, int]] = {}
    for row in per_day:
        if row["day"] not in days and len(days) >= DAYS_SHOWN:
            break
        days.setdefault(row["day"], {})[row["kind"]] = row["n"]
    kinds = MemoryRead.Kind.choices
    settings_row = GenerationSettings.objects.filter(layout=layout).first()
    forget_days = settings_row.forget_unread_days if settings_row else 30
    return render(
        request,
        "memoryui/usage.html",
        {
            "layout": layout,
            "workspace": layout.workspace,
            "version": version,
            "page": page,
            "kinds": kinds,
            "days": [(day, [counts.get(k, 0) for k, _ in kinds]) for day, counts in days.items()],
            "forget_days": forget_days,
            "forgettable": forgetting.forgettable(layout, forget_days) if version else [],
            "can_propose": has_role(request.user, layout.workspace, Role.ADMIN),
        },
    )


@workspace_view(Role.ADMIN)
@require_POST
def propose_forgetting(request: HtmxHttpRequest, name: str, layout_pk: int) -> HttpResponse:
    layout = request.layout
    form = ForgetForm(request.POST)
    if not form.is_valid():
        return bad_request(request, form, workspace=layout.workspace)
    days = form.cleaned_data["days"]
    GenerationSettings.objects.update_or_create(
        layout=layout, defaults={"forget_unread_days": days}
    )
    proposal = forgetting.propose_forgetting(layout, days, request.user)
    if proposal is None:
        messages.info(request, f"Every entry was read in the last {days} days, or is younger.")
        return redirect("memoryui:layout_usage", name, layout_pk)
    return redirect(reverse("memoryui:proposal_review", args=[name, layout_pk, proposal.pk]))
