"""A layout's pages: its overview (counts, terminal states per day, what the last
consolidation forgot), MEMORY.md entry by entry, memory_summary.md with what the SDK
injects of it, and the citations that lead from an entry to its rollout."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.core.paginator import Paginator
from django.db.models import Count, F
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET

from .. import charts, documents, figures, usage, writeback
from ..forms import USAGE_FILTERS, PageForm, VersionForm
from ..models import (
    Layout,
    MemoryVersion,
    Pin,
    Proposal,
    RawMemory,
    Role,
    Rollout,
    RolloutSummary,
    WorkspaceFile,
)
from ..roles import has_role, workspace_view
from .common import HtmxHttpRequest, bad_request
from .rollouts import memory_doc_of_text


def _current_versions(layout: Layout) -> dict[str, dict[str, Any]]:
    """The latest version of each consolidated document, without its content."""
    current: dict[str, dict[str, Any]] = {}
    for row in (
        MemoryVersion.objects.filter(layout=layout)
        .order_by("document", "-number")
        .values("document", "number", "blob_id", "blob__size", "created_at", "author_kind")
    ):
        current.setdefault(row["document"], dict(row))
    return current


@workspace_view(Role.VIEWER)
@require_GET
def layout_detail(request: HtmxHttpRequest, name: str, layout_pk: int) -> HttpResponse:
    layout = request.layout
    selection_file, selection = documents.current_selection(layout)
    selected_ids = [item.rollout_id for item in selection.items] if selection else []
    overview = figures.cached(
        layout.workspace,
        f"layout:{layout.pk}:{selection_file.blob_id if selection_file else ''}",
        lambda: _layout_overview(layout, selected_ids),
    )
    return render(
        request,
        "memoryui/layout_detail.html",
        {
            "layout": layout,
            "workspace": layout.workspace,
            **overview,
            "versions": _current_versions(layout),
            "selection_file": selection_file,
            "selection": selection,
            "selected_count": len(selected_ids),
        },
    )


def _layout_overview(layout: Layout, selected_ids: list[str]) -> dict[str, Any]:
    """The layout overview's figures from its files, rollouts and raw memories (the
    same until the next import, see ``memoryui.figures``)."""
    present = WorkspaceFile.objects.present().filter(layout=layout)
    kinds = dict(
        present.order_by().values_list("kind").annotate(n=Count("pk")).values_list("kind", "n")
    )
    # Files gone from disk are few (usually none): leaving them out by id (a subquery
    # on a partial index, run once) is much cheaper than joining every rollout and raw
    # memory to its file.
    gone = WorkspaceFile.objects.filter(layout=layout, missing_since__isnull=False).values("pk")
    rollouts = Rollout.objects.filter(layout=layout).exclude(file_id__in=gone)
    per_day = list(
        rollouts.values("terminal_state", day=F("updated_day"))
        .annotate(n=Count("pk"))
        .order_by("day", "terminal_state")
    )
    raws = RawMemory.objects.filter(layout=layout).exclude(file_id__in=gone)
    without_memory = rollouts.exclude(rollout_id__in=raws.values("rollout_id"))
    forgotten = raws.exclude(rollout_id__in=selected_ids).order_by("-updated_at_raw", "rollout_id")
    chart = charts.terminal_states_per_day(
        per_day,
        state_url=reverse("memoryui:rollout_list", args=[layout.workspace.name, layout.pk]),
    )
    return {
        "counts": {
            "rollouts": kinds.get(WorkspaceFile.Kind.ROLLOUT, 0),
            "raw_memories": kinds.get(WorkspaceFile.Kind.RAW_MEMORY, 0),
            "summaries": kinds.get(WorkspaceFile.Kind.ROLLOUT_SUMMARY, 0),
            "skills": kinds.get(WorkspaceFile.Kind.SKILL, 0),
        },
        "chart": chart,
        "chart_svg": chart.svg(),
        "forgotten_count": forgotten.count(),
        "forgotten": list(forgotten.values("rollout_id", "updated_at_raw")[:10]),
        "without_memory_count": without_memory.count(),
        "without_memory": list(
            without_memory.order_by("-sort_at", "-rollout_id").values(
                "rollout_id", "terminal_state"
            )[:10]
        ),
    }


def _document_version(layout: Layout, document: str, number: int | None) -> MemoryVersion | None:
    versions = (
        MemoryVersion.objects.filter(layout=layout, document=document)
        .select_related("blob", "author")
        .defer("blob__data")
    )
    if number is not None:
        return get_object_or_404(versions, number=number)
    return versions.order_by("-number").first()


def _versions(layout: Layout, document: str):
    return MemoryVersion.objects.filter(layout=layout, document=document).order_by("-number")[:50]


ENTRIES_PER_PAGE = 20


@workspace_view(Role.VIEWER)
@require_GET
def memory_md(request: HtmxHttpRequest, name: str, layout_pk: int) -> HttpResponse:
    layout = request.layout
    form, paging = VersionForm(request.GET), PageForm(request.GET)
    for checked in (form, paging):
        if not checked.is_valid():
            return bad_request(request, checked, workspace=layout.workspace)
    document = MemoryVersion.Document.MEMORY_MD
    version = _document_version(layout, document, form.cleaned_data["version"])
    top = documents.parsed(version.blob_id).children if version else []
    total = len(top)
    # The entries shown, by index (a MEMORY.md of ~95,000 entries at 100,000 rollouts is
    # neither copied nor walked on each view: a find or a filter gives its indexes).
    shown_at: Sequence[int] = range(total)
    query = form.cleaned_data["q"]
    if query and version:
        shown_at = documents.entry_search(version.blob_id).matching(query.lower())
    shown = form.cleaned_data["usage"]
    if shown and version:  # "never" or "failing"
        matching = usage.blocks_read(layout, version, shown)
        if query:
            kept = set(matching)
            shown_at = [i for i in shown_at if i in kept]
        else:
            shown_at = matching
    page = Paginator(shown_at, ENTRIES_PER_PAGE).get_page(paging.cleaned_data["page"])
    blocks = [(i, top[i]) for i in page.object_list]
    # The page's blocks' usage alone.
    used = usage.block_usage(layout, version, [i for i, _ in blocks]) if version else {}
    cited = (
        {c for i, _ in blocks for c in documents.outline(version.blob_id, i).citations}
        if version
        else set()
    )
    links = documents.resolve_citations(layout, cited)
    if any(not c.exists for c in links.values()):
        pending = writeback.files_pending_write_back(layout)
        for citation in links.values():
            citation.pending = not citation.exists and citation.path in pending
    return render(
        request,
        "memoryui/memory_md.html",
        {
            "layout": layout,
            "workspace": layout.workspace,
            "version": version,
            "versions": _versions(layout, document),
            "page": page,
            "entries": _entry_views(layout, version, blocks, links, used),
            "can_edit": has_role(request.user, layout.workspace, Role.EDITOR),
            "agent_changes": MemoryVersion.objects.filter(
                layout=layout, document=MemoryVersion.Document.MEMORY_MD, needs_review=True
            ).count(),
            "total": total,
            "query": query,
            "usage": shown,
            "usage_choices": USAGE_FILTERS,
            "problem": documents.decode_problem(version.blob_id) if version else None,
        },
    )


def _entry_views(layout, version, blocks, links, used):
    keys = documents.entry_keys(version.blob_id)
    pinned = set(
        Pin.objects.filter(layout=layout, document=version.document).values_list("key", flat=True)
    )
    _, selection = documents.current_selection(layout)
    selected = {item.rollout_id for item in selection.items} if selection else None
    views = []
    for i, block in blocks:
        view = documents.EntryView.build(
            block,
            links,
            documents.rendered_entry(version.blob_id, i),
            documents.outline(version.blob_id, i),
        )
        view.key = keys[i]
        view.usage = used[i]
        view.pinned = view.key in pinned
        cited = {c.rollout_id for c in view.citations if c.rollout_id}
        # Stale: every rollout it rests on was forgotten by the last selection.
        view.stale = bool(selected is not None and cited and not cited & selected)
        views.append(view)
    return views


@workspace_view(Role.VIEWER)
@require_GET
def memory_summary(request: HtmxHttpRequest, name: str, layout_pk: int) -> HttpResponse:
    layout = request.layout
    form = VersionForm(request.GET)
    if not form.is_valid():
        return bad_request(request, form, workspace=layout.workspace)
    document = MemoryVersion.Document.MEMORY_SUMMARY
    version = _document_version(layout, document, form.cleaned_data["version"])
    return render(
        request,
        "memoryui/memory_summary.html",
        {
            "layout": layout,
            "workspace": layout.workspace,
            "version": version,
            "versions": list(_versions(layout, document)),  # read again by the edit links
            "injection": documents.injection(version.blob_id) if version else None,
            "sections": documents.rendered_sections(version.blob_id) if version else (),
            "problem": documents.decode_problem(version.blob_id) if version else None,
            "can_edit": has_role(request.user, layout.workspace, Role.EDITOR),
        },
    )


@workspace_view(Role.VIEWER)
@require_GET
def citation(request: HtmxHttpRequest, name: str, layout_pk: int, filename: str) -> HttpResponse:
    """Follow a ``rollout_summaries/<file>.md`` citation to the rollout it summarises; a
    summary a generation run wrote that is not on disk yet (its proposal is being reviewed,
    or approved and waiting for its write-back) is shown from the proposal, marked pending.
    ``?proposal=<pk>``: the proposal the link came from (else the one awaiting write-back)."""
    layout = request.layout
    path = f"{layout.memories_dir}/rollout_summaries/{filename}"
    summary = (
        RolloutSummary.objects.filter(layout=layout, file__path=path).select_related("file").first()
    )
    if summary is not None:
        return redirect(
            reverse(
                "memoryui:rollout_detail",
                kwargs={"name": name, "layout_pk": layout.pk, "rollout_id": summary.rollout_id},
            )
            + "#rollout-summary"
        )
    rel = f"rollout_summaries/{filename}"
    proposal = _citing_proposal(layout, request.GET.get("proposal", ""))
    text = writeback.pending_file_text(proposal, rel) if proposal is not None else None
    if proposal is not None and text is not None:
        return render(
            request,
            "memoryui/citation_pending.html",
            {
                "layout": layout,
                "workspace": layout.workspace,
                "proposal": proposal,
                "doc": memory_doc_of_text(f"{layout.memories_dir}/{rel}", text),
            },
        )
    return render(
        request,
        "memoryui/citation_missing.html",
        {"layout": layout, "workspace": layout.workspace, "filename": filename},
        status=404,
    )


def _citing_proposal(layout: Layout, given: str) -> Proposal | None:
    """The layout's proposal ``given`` names (a pk), else the approved one that waits for
    its write-back; a value that names none of the layout's proposals names nothing."""
    if given:
        if not given.isdigit():
            return None
        return Proposal.objects.filter(layout=layout, pk=int(given)).select_related("run").first()
    return writeback.proposal_to_write(layout)
