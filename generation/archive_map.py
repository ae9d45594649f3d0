"""Where each member of an archive memoryui wrote sits, so that the next archive of
mostly the same files copies their blocks from it instead of building them again.

No Django here. A member's blocks (its header, any PAX header before it, its data and
padding) are settled by its path, its content (a digest), its mode and its modification
time in whole seconds, with this writer (``WRITER``): a member of the next archive
with the same four is the same bytes, and is copied from the previous archive as a run
of consecutive members (``export.Copy``), which the archive's digest then covers like
any other bytes. Everything else is built as usual.

``Reuser`` sits between the rows an archive is made of and the writer: it passes each
row on, or folds it into a run to copy; as the writer takes each item it notes where
(``placed``), so that the new archive's map is known once it is written.
"""

from __future__ import annotations

import marshal
import sys
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .export import Copy, ExportError, Member, Row

# The writer's version as far as its bytes go: a map of another writer's archive is
# never used (its members might be laid out otherwise).
WRITER = 1

# A row to write, with what settles its bytes: (path, data, mode, mtime_ns, content),
# content the digest of data ("" for a directory). data None with a content: the caller
# saw the member in the previous archive and fetched no bytes for it.
Keyed = tuple[str, bytes | None, int, int, str]


@dataclass(frozen=True)
class Region:
    """Members the caller copied into the archive as one stretch (a sandbox's own files,
    from its upload): settled by ``key`` alone (the upload's digest, say), at ``start``
    to ``end``, holding ``paths``, and the links the writer put at the archive's end
    (path, target, mode, mtime_ns)."""

    key: str
    start: int
    end: int
    paths: tuple[str, ...]
    links: tuple[tuple[str, str, int, int], ...] = ()


@dataclass
class ArchiveMap:
    """path -> (content, mode, mtime in seconds, start, end) of each mapped member, and
    the region the caller copied, if any. A row whose path maps to its content, mode &
    0o7777 and mtime // 10**9 is in the archive as it is (``Reuser.members`` and
    ``snapshot_members.contents_beside`` test it inline: they run once per member)."""

    members: dict[str, tuple[str, int, int, int, int]] = field(default_factory=dict)
    region: Region | None = None

    def pack(self) -> bytes:
        """The map as bytes: Python's own ``marshal`` format (tens of thousands of
        members load in milliseconds), after a header naming this writer and Python,
        and a CRC-32 of what follows."""
        region = None
        if self.region is not None:
            r = self.region
            region = (r.key, r.start, r.end, r.paths, r.links)
        body = marshal.dumps((self.members, region))
        return _header() + b"%08x\n" % zlib.crc32(body) + body

    @classmethod
    def unpack(cls, data: bytes) -> ArchiveMap:
        """``pack``'s map; ValueError if ``data`` is not one of this writer's and this
        Python's, or damaged."""
        header = _header()
        if not data.startswith(header) or len(data) < len(header) + 9:
            raise ValueError("not an archive map of this writer and Python")
        body = data[len(header) + 9 :]
        if data[len(header) : len(header) + 9] != b"%08x\n" % zlib.crc32(body):
            raise ValueError("a damaged archive map")
        try:
            members, region = marshal.loads(body)
            found = cls(members, Region(*region) if region is not None else None)
        except (EOFError, TypeError, ValueError) as exc:
            raise ValueError("a damaged archive map") from exc
        if not isinstance(found.members, dict):
            raise ValueError("a damaged archive map")
        return found


def _header() -> bytes:
    python = ".".join(map(str, sys.version_info[:3]))
    return b"memoryui-archive-map %d %s marshal %d\n" % (WRITER, python.encode(), marshal.version)


class Reuser:
    """The writer's members for ``rows``, copied where ``previous`` (the map of the
    archive open as ``fd``) holds them; pass ``placed`` to the writer, then
    ``archive_map()`` is the new archive's map of these rows."""

    def __init__(self, previous: ArchiveMap | None = None, fd: int | None = None) -> None:
        self.previous = previous if fd is not None else None
        self.fd = fd
        self.placed: list[int] = []  # the writer: where each item it took begins
        self.copied = 0  # members copied from the previous archive
        self.built = 0
        # Each item the writer took from here, by its index among all it took: a member
        # written anew (its path, and what settles its bytes), or a run copied (its
        # members' paths and places in the previous archive, and None).
        self._items: list[tuple[int, Any, tuple[str, int, int, int, int] | None]] = []

    def members(self, rows: Iterable[Keyed]) -> Iterator[Member]:
        members: dict[str, tuple[str, int, int, int, int]] = (
            self.previous.members if self.previous is not None else {}
        )
        get = members.get
        run: list[tuple[str, tuple[str, int, int, int, int]]] = []
        run_end = 0
        for path, data, mode, mtime_ns, content in rows:
            mode &= 0o7777
            mtime = mtime_ns // 1_000_000_000
            old = get(path)
            if old is not None and old[0] == content and old[1] == mode and old[2] == mtime:
                if old[3] != run_end and run:
                    yield self._copy(run)
                    run = []
                run.append((path, old))
                run_end = old[4]
                continue
            if data is None and content:
                raise ExportError(f"{path} was to come from the previous archive, which lacks it")
            if run:
                yield self._copy(run)
                run = []
            self._items.append((len(self.placed), path, (content, mode, mtime, 0, 0)))
            self.built += 1
            row: Row = (path, data, mode, mtime_ns)
            yield row
        if run:
            yield self._copy(run)

    def _copy(self, run: list[tuple[str, tuple[str, int, int, int, int]]]) -> Copy:
        assert self.fd is not None
        self._items.append((len(self.placed), run, None))
        self.copied += len(run)
        return Copy(self.fd, run[0][1][3], run[-1][1][4], tuple(path for path, _ in run))

    def archive_map(self) -> ArchiveMap:
        """Where the writer put each of the rows (after it wrote them all)."""
        placed = self.placed
        members: dict[str, tuple[str, int, int, int, int]] = {}
        for index, what, settled in self._items:
            begin = placed[index]
            if settled is not None:  # a member written anew: ``what`` is its path
                content, mode, mtime, _, _ = settled
                members[what] = (content, mode, mtime, begin, placed[index + 1])
                continue
            shift = begin - what[0][1][3]  # a run: ``what`` is its (path, old place)
            for path, (content, mode, mtime, start, end) in what:
                members[path] = (content, mode, mtime, start + shift, end + shift)
        return ArchiveMap(members)
