"""Memory leaving memoryui: atomic writes into a workspace, SDK snapshot archives and
the session state that resumes them (the lint that runs before any of it is
``generation.lint``).

No Django here. Three parts:

- **Writing into a workspace** (``write_atomic``): only below the directories a caller
  allows, never through a symbolic link (every directory is opened with ``O_NOFOLLOW``
  relative to its parent), one file at a time through a temporary file in the same
  directory (``.<name>.<random>.memoryui-tmp``: a dot file whose suffix is neither
  ``.md`` nor ``.jsonl``, so the SDK never lists it as memory), ``fsync``, ``os.replace``
  and an ``fsync`` of the directory. A crash leaves the old file or the new one, never
  a partial one. ``stage`` and ``publish`` are the two halves, for a caller that stages
  many files before it renames any (``generation.journal``).
- **Snapshots** (``write_snapshot``): the archive the SDK's ``LocalSnapshot`` restores,
  ``<base_path>/<snapshot_id>.tar``, shaped like the SDK's own ``persist_workspace``:
  uncompressed PAX, a root member ``.``, every other member ``./``-prefixed, directories
  included (before their contents), symbolic links last, modes and modification times
  kept. Times are whole seconds, as GNU tar writes them: the SDK
  writes a PAX ``mtime`` record with the fraction for every member, which costs a
  kilobyte each (a third of a typical memory tree's archive) for a value that its
  restore never applies. Headers are built here rather than with ``tarfile.addfile``,
  which costs three times as much per member; the tests check them byte for byte
  against ``tarfile``'s.
- **Session state** (``repoint_session_state``): what ``UnixLocalSandboxClient.resume()``
  needs to resume a sandbox on an exported archive.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import os
import posixpath
import re
import secrets as _random
import stat
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .tree import Blocks, Entry

TEMP_SUFFIX = ".memoryui-tmp"
SNAPSHOT_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
SESSION_STATE_NAME = "session_state.json"


class ExportError(Exception):
    """A write, archive or session state that memoryui refuses to produce, in words for
    a person."""


# --- confined, atomic writes ------------------------------------------------------------


def safe_relative(path: str) -> str:
    """``path`` as a clean workspace-relative POSIX path, or ExportError: absolute
    paths, ``..``, empty or ``.`` parts, backslashes and NUL are refused, never fixed."""
    if not path or "\x00" in path or "\\" in path:
        raise ExportError(f"{path!r} is not a usable file name")
    if path[0] == "/":
        raise ExportError(f"{path!r} is an absolute path; only paths inside the workspace")
    wrapped = f"/{path}/"
    if "//" in wrapped or "/./" in wrapped or "/../" in wrapped:
        raise ExportError(f"{path!r} leaves its directory ('..', '.' or an empty part)")
    return path


def confine(path: str, allowed_dirs: Sequence[str]) -> str:
    """``path`` if it lies strictly inside one of ``allowed_dirs``, else ExportError."""
    clean = safe_relative(path)
    for directory in allowed_dirs:
        if clean.startswith(safe_relative(directory) + "/"):
            return clean
    where = ", ".join(allowed_dirs) or "nowhere"
    raise ExportError(f"{path!r} is outside the directories memoryui may write ({where})")


@dataclass(frozen=True)
class WrittenFile:
    path: str
    sha256: str
    size: int
    mode: int
    mtime_ns: int
    created_dirs: tuple[str, ...] = ()


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def _open_directory(root: Path, parts: Sequence[str]) -> tuple[int, list[str]]:
    """Open ``root/parts...`` without following links, creating what is missing;
    returns the directory's descriptor and the directories created."""
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError as exc:
        raise ExportError(f"workspace directory {root} cannot be opened ({exc.strerror})") from exc
    created: list[str] = []
    for i, name in enumerate(parts):
        rel = "/".join(parts[: i + 1])
        try:
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                os.mkdir(name, 0o755, dir_fd=fd)
                created.append(rel)
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            os.close(fd)
            raise ExportError(
                f"{rel} is a symbolic link or not a directory; memoryui never writes through it"
                if exc.errno in (errno.ELOOP, errno.ENOTDIR)
                else f"{rel} cannot be opened ({exc.strerror})"
            ) from exc
        os.close(fd)
        fd = child
    return fd, created


