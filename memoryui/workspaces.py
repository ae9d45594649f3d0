"""Workspaces created, re-imported and synced from the web.

Every path the web points the importer at must resolve, symbolic links followed, under
``MEMORYUI_WORKSPACE_ROOTS``, or be a snapshot uploaded into the ``uploads`` storage
(``MEMORYUI_UPLOAD_DIR``, or object storage: ``memoryui.object_storage``). Only the
``import_workspace`` command, run by an operator on the server, imports anything else.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django import db
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q, QuerySet
from django.urls import reverse
from django.utils import timezone

from generation.tree import TreeError, human_size, total_exceeded

from . import object_storage, observability, pipeline, snapshot_store
from .importer import default_limits, import_workspace
from .models import (
    AuditEvent,
    ImportJob,
    ImportJobIndex,
    ImportRun,
    Membership,
    MemoryVersion,
    Role,
    Workspace,
)

logger = logging.getLogger(__name__)

# A claimed sync that never finished (its worker died) is due again after this long.
SYNC_LEASE = timedelta(hours=1)
CLI_HINT = "only an operator can import it, on the server, with manage.py import_workspace"


class PathRefused(Exception):
    """A path the web may not import; the message says why, for a person."""


class ImportRefused(Exception):
    """A new workspace that is not created; the message says why."""


# --- paths -------------------------------------------------------------------------


def workspace_roots() -> list[Path]:
    return [Path(root) for root in settings.MEMORYUI_WORKSPACE_ROOTS]


def roots_text() -> str:
    return ", ".join(str(root) for root in workspace_roots()) or "none configured"


def _under_roots(path: Path) -> bool:
    return any(path.is_relative_to(root) for root in workspace_roots())


def _uploaded(path: Path) -> bool:
    return path.parent == Path(settings.MEMORYUI_UPLOAD_DIR).resolve() and path.is_file()


def resolve_source(raw: str, *, directory_only: bool = False) -> Path:
    """The real path of a workspace source that the web may import: a directory (or,
    unless ``directory_only``, a snapshot archive) under ``MEMORYUI_WORKSPACE_ROOTS``,
    or a snapshot uploaded into ``MEMORYUI_UPLOAD_DIR``. A relative path is taken
    under each root in turn. Raises PathRefused."""
    text = raw.strip()
    if not text:
        raise PathRefused("Give the path of a directory under the workspace roots.")
    if object_storage.is_stored(text):
        raise PathRefused(
            f"{text} is an uploaded snapshot kept in object storage, not a path under the "
            f"workspace roots ({roots_text()})."
        )
    if "\x00" in text:
        raise PathRefused("The path contains a NUL character.")
    given = Path(text)
    if ".." in given.parts:
        raise PathRefused(
            f"{text}: '..' is not allowed in a workspace path; give it under one of the "
            f"workspace roots ({roots_text()})."
        )
    if given.is_absolute():
        candidates = [Path(os.path.normpath(given))]
    else:
        candidates = [root / given for root in workspace_roots()]
    for candidate in candidates:
        if not os.path.lexists(candidate):
            continue
        try:
            real = candidate.resolve(strict=True)
        except (OSError, RuntimeError) as exc:  # a dangling link, a loop
            raise PathRefused(f"{text} cannot be resolved ({exc}).") from exc
        if not (_under_roots(real) or (not directory_only and _uploaded(real))):
            if real != candidate:
                raise PathRefused(
                    f"{text} leads through a symbolic link to {real}, outside the workspace "
                    f"roots ({roots_text()}); {CLI_HINT}."
                )
            raise PathRefused(
                f"{text} is outside the workspace roots ({roots_text()}); {CLI_HINT}."
            )
        if directory_only and not real.is_dir():
            raise PathRefused(f"{text} is not a directory.")
        if not (real.is_dir() or real.is_file()):
            raise PathRefused(f"{text} is neither a directory nor a file.")
        return real
    if given.is_absolute() and not _under_roots(candidates[0]):
        raise PathRefused(f"{text} is outside the workspace roots ({roots_text()}); {CLI_HINT}.")
    raise PathRefused(f"{text} does not exist under the workspace roots ({roots_text()}).")


# --- new workspaces from the dashboard ---------------------------------------------


def progress_name(job_id: int) -> str:
    """The job's progress file in the ``uploads`` storage: a worker writes it, web reads."""
    return f"progress/{job_id}.json"


