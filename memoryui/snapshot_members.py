"""The members of an export archive, streamed from the database in archive order: the
files' rows in chunks, small files' contents with them and a larger file's fetched alone
(on PostgreSQL by a reader on its own connection, a bounded queue ahead), so memory holds
a few MiB however large the workspace. Curated files of the exported layouts are laid over
the imported ones (``memoryui.snapshots`` plans them and writes the archive)."""

from __future__ import annotations

import itertools
import queue
import threading
import time
import uuid
from collections.abc import Callable, Collection, Generator, Iterable, Iterator, Sequence
from typing import Any

from django.db import connection
from django.db.models import BinaryField, Case, F, Max, Q, QuerySet, When

from generation.archive_map import ArchiveMap, Keyed
from generation.export import Row
from generation.tree import Entry

from .models import Blob, Workspace, WorkspaceFile
from .writeback import PlannedFile

# Rows per fetch, files up to INLINE_BYTES coming with their contents: a batch holds
# at most 4 MiB (a larger file is fetched alone).
CHUNK = 256
# An archive built beside an earlier one fetches the files that changed since by their
# blob, all at once, when they weigh at most this much (the memory an export may hold,
# as a batch above); more changed, and all are read as usual.
REUSE_FETCH_BYTES = 4 * 1024 * 1024
INLINE_BYTES = 16 * 1024
REPORT_EVERY = 1024  # members between two progress reports, at most
BLOB_TABLE = Blob._meta.db_table


