"""Forgetting proposed from usage, never done on its own: a proposal that removes the
``MEMORY.md`` entries no agent read within N days (a layout's setting). Entries younger
than N days (counted from the first version they, or an earlier form of them, appear
in) and pinned entries stay. The proposal is reviewed and decided like any other; the
rest of the memory (``memory_summary.md``, the selection, ``raw_memories.md``) is
proposed as it is now."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from generation import review

from . import curation, documents, figures, usage
from .models import (
    AuditEvent,
    GenerationRun,
    Layout,
    MemoryVersion,
    Pin,
    Proposal,
    WorkspaceFile,
)

MD = MemoryVersion.Document.MEMORY_MD


@dataclass(frozen=True)
class Forgettable:
    key: str
    title: str
    last_read: datetime | None
    born: datetime


def forgettable(layout: Layout, days: int, now: datetime | None = None) -> list[Forgettable]:
    """The entries of the current MEMORY.md that a proposal to forget would remove: not
    read within ``days`` days, at least ``days`` days old, not pinned. A task group's
    head goes only with every task and section under it."""
    version = curation.latest(layout, MD)
    if version is None or version.blob_id is None:
        return []
    now = now or timezone.now()
    cutoff = now - timedelta(days=days)
    text = documents.text(version.blob_id)
    used = usage.entry_usage(layout, version)
    born = _first_seen(layout, version)
    pinned = set(Pin.objects.filter(layout=layout, document=MD).values_list("key", flat=True))
    entries = review.entries(text)
    out: dict[str, Forgettable] = {}
    for entry in entries:
        if entry.key in pinned or entry.kind == "task_group" or not entry.text.strip():
            continue
        last = used[entry.key].last_read if entry.key in used else None
        first = born.get(entry.key, version.created_at)
        if (last is None or last < cutoff) and first <= cutoff:
            out[entry.key] = Forgettable(entry.key, entry.title, last, first)
    members: dict[str, list[str]] = {}
    for entry in entries:
        if entry.group:
            members.setdefault(entry.group, []).append(entry.key)
    for entry in entries:
        if entry.kind != "task_group" or entry.key in pinned:
            continue
        inside = members.get(entry.key, [])
        if all(key in out for key in inside):
            first = born.get(entry.key, version.created_at)
            last = used[entry.key].last_read if entry.key in used else None
            if (last is None or last < cutoff) and first <= cutoff:
                out[entry.key] = Forgettable(entry.key, entry.title, last, first)
    return [out[e.key] for e in entries if e.key in out]


def _first_seen(layout: Layout, version: MemoryVersion) -> dict[str, datetime]:
    """Each entry's first appearance: the earliest version holding it or an earlier
    form of it. A version and those before it never change: kept by its pk."""
    key = f"memoryui:first-seen:{version.pk}"
    found = cache.get(key)
    if found is None:
        found = _first_seen_of(layout, version)
        cache.set(key, found, figures.TIMEOUT)
    return found


def _first_seen_of(layout: Layout, version: MemoryVersion) -> dict[str, datetime]:
    created = dict(
        MemoryVersion.objects.filter(layout=layout, document=MD).values_list("pk", "created_at")
    )
    first: dict[str, datetime] = {}
    for (pk, _), key in usage.lineage(layout, version).items():
        when = created[pk]
        if key not in first or when < first[key]:
            first[key] = when
    return first


def propose_forgetting(layout: Layout, days: int, user: Any) -> Proposal | None:
    """A pending proposal removing ``forgettable`` entries; None when there are none."""
    gone = {f.key for f in forgettable(layout, days)}
    if not gone:
        return None
    base = curation.latest(layout, MD)
    summary = curation.latest(layout, MemoryVersion.Document.MEMORY_SUMMARY)
    text = curation.text_of(base)
    kept = review.join(e.text for e in review.entries(text) if e.key not in gone)
    _, selection = documents.current_selection(layout)
    merged = (
        WorkspaceFile.objects.present()
        .filter(layout=layout, kind=WorkspaceFile.Kind.RAW_MEMORIES_MERGED)
        .only("blob_id")
        .first()
    )
    now = timezone.now()
    with transaction.atomic():
        run = GenerationRun.objects.create(
            layout=layout,
            status=GenerationRun.Status.DONE,
            created_by=user,
            started_at=now,
            finished_at=now,
            base_memory_md=base,
            base_memory_summary=summary,
            settings_snapshot={"forgetting": {"days": days}},
            phase_two_note=f"forgetting proposed: {len(gone)} entries not read in {days} days",
        )
        proposal = Proposal.objects.create(
            layout=layout,
            run=run,
            base_memory_md=base,
            base_memory_summary=summary,
            memory_md=kept,
            memory_summary=curation.text_of(summary),
            raw_memories_md=documents.text(merged.blob_id) if merged and merged.blob_id else "",
            selection=[item.__dict__ for item in selection.items] if selection else [],
        )
        AuditEvent.record(
            layout.workspace,
            "proposal.forget",
            user=user,
            layout=layout,
            target=f"proposal #{proposal.pk}",
            days=days,
            entries=sorted(gone),
        )
    return proposal