def write_atomic(
    root: Path, path: str, data: bytes, *, allowed_dirs: Sequence[str], mode: int | None = None
) -> WrittenFile:
    """Replace ``root/path`` with ``data`` atomically. ``path`` must lie inside one of
    ``allowed_dirs``; the file keeps its mode (new files get ``mode`` or 0644)."""
    staged = stage(root, path, data, allowed_dirs=allowed_dirs, mode=mode)
    try:
        return publish(root, staged)
    except BaseException:
        discard(root, staged)
        raise


@dataclass(frozen=True)
class Staged:
    """A file's new bytes in a temporary file beside it, fsync'd, not yet in place."""

    path: str
    temp: str  # the temporary file's name, in the same directory
    sha256: str
    size: int
    created_dirs: tuple[str, ...]


def stage(
    root: Path, path: str, data: bytes, *, allowed_dirs: Sequence[str], mode: int | None = None
) -> Staged:
    """Write ``data`` into a temporary file beside ``root/path`` (created with the
    target's mode, or ``mode`` or 0644) and fsync it; ``publish`` puts it in place."""
    clean = confine(path, allowed_dirs)
    *dirs, name = clean.split("/")
    dir_fd, created = _open_directory(root, dirs)
    temp = f".{name}.{_random.token_hex(6)}{TEMP_SUFFIX}"
    try:
        existing = _regular_or_none(clean, name, dir_fd)
        final_mode = stat.S_IMODE(existing.st_mode) if existing else (mode or 0o644)
        fd = os.open(
            temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd
        )
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fchmod(fh.fileno(), final_mode)
                os.fsync(fh.fileno())
        except BaseException:
            with suppress(OSError):
                os.unlink(temp, dir_fd=dir_fd)
            raise
    except OSError as exc:
        raise ExportError(f"{clean} could not be written ({exc.strerror or exc})") from exc
    finally:
        os.close(dir_fd)
    return Staged(clean, temp, hashlib.sha256(data).hexdigest(), len(data), tuple(created))


