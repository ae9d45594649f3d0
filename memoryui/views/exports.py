"""Memory leaving memoryui: a layout's write-back page and a workspace's export page.

Anyone who may see the workspace sees what would be written, the lint findings and the
conflicts; only admins write, export, overwrite a conflict or let a finding through.
"""

from __future__ import annotations

import tempfile
import uuid
from typing import Any

from django.contrib import messages
from django.http import FileResponse, HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from generation.export import ExportError
from generation.lint import Finding

from .. import lint_allowances
from ..forms import ExportForm
from ..models import Layout, Role, Workspace
from ..roles import has_role, workspace_view
from ..snapshots import export_place, export_snapshot, export_to_store, plan_export
from ..writeback import (
    Plan,
    Refused,
    WritebackError,
    WritebackResult,
    check_disk,
    plan_layout,
    workspace_root,
    write_back,
)
from .common import HtmxHttpRequest

# --- write-back ---------------------------------------------------------------------------


@workspace_view(Role.VIEWER, post=Role.ADMIN)
@require_http_methods(["GET", "POST"])
def layout_writeback(request: HtmxHttpRequest, name: str, layout_pk: int) -> HttpResponse:
    """GET: the plan, findings and conflicts. POST ``action=dry_run``: everything a write
    would do, nothing written. POST ``action=write``: the write-back."""
    layout = request.layout
    if request.method == "GET":
        plan = plan_layout(layout)
        error = _check_disk(plan)
        return _writeback_page(request, layout, plan, error=error)
    dry_run = request.POST.get("action") == "dry_run"
    try:
        result = write_back(
            layout,
            user=request.user,
            overwrite=request.POST.getlist("overwrite"),
            allow_findings=request.POST.getlist("allow_finding"),
            dry_run=dry_run,
        )
    except Refused as exc:
        plan = exc.plan or plan_layout(layout)
        return _writeback_page(request, layout, plan, error=str(exc), status=409)
    except WritebackError as exc:
        plan = plan_layout(layout)
        return _writeback_page(request, layout, plan, error=str(exc), status=409)
    if dry_run:
        return _writeback_page(request, layout, result.plan, result=result)
    messages.success(
        request,
        f"Wrote {len(result.written)} file(s) into {layout.memories_dir}"
        + (f", deleted {len(result.deleted)}" if result.deleted else "")
        + (f"; {len(result.skipped_on_disk)} already on disk" if result.skipped_on_disk else "")
        + ".",
    )
    return redirect("memoryui:layout_writeback", name=name, layout_pk=layout.pk)


def _check_disk(plan: Plan) -> str:
    try:
        check_disk(plan, workspace_root(plan.layout.workspace))
    except WritebackError as exc:
        return str(exc)
    return ""


def _writeback_page(
    request: HtmxHttpRequest,
    layout: Layout,
    plan: Plan,
    *,
    result: WritebackResult | None = None,
    error: str = "",
    status: int = 200,
) -> HttpResponse:
    workspace = layout.workspace
    pending = plan.pending
    context: dict[str, Any] = {
        **_lint_context(request, workspace, plan.findings, plan.sha256_of()),
        "layout": layout,
        "workspace": workspace,
        "plan": plan,
        "changed": plan.changed,
        "file_counts": _file_counts(plan),
        "fold_files": len(plan.changed) > FOLD_FILES_OVER,
        "to_write": {
            "total": sum(1 for f in pending if not f.deleted),
            "new": sum(1 for f in pending if f.is_new and not f.deleted),
            "replaced": sum(1 for f in pending if not f.is_new and not f.deleted),
            "deleted": sum(1 for f in pending if f.deleted),
            "directory": f"{workspace.source_path.rstrip('/')}/{layout.memories_dir}",
            "conflicts": len(plan.conflicts),
        },
        "conflicts": [(c, c.rows()) for c in plan.conflicts],
        "result": result,
        "error": error,
        "is_admin": has_role(request.user, workspace, Role.ADMIN),
        "is_directory": workspace.source_kind == Workspace.SourceKind.DIRECTORY,
        "pending_paths": {f.path for f in plan.pending},
        "on_disk_paths": {f.path for f in plan.on_disk},
        "conflict_paths": plan.conflict_paths(),
        "overwrite": set(request.POST.getlist("overwrite")),
    }
    return render(request, "memoryui/writeback.html", context, status=status)


# Longer file tables are folded under their counts, so that findings and buttons stay near.
FOLD_FILES_OVER = 15


