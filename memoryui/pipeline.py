"""The two-phase generation for a layout, as steps that Celery tasks (or an inline loop
for ``manage.py generate --wait``) call.

Phase one runs one job per rollout, at most ``concurrency`` at a time per layout: a
finishing job claims the next ones (``claim_window``), and the last one to finish moves
the run to phase two (``finish_phase_one``), exactly once. Every step claims its work
with a conditional update, so a task delivered twice (``acks_late``) does nothing the
second time. A worker holds what it claimed under a short lease that it renews while it
works (``renewing``), so a slow model call keeps its work and a dead worker's work is
taken over once its lease has passed: by the broker's redelivery of its task, or by
``take_stalled``, which the periodic ``recover_stalled_runs`` task calls to send again
the work of passed leases and of task messages lost altogether.

Nothing here writes to the workspace: phase one's files and phase two's documents are
stored, and phase two ends in a ``Proposal`` that a person reviews.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection, transaction
from django.db.models import Case, Count, Exists, F, Max, OuterRef, Q, QuerySet, Sum, Value, When
from django.utils import timezone

from generation import llm, phase_one, phase_two, prompts, retry

from . import (
    consolidation,
    curation,
    documents,
    entry_checks,
    notifications,
    observability,
    usage,
    webhooks,
)
from .models import (
    GenerationRun,
    GenerationSettings,
    Layout,
    MemoryVersion,
    PhaseOneJob,
    PhaseOneResult,
    Proposal,
    ProtectedRawMemory,
    RawMemory,
    Rollout,
    RolloutSummary,
)

MAX_ATTEMPTS = 6

logger = logging.getLogger(__name__)


class RunConflict(Exception):
    """The layout already has a generation run in progress."""


class GenerationUnavailable(Exception):
    """No model is configured (no API key and no server URL)."""


@dataclass(frozen=True)
class ModelAccess:
    api_key: str | None
    base_url: str | None
    offline_demo: bool

    @property
    def available(self) -> bool:
        return bool(self.offline_demo or self.api_key or self.base_url)

    def resolved_base_url(self) -> str | None:
        """Where to send model calls: the offline demo model is served in this process
        (started here on first use), so every entry point works without a server."""
        if self.offline_demo:
            # Deferred: the demo model (and its server) loads only where it is used.
            from generation.offline_model import in_process_demo_url  # noqa: PLC0415

            return in_process_demo_url()
        return self.base_url


def model_access() -> ModelAccess:
    """The model this deployment uses, from the settings (MEMORYUI_DEMO_MODEL has already
    resolved "local" into OPENAI_BASE_URL)."""
    if settings.MEMORYUI_DEMO_MODEL == "offline":
        return ModelAccess(api_key=None, base_url=None, offline_demo=True)
    return ModelAccess(
        api_key=settings.OPENAI_API_KEY or None,
        base_url=settings.OPENAI_BASE_URL or None,
        offline_demo=False,
    )


def settings_for(layout: Layout) -> GenerationSettings:
    gs, _ = GenerationSettings.objects.get_or_create(
        layout=layout,
        defaults={
            "phase_one_model": settings.MEMORYUI_PHASE_ONE_MODEL,
            "phase_two_model": settings.MEMORYUI_PHASE_TWO_MODEL,
            "api": settings.MEMORYUI_OPENAI_API,
        },
    )
    return gs


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


def model_config(snapshot: dict[str, Any], model: str) -> llm.ModelConfig:
    access = model_access()
    if snapshot.get("offline_demo") and not access.offline_demo:
        # A run started on the demo model is answered by it in every worker, whatever
        # that worker's own settings say.
        access = ModelAccess(api_key=None, base_url=None, offline_demo=True)
    api = snapshot.get("api", "responses")
    return llm.ModelConfig(
        model=model,
        api_key=access.api_key,
        base_url=access.resolved_base_url(),
        api="responses" if api == "responses" else "chat",
        chat_format="json_object" if api == "chat_json_object" else "json_schema",
        reasoning_effort=snapshot.get("reasoning_effort") or None,
        timeout=settings.MEMORYUI_MODEL_TIMEOUT,
    )


@lru_cache(maxsize=8)
def _client(config: llm.ModelConfig) -> Any:
    """One client (and connection pool) per model configuration, shared by the jobs of
    a process: building one costs ~20 ms of CPU (the CA bundle) and a new connection."""
    return llm.make_client(config)


def _model_call(snapshot: dict[str, Any], model_key: str) -> llm.ModelCall:
    config = model_config(snapshot, snapshot[model_key])
    return llm.make_call(config, _client(config))


# --- starting ---------------------------------------------------------------------


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


# --- leases -----------------------------------------------------------------------


def new_lease(now: datetime | None = None) -> datetime:
    return (now or timezone.now()) + timedelta(seconds=settings.MEMORYUI_JOB_LEASE_SECONDS)


@contextmanager
def renewing(held: QuerySet[Any], field: str, lease: datetime) -> Iterator[None]:
    """Keep a claim while its holder works: a thread renews the lease in ``field`` every
    ``MEMORYUI_LEASE_RENEW_SECONDS``, as long as the row still carries the lease this
    holder set last (the lease's value is the holder's token). A model call may take
    minutes; a lease kept short and renewed lets another worker take over within about
    a lease of a worker's death, and never while the holder is alive.

    Renewing stops when the row was finished, cancelled or taken over, and on leaving
    the block."""
    done = threading.Event()

    def renew() -> None:
        current = lease
        while not done.wait(settings.MEMORYUI_LEASE_RENEW_SECONDS):
            extended = new_lease()
            try:
                renewed = held.filter(**{field: current}).update(**{field: extended})
            except DatabaseError as exc:  # try again next time; the lease still runs
                logger.warning("could not renew a lease (%s): %s", field, exc)
                continue
            finally:
                connection.close()  # one connection per renewal, none held between
            if not renewed:
                return
            current = extended

    thread = threading.Thread(target=renew, name=f"lease-{field}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


# --- phase one --------------------------------------------------------------------


def claim_window(run_id: int, limit: int | None = None) -> list[int]:
    """Mark as dispatched as many queued jobs as the concurrency limit (the layout's, or
    ``limit``) allows."""
    with transaction.atomic():
        run = GenerationRun.objects.select_for_update().filter(pk=run_id).first()
        if run is None or run.status != GenerationRun.Status.EXTRACTING:
            return []
        jobs = PhaseOneJob.objects.filter(run_id=run_id)
        in_flight = jobs.filter(
            dispatched_at__isnull=False,
            status__in=[PhaseOneJob.Status.QUEUED, PhaseOneJob.Status.RUNNING],
        ).count()
        concurrency = limit or int(run.settings_snapshot.get("concurrency", 8))
        free = max(0, concurrency - in_flight)
        ids = list(
            jobs.filter(status=PhaseOneJob.Status.QUEUED, dispatched_at__isnull=True)
            .order_by("pk")
            .values_list("pk", flat=True)[:free]
        )
        PhaseOneJob.objects.filter(pk__in=ids).update(dispatched_at=timezone.now())
    return ids


def cache_key(content_sha256: str, snapshot: dict[str, Any]) -> str:
    parts = [
        content_sha256,
        snapshot.get("phase_one_model", ""),
        snapshot.get("reasoning_effort", ""),
        prompts.PROMPT_VERSION,
        snapshot.get("prompt_set", "memoryui"),
        hashlib.sha256(snapshot.get("extra_prompt", "").encode()).hexdigest(),
    ]
    if snapshot.get("offline_demo"):
        parts.append("offline-demo")  # never reused by a run on a real model
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _session_id(layout: Layout, rollout_id: str) -> str:
    """The sandbox session a summary names: keep what the SDK wrote for this rollout,
    else the snapshot's id (the SDK names snapshots after the session)."""
    existing = (
        RolloutSummary.objects.filter(layout=layout, rollout_id=rollout_id)
        .exclude(session_id="")
        .values_list("session_id", flat=True)
        .first()
    )
    if existing:
        return existing
    workspace = layout.workspace
    if workspace.source_kind == workspace.SourceKind.SNAPSHOT:
        return workspace.name
    return "memoryui"


