from collections.abc import Sequence
from typing import Any, overload

from django import forms
from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Count, Exists, F, IntegerField, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.text import Truncator
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.middleware import HtmxDetails

from generation import review, tree
from generation.summary import injected_summary

from . import (
    charts,
    curation,
    documents,
    figures,
    pipeline,
    search,
    snapshot_store,
    workspaces,
    writeback,
)
from .forms import (
    GenerationSettingsForm,
    PageForm,
    RolloutFilterForm,
    SyncForm,
    VersionForm,
    approx_tokens,
)
from .models import (
    GenerationRun,
    ImportRun,
    Layout,
    MemoryVersion,
    PhaseOneJob,
    Pin,
    Proposal,
    RawMemory,
    Role,
    Rollout,
    RolloutSummary,
    Workspace,
    WorkspaceFile,
)
from .roles import has_role, workspace_view


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails
    workspace: Workspace  # set by roles.workspace_view
    layout: Layout


def bad_request(
    request: HttpRequest, problem: forms.Form | str, *, back: str = "", **context: object
) -> HttpResponse:
    """400, saying what was wrong: a form's messages, or one sentence."""
    if isinstance(problem, forms.Form):
        errors = [
            f"{(problem.fields[name].label or name.replace('_', ' ')).capitalize()}: "
            + " ".join(map(str, messages_))
            if name in problem.fields
            else " ".join(map(str, messages_))
            for name, messages_ in problem.errors.items()
        ]
    else:
        errors = [problem]
    context.update(errors=errors, back=back)
    return render(request, "memoryui/bad_request.html", context, status=400)


def _count_subquery(queryset):
    return Coalesce(
        Subquery(
            queryset.order_by().values("workspace_id").annotate(n=Count("pk")).values("n"),
            output_field=IntegerField(),
        ),
        0,
    )


@require_GET
def workspace_list(request: HtmxHttpRequest) -> HttpResponse:
    annotated = Workspace.objects.annotate(
        layout_count=Count("layouts", filter=Q(layouts__missing_since__isnull=True)),
        rollout_count=_count_subquery(
            WorkspaceFile.objects.present().filter(
                workspace=OuterRef("pk"), kind=WorkspaceFile.Kind.ROLLOUT
            )
        ),
        last_run_pk=Subquery(
            ImportRun.objects.filter(workspace=OuterRef("pk")).order_by("-pk").values("pk")[:1]
        ),
    ).order_by("name")
    workspaces = [w for w in annotated if has_role(request.user, w, Role.VIEWER)]
    runs = ImportRun.objects.in_bulk([w.last_run_pk for w in workspaces if w.last_run_pk])
    rows = [(w, runs.get(w.last_run_pk)) for w in workspaces]
    return render(request, "memoryui/workspace_list.html", {"rows": rows})


@workspace_view(Role.VIEWER)
@require_GET
def workspace_detail(request: HtmxHttpRequest, name: str) -> HttpResponse:
    workspace = request.workspace
    layouts = list(
        Layout.objects.filter(workspace=workspace).order_by("missing_since", "memories_dir")
    )
    counts = figures.cached(workspace, "layout-counts", lambda: _layout_counts(workspace))
    for layout in layouts:
        for name, n in counts.get(layout.pk, _NO_COUNTS).items():
            setattr(layout, name, n)
    runs = workspace.imports.defer("report").select_related("triggered_by")[:10]
    missing_files = workspace.files.filter(missing_since__isnull=False).count()
    return render(
        request,
        "memoryui/workspace_detail.html",
        {
            "workspace": workspace,
            "layouts": layouts,
            "runs": runs,
            "missing_files": missing_files,
            "is_admin": has_role(request.user, workspace, Role.ADMIN),
            "sync_form": SyncForm(instance=workspace),
            **workspaces.sync_status(workspace),
            **snapshot_store.store_status(workspace),
        },
    )


_NO_COUNTS = {
    "rollout_count": 0,
    "raw_memory_count": 0,
    "summary_count": 0,
    "skill_count": 0,
    "problem_count": 0,
}


def _layout_counts(workspace: Workspace) -> dict[int, dict[str, int]]:
    """Files present on disk per layout: rollouts, raw memories, summaries, skill files
    and files with a problem (the same until the next import, see ``memoryui.figures``)."""
    kinds = WorkspaceFile.Kind
    present = Q(files__missing_since__isnull=True)
    rows = (
        Layout.objects.filter(workspace=workspace)
        .annotate(
            rollout_count=Count("files", filter=Q(files__kind=kinds.ROLLOUT) & present),
            raw_memory_count=Count("files", filter=Q(files__kind=kinds.RAW_MEMORY) & present),
            summary_count=Count("files", filter=Q(files__kind=kinds.ROLLOUT_SUMMARY) & present),
            skill_count=Count("files", filter=Q(files__kind=kinds.SKILL) & present),
            problem_count=Count("files", filter=~Q(files__problem="") & present),
        )
        .values("pk", *_NO_COUNTS)
    )
    return {row.pop("pk"): row for row in rows}


