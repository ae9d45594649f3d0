"""The two ways into an import: ``import_workspace`` (a directory or SDK snapshot tar,
whole) and ``sync_paths`` (a write-back's few paths). Each holds its workspace's row
lock while it reads and syncs (``syncing``); imports of one workspace run one at a time.
"""

from __future__ import annotations

import gc
import os
import re
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from generation import tree

from .. import observability
from ..models import Workspace
from .reading import Progress, read_entries
from .reports import ImportResult
from .syncing import WorkspaceSync

WORKSPACE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def valid_workspace_name(name: str) -> bool:
    return bool(WORKSPACE_NAME_RE.fullmatch(name))


def default_name(source: Path) -> str:
    """A name from the path: the folder (its parent for SDK-style ``.../workspace``) or
    the archive's name without extensions, made URL-safe."""
    source = source.absolute()
    if source.is_file():
        name = source.name.removesuffix(".gz").removesuffix(".tgz").removesuffix(".tar")
    elif source.name == "workspace" and source.parent.name:
        name = source.parent.name
    else:
        name = source.name
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-._")[:100]
    return name or "workspace"


def default_limits() -> tree.Limits:
    return tree.Limits(
        huge_file_bytes=settings.MEMORYUI_HUGE_FILE_BYTES,
        max_file_bytes=settings.MEMORYUI_MAX_FILE_BYTES,
        max_total_bytes=settings.MEMORYUI_MAX_IMPORT_BYTES,
    )


@contextmanager
def _gc_paused() -> Iterator[None]:
    # The sync keeps every file of the tree alive until it ends, so each collection
    # walks all of them for nothing: a sixth of the import time on a large tree.
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _import_fields(result: ImportResult) -> dict[str, Any]:
    return {
        "files": result.files,
        "added": result.added,
        "changed": result.changed,
        "missing": result.missing,
        "problems": len(result.errors),
        "outcome": "ok" if result.imported_anything else "empty",
    }


@observability.observed(
    "import",
    lambda source, name=None, **_: {
        "workspace": name or default_name(Path(source)),
        "source": source,
    },
    _import_fields,
)
def import_workspace(
    source: Path,
    name: str | None = None,
    *,
    limits: tree.Limits | None = None,
    progress: Progress | None = None,
    user: Any = None,
    scheduled: bool = False,
    merge: str = "",
    fill_only: bool = False,
    index: Sequence[Sequence[Any]] | None = None,
    index_only: bool = False,
    open_upload: Callable[[], Any] | None = None,
) -> ImportResult:
    """Import ``source`` into the workspace called ``name`` (created if new).

    ``merge`` (a snapshot id): the source is one sandbox's upload to the remote snapshot
    store, merged into the workspace rather than synced: nothing it lacks is marked gone
    (other sandboxes have their own files), its in-tree symbolic links are left to its
    stored archive, and every change it brings to the memory documents or skills is an
    agent version to review, a layout's first one included. With ``fill_only`` (an
    upload merged after a later upload of the same sandbox was), it only adds the files
    the workspace lacks: what it holds already came from the later upload, and stays.
    ``index``: the upload's member index, made when it came in (its members are then
    read by their offsets, not parsed again). ``index_only`` (with ``fill_only``): the
    archive is neither checked nor copied; the few members read (files the workspace
    lacks) are read through ``open_upload`` (the stored upload, by ranged requests).

    Imports of one workspace run one at a time (its row is locked on PostgreSQL; SQLite
    has one writer). Raises ``tree.TreeError`` when the source cannot be read at all, or
    holds no files for a new workspace (which is then not created).
    """
    limits = limits or default_limits()
    source = Path(os.path.normpath(Path(source).absolute()))
    index_only = (
        index_only and fill_only and bool(merge) and index is not None and open_upload is not None
    )
    if not index_only and source.is_symlink():
        raise tree.TreeError(f"{source} is a symbolic link; give the real path.")
    is_dir = not index_only and source.is_dir()
    archive = (
        None if is_dir else read_entries(source, limits, bool(merge), index, index_only)
    )  # TreeError
    started = timezone.now()
    kind = Workspace.SourceKind.DIRECTORY if is_dir else Workspace.SourceKind.SNAPSHOT
    with _gc_paused(), transaction.atomic():
        workspace, created = Workspace.objects.get_or_create(
            name=name or default_name(source),
            defaults={"source_kind": kind, "source_path": str(source)},
        )
        # FOR NO KEY UPDATE: imports of one workspace wait for each other, while rows
        # that only refer to it (an upload's job, queued meanwhile) are written at once.
        workspace = Workspace.objects.select_for_update(no_key=True).get(pk=workspace.pk)
        if not merge and (workspace.source_kind, workspace.source_path) != (kind, str(source)):
            workspace.source_kind, workspace.source_path = kind, str(source)
            workspace.save(update_fields=["source_kind", "source_path"])
        sync = WorkspaceSync(workspace, limits, progress, started, merge)
        sync.fill_only = sync.versions.fill_only = bool(merge) and fill_only
        if archive is None:
            sync.collect_directory(source)
        else:
            if index_only:
                sync.open_upload = open_upload
            sync.collect_entries(archive, None if index_only else source)
        result = sync.finish(user, scheduled)
        if created and not result.imported_anything:  # rolls the new workspace back
            raise tree.TreeError(
                f"{source} holds no files: nothing to import, no workspace created "
                "(a workspace has a memories/ folder, and usually sessions/)."
                + _problems_in_brief(result.errors)
            )
        return result


def _problems_in_brief(errors: list[dict[str, str]], shown: int = 3) -> str:
    """What stood in the way of an import that found nothing, for its one-line error
    (a truncated archive, say, says so)."""
    if not errors:
        return ""
    listed = "; ".join(f"{e['path']}: {e['error']}" for e in errors[:shown])
    more = f"; and {len(errors) - shown} more" if len(errors) > shown else ""
    return f" Problems found ({len(errors)}): {listed}{more}."


def sync_paths(workspace: Workspace, root: Path, paths: Collection[str]) -> None:
    """Bring the rows of ``paths`` (files and directories under ``root``, the workspace's
    directory) to what is on disk now, as an import would, without looking at any other
    file: what a write-back does after writing a few files of a large tree. Paths gone
    from disk are marked missing. Records no import run: nothing else was compared."""
    wanted = sorted({p for path in paths for p in _with_parents(path)})
    with _gc_paused(), transaction.atomic():
        workspace = Workspace.objects.select_for_update(no_key=True).get(pk=workspace.pk)
        sync = WorkspaceSync(workspace, default_limits(), None, timezone.now())
        sync.only = wanted
        sync.collect_paths(root, wanted)
        sync.sync_rows()


def _with_parents(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]
