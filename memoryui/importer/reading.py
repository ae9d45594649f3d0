"""Reading the tree: what an import finds in its source, file by file.

A directory is scanned and each file read unless it is known unchanged: a file whose
size and nanosecond modification time equal what the last import stored is not read
again (as git's index does), unless it was modified so close to that import that the
two could coincide. A directory listed exactly as at the previous import is not read at
all. An archive (an SDK snapshot, a sandbox's upload) is read entry by entry.

Memory stays bounded however large the tree: at most ``HELD_BYTES`` of file contents
are held from reading until the sync stores them. Past that, a new file of a directory
or a plain tar is not read until its chunk is stored (``load``), and a file read to
compare it with its stored row is read again then. Only a compressed archive, which
has no place to go back to, is held whole.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat as stat_mode
import sys
import tarfile
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple

from django.db import connection

from generation import tree
from generation.kinds import FileKind
from generation.tree import Problem

from ..models import ImportRun, Workspace, WorkspaceFile

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]
# A file modified this close to the previous import may share its mtime with the
# version that import read; such files are always read again.
RACY_WINDOW = timedelta(seconds=2)
# File contents held between reading and storing; past this they stay in the source.
HELD_BYTES = 4 * 1024 * 1024
CHANGED_WHILE_READ = "the archive changed while it was being imported; not imported"


@dataclass(slots=True)
class Item:
    """A file or directory found in the source, and what the import makes of it."""

    path: str
    is_dir: bool
    size: int
    mode: int
    mtime_ns: int
    data: bytes | None = None  # None for directories, files not read again, deferred ones
    digest: str | None = None  # None for a deferred file not read yet
    kind: str = FileKind.WORKSPACE_FILE
    layout_id: int | None = None
    problem: str = ""
    file_id: int | None = None
    memories_dir: str | None = None
    # (device, inode) as a directory scan saw it, in one int (``pack_inode``): a tuple
    # and its two ints were ~120 bytes held per file.
    inode: int | None = None
    # Its bytes are read when it is stored (``TreeReader.load``): from the directory,
    # or from ``offset`` of a plain archive.
    deferred: bool = False
    offset: int = -1
    # What the layouts need of a raw memory's ``rollout_path`` header, taken when it
    # was read (``tree.rollout_folder``).
    rollout_folder: str | None = None

    @property
    def scanned(self) -> tree.Stat | None:
        """What the scan saw of this file (reading it checks it is the same inode)."""
        if self.inode is None:
            return None
        inode = (self.inode >> 64, self.inode & _INODE_MASK)
        return tree.Stat(self.path, self.is_dir, self.size, self.mtime_ns, self.mode, inode)

    @property
    def trusted(self) -> bool:
        """A file not read by this import: unchanged by its size and mtime."""
        return not self.is_dir and self.data is None and not self.deferred


_INODE_MASK = (1 << 64) - 1


def pack_inode(device: int, inode: int) -> int:
    """A file's (device, inode) as one int (``Item.inode``)."""
    return (device << 64) | inode


class StoredFile(NamedTuple):
    """A workspace's file row as the previous imports left it."""

    file_id: int
    blob_id: str | None
    kind: str
    layout_id: int | None
    present: bool
    mode: int
    mtime_ns: int
    size: int


def file_name(path: str) -> str:
    """The last part of a path as the import keeps it (normalised, "/"-separated):
    ``PurePosixPath(path).name`` without building a path object per file."""
    return path.rpartition("/")[2]


Entries = Iterator[tree.Entry | tree.Member | Problem]