def read_progress(job_id: int) -> dict[str, Any]:
    data = object_storage.read_small(object_storage.UPLOADS, progress_name(job_id))
    try:
        return dict(json.loads(data)) if data else {}
    except ValueError:
        return {}


@dataclass
class _ProgressFile:
    """Live progress of an import job, for its page. A small file rather than a row:
    the import's one transaction hides its writes from the web until it commits."""

    name: str
    every: float = 0.5
    # Nothing is written in the job's first ``quiet`` seconds: a sandbox's merge takes
    # a tenth of a second, under its workspace's lock, and each write (and the delete
    # at the end) is a request to object storage.
    quiet: float = 0.0
    last: float = 0.0
    stage: str = ""
    started: float = field(default_factory=time.monotonic)
    written: bool = False

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.started < self.quiet:
            return
        if stage == self.stage and now - self.last < self.every:
            return
        self.stage, self.last = stage, now
        data = json.dumps({"stage": stage, "files": done}).encode()
        object_storage.write_small(object_storage.UPLOADS, self.name, data)
        self.written = True

    def remove(self, attempts: int = 1) -> None:
        """Delete the file, unless this quiet job wrote none and no earlier attempt
        (a worker that died on it) may have."""
        if self.written or attempts > 1 or not self.quiet:
            object_storage.delete_small(object_storage.UPLOADS, self.name)


# An import whose worker died this many times (the out-of-memory killer, say) is not
# taken over again: it fails, saying so.
MAX_IMPORT_ATTEMPTS = 3


class _TakenOver(Exception):
    """This worker's claim on a job passed to another (it hung past its lease)."""


class ImportAgain(Exception):
    """The job's transaction lost a deadlock (or a serialization check) with another and
    was rolled back whole: the job is queued again, to be sent again at once."""


def run_import_job(job_id: int) -> ImportJob | None:
    """Create the job's workspace and import it, all or nothing: a source that cannot
    be read, an archive that expands past ``MEMORYUI_MAX_IMPORT_BYTES`` or holds nothing
    leaves no workspace, and an uploaded file is deleted. A sandbox's upload to the
    remote snapshot store is merged into its workspace instead (its archive is kept).

    Claimed with a conditional update under a lease the worker renews: a second delivery
    of the task does nothing while the holder is alive, and takes the job over once the
    lease has run out (its worker died). The import and the job's "done" commit in one
    transaction, and only while the claim is still this worker's (``attempts`` is the
    token): a job is imported exactly once, however many workers died on it. The job's
    scratch folder (the archive's local copy) is emptied by whoever takes it over."""
    now = timezone.now()
    lease = pipeline.new_lease(now)
    jobs = ImportJob.objects.filter(pk=job_id)
    claim = {
        "status": ImportJob.Status.RUNNING,
        "lease_until": lease,
        "attempts": F("attempts") + 1,
    }
    claimed = jobs.filter(status=ImportJob.Status.QUEUED).update(**claim, started_at=now)
    if not claimed:  # running, but its worker's lease ran out: it died or hung
        claimed = jobs.filter(_lease_passed(now)).update(**claim, taken_over_at=now)
        if claimed:
            observability.lease_taken_over("import", job=job_id)
    if not claimed:
        return None
    job = ImportJob.objects.select_related("created_by", "workspace").get(pk=job_id)
    mine = ImportJob.objects.filter(
        pk=job_id, status=ImportJob.Status.RUNNING, attempts=job.attempts
    )
    if job.attempts > MAX_IMPORT_ATTEMPTS:
        shutil.rmtree(object_storage.job_folder(job.pk), ignore_errors=True)
        return _fail(
            job,
            f"The import was stopped: its worker died {MAX_IMPORT_ATTEMPTS} times while "
            "importing it (out of memory?); the workers' logs have the details.",
            mine,
        )
    sandbox = job.kind == ImportJob.Kind.SANDBOX
    quiet = settings.MEMORYUI_MERGE_PROGRESS_AFTER_SECONDS if sandbox else 0.0
    progress = _ProgressFile(progress_name(job.pk), quiet=quiet)
    try:
        with pipeline.renewing(mine, "lease_until", lease), transaction.atomic():
            folder = object_storage.job_folder(job.pk)
            if job.kind == ImportJob.Kind.SANDBOX:
                workspace, run = job.workspace, snapshot_store.import_upload(job, progress, folder)
            else:
                workspace, run = _create_and_import(job, progress, folder)
            done = mine.update(
                status=ImportJob.Status.DONE,
                workspace=workspace,
                run=run,
                finished_at=timezone.now(),
                lease_until=None,
            )
            if not done:
                raise _TakenOver
    except _TakenOver:
        logger.warning("import job %s was taken over by another worker; its work is undone", job_id)
        return None
    except (ImportRefused, PathRefused, TreeError) as exc:
        return _fail(job, str(exc), mine)
    except db.OperationalError as exc:
        if not snapshot_store.transient(exc):
            _fail(job, "The import failed unexpectedly; the worker's log has the details.", mine)
            raise
        # Given back, not counted as a death of its worker.
        mine.update(status=ImportJob.Status.QUEUED, lease_until=None, attempts=F("attempts") - 1)
        logger.warning("import job %s lost a deadlock and is queued again: %s", job_id, exc)
        raise ImportAgain(job_id) from exc
    except Exception:
        _fail(job, "The import failed unexpectedly; the worker's log has the details.", mine)
        raise
    finally:
        progress.remove(job.attempts)
    job.refresh_from_db()
    return job


