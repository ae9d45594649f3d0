"""Syncing the rows: a workspace's layouts, file rows, blobs and parsed rows brought to
what an import read (``reading``), a chunk at a time.

A re-runnable sync: unchanged files are skipped, changed ones are stored again and
re-parsed, files gone from disk are marked missing (never deleted). Nothing on disk is
ever written. Bad input becomes an entry in the report's errors and the rest of the
import goes on.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection

from generation import tree
from generation.kinds import FileKind
from generation.tree import LayoutDirs

from .. import search, usage
from ..bulk import insert_many, update_many
from ..models import Blob, Layout, RawMemory, Workspace, WorkspaceFile
from .bulk import analyze_after
from .parsing import KnownIds, ParsedRows
from .reading import Item, Progress, StoredFile, TreeReader, file_name
from .reports import ImportResult, LayoutCounts, record_run, repeat_run
from .spool import ReadSpool
from .versions import VersionRecorder

# New and changed files are parsed and written this many at a time (their bytes then
# dropped): few enough to bound memory, many enough for each table's index pages to
# stay in cache while it is written. A chunk also ends once its files reach
# STORE_CHUNK_BYTES (a workspace of large files is not read 2,000 at a time).
STORE_CHUNK = 1000
STORE_CHUNK_BYTES = 8 * 1024 * 1024
ROLLOUT_REUPLOADED = (
    "rollout uploaded before with other bytes (by another sandbox, or rewritten by this "
    "one): the workspace shows this upload's; each sandbox's download keeps its own"
)


class WorkspaceSync(TreeReader):
    """Reads an import's source (``TreeReader``), then brings the workspace's rows to
    what it read (``finish``, or ``sync_rows`` for a write-back's few paths)."""

    def __init__(
        self,
        workspace: Workspace,
        limits: tree.Limits,
        progress: Progress | None,
        started: datetime,
        merge: str = "",
    ) -> None:
        super().__init__(workspace, limits, progress, started, merge)
        keep_large_buffers_apart()  # before reading: a 27 MB MEMORY.md is read for its digest
        self.versions = VersionRecorder(workspace, started, merge)
        # The files found new or changed (their rows written); past the store of an
        # import that is not a merge, only those that get versions (``sync_rows``).
        self.touched: list[Item] = []
        self.found_reads = ReadSpool()
        self.search_queued = False  # the search vectors' task, sent once the import commits

    # -- layouts -----------------------------------------------------------------
    def _layout_dirs(self) -> list[LayoutDirs]:
        if self.only is not None:
            return self._stored_layout_dirs()  # a write-back writes inside its layout
        if self.fill_only and all(self._present(path) for path in self.items):
            return self._stored_layout_dirs()  # a fill that adds nothing
        unchanged_tree = len(self.items) == sum(1 for old in self.stored.values() if old.present)
        if unchanged_tree and all(
            (item.trusted or item.is_dir) and path in self.stored
            for path, item in self.items.items()
        ):
            # Same paths and no file read again: the layouts are the stored ones.
            return self._stored_layout_dirs()
        stored: dict[str, str] = {}
        if any(i.trusted for i in self.items.values()):  # not read: their stored headers
            stored = dict(
                RawMemory.objects.filter(file__workspace=self.workspace).values_list(
                    "file__path", "rollout_path"
                )
            )
        # Pairs as they come, where a dict of them was 5 MB at 100,000 rollouts.
        headers = (
            (path, item.rollout_folder if item.rollout_folder is not None else stored[path])
            for path, item in self.items.items()
            if item.rollout_folder is not None or path in stored
        )
        return tree.find_layouts(
            (p for p, i in self.items.items() if i.is_dir),
            (p for p, i in self.items.items() if not i.is_dir),
            headers,
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
            return repeat_run(self, self.same_as, user, scheduled)
        result = record_run(self, *self.sync_rows(), user, scheduled)
        self.versions.propose(result.run, self.items, self.touched)
        return result

    def sync_rows(
        self,
    ) -> tuple[
        dict[str, LayoutCounts],
        list[LayoutDirs],
        int,
        int,
        int,
        list[int],
        list[str],
    ]:
        """Bring the rows to what was collected: layouts, files, parsed rows, versions.
        Returns the layouts' counts, the layouts, the files added, changed and
        unchanged, the ids of those gone, and the paths of the versions recorded."""
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
        new, changed, stat_only, unchanged = self._sort_items(
            dirs, layouts, counts, same_layouts, dirs_by_id
        )
        self._step(1)
        added, rewritten = len(new), len(changed)
        # The stored files this import did not find (and, below, any it lost): gone.
        gone = [path for path, old in self.stored.items() if old.present and path not in self.items]
        replaced = [(i.path, i.file_id) for i in changed if i.kind == FileKind.ROLLOUT]
        work = new + changed
        if self.merge:  # a merge goes through its files again: its proposal, its report
            kept = list(work)
        else:
            # Past the store, an import needs its memory documents and skills, and of
            # the rest their number, the rollouts' names and the rows written: every
            # other file's item is freed once its chunk is stored (at 100,000 rollouts
            # the items were the floor under the reads' mapping, bench/README.md).
            kept = [i for i in work if i.kind in _KEPT_AFTER_STORE]
            self.settled = len(self.items)
            self.items = {}
        del new, changed
        stat_rows = [(i.mode, i.mtime_ns, i.file_id) for i in stat_only]
        del stat_only
        lost = self._store(work, stat_rows)
        if lost:  # gone (or the archive changed) before their bytes were read
            for item in lost.values():
                if item.memories_dir is not None:
                    counts[item.memories_dir].count(item.kind, -1)
                if item.file_id is None:
                    added -= 1
                else:
                    rewritten -= 1
                old = self.stored.get(item.path)
                if old is not None and old.present:
                    gone.append(item.path)
            lost_paths = {i.path for i in lost.values()}
            kept = [i for i in kept if i.path not in lost_paths]
            replaced = [(path, pk) for path, pk in replaced if path not in lost_paths]
            if not self.merge:
                self.settled -= len(lost)
        self._step(4)
        missing = (
            [self.stored[path].file_id for path in gone] if self.complete and not self.merge else []
        )
        update_many(WorkspaceFile, "missing_since", [(self.now, pk) for pk in missing])
        self.touched = kept
        new_versions = self.versions.record_documents(kept, layouts)
        # After the versions: a read maps to the MEMORY.md the agent had then.
        usage.record_reads(self.found_reads, [pk for _, pk in replaced if pk])
        self.found_reads.close()
        self.versions.record_skills(kept, missing, layouts, self.stored.items())
        analyze_after(added + rewritten)
        self._step(5)
        return counts, dirs, added, rewritten, unchanged, missing, new_versions

    def _sort_items(
        self,
        dirs: list[LayoutDirs],
        layouts: dict[str, Layout],
        counts: dict[str, LayoutCounts],
        same_layouts: bool,
        dirs_by_id: dict[int, str],
    ) -> tuple[list[Item], list[Item], list[Item], int]:
        """The items found new, changed, and unchanged but with a new stat, each placed
        in its layout (counted there), and the number unchanged."""
        new: list[Item] = []
        changed: list[Item] = []
        stat_only: list[Item] = []
        unchanged = 0
        for path in list(self.items):  # its paths alone: pairs were 19 MB at 300,000 files
            item = self.items[path]
            old = self.stored.get(path)
            if self.fill_only and old is not None and old.present:
                # Kept as the later upload left it, placement and stat included.
                unchanged += 1
                item.file_id, item.kind, item.layout_id = old.file_id, old.kind, old.layout_id
                if old.layout_id in dirs_by_id:
                    item.memories_dir = dirs_by_id[old.layout_id]
                    counts[item.memories_dir].count(old.kind)
                continue
            if same_layouts and old is not None and old.present and self._as_stored(item, old):
                # Trusted by its stat, or read with the stored bytes: with the same
                # layouts, it keeps its stored placement (no classification again; an
                # upload of thousands of files changes a few).
                unchanged += 1
                item.file_id, item.kind, item.layout_id = old.file_id, old.kind, old.layout_id
                if old.layout_id is not None:
                    item.memories_dir = dirs_by_id[old.layout_id]
                    counts[item.memories_dir].count(old.kind)
                if self._stat_moved(item, old):
                    stat_only.append(item)
                continue
            kind = self._place(path, item, dirs, layouts, counts)
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
                if self._stat_moved(item, old):
                    stat_only.append(item)
                continue
            if item.trusted and not self.read_item(item):
                continue  # trusted by stat, but its layout or kind moved: read it now
            self._note_if_huge(item)
            if old is None:
                new.append(item)
            else:
                item.file_id = old.file_id
                changed.append(item)
                if self.merge and kind == FileKind.ROLLOUT and old.present:
                    self.problems.append({"path": path, "error": ROLLOUT_REUPLOADED})
        return new, changed, stat_only, unchanged

    def _stat_moved(self, item: Item, old: StoredFile) -> bool:
        """Whether an unchanged file's row takes the stat it came with. A merge takes
        a new mode only: the SDK's restore writes every file anew with its mode but not
        its time, so each sandbox's persist brings every file with a new mtime, and
        recording those rewrote every row of the workspace per persist."""
        if self.merge:
            return old.mode != item.mode
        return (old.mode, old.mtime_ns) != (item.mode, item.mtime_ns)

    @staticmethod
    def _as_stored(item: Item, old: StoredFile) -> bool:
        """Whether ``item`` is the stored file as it was: trusted by its size and mtime,
        or read and found with the stored bytes (a directory: still one)."""
        if item.is_dir:
            return old.blob_id is None
        return item.trusted or (item.digest is not None and item.digest == old.blob_id)

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
        item: Item,
        dirs: list[LayoutDirs],
        layouts: dict[str, Layout],
        counts: dict[str, LayoutCounts],
    ) -> FileKind:
        """Classify the file and put it in its layout (counted there)."""
        placement = tree.classify(path, dirs, is_dir=item.is_dir)
        kind = placement.kind
        if kind == FileKind.ROLLOUT and not tree.ROLLOUT_ID_RE.fullmatch(
            file_name(path).removesuffix(".jsonl")
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

    def _note_if_huge(self, item: Item) -> None:
        """A file over the huge-file limit is stored whole; its pages show head and tail."""
        if item.is_dir or item.size <= self.limits.huge_file_bytes:
            return
        item.problem = "; ".join(
            filter(
                None,
                [
                    item.problem,
                    f"large file ({tree.human_size(item.size)}, over "
                    f"{tree.human_size(self.limits.huge_file_bytes)}): stored in "
                    "full, pages show its head and tail",
                ],
            )
        )

    def _store(
        self, work: list[Item], stat_rows: list[tuple[int, int, int | None]]
    ) -> dict[int, Item]:
        """Parse and write the new and changed files of ``work`` a chunk at a time,
        reading the bytes left in the source when their chunk comes (``load``) and
        dropping each chunk once written: a large tree is never held in memory whole,
        nor twice (as bytes and as parsed rows). ``work`` is emptied: an item nothing
        else holds is freed with its chunk. Rollout summaries come after the rollouts
        that settle their ids, and the memory documents last, when the rest is freed
        (a ``MEMORY.md`` of 27 MB at 100,000 rollouts). ``stat_rows``: (mode, mtime,
        file id) of unchanged files whose stat moved. Returns the files that could not
        be read then, by ``id``."""
        known = KnownIds()
        lost: dict[int, Item] = {}
        runs = [run for place in _in_store_order(work) for run in _chunks(place)]
        work.clear()
        runs.reverse()
        while runs:
            whole = runs.pop()
            chunk = self.load(whole)
            if len(chunk) != len(whole):
                kept = {id(i) for i in chunk}
                lost.update((id(i), i) for i in whole if id(i) not in kept)
            parsed = ParsedRows.build(chunk, known)
            self._write_blobs(chunk)
            chunk_new = [i for i in chunk if i.file_id is None]  # a changed file has its row
            chunk_changed = [i for i in chunk if i.file_id is not None]
            self._write_files(chunk_new, chunk_changed)
            parsed.write(chunk_new, chunk_changed)
            if parsed.documents and not self.search_queued:
                search.index_soon(self.workspace)  # the vectors, once this commits
                self.search_queued = True
            if not self.merge:
                self.versions.note_stored(chunk)
            for item in chunk:
                if item.path in parsed.reads and item.file_id is not None:
                    reads, ends = parsed.reads[item.path]
                    self.found_reads.add(
                        usage.FoundReads(item.file_id, item.layout_id or 0, reads, ends)
                    )
                item.data = None
                item.offset = -1  # stored: its place in the archive is not needed again
            del whole, chunk, chunk_new, chunk_changed, parsed
            _forget_logged_queries()
            give_back_freed_memory()
        self._step(3)
        update_many(WorkspaceFile, ["mode", "mtime_ns"], stat_rows)
        return lost

    def _write_blobs(self, items: Sequence[Item]) -> None:
        rows: dict[str, tuple[str, int, bytes]] = {}
        for item in items:
            if item.data is not None and item.digest is not None:
                rows[item.digest] = (item.digest, len(item.data), item.data)
        insert_many(
            Blob, ["sha256", "size", "data"], list(rows.values()), ignore="sha256", large="data"
        )

    def _write_files(self, new: list[Item], changed: list[Item]) -> None:
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
        insert_many(
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
        update_many(
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


# What a (non-merge) import keeps of its new and changed files past their store: the
# files that get versions. The others (hundreds of thousands of rollouts, raw memories
# and summaries at 100,000 rollouts) are freed with their chunk.
_KEPT_AFTER_STORE = frozenset({FileKind.MEMORY_INDEX, FileKind.MEMORY_SUMMARY, FileKind.SKILL})


# Where a kind of file comes in the store: rollout summaries after the rollouts that
# settle their ids, the memory documents last, when the rest is freed; others first.
_STORE_PLACE: dict[str, int] = {
    FileKind.ROLLOUT_SUMMARY: 1,
    FileKind.MEMORY_INDEX: 2,
    FileKind.MEMORY_SUMMARY: 2,
}


def _in_store_order(items: list[Item]) -> tuple[list[Item], ...]:
    """``items`` by their place in the store (``_STORE_PLACE``), each in its order."""
    places: tuple[list[Item], ...] = ([], [], [])
    for item in items:
        places[_STORE_PLACE.get(item.kind, 0)].append(item)
    return places


def _chunks(items: list[Item]) -> Iterator[list[Item]]:
    """``items`` in runs of at most ``STORE_CHUNK`` files and, unless one file is larger,
    ``STORE_CHUNK_BYTES`` of contents."""
    run: list[Item] = []
    size = 0
    for item in items:
        if run and (len(run) == STORE_CHUNK or size + item.size > STORE_CHUNK_BYTES):
            yield run
            run, size = [], 0
        run.append(item)
        size += item.size
    if run:
        yield run


def _forget_logged_queries() -> None:
    """With ``DEBUG`` on, Django logs every query (``connection.queries_log``, up to
    9,000) until the next request begins. An import's thousands were allocated among
    the files it let go of, whose pages they then held: 60 MB more at 100,000 rollouts
    (bench/README.md). Cleared after each chunk, as a request's are when the next
    begins; not while a test captures them (``force_debug_cursor``)."""
    if settings.DEBUG and not connection.force_debug_cursor:
        connection.queries_log.clear()


@functools.cache
def _libc_function(name: str) -> Callable[..., int] | None:
    """A function of glibc (``malloc_trim``, ``mallopt``), or None where the C library
    has none (musl, macOS)."""
    try:
        function: Callable[..., int] = getattr(
            ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name
        )
    except (OSError, AttributeError):
        return None
    return function


# ``mallopt``'s parameter for the size from which an allocation is a mapping of its own,
# and the size this process sets.
_M_MMAP_THRESHOLD = -3
MMAP_FROM_BYTES = 256 * 1024


@functools.cache
def keep_large_buffers_apart() -> None:
    """Each large buffer (a file's contents, a 27 MB ``MEMORY.md`` and its bytes) in a
    mapping of its own, given back to the system when freed. glibc otherwise raises
    that threshold each time such a buffer is freed, up to 32 MB, and the next ones
    land in the heap, where they leave room the import's later objects do not reuse:
    about 50 MB of its peak at 100,000 rollouts (``bench/bench_tar_memory.py``). Set
    once per process; a fixed threshold also stops glibc's raising it."""
    mallopt = _libc_function("mallopt")
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, MMAP_FROM_BYTES)


def give_back_freed_memory() -> None:
    """Return the heap's free pages to the system once a chunk is stored. A chunk's
    file contents and parsed rows are freed, but glibc keeps the pages they were in,
    and the next chunk's allocations land elsewhere: without this, the import's
    resident memory grows with every chunk (``bench/bench_tar_memory.py``)."""
    trim = _libc_function("malloc_trim")
    if trim is not None:
        trim(0)
