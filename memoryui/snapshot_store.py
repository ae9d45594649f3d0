"""memoryui as the SDK's remote snapshot store: one workspace, many sandboxes.

A sandbox session's ``RemoteSnapshotSpec`` client uploads its workspace archive under
its snapshot id: it is received in chunks (never whole in memory), held to a size
limit, checked member by member with the importer's own archive reader
(``generation.tree.read_archive``) and refused whole if anything in it is unsafe, then
kept durably as ``<workspace>/<id>.tar`` in the ``snapshots`` storage (a local folder,
or object storage: ``memoryui.object_storage``); a Celery task merges it into the
workspace (new rollouts, raw memories and rollout summaries join the layouts; nothing
is marked gone; memory changes are agent versions to review).

A download of an id is that sandbox's own files, exactly as it last uploaded them,
with each layout's memories folder as the workspace serves it: never another
sandbox's files (``memoryui.snapshot_restores``).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import OperationalError, transaction
from django.utils import timezone

from generation import export, tree
from generation.export import ExportError

from . import object_storage, pipeline, task_queue
from .importer import ImportResult, default_limits, import_workspace, valid_workspace_name
from .models import (
    GenerationRun,
    ImportJob,
    ImportJobIndex,
    ImportRun,
    SnapshotStorePolicy,
    UploadedSnapshot,
    UploadedSnapshotIndex,
    Workspace,
)
from .served_memory import served_layouts
from .snapshot_restores import unpack_index, upload_index

# An upload's merge that is still to run, or running: its archive is still read.
ACTIVE = (ImportJob.Status.QUEUED, ImportJob.Status.RUNNING)

log = logging.getLogger(__name__)

CHUNK = 1024 * 1024
MAX_PROBLEMS_SHOWN = 5


class UploadRefused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Upload:
    snapshot: UploadedSnapshot
    job: ImportJob


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
    it, keep it durably as ``<store>/<name>/<snapshot_id>/<upload>.tar`` (each upload
    under a name of its own: it becomes what that id restores, and its merge reads it
    even when the sandbox has persisted again before the merge ran) and queue its
    import into the workspace ``name`` (created when new) as a Celery task; returns
    once the archive is on disk. An upload's archive is deleted once it is merged and
    a later upload of the same id has replaced it.

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
    folder = store_dir() / name  # a local folder either way: where the upload is checked
    folder.mkdir(parents=True, exist_ok=True)
    upload = uuid.uuid4().hex
    part = folder / f".{snapshot_id}.{upload}.part"
    try:
        digest, size = _save(read, part, limit)
        index = _check_archive(part)
        target = object_storage.put_file(
            object_storage.SNAPSHOTS, f"{name}/{snapshot_id}/{upload}.tar", part
        )
    finally:
        part.unlink(missing_ok=True)
    for attempt in range(3):
        try:
            return _queue_import(name, snapshot_id, target, size, digest, user, index)
        except OperationalError as exc:
            if not transient(exc) or attempt == 2:
                raise
            log.warning("upload.retry snapshot_id=%s after %s", snapshot_id, exc)
    raise AssertionError("unreachable")


def transient(exc: Exception) -> bool:
    """PostgreSQL rolled the transaction back to break a deadlock or a serialization
    conflict (a merge and an upload of one sandbox at once): running it again is safe,
    and usually succeeds."""
    cause = getattr(exc, "__cause__", None)
    return getattr(cause, "sqlstate", None) in ("40P01", "40001")


def _queue_import(
    name: str,
    snapshot_id: str,
    target: str,
    size: int,
    digest: str,
    user: Any,
    index: tree.ArchiveIndex,
) -> Upload:
    person = user if getattr(user, "pk", None) else None
    with transaction.atomic():
        workspace, _ = Workspace.objects.get_or_create(
            name=name,
            defaults={
                "source_kind": Workspace.SourceKind.SNAPSHOT,
                "source_path": target.rpartition("/")[0],
            },
        )
        job = ImportJob.objects.create(
            name=name,
            kind=ImportJob.Kind.SANDBOX,
            source_path=target,
            original_name=snapshot_id,
            size=size,
            workspace=workspace,
            created_by=person,
        )
        previous = (
            UploadedSnapshot.objects.select_for_update()
            .filter(workspace=workspace, snapshot_id=snapshot_id)
            .values_list("path", "import_job_id")
            .first()
        )
        replaced = None  # the replaced archive, and the status of the merge that reads it
        if previous is not None:
            status = ImportJob.objects.filter(pk=previous[1]).values_list("status", flat=True)
            replaced = (previous[0], status.first())
        snapshot, _ = UploadedSnapshot.objects.update_or_create(
            workspace=workspace,
            snapshot_id=snapshot_id,
            defaults={
                "size": size,
                "sha256": digest,
                "path": target,
                "uploaded_at": timezone.now(),
                "uploaded_by": person,
                "import_run": None,
                "import_job": job,
            },
        )
        packed = _keep_index(snapshot, digest, index)
        if packed is not None:
            ImportJobIndex.objects.create(job=job, members=packed)
        transaction.on_commit(functools.partial(_send_import, job.pk))
    if replaced is not None and replaced[1] not in ACTIVE and replaced[0] != target:
        # Merged (or never to be): nothing reads the replaced archive any more but a
        # restore already under way, which has it open or copied.
        object_storage.delete(replaced[0])
    return Upload(snapshot, job)


def _send_import(job_id: int) -> None:
    """Send the merge's task. The archive and its job are stored by now, so a broker
    that cannot be reached (restarting, say) does not fail the upload: the job stays
    queued, and beat's recovery sends it again once its lease has run out."""
    try:
        task_queue.send("memoryui.tasks.import_new_workspace", job_id)
    except Exception as exc:  # noqa: BLE001 (kombu's, redis-py's or a socket's: the job is stored)
        log.warning("upload.queue_failed job=%s error=%r: beat sends it again", job_id, exc)