def progress_reporter(
    workspace: Workspace,
    overlay: dict[str, PlannedFile],
    progress: Callable[[str, int, int], None] | None,
) -> tuple[Callable[[int, bool], None] | None, int]:
    """``progress`` as ("export", members written, members), for ``snapshot_members``,
    and how often to call it: every member of a small archive, a few hundred times in
    all for a large one (a call per member cost a tenth of a 30,000-member export)."""
    if progress is None:
        return None, 0
    total = _member_count(workspace, overlay)

    def report(done: int, last: bool) -> None:
        if last:
            progress("export", done, done)
        else:
            progress("export", min(done, total), max(total, done))

    return report, max(1, min(REPORT_EVERY, total // 400))


def _member_count(workspace: Workspace, overlay: dict[str, PlannedFile]) -> int:
    """About how many members the archive has (directories made up on the way are not
    counted): for a progress bar."""
    present = WorkspaceFile.objects.present().filter(workspace=workspace)
    stored = present.filter(Q(kind=WorkspaceFile.Kind.DIRECTORY) | Q(blob__isnull=False))
    known = set(present.filter(path__in=list(overlay)).values_list("path", flat=True))
    return stored.count() + len(set(overlay) - known)


def snapshot_members(
    workspace: Workspace,
    overlay: dict[str, PlannedFile],
    report: Callable[[int, bool], None] | None = None,
    every: int = REPORT_EVERY,
    previous: ArchiveMap | None = None,
) -> tuple[Generator[Keyed, None, None], int]:
    """The archive's members as rows with what settles their bytes (``Keyed``:
    path, data, mode, mtime_ns, content digest), streamed, and the modification time
    for its root. Close the generator when done with it. ``report`` is called with the
    number of members yielded so far, after the first and every ``every`` members, and
    whether it is the last report (at the end).

    Members come in path order (the unique index's order, so the database does not
    sort): a directory before its contents, which is all a restore needs. Files the
    workspace never had (a proposal's new raw memories) come last. Contents up to
    ``INLINE_BYTES`` come with their row; a larger file's are fetched alone, when its
    turn comes, so memory holds a few MiB however large the workspace.

    With ``previous``, the map of an archive to copy from (``archive_map.Reuser``):
    the rows are read without their contents, and only the files ``previous`` does not
    hold as they are now are fetched, by their blob (unless they weigh more than
    ``REUSE_FETCH_BYTES``: then as without it); the others come without their data."""
    now_ns = time.time_ns()
    present = WorkspaceFile.objects.present().filter(workspace=workspace)
    latest = present.aggregate(latest=Max("mtime_ns"))["latest"]
    stored = set(present.filter(path__in=list(overlay)).values_list("path", flat=True))
    new = [
        Entry(p, f.data, 0o644, now_ns)
        for p, f in sorted(overlay.items())
        if p not in stored and f.data is not None
    ]
    files = present.filter(Q(kind=WorkspaceFile.Kind.DIRECTORY) | Q(blob__isnull=False))
    beside = _rows_beside(files, overlay, previous) if previous is not None else None
    if beside is not None:
        rows, contents = beside
        members = _members(iter(rows), overlay, new, now_ns, report, every, contents)
    else:
        query = _row_query(files)
        streamed = (row for batch in _batches(*query, skip=overlay.keys()) for row in batch)
        members = _members(streamed, overlay, new, now_ns, report, every)
    return members, latest or now_ns


def _rows_beside(
    files: QuerySet[WorkspaceFile], overlay: Collection[str], previous: ArchiveMap
) -> tuple[list[tuple[Any, ...]], dict[str, bytes]] | None:
    """``files`` in path order as (path, kind, mode, mtime_ns, blob id, size), and the
    contents of those ``previous`` lacks as they are now, by their blob (the others
    are copied from it); None if those weigh more than REUSE_FETCH_BYTES."""
    query = files.order_by("path").values_list(
        "path", "kind", "mode", "mtime_ns", "blob_id", "size"
    )
    with connection.cursor() as cursor:
        cursor.execute(*query.query.sql_with_params())
        found = cursor.fetchall()
    contents = contents_beside(found, previous, skip=overlay)
    return None if contents is None else (found, contents)


def contents_beside(
    rows: Iterable[tuple[Any, ...]], previous: ArchiveMap, skip: Collection[str] = ()
) -> dict[str, bytes] | None:
    """The contents, by blob, of the files among ``rows`` (path, kind, mode, mtime_ns,
    blob id, size) that ``previous`` does not hold as they are now (but those in
    ``skip``); None when they weigh more than REUSE_FETCH_BYTES."""
    mapped = previous.members
    directory = WorkspaceFile.Kind.DIRECTORY
    changed: dict[str, int] = {}
    for path, kind, mode, mtime_ns, blob, size in rows:
        if kind == directory or blob is None or path in skip:
            continue
        old = mapped.get(path)
        if (
            old is None
            or old[0] != blob
            or old[1] != mode & 0o7777
            or old[2] != mtime_ns // 1_000_000_000
        ):
            changed[blob] = size
    if sum(changed.values()) > REUSE_FETCH_BYTES:
        return None
    return blob_contents(set(changed))


def blob_contents(blob_ids: Collection[str]) -> dict[str, bytes]:
    """The contents of these blobs, 256 at a time (a few files that changed since an
    archive to copy the rest from: at most REUSE_FETCH_BYTES of them)."""
    found: dict[str, bytes] = {}
    ordered = sorted(blob_ids)
    for start in range(0, len(ordered), 256):
        chunk = ordered[start : start + 256]
        rows = Blob.objects.filter(pk__in=chunk).values_list("pk", "data")
        found.update((pk, bytes(data)) for pk, data in rows)
    return found


def file_rows(files: QuerySet[WorkspaceFile]) -> Iterator[tuple[Any, ...]]:
    """(path, kind, mode, mtime_ns, blob id, contents or None) of each of ``files`` in
    path order, streamed as an export streams them (``snapshot_members``): small files'
    contents with their rows, a larger file's fetched alone, on PostgreSQL in binary and
    read ahead by a second thread. Contents may be a memoryview."""
    for batch in _batches(*_row_query(files), skip=()):
        yield from batch


def _row_query(files: QuerySet[WorkspaceFile]) -> tuple[str, Sequence[Any]]:
    inline = Case(When(size__lte=INLINE_BYTES, then=F("blob__data")), output_field=BinaryField())
    rows = (
        files.order_by("path")
        .annotate(inline=inline)
        .values_list("path", "kind", "mode", "mtime_ns", "blob_id", "inline")
    )
    return rows.query.sql_with_params()


def _members(
    rows: Iterator[tuple[Any, ...]],
    overlay: dict[str, PlannedFile],
    new: list[Entry],
    now_ns: int,
    report: Callable[[int, bool], None] | None,
    every: int,
    contents: dict[str, bytes] | None = None,
) -> Generator[Keyed, None, None]:
    """The stored rows as members (curated bytes in place of the imported ones), then
    ``new``; a directory member is made up before any file whose parent has none yet
    (an archive imported without directory members, a new ``raw_memories/``). One
    generator, not a chain of them: this loop runs once per file of the workspace.
    With ``contents``, a row's last value is its size and its contents are there (a
    file not there is one the archive to copy from holds)."""
    directory = WorkspaceFile.Kind.DIRECTORY
    seen: set[str] = set()
    added = ((e.path, "", e.mode, e.mtime_ns, None, e.data) for e in new)
    count = 0
    for path, kind, mode, mtime_ns, blob, data in itertools.chain(rows, added):
        if contents is not None and blob is not None:
            data = contents.get(blob)
        if kind == directory:
            if path in seen:
                continue  # already made up for a file that came first
            seen.add(path)
            entry: Keyed = (path, None, mode, mtime_ns, "")
        elif path in overlay:
            planned = overlay[path]
            if planned.data is None:
                continue  # a deleted skill file: not in the archive
            entry = (path, planned.data, mode, now_ns, planned.sha256 or "")
        else:
            entry = (
                path,
                data if data is None or type(data) is bytes else bytes(data),
                mode,
                mtime_ns,
                blob,
            )
        parent = path.rpartition("/")[0]
        if parent and parent not in seen:
            for made_up, _, made_mode, made_mtime in made_up_parents(parent, seen, now_ns):
                count += 1
                yield (made_up, None, made_mode, made_mtime, "")
        count += 1
        if report is not None and (not count % every or count == 1):
            report(count, False)
        yield entry
    if report is not None:
        report(count, True)


def made_up_parents(parent: str, seen: set[str], mtime_ns: int) -> Iterator[Row]:
    """Directory members for ``parent`` and its own parents not in ``seen`` yet (added to
    it), outermost first."""
    missing = []
    while parent and parent not in seen:
        missing.append(parent)
        parent = parent.rpartition("/")[0]
    for directory in reversed(missing):
        seen.add(directory)
        yield (directory, None, 0o755, mtime_ns)


def _batches(
    sql: str, params: Sequence[Any], *, skip: Collection[str]
) -> Iterator[list[tuple[Any, ...]]]:
    """The rows of ``sql`` (path, kind, mode, mtime_ns, blob id, contents when small)
    in batches from a chunked cursor (server-side on PostgreSQL), a large file's
    contents fetched into its row, in a batch of its own. Paths in ``skip`` (curated
    anew) are not fetched."""
    if connection.vendor == "postgresql":
        yield from _postgres_batches(sql, params, skip)
        return
    with connection.chunked_cursor() as cursor, connection.cursor() as blobs:
        cursor.execute(sql, params)
        while rows := cursor.fetchmany(CHUNK):
            yield from _with_large_files(rows, blobs, skip)


def _with_large_files(
    rows: list[tuple[Any, ...]], cursor: Any, skip: Collection[str], **options: Any
) -> Iterator[list[tuple[Any, ...]]]:
    """``rows``, each file over ``INLINE_BYTES`` with its contents fetched (through
    ``cursor``) and alone in its batch, so that one large file at a time is held."""
    large = [i for i, row in enumerate(rows) if row[5] is None and row[4] is not None]
    start = 0
    for i in large:
        if i > start:
            yield rows[start:i]
        path, kind, mode, mtime_ns, blob, _ = rows[i]
        if path not in skip:
            cursor.execute(f"SELECT data FROM {BLOB_TABLE} WHERE sha256 = %s", [blob], **options)
            yield [(path, kind, mode, mtime_ns, blob, cursor.fetchone()[0])]
        start = i + 1
    if start < len(rows):
        yield rows[start:] if start else rows


def _postgres_batches(
    sql: str, params: Sequence[Any], skip: Collection[str]
) -> Iterator[list[tuple[Any, ...]]]:
    """A server-side cursor in binary format (blobs travel as they are, not as
    hexadecimal text), read ahead by a second thread: the server's work and the wire
    overlap with the archive writing, as they cannot within one thread. The thread has
    the connection to itself until the last batch is read; two batches at most wait
    for the writer, so memory stays bounded."""
    import psycopg  # noqa: PLC0415 (the driver, on PostgreSQL only)

    connection.ensure_connection()
    raw = connection.connection
    batches: queue.Queue[list[tuple[Any, ...]] | BaseException] = queue.Queue(maxsize=2)
    stop = threading.Event()

    def put(item: list[tuple[Any, ...]] | BaseException) -> None:
        while not stop.is_set():
            try:
                batches.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def read() -> None:
        name = f"memoryui_export_{uuid.uuid4().hex}"
        try:
            # Django's cursors bind parameters on the client, which rules binary out.
            with (
                raw.cursor(name=name, binary=True, withhold=raw.autocommit) as cursor,
                psycopg.Cursor(raw) as blobs,
            ):
                cursor.execute(sql, params)
                while not stop.is_set():
                    rows = cursor.fetchmany(CHUNK)
                    if not rows:
                        put([])
                        return
                    for batch in _with_large_files(rows, blobs, skip, binary=True):
                        put(batch)
        except BaseException as exc:  # re-raised in the caller's thread
            put(exc)

    reader = threading.Thread(target=read, name="snapshot-reader", daemon=True)
    reader.start()
    try:
        while True:
            item = batches.get()
            if isinstance(item, BaseException):
                raise item
            if not item:
                return
            yield item
    finally:
        stop.set()
        reader.join()
