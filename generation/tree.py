"""The on-disk memory tree of an Agents SDK sandbox workspace.

This is the only module that knows the file formats: how a workspace directory or a
``LocalSnapshot`` tar is read without following links or leaving the workspace, how
layouts are discovered, and how each kind of memory file is parsed. It never imports
Django.
"""

from __future__ import annotations

import array
import hashlib
import io
import json
import os
import re
import stat
import tarfile
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import IO, Any, Literal, NamedTuple, overload

from generation.kinds import FileKind

ROLLOUT_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,79}$")
TERMINAL_STATES = (
    "completed",
    "interrupted",
    "cancelled",
    "failed",
    "max_turns_exceeded",
    "guardrail_tripped",
)
DEFAULT_MEMORIES_DIR = "memories"
DEFAULT_SESSIONS_DIR = "sessions"
RAW_MEMORY_HEADERS = (
    "rollout_id",
    "updated_at",
    "rollout_path",
    "rollout_summary_file",
    "terminal_state",
)
SUMMARY_HEADERS = ("session_id", "updated_at", "rollout_path", "terminal_state")
MAX_JSON_DEPTH = 64


class TreeError(Exception):
    """The whole source cannot be read (missing, not a directory or archive)."""


@dataclass(frozen=True)
class Limits:
    """Size limits applied while reading. A file over ``huge_file_bytes`` is kept but
    flagged; one over ``max_file_bytes`` is not read; reading stops once
    ``max_total_bytes`` have been read (the guard against archive bombs)."""

    huge_file_bytes: int = 5 * 1024 * 1024
    max_file_bytes: int = 256 * 1024 * 1024
    max_total_bytes: int = 4 * 1024 * 1024 * 1024
    # A tar reader holds a member's PAX and GNU long-name/long-link headers in memory
    # whole: real ones take a few hundred bytes, so more than this stops the read.
    max_header_bytes: int = 1024 * 1024


@dataclass(frozen=True)
class Entry:
    """One regular file (``data`` set) or directory (``data`` None) of a workspace."""

    path: str
    data: bytes | None
    mode: int
    mtime_ns: int

    @property
    def is_dir(self) -> bool:
        return self.data is None


@dataclass(frozen=True)
class Link:
    """A symbolic link of a workspace whose target stays inside it (``target`` relative),
    as the SDK archives and restores them."""

    path: str
    target: str
    mode: int
    mtime_ns: int


def link_stays_inside(path: str, target: str) -> bool:
    """The SDK's restore rule: a relative target that, from the link's folder, never
    climbs above the workspace root."""
    if not target or PurePosixPath(target).is_absolute():
        return False
    depth = len(PurePosixPath(path).parts) - 1
    for part in PurePosixPath(target).parts:
        if part == "..":
            depth -= 1
            if depth < 0:
                return False
        elif part not in ("", "."):
            depth += 1
    return True


@dataclass(frozen=True)
class Problem:
    """Something in the source that could not be taken as it is, in words for a person."""

    path: str
    error: str
    stops: bool = False  # reading ended here: what follows was not seen


