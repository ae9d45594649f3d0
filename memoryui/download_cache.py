"""Sandbox downloads, kept once built and served again while nothing they are made of
has changed.

A restore of ``<id>`` is the archive of that id's upload and the memory the workspace
serves (``snapshot_restores.sandbox_archive``): rebuilding it costs as much as ``tar -cf`` of
the workspace, every time a sandbox resumes. So each archive is kept on this host's disk
under a key, the sha256 of everything the archive is made of: the upload's digest, the
memory folders served, the bytes of every served document and skill file (after review
and lint, computed anew for every download), and the path, kind, mode, modification
time and content digest of every other file the memory folders hold. Any change to
any of them (an approval, a withdrawal, a lint allowance, a new upload, a merged raw
memory) is a new key, so a kept archive is never served for a state it was not built
from. The times inside an archive served again are those it was built with.

One archive is kept per workspace and snapshot id (a new key replaces the old), the
least recently served go first once the kept archives pass
``MEMORYUI_DOWNLOAD_CACHE_BYTES`` (0: nothing kept), and an archive whose size is not
the one its name records is built again. Each archive is written to a temporary file,
fsync'd, then given a name that records its sha256, size and member count: a name
always describes a whole archive.

A build after a change starts from the archive built last for the workspace (any id's:
the memory folders are the same for all): beside each archive is its map
(``generation.archive_map``), where each memory file sits in it, so the memory files
that did not change are copied from it as they are, and only the others are read from
the database and written anew. Exports are built the same way, and the last one is
kept too (``keep_export``: a hard link to the file it wrote, whose size and time its map
records, so that a file rewritten in place since is never copied from).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import re
import secrets
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

from django.conf import settings

from generation.archive_map import ArchiveMap
from generation.export import SnapshotInfo

log = logging.getLogger(__name__)

# Part of every key: a change to what an archive holds for the same inputs (the
# writer's format, the members' order) is a new number, so no archive built before it
# is served after it.
FORMAT = 1
TEMP_SUFFIX = ".tmp"


@dataclass
class Download:
    """A download ready to send: the open archive at its start, its sha256 (hex), size
    and member count, and whether it was built for this request."""

    fileobj: IO[bytes]
    sha256: str
    size: int
    members: int
    built: bool


def cache_dir() -> Path:
    return Path(settings.MEMORYUI_DOWNLOAD_CACHE_DIR)


def cache_limit() -> int:
    return int(settings.MEMORYUI_DOWNLOAD_CACHE_BYTES)


class Key:
    """The sha256 of an archive's inputs, fed piece by piece."""

    def __init__(self) -> None:
        self._digest = hashlib.sha256(b"memoryui sandbox download %d\n" % FORMAT)

    def text(self, *values: object) -> None:
        """Values that are short (ids, paths, numbers): each ends with a NUL, which no
        path or digest holds, so no two sequences of them read alike."""
        self._digest.update("".join(f"{v}\0" for v in values).encode("utf-8", "surrogatepass"))

    def data(self, path: str, data: bytes) -> None:
        self.text(path, hashlib.sha256(data).hexdigest())

    def rows(self, rows: Iterable[tuple[Any, ...]]) -> None:
        """Rows of short values, all of one width, joined once (a call per row costs
        more than the hashing)."""
        joined = "\0".join(map(str, itertools.chain.from_iterable(rows)))
        self._digest.update(f"{joined}\0\0".encode("utf-8", "surrogatepass"))

    def hexdigest(self) -> str:
        return self._digest.hexdigest()


@dataclass
class Previous:
    """The archive built last for the workspace (any snapshot id: the memory folders
    are the same for all), open, with its map: what a new build may copy from."""

    fd: int
    map: ArchiveMap
    mapped: tuple[int, int, int]  # the archive's inode, size and time its map is of

    def unchanged(self) -> bool:
        """Whether the archive is still as it was mapped: a kept export is a link to a
        file someone may rewrite in place, even while a build copies from it (which is
        then built again from nothing, ``copying_from``)."""
        return _stat_key(os.fstat(self.fd)) == self.mapped