def publish(root: Path, staged: Staged) -> WrittenFile:
    """Rename the staged file over its target and fsync the directory."""
    *dirs, name = staged.path.split("/")
    dir_fd = _open_existing(root, staged.path, dirs)
    try:
        _regular_or_none(staged.path, name, dir_fd)
        os.replace(staged.temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        os.fsync(dir_fd)
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as exc:
        raise ExportError(f"{staged.path} could not be written ({exc.strerror or exc})") from exc
    finally:
        os.close(dir_fd)
    return WrittenFile(
        staged.path,
        staged.sha256,
        staged.size,
        stat.S_IMODE(st.st_mode),
        st.st_mtime_ns,
        staged.created_dirs,
    )


def discard(root: Path, staged: Staged) -> None:
    """Remove a staged file that will not be published (best effort)."""
    with suppress(ExportError, OSError):
        remove_file(root, f"{staged.path.rpartition('/')[0]}/{staged.temp}", [""])


def remove_file(root: Path, path: str, allowed_dirs: Sequence[str]) -> bool:
    """Delete the regular file ``root/path`` (inside ``allowed_dirs``; ``""`` allows the
    whole root), never through a link; False when it was not there."""
    clean = safe_relative(path)
    if "" not in allowed_dirs:
        confine(clean, allowed_dirs)
    *dirs, name = clean.split("/")
    try:
        dir_fd = _open_existing(root, clean, dirs)
    except ExportError:
        return False
    try:
        if _regular_or_none(clean, name, dir_fd) is None:
            return False
        os.unlink(name, dir_fd=dir_fd)
        os.fsync(dir_fd)
        return True
    except OSError as exc:
        raise ExportError(f"{clean} could not be removed ({exc.strerror or exc})") from exc
    finally:
        os.close(dir_fd)


def remove_empty_directory(root: Path, path: str) -> bool:
    """Remove the directory ``root/path`` if it is empty (never through a link)."""
    *dirs, name = safe_relative(path).split("/")
    try:
        dir_fd = _open_existing(root, path, dirs)
    except ExportError:
        return False
    try:
        os.rmdir(name, dir_fd=dir_fd)
        os.fsync(dir_fd)
        return True
    except OSError:  # not empty, gone, or not a directory: kept
        return False
    finally:
        os.close(dir_fd)


def _open_existing(root: Path, path: str, dirs: Sequence[str]) -> int:
    try:
        return _open_existing_directory(root, dirs)
    except OSError as exc:
        raise ExportError(
            f"the directory of {path} is gone, a symbolic link or not a directory "
            f"({exc.strerror or exc})"
        ) from exc


def _regular_or_none(path: str, name: str, dir_fd: int) -> os.stat_result | None:
    existing = _lstat(name, dir_fd)
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        raise ExportError(f"{path} exists and is not a regular file; not replaced")
    return existing


def _lstat(name: str, dir_fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def remove_stale_temp_files(root: Path, directories: Iterable[str]) -> list[str]:
    """Delete temporary files an interrupted write left in ``directories`` (not
    recursive); returns their paths."""
    removed = []
    for directory in directories:
        try:
            dir_fd = _open_existing_directory(root, safe_relative(directory).split("/"))
        except (ExportError, OSError):
            continue
        try:
            for name in os.listdir(dir_fd):
                if name.startswith(".") and name.endswith(TEMP_SUFFIX):
                    with suppress(FileNotFoundError):
                        os.unlink(name, dir_fd=dir_fd)
                        removed.append(f"{directory}/{name}")
        finally:
            os.close(dir_fd)
    return removed


def _open_existing_directory(root: Path, parts: Sequence[str]) -> int:
    fd = os.open(root, _DIR_FLAGS)
    for name in parts:
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
        finally:
            os.close(fd)
        fd = child
    return fd


# --- snapshot archives --------------------------------------------------------------------


@dataclass(frozen=True)
class Symlink:
    """A symbolic link member; its target must stay inside the archive."""

    path: str
    target: str
    mode: int = 0o777
    mtime_ns: int = 0


# A member as a plain (path, data, mode, mtime_ns) tuple: an Entry without the object,
# for a caller that streams tens of thousands of them (building each Entry cost more
# than writing its header).
Row = tuple[str, bytes | None, int, int]


@dataclass(frozen=True)
class Copy:
    """Consecutive members copied as they are from an archive written before (an earlier
    build's, ``generation.archive_map``): bytes ``start`` to ``end`` of the open file
    ``fd``, which hold ``paths``."""

    fd: int
    start: int
    end: int
    paths: tuple[str, ...]


# Blocks: members copied as they are from another archive (``tree.copy_indexed``).
Member = Entry | Symlink | Row | Blocks | Copy


@dataclass(frozen=True)
class SnapshotInfo:
    path: Path | None
    size: int
    sha256: str
    members: int


def check_snapshot_id(snapshot_id: str) -> str:
    """A snapshot id is one path segment (the SDK's rule), here also URL- and shell-safe."""
    if not SNAPSHOT_ID_RE.fullmatch(snapshot_id) or snapshot_id in (".", ".."):
        raise ExportError(
            f"{snapshot_id!r} is not a usable snapshot id: 1-128 letters, digits, '.', '_' "
            "or '-', starting with a letter or digit (the SDK uses the session's UUID)"
        )
    return snapshot_id


_NUL = b"\0"
_REGULAR, _DIRECTORY, _SYMLINK, _PAX = b"0", b"5", b"2", b"x"
_BLOCK = 512
_RECORD = 20 * _BLOCK
_TAIL = b"ustar\x0000" + _NUL * (32 + 32 + 8 + 8 + 155 + 12)


_HEADER_FORMAT = b"%s%07o\x000000000\x000000000\x00%011o\x00%011o\x00%06o\x00 %s%s" + _TAIL
_NO_LINK = _NUL * 100
_USTAR_MAX_SIZE = 8**11
# The checksum is the sum of the header's bytes with its own field read as spaces: the
# fixed fields (uid and gid "0000000", the spaces, the magic) add up to this.
_FIXED_SUM = 2 * sum(b"0000000") + sum(b"        ") + sum(_TAIL)


# A regular file's header, for the common case (a short ASCII name, under 8 GB) that
# ``_write_members`` builds inline: the name, these numeric fields (mode, uid, gid, size,
# mtime), the checksum, then this rest. The same bytes as ``_header``.
_FILE_FIELDS = b"%07o\x000000000\x000000000\x00%011o\x00%011o\x00"
_FILE_REST = _REGULAR + _NUL * 100 + _TAIL
_FILE_SUM = sum(b"        ") + sum(_FILE_REST)


def byte_sum(data: bytes) -> int:
    """``sum(data)`` for at most 256 bytes (a header field), computed in C: the low half
    of an Adler-32 checksum is 1 + the sum of the bytes modulo 65521, which 256 bytes
    (65,280 at most) never reach. ``sum`` makes an int per byte: twice per member,
    that was a sixth of writing an archive."""
    return (zlib.adler32(data) & 0xFFFF) - 1


def _field(value: bytes, length: int) -> bytes:
    return value[:length].ljust(length, _NUL)


def _header(name: str, mode: int, size: int, mtime: int, kind: bytes, link: str = "") -> bytes:
    """A ustar header block as ``tarfile`` writes it in PAX format (uid and gid 0,
    no owner names)."""
    name_field = _field(name.encode("ascii", "replace"), 100)
    link_field = _field(link.encode("ascii", "replace"), 100) if link else _NO_LINK
    mode &= 0o7777
    checksum = (
        _FIXED_SUM
        + byte_sum(name_field)
        + byte_sum(b"%07o%011o%011o" % (mode, size, mtime))
        + kind[0]
        + (byte_sum(link_field) if link else 0)
    )
    return _HEADER_FORMAT % (name_field, mode, size, mtime, checksum, kind, link_field)


def _pax_record(keyword: str, value: str) -> bytes:
    body = f" {keyword}={value}\n".encode()
    length = len(body) + 1
    while len(str(length)) + len(body) != length:
        length = len(str(length)) + len(body)
    return str(length).encode("ascii") + body


@functools.lru_cache(maxsize=512)
def _pax_header(size: int) -> bytes:
    return _header("././@PaxHeader", 0, size, 0, _PAX)


_PADDING = [_NUL * n for n in range(_BLOCK)]


def _pad(size: int) -> bytes:
    return _PADDING[-size % _BLOCK]


def _member_header(
    name: str, mode: int, size: int, mtime_ns: int, kind: bytes, link: str = ""
) -> bytes:
    """The member's header, preceded by a PAX extended header when a name is too long
    or not ASCII (or a file over 8 GB)."""
    if not link and len(name) <= 100 and size < _USTAR_MAX_SIZE and name.isascii():
        return _header(name, mode, size, mtime_ns // 1_000_000_000, kind)  # most members
    records = []
    if len(name) > 100 or not name.isascii():
        records.append(_pax_record("path", name))
    if link and (len(link) > 100 or not link.isascii()):
        records.append(_pax_record("linkpath", link))
    if size >= _USTAR_MAX_SIZE:
        records.append(_pax_record("size", str(size)))
    header = _header(
        name, mode, 0 if size >= _USTAR_MAX_SIZE else size, mtime_ns // 1_000_000_000, kind, link
    )
    if not records:
        return header
    payload = b"".join(records)
    return _pax_header(len(payload)) + payload + _pad(len(payload)) + header


def _symlink_stays_inside(path: str, target: str) -> bool:
    if not target or target.startswith("/"):
        return False
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    return resolved != ".." and not resolved.startswith("../")


class _Sink:
    """Buffered writes to ``fh`` with a running sha256 and size."""

    CHUNK = 1 << 20

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh = fh
        self.parts: list[bytes] = []
        self.buffered = 0
        self.size = 0
        self.digest = hashlib.sha256()

    def write(self, data: bytes) -> None:
        if len(data) >= self.CHUNK:  # copied blocks, say: written as they are, not joined
            self.flush()
            self.fh.write(data)
            self.digest.update(data)
            self.size += len(data)
            return
        self.parts.append(data)
        self.buffered += len(data)
        if self.buffered >= self.CHUNK:
            self.flush()

    def write_file(self, header: bytes, data: bytes, padding: bytes) -> None:
        self.parts += (header, data, padding)
        self.buffered += len(header) + len(data) + len(padding)
        if self.buffered >= self.CHUNK:
            self.flush()

    def flush(self) -> None:
        chunk = b"".join(self.parts)
        self.fh.write(chunk)
        self.digest.update(chunk)
        self.size += len(chunk)
        self.parts, self.buffered = [], 0


def write_snapshot_to(
    fh: IO[bytes],
    members: Iterable[Member],
    *,
    root_mode: int = 0o755,
    root_mtime_ns: int = 0,
    placed: list[int] | None = None,
) -> SnapshotInfo:
    """Write the archive of ``members`` (directories before their contents) to ``fh``.
    Symbolic links are written last, as the SDK does. ``placed``, when given, gets the
    offset where each member taken from ``members`` begins (a link's: where it would
    have), as it is taken, then the offset after the last, before the links."""
    sink = _Sink(fh)
    count = _write_members(sink, members, root_mode, root_mtime_ns, placed)
    sink.write(_NUL * (2 * _BLOCK))
    sink.write(_NUL * (-(sink.size + sink.buffered) % _RECORD))
    sink.flush()
    return SnapshotInfo(None, sink.size, sink.digest.hexdigest(), count)


def _write_members(
    sink: _Sink,
    members: Iterable[Member],
    root_mode: int,
    root_mtime_ns: int,
    placed: list[int] | None = None,
) -> int:
    sink.write(_member_header("./", root_mode, 0, root_mtime_ns, _DIRECTORY))
    seen: set[str] = set()
    links: list[Symlink] = []
    count = 1
    adler32 = zlib.adler32  # byte_sum, inline: this loop runs once per member
    for member in members:
        if placed is not None:
            placed.append(sink.size + sink.buffered)
        if type(member) is tuple:
            path, data, mode, mtime_ns = member
        elif isinstance(member, Symlink):
            path = safe_relative(member.path)
            if path in seen:
                raise ExportError(f"{path} appears twice in the snapshot")
            seen.add(path)
            if not _symlink_stays_inside(path, member.target):
                raise ExportError(f"{path} links outside the workspace; the SDK refuses it")
            links.append(member)
            continue
        elif isinstance(member, Blocks):
            for copied in member.paths:
                copied = safe_relative(copied)
                if copied in seen:
                    raise ExportError(f"{copied} appears twice in the snapshot")
                seen.add(copied)
            sink.write(member.data)
            count += len(member.paths)
            continue
        elif isinstance(member, Copy):
            # Paths this writer wrote before (checked then): only their uniqueness here.
            paths = set(member.paths)
            if len(paths) != len(member.paths) or not seen.isdisjoint(paths):
                twice = next((p for p in member.paths if p in seen), None) or next(
                    p for p, n in Counter(member.paths).items() if n > 1
                )
                raise ExportError(f"{twice} appears twice in the snapshot")
            seen |= paths
            _copy_range(sink, member)
            count += len(member.paths)
            continue
        else:
            assert isinstance(member, Entry)
            path, data, mode, mtime_ns = member.path, member.data, member.mode, member.mtime_ns
        path = safe_relative(path)
        if path in seen:
            raise ExportError(f"{path} appears twice in the snapshot")
        seen.add(path)
        if data is None:
            sink.write(_member_header(f"./{path}/", mode, 0, mtime_ns, _DIRECTORY))
            count += 1
            continue
        size = len(data)
        name = f"./{path}"
        if len(name) <= 100 and size < _USTAR_MAX_SIZE and name.isascii():  # most files
            encoded = name.encode()
            fields = _FILE_FIELDS % (mode & 0o7777, size, mtime_ns // 1_000_000_000)
            checksum = b"%06o\x00 " % (
                _FILE_SUM + adler32(encoded) % 65536 + adler32(fields) % 65536 - 2
            )
            header = encoded.ljust(100, _NUL) + fields + checksum + _FILE_REST
        else:
            header = _member_header(name, mode, size, mtime_ns, _REGULAR)
        sink.write_file(header, data, _PADDING[-size % _BLOCK])
        count += 1
    if placed is not None:
        placed.append(sink.size + sink.buffered)
    for link in links:
        sink.write(
            _member_header(f"./{link.path}", link.mode, 0, link.mtime_ns, _SYMLINK, link.target)
        )
        count += 1
    return count


def _copy_range(sink: _Sink, member: Copy) -> None:
    """Bytes ``start`` to ``end`` of ``member.fd`` into the archive, a chunk at a time."""
    at = member.start
    while at < member.end:
        chunk = os.pread(member.fd, min(_Sink.CHUNK, member.end - at), at)
        if not chunk:
            raise ExportError("the archive copied from ends before the members it should hold")
        sink.write(chunk)
        at += len(chunk)


def write_snapshot(
    base_path: Path,
    snapshot_id: str,
    members: Iterable[Member],
    *,
    root_mode: int = 0o755,
    root_mtime_ns: int = 0,
) -> SnapshotInfo:
    """Write ``<base_path>/<snapshot_id>.tar`` atomically; an existing archive of that
    id is never replaced (a snapshot id names one state of a workspace)."""
    target = base_path / f"{check_snapshot_id(snapshot_id)}.tar"
    holder: list[SnapshotInfo] = []

    def write(fh: IO[bytes]) -> None:
        holder.append(
            write_snapshot_to(fh, members, root_mode=root_mode, root_mtime_ns=root_mtime_ns)
        )

    publish_new_file(target, write)
    return SnapshotInfo(target, holder[0].size, holder[0].sha256, holder[0].members)


def publish_new_file(target: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Create ``target`` (absolute) atomically with what ``write`` writes: a temporary
    file in the same directory, fsync, then a hard link, which, unlike a rename, fails
    if the name was taken meanwhile. An existing file is never replaced."""
    check_new(target)
    temp = temp_beside(target)
    try:
        write_temp(temp, write)
        link_new(temp, target)
    finally:
        with suppress(OSError):
            temp.unlink()


def check_new(target: Path) -> None:
    """ExportError when ``target`` exists; creates its directory."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExportError(f"{target.parent} cannot be created ({exc.strerror})") from exc
    if target.exists() or target.is_symlink():
        raise ExportError(f"{target} already exists; choose another snapshot id")


def temp_beside(target: Path) -> Path:
    """A fresh temporary file name beside ``target``, never named like memory."""
    return target.parent / f".{target.name}.{_random.token_hex(6)}{TEMP_SUFFIX}"


def write_temp(temp: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Create ``temp`` (0644) with what ``write`` writes, fsync'd; removed on failure."""
    try:
        with open(temp, "xb") as fh:
            write(fh)
            fh.flush()
            os.fchmod(fh.fileno(), 0o644)
            os.fsync(fh.fileno())
    except BaseException as exc:
        with suppress(OSError):
            temp.unlink()
        if isinstance(exc, OSError):
            raise ExportError(f"{temp} could not be written ({exc.strerror or exc})") from exc
        raise


def link_new(temp: Path, target: Path) -> None:
    """Give the written ``temp`` the name ``target`` (a hard link: never over an
    existing file) and fsync the directory."""
    try:
        os.link(temp, target)
        _fsync_directory(target.parent)
    except FileExistsError as exc:
        raise ExportError(f"{target} already exists; choose another snapshot id") from exc
    except OSError as exc:
        raise ExportError(f"{target} could not be written ({exc.strerror or exc})") from exc


def _fsync_directory(path: Path) -> None:
    fd = os.open(path, _DIR_FLAGS)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- session state --------------------------------------------------------------------


def find_session_state(source: Path) -> Path | None:
    """The SDK session state stored beside an imported workspace, if any: next to the
    ``workspace/`` folder, next to the ``snapshots/`` folder of an archive, or
    ``<snapshot_id>.session_state.json`` beside the archive (what memoryui writes)."""
    source = Path(source)
    if source.suffix == ".tar":
        candidates = [
            source.with_name(f"{source.stem}.{SESSION_STATE_NAME}"),
            source.parent.parent / SESSION_STATE_NAME,
            source.parent / SESSION_STATE_NAME,
        ]
    else:
        candidates = [source.parent / SESSION_STATE_NAME, source / SESSION_STATE_NAME]
    return next((c for c in candidates if c.is_file() and not c.is_symlink()), None)


def load_session_state(data: bytes) -> dict[str, Any]:
    try:
        state = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ExportError(f"the session state is not valid JSON ({exc})") from exc
    if not isinstance(state, dict) or not isinstance(state.get("manifest"), dict):
        raise ExportError("the session state is not an SDK session state (no manifest)")
    if state.get("type") != "unix_local":
        raise ExportError(
            f"the session state is for a {state.get('type')!r} sandbox; memoryui re-points "
            "only unix_local states (UnixLocalSandboxClient)"
        )
    return state


def repoint_session_state(
    state: dict[str, Any], *, snapshot_id: str, base_path: Path, root: Path
) -> dict[str, Any]:
    """``state`` resuming from ``<base_path>/<snapshot_id>.tar`` into ``root``. The
    fingerprint of the old snapshot is dropped, so the SDK always restores the archive
    instead of trusting a live workspace that only looks the same."""
    new: dict[str, Any] = json.loads(json.dumps(state))
    new["snapshot"] = {
        "type": "local",
        "id": check_snapshot_id(snapshot_id),
        "base_path": str(_absolute(base_path)),
    }
    new["manifest"]["root"] = str(_absolute(root))
    new["snapshot_fingerprint"] = None
    new["snapshot_fingerprint_version"] = None
    new["workspace_root_ready"] = False
    return new


def new_session_state(
    *, session_id: str, snapshot_id: str, base_path: Path, root: Path
) -> dict[str, Any]:
    """A minimal unix_local session state, for workspaces imported without one."""
    state = {
        "type": "unix_local",
        "session_id": session_id,
        "manifest": {"version": 1, "root": "/", "entries": {}},
        "exposed_ports": [],
    }
    return repoint_session_state(state, snapshot_id=snapshot_id, base_path=base_path, root=root)


def session_state_bytes(state: dict[str, Any]) -> bytes:
    return (json.dumps(state, indent=2) + "\n").encode("utf-8")


def _absolute(path: Path) -> Path:
    return Path(os.path.abspath(path))