def _file_counts(plan: Plan) -> list[tuple[str, int]]:
    """How many changed files are in each state, as the table labels them."""
    conflicts, on_disk = plan.conflict_paths(), {f.path for f in plan.on_disk}
    counts: dict[str, int] = {}
    for f in plan.changed:
        if f.path in conflicts:
            label = "changed on disk"
        elif f.path in on_disk:
            label = "already on disk"
        elif f.deleted:
            label = "to delete"
        elif f.is_new:
            label = "new"
        else:
            label = "to replace" if plan.disk_checked else "changed"
        counts[label] = counts.get(label, 0) + 1
    return sorted(counts.items(), key=lambda kv: -kv[1])


def _lint_context(
    request: HtmxHttpRequest,
    workspace: Workspace,
    findings: list[Finding],
    sha256_of: dict[str, str],
) -> dict[str, Any]:
    """The findings that block (no allowance holds for the file as it is now) and the
    allowances that still hold, for the findings' table and the list of blockers."""
    held = lint_allowances.standing(workspace, findings, sha256_of)
    return {
        "held": held,
        "blockers": [f for f in findings if f.id not in held],
        "allowed": set(request.POST.getlist("allow_finding")),
    }


# --- export -------------------------------------------------------------------------------


@workspace_view(Role.VIEWER, post=Role.ADMIN)
@require_http_methods(["GET", "POST"])
def workspace_export(request: HtmxHttpRequest, name: str) -> HttpResponseBase:
    workspace = request.workspace
    layouts = list(workspace.layouts.present().order_by("memories_dir"))
    if request.method == "GET":
        form = ExportForm(
            layouts=layouts,
            initial={"snapshot_id": str(uuid.uuid4()), "destination": "server"},
        )
        return _export_page(request, workspace, layouts, form)
    form = ExportForm(request.POST, layouts=layouts)
    if not form.is_valid():
        return _export_page(request, workspace, layouts, form, status=400)
    data = form.cleaned_data
    download = data["destination"] == "download"
    fileobj = tempfile.TemporaryFile() if download else None
    options: dict[str, Any] = {
        "memories_dirs": data["layouts"],
        "allow_findings": request.POST.getlist("allow_finding"),
        "user": request.user,
    }
    try:
        if fileobj is not None:
            result = export_snapshot(
                workspace, snapshot_id=data["snapshot_id"], fileobj=fileobj, **options
            )
        else:
            result = export_to_store(
                workspace,
                snapshot_id=data["snapshot_id"],
                session_state=data["session_state"],
                **options,
            )
    except ExportError as exc:  # lint findings not allowed, an existing id, ...
        _close(fileobj)
        return _export_page(request, workspace, layouts, form, error=str(exc), status=409)
    except OSError as exc:  # the download's temporary file: a full disk, say
        _close(fileobj)
        error = f"the archive could not be written ({exc.strerror or exc})"
        return _export_page(request, workspace, layouts, form, error=error, status=503)
    if fileobj is not None:
        fileobj.seek(0)
        return FileResponse(
            fileobj,
            as_attachment=True,
            filename=f"{data['snapshot_id']}.tar",
            content_type="application/x-tar",
        )
    text = f"Exported {result.location} ({result.snapshot.members} members)."
    if result.session_state:
        text += f" Session state: {result.session_state}."
    messages.success(request, text)
    return redirect("memoryui:workspace_export", name=name)


def _close(fileobj: Any) -> None:
    if fileobj is not None:
        fileobj.close()


def _export_page(
    request: HtmxHttpRequest,
    workspace: Workspace,
    layouts: list[Layout],
    form: ExportForm,
    *,
    error: str = "",
    status: int = 200,
) -> HttpResponse:
    chosen = form.cleaned_data.get("layouts") if form.is_bound and form.is_valid() else None
    try:
        plan = plan_export(workspace, chosen or None, layouts=layouts)
    except ExportError as exc:
        plan, error = plan_export(workspace, layouts=layouts), error or str(exc)
    context = {
        **_lint_context(request, workspace, plan.findings, plan.sha256_of()),
        "workspace": workspace,
        "form": form,
        "plan": plan,
        "overlay": list(plan.overlay.values()),
        "error": error,
        "is_admin": has_role(request.user, workspace, Role.ADMIN),
        "base_path": export_place(),
        "layouts": layouts,
        "is_directory": workspace.source_kind == Workspace.SourceKind.DIRECTORY,
    }
    return render(request, "memoryui/export.html", context, status=status)
