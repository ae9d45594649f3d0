"""Curated memory back into the workspace: write-back into a layout's directory on the
server, and the curated files that a snapshot export lays over the imported tree.

A layout's *plan* is what memoryui holds that the workspace should have: the current
versions of ``MEMORY.md`` and ``memory_summary.md`` and, for the latest approved
proposal not yet written back, ``phase_two_selection.json`` (with a fresh
``updated_at``, as the SDK writes it after a successful phase two), ``raw_memories.md``
and the raw memories and rollout summaries of the proposal's run; and the current
version of every skill file (``memoryui.skills``), a deleted one to be deleted. A file
is *changed* when its planned bytes differ from the bytes imported (a deleted skill
file: when it was on disk at the last import).

Write-back writes (or deletes) the changed files all or nothing, only inside the layout's memories
dir whatever a name says: a journal (``generation.journal``) holds their old and new
bytes before the first rename, and a write-back that died is finished or undone (by
``memoryui.recovery``: when a worker or the web server starts, and before the next
write-back of the layout). A file that changed on disk since it was imported is
a conflict: it is shown as a diff and not overwritten unless an admin names it. Lint
findings block until an admin allows each one. Every write-back is in the audit log with
its files and hashes, and the database is brought to the written bytes, so that a
re-import finds nothing changed.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Callable, Collection, Iterator
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from generation import export, journal, tree
from generation.export import ExportError, WrittenFile
from generation.kinds import FileKind
from generation.lint import LINT_VERSION, Finding, FindingKind, lint_file
from generation.tree import LayoutDirs

from . import diffs, importer, lint_allowances, observability, skills
from .models import (
    AuditEvent,
    Blob,
    Layout,
    LintResult,
    MemoryVersion,
    PhaseOneJob,
    PhaseOneResult,
    Proposal,
    RolloutSummary,
    SkillFileVersion,
    Workspace,
    WorkspaceFile,
)

WRITEBACK_ACTION = "writeback.write"
WRITEBACK_FAILED_ACTION = "writeback.failed"
# Phase one writes exactly these shapes, relative to the memories dir.
_PHASE_ONE_PATH = re.compile(r"^(?:raw_memories|rollout_summaries)/[^/]+\.md$")
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


# --- the plan ---------------------------------------------------------------------------


def plan_layout(
    layout: Layout, *, now: datetime | None = None, dirs: list[LayoutDirs] | None = None
) -> Plan:
    """What the layout's directory should hold, from the database alone. ``dirs``: the
    workspace's layouts, when the caller has them already."""
    dirs = layout_dirs(layout.workspace) if dirs is None else dirs
    candidates: list[tuple[str, bytes | None, str, FileKind]] = []
    held: list[Refusal] = []
    for document, name in DOCUMENT_FILES.items():
        version = (
            MemoryVersion.objects.filter(layout=layout, document=document)
            .select_related("blob", "author")
            .order_by("-number")
            .first()
        )
        if version is None:
            continue
        if version.needs_review:
            held.extend(_quarantined(layout, name, version))
        who = version.author.get_username() if version.author else version.get_author_kind_display()
        kind = FileKind.MEMORY_INDEX if name == "MEMORY.md" else FileKind.MEMORY_SUMMARY
        candidates.append(
            (
                f"{layout.memories_dir}/{name}",
                bytes(version.blob.data),
                f"{name} version {version.number} ({who})",
                kind,
            )
        )
    refused: list[Refusal] = []
    kept_back: list[Refusal] = []
    proposal = proposal_to_write(layout)
    if proposal is not None:
        more, refused, kept_back = _proposal_files(layout, proposal, dirs, now or timezone.now())
        candidates.extend(more)
    refused = held + refused
    candidates.extend(_skill_files(layout))
    files = _planned(layout, candidates)
    return Plan(layout, files, proposal, refused, lint_planned(files, dirs), held=kept_back)


