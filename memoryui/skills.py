"""Skill files as curated, versioned files: ``<memories_dir>/skills/<name>/...``.

Every file under a layout's ``skills/<name>/`` has versions (``SkillFileVersion``): the
import records the bytes it found (author: the agent), people edit, add, delete and
restore files, and approving a proposal turns the skill changes people accepted into
versions. The latest version of each path is the curated file; a version without a blob
says the file is deleted. Write-back and export write the curated files (and delete the
deleted ones) like the other curated files (``memoryui.writeback``).

Saves are serialised per layout (a row lock on the layout) and carry the version number
they were based on: a save based on anything but the latest version is refused
(``StaleSkill``), as for ``MEMORY.md`` entries. Every change is an audit event.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import OuterRef, QuerySet, Subquery

from generation import tree
from generation.lint import lint_file
from generation.tree import LayoutDirs

from . import proposal_lock, versioning
from .models import AuditEvent, Layout, Proposal, SkillFileVersion, WorkspaceFile

Author = SkillFileVersion.Author

# skills/<name>/<file> or skills/<name>/<dir>/<file>: each part starts with a letter or
# digit, then letters, digits, '.', '_' or '-'.
_PART = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
NEW_PATH_RE = re.compile(rf"^skills/{_PART}(?:/{_PART}){{1,3}}$")
MAX_PATH_LENGTH = 300
ACCEPT, REJECT = "accept", "reject"


class StaleSkill(Exception):
    """The file changed since the version the change was based on."""

    def __init__(self, latest: SkillFileVersion | None) -> None:
        super().__init__("the skill file changed since you opened it")
        self.latest = latest


def max_bytes() -> int:
    return int(settings.MEMORYUI_MAX_SKILL_FILE_BYTES)


def new_path_problem(rel: str) -> str:
    """Why ``rel`` cannot be the path of a new skill file ("" when it can)."""
    if rel.startswith("/"):
        return (
            "Give a path relative to the memories dir (skills/<name>/<file>), not an absolute one."
        )
    if ".." in rel:
        return "A path may not contain '..'."
    if len(rel) > MAX_PATH_LENGTH:
        return f"The path is {len(rel)} characters; at most {MAX_PATH_LENGTH}."
    if not NEW_PATH_RE.fullmatch(rel):
        return (
            "The path must look like skills/<name>/<file> (at most two folders below the "
            "skill): each part starts with a letter or digit, then letters, digits, "
            "'.', '_' or '-'."
        )
    return ""


def skill_of(rel: str) -> str:
    return tree.skill_name(rel)


# --- reading ---------------------------------------------------------------------------


def current_versions(layout: Layout, *, prefix: str = "") -> QuerySet[SkillFileVersion]:
    """The latest version of each skill file of the layout (deleted ones included), in
    path order; ``prefix``: only paths starting with it. One query."""
    newest = (
        SkillFileVersion.objects.filter(layout=layout, path=OuterRef("path"))
        .order_by("-number")
        .values("number")[:1]
    )
    versions = SkillFileVersion.objects.filter(layout=layout)
    if prefix:
        versions = versions.filter(path__startswith=prefix)
    return versions.filter(number=Subquery(newest)).order_by("path")


def current_files(layout: Layout) -> dict[str, bytes | None]:
    """path -> the curated bytes (None: deleted) of every skill file of the layout."""
    found: dict[str, bytes | None] = {}
    for path, blob_id, data in current_versions(layout).values_list(
        "path", "blob_id", "blob__data"
    ):
        found[path] = bytes(data) if blob_id else None
    return found


def approved_files(layout: Layout) -> dict[str, bytes]:
    """path -> bytes of each skill file at its latest version not awaiting review
    (deleted ones left out): what sandboxes are served, lint aside."""
    found: dict[str, bytes] = {}
    for path, blob_id, data in (
        SkillFileVersion.objects.filter(layout=layout, needs_review=False)
        .order_by("path", "number")
        .values_list("path", "blob_id", "blob__data")
    ):
        if blob_id:
            found[path] = bytes(data)
        else:
            found.pop(path, None)
    return found


def latest(layout: Layout, path: str) -> SkillFileVersion | None:
    return versioning.latest(SkillFileVersion, layout, path=path)


def data_of(version: SkillFileVersion | None) -> bytes | None:
    return versioning.content(version)


def text_of(version: SkillFileVersion | None) -> str:
    data = data_of(version)
    return "" if data is None else data.decode("utf-8", "replace")


def is_text(data: bytes | None) -> bool:
    if data is None:
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return b"\0" not in data


@dataclass
class FrontMatter:
    """A SKILL.md's YAML front matter, read as the flat ``key: value`` lines the SDK's
    prompt asks for (an indented or ``-`` line continues the value before it)."""

    name: str
    description: str
    other: list[tuple[str, str]]
    body: str

    @property
    def present(self) -> bool:
        return bool(self.name or self.description or self.other)


_KEY = re.compile(r"^([A-Za-z0-9_][A-Za-z0-9_.-]*)\s*:\s?(.*)$")


def front_matter(text: str) -> FrontMatter:
    """Split ``---\\n...\\n---`` off the top of ``text``; without it, the whole text is
    the body."""
    lines = text.split("\n")
    if not lines or lines[0].rstrip() != "---":
        return FrontMatter("", "", [], text)
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip() in ("---", "...")), None)
    if end is None:
        return FrontMatter("", "", [], text)
    pairs: list[list[str]] = []
    for line in lines[1:end]:
        match = _KEY.match(line)
        if match and not line[:1].isspace():
            pairs.append([match.group(1), match.group(2).strip()])
        elif line.strip() and pairs:
            pairs[-1][1] = (pairs[-1][1] + " " + line.strip()).strip()
        elif line.strip():
            pairs.append(["", line.strip()])
    values = {k: _unquote(v) for k, v in pairs if k}
    other = [(k or "(no key)", _unquote(v)) for k, v in pairs if k not in ("name", "description")]
    body = "\n".join(lines[end + 1 :]).lstrip("\n")
    return FrontMatter(values.get("name", ""), values.get("description", ""), other, body)


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


# --- changing --------------------------------------------------------------------------


def save(
    layout: Layout,
    path: str,
    data: bytes | None,
    *,
    user: Any,
    based_on: int | None,
    action: str,
    reason: str,
    author_kind: str = Author.PERSON,
) -> SkillFileVersion:
    """Store ``data`` (None: delete the file) as the path's new current version, if
    ``based_on`` is still its latest version number (None: the path had no version).
    ``action``: the audit event's (``skill.edit``, ``skill.add``...)."""
    with transaction.atomic():
        current = versioning.locked_latest(
            SkillFileVersion, layout, based_on, StaleSkill, path=path
        )
        return _create(layout, path, data, current, user, action, reason, author_kind)