@workspace_view(Role.VIEWER)
@require_GET
def import_detail(request: HtmxHttpRequest, name: str, pk: int) -> HttpResponse:
    run = get_object_or_404(ImportRun, workspace=request.workspace, pk=pk)
    run.workspace = request.workspace
    return render(request, "memoryui/import_detail.html", {"run": run, "workspace": run.workspace})


@workspace_view(Role.ADMIN)
@require_POST
def workspace_reimport(request: HtmxHttpRequest, name: str) -> HttpResponse:
    """Queue a re-import from the workspace's source path (admins)."""
    workspace = request.workspace
    if snapshot_store.has_uploads(workspace):
        messages.error(request, f"Not re-imported: {snapshot_store.NO_SOURCE}")
        return redirect(workspace)
    try:
        workspaces.resolve_source(workspace.source_path)
    except workspaces.PathRefused as exc:
        messages.error(request, f"Not re-imported: {exc}")
        return redirect(workspace)
    from memoryui.tasks import reimport_workspace  # Celery loads when a task is sent

    reimport_workspace.delay_on_commit(workspace.pk, request.user.pk)
    messages.info(request, f"Re-import of {workspace.name} queued.")
    return redirect(workspace)


# --- layouts ---------------------------------------------------------------------


def _layout(request: HtmxHttpRequest, name: str, layout_pk: int) -> Layout:
    """The route's layout, resolved (and the role checked) by ``workspace_view``."""
    return request.layout


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
    layout = _layout(request, name, layout_pk)
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


ROLLOUTS_PER_PAGE = 50
TITLE_CHARS = 110


def cut_chars(text: str, length: int) -> str:
    """The ``truncatechars`` filter, without its walk over every character when the
    text is short enough to be shown whole."""
    return text if len(text) <= length else Truncator(text).chars(length)


class KeysThenRows(Sequence[Any]):
    """What a Paginator pages through: a page's primary keys first (the offset walks
    the ordering's index alone, even on page 100), then only that page's rows from
    ``rows``, joined and annotated, in the same order."""

    ordered = True

    def __init__(self, keys: QuerySet, rows: QuerySet) -> None:
        self.keys, self.rows = keys, rows

    def __len__(self) -> int:  # what the Paginator counts
        return self.keys.count()

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, int):
            return self[index : index + 1][0]
        pks = list(self.keys.values_list("pk", flat=True)[index])
        found = {row.pk: row for row in self.rows.filter(pk__in=pks)}
        return [found[pk] for pk in pks if pk in found]


@workspace_view(Role.VIEWER)
@require_GET
def rollout_list(request: HtmxHttpRequest, name: str, layout_pk: int) -> HttpResponse:
    layout = _layout(request, name, layout_pk)
    paging = PageForm(request.GET)
    number = paging.cleaned_data["page"] if paging.is_valid() else None
    form = RolloutFilterForm(request.GET or None)
    rollouts = Rollout.objects.filter(layout=layout)
    query = ""
    if form.is_valid():
        data = form.cleaned_data
        if data["state"]:
            rollouts = rollouts.filter(terminal_state=data["state"])
        if data["since"]:
            rollouts = rollouts.filter(updated_day__gte=data["since"])
        if data["until"]:
            rollouts = rollouts.filter(updated_day__lte=data["until"])
        raw_ids = RawMemory.objects.filter(layout=layout).values("rollout_id")
        if data["memory"] == "none":
            rollouts = rollouts.exclude(rollout_id__in=raw_ids)
        elif data["memory"] == "some":
            rollouts = rollouts.filter(rollout_id__in=raw_ids)
        if data["selection"]:
            _, selection = documents.current_selection(layout)
            ids = [item.rollout_id for item in selection.items] if selection else []
            if data["selection"] == "selected":
                rollouts = rollouts.filter(rollout_id__in=ids)
            else:
                rollouts = rollouts.filter(rollout_id__in=raw_ids).exclude(rollout_id__in=ids)
        query = data["q"].strip()
        if query:
            rollouts = rollouts.filter(rollout_id__in=search.matching_rollout_ids(layout, query))
    rows = (
        Rollout.objects.select_related("file")
        .annotate(
            has_raw_memory=Exists(
                RawMemory.objects.filter(layout=layout, rollout_id=OuterRef("rollout_id"))
            )
        )
        .order_by("-sort_at", "-rollout_id")
    )
    page = Paginator(
        KeysThenRows(rollouts.order_by("-sort_at", "-rollout_id"), rows), ROLLOUTS_PER_PAGE
    ).get_page(number)
    # One reverse() for the page (rollout ids need no quoting: ROLLOUT_ID_RE).
    detail = reverse("memoryui:rollout_detail", args=[layout.workspace.name, layout.pk, "-"])
    for rollout in page:
        rollout.detail_url = f"{detail.removesuffix('-/')}{rollout.rollout_id}/"
        rollout.short_title = cut_chars(rollout.title, TITLE_CHARS)
    params = request.GET.copy()
    params.pop("page", None)
    context = {
        "layout": layout,
        "workspace": layout.workspace,
        "form": form,
        "paging": paging,
        "page": page,
        "query": query,
        "params": params.urlencode(),
        "states": tree.TERMINAL_STATES,
    }
    template = "memoryui/rollout_list.html"
    if request.htmx and not request.htmx.history_restore_request:
        template += "#rollout-table"
    # Invalid filters (or page number) are shown with their messages, over the unfiltered
    # list (its first page).
    status = 400 if (form.is_bound and not form.is_valid()) or paging.errors else 200
    return render(request, template, context, status=status)


