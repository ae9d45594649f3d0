"""The remote snapshot store's endpoints: what ``memoryui_client.SnapshotClient`` calls
for the SDK's ``RemoteSnapshotSpec`` (upload, download, exists)."""

from django.http import FileResponse, Http404, HttpRequest
from django.urls import reverse
from ninja import Path, Schema, Status
from ninja.errors import HttpError

from generation.export import ExportError

from .. import object_storage, observability, snapshot_restores, snapshot_store, tokens
from ..models import Role, Workspace
from ..snapshots import stored_export
from .core import ERRORS, SNAPSHOT_ID_PATTERN, Detail, api, conflict, workspace

SHA256_HEADER = "X-Memoryui-Sha256"
# What a download's 200 is, for the OpenAPI schema: a tar archive, and the two headers a
# client checks it against before it replaces anything (memoryui_client does).
TAR_DOWNLOAD = {
    "responses": {
        200: {
            "description": "The snapshot archive (an SDK LocalSnapshot tar).",
            "content": {"application/x-tar": {"schema": {"type": "string", "format": "binary"}}},
            "headers": {
                "Content-Length": {
                    "description": "The archive's size in bytes.",
                    "schema": {"type": "integer"},
                },
                SHA256_HEADER: {
                    "description": "The archive's SHA-256, hex: verify before restoring.",
                    "schema": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                },
            },
        }
    }
}


class SnapshotIn(Schema):
    name: str
    snapshot_id: str = Path(..., pattern=SNAPSHOT_ID_PATTERN)


class UploadOut(Schema):
    workspace: str
    snapshot_id: str
    size: int
    sha256: str
    import_status: str
    import_job: int
    progress_url: str


class ExistsOut(Schema):
    exists: bool


@api.put(
    "/workspaces/{name}/snapshots/{snapshot_id}",
    response={202: UploadOut, 400: Detail, 413: Detail, **ERRORS},
    tags=["snapshot store"],
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/x-tar": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
def upload(request: HttpRequest, params: Path[SnapshotIn]):
    """Upload a sandbox's workspace archive (the SDK's ``persist``) under its snapshot
    id, sent with a ``Content-Length`` (admins; a staff member's token may create a
    workspace it names). Answers 202 once the archive is stored durably and checked;
    it is then merged into the workspace by a Celery task, whose progress
    ``progress_url`` shows (the import job's page). 413 past the size limit; 400 for an
    unsafe archive, with nothing stored."""
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
    return Status(
        202,
        {
            "workspace": name,
            "snapshot_id": done.snapshot.snapshot_id,
            "size": done.snapshot.size,
            "sha256": done.snapshot.sha256,
            "import_status": done.job.status,
            "import_job": done.job.pk,
            "progress_url": reverse("memoryui:import_progress", args=[done.job.pk]),
        },
    )


@api.get(
    "/workspaces/{name}/snapshots/{snapshot_id}",
    response={200: None, **ERRORS},
    tags=["snapshot store"],
    openapi_extra=TAR_DOWNLOAD,
)
def download(request: HttpRequest, params: Path[SnapshotIn]):
    """The sandbox's snapshot (the SDK's ``restore``; admins, as an export): the files
    of that id's last upload outside the memory layouts, byte for byte, and each
    layout's memories folder as the workspace serves it (the latest approved versions
    that pass lint). An id never uploaded gets the served memory alone, for a fresh
    sandbox. ``Content-Length`` and ``X-Memoryui-Sha256`` (hex) let the client verify
    the body."""
    ws = workspace(request, params.name, Role.ADMIN)
    try:
        archive = snapshot_restores.sandbox_archive(ws, params.snapshot_id, user=request.user)
    except ExportError as exc:
        raise conflict(str(exc)) from exc
    response = FileResponse(
        archive.fileobj, filename=f"{params.snapshot_id}.tar", content_type="application/x-tar"
    )
    # What memoryui_client verifies before the SDK may empty the workspace to restore:
    # the archive's hash as it was written (the writer hashes every byte it writes).
    response["Content-Length"] = str(archive.size)
    response[SHA256_HEADER] = archive.sha256
    return response


@api.get(
    "/workspaces/{name}/snapshots/{snapshot_id}/exists",
    response={200: ExistsOut, **ERRORS},
    tags=["snapshot store"],
)
def exists(request: HttpRequest, params: Path[SnapshotIn]):
    """Whether the snapshot id was uploaded (the SDK's ``restorable``). A workspace not
    created yet has none."""
    if not Workspace.objects.filter(name=params.name).exists() and tokens.in_scope(
        getattr(request, "api_token", None), params.name
    ):
        return {"exists": False}
    ws = workspace(request, params.name, Role.VIEWER)
    return {"exists": snapshot_restores.uploaded(ws, params.snapshot_id) is not None}


@api.get(
    "/workspaces/{name}/exports/{snapshot_id}",
    response={200: None, **ERRORS},
    tags=["snapshot store"],
    openapi_extra=TAR_DOWNLOAD,
)
def export_download(request: HttpRequest, params: Path[SnapshotIn]):
    """A snapshot this workspace exported on the server (admins), streamed from where
    exports are kept (the snapshot directory or object storage), so any web process can
    serve it. ``Content-Length`` and ``X-Memoryui-Sha256`` (hex, from the export's audit
    event) let the client verify the body."""
    ws = workspace(request, params.name, Role.ADMIN)
    found = stored_export(ws, params.snapshot_id)
    if found is None:
        raise Http404("This workspace exported no such snapshot (or it was removed).")
    where, event = found
    stream, size = object_storage.open_stored(where)
    response = FileResponse(
        stream, filename=f"{params.snapshot_id}.tar", content_type="application/x-tar"
    )
    response["Content-Length"] = str(size)
    response[SHA256_HEADER] = str(event.detail.get("sha256", ""))
    return response
