"""The write-ahead journal that makes a write-back all or nothing as seen from outside.
No Django.

A write-back of n files into a workspace goes:

1. the journal: every file's old bytes (none when it does not exist) and new bytes
   (none when the write-back deletes the file) in one data file, then ``journal.json``
   naming them with their sha256, each fsync'd.
   Once ``journal.json`` exists, whoever finds it can bring the files to all old or all
   new with the bytes it holds;
2. each new file staged as a temporary file beside its target (``generation.export``);
3. the renames (and deletions);
4. the caller's database commit (the audit event names the journal);
5. the journal removed.

A journal lives in its own directory (one per layout, outside the workspace: the SDK
never sees it) beside a lock file. The writer holds an exclusive ``flock`` on it from
before the journal until the journal is removed; the kernel releases it when the process
dies, so a journal whose lock can be taken was left by a write-back that died.

``publish`` is that order once, for the write-back and the snapshot export alike (an
export's journal names its temporary files; its staging writes them, its publish links
them to their names).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import export, tree

JOURNAL = "journal.json"
DATA = "data"
LOCK = "lock"
FORWARD, BACK = "forward", "back"
VERSION = 1


class JournalError(Exception):
    """A journal that cannot be written, read or applied; the message says why."""


class Busy(JournalError):
    """Another process holds the lock: its write-back is running."""


@dataclass(frozen=True)
class JournalFile:
    path: str  # relative to the workspace root
    old_sha256: str | None  # None: the file did not exist
    new_sha256: str | None  # None: the write-back deletes the file
    old: tuple[int, int] | None  # (offset, length) in the data file
    new: tuple[int, int] | None


@dataclass
class Journal:
    directory: Path
    id: str
    root: str
    allowed_dirs: list[str]
    files: list[JournalFile]
    created_dirs: list[str]  # directories the write-back creates, deepest last
    direction: str = FORWARD
    meta: dict[str, Any] = field(default_factory=dict)

    def old_bytes(self, f: JournalFile) -> bytes | None:
        return None if f.old is None else self._read(f.old, f.old_sha256)

    def new_bytes(self, f: JournalFile) -> bytes | None:
        return None if f.new is None or f.new_sha256 is None else self._read(f.new, f.new_sha256)

    def _read(self, span: tuple[int, int], sha256: str | None) -> bytes:
        offset, length = span
        with open(self.directory / DATA, "rb") as fh:
            fh.seek(offset)
            data = fh.read(length)
        if hashlib.sha256(data).hexdigest() != sha256:
            raise JournalError(f"the journal {self.directory} is damaged (its data differ)")
        return data

    def directories(self) -> list[str]:
        return sorted({f.path.rpartition("/")[0] for f in self.files})


# --- the lock ---------------------------------------------------------------------------


@contextmanager
def locked(directory: Path, *, wait: bool = True) -> Iterator[None]:
    """Hold the directory's lock; with ``wait=False``, raise Busy when it is taken."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise Busy(f"{directory} is in use by a running write-back") from exc
            raise
        yield
    finally:
        os.close(fd)  # releases the lock


# --- writing and reading ----------------------------------------------------------------


def begin(
    directory: Path,
    *,
    root: Path,
    allowed_dirs: Sequence[str],
    changes: Sequence[tuple[str, bytes | None, bytes | None]],
    created_dirs: Sequence[str] = (),
    meta: dict[str, Any] | None = None,
) -> Journal:
    """Write and fsync the journal of ``changes`` (path, old bytes or None, new bytes or
    None for a deletion). The caller holds the lock."""
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / JOURNAL).exists():
        raise JournalError(f"{directory} holds an unfinished write-back; recover it first")
    files = []
    offset = 0
    with open(directory / DATA, "wb") as fh:
        for path, old, new in changes:
            spans: list[tuple[int, int] | None] = []
            for data in (old, new):
                if data is None:
                    spans.append(None)
                    continue
                fh.write(data)
                spans.append((offset, len(data)))
                offset += len(data)
            files.append(
                JournalFile(
                    path,
                    None if old is None else hashlib.sha256(old).hexdigest(),
                    None if new is None else hashlib.sha256(new).hexdigest(),
                    spans[0],
                    spans[1],
                )
            )
        fh.flush()
        os.fsync(fh.fileno())
    journal = Journal(
        directory,
        uuid.uuid4().hex,
        str(root),
        list(allowed_dirs),
        files,
        list(created_dirs),
        FORWARD,
        meta or {},
    )
    _save(journal)
    return journal