def imports_pending(workspace_id: int) -> bool:
    """Whether an import job of the workspace is queued or running."""
    return ImportJob.objects.filter(
        workspace_id=workspace_id,
        status__in=[ImportJob.Status.QUEUED, ImportJob.Status.RUNNING],
    ).exists()


def newest_upload_queued_after(job_id: int) -> int | None:
    """The newest upload of the same sandbox queued after ``job_id`` (a sandbox's
    upload, itself still queued), if any. Its merge brings the sandbox's latest files;
    merged first, it leaves ``job_id``'s merge only the files the workspace lacks (see
    ``snapshot_store.import_upload``)."""
    job = (
        ImportJob.objects.filter(
            pk=job_id, kind=ImportJob.Kind.SANDBOX, status=ImportJob.Status.QUEUED
        )
        .values_list("workspace_id", "original_name")
        .first()
    )
    if job is None:
        return None
    return (
        ImportJob.objects.later_uploads(job[0], job[1], job_id)
        .filter(status=ImportJob.Status.QUEUED)
        .order_by("-pk")
        .values_list("pk", flat=True)
        .first()
    )


def _lease_passed(now: datetime) -> Q:
    """Running jobs whose worker's lease has run out (or that a version without leases
    started longer than a lease ago)."""
    stale = now - timedelta(seconds=settings.MEMORYUI_JOB_LEASE_SECONDS)
    return Q(status=ImportJob.Status.RUNNING) & (
        Q(lease_until__lt=now) | Q(lease_until__isnull=True, started_at__lt=stale)
    )


def take_stalled_imports(now: datetime | None = None) -> list[int]:
    """Import jobs whose task message was lost (a worker that died holding it, a broker
    that lost it), marked sent again: queued a lease ago and not taken, or running under
    a lease that has run out. Sent at most once a lease; a copy of a message that was not
    lost does nothing (the job is claimed before it runs)."""
    now = now or timezone.now()
    stale = now - timedelta(seconds=settings.MEMORYUI_JOB_LEASE_SECONDS)
    not_sent_lately = Q(dispatched_at__lt=stale) | Q(
        dispatched_at__isnull=True, created_at__lt=stale
    )
    with transaction.atomic():
        ids = list(
            ImportJob.objects.filter(not_sent_lately)
            .filter(Q(status=ImportJob.Status.QUEUED) | _lease_passed(now))
            .values_list("pk", flat=True)
        )
        ImportJob.objects.filter(pk__in=ids).update(dispatched_at=now)
    return ids


def held_import_jobs(now: datetime | None = None) -> set[int]:
    """Jobs a live worker holds (running under a lease that has not run out)."""
    return set(
        ImportJob.objects.filter(
            status=ImportJob.Status.RUNNING, lease_until__gte=now or timezone.now()
        ).values_list("pk", flat=True)
    )


def sweep_scratch(**_: Any) -> None:
    """When a worker starts: remove the scratch folders dead processes left (the local
    copies of the archives they imported). Logged, never raised."""
    try:
        removed = object_storage.sweep_scratch(held_import_jobs())
        if removed:
            logger.warning("removed scratch folders left by dead processes: %s", ", ".join(removed))
    except Exception:
        logger.exception("sweeping the scratch folders failed")
    finally:
        db.connections.close_all()