def proposal_memory_files(layout: Layout, dirs: list[LayoutDirs]) -> list[PlannedFile]:
    """The files an approved proposal not yet written back brings (the selection,
    ``raw_memories.md``, phase one's raw memories and rollout summaries), planned as
    ``plan_layout`` plans them, without the layout's documents and skills; the
    selection dated when the proposal was approved, so that the same proposal always
    plans the same bytes."""
    proposal = proposal_to_write(layout)
    if proposal is None:
        return []
    when = proposal.decided_at or proposal.created_at
    candidates, _, _ = _proposal_files(layout, proposal, dirs, when)
    return _planned(layout, candidates)


def _planned(
    layout: Layout, candidates: list[tuple[str, bytes | None, str, FileKind]]
) -> list[PlannedFile]:
    imported = _imported(layout, [path for path, *_ in candidates])
    return [
        _keep_equivalent_selection(PlannedFile(path, data, source, imported.get(path), kind))
        for path, data, source, kind in candidates
    ]


def _quarantined(layout: Layout, name: str, version: MemoryVersion) -> list[Refusal]:
    """An agent's own version that nobody reviewed yet and that adds an entry with a
    poisoning flag: nothing carries it on (write-back, export, download) until a
    reviewer accepts or reverts it on the document's history page."""

    from .entry_checks import agent_version_flags  # noqa: PLC0415 (deferred: the poisoning rules, needed for an agent's version awaiting review only)

    found = agent_version_flags(version)
    if not found:
        return []
    return [
        Refusal(
            f"{layout.memories_dir}/{name}",
            f"version {version.number}, the agent's own edit, holds possible memory poisoning "
            f"({found[0].label}: {found[0].reason}); accept or revert it on the history page "
            "first",
        )
    ]


def lint_planned(files: list[PlannedFile], dirs: list[LayoutDirs]) -> list[Finding]:
    """``generation.lint.lint_file`` for each file, its results kept in the database
    (``LintResult``): a content is scanned once, whichever process (web, worker, command)
    meets it first; a large MEMORY.md takes a second to lint."""
    keys = {f.path: lint_key(f.path, f.sha256, dirs) for f in files if f.data is not None}
    known = dict(
        LintResult.objects.filter(key__in=set(keys.values())).values_list("key", "findings")
    )
    findings: list[Finding] = []
    fresh: list[LintResult] = []
    for f in files:
        if f.data is None:
            continue  # a deletion: nothing to lint
        key = keys[f.path]
        if key in known:
            findings.extend(_finding_of(row) for row in known[key])
            continue
        found = lint_file(f.path, f.data, dirs)
        known[key] = [asdict(finding) for finding in found]
        fresh.append(LintResult(key=key, findings=known[key]))
        findings.extend(found)
    # ignore_conflicts: another process may have scanned the same content meanwhile.
    LintResult.objects.bulk_create(fresh, ignore_conflicts=True)
    kept = _KEPT_WHEN_REFUSED.get()
    if kept is not None:
        kept.extend(fresh)
    return findings


# Lint results found by a write-back that is refused (its transaction rolled back).
_KEPT_WHEN_REFUSED: ContextVar[list[LintResult] | None] = ContextVar(
    "memoryui_lint_kept_when_refused", default=None
)


@contextmanager
def _lint_kept_when_refused() -> Iterator[None]:
    """A write-back refused for its findings rolls back its transaction, lint results
    included: saved again here, so that the next attempt, in any process, does not scan
    the same content again."""
    kept: list[LintResult] = []
    token = _KEPT_WHEN_REFUSED.set(kept)
    try:
        yield
    except Refused:
        LintResult.objects.bulk_create(kept, ignore_conflicts=True)
        raise
    finally:
        _KEPT_WHEN_REFUSED.reset(token)


