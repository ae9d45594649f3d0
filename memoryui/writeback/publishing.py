"""Write-back (``write_back``): a layout's changed files into its memories dir, all or
nothing, under its journal; then the database brought to the written bytes
(``record_written``) and the audit event recorded."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from django.db import transaction

from generation import export, journal
from generation.export import ExportError, WrittenFile

from .. import importer, lint_allowances, observability
from ..models import AuditEvent, Layout
from .files import (
    WRITEBACK_ACTION,
    WRITEBACK_FAILED_ACTION,
    Conflict,
    Plan,
    PlannedFile,
    Refused,
    WritebackError,
    WritebackResult,
)
from .journals import journal_directory, record_event, recover_layout
from .linting import lint_kept_when_refused
from .planning import blob_bytes, check_disk, plan_layout, read_disk, workspace_root


class _ChangedOnDisk(Exception):
    def __init__(self, conflict: Conflict) -> None:
        super().__init__(f"{conflict.path} changed on disk during the write-back; not replaced")
        self.conflict = conflict


def _writeback_fields(result: WritebackResult) -> dict[str, Any]:
    return {
        "written": len(result.written),
        "deleted": len(result.deleted),
        "skipped_on_disk": len(result.skipped_on_disk),
        "audit_event": result.event.pk if result.event else None,
    }


class _Run:
    """One write-back's steps for ``journal.publish``: plan and journal (``begin``),
    record and audit (``audit``), remove the journal (``finish``)."""

    def __init__(
        self,
        layout: Layout,
        root: Path,
        directory: Path,
        overwrite: Collection[str],
        allow_findings: Collection[str],
        user: Any,
    ) -> None:
        self.layout, self.root, self.directory = layout, root, directory
        self.overwrite, self.allow_findings, self.user = overwrite, allow_findings, user
        self.step: Callable[[str], None] = _no_step
        self.on_written: Callable[[WrittenFile], None] | None = None
        self.progress: Callable[[str, int, int], None] | None = None
        # Set by begin(): the plan, and the journal of what it writes (None: nothing).
        self.result: WritebackResult
        self.record: journal.Journal | None = None
        self.meta: dict[str, Any] = {}
        self.applying: _Applying | None = None

    def begin(self) -> bool:
        layout, root = self.layout, self.root
        # One write-back per layout at a time (the lock taken by the caller covers this server).
        Layout.objects.select_for_update().filter(pk=layout.pk).first()
        self.result = result = _prepare(
            layout, root, self.overwrite, self.allow_findings, dry_run=False
        )
        plan = result.plan
        if plan.refused or result.blocking_conflicts or result.blocking_findings:
            raise Refused(
                result.blocking_findings,
                refused=plan.refused,
                conflicts=result.blocking_conflicts,
                plan=plan,
            )
        export.remove_stale_temp_files(root, _directories(plan))
        to_write = result.would_write
        self.meta = _meta(layout, result, self.user)
        if not to_write:
            return False
        try:
            self.record = _begin(self.directory, layout, root, plan, to_write, self.meta)
        except _ChangedOnDisk as exc:  # nothing written yet
            raise Refused([], conflicts=[exc.conflict], plan=plan) from exc
        self.applying = _Applying(
            root, layout, self.record, result, self.step, self.on_written, self.progress
        )
        return True

    def audit(self, failure: Exception | None) -> bool:
        layout, result, user = self.layout, self.result, self.user
        plan = result.plan
        if failure is None:
            lint_allowances.record(
                layout.workspace,
                plan.findings,
                plan.sha256_of(),
                result.newly_allowed,
                user=user,
                actor=self.meta["actor"],
                layout=layout,
            )
            record_written(layout, plan, result.written, self.root, user, result.deleted)
            if result.written or result.deleted or result.skipped_on_disk or plan.proposal:
                result.event = _audit(
                    layout, self.record, self.meta, result.written, user, result.deleted
                )
        else:
            result.event = record_event(
                layout,
                WRITEBACK_FAILED_ACTION,
                user,
                self.meta,
                self.record,
                error=str(failure),
                rolled_back=not isinstance(failure, _Unrecovered),
            )
        return True

    def finish(self, failure: Exception | None) -> None:
        if not isinstance(failure, _Unrecovered):
            journal.finish(self.directory)

    def files(self) -> _Applying:  # only once begin() journalled them
        assert self.applying is not None
        return self.applying


@observability.observed(
    "writeback",
    lambda layout, *, dry_run=False, **_: {"layout": layout.pk, "dry_run": dry_run},
    _writeback_fields,
)
def write_back(
    layout: Layout,
    *,
    user: Any = None,
    overwrite: Collection[str] = (),
    allow_findings: Collection[str] = (),
    dry_run: bool = False,
    on_written: Callable[[WrittenFile], None] | None = None,
    on_step: Callable[[str], None] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> WritebackResult:
    """Write the layout's changed files into its memories dir, all or nothing.

    ``overwrite`` names conflicting files to replace anyway, ``allow_findings`` the lint
    findings to let through (both: an admin's decision, checked by the caller). A dry
    run computes everything and writes nothing. Raises Refused while anything blocks
    (also when a file changes on disk during the write: what was written is undone),
    WritebackError when the workspace cannot be written (undone too). ``on_written`` is
    called after each file is in place, ``on_step`` at each step boundary with its name
    (``begin``, ``journal``, ``staged`` and ``renamed`` for each file, ``committed``,
    ``done``), ``progress`` with ("write", files written, files to write).

    Order: an earlier write-back of the layout that died is finished or undone first;
    then the journal (old and new bytes, fsync'd), every file staged beside its target,
    the renames, the database and audit in one transaction, the journal removed.
    """
    root = workspace_root(layout.workspace)
    if dry_run:
        with transaction.atomic():
            return _prepare(layout, root, overwrite, allow_findings, dry_run=True)
    step = on_step or _no_step
    directory = journal_directory(layout, root)
    with ExitStack() as held:
        try:
            held.enter_context(journal.locked(directory))
            recover_layout(layout, directory)  # its own transaction, committed before ours
        except (journal.JournalError, OSError) as exc:
            raise WritebackError(f"an earlier write-back could not be recovered: {exc}") from exc
        step("begin")
        held.enter_context(lint_kept_when_refused())
        run = _Run(layout, root, directory, overwrite, allow_findings, user)
        run.step, run.on_written, run.progress = step, on_written, progress
        failure = journal.publish(
            begin=run.begin,
            stage=lambda: run.files().stage(),
            put_in_place=lambda: run.files().put_in_place(),
            undo=lambda exc: run.files().undo(exc),
            audit=run.audit,
            finish=run.finish,
            step=step,
            failures=(ExportError, OSError, _ChangedOnDisk),
            atomic=transaction.atomic,
        )
        result = run.result
        plan = result.plan
    if isinstance(failure, _ChangedOnDisk):
        raise Refused([], conflicts=[failure.conflict], plan=plan) from failure
    if failure is not None:
        raise WritebackError(
            f"write-back stopped, nothing changed: {failure}"
            if not isinstance(failure, _Unrecovered)
            else str(failure)
        ) from failure
    return result


def _no_step(name: str) -> None:
    pass


def _prepare(
    layout: Layout,
    root: Path,
    overwrite: Collection[str],
    allow_findings: Collection[str],
    *,
    dry_run: bool,
) -> WritebackResult:
    plan = plan_layout(layout)
    check_disk(plan, root)
    found = {f.id for f in plan.findings}
    held = set(lint_allowances.standing(layout.workspace, plan.findings, plan.sha256_of()))
    allowed = held | (found & set(allow_findings))
    return WritebackResult(
        plan,
        dry_run,
        written=[],
        skipped_on_disk=[f.path for f in plan.on_disk],
        overwritten=sorted(plan.conflict_paths() & set(overwrite)),
        allowed_findings=sorted(allowed),
        blocking_conflicts=[c for c in plan.conflicts if c.path not in overwrite],
        blocking_findings=[f for f in plan.findings if f.id not in allowed],
        newly_allowed=sorted(allowed - held),
    )


def _directories(plan: Plan) -> list[str]:
    return sorted({f.path.rpartition("/")[0] for f in plan.changed})


class _Unrecovered(Exception):
    """A failed write-back whose undo failed too: its journal stays for recovery."""


def _meta(layout: Layout, result: WritebackResult, user: Any) -> dict[str, Any]:
    """What the audit event needs, kept in the journal for a recovery to record it."""
    plan = result.plan
    return {
        "workspace": layout.workspace_id,
        "workspace_name": layout.workspace.name,
        "layout": layout.pk,
        "memories_dir": layout.memories_dir,
        "user": getattr(user, "pk", None),
        "actor": "" if getattr(user, "pk", None) else "command line",
        "proposal": plan.proposal.pk if plan.proposal else None,
        "already_on_disk": result.skipped_on_disk,
        "overwritten": result.overwritten,
        "allowed_findings": result.allowed_findings,
    }


def _begin(
    directory: Path,
    layout: Layout,
    root: Path,
    plan: Plan,
    to_write: list[PlannedFile],
    meta: dict[str, Any],
) -> journal.Journal:
    """The journal of ``to_write``, with the bytes on disk now as the old ones;
    _ChangedOnDisk when they are not what check_disk saw."""
    changes = []
    for planned in to_write:
        old = read_disk(root, planned.path)
        if planned.path not in plan.conflict_paths():
            _check_same(planned, old, plan)
        changes.append((planned.path, old, planned.data))
    created = sorted(
        {
            parent
            for planned in to_write
            if planned.data is not None
            for parent in _parents(planned.path, layout.memories_dir)
            if not (root / parent).is_dir()
        }
    )
    try:
        return journal.begin(
            directory,
            root=root,
            allowed_dirs=[layout.memories_dir],
            changes=changes,
            created_dirs=created,
            meta=meta,
        )
    except (journal.JournalError, OSError) as exc:
        raise WritebackError(
            f"the write-back journal {directory} cannot be written ({exc})"
        ) from exc


def _parents(path: str, memories_dir: str) -> list[str]:
    parents = []
    parent = path.rpartition("/")[0]
    while parent.startswith(memories_dir + "/"):
        parents.append(parent)
        parent = parent.rpartition("/")[0]
    return parents


def _check_same(planned: PlannedFile, disk: bytes | None, plan: Plan) -> None:
    digest = hashlib.sha256(disk).hexdigest() if disk is not None else None
    if digest != plan.disk_sha256.get(planned.path):
        base = blob_bytes(planned.base_sha256) if planned.base_sha256 else b""
        raise _ChangedOnDisk(Conflict(planned.path, planned.base_sha256, digest, base, disk or b""))


def _counting(
    on_written: Callable[[WrittenFile], None] | None,
    progress: Callable[[str, int, int], None] | None,
    total: int,
) -> Callable[[WrittenFile], None] | None:
    """``on_written``, also reporting ("write", files written, files to write)."""
    if progress is None:
        return on_written
    done = 0
    progress("write", 0, total)

    def written(file: WrittenFile) -> None:
        nonlocal done
        done += 1
        if on_written is not None:
            on_written(file)
        progress("write", done, total)

    return written


class _Applying:
    """A write-back's files on disk: stage every file, then rename each one in place
    (checking it did not change on disk meanwhile); on a failure, undo what was renamed."""

    def __init__(
        self,
        root: Path,
        layout: Layout,
        record: journal.Journal,
        result: WritebackResult,
        step: Callable[[str], None],
        on_written: Callable[[WrittenFile], None] | None,
        progress: Callable[[str, int, int], None] | None,
    ) -> None:
        self.root, self.layout, self.record = root, layout, record
        self.to_write, self.result, self.step = result.would_write, result, step
        self.allowed = [layout.memories_dir]
        self.staged: list[export.Staged | None] = []  # None: a deletion
        self.on_written, self.progress = on_written, progress

    def stage(self) -> None:
        total = sum(f.data is not None for f in self.to_write)
        self.on_written = _counting(self.on_written, self.progress, total)  # reports 0 now
        for planned in self.to_write:
            if planned.data is None:
                self.staged.append(None)
                continue
            self.staged.append(
                export.stage(self.root, planned.path, planned.data, allowed_dirs=self.allowed)
            )
            self.step("staged")

    def put_in_place(self) -> None:
        plan, result = self.result.plan, self.result
        for planned, ready in zip(self.to_write, self.staged, strict=True):
            if planned.path not in plan.conflict_paths():
                _check_same(planned, read_disk(self.root, planned.path), plan)
            if ready is None:
                export.remove_file(self.root, planned.path, self.allowed)
                result.deleted.append(planned.path)
                self.step("removed")
                continue
            written = export.publish(self.root, ready)
            result.written.append(written)
            self.step("renamed")
            if self.on_written is not None:
                self.on_written(written)
        for path in result.deleted:  # an emptied skill folder goes too (best effort)
            _remove_empty_parents(self.root, path, f"{self.layout.memories_dir}/skills")

    def undo(self, exc: Exception) -> Exception:
        """Back to before; the failure to report (``_Unrecovered`` when undoing failed
        too: the journal stays for recovery)."""
        result = self.result
        for ready in self.staged:
            if ready is not None:
                export.discard(self.root, ready)
        try:
            journal.turn_back(self.record)
            journal.roll_back(self.record)
        except (journal.JournalError, ExportError, OSError) as undo:
            return _Unrecovered(
                f"write-back stopped after {len(result.written)} of {len(self.to_write)} "
                f"file(s): {exc}; undoing it failed too ({undo}): it is finished or undone "
                "at the next start of the dashboard or a worker, or by the next write-back"
            )
        result.written.clear()
        result.deleted.clear()
        return exc


def _remove_empty_parents(root: Path, path: str, stop: str) -> None:
    parent = path.rpartition("/")[0]
    while parent.startswith(stop + "/") and export.remove_empty_directory(root, parent):
        parent = parent.rpartition("/")[0]


def _audit(
    layout: Layout,
    record: journal.Journal | None,
    meta: dict[str, Any],
    written: list[WrittenFile],
    user: Any,
    deleted: Collection[str] = (),
) -> AuditEvent:
    """The write-back's event; ``record`` its journal (None: nothing was written)."""
    old = {f.path: f.old_sha256 for f in record.files} if record else {}
    files = [
        {"path": w.path, "sha256": w.sha256, "previous_sha256": old.get(w.path), "size": w.size}
        for w in written
    ] + [
        {"path": p, "sha256": None, "previous_sha256": old.get(p), "size": 0, "deleted": True}
        for p in deleted
    ]
    return record_event(layout, WRITEBACK_ACTION, user, meta, record, files=files)


# --- the database after a write ---------------------------------------------------------


def record_written(
    layout: Layout,
    plan: Plan,
    written: list[WrittenFile],
    root: Path,
    user: Any = None,
    deleted: Collection[str] = (),
) -> None:
    """Bring the database to the bytes now on disk: the importer's own sync (file rows,
    blobs, parsed rows) of the paths written, deleted or found on disk already (an
    earlier write-back stopped midway), with the directories they were written in; no
    other file is looked at. Written files equal the current versions, so no new version
    appears."""
    paths = {file.path for file in written}
    paths.update(d for file in written for d in file.created_dirs)
    paths.update(deleted)
    paths.update(file.path for file in plan.on_disk)
    if paths:
        importer.sync_paths(layout.workspace, root, paths)