def _create_and_import(
    job: ImportJob, progress: _ProgressFile, folder: Path
) -> tuple[Workspace, ImportRun]:
    if job.kind == ImportJob.Kind.DIRECTORY:
        source = resolve_source(job.source_path, directory_only=True)  # again: it may have moved
        kind = Workspace.SourceKind.DIRECTORY
    else:
        # An upload in object storage is read from a local copy in the job's folder.
        with object_storage.local_copy(job.source_path, folder) as copy:
            return _create_and_import_from(
                job, progress, copy, Workspace.SourceKind.SNAPSHOT, job.source_path
            )
    return _create_and_import_from(job, progress, source, kind, str(source))


def _create_and_import_from(
    job: ImportJob, progress: _ProgressFile, source: Path, kind: str, recorded: str
) -> tuple[Workspace, ImportRun]:
    """Import ``source`` as the job's new workspace, whose source is ``recorded``."""
    label = job.original_name or str(source)
    user = job.created_by
    try:
        with transaction.atomic():
            if Workspace.objects.filter(name=job.name).exists():
                raise ImportRefused(f"A workspace called {job.name} already exists.")
            Workspace.objects.create(name=job.name, source_kind=kind, source_path=recorded)
            limits = default_limits()
            result = import_workspace(source, job.name, limits=limits, progress=progress, user=user)
            if recorded != str(source):  # the importer records the copy it read
                result.workspace.source_path = recorded
                result.workspace.save(update_fields=["source_path"])
            if result.stopped == total_exceeded(limits):
                raise ImportRefused(
                    f"{label} expands past {human_size(limits.max_total_bytes)} when unpacked "
                    "(MEMORYUI_MAX_IMPORT_BYTES); nothing was imported."
                )
            if result.stopped:
                raise ImportRefused(
                    f"{label} could not be read whole ({result.stopped}); nothing was imported."
                )
            if not result.imported_anything:
                raise ImportRefused(f"{label} holds nothing to import.")
            if user is not None and not user.is_staff:
                Membership.objects.update_or_create(
                    workspace=result.workspace, user=user, defaults={"role": Role.ADMIN}
                )
            AuditEvent.record(
                result.workspace,
                "workspace.create",
                user=user,
                target=recorded,
                kind=job.kind,
                original_name=job.original_name,
            )
    except IntegrityError as exc:  # created by someone else meanwhile
        raise ImportRefused(f"A workspace called {job.name} already exists.") from exc
    except TreeError as exc:
        message = str(exc).replace(str(source), label)
        raise ImportRefused(f"{message} Nothing was imported.") from exc
    return result.workspace, result.run


def _fail(job: ImportJob, error: str, mine: QuerySet[ImportJob]) -> ImportJob | None:
    """Fail the job while it is still this worker's; None when another took it over."""
    failed = mine.update(
        status=ImportJob.Status.FAILED, error=error, finished_at=timezone.now(), lease_until=None
    )
    if not failed:
        return None
    ImportJobIndex.objects.filter(job=job).delete()  # a sandbox upload's: never read now
    if job.kind == ImportJob.Kind.UPLOAD and job.source_path:
        object_storage.delete(job.source_path)
    job.refresh_from_db()
    return job


# --- re-imports and scheduled sync ---------------------------------------------------


def _failed_run(workspace: Workspace, error: str, user: Any, scheduled: bool) -> ImportRun:
    return ImportRun.objects.create(
        workspace=workspace,
        status=ImportRun.Status.FAILED,
        finished_at=timezone.now(),
        report={"layouts": [], "errors": [{"path": ".", "error": error}]},
        triggered_by=user if getattr(user, "pk", None) else None,
        scheduled=scheduled,
    )


def check_reimportable(workspace: Workspace) -> None:
    """PathRefused unless the workspace's recorded source may be imported again: a path
    ``resolve_source`` accepts, or an upload kept in object storage."""
    if not object_storage.is_stored(workspace.source_path):
        resolve_source(workspace.source_path)


def reimport(workspace: Workspace, user: Any = None, *, scheduled: bool = False) -> ImportRun:
    """Re-import a workspace from its recorded source, if the web may import it; an
    upload kept in object storage is read from a local copy of this worker's own.
    Refusals and unreadable sources are recorded as a failed import, not raised."""
    recorded = workspace.source_path
    try:
        if object_storage.is_stored(recorded):
            return _reimport_stored(workspace, recorded, user, scheduled)
        source = resolve_source(recorded)
        return import_workspace(source, workspace.name, user=user, scheduled=scheduled).run
    except (PathRefused, TreeError) as exc:
        return _failed_run(workspace, str(exc), user, scheduled)
    except FileNotFoundError:
        error = f"{recorded} is no longer in object storage; upload the snapshot again."
        return _failed_run(workspace, error, user, scheduled)