def read_entries(
    source: Path,
    limits: tree.Limits,
    links: bool,
    index: Sequence[Sequence[Any]] | None = None,
    index_only: bool = False,
) -> Entries:
    """The archive's entries, each regular file of a plain tar as a ``Member`` (its
    bytes read when needed); with ``links``, in-tree symbolic links are passed over
    (the remote store serves them from the stored archive) and hostile ones refused.
    With the member ``index`` made when the archive came in (a sandbox's upload, read
    whole and found safe then), its members are taken from the index instead of the
    archive being parsed again, once the index is found to fit the archive. With
    ``index_only``, the archive is neither checked nor opened (no member is to be read)."""
    if index is not None and index_only:
        return _without_links(tree.indexed_members(index))
    if not links:
        if not source.is_file():
            raise tree.TreeError(f"{source} does not exist.")
        tree.check_tar_archive(source, limits)
        return _without_links(tree.read_archive_lazily(source, limits))
    if index is not None:
        try:
            with open(source, "rb") as fh:
                tree.check_indexed(fh, index)
        except (tree.IndexMismatch, OSError) as exc:
            log.warning("the member index of %s does not fit it (%s): parsed instead", source, exc)
        else:
            return _without_links(tree.indexed_members(index))
    if not tarfile.is_tarfile(source):
        raise tree.TreeError(f"{source} is not a tar archive.")
    return _without_links(tree.read_archive_lazily(source, limits, links=True))


def _without_links(
    items: Iterator[tree.Entry | tree.Member | tree.Link | Problem],
) -> Entries:
    return (item for item in items if not isinstance(item, tree.Link))


