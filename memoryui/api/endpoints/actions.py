"""Actions that start work: re-import a workspace, a generation run, a write-back,
an export into the snapshot store."""

from datetime import datetime

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Field, Schema, Status
from ninja.errors import HttpError
from ninja.pagination import paginate
from pydantic import ConfigDict

from generation.export import ExportError

from ... import pipeline
from ...models import GenerationRun, ImportRun, Proposal, Role
from ...snapshots import export_to_store
from ...writeback import WritebackError, write_back
from ..core import (
    ERRORS,
    SNAPSHOT_ID_PATTERN,
    Detail,
    Mapped,
    Pages,
    api,
    conflict,
    layout,
    workspace,
)


class QueuedOut(Schema):
    queued: bool
    detail: str


@api.post("/workspaces/{name}/imports", response={202: QueuedOut, **ERRORS}, tags=["actions"])
def start_import(request: HttpRequest, name: str):
    """Re-import the workspace from its source (admins); a Celery task."""
    from memoryui.tasks import reimport_workspace  # noqa: PLC0415 (deferred: Celery loads when a task is sent)

    ws = workspace(request, name, Role.ADMIN)
    reimport_workspace.delay_on_commit(ws.pk, request.user.pk)
    return Status(202, {"queued": True, "detail": f"Re-import of {ws.name} queued."})


class ImportOut(Schema):
    id: int
    status: str
    started_at: datetime
    finished_at: datetime | None
    added: int
    changed: int
    unchanged: int
    missing: int
    errors: list[dict]


@api.get("/workspaces/{name}/imports", response={200: list[ImportOut], **ERRORS}, tags=["actions"])
@paginate(Pages)
def list_imports(request: HttpRequest, name: str):
    ws = workspace(request, name, Role.VIEWER)
    return Mapped(
        ImportRun.objects.filter(workspace=ws),
        lambda r: {
            "id": r.pk,
            "status": r.status,
            "started_at": r.started_at,
            "finished_at": r.finished_at,
            "added": r.added,
            "changed": r.changed,
            "unchanged": r.unchanged,
            "missing": r.missing,
            "errors": r.errors,
        },
    )


class RunOut(Schema):
    id: int
    status: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: str
    total: int
    done: int
    failed: int
    input_tokens: int
    output_tokens: int
    proposal_id: int | None
    kept_extracted: int = 0  # rollouts already extracted on disk, left out of phase one


def _run_out(run: GenerationRun) -> dict:
    progress = pipeline.progress(run)
    proposal = Proposal.objects.filter(run=run).values_list("pk", flat=True).first()
    return {
        "id": run.pk,
        "status": run.status,
        "created_at": run.created_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "error": run.error,
        "total": progress.total,
        "done": progress.done,
        "failed": progress.failed,
        "input_tokens": progress.input_tokens,
        "output_tokens": progress.output_tokens,
        "proposal_id": proposal,
        "kept_extracted": int(run.settings_snapshot.get("kept_extracted", 0)),
    }


@api.post(
    "/workspaces/{name}/layouts/{layout_id}/runs",
    response={201: RunOut, 503: Detail, **ERRORS},
    tags=["actions"],
)
def start_run(request: HttpRequest, name: str, layout_id: int, reextract: bool = False):
    """Start a generation run (admins): 409 while one is active, 503 without a model.
    Rollouts already extracted on disk are kept unless ``reextract=true``."""

    from memoryui.tasks import start_generation  # noqa: PLC0415 (deferred: Celery loads when a task is sent)

    lay = layout(request, name, layout_id, Role.ADMIN)
    try:
        run = pipeline.start_run(lay, request.user, reextract=reextract)
    except pipeline.RunConflict as exc:
        raise conflict(str(exc)) from exc
    except pipeline.GenerationUnavailable as exc:
        raise HttpError(503, str(exc)) from exc
    start_generation.delay_on_commit(run.pk)
    return Status(201, _run_out(run))


@api.get(
    "/workspaces/{name}/layouts/{layout_id}/runs/{run_id}",
    response={200: RunOut, **ERRORS},
    tags=["actions"],
)
def get_run(request: HttpRequest, name: str, layout_id: int, run_id: int):
    lay = layout(request, name, layout_id, Role.VIEWER)
    return _run_out(get_object_or_404(GenerationRun, pk=run_id, layout=lay))


class WritebackIn(Schema):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"dry_run": True},
                {"overwrite": ["memories/engineering/MEMORY.md"], "allow_findings": []},
            ]
        }
    )

    dry_run: bool = False
    overwrite: list[str] = Field(default_factory=list, description="conflicting paths to replace")
    allow_findings: list[str] = Field(default_factory=list, description="lint finding ids")


class WritebackOut(Schema):
    dry_run: bool
    written: list[str]
    would_write: list[str]


@api.post(
    "/workspaces/{name}/layouts/{layout_id}/writeback",
    response={200: WritebackOut, **ERRORS},
    tags=["actions"],
)
def writeback(request: HttpRequest, name: str, layout_id: int, body: WritebackIn):
    """Write the curated files into the layout's directory (admins), as the write-back
    page does; 409 with the reason while conflicts or findings block it."""

    lay = layout(request, name, layout_id, Role.ADMIN)
    try:
        result = write_back(
            lay,
            user=request.user,
            overwrite=body.overwrite,
            allow_findings=body.allow_findings,
            dry_run=body.dry_run,
        )
    except WritebackError as exc:
        raise conflict(str(exc)) from exc
    return {
        "dry_run": body.dry_run,
        "written": [getattr(w, "path", str(w)) for w in result.written],
        "would_write": [f.path for f in result.would_write],
    }


class ExportIn(Schema):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"snapshot_id": "nightly-2026-12-01"},
                {
                    "snapshot_id": "engineering-only",
                    "layouts": ["memories/engineering"],
                    "session_state": True,
                },
            ]
        }
    )

    snapshot_id: str = Field(..., pattern=SNAPSHOT_ID_PATTERN)
    layouts: list[str] = Field(default_factory=list, description="memories dirs; none: all")
    allow_findings: list[str] = Field(default_factory=list)
    session_state: bool = False


class ExportOut(Schema):
    path: str
    sha256: str
    size: int
    members: int
    session_state: str


@api.post("/workspaces/{name}/exports", response={201: ExportOut, **ERRORS}, tags=["actions"])
def export(request: HttpRequest, name: str, body: ExportIn):
    """Export an SDK snapshot into the server's snapshot directory (admins)."""

    ws = workspace(request, name, Role.ADMIN)
    try:
        result = export_to_store(
            ws,
            snapshot_id=body.snapshot_id,
            memories_dirs=body.layouts,
            allow_findings=body.allow_findings,
            session_state=body.session_state,
            user=request.user,
        )
    except ExportError as exc:
        raise conflict(str(exc)) from exc
    info = result.snapshot
    return Status(
        201,
        {
            "path": result.location,
            "sha256": info.sha256,
            "size": info.size,
            "members": info.members,
            "session_state": str(result.session_state or ""),
        },
    )
