"""memoryui as the SDK's remote snapshot store.

A sandbox session's ``RemoteSnapshotSpec`` client uploads its workspace archive here:
it is received in chunks (never whole in memory), held to a size limit, checked member by
member with the importer's own archive reader (``generation.tree.read_archive``) and
refused whole if anything in it is unsafe, then kept as ``<store>/<workspace>/<id>.tar``
and imported as a sync of the workspace. A download is the curated snapshot: the last
uploaded workspace with the approved memory of every layout laid over it, exactly what
``export_snapshot`` makes.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.db import transaction

from generation import export, tree
from generation.export import ExportError

from .importer import ImportResult, default_limits, import_workspace, valid_workspace_name
from .models import GenerationRun, ImportRun, SnapshotStorePolicy, UploadedSnapshot, Workspace
from .snapshots import export_snapshot

CHUNK = 1024 * 1024
MAX_PROBLEMS_SHOWN = 5


class UploadRefused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Upload:
    snapshot: UploadedSnapshot
    result: ImportResult
    runs: list[GenerationRun] = field(default_factory=list)
    not_generated: str = ""  # why the policy's runs did not start


def store_dir() -> Path:
    return Path(settings.MEMORYUI_REMOTE_STORE_DIR)


def max_upload_bytes() -> int:
    return int(settings.MEMORYUI_REMOTE_MAX_UPLOAD_BYTES)


def receive(
    name: str,
    snapshot_id: str,
    read: Callable[[int], bytes],
    *,
    length: int | None,
    user: Any,
) -> Upload:
    """Take an uploaded archive from ``read`` (``length`` bytes, when announced), check
    it, keep it and import it into the workspace ``name`` (created when new).

    Raises UploadRefused (413: too large, 400: not a safe archive) with nothing kept."""
    try:
        export.check_snapshot_id(snapshot_id)
    except ExportError as exc:
        raise UploadRefused(422, str(exc)) from exc
    if not valid_workspace_name(name):
        raise UploadRefused(422, f"{name!r} is not a valid workspace name")
    limit = max_upload_bytes()
    if length is not None and length > limit:
        raise UploadRefused(413, _too_large(limit))
    folder = store_dir() / name
    folder.mkdir(parents=True, exist_ok=True)
    part = folder / f".{snapshot_id}.{uuid.uuid4().hex}.part"
    try:
        digest, size = _save(read, part, limit)
        _check_archive(part)
        target = folder / f"{snapshot_id}.tar"
        os.replace(part, target)
    finally:
        part.unlink(missing_ok=True)
    result = import_workspace(target, name, user=user)
    with transaction.atomic():
        snapshot, _ = UploadedSnapshot.objects.update_or_create(
            workspace=result.workspace,
            snapshot_id=snapshot_id,
            defaults={
                "size": size,
                "sha256": digest,
                "path": str(target),
                "uploaded_by": user if getattr(user, "pk", None) else None,
                "import_run": ImportRun.objects.filter(workspace=result.workspace).first(),
            },
        )
    upload = Upload(snapshot, result)
    if SnapshotStorePolicy.objects.filter(
        workspace=result.workspace, generate_on_upload=True
    ).exists():
        _generate(upload, user)
    return upload


def _generate(upload: Upload, user: Any) -> None:
    """The workspace's policy: a generation run for every present layout (phase one
    reuses its results for rollouts it has seen, so only new ones cost model calls)."""
    from memoryui.tasks import start_generation

    from . import pipeline

    skipped = []
    for layout in upload.result.workspace.layouts.present().order_by("memories_dir"):
        try:
            run = pipeline.start_run(layout, user)
        except pipeline.GenerationUnavailable as exc:
            upload.not_generated = str(exc)
            return
        except pipeline.RunConflict as exc:
            skipped.append(str(exc))
            continue
        start_generation.delay_on_commit(run.pk)
        upload.runs.append(run)
    upload.not_generated = " ".join(skipped)


def _too_large(limit: int) -> str:
    return f"the upload is larger than the store accepts ({tree.human_size(limit)})"


def _save(read: Callable[[int], bytes], path: Path, limit: int) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with path.open("xb") as fh:
        while chunk := read(CHUNK):
            size += len(chunk)
            if size > limit:
                raise UploadRefused(413, _too_large(limit))
            digest.update(chunk)
            fh.write(chunk)
    if size == 0:
        raise UploadRefused(400, "the upload is empty; send the workspace's tar archive")
    return digest.hexdigest(), size


def _check_archive(path: Path) -> None:
    """Read every member as the importer will; refuse the archive whole if any member
    is unsafe or unreadable (absolute paths, ``..``, links, devices, a size past the
    import limits, a damaged archive)."""
    problems = []
    too_big = False
    try:
        for item in tree.read_archive(path, default_limits()):
            if isinstance(item, tree.Problem):
                problems.append(item)
                too_big = too_big or "limit" in item.error or "expands past" in item.error
                if item.stops:
                    break
    except tree.TreeError as exc:
        raise UploadRefused(
            400,
            "archive refused, nothing was stored: the upload is not a tar archive "
            "(plain, gzip, bzip2 or xz)",
        ) from exc
    if problems:
        shown = "; ".join(f"{p.path}: {p.error}" for p in problems[:MAX_PROBLEMS_SHOWN])
        more = len(problems) - MAX_PROBLEMS_SHOWN
        raise UploadRefused(
            413 if too_big else 400,
            f"archive refused, nothing was stored ({len(problems)} unsafe or unreadable "
            f"member{'s' if len(problems) != 1 else ''}): {shown}"
            + (f"; and {more} more" if more > 0 else ""),
        )


def uploaded(workspace: Workspace, snapshot_id: str) -> UploadedSnapshot | None:
    return UploadedSnapshot.objects.filter(workspace=workspace, snapshot_id=snapshot_id).first()


def curated_archive(workspace: Workspace, snapshot_id: str, *, user: Any) -> IO[bytes]:
    """The curated snapshot as a temporary file, rewound (raises ExportError when lint
    findings or file names block the export)."""
    fileobj = tempfile.TemporaryFile()
    try:
        export_snapshot(workspace, snapshot_id=snapshot_id, fileobj=fileobj, user=user)
    except BaseException:
        fileobj.close()
        raise
    fileobj.seek(0)
    return fileobj
