"""Phase two (consolidation): a run's proposal from its raw memories, under a lease
(``consolidate``), then the new proposal's entries checked ahead of the first review."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from generation import phase_two, prompts

from .. import consolidation, curation, documents, entry_checks, observability, usage
from ..models import (
    GenerationRun,
    PhaseOneJob,
    PhaseOneResult,
    Proposal,
    ProtectedRawMemory,
    RawMemory,
)
from .leases import new_lease, renewing
from .model_calls import model_client, model_config
from .runs import fail_run

logger = logging.getLogger(__name__)


def raw_memory_texts(run: GenerationRun) -> dict[str, str]:
    """The layout's raw memories as phase two will see them: those on disk, replaced or
    joined by what this run's phase one wrote."""
    texts: dict[str, str] = {}
    for raw in (
        RawMemory.objects.filter(layout=run.layout, file__missing_since__isnull=True)
        .select_related("file__blob")
        .order_by("rollout_id")
    ):
        blob = raw.file.blob
        data = bytes(blob.data) if blob is not None else b""
        texts[raw.rollout_id] = data.decode("utf-8", errors="replace")
    for result in PhaseOneResult.objects.filter(
        pk__in=run.jobs.filter(status=PhaseOneJob.Status.DONE).values("result_id"),
        outcome=PhaseOneResult.Outcome.MEMORY,
    ):
        for path, text in result.files.items():
            if path.startswith("raw_memories/"):
                texts[result.rollout_id] = text
    return texts


def consolidate(run_id: int) -> bool:
    """Run phase two for a run and store its proposal. Returns False when another worker
    has it. Raises ``llm.TransientModelError`` for the caller to retry."""
    now = timezone.now()
    lease = new_lease(now)
    consolidating = GenerationRun.objects.filter(
        pk=run_id, status=GenerationRun.Status.CONSOLIDATING
    )
    claimed = consolidating.filter(phase_two_lease_until__isnull=True).update(
        phase_two_lease_until=lease
    )
    if not claimed:  # a worker's lease passed (it died or hung)
        claimed = consolidating.filter(phase_two_lease_until__lt=now).update(
            phase_two_lease_until=lease, taken_over_at=now
        )
        if claimed:
            observability.lease_taken_over("phase_two", run=run_id)
    if not claimed:
        return False
    held = GenerationRun.objects.filter(pk=run_id, status=GenerationRun.Status.CONSOLIDATING)
    with (
        renewing(held, "phase_two_lease_until", lease),
        observability.operation("phase", "phase_two", run=run_id),
    ):
        _consolidate_claimed(run_id)
    _log_run_end(run_id)
    return True


def _log_run_end(run_id: int) -> None:
    """``run.done`` with the run's whole duration, once its proposal is stored."""
    run = (
        GenerationRun.objects.filter(pk=run_id).values("status", "started_at", "layout_id").first()
    )
    if run is None or run["status"] in GenerationRun.ACTIVE:
        return
    seconds = (timezone.now() - run["started_at"]).total_seconds() if run["started_at"] else 0.0
    observability.log_event(
        "run",
        "run.done",
        run=run_id,
        layout=run["layout_id"],
        status=run["status"],
        duration_ms=round(seconds * 1000),
    )
    observability.count("run", "ok", seconds)


def _consolidate_claimed(run_id: int) -> None:
    run = GenerationRun.objects.select_related(
        "layout__workspace", "base_memory_md", "base_memory_summary"
    ).get(pk=run_id)
    snapshot = run.settings_snapshot
    selection_file, previous = documents.current_selection(run.layout)
    plan = phase_two.plan_phase_two(
        raw_memory_texts(run).values(),
        previous,
        int(snapshot.get("max_raw_memories_for_consolidation", 256)),
        protected=ProtectedRawMemory.objects.filter(layout=run.layout).values_list(
            "rollout_id", flat=True
        ),
        by_usage=(
            usage.usage_ranking(run.layout, int(snapshot.get("selection_unused_days", 30)))
            if snapshot.get("select_by_usage")
            else None
        ),
    )
    config = model_config(snapshot, snapshot["phase_two_model"])
    result = consolidation.consolidate(
        run,
        plan,
        base_memory_md=curation.text_of(run.base_memory_md),
        base_summary=curation.text_of(run.base_memory_summary),
        selection_file=selection_file,
        pinned=curation.pinned_texts(run.layout, curation.text_of(run.base_memory_md)),
        rejected=curation.rejected_texts(run.layout),
        feedback=prompts.review_feedback(*curation.review_feedback(run.layout)),
        client=model_client(config),
        config=config,
        should_cancel=lambda: GenerationRun.objects.filter(
            pk=run_id, status=GenerationRun.Status.CANCELLED
        ).exists(),
        on_turn=lambda turn: _phase_two_turn(run_id, turn),
    )
    if result.status in ("failed", "cancelled"):
        _phase_two_turn(run_id, None, result.usage, result.turns)
        if result.status == "failed":
            fail_run(run_id, f"Phase two failed: {result.reason}")
        return
    with transaction.atomic():
        if result.status == "changed":
            Proposal.objects.update_or_create(
                run=run,
                defaults={
                    "layout": run.layout,
                    "base_memory_md": run.base_memory_md,
                    "base_memory_summary": run.base_memory_summary,
                    "memory_md": result.memory_md,
                    "memory_summary": result.memory_summary,
                    "raw_memories_md": plan.raw_memories_md,
                    "selection": [item.__dict__ for item in plan.selected],
                    "retained": plan.diff.retained,
                    "added": plan.diff.added,
                    "removed": plan.diff.removed,
                    "restored_pins": result.restored_pins,
                    "reintroduced": result.reintroduced,
                    "skill_changes": result.skill_changes,
                },
            )
        GenerationRun.objects.filter(pk=run_id, status=GenerationRun.Status.CONSOLIDATING).update(
            status=GenerationRun.Status.DONE,
            finished_at=timezone.now(),
            phase_two_input_tokens=result.usage.input_tokens,
            phase_two_output_tokens=result.usage.output_tokens,
            phase_two_turns=result.turns,
            phase_two_note="" if result.status == "changed" else result.reason,
            phase_two_lease_until=None,
        )
    if result.status == "changed":
        _check_entries(run)


def _check_entries(run: GenerationRun) -> None:
    """Evidence and poisoning flags of the new proposal's entries, computed now so the
    first review does not wait for them, and the *Viewed* marks carried from the
    previous proposal to the entries unchanged since. A failure here loses nothing: the
    review page computes what is missing."""

    try:
        proposal = Proposal.objects.select_related("layout", "run").get(run=run)
        entry_checks.ensure(proposal)
        curation.carry_views(proposal)
    except Exception:  # noqa: BLE001 - the proposal is stored; the page computes it later
        logger.exception("checking the entries of run %s's proposal failed", run.pk)


def _phase_two_turn(run_id: int, turn: Any, usage: Any = None, turns: int = 0) -> None:
    """Phase two's progress after a model call, or its final tokens when it ended
    without a proposal. (Its lease is renewed by ``renewing`` meanwhile.)"""
    fields: dict[str, Any] = {}
    if turn is not None:
        usage, turns = turn.usage, turn.number
        fields["phase_two_files_touched"] = turn.files_touched
    GenerationRun.objects.filter(pk=run_id).update(
        phase_two_input_tokens=usage.input_tokens,
        phase_two_output_tokens=usage.output_tokens,
        phase_two_turns=turns,
        **fields,
    )