def _save(journal: Journal) -> None:
    body = asdict(journal)
    body.pop("directory")
    body["version"] = VERSION
    save_record(journal.directory, body)


def save_record(directory: Path, body: dict[str, Any]) -> None:
    """Replace ``directory/journal.json`` with ``body``, atomically and durably."""
    temp = directory / f"{JOURNAL}.tmp"
    with open(temp, "w", encoding="utf-8") as fh:
        json.dump(body, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(temp, directory / JOURNAL)
    _fsync_directory(directory)


def load_record(directory: Path) -> dict[str, Any] | None:
    """What ``save_record`` saved, None when nothing was."""
    try:
        body = json.loads((directory / JOURNAL).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise JournalError(f"the journal {directory} cannot be read ({exc})") from exc
    if not isinstance(body, dict) or body.get("version") != VERSION:
        raise JournalError(f"the journal {directory} is not one memoryui wrote")
    return body


def turn_back(journal: Journal) -> None:
    """From now on the journal's write-back is undone, not finished."""
    journal.direction = BACK
    _save(journal)


def load(directory: Path) -> Journal | None:
    """The journal in ``directory``, None when there is none."""
    body = load_record(directory)
    if body is None:
        return None
    try:
        return Journal(
            directory,
            str(body["id"]),
            str(body["root"]),
            [str(d) for d in body["allowed_dirs"]],
            [
                JournalFile(
                    str(f["path"]),
                    f["old_sha256"],
                    None if f["new_sha256"] is None else str(f["new_sha256"]),
                    tuple(f["old"]) if f["old"] is not None else None,
                    tuple(f["new"]) if f["new"] is not None else None,
                )
                for f in body["files"]
            ],
            [str(d) for d in body["created_dirs"]],
            str(body["direction"]),
            dict(body["meta"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise JournalError(f"the journal {directory} is incomplete ({exc})") from exc


def finish(directory: Path) -> None:
    """Remove the journal (the lock file stays: another process may be waiting on it)."""
    with suppress(FileNotFoundError):
        os.unlink(directory / JOURNAL)
    _fsync_directory(directory)
    for name in (DATA, f"{JOURNAL}.tmp"):
        with suppress(FileNotFoundError):
            os.unlink(directory / name)


def _fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- applying ---------------------------------------------------------------------------

OLD, NEW, OTHER = "old", "new", "other"


def disk_states(journal: Journal) -> dict[str, str]:
    """Each file: ``old``, ``new`` or ``other`` (changed by someone else, or unreadable)."""
    root = Path(journal.root)
    states = {}
    for f in journal.files:
        try:
            data = tree.read_file(root, f.path)
            digest: str | None = hashlib.sha256(data).hexdigest()
        except FileNotFoundError:
            digest = None
        except OSError:
            states[f.path] = OTHER
            continue
        if digest == f.new_sha256:
            states[f.path] = NEW
        elif digest == f.old_sha256:
            states[f.path] = OLD
        else:
            states[f.path] = OTHER
    return states


def roll_forward(journal: Journal) -> list[str]:
    """Bring every file to its new bytes (a deleted one is removed); returns the paths
    written or removed now. Raises
    JournalError, writing nothing, when a file is neither old nor new (someone changed
    it: it is not overwritten)."""
    states = disk_states(journal)
    other = [path for path, state in states.items() if state == OTHER]
    if other:
        raise JournalError(
            f"{', '.join(other)} changed on disk since the write-back began; not overwritten"
        )
    root = Path(journal.root)
    written = []
    for f in journal.files:
        if states[f.path] == OLD:
            new = journal.new_bytes(f)
            if new is None:
                export.remove_file(root, f.path, journal.allowed_dirs)
            else:
                export.write_atomic(root, f.path, new, allowed_dirs=journal.allowed_dirs)
            written.append(f.path)
    remove_temp_files(journal)
    return written


def roll_back(journal: Journal) -> tuple[list[str], list[str]]:
    """Bring every file the write-back replaced back to its old bytes (a file it created
    is removed, and so are the directories it created when empty; a file it deleted is
    written again). A file someone else
    changed meanwhile is kept as it is. Returns (restored, kept) paths."""
    root = Path(journal.root)
    restored, kept = [], []
    for f, state in zip(journal.files, disk_states(journal).values(), strict=True):
        if state == OTHER:
            kept.append(f.path)
        elif state == NEW:
            old = journal.old_bytes(f)
            if old is None:
                export.remove_file(root, f.path, journal.allowed_dirs)
            else:
                export.write_atomic(root, f.path, old, allowed_dirs=journal.allowed_dirs)
            restored.append(f.path)
    remove_temp_files(journal)
    for directory in sorted(journal.created_dirs, key=lambda d: d.count("/"), reverse=True):
        export.remove_empty_directory(root, directory)
    return restored, kept


def remove_temp_files(journal: Journal) -> list[str]:
    """The temporary files left in the journal's directories by a write-back that died."""
    return export.remove_stale_temp_files(Path(journal.root), journal.directories())


# --- the publish ------------------------------------------------------------------------


def publish(
    *,
    begin: Callable[[], bool],
    stage: Callable[[], None],
    put_in_place: Callable[[], None],
    undo: Callable[[Exception], Exception],
    audit: Callable[[Exception | None], bool],
    finish: Callable[[Exception | None], None],
    step: Callable[[str], None],
    failures: tuple[type[Exception], ...],
    atomic: Callable[[], AbstractContextManager[object]] = nullcontext,
) -> Exception | None:
    """The order that makes a write-back or a snapshot export all or nothing as seen from
    outside; each caller says what every step is for it. The caller holds the journal's
    lock. Inside ``atomic`` (the caller's database transaction, if any):

    1. ``begin``: prepare, and write and fsync the journal (False: nothing to write, no
       journal); step ``journal``;
    2. ``stage``: every new file beside its target, fsync'd (the caller names each
       ``staged``);
    3. ``put_in_place``: the renames or links (the caller names each);
    4. on one of ``failures`` in 2 or 3: ``undo`` back to before, which returns the
       failure to report;
    5. ``audit``: the database and its event, for the outcome (None: success); True
       when it recorded something.

    Then, once committed: step ``committed``, ``finish`` (the journal removed, for the
    outcome), step ``done``; the failure is returned. A failure that audited nothing is
    raised after ``finish``, with no step: nothing happened. A process that dies
    anywhere (or a BaseException) leaves the journal for the caller's recovery."""
    with atomic():
        journalled = begin()
        failure: Exception | None = None
        if journalled:
            step("journal")
            try:
                stage()
                put_in_place()
            except failures as exc:
                failure = undo(exc)
        recorded = audit(failure)
    if failure is not None and not recorded:
        finish(failure)
        raise failure
    step("committed")
    if journalled:
        finish(failure)
    step("done")
    return failure


def recover_each(
    base: Path,
    pattern: str,
    handle: Callable[[Path], None],
    *,
    errors: tuple[type[Exception], ...],
    failed: Callable[[Path, Exception], None],
) -> None:
    """The recovery of whatever ``publish`` left: ``handle`` each journal directory under
    ``base`` (matching ``pattern``) whose lock can be taken, holding it; one whose lock is
    held belongs to a publish still running and is left alone. One of ``errors`` goes to
    ``failed`` and the next directory is handled."""
    for directory in sorted(base.glob(pattern)) if base.is_dir() else []:
        try:
            with locked(directory, wait=False):
                handle(directory)
        except Busy:
            continue
        except errors as exc:
            failed(directory, exc)