# --- MEMORY.md and memory_summary.md ---------------------------------------------


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
    layout = _layout(request, name, layout_pk)
    form, paging = VersionForm(request.GET), PageForm(request.GET)
    for checked in (form, paging):
        if not checked.is_valid():
            return bad_request(request, checked, workspace=layout.workspace)
    document = MemoryVersion.Document.MEMORY_MD
    version = _document_version(layout, document, form.cleaned_data["version"])
    top = list(enumerate(documents.parsed(version.blob_id).children)) if version else []
    total = len(top)
    query = form.cleaned_data["q"]
    if query and version:
        needle = query.lower()
        texts = documents.entry_search_texts(version.blob_id)
        top = [(i, block) for i, block in top if needle in texts[i]]
    page = Paginator(top, ENTRIES_PER_PAGE).get_page(paging.cleaned_data["page"])
    cited = (
        {c for i, _ in page.object_list for c in documents.outline(version.blob_id, i).citations}
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
            "entries": _entry_views(layout, version, page.object_list, links),
            "can_edit": has_role(request.user, layout.workspace, Role.EDITOR),
            "agent_changes": MemoryVersion.objects.filter(
                layout=layout, document=MemoryVersion.Document.MEMORY_MD, needs_review=True
            ).count(),
            "total": total,
            "query": query,
            "problem": documents.decode_problem(version.blob_id) if version else None,
        },
    )


def _entry_views(layout, version, blocks, links):
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
        view.pinned = view.key in pinned
        cited = {c.rollout_id for c in view.citations if c.rollout_id}
        # Stale: every rollout it rests on was forgotten by the last selection.
        view.stale = bool(selected is not None and cited and not cited & selected)
        views.append(view)
    return views


@workspace_view(Role.VIEWER)
@require_GET
def memory_summary(request: HtmxHttpRequest, name: str, layout_pk: int) -> HttpResponse:
    layout = _layout(request, name, layout_pk)
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
    """Follow a ``rollout_summaries/<file>.md`` citation to the rollout it summarises."""
    layout = _layout(request, name, layout_pk)
    path = f"{layout.memories_dir}/rollout_summaries/{filename}"
    summary = (
        RolloutSummary.objects.filter(layout=layout, file__path=path).select_related("file").first()
    )
    if summary is None:
        return render(
            request,
            "memoryui/citation_missing.html",
            {"layout": layout, "workspace": layout.workspace, "filename": filename},
            status=404,
        )
    return redirect(
        reverse(
            "memoryui:rollout_detail",
            kwargs={"name": name, "layout_pk": layout.pk, "rollout_id": summary.rollout_id},
        )
        + "#rollout-summary"
    )


# --- generation ------------------------------------------------------------------

EXTRA_PROMPT_WARNING_TOKENS = 5_000


@workspace_view(Role.VIEWER, post=Role.ADMIN)
@require_http_methods(["GET", "POST"])
def generation(request: HtmxHttpRequest, name: str, layout_pk: int) -> HttpResponse:
    """Generation settings of a layout and its runs; staff change settings and start."""
    layout = _layout(request, name, layout_pk)
    gs = pipeline.settings_for(layout)
    form = GenerationSettingsForm(request.POST or None, instance=gs)
    if request.method == "POST":
        if form.is_valid():
            saved = form.save(commit=False)
            saved.updated_by = request.user
            saved.save()
            tokens = form.extra_prompt_tokens
            if tokens > EXTRA_PROMPT_WARNING_TOKENS:
                messages.warning(
                    request,
                    f"The extra prompt is about {tokens:,} tokens; keep it well under "
                    f"{EXTRA_PROMPT_WARNING_TOKENS:,}: it is sent with every model call.",
                )
            messages.success(request, "Generation settings saved.")
            return redirect("memoryui:generation", name=name, layout_pk=layout.pk)
    runs = list(layout.runs.select_related("created_by")[:20])
    return render(
        request,
        "memoryui/generation.html",
        {
            "layout": layout,
            "workspace": layout.workspace,
            "form": form,
            "runs": runs,
            "access": pipeline.model_access(),
            "extra_prompt_tokens": approx_tokens(gs.extra_prompt),
            "extra_prompt_warning": EXTRA_PROMPT_WARNING_TOKENS,
        },
    )


