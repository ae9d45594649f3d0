"""Import a workspace (directory or SDK snapshot tar) into the database.

A re-runnable sync: unchanged files are skipped, changed ones are stored again and
re-parsed, files gone from disk are marked missing (never deleted), and a changed
``MEMORY.md`` / ``memory_summary.md`` becomes a new version attributed to the agent.
Nothing on disk is ever written. Bad input becomes an entry in the report's errors and
the rest of the import goes on.

Unchanged is decided by sha256. For a directory, a file whose size and nanosecond
modification time equal what the last import stored is not read again (as git's index
does), unless it was modified so close to that import that the two could coincide.

The sync writes tens of thousands of rows for a large tree, so it inserts with
``executemany`` rather than building model instances: the ORM's per-object cost was
most of the import time (see ``bench/README.md``).
"""

from __future__ import annotations

import functools
import gc
import hashlib
import os
import re
import stat as stat_mode
import tarfile
from array import array
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple

from django.conf import settings
from django.db import connection, models, transaction
from django.utils import timezone

from generation import tree
from generation.kinds import FileKind
from generation.tree import LayoutDirs, Problem

from . import observability, skills, usage
from .models import (
    EPOCH,
    Blob,
    ImportRun,
    Layout,
    MemoryVersion,
    RawMemory,
    Rollout,
    RolloutSummary,
    SearchDocument,
    UploadedSnapshot,
    Workspace,
    WorkspaceFile,
)

Progress = Callable[[str, int, int], None]
CHUNK = 1000
# New and changed files are parsed and written this many at a time (their bytes then
# dropped): few enough to bound memory, many enough for each table's index pages to
# stay in cache while it is written.
STORE_CHUNK = 2000
ANALYZE_AFTER = 1000
# A file modified this close to the previous import may share its mtime with the
# version that import read; such files are always read again.
RACY_WINDOW = timedelta(seconds=2)
ROLLOUT_REUPLOADED = (
    "rollout uploaded before with other bytes (by another sandbox, or rewritten by this "
    "one): the workspace shows this upload's; each sandbox's download keeps its own"
)
WORKSPACE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


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

    def count(self, kind: str) -> None:
        if kind == FileKind.ROLLOUT:
            self.rollouts += 1
        elif kind == FileKind.RAW_MEMORY:
            self.raw_memories += 1
        elif kind == FileKind.ROLLOUT_SUMMARY:
            self.rollout_summaries += 1
        elif kind == FileKind.MEMORY_INDEX:
            self.memory_md = True
        elif kind == FileKind.MEMORY_SUMMARY:
            self.memory_summary_md = True
        elif kind == FileKind.SKILL:
            self.skills += 1


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


def default_limits() -> tree.Limits:
    return tree.Limits(
        huge_file_bytes=settings.MEMORYUI_HUGE_FILE_BYTES,
        max_file_bytes=settings.MEMORYUI_MAX_FILE_BYTES,
        max_total_bytes=settings.MEMORYUI_MAX_IMPORT_BYTES,
    )


@contextmanager
def _gc_paused() -> Iterator[None]:
    # The sync keeps every file of the tree alive until it ends, so each collection
    # walks all of them for nothing: a sixth of the import time on a large tree.
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _import_fields(result: ImportResult) -> dict[str, Any]:
    return {
        "files": result.files,
        "added": result.added,
        "changed": result.changed,
        "missing": result.missing,
        "problems": len(result.errors),
        "outcome": "ok" if result.imported_anything else "empty",
    }


@observability.observed(
    "import",
    lambda source, name=None, **_: {
        "workspace": name or default_name(Path(source)),
        "source": source,
    },
    _import_fields,
)
def import_workspace(
    source: Path,
    name: str | None = None,
    *,
    limits: tree.Limits | None = None,
    progress: Progress | None = None,
    user: Any = None,
    scheduled: bool = False,
    merge: str = "",
    fill_only: bool = False,
) -> ImportResult:
    """Import ``source`` into the workspace called ``name`` (created if new).

    ``merge`` (a snapshot id): the source is one sandbox's upload to the remote snapshot
    store, merged into the workspace rather than synced: nothing it lacks is marked gone
    (other sandboxes have their own files), its in-tree symbolic links are left to its
    stored archive, and every change it brings to the memory documents or skills is an
    agent version to review, a layout's first one included. With ``fill_only`` (an
    upload merged after a later upload of the same sandbox was), it only adds the files
    the workspace lacks: what it holds already came from the later upload, and stays.

    Imports of one workspace run one at a time (its row is locked on PostgreSQL; SQLite
    has one writer). Raises ``tree.TreeError`` when the source cannot be read at all, or
    holds no files for a new workspace (which is then not created).
    """
    limits = limits or default_limits()
    source = Path(os.path.normpath(Path(source).absolute()))
    if source.is_symlink():
        raise tree.TreeError(f"{source} is a symbolic link; give the real path.")
    is_dir = source.is_dir()
    archive = None if is_dir else _read(source, limits, bool(merge))  # raises TreeError
    started = timezone.now()
    kind = Workspace.SourceKind.DIRECTORY if is_dir else Workspace.SourceKind.SNAPSHOT
    with _gc_paused(), transaction.atomic():
        workspace, created = Workspace.objects.get_or_create(
            name=name or default_name(source),
            defaults={"source_kind": kind, "source_path": str(source)},
        )
        # FOR NO KEY UPDATE: imports of one workspace wait for each other, while rows
        # that only refer to it (an upload's job, queued meanwhile) are written at once.
        workspace = Workspace.objects.select_for_update(no_key=True).get(pk=workspace.pk)
        if not merge and (workspace.source_kind, workspace.source_path) != (kind, str(source)):
            workspace.source_kind, workspace.source_path = kind, str(source)
            workspace.save(update_fields=["source_kind", "source_path"])
        sync = _Sync(workspace, limits, progress, started, merge)
        sync.fill_only = bool(merge) and fill_only
        if archive is None:
            sync.collect_directory(source)
        else:
            sync.collect_entries(archive)
        result = sync.finish(user, scheduled)
        if created and not result.imported_anything:  # rolls the new workspace back
            raise tree.TreeError(
                f"{source} holds no files: nothing to import, no workspace created "
                "(a workspace has a memories/ folder, and usually sessions/)."
                + _problems_in_brief(result.errors)
            )
        return result