class TreeReader:
    """Collects the items of one import's source (``collect_directory``,
    ``collect_entries`` or ``collect_paths``) and the problems met on the way."""

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
        self.limits = limits
        self.progress = progress
        self.now = started
        self.items: dict[str, Item] = {}
        # Items let go once their rows were written (``WorkspaceSync.sync_rows``).
        self.settled = 0
        self.problems: list[dict[str, str]] = []
        self.root: Path | None = None
        # A directory listed exactly as at the previous import (``listing_digest``): its
        # run, whose outcome this import repeats without looking at any file or stored row.
        self.same_as: ImportRun | None = None
        self.listing = ""
        self.listed = 0
        # A write-back's re-sync: only these paths are looked at, stored or on disk.
        self.only: list[str] | None = None
        # Reading stopped early (size limit, damaged archive): what was not seen is not
        # taken as gone from disk.
        self.complete = True
        self.stopped = ""
        # The archive read (its Members' bytes are read from it by offset), and the
        # bytes of files read and not yet stored.
        self.archive: Path | None = None
        # Or, for a merge read from its index alone: opens the stored upload, whose
        # members are then read by ranged requests (``object_storage.open_ranged``).
        self.open_upload: Callable[[], Any] | None = None
        self.held = 0
        # A merge of an upload older than one of the same sandbox merged already: the
        # files the workspace holds stay as they are (the later upload's), unread.
        self.fill_only = False

    @property
    def file_count(self) -> int:
        """The files and directories the import found (its items, and those settled)."""
        return len(self.items) + self.settled

    @cached_property
    def stored(self) -> dict[str, StoredFile]:
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
                path: StoredFile(pk, blob, kind, layout, gone is None, mode, mtime_ns, size)
                for path, pk, blob, kind, layout, gone, mode, mtime_ns, size in cursor.fetchall()
            }

    def collect_directory(self, root: Path) -> None:
        self.root = root
        previous = self.workspace.imports.order_by("-started_at", "-pk").first()
        racy_from = int((previous.started_at - RACY_WINDOW).timestamp() * 1e9) if previous else 0
        listing = tree.scan_listing(root, self.limits)
        self.listed = len(listing)
        if not self.merge:
            self.listing = listing_digest(root, self.limits, listing)
            if (
                previous is not None
                and previous.report.get("listing") == self.listing
                and listing.newest_file() < racy_from
            ):
                # Every path, size, mtime and mode as the previous import saw them, and
                # the importer is the only writer of the rows: nothing to read or write.
                self.same_as = previous
                return
        total = 0
        stopped_at = len(listing)  # reading stopped before this entry
        for i, (path, is_dir, size, mtime_ns, mode, device, inode) in enumerate(listing.rows()):
            item = Item(path, bool(is_dir), size, mode, mtime_ns)
            item.inode = pack_inode(device, inode)
            self.items[path] = item
            if is_dir:
                continue
            old = self.stored.get(path)
            if (
                old is not None
                and old.present
                and old.blob_id is not None
                and (old.size, old.mtime_ns) == (size, mtime_ns)
                and mtime_ns < racy_from
            ):
                item.digest = old.blob_id  # trusted: unchanged since the last import
                continue
            total += size
            if total > self.limits.max_total_bytes:
                del self.items[path]
                self.complete = False
                self.stopped = tree.total_exceeded(self.limits)
                stopped_at = i
                break
            if old is None and not self._room_for(size, path):
                item.deferred = True  # new: nothing to compare, read when stored
            else:
                self.read_item(item)
            if self.progress and len(self.items) % 500 == 0:
                self.progress("read", len(self.items), 0)
        # What the scan met before where reading stopped, in the order met.
        self.problems.extend(
            {"path": p.path, "error": p.error} for at, p in listing.problems if at <= stopped_at
        )
        if stopped_at < len(listing):
            self.problems.append({"path": listing.paths[stopped_at], "error": self.stopped})

    def _room_for(self, size: int, path: str) -> bool:
        """Whether a file's bytes can be held until stored; a raw memory is read now
        anyway (its header places the layouts)."""
        return self.held + size <= HELD_BYTES or tree.is_raw_memory_path(path)

    def _took(self, item: Item, data: bytes) -> None:
        """``data`` was read for ``item``: its digest and header taken, its bytes held
        until stored if there is room, else left in the source to be read again."""
        _fill(item, data)
        if self.held + len(data) <= HELD_BYTES or (self.root is None and item.offset < 0):
            self.held += len(data)
        else:
            item.data = None
            item.deferred = True

    def load(self, items: Sequence[Item]) -> list[Item]:
        """The bytes of ``items`` whose bytes were left in the source, read now (each
        checked to be the file the import saw; an archive member against its digest).
        Returns the items that have their bytes; the others became problems and left
        the import."""
        loaded: list[Item] = []
        fh = None
        try:
            for item in items:
                if item.deferred:
                    if item.offset >= 0:
                        if fh is None:
                            fh = self._open_archive()
                        ok = self._load_member(fh, item)
                    else:
                        ok = self._load_file(item)
                    if not ok:
                        self.items.pop(item.path, None)
                        continue
                loaded.append(item)
        finally:
            if fh is not None:
                fh.close()
        return loaded

    def _load_member(self, fh: Any, item: Item) -> bool:
        data = self._member_bytes(fh, item.path, item.offset, item.size)
        if data is None:
            return False
        digest = item.digest
        _fill(item, data)
        if digest not in (None, item.digest):
            return self._changed_archive(item.path)
        return True

    def _member_bytes(self, fh: Any, path: str, offset: int, size: int) -> bytes | None:
        """A member's bytes read by its offset; None (a problem) when the archive no
        longer holds that many there."""
        try:
            fh.seek(offset)
            data = fh.read(size)
        except OSError:
            data = b""
        if len(data) != size:
            self._changed_archive(path)
            return None
        return data

    def _changed_archive(self, path: str) -> bool:
        self.problems.append({"path": path, "error": CHANGED_WHILE_READ})
        self.complete = False  # what it held is not known: nothing is taken as gone
        return False

    def _load_file(self, item: Item) -> bool:
        # Changed since the scan, it is taken as it is now; its stored mtime is the
        # scan's, so the next import reads it again.
        data = self._file_bytes(item)
        if data is not None:
            _fill(item, data)
        return data is not None

    def _file_bytes(self, item: Item) -> bytes | None:
        """The bytes of ``item`` in the directory (the inode the scan saw); None (a
        problem) when it cannot be read."""
        assert self.root is not None
        try:
            return tree.read_file(self.root, item.path, item.scanned)
        except OSError as exc:
            self.problems.append(
                {"path": item.path, "error": f"could not be read ({exc.strerror or exc})"}
            )
            return None

    def read_item(self, item: Item) -> bool:
        """Read the file of ``item`` (of a directory source); a file that cannot be read
        becomes a problem and leaves the items."""
        data = self._file_bytes(item)
        if data is None:
            self.items.pop(item.path, None)
            return False
        self._took(item, data)
        return True

    def _open_archive(self) -> Any:
        if self.archive is not None:
            return open(self.archive, "rb")  # noqa: SIM115 (the caller closes it)
        assert self.open_upload is not None
        return self.open_upload()

    def collect_entries(self, entries: Entries, archive: Path | None = None) -> None:
        """Collect an archive's entries; its Members' bytes are read from ``archive``
        (or through ``open_upload``), now or when stored."""
        self.archive = archive
        fh = None
        try:
            for entry in entries:
                if isinstance(entry, Problem):
                    self.problems.append({"path": entry.path, "error": entry.error})
                    if entry.stops and self.complete:
                        self.complete = False
                        self.stopped = entry.error
                    continue
                if isinstance(entry, tree.Member):
                    item = Item(entry.path, False, entry.size, entry.mode, entry.mtime_ns)
                    item.offset = entry.offset
                    self.items[entry.path] = item
                    if self.fill_only and self._present(entry.path):
                        continue  # stays as the later upload left it: not read
                    if entry.path not in self.stored and not self._room_for(entry.size, entry.path):
                        item.deferred = True  # new: nothing to compare, read when stored
                        continue
                    if fh is None:
                        fh = self._open_archive()
                    data = self._member_bytes(fh, entry.path, entry.offset, entry.size)
                    if data is None:
                        del self.items[entry.path]
                        continue
                    self._took(item, data)
                else:
                    item = Item(entry.path, entry.is_dir, 0, entry.mode, entry.mtime_ns)
                    self.items[entry.path] = item
                    if entry.data is not None:
                        self._took(item, entry.data)
                if self.progress and len(self.items) % 500 == 0:
                    self.progress("read", len(self.items), 0)
        finally:
            if fh is not None:
                fh.close()

    def _present(self, path: str) -> bool:
        old = self.stored.get(path)
        return old is not None and old.present

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
            item = Item(
                rel, is_dir, 0 if is_dir else st.st_size, stat_mode.S_IMODE(mode), st.st_mtime_ns
            )
            item.inode = pack_inode(st.st_dev, st.st_ino)
            self.items[rel] = item
            if not is_dir and not self.read_item(item):
                self.complete = False


