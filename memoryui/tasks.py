"""Celery tasks: thin wrappers that take ids and call plain functions. Each is named
explicitly (``memoryui.tasks.<function>``): a queued message names its task, so moving or
renaming a function must not change the name (former names are forwarded below). Importing this
module loads the Celery app (``memoryui.celery``) the tasks are sent with. The tasks sit on
top of the services they run: a page or command that sends one imports it where it sends
it (so that those that send none never load Celery); a service names it to
``memoryui.task_queue`` instead, never importing this module."""

import logging
import os
from pathlib import Path

from celery.signals import worker_ready
from django.contrib.auth import get_user_model
from django.db import OperationalError
from django.utils import timezone

from generation import llm, shared_results
from memoryui import (
    curation,
    entry_lineage,
    forgetting,
    judging,
    live_review,
    notifications,
    pipeline,
    recovery,
    search,
    webhooks,
    workspaces,
    writeback,
)
from memoryui.celery import app
from memoryui.models import (
    GenerationRun,
    ImportRun,
    MemoryVersion,
    Proposal,
    SkillFileVersion,
    WorkerHeartbeat,
    Workspace,
)

logger = logging.getLogger(__name__)

# When a worker starts (the web server does the first in wsgi.py): write-backs and exports
# that died are finished or undone, and what dead workers left in the scratch folder (local
# copies of the archives they imported) is removed. Connected here, where the worker has
# loaded the tasks and Django, never merely on start-up of Django: migrations and other
# management commands must not touch workspaces.
worker_ready.connect(recovery.recover_at_start, weak=False, dispatch_uid="memoryui-recover")
worker_ready.connect(workspaces.sweep_scratch, weak=False, dispatch_uid="memoryui-sweep-scratch")


@worker_ready.connect(weak=False, dispatch_uid="memoryui-ready-file")
def _say_ready(**_: object) -> None:
    """With MEMORYUI_WORKER_READY_FILE (bin/start sets it), write that file once the
    worker is up: bin/start prints the login after the worker's own start-up lines."""
    ready = os.environ.get("MEMORYUI_WORKER_READY_FILE")
    if ready:
        Path(ready).write_text(f"{os.getpid()}\n")


@app.task(name="memoryui.tasks.reimport_workspace", acks_late=True)
def reimport_workspace(workspace_id: int, user_id: int | None = None) -> None:
    """Re-run the import of a workspace from its recorded source, if it is under the
    workspace roots. Safe to run twice: the import is a sync that skips unchanged files."""
    workspace = Workspace.objects.filter(pk=workspace_id).first()
    if workspace is None:
        return
    user = get_user_model().objects.filter(pk=user_id).first() if user_id else None
    _lint_what_came(workspaces.reimport(workspace, user))


@app.task(name="memoryui.tasks.import_new_workspace", acks_late=True)
def import_new_workspace(job_id: int) -> None:
    """Create a workspace from an uploaded snapshot or a registered directory, or merge
    a sandbox's upload to the remote snapshot store into its workspace.

    An upload with a later upload of the same sandbox queued behind it (a backlog) has
    the newest merged first: the older then only fills in what the workspace lacks, and
    the newest's task finds it done."""
    newest = workspaces.newest_upload_queued_after(job_id)
    if newest is not None:
        _import_job(newest)
    _import_job(job_id)


def _import_job(job_id: int) -> None:
    try:
        job = workspaces.run_import_job(job_id)
    except workspaces.ImportAgain:
        import_new_workspace.apply_async((job_id,), countdown=1)
        return
    if job is None or job.workspace_id is None:
        return
    if not workspaces.imports_pending(job.workspace_id):
        # The last of a backlog lints what all of it recorded (``lint_workspace`` leaves
        # it while imports of the workspace are pending).
        lint_workspace.delay(job.workspace_id)


@app.task(name="memoryui.tasks.sync_workspaces", acks_late=True)
def sync_workspaces() -> None:
    """Periodic (Celery beat, every minute): re-import each workspace whose sync
    interval has passed, each claimed by one beat only."""
    for workspace_id in workspaces.claim_due_syncs():
        sync_workspace.delay(workspace_id)


