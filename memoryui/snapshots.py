"""Export a workspace as an SDK ``LocalSnapshot`` archive: the imported tree, byte for
byte, with the curated memory of all or chosen layouts laid over it.

The tree comes from the database (the imported bytes, modes and modification times), so
an export works whether the workspace's disk still exists or not. Files nobody changed
are exactly the imported ones. The members stream from the database in archive order
(``memoryui.snapshot_members``), so memory holds a few MiB however large the workspace.
"""

from __future__ import annotations

import logging
import os
import tempfile
import uuid
from collections.abc import Callable, Collection
from contextlib import closing, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.db import transaction

from generation import export, journal
from generation.archive_map import ArchiveMap, Reuser
from generation.export import ExportError, SnapshotInfo
from generation.lint import Finding
from generation.tree import LayoutDirs

from . import download_cache, lint_allowances, object_storage, observability
from .models import AuditEvent, Layout, Workspace
from .snapshot_members import progress_reporter, snapshot_members
from .writeback import PlannedFile, Refusal, Refused, journal_base, plan_layout

logger = logging.getLogger(__name__)

EXPORT_SNAPSHOT_ACTION = "export.snapshot"
EXPORT_DOWNLOAD_ACTION = "export.download"


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
    mapped: list[ArchiveMap] = []
    scratch = _scratch()
    with tempfile.TemporaryDirectory(prefix=download_cache.SCRATCH_PREFIX, dir=scratch) as folder:
        archive = Path(folder) / name
        try:
            with archive.open("xb") as fh:
                result.snapshot = _write_archive(workspace, result.plan, fh, progress, mapped)
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
        download_cache.keep_export(workspace.pk, archive, result.snapshot, mapped[0])
    return result


def _scratch() -> Path | None:
    """Where an export to object storage writes its archive first: beside the kept
    archives (one file system: the archive is then kept by a link, not copied), or the
    system's temporary folder if that folder cannot be made."""
    folder = download_cache.cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return folder


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
    mapped: list[ArchiveMap] | None = None,
) -> SnapshotInfo:
    """The export's archive into ``fh``, its unchanged files copied from the archive
    built last for the workspace (``download_cache.previous_archive``); with
    ``mapped``, the new archive's map is appended to it (to keep the archive by)."""
    report, every = progress_reporter(workspace, plan.overlay, progress)

    def build(previous: download_cache.Previous | None) -> tuple[SnapshotInfo, Reuser]:
        reuser = Reuser(previous.map, previous.fd) if previous else Reuser()
        members, root_mtime_ns = snapshot_members(
            workspace, plan.overlay, report, every, previous.map if previous else None
        )
        with closing(members):  # stops the reader thread, even when writing fails
            info = export.write_snapshot_to(
                fh, reuser.members(members), root_mtime_ns=root_mtime_ns, placed=reuser.placed
            )
        return info, reuser

    def rewind() -> None:
        if not fh.seekable():
            raise ExportError("the archive this export copied from changed meanwhile; export again")
        fh.seek(0)
        fh.truncate()

    info, reuser = download_cache.copying_from(workspace.pk, build, rewind)
    if mapped is not None:
        mapped.append(reuser.archive_map())
    return info


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

    mapped: list[ArchiveMap] = []

    def stage() -> None:
        export.write_temp(
            files[0][0],
            lambda fh: holder.append(_write_archive(workspace, plan, fh, progress, mapped)),
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
            download_cache.keep_export(workspace.pk, files[0][1], holder[0], mapped[0])
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