def lint_ahead(version: MemoryVersion | SkillFileVersion) -> None:
    """Scan a new version's content now, while nobody waits on it (a worker runs this
    once the version is saved): ``lint_planned`` keeps the result by content, so the
    write-back page, ``manage.py writeback`` and an export of that version find it
    scanned instead of scanning a large ``MEMORY.md`` while a person waits."""
    layout = version.layout
    if version.blob is None:
        return  # a deleted skill file: nothing to lint
    if isinstance(version, MemoryVersion):
        name = DOCUMENT_FILES[MemoryVersion.Document(version.document)]
        kind = FileKind.MEMORY_INDEX if name == "MEMORY.md" else FileKind.MEMORY_SUMMARY
    elif _skill_path_problem(version.path):
        return  # never written back, so never linted for it
    else:
        name, kind = version.path, FileKind.SKILL
    data = bytes(version.blob.data)
    planned = PlannedFile(f"{layout.memories_dir}/{name}", data, "", None, kind)
    lint_planned([planned], layout_dirs(layout.workspace))


def lint_latest(workspace: Workspace) -> None:
    """``lint_ahead`` for the latest version of each document and skill file of every
    layout (what an import just recorded, say): content scanned before costs a lookup."""
    for layout in workspace.layouts.present():
        versions: list[MemoryVersion | SkillFileVersion] = []
        for document in DOCUMENT_FILES:
            latest = (
                MemoryVersion.objects.filter(layout=layout, document=document)
                .select_related("layout__workspace", "blob")
                .order_by("-number")
                .first()
            )
            if latest is not None:
                versions.append(latest)
        versions.extend(skills.current_versions(layout).select_related("layout__workspace", "blob"))
        for version in versions:
            lint_ahead(version)


def lint_key(path: str, sha256: str | None, dirs: list[LayoutDirs]) -> str:
    return hashlib.sha256(f"{LINT_VERSION}\0{path}\0{sha256}\0{dirs}".encode()).hexdigest()


def _finding_of(row: dict[str, Any]) -> Finding:
    return Finding(**{**row, "kind": FindingKind(row["kind"])})


def _imported(layout: Layout, paths: list[str]) -> dict[str, str | None]:
    """path -> imported sha256 of those of ``paths`` memoryui has seen (None: gone from
    disk at the last import)."""
    found: dict[str, str | None] = {}
    for chunk in _chunks(sorted(set(paths)), 500):
        rows = WorkspaceFile.objects.filter(
            workspace_id=layout.workspace_id, path__in=chunk
        ).values_list("path", "blob_id", "missing_since")
        found.update((path, None if gone else blob) for path, blob, gone in rows)
    return found


def _keep_equivalent_selection(planned: PlannedFile) -> PlannedFile:
    """A selection with the same items as the imported one keeps the imported bytes
    rather than a new ``updated_at``: nothing changed, nothing to write."""
    if planned.kind != FileKind.SELECTION or planned.base_sha256 is None or not planned.changed:
        return planned
    old = _blob(planned.base_sha256)
    if not planned.same_content(old):
        return planned
    return PlannedFile(planned.path, old, planned.source, planned.base_sha256, planned.kind)


def proposal_to_write(layout: Layout) -> Proposal | None:
    """The latest approved proposal, unless a write-back already wrote it."""
    proposal = (
        # An agent's approved proposal brings no files beyond its versions.
        Proposal.objects.filter(layout=layout, status=Proposal.Status.APPROVED, run__isnull=False)
        .order_by("-decided_at", "-created_at", "-pk")
        .first()
    )
    if proposal is None:
        return None
    written = AuditEvent.objects.filter(
        layout=layout, action=WRITEBACK_ACTION, detail__proposal=proposal.pk
    ).exists()
    return None if written else proposal


def files_pending_write_back(layout: Layout) -> set[str]:
    """The phase-one files (``rollout_summaries/<file>.md`` ...) that the approved
    proposal waiting for its write-back brings: right after an approval, MEMORY.md cites
    rollout summaries that only its write-back puts on disk. Three queries."""
    proposal = proposal_to_write(layout)
    if proposal is None:
        return set()
    pending: set[str] = set()
    for files in _phase_one_results(proposal):
        pending.update(str(rel) for rel in files or {})
    return pending


