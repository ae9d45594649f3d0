"""Imports (a dashboard upload, a sandbox's upload to the remote snapshot store) whose
worker dies in the middle, with real Celery processes on the Redis broker and the
uploads in an S3-compatible bucket (moto), so that each import reads a local copy in
its scratch folder: SIGKILL of the whole worker, and of only its pool process (as the
out-of-memory killer does). Beat sends the job again once the dead worker's lease has
run out, another worker (or a new pool process) takes it over, and the job completes
exactly once, with nothing left in the scratch folder. Leases are shortened to 3 s
renewed every second, beat looks every second (as in test_celery_worker.py)."""

import io
import os
import signal
import socket
import subprocess
import sys
import tarfile
import time
import uuid
from pathlib import Path

import boto3
import pytest
import redis
from django.urls import reverse

from memoryui import object_storage, workspaces
from memoryui.celery import app
from memoryui.models import ImportJob, ImportRun, Workspace, WorkspaceFile
from memoryui.tasks import import_new_workspace
from tests.factories import make_user
from tests.test_celery_worker import ROOT, database_url, stop
from tests.test_object_storage import BUCKET, s3  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)

FILLER = 12_000  # small files, so that the import takes seconds, not a fraction of one


@pytest.fixture(scope="module")
def archive(tmp_path_factory, fixtures_dir) -> Path:
    """medium-300's workspace and 12,000 small notes: a tar of about 15 MB."""
    path = tmp_path_factory.mktemp("archive") / "big.tar"
    with tarfile.open(path, "w") as tar:
        tar.add(fixtures_dir / "medium-300" / "workspace", arcname=".")
        for i in range(FILLER):
            data = f"note {i}: {uuid.uuid4().hex * 8}\n".encode()
            member = tarfile.TarInfo(f"notes/n{i:05}.txt")
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    return path


def put(s3_url: str, key: str, path: Path) -> str:
    boto3.client("s3", endpoint_url=s3_url).upload_file(str(path), BUCKET, key)
    alias, _, name = key.partition("/")
    return f"{object_storage.PREFIX}{alias}/{name}"


def environment(s3_url: str, broker: str, var: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": database_url(),
        "CELERY_BROKER_URL": broker,
        "CELERY_VISIBILITY_TIMEOUT": "3600",  # the broker gives nothing back: beat must
        "MEMORYUI_VAR_DIR": str(var),
        "MEMORYUI_STORAGE": "s3",
        "MEMORYUI_S3_ENDPOINT_URL": s3_url,
        "MEMORYUI_S3_BUCKET": BUCKET,
        "MEMORYUI_S3_REGION": "us-east-1",
        "MEMORYUI_JOB_LEASE_SECONDS": "3",
        "MEMORYUI_LEASE_RENEW_SECONDS": "1",
        "MEMORYUI_RECOVERY_SECONDS": "1",
        # A merge's progress at once: mid_import watches it to kill a worker mid-merge.
        "MEMORYUI_MERGE_PROGRESS_AFTER_SECONDS": "0",
        "OPENAI_API_KEY": "",
        "DJANGO_ALLOW_ASYNC_UNSAFE": "",
    }


def celery(env: dict[str, str], *argv: str) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "memoryui", *argv],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return process


def worker(env: dict[str, str], name: str, pool: str, *more: str) -> subprocess.Popen:
    node = f"{name}-{uuid.uuid4().hex[:6]}@{socket.gethostname()}"
    return celery(
        env,
        "worker",
        *more,
        "-Q",
        "celery",
        f"--pool={pool}",
        "--concurrency=1",
        "--loglevel=WARNING",
        "-n",
        node,
        "--without-heartbeat",
        "--without-gossip",
        "--without-mingle",
    )


def beat(env: dict[str, str], tmp: Path) -> subprocess.Popen:
    return celery(env, "beat", f"--schedule={tmp / 'beat-schedule'}", "--loglevel=WARNING")


def send(job: ImportJob, broker: str) -> None:
    with app.connection_for_write(broker) as conn:
        import_new_workspace.apply_async((job.pk,), connection=conn)


def wait_for(condition, timeout: float, what: str, *processes) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    logs = "\n".join(stop(p) for p in processes)
    job = ImportJob.objects.order_by("-pk").first()
    raise AssertionError(f"timed out waiting for {what}; job {job.__dict__}\n{logs}")


def mid_import(job: ImportJob, var: Path):
    """The job runs, its archive copied to its scratch folder, and files are being read."""
    folder = var / "scratch" / f"import-{job.pk}"

    def check() -> bool:
        progress = workspaces.read_progress(job.pk)
        return folder.is_dir() and progress.get("stage") == "read" and progress["files"] > 0

    return check


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found += [int(p) for p in text]
    return found


