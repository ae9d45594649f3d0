"""The workspace pages: the list, a workspace's page (its layouts, imports and sync),
an import's report, and creating workspaces from the dashboard (an uploaded snapshot or
a registered directory) with their scheduled sync and re-import."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.files.uploadedfile import TemporaryUploadedFile, UploadedFile
from django.core.files.uploadhandler import FileUploadHandler, StopUpload
from django.db.models import Count, OuterRef, Q, Subquery
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect

from generation.tree import HeaderLimitExceeded, TreeError, check_tar_archive, human_size

from .. import figures, object_storage, observability, snapshot_store, workspaces
from ..forms import DirectoryForm, KnownHostsForm, SnapshotUploadForm, SyncForm, archive_suffix
from ..importer import default_limits
from ..models import (
    AuditEvent,
    ImportJob,
    ImportRun,
    Layout,
    Proposal,
    Role,
    Workspace,
    WorkspaceFile,
)
from ..roles import has_role, signed_in, workspace_view
from .common import HtmxHttpRequest

# Room in a request for the multipart boundaries and the other fields of the form.
MULTIPART_SLACK = 64 * 1024


def can_add_workspace(user: Any) -> bool:
    return bool(user.is_staff or user.has_perm("memoryui.add_workspace"))


def _require_add(request: HttpRequest) -> None:
    if not can_add_workspace(request.user):
        raise PermissionDenied("Creating workspaces needs staff or the add-workspace permission.")


def _too_large() -> str:
    return (
        f"The file is larger than the upload limit of "
        f"{human_size(settings.MEMORYUI_MAX_UPLOAD_BYTES)} (MEMORYUI_MAX_UPLOAD_BYTES)."
    )


def _incoming_dir() -> Path:
    path = Path(settings.MEMORYUI_UPLOAD_DIR) / "incoming"
    path.mkdir(parents=True, exist_ok=True)
    return path


class _IncomingFile(TemporaryUploadedFile):
    """An upload streamed to a temp file in the uploads dir (deleted when closed unless
    moved), so that accepting it is a rename on the same file system."""

    def __init__(
        self, name: str | None, content_type: str | None, charset: str | None, extra: Any
    ) -> None:
        file = tempfile.NamedTemporaryFile(suffix=".upload", dir=_incoming_dir())
        UploadedFile.__init__(self, file, name, content_type, 0, charset, extra)


class SnapshotUploadHandler(FileUploadHandler):
    """Streams the uploaded snapshot to disk and stops the upload as soon as it passes
    ``MEMORYUI_MAX_UPLOAD_BYTES``; what was written is deleted."""

    def __init__(self, request: HttpRequest, limit: int) -> None:
        super().__init__(request)
        self.limit = limit
        self.refused = False
        self.received = 0

    def new_file(self, *args: Any, **kwargs: Any) -> None:
        super().new_file(*args, **kwargs)
        self.received = 0
        self.file = _IncomingFile(
            self.file_name, self.content_type, self.charset, self.content_type_extra
        )

    def receive_data_chunk(self, raw_data: bytes, start: int) -> None:
        self.received += len(raw_data)
        if self.received > self.limit:
            self.refused = True
            raise StopUpload(connection_reset=False)  # reads the rest (bounded) and drops it
        self.file.write(raw_data)

    def file_complete(self, file_size: int) -> UploadedFile:
        self.file.seek(0)
        self.file.size = file_size
        return self.file

    def upload_interrupted(self) -> None:
        if hasattr(self, "file"):
            self.file.close()


def _new_page(
    request: HttpRequest,
    upload_form: SnapshotUploadForm | None = None,
    directory_form: DirectoryForm | None = None,
    status: int = 200,
    upload_error: str = "",
) -> HttpResponse:
    context = {
        "upload_error": upload_error,
        "upload_form": upload_form or SnapshotUploadForm(),
        "directory_form": directory_form or DirectoryForm(),
        "roots": [
            {"path": str(root), "exists": root.is_dir()} for root in workspaces.workspace_roots()
        ],
        "max_upload": human_size(settings.MEMORYUI_MAX_UPLOAD_BYTES),
        "max_import": human_size(settings.MEMORYUI_MAX_IMPORT_BYTES),
        "jobs": ImportJob.objects.filter(created_by=signed_in(request)).select_related("workspace")[
            :5
        ],
    }
    return render(request, "memoryui/workspace_new.html", context, status=status)


@require_GET
def workspace_new(request: HtmxHttpRequest) -> HttpResponse:
    _require_add(request)
    return _new_page(request)


@csrf_exempt
@require_POST
def workspace_upload(request: HtmxHttpRequest) -> HttpResponse:
    """Accept an SDK snapshot upload. The upload handler must be in place before the
    body is read, and the CSRF check reads it: so the check is made inside, by
    ``_accept_upload`` (Django's documented pattern). Nothing is read before the
    permission check, and a body larger than the limit is never read at all."""
    _require_add(request)
    limit = settings.MEMORYUI_MAX_UPLOAD_BYTES
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > limit + MULTIPART_SLACK:
        return _new_page(request, upload_error=_too_large(), status=413)
    handler = SnapshotUploadHandler(request, limit)
    request.upload_handlers = [handler]
    return _accept_upload(request, handler)


@csrf_protect
def _accept_upload(request: HtmxHttpRequest, handler: SnapshotUploadHandler) -> HttpResponse:
    data, files = request.POST, request.FILES  # the body is read here, through the handler
    if handler.refused:
        return _new_page(request, upload_error=_too_large(), status=413)
    form = SnapshotUploadForm(data, files)
    upload = files.get("snapshot")
    try:
        if not form.is_valid():
            return _new_page(request, upload_form=form, status=400)
        assert isinstance(upload, TemporaryUploadedFile)
        temp = Path(upload.temporary_file_path())
        if problem := _tar_problem(temp, upload.name or temp.name):
            form.add_error("snapshot", problem)
            return _new_page(request, upload_form=form, status=400)
        name = form.cleaned_data["name"]
        job = ImportJob.objects.create(
            name=name,
            kind=ImportJob.Kind.UPLOAD,
            original_name=(upload.name or "")[:255],
            size=upload.size or 0,
            created_by=signed_in(request),
        )
        # Into the uploads storage: a rename in the uploads folder, or a multipart upload
        # to object storage (the worker that imports it shares no disk with this process).
        job.source_path = object_storage.put_file(
            object_storage.UPLOADS,
            f"{name}-{job.pk}{archive_suffix(upload.name or '') or '.tar'}",
            temp,
        )
        job.save(update_fields=["source_path"])
        observability.log_event(
            "upload", "upload.saved", import_job=job.pk, workspace=name, bytes=upload.size
        )
        observability.count("upload", "ok")
    finally:
        if upload is not None:
            upload.close()  # deletes the temp file unless it was moved
    _send_import(job.pk)
    return redirect("memoryui:import_progress", job.pk)


def _tar_problem(temp: Path, name: str) -> str:
    """Why the uploaded file cannot be imported as a snapshot, or "" (its first
    headers are read with the import's limits, so a header bomb stops here)."""
    try:
        check_tar_archive(temp, default_limits())
    except TreeError as exc:
        if isinstance(exc.__cause__, HeaderLimitExceeded):
            return f"{name} is refused: {exc.__cause__}; nothing was imported."
        return f"{name} is not a tar archive (plain or compressed); nothing was imported."
    return ""


@require_POST
def workspace_register(request: HtmxHttpRequest) -> HttpResponse:
    """Register a directory under the workspace roots as a new workspace."""
    _require_add(request)
    form = DirectoryForm(request.POST)
    if not form.is_valid():
        return _new_page(request, directory_form=form, status=400)
    job = ImportJob.objects.create(
        name=form.cleaned_data["name"],
        kind=ImportJob.Kind.DIRECTORY,
        source_path=str(form.cleaned_data["path"]),
        created_by=signed_in(request),
    )
    _send_import(job.pk)
    return redirect("memoryui:import_progress", job.pk)


@require_GET
def import_progress(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """A new workspace's import, live (htmx polls the fragment); its report once done."""
    job = get_object_or_404(ImportJob.objects.select_related("workspace"), pk=pk)
    if not (
        request.user.is_staff
        or job.created_by_id == request.user.pk
        or job.kind == ImportJob.Kind.SANDBOX
        and job.workspace is not None
        and has_role(request.user, job.workspace, Role.ADMIN)
    ):
        raise Http404("No such import.")
    if job.status == ImportJob.Status.DONE and job.workspace is not None and job.run_id:
        url = reverse("memoryui:import_detail", args=[job.workspace.name, job.run_id])
        return HttpResponseClientRedirect(url) if request.htmx else redirect(url)
    context = {
        "job": job,
        "progress": workspaces.read_progress(job.pk) if job.is_active else {},
        "elapsed": ((job.finished_at or timezone.now()) - job.created_at).total_seconds(),
    }
    template = "memoryui/import_progress.html"
    if request.htmx and not request.htmx.history_restore_request:
        template += "#import-progress"
    return render(request, template, context)


@workspace_view(Role.ADMIN)
@require_POST
def workspace_sync(request: HtmxHttpRequest, name: str) -> HttpResponse:
    """Set the scheduled sync interval (workspace admins)."""
    workspace = request.workspace
    form = SyncForm(request.POST, instance=Workspace.objects.get(pk=workspace.pk))
    if not form.is_valid():
        for errors in form.errors.values():
            messages.error(request, " ".join(map(str, errors)))
        return redirect(workspace)
    minutes = form.cleaned_data["sync_interval_minutes"]
    try:
        workspaces.set_sync_interval(workspace, minutes, request.user)
    except workspaces.PathRefused as exc:
        messages.error(request, f"Scheduled sync not turned on: {exc}")
        return redirect(workspace)
    if minutes:
        messages.info(request, f"{workspace.name} is re-imported every {minutes} minutes.")
    else:
        messages.info(request, f"Scheduled sync of {workspace.name} is off.")
    return redirect(workspace)


@workspace_view(Role.ADMIN)
@require_POST
def workspace_known_hosts(request: HtmxHttpRequest, name: str) -> HttpResponse:
    """Set the hosts the poisoning flags treat as the workspace's own (admins); the
    stored checks of its pending proposals are computed again with them."""
    workspace = request.workspace
    form = KnownHostsForm(request.POST, instance=Workspace.objects.get(pk=workspace.pk))
    if not form.is_valid():
        for errors in form.errors.values():
            messages.error(request, " ".join(map(str, errors)))
        return redirect(workspace)
    from ..entry_checks import forget_pending  # noqa: PLC0415 (deferred: the poisoning rules)

    saved = form.save()
    forget_pending(saved)
    AuditEvent.record(
        saved, "workspace.known_hosts", user=request.user, hosts=saved.known_hosts.split()
    )
    count = len(saved.known_hosts.split())
    messages.info(request, f"{count} known host{'s' if count != 1 else ''} saved.")
    return redirect(workspace)


def _send_import(job_id: int) -> None:
    from memoryui.tasks import import_new_workspace  # noqa: PLC0415 (deferred: Celery loads when a task is sent)

    import_new_workspace.delay_on_commit(job_id)


def _rollout_counts(workspaces: list[Workspace]) -> dict[int, int]:
    counted = dict(
        WorkspaceFile.objects.present()
        .filter(workspace__in=workspaces, kind=WorkspaceFile.Kind.ROLLOUT)
        .values("workspace_id")
        .annotate(n=Count("pk"))
        .values_list("workspace_id", "n")
    )
    return {w.pk: counted.get(w.pk, 0) for w in workspaces}


@require_GET
def workspace_list(request: HtmxHttpRequest) -> HttpResponse:
    annotated = Workspace.objects.annotate(
        layout_count=Count("layouts", filter=Q(layouts__missing_since__isnull=True)),
        last_run_pk=Subquery(
            ImportRun.objects.filter(workspace=OuterRef("pk")).order_by("-pk").values("pk")[:1]
        ),
    ).order_by("name")
    workspaces = [w for w in annotated if has_role(request.user, w, Role.VIEWER)]
    # Counting a large workspace's rollout files took 100+ ms on PostgreSQL at 100,000
    # rollouts; the count only changes with an import, so it is kept until the next one.
    counts = figures.cached_many(workspaces, "rollout-count", _rollout_counts)
    runs = ImportRun.objects.in_bulk([w.last_run_pk for w in workspaces if w.last_run_pk])
    rows = [(w, runs.get(w.last_run_pk), counts[w.pk]) for w in workspaces]
    # The oldest proposal awaiting review where this person reviews: where to start.
    reviewable = [w.pk for w in workspaces if has_role(request.user, w, Role.REVIEWER)]
    pending = Proposal.objects.filter(
        layout__workspace__in=reviewable, status=Proposal.Status.PENDING
    ).select_related("layout__workspace", "run")
    waiting = pending.count() if reviewable else 0
    # Only what the notice shows: a proposal's texts can be megabytes (a large MEMORY.md
    # rewritten), and loading them made this list take 150 ms at 100,000 rollouts.
    first = (
        pending.order_by("created_at", "pk")
        .only(
            "origin",
            "snapshot_id",
            "import_run_id",
            "created_at",
            "layout__memories_dir",
            "layout__workspace__name",
            "run__offline_demo",
        )
        .first()
        if waiting
        else None
    )
    return render(
        request,
        "memoryui/workspace_list.html",
        {"rows": rows, "waiting": waiting, "first_pending": first},
    )


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
            "known_hosts_form": KnownHostsForm(instance=workspace),
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
    job = ImportJob.objects.filter(run=run).only("taken_over_at", "attempts").first()
    context = {"run": run, "workspace": run.workspace, "job": job}
    return render(request, "memoryui/import_detail.html", context)


@workspace_view(Role.ADMIN)
@require_POST
def workspace_reimport(request: HtmxHttpRequest, name: str) -> HttpResponse:
    """Queue a re-import from the workspace's source path (admins)."""
    workspace = request.workspace
    if snapshot_store.has_uploads(workspace):
        messages.error(request, f"Not re-imported: {snapshot_store.NO_SOURCE}")
        return redirect(workspace)
    try:
        workspaces.check_reimportable(workspace)
    except workspaces.PathRefused as exc:
        messages.error(request, f"Not re-imported: {exc}")
        return redirect(workspace)
    from memoryui.tasks import reimport_workspace  # noqa: PLC0415 (deferred: Celery loads when a task is sent)

    reimport_workspace.delay_on_commit(workspace.pk, request.user.pk)
    messages.info(request, f"Re-import of {workspace.name} queued.")
    return redirect(workspace)