def import_upload(
    job: ImportJob, progress: Callable[[str, int, int], None], folder: Path | None = None
) -> ImportRun:
    """The import a sandbox's upload queued (``run_import_job`` calls it in a worker, in
    the transaction that marks the job done, with the job's scratch ``folder``): merged
    into its workspace, then the workspace's generate-on-upload policy.

    An upload whose sandbox's later upload was merged first (a backlog is merged newest
    first) only fills in what the workspace lacks: with its member index, its archive
    is not copied from storage; the few members read are read by ranged requests."""
    index = _job_index(job)
    if job.workspace_id is not None and index is not None and _later_merged(job):
        upload = functools.partial(object_storage.open_ranged, job.source_path)
        result = _merge(job, progress, Path(job.source_path), index, upload)
    else:
        with object_storage.local_copy(job.source_path, folder) as archive:
            result = _merge(job, progress, archive, index)
    UploadedSnapshot.objects.filter(import_job=job).update(import_run=result.run)
    ImportJobIndex.objects.filter(job=job).delete()  # merged: no one reads it again
    if SnapshotStorePolicy.objects.filter(
        workspace=result.workspace, generate_on_upload=True
    ).exists():
        _generate(result, job.created_by)
    return result.run


def _later_merged(job: ImportJob) -> bool:
    """Whether a later upload of the job's sandbox was merged already (final: a done
    job stays done)."""
    assert job.workspace_id is not None
    return (
        ImportJob.objects.later_uploads(job.workspace_id, job.original_name, job.pk)
        .filter(status=ImportJob.Status.DONE)
        .exists()
    )


def _merge(
    job: ImportJob,
    progress: Callable[[str, int, int], None],
    archive: Path,
    index: list[tuple[Any, ...]] | None,
    open_upload: Callable[[], Any] | None = None,
) -> ImportResult:
    with transaction.atomic():
        # The workspace's row first: merges of one workspace go one at a time, and
        # whether a later upload of this sandbox was merged already is settled under it.
        later_merged = False
        if job.workspace_id is not None:
            Workspace.objects.select_for_update(no_key=True).filter(pk=job.workspace_id).first()
            later_merged = open_upload is not None or _later_merged(job)
        result = import_workspace(
            archive,
            job.name,
            user=job.created_by,
            progress=progress,
            merge=job.original_name,
            fill_only=later_merged,
            index=index,
            index_only=open_upload is not None,
            open_upload=open_upload,
        )
        # Replaced by a later upload: no restore reads it. Read without a lock (a lock
        # here took part in deadlocks with the same sandbox's uploads and restores): an upload that
        # lands between this read and the commit sees this job running and keeps the
        # archive, which then stays until the workspace's uploads are removed.
        current = (
            UploadedSnapshot.objects.filter(
                workspace=result.workspace, snapshot_id=job.original_name
            )
            .values_list("path", flat=True)
            .first()
        )
        if current != job.source_path:
            transaction.on_commit(lambda: object_storage.delete(job.source_path))
    return result


