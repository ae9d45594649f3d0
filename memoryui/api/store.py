"""The remote snapshot store's endpoints: what ``memoryui_client.SnapshotClient`` calls
for the SDK's ``RemoteSnapshotSpec`` (upload, download, exists)."""

from django.http import FileResponse, Http404, HttpRequest
from ninja import Path, Schema, Status
from ninja.errors import HttpError

from generation.export import ExportError

from .. import observability, snapshot_store, tokens
from ..models import Role, Workspace
from .core import api, conflict, workspace
from .endpoints import ERRORS, SNAPSHOT_ID_PATTERN, Detail


class SnapshotIn(Schema):
    name: str
    snapshot_id: str = Path(..., pattern=SNAPSHOT_ID_PATTERN)


class UploadOut(Schema):
    workspace: str
    snapshot_id: str
    size: int
    sha256: str
    import_status: str
    layouts: list[dict]
    errors: list[dict]
    runs: list[int]
    not_generated: str


class ExistsOut(Schema):
    exists: bool


@api.put(
    "/workspaces/{name}/snapshots/{snapshot_id}",
    response={201: UploadOut, 400: Detail, 413: Detail, **ERRORS},
    tags=["snapshot store"],
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/x-tar": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
def upload(request: HttpRequest, params: Path[SnapshotIn]):  # type: ignore[no-untyped-def]
    """Upload a sandbox workspace archive (the SDK's ``persist``), sent with a
    ``Content-Length``. It is imported as a sync of the workspace (admins, as a
    re-import; a staff member's token may create a workspace it names). 413 past the
    size limit; 400 for an unsafe archive, with nothing stored. With the workspace's
    generate-on-upload policy, ``runs`` lists the generation runs it started."""
    name = params.name
    if Workspace.objects.filter(name=name).exists():
        workspace(request, name, Role.ADMIN)
    elif not tokens.in_scope(getattr(request, "api_token", None), name) or not (
        request.user.is_staff or request.user.is_superuser
    ):
        raise Http404("No such workspace (or the token does not name it).")
    length = request.META.get("CONTENT_LENGTH")
    if not length or not str(length).isdigit():
        raise HttpError(411, "send the archive with a Content-Length")
    try:
        with observability.operation(
            "upload", "upload", workspace=name, snapshot_id=params.snapshot_id, bytes=length
        ):
            done = snapshot_store.receive(
                name, params.snapshot_id, request.read, length=int(length), user=request.user
            )
    except snapshot_store.UploadRefused as exc:
        raise HttpError(exc.status, str(exc)) from exc
    result = done.result
    return Status(
        201,
        {
            "workspace": result.workspace.name,
            "snapshot_id": done.snapshot.snapshot_id,
            "size": done.snapshot.size,
            "sha256": done.snapshot.sha256,
            "import_status": done.snapshot.import_run.status if done.snapshot.import_run else "",
            "layouts": [layout.as_dict() for layout in result.layouts],
            "errors": result.errors,
            "runs": [run.pk for run in done.runs],
            "not_generated": done.not_generated,
        },
    )


@api.get(
    "/workspaces/{name}/snapshots/{snapshot_id}",
    response={200: None, **ERRORS},
    tags=["snapshot store"],
)
def download(request: HttpRequest, params: Path[SnapshotIn]):  # type: ignore[no-untyped-def]
    """The curated snapshot (the SDK's ``restore``): the last uploaded workspace with
    the approved memory of every layout applied, exactly what an export makes (admins,
    as an export). 404 for an id never uploaded; 409 when lint findings block it."""
    ws = workspace(request, params.name, Role.ADMIN)
    if snapshot_store.uploaded(ws, params.snapshot_id) is None:
        raise Http404(f"No snapshot {params.snapshot_id} was uploaded to {ws.name}.")
    try:
        archive = snapshot_store.curated_archive(ws, params.snapshot_id, user=request.user)
    except ExportError as exc:
        raise conflict(str(exc)) from exc
    return FileResponse(
        archive, filename=f"{params.snapshot_id}.tar", content_type="application/x-tar"
    )


@api.get(
    "/workspaces/{name}/snapshots/{snapshot_id}/exists",
    response={200: ExistsOut, **ERRORS},
    tags=["snapshot store"],
)
def exists(request: HttpRequest, params: Path[SnapshotIn]):  # type: ignore[no-untyped-def]
    """Whether the snapshot id was uploaded (the SDK's ``restorable``). A workspace not
    created yet has none."""
    if not Workspace.objects.filter(name=params.name).exists() and tokens.in_scope(
        getattr(request, "api_token", None), params.name
    ):
        return {"exists": False}
    ws = workspace(request, params.name, Role.VIEWER)
    return {"exists": snapshot_store.uploaded(ws, params.snapshot_id) is not None}
