"""A layout's write-back journal (``generation.journal``): where it lives, the audit
event a write-back records with it, and a write-back that died finished or undone from
it (``recover_layout``), by the publisher before the layout's next write-back and by
``memoryui.recovery`` when a worker or the web server starts.

A write-back is finished when its journal says forward, every file is still old or new,
and the current documents are still those it was writing; otherwise it is undone. The
database and the audit log follow (the event says ``completed_by_recovery``), then the
journal goes. A journal is used only for the layout that wrote it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from generation import journal
from generation.export import ExportError

from .. import importer, skills
from ..models import AuditEvent, Layout, MemoryVersion
from .files import DOCUMENT_FILES, WRITEBACK_ACTION, WRITEBACK_FAILED_ACTION, WritebackError

# --- the journal's place ------------------------------------------------------------------


def journal_base() -> Path:
    """Where write-back and export journals live: ``var/journal`` under
    ``MEMORYUI_VAR_DIR`` (a ``MEMORYUI_JOURNAL_DIR`` setting overrides it, as the tests
    do), outside every workspace: the SDK never lists them."""
    default = Path(getattr(settings, "VAR_DIR", Path(settings.BASE_DIR) / "var")) / "journal"
    return Path(getattr(settings, "MEMORYUI_JOURNAL_DIR", default))


def journal_directory(layout: Layout, root: Path) -> Path:
    """The layout's journal directory, named by its workspace directory too: a journal
    is never found by a layout of another workspace."""
    key = hashlib.sha256(f"{root}\0{layout.memories_dir}".encode()).hexdigest()[:16]
    return journal_base() / "writeback" / f"layout-{layout.pk}-{key}"


def record_event(
    layout: Layout,
    action: str,
    user: Any,
    meta: dict[str, Any],
    record: journal.Journal | None,
    **detail: Any,
) -> AuditEvent:
    failed = action == WRITEBACK_FAILED_ACTION
    body: dict[str, Any] = {
        "files": [],
        "already_on_disk": meta["already_on_disk"],
        "overwritten": meta["overwritten"],
        "allowed_findings": meta["allowed_findings"],
        "proposal": None if failed else meta["proposal"],
        "journal": record.id if record else None,
        **detail,
    }
    if failed:
        body["attempted_proposal"] = meta["proposal"]
    return AuditEvent.record(
        layout.workspace,
        action,
        user=user,
        actor=meta["actor"],
        layout=layout,
        target=layout.memories_dir,
        **body,
    )


# --- an interrupted write-back ---------------------------------------------------------


@dataclass
class Recovery:
    directory: Path
    layout: Layout | None
    outcome: str  # "finished", "undone", "already committed", or an error
    event: AuditEvent | None = None


def journal_layout(record: journal.Journal, directory: Path) -> Layout:
    """The layout a journal belongs to; WritebackError when it is not this database's
    (another workspace, another root, another layout)."""
    meta = record.meta
    layout = (
        Layout.objects.select_related("workspace")
        .filter(pk=meta.get("layout", 0), workspace_id=meta.get("workspace", 0))
        .first()
    )
    if (
        layout is None
        or layout.memories_dir != meta.get("memories_dir")
        or layout.workspace.source_path != record.root
        or journal_directory(layout, Path(record.root)) != directory
        or record.allowed_dirs != [layout.memories_dir]
    ):
        raise WritebackError(
            f"the journal {directory} belongs to no layout of this database "
            f"({meta.get('workspace_name')}: {meta.get('memories_dir')} in {record.root}); "
            "not used"
        )
    return layout


def recover_layout(layout: Layout, directory: Path) -> Recovery:
    """Bring an interrupted write-back of ``layout`` (its journal in ``directory``; the
    caller holds the lock) to one state: finished when the journal says forward and
    every file is old or new and the curated documents are still those it wrote; else
    undone. The database and the audit log follow, then the journal goes."""
    record = journal.load(directory)
    if record is None:
        return Recovery(directory, layout, "nothing to recover")
    journal_layout(record, directory)
    root = Path(record.root)
    with transaction.atomic():
        Layout.objects.select_for_update().filter(pk=layout.pk).first()
        if _settled(layout, record):  # died after its commit: the disk is as recorded
            journal.remove_temp_files(record)
            outcome, event = "already committed", None
        else:
            outcome, event = _complete(layout, record, root)
    journal.finish(directory)
    return Recovery(directory, layout, outcome, event)


def _complete(layout: Layout, record: journal.Journal, root: Path) -> tuple[str, AuditEvent]:
    user = _user(record.meta.get("user"))
    reason = ""
    if record.direction == journal.FORWARD:
        reason = _outdated(layout, record)
        if not reason:
            try:
                journal.roll_forward(record)
            except (journal.JournalError, ExportError, OSError) as exc:
                reason = str(exc)
        if not reason:
            importer.import_workspace(root, layout.workspace.name, user=user)
            files = [
                {
                    "path": f.path,
                    "sha256": f.new_sha256,
                    "previous_sha256": f.old_sha256,
                    "size": f.new[1] if f.new else 0,
                    **({"deleted": True} if f.new_sha256 is None else {}),
                }
                for f in record.files
            ]
            event = record_event(
                layout,
                WRITEBACK_ACTION,
                user,
                record.meta,
                record,
                files=files,
                completed_by_recovery=True,
            )
            return "finished", event
        journal.turn_back(record)
    restored, kept = journal.roll_back(record)
    event = record_event(
        layout,
        WRITEBACK_FAILED_ACTION,
        user,
        record.meta,
        record,
        error=f"interrupted; undone by recovery: {reason or 'the write-back failed'}",
        rolled_back=True,
        restored=restored,
        kept_as_changed_on_disk=kept,
        completed_by_recovery=True,
    )
    return "undone", event


def _settled(layout: Layout, record: journal.Journal) -> bool:
    """Whether the journal's write-back committed: written, or failed and undone."""
    events = AuditEvent.objects.filter(
        layout=layout, action__in=[WRITEBACK_ACTION, WRITEBACK_FAILED_ACTION]
    ).filter(detail__journal=record.id)
    return any(
        action == WRITEBACK_ACTION or detail.get("rolled_back")
        for action, detail in events.values_list("action", "detail")
    )


def _outdated(layout: Layout, record: journal.Journal) -> str:
    """Why finishing the journal would write memory that is no longer the current one."""
    for document, name in DOCUMENT_FILES.items():
        mine = next((f for f in record.files if f.path == f"{layout.memories_dir}/{name}"), None)
        if mine is None:
            continue
        latest = (
            MemoryVersion.objects.filter(layout=layout, document=document)
            .order_by("-number")
            .values_list("blob_id", flat=True)
            .first()
        )
        if latest != mine.new_sha256:
            return f"{name} has a newer version than the one this write-back wrote"
    prefix = f"{layout.memories_dir}/"
    mine_skills = {
        f.path.removeprefix(prefix): f.new_sha256
        for f in record.files
        if skills.skill_of(f.path.removeprefix(prefix))
    }
    if mine_skills:
        current = dict(
            skills.current_versions(layout)
            .filter(path__in=list(mine_skills))
            .values_list("path", "blob_id")
        )
        for rel, sha256 in sorted(mine_skills.items()):
            if current.get(rel) != sha256:
                return f"{rel} has a newer version than the one this write-back wrote"
    return ""


def _user(pk: Any) -> Any:
    return get_user_model().objects.filter(pk=pk).first() if pk else None
