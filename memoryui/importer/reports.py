"""The import's report: what each layout holds, the problems found, and the import run
that records them (``ImportRun``), returned to the caller as an ``ImportResult``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from generation.kinds import FileKind
from generation.tree import LayoutDirs

from ..models import ImportRun, Workspace, WorkspaceFile
from .reading import TreeReader


@dataclass
class LayoutCounts:
    memories_dir: str
    sessions_dir: str
    rollouts: int = 0
    raw_memories: int = 0
    rollout_summaries: int = 0
    memory_md: bool = False
    memory_summary_md: bool = False
    skills: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def count(self, kind: str, by: int = 1) -> None:
        """Count one file of ``kind`` in (``by`` -1: out again, it was not imported)."""
        if kind == FileKind.ROLLOUT:
            self.rollouts += by
        elif kind == FileKind.RAW_MEMORY:
            self.raw_memories += by
        elif kind == FileKind.ROLLOUT_SUMMARY:
            self.rollout_summaries += by
        elif kind == FileKind.MEMORY_INDEX:
            self.memory_md = by > 0
        elif kind == FileKind.MEMORY_SUMMARY:
            self.memory_summary_md = by > 0
        elif kind == FileKind.SKILL:
            self.skills += by


@dataclass
class ImportResult:
    workspace: Workspace
    run: ImportRun
    layouts: list[LayoutCounts]
    errors: list[dict[str, str]]
    added: int = 0
    changed: int = 0
    unchanged: int = 0
    missing: int = 0
    files: int = 0
    new_versions: list[str] = field(default_factory=list)
    # Why reading stopped early (the size limit, a damaged archive); "" if it did not.
    stopped: str = ""

    @property
    def imported_anything(self) -> bool:
        return self.files > 0

    def as_json(self) -> dict[str, Any]:
        return {
            "workspace": self.workspace.name,
            "layouts": [layout.as_dict() for layout in self.layouts],
            "errors": self.errors,
        }


def record_run(
    reader: TreeReader,
    counts: dict[str, LayoutCounts],
    dirs: list[LayoutDirs],
    added: int,
    changed: int,
    unchanged: int,
    missing: list[int],
    new_versions: list[str],
    user: Any,
    scheduled: bool,
) -> ImportResult:
    """The run of an import whose rows are synced to what ``reader`` collected, with its
    report: the layouts' counts and every problem (those met reading, and those of the
    files stored)."""
    errors = list(reader.problems)
    errors.extend(
        {"path": path, "error": problem}
        for path, problem in WorkspaceFile.objects.present()
        .with_problems()
        .filter(workspace=reader.workspace)
        .order_by("path")
        .values_list("path", "problem")
        # A merged upload's report is about its own files only: the workspace also
        # holds other sandboxes' (and earlier uploads').
        if not reader.merge or path in reader.items
    )
    if not reader.file_count:
        status = ImportRun.Status.FAILED
    elif errors:
        status = ImportRun.Status.WITH_ERRORS
    else:
        status = ImportRun.Status.OK
    layout_counts = [counts[d.memories_dir] for d in dirs]
    report: dict[str, Any] = {
        "layouts": [c.as_dict() for c in layout_counts],
        "errors": errors,
        "new_versions": new_versions,
    }
    if reader.listing and reader.complete and reader.file_count == reader.listed:
        report["listing"] = reader.listing
    run = ImportRun.objects.create(
        workspace=reader.workspace,
        started_at=reader.now,
        finished_at=timezone.now(),
        status=status,
        added=added,
        changed=changed,
        unchanged=unchanged,
        missing=len(missing),
        report=report,
        triggered_by=user if getattr(user, "pk", None) else None,
        scheduled=scheduled,
    )
    reader.workspace.last_imported_at = reader.workspace.rows_written_at = run.finished_at
    reader.workspace.save(update_fields=["last_imported_at", "rows_written_at"])
    return ImportResult(
        workspace=reader.workspace,
        run=run,
        layouts=layout_counts,
        errors=errors,
        added=added,
        changed=changed,
        unchanged=unchanged,
        missing=len(missing),
        files=reader.file_count,
        new_versions=new_versions,
        stopped=reader.stopped,
    )


def repeat_run(reader: TreeReader, previous: ImportRun, user: Any, scheduled: bool) -> ImportResult:
    """The outcome of an import that found the directory as ``previous`` left it:
    the same layouts and problems, every file unchanged, no new version."""
    files = reader.listed
    run = ImportRun.objects.create(
        workspace=reader.workspace,
        started_at=reader.now,
        finished_at=timezone.now(),
        status=previous.status,
        unchanged=files,
        report={**previous.report, "new_versions": []},
        triggered_by=user if getattr(user, "pk", None) else None,
        scheduled=scheduled,
    )
    # No row written: the figures kept since the last import that wrote some stay.
    reader.workspace.last_imported_at = run.finished_at
    reader.workspace.save(update_fields=["last_imported_at"])
    return ImportResult(
        workspace=reader.workspace,
        run=run,
        layouts=[LayoutCounts(**c) for c in run.report.get("layouts", [])],
        errors=list(run.report.get("errors", [])),
        unchanged=files,
        files=files,
    )
