"""The audit log's details as people read them: one sentence per event, and each detail
as "key: value" (lists joined, file lists counted), never a Python repr."""

from __future__ import annotations

import json
import re
from typing import Any

from .lint_allowances import ALLOW_ACTION
from .models import AuditEvent

_SHA256 = re.compile(r"[0-9a-f]{64}")

_VERBS = {
    "proposal.approve": "approved",
    "proposal.reject": "rejected",
    "proposal.reserve": "reserved",
    "proposal.release": "released",
    "proposal.assign": "assigned",
    "entry.accept": "accepted",
    "entry.reject": "rejected",
    "entry.pin": "pinned",
    "entry.unpin": "unpinned",
}


def _value(value: Any) -> str:
    if value is None or value == "" or value == [] or value == {}:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        if all(isinstance(v, dict) and "path" in v for v in value):
            paths = [str(v["path"]) for v in value]
            shown = ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
            return f"{len(paths)} file{'' if len(paths) == 1 else 's'}: {shown}"
        return ", ".join(_value(v) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k} {_value(v)}" for k, v in value.items())
    if isinstance(value, str) and _SHA256.fullmatch(value):
        return value[:12] + "…"  # the JSON (CSV) keeps it whole
    return str(value)


def detail_items(detail: Any) -> list[tuple[str, str]]:
    """Each detail as (label, readable value), empty values left out."""
    if not isinstance(detail, dict):
        return [("detail", _value(detail))] if detail else []
    return [
        (str(key).replace("_", " "), _value(value))
        for key, value in detail.items()
        if value not in (None, "", [], {})
    ]


def describe(event: AuditEvent) -> str:
    """One readable sentence for the actions that have one, else ""."""
    detail = event.detail if isinstance(event.detail, dict) else {}
    action = event.action
    if action == "proposal.approve":
        parts = [f"{detail[k]} {k}" for k in ("accepted", "rejected") if k in detail]
        versions = detail.get("versions") or []
        if versions:
            parts.append(f"version{'' if len(versions) == 1 else 's'} {_value(versions)} made")
        if detail.get("quarantined"):
            parts.append(f"{len(detail['quarantined'])} kept out as possible poisoning")
        return f"{event.target} approved" + (": " + ", ".join(parts) if parts else "")
    if action in _VERBS:
        verb = _VERBS[action]
        proposal = detail.get("proposal")
        of = f" in proposal #{proposal}" if proposal else ""
        edited = " (edited)" if detail.get("edited") else ""
        flagged = " despite a poisoning flag" if detail.get("poisoning_flags") else ""
        return f"{event.target} {verb}{of}{edited}{flagged}"
    if action == "entry.flagged":
        return f"{event.target} saved with a poisoning flag"
    if action in ("writeback.write", "writeback.failed"):
        files = detail.get("files") or []
        text = f"wrote {len(files)} file{'' if len(files) == 1 else 's'} into {event.target}"
        if action == "writeback.failed":
            text = f"write-back into {event.target} failed: {detail.get('error', '')}"
        if detail.get("proposal"):
            text += f" (proposal #{detail['proposal']})"
        if detail.get("allowed_findings"):
            text += f"; lint findings let through: {_value(detail['allowed_findings'])}"
        return text
    if action.startswith("export."):
        files = detail.get("files") or []
        return (
            f"exported snapshot {detail.get('snapshot_id', '')} with {len(files)} curated "
            f"file{'' if len(files) == 1 else 's'}"
            + (
                f"; findings let through: {_value(detail['allowed_findings'])}"
                if detail.get("allowed_findings")
                else ""
            )
        )
    if action == "version.create":
        reason = f": {detail['reason']}" if detail.get("reason") else ""
        return f"version {detail.get('version', '?')} saved{reason}"
    if action == ALLOW_ACTION:
        return (
            f"let {detail.get('kind', 'a')} finding {detail.get('finding', '')} through "
            f"in {event.target} until its content changes"
        )
    return ""


def readable(event: AuditEvent) -> str:
    """The sentence, or each detail as "key: value" for the actions without one."""
    return describe(event) or "; ".join(f"{k}: {v}" for k, v in detail_items(event.detail))


def as_json(detail: Any) -> str:
    return json.dumps(detail, sort_keys=True, ensure_ascii=False, default=str)