def assert_imported_once(job: ImportJob, name: str, log: str) -> None:
    job.refresh_from_db()
    assert job.status == ImportJob.Status.DONE, (job.error, log)
    assert job.attempts == 2 and job.taken_over_at is not None, log
    assert f"event=takeover kind=import job={job.pk}\n" in log, log
    workspace = Workspace.objects.get(name=name)
    # One import run, holding every file once: the dead worker's part was undone.
    assert list(ImportRun.objects.filter(workspace=workspace).values_list("pk", flat=True)) == [
        job.run_id
    ]
    files = WorkspaceFile.objects.filter(workspace=workspace)
    assert files.count() == job.run.added > FILLER
    assert files.filter(path__startswith="notes/").count() == FILLER


@pytest.fixture
def stored(s3, settings):  # noqa: F811 (the fixture imported above)
    """This process reads the progress files from the bucket, as web does."""
    from tests.test_object_storage import s3_storages  # noqa: PLC0415

    settings.STORAGES = s3_storages(s3)
    return s3


def test_a_dashboard_upload_whose_worker_is_killed_is_imported_once_by_another(
    stored, broker, archive, tmp_path, client
):
    source = put(stored, f"uploads/{uuid.uuid4().hex}/big.tar", archive)
    user = make_user("ann", staff=True)
    job = ImportJob.objects.create(
        name="big",
        kind=ImportJob.Kind.UPLOAD,
        source_path=source,
        original_name="big.tar",
        created_by=user,
    )
    var = tmp_path / "var"  # both workers on one machine: one var directory
    env = environment(stored, broker, var)
    first = worker(env, "first", "threads")
    processes = [first]
    try:
        send(job, broker)
        wait_for(mid_import(job, var), 120, "the import to be reading files", first)
        stop(first, signal.SIGKILL)
        # The message the dead worker held is gone for good (no redelivery): beat's turn.
        redis.Redis.from_url(broker).delete("unacked", "unacked_index")
        assert ImportJob.objects.get(pk=job.pk).status == ImportJob.Status.RUNNING
        assert (var / "scratch" / f"import-{job.pk}").is_dir()  # left by the dead worker

        second = worker(env, "second", "threads")
        processes += [second, beat(env, tmp_path)]
        done = ImportJob.objects.filter(pk=job.pk, status=ImportJob.Status.DONE)
        wait_for(done.exists, 180, "another worker to finish the import", *processes)
    finally:
        log = "".join(stop(p) for p in processes)
    assert_imported_once(job, "big", log)
    assert list((var / "scratch").iterdir()) == []
    # The upload was kept until it was imported, and the job's page says what happened.
    client.force_login(user)
    page = client.get(reverse("memoryui:import_detail", args=["big", job.run_id]))
    assert "another worker took the import over" in page.content.decode()


def test_a_sandbox_upload_whose_pool_process_is_killed_is_merged_once(
    stored, broker, archive, tmp_path
):
    source = put(stored, "snapshots/fleet/snap-1.tar", archive)
    workspace = Workspace.objects.create(
        name="fleet",
        source_kind=Workspace.SourceKind.SNAPSHOT,
        source_path="storage://snapshots/fleet",
    )
    job = ImportJob.objects.create(
        name="fleet",
        kind=ImportJob.Kind.SANDBOX,
        source_path=source,
        original_name="snap-1",
        workspace=workspace,
    )
    var = tmp_path / "var"
    env = environment(stored, broker, var)
    main = worker(env, "only", "prefork")
    processes = [main, beat(env, tmp_path)]
    try:
        send(job, broker)
        wait_for(mid_import(job, var), 120, "the merge to be reading files", *processes)
        pool = children(main.pid)
        assert len(pool) == 1, pool
        os.kill(pool[0], signal.SIGKILL)  # as the out-of-memory killer does
        done = ImportJob.objects.filter(pk=job.pk, status=ImportJob.Status.DONE)
        wait_for(done.exists, 180, "a new pool process to finish the merge", *processes)
    finally:
        log = "".join(stop(p) for p in processes)
    assert "WorkerLostError" in log or "SIGKILL" in log, log
    assert_imported_once(job, "fleet", log)
    assert list((var / "scratch").iterdir()) == []


def test_with_the_file_system_broker_a_killed_workers_import_is_taken_over_after_a_restart(
    stored, archive, tmp_path
):
    """bin/start's broker gives nothing back (kombu deletes a message as it reads it) and
    its beat runs in its one worker: the import goes on once that worker is started again."""
    source = put(stored, f"uploads/{uuid.uuid4().hex}/big.tar", archive)
    # Queued a while ago and never sent: the first beat of the worker sends it.
    job = ImportJob.objects.create(
        name="dev",
        kind=ImportJob.Kind.UPLOAD,
        source_path=source,
        original_name="big.tar",
        created_at=workspaces.timezone.now() - workspaces.timedelta(seconds=10),
    )
    var = tmp_path / "var"
    env = {**environment(stored, "filesystem://", var)}
    beat_in = ("--beat", f"--schedule={tmp_path / 'beat-schedule'}")
    first = worker(env, "dev", "threads", *beat_in)
    processes = [first]
    try:
        wait_for(mid_import(job, var), 120, "the import to be reading files", first)
        stop(first, signal.SIGKILL)
        assert ImportJob.objects.get(pk=job.pk).status == ImportJob.Status.RUNNING
        again = worker(env, "dev", "threads", *beat_in)  # the same worker, started again
        processes.append(again)
        done = ImportJob.objects.filter(pk=job.pk, status=ImportJob.Status.DONE)
        wait_for(done.exists, 180, "the restarted worker to finish the import", again)
    finally:
        log = "".join(stop(p) for p in processes)
    assert_imported_once(job, "dev", log)
    assert list((var / "scratch").iterdir()) == []