@app.task(name="memoryui.tasks.sync_workspace", acks_late=True)
def sync_workspace(workspace_id: int) -> None:
    run = workspaces.sync_workspace(workspace_id)
    if run is not None:
        _lint_what_came(run)


def _lint_what_came(run: ImportRun) -> None:
    """An import that brought files queues the lint of the versions it recorded."""
    if run.added or run.changed:
        lint_workspace.delay(run.workspace_id)


@app.task(name="memoryui.tasks.index_search", acks_late=True, ignore_result=True)
def index_search(workspace_id: int | None = None) -> None:
    """Give the documents an import wrote their search vectors (PostgreSQL), after its
    commit; periodic (Celery beat) without a workspace, for those a lost task left."""
    search.index_pending(workspace_id)


@app.task(name="memoryui.tasks.lint_workspace", acks_late=True)
def lint_workspace(workspace_id: int) -> None:
    """Lint the latest version of each document and skill file of the workspace's
    layouts, ahead of their review and of the sandboxes' restores (a sandbox would
    otherwise wait on the scan of a large imported ``MEMORY.md``). Left while imports of
    the workspace are queued or running (sandboxes' persists, merged in a backlog): the
    last of them to finish queues it again, so the versions a backlog recorded are
    linted once, after it, rather than each superseded one in turn. Then the figures
    of usage the pages keep per import are computed ahead (``forgetting.keep_ahead``)."""
    if workspaces.imports_pending(workspace_id):
        return  # a backlog of merges: its last one queues the lint again
    workspace = Workspace.objects.filter(pk=workspace_id).first()
    if workspace is not None:
        writeback.lint_latest(workspace)
        forgetting.keep_ahead(workspace)


@app.task(
    name="memoryui.tasks.phase_one_task",
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=None,
)
def phase_one_task(self, job_id: int) -> None:
    """Phase one for one rollout, then keep the layout's window of jobs full and start
    phase two after the last one."""
    again = pipeline.phase_one_step(job_id)
    if again is not None:
        raise self.retry(countdown=again.delay) from again.error
    advance_run(pipeline.run_of(job_id))


def advance_run(run_id: int) -> None:
    steps = pipeline.next_steps(run_id)
    for next_id in steps.jobs:
        phase_one_task.delay(next_id)
    if steps.phase_two:
        phase_two_task.delay(run_id)


@app.task(
    name="memoryui.tasks.phase_two_task",
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=None,
)
def phase_two_task(self, run_id: int) -> None:
    """Phase two for a run: consolidate into a proposal for review."""
    again = pipeline.phase_two_step(run_id, attempt=self.request.retries + 1)
    if again is not None:
        raise self.retry(countdown=again.delay) from again.error


@app.task(name="memoryui.tasks.recover_stalled_runs", acks_late=True)
def recover_stalled_runs() -> None:
    """Periodic (Celery beat): send again the import jobs and the work of active runs
    whose task message was lost with a worker (or whose worker's lease ran out), and keep
    every extracting run's window of jobs full."""
    try:
        stalled_imports = workspaces.take_stalled_imports()
    except OperationalError as exc:  # SQLite: an import's one transaction holds the writes
        logger.warning("import jobs not looked at this time: %s", exc)
        stalled_imports = []
    for import_id in stalled_imports:
        import_new_workspace.delay(import_id)
    stalled = pipeline.take_stalled()
    for job_id in stalled.jobs:
        phase_one_task.delay(job_id)
    for run_id in stalled.runs:
        phase_two_task.delay(run_id)
    extracting = GenerationRun.objects.filter(status=GenerationRun.Status.EXTRACTING)
    for run_id in extracting.values_list("pk", flat=True):
        advance_run(run_id)


@app.task(name="memoryui.tasks.start_generation", acks_late=True)
def start_generation(run_id: int) -> None:
    """Fill the first window of phase-one jobs (or go straight to phase two)."""
    advance_run(run_id)