def _problems_in_brief(errors: list[dict[str, str]], shown: int = 3) -> str:
    """What stood in the way of an import that found nothing, for its one-line error
    (a truncated archive, say, says so)."""
    if not errors:
        return ""
    listed = "; ".join(f"{e['path']}: {e['error']}" for e in errors[:shown])
    more = f"; and {len(errors) - shown} more" if len(errors) > shown else ""
    return f" Problems found ({len(errors)}): {listed}{more}."


def sync_paths(workspace: Workspace, root: Path, paths: Collection[str]) -> None:
    """Bring the rows of ``paths`` (files and directories under ``root``, the workspace's
    directory) to what is on disk now, as an import would, without looking at any other
    file: what a write-back does after writing a few files of a large tree. Paths gone
    from disk are marked missing. Records no import run: nothing else was compared."""
    wanted = sorted({p for path in paths for p in _with_parents(path)})
    with _gc_paused(), transaction.atomic():
        workspace = Workspace.objects.select_for_update(no_key=True).get(pk=workspace.pk)
        sync = _Sync(workspace, default_limits(), None, timezone.now())
        sync.only = wanted
        sync.collect_paths(root, wanted)
        sync._sync_rows()


def _with_parents(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def _read(source: Path, limits: tree.Limits, links: bool) -> Iterator[tree.Entry | Problem]:
    """The archive's entries; with ``links``, in-tree symbolic links are passed over
    (the remote store serves them from the stored archive) and hostile ones refused."""
    if not links:
        return tree.read_source(source, limits)
    if not tarfile.is_tarfile(source):
        raise tree.TreeError(f"{source} is not a tar archive.")
    return (
        item
        for item in tree.read_archive(source, limits, links=True)
        if not isinstance(item, tree.Link)
    )


@dataclass(slots=True)
class _Item:
    path: str
    is_dir: bool
    size: int
    mode: int
    mtime_ns: int
    data: bytes | None = None  # None for directories and files not read again
    digest: str | None = None
    kind: str = FileKind.WORKSPACE_FILE
    layout_id: int | None = None
    problem: str = ""
    file_id: int | None = None
    memories_dir: str | None = None
    stat: tree.Stat | None = None


class _Stored(NamedTuple):
    file_id: int
    blob_id: str | None
    kind: str
    layout_id: int | None
    present: bool
    mode: int
    mtime_ns: int
    size: int


class _Sync:
    def __init__(
        self,
        workspace: Workspace,
        limits: tree.Limits,
        progress: Progress | None,
        started: datetime,
        merge: str = "",
    ) -> None:
        self.workspace = workspace
        self.merge = merge
        # Agent versions awaiting review this import recorded, by layout (``_propose``).
        self.agent_versions: dict[int, tuple[Layout, list[MemoryVersion]]] = {}
        self.touched: list[_Item] = []
        self.limits = limits
        self.progress = progress
        self.now = started
        self.items: dict[str, _Item] = {}
        self.problems: list[dict[str, str]] = []
        self.found_reads: list[usage.FoundReads] = []
        self.root: Path | None = None
        # A directory listed exactly as at the previous import (``_listing``): its run,
        # whose outcome this import repeats without looking at any file or stored row.
        self.same_as: ImportRun | None = None
        self.listing = ""
        self.listed = 0
        # A write-back's re-sync: only these paths are looked at, stored or on disk.
        self.only: list[str] | None = None
        # Reading stopped early (size limit, damaged archive): what was not seen is not
        # taken as gone from disk.
        self.complete = True
        self.stopped = ""
        # A merge of an upload older than one merged already: existing files stay.
        self.fill_only = False

    @cached_property
    def stored(self) -> dict[str, _Stored]:
        """The workspace's file rows by path (loaded when first needed: an unchanged
        directory never needs them)."""
        sql = (
            "SELECT path, id, blob_id, kind, layout_id, missing_since, mode, mtime_ns, size"
            f" FROM {WorkspaceFile._meta.db_table} WHERE workspace_id = %s"
        )
        params: list[Any] = [self.workspace.pk]
        if self.only is not None:
            sql += f" AND path IN ({', '.join(['%s'] * len(self.only))})"
            params += self.only
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return {
                path: _Stored(pk, blob, kind, layout, gone is None, mode, mtime_ns, size)
                for path, pk, blob, kind, layout, gone, mode, mtime_ns, size in cursor.fetchall()
            }

    # -- reading -----------------------------------------------------------------
    def collect_directory(self, root: Path) -> None:
        self.root = root
        previous = self.workspace.imports.order_by("-started_at", "-pk").first()
        racy_from = int((previous.started_at - RACY_WINDOW).timestamp() * 1e9) if previous else 0
        scanned = list(tree.scan_directory(root, self.limits))
        stats = [s for s in scanned if type(s) is tree.Stat]
        self.listed = len(stats)
        if not self.merge:
            self.listing = _listing(root, self.limits, scanned, stats)
            if (
                previous is not None
                and previous.report.get("listing") == self.listing
                and all(s.is_dir or s.mtime_ns < racy_from for s in stats)
            ):
                # Every path, size, mtime and mode as the previous import saw them, and
                # the importer is the only writer of the rows: nothing to read or write.
                self.same_as = previous
                return
        total = 0
        for stat in scanned:
            if isinstance(stat, Problem):
                self.problems.append({"path": stat.path, "error": stat.error})
                continue
            item = _Item(stat.path, stat.is_dir, stat.size, stat.mode, stat.mtime_ns)
            item.stat = stat
            self.items[stat.path] = item
            if stat.is_dir:
                continue
            old = self.stored.get(stat.path)
            if (
                old is not None
                and old.present
                and old.blob_id is not None
                and (old.size, old.mtime_ns) == (stat.size, stat.mtime_ns)
                and stat.mtime_ns < racy_from
            ):
                item.digest = old.blob_id  # trusted: unchanged since the last import
                continue
            total += stat.size
            if total > self.limits.max_total_bytes:
                self.problems.append({"path": stat.path, "error": tree.total_exceeded(self.limits)})
                del self.items[stat.path]
                self.complete = False
                self.stopped = tree.total_exceeded(self.limits)
                break
            self._read(item)
            if self.progress and len(self.items) % 500 == 0:
                self.progress("read", len(self.items), 0)

    def _read(self, item: _Item) -> bool:
        assert self.root is not None
        try:
            data = tree.read_file(self.root, item.path, item.stat)
        except OSError as exc:
            self.problems.append(
                {"path": item.path, "error": f"could not be read ({exc.strerror or exc})"}
            )
            self.items.pop(item.path, None)
            return False
        item.data = data
        item.size = len(data)
        item.digest = hashlib.sha256(data).hexdigest()
        return True

    def collect_entries(self, entries: Iterator[tree.Entry | Problem]) -> None:
        for entry in entries:
            if isinstance(entry, Problem):
                self.problems.append({"path": entry.path, "error": entry.error})
                if entry.stops and self.complete:
                    self.complete = False
                    self.stopped = entry.error
                continue
            item = _Item(
                entry.path,
                entry.is_dir,
                len(entry.data or b""),
                entry.mode,
                entry.mtime_ns,
                entry.data,
                hashlib.sha256(entry.data).hexdigest() if entry.data is not None else None,
            )
            self.items[entry.path] = item
            if self.progress and len(self.items) % 500 == 0:
                self.progress("read", len(self.items), 0)

    def collect_paths(self, root: Path, paths: list[str]) -> None:
        """Stat and read only ``paths`` under ``root`` (no scan of the rest); a path gone
        from disk is marked missing. Paths that pass through a link are left as stored."""
        self.root = root
        real_root = os.path.realpath(root)
        for rel in paths:
            path = os.path.join(root, rel)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            except OSError as exc:
                self.problems.append({"path": rel, "error": f"could not be read ({exc.strerror})"})
                self.complete = False
                continue
            mode = st.st_mode
            if os.path.realpath(path) != os.path.join(real_root, rel) or not (
                stat_mode.S_ISREG(mode) or stat_mode.S_ISDIR(mode)
            ):
                self.complete = False
                continue
            is_dir = stat_mode.S_ISDIR(mode)
            item = _Item(
                rel, is_dir, 0 if is_dir else st.st_size, stat_mode.S_IMODE(mode), st.st_mtime_ns
            )
            item.stat = tree.Stat(
                rel, is_dir, item.size, st.st_mtime_ns, item.mode, (st.st_dev, st.st_ino)
            )
            self.items[rel] = item
            if not is_dir and not self._read(item):
                self.complete = False

    # -- layouts -----------------------------------------------------------------
    def _layout_dirs(self) -> list[LayoutDirs]:
        if self.only is not None:
            return self._stored_layout_dirs()  # a write-back writes inside its layout
        unchanged_tree = len(self.items) == sum(1 for old in self.stored.values() if old.present)
        if unchanged_tree and all(
            item.data is None
            and not item.is_dir
            and path in self.stored
            or item.is_dir
            and path in self.stored
            for path, item in self.items.items()
        ):
            # Same paths and no file read again: the layouts are the stored ones.
            return self._stored_layout_dirs()
        rollout_paths: dict[str, str] = {}
        unread = [p for p, i in self.items.items() if i.data is None and not i.is_dir]
        if unread:
            rollout_paths.update(
                RawMemory.objects.filter(file__workspace=self.workspace).values_list(
                    "file__path", "rollout_path"
                )
            )
        for path, item in self.items.items():
            if item.data is not None and tree.is_raw_memory_path(path):
                rollout_paths[path] = tree.header_value(item.data, "rollout_path")
        rollout_paths = {p: v for p, v in rollout_paths.items() if p in self.items}
        return tree.find_layouts(
            (p for p, i in self.items.items() if i.is_dir),
            (p for p, i in self.items.items() if not i.is_dir),
            rollout_paths,
        )

    def _stored_layout_dirs(self) -> list[LayoutDirs]:
        return [
            LayoutDirs(m, s)
            for m, s in self.workspace.layouts.present().values_list("memories_dir", "sessions_dir")
        ]

    def _sync_layouts(self, dirs: list[LayoutDirs]) -> dict[str, Layout]:
        existing = {layout.memories_dir: layout for layout in self.workspace.layouts.all()}
        wanted = {d.memories_dir: d for d in dirs}
        for memories_dir, d in wanted.items():
            layout = existing.get(memories_dir)
            if layout is None:
                existing[memories_dir] = Layout.objects.create(
                    workspace=self.workspace,
                    memories_dir=memories_dir,
                    sessions_dir=d.sessions_dir,
                )
            elif layout.sessions_dir != d.sessions_dir or layout.missing_since:
                layout.sessions_dir = d.sessions_dir
                layout.missing_since = None
                layout.save(update_fields=["sessions_dir", "missing_since"])
        if self.merge:
            return {m: existing[m] for m in wanted}  # another sandbox's layouts stay
        Layout.objects.filter(
            workspace=self.workspace,
            memories_dir__in=[m for m in existing if m not in wanted],
            missing_since__isnull=True,
        ).update(missing_since=self.now)
        return {m: existing[m] for m in wanted}

    # -- writing -----------------------------------------------------------------
    def _step(self, done: int) -> None:
        if self.progress:
            self.progress("store", done, 5)

    def finish(self, user: Any, scheduled: bool = False) -> ImportResult:
        if self.same_as is not None:
            return self._repeat(self.same_as, user, scheduled)
        result = self._report(*self._sync_rows(), user, scheduled)
        self._propose(result.run)
        return result

    def _sync_rows(
        self,
    ) -> tuple[
        dict[str, LayoutCounts],
        list[LayoutDirs],
        list[_Item],
        list[_Item],
        int,
        list[int],
        list[str],
    ]:
        """Bring the rows to what was collected: layouts, files, parsed rows, versions."""
        if self.progress:
            self.progress("read", len(self.items), len(self.items))
        self._step(0)
        dirs = self._all_layout_dirs()
        before = set(self.workspace.layouts.present().values_list("memories_dir", "sessions_dir"))
        layouts = self._sync_layouts(dirs)
        # With the same layouts, a file trusted by its stat keeps its stored placement.
        same_layouts = before == {(d.memories_dir, d.sessions_dir) for d in dirs}
        dirs_by_id = {layout.pk: m for m, layout in layouts.items()}
        counts = {d.memories_dir: LayoutCounts(d.memories_dir, d.sessions_dir) for d in dirs}
        new: list[_Item] = []
        changed: list[_Item] = []
        stat_only: list[_Item] = []
        unchanged = 0
        for path, item in list(self.items.items()):
            old = self.stored.get(path)
            if same_layouts and item.data is None and not item.is_dir and old is not None:
                unchanged += 1
                item.file_id, item.kind, item.layout_id = old.file_id, old.kind, old.layout_id
                if old.layout_id is not None:
                    counts[dirs_by_id[old.layout_id]].count(old.kind)
                if old.mode != item.mode:
                    stat_only.append(item)
                continue
            kind = self._place(path, item, dirs, layouts, counts)
            if self.fill_only and old is not None and old.present:
                unchanged += 1
                item.file_id = old.file_id
                continue
            same = old is not None and (old.blob_id, old.kind, old.layout_id, old.present) == (
                item.digest,
                kind,
                item.layout_id,
                True,
            )
            if same:
                assert old is not None
                unchanged += 1
                item.file_id = old.file_id
                if (old.mode, old.mtime_ns) != (item.mode, item.mtime_ns):
                    stat_only.append(item)
                continue
            if item.data is None and not item.is_dir and not self._read(item):
                continue  # trusted by stat, but its layout or kind moved: read it now
            self._note_if_huge(item)
            if old is None:
                new.append(item)
            else:
                item.file_id = old.file_id
                changed.append(item)
                if self.merge and kind == FileKind.ROLLOUT and old.present:
                    self.problems.append({"path": path, "error": ROLLOUT_REUPLOADED})

        self._step(1)
        self._store(new, changed, stat_only)
        self._step(4)
        missing = [
            old.file_id
            for path, old in self.stored.items()
            if old.present and path not in self.items and self.complete and not self.merge
        ]
        _update_many(WorkspaceFile, "missing_since", [(self.now, pk) for pk in missing])
        self.touched = new + changed
        new_versions = self._record_versions(new + changed, layouts)
        # After the versions: a read maps to the MEMORY.md the agent had then.
        usage.record_reads(
            self.found_reads,
            [i.file_id for i in changed if i.kind == FileKind.ROLLOUT and i.file_id],
        )
        self._record_skill_versions(new + changed, missing, layouts)
        _analyze_after(len(new) + len(changed))
        self._step(5)
        return counts, dirs, new, changed, unchanged, missing, new_versions

    def _all_layout_dirs(self) -> list[LayoutDirs]:
        """The layouts found in what was read; a merge keeps the workspace's others."""
        dirs = self._layout_dirs()
        if self.merge:
            found = {d.memories_dir for d in dirs}
            dirs += [
                LayoutDirs(m, sessions)
                for m, sessions in self.workspace.layouts.present().values_list(
                    "memories_dir", "sessions_dir"
                )
                if m not in found
            ]
        return dirs

    def _place(
        self,
        path: str,
        item: _Item,
        dirs: list[LayoutDirs],
        layouts: dict[str, Layout],
        counts: dict[str, LayoutCounts],
    ) -> FileKind:
        """Classify the file and put it in its layout (counted there)."""
        placement = tree.classify(path, dirs, is_dir=item.is_dir)
        kind = placement.kind
        if kind == FileKind.ROLLOUT and not tree.ROLLOUT_ID_RE.fullmatch(
            _name(path).removesuffix(".jsonl")
        ):
            kind = FileKind.WORKSPACE_FILE
            item.problem = (
                "file name is not a valid rollout id (a letter or digit, then up to 127 "
                "letters, digits, '.', '_' or '-'); kept as a plain file"
            )
        item.kind = kind
        if placement.layout is not None:
            item.memories_dir = placement.layout.memories_dir
            item.layout_id = layouts[item.memories_dir].pk
            counts[item.memories_dir].count(kind)
        return kind

    def _note_if_huge(self, item: _Item) -> None:
        """A file over the huge-file limit is stored whole; its pages show head and tail."""
        if item.data is None or len(item.data) <= self.limits.huge_file_bytes:
            return
        item.problem = "; ".join(
            filter(
                None,
                [
                    item.problem,
                    f"large file ({tree.human_size(len(item.data))}, over "
                    f"{tree.human_size(self.limits.huge_file_bytes)}): stored in "
                    "full, pages show its head and tail",
                ],
            )
        )

    def _store(self, new: list[_Item], changed: list[_Item], stat_only: list[_Item]) -> None:
        """Parse and write new and changed files a chunk at a time, dropping each chunk's
        bytes once written: a large tree is never held in memory twice (as bytes and as
        parsed rows). Rollout summaries come last: their ids are settled by the rollouts."""
        known = _KnownIds()
        is_new = {id(item) for item in new}
        last = [i for i in new + changed if i.kind == FileKind.ROLLOUT_SUMMARY]
        first = [i for i in new + changed if i.kind != FileKind.ROLLOUT_SUMMARY]
        for chunk in (*_chunks(first, STORE_CHUNK), *_chunks(last, STORE_CHUNK)):
            parsed = _Parsed.build(chunk, known)
            self._write_blobs(chunk)
            chunk_new = [i for i in chunk if id(i) in is_new]
            chunk_changed = [i for i in chunk if id(i) not in is_new]
            self._write_files(chunk_new, chunk_changed)
            parsed.write(chunk_new, chunk_changed)
            for item in chunk:
                if item.path in parsed.reads and item.file_id is not None:
                    segments, reads = parsed.reads[item.path]
                    self.found_reads.append(
                        usage.FoundReads(item.file_id, item.layout_id or 0, segments, reads)
                    )
                item.data = None
        self._step(3)
        _update_many(
            WorkspaceFile,
            ["mode", "mtime_ns"],
            [(i.mode, i.mtime_ns, i.file_id) for i in stat_only],
        )

    def _write_blobs(self, items: Sequence[_Item]) -> None:
        rows: dict[str, tuple[str, int, bytes]] = {}
        for item in items:
            if item.data is not None and item.digest is not None:
                rows[item.digest] = (item.digest, len(item.data), item.data)
        _insert_many(Blob, ["sha256", "size", "data"], list(rows.values()), ignore="sha256")

    def _write_files(self, new: list[_Item], changed: list[_Item]) -> None:
        now = connection.ops.adapt_datetimefield_value(self.now)
        table = WorkspaceFile._meta.db_table
        last_id = None
        ids: dict[str, int] = {}
        if new and connection.vendor == "postgresql":
            # The new rows' ids drawn from the table's sequence first, then written with
            # them: nothing to look up by path afterwards.
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)",
                    [connection.ops.quote_name(table), len(new)],
                )
                ids = {item.path: pk for item, (pk,) in zip(new, cursor.fetchall(), strict=True)}
        elif new and connection.vendor == "sqlite":
            # SQLite lets a transaction write only if nothing was committed since it
            # first read, so the rows after this last id are the ones inserted below:
            # a rowid range, cheaper than looking 2,000 paths up in their index.
            with connection.cursor() as cursor:
                cursor.execute(f"SELECT coalesce(max(id), 0) FROM {table}")
                last_id = cursor.fetchone()[0]
        _insert_many(
            WorkspaceFile,
            [
                *(["id"] if ids else []),
                "workspace_id",
                "layout_id",
                "path",
                "kind",
                "blob_id",
                "size",
                "mode",
                "mtime_ns",
                "problem",
                "first_seen_at",
                "changed_at",
                "missing_since",
            ],
            [
                (
                    *((ids[i.path],) if ids else ()),
                    self.workspace.pk,
                    i.layout_id,
                    i.path,
                    i.kind,
                    i.digest,
                    i.size,
                    i.mode,
                    i.mtime_ns,
                    i.problem,
                    now,
                    now,
                    None,
                )
                for i in new
            ],
        )
        if last_id is not None:  # SQLite: the rows just inserted, by their rowid range
            with connection.cursor() as cursor:
                cursor.execute(f"SELECT path, id FROM {table} WHERE id > %s", [last_id])
                ids = dict(cursor.fetchall())
        for item in new:
            item.file_id = ids[item.path]
        _update_many(
            WorkspaceFile,
            [
                "layout_id",
                "kind",
                "blob_id",
                "size",
                "mode",
                "mtime_ns",
                "problem",
                "changed_at",
                "missing_since",
            ],
            [
                (
                    i.layout_id,
                    i.kind,
                    i.digest,
                    i.size,
                    i.mode,
                    i.mtime_ns,
                    i.problem,
                    now,
                    None,
                    i.file_id,
                )
                for i in changed
            ],
        )

    def _record_versions(self, items: list[_Item], layouts: dict[str, Layout]) -> list[str]:
        documents = {
            FileKind.MEMORY_INDEX: MemoryVersion.Document.MEMORY_MD,
            FileKind.MEMORY_SUMMARY: MemoryVersion.Document.MEMORY_SUMMARY,
        }
        created = []
        for item in items:
            document = documents.get(FileKind(item.kind))
            if document is None or item.memories_dir is None or item.digest is None:
                continue
            layout = layouts[item.memories_dir]
            latest = (
                MemoryVersion.objects.filter(layout=layout, document=document)
                .order_by("-number")
                .first()
            )
            if latest is not None and latest.blob_id == item.digest:
                continue
            if self.merge and layout.versions.filter(document=document, blob_id=item.digest):
                continue  # a text this layout had (a sandbox sending back what it got)
            version = MemoryVersion.objects.create(
                layout=layout,
                document=document,
                number=(latest.number + 1) if latest else 1,
                blob_id=item.digest,
                author_kind=MemoryVersion.Author.AGENT,
                reason=self._reason(latest is None),
                created_at=self.now,
                needs_review=latest is not None or bool(self.merge),
            )
            created.append(item.path)
            if version.needs_review:
                self.agent_versions.setdefault(layout.pk, (layout, []))[1].append(version)
        return created

    def _propose(self, run: ImportRun) -> None:
        """Each layout's agent versions awaiting review become (or update) the proposal
        of the sandbox that wrote them (``agent_proposals``); its inputs are the
        rollouts of the upload (of an import: those it found new or changed)."""
        forgotten = self._forgotten()
        if not self.agent_versions and not forgotten:
            return
        from . import agent_proposals  # noqa: PLC0415 (deferred: curation loads the review machinery)

        rollouts: dict[int, list[str]] = {}
        items = self.items.values() if self.merge else self.touched
        for item in items:
            if item.kind == FileKind.ROLLOUT and item.layout_id is not None:
                rollouts.setdefault(item.layout_id, []).append(
                    _name(item.path).removesuffix(".jsonl")
                )
        for layout in Layout.objects.filter(pk__in={*self.agent_versions, *forgotten}):
            agent_proposals.record(
                layout,
                self.agent_versions.get(layout.pk, (layout, []))[1],
                snapshot_id=self.merge,
                import_run=run,
                inputs=sorted(rollouts.get(layout.pk, [])),
                forgotten=forgotten.get(layout.pk, []),
            )

    def _forgotten(self) -> dict[int, list[str]]:
        """Per layout the upload holds files of, the raw memories and rollout summaries
        the sandbox's last download served it that its upload lacks and the workspace
        still has: the agent pruned them (the SDK's consolidation does)."""
        if not self.merge:
            return {}
        served = (
            UploadedSnapshot.objects.filter(workspace=self.workspace, snapshot_id=self.merge)
            .values_list("served", flat=True)
            .first()
        ) or {}
        # Only layouts the upload holds files of: a sandbox without a layout's folder
        # forgot nothing of it.
        held = {item.layout_id for item in self.items.values() if item.layout_id is not None}
        lacking = {
            int(pk): [p for p in (got.get("files") or []) if p not in self.items]
            for pk, got in served.items()
            if isinstance(got, dict) and str(pk).isdigit() and int(pk) in held
        }
        lacking = {pk: paths for pk, paths in lacking.items() if paths}
        if not lacking:
            return {}
        present = set(
            WorkspaceFile.objects.present()
            .filter(workspace=self.workspace, path__in=[p for ps in lacking.values() for p in ps])
            .values_list("path", flat=True)
        )
        found = {pk: sorted(p for p in paths if p in present) for pk, paths in lacking.items()}
        return {pk: paths for pk, paths in found.items() if paths}

    def _reason(self, first: bool) -> str:
        if self.merge:
            return f"uploaded by sandbox {self.merge}"
        return "imported from disk" if first else "changed on disk"

    def _record_skill_versions(
        self, items: list[_Item], missing: list[int], layouts: dict[str, Layout]
    ) -> None:
        """Skill files found new, changed or gone get a version (``memoryui.skills``)."""
        found: dict[int, list[tuple[str, str | None]]] = {}
        by_id = {layout.pk: layout.memories_dir for layout in layouts.values()}
        for item in items:
            if item.kind == FileKind.SKILL and item.memories_dir is not None:
                found.setdefault(item.layout_id or 0, []).append(
                    (item.path.removeprefix(item.memories_dir + "/"), item.digest)
                )
        gone = set(missing)
        for path, old in self.stored.items():
            if old.file_id in gone and old.kind == FileKind.SKILL and old.layout_id in by_id:
                rel = path.removeprefix(by_id[old.layout_id] + "/")
                found.setdefault(old.layout_id, []).append((rel, None))
        if found:
            skills.record_import(found, now=self.now, uploaded_by=self.merge)

    def _repeat(self, previous: ImportRun, user: Any, scheduled: bool) -> ImportResult:
        """The outcome of an import that found the directory as ``previous`` left it:
        the same layouts and problems, every file unchanged, no new version."""
        files = self.listed
        run = ImportRun.objects.create(
            workspace=self.workspace,
            started_at=self.now,
            finished_at=timezone.now(),
            status=previous.status,
            unchanged=files,
            report={**previous.report, "new_versions": []},
            triggered_by=user if getattr(user, "pk", None) else None,
            scheduled=scheduled,
        )
        self.workspace.last_imported_at = run.finished_at
        self.workspace.save(update_fields=["last_imported_at"])
        return ImportResult(
            workspace=self.workspace,
            run=run,
            layouts=[LayoutCounts(**c) for c in run.report.get("layouts", [])],
            errors=list(run.report.get("errors", [])),
            unchanged=files,
            files=files,
        )

    def _report(
        self,
        counts: dict[str, LayoutCounts],
        dirs: list[LayoutDirs],
        new: list[_Item],
        changed: list[_Item],
        unchanged: int,
        missing: list[int],
        new_versions: list[str],
        user: Any,
        scheduled: bool,
    ) -> ImportResult:
        errors = list(self.problems)
        errors.extend(
            {"path": path, "error": problem}
            for path, problem in WorkspaceFile.objects.present()
            .with_problems()
            .filter(workspace=self.workspace)
            .order_by("path")
            .values_list("path", "problem")
            # A merged upload's report is about its own files only: the workspace also
            # holds other sandboxes' (and earlier uploads').
            if not self.merge or path in self.items
        )
        if not self.items:
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
        if self.listing and self.complete and len(self.items) == self.listed:
            report["listing"] = self.listing
        run = ImportRun.objects.create(
            workspace=self.workspace,
            started_at=self.now,
            finished_at=timezone.now(),
            status=status,
            added=len(new),
            changed=len(changed),
            unchanged=unchanged,
            missing=len(missing),
            report=report,
            triggered_by=user if getattr(user, "pk", None) else None,
            scheduled=scheduled,
        )
        self.workspace.last_imported_at = run.finished_at
        self.workspace.save(update_fields=["last_imported_at"])
        return ImportResult(
            workspace=self.workspace,
            run=run,
            layouts=layout_counts,
            errors=errors,
            added=len(new),
            changed=len(changed),
            unchanged=unchanged,
            missing=len(missing),
            files=len(self.items),
            new_versions=new_versions,
            stopped=self.stopped,
        )