def _fill(item: Item, data: bytes) -> None:
    """``item`` with the bytes read of it: its size, digest and (a raw memory) header."""
    item.data, item.size, item.deferred = data, len(data), False
    item.digest = hashlib.sha256(data).hexdigest()
    if tree.is_raw_memory_path(item.path):
        # One string for all the raw memories of a folder of rollouts.
        item.rollout_folder = sys.intern(
            tree.rollout_folder(tree.header_value(data, "rollout_path"))
        )


def listing_digest(root: Path, limits: tree.Limits, listing: tree.Listing) -> str:
    """A digest of what a scan of ``root`` saw (every path with its size, mtime, mode
    and inode, every problem) under these limits: equal digests, same directory."""
    digest = hashlib.sha256(repr((os.fspath(root), limits)).encode())
    # Columns of machine integers rather than a repr per entry: a re-import of an
    # unchanged tree is mostly the scan and this.
    digest.update("\0".join(listing.paths).encode("utf-8", "surrogateescape"))
    digest.update(listing.dirs)
    try:
        for column in (listing.sizes, listing.mtimes, listing.modes):
            digest.update(array("q", column))
        digest.update(listing.devices)
        digest.update(listing.inodes)
    except OverflowError:  # a date after 2262, say: the exact, slower form
        digest.update(repr(list(listing.rows())).encode("utf-8", "surrogateescape"))
    problems = [problem for _, problem in listing.problems]
    digest.update(repr(problems).encode("utf-8", "surrogateescape"))
    return digest.hexdigest()
