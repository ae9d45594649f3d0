"""A whole generation run through real Celery worker processes on the Redis broker,
including a worker killed in the middle of it."""

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis
from django.db import connection

from generation.fake_openai import FakeOpenAI
from memoryui import pipeline
from memoryui.celery import app
from memoryui.importer import import_workspace
from memoryui.models import GenerationRun, GenerationSettings, Layout, PhaseOneJob, Proposal

ROOT = Path(__file__).resolve().parent.parent
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/9")

pytestmark = pytest.mark.django_db(transaction=True)


def database_url() -> str:
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


@pytest.fixture
def broker():
    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    yield REDIS_URL
    client.flushdb()


@pytest.fixture
def slow_model(settings):
    with FakeOpenAI() as server:
        server.delay = 0.4  # every answer takes 0.4 s, like a real model, only faster
        settings.OPENAI_API_KEY = ""
        settings.OPENAI_BASE_URL = server.base_url
        yield server


def start_worker(broker_url: str, model_url: str, name: str, tmp: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "CELERY_BROKER_URL": broker_url,
        "CELERY_VISIBILITY_TIMEOUT": "4",
        "CELERY_UNACKED_RESTORE_INTERVAL": "1",
        "CELERY_UNACKED_RESTORE_THROTTLE": "1",
        "OPENAI_BASE_URL": model_url,
        "OPENAI_API_KEY": "",
        "MEMORYUI_JOB_LEASE_SECONDS": "4",
        "MEMORYUI_RECOVERY_SECONDS": "1",
        "MEMORYUI_RETRY_BASE_SECONDS": "0",
        "DJANGO_ALLOW_ASYNC_UNSAFE": "",
    }
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "memoryui",
            "worker",
            "--beat",
            f"--schedule={tmp / f'beat-{name}'}",
            "--pool=threads",
            "--concurrency=4",
            "--loglevel=WARNING",
            "-n",
            f"{name}-{uuid.uuid4().hex[:6]}@%h",
            "--without-heartbeat",
            "--without-gossip",
            "--without-mingle",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop(worker: subprocess.Popen, sig: int = signal.SIGTERM) -> str:
    """Stop the worker (once) and return everything it printed."""
    if hasattr(worker, "log"):
        return worker.log
    if worker.poll() is None:
        os.killpg(worker.pid, sig)
    try:
        out, _ = worker.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(worker.pid, signal.SIGKILL)
        out, _ = worker.communicate()
    worker.log = out.decode(errors="replace")
    return worker.log


def jobs_report(run_id: int) -> str:
    jobs = PhaseOneJob.objects.filter(run_id=run_id).order_by("pk")
    run = GenerationRun.objects.get(pk=run_id)
    lines = [f"run {run.status}, phase two lease {run.phase_two_lease_until}"]
    lines += [
        f"job {j.pk}: {j.status} sent {j.dispatched_at} lease {j.lease_until} tries {j.attempts}"
        for j in jobs
    ]
    return "\n".join(lines)


def wait_for(condition, timeout: float, what: str, worker=None, run_id=None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if worker is not None and worker.poll() is not None:
            raise AssertionError(f"worker exited while waiting for {what}:\n{stop(worker)}")
        time.sleep(0.2)
    report = jobs_report(run_id) if run_id else ""
    log = stop(worker) if worker is not None else ""
    raise AssertionError(f"timed out waiting for {what}\n{report}\nworker log:\n{log}")


def test_a_run_survives_a_worker_killed_mid_run(broker, slow_model, fixtures_dir, tmp_path):
    from generation.tasks import start_generation

    import_workspace(fixtures_dir / "medium-300" / "workspace", "medium")
    layout = Layout.objects.get(workspace__name="medium", memories_dir="memories/engineering")
    GenerationSettings.objects.create(layout=layout, concurrency=4)
    # Only the first 24 rollouts, to keep the test short.
    run = pipeline.start_run(layout)
    keep = list(run.jobs.order_by("pk").values_list("pk", flat=True)[:24])
    run.jobs.exclude(pk__in=keep).delete()

    first = start_worker(broker, slow_model.base_url, "first", tmp_path)
    done = run.jobs.filter(status=PhaseOneJob.Status.DONE)
    try:
        with app.connection_for_write(broker) as conn:
            start_generation.apply_async((run.pk,), connection=conn)
        wait_for(lambda: done.count() >= 6, 60, "six rollouts done", first)
        # From now on the model keeps its answers: the jobs asking it stay in flight
        # until the kill, whatever the timing of the worker's threads.
        slow_model.hold()
        wait_for(lambda: slow_model.held > 0, 30, "a model call in flight", first)
    finally:
        stop(first, signal.SIGKILL)  # no warm shutdown: tasks in flight are lost with it
        slow_model.release()
    running = run.jobs.filter(status=PhaseOneJob.Status.RUNNING).count()
    assert running > 0, "the kill interrupted work in progress"
    killed_at = done.count()
    assert killed_at < 24

    second = start_worker(broker, slow_model.base_url, "second", tmp_path)
    try:
        wait_for(
            lambda: GenerationRun.objects.get(pk=run.pk).status == GenerationRun.Status.DONE,
            120,
            "the run to finish on the second worker",
            second,
            run.pk,
        )
    finally:
        log = stop(second)
    run.refresh_from_db()
    assert run.jobs.filter(status=PhaseOneJob.Status.DONE).count() == 24, log
    assert Proposal.objects.filter(run=run).exists()
    phase_one_calls = [r for r in slow_model.requests if "tools" not in r]
    # Jobs interrupted by the kill ran again; none that had finished was repeated.
    assert 24 <= len(phase_one_calls) <= 24 + running
