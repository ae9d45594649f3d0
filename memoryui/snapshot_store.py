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
with each layout's memories folder as the workspace serves it
(``memoryui.served_memory``): never another sandbox's files.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import logging
import os
import time
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NamedTuple

from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from generation import archive_map, export, tree
from generation.export import ExportError
from generation.tree import Entry

from . import download_cache, object_storage, pipeline, snapshot_members, task_queue
from .importer import ImportResult, default_limits, import_workspace, valid_workspace_name
from .models import (
    AuditEvent,
    GenerationRun,
    ImportJob,
    ImportJobIndex,
    ImportRun,
    SnapshotStorePolicy,
    UploadedSnapshot,
    UploadedSnapshotIndex,
    Workspace,
    WorkspaceFile,
)
from .served_memory import ServedLayout, keep_own_files, served_layouts
from .snapshot_members import file_rows, made_up_parents
from .snapshots import EXPORT_DOWNLOAD_ACTION
from .writeback import DOCUMENT_FILES

# An upload's merge that is still to run, or running: its archive is still read.
ACTIVE = (ImportJob.Status.QUEUED, ImportJob.Status.RUNNING)

log = logging.getLogger(__name__)

CHUNK = 1024 * 1024
FORGETTABLE = (WorkspaceFile.Kind.RAW_MEMORY, WorkspaceFile.Kind.ROLLOUT_SUMMARY)
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
    return ImportJob.objects.filter(
        workspace=job.workspace,
        kind=ImportJob.Kind.SANDBOX,
        original_name=job.original_name,
        pk__gt=job.pk,
        status=ImportJob.Status.DONE,
    ).exists()


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


def _index_of(snapshot: UploadedSnapshot) -> list[tuple[Any, ...]] | None:
    """The upload's member index (rows laid out as ``tree.IndexedMember``), if it has
    one made of this very upload."""
    row = (
        UploadedSnapshotIndex.objects.filter(snapshot=snapshot, sha256=snapshot.sha256)
        .values_list("members", flat=True)
        .first()
    )
    return _unpacked(row, f"upload {snapshot.pk}")


def _unpacked(packed: bytes | memoryview | None, of: str) -> list[tuple[Any, ...]] | None:
    """A stored member index's rows; None for none, or one in another format or
    damaged (its reader parses the archive instead)."""
    if packed is None:
        return None
    try:
        return tree.unpack_index(bytes(packed))
    except (ValueError, zlib.error) as exc:
        log.warning("the member index of %s is unreadable (%s)", of, exc)
        return None


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
        return _unpacked(own, f"import job {job.pk}")
    snapshot = UploadedSnapshot.objects.filter(
        workspace_id=job.workspace_id, snapshot_id=job.original_name, path=job.source_path
    ).first()
    return _index_of(snapshot) if snapshot is not None else None


def uploaded(workspace: Workspace, snapshot_id: str) -> UploadedSnapshot | None:
    return UploadedSnapshot.objects.filter(workspace=workspace, snapshot_id=snapshot_id).first()


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