def _listing(
    root: Path, limits: tree.Limits, scanned: list[tree.Stat | Problem], stats: list[tree.Stat]
) -> str:
    """A digest of what a scan of ``root`` saw (every path with its size, mtime, mode
    and inode, every problem) under these limits: equal digests, same directory.
    ``stats``: the ``Stat`` items of ``scanned``."""
    digest = hashlib.sha256(repr((os.fspath(root), limits)).encode())
    # Columns of machine integers rather than a repr per entry: half the CPU, and a
    # re-import of an unchanged tree is mostly the scan and this.
    digest.update("\0".join([s.path for s in stats]).encode("utf-8", "surrogateescape"))
    digest.update(array("b", [s.is_dir for s in stats]))
    try:
        digest.update(array("q", [s.size for s in stats]))
        digest.update(array("q", [s.mtime_ns for s in stats]))
        digest.update(array("q", [s.mode for s in stats]))
        digest.update(array("Q", [s.inode[0] for s in stats]))
        digest.update(array("Q", [s.inode[1] for s in stats]))
    except OverflowError:  # a date after 2262, say: the exact, slower form
        digest.update(repr(stats).encode("utf-8", "surrogateescape"))
    problems = [s for s in scanned if type(s) is not tree.Stat]
    digest.update(repr(problems).encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


class _KnownIds:
    """A layout's rollout ids, stored or parsed in this import: ids and slugs may both
    hold "_", and these settle how a rollout summary's file name splits."""

    def __init__(self) -> None:
        self.parsed: dict[int, set[str]] = {}
        self.ids: dict[int, set[str]] = {}

    def add(self, layout_id: int, rollout_id: str) -> None:
        self.parsed.setdefault(layout_id, set()).add(rollout_id)
        if layout_id in self.ids:
            self.ids[layout_id].add(rollout_id)

    def of(self, layout_id: int) -> set[str]:
        ids = self.ids.get(layout_id)
        if ids is None:
            stored = Rollout.objects.filter(layout_id=layout_id).values_list(
                "rollout_id", flat=True
            )
            ids = self.ids[layout_id] = set(stored) | self.parsed.get(layout_id, set())
        return ids


@dataclass
class _Parsed:
    """Rows parsed from the new and changed files, keyed by the file's path."""

    rollouts: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    raw_memories: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    summaries: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    documents: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    # Rollouts that read memory: path -> (segments, reads) (``memoryui.usage``).
    reads: dict[str, tuple[list[Any], list[Any]]] = field(default_factory=dict)

    DOCUMENT_COLUMNS = ["layout_id", "rollout_id", "kind", "body"]
    ROLLOUT_COLUMNS = [
        "layout_id",
        "rollout_id",
        "segment_count",
        "item_count",
        "updated_at_raw",
        "updated_at",
        "updated_day",
        "sort_at",
        "terminal_state",
        "title",
    ]
    RAW_COLUMNS = [
        "layout_id",
        "rollout_id",
        "updated_at_raw",
        "rollout_path",
        "rollout_summary_file",
        "terminal_state",
    ]
    SUMMARY_COLUMNS = [
        "layout_id",
        "rollout_id",
        "slug",
        "session_id",
        "updated_at_raw",
        "terminal_state",
    ]

    @classmethod
    def build(cls, items: Sequence[_Item], known: _KnownIds) -> _Parsed:
        parsed = cls()
        summaries: list[_Item] = []
        adapt_datetime = connection.ops.adapt_datetimefield_value
        epoch = adapt_datetime(EPOCH)
        for item in items:
            if item.data is None:
                continue
            notes: list[str] = []
            kind = item.kind
            if kind == FileKind.ROLLOUT and item.layout_id is not None:
                rollout = tree.parse_rollout(item.data)
                notes.extend(rollout.problems)
                rollout_id = _name(item.path).removesuffix(".jsonl")
                updated = _parse_datetime(rollout.updated_at)
                updated_value = adapt_datetime(updated)  # ~3 us: once, for two columns
                parsed.rollouts[item.path] = (
                    item.layout_id,
                    rollout_id,
                    len(rollout.segments),
                    rollout.item_count,
                    _clean(rollout.updated_at[:64]),
                    updated_value,
                    connection.ops.adapt_datefield_value(
                        updated.astimezone(UTC).date() if updated else None
                    ),
                    updated_value if updated else epoch,
                    _clean(rollout.terminal_state[:32]),
                    _clean(rollout.title),
                )
                parsed.documents[item.path] = (
                    item.layout_id,
                    rollout_id,
                    SearchDocument.Kind.TRANSCRIPT,
                    tree.rollout_search_text(rollout),
                )
                if item.memories_dir is not None:
                    segments, reads = usage.find_reads(rollout, item.memories_dir, _parse_datetime)
                    if reads:
                        parsed.reads[item.path] = (segments, reads)
            elif kind == FileKind.RAW_MEMORY and item.layout_id is not None:
                text, bad = tree.decode_text(item.data)
                notes.append(bad or "")
                raw = tree.parse_raw_memory(text)
                notes.extend(raw.problems)
                h = raw.headers
                rollout_id = raw.rollout_id or _name(item.path).removesuffix(".md")
                parsed.raw_memories[item.path] = (
                    item.layout_id,
                    _clean(rollout_id[:128]),
                    _clean(h.get("updated_at", "")[:64]),
                    _clean(h.get("rollout_path", "")[:1024]),
                    _clean(h.get("rollout_summary_file", "")[:1024]),
                    _clean(h.get("terminal_state", "")[:32]),
                )
                parsed.documents[item.path] = (
                    item.layout_id,
                    _clean(rollout_id[:128]),
                    SearchDocument.Kind.RAW_MEMORY,
                    _clean(raw.body[: tree.SEARCH_TEXT_LIMIT]),
                )
            elif kind == FileKind.ROLLOUT_SUMMARY and item.layout_id is not None:
                summaries.append(item)
                continue
            elif kind in (
                FileKind.MEMORY_INDEX,
                FileKind.MEMORY_SUMMARY,
                FileKind.SKILL,
                FileKind.RAW_MEMORIES_MERGED,
            ):
                notes.append(tree.decode_text(item.data)[1] or "")
            elif kind == FileKind.SELECTION:
                notes.append(tree.parse_selection(item.data).problem or "")
            item.problem = "; ".join(filter(None, [item.problem, *notes]))

        for row in parsed.rollouts.values():
            known.add(row[0], row[1])
        for item in summaries:
            assert item.data is not None and item.layout_id is not None
            text, bad = tree.decode_text(item.data)
            ids = known.of(item.layout_id)
            summary = tree.parse_rollout_summary(_name(item.path), text, ids)
            item.problem = "; ".join(filter(None, [item.problem, bad, *summary.problems]))
            parsed.summaries[item.path] = (
                item.layout_id,
                _clean(summary.rollout_id[:128]),
                _clean(summary.slug[:128]),
                _clean(summary.headers.get("session_id", "")[:128]),
                _clean(summary.headers.get("updated_at", "")[:64]),
                _clean(summary.headers.get("terminal_state", "")[:32]),
            )
            parsed.documents[item.path] = (
                item.layout_id,
                _clean(summary.rollout_id[:128]),
                SearchDocument.Kind.SUMMARY,
                _clean(summary.body[: tree.SEARCH_TEXT_LIMIT]),
            )
        return parsed

    def write(self, new: list[_Item], changed: list[_Item]) -> None:
        file_ids = {i.path: i.file_id for i in new + changed if i.file_id is not None}
        changed_ids = [i.file_id for i in changed]
        for model, rows, columns in (
            (Rollout, self.rollouts, self.ROLLOUT_COLUMNS),
            (RawMemory, self.raw_memories, self.RAW_COLUMNS),
            (RolloutSummary, self.summaries, self.SUMMARY_COLUMNS),
            (SearchDocument, self.documents, self.DOCUMENT_COLUMNS),
        ):
            # Re-parsed files keep their row (and whatever points at it); a file that is
            # no longer of this kind loses it.
            existing: dict[int, int] = {}
            for chunk in _chunks(changed_ids, CHUNK):
                existing.update(
                    model.objects.filter(file_id__in=chunk).values_list("file_id", "pk")
                )
            inserts, updates = [], []
            for path, row in rows.items():
                file_id = file_ids[path]
                pk = existing.pop(file_id, None)
                if pk is None:
                    inserts.append((file_id, *row))
                else:
                    updates.append((*row, pk))
            for chunk in _chunks(list(existing.values()), CHUNK):
                model.objects.filter(pk__in=chunk).delete()
            _update_many(model, columns, updates, key="id")
            _insert_many(model, ["file_id", *columns], inserts)


def _name(path: str) -> str:
    """The last part of a path as the import keeps it (normalised, "/"-separated):
    ``PurePosixPath(path).name`` without building a path object per file."""
    return path.rpartition("/")[2]


def _clean(text: str) -> str:
    """PostgreSQL text cannot hold NUL characters; model output sometimes does."""
    return text.replace("\x00", "")


def _chunks(seq: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(seq), size):
        yield seq[start : start + size]


def _insert_many(
    model: type[models.Model], columns: list[str], rows: list[tuple[Any, ...]], ignore: str = ""
) -> None:
    """Insert rows fast: ``COPY`` on PostgreSQL, ``executemany`` elsewhere. With
    ``ignore``, rows whose ``ignore`` column already exists are skipped. Both ways write
    the same rows (tests/test_bulk_load.py compares them table by table)."""
    if not rows:
        return
    if connection.vendor == "postgresql":
        _copy_rows(model, columns, rows, ignore)
    else:
        _execute_rows(model, columns, rows, ignore)


def _copy_rows(
    model: type[models.Model], columns: list[str], rows: list[tuple[Any, ...]], ignore: str
) -> None:
    qn = connection.ops.quote_name
    table = qn(model._meta.db_table)
    cols = ", ".join(qn(c) for c in columns)
    with connection.cursor() as cursor:
        target = table
        if ignore:
            # COPY cannot skip conflicts: stage the rows, then insert what is new.
            target = qn(f"staging_{model._meta.db_table}")
            cursor.execute(f"CREATE TEMPORARY TABLE {target} (LIKE {table} INCLUDING DEFAULTS)")
        # Binary: contents go as their bytes and text as UTF-8, where the text format
        # spelled every byte of a blob in hex and escaped every text (a quarter of the
        # client's CPU for the rows of a large tree, and the server's parsing of it).
        with cursor.cursor.copy(f"COPY {target} ({cols}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(_column_types(model, tuple(columns)))
            for row in rows:
                copy.write_row(row)
        if ignore:
            cursor.execute(
                f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {target} "
                f"ON CONFLICT ({qn(ignore)}) DO NOTHING"
            )
            cursor.execute(f"DROP TABLE {target}")


def _execute_rows(
    model: type[models.Model], columns: list[str], rows: list[tuple[Any, ...]], ignore: str
) -> None:
    qn = connection.ops.quote_name
    table = qn(model._meta.db_table)
    cols = ", ".join(qn(c) for c in columns)
    sql = f"INSERT INTO {table} ({cols}) VALUES ({', '.join(['%s'] * len(columns))})"
    if ignore:
        sql += f" ON CONFLICT ({qn(ignore)}) DO NOTHING"
    with connection.cursor() as cursor:
        for chunk in _chunks(rows, CHUNK):
            cursor.executemany(sql, chunk)


@functools.cache
def _column_types(model: type[models.Model], columns: tuple[str, ...]) -> list[str]:
    """The PostgreSQL type of each of ``model``'s ``columns`` (``varchar(64)`` as
    ``varchar``), for a binary ``COPY``."""
    fields = {f.column: f for f in model._meta.concrete_fields}
    return [re.sub(r"\(.*\)$", "", fields[column].db_type(connection) or "") for column in columns]


def _analyze_after(written: int) -> None:
    """On PostgreSQL, after a large import: fresh statistics, or the planner treats the
    new rows as absent until autovacuum gets round to it, and picks slow plans for the
    pages."""
    if connection.vendor != "postgresql" or written <= ANALYZE_AFTER:
        return
    with connection.cursor() as cursor:
        for model in (WorkspaceFile, Rollout, RawMemory, RolloutSummary, SearchDocument):
            cursor.execute(f"ANALYZE {connection.ops.quote_name(model._meta.db_table)}")


def _update_many(
    model: type[models.Model],
    columns: str | list[str],
    rows: list[tuple[Any, ...]],
    key: str = "id",
) -> None:
    """``UPDATE ... SET columns = row[:-1] WHERE key = row[-1]`` for every row."""
    if not rows:
        return
    qn = connection.ops.quote_name
    cols = [columns] if isinstance(columns, str) else columns
    adapt = connection.ops.adapt_datetimefield_value
    rows = [tuple(adapt(v) if isinstance(v, datetime) else v for v in row) for row in rows]
    sql = (
        f"UPDATE {qn(model._meta.db_table)} SET {', '.join(f'{qn(c)} = %s' for c in cols)} "
        f"WHERE {qn(key)} = %s"
    )
    with connection.cursor() as cursor:
        for chunk in _chunks(rows, CHUNK):
            cursor.executemany(sql, chunk)


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
