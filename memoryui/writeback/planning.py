"""A layout's write-back plan: what its directory should hold, from the database alone
(``plan_layout``): the current documents, the latest approved proposal not yet written
back (its selection, ``raw_memories.md``, phase one's files and the rollout summaries
they replace) and the current skill files, with what is refused or held back and why;
then sorted against the disk (``check_disk``)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.utils import timezone

from generation import export, tree
from generation.export import ExportError
from generation.kinds import FileKind
from generation.tree import LayoutDirs

from .. import skills
from ..models import (
    AuditEvent,
    Blob,
    Layout,
    MemoryVersion,
    PhaseOneJob,
    PhaseOneResult,
    Proposal,
    RolloutSummary,
    Workspace,
    WorkspaceFile,
)
from .files import (
    DOCUMENT_FILES,
    WRITEBACK_ACTION,
    Conflict,
    Plan,
    PlannedFile,
    Refusal,
    WritebackError,
    layout_dirs,
    skill_path_problem,
)
from .linting import lint_planned

# Phase one writes exactly these shapes, relative to the memories dir.
_PHASE_ONE_PATH = re.compile(r"^(?:raw_memories|rollout_summaries)/[^/]+\.md$")


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

    from ..entry_checks import agent_version_flags  # noqa: PLC0415 (deferred: the poisoning rules, needed for an agent's version awaiting review only)

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
    old = blob_bytes(planned.base_sha256)
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
    from ..entry_checks import held_entries  # noqa: PLC0415 (deferred: the poisoning rules, for approved proposals only)

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
        if skill_path_problem(version.path):
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


def blob_bytes(sha256: str) -> bytes:
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
