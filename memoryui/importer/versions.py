"""The versions an import records: a changed ``MEMORY.md`` / ``memory_summary.md`` becomes
a new version attributed to the agent, skill files found new, changed or gone get one
(``memoryui.skills``), and the agent versions awaiting review become the proposal of the
sandbox that wrote them (``memoryui.agent_proposals``)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from generation.kinds import FileKind

from .. import documents, skills, versioning
from ..models import ImportRun, Layout, MemoryVersion, UploadedSnapshot, Workspace, WorkspaceFile
from .reading import Item, StoredFile, file_name


class VersionRecorder:
    """Records the versions of one import (``merge``: the snapshot id of an upload
    merged, "" for an import from disk) and keeps the agent versions it recorded for
    ``propose``."""

    def __init__(self, workspace: Workspace, now: datetime, merge: str = "") -> None:
        self.workspace = workspace
        self.now = now
        self.merge = merge
        # Agent versions awaiting review this import recorded, by layout (``propose``).
        self.agent_versions: dict[int, tuple[Layout, list[MemoryVersion]]] = {}
        # A merge of an upload older than one of the same sandbox merged already.
        self.fill_only = False
        # The names of the rollouts an import stored, per layout (``note_stored``).
        self._stored_rollouts: dict[int, list[str]] = {}

    def record_documents(self, items: list[Item], layouts: dict[str, Layout]) -> list[str]:
        """A version of each memory document in ``items`` whose text its layout's latest
        version does not have; the paths of those recorded."""
        documents = {
            FileKind.MEMORY_INDEX: MemoryVersion.Document.MEMORY_MD,
            FileKind.MEMORY_SUMMARY: MemoryVersion.Document.MEMORY_SUMMARY,
        }
        created = []
        for item in items:
            document = documents.get(FileKind(item.kind))
            if document is None or item.memories_dir is None or item.digest is None:
                continue
            layout = layouts[item.memories_dir]
            latest = (
                MemoryVersion.objects.filter(layout=layout, document=document)
                .order_by("-number")
                .first()
            )
            if latest is not None and latest.blob_id == item.digest:
                continue
            if self.merge and layout.versions.filter(document=document, blob_id=item.digest):
                continue  # a text this layout had (a sandbox sending back what it got)
            version = MemoryVersion.objects.create(
                layout=layout,
                document=document,
                number=(latest.number + 1) if latest else 1,
                blob_id=item.digest,
                author_kind=MemoryVersion.Author.AGENT,
                reason=self._reason(latest is None),
                created_at=self.now,
                needs_review=latest is not None or bool(self.merge),
            )
            created.append(item.path)
            versioning.compare_ahead(version, item.size)
            if version.needs_review:
                self.agent_versions.setdefault(layout.pk, (layout, []))[1].append(version)
        return created

    def note_stored(self, items: Iterable[Item]) -> None:
        """The rollouts among ``items``, a chunk an import (not a merge) just stored:
        its proposals' inputs. Kept by name, a chunk's names in one string per layout
        (the import lets go of the items; 100,000 names apart held 9 MB)."""
        for layout_id, names in _rollouts_by_layout(items).items():
            self._stored_rollouts.setdefault(layout_id, []).append("\n".join(names))

    def propose(self, run: ImportRun, items: dict[str, Item], touched: list[Item]) -> None:
        """Each layout's agent versions awaiting review become (or update) the proposal
        of the sandbox that wrote them (``agent_proposals``); its inputs are the
        rollouts of the upload (of an import: those it stored, ``note_stored``).
        ``items``: every file a merge found; ``touched``: those it found new or
        changed."""
        # What an older upload forgets or changes of its skills is stale: the sandbox's
        # later upload, merged already, told its current ones.
        forgotten = {} if self.fill_only else self._forgotten(items)
        skill_changes = {} if self.fill_only else self._skill_changes(items)
        clashes = self._record_own_files(touched)
        if not self.agent_versions and not forgotten and not skill_changes:
            return
        from .. import agent_proposals  # noqa: PLC0415 (deferred: curation loads the review machinery)

        rollouts = (
            _rollouts_by_layout(items.values())
            if self.merge
            else {
                pk: [name for part in parts for name in part.split("\n")]
                for pk, parts in self._stored_rollouts.items()
            }
        )
        changed = {*self.agent_versions, *forgotten, *skill_changes}
        for layout in Layout.objects.filter(pk__in=changed):
            agent_proposals.record(
                layout,
                self.agent_versions.get(layout.pk, (layout, []))[1],
                snapshot_id=self.merge,
                import_run=run,
                inputs=sorted(rollouts.get(layout.pk, [])),
                forgotten=forgotten.get(layout.pk, []),
                skill_changes=skill_changes.get(layout.pk, {}),
                clashes=clashes.get(layout.pk, []),
            )

    def _record_own_files(self, touched: list[Item]) -> dict[int, list[dict[str, Any]]]:
        """The raw memories and rollout summaries this upload brought new or changed
        become the sandbox's own (``UploadedSnapshot.own_files``); another sandbox that
        owns one of them with other bytes keeps its own in its downloads (its
        ``kept_files``). Per layout, those clashes, each naming both sandboxes."""
        if not self.merge:
            return {}
        kinds = (FileKind.RAW_MEMORY, FileKind.ROLLOUT_SUMMARY)
        mine = {i.path: i for i in touched if i.kind in kinds and i.digest}
        if not mine:
            return {}
        snapshots = UploadedSnapshot.objects.filter(workspace=self.workspace)
        others = snapshots.exclude(snapshot_id=self.merge)
        paths = sorted(mine)
        clashes: dict[int, list[dict[str, Any]]] = {}
        kept: dict[int, dict[str, str]] = {}
        for start in range(0, len(paths), 500):
            chunk = paths[start : start + 500]
            for pk, other, owned in (
                others.filter(own_files__has_any_keys=chunk)
                .order_by("snapshot_id")
                .values_list("pk", "snapshot_id", "own_files")
            ):
                for path in chunk:
                    theirs = owned.get(path)
                    if theirs not in (None, mine[path].digest):
                        kept.setdefault(pk, {})[path] = theirs
                        clashes.setdefault(mine[path].layout_id or 0, []).append(
                            {"path": path, "sandboxes": [other, self.merge]}
                        )
        for snapshot in snapshots.filter(pk__in=kept).only("kept_files"):
            UploadedSnapshot.objects.filter(pk=snapshot.pk).update(
                kept_files={**snapshot.kept_files, **kept[snapshot.pk]}
            )
        own, held = snapshots.filter(snapshot_id=self.merge).values_list(
            "own_files", "kept_files"
        ).first() or ({}, {})
        snapshots.filter(snapshot_id=self.merge).update(
            own_files={**own, **{p: i.digest for p, i in mine.items()}},
            # What it uploads again is the workspace's now: nothing to keep apart.
            kept_files={p: d for p, d in held.items() if p not in mine},
        )
        return clashes

    def _served(self) -> dict[str, Any]:
        """What the uploading sandbox's last download served it, per layout pk."""
        return (
            UploadedSnapshot.objects.filter(workspace=self.workspace, snapshot_id=self.merge)
            .values_list("served", flat=True)
            .first()
        ) or {}

    def _skill_changes(self, items: dict[str, Item]) -> dict[int, dict[str, dict[str, Any]]]:
        """Per layout the upload holds files of, its skill files that differ from what
        the sandbox was served (its last download's; without one, what is served now),
        and those it was served and lacks: {"skills/<name>/<file>": {"old": text or
        None, "new": text or None}}, the agent's skill changes for its proposal."""
        if not self.merge:
            return {}
        served = self._served()
        uploaded: dict[int, dict[str, str]] = {}
        held = {item.layout_id for item in items.values() if item.layout_id is not None}
        for item in items.values():
            if item.kind == FileKind.SKILL and item.memories_dir and item.digest:
                rel = item.path.removeprefix(item.memories_dir + "/")
                uploaded.setdefault(item.layout_id or 0, {})[rel] = item.digest
        out: dict[int, dict[str, dict[str, Any]]] = {}
        for layout in Layout.objects.filter(pk__in=held):
            got = served.get(str(layout.pk))
            base = (got or {}).get("skills") if isinstance(got, dict) else None
            if not isinstance(base, dict):  # never downloaded: what it would get now
                base = {
                    rel: hashlib.sha256(data).hexdigest()
                    for rel, data in skills.approved_files(layout).items()
                }
                lacking: list[str] = []
            else:
                lacking = [rel for rel in base if rel not in uploaded.get(layout.pk, {})]
            changes = {
                rel: {"old": _text(base.get(rel)), "new": _text(digest)}
                for rel, digest in uploaded.get(layout.pk, {}).items()
                if base.get(rel) != digest and skills.skill_of(rel)
            }
            changes.update({rel: {"old": _text(base[rel]), "new": None} for rel in lacking})
            if changes:
                out[layout.pk] = changes
        return out

    def _forgotten(self, items: dict[str, Item]) -> dict[int, list[str]]:
        """Per layout the upload holds files of, the raw memories and rollout summaries
        the sandbox's last download served it that its upload lacks and the workspace
        still has: the agent pruned them (the SDK's consolidation does)."""
        if not self.merge:
            return {}
        served = self._served()
        # Only layouts the upload holds files of: a sandbox without a layout's folder
        # forgot nothing of it.
        held = {item.layout_id for item in items.values() if item.layout_id is not None}
        lacking = {
            int(pk): [p for p in (got.get("files") or []) if p not in items]
            for pk, got in served.items()
            if isinstance(got, dict) and str(pk).isdigit() and int(pk) in held
        }
        lacking = {pk: paths for pk, paths in lacking.items() if paths}
        if not lacking:
            return {}
        present = set(
            WorkspaceFile.objects.present()
            .filter(workspace=self.workspace, path__in=[p for ps in lacking.values() for p in ps])
            .values_list("path", flat=True)
        )
        found = {pk: sorted(p for p in paths if p in present) for pk, paths in lacking.items()}
        return {pk: paths for pk, paths in found.items() if paths}

    def _reason(self, first: bool) -> str:
        if self.merge:
            return f"uploaded by sandbox {self.merge}"
        return "imported from disk" if first else "changed on disk"

    def record_skills(
        self,
        items: list[Item],
        missing: list[int],
        layouts: dict[str, Layout],
        stored: Iterable[tuple[str, StoredFile]],
    ) -> None:
        """Skill files found new, changed or gone get a version (``memoryui.skills``).
        ``stored``: the workspace's file rows before the import, by path."""
        found: dict[int, list[tuple[str, str | None]]] = {}
        by_id = {layout.pk: layout.memories_dir for layout in layouts.values()}
        for item in items:
            if item.kind == FileKind.SKILL and item.memories_dir is not None:
                found.setdefault(item.layout_id or 0, []).append(
                    (item.path.removeprefix(item.memories_dir + "/"), item.digest)
                )
        gone = set(missing)
        for path, old in stored:
            if old.file_id in gone and old.kind == FileKind.SKILL and old.layout_id in by_id:
                rel = path.removeprefix(by_id[old.layout_id] + "/")
                found.setdefault(old.layout_id, []).append((rel, None))
        if found:
            skills.record_import(found, now=self.now, uploaded_by=self.merge)


def _rollouts_by_layout(items: Iterable[Item]) -> dict[int, list[str]]:
    """The ids of the rollouts among ``items``, per layout (a proposal's inputs)."""
    names: dict[int, list[str]] = {}
    for item in items:
        if item.kind == FileKind.ROLLOUT and item.layout_id is not None:
            names.setdefault(item.layout_id, []).append(file_name(item.path).removesuffix(".jsonl"))
    return names


def _text(digest: str | None) -> str | None:
    return None if digest is None else documents.text(digest)
