"""A generation run's life: started with its phase-one jobs (``start_run``), failed or
cancelled, and its progress for the pages (``progress``, ``stalled_since``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Case, Count, Exists, F, Max, OuterRef, Q, QuerySet, Sum, Value, When
from django.utils import timezone

from generation import llm

from .. import curation, notifications, observability, webhooks
from ..models import (
    GenerationRun,
    GenerationSettings,
    Layout,
    MemoryVersion,
    PhaseOneJob,
    PhaseOneResult,
    RawMemory,
    Rollout,
    RolloutSummary,
)
from .model_calls import model_access, settings_for


class RunConflict(Exception):
    """The layout already has a generation run in progress."""


class GenerationUnavailable(Exception):
    """No model is configured (no API key and no server URL)."""


def _snapshot(gs: GenerationSettings) -> dict[str, Any]:
    return {
        "phase_one_model": gs.phase_one_model,
        "phase_two_model": gs.phase_two_model,
        "reasoning_effort": gs.reasoning_effort,
        "api": gs.api,
        "extra_prompt": gs.extra_prompt,
        "max_raw_memories_for_consolidation": gs.max_raw_memories_for_consolidation,
        "concurrency": gs.concurrency,
        "prompt_set": gs.prompt_set,
        "phase_two_max_turns": gs.phase_two_max_turns,
        "phase_two_token_budget": gs.phase_two_token_budget,
        "select_by_usage": gs.select_by_usage,
        "selection_unused_days": gs.selection_unused_days,
    }


def already_extracted(layout: Layout) -> QuerySet[Rollout]:
    """The layout's rollouts whose phase one is on disk for their current transcript: a
    raw memory whose ``updated_at`` is the rollout's last segment's (the SDK writes
    ``unknown`` when the rollout has none) and a rollout summary, both present. A
    rollout that gained a segment since has a newer ``updated_at``."""
    stamp = Case(When(updated_at_raw="", then=Value("unknown")), default=F("updated_at_raw"))
    present = {"layout": layout, "file__missing_since__isnull": True}
    raw = RawMemory.objects.filter(
        **present, rollout_id=OuterRef("rollout_id"), updated_at_raw=OuterRef("stamp")
    )
    summary = RolloutSummary.objects.filter(**present, rollout_id=OuterRef("rollout_id"))
    return (
        Rollout.objects.filter(layout=layout, file__missing_since__isnull=True)
        .annotate(stamp=stamp)
        .filter(Exists(raw), Exists(summary))
    )


def start_run(layout: Layout, user: Any = None, *, reextract: bool = False) -> GenerationRun:
    """Create a run with one phase-one job per rollout of the layout, leaving out the
    rollouts already extracted on disk (by the SDK or a write-back) unless
    ``reextract``: phase two reads their raw memories from disk."""
    access = model_access()
    if not access.available:
        raise GenerationUnavailable(
            "No model is configured: set OPENAI_API_KEY (and OPENAI_BASE_URL for another "
            "OpenAI-compatible server), or MEMORYUI_DEMO_MODEL=offline for the demo model."
        )
    gs = settings_for(layout)
    with transaction.atomic():
        Layout.objects.select_for_update().filter(pk=layout.pk).first()
        if GenerationRun.objects.filter(layout=layout).active().exists():
            raise RunConflict(f"A generation run is already in progress for {layout.memories_dir}.")
        rollouts = Rollout.objects.filter(layout=layout, file__missing_since__isnull=True)
        kept = 0
        if not reextract:
            extracted = already_extracted(layout)
            kept = extracted.count()
            rollouts = rollouts.exclude(pk__in=extracted.values("pk"))
        run = GenerationRun.objects.create(
            layout=layout,
            status=GenerationRun.Status.EXTRACTING,
            created_by=user if getattr(user, "pk", None) else None,
            started_at=timezone.now(),
            offline_demo=access.offline_demo,
            settings_snapshot={
                **_snapshot(gs),
                "offline_demo": access.offline_demo,
                "reextract": reextract,
                "kept_extracted": kept,
            },
            base_memory_md=curation.latest(layout, MemoryVersion.Document.MEMORY_MD),
            base_memory_summary=curation.latest(layout, MemoryVersion.Document.MEMORY_SUMMARY),
        )
        PhaseOneJob.objects.bulk_create(
            [PhaseOneJob(run=run, rollout_id=pk) for pk in rollouts.values_list("pk", flat=True)],
            batch_size=1000,
        )
    observability.log_event(
        "run", "run.start", run=run.pk, layout=layout.pk, jobs=run.jobs.count(), user=user
    )
    return run


def fail_run(run_id: int, reason: str) -> None:
    failed = GenerationRun.objects.filter(pk=run_id, status__in=GenerationRun.ACTIVE).update(
        status=GenerationRun.Status.FAILED, error=reason[:2000], finished_at=timezone.now()
    )
    if failed:
        observability.log_event(
            "run", "run.failed", logging.WARNING, run=run_id, reason=reason[:300]
        )
        observability.count("run", "failed")
        webhooks.run_failed(run_id)
        notifications.run_failed(run_id)


def cancel_run(run_id: int) -> bool:
    with transaction.atomic():
        cancelled = GenerationRun.objects.filter(pk=run_id, status__in=GenerationRun.ACTIVE).update(
            status=GenerationRun.Status.CANCELLED, finished_at=timezone.now()
        )
        PhaseOneJob.objects.filter(
            run_id=run_id, status__in=[PhaseOneJob.Status.QUEUED, PhaseOneJob.Status.RUNNING]
        ).update(status=PhaseOneJob.Status.CANCELLED, lease_until=None)
    return bool(cancelled)


# --- progress ---------------------------------------------------------------------


@dataclass(frozen=True)
class Progress:
    total: int
    done: int
    failed: int
    reused: int
    nothing: int
    running: int
    cancelled: int
    input_tokens: int
    output_tokens: int
    cost: float | None
    # The run's start, its last finished job, or the last time a worker claimed or
    # renewed the lease of a job or of phase two (a live worker renews while it waits).
    last_activity: datetime | None = None

    @property
    def finished(self) -> int:
        return self.done + self.failed + self.cancelled

    @property
    def percent(self) -> int:
        return round(100 * self.finished / self.total) if self.total else 100


def progress(run: GenerationRun) -> Progress:
    """Counts and tokens of a run, in one query."""
    S = PhaseOneJob.Status
    agg = run.jobs.aggregate(
        total=Count("pk"),
        done=Count("pk", filter=Q(status=S.DONE)),
        failed=Count("pk", filter=Q(status=S.FAILED)),
        reused=Count("pk", filter=Q(status=S.DONE, reused=True)),
        nothing=Count(
            "pk", filter=Q(status=S.DONE, result__outcome=PhaseOneResult.Outcome.NOTHING)
        ),
        running=Count("pk", filter=Q(status=S.RUNNING)),
        cancelled=Count("pk", filter=Q(status=S.CANCELLED)),
        input_tokens=Sum("input_tokens"),
        output_tokens=Sum("output_tokens"),
        last_finished=Max("finished_at"),
        last_lease=Max("lease_until", filter=Q(status=S.RUNNING)),
    )
    snapshot = run.settings_snapshot
    one = llm.Usage(agg["input_tokens"] or 0, agg["output_tokens"] or 0)
    two = llm.Usage(run.phase_two_input_tokens, run.phase_two_output_tokens)
    costs = [
        llm.estimate_cost(snapshot.get("phase_one_model", ""), one),
        llm.estimate_cost(snapshot.get("phase_two_model", ""), two),
    ]
    cost = None if run.offline_demo or None in costs else sum(c for c in costs if c is not None)
    return Progress(
        total=agg["total"],
        done=agg["done"],
        failed=agg["failed"],
        reused=agg["reused"],
        nothing=agg["nothing"],
        running=agg["running"],
        cancelled=agg["cancelled"],
        input_tokens=one.input_tokens + two.input_tokens,
        output_tokens=one.output_tokens + two.output_tokens,
        cost=cost,
        last_activity=max(
            (
                t
                for t in (
                    run.started_at,
                    agg["last_finished"],
                    _lease_taken(agg["last_lease"]),
                    _lease_taken(run.phase_two_lease_until),
                )
                if t is not None
            ),
            default=None,
        ),
    )


def _lease_taken(lease_until: datetime | None) -> datetime | None:
    """When a lease was claimed or last renewed."""
    if lease_until is None:
        return None
    return lease_until - timedelta(seconds=settings.MEMORYUI_JOB_LEASE_SECONDS)


def stalled_since(run: GenerationRun, progress: Progress, now: datetime) -> datetime | None:
    """When an active run last moved, if that was longer ago than a lease and a beat
    interval: long enough for work lost with a worker to have been taken over, had a
    worker and beat been up. A live worker waiting for a slow model renews its lease,
    which counts as moving."""
    if not run.is_active or progress.last_activity is None:
        return None
    takeover = settings.MEMORYUI_JOB_LEASE_SECONDS + settings.MEMORYUI_RECOVERY_SECONDS
    if now - progress.last_activity <= timedelta(seconds=takeover):
        return None
    return progress.last_activity
