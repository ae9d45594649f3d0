"""Forgetting proposed from usage, never done on its own: a proposal that removes the
``MEMORY.md`` entries no agent read within N days (a layout's setting). Entries younger
than N days (counted from the first version they, or an earlier form of them, appear
in) and pinned entries stay. The proposal is reviewed and decided like any other; the
rest of the memory (``memory_summary.md``, the selection, ``raw_memories.md``) is
proposed as it is now."""

from __future__ import annotations

import array
import bisect
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from generation import review

from . import curation, documents, entry_lineage, figures, usage
from .models import (
    AuditEvent,
    GenerationRun,
    Layout,
    MemoryVersion,
    Pin,
    Proposal,
    Workspace,
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
    cutoff = (now - timedelta(days=days)).timestamp()
    plan = _plan(layout, version)
    entries = review.entries(documents.text(version.blob_id))
    pinned = set(Pin.objects.filter(layout=layout, document=MD).values_list("key", flat=True))

    def gone(i: int) -> bool:
        return entries[i].key not in pinned and plan.last[i] < cutoff and plan.born[i] <= cutoff

    # Only the entries whose last read and first version are both by the cutoff can go:
    # found by bisection in the kept order, whatever the size of MEMORY.md.
    by_cutoff = plan.indexes[: bisect.bisect_right(plan.thresholds, cutoff)]
    out = sorted(
        i for i in by_cutoff if gone(i) and all(gone(member) for member in plan.members.get(i, ()))
    )
    return [
        Forgettable(
            entries[i].key,
            entries[i].title,
            None if plan.last[i] == NEVER else datetime.fromtimestamp(plan.last[i], UTC),
            datetime.fromtimestamp(plan.born[i], UTC),
        )
        for i in out
    ]


def keep_ahead(workspace: Workspace) -> None:
    """Compute the figures of usage that pages keep per import, for the current
    ``MEMORY.md`` of each of the workspace's layouts: every entry's usage, the blocks
    never read and read by failing runs, forgetting's candidates, reads per day. The
    worker does it after a backlog of imports (with the lint), so the first reviewer to
    open the Usage page or a filter of the MEMORY.md page does not wait on it (seconds
    at 100,000 rollouts). Nothing is computed where the web's processes would not see
    it (``figures.seen_by_other_processes``)."""
    if workspace.rows_written_at is None or not figures.seen_by_other_processes():
        return
    for layout in workspace.layouts.present():
        layout.workspace = workspace  # the kept figures' key reads its rows' stamp
        version = curation.latest(layout, MD)
        if version is None or version.blob_id is None:
            continue
        usage.entry_usage(layout, version)
        for which in ("never", "failing"):
            usage.blocks_read(layout, version, which)
        _plan(layout, version)
        usage.reads_per_day(layout)


# The last read of an entry never read, as a timestamp.
NEVER = -math.inf


@dataclass
class _Plan:
    """What forgetting needs of one version's entries, kept per import: each one that
    can go at all (a task or section with text, or a task group's head), its last read
    and first version as timestamps (by its place among the version's entries), a
    head's members, and the entries by the later of those two times."""

    last: array.array[float]
    born: array.array[float]
    members: dict[int, tuple[int, ...]]
    thresholds: array.array[float]
    indexes: array.array[int]


def _plan(layout: Layout, version: MemoryVersion) -> _Plan:
    def compute() -> _Plan:
        assert version.blob_id is not None
        entries = review.entries(documents.text(version.blob_id))
        used = usage.entry_usage(layout, version)
        born = _first_seen(layout, version)
        made = version.created_at.timestamp()
        last = array.array("d", [NEVER] * len(entries))
        first = array.array("d", [made] * len(entries))
        place = {entry.key: i for i, entry in enumerate(entries)}
        members: dict[int, list[int]] = {}
        for i, entry in enumerate(entries):
            found = used.get(entry.key)
            if found is not None and found.last_read is not None:
                last[i] = found.last_read.timestamp()
            if entry.key in born:
                first[i] = born[entry.key].timestamp()
            if entry.group and entry.group in place:
                members.setdefault(place[entry.group], []).append(i)
        candidates = []
        for i, entry in enumerate(entries):
            if entry.kind == "task_group":
                inside = members.get(i, [])
                # A member that can never go (without text) keeps its head.
                if any(not entries[m].text.strip() for m in inside):
                    continue
                later = max((max(last[m], first[m]) for m in inside), default=NEVER)
                candidates.append((max(last[i], first[i], later), i))
            elif entry.text.strip():
                candidates.append((max(last[i], first[i]), i))
        candidates.sort()
        return _Plan(
            last,
            first,
            {head: tuple(inside) for head, inside in members.items()},
            array.array("d", [t for t, _ in candidates]),
            array.array("q", [i for _, i in candidates]),
        )

    name = f"forget-plan:{layout.pk}:{version.pk}"
    return figures.cached(layout.workspace, name, compute, shared=True)


def _first_seen(layout: Layout, version: MemoryVersion) -> dict[str, datetime]:
    """Each entry's first appearance: the earliest version holding it or an earlier
    form of it. A version and those before it never change: kept by its pk."""
    found = cache.get_or_set(
        f"memoryui:first-seen:{version.pk}",
        lambda: _first_seen_of(layout, version),
        figures.TIMEOUT,
    )
    return cast(dict[str, datetime], found)


def _first_seen_of(layout: Layout, version: MemoryVersion) -> dict[str, datetime]:
    created = dict(
        MemoryVersion.objects.filter(layout=layout, document=MD).values_list("pk", "created_at")
    )
    first: dict[str, datetime] = {}
    for (pk, _), key in entry_lineage.lineage(layout, version).items():
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
