"""Phase one (extraction): one job per rollout, a window of them claimed at a time
(``claim_window``), each run under a lease (``process_job``) or its result reused by
content (``cache_key``); the last job to finish moves the run to phase two
(``finish_phase_one``), exactly once."""

from __future__ import annotations

import hashlib
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from generation import llm, phase_one, prompts

from .. import observability
from ..models import GenerationRun, Layout, PhaseOneJob, PhaseOneResult, RolloutSummary
from .leases import new_lease, renewing
from .model_calls import model_call


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
            call=model_call(snapshot, "phase_one_model"),
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