def _reimport_stored(workspace: Workspace, recorded: str, user: Any, scheduled: bool) -> ImportRun:
    with object_storage.local_copy(recorded) as copy, transaction.atomic():
        run = import_workspace(copy, workspace.name, user=user, scheduled=scheduled).run
        # The importer records the copy it read; the source stays the stored upload.
        Workspace.objects.filter(pk=workspace.pk).update(source_path=recorded)
    workspace.source_path = recorded
    return run


def next_sync(workspace: Workspace, now: datetime) -> datetime | None:
    if not workspace.sync_interval_minutes:
        return None
    return (workspace.last_imported_at or now) + timedelta(minutes=workspace.sync_interval_minutes)


def set_sync_interval(workspace: Workspace, minutes: int, user: Any) -> None:
    """Turn the scheduled sync on (every ``minutes``) or off (0). Refused, with
    PathRefused, for a source the web may not import."""
    if minutes:
        resolve_source(workspace.source_path)
    workspace.sync_interval_minutes = minutes
    workspace.next_sync_at = next_sync(workspace, timezone.now())
    workspace.save(update_fields=["sync_interval_minutes", "next_sync_at"])
    AuditEvent.record(workspace, "workspace.sync", user=user, minutes=minutes)


def claim_sync(workspace_id: int, due_at: datetime, now: datetime) -> bool:
    """Take one due workspace for a sync by moving its due time past the lease, if it
    still holds the time this beat read: zero rows means another beat took it."""
    return bool(
        Workspace.objects.filter(
            pk=workspace_id, next_sync_at=due_at, sync_interval_minutes__gt=0
        ).update(next_sync_at=now + SYNC_LEASE)
    )


def claim_due_syncs(now: datetime | None = None) -> list[int]:
    now = now or timezone.now()
    due = Workspace.objects.filter(sync_interval_minutes__gt=0, next_sync_at__lte=now)
    return [
        pk
        for pk, due_at in due.values_list("pk", "next_sync_at")
        if due_at is not None and claim_sync(pk, due_at, now)
    ]


def sync_workspace(workspace_id: int) -> ImportRun | None:
    """One scheduled re-import of a claimed workspace; the next is due an interval after
    it ends, whatever its outcome."""
    workspace = Workspace.objects.filter(pk=workspace_id).first()
    if workspace is None:
        return None
    try:
        return reimport(workspace, scheduled=True)
    finally:
        # From the end of this one, failed or not: a broken source is not retried every
        # minute. The interval may have changed meanwhile.
        minutes = Workspace.objects.values_list("sync_interval_minutes", flat=True).get(
            pk=workspace_id
        )
        Workspace.objects.filter(pk=workspace_id).update(
            next_sync_at=timezone.now() + timedelta(minutes=minutes) if minutes else None
        )


def sync_status(workspace: Workspace) -> dict[str, Any]:
    """What the workspace page says about the scheduled sync."""
    last = workspace.imports.filter(scheduled=True).defer("report").first()
    new_versions = (
        ImportRun.objects.filter(pk=last.pk).values_list("report__new_versions", flat=True).first()
        if last
        else None
    )
    try:
        resolve_source(workspace.source_path)
        refused = ""
    except PathRefused as exc:
        refused = str(exc)
    return {
        "last_sync": last,
        "last_sync_new_versions": _version_links(workspace, new_versions or []),
        "sync_refused": refused,
        "now": timezone.now(),
    }


def _version_links(workspace: Workspace, paths: list[str]) -> list[dict[str, str]]:
    """Each new agent version with the link to its document's history, to review it."""
    documents = {
        "MEMORY.md": MemoryVersion.Document.MEMORY_MD,
        "memory_summary.md": MemoryVersion.Document.MEMORY_SUMMARY,
    }
    layouts = dict(workspace.layouts.values_list("memories_dir", "pk"))
    links = []
    for path in paths:
        memories_dir, _, filename = path.rpartition("/")
        layout_pk, document = layouts.get(memories_dir), documents.get(filename)
        url = (
            reverse("memoryui:versions", args=[workspace.name, layout_pk, document])
            if layout_pk and document
            else ""
        )
        links.append({"path": path, "url": url})
    return links
