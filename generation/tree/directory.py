"""Reading a workspace directory without following a link or leaving it, and
``read_source``, which reads a directory or a snapshot archive (``archive``)."""

from __future__ import annotations

import itertools
import os
import stat
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from .archive import check_tar_archive, read_archive
from .entries import (
    Entry,
    Limits,
    Problem,
    TreeError,
    permission_bits,
    printable_name,
    too_large,
    total_exceeded,
    valid_name,
)


def read_source(source: Path, limits: Limits = Limits()) -> Iterator[Entry | Problem]:
    """Yield the entries of a workspace directory or snapshot archive, and a Problem
    for everything skipped. Raises TreeError only when the source itself is unusable."""
    if source.is_symlink():
        raise TreeError(f"{source} is a symbolic link; give the real path.")
    if source.is_dir():
        return read_directory(source, limits)
    if source.is_file():
        check_tar_archive(source, limits)
        return read_archive(source, limits)
    raise TreeError(f"{source} does not exist.")


def read_directory(root: Path, limits: Limits = Limits()) -> Iterator[Entry | Problem]:
    """Walk ``root`` without following any link; never opens anything outside it."""
    if root.is_symlink() or not root.is_dir():
        raise TreeError(f"{root} is not a directory.")
    return _read_scanned(root, limits)


def _read_scanned(root: Path, limits: Limits) -> Iterator[Entry | Problem]:
    total = 0
    for item in scan_directory(root, limits):
        if isinstance(item, Problem):
            yield item
        elif item.is_dir:
            yield Entry(item.path, None, item.mode, item.mtime_ns)
        else:
            total += item.size
            if total > limits.max_total_bytes:
                yield Problem(item.path, total_exceeded(limits), stops=True)
                return
            try:
                data = read_file(root, item.path, item)
            except OSError as exc:
                yield Problem(item.path, f"could not be read ({exc.strerror or exc})")
                continue
            yield Entry(item.path, data, item.mode, item.mtime_ns)


class Stat(NamedTuple):
    """What ``lstat`` says of a workspace entry, without reading it (a tuple: a scan
    makes one per file, and tuples are the cheapest to build)."""

    path: str
    is_dir: bool
    size: int
    mtime_ns: int
    mode: int
    inode: tuple[int, int] = (0, 0)  # (st_dev, st_ino)


class Listing:
    """What a scan saw, as columns: entry ``i`` (sorted, depth first) is ``paths[i]``,
    ``dirs[i]`` (1 for a directory), ``sizes[i]`` and so on; a directory's size, device
    and inode are 0. ``problems`` holds ``(i, problem)``: met before entry ``i``.

    A re-import of an unchanged tree is mostly its scan and the digest of what it saw
    (``memoryui.importer.reading.listing_digest``): with an append per field, and the
    columns digested whole, the two take a third less time than with a ``Stat`` per
    entry."""

    __slots__ = ("paths", "dirs", "sizes", "mtimes", "modes", "devices", "inodes", "problems")

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.dirs = bytearray()
        self.sizes: list[int] = []
        self.mtimes: list[int] = []
        self.modes: list[int] = []
        # Machine integers: an int object each would be 32 bytes a file, held until the
        # import's items are made (which pack the two into one).
        self.devices = array("Q")
        self.inodes = array("Q")
        self.problems: list[tuple[int, Problem]] = []

    def __len__(self) -> int:
        return len(self.paths)

    def newest_file(self) -> int:
        """The latest mtime of a file listed (0 for none), in nanoseconds."""
        files = self.dirs.translate(_FLIP)
        return max(itertools.compress(self.mtimes, files), default=0)

    def rows(self) -> Iterator[tuple[str, int, int, int, int, int, int]]:
        """Each entry as (path, is a directory, size, mtime, mode, device, inode)."""
        return zip(
            self.paths,
            self.dirs,
            self.sizes,
            self.mtimes,
            self.modes,
            self.devices,
            self.inodes,
            strict=True,
        )

    def in_order(self) -> Iterator[Stat | Problem]:
        """The entries as ``Stat``, with the problems where the scan met them."""
        start = 0
        for at, problem in self.problems:
            yield from self._stats(start, at)
            yield problem
            start = at
        yield from self._stats(start, len(self.paths))

    def _stats(self, start: int, stop: int) -> Iterator[Stat]:
        columns = (self.paths, self.dirs, self.sizes, self.mtimes, self.modes)
        rows = zip(
            *(c[start:stop] for c in columns),
            self.devices[start:stop],
            self.inodes[start:stop],
            strict=True,
        )
        for path, is_dir, size, mtime, mode, device, inode in rows:
            yield Stat(path, bool(is_dir), size, mtime, mode, (device, inode))

    def clear(self) -> None:
        self.paths.clear()
        self.dirs.clear()
        for column in (self.sizes, self.mtimes, self.modes):
            column.clear()
        del self.devices[:], self.inodes[:]
        self.problems.clear()


_FLIP = bytes.maketrans(b"\0\1", b"\1\0")