def sandbox_archive(
    workspace: Workspace, snapshot_id: str, *, user: Any
) -> download_cache.Download:
    """What ``download(snapshot_id)`` answers: the files of that id's last upload outside
    the memory layouts, byte for byte (modes and in-tree links included), and each
    layout's memories folder as the workspace serves it (``served_memory``). An id never
    uploaded gets the served memory alone: how a fresh sandbox starts from the
    workspace's memory. The upload's members are read by their offsets when it has a
    member index, else (or when the index turns out not to match) by parsing it.

    The served memory is worked out anew every time; the archive is built only when
    what it is made of differs from the one kept for this id (``download_cache``)."""
    snapshot = uploaded(workspace, snapshot_id)
    served = served_layouts(workspace, user=user)
    own = keep_own_files(workspace, snapshot, served)
    memory_dirs = [s.layout.memories_dir for s in served]
    has_index = (
        snapshot is not None
        and UploadedSnapshotIndex.objects.filter(snapshot=snapshot, sha256=snapshot.sha256).exists()
    )
    key, rows = _download_key(workspace, snapshot, has_index, served)

    def write(fileobj: IO[bytes], previous: download_cache.Previous | None) -> download_cache.Built:
        own_key = _own_key(snapshot, has_index, memory_dirs)
        region = previous.map.region if previous is not None else None
        if previous is not None and region is not None and own_key and region.key == own_key:
            fd = previous.fd  # the upload's part as the previous archive holds it

            def copied(seen: set[str]) -> Iterator[export.Member]:
                return _copied_region(fd, region, seen)

            return _write_download(fileobj, workspace, served, copied, own_key, rows, previous)
        with ExitStack() as stack:
            archive = (
                stack.enter_context(object_storage.local_copy(snapshot.path)) if snapshot else None
            )
            index = _index_of(snapshot) if snapshot and has_index else None

            def own(seen: set[str], by_offset: bool = True) -> Iterator[export.Member]:
                if archive is None:
                    return iter(())
                if index is not None and by_offset:
                    return _indexed_members(archive, index, memory_dirs, seen)
                return _own_members(archive, memory_dirs, seen)

            try:
                return _write_download(fileobj, workspace, served, own, own_key, rows, previous)
            except tree.IndexMismatch:
                fileobj.seek(0)
                fileobj.truncate()

                def parsed(seen: set[str]) -> Iterator[export.Member]:
                    return own(seen, by_offset=False)

                return _write_download(fileobj, workspace, served, parsed, own_key, rows, previous)

    download = download_cache.fetch(workspace.pk, snapshot_id, key, write)
    if snapshot is not None:
        # What it was served: each document's version, the raw memories and rollout
        # summaries (its next upload lacking one is the agent's forgetting), and each
        # skill file's digest (its next upload changing or lacking one is the agent's).
        versions = {
            str(s.layout.pk): {
                **s.versions,
                "files": sorted(
                    [r[0] for r in rows.get(s.layout.memories_dir, ()) if r[1] in FORGETTABLE]
                    + [p for p in s.files if p in own]
                ),
                "skills": {
                    path.removeprefix(s.layout.memories_dir + "/"): hashlib.sha256(data).hexdigest()
                    for path, data in s.files.items()
                    if path.startswith(s.layout.memories_dir + "/skills/")
                },
            }
            for s in served
        }
        if snapshot.served != versions:
            UploadedSnapshot.objects.filter(pk=snapshot.pk).update(served=versions)
    AuditEvent.record(
        workspace,
        EXPORT_DOWNLOAD_ACTION,
        user=user,
        target=f"{snapshot_id}.tar (sandbox download)",
        snapshot_id=snapshot_id,
        uploaded=snapshot is not None,
        sha256=download.sha256,
        size=download.size,
        members=download.members,
        built=download.built,
        layouts=memory_dirs,
        held_back=[
            {"path": h.path, "latest": h.latest, "served": h.served, "reason": h.reason}
            for s in served
            for h in s.held
        ],
    )
    return download


# A memory file's row as the key sees it: path, kind, mode, mtime_ns, blob id, size.
FileRow = tuple[str, str, int, int, str | None, int]


def _download_key(
    workspace: Workspace,
    snapshot: UploadedSnapshot | None,
    has_index: bool,
    served: list[ServedLayout],
) -> tuple[str, dict[str, list[FileRow]]]:
    """The digest of everything a download is made of (``download_cache``), and the
    rows of each layout's memory files it was made of."""
    key = download_cache.Key()
    key.text(snapshot.sha256 if snapshot else "", has_index)
    folders = _memory_folders(workspace)
    rows: dict[str, list[FileRow]] = {}
    for layout in served:
        folder = layout.layout.memories_dir
        key.text("layout", folder)
        for path, contents in sorted(layout.files.items()):
            key.data(path, contents)
        key.text("files")
        query = (
            _layout_files(workspace, layout, folders)
            .order_by("path")
            .values_list("path", "kind", "mode", "mtime_ns", "blob_id", "size")
        )
        with connection.cursor() as cursor:  # plain tuples: tens of thousands of them
            cursor.execute(*query.query.sql_with_params())
            rows[folder] = cursor.fetchall()
        key.rows(rows[folder])
    return key.hexdigest(), rows


