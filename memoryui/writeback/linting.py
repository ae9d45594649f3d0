"""Lint of the files a write-back plans (``generation.lint``), its results kept in the
database by content: scanned once, whichever process meets a content first; ahead of
time when a version is saved (``lint_ahead``) or a proposal made (``lint_proposal``, which
the review page reads too); kept when a refused write-back rolls back its transaction
(``lint_kept_when_refused``)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict
from functools import lru_cache
from typing import Any

from generation import lint
from generation.kinds import FileKind
from generation.lint import LINT_VERSION, Finding, FindingKind, lint_file
from generation.tree import LayoutDirs

from .. import skills
from ..models import Blob, LintResult, MemoryVersion, Proposal, SkillFileVersion, Workspace
from .files import DOCUMENT_FILES, PlannedFile, Refused, layout_dirs, skill_path_problem


def lint_planned(files: list[PlannedFile], dirs: list[LayoutDirs]) -> list[Finding]:
    """``generation.lint.lint_file`` for each file, its results kept in the database
    (``LintResult``): a content is scanned once, whichever process (web, worker, command)
    meets it first; a large MEMORY.md takes a second to lint."""
    keys = {f.path: lint_key(f.path, f.sha256, dirs) for f in files if f.data is not None}
    known = dict(
        LintResult.objects.filter(key__in=set(keys.values())).values_list("key", "findings")
    )
    findings: list[Finding] = []
    fresh: list[LintResult] = []
    for f in files:
        if f.data is None:
            continue  # a deletion: nothing to lint
        key = keys[f.path]
        if key in known:
            findings.extend(_finding_of(row) for row in known[key])
            continue
        found = lint_file(f.path, f.data, dirs)
        known[key] = [asdict(finding) for finding in found]
        fresh.append(LintResult(key=key, findings=known[key]))
        findings.extend(found)
    # ignore_conflicts: another process may have scanned the same content meanwhile.
    LintResult.objects.bulk_create(fresh, ignore_conflicts=True)
    kept = _KEPT_WHEN_REFUSED.get()
    if kept is not None:
        kept.extend(fresh)
    return findings


# Lint results found by a write-back that is refused (its transaction rolled back).
_KEPT_WHEN_REFUSED: ContextVar[list[LintResult] | None] = ContextVar(
    "memoryuilint_kept_when_refused", default=None
)


@contextmanager
def lint_kept_when_refused() -> Iterator[None]:
    """A write-back refused for its findings rolls back its transaction, lint results
    included: saved again here, so that the next attempt, in any process, does not scan
    the same content again."""
    kept: list[LintResult] = []
    token = _KEPT_WHEN_REFUSED.set(kept)
    try:
        yield
    except Refused:
        LintResult.objects.bulk_create(kept, ignore_conflicts=True)
        raise
    finally:
        _KEPT_WHEN_REFUSED.reset(token)


def lint_ahead(version: MemoryVersion | SkillFileVersion) -> None:
    """Scan a new version's content now, while nobody waits on it (a worker runs this
    once the version is saved): ``lint_planned`` keeps the result by content, so the
    write-back page, ``manage.py writeback`` and an export of that version find it
    scanned instead of scanning a large ``MEMORY.md`` while a person waits."""
    layout = version.layout
    if version.blob is None:
        return  # a deleted skill file: nothing to lint
    if isinstance(version, MemoryVersion):
        name = DOCUMENT_FILES[MemoryVersion.Document(version.document)]
        kind = _document_kind(name)
    elif skill_path_problem(version.path):
        return  # never written back, so never linted for it
    else:
        name, kind = version.path, FileKind.SKILL
    data = bytes(version.blob.data)
    planned = PlannedFile(f"{layout.memories_dir}/{name}", data, "", None, kind)
    lint_planned([planned], layout_dirs(layout.workspace))


def lint_proposal(proposal: Proposal) -> list[Finding]:
    """What the write-back's lint will say of a proposal's two documents as proposed:
    kept in this process, else in the database (a worker scans a new proposal's texts
    ahead of its review, ``memoryui.tasks.lint_proposal``), else scanned now and kept
    in both. The first view of a 100,000-rollout review in a new process scanned its
    27 MB ``MEMORY.md`` for 29 s (bench/README.md)."""
    layout = proposal.layout
    dirs = layout_dirs(layout.workspace)
    by_path: dict[str, list[Finding] | None] = {}  # in the documents' order
    unlinted: dict[str, tuple[str, PlannedFile]] = {}  # path: (sha256, the file)
    for document, text in (
        (MemoryVersion.Document.MEMORY_MD, proposal.memory_md),
        (MemoryVersion.Document.MEMORY_SUMMARY, proposal.memory_summary),
    ):
        name = DOCUMENT_FILES[document]
        path = f"{layout.memories_dir}/{name}"
        sha256 = _text_sha(text)
        by_path[path] = lint.cached_findings(path, sha256, dirs)
        if by_path[path] is None:
            planned = PlannedFile(path, text.encode(), "", None, _document_kind(name))
            unlinted[path] = (sha256, planned)
    if unlinted:  # one query for both, whichever process scanned them
        found = lint_planned([planned for _, planned in unlinted.values()], dirs)
        for path, (sha256, _) in unlinted.items():
            by_path[path] = [f for f in found if f.path == path]
            lint.remember(path, sha256, dirs, by_path[path] or [])
    return [finding for found_in in by_path.values() for finding in found_in or []]


@lru_cache(maxsize=16)
def _text_sha(text: str) -> str:
    """A proposed text's sha256, kept: the texts the caches hand out (``documents``) are
    the same objects each time, so a page after the first hashes nothing (the review's
    ``entry_checks.sha`` is not loaded by a write-back)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _document_kind(name: str) -> FileKind:
    return FileKind.MEMORY_INDEX if name == "MEMORY.md" else FileKind.MEMORY_SUMMARY