def pending_file_text(proposal: Proposal, rel: str) -> str | None:
    """The text of a phase-one file (``rollout_summaries/<file>.md``, relative to the
    memories dir) that ``proposal``'s run wrote and its write-back brings, or None."""
    for files in _phase_one_results(proposal):
        text = (files or {}).get(rel)
        if isinstance(text, str):
            return text
    return None


def _phase_one_results(proposal: Proposal) -> Any:
    return PhaseOneResult.objects.filter(
        pk__in=PhaseOneJob.objects.filter(
            run_id=proposal.run_id, status=PhaseOneJob.Status.DONE
        ).values("result_id"),
        outcome=PhaseOneResult.Outcome.MEMORY,
    ).values_list("files", flat=True)


def _proposal_files(
    layout: Layout, proposal: Proposal, dirs: list[LayoutDirs], now: datetime
) -> tuple[list[tuple[str, bytes | None, str, FileKind]], list[Refusal], list[Refusal]]:
    """The files an approved proposal brings, the names refused, and phase one's files
    held back with a quarantined entry (``_hold_quarantined_text``)."""
    base = layout.memories_dir
    label = f"approved proposal #{proposal.pk}"
    items = [_selection_item(raw) for raw in proposal.selection if isinstance(raw, dict)]
    selection = tree.dump_selection(items, now.astimezone(UTC).isoformat()).encode()
    files: list[tuple[str, bytes | None, str, FileKind]] = [
        (f"{base}/phase_two_selection.json", selection, label, FileKind.SELECTION),
        (
            f"{base}/raw_memories.md",
            proposal.raw_memories_md.encode("utf-8"),
            label,
            FileKind.RAW_MEMORIES_MERGED,
        ),
    ]
    refused: list[Refusal] = []
    for result_files in _phase_one_results(proposal):
        for rel, text in sorted((result_files or {}).items()):
            path = f"{base}/{rel}"
            problem = _phase_one_path_problem(str(rel), path, layout, dirs)
            if problem:
                refused.append(Refusal(str(rel), problem))
                continue
            kind = (
                FileKind.RAW_MEMORY if rel.startswith("raw_memories/") else FileKind.ROLLOUT_SUMMARY
            )
            files.append((path, str(text).encode("utf-8"), f"{label}, phase one", kind))
    files, held = _hold_quarantined_text(proposal, files)
    written = {path for path, *_ in files} | {r.path for r in held}
    files.extend(
        (path, None, f"{label}, replaced by the rollout's new summary", FileKind.ROLLOUT_SUMMARY)
        for path in _replaced_summaries(layout, proposal)
        if path not in written
    )
    return files, refused, held


_PHASE_ONE_KINDS = (FileKind.RAW_MEMORIES_MERGED, FileKind.RAW_MEMORY, FileKind.ROLLOUT_SUMMARY)
# A flagged line shorter than this is too common to say a file holds the entry's text.
_HELD_NEEDLE = 16


def _hold_quarantined_text(
    proposal: Proposal, files: list[tuple[str, bytes | None, str, FileKind]]
) -> tuple[list[tuple[str, bytes | None, str, FileKind]], list[Refusal]]:
    """Phase one's files (``raw_memories.md``, raw memories, rollout summaries) that
    hold the flagged text of an entry the approval kept out (quarantined: nobody
    decided it): held back with it from the write-back, the export and a sandbox's
    download (what is on disk stays), each naming the entry it carries."""
    from .entry_checks import held_entries  # noqa: PLC0415 (deferred: the poisoning rules, for approved proposals only)

    needles = [
        (key, flag, _plain(flag["excerpt"]))
        for key, flags in held_entries(proposal).items()
        for flag in flags
    ]
    needles = [n for n in needles if len(n[2]) >= _HELD_NEEDLE]
    if not needles:
        return files, []
    kept, held = [], []
    for path, data, source, kind in files:
        text = _plain(data.decode("utf-8", "replace")) if data and kind in _PHASE_ONE_KINDS else ""
        found = next(((k, f) for k, f, needle in needles if needle in text), None)
        if found is None:
            kept.append((path, data, source, kind))
            continue
        (document, _), flag = found
        line = flag["excerpt"] if len(flag["excerpt"]) <= 100 else flag["excerpt"][:99] + "…"
        name = DOCUMENT_FILES.get(MemoryVersion.Document(document), document)
        held.append(
            Refusal(
                path,
                f"holds “{line}”, the line of an entry proposal #{proposal.pk} kept out of "
                f"{name} ({flag['label']}: {flag['reason']})",
            )
        )
    return kept, held