def _own_key(snapshot: UploadedSnapshot | None, has_index: bool, memory_dirs: list[str]) -> str:
    """What settles the upload's part of a download ("" for none): the upload, how it is
    read, and the memory folders left out of it."""
    if snapshot is None:
        return ""
    parts = [snapshot.sha256, str(has_index), *memory_dirs]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _write_download(
    fileobj: IO[bytes],
    workspace: Workspace,
    served: list[ServedLayout],
    own_members: Callable[[set[str]], Iterator[export.Member]],
    own_key: str,
    rows: dict[str, list[FileRow]],
    previous: download_cache.Previous | None,
) -> download_cache.Built:
    """The archive of the download into ``fileobj``: the upload's part from
    ``own_members`` (which notes each path it yields), settled by ``own_key``, then
    the memory folders."""
    seen: set[str] = set()
    recorded = _Recorded(own_members(seen))
    sources = _memory_sources(workspace, served, rows, previous)
    reuser = sources.reuser
    memory = reuser.members(_memory_members(served, seen, sources.rows, sources.contents))
    info = export.write_snapshot_to(
        fileobj,
        itertools.chain(recorded, memory),
        root_mtime_ns=time.time_ns(),
        placed=reuser.placed,
    )
    mapped = reuser.archive_map()
    if own_key:
        placed = reuser.placed
        mapped.region = archive_map.Region(
            own_key,
            placed[0],
            placed[recorded.items],
            tuple(recorded.paths),
            tuple(recorded.links),
        )
    return download_cache.Built(info, mapped, keep=sources.consistent())


class _Recorded:
    """The upload's members as they pass to the writer, counted, with their paths and
    links: the region of the archive they fill, for the next build to copy whole."""

    def __init__(self, members: Iterator[export.Member]) -> None:
        self.members = members
        self.items = 0
        self.paths: list[str] = []
        self.links: list[tuple[str, str, int, int]] = []

    def __iter__(self) -> Iterator[export.Member]:
        for member in self.members:
            self.items += 1
            if isinstance(member, tree.Blocks | export.Copy):
                self.paths.extend(member.paths)
            elif isinstance(member, export.Symlink):
                self.links.append((member.path, member.target, member.mode, member.mtime_ns))
            elif isinstance(member, Entry):
                self.paths.append(member.path)
            yield member


def _copied_region(fd: int, region: archive_map.Region, seen: set[str]) -> Iterator[export.Member]:
    """The upload's members as the previous archive holds them, copied whole."""
    seen.update(region.paths)
    seen.update(link[0] for link in region.links)
    if region.end > region.start:
        yield export.Copy(fd, region.start, region.end, region.paths)
    for path, target, mode, mtime_ns in region.links:
        yield export.Symlink(path, target, mode, mtime_ns)


class _Sources(NamedTuple):
    """Where each layout's memory files come from (``_memory_sources``)."""

    reuser: archive_map.Reuser
    rows: Mapping[str, Iterable[tuple[Any, ...]]]  # per memories folder, in path order
    contents: dict[str, bytes] | None  # None: each row holds its contents, last
    consistent: Callable[[], bool]


def _memory_sources(
    workspace: Workspace,
    served: list[ServedLayout],
    rows: dict[str, list[FileRow]],
    previous: download_cache.Previous | None,
) -> _Sources:
    """Where each layout's memory files come from: the rows the key was made of, with
    the contents of those that changed since ``previous`` fetched by their blob (the
    rest are copied from it); or, with no previous archive or too much changed, read
    with their contents as an export reads them, and checked against those rows
    (``consistent`` False: the workspace changed meanwhile; the archive is not the
    key's)."""
    if previous is not None:
        every = itertools.chain.from_iterable(rows.values())
        contents = snapshot_members.contents_beside(every, previous.map)
        if contents is not None:
            reuser = archive_map.Reuser(previous.map, previous.fd)
            return _Sources(reuser, rows, contents, lambda: True)
    same = [True]
    folders = _memory_folders(workspace)
    sources = {
        layout.layout.memories_dir: _checked(
            file_rows(_layout_files(workspace, layout, folders)),
            rows[layout.layout.memories_dir],
            same,
        )
        for layout in served
    }
    return _Sources(archive_map.Reuser(), sources, None, lambda: same[0])


def _checked(
    found: Iterator[tuple[Any, ...]], expected: list[FileRow], same: list[bool]
) -> Iterator[tuple[Any, ...]]:
    """``found`` as it comes; ``same[0]`` False unless it is ``expected`` row for row
    (path, kind, mode, mtime_ns, blob id)."""
    expecting = iter(expected)
    for row in found:
        if tuple(row[:5]) != next(expecting, (None,))[:5]:
            same[0] = False
        yield row
    if next(expecting, None) is not None:
        same[0] = False


def _inside(path: str, folders: list[str]) -> bool:
    return any(path == f or path.startswith(f + "/") for f in folders)