def _takeable(now: datetime) -> Q:
    """Jobs a worker may take: queued, or running under a lease that has passed."""
    return Q(status=PhaseOneJob.Status.QUEUED) | Q(
        status=PhaseOneJob.Status.RUNNING, lease_until__lt=now
    )


def process_job(job_id: int) -> int | None:
    """Run phase one for one job; returns its run id, or None when there was nothing
    to do (another worker has it, or the run was cancelled).

    Raises ``llm.TransientModelError`` for the caller to retry later."""
    now = timezone.now()
    lease = new_lease(now)
    takeable = PhaseOneJob.objects.filter(pk=job_id, run__status=GenerationRun.Status.EXTRACTING)
    claim = {"status": PhaseOneJob.Status.RUNNING, "lease_until": lease}
    claimed = takeable.filter(status=PhaseOneJob.Status.QUEUED).update(
        **claim, attempts=F("attempts") + 1
    )
    if not claimed:  # a running job whose worker's lease passed (it died or hung)
        claimed = takeable.filter(status=PhaseOneJob.Status.RUNNING, lease_until__lt=now).update(
            **claim, attempts=F("attempts") + 1
        )
        if claimed:
            observability.lease_taken_over("phase_one", job=job_id)
            GenerationRun.objects.filter(
                pk__in=PhaseOneJob.objects.filter(pk=job_id).values("run_id")
            ).update(taken_over_at=now)
    if not claimed:
        return None
    held = PhaseOneJob.objects.filter(pk=job_id, status=PhaseOneJob.Status.RUNNING)
    with (
        renewing(held, "lease_until", lease),
        observability.operation("phase", "phase_one", job=job_id) as extra,
    ):
        run_id = _process_claimed_job(job_id)
        extra["run"] = run_id
        return run_id