def lint_latest(workspace: Workspace) -> None:
    """``lint_ahead`` for the latest version of each document and skill file of every
    layout (what an import just recorded, say). A content linted before costs nothing
    but its key: the versions' blobs (a large ``MEMORY.md`` each) are read only for
    contents never linted, and the layouts once (a merge queues this after each
    sandbox's persist)."""
    dirs = layout_dirs(workspace)
    latest: dict[str, tuple[str, str, FileKind]] = {}  # lint key -> (path, blob, kind)
    for layout in workspace.layouts.present().order_by("memories_dir"):
        for document, name in DOCUMENT_FILES.items():
            blob_id = (
                MemoryVersion.objects.filter(layout=layout, document=document)
                .order_by("-number")
                .values_list("blob_id", flat=True)
                .first()
            )
            if blob_id is not None:
                path = f"{layout.memories_dir}/{name}"
                latest[lint_key(path, blob_id, dirs)] = (path, blob_id, _document_kind(name))
        for rel, blob_id in skills.current_versions(layout).values_list("path", "blob_id"):
            if blob_id is not None and not skill_path_problem(rel):
                path = f"{layout.memories_dir}/{rel}"
                latest[lint_key(path, blob_id, dirs)] = (path, blob_id, FileKind.SKILL)
    known = set(LintResult.objects.filter(key__in=list(latest)).values_list("key", flat=True))
    unlinted = {key: file for key, file in latest.items() if key not in known}
    contents = dict(
        Blob.objects.filter(pk__in={blob_id for _, blob_id, _ in unlinted.values()}).values_list(
            "pk", "data"
        )
    )
    planned = [
        PlannedFile(path, bytes(contents[blob_id]), "", None, kind)
        for path, blob_id, kind in unlinted.values()
        if blob_id in contents
    ]
    if planned:
        lint_planned(planned, dirs)


def lint_key(path: str, sha256: str | None, dirs: list[LayoutDirs]) -> str:
    return hashlib.sha256(f"{LINT_VERSION}\0{path}\0{sha256}\0{dirs}".encode()).hexdigest()


def _finding_of(row: dict[str, Any]) -> Finding:
    return Finding(**{**row, "kind": FindingKind(row["kind"])})
