"""A layout's memory usage: its MEMORY.md entries by how often agents read them, reads
per day of each kind of memory file, and "propose forgetting"."""

from __future__ import annotations

from datetime import date

from django import forms
from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from .. import charts, curation, forgetting, usage
from ..forms import PageForm
from ..models import GenerationSettings, Layout, MemoryRead, MemoryVersion, Role
from ..roles import has_role, workspace_view
from .common import HtmxHttpRequest, bad_request

ENTRIES_PER_PAGE = 50


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
    chart, days = _reads_per_day(layout)
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
            "kinds": MemoryRead.Kind.choices,
            "chart": chart,
            "days": days,
            "forget_days": forget_days,
            "forgettable": forgetting.forgettable(layout, forget_days) if version else [],
            "can_propose": has_role(request.user, layout.workspace, Role.ADMIN),
        },
    )


def _reads_per_day(layout: Layout) -> tuple[charts.Chart, list[tuple[date | None, list[int]]]]:
    """Reads per day and kind over the last ``charts.MAX_DAYS`` days that have reads: a
    stacked chart, and the same figures as rows (newest first) for the table under it."""
    counts = usage.reads_per_day(layout)
    kinds = [kind for kind, _ in MemoryRead.Kind.choices]
    chart = charts.stacked_per_day(
        counts,
        kinds,
        title="Memory reads per day by kind of file",
        noun="read",
        css="kind",
        labels=dict(MemoryRead.Kind.choices),
    )
    rows = [(bar.day, [counts[bar.day].get(k, 0) for k in kinds]) for bar in reversed(chart.bars)]
    return chart, rows


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
