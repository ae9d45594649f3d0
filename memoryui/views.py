from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.db.models import Count, IntegerField, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST
from django_htmx.middleware import HtmxDetails

from generation.tasks import reimport_workspace

from .models import ImportRun, Layout, Workspace, WorkspaceFile


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


def _count_subquery(queryset):  # type: ignore[no-untyped-def]
    return Coalesce(
        Subquery(
            queryset.order_by().values("workspace_id").annotate(n=Count("pk")).values("n"),
            output_field=IntegerField(),
        ),
        0,
    )


@require_GET
def workspace_list(request: HtmxHttpRequest) -> HttpResponse:
    workspaces = Workspace.objects.annotate(
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
    workspaces = list(workspaces)
    runs = ImportRun.objects.in_bulk([w.last_run_pk for w in workspaces if w.last_run_pk])
    rows = [(w, runs.get(w.last_run_pk)) for w in workspaces]
    return render(request, "memoryui/workspace_list.html", {"rows": rows})


@require_GET
def workspace_detail(request: HtmxHttpRequest, name: str) -> HttpResponse:
    workspace = get_object_or_404(Workspace, name=name)
    kinds = WorkspaceFile.Kind
    layouts = (
        Layout.objects.filter(workspace=workspace)
        .annotate(
            rollout_count=Count(
                "files", filter=Q(files__kind=kinds.ROLLOUT, files__missing_since__isnull=True)
            ),
            raw_memory_count=Count(
                "files", filter=Q(files__kind=kinds.RAW_MEMORY, files__missing_since__isnull=True)
            ),
            summary_count=Count(
                "files",
                filter=Q(files__kind=kinds.ROLLOUT_SUMMARY, files__missing_since__isnull=True),
            ),
            skill_count=Count(
                "files", filter=Q(files__kind=kinds.SKILL, files__missing_since__isnull=True)
            ),
            problem_count=Count(
                "files", filter=~Q(files__problem="") & Q(files__missing_since__isnull=True)
            ),
        )
        .order_by("missing_since", "memories_dir")
    )
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
        },
    )


@require_GET
def import_detail(request: HtmxHttpRequest, name: str, pk: int) -> HttpResponse:
    run = get_object_or_404(
        ImportRun.objects.select_related("workspace"), workspace__name=name, pk=pk
    )
    return render(request, "memoryui/import_detail.html", {"run": run, "workspace": run.workspace})


@require_POST
@staff_member_required
def workspace_reimport(request: HtmxHttpRequest, name: str) -> HttpResponse:
    """Queue a re-import from the workspace's source path (staff only until roles land)."""
    workspace = get_object_or_404(Workspace, name=name)
    reimport_workspace.delay_on_commit(workspace.pk, request.user.pk)
    messages.info(request, f"Re-import of {workspace.name} queued.")
    return redirect(workspace)