def _own_members(path: Path, memory_dirs: list[str], seen: set[str]) -> Iterator[export.Member]:
    """The upload's members outside the memory layouts, as it sent them."""
    for item in tree.read_archive(path, default_limits(), links=True):
        if isinstance(item, tree.Problem) or _inside(item.path, memory_dirs):
            continue  # problems were refused when it was uploaded
        seen.add(item.path)
        if isinstance(item, tree.Link):
            yield export.Symlink(item.path, item.target, item.mode, item.mtime_ns)
        else:
            yield item


def _indexed_members(
    path: Path,
    index: list[tuple[Any, ...]],
    memory_dirs: list[str],
    seen: set[str],
) -> Iterator[export.Member]:
    """``_own_members``, copied as they are (headers included) by the offsets of the
    upload's member index."""
    prefixes = tuple(f + "/" for f in memory_dirs)
    folders = set(memory_dirs)
    rows = [row for row in index if not (row[0].startswith(prefixes) or row[0] in folders)]
    with path.open("rb") as fh:
        for item in tree.copy_indexed(fh, rows):
            if isinstance(item, tree.Blocks):
                seen.update(item.paths)
                yield item
            else:
                seen.add(item.path)
                yield export.Symlink(item.path, item.target, item.mode, item.mtime_ns)


def _memory_folders(workspace: Workspace) -> list[str]:
    return list(workspace.layouts.values_list("memories_dir", flat=True))


def _layout_files(
    workspace: Workspace, layout: ServedLayout, folders: list[str]
) -> QuerySet[WorkspaceFile]:
    """The workspace's files a layout's memories folder serves besides its documents and
    skills: rollout summaries, raw memories from every sandbox, ``raw_memories.md``."""
    folder = layout.layout.memories_dir
    curated = [f"{folder}/{name}" for name in DOCUMENT_FILES.values()]
    files = (
        WorkspaceFile.objects.present()
        .filter(workspace=workspace, path__startswith=f"{folder}/")
        .filter(Q(kind=WorkspaceFile.Kind.DIRECTORY) | Q(blob__isnull=False))
        .exclude(path__startswith=f"{folder}/skills/")
        .exclude(path__in=[*curated, *layout.files])
    )
    # A layout nested in this folder (memories/engineering in memories) serves its
    # own files: its imported MEMORY.md or skills, unreviewed maybe, never come
    # through the outer layout's folder.
    for nested in folders:
        if nested.startswith(f"{folder}/"):
            files = files.exclude(path__startswith=f"{nested}/")
    return files


def _memory_members(
    served: list[ServedLayout],
    seen: set[str],
    sources: Mapping[str, Iterable[tuple[Any, ...]]],
    contents: dict[str, bytes] | None,
) -> Iterator[archive_map.Keyed]:
    """Each layout's memories folder: the workspace's files (rollout summaries, raw
    memories from every sandbox) from ``sources`` (path, kind, mode, mtime_ns, blob id,
    then the contents, or with ``contents`` their size: the contents are there, and a
    file not there is one the previous archive holds), with the served documents and
    skills in place of theirs, as rows with what settles their bytes."""
    now_ns = time.time_ns()
    directory = WorkspaceFile.Kind.DIRECTORY
    for layout in served:
        folder = layout.layout.memories_dir
        yield from _keyed(made_up_parents(folder, seen, now_ns))
        for path, kind, mode, mtime_ns, blob_id, last in sources[folder]:
            if path in seen:
                continue
            parent = path.rpartition("/")[0]
            if parent not in seen:
                yield from _keyed(made_up_parents(parent, seen, now_ns))
            seen.add(path)
            if kind == directory:
                yield (path, None, mode, mtime_ns, "")
                continue
            data = last if contents is None else contents.get(blob_id)
            yield (
                path,
                data if data is None or type(data) is bytes else bytes(data),
                mode,
                mtime_ns,
                blob_id,
            )
        for path, data in sorted(layout.files.items()):
            if path not in seen:
                yield from _keyed(made_up_parents(path.rpartition("/")[0], seen, now_ns))
                seen.add(path)
                yield (path, data, 0o644, now_ns, hashlib.sha256(data).hexdigest())


def _keyed(directories: Iterator[export.Row]) -> Iterator[archive_map.Keyed]:
    for path, _, mode, mtime_ns in directories:
        yield (path, None, mode, mtime_ns, "")