def _generate(result: ImportResult, user: Any) -> list[GenerationRun]:
    """The workspace's policy: a generation run for every present layout (phase one
    reuses its results for rollouts it has seen, so only new ones cost model calls)."""
    runs: list[GenerationRun] = []
    for layout in result.workspace.layouts.present().order_by("memories_dir"):
        try:
            run = pipeline.start_run(layout, user)
        except pipeline.GenerationUnavailable:
            return runs
        except pipeline.RunConflict:
            continue
        task_queue.send_on_commit("memoryui.tasks.start_generation", run.pk)
        runs.append(run)
    return runs


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
        fh.flush()
        os.fsync(fh.fileno())
    if size == 0:
        raise UploadRefused(400, "the upload is empty; send the workspace's tar archive")
    return digest.hexdigest(), size


def _check_archive(path: Path) -> tree.ArchiveIndex:
    """Read every member as the importer will; refuse the archive whole if any member
    is unsafe or unreadable (absolute paths, ``..``, hard links, symbolic links out of
    the workspace, devices, a size past the import limits, a damaged archive). Returns
    where each member sits, for the downloads (``UploadedSnapshotIndex``)."""
    problems = []
    too_big = False
    index = tree.ArchiveIndex()
    try:
        for item in tree.read_archive(path, default_limits(), links=True, index=index):
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
    return index


def _keep_index(snapshot: UploadedSnapshot, digest: str, index: tree.ArchiveIndex) -> bytes | None:
    """Keep the upload's member index, replacing the index of the id's previous upload
    (an upload without one has its downloads parse it). Returns it packed, or None."""
    # A global PAX header applies to every member after it: copied alone, a member's
    # blocks would lose it, so such an upload (like a compressed one) is parsed.
    packed = tree.pack_index(index) if index.plain and index.verbatim else None
    if packed is None:
        UploadedSnapshotIndex.objects.filter(snapshot=snapshot).delete()
        return None
    UploadedSnapshotIndex.objects.update_or_create(
        snapshot=snapshot, defaults={"sha256": digest, "members": packed}
    )
    return packed


def _job_index(job: ImportJob) -> list[tuple[Any, ...]] | None:
    """The member index made when this job's upload came in: the merge then reads the
    members by their offsets instead of parsing the archive again. Kept with the job
    until it is done (a newer upload of its sandbox replaces the upload's own index
    meanwhile); a job queued before jobs kept one reads its upload's, while that is
    still its sandbox's latest."""
    if job.workspace_id is None:
        return None
    own = ImportJobIndex.objects.filter(job=job).values_list("members", flat=True).first()
    if own is not None:
        return unpack_index(own, f"import job {job.pk}")
    snapshot = UploadedSnapshot.objects.filter(
        workspace_id=job.workspace_id, snapshot_id=job.original_name, path=job.source_path
    ).first()
    return upload_index(snapshot) if snapshot is not None else None


SANDBOXES_SHOWN = 10
NO_SOURCE = (
    "sandboxes upload this workspace to the remote snapshot store; each upload is "
    "imported as it arrives, and there is no source folder to re-import"
)


def has_uploads(workspace: Workspace) -> bool:
    return UploadedSnapshot.objects.filter(workspace=workspace).exists()


def store_status(workspace: Workspace) -> dict[str, Any]:
    """The remote snapshot store on the workspace page: its policy, the latest uploads
    with their import, and the memory held back from sandboxes (and why)."""
    uploads = list(
        UploadedSnapshot.objects.filter(workspace=workspace)
        .select_related("import_job", "import_run")
        .order_by("-uploaded_at", "-pk")[:SANDBOXES_SHOWN]
    )
    if not uploads:
        return {"store_uploads": []}
    policy = SnapshotStorePolicy.objects.filter(workspace=workspace).first()
    held = [h for served in served_layouts(workspace) for h in served.held]
    return {
        "store_uploads": uploads,
        "store_upload_count": UploadedSnapshot.objects.filter(workspace=workspace).count(),
        "store_serves_unreviewed": bool(policy and policy.serve_unreviewed),
        "store_held": held,
    }
