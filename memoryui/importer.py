"""Import a workspace (directory or SDK snapshot tar) into the database.

A re-runnable sync: unchanged files are skipped by hash, changed ones are stored again
and re-parsed, files gone from disk are marked missing (never deleted), and a changed
``MEMORY.md`` / ``memory_summary.md`` becomes a new version attributed to the agent.
Nothing on disk is ever written. Bad input becomes an entry in the report's errors and
the rest of the import goes on.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from generation import tree
from generation.tree import Entry, FileKind, LayoutDirs, Problem

from .models import (
    Blob,
    ImportRun,
    Layout,
    MemoryVersion,
    RawMemory,
    Rollout,
    RolloutSummary,
    Workspace,
    WorkspaceFile,
)

Progress = Callable[[str, int, int], None]
BATCH = 500


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

    @property
    def imported_anything(self) -> bool:
        return self.files > 0

    def as_json(self) -> dict[str, Any]:
        return {
            "workspace": self.workspace.name,
            "layouts": [layout.as_dict() for layout in self.layouts],
            "errors": self.errors,
        }


def default_limits() -> tree.Limits:
    return tree.Limits(
        huge_file_bytes=settings.MEMORYUI_HUGE_FILE_BYTES,
        max_file_bytes=settings.MEMORYUI_MAX_FILE_BYTES,
        max_total_bytes=settings.MEMORYUI_MAX_IMPORT_BYTES,
    )


WORKSPACE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def valid_workspace_name(name: str) -> bool:
    return bool(WORKSPACE_NAME_RE.fullmatch(name))


def default_name(source: Path) -> str:
    """A name from the path: the folder (its parent for SDK-style ``.../workspace``) or
    the archive's name without extensions, made URL-safe."""
    source = source.absolute()
    if source.is_file():
        name = source.name.removesuffix(".gz").removesuffix(".tgz").removesuffix(".tar")
    elif source.name == "workspace" and source.parent.name:
        name = source.parent.name
    else:
        name = source.name
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-._")[:100]
    return name or "workspace"


def import_workspace(
    source: Path,
    name: str | None = None,
    *,
    limits: tree.Limits | None = None,
    progress: Progress | None = None,
    user: Any = None,
) -> ImportResult:
    """Import ``source`` into the workspace called ``name`` (created if new).

    Raises ``tree.TreeError`` when the source cannot be read at all.
    """
    limits = limits or default_limits()
    source = Path(os.path.normpath(Path(source).absolute()))
    reader = tree.read_source(source, limits)  # raises TreeError before any write
    entries: list[Entry] = []
    problems: list[dict[str, str]] = []
    for item in reader:
        if isinstance(item, Problem):
            problems.append({"path": item.path, "error": item.error})
        else:
            entries.append(item)
            if progress and len(entries) % 200 == 0:
                progress("read", len(entries), 0)
    layouts = tree.discover_layouts(entries)
    problems.extend(_misplaced_layout_problems(entries, layouts))

    kind = Workspace.SourceKind.DIRECTORY if source.is_dir() else Workspace.SourceKind.SNAPSHOT
    with transaction.atomic():
        workspace, _ = Workspace.objects.get_or_create(
            name=name or default_name(source),
            defaults={"source_kind": kind, "source_path": str(source)},
        )
        if (workspace.source_kind, workspace.source_path) != (kind, str(source)):
            workspace.source_kind, workspace.source_path = kind, str(source)
            workspace.save(update_fields=["source_kind", "source_path"])
        sync = _Sync(workspace, layouts, limits, progress)
        result = sync.run(entries, problems, user)
    return result