def _plain(text: str) -> str:
    """``text`` as a flag's excerpt is cut: one line's words, without a list marker,
    a task reference or the excerpt's closing ellipsis."""
    text = re.sub(r"(?m)^\s*(?:[-*+]|\d+[.)])\s+", "", text)
    text = re.sub(r"\s*\[Task \d+\]", "", text)
    return " ".join(text.replace(" …", "").split())


def _replaced_summaries(layout: Layout, proposal: Proposal) -> list[str]:
    """The rollout summaries on disk of the rollouts the proposal's run extracted
    again: the new summary replaces them (a new slug is a new file name, and the SDK
    keeps one summary per rollout). The caller keeps the ones it rewrites."""
    extracted = PhaseOneResult.objects.filter(
        pk__in=PhaseOneJob.objects.filter(
            run_id=proposal.run_id, status=PhaseOneJob.Status.DONE
        ).values("result_id"),
        outcome=PhaseOneResult.Outcome.MEMORY,
    ).values("rollout_id")
    return sorted(
        RolloutSummary.objects.filter(
            layout=layout, file__missing_since__isnull=True, rollout_id__in=extracted
        ).values_list("file__path", flat=True)
    )


def _skill_files(layout: Layout) -> list[tuple[str, bytes | None, str, FileKind]]:
    """The current version of each skill file (``memoryui.skills``); None: deleted."""
    files: list[tuple[str, bytes | None, str, FileKind]] = []
    for version in skills.current_versions(layout).select_related("author", "blob"):
        if _skill_path_problem(version.path):
            continue
        who = version.author.get_username() if version.author else version.get_author_kind_display()
        state = "deleted in" if version.deleted else "version"
        files.append(
            (
                f"{layout.memories_dir}/{version.path}",
                None if version.blob is None else bytes(version.blob.data),
                f"skill file {state} {version.number} ({who})",
                FileKind.SKILL,
            )
        )
    return files


def _skill_path_problem(rel: str) -> str:
    parts = rel.split("/")
    if parts[0] != "skills" or len(parts) < 3 or any(p in ("", ".", "..") for p in parts):
        return "not a path under skills/<name>/"
    return ""


def _selection_item(raw: dict[str, Any]) -> tree.SelectionItem:
    return tree.SelectionItem(
        **{f.name: str(raw.get(f.name) or "") for f in fields(tree.SelectionItem)}
    )


def _phase_one_path_problem(rel: str, path: str, layout: Layout, dirs: list[LayoutDirs]) -> str:
    try:
        export.confine(path, [layout.memories_dir])
    except ExportError as exc:
        return str(exc)
    if not _PHASE_ONE_PATH.fullmatch(rel):
        return (
            "not a raw memory or rollout summary name "
            "(raw_memories/<id>.md, rollout_summaries/<file>.md)"
        )
    owner = tree.classify(path, dirs).layout
    if owner is None or owner.memories_dir != layout.memories_dir:
        return f"would land in another layout ({owner.memories_dir if owner else 'none'})"
    return ""


def _blob(sha256: str) -> bytes:
    return bytes(Blob.objects.values_list("data", flat=True).get(pk=sha256))


# --- the disk ---------------------------------------------------------------------------


def workspace_root(workspace: Workspace) -> Path:
    if workspace.source_kind != Workspace.SourceKind.DIRECTORY:
        raise WritebackError(
            f"{workspace.name} was imported from a snapshot archive, not a directory: "
            "export it as a snapshot instead"
        )
    root = Path(workspace.source_path)
    if root.is_symlink() or not root.is_dir():
        raise WritebackError(f"the workspace directory {root} is gone or not a directory")
    return root