def scan_directory(root: Path, limits: Limits = Limits()) -> Iterator[Stat | Problem]:
    """List every directory and regular file under ``root`` (sorted, depth first) with
    its stat, reporting links, devices, FIFOs, unreadable and oversized entries.
    A directory is listed when the one before it has been consumed."""
    listing = Listing()
    for _ in _scan(root, limits, listing):
        yield from listing.in_order()
        listing.clear()


def scan_listing(root: Path, limits: Limits = Limits()) -> Listing:
    """What ``scan_directory`` yields, all of it, as columns."""
    listing = Listing()
    for _ in _scan(root, limits, listing):
        pass
    return listing


def _scan(root: Path, limits: Limits, listing: Listing) -> Iterator[None]:
    """Adds each directory's entries to ``listing``, yielding after each directory."""
    if root.is_symlink() or not root.is_dir():
        raise TreeError(f"{root} is not a directory.")
    stack: list[tuple[str, str]] = [(os.fspath(root), "")]
    # The loop runs once per file of trees of hundreds of thousands: it avoids
    # per-entry Python calls it can. Names are listed from an open directory and each
    # is looked up in it (lstat with dir_fd): sorting plain names and a lookup relative
    # to the directory cost a quarter less than DirEntry objects sorted by name, each
    # stat'ed by its full path.
    lstat = os.lstat
    is_lnk, is_dir, is_reg = stat.S_ISLNK, stat.S_ISDIR, stat.S_ISREG
    max_bytes = limits.max_file_bytes
    paths, dirs, problems = listing.paths, listing.dirs, listing.problems
    add_path, add_dir, add_size = paths.append, dirs.append, listing.sizes.append
    add_mtime, add_mode = listing.mtimes.append, listing.modes.append
    add_device, add_inode = listing.devices.append, listing.inodes.append

    def problem(path: str, error: str) -> None:
        problems.append((len(paths), Problem(path, error)))

    while stack:
        abs_dir, rel_dir = stack.pop()
        try:
            # O_NOFOLLOW: a directory swapped for a link since it was listed is not entered.
            fd = os.open(abs_dir, _DIRECTORY_FLAGS)
        except OSError as exc:
            problem(rel_dir or ".", f"directory could not be listed ({exc.strerror})")
            yield
            continue
        try:
            try:
                names = os.listdir(fd)
            except OSError as exc:
                problem(rel_dir or ".", f"directory could not be listed ({exc.strerror})")
                names = []
            names.sort()
            prefix = rel_dir + "/" if rel_dir else ""
            subdirs = []
            for name in names:
                rel = prefix + name
                if not name.isascii() and not valid_name(name):
                    problem(printable_name(rel), "file name is not valid UTF-8; skipped")
                    continue
                try:
                    st = lstat(name, dir_fd=fd)
                except OSError as exc:
                    problem(rel, f"could not be read ({exc.strerror})")
                    continue
                mode = st.st_mode
                if is_reg(mode):
                    if st.st_size > max_bytes:
                        problem(rel, too_large(st.st_size, limits))
                        continue
                    add_path(rel)
                    add_dir(0)
                    add_size(st.st_size)
                    add_mtime(st.st_mtime_ns)
                    add_mode(permission_bits(mode))
                    add_device(st.st_dev)
                    add_inode(st.st_ino)
                elif is_lnk(mode):
                    problem(rel, "symbolic link; links are never followed, skipped")
                elif is_dir(mode):
                    add_path(rel)
                    add_dir(1)
                    add_size(0)
                    add_mtime(st.st_mtime_ns)
                    add_mode(permission_bits(mode))
                    add_device(0)
                    add_inode(0)
                    subdirs.append((f"{abs_dir}/{name}", rel))
                else:
                    problem(rel, "not a regular file (a device, FIFO or socket); skipped")
        finally:
            os.close(fd)
        stack.extend(reversed(subdirs))
        yield


_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def read_file(root: Path, rel: str, expected: Stat | None = None) -> bytes:
    """Read ``root/rel`` only if it is the regular file that the scan saw.

    The scan never descends through links; the opened file must be the very inode it
    listed, so a directory swapped for a link in between cannot lead outside ``root``.
    Without a scan result, the path itself must contain no link.
    """
    path = os.path.join(root, rel)
    if expected is None and os.path.realpath(path) != os.path.join(os.path.realpath(root), rel):
        raise OSError(0, "path passes through a symbolic link")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(0, "not a regular file")
        if expected is not None and (st.st_dev, st.st_ino) != expected.inode:
            raise OSError(0, "replaced while being read")
        return _read_all(fd, st.st_size)
    finally:
        os.close(fd)


def _read_all(fd: int, size: int) -> bytes:
    """Everything up to the end of the file (which may have grown since ``size``), with
    plain reads: a buffered file object per file costs more than the reading. A read
    of a regular file comes back short only at its end (or at Linux's 2 GB per read)."""
    first = os.read(fd, size + 1)
    if len(first) <= size and len(first) < 0x7FFFF000:
        return first
    parts = [first]
    while block := os.read(fd, 1 << 20):
        parts.append(block)
    return parts[0] if len(parts) == 1 else b"".join(parts)