def human_size(size: int) -> str:
    value = float(size)
    for unit in ("bytes", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{int(value)} {unit}" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- reading a workspace -------------------------------------------------------------


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


def _valid_name(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in name


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


def scan_directory(root: Path, limits: Limits = Limits()) -> Iterator[Stat | Problem]:
    """List every directory and regular file under ``root`` (sorted, depth first) with
    its stat, reporting links, devices, FIFOs, unreadable and oversized entries."""
    if root.is_symlink() or not root.is_dir():
        raise TreeError(f"{root} is not a directory.")
    stack: list[tuple[str, str]] = [(os.fspath(root), "")]
    # The loop runs once per file of trees of tens of thousands: a re-import of an
    # unchanged tree is mostly this, so it avoids per-entry Python calls it can. Names
    # are listed from an open directory and each is looked up in it (lstat with dir_fd):
    # sorting plain names and a lookup relative to the directory cost a quarter less
    # than DirEntry objects sorted by name, each stat'ed by its full path.
    make = tuple.__new__
    lstat = os.lstat
    is_lnk, is_dir, is_reg, imode = stat.S_ISLNK, stat.S_ISDIR, stat.S_ISREG, stat.S_IMODE
    max_bytes = limits.max_file_bytes
    while stack:
        abs_dir, rel_dir = stack.pop()
        try:
            # O_NOFOLLOW: a directory swapped for a link since it was listed is not entered.
            fd = os.open(abs_dir, _DIRECTORY_FLAGS)
        except OSError as exc:
            yield Problem(rel_dir or ".", f"directory could not be listed ({exc.strerror})")
            continue
        try:
            try:
                names = os.listdir(fd)
            except OSError as exc:
                yield Problem(rel_dir or ".", f"directory could not be listed ({exc.strerror})")
                continue
            names.sort()
            prefix = rel_dir + "/" if rel_dir else ""
            subdirs = []
            for name in names:
                rel = prefix + name
                if not name.isascii() and not _valid_name(name):
                    yield Problem(_printable(rel), "file name is not valid UTF-8; skipped")
                    continue
                try:
                    st = lstat(name, dir_fd=fd)
                except OSError as exc:
                    yield Problem(rel, f"could not be read ({exc.strerror})")
                    continue
                mode = st.st_mode
                if is_reg(mode):
                    if st.st_size > max_bytes:
                        yield Problem(rel, _too_large(st.st_size, limits))
                    else:
                        yield make(
                            Stat,
                            (
                                rel,
                                False,
                                st.st_size,
                                st.st_mtime_ns,
                                imode(mode),
                                (st.st_dev, st.st_ino),
                            ),
                        )
                elif is_lnk(mode):
                    yield Problem(rel, "symbolic link; links are never followed, skipped")
                elif is_dir(mode):
                    yield Stat(rel, True, 0, st.st_mtime_ns, imode(mode))
                    subdirs.append((f"{abs_dir}/{name}", rel))
                else:
                    yield Problem(rel, "not a regular file (a device, FIFO or socket); skipped")
        finally:
            os.close(fd)
        stack.extend(reversed(subdirs))


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


def _printable(name: str) -> str:
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _too_large(size: int, limits: Limits) -> str:
    return (
        f"file is {human_size(size)}, over the {human_size(limits.max_file_bytes)} "
        "limit; not imported"
    )


def total_exceeded(limits: Limits) -> str:
    return (
        f"the workspace expands past {human_size(limits.max_total_bytes)}; "
        "import stopped reading here"
    )


MAX_EXTENDED_HEADERS = 16  # per member; tar writers emit at most a handful
SPARSE_REFUSED = "GNU sparse member in archive (the SDK never writes one); reading stopped here"


class HeaderLimitExceeded(Exception):
    """Extended headers past the limits; raised from inside ``tarfile`` before it
    reads them, so it is no ``TarError`` (those are taken for "not this format")."""


class _ArchiveBudget:
    """Counts what reading an archive costs: member data and the extended headers
    (PAX, GNU long name and long link) that ``tarfile`` reads whole into memory."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.total = 0
        self.pending = 0  # header bytes of the member being read
        self.headers = 0
        self.depth = 0

    def take_header(self, size: int) -> None:
        self.total += size
        self.pending += size
        self.headers += 1
        if self.pending > self.limits.max_header_bytes:
            raise HeaderLimitExceeded(
                f"a member's extended tar headers (PAX or GNU long names) declare "
                f"{human_size(self.pending)}, over the {human_size(self.limits.max_header_bytes)} "
                "limit; reading stopped here"
            )
        if self.headers > MAX_EXTENDED_HEADERS:
            raise HeaderLimitExceeded(
                f"a member has more than {MAX_EXTENDED_HEADERS} extended tar headers; "
                "reading stopped here"
            )
        if self.total > self.limits.max_total_bytes:
            raise HeaderLimitExceeded(total_exceeded(self.limits))


def _budgeted_tarinfo(budget: _ArchiveBudget) -> type[tarfile.TarInfo]:
    """A ``TarInfo`` that charges each extended header to ``budget`` before
    ``tarfile`` reads it (it would read a header of any declared size at once)."""

    class BudgetedTarInfo(tarfile.TarInfo):
        def _charged(self, process: Any, archive: tarfile.TarFile) -> tarfile.TarInfo:
            budget.take_header(self.size)
            budget.depth += 1  # the header's member is read inside ``process``
            try:
                member: tarfile.TarInfo = process(archive)
            finally:
                budget.depth -= 1
                if budget.depth == 0:
                    budget.pending = budget.headers = 0
            return member

        def _proc_gnulong(self, tarfile: tarfile.TarFile) -> tarfile.TarInfo:
            return self._charged(super()._proc_gnulong, tarfile)  # type: ignore[misc]

        def _proc_pax(self, tarfile: tarfile.TarFile) -> tarfile.TarInfo:
            return self._charged(super()._proc_pax, tarfile)  # type: ignore[misc]

        # GNU sparse maps are read block by block for as long as the archive says;
        # the SDK (Python's tarfile) never writes sparse members, so they are refused.
        def _proc_sparse(self, tarfile: tarfile.TarFile) -> tarfile.TarInfo:
            raise HeaderLimitExceeded(SPARSE_REFUSED)

        def _proc_gnusparse_10(self, *args: Any) -> None:
            raise HeaderLimitExceeded(SPARSE_REFUSED)

    return BudgetedTarInfo


def _open_archive(path: Path, budget: _ArchiveBudget) -> tarfile.TarFile:
    """Raises TreeError when ``path`` is not a (plain or compressed) tar archive, or
    when its first member's headers are over the limits."""
    try:
        return tarfile.open(path, mode="r:*", tarinfo=_budgeted_tarinfo(budget))
    except (tarfile.TarError, OSError) as exc:
        raise TreeError(f"{path.name} could not be opened as a tar archive ({exc}).") from exc
    except HeaderLimitExceeded as exc:
        raise TreeError(f"{path.name}: {exc}") from exc


def check_tar_archive(path: Path, limits: Limits = Limits()) -> None:
    """``tarfile.is_tarfile`` with bounded memory: raises TreeError, with the reason,
    unless ``path`` opens as a tar archive."""
    try:
        with _open_archive(path, _ArchiveBudget(limits)):
            pass
    except TreeError as exc:
        if isinstance(exc.__cause__, HeaderLimitExceeded):
            raise
        raise TreeError(f"{path.name} is neither a directory nor a tar archive.") from exc


class IndexedMember(NamedTuple):
    """Where a member read from a plain tar sits in it (``read_archive(index=...)``), so
    that it can be read again without parsing the archive: ``kind`` is ``f`` (file),
    ``d`` or ``l`` (``target`` is then its link's); ``start`` is where its first header
    block begins (an extended header's, if any), ``offset`` where its data begins,
    right after its own 512-byte header, whose size and checksum fields are ``tag``
    (what ``copy_indexed`` checks before it trusts the offsets)."""

    path: str
    kind: str
    mode: int
    mtime_ns: int
    start: int
    offset: int
    size: int
    target: str
    tag: str


@dataclass
class ArchiveIndex:
    """Filled by ``read_archive(index=...)``: ``members``, usable only when ``plain``
    (an uncompressed tar: a compressed one has no offsets to seek); ``verbatim`` when no
    global PAX header applies to them, so that each member's blocks say all there is
    to say of it and can be copied as they are (``copy_indexed``)."""

    members: list[IndexedMember] = field(default_factory=list)
    plain: bool = False
    verbatim: bool = False


class IndexMismatch(Exception):
    """The archive is not the one the index was made of (a member's header differs)."""


@dataclass(frozen=True)
class Blocks:
    """Consecutive members of an archive (``paths``: files and directories) as their
    tar blocks, headers and padding included, to be written as they are."""

    paths: list[str]
    data: bytes


_INDEX_FORMAT = b"memoryui-index-1\n"
_INDEX_NUMBERS = 5  # mode, mtime_ns, start, offset, size
# A tag: a header's size field (12 bytes) and checksum field (8 bytes), in hex.
TAG_CHARS = 40


def pack_index(index: ArchiveIndex) -> bytes | None:
    """The index as compact bytes (columns: names joined by NUL, the numbers as 64-bit
    arrays), zlib-compressed: a download unpacks tens of thousands of rows in a few
    milliseconds. None when a name holds a NUL (tar names cannot; then no index)."""
    members = index.members
    if any("\0" in m.path or "\0" in m.target for m in members):
        return None
    paths = "\0".join(m.path for m in members)
    targets = "\0".join(m.target for m in members)
    numbers = array.array(
        "q", [v for m in members for v in (m.mode, m.mtime_ns, m.start, m.offset, m.size)]
    )
    texts = [paths.encode(), targets.encode(), "".join(m.kind for m in members).encode()]
    texts.append("".join(m.tag for m in members).encode())
    head = array.array("q", [len(members), *(len(t) for t in texts)])
    return zlib.compress(_INDEX_FORMAT + head.tobytes() + numbers.tobytes() + b"".join(texts), 1)


def unpack_index(data: bytes) -> list[tuple[Any, ...]]:
    """``pack_index``'s rows, plain tuples laid out as IndexedMember."""
    raw = zlib.decompress(data)
    if not raw.startswith(_INDEX_FORMAT):
        raise ValueError("not a member index of this format")
    at = len(_INDEX_FORMAT)
    head = array.array("q")
    head.frombytes(raw[at : at + 5 * 8])
    count, *lengths = head
    at += 5 * 8
    if count == 0:
        return []
    numbers = array.array("q")
    numbers.frombytes(raw[at : at + count * _INDEX_NUMBERS * 8])
    at += count * _INDEX_NUMBERS * 8
    texts = []
    for length in lengths:
        texts.append(raw[at : at + length].decode())
        at += length
    paths, targets, kinds, tags = texts
    n = _INDEX_NUMBERS
    rows = zip(
        paths.split("\0"),
        kinds,
        *(numbers[i::n] for i in range(n)),
        targets.split("\0"),
        [tags[i : i + TAG_CHARS] for i in range(0, len(tags), TAG_CHARS)],
        strict=True,
    )
    return list(rows)


def _header_tag(header: bytes) -> str:
    return (header[124:136] + header[148:156]).hex()


def copy_indexed(
    fh: IO[bytes], index: Iterable[Sequence[Any]], *, run_bytes: int = 1 << 20
) -> Iterator[Blocks | Link]:
    """The members ``index`` lists (of a ``verbatim`` archive), files and directories as
    their own blocks, read by runs of members that follow each other in the archive (up
    to ``run_bytes`` each, unless one member is larger), every member's header checked
    first for its recorded size and checksum (IndexMismatch, nothing of that run
    yielded, when ``fh`` is not the archive indexed); links as Link (an archive writer
    puts them last)."""
    block_size = tarfile.BLOCKSIZE
    paths: list[str] = []
    spans: list[tuple[int, str]] = []  # (where its own header is in the run, its tag)
    run_start = run_end = 0

    def flush() -> Iterator[Blocks]:
        if not paths:
            return
        fh.seek(run_start)
        data = fh.read(run_end - run_start)
        if len(data) != run_end - run_start:
            raise IndexMismatch(paths[0])
        for (at, tag), path in zip(spans, paths, strict=True):
            if (data[at + 124 : at + 136] + data[at + 148 : at + 156]).hex() != tag:
                raise IndexMismatch(path)
        yield Blocks(paths[:], data)
        paths.clear()
        spans.clear()

    for path, kind, mode, mtime_ns, start, offset, size, target, tag in index:
        if kind == "l":
            yield from flush()
            yield Link(path, target, mode, mtime_ns)
            continue
        end = offset + size + (-size % block_size)
        if paths and (start != run_end or end - run_start > run_bytes):
            yield from flush()
        if not paths:
            run_start = start
        paths.append(path)
        spans.append((offset - block_size - run_start, tag))
        run_end = end
    yield from flush()


def _indexed(
    archive: tarfile.TarFile, member: tarfile.TarInfo, item: Entry | Link
) -> IndexedMember:
    fh = archive.fileobj
    assert fh is not None
    fh.seek(member.offset_data - tarfile.BLOCKSIZE)
    tag = _header_tag(fh.read(tarfile.BLOCKSIZE))
    start, offset = member.offset, member.offset_data
    if isinstance(item, Link):
        return IndexedMember(
            item.path, "l", item.mode, item.mtime_ns, start, offset, 0, item.target, tag
        )
    kind, size = ("d", 0) if item.data is None else ("f", len(item.data))
    return IndexedMember(item.path, kind, item.mode, item.mtime_ns, start, offset, size, "", tag)


@overload
def read_archive(
    path: Path,
    limits: Limits = ...,
    *,
    links: Literal[False] = False,
    index: ArchiveIndex | None = None,
) -> Iterator[Entry | Problem]: ...
@overload
def read_archive(
    path: Path,
    limits: Limits = ...,
    *,
    links: Literal[True],
    index: ArchiveIndex | None = None,
) -> Iterator[Entry | Link | Problem]: ...
def read_archive(
    path: Path,
    limits: Limits = Limits(),
    *,
    links: bool = False,
    index: ArchiveIndex | None = None,
) -> Iterator[Entry | Link | Problem]:
    """Read an SDK snapshot tar (plain or compressed) member by member, refusing what
    the SDK's own restore refuses: absolute names, ``..``, hard links, devices, FIFOs.
    Symbolic links are refused too, unless ``links``: then one whose target stays inside
    the workspace is a Link (what the SDK archives and restores), others are refused.
    Member data and extended headers both count against ``limits``. ``index`` gets an
    IndexedMember for each Entry and Link of a plain (uncompressed) tar."""
    budget = _ArchiveBudget(limits)
    seen: set[str] = set()
    try:
        archive = _open_archive(path, budget)
    except TreeError as exc:
        if isinstance(exc.__cause__, HeaderLimitExceeded):
            yield Problem(path.name, str(exc.__cause__), stops=True)
            return
        raise
    rows: list[IndexedMember] | None = None
    if index is not None:
        index.members.clear()
        # A compressed archive's offsets are its decompressed stream's: no use.
        index.plain = isinstance(archive.fileobj, io.BufferedReader)
        rows = index.members if index.plain else None
    with archive:
        try:
            for member in _members(archive):
                name = member.name
                if not _valid_name(name):
                    yield Problem(_printable(name), "member name is not valid UTF-8; skipped")
                    continue
                rel = _normalize_member_name(name)
                if rel is None:
                    continue  # the archive root "."
                if name.startswith("/"):
                    yield Problem(name, "absolute path in archive; skipped")
                    continue
                if "\\" in name or PureWindowsPath(name).drive:  # as the SDK's tar_utils
                    yield Problem(
                        name,
                        "Windows path (a backslash or a drive) in the member name, which "
                        "the SDK's restore refuses; skipped",
                    )
                    continue
                if ".." in rel.split("/"):  # rel has no empty or "." parts left
                    yield Problem(name, "path climbs out of the workspace with '..'; skipped")
                    continue
                if links and member.issym():
                    if rel in seen:
                        yield Problem(rel, "appears twice in the archive; kept the first")
                        continue
                    seen.add(rel)
                    if link_stays_inside(rel, member.linkname):
                        link = Link(rel, member.linkname, member.mode & 0o7777, _mtime_ns(member))
                        if rows is not None:
                            rows.append(_indexed(archive, member, link))
                        yield link
                    else:
                        yield Problem(
                            rel,
                            f"symbolic link to {member.linkname!r} points outside the "
                            "workspace (absolute or climbing out); skipped",
                        )
                    continue
                if member.issym() or member.islnk():
                    kind = "symbolic" if member.issym() else "hard"
                    yield Problem(rel, f"{kind} link in archive; links are never followed, skipped")
                    continue
                if member.ischr() or member.isblk() or member.isfifo():
                    yield Problem(rel, "device or FIFO in archive; skipped")
                    continue
                if rel in seen:
                    yield Problem(rel, "appears twice in the archive; kept the first")
                    continue
                seen.add(rel)
                if member.isdir():
                    entry = Entry(rel, None, member.mode & 0o7777, int(member.mtime) * 10**9)
                    if rows is not None:
                        rows.append(_indexed(archive, member, entry))
                    yield entry
                    continue
                if not member.isreg():
                    yield Problem(rel, "not a regular file; skipped")
                    continue
                # Skipped members are decompressed too, to get past them: count them.
                budget.total += member.size
                if budget.total > limits.max_total_bytes:
                    yield Problem(rel, total_exceeded(limits), stops=True)
                    return
                if member.size > limits.max_file_bytes:
                    yield Problem(rel, _too_large(member.size, limits))
                    continue
                data = _member_data(archive, member)
                entry = Entry(rel, data, member.mode & 0o7777, int(member.mtime) * 10**9)
                if rows is not None:
                    rows.append(_indexed(archive, member, entry))
                yield entry
            if index is not None:
                index.verbatim = index.plain and not archive.pax_headers
            if not _ends_cleanly(archive):
                yield Problem(
                    path.name,
                    "archive ends inside a member header (truncated or damaged); read up to there",
                    stops=True,
                )
        except (tarfile.TarError, OSError, EOFError) as exc:
            yield Problem(
                path.name, f"archive is damaged or truncated ({exc}); read up to here", stops=True
            )
        except HeaderLimitExceeded as exc:
            yield Problem(path.name, str(exc), stops=True)


def _mtime_ns(member: tarfile.TarInfo) -> int:
    return int(member.mtime) * 10**9


def _member_data(archive: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    """A regular member's bytes, read straight from the archive (``extractfile`` wraps
    each member in two file objects); sparse members still go through it."""
    if member.issparse() or archive.fileobj is None:
        fh = archive.extractfile(member)
        return fh.read() if fh is not None else b""
    archive.fileobj.seek(member.offset_data)
    data = archive.fileobj.read(member.size)
    if len(data) != member.size:
        raise tarfile.ReadError("unexpected end of data")
    return data


def _members(archive: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """The members one at a time, each forgotten once read: a TarFile otherwise keeps
    every member's header, tens of megabytes for a large snapshot."""
    while (member := archive.next()) is not None:
        archive.members.clear()  # type: ignore[attr-defined]  # typeshed leaves it out
        yield member


def _ends_cleanly(archive: tarfile.TarFile) -> bool:
    """Python's tar reader takes a header cut short after the first member for the
    end of the archive; a whole archive ends with a zero block there instead."""
    fileobj = archive.fileobj
    if fileobj is None:
        return True
    fileobj.seek(archive.offset)
    block = fileobj.read(tarfile.BLOCKSIZE)
    return len(block) == tarfile.BLOCKSIZE and not block.strip(b"\0")


def _normalize_member_name(name: str) -> str | None:
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts:
        return None
    return "/".join(parts)


# --- layouts ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LayoutDirs:
    memories_dir: str
    sessions_dir: str


_MARKER_DIRS = ("raw_memories", "rollout_summaries")
_MARKER_FILES = ("memory_summary.md", "phase_two_selection.json", "raw_memories.md")
_LAYOUT_SUBDIRS = ("raw_memories", "rollout_summaries", "skills")


def _parent(path: str) -> str:
    return path.rpartition("/")[0]


def discover_layouts(entries: Iterable[Entry]) -> list[LayoutDirs]:
    """Find every (memories_dir, sessions_dir) pair among read entries."""
    entries = list(entries)
    rollout_paths = {
        e.path: header_value(e.data, "rollout_path")
        for e in entries
        if e.data is not None and is_raw_memory_path(e.path)
    }
    return find_layouts(
        (e.path for e in entries if e.is_dir),
        (e.path for e in entries if not e.is_dir),
        rollout_paths,
    )


def is_raw_memory_path(path: str) -> bool:
    return path.endswith(".md") and _parent(path).rpartition("/")[2] == "raw_memories"


def find_layouts(
    dir_paths: Iterable[str], file_paths: Iterable[str], rollout_paths: dict[str, str]
) -> list[LayoutDirs]:
    """Find every (memories_dir, sessions_dir) pair in a workspace.

    A memories dir is any directory holding the SDK's markers. Its sessions dir comes
    from the ``rollout_path`` headers of its raw memories (``rollout_paths`` maps a raw
    memory's path to that header), else from the naming convention (``memories/x``
    pairs with ``sessions/x``). A directory of rollouts that no memories dir claims
    becomes a layout of its own by the same convention.
    """
    dirs = set(dir_paths)
    files = list(file_paths)
    for f in files:  # archives and partial trees may omit directory members
        parent = _parent(f)
        while parent and parent not in dirs:
            dirs.add(parent)
            parent = _parent(parent)

    candidates: set[str] = set()
    for d in dirs:
        if d.rpartition("/")[2] in _MARKER_DIRS:
            candidates.add(_parent(d))
    for f in files:
        if f.rpartition("/")[2] in _MARKER_FILES:
            candidates.add(_parent(f))
    # A directory inside another layout's own subdirectories is data, not a layout.
    candidates = {
        c
        for c in candidates
        if c
        and not any(
            c == f"{o}/{sub}" or c.startswith(f"{o}/{sub}/")
            for o in candidates
            for sub in _LAYOUT_SUBDIRS
        )
    }

    header_sessions: dict[str, Counter[str]] = {c: Counter() for c in candidates}
    for path, rollout_path in rollout_paths.items():
        memories_dir = _parent(_parent(path))
        if memories_dir not in candidates or not rollout_path:
            continue
        sessions_dir = _normalize_member_name(_parent(rollout_path.strip()))
        if sessions_dir and ".." not in sessions_dir.split("/"):
            header_sessions[memories_dir][sessions_dir] += 1

    layouts: dict[str, str] = {}
    for c in sorted(candidates):
        if header_sessions[c]:
            layouts[c] = header_sessions[c].most_common(1)[0][0]
        else:
            layouts[c] = _convention_sessions_dir(c)

    claimed_sessions = set(layouts.values())
    rollout_dirs = {_parent(f) for f in files if f.endswith(".jsonl") and _parent(f)}
    for d in sorted(rollout_dirs - claimed_sessions):
        conventional = _convention_memories_dir(d)
        if conventional and conventional not in layouts:
            layouts[conventional] = d
    return [LayoutDirs(m, s) for m, s in sorted(layouts.items())]


def _convention_sessions_dir(memories_dir: str) -> str:
    parts = memories_dir.split("/")
    if DEFAULT_MEMORIES_DIR in parts:
        i = parts.index(DEFAULT_MEMORIES_DIR)
        parts[i] = DEFAULT_SESSIONS_DIR
        return "/".join(parts)
    return f"{memories_dir}_sessions"


def _convention_memories_dir(sessions_dir: str) -> str | None:
    parts = sessions_dir.split("/")
    if DEFAULT_SESSIONS_DIR in parts:
        i = parts.index(DEFAULT_SESSIONS_DIR)
        parts[i] = DEFAULT_MEMORIES_DIR
        return "/".join(parts)
    return None


class Placement(NamedTuple):
    """Where a workspace file belongs: its layout (None outside every layout) and kind.
    (A tuple: an import makes one per file.)"""

    layout: LayoutDirs | None
    kind: FileKind


_TOP_LEVEL_KINDS = {
    "MEMORY.md": FileKind.MEMORY_INDEX,
    "memory_summary.md": FileKind.MEMORY_SUMMARY,
    "raw_memories.md": FileKind.RAW_MEMORIES_MERGED,
    "phase_two_selection.json": FileKind.SELECTION,
}


def classify(path: str, layouts: list[LayoutDirs], *, is_dir: bool = False) -> Placement:
    """Assign a path to the layout with the longest matching directory prefix."""
    # Once per file of an import: no string built per layout to compare with.
    best: LayoutDirs | None = None
    best_len = -1
    is_memories = False
    for layout in layouts:
        base = layout.memories_dir
        n = len(base)
        if n > best_len and path.startswith(base) and path[n : n + 1] == "/":
            best, best_len, is_memories = layout, n, True
        base = layout.sessions_dir
        n = len(base)
        if n > best_len and path.startswith(base) and path[n : n + 1] == "/":
            best, best_len, is_memories = layout, n, False
    if is_dir:
        return Placement(best, FileKind.DIRECTORY)
    if best is None:
        return Placement(None, FileKind.WORKSPACE_FILE)
    layout = best
    rel = path[best_len + 1 :]
    parts = rel.split("/")
    if not is_memories:
        kind = FileKind.ROLLOUT if len(parts) == 1 and rel.endswith(".jsonl") else None
    elif len(parts) == 1:
        kind = _TOP_LEVEL_KINDS.get(rel)
    elif parts[0] == "skills":
        kind = FileKind.SKILL
    elif len(parts) == 2 and rel.endswith(".md") and parts[0] == "raw_memories":
        kind = FileKind.RAW_MEMORY
    elif len(parts) == 2 and rel.endswith(".md") and parts[0] == "rollout_summaries":
        kind = FileKind.ROLLOUT_SUMMARY
    else:
        kind = None
    return Placement(layout, kind or FileKind.WORKSPACE_FILE)


# --- text ------------------------------------------------------------------------------


def decode_text(data: bytes) -> tuple[str, str | None]:
    """Decode UTF-8 for display; bad bytes become U+FFFD and the problem is described."""
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return (
            data.decode("utf-8", "replace"),
            f"not valid UTF-8 (first bad byte at offset {exc.start}); "
            "shown with replacement characters, stored unchanged",
        )


def header_value(data: bytes, key: str) -> str:
    """The SDK's rule: the first line anywhere that starts with ``key:``."""
    prefix = f"{key}:".encode()
    if b"\r" not in data:  # lines end at b"\n" only: find the line, split nothing
        if data.startswith(prefix):
            start = len(prefix)
        else:
            found = data.find(b"\n" + prefix)
            if found < 0:
                return ""
            start = found + 1 + len(prefix)
        end = data.find(b"\n", start)
        return data[start : len(data) if end < 0 else end].decode("utf-8", "replace").strip()
    for line in data.splitlines():
        if line.startswith(prefix):
            return line[len(prefix) :].decode("utf-8", "replace").strip()
    return ""


# str.splitlines() (the SDK's way to split lines) also breaks at "\r", "\x0b", "\x0c",
# "\x1c"-"\x1e", "\x85", "\u2028" and "\u2029"; text without them can be searched line
# by line with a regular expression, much faster.
_HEADER_RES: dict[str, re.Pattern[str]] = {}
_HEADER_BLOCK_RE = re.compile(r"\A(?:[A-Za-z_][A-Za-z0-9_]*:[^\n]*(?:\n|\Z))+(?:[ \t]*\n)?")


def _plain_breaks(text: str) -> bool:
    """Whether ``text`` breaks lines only at newlines. Substring tests, not a regular
    expression's character class (twice the cost): every raw memory and rollout summary
    of an import passes through here."""
    return not (
        "\r" in text
        or "\x0b" in text
        or "\x0c" in text
        or "\x1c" in text
        or "\x1d" in text
        or "\x1e" in text
        or "\x85" in text
        or "\u2028" in text
        or "\u2029" in text
    )


def read_headers(text: str, keys: Iterable[str]) -> dict[str, str]:
    """For each key, the value of the first line anywhere that starts with ``key:``."""
    if not _plain_breaks(text):
        return _read_headers_slow(text, keys)
    found: dict[str, str] = {}
    for key in keys:
        pattern = _HEADER_RES.get(key)
        if pattern is None:
            pattern = _HEADER_RES[key] = re.compile(f"^{re.escape(key)}:(.*)$", re.MULTILINE)
        match = pattern.search(text)
        if match:
            found[key] = match.group(1).strip()
    return found


def _read_headers_slow(text: str, keys: Iterable[str]) -> dict[str, str]:
    wanted = {f"{k}:": k for k in keys}
    found: dict[str, str] = {}
    for line in text.splitlines():
        for prefix, key in wanted.items():
            if key not in found and line.startswith(prefix):
                found[key] = line[len(prefix) :].strip()
        if len(found) == len(wanted):
            break
    return found


def split_header_block(text: str) -> tuple[str, str]:
    """Split ``key: value`` lines at the top of a file from the body after them."""
    if _plain_breaks(text):
        match = _HEADER_BLOCK_RE.match(text)
        return (match.group(0), text[match.end() :]) if match else ("", text)
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines) and re.match(r"^[A-Za-z_][A-Za-z0-9_]*:", lines[i]):
        i += 1
    if i == 0:
        return "", text
    head = "".join(lines[:i])
    rest = lines[i:]
    if rest and not rest[0].strip():
        head += rest[0]
        rest = rest[1:]
    return head, "".join(rest)


def read_header_block(text: str, keys: Sequence[str]) -> tuple[dict[str, str], str]:
    """``read_headers(text, keys)`` and the body of ``split_header_block(text)`` in one
    pass: the SDK writes its headers at the top, so their first lines anywhere are the
    header block's, and only a key missing from it is looked for further down."""
    if not _plain_breaks(text):
        return _read_headers_slow(text, keys), split_header_block(text)[1]
    match = _HEADER_BLOCK_RE.match(text)
    if match is None:
        return read_headers(text, keys), text
    found: dict[str, str] = {}
    for line in match.group(0).split("\n"):
        key, colon, value = line.partition(":")
        if colon and key in keys and key not in found:
            found[key] = value.strip()
    if len(found) < len(keys):
        found.update(read_headers(text, [k for k in keys if k not in found]))
    return {k: found[k] for k in keys if k in found}, text[match.end() :]


# --- rollouts --------------------------------------------------------------------------


@dataclass
class Segment:
    line: int
    updated_at: str
    rollout_id: str
    input: list[Any]
    generated_items: list[Any]
    interruptions: list[Any] | None
    terminal_metadata: dict[str, Any]
    final_output: Any
    has_final_output_key: bool

    @property
    def terminal_state(self) -> str:
        state = self.terminal_metadata.get("terminal_state")
        return state if isinstance(state, str) and state else "unknown"


@dataclass
class ParsedRollout:
    segments: list[Segment] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def last(self) -> Segment | None:
        return self.segments[-1] if self.segments else None

    @property
    def updated_at(self) -> str:
        return self.last.updated_at if self.last and self.last.updated_at else "unknown"

    @property
    def terminal_state(self) -> str:
        return self.last.terminal_state if self.last else "unknown"

    @property
    def title(self) -> str:
        """The first thing the user asked, for lists."""
        for seg in self.segments:
            for item in seg.input:
                if isinstance(item, dict) and item.get("role") == "user":
                    text = message_text(item)
                    if text:
                        return " ".join(text.split())[:200]
        return ""

    @property
    def item_count(self) -> int:
        return sum(len(s.input) + len(s.generated_items) for s in self.segments)


def message_text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return ""


SEARCH_TEXT_LIMIT = 256_000
_SEARCHED_KEYS = ("name", "arguments", "input", "output", "action", "query", "code")


def rollout_search_text(parsed: ParsedRollout, limit: int = SEARCH_TEXT_LIMIT) -> str:
    """The words of a transcript worth searching: messages, tool names, arguments and
    outputs, final outputs; capped at ``limit`` characters."""
    # Once per rollout of an import: plain loops with type() tests and no work for the
    # keys an item lacks (most of them).
    parts: list[str] = []
    append = parts.append
    size = 0
    for segment in parsed.segments:
        for item in (*segment.input, *segment.generated_items, segment.final_output):
            if isinstance(item, str):
                if item:
                    append(item)
                    size += len(item)
            elif isinstance(item, dict):
                get = item.get
                content = get("content")
                text = content if type(content) is str else message_text(item)
                if text:
                    append(text)
                    size += len(text)
                for key in _SEARCHED_KEYS:
                    value = get(key)
                    if value is None:
                        continue
                    if isinstance(value, str):
                        if value:
                            append(value)
                            size += len(value)
                    elif isinstance(value, dict | list):
                        dumped = json.dumps(value, ensure_ascii=False)[:4000]
                        append(dumped)
                        size += len(dumped)
            if size > limit:
                break  # the text is cut at ``limit`` anyway
    return "\n".join(parts)[:limit].replace("\x00", " ")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array"


def _too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether containers nest more than ``limit`` levels (level by level, no recursion)."""
    level = [value]
    depth = 1
    while level:
        if depth > limit:
            return True
        below: list[Any] = []
        for node in level:
            children = node.values() if type(node) is dict else node
            below.extend(c for c in children if type(c) is dict or type(c) is list)
        level = below
        depth += 1
    return False


def _as_list(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    if isinstance(value, str):  # a plain string input
        return [{"content": value, "role": "user"}]
    return []


def parse_rollout(data: bytes) -> ParsedRollout:
    """Parse a rollout JSONL file into its run segments. A bad line is reported and
    skipped; the good segments around it are kept."""
    result = ParsedRollout()
    if not data.strip():
        result.problems.append("empty file: no run segments")
        return result
    for found in iter_segments(data):
        if isinstance(found, Segment):
            result.segments.append(found)
        else:
            result.problems.append(found)
    if not result.segments and not result.problems:
        result.problems.append("empty file: no run segments")
    return result


# JSON escapes of UTF-16 surrogates: a high one with the low one after it (group 1), or
# one alone (group 1 empty). An escaped backslash before "u" only costs a look at the line.
# One pass of one pattern that starts with a literal: ~1.5 ms per 1,000 rollouts.
_SURROGATE_ESCAPES = re.compile(
    rb"\\u[dD](?:[89abAB][0-9a-fA-F]{2}(\\u[dD][c-fC-F][0-9a-fA-F]{2})?|[c-fC-F][0-9a-fA-F]{2})"
)


def _without_lone_surrogates(value: Any) -> tuple[Any, bool]:
    """``value`` (parsed JSON) with each lone surrogate in its strings, keys included,
    replaced by U+FFFD (level by level, no recursion: the depth is checked already), and
    whether there was one (an escaped backslash before "ud800" is text, not one)."""
    changed = False

    def fixed(text: str) -> str:
        nonlocal changed
        if text.isascii():
            return text
        clean = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        changed = changed or clean != text
        return clean

    if isinstance(value, str):
        return fixed(value), changed
    root = [value]
    level: list[Any] = [root]
    while level:
        below: list[Any] = []
        for node in level:
            items = node.items() if type(node) is dict else enumerate(node)
            updates = []
            for key, child in items:
                if type(child) is str:
                    updates.append((key, fixed(child)))
                elif type(child) is dict or type(child) is list:
                    below.append(child)
            for key, child in updates:
                node[key] = child
            if type(node) is dict and any(type(k) is str and not k.isascii() for k in node):
                renamed = {fixed(k): v for k, v in node.items()}
                node.clear()
                node.update(renamed)
        level = below
    return root[0], changed


def _lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    """The numbered lines of ``data``, one copied at a time (``split`` would copy the
    whole file at once)."""
    start, number = 0, 0
    while start < len(data):
        end = data.find(b"\n", start)
        if end < 0:
            end = len(data)
        number += 1
        yield number, data[start:end]
        start = end + 1


def iter_segments(data: bytes) -> Iterator[Segment | str]:
    """The run segments of a rollout, one at a time, and a problem (a string) for each
    bad line: a segment is parsed only when it is reached, so that a caller that keeps
    none of them holds one segment in memory at most."""
    for number, raw in _lines(data):
        if not raw.strip():
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield (
                f"line {number}: not valid UTF-8 (bad byte at column {exc.start + 1}); "
                "segment skipped"
            )
            continue
        try:
            value = json.loads(line)
        except RecursionError:
            yield f"line {number}: JSON nested absurdly deep; segment skipped"
            continue
        except ValueError as exc:
            msg = getattr(exc, "msg", str(exc))
            col = getattr(exc, "colno", None)
            where = f" at column {col}" if col else ""
            yield f"line {number}: not valid JSON ({msg}{where}); segment skipped"
            continue
        del line
        if not isinstance(value, dict):
            yield f"line {number}: a JSON {_json_type(value)}, not an object; segment skipped"
            continue
        # Nesting can only pass the limit with more brackets than the limit.
        if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH and _too_deep(value):
            yield (
                f"line {number}: JSON nested more than {MAX_JSON_DEPTH} levels deep; "
                "segment skipped"
            )
            continue
        if any(m[1] is None for m in _SURROGATE_ESCAPES.finditer(raw)):
            # Valid JSON, but "\ud800" alone is no character: no UTF-8 holds it, so the
            # database and the page could not take the text. Each becomes U+FFFD.
            value, changed = _without_lone_surrogates(value)
            if changed:
                yield (
                    f"line {number}: a \\u escape for half a character (a lone UTF-16 "
                    "surrogate); shown as U+FFFD"
                )
        del raw
        terminal = value.get("terminal_metadata")
        interruptions = value.get("interruptions")
        yield Segment(
            line=number,
            updated_at=str(value.get("updated_at") or ""),
            rollout_id=str(value.get("rollout_id") or ""),
            input=_as_list(value.get("input")),
            generated_items=_as_list(value.get("generated_items")),
            interruptions=interruptions if isinstance(interruptions, list) else None,
            terminal_metadata=terminal if isinstance(terminal, dict) else {},
            final_output=value.get("final_output"),
            has_final_output_key="final_output" in value,
        )


# --- raw memories, summaries, selection ------------------------------------------------


@dataclass
class RawMemory:
    headers: dict[str, str]
    body: str
    problems: list[str]

    @property
    def rollout_id(self) -> str:
        return self.headers.get("rollout_id", "")

    @property
    def selectable(self) -> bool:
        """Phase two only considers raw memories with both of these headers."""
        return bool(self.headers.get("rollout_id") and self.headers.get("rollout_summary_file"))


def parse_raw_memory(text: str) -> RawMemory:
    headers, body = read_header_block(text, RAW_MEMORY_HEADERS)
    problems = []
    if not text.strip():
        problems.append("empty file")
    else:
        missing = [k for k in ("rollout_id", "rollout_summary_file") if not headers.get(k)]
        if missing:
            problems.append(
                "no " + " or ".join(f"`{k}:`" for k in missing) + " header; phase two "
                "will never select this raw memory"
            )
    return RawMemory(headers=headers, body=body, problems=problems)


def updated_at_sort_key(updated_at: str) -> tuple[int, str]:
    """Phase two's order: a real timestamp first, compared as a string."""
    value = (updated_at or "").strip()
    if not value or value == "unknown":
        return (0, "")
    return (1, value)


@dataclass
class RolloutSummary:
    headers: dict[str, str]
    body: str
    rollout_id: str
    slug: str
    problems: list[str]


def parse_rollout_summary(
    filename: str, text: str, known_ids: Iterable[str] = ()
) -> RolloutSummary:
    """Parse ``<rollout_id>_<slug>.md``. Ids and slugs may both contain ``_``, so the id
    comes from the ``rollout_path`` header, else from a known rollout id that prefixes
    the name, else from the first underscore."""
    headers, body = read_header_block(text, SUMMARY_HEADERS)
    stem = filename[:-3] if filename.endswith(".md") else filename
    rollout_id = ""
    rollout_path = headers.get("rollout_path", "")
    if rollout_path:
        candidate = _path_name(rollout_path)
        if candidate.endswith(".jsonl"):
            candidate = candidate[: -len(".jsonl")]
        if stem.startswith(candidate + "_"):
            rollout_id = candidate
    if not rollout_id:
        prefixes = sorted((i for i in known_ids if stem.startswith(i + "_")), key=len)
        rollout_id = prefixes[-1] if prefixes else stem.partition("_")[0]
    slug = stem[len(rollout_id) + 1 :]
    problems = []
    if not text.strip():
        problems.append("empty file")
    elif not headers:
        problems.append("no header lines (session_id, updated_at, rollout_path, terminal_state)")
    return RolloutSummary(headers, body, rollout_id, slug, problems)


def _path_name(path: str) -> str:
    """``PurePosixPath(path).name``, without a path object for a plain path."""
    if path.endswith("/") or "//" in path or "/." in path or path.startswith("."):
        return PurePosixPath(path).name
    return path.rpartition("/")[2]


@dataclass
class SelectionItem:
    rollout_id: str
    updated_at: str
    rollout_path: str
    rollout_summary_file: str
    terminal_state: str


@dataclass
class Selection:
    items: list[SelectionItem]
    updated_at: str
    problem: str | None


def parse_selection(data: bytes) -> Selection:
    """Parse ``phase_two_selection.json`` leniently, as the SDK does: anything invalid
    means "no previous selection", and a malformed item is skipped."""
    invalid = "; the SDK treats it as no previous selection"
    try:
        payload = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        return Selection([], "", "not valid UTF-8" + invalid)
    except (ValueError, RecursionError) as exc:
        return Selection([], "", f"not valid JSON ({getattr(exc, 'msg', exc)})" + invalid)
    if not isinstance(payload, dict):
        return Selection([], "", "not a JSON object" + invalid)
    if any(m[1] is None for m in _SURROGATE_ESCAPES.finditer(data)):
        payload = _without_lone_surrogates(payload)[0]  # no UTF-8 (nor jsonb) holds one
    selected = payload.get("selected")
    if not isinstance(selected, list):
        return Selection([], "", 'no "selected" list' + invalid)
    items = []
    skipped = 0
    for raw in selected:
        if not isinstance(raw, dict):
            skipped += 1
            continue
        rollout_id = str(raw.get("rollout_id") or "").strip()
        summary_file = str(raw.get("rollout_summary_file") or "").strip()
        if not rollout_id or not summary_file:
            skipped += 1
            continue
        items.append(
            SelectionItem(
                rollout_id=rollout_id,
                updated_at=str(raw.get("updated_at") or "").strip(),
                rollout_path=str(raw.get("rollout_path") or "").strip(),
                rollout_summary_file=summary_file,
                terminal_state=str(raw.get("terminal_state") or "").strip(),
            )
        )
    problem = None
    if skipped:
        problem = f"{skipped} selected item(s) lack rollout_id or rollout_summary_file; ignored"
    return Selection(items, str(payload.get("updated_at") or ""), problem)


def select_for_consolidation(raw_memory_texts: Iterable[str], limit: int) -> list[SelectionItem]:
    """Phase two's input: the ``limit`` most recent selectable raw memories, ordered by
    (has a real ``updated_at``, ``updated_at`` as a string, rollout id), newest first."""
    ranked: list[tuple[tuple[int, str], str, SelectionItem]] = []
    for text in raw_memory_texts:
        headers = read_headers(text.rstrip("\n"), RAW_MEMORY_HEADERS)
        rollout_id = headers.get("rollout_id", "")
        summary_file = headers.get("rollout_summary_file", "")
        if not rollout_id or not summary_file:
            continue
        item = SelectionItem(
            rollout_id=rollout_id,
            updated_at=headers.get("updated_at", ""),
            rollout_path=headers.get("rollout_path", ""),
            rollout_summary_file=summary_file,
            terminal_state=headers.get("terminal_state", ""),
        )
        ranked.append((updated_at_sort_key(item.updated_at), rollout_id, item))
    ranked.sort(key=lambda entry: (entry[0], entry[1]), reverse=True)
    return [entry[2] for entry in ranked[:limit]]


@dataclass(frozen=True)
class SelectionDiff:
    retained: list[str]
    added: list[str]
    removed: list[str]


def diff_selection(
    previous: Iterable[SelectionItem], current: Iterable[SelectionItem]
) -> SelectionDiff:
    """What a consolidation keeps, brings in and forgets, by rollout id."""
    before = [item.rollout_id for item in previous]
    now = [item.rollout_id for item in current]
    before_set, now_set = set(before), set(now)
    return SelectionDiff(
        retained=[r for r in now if r in before_set],
        added=[r for r in now if r not in before_set],
        removed=[r for r in before if r not in now_set],
    )


def dump_selection(items: Iterable[SelectionItem], updated_at: str) -> str:
    payload = {
        "version": 1,
        "updated_at": updated_at,
        "selected": [
            {
                "rollout_id": item.rollout_id,
                "updated_at": item.updated_at,
                "rollout_path": item.rollout_path,
                "rollout_summary_file": item.rollout_summary_file,
                "terminal_state": item.terminal_state,
            }
            for item in items
        ],
    }
    return json.dumps(payload, indent=2) + "\n"


def merge_raw_memories(texts_in_order: Iterable[str]) -> str:
    """``raw_memories.md``: the selected raw memories joined by a blank line."""
    return "\n\n".join(text.rstrip("\n") for text in texts_in_order)


def dump_raw_memory(
    *,
    rollout_id: str,
    updated_at: str,
    rollout_path: str,
    rollout_summary_file: str,
    terminal_state: str,
    body: str,
) -> str:
    return (
        f"rollout_id: {rollout_id}\n"
        f"updated_at: {updated_at}\n"
        f"rollout_path: {rollout_path}\n"
        f"rollout_summary_file: {rollout_summary_file}\n"
        f"terminal_state: {terminal_state}\n\n"
        f"{body.rstrip()}\n"
    )


def dump_rollout_summary(
    *, session_id: str, updated_at: str, rollout_path: str, terminal_state: str, body: str
) -> str:
    return (
        f"session_id: {session_id}\n"
        f"updated_at: {updated_at}\n"
        f"rollout_path: {rollout_path}\n"
        f"terminal_state: {terminal_state}\n\n"
        f"{body.rstrip()}\n"
    )


def normalize_slug(value: str) -> str | None:
    """The SDK's slug rule: strip, drop one trailing ``.md``, then validate."""
    slug = value.strip()
    if slug.endswith(".md"):
        slug = slug[: -len(".md")]
    return slug if SLUG_RE.fullmatch(slug) else None


def skill_name(layout_relative_path: str) -> str:
    """``skills/<name>/...`` -> ``<name>``."""
    parts = layout_relative_path.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "skills" else ""