def read_disk(root: Path, path: str) -> bytes | None:
    """The file's bytes on disk, None when it does not exist; OSError when it is not
    a regular file or its path passes through a link."""
    try:
        return tree.read_file(root, path)
    except FileNotFoundError:
        return None


def check_disk(plan: Plan, root: Path) -> None:
    """Sort the changed files into pending (disk still as imported), on disk already,
    and conflicts (changed on disk since the import)."""
    plan.conflicts, plan.pending, plan.on_disk = [], [], []
    conflicting = []
    for planned in plan.changed:
        try:
            disk = read_disk(root, planned.path)
        except OSError as exc:
            plan.refused.append(
                Refusal(planned.path, f"cannot be read on disk ({exc.strerror or exc})")
            )
            continue
        digest = hashlib.sha256(disk).hexdigest() if disk is not None else None
        plan.disk_sha256[planned.path] = digest
        if planned.same_content(disk):
            plan.on_disk.append(planned)
        elif digest == planned.base_sha256:
            plan.pending.append(planned)
        else:
            conflicting.append((planned, disk, digest))
    bases = _blobs([p.base_sha256 for p, _, _ in conflicting if p.base_sha256])
    for planned, disk, digest in conflicting:
        base = bases.get(planned.base_sha256 or "", b"")
        plan.conflicts.append(
            Conflict(planned.path, planned.base_sha256, digest, base, disk or b"")
        )
    plan.disk_checked = True


def _blobs(shas: list[str]) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    for chunk in _chunks(sorted(set(shas)), 500):
        found.update(
            (k, bytes(v))
            for k, v in Blob.objects.filter(pk__in=chunk).values_list("sha256", "data")
        )
    return found


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


# --- writing ----------------------------------------------------------------------------


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
        from .recovery import recover_layout  # noqa: PLC0415 (cycle: recovery builds on this module)

        try:
            held.enter_context(journal.locked(directory))
            recover_layout(layout, directory)  # its own transaction, committed before ours
        except (journal.JournalError, OSError) as exc:
            raise WritebackError(f"an earlier write-back could not be recovered: {exc}") from exc
        step("begin")
        held.enter_context(_lint_kept_when_refused())
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
        base = _blob(planned.base_sha256) if planned.base_sha256 else b""
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


def record_event(
    layout: Layout,
    action: str,
    user: Any,
    meta: dict[str, Any],
    record: journal.Journal | None,
    **detail: Any,
) -> AuditEvent:
    failed = action == WRITEBACK_FAILED_ACTION
    body: dict[str, Any] = {
        "files": [],
        "already_on_disk": meta["already_on_disk"],
        "overwritten": meta["overwritten"],
        "allowed_findings": meta["allowed_findings"],
        "proposal": None if failed else meta["proposal"],
        "journal": record.id if record else None,
        **detail,
    }
    if failed:
        body["attempted_proposal"] = meta["proposal"]
    return AuditEvent.record(
        layout.workspace,
        action,
        user=user,
        actor=meta["actor"],
        layout=layout,
        target=layout.memories_dir,
        **body,
    )


# --- the journal's place ------------------------------------------------------------------


def journal_base() -> Path:
    """Where write-back and export journals live: ``var/journal`` under
    ``MEMORYUI_VAR_DIR`` (a ``MEMORYUI_JOURNAL_DIR`` setting overrides it, as the tests
    do), outside every workspace: the SDK never lists them."""
    default = Path(getattr(settings, "VAR_DIR", Path(settings.BASE_DIR) / "var")) / "journal"
    return Path(getattr(settings, "MEMORYUI_JOURNAL_DIR", default))


def journal_directory(layout: Layout, root: Path) -> Path:
    """The layout's journal directory, named by its workspace directory too: a journal
    is never found by a layout of another workspace."""
    key = hashlib.sha256(f"{root}\0{layout.memories_dir}".encode()).hexdigest()[:16]
    return journal_base() / "writeback" / f"layout-{layout.pk}-{key}"


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
