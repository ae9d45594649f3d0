"""The memory the remote snapshot store serves sandboxes, layout by layout.

Each of ``MEMORY.md``, ``memory_summary.md`` and every skill file is served at its
latest version that is approved and passes lint:

- approved: not an agent change awaiting review (a sandbox's upload brings those),
  unless the workspace's policy serves unreviewed memory;
- passes lint: no finding, or only findings an admin allowed for that content.

A version that fails either is passed over for the one before it; a file with no
such version is left out of the sandbox's archive. Whatever is held back is listed,
so the dashboard can show it, and a lint finding that holds back memory is audited
once per version and finding (``snapshot_store.held_back``, the ``memory.held_back``
webhook event). Every other file of a layout's memories folder (rollout summaries, raw
memories, ``raw_memories.md``) is the workspace's, merged from every sandbox, except that
a sandbox is served its own raw memory or rollout summary where another sandbox uploaded
the same rollout id with other bytes since (``keep_own_files``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from generation.kinds import FileKind
from generation.lint import Finding
from generation.tree import LayoutDirs

from . import documents, lint_allowances
from .models import (
    AuditEvent,
    Blob,
    Layout,
    MemoryVersion,
    SkillFileVersion,
    SnapshotStorePolicy,
    UploadedSnapshot,
    Workspace,
    WorkspaceFile,
)
from .writeback import (
    DOCUMENT_FILES,
    PlannedFile,
    lint_planned,
    proposal_memory_files,
    skill_path_problem,
)

HELD_BACK_ACTION = "snapshot_store.held_back"
FORGETTABLE = (WorkspaceFile.Kind.RAW_MEMORY, WorkspaceFile.Kind.ROLLOUT_SUMMARY)
AWAITS_REVIEW = "awaits review"
CURATED_KINDS = {FileKind.MEMORY_INDEX, FileKind.MEMORY_SUMMARY, FileKind.SKILL}


@dataclass(frozen=True)
class HeldBack:
    """A file whose latest version sandboxes do not get, and why."""

    layout: Layout
    path: str  # relative to the workspace
    latest: int  # the version held back
    served: int | None  # the version served instead; None: the file is left out
    reason: str  # why the latest is passed over: AWAITS_REVIEW or "lint: <message>"
    findings: tuple[Finding, ...] = ()  # the first lint findings met going back
    linted: int = 0  # the version those findings are about


@dataclass
class ServedLayout:
    layout: Layout
    files: dict[str, bytes] = field(default_factory=dict)  # workspace path -> bytes
    held: list[HeldBack] = field(default_factory=list)
    # The version of each document served ("memory_md" -> number): an agent's change in
    # the sandbox's next upload is based on it (``memoryui.agent_proposals``).
    versions: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Candidate:
    number: int
    needs_review: bool
    blob_id: str | None  # None: a deleted skill file


_DOCUMENTS = {
    FileKind.MEMORY_INDEX: MemoryVersion.Document.MEMORY_MD.value,
    FileKind.MEMORY_SUMMARY: MemoryVersion.Document.MEMORY_SUMMARY.value,
}


def serves_unreviewed(workspace: Workspace) -> bool:
    return SnapshotStorePolicy.objects.filter(workspace=workspace, serve_unreviewed=True).exists()


def served_layouts(workspace: Workspace, *, user: Any = None) -> list[ServedLayout]:
    """What each present layout's memories folder holds for a sandbox (without the
    workspace's other files: those are the sandbox's own)."""
    layouts = list(workspace.layouts.present().order_by("memories_dir"))
    dirs = [LayoutDirs(layout.memories_dir, layout.sessions_dir) for layout in layouts]
    unreviewed = serves_unreviewed(workspace)
    served = []
    for layout in layouts:
        layout.workspace = workspace
        served.append(_serve_layout(layout, dirs, unreviewed))
    _audit_lint_holds(workspace, [h for s in served for h in s.held], user)
    return served


def _serve_layout(layout: Layout, dirs: list[LayoutDirs], unreviewed: bool) -> ServedLayout:
    result = ServedLayout(layout)
    # An approved proposal not yet written back brings raw memories and rollout
    # summaries the approved documents cite: they come with it.
    for planned in proposal_memory_files(layout, dirs):
        if planned.kind not in CURATED_KINDS and planned.data is not None:
            result.files[planned.path] = planned.data
    histories = list(_curated_histories(layout))
    # The first eligible version of every file in one query; older ones (lint fell
    # back) one by one.
    first = [_eligible(candidates, unreviewed) for _, candidates, _ in histories]
    data = _blob_data([c.blob_id for c in first if c is not None and c.blob_id])
    for path, candidates, kind in histories:
        _choose(result, path, candidates, kind, dirs, unreviewed, data)
    return result


def _eligible(candidates: list[_Candidate], unreviewed: bool) -> _Candidate | None:
    return next((c for c in candidates if unreviewed or not c.needs_review), None)


def _blob_data(blob_ids: list[str]) -> dict[str, bytes]:
    rows = Blob.objects.filter(pk__in=blob_ids).values_list("pk", "data")
    return {pk: bytes(blob) for pk, blob in rows}


def _curated_histories(layout: Layout) -> Iterator[tuple[str, list[_Candidate], FileKind]]:
    """(workspace path, versions newest first, kind) of each document and skill file."""
    rows = (
        MemoryVersion.objects.filter(layout=layout)
        .order_by("document", "-number")
        .values_list("document", "number", "needs_review", "blob_id")
    )
    histories: dict[str, list[_Candidate]] = {}
    for document, number, needs_review, blob_id in rows:
        histories.setdefault(document, []).append(_Candidate(number, needs_review, blob_id))
    for document, name in DOCUMENT_FILES.items():
        kind = FileKind.MEMORY_INDEX if name == "MEMORY.md" else FileKind.MEMORY_SUMMARY
        if document in histories:
            yield f"{layout.memories_dir}/{name}", histories[document], kind
    skills: dict[str, list[_Candidate]] = {}
    skill_rows = (
        SkillFileVersion.objects.filter(layout=layout)
        .order_by("path", "-number")
        .values_list("path", "number", "needs_review", "blob_id")
    )
    for path, number, needs_review, blob_id in skill_rows:
        skills.setdefault(path, []).append(_Candidate(number, needs_review, blob_id))
    for rel, candidates in skills.items():
        if not skill_path_problem(rel):
            yield f"{layout.memories_dir}/{rel}", candidates, FileKind.SKILL


def _choose(
    result: ServedLayout,
    path: str,
    candidates: list[_Candidate],
    kind: FileKind,
    dirs: list[LayoutDirs],
    unreviewed: bool,
    data: dict[str, bytes],
) -> None:
    """Serve the newest approved version of ``path`` that passes lint, and note what
    was held back: why the latest was passed over, and the first lint finding met."""
    latest = candidates[0]
    reasons: list[str] = []
    linted: tuple[int, tuple[Finding, ...]] | None = None
    served: int | None = None
    for candidate in candidates:
        if candidate.needs_review and not unreviewed:
            reasons.append(AWAITS_REVIEW)
            continue
        if candidate.blob_id is None:
            served = candidate.number  # a deleted skill file: left out
            break
        content = data.get(candidate.blob_id) or documents.content(candidate.blob_id)
        blocking = _blocking_findings(result.layout, path, content, kind, dirs)
        if blocking:
            reasons.append(f"lint: {blocking[0].message}")
            linted = linted or (candidate.number, tuple(blocking))
            continue
        result.files[path] = content
        served = candidate.number
        if kind in _DOCUMENTS:
            result.versions[_DOCUMENTS[kind]] = served
        break
    if served != latest.number:
        number, findings = linted or (latest.number, ())
        result.held.append(
            HeldBack(result.layout, path, latest.number, served, reasons[0], findings, number)
        )


def _blocking_findings(
    layout: Layout, path: str, data: bytes, kind: FileKind, dirs: list[LayoutDirs]
) -> list[Finding]:
    planned = PlannedFile(path, data, "", None, kind)
    findings = lint_planned([planned], dirs)
    if not findings:
        return []
    assert planned.sha256 is not None
    allowed = lint_allowances.standing(layout.workspace, findings, {path: planned.sha256})
    return [f for f in findings if f.id not in allowed]


def _audit_lint_holds(workspace: Workspace, held: list[HeldBack], user: Any) -> None:
    """One audit event (and so one ``memory.held_back`` webhook) per version and
    finding that lint holds back; later downloads find it and stay quiet."""
    for hold in held:
        if not hold.findings:
            continue
        ids = sorted(f.id for f in hold.findings)
        known = AuditEvent.objects.filter(
            workspace=workspace,
            action=HELD_BACK_ACTION,
            target=hold.path,
            detail__version=hold.linted,
            detail__findings=ids,
        )
        if known.exists():
            continue
        AuditEvent.record(
            workspace,
            HELD_BACK_ACTION,
            user=user,
            actor="" if getattr(user, "pk", None) else "remote snapshot store",
            layout=hold.layout,
            target=hold.path,
            version=hold.linted,
            served=hold.served,
            findings=ids,
            messages=[f.message for f in hold.findings],
        )


def keep_own_files(
    workspace: Workspace, snapshot: UploadedSnapshot | None, served: list[ServedLayout]
) -> set[str]:
    """The sandbox's own raw memories and rollout summaries that another sandbox
    uploaded since with other bytes (``kept_files``; one rollout id, two sandboxes) are
    served to it as it uploaded them, while the workspace still holds them; the paths
    so served."""
    kept = (snapshot.kept_files or {}) if snapshot is not None else {}
    if not kept:
        return set()
    present = set(
        WorkspaceFile.objects.present()
        .filter(workspace=workspace, path__in=list(kept), kind__in=FORGETTABLE)
        .values_list("path", flat=True)
    )
    data = dict(Blob.objects.filter(pk__in=set(kept.values())).values_list("pk", "data"))
    served_paths: set[str] = set()
    # The innermost layout first: a nested layout's files are its own.
    for layout in sorted(served, key=lambda s: -len(s.layout.memories_dir)):
        for path in sorted(present - served_paths):
            digest = kept[path]
            if path.startswith(layout.layout.memories_dir + "/") and digest in data:
                layout.files[path] = bytes(data[digest])
                served_paths.add(path)
    return served_paths