def _misplaced_layout_problems(
    entries: list[Entry], layouts: list[LayoutDirs]
) -> list[dict[str, str]]:
    """A snapshot whose content sits under one top-level folder restores, but the SDK
    looks for memory at the workspace root and finds none: say so."""
    top = {PurePosixPath(layout.memories_dir).parts[0] for layout in layouts}
    if not layouts or len(top) != 1 or top & {tree.DEFAULT_MEMORIES_DIR}:
        return []
    roots = {PurePosixPath(e.path).parts[0] for e in entries}
    (folder,) = top
    if roots == {folder} and all("/" in layout.memories_dir for layout in layouts):
        return [
            {
                "path": folder,
                "error": "everything sits under one top-level folder; the SDK restores "
                "it there and will not find this memory at the workspace root",
            }
        ]
    return []


class _Sync:
    def __init__(
        self,
        workspace: Workspace,
        layouts: list[LayoutDirs],
        limits: tree.Limits,
        progress: Progress | None,
    ) -> None:
        self.workspace = workspace
        self.layout_dirs = layouts
        self.limits = limits
        self.progress = progress
        self.now = timezone.now()

    # -- layouts -------------------------------------------------------------------
    def sync_layouts(self) -> dict[str, Layout]:
        existing = {layout.memories_dir: layout for layout in self.workspace.layouts.all()}
        wanted = {d.memories_dir: d for d in self.layout_dirs}
        for memories_dir, dirs in wanted.items():
            layout = existing.get(memories_dir)
            if layout is None:
                existing[memories_dir] = Layout.objects.create(
                    workspace=self.workspace,
                    memories_dir=memories_dir,
                    sessions_dir=dirs.sessions_dir,
                )
            elif layout.sessions_dir != dirs.sessions_dir or layout.missing_since:
                layout.sessions_dir = dirs.sessions_dir
                layout.missing_since = None
                layout.save(update_fields=["sessions_dir", "missing_since"])
        gone = [m for m in existing if m not in wanted]
        Layout.objects.filter(
            workspace=self.workspace, memories_dir__in=gone, missing_since__isnull=True
        ).update(missing_since=self.now)
        return {m: existing[m] for m in wanted}

    # -- files ---------------------------------------------------------------------
    def run(
        self, entries: list[Entry], read_problems: list[dict[str, str]], user: Any
    ) -> ImportResult:
        layouts = self.sync_layouts()
        stored = {
            row[0]: row
            for row in WorkspaceFile.objects.filter(workspace=self.workspace).values_list(
                "path", "pk", "blob_id", "kind", "layout_id", "missing_since", "mode", "mtime"
            )
        }
        counts = {
            m: LayoutCounts(m, d.sessions_dir)
            for m, d in ((d.memories_dir, d) for d in self.layout_dirs)
        }
        seen: set[str] = set()
        to_create: list[WorkspaceFile] = []
        to_update: list[WorkspaceFile] = []
        blobs: dict[str, bytes] = {}
        parse_queue: list[tuple[WorkspaceFile, Entry, str | None]] = []
        added = changed = unchanged = 0

        for index, entry in enumerate(entries, start=1):
            placement = tree.classify(entry.path, self.layout_dirs, is_dir=entry.is_dir)
            kind = placement.kind
            layout = layouts[placement.layout.memories_dir] if placement.layout else None
            if kind == FileKind.ROLLOUT:
                stem = PurePosixPath(entry.path).name.removesuffix(".jsonl")
                if not tree.ROLLOUT_ID_RE.fullmatch(stem):
                    kind = FileKind.WORKSPACE_FILE
            if layout is not None:
                self._count(counts[layout.memories_dir], kind)
            seen.add(entry.path)
            digest = hashlib.sha256(entry.data).hexdigest() if entry.data is not None else None
            old = stored.get(entry.path)
            layout_id = layout.pk if layout else None
            if old is not None and (old[2], old[3], old[4], old[5]) == (
                digest,
                kind,
                layout_id,
                None,
            ):
                unchanged += 1
                if (old[6], old[7]) != (entry.mode, entry.mtime):
                    to_update.append(WorkspaceFile(pk=old[1], mode=entry.mode, mtime=entry.mtime))
                continue
            if digest is not None and entry.data is not None:
                blobs[digest] = entry.data
            obj = WorkspaceFile(
                pk=old[1] if old else None,
                workspace=self.workspace,
                layout=layout,
                path=entry.path,
                kind=kind,
                blob_id=digest,
                size=len(entry.data) if entry.data is not None else 0,
                mode=entry.mode,
                mtime=entry.mtime,
                changed_at=self.now,
                missing_since=None,
            )
            obj.problem = self._file_problem(entry, kind, placement.kind)
            if old is None:
                added += 1
                to_create.append(obj)
            else:
                changed += 1
                to_update.append(obj)
            if entry.data is not None:
                parse_queue.append((obj, entry, layout.memories_dir if layout else None))
            if self.progress and index % 200 == 0:
                self.progress("store", index, len(entries))

        self._store_blobs(blobs)
        WorkspaceFile.objects.bulk_create(to_create, batch_size=BATCH)
        full = [f for f in to_update if f.path]
        stat_only = [f for f in to_update if not f.path]
        WorkspaceFile.objects.bulk_update(
            full,
            [
                "layout",
                "kind",
                "blob",
                "size",
                "mode",
                "mtime",
                "changed_at",
                "missing_since",
                "problem",
            ],
            batch_size=BATCH,
        )
        WorkspaceFile.objects.bulk_update(stat_only, ["mode", "mtime"], batch_size=BATCH)

        self._parse(parse_queue, layouts)
        missing_paths = [p for p, row in stored.items() if p not in seen and row[5] is None]
        for start in range(0, len(missing_paths), BATCH):
            WorkspaceFile.objects.filter(
                workspace=self.workspace, path__in=missing_paths[start : start + BATCH]
            ).update(missing_since=self.now)
        new_versions = self._record_versions(parse_queue, layouts)

        errors = list(read_problems)
        errors.extend(
            {"path": path, "error": problem}
            for path, problem in WorkspaceFile.objects.present()
            .with_problems()
            .filter(workspace=self.workspace)
            .order_by("path")
            .values_list("path", "problem")
        )
        present = len(entries)
        if present == 0:
            status = ImportRun.Status.FAILED
        elif errors:
            status = ImportRun.Status.WITH_ERRORS
        else:
            status = ImportRun.Status.OK
        layout_counts = [counts[d.memories_dir] for d in self.layout_dirs]
        run = ImportRun.objects.create(
            workspace=self.workspace,
            finished_at=timezone.now(),
            status=status,
            added=added,
            changed=changed,
            unchanged=unchanged,
            missing=len(missing_paths),
            report={
                "layouts": [c.as_dict() for c in layout_counts],
                "errors": errors,
                "new_versions": new_versions,
            },
            triggered_by=user if getattr(user, "pk", None) else None,
        )
        self.workspace.last_imported_at = run.finished_at
        self.workspace.save(update_fields=["last_imported_at"])
        return ImportResult(
            workspace=self.workspace,
            run=run,
            layouts=layout_counts,
            errors=errors,
            added=added,
            changed=changed,
            unchanged=unchanged,
            missing=len(missing_paths),
            files=present,
            new_versions=new_versions,
        )

    @staticmethod
    def _count(counts: LayoutCounts, kind: FileKind) -> None:
        if kind == FileKind.ROLLOUT:
            counts.rollouts += 1
        elif kind == FileKind.RAW_MEMORY:
            counts.raw_memories += 1
        elif kind == FileKind.ROLLOUT_SUMMARY:
            counts.rollout_summaries += 1
        elif kind == FileKind.MEMORY_INDEX:
            counts.memory_md = True
        elif kind == FileKind.MEMORY_SUMMARY:
            counts.memory_summary_md = True
        elif kind == FileKind.SKILL:
            counts.skills += 1

    def _file_problem(self, entry: Entry, kind: FileKind, placed_kind: FileKind) -> str:
        """Problems that depend only on the bytes; parse problems are added later."""
        notes = []
        if placed_kind == FileKind.ROLLOUT and kind != FileKind.ROLLOUT:
            notes.append(
                "file name is not a valid rollout id (a letter or digit, then up to 127 "
                "letters, digits, '.', '_' or '-'); kept as a plain file"
            )
        if entry.data is not None and len(entry.data) > self.limits.huge_file_bytes:
            notes.append(
                f"large file ({tree.human_size(len(entry.data))}, over "
                f"{tree.human_size(self.limits.huge_file_bytes)}): stored in full, "
                "pages show its head and tail"
            )
        return "; ".join(notes)

    @staticmethod
    def _store_blobs(blobs: dict[str, bytes]) -> None:
        digests = list(blobs)
        have: set[str] = set()
        for start in range(0, len(digests), BATCH):
            have.update(
                Blob.objects.filter(pk__in=digests[start : start + BATCH]).values_list(
                    "pk", flat=True
                )
            )
        Blob.objects.bulk_create(
            [
                Blob(sha256=d, size=len(data), data=data)
                for d, data in blobs.items()
                if d not in have
            ],
            batch_size=100,
            ignore_conflicts=True,
        )

    # -- parsed rows ---------------------------------------------------------------
    def _parse(
        self, queue: list[tuple[WorkspaceFile, Entry, str | None]], layouts: dict[str, Layout]
    ) -> None:
        rollouts: list[Rollout] = []
        raws: list[RawMemory] = []
        summaries: list[tuple[WorkspaceFile, Entry, Layout]] = []
        problem_updates: list[WorkspaceFile] = []
        known_ids: dict[int, set[str]] = {}

        for obj, entry, memories_dir in queue:
            layout = layouts[memories_dir] if memories_dir else None
            assert entry.data is not None
            notes: list[str] = []
            if obj.kind == FileKind.ROLLOUT and layout is not None:
                parsed = tree.parse_rollout(entry.data)
                notes.extend(parsed.problems)
                rollout_id = PurePosixPath(obj.path).name.removesuffix(".jsonl")
                known_ids.setdefault(layout.pk, set()).add(rollout_id)
                rollouts.append(
                    Rollout(
                        layout=layout,
                        file=obj,
                        rollout_id=rollout_id,
                        segment_count=len(parsed.segments),
                        item_count=parsed.item_count,
                        updated_at_raw=parsed.updated_at[:64],
                        updated_at=_parse_datetime(parsed.updated_at),
                        terminal_state=parsed.terminal_state[:32],
                        title=parsed.title,
                    )
                )
            elif obj.kind in (FileKind.RAW_MEMORY, FileKind.ROLLOUT_SUMMARY) and layout is not None:
                text, bad = tree.decode_text(entry.data)
                if bad:
                    notes.append(bad)
                if obj.kind == FileKind.RAW_MEMORY:
                    raw = tree.parse_raw_memory(text)
                    notes.extend(raw.problems)
                    h = raw.headers
                    raws.append(
                        RawMemory(
                            layout=layout,
                            file=obj,
                            rollout_id=(
                                raw.rollout_id or PurePosixPath(obj.path).name.removesuffix(".md")
                            )[:128],
                            updated_at_raw=h.get("updated_at", "")[:64],
                            rollout_path=h.get("rollout_path", "")[:1024],
                            rollout_summary_file=h.get("rollout_summary_file", "")[:1024],
                            terminal_state=h.get("terminal_state", "")[:32],
                        )
                    )
                    if raw.rollout_id:
                        known_ids.setdefault(layout.pk, set()).add(raw.rollout_id)
                else:
                    summaries.append((obj, entry, layout))
            elif obj.kind in (
                FileKind.MEMORY_INDEX,
                FileKind.MEMORY_SUMMARY,
                FileKind.SKILL,
                FileKind.RAW_MEMORIES_MERGED,
            ):
                _, bad = tree.decode_text(entry.data)
                if bad:
                    notes.append(bad)
            elif obj.kind == FileKind.SELECTION:
                selection = tree.parse_selection(entry.data)
                if selection.problem:
                    notes.append(selection.problem)
            if notes:
                obj.problem = "; ".join(filter(None, [obj.problem, *notes]))
                problem_updates.append(obj)

        summary_rows = []
        for obj, entry, layout in summaries:
            text, _ = tree.decode_text(entry.data or b"")
            ids = known_ids.get(layout.pk)
            if ids is None:
                ids = known_ids[layout.pk] = set(
                    Rollout.objects.filter(layout=layout).values_list("rollout_id", flat=True)
                )
            summary = tree.parse_rollout_summary(PurePosixPath(obj.path).name, text, ids)
            if summary.problems:
                obj.problem = "; ".join(filter(None, [obj.problem, *summary.problems]))
                problem_updates.append(obj)
            summary_rows.append(
                RolloutSummary(
                    layout=layout,
                    file=obj,
                    rollout_id=summary.rollout_id[:128],
                    slug=summary.slug[:128],
                    session_id=summary.headers.get("session_id", "")[:128],
                    updated_at_raw=summary.headers.get("updated_at", "")[:64],
                    terminal_state=summary.headers.get("terminal_state", "")[:32],
                )
            )

        if problem_updates:
            WorkspaceFile.objects.bulk_update(problem_updates, ["problem"], batch_size=BATCH)
        file_ids = [obj.pk for obj, _, _ in queue]
        _upsert_by_file(Rollout, rollouts, file_ids)
        _upsert_by_file(RawMemory, raws, file_ids)
        _upsert_by_file(RolloutSummary, summary_rows, file_ids)

    def _record_versions(
        self, queue: Iterable[tuple[WorkspaceFile, Entry, str | None]], layouts: dict[str, Layout]
    ) -> list[str]:
        documents = {
            FileKind.MEMORY_INDEX: MemoryVersion.Document.MEMORY_MD,
            FileKind.MEMORY_SUMMARY: MemoryVersion.Document.MEMORY_SUMMARY,
        }
        created = []
        for obj, _, memories_dir in queue:
            document = documents.get(FileKind(obj.kind))
            if document is None or memories_dir is None:
                continue
            layout = layouts[memories_dir]
            latest = (
                MemoryVersion.objects.filter(layout=layout, document=document)
                .order_by("-number")
                .first()
            )
            if latest is not None and latest.blob_id == obj.blob_id:
                continue
            MemoryVersion.objects.create(
                layout=layout,
                document=document,
                number=(latest.number + 1) if latest else 1,
                blob_id=obj.blob_id,
                author_kind=MemoryVersion.Author.AGENT,
                reason="imported from disk" if latest is None else "changed on disk",
            )
            created.append(obj.path)
        return created


def _upsert_by_file(model: Any, rows: list[Any], file_ids: list[int]) -> None:
    """Update the rows of re-parsed files in place (their primary keys, and whatever
    points at them, survive), create the new ones, and delete rows of files that are
    no longer of this kind."""
    existing: dict[int, int] = {}
    for start in range(0, len(file_ids), BATCH):
        existing.update(
            model.objects.filter(file_id__in=file_ids[start : start + BATCH]).values_list(
                "file_id", "pk"
            )
        )
    keep = set()
    creates, updates = [], []
    for row in rows:
        pk = existing.get(row.file.pk)
        if pk is None:
            creates.append(row)
        else:
            row.pk = pk
            keep.add(pk)
            updates.append(row)
    stale = [pk for pk in existing.values() if pk not in keep]
    for start in range(0, len(stale), BATCH):
        model.objects.filter(pk__in=stale[start : start + BATCH]).delete()
    fields = [
        f.name for f in model._meta.concrete_fields if not f.primary_key and f.name not in ("file",)
    ]
    model.objects.bulk_update(updates, fields, batch_size=BATCH)
    model.objects.bulk_create(creates, batch_size=BATCH)


def _parse_datetime(value: str) -> datetime | None:
    if not value or value == "unknown":
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed
