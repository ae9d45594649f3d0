"""A sandbox's restore from the remote snapshot store (``memoryui.snapshot_store``).

A download of an id is that sandbox's own files, exactly as it last uploaded them,
with each layout's memories folder as the workspace serves it
(``memoryui.served_memory``): never another sandbox's files. The upload's part is
copied by the offsets of its member index when it has one (else parsed), and the
archive is built only when what it is made of changed (``memoryui.download_cache``).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import IO, Any, NamedTuple

from django.db import connection
from django.db.models import Q, QuerySet

from generation import archive_map, export, tree
from generation.tree import Entry

from . import download_cache, object_storage, snapshot_members
from .importer import default_limits
from .models import AuditEvent, UploadedSnapshot, UploadedSnapshotIndex, Workspace, WorkspaceFile
from .served_memory import ServedLayout, keep_own_files, served_layouts
from .snapshot_members import file_rows, made_up_parents
from .snapshots import EXPORT_DOWNLOAD_ACTION
from .writeback import DOCUMENT_FILES

log = logging.getLogger(__name__)

# What a restore records as served: an upload lacking one of these is the agent's forgetting.
FORGETTABLE = (WorkspaceFile.Kind.RAW_MEMORY, WorkspaceFile.Kind.ROLLOUT_SUMMARY)


def uploaded(workspace: Workspace, snapshot_id: str) -> UploadedSnapshot | None:
    return UploadedSnapshot.objects.filter(workspace=workspace, snapshot_id=snapshot_id).first()


def upload_index(snapshot: UploadedSnapshot) -> list[tuple[Any, ...]] | None:
    """The upload's member index (rows laid out as ``tree.IndexedMember``), if it has
    one made of this very upload."""
    row = (
        UploadedSnapshotIndex.objects.filter(snapshot=snapshot, sha256=snapshot.sha256)
        .values_list("members", flat=True)
        .first()
    )
    return unpack_index(row, f"upload {snapshot.pk}")


def unpack_index(packed: bytes | memoryview | None, of: str) -> list[tuple[Any, ...]] | None:
    """A stored member index's rows; None for none, or one in another format or
    damaged (its reader parses the archive instead)."""
    if packed is None:
        return None
    try:
        return tree.unpack_index(bytes(packed))
    except (ValueError, zlib.error) as exc:
        log.warning("the member index of %s is unreadable (%s)", of, exc)
        return None


def sandbox_archive(
    workspace: Workspace, snapshot_id: str, *, user: Any
) -> download_cache.Download:
    """What ``download(snapshot_id)`` answers: the files of that id's last upload outside
    the memory layouts, byte for byte (modes and in-tree links included), and each
    layout's memories folder as the workspace serves it (``served_memory``). An id never
    uploaded gets the served memory alone: how a fresh sandbox starts from the
    workspace's memory. The upload's members are read by their offsets when it has a
    member index, else (or when the index turns out not to match) by parsing it.

    The served memory is worked out anew every time; the archive is built only when
    what it is made of differs from the one kept for this id (``download_cache``)."""
    snapshot = uploaded(workspace, snapshot_id)
    served = served_layouts(workspace, user=user)
    own = keep_own_files(workspace, snapshot, served)
    memory_dirs = [s.layout.memories_dir for s in served]
    has_index = (
        snapshot is not None
        and UploadedSnapshotIndex.objects.filter(snapshot=snapshot, sha256=snapshot.sha256).exists()
    )
    key, rows = _download_key(workspace, snapshot, has_index, served)

    def write(fileobj: IO[bytes], previous: download_cache.Previous | None) -> download_cache.Built:
        own_key = _own_key(snapshot, has_index, memory_dirs)
        region = previous.map.region if previous is not None else None
        if previous is not None and region is not None and own_key and region.key == own_key:
            fd = previous.fd  # the upload's part as the previous archive holds it

            def copied(seen: set[str]) -> Iterator[export.Member]:
                return _copied_region(fd, region, seen)

            return _write_download(fileobj, workspace, served, copied, own_key, rows, previous)
        with ExitStack() as stack:
            archive = (
                stack.enter_context(object_storage.local_copy(snapshot.path)) if snapshot else None
            )
            index = upload_index(snapshot) if snapshot and has_index else None

            def own(seen: set[str], by_offset: bool = True) -> Iterator[export.Member]:
                if archive is None:
                    return iter(())
                if index is not None and by_offset:
                    return _indexed_members(archive, index, memory_dirs, seen)
                return _own_members(archive, memory_dirs, seen)

            try:
                return _write_download(fileobj, workspace, served, own, own_key, rows, previous)
            except tree.IndexMismatch:
                fileobj.seek(0)
                fileobj.truncate()

                def parsed(seen: set[str]) -> Iterator[export.Member]:
                    return own(seen, by_offset=False)

                return _write_download(fileobj, workspace, served, parsed, own_key, rows, previous)

    download = download_cache.fetch(workspace.pk, snapshot_id, key, write)
    if snapshot is not None:
        # What it was served: each document's version, the raw memories and rollout
        # summaries (its next upload lacking one is the agent's forgetting), and each
        # skill file's digest (its next upload changing or lacking one is the agent's).
        versions = {
            str(s.layout.pk): {
                **s.versions,
                "files": sorted(
                    [r[0] for r in rows.get(s.layout.memories_dir, ()) if r[1] in FORGETTABLE]
                    + [p for p in s.files if p in own]
                ),
                "skills": {
                    path.removeprefix(s.layout.memories_dir + "/"): hashlib.sha256(data).hexdigest()
                    for path, data in s.files.items()
                    if path.startswith(s.layout.memories_dir + "/skills/")
                },
            }
            for s in served
        }
        if snapshot.served != versions:
            UploadedSnapshot.objects.filter(pk=snapshot.pk).update(served=versions)
    AuditEvent.record(
        workspace,
        EXPORT_DOWNLOAD_ACTION,
        user=user,
        target=f"{snapshot_id}.tar (sandbox download)",
        snapshot_id=snapshot_id,
        uploaded=snapshot is not None,
        sha256=download.sha256,
        size=download.size,
        members=download.members,
        built=download.built,
        layouts=memory_dirs,
        held_back=[
            {"path": h.path, "latest": h.latest, "served": h.served, "reason": h.reason}
            for s in served
            for h in s.held
        ],
    )
    return download


# A memory file's row as the key sees it: path, kind, mode, mtime_ns, blob id, size.
FileRow = tuple[str, str, int, int, str | None, int]


def _download_key(
    workspace: Workspace,
    snapshot: UploadedSnapshot | None,
    has_index: bool,
    served: list[ServedLayout],
) -> tuple[str, dict[str, list[FileRow]]]:
    """The digest of everything a download is made of (``download_cache``), and the
    rows of each layout's memory files it was made of."""
    key = download_cache.Key()
    key.text(snapshot.sha256 if snapshot else "", has_index)
    folders = _memory_folders(workspace)
    rows: dict[str, list[FileRow]] = {}
    for layout in served:
        folder = layout.layout.memories_dir
        key.text("layout", folder)
        for path, contents in sorted(layout.files.items()):
            key.data(path, contents)
        key.text("files")
        query = (
            _layout_files(workspace, layout, folders)
            .order_by("path")
            .values_list("path", "kind", "mode", "mtime_ns", "blob_id", "size")
        )
        with connection.cursor() as cursor:  # plain tuples: tens of thousands of them
            cursor.execute(*query.query.sql_with_params())
            rows[folder] = cursor.fetchall()
        key.rows(rows[folder])
    return key.hexdigest(), rows


def _own_key(snapshot: UploadedSnapshot | None, has_index: bool, memory_dirs: list[str]) -> str:
    """What settles the upload's part of a download ("" for none): the upload, how it is
    read, and the memory folders left out of it."""
    if snapshot is None:
        return ""
    parts = [snapshot.sha256, str(has_index), *memory_dirs]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _write_download(
    fileobj: IO[bytes],
    workspace: Workspace,
    served: list[ServedLayout],
    own_members: Callable[[set[str]], Iterator[export.Member]],
    own_key: str,
    rows: dict[str, list[FileRow]],
    previous: download_cache.Previous | None,
) -> download_cache.Built:
    """The archive of the download into ``fileobj``: the upload's part from
    ``own_members`` (which notes each path it yields), settled by ``own_key``, then
    the memory folders."""
    seen: set[str] = set()
    recorded = _Recorded(own_members(seen))
    sources = _memory_sources(workspace, served, rows, previous)
    reuser = sources.reuser
    memory = reuser.members(_memory_members(served, seen, sources.rows, sources.contents))
    info = export.write_snapshot_to(
        fileobj,
        itertools.chain(recorded, memory),
        root_mtime_ns=time.time_ns(),
        placed=reuser.placed,
    )
    mapped = reuser.archive_map()
    if own_key:
        placed = reuser.placed
        mapped.region = archive_map.Region(
            own_key,
            placed[0],
            placed[recorded.items],
            tuple(recorded.paths),
            tuple(recorded.links),
        )
    return download_cache.Built(info, mapped, keep=sources.consistent())


class _Recorded:
    """The upload's members as they pass to the writer, counted, with their paths and
    links: the region of the archive they fill, for the next build to copy whole."""

    def __init__(self, members: Iterator[export.Member]) -> None:
        self.members = members
        self.items = 0
        self.paths: list[str] = []
        self.links: list[tuple[str, str, int, int]] = []

    def __iter__(self) -> Iterator[export.Member]:
        for member in self.members:
            self.items += 1
            if isinstance(member, tree.Blocks | export.Copy):
                self.paths.extend(member.paths)
            elif isinstance(member, export.Symlink):
                self.links.append((member.path, member.target, member.mode, member.mtime_ns))
            elif isinstance(member, Entry):
                self.paths.append(member.path)
            yield member


def _copied_region(fd: int, region: archive_map.Region, seen: set[str]) -> Iterator[export.Member]:
    """The upload's members as the previous archive holds them, copied whole."""
    seen.update(region.paths)
    seen.update(link[0] for link in region.links)
    if region.end > region.start:
        yield export.Copy(fd, region.start, region.end, region.paths)
    for path, target, mode, mtime_ns in region.links:
        yield export.Symlink(path, target, mode, mtime_ns)


class _Sources(NamedTuple):
    """Where each layout's memory files come from (``_memory_sources``)."""

    reuser: archive_map.Reuser
    rows: Mapping[str, Iterable[tuple[Any, ...]]]  # per memories folder, in path order
    contents: dict[str, bytes] | None  # None: each row holds its contents, last
    consistent: Callable[[], bool]


def _memory_sources(
    workspace: Workspace,
    served: list[ServedLayout],
    rows: dict[str, list[FileRow]],
    previous: download_cache.Previous | None,
) -> _Sources:
    """Where each layout's memory files come from: the rows the key was made of, with
    the contents of those that changed since ``previous`` fetched by their blob (the
    rest are copied from it); or, with no previous archive or too much changed, read
    with their contents as an export reads them, and checked against those rows
    (``consistent`` False: the workspace changed meanwhile; the archive is not the
    key's)."""
    if previous is not None:
        every = itertools.chain.from_iterable(rows.values())
        contents = snapshot_members.contents_beside(every, previous.map)
        if contents is not None:
            reuser = archive_map.Reuser(previous.map, previous.fd)
            return _Sources(reuser, rows, contents, lambda: True)
    same = [True]
    folders = _memory_folders(workspace)
    sources = {
        layout.layout.memories_dir: _checked(
            file_rows(_layout_files(workspace, layout, folders)),
            rows[layout.layout.memories_dir],
            same,
        )
        for layout in served
    }
    return _Sources(archive_map.Reuser(), sources, None, lambda: same[0])


def _checked(
    found: Iterator[tuple[Any, ...]], expected: list[FileRow], same: list[bool]
) -> Iterator[tuple[Any, ...]]:
    """``found`` as it comes; ``same[0]`` False unless it is ``expected`` row for row
    (path, kind, mode, mtime_ns, blob id)."""
    expecting = iter(expected)
    for row in found:
        if tuple(row[:5]) != next(expecting, (None,))[:5]:
            same[0] = False
        yield row
    if next(expecting, None) is not None:
        same[0] = False


def _inside(path: str, folders: list[str]) -> bool:
    return any(path == f or path.startswith(f + "/") for f in folders)


def _own_members(path: Path, memory_dirs: list[str], seen: set[str]) -> Iterator[export.Member]:
    """The upload's members outside the memory layouts, as it sent them."""
    for item in tree.read_archive(path, default_limits(), links=True):
        if isinstance(item, tree.Problem) or _inside(item.path, memory_dirs):
            continue  # problems were refused when it was uploaded
        seen.add(item.path)
        if isinstance(item, tree.Link):
            yield export.Symlink(item.path, item.target, item.mode, item.mtime_ns)
        else:
            yield item


def _indexed_members(
    path: Path,
    index: list[tuple[Any, ...]],
    memory_dirs: list[str],
    seen: set[str],
) -> Iterator[export.Member]:
    """``_own_members``, copied as they are (headers included) by the offsets of the
    upload's member index."""
    prefixes = tuple(f + "/" for f in memory_dirs)
    folders = set(memory_dirs)
    rows = [row for row in index if not (row[0].startswith(prefixes) or row[0] in folders)]
    with path.open("rb") as fh:
        for item in tree.copy_indexed(fh, rows):
            if isinstance(item, tree.Blocks):
                seen.update(item.paths)
                yield item
            else:
                seen.add(item.path)
                yield export.Symlink(item.path, item.target, item.mode, item.mtime_ns)


def _memory_folders(workspace: Workspace) -> list[str]:
    return list(workspace.layouts.values_list("memories_dir", flat=True))


def _layout_files(
    workspace: Workspace, layout: ServedLayout, folders: list[str]
) -> QuerySet[WorkspaceFile]:
    """The workspace's files a layout's memories folder serves besides its documents and
    skills: rollout summaries, raw memories from every sandbox, ``raw_memories.md``."""
    folder = layout.layout.memories_dir
    curated = [f"{folder}/{name}" for name in DOCUMENT_FILES.values()]
    files = (
        WorkspaceFile.objects.present()
        .filter(workspace=workspace, path__startswith=f"{folder}/")
        .filter(Q(kind=WorkspaceFile.Kind.DIRECTORY) | Q(blob__isnull=False))
        .exclude(path__startswith=f"{folder}/skills/")
        .exclude(path__in=[*curated, *layout.files])
    )
    # A layout nested in this folder (memories/engineering in memories) serves its
    # own files: its imported MEMORY.md or skills, unreviewed maybe, never come
    # through the outer layout's folder.
    for nested in folders:
        if nested.startswith(f"{folder}/"):
            files = files.exclude(path__startswith=f"{nested}/")
    return files


def _memory_members(
    served: list[ServedLayout],
    seen: set[str],
    sources: Mapping[str, Iterable[tuple[Any, ...]]],
    contents: dict[str, bytes] | None,
) -> Iterator[archive_map.Keyed]:
    """Each layout's memories folder: the workspace's files (rollout summaries, raw
    memories from every sandbox) from ``sources`` (path, kind, mode, mtime_ns, blob id,
    then the contents, or with ``contents`` their size: the contents are there, and a
    file not there is one the previous archive holds), with the served documents and
    skills in place of theirs, as rows with what settles their bytes."""
    now_ns = time.time_ns()
    directory = WorkspaceFile.Kind.DIRECTORY
    for layout in served:
        folder = layout.layout.memories_dir
        yield from _keyed(made_up_parents(folder, seen, now_ns))
        for path, kind, mode, mtime_ns, blob_id, last in sources[folder]:
            if path in seen:
                continue
            parent = path.rpartition("/")[0]
            if parent not in seen:
                yield from _keyed(made_up_parents(parent, seen, now_ns))
            seen.add(path)
            if kind == directory:
                yield (path, None, mode, mtime_ns, "")
                continue
            data = last if contents is None else contents.get(blob_id)
            yield (
                path,
                data if data is None or type(data) is bytes else bytes(data),
                mode,
                mtime_ns,
                blob_id,
            )
        for path, data in sorted(layout.files.items()):
            if path not in seen:
                yield from _keyed(made_up_parents(path.rpartition("/")[0], seen, now_ns))
                seen.add(path)
                yield (path, data, 0o644, now_ns, hashlib.sha256(data).hexdigest())


def _keyed(directories: Iterator[export.Row]) -> Iterator[archive_map.Keyed]:
    for path, _, mode, mtime_ns in directories:
        yield (path, None, mode, mtime_ns, "")