def _create(
    layout: Layout,
    path: str,
    data: bytes | None,
    current: SkillFileVersion | None,
    user: Any,
    action: str,
    reason: str,
    author_kind: str,
) -> SkillFileVersion:
    version = versioning.create(
        SkillFileVersion,
        layout,
        current,
        data,
        user=user,
        author_kind=author_kind,
        reason=reason,
        path=path,
    )
    AuditEvent.record(
        layout.workspace,
        action,
        user=user,
        actor="" if getattr(user, "pk", None) else "pipeline",
        layout=layout,
        target=f"{layout.memories_dir}/{path}",
        version=version.number,
        sha256=version.blob_id,
        deleted=data is None,
        reason=reason,
    )
    return version


def restore(
    layout: Layout, path: str, number: int, *, user: Any, based_on: int | None
) -> SkillFileVersion:
    """Make version ``number`` the current one again (as a new version)."""
    old = SkillFileVersion.objects.get(layout=layout, path=path, number=number)
    return save(
        layout,
        path,
        data_of(old),
        user=user,
        based_on=based_on,
        action="skill.restore",
        reason=f"restored version {number}",
    )


# --- proposals -------------------------------------------------------------------------


def decide(proposal: Proposal, path: str, decision: str, *, user: Any) -> None:
    """Accept or reject one skill file change of a pending proposal. Raises
    ``DecisionRefused`` when the proposal was decided meanwhile or another reviewer
    holds it."""
    layout = proposal.layout
    with proposal_lock.deciding(proposal, user):
        rows = Proposal.objects.filter(pk=proposal.pk)
        decisions = dict(rows.values_list("skill_decisions", flat=True).get() or {})
        decisions[path] = decision
        rows.update(skill_decisions=decisions)
        proposal.skill_decisions = decisions
        AuditEvent.record(
            layout.workspace,
            f"proposal.skill_{decision}",
            user=user,
            layout=layout,
            target=f"{layout.memories_dir}/{path}",
            proposal=proposal.pk,
        )


def approve_changes(
    proposal: Proposal, *, user: Any, undecided: str = ACCEPT
) -> list[SkillFileVersion]:
    """At approval (inside its transaction, the layout locked): each skill change not
    rejected becomes the file's current version; a rejected one leaves the file as it
    is, and so does an undecided one when the reviewer chose to keep the current text
    for undecided entries (``undecided``). A change equal to the current file adds
    nothing."""
    layout = proposal.layout
    changes, decisions = Proposal.objects.values_list("skill_changes", "skill_decisions").get(
        pk=proposal.pk
    )
    created = []
    for rel, change in sorted((changes or {}).items()):
        if not isinstance(change, dict) or (decisions or {}).get(rel, undecided) == REJECT:
            continue
        if skill_of(rel) == "" or ".." in rel.split("/"):
            continue  # not a file of a skill: never written
        new = change.get("new")
        data = None if new is None else str(new).encode("utf-8")
        current = latest(layout, rel)
        if versioning.unchanged(current, data):
            continue  # (deleting a file memoryui never had among them)
        created.append(
            _create(
                layout,
                rel,
                data,
                current,
                user,
                "skill.approve",
                f"approved proposal #{proposal.pk}",
                Author.PIPELINE,
            )
        )
    return created


def layout_dirs(layout: Layout) -> list[LayoutDirs]:
    """The workspace's layouts, as the lint sees them."""
    found = layout.workspace.layouts.present().values_list("memories_dir", "sessions_dir")
    return [LayoutDirs(memories, sessions) for memories, sessions in found]


def flags(
    layout: Layout, rel: str, text: str | None, dirs: list[LayoutDirs] | None = None
) -> list[str]:
    """What the write-back's lint says of a proposed skill file (secrets, injected
    instructions, paths into another layout): an agent's skill change with a flag is
    quarantined, kept out of an approval unless a reviewer accepts it explicitly.
    ``dirs``: ``layout_dirs(layout)``, read once by a caller with many files."""
    if text is None:
        return []
    dirs = layout_dirs(layout) if dirs is None else dirs
    path = f"{layout.memories_dir}/{rel}"
    return [f.message for f in lint_file(path, text.encode("utf-8"), dirs)]


def settle_agent_changes(
    proposal: Proposal, *, user: Any, undecided: str = ACCEPT, approved: bool = True
) -> list[SkillFileVersion]:
    """An agent's proposal decided (inside its transaction, the layout locked): each of
    its skill changes accepted (explicitly, or left undecided while ``undecided``
    accepts and no flag quarantines it) becomes the file's current version, approved;
    a rejected one (every one, when the proposal is rejected: ``approved`` False) leaves
    the file as sandboxes were served it. The sandbox's own versions of those files
    stop awaiting review either way."""
    layout = proposal.layout
    changes, decisions = Proposal.objects.values_list("skill_changes", "skill_decisions").get(
        pk=proposal.pk
    )
    created = []
    dirs = layout_dirs(layout)
    for rel, change in sorted((changes or {}).items()):
        if not isinstance(change, dict) or skill_of(rel) == "" or ".." in rel.split("/"):
            continue
        new = change.get("new")
        decision = (decisions or {}).get(rel)
        if decision is None:
            decision = REJECT if flags(layout, rel, new, dirs) else undecided
        accepted = approved and decision == ACCEPT
        mine = SkillFileVersion.objects.filter(
            layout=layout,
            path=rel,
            needs_review=True,
            reason=f"uploaded by sandbox {proposal.snapshot_id}",
        )
        before = (
            SkillFileVersion.objects.filter(layout=layout, path=rel, needs_review=False)
            .order_by("-number")
            .first()
        )
        SkillFileVersion.objects.filter(pk__in=list(mine.values_list("pk", flat=True))).update(
            needs_review=False
        )
        data = (None if new is None else str(new).encode("utf-8")) if accepted else data_of(before)
        current = latest(layout, rel)
        if versioning.unchanged(current, data):
            continue
        verb = "approved" if accepted else "rejected"
        created.append(
            _create(
                layout,
                rel,
                data,
                current,
                user,
                "skill.approve" if accepted else "skill.reject",
                f"{verb} agent proposal #{proposal.pk}",
                Author.AGENT if accepted else Author.PERSON,
            )
        )
    return created


# --- import ----------------------------------------------------------------------------


def accept_agent_change(version: SkillFileVersion, *, user: Any) -> None:
    """A sandbox's change that awaited review is accepted: sandboxes get it."""
    SkillFileVersion.objects.filter(pk=version.pk).update(needs_review=False)
    AuditEvent.record(
        version.layout.workspace,
        "skill.accept_agent_change",
        user=user,
        layout=version.layout,
        target=f"{version.layout.memories_dir}/{version.path}",
        version=version.number,
    )


def record_import(
    layout_files: dict[int, list[tuple[str, str | None]]], *, now: Any, uploaded_by: str = ""
) -> list[str]:
    """Versions for skill files an import found new, changed or gone: ``layout_files``
    maps a layout's pk to (path relative to its memories dir, blob sha256 or None for a
    file gone from disk). A path whose latest version already says so gets none.
    ``uploaded_by``: the snapshot id of a sandbox's upload, whose versions await review
    (one that any earlier version of the file had is not new)."""
    created: list[str] = []
    rows = []
    for layout_id, files in layout_files.items():
        paths = sorted({p for p, _ in files if skill_of(p)})
        if not paths:
            continue
        newest: dict[str, tuple[int, str | None]] = {}
        for chunk_start in range(0, len(paths), 500):
            chunk = paths[chunk_start : chunk_start + 500]
            for path, number, blob_id in (
                SkillFileVersion.objects.filter(layout_id=layout_id, path__in=chunk)
                .order_by("path", "number")
                .values_list("path", "number", "blob_id")
            ):
                newest[path] = (number, blob_id)
        for path, digest in files:
            if not skill_of(path):
                continue
            number, newest_blob = newest.get(path, (0, None))
            if number and newest_blob == digest:
                continue
            if not number and digest is None:
                continue
            if uploaded_by and (
                digest is None
                or SkillFileVersion.objects.filter(
                    layout_id=layout_id, path=path, blob_id=digest
                ).exists()
            ):
                continue  # uploads add and change; a text the file had is not new
            rows.append(
                SkillFileVersion(
                    layout_id=layout_id,
                    path=path,
                    number=number + 1,
                    blob_id=digest,
                    author_kind=Author.AGENT,
                    reason=f"uploaded by sandbox {uploaded_by}"
                    if uploaded_by
                    else "imported from disk"
                    if not number
                    else "deleted on disk"
                    if digest is None
                    else "changed on disk",
                    created_at=now,
                    needs_review=bool(uploaded_by),
                )
            )
            newest[path] = (number + 1, digest)
            created.append(path)
    SkillFileVersion.objects.bulk_create(rows, batch_size=500)
    return created


def disk_state(layout: Layout) -> dict[str, str | None]:
    """path (relative to the memories dir) -> sha256 of each skill file as last
    imported and present on disk."""
    prefix = f"{layout.memories_dir}/"
    return {
        path.removeprefix(prefix): blob_id
        for path, blob_id in WorkspaceFile.objects.present()
        .filter(layout=layout, kind=WorkspaceFile.Kind.SKILL)
        .values_list("path", "blob_id")
    }
