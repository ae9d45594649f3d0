"""What reading a workspace yields (an Entry, a Link or a Problem), the limits it
reads within, and the words and checks the directory and archive readers share."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import PurePosixPath, PureWindowsPath


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


def permission_bits(mode: int) -> int:
    """``mode``'s permission bits as one shared int per value: an import keeps the mode
    of each of its files (hundreds of thousands), and they share a handful of values
    (an int object each would be 28 bytes a file)."""
    bits = mode & 0o7777
    return _MODES.setdefault(bits, bits)


_MODES: dict[int, int] = {}


def windows_drive(name: str) -> bool:
    """Whether a member name the SDK's restore refuses as a Windows drive path
    (``PureWindowsPath(name).drive``) has one, for a name that starts with neither
    separator: only its first two characters decide that, so they are looked at alone.
    (A ``PureWindowsPath`` of every name interns each part of it, for good: the table
    of interned strings then grows by every file name of the archive.)"""
    return _drive(name[:2])


@lru_cache(maxsize=1024)
def _drive(start: str) -> bool:
    return bool(PureWindowsPath(start).drive)


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
class Member:
    """A regular file of a plain (uncompressed) archive whose bytes were left where
    they are: ``size`` bytes from ``offset`` of the archive, read when they are needed
    (a large snapshot is then never held in memory whole)."""

    path: str
    mode: int
    mtime_ns: int
    offset: int
    size: int


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


def valid_name(name: str) -> bool:
    """Whether a file or member name can be kept: UTF-8, without a NUL."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in name


def printable_name(name: str) -> str:
    """A name that is not valid UTF-8, with U+FFFD for its bad bytes (for a Problem)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def too_large(size: int, limits: Limits) -> str:
    """The Problem's words for a file over ``limits.max_file_bytes``."""
    return (
        f"file is {human_size(size)}, over the {human_size(limits.max_file_bytes)} "
        "limit; not imported"
    )


def total_exceeded(limits: Limits) -> str:
    """The Problem's words for a read that stopped at ``limits.max_total_bytes``."""
    return (
        f"the workspace expands past {human_size(limits.max_total_bytes)}; "
        "import stopped reading here"
    )


def normalize_member_name(name: str) -> str | None:
    """``name`` without empty and ``.`` parts (``./a//b`` is ``a/b``); None for the root."""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts:
        return None
    return "/".join(parts)
