"""Sandbox downloads, kept once built and served again while nothing they are made of
has changed.

A restore of ``<id>`` is the archive of that id's upload and the memory the workspace
serves (``snapshot_store.sandbox_archive``): rebuilding it costs as much as ``tar -cf`` of
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
the one recorded is built again. Each archive is written to a temporary file, fsync'd,
then given its name, and its record (digest, size, members) is written after it, so a
record always describes a whole archive.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import secrets
import stat
import tempfile
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from django.conf import settings

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
        """Rows of short values, joined once (a call per row costs more than hashing)."""
        self._digest.update(
            "".join(f"{v}\0" for row in rows for v in row).encode("utf-8", "surrogatepass")
        )

    def hexdigest(self) -> str:
        return self._digest.hexdigest()


def fetch(
    workspace_pk: int,
    snapshot_id: str,
    key: str,
    write: Callable[[IO[bytes]], SnapshotInfo],
) -> Download:
    """The archive kept under ``key`` for this workspace and snapshot id, or the one
    ``write`` writes now, kept under it (unless the cache is off or cannot be written:
    then a temporary file that goes when closed)."""
    folder = cache_dir() / str(workspace_pk) / snapshot_id
    kept = _open_kept(folder, key)
    if kept is not None:
        return kept
    limit = cache_limit()
    if limit > 0:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            return _build_and_keep(folder, key, write, limit)
        except OSError as exc:
            log.warning("sandbox download not kept (%s): %s", folder, exc)
    fileobj = tempfile.TemporaryFile()
    try:
        info = write(fileobj)
    except BaseException:
        fileobj.close()
        raise
    fileobj.seek(0)
    return Download(fileobj, info.sha256, info.size, info.members, built=True)


# A kept archive's name says what it is: <key>.<sha256>.<size>.<members>.tar, given in
# one rename once its bytes are on disk, so a name always describes a whole archive.
_NAME = re.compile(r"^([0-9a-f]{64})\.([0-9a-f]{64})\.([0-9]+)\.([0-9]+)\.tar$")


def _kept_names(folder: Path) -> list[tuple[str, re.Match[str]]]:
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [(name, match) for name in names if (match := _NAME.match(name))]


def _open_kept(folder: Path, key: str) -> Download | None:
    """The kept archive of ``key``, opened, if its size is the one its name records;
    else None (and a damaged one goes)."""
    for name, match in _kept_names(folder):
        if match[1] != key:
            continue
        try:
            fd = os.open(folder / name, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        fileobj = os.fdopen(fd, "rb")
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != int(match[3]):
            fileobj.close()
            log.warning("kept sandbox download %s/%s is damaged; built again", folder, name)
            with suppress(OSError):
                os.unlink(folder / name)
            continue
        with suppress(OSError):
            os.utime(fd)  # the least recently served go first
        return Download(fileobj, match[2], st.st_size, int(match[4]), built=False)
    return None


def _build_and_keep(
    folder: Path, key: str, write: Callable[[IO[bytes]], SnapshotInfo], limit: int
) -> Download:
    temp = folder / f".{key}.{secrets.token_hex(6)}{TEMP_SUFFIX}"
    fileobj = open(temp, "xb+")  # noqa: SIM115 (returned open, for the response)
    try:
        info = write(fileobj)
        fileobj.flush()
        if info.size <= limit:
            os.fsync(fileobj.fileno())
            name = f"{key}.{info.sha256}.{info.size}.{info.members}.tar"
            os.replace(temp, folder / name)
            _forget_others(folder, name)
            _evict(limit)
    except BaseException:
        fileobj.close()
        with suppress(OSError):
            temp.unlink()
        raise
    with suppress(FileNotFoundError):
        temp.unlink()  # still here: too large to keep, sent from the open file alone
    fileobj.seek(0)
    return Download(fileobj, info.sha256, info.size, info.members, built=True)


def _forget_others(folder: Path, name: str) -> None:
    """One archive per snapshot id: the one just built replaces the others."""
    for other, _ in _kept_names(folder):
        if other != name:
            with suppress(FileNotFoundError):
                os.unlink(folder / other)


def _evict(limit: int) -> None:
    """Remove the least recently served archives until those kept fit in ``limit``."""
    kept: list[tuple[float, int, Path]] = []
    for workspace in _subdirectories(cache_dir()):
        for snapshot in _subdirectories(workspace):
            for name, _ in _kept_names(snapshot):
                with suppress(FileNotFoundError):
                    st = os.stat(snapshot / name, follow_symlinks=False)
                    kept.append((st.st_mtime, st.st_size, snapshot / name))
    total = sum(size for _, size, _ in kept)
    for _, size, path in sorted(kept):
        if total <= limit:
            break
        with suppress(FileNotFoundError):
            path.unlink()
        total -= size


def _subdirectories(path: Path) -> list[Path]:
    try:
        return [Path(e.path) for e in os.scandir(path) if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return []
