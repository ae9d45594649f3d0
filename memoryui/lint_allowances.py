"""Lint findings an admin let through, remembered per finding and per content of its
file: a write-back and an export honor the same allowance, until the file changes."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from generation.lint import Finding

from .models import AuditEvent, LintAllowance, Workspace

ALLOW_ACTION = "lint.allow"


def standing(
    workspace: Workspace, findings: Iterable[Finding], sha256_of: dict[str, str]
) -> dict[str, LintAllowance]:
    """The allowances that still hold for ``findings`` (by finding id): given for the
    content each file has now (``sha256_of``: path -> sha256). One query."""
    wanted = {f.id: sha256_of.get(f.path) for f in findings}
    if not wanted:
        return {}
    held = LintAllowance.objects.filter(
        workspace=workspace, finding_id__in=list(wanted), sha256__in=set(wanted.values()) - {None}
    ).select_related("allowed_by")
    return {a.finding_id: a for a in held if wanted.get(a.finding_id) == a.sha256}


def record(
    workspace: Workspace,
    findings: Iterable[Finding],
    sha256_of: dict[str, str],
    ids: Collection[str],
    *,
    user: Any,
    actor: str = "",
    layout: Any = None,
) -> list[LintAllowance]:
    """Remember each of ``findings`` named in ``ids`` as allowed for its file's current
    content, with one audit event each; those allowed already are left as they are."""
    chosen = [f for f in findings if f.id in ids and f.path in sha256_of]
    known = standing(workspace, chosen, sha256_of)
    person = user if getattr(user, "pk", None) else None
    made = []
    for finding in chosen:
        if finding.id in known:
            continue
        allowance, created = LintAllowance.objects.get_or_create(
            workspace=workspace,
            finding_id=finding.id,
            sha256=sha256_of[finding.path],
            defaults={
                "kind": str(finding.kind),
                "path": finding.path,
                "allowed_by": person,
                "actor": actor or (person.get_username() if person else "command line"),
            },
        )
        if not created:
            continue
        made.append(allowance)
        AuditEvent.record(
            workspace,
            ALLOW_ACTION,
            user=user,
            actor=allowance.actor,
            layout=layout,
            target=finding.path,
            finding=finding.id,
            kind=str(finding.kind),
            line=finding.line,
            message=finding.message,
            sha256=allowance.sha256,
        )
    return made