def test_a_worker_starting_removes_what_dead_processes_left_in_the_scratch_folder(
    settings, tmp_path
):
    settings.VAR_DIR = tmp_path
    root = object_storage.scratch_root()
    held = ImportJob.objects.create(
        name="a",
        kind=ImportJob.Kind.UPLOAD,
        source_path="x",
        status=ImportJob.Status.RUNNING,
        lease_until=workspaces.timezone.now() + workspaces.timedelta(seconds=60),
    )
    dead = ImportJob.objects.create(
        name="b",
        kind=ImportJob.Kind.UPLOAD,
        source_path="x",
        status=ImportJob.Status.RUNNING,
        lease_until=workspaces.timezone.now() - workspaces.timedelta(seconds=1),
    )
    dead_pid = _a_dead_pid()
    host = socket.gethostname()
    names = [
        f"import-{held.pk}",
        f"import-{dead.pk}",
        "import-999999",
        f"proc-{host}-{os.getpid()}-mine",
        f"proc-{host}-{dead_pid}-left",
        f"proc-other-host-{dead_pid}-theirs",
    ]
    for name in names:
        (root / name).mkdir(parents=True)
        (root / name / "big.tar").write_bytes(b"x" * 1024)
    workspaces.sweep_scratch()
    assert sorted(p.name for p in root.iterdir()) == sorted(
        [
            f"import-{held.pk}",
            f"proc-{host}-{os.getpid()}-mine",
            f"proc-other-host-{dead_pid}-theirs",
        ]
    )


def _a_dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_an_import_whose_workers_died_three_times_fails_saying_so(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    past = workspaces.timezone.now() - workspaces.timedelta(seconds=1)
    job = ImportJob.objects.create(
        name="oom",
        kind=ImportJob.Kind.DIRECTORY,
        source_path=str(tmp_path),
        status=ImportJob.Status.RUNNING,
        attempts=workspaces.MAX_IMPORT_ATTEMPTS,
        lease_until=past,
    )
    left = object_storage.job_folder(job.pk)
    left.mkdir(parents=True)
    (left / "big.tar").write_bytes(b"x")
    # A live worker's job is not taken from it, however often its message arrives.
    ImportJob.objects.filter(pk=job.pk).update(lease_until=past + workspaces.timedelta(seconds=60))
    assert workspaces.run_import_job(job.pk) is None
    ImportJob.objects.filter(pk=job.pk).update(lease_until=past)

    failed = workspaces.run_import_job(job.pk)

    assert failed is not None and failed.status == ImportJob.Status.FAILED
    assert "its worker died 3 times" in failed.error and failed.taken_over_at is not None
    assert not left.exists() and not Workspace.objects.filter(name="oom").exists()


def test_beat_sends_an_import_again_only_once_a_lease_has_passed(settings):
    settings.MEMORYUI_JOB_LEASE_SECONDS = 60
    now = workspaces.timezone.now()
    ago = workspaces.timedelta

    def job(**fields) -> int:
        return ImportJob.objects.create(
            name="j", kind=ImportJob.Kind.UPLOAD, source_path="x", **fields
        ).pk

    fresh = job(created_at=now - ago(seconds=5))
    lost = job(created_at=now - ago(seconds=90))
    old = now - ago(seconds=900)
    held = job(status="running", created_at=old, lease_until=now + ago(seconds=30))
    dead = job(status="running", created_at=old, lease_until=now - ago(seconds=1))
    done = job(status="done", created_at=old)

    assert sorted(workspaces.take_stalled_imports(now)) == sorted([lost, dead])
    # Sent again: not once more at beat's next look, but a lease later if still not taken.
    assert workspaces.take_stalled_imports(now + ago(seconds=30)) == []
    later = workspaces.take_stalled_imports(now + ago(seconds=61))
    # By then the held job's lease (30 s) has run out too: its worker stopped renewing.
    assert sorted(later) == sorted([fresh, lost, dead, held]) and done not in later


def test_a_locked_sqlite_database_skips_the_imports_not_the_runs_recovery(monkeypatch, caplog):
    from django.db import OperationalError  # noqa: PLC0415

    from memoryui import pipeline, tasks  # noqa: PLC0415

    def locked(*args, **kwargs):
        raise OperationalError("database is locked")

    looked = []
    monkeypatch.setattr(workspaces, "take_stalled_imports", locked)
    monkeypatch.setattr(
        pipeline, "take_stalled", lambda: looked.append(1) or pipeline.Stalled([], [])
    )

    tasks.recover_stalled_runs()

    assert looked == [1] and "import jobs not looked at this time" in caplog.text