# Named as when it lived in memoryui.webhooks: messages queued then still run.
@app.task(name="memoryui.webhooks.deliver_webhook", bind=True, acks_late=True, max_retries=None)
def deliver_webhook(self, delivery_id: int) -> None:
    """POST a webhook delivery; a failing receiver is tried again with backoff."""
    retry_in = webhooks.attempt(delivery_id)
    if retry_in is not None:
        raise self.retry(countdown=retry_in)


@app.task(name="memoryui.tasks.send_notification", bind=True, acks_late=True, max_retries=None)
def send_notification(self, notification_id: int) -> None:
    """Mail one notification; a mail server that does not take it is tried again later."""
    retry_in = notifications.send_one(notification_id)
    if retry_in is not None:
        raise self.retry(countdown=retry_in)


@app.task(name="memoryui.tasks.send_digests", ignore_result=True)
def send_digests() -> None:
    """Periodic (Celery beat, daily): one digest per daily watch with news."""
    notifications.send_digests()


@app.task(name="memoryui.tasks.lint_version", acks_late=True)
def lint_version(model: str, version_id: int) -> None:
    """Lint a version just saved (``versioning.create``), ahead of its write-back."""
    versions = (
        MemoryVersion.objects.all() if model == "MemoryVersion" else SkillFileVersion.objects.all()
    )
    found = versions.select_related("layout__workspace", "blob").filter(pk=version_id).first()
    if found is not None:  # gone: its layout was deleted meanwhile
        writeback.lint_ahead(found)


@app.task(name="memoryui.tasks.lint_proposal", acks_late=True)
def lint_proposal(proposal_id: int) -> None:
    """Lint a proposal just made (``proposal_lint``), ahead of its review; where the
    cache is shared, also find its duplicates (kept there by what they depend on), which
    its first review would otherwise look for while the reviewer waits."""
    found = Proposal.objects.select_related("layout__workspace").filter(pk=proposal_id).first()
    if found is not None:  # gone: its layout was deleted meanwhile
        writeback.lint_proposal(found)
        if shared_results.sharing():
            curation.duplicates(curation.document_reviews(found), acks=found.duplicate_acks)


@app.task(name="memoryui.tasks.compare_version", acks_late=True)
def compare_version(version_id: int) -> None:
    """Compare a new MEMORY.md version with the one before it (``versioning``), where the
    comparison is shared (``review_cache``): no page computes it while somebody waits."""
    found = MemoryVersion.objects.filter(pk=version_id).first()
    if found is not None:  # gone: its layout was deleted meanwhile
        entry_lineage.compare_with_previous(found)


@app.task(name="memoryui.tasks.judge_entries", bind=True, acks_late=True, max_retries=6)
def judge_entries(self, proposal_id: int) -> None:
    """The model judge on a proposal's checked entries (the layout has it on): a verdict
    per text, kept; a busy or failing model is tried again with backoff."""
    try:
        judging.judge_proposal(proposal_id)
    except llm.TransientModelError as exc:
        delay = pipeline.retry_delay(self.request.retries + 1, exc.retry_after)
        raise self.retry(countdown=delay) from exc


@app.task(name="memoryui.tasks.heartbeat", ignore_result=True)
def heartbeat() -> None:
    """Periodic (Celery beat): record that a worker is taking tasks, for ``/healthz``;
    and drop what live review no longer needs (``live_review.prune``)."""
    WorkerHeartbeat.objects.update_or_create(name="worker", defaults={"seen_at": timezone.now()})
    live_review.prune()


# These tasks were registered as ``generation.tasks.<name>`` until they moved here.
# Messages queued under those names by an older version (or its beat) still run: each
# former name sends its arguments on to the task's current name.
def _forward_to(task):
    def forward(*args, **kwargs):
        task.apply_async(args, kwargs)

    return forward


FORMER_NAMES = {
    "generation.tasks.reimport_workspace": reimport_workspace,
    "generation.tasks.phase_one_task": phase_one_task,
    "generation.tasks.phase_two_task": phase_two_task,
    "generation.tasks.recover_stalled_runs": recover_stalled_runs,
    "generation.tasks.start_generation": start_generation,
}
for _former, _task in FORMER_NAMES.items():
    app.task(name=_former, acks_late=True)(_forward_to(_task))