def _process_claimed_job(job_id: int) -> int:
    job = PhaseOneJob.objects.select_related("run__layout__workspace", "rollout__file").get(
        pk=job_id
    )
    run, rollout = job.run, job.rollout
    snapshot = run.settings_snapshot
    key = cache_key(rollout.file.blob_id or "", snapshot)
    result = PhaseOneResult.objects.filter(layout=run.layout, cache_key=key).first()
    if result is not None:
        _finish_job(job, result, reused=True)
        return run.pk
    data = bytes(rollout.file.blob.data) if rollout.file.blob is not None else b""
    try:
        extraction = phase_one.run_phase_one(
            data,  # read one segment at a time: a huge rollout is never held parsed
            call=_model_call(snapshot, "phase_one_model"),
            extra_prompt=snapshot.get("extra_prompt", ""),
            prompt_set=snapshot.get("prompt_set", "memoryui"),
        )
    except llm.PermanentModelError as exc:
        fail_job(job.pk, str(exc))
        return run.pk
    except ImportError as exc:  # the sdk prompt set without openai-agents
        fail_job(job.pk, f"the sdk prompt set needs the openai-agents package: {exc}")
        return run.pk
    files = phase_one.phase_one_files(
        rollout_id=rollout.rollout_id,
        result=extraction,
        rollout_path=rollout.file.path,
        session_id=_session_id(run.layout, rollout.rollout_id),
    )
    result, _ = PhaseOneResult.objects.get_or_create(
        layout=run.layout,
        cache_key=key,
        defaults={
            "rollout_id": rollout.rollout_id,
            "outcome": extraction.status,
            "slug": extraction.slug,
            "rollout_summary": extraction.summary,
            "raw_memory": extraction.raw_memory,
            "files": files,
            "input_tokens": extraction.usage.input_tokens,
            "output_tokens": extraction.usage.output_tokens,
        },
    )
    _finish_job(job, result, reused=False)
    return run.pk


