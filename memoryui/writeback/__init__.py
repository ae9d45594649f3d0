"""Curated memory back into the workspace: write-back into a layout's directory on the
server, and the curated files that a snapshot export lays over the imported tree.

A layout's *plan* is what memoryui holds that the workspace should have: the current
versions of ``MEMORY.md`` and ``memory_summary.md`` and, for the latest approved
proposal not yet written back, ``phase_two_selection.json`` (with a fresh
``updated_at``, as the SDK writes it after a successful phase two), ``raw_memories.md``
and the raw memories and rollout summaries of the proposal's run; and the current
version of every skill file (``memoryui.skills``), a deleted one to be deleted. A file
is *changed* when its planned bytes differ from the bytes imported (a deleted skill
file: when it was on disk at the last import).

Write-back writes (or deletes) the changed files all or nothing, only inside the layout's memories
dir whatever a name says: a journal (``generation.journal``) holds their old and new
bytes before the first rename, and a write-back that died is finished or undone
(``recover_layout``: before the next write-back of the layout, and by
``memoryui.recovery`` when a worker or the web server starts). A file that changed on
disk since it was imported is a conflict: it is shown as a diff and not overwritten
unless an admin names it. Lint findings block until an admin allows each one. Every
write-back is in the audit log with its files and hashes, and the database is brought to
the written bytes, so that a re-import finds nothing changed.

Its parts, each using only those named before it: ``files`` (the plan and its result as data,
the errors), ``linting`` (findings kept by content), ``planning`` (the plan, then the
disk), ``journals`` (the journal's place, the audit event, an interrupted write-back
finished or undone) and ``publishing`` (``write_back`` itself).
"""

from __future__ import annotations

from .files import (
    DIFF_LIMIT_BYTES,
    DOCUMENT_FILES,
    WRITEBACK_ACTION,
    WRITEBACK_FAILED_ACTION,
    Conflict,
    Plan,
    PlannedFile,
    Refusal,
    Refused,
    WritebackError,
    WritebackResult,
    layout_dirs,
    skill_path_problem,
)
from .journals import (
    Recovery,
    journal_base,
    journal_directory,
    journal_layout,
    record_event,
    recover_layout,
)
from .linting import (
    lint_ahead,
    lint_kept_when_refused,
    lint_key,
    lint_latest,
    lint_planned,
    lint_proposal,
)
from .planning import (
    blob_bytes,
    check_disk,
    files_pending_write_back,
    pending_file_text,
    plan_layout,
    proposal_memory_files,
    proposal_to_write,
    read_disk,
    workspace_root,
)
from .publishing import (
    record_written,
    write_back,
)

__all__ = [
    "Conflict",
    "DIFF_LIMIT_BYTES",
    "DOCUMENT_FILES",
    "Plan",
    "PlannedFile",
    "Recovery",
    "Refusal",
    "Refused",
    "WRITEBACK_ACTION",
    "WRITEBACK_FAILED_ACTION",
    "WritebackError",
    "WritebackResult",
    "blob_bytes",
    "check_disk",
    "files_pending_write_back",
    "journal_base",
    "journal_directory",
    "journal_layout",
    "layout_dirs",
    "lint_ahead",
    "lint_kept_when_refused",
    "lint_key",
    "lint_latest",
    "lint_proposal",
    "lint_planned",
    "pending_file_text",
    "plan_layout",
    "proposal_memory_files",
    "proposal_to_write",
    "read_disk",
    "record_event",
    "record_written",
    "recover_layout",
    "skill_path_problem",
    "workspace_root",
    "write_back",
]
