"""Reading an SDK snapshot tar (plain or compressed) member by member, refusing what
the SDK's own restore refuses, within limits that also count extended headers."""

from __future__ import annotations

import functools
import io
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, overload

from .archive_index import ArchiveIndex, IndexedMember, index_member
from .entries import (
    Entry,
    Limits,
    Link,
    Member,
    Problem,
    TreeError,
    human_size,
    link_stays_inside,
    normalize_member_name,
    permission_bits,
    printable_name,
    too_large,
    total_exceeded,
    valid_name,
    windows_drive,
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
    for item in _read(path, limits, links, index, leave_data=False):
        assert not isinstance(item, Member)
        yield item


def read_archive_lazily(
    path: Path, limits: Limits = Limits(), *, links: bool = False
) -> Iterator[Entry | Member | Link | Problem]:
    """``read_archive``, except that each regular file of a plain tar is a Member: its
    place in the archive, its bytes not read (a compressed archive has no places to go
    back to: its files are Entries, bytes and all). Checked and limited alike."""
    return _read(path, limits, links, None, leave_data=True)


def _read(
    path: Path, limits: Limits, links: bool, index: ArchiveIndex | None, leave_data: bool
) -> Iterator[Entry | Member | Link | Problem]:
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
    # A compressed archive's offsets are its decompressed stream's: no use.
    plain = isinstance(archive.fileobj, io.BufferedReader)
    if index is not None:
        index.members.clear()
        index.plain = plain
        rows = index.members if plain else None
    with archive:
        try:
            for member in _members(archive):
                name = member.name
                if not valid_name(name):
                    yield Problem(printable_name(name), "member name is not valid UTF-8; skipped")
                    continue
                rel = normalize_member_name(name)
                if rel is None:
                    continue  # the archive root "."
                if name.startswith("/"):
                    yield Problem(name, "absolute path in archive; skipped")
                    continue
                if "\\" in name or windows_drive(name):  # as the SDK's tar_utils
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
                        link = Link(
                            rel, member.linkname, permission_bits(member.mode), _mtime_ns(member)
                        )
                        if rows is not None:
                            rows.append(index_member(archive, member, link))
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
                    entry = Entry(rel, None, permission_bits(member.mode), _mtime_ns(member))
                    if rows is not None:
                        rows.append(index_member(archive, member, entry))
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
                    yield Problem(rel, too_large(member.size, limits))
                    continue
                if leave_data and plain and not member.issparse():
                    yield Member(
                        rel,
                        permission_bits(member.mode),
                        _mtime_ns(member),
                        member.offset_data,
                        member.size,
                    )
                    continue
                data = _member_data(archive, member)
                entry = Entry(rel, data, permission_bits(member.mode), _mtime_ns(member))
                if rows is not None:
                    rows.append(index_member(archive, member, entry))
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
    return _seconds_ns(int(member.mtime))


@functools.lru_cache(maxsize=4096)
def _seconds_ns(seconds: int) -> int:
    """One int object per time: a tar's members have whole-second times, mostly shared
    (a sandbox writes its files at once), and an import holds one per file until it
    is stored (36 bytes each: 10 MB at 100,000 rollouts)."""
    return seconds * 10**9


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