def _finish_job(job: PhaseOneJob, result: PhaseOneResult, *, reused: bool) -> None:
    PhaseOneJob.objects.filter(pk=job.pk, status=PhaseOneJob.Status.RUNNING).update(
        status=PhaseOneJob.Status.DONE,
        result=result,
        reused=reused,
        input_tokens=0 if reused else result.input_tokens,
        output_tokens=0 if reused else result.output_tokens,
        finished_at=timezone.now(),
        lease_until=None,
        error="",
    )


def release_for_retry(job_id: int, reason: str) -> int:
    """Put a job back in the queue after a transient error; returns its attempts."""
    PhaseOneJob.objects.filter(pk=job_id, status=PhaseOneJob.Status.RUNNING).update(
        status=PhaseOneJob.Status.QUEUED,
        lease_until=None,
        dispatched_at=timezone.now(),  # the retry is sent now
        error=reason[:1000],
    )
    return PhaseOneJob.objects.values_list("attempts", flat=True).get(pk=job_id)


def fail_job(job_id: int, reason: str) -> None:
    PhaseOneJob.objects.filter(pk=job_id).exclude(status=PhaseOneJob.Status.DONE).update(
        status=PhaseOneJob.Status.FAILED,
        error=reason[:2000],
        finished_at=timezone.now(),
        lease_until=None,
    )


def run_of(job_id: int) -> int:
    return PhaseOneJob.objects.values_list("run_id", flat=True).get(pk=job_id)


def retry_delay(attempts: int, retry_after: float | None) -> float:
    """Exponential backoff with full jitter, never sooner than the server asked."""
    return retry.backoff_delay(
        attempts,
        base=settings.MEMORYUI_RETRY_BASE_SECONDS,
        cap=60.0,
        jitter=True,
        retry_after=retry_after,
    )


@dataclass(frozen=True)
class RetryLater:
    """A step met a transient model error and may be tried again after ``delay`` seconds."""

    delay: float
    error: llm.TransientModelError


# The steps of a generation, each called by its Celery task and by ``run_inline`` alike:
# ``phase_one_step`` per job, ``next_steps`` after each, ``phase_two_step`` once.


def phase_one_step(job_id: int) -> RetryLater | None:
    """Phase one for one job: done, failed for good after ``MAX_ATTEMPTS``, or handed
    back (released) to be tried again after the returned delay."""
    try:
        process_job(job_id)
    except llm.TransientModelError as exc:
        attempts = release_for_retry(job_id, str(exc))
        if attempts < MAX_ATTEMPTS:
            return RetryLater(retry_delay(attempts, exc.retry_after), exc)
        fail_job(job_id, f"gave up after {attempts} attempts: {exc}")
    return None


def phase_two_step(run_id: int, attempt: int) -> RetryLater | None:
    """Phase two for a run, ``attempt`` counting from 1: done, failed for good at
    ``MAX_ATTEMPTS``, or to be tried again after the returned delay."""
    try:
        consolidate(run_id)
    except llm.TransientModelError as exc:
        if attempt >= MAX_ATTEMPTS:
            fail_run(run_id, f"Phase two gave up after {attempt} attempts: {exc}")
            return None
        return RetryLater(retry_delay(attempt, exc.retry_after), exc)
    return None


@dataclass(frozen=True)
class NextSteps:
    jobs: list[int]  # claimed: send (or run) each
    phase_two: bool  # True for the one caller that moved the run to phase two


def next_steps(run_id: int, limit: int | None = None) -> NextSteps:
    """What follows a phase-one job (or the start of a run): keep the window of jobs full,
    and start phase two once none is left."""
    jobs = claim_window(run_id, limit)
    return NextSteps(jobs, finish_phase_one(run_id))


def finish_phase_one(run_id: int) -> bool:
    """Move the run to phase two once no job is left; True for the one caller that did."""
    pending = PhaseOneJob.objects.filter(
        run_id=run_id, status__in=[PhaseOneJob.Status.QUEUED, PhaseOneJob.Status.RUNNING]
    )
    if pending.exists():
        return False
    return bool(
        GenerationRun.objects.filter(pk=run_id, status=GenerationRun.Status.EXTRACTING).update(
            status=GenerationRun.Status.CONSOLIDATING, phase_two_dispatched_at=timezone.now()
        )
    )