@dataclass
class Built:
    """What ``write`` wrote: the archive's figures, its map, and whether it is what the
    key says (False: the workspace changed while it was written; sent, never kept)."""

    info: SnapshotInfo
    map: ArchiveMap | None
    keep: bool = True


Writer = Callable[[IO[bytes], Previous | None], Built]
_Built = TypeVar("_Built")


def fetch(workspace_pk: int, snapshot_id: str, key: str, write: Writer) -> Download:
    """The archive kept under ``key`` for this workspace and snapshot id, or the one
    ``write`` writes now (given the workspace's previous archive to copy from), kept
    under it (unless the cache is off or cannot be written: then a temporary file that
    goes when closed)."""
    folder = cache_dir() / str(workspace_pk) / snapshot_id
    kept = _open_kept(folder, key)
    if kept is not None:
        return kept
    limit = cache_limit()
    if limit > 0:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            return _build_and_keep(workspace_pk, folder, key, write, limit)
        except OSError as exc:
            log.warning("sandbox download not kept (%s): %s", folder, exc)
    fileobj = tempfile.TemporaryFile()
    try:
        built = write(fileobj, None)
    except BaseException:
        fileobj.close()
        raise
    fileobj.seek(0)
    info = built.info
    return Download(fileobj, info.sha256, info.size, info.members, built=True)


# A kept archive's name says what it is: <key>.<sha256>.<size>.<members>.tar, given in
# one rename once its bytes are on disk, so a name always describes a whole archive.
# Its map is <that name>.map, in place before the archive is.
_NAME = re.compile(r"^([0-9a-f]{64})\.([0-9a-f]{64})\.([0-9]+)\.([0-9]+)\.tar$")
MAP_SUFFIX = ".map"


def _kept_names(folder: Path) -> list[tuple[str, re.Match[str]]]:
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [(name, match) for name in names if (match := _NAME.match(name))]


