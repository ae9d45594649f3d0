"""The steps of a generation, each called by its Celery task and by ``run_inline``
alike: ``phase_one_step`` per job, ``next_steps`` after each, ``phase_two_step`` once;
a transient model error hands a step back to be tried again later (``RetryLater``), and
``take_stalled`` finds the work whose task message was lost."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.db.models import Q
from django.utils import timezone

from generation import llm, retry

from ..models import GenerationRun, PhaseOneJob
from .consolidating import consolidate
from .extraction import (
    claim_window,
    fail_job,
    finish_phase_one,
    process_job,
    release_for_retry,
)
from .runs import fail_run

MAX_ATTEMPTS = 6


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


@dataclass(frozen=True)
class Stalled:
    jobs: list[int]
    runs: list[int]


def _takeable(now: datetime) -> Q:
    """Jobs a worker may take: queued, or running under a lease that has passed."""
    return Q(status=PhaseOneJob.Status.QUEUED) | Q(
        status=PhaseOneJob.Status.RUNNING, lease_until__lt=now
    )


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
