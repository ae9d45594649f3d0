"""Where each member of a plain tar sits (``read_archive(index=...)``), packed for
storage, and copying members by those offsets without parsing the archive again."""

from __future__ import annotations

import array
import os
import tarfile
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, NamedTuple

from .entries import Entry, Link, Member


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


# A header's tag is its size field and its checksum field, which end at this byte.
_TAGGED = 156


def _header_tag(header: bytes | bytearray) -> str:
    return (header[124:136] + header[148:_TAGGED]).hex()


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


def check_indexed(fh: IO[bytes], index: Sequence[Sequence[Any]]) -> None:
    """Raise IndexMismatch unless every member ``index`` lists has its recorded header
    (size and checksum) where the index says: ``fh`` is the archive indexed. The headers
    are read a window of the file at a time into one buffer (members lie in order, most
    of them small): a seek and a buffered read per member copied 8 KiB each, twice the
    time for thousands of members."""
    block = tarfile.BLOCKSIZE
    fd = fh.fileno()
    window = bytearray(_CHECK_WINDOW)
    view = memoryview(window)
    start, end = 0, 0  # the part of the file in the window
    for path, kind, _mode, _mtime_ns, _start, offset, _size, _target, tag in index:
        if kind == "l":
            continue
        header = offset - block
        if header < start or offset > end:
            if header < 0:
                raise IndexMismatch(path)
            start = header
            end = start + os.preadv(fd, [view], start)
            if offset > end:  # the file ends inside this header
                raise IndexMismatch(path)
        at = header - start
        if (window[at + 124 : at + 136] + window[at + 148 : at + _TAGGED]).hex() != tag:
            raise IndexMismatch(path)  # its size and checksum, as _header_tag reads them


_CHECK_WINDOW = 1 << 20


def indexed_entries(fh: IO[bytes], index: Sequence[Sequence[Any]]) -> Iterator[Entry | Link]:
    """The members ``index`` lists, read by their offsets without parsing the archive
    again: for an archive that was read whole and found safe when it came in (a
    sandbox's upload), so that its merge reads each member's bytes once and no header
    through ``tarfile``. Check ``fh`` with ``check_indexed`` first; a member cut short
    raises IndexMismatch."""
    for path, kind, mode, mtime_ns, _start, offset, size, target, _tag in index:
        if kind == "l":
            yield Link(path, target, mode, mtime_ns)
            continue
        if kind == "d":
            yield Entry(path, None, mode, mtime_ns)
            continue
        fh.seek(offset)
        data = fh.read(size)
        if len(data) != size:
            raise IndexMismatch(path)
        yield Entry(path, data, mode, mtime_ns)


def indexed_members(index: Sequence[Sequence[Any]]) -> Iterator[Entry | Member | Link]:
    """``indexed_entries`` without reading anything: each regular file is a Member, its
    place in the archive as the index gives it (checked with ``check_indexed``)."""
    for path, kind, mode, mtime_ns, _start, offset, size, target, _tag in index:
        if kind == "l":
            yield Link(path, target, mode, mtime_ns)
        elif kind == "d":
            yield Entry(path, None, mode, mtime_ns)
        else:
            yield Member(path, mode, mtime_ns, offset, size)


def index_member(
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