def _open_archive(path: Path, size: int) -> IO[bytes] | None:
    """``path`` opened if it is a regular file of ``size`` bytes; a damaged one goes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    fileobj = os.fdopen(fd, "rb")
    st = os.fstat(fd)
    if stat.S_ISREG(st.st_mode) and st.st_size == size:
        return fileobj
    fileobj.close()
    log.warning("kept archive %s is not the size its name records; removed", path)
    _remove(path)
    return None


def _open_kept(folder: Path, key: str) -> Download | None:
    """The kept archive of ``key``, opened, if its size is the one its name records."""
    for name, match in _kept_names(folder):
        if match[1] != key:
            continue
        fileobj = _open_archive(folder / name, int(match[3]))
        if fileobj is None:
            continue
        with suppress(OSError):
            os.utime(folder / f"{name}{MAP_SUFFIX}")  # the least recently served go first
        return Download(fileobj, match[2], int(match[3]), int(match[4]), built=False)
    return None


def copying_from(
    workspace_pk: int, build: Callable[[Previous | None], _Built], rewind: Callable[[], None]
) -> _Built:
    """``build`` given the workspace's previous archive (``previous_archive``); built
    again with none (after ``rewind``) if that archive changed while it was copied from,
    so that no bytes but those it was mapped with are ever copied."""
    with previous_archive(workspace_pk) as previous:
        built = build(previous)
        if previous is None or previous.unchanged():
            return built
    log.warning("the archive copied from changed meanwhile; built again from nothing")
    rewind()
    return build(None)


@contextmanager
def previous_archive(workspace_pk: int) -> Iterator[Previous | None]:
    """The workspace's most recently built archive (a download's or an export's) with a
    map that is its own, open while the block runs; None if there is none."""
    found = _previous(cache_dir() / str(workspace_pk))
    if found is None:
        yield None
        return
    fileobj, archive_map, mapped = found
    try:
        yield Previous(fileobj.fileno(), archive_map, mapped)
    finally:
        fileobj.close()


def _previous(
    workspace_folder: Path,
) -> tuple[IO[bytes], ArchiveMap, tuple[int, int, int]] | None:
    kept = []
    for folder in _subdirectories(workspace_folder):
        for name, match in _kept_names(folder):
            with suppress(OSError):
                kept.append((os.stat(folder / name).st_ctime_ns, folder / name, match))
    for _, path, match in sorted(kept, key=lambda k: k[0], reverse=True):
        fileobj = _open_archive(path, int(match[3]))
        if fileobj is None:
            continue
        st = os.fstat(fileobj.fileno())
        try:
            archive_map = _read_map(path, st)
        except (OSError, ValueError) as exc:
            fileobj.close()
            log.info("kept archive %s has no usable map (%s)", path, exc)
            continue
        return fileobj, archive_map, _stat_key(st)
    return None


def _map_bytes(archive: os.stat_result, archive_map: ArchiveMap) -> bytes:
    """A map file: the archive's size and modification time when it was mapped (an
    export is kept as a link to the file it wrote: should that file be rewritten in
    place, its time moves and the map is no longer its own), then the map."""
    return b"%d %d\n" % (archive.st_size, archive.st_mtime_ns) + archive_map.pack()


# The map this process wrote last, by the archive it maps (inode, size, time): the
# next archive a running process builds (the dashboard's, the API's, a worker's) most
# often starts from the one it built before, and need not read that map back.
_last_written: tuple[tuple[int, int, int], ArchiveMap] | None = None


def forget_last_map() -> None:
    """As in a new process: the next map needed is read from its file."""
    global _last_written
    _last_written = None


def _stat_key(archive: os.stat_result) -> tuple[int, int, int]:
    return (archive.st_ino, archive.st_size, archive.st_mtime_ns)


def _read_map(path: Path, archive: os.stat_result) -> ArchiveMap:
    if _last_written is not None and _last_written[0] == _stat_key(archive):
        return _last_written[1]
    data = Path(f"{path}{MAP_SUFFIX}").read_bytes()
    first, _, rest = data.partition(b"\n")
    if first != b"%d %d" % (archive.st_size, archive.st_mtime_ns):
        raise ValueError("the archive changed since it was mapped")
    return ArchiveMap.unpack(rest)


def _write_map(path: Path, archive: os.stat_result, archive_map: ArchiveMap) -> None:
    global _last_written
    _write_new(path, _map_bytes(archive, archive_map))
    _last_written = (_stat_key(archive), archive_map)


def _build_and_keep(
    workspace_pk: int, folder: Path, key: str, write: Writer, limit: int
) -> Download:
    temp = folder / f".{key}.{secrets.token_hex(6)}{TEMP_SUFFIX}"
    fileobj = open(temp, "xb+")  # noqa: SIM115 (returned open, for the response)
    try:

        def rewind() -> None:
            fileobj.seek(0)
            fileobj.truncate()

        built = copying_from(workspace_pk, lambda previous: write(fileobj, previous), rewind)
        info = built.info
        fileobj.flush()
        if built.keep and info.size <= limit:
            os.fsync(fileobj.fileno())
            name = f"{key}.{info.sha256}.{info.size}.{info.members}.tar"
            if built.map is not None:
                _write_map(folder / f"{name}{MAP_SUFFIX}", os.fstat(fileobj.fileno()), built.map)
            os.replace(temp, folder / name)
            _forget_others(folder, name)
            _evict(limit)
    except BaseException:
        fileobj.close()
        with suppress(OSError):
            temp.unlink()
        raise
    with suppress(FileNotFoundError):
        temp.unlink()  # still here: not kept, sent from the open file alone
    fileobj.seek(0)
    return Download(fileobj, info.sha256, info.size, info.members, built=True)


# Exports are kept in a folder of their own beside the snapshot ids' (which never start
# with a dot), one at a time, named like a download with the archive's digest as key.
EXPORTS = ".exports"


def keep_export(workspace_pk: int, archive: Path, info: SnapshotInfo, mapped: ArchiveMap) -> None:
    """Keep the archive an export just wrote (a hard link to it, so nothing is copied)
    and its map, for the workspace's next archive to copy from. Best effort: an export
    whose file cannot be linked here (another file system) is simply not kept."""
    limit = cache_limit()
    if limit <= 0 or info.size > limit:
        return
    folder = cache_dir() / str(workspace_pk) / EXPORTS
    name = f"{info.sha256}.{info.sha256}.{info.size}.{info.members}.tar"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with suppress(FileExistsError):
            os.link(archive, folder / name)
        _write_map(folder / f"{name}{MAP_SUFFIX}", os.stat(folder / name), mapped)
        _forget_others(folder, name)
        _evict(limit)
    except OSError as exc:
        log.info("export %s not kept to build the next archive from: %s", archive, exc)
        _remove(folder / name)


def _write_new(path: Path, data: bytes) -> None:
    temp = path.with_name(f".{path.name}.{secrets.token_hex(6)}{TEMP_SUFFIX}")
    try:
        with open(temp, "xb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temp, path)
    except BaseException:
        with suppress(OSError):
            temp.unlink()
        raise


def _remove(path: Path) -> None:
    """A kept archive, then its map."""
    for each in (path, Path(f"{path}{MAP_SUFFIX}")):
        with suppress(FileNotFoundError):
            each.unlink()


def _forget_others(folder: Path, name: str) -> None:
    """One archive per snapshot id: the one just built replaces the others (and maps
    left by an archive that never got its name)."""
    for other in os.listdir(folder):
        if other.startswith("."):
            continue
        if other not in (name, f"{name}{MAP_SUFFIX}"):
            with suppress(FileNotFoundError):
                os.unlink(folder / other)


# A temporary file or folder this old was left by a process that died while writing it.
STALE_SECONDS = 3600
SCRATCH_PREFIX = "memoryui-export-"  # an export to object storage writes its archive here


def _evict(limit: int) -> None:
    """Remove the least recently used archives (with their maps: a map's time is when
    its archive was last sent or built) until those kept fit in ``limit``, and what
    processes that died while writing left behind."""
    kept: list[tuple[float, int, Path]] = []
    stale = time.time() - STALE_SECONDS
    for workspace in _subdirectories(cache_dir()):
        if workspace.name.startswith(SCRATCH_PREFIX):
            if _older(workspace, stale):
                shutil.rmtree(workspace, ignore_errors=True)
            continue
        for snapshot in _subdirectories(workspace):
            _remove_stale_temp_files(snapshot, stale)
            for name, _ in _kept_names(snapshot):
                size, used = 0, 0.0
                with suppress(FileNotFoundError):
                    size = os.stat(snapshot / name, follow_symlinks=False).st_size
                with suppress(FileNotFoundError):
                    mapped = os.stat(snapshot / f"{name}{MAP_SUFFIX}")
                    size, used = size + mapped.st_size, mapped.st_mtime
                kept.append((used, size, snapshot / name))
    total = sum(size for _, size, _ in kept)
    for _, size, path in sorted(kept):
        if total <= limit:
            break
        _remove(path)
        total -= size


def _older(path: Path, than: float) -> bool:
    try:
        return os.stat(path, follow_symlinks=False).st_mtime < than
    except FileNotFoundError:
        return False


def _remove_stale_temp_files(folder: Path, than: float) -> None:
    for entry in os.scandir(folder):
        if entry.name.startswith(".") and entry.name.endswith(TEMP_SUFFIX):
            with suppress(FileNotFoundError):
                if entry.stat(follow_symlinks=False).st_mtime < than:
                    os.unlink(entry.path)


def _subdirectories(path: Path) -> list[Path]:
    try:
        return [Path(e.path) for e in os.scandir(path) if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return []