@workspace_view(Role.ADMIN)
@require_POST
def generation_start(request: HtmxHttpRequest, name: str, layout_pk: int) -> HttpResponse:
    layout = _layout(request, name, layout_pk)
    try:
        run = pipeline.start_run(
            layout, request.user, reextract=request.POST.get("reextract") == "on"
        )
    except (pipeline.RunConflict, pipeline.GenerationUnavailable) as exc:
        messages.error(request, str(exc))
        return redirect("memoryui:generation", name=name, layout_pk=layout.pk)
    from memoryui.tasks import start_generation  # Celery loads when a task is sent

    start_generation.delay_on_commit(run.pk)
    return redirect("memoryui:run_detail", name=name, layout_pk=layout.pk, run_pk=run.pk)


def _run(request: HtmxHttpRequest, run_pk: int) -> GenerationRun:
    run = get_object_or_404(
        GenerationRun.objects.select_related("created_by"), pk=run_pk, layout=request.layout
    )
    run.layout = request.layout
    return run


@workspace_view(Role.VIEWER)
@require_GET
def run_detail(request: HtmxHttpRequest, name: str, layout_pk: int, run_pk: int) -> HttpResponse:
    """A run's progress and, once done, a short summary of its proposal with a link to
    the review page (the proposal's text is never shown here: it can be megabytes).
    While the run is active the page polls its ``run-progress`` partial."""
    run = _run(request, run_pk)
    failures = list(
        run.jobs.filter(status=PhaseOneJob.Status.FAILED)
        .select_related("rollout")
        .order_by("pk")[:100]
    )
    progress = pipeline.progress(run)
    proposal = (
        Proposal.objects.filter(run=run)
        .select_related("base_memory_md", "base_memory_summary")
        .defer("raw_memories_md")
        .first()
        if not run.is_active
        else None
    )
    context = {
        "run": run,
        "layout": run.layout,
        "workspace": run.layout.workspace,
        "progress": progress,
        "stalled_since": pipeline.stalled_since(run, progress, timezone.now()),
        "lease_minutes": settings.MEMORYUI_JOB_LEASE_SECONDS // 60,
        "failures": failures,
        "elapsed": (
            (run.finished_at or timezone.now()) - (run.started_at or run.created_at)
        ).total_seconds(),
        "can_cancel": run.is_active and has_role(request.user, run.layout.workspace, Role.ADMIN),
        "proposal": proposal,
        "summary": _proposal_summary(proposal) if proposal is not None else None,
    }
    template = "memoryui/run_detail.html"
    if request.htmx and not request.htmx.history_restore_request:
        return render(request, template + "#run-progress", context)
    return render(request, template, context)


def _proposal_summary(proposal: Proposal) -> dict[str, Any]:
    """Per document: entries changed, added, removed (a renamed, merged or split entry
    counts once, as changed); skill files touched; the injection size."""
    docs = []
    for label, base, proposed in (
        ("MEMORY.md", proposal.base_memory_md, proposal.memory_md),
        ("memory_summary.md", proposal.base_memory_summary, proposal.memory_summary),
    ):
        counts = {"changed": 0, "added": 0, "removed": 0, "moved": 0, "paired": 0}
        for change in review.compare(curation.text_of(base), proposed):
            if change.status in counts:
                counts[change.status] += 1
            if change.paired:
                counts["paired"] += 1
        docs.append({"label": label, "base": base, **counts})
    skills = [
        {
            "path": rel,
            "status": "added"
            if change.get("old") is None
            else "deleted"
            if change.get("new") is None
            else "changed",
        }
        for rel, change in sorted((proposal.skill_changes or {}).items())
    ]
    return {
        "documents": docs,
        "skills": skills,
        "injection": injected_summary(proposal.memory_summary.encode()),
    }


@workspace_view(Role.ADMIN)
@require_POST
def run_cancel(request: HtmxHttpRequest, name: str, layout_pk: int, run_pk: int) -> HttpResponse:
    run = _run(request, run_pk)
    if pipeline.cancel_run(run.pk):
        messages.info(request, "Run cancelled; calls already under way finish and are discarded.")
    return redirect("memoryui:run_detail", name=name, layout_pk=layout_pk, run_pk=run.pk)
