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

Its parts, each using only those named before it: ``model_calls`` (the model, the
settings), ``leases``, ``runs`` (start, fail, cancel, progress), ``extraction`` (phase
one), ``consolidating`` (phase two) and ``steps`` (what the tasks and ``run_inline``
call).
"""

from __future__ import annotations

from .consolidating import (
    consolidate,
    raw_memory_texts,
)
from .extraction import (
    cache_key,
    claim_window,
    fail_job,
    finish_phase_one,
    process_job,
    release_for_retry,
    run_of,
)
from .leases import (
    new_lease,
    renewing,
)
from .model_calls import (
    ModelAccess,
    model_access,
    model_call,
    model_client,
    model_config,
    settings_for,
)
from .runs import (
    GenerationUnavailable,
    Progress,
    RunConflict,
    already_extracted,
    cancel_run,
    fail_run,
    progress,
    stalled_since,
    start_run,
)
from .steps import (
    MAX_ATTEMPTS,
    NextSteps,
    RetryLater,
    Stalled,
    next_steps,
    phase_one_step,
    phase_two_step,
    retry_delay,
    run_inline,
    take_stalled,
)

__all__ = [
    "GenerationUnavailable",
    "MAX_ATTEMPTS",
    "ModelAccess",
    "NextSteps",
    "Progress",
    "RetryLater",
    "RunConflict",
    "Stalled",
    "already_extracted",
    "cache_key",
    "cancel_run",
    "claim_window",
    "consolidate",
    "fail_job",
    "fail_run",
    "finish_phase_one",
    "model_access",
    "model_call",
    "model_client",
    "model_config",
    "new_lease",
    "next_steps",
    "phase_one_step",
    "phase_two_step",
    "process_job",
    "progress",
    "raw_memory_texts",
    "release_for_retry",
    "renewing",
    "retry_delay",
    "run_inline",
    "run_of",
    "settings_for",
    "stalled_since",
    "start_run",
    "take_stalled",
]