@dataclass(frozen=True)
class Stalled:
    jobs: list[int]
    runs: list[int]


def take_stalled(now: datetime | None = None) -> Stalled:
    """The work of active runs whose task message was lost (a worker died between
    marking a job sent and sending it, or holding a message the broker never gave
    back), and mark it sent again: phase-one jobs sent a lease ago that no worker holds
    now, and runs waiting for phase two as long. A copy of a message that was not lost
    after all does nothing: jobs and phase two are claimed before they run."""
    now = now or timezone.now()
    stale = now - timedelta(seconds=settings.MEMORYUI_JOB_LEASE_SECONDS)
    with transaction.atomic():
        jobs = list(
            PhaseOneJob.objects.filter(
                run__status=GenerationRun.Status.EXTRACTING, dispatched_at__lt=stale
            )
            .filter(_takeable(now))
            .values_list("pk", flat=True)
        )
        PhaseOneJob.objects.filter(pk__in=jobs).update(dispatched_at=now)
        runs = list(
            GenerationRun.objects.filter(
                status=GenerationRun.Status.CONSOLIDATING, phase_two_dispatched_at__lt=stale
            )
            .filter(Q(phase_two_lease_until__isnull=True) | Q(phase_two_lease_until__lt=now))
            .values_list("pk", flat=True)
        )
        GenerationRun.objects.filter(pk__in=runs).update(phase_two_dispatched_at=now)
    return Stalled(jobs=jobs, runs=runs)


# --- phase two --------------------------------------------------------------------


def _raw_memory_texts(run: GenerationRun) -> dict[str, str]:
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
        _raw_memory_texts(run).values(),
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
        client=_client(config),
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


# --- running without a worker ------------------------------------------------------


def run_inline(
    run_id: int,
    *,
    threads: int | None = None,
    sleep: Callable[[float], None] = time.sleep,
    progress: Callable[[str, int, int], None] | None = None,
) -> GenerationRun:
    """Run a whole generation in this process (``manage.py generate --wait`` and tests),
    with the steps the Celery tasks call: phase one with up to ``threads`` model calls at
    once (default: the layout's concurrency), then phase two. ``progress`` is called with
    ("phase 1", rollouts finished, rollouts) after each rollout and ("phase 2", 0 then 1,
    1) around phase two."""
    run = GenerationRun.objects.get(pk=run_id)
    workers = threads or int(run.settings_snapshot.get("concurrency", 8))
    total = run.jobs.count()
    finished = [
        run.jobs.filter(status__in=[PhaseOneJob.Status.DONE, PhaseOneJob.Status.FAILED]).count()
    ]
    lock = threading.Lock()
    if progress is not None:
        progress("phase 1", finished[0], total)

    def work(job_id: int) -> None:
        try:
            while (again := phase_one_step(job_id)) is not None:
                sleep(again.delay)
            if progress is not None:
                with lock:
                    finished[0] += 1
                    progress("phase 1", min(finished[0], total), total)
        finally:
            if workers > 1:
                close_old_connections()
                connection.close()

    phase_two_starts = False

    def advance() -> list[int]:
        nonlocal phase_two_starts
        steps = next_steps(run_id, limit=workers)
        phase_two_starts = phase_two_starts or steps.phase_two
        return steps.jobs

    if workers == 1:
        while ids := advance():
            for job_id in ids:
                work(job_id)
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            running = {pool.submit(work, job_id) for job_id in advance()}
            while running:
                done, running = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    future.result()
                running |= {pool.submit(work, job_id) for job_id in advance()}
    if progress is not None:
        progress("phase 1", total, total)
    if phase_two_starts:
        if progress is not None:
            progress("phase 2", 0, 1)
        attempt = 1
        while (again := phase_two_step(run_id, attempt)) is not None:
            sleep(again.delay)
            attempt += 1
        run = GenerationRun.objects.get(pk=run_id)
        if progress is not None and run.status != GenerationRun.Status.FAILED:
            progress("phase 2", 1, 1)
    return GenerationRun.objects.get(pk=run_id)
