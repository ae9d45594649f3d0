"""A write-back's plan as data: the files planned (``PlannedFile``), the plan, the names
refused and the conflicts on disk, a run's result and the errors; which files are a
layout's curated documents, and which skill file paths a write-back may write."""

from __future__ import annotations

import difflib
import hashlib
from dataclasses import dataclass, field

from generation import tree
from generation.export import ExportError, WrittenFile
from generation.kinds import FileKind
from generation.lint import Finding
from generation.tree import LayoutDirs

from .. import diffs
from ..models import AuditEvent, Layout, MemoryVersion, Proposal, Workspace

WRITEBACK_ACTION = "writeback.write"
WRITEBACK_FAILED_ACTION = "writeback.failed"
# Texts larger than this are not diffed line by line on a page (difflib is quadratic
# in the worst case).
DIFF_LIMIT_BYTES = 400_000
DOCUMENT_FILES = {
    MemoryVersion.Document.MEMORY_MD: "MEMORY.md",
    MemoryVersion.Document.MEMORY_SUMMARY: "memory_summary.md",
}


class WritebackError(ExportError):
    """The write-back cannot run at all, or stopped; the message says why."""


class Refused(WritebackError):
    """A write-back or export that waits for people: lint findings that nobody allowed,
    names that leave their layout, files changed on disk since the import (write-back)."""

    def __init__(
        self,
        findings: list[Finding],
        *,
        refused: list[Refusal] | None = None,
        conflicts: list[Conflict] | None = None,
        plan: Plan | None = None,
        what: str = "write-back",
    ) -> None:
        self.findings = findings
        self.refused = refused or []
        self.conflicts = conflicts or []
        self.plan = plan
        reasons = []
        if self.refused:
            # Each refusal says its own reason (a name outside its layout, an agent's
            # version holding possible poisoning, a file that cannot be read).
            shown = [f"{r.path}: {r.reason}" for r in self.refused[:3]]
            more = len(self.refused) - len(shown)
            reasons.append(
                "; ".join(shown) + (f"; and {more} more refused file(s)" if more else "")
            )
        if self.conflicts:
            reasons.append(f"{len(self.conflicts)} file(s) changed on disk since the import")
        if findings:
            reasons.append(f"{len(findings)} lint finding(s) not allowed")
        super().__init__(f"{what} refused: " + "; ".join(reasons))


@dataclass(frozen=True)
class PlannedFile:
    path: str  # relative to the workspace
    data: bytes | None  # None: the file is to be deleted (a deleted skill file)
    source: str  # where the bytes come from, for people
    base_sha256: str | None  # what was imported; None: memoryui never saw this file
    kind: FileKind
    sha256: str | None = field(init=False)  # None: deleted

    def __post_init__(self) -> None:
        digest = None if self.data is None else hashlib.sha256(self.data).hexdigest()
        object.__setattr__(self, "sha256", digest)

    @property
    def deleted(self) -> bool:
        return self.data is None

    @property
    def changed(self) -> bool:
        return self.sha256 != self.base_sha256

    @property
    def is_new(self) -> bool:
        return self.base_sha256 is None and self.data is not None

    def same_content(self, data: bytes | None) -> bool:
        """Whether ``data`` (None: no such file) already says what this file says. A
        selection with the same items is the same whatever its ``updated_at``."""
        if data is None or self.data is None:
            return data is None and self.data is None
        if data == self.data:
            return True
        return self.kind == FileKind.SELECTION and _selection_items(data) == _selection_items(
            self.data
        )


@dataclass(frozen=True)
class Refusal:
    path: str
    reason: str


@dataclass
class Conflict:
    """A changed file whose disk bytes are neither the imported ones nor ours."""

    path: str
    base_sha256: str | None
    disk_sha256: str | None  # None: gone from disk
    base: bytes
    disk: bytes

    @property
    def too_large(self) -> bool:
        return max(len(self.base), len(self.disk)) > DIFF_LIMIT_BYTES

    def rows(self) -> list[diffs.Row]:
        """The on-disk change (imported -> disk) for a page."""
        if self.too_large:
            return []
        return diffs.side_by_side(_text(self.base), _text(self.disk))

    def unified(self) -> str:
        lines = difflib.unified_diff(
            _text(self.base).splitlines(keepends=True),
            _text(self.disk).splitlines(keepends=True),
            fromfile=f"{self.path} (imported)",
            tofile=f"{self.path} (on disk now)",
        )
        return "".join(lines)


@dataclass
class Plan:
    layout: Layout
    files: list[PlannedFile]
    proposal: Proposal | None
    refused: list[Refusal]
    findings: list[Finding]
    conflicts: list[Conflict] = field(default_factory=list)
    # Phase one's files held back with a quarantined entry: not written, not refused.
    held: list[Refusal] = field(default_factory=list)
    # After check_disk: changed files to write, and those whose content is on disk already.
    pending: list[PlannedFile] = field(default_factory=list)
    on_disk: list[PlannedFile] = field(default_factory=list)
    disk_checked: bool = False
    disk_sha256: dict[str, str | None] = field(default_factory=dict)

    @property
    def changed(self) -> list[PlannedFile]:
        return [f for f in self.files if f.changed]

    @property
    def unchanged_count(self) -> int:
        return sum(1 for f in self.files if not f.changed)

    def conflict_paths(self) -> set[str]:
        return {c.path for c in self.conflicts}

    def sha256_of(self) -> dict[str, str]:
        return {f.path: f.sha256 for f in self.files if f.sha256 is not None}


@dataclass
class WritebackResult:
    plan: Plan
    dry_run: bool
    written: list[WrittenFile]
    skipped_on_disk: list[str]
    overwritten: list[str]
    allowed_findings: list[str]
    event: AuditEvent | None = None
    deleted: list[str] = field(default_factory=list)  # skill files deleted from disk
    blocking_conflicts: list[Conflict] = field(default_factory=list)
    blocking_findings: list[Finding] = field(default_factory=list)
    # Allowed this time, not by an allowance that still holds: recorded after the write.
    newly_allowed: list[str] = field(default_factory=list)

    @property
    def would_write(self) -> list[PlannedFile]:
        """The files a real run would write, given the same decisions."""
        overwritten = set(self.overwritten)
        return self.plan.pending + [f for f in self.plan.changed if f.path in overwritten]


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _selection_items(data: bytes) -> list[tree.SelectionItem] | None:
    parsed = tree.parse_selection(data)
    return None if parsed.problem and not parsed.items else parsed.items


def layout_dirs(workspace: Workspace) -> list[LayoutDirs]:
    return [
        LayoutDirs(m, s)
        for m, s in workspace.layouts.present().values_list("memories_dir", "sessions_dir")
    ]


def skill_path_problem(rel: str) -> str:
    parts = rel.split("/")
    if parts[0] != "skills" or len(parts) < 3 or any(p in ("", ".", "..") for p in parts):
        return "not a path under skills/<name>/"
    return ""
