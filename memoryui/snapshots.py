"""Export a workspace as an SDK ``LocalSnapshot`` archive: the imported tree, byte for
byte, with the curated memory of all or chosen layouts laid over it.

The tree comes from the database (the imported bytes, modes and modification times), so
an export works whether the workspace's disk still exists or not. Files nobody changed
are exactly the imported ones. Files and their blobs are streamed from one query in
archive order: the files' rows in chunks, small files' contents with them and a larger
file's fetched alone, so memory holds a few MiB however large the workspace.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Collection, Generator, Iterator, Sequence
from contextlib import closing, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import BinaryField, Case, F, Max, Q, When

from generation import export, journal
from generation.export import ExportError, Row, SnapshotInfo
from generation.lint import Finding
from generation.tree import Entry, LayoutDirs

from . import lint_allowances, object_storage, observability
from .models import AuditEvent, Blob, Layout, Workspace, WorkspaceFile
from .writeback import PlannedFile, Refusal, Refused, journal_base, plan_layout

logger = logging.getLogger(__name__)

# Rows per fetch, files up to INLINE_BYTES coming with their contents: a batch holds
# at most 4 MiB (a larger file is fetched alone).
CHUNK = 256
INLINE_BYTES = 16 * 1024
REPORT_EVERY = 1024  # members between two progress reports, at most
EXPORT_SNAPSHOT_ACTION = "export.snapshot"
EXPORT_DOWNLOAD_ACTION = "export.download"
BLOB_TABLE = Blob._meta.db_table


def snapshot_base_path() -> Path:
    """Where the dashboard writes snapshots (``MEMORYUI_SNAPSHOT_BASE_PATH``)."""
    default = Path(getattr(settings, "VAR_DIR", Path(settings.BASE_DIR) / "var")) / "snapshots"
    return Path(getattr(settings, "MEMORYUI_SNAPSHOT_BASE_PATH", default))


@dataclass
class ExportPlan:
    workspace: Workspace
    layouts: list[Layout]
    curated: list[PlannedFile]
    findings: list[Finding]
    refused: list[Refusal]

    @property
    def overlay(self) -> dict[str, PlannedFile]:
        """The curated files whose bytes differ from the imported ones."""
        return {f.path: f for f in self.curated if f.changed}

    def sha256_of(self) -> dict[str, str]:
        return {f.path: f.sha256 for f in self.curated if f.sha256 is not None}


@dataclass
class ExportResult:
    plan: ExportPlan
    snapshot: SnapshotInfo
    session_state: Path | None = None
    session_state_source: str = ""
    allowed_findings: list[str] = field(default_factory=list)
    event: AuditEvent | None = None
    newly_allowed: list[str] = field(default_factory=list)  # recorded with the audit event
    stored_as: str = ""  # the archive's place in the exports storage, when not a path

    @property
    def location(self) -> str:
        return self.stored_as or str(self.snapshot.path or "")


def choose_layouts(
    workspace: Workspace,
    memories_dirs: Collection[str] | None,
    layouts: list[Layout] | None = None,
) -> list[Layout]:
    """The layouts to curate (all when ``memories_dirs`` is empty); ``layouts``: the
    workspace's present layouts, when the caller has them already."""
    if layouts is None:
        layouts = list(workspace.layouts.present().order_by("memories_dir"))
    if not memories_dirs:
        return layouts
    known = {layout.memories_dir: layout for layout in layouts}
    unknown = sorted(set(memories_dirs) - set(known))
    if unknown:
        raise ExportError(
            f"no layout {', '.join(unknown)} in {workspace.name}; "
            f"its layouts are {', '.join(sorted(known)) or 'none'}"
        )
    return [known[m] for m in sorted(set(memories_dirs))]


def plan_export(
    workspace: Workspace,
    memories_dirs: Collection[str] | None = None,
    *,
    layouts: list[Layout] | None = None,
) -> ExportPlan:
    if layouts is None:
        layouts = list(workspace.layouts.present().order_by("memories_dir"))
    chosen = choose_layouts(workspace, memories_dirs, layouts)
    dirs = [LayoutDirs(layout.memories_dir, layout.sessions_dir) for layout in layouts]
    curated: list[PlannedFile] = []
    findings: list[Finding] = []
    refused: list[Refusal] = []
    for layout in chosen:
        layout.workspace = workspace
        plan = plan_layout(layout, dirs=dirs)
        curated.extend(plan.files)
        findings.extend(plan.findings)
        refused.extend(plan.refused)
    return ExportPlan(workspace, chosen, curated, findings, refused)


def _export_fields(result: ExportResult) -> dict[str, Any]:
    snapshot = result.snapshot
    return {
        "bytes": snapshot.size,
        "members": snapshot.members,
        "sha256": snapshot.sha256[:12],
        "audit_event": result.event.pk if result.event else None,
    }


@observability.observed(
    "export",
    lambda workspace, *, snapshot_id, **_: {
        "workspace": workspace.name,
        "snapshot_id": snapshot_id,
    },
    _export_fields,
)
def export_snapshot(
    workspace: Workspace,
    *,
    snapshot_id: str,
    base_path: Path | None = None,
    fileobj: IO[bytes] | None = None,
    memories_dirs: Collection[str] | None = None,
    allow_findings: Collection[str] = (),
    session_state: bool = False,
    workspace_root: Path | None = None,
    user: Any = None,
    on_step: Callable[[str], None] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> ExportResult:
    """Write the workspace as ``<base_path>/<snapshot_id>.tar`` (or into ``fileobj``,
    for a download) with the curated memory of ``memories_dirs`` (all layouts when
    empty). With ``session_state``, also ``<snapshot_id>.session_state.json`` beside
    the archive, resuming into ``workspace_root``. Raises Refused while lint findings
    are not allowed, ExportError when the archive cannot be written.

    On the server, both files appear together with their audit event or not at all: a
    journal names their temporary files first; they are written and fsync'd, linked to
    their names, audited, then the temporary files and the journal go. ``on_step`` is
    called at each step boundary (``journal``, ``staged``, ``published``,
    ``committed``, ``done``); ``progress`` with ("export", members written,
    members)."""
    export.check_snapshot_id(snapshot_id)
    if (base_path is None) == (fileobj is None):
        raise ExportError("export either into a base path or into a download, not both")
    if session_state and base_path is None:
        raise ExportError("a session state is written beside an archive on the server only")
    cleared = _cleared(workspace, memories_dirs, allow_findings)
    plan = cleared.plan
    if base_path is None:
        assert fileobj is not None
        cleared.snapshot = _write_archive(workspace, plan, fileobj, progress)
        cleared.event = _audit(workspace, snapshot_id, cleared, user)
        return cleared
    base_path = Path(os.path.abspath(base_path))
    target = base_path / f"{snapshot_id}.tar"
    export.check_new(target)
    files = [(export.temp_beside(target), target)]
    state = b""
    result = cleared
    result.snapshot = SnapshotInfo(target, 0, "", 0)
    if session_state:
        result.session_state = base_path / f"{snapshot_id}.{export.SESSION_STATE_NAME}"
        export.check_new(result.session_state)
        root = workspace_root or base_path / f"{snapshot_id}-workspace"
        state, result.session_state_source = session_state_for(
            workspace, snapshot_id=snapshot_id, base_path=base_path, root=root
        )
        files.append((export.temp_beside(result.session_state), result.session_state))
    _publish(
        workspace, plan, files, state, snapshot_id, result, user, on_step or _no_step, progress
    )
    return result


def export_place() -> str:
    """Where server exports go, for a person: the directory, or the object store."""

    if object_storage.local_root(object_storage.EXPORTS) is not None:
        return str(snapshot_base_path())
    return object_storage.locator_of(object_storage.EXPORTS, "")


def export_to_store(
    workspace: Workspace,
    *,
    snapshot_id: str,
    session_state: bool = False,
    **options: Any,
) -> ExportResult:
    """``export_snapshot`` into the ``exports`` storage: the snapshot directory, or
    object storage (``export_to_object_store``). A session state points at a directory,
    so it is written with a snapshot directory only."""

    if object_storage.local_root(object_storage.EXPORTS) is not None:
        return export_snapshot(
            workspace,
            snapshot_id=snapshot_id,
            base_path=snapshot_base_path(),
            session_state=session_state,
            **options,
        )
    export.check_snapshot_id(snapshot_id)
    if session_state:
        raise ExportError(
            "a session state resumes from a snapshot directory; exports are kept in object "
            "storage here (MEMORYUI_STORAGE=s3), so export without it"
        )
    return export_to_object_store(workspace, snapshot_id=snapshot_id, **options)


@observability.observed(
    "export",
    lambda workspace, *, snapshot_id, **_: {
        "workspace": workspace.name,
        "snapshot_id": snapshot_id,
        "store": "object",
    },
    _export_fields,
)
def export_to_object_store(
    workspace: Workspace,
    *,
    snapshot_id: str,
    memories_dirs: Collection[str] | None = None,
    allow_findings: Collection[str] = (),
    user: Any = None,
    on_step: Callable[[str], None] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> ExportResult:
    """Export as the object ``<snapshot_id>.tar`` of the ``exports`` storage, which
    appears whole or not at all, and only if no object has that name (a conditional
    upload: of two exports to one id, one wins and the other gets ExportError). The
    archive is written into a temporary file of this process first. The audit event is
    recorded once the object exists; if it cannot be, the object is removed again, so
    an export that failed leaves neither. ``on_step``: ``staged`` (the local archive),
    ``published`` (the object), ``committed`` (the audit event)."""

    name = f"{export.check_snapshot_id(snapshot_id)}.tar"
    exists = f"{name} already exists in the export store; choose another snapshot id"
    step = on_step or _no_step
    if object_storage.stored_exists(object_storage.EXPORTS, name):
        raise ExportError(exists)  # early, before the work; the upload itself decides
    result = _cleared(workspace, memories_dirs, allow_findings)
    with tempfile.TemporaryDirectory(prefix="memoryui-export-") as folder:
        archive = Path(folder) / name
        try:
            with archive.open("xb") as fh:
                result.snapshot = _write_archive(workspace, result.plan, fh, progress)
        except OSError as exc:
            raise ExportError(f"{name} could not be written ({exc.strerror or exc})") from exc
        step("staged")
        try:
            result.stored_as = object_storage.put_new(object_storage.EXPORTS, name, archive)
        except FileExistsError as exc:
            raise ExportError(exists) from exc
        except object_storage.StoreError as exc:
            raise ExportError(f"{name} could not be stored ({exc}); nothing was kept") from exc
    step("published")
    try:
        with transaction.atomic():
            result.event = _audit(workspace, snapshot_id, result, user)
            step("committed")
    except BaseException:
        object_storage.delete(result.stored_as)  # not audited, so not kept
        raise
    return result


def _cleared(
    workspace: Workspace, memories_dirs: Collection[str] | None, allow_findings: Collection[str]
) -> ExportResult:
    """The export's plan, refused (Refused) while a lint finding is not allowed; an
    ExportResult with no archive yet."""
    plan = plan_export(workspace, memories_dirs)
    held = set(lint_allowances.standing(workspace, plan.findings, plan.sha256_of()))
    allowed_ids = held | ({f.id for f in plan.findings} & set(allow_findings))
    blocking = [f for f in plan.findings if f.id not in allowed_ids]
    if blocking or plan.refused:
        raise Refused(blocking, refused=plan.refused, what="export")
    return ExportResult(
        plan,
        SnapshotInfo(None, 0, "", 0),
        allowed_findings=sorted(allowed_ids),
        newly_allowed=sorted(allowed_ids - held),
    )


def _write_archive(
    workspace: Workspace,
    plan: ExportPlan,
    fh: IO[bytes],
    progress: Callable[[str, int, int], None] | None,
) -> SnapshotInfo:
    report, every = _reporter(workspace, plan, progress)
    members, root_mtime_ns = snapshot_members(workspace, plan.overlay, report, every)
    with closing(members):  # stops the reader thread, even when writing fails
        return export.write_snapshot_to(fh, members, root_mtime_ns=root_mtime_ns)


def stored_export(workspace: Workspace, snapshot_id: str) -> tuple[str, AuditEvent] | None:
    """Where this workspace's export ``snapshot_id`` is kept, and its audit event (which
    holds its sha256); None when the workspace exported no such snapshot or it is gone."""

    event = (
        AuditEvent.objects.filter(
            workspace=workspace, action=EXPORT_SNAPSHOT_ACTION, detail__snapshot_id=snapshot_id
        )
        .order_by("-pk")
        .first()
    )
    if event is None:
        return None
    name = f"{snapshot_id}.tar"
    if not object_storage.stored_exists(object_storage.EXPORTS, name):
        return None
    root = object_storage.local_root(object_storage.EXPORTS)
    return (str(root / name) if root else object_storage.locator_of("exports", name)), event


def _no_step(name: str) -> None:
    pass


def _publish(
    workspace: Workspace,
    plan: ExportPlan,
    files: list[tuple[Path, Path]],
    state: bytes,
    snapshot_id: str,
    result: ExportResult,
    user: Any,
    step: Callable[[str], None],
    progress: Callable[[str, int, int], None] | None,
) -> None:
    directory = journal_base() / "exports" / uuid.uuid4().hex
    holder: list[SnapshotInfo] = []

    def begin() -> bool:
        journal.save_record(
            directory,
            {
                "version": journal.VERSION,
                "id": directory.name,
                "workspace": workspace.pk,
                "files": [[str(temp), str(final)] for temp, final in files],
            },
        )
        return True

    def stage() -> None:
        export.write_temp(
            files[0][0], lambda fh: holder.append(_write_archive(workspace, plan, fh, progress))
        )
        step("staged")
        if state:

            def write_state(fh: IO[bytes]) -> None:
                fh.write(state)

            export.write_temp(files[1][0], write_state)
            step("staged")

    def put_in_place() -> None:
        for temp, final in files:
            export.link_new(temp, final)
            step("published")

    def undo(exc: Exception) -> Exception:
        _undo(files)
        return exc

    def audit(failure: Exception | None) -> bool:
        if failure is not None:
            return False  # nothing to record: the export left nothing
        info = holder[0]
        result.snapshot = SnapshotInfo(files[0][1], info.size, info.sha256, info.members)
        result.event = _audit(workspace, snapshot_id, result, user, directory.name)
        return True

    def finish(failure: Exception | None) -> None:
        if failure is None:
            for temp, _ in files:
                with suppress(FileNotFoundError):
                    temp.unlink()
        _remove_journal(directory)

    with journal.locked(directory):
        journal.publish(
            begin=begin,
            stage=stage,
            put_in_place=put_in_place,
            undo=undo,
            audit=audit,
            finish=finish,
            step=step,
            failures=(ExportError, OSError),
        )


def _undo(files: list[tuple[Path, Path]]) -> list[str]:
    """Remove the temporary files, and the final files that are the very same files
    (linked from them): an export that was not audited leaves nothing."""
    removed = []
    for temp, final in files:
        with suppress(FileNotFoundError):
            if final.exists() and os.path.samefile(temp, final):
                final.unlink()
                removed.append(str(final))
        with suppress(FileNotFoundError):
            temp.unlink()
            removed.append(str(temp))
    return removed


def _remove_journal(directory: Path) -> None:
    journal.finish(directory)
    with suppress(OSError):
        (directory / journal.LOCK).unlink()
        directory.rmdir()


def recover_exports() -> list[str]:
    """Remove what snapshot exports that died left: their temporary files, and an
    archive or session state published but never audited. Returns the paths removed."""
    removed: list[str] = []

    def handle(directory: Path) -> None:
        record = journal.load_record(directory)
        if record is not None:
            files = [(Path(t), Path(f)) for t, f in record["files"]]
            audited = AuditEvent.objects.filter(
                action=EXPORT_SNAPSHOT_ACTION, detail__journal=record["id"]
            ).exists()
            removed.extend(_undo([(t, t) for t, _ in files] if audited else files))
        _remove_journal(directory)

    def failed(directory: Path, exc: Exception) -> None:
        logger.error("snapshot export journal %s not recovered: %s", directory, exc)

    journal.recover_each(
        journal_base() / "exports",
        "*",
        handle,
        errors=(journal.JournalError, KeyError, TypeError, ValueError, OSError),
        failed=failed,
    )
    return removed


def _reporter(
    workspace: Workspace, plan: ExportPlan, progress: Callable[[str, int, int], None] | None
) -> tuple[Callable[[int, bool], None] | None, int]:
    """``progress`` as ("export", members written, members), for ``snapshot_members``,
    and how often to call it: every member of a small archive, a few hundred times in
    all for a large one (a call per member cost a tenth of a 30,000-member export)."""
    if progress is None:
        return None, 0
    total = _member_count(workspace, plan.overlay)

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
) -> tuple[Generator[Row, None, None], int]:
    """The archive's members as (path, data, mode, mtime_ns) rows, streamed from one
    query, and the modification time for its root. Close the generator when done with
    it. ``report`` is called with the number of members yielded so far, after the first
    and every ``every`` members, and whether it is the last report (at the end).

    Members come in path order (the unique index's order, so the database does not
    sort): a directory before its contents, which is all a restore needs. Files the
    workspace never had (a proposal's new raw memories) come last. Contents up to
    ``INLINE_BYTES`` come with their row; a larger file's are fetched alone, when its
    turn comes, so memory holds a few MiB however large the workspace."""
    now_ns = time.time_ns()
    present = WorkspaceFile.objects.present().filter(workspace=workspace)
    latest = present.aggregate(latest=Max("mtime_ns"))["latest"]
    stored = set(present.filter(path__in=list(overlay)).values_list("path", flat=True))
    new = [
        Entry(p, f.data, 0o644, now_ns)
        for p, f in sorted(overlay.items())
        if p not in stored and f.data is not None
    ]
    inline = Case(When(size__lte=INLINE_BYTES, then=F("blob__data")), output_field=BinaryField())
    rows = (
        present.filter(Q(kind=WorkspaceFile.Kind.DIRECTORY) | Q(blob__isnull=False))
        .order_by("path")
        .annotate(inline=inline)
        .values_list("path", "kind", "mode", "mtime_ns", "blob_id", "inline")
    )
    members = _members(rows.query.sql_with_params(), overlay, new, now_ns, report, every)
    return members, latest or now_ns


def _members(
    query: tuple[str, Sequence[Any]],
    overlay: dict[str, PlannedFile],
    new: list[Entry],
    now_ns: int,
    report: Callable[[int, bool], None] | None,
    every: int,
) -> Generator[Row, None, None]:
    """The stored rows as members (curated bytes in place of the imported ones), then
    ``new``; a directory member is made up before any file whose parent has none yet
    (an archive imported without directory members, a new ``raw_memories/``). One
    generator, not a chain of them: this loop runs once per file of the workspace."""
    directory = WorkspaceFile.Kind.DIRECTORY
    seen: set[str] = set()
    stored = (row for batch in _batches(*query, skip=overlay.keys()) for row in batch)
    added = ((e.path, "", e.mode, e.mtime_ns, None, e.data) for e in new)
    count = 0
    for path, kind, mode, mtime_ns, _, data in itertools.chain(stored, added):
        if kind == directory:
            if path in seen:
                continue  # already made up for a file that came first
            seen.add(path)
            entry: Row = (path, None, mode, mtime_ns)
        elif path in overlay:
            data = overlay[path].data
            if data is None:
                continue  # a deleted skill file: not in the archive
            entry = (path, data, mode, now_ns)
        else:
            entry = (path, data if type(data) is bytes else bytes(data), mode, mtime_ns)
        parent = path.rpartition("/")[0]
        if parent and parent not in seen:
            for made_up in _made_up_parents(parent, seen, now_ns):
                count += 1
                yield made_up
        count += 1
        if report is not None and (not count % every or count == 1):
            report(count, False)
        yield entry
    if report is not None:
        report(count, True)


def _made_up_parents(parent: str, seen: set[str], mtime_ns: int) -> Iterator[Row]:
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


def session_state_for(
    workspace: Workspace, *, snapshot_id: str, base_path: Path, root: Path
) -> tuple[bytes, str]:
    """The bytes of ``<snapshot_id>.session_state.json`` for ``UnixLocalSandboxClient
    .resume()``: the imported workspace's session state re-pointed at the new archive,
    or a fresh one when the workspace came without one; and the source it was
    re-pointed from ("" for a fresh state)."""
    source = export.find_session_state(Path(workspace.source_path))
    if source is not None:
        state = export.repoint_session_state(
            export.load_session_state(source.read_bytes()),
            snapshot_id=snapshot_id,
            base_path=base_path,
            root=root,
        )
    else:
        state = export.new_session_state(
            session_id=str(uuid.uuid4()), snapshot_id=snapshot_id, base_path=base_path, root=root
        )
    return export.session_state_bytes(state), str(source or "")


def _audit(
    workspace: Workspace,
    snapshot_id: str,
    result: ExportResult,
    user: Any,
    journal_id: str | None = None,
) -> AuditEvent:
    info = result.snapshot
    actor = "" if getattr(user, "pk", None) else "command line"
    lint_allowances.record(
        workspace,
        result.plan.findings,
        result.plan.sha256_of(),
        result.newly_allowed,
        user=user,
        actor=actor,
    )
    kept = result.stored_as or info.path  # on the server; else a download
    return AuditEvent.record(
        workspace,
        EXPORT_SNAPSHOT_ACTION if kept else EXPORT_DOWNLOAD_ACTION,
        user=user,
        actor=actor,
        target=str(kept or f"{snapshot_id}.tar (download)"),
        snapshot_id=snapshot_id,
        sha256=info.sha256,
        size=info.size,
        members=info.members,
        layouts=[layout.memories_dir for layout in result.plan.layouts],
        files=[
            {"path": f.path, "sha256": f.sha256, **({"deleted": True} if f.deleted else {})}
            for f in result.plan.overlay.values()
        ],
        allowed_findings=result.allowed_findings,
        session_state=str(result.session_state or ""),
        session_state_source=result.session_state_source,
        journal=journal_id,
    )
