"""Uploads, stored snapshots and exports through Django's storage API: the local
directories stay the default, and with MEMORYUI_STORAGE=s3 they are objects in an
S3-compatible store (moto's server here), so that web and workers share no directory.

The end-to-end tests run gunicorn and a Celery worker as separate processes, each with
its own working directory and MEMORYUI_VAR_DIR; they have in common only PostgreSQL,
Redis and the object store."""

import asyncio
import hashlib
import io
import json
import os
import re
import subprocess
import tarfile
import tracemalloc
from contextlib import suppress
from pathlib import Path
from unittest import mock

import boto3
import botocore.exceptions
import pytest
import requests
from django.conf import settings
from django.core.files.base import ContentFile
from django.test import Client
from django.urls import reverse
from moto.server import ThreadedMotoServer

from generation.export import ExportError
from memoryui import object_storage, snapshots, tokens, workspaces
from memoryui.importer import import_workspace
from memoryui.models import (
    AuditEvent,
    ImportJob,
    ImportRun,
    Membership,
    Role,
    Workspace,
    WorkspaceFile,
)
from memoryui_client import SnapshotClient
from tests.factories import make_user
from tests.test_import import snapshot_path
from tests.test_production import (
    ROOT,
    Deployment,
    big_workspace_archive,
    command,
    csrf,
    database,  # noqa: F401 (a fixture)
    free_port,
    runtime_bin,  # noqa: F401 (a fixture)
)
from tests.test_snapshot_store import APPROVED_MD, SUMMARY_MD, M, S, raw_memory, rollout
from tests.test_workspaces import upload

BUCKET = "memoryui-test"
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "memoryui-test",
    "AWS_SECRET_ACCESS_KEY": "memoryui-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture
def s3(monkeypatch):
    """moto's S3-compatible server on a free port, with an empty bucket; yields its URL."""
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    requests.post(f"{url}/moto-api/reset", timeout=30)  # moto's state is per process
    boto3.client("s3", endpoint_url=url).create_bucket(Bucket=BUCKET)
    try:
        yield url
    finally:
        requests.post(f"{url}/moto-api/reset", timeout=30)
        server.stop()


def objects(url: str) -> dict[str, int]:
    """Every object in the bucket, with its size."""
    listed = boto3.client("s3", endpoint_url=url).list_objects_v2(Bucket=BUCKET)
    return {o["Key"]: o["Size"] for o in listed.get("Contents", [])}


def s3_storages(url: str) -> dict:

    return {
        **settings.STORAGES,
        **{
            alias: {
                "BACKEND": "storages.backends.s3.S3Storage",
                "OPTIONS": {
                    "bucket_name": BUCKET,
                    "location": alias,
                    "endpoint_url": url,
                    "file_overwrite": True,
                    "default_acl": None,
                },
            }
            for alias in ("uploads", "snapshots", "exports")
        },
    }


def small_archive(rid: str = "fleet-1") -> bytes:
    """A sandbox's workspace: a file of its own and one rollout with its memory."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for name, data in [
            ("notes/own.txt", f"only {rid} has this\n".encode()),
            (f"{S}/{rid}.jsonl", rollout(rid, f"task of {rid}")),
            (f"{M}/raw_memories/{rid}.md", raw_memory(rid)),
            (f"{M}/rollout_summaries/{rid}_work.md", f"# {rid}\n".encode()),
            (f"{M}/MEMORY.md", APPROVED_MD),
            (f"{M}/memory_summary.md", SUMMARY_MD),
        ]:
            info = tarfile.TarInfo(f"./{name}")
            info.size, info.mtime, info.mode = len(data), 1_790_000_000, 0o644
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def members(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        return {
            i.name.removeprefix("./"): archive.extractfile(i).read()  # type: ignore[union-attr]
            for i in archive
            if i.isreg()
        }


# --- the local default -----------------------------------------------------------------


@pytest.fixture
def exported(db, settings, tmp_path, workspace_copy):
    """Workspace ``a`` exported as ``nightly`` into the local snapshot directory, and an
    admin's token."""
    settings.MEMORYUI_SNAPSHOT_BASE_PATH = tmp_path / "snapshots"
    import_workspace(workspace_copy(), "a")
    admin = make_user("admin-a")
    Membership.objects.create(workspace=Workspace.objects.get(name="a"), user=admin, role="admin")
    secret = tokens.create_token(admin, "t", ["a", "b"]).secret
    made = Client().post(
        "/api/workspaces/a/exports",
        json.dumps({"snapshot_id": "nightly"}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {secret}",
    )
    assert made.status_code == 201, made.content
    return made.json(), secret


def test_a_local_export_is_where_it_always_was_and_downloads_back_byte_for_byte(exported, settings):
    answer, secret = exported
    target = settings.MEMORYUI_SNAPSHOT_BASE_PATH / "nightly.tar"
    assert answer["path"] == str(target)
    got = Client().get("/api/workspaces/a/exports/nightly", HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert got.status_code == 200
    body = b"".join(got.streaming_content)
    assert body == target.read_bytes() and int(got["Content-Length"]) == len(body)
    assert got["X-Memoryui-Sha256"] == answer["sha256"] == hashlib.sha256(body).hexdigest()


def test_an_export_downloads_only_for_its_own_workspaces_admins(exported, workspace_copy):
    _, secret = exported
    import_workspace(workspace_copy("small-b"), "b")
    viewer = make_user("viewer-a")
    Membership.objects.create(
        workspace=Workspace.objects.get(name="a"), user=viewer, role=Role.VIEWER
    )
    as_viewer = tokens.create_token(viewer, "t", ["a"]).secret

    def get(name: str, snapshot_id: str, token: str) -> int:
        url = f"/api/workspaces/{name}/exports/{snapshot_id}"
        return Client().get(url, HTTP_AUTHORIZATION=f"Bearer {token}").status_code

    assert get("a", "nightly", as_viewer) == 403
    assert get("b", "nightly", secret) in (403, 404)  # b exported no such snapshot
    assert get("a", "never-made", secret) == 404


# --- S3 in this process ------------------------------------------------------------------


def test_with_object_storage_an_upload_leaves_no_file_on_the_web_machine(
    s3, db, settings, tmp_path, fixtures_dir
):
    settings.STORAGES = s3_storages(s3)
    settings.MEMORYUI_UPLOAD_DIR = tmp_path / "uploads"
    staff = make_user("staff", staff=True)
    client = Client()
    client.force_login(staff)
    data = snapshot_path(fixtures_dir, "small-a").read_bytes()
    sent = upload(client, "small-a.tar", data, "dash")
    assert sent.status_code == 302, sent.content[:500]
    job = ImportJob.objects.get()
    # Named after the job (its id: on PostgreSQL, whatever the sequence is at).
    assert job.source_path == f"storage://uploads/dash-{job.pk}.tar"
    assert objects(s3) == {f"uploads/dash-{job.pk}.tar": len(data)}
    assert [p for p in (tmp_path / "uploads").rglob("*") if p.is_file()] == []

    done = workspaces.run_import_job(job.pk)
    assert done is not None and done.status == ImportJob.Status.DONE, done and done.error
    workspace = Workspace.objects.get(name="dash")
    assert workspace.source_path == f"storage://uploads/dash-{job.pk}.tar"
    assert workspace.files.filter(path__endswith="MEMORY.md").exists()
    assert object_storage.read_small("uploads", workspaces.progress_name(job.pk)) is None


def test_an_older_sandbox_upload_merged_after_its_later_one_fetches_only_what_it_adds(
    s3, db, settings, monkeypatch
):
    """A sandbox persisted twice before its merges ran; the later is merged first (newest
    first). The older one's merge adds the raw memory its sandbox's restore lacked, and
    fetches that member alone from object storage (a ranged request), never the archive."""
    settings.STORAGES = s3_storages(s3)
    user = make_user("ops", staff=True)
    secret = tokens.create_token(user, "t", ["fleet"]).secret
    older = small_archive("fleet-1")
    later = io.BytesIO()
    with tarfile.open(fileobj=later, mode="w") as archive:  # the older, less fleet-1's raw memory
        for name, data in members(older).items():
            if name != f"{M}/raw_memories/fleet-1.md":
                info = tarfile.TarInfo(f"./{name}")
                info.size, info.mtime, info.mode = len(data), 1_790_000_000, 0o644
                archive.addfile(info, io.BytesIO(data))
    jobs = []
    for data in (older, later.getvalue()):
        answer = Client().put(
            "/api/workspaces/fleet/snapshots/sandbox-1",
            data,
            content_type="application/x-tar",
            HTTP_AUTHORIZATION=f"Bearer {secret}",
        )
        assert answer.status_code == 202, answer.content
        jobs.append(answer.json()["import_job"])
    assert workspaces.run_import_job(jobs[1]).status == ImportJob.Status.DONE
    read: list[int] = []
    real_read = object_storage._Ranged.read
    monkeypatch.setattr(
        object_storage._Ranged,
        "read",
        lambda self, size: read.append(size) or real_read(self, size),
    )

    def no_copy(*args, **kwargs):
        raise AssertionError("the older upload's archive was copied whole")

    monkeypatch.setattr(object_storage, "local_copy", no_copy)

    done = workspaces.run_import_job(jobs[0])

    assert done is not None and done.status == ImportJob.Status.DONE, done and done.error
    assert read == [len(raw_memory("fleet-1"))]
    added = WorkspaceFile.objects.get(path=f"{M}/raw_memories/fleet-1.md")
    assert bytes(added.blob.data) == raw_memory("fleet-1") and done.run.added == 1


def uploaded_workspace(client, data: bytes, name: str = "dash") -> Workspace:
    """``data`` uploaded through the dashboard and imported by the worker's function."""
    assert upload(client, f"{name}.tar", data, name).status_code == 302
    done = workspaces.run_import_job(ImportJob.objects.get(name=name).pk)
    assert done is not None and done.status == ImportJob.Status.DONE, done and done.error
    return Workspace.objects.get(name=name)


def test_a_workspace_uploaded_into_object_storage_can_be_re_imported(
    s3, db, settings, tmp_path, fixtures_dir, eager, django_capture_on_commit_callbacks
):
    settings.STORAGES = s3_storages(s3)
    settings.MEMORYUI_UPLOAD_DIR = tmp_path / "uploads"
    client = Client()
    client.force_login(make_user("staff", staff=True))
    workspace = uploaded_workspace(client, snapshot_path(fixtures_dir, "small-a").read_bytes())
    first = workspace.imports.get()
    stored = workspace.source_path
    assert stored.startswith("storage://uploads/dash-")

    with django_capture_on_commit_callbacks(execute=True):
        answer = client.post(reverse("memoryui:workspace_reimport", args=["dash"]), follow=True)
    assert "Not re-imported" not in answer.content.decode()
    again = workspace.imports.exclude(pk=first.pk).get()
    assert again.status == ImportRun.Status.OK, again.report
    assert again.unchanged == first.added  # the same upload, read again
    workspace.refresh_from_db()
    assert workspace.source_path == stored
    assert [p for p in tmp_path.rglob("*.tar")] == []  # the worker's copy is gone

    key = stored.removeprefix("storage://")
    boto3.client("s3", endpoint_url=s3).delete_object(Bucket=BUCKET, Key=key)
    gone = workspaces.reimport(workspace)
    assert gone.status == ImportRun.Status.FAILED
    assert "no longer in object storage" in gone.report["errors"][0]["error"]


def test_an_export_holds_a_few_mib_in_memory_however_large_the_workspace(
    db, settings, tmp_path, workspace_copy
):
    """48 MiB of files: the export reads their contents in batches of a few MiB (it held
    500 files' contents at a time, here the whole workspace)."""
    source = workspace_copy()
    (source / "bulk").mkdir()
    for i in range(192):
        (source / "bulk" / f"blob-{i:03}.bin").write_bytes(os.urandom(256 * 1024))
    workspace = import_workspace(source, "big").workspace

    class Digest(io.RawIOBase):
        def __init__(self) -> None:
            self.sha256 = hashlib.sha256()

        def writable(self) -> bool:
            return True

        def write(self, data) -> int:  # type: ignore[override]
            self.sha256.update(data)
            return len(data)

    sink = Digest()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = snapshots.export_snapshot(workspace, snapshot_id="big", fileobj=sink)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert result.snapshot.size > 48 * 1024 * 1024
    assert sink.sha256.hexdigest() == result.snapshot.sha256
    assert peak < 16 * 1024 * 1024, f"the export held {peak / 2**20:.1f} MiB"


def test_an_export_whose_upload_fails_leaves_no_object_and_no_audit_event(
    s3, db, settings, workspace_copy, monkeypatch
):
    settings.STORAGES = s3_storages(s3)
    workspace = import_workspace(workspace_copy(), "a").workspace
    client = object_storage.storage("exports").connection.meta.client

    def fail(**kwargs):
        raise botocore.exceptions.ClientError(
            {"Error": {"Code": "InternalError", "Message": "the disk is on fire"}},
            "CompleteMultipartUpload",
        )

    monkeypatch.setattr(client, "complete_multipart_upload", fail)  # after the parts went
    with pytest.raises(ExportError, match="could not be stored .*InternalError"):
        snapshots.export_to_store(workspace, snapshot_id="s1")
    assert objects(s3) == {}
    uploads = boto3.client("s3", endpoint_url=s3).list_multipart_uploads(Bucket=BUCKET)
    assert uploads.get("Uploads", []) == []  # aborted, not left to be billed
    assert not AuditEvent.objects.filter(action=snapshots.EXPORT_SNAPSHOT_ACTION).exists()

    monkeypatch.undo()
    done = snapshots.export_to_store(workspace, snapshot_id="s1")
    event = AuditEvent.objects.get(action=snapshots.EXPORT_SNAPSHOT_ACTION)
    assert event.target == done.location == "storage://exports/s1.tar"
    assert objects(s3) == {"exports/s1.tar": done.snapshot.size}


def test_an_export_that_cannot_be_audited_is_removed_from_the_bucket(
    s3, db, settings, workspace_copy, monkeypatch
):
    settings.STORAGES = s3_storages(s3)
    workspace = import_workspace(workspace_copy(), "a").workspace

    def audit_fails(*args, **kwargs):
        raise RuntimeError("the database went away")

    monkeypatch.setattr(snapshots, "_audit", audit_fails)
    with pytest.raises(RuntimeError, match="went away"):
        snapshots.export_to_store(workspace, snapshot_id="s1")
    assert objects(s3) == {}


def test_of_two_exports_to_one_id_the_one_that_finishes_second_is_refused(
    s3, db, settings, workspace_copy, monkeypatch
):
    """The other export's object appears after this one's early check: the conditional
    upload keeps the winner's object and refuses this one, which records nothing."""
    settings.STORAGES = s3_storages(s3)
    workspace = import_workspace(workspace_copy(), "a").workspace
    bucket = boto3.client("s3", endpoint_url=s3)
    monkeypatch.setattr(object_storage, "stored_exists", lambda alias, name: False)
    bucket.put_object(Bucket=BUCKET, Key="exports/s1.tar", Body=b"the winner's archive")
    with pytest.raises(ExportError, match="s1.tar already exists in the export store"):
        snapshots.export_to_store(workspace, snapshot_id="s1")
    kept = bucket.get_object(Bucket=BUCKET, Key="exports/s1.tar")["Body"].read()
    assert kept == b"the winner's archive"
    assert not AuditEvent.objects.filter(action=snapshots.EXPORT_SNAPSHOT_ACTION).exists()
    assert bucket.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []


# --- separate processes, no shared directory ---------------------------------------------


class Machines(Deployment):
    """Processes as on separate machines: each its own directory and environment."""

    def start_in(self, name: str, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        log = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
        self.processes[name] = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()

    def run_in(self, env: dict[str, str], cwd: Path, *argv: str) -> str:
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, f"{argv}\n{done.stdout}\n{done.stderr}"
        return done.stdout


def machine_env(base: dict[str, str], home: Path) -> dict[str, str]:
    return {
        **base,
        "MEMORYUI_VAR_DIR": str(home / "var"),
        "MEMORYUI_WORKSPACE_ROOTS": str(home / "workspaces"),
        "STATIC_ROOT": str(home / "static"),
        "PYTHONPATH": str(ROOT),
        "MALLOC_ARENA_MAX": "2",  # as the image sets it (Dockerfile)
    }


@pytest.fixture
def machines(s3, database, broker, tmp_path, runtime_bin):  # noqa: F811 (fixtures imported above)
    """Web (gunicorn) and a Celery worker on the object store, each in its own directory,
    migrated, with a superuser; yields (machines, web's env, the admin's token secret).
    Both run from the runtime-only environment the Dockerfile builds (django-storages and
    boto3 must be in what ships, not only in the development environment)."""
    port = free_port()
    (tmp_path / "logs").mkdir()
    base = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("MEMORYUI_", "DJANGO_"))},
        **CREDENTIALS,
        "DEBUG": "0",
        "SECRET_KEY": "object-storage-test-" + "x" * 50,
        "ALLOWED_HOSTS": "127.0.0.1",
        "DATABASE_URL": database,
        "CELERY_BROKER_URL": broker,
        "SECURE_SSL_REDIRECT": "0",
        "SESSION_COOKIE_SECURE": "0",
        "CSRF_COOKIE_SECURE": "0",
        "MEMORYUI_STORAGE": "s3",
        "MEMORYUI_S3_ENDPOINT_URL": s3,
        "MEMORYUI_S3_BUCKET": BUCKET,
        "MEMORYUI_S3_REGION": "us-east-1",
        "MEMORYUI_BASE_URL": f"http://127.0.0.1:{port}",
        "OPENAI_API_KEY": "",
        "WEB_CONCURRENCY": "1",
    }
    web_home, worker_home = tmp_path / "web", tmp_path / "worker"
    web_env, worker_env = machine_env(base, web_home), machine_env(base, worker_home)
    for home in (web_home, worker_home):
        home.mkdir()
    deployed = Machines(web_env, f"http://127.0.0.1:{port}", tmp_path / "logs")
    bin = runtime_bin
    python = str(bin / "python")
    manage = str(ROOT / "manage.py")
    deployed.run_in(web_env, web_home, python, manage, "migrate", "--noinput")
    deployed.run_in(web_env, web_home, python, manage, "collectstatic", "--noinput")
    secret = deployed.run_in(
        web_env,
        web_home,
        python,
        manage,
        "shell",
        "-c",
        "from django.contrib.auth.models import User; from memoryui import tokens; "
        "u = User.objects.create_superuser('admin', '', 'a-long-test-password-42'); "
        "print(tokens.create_token(u, 'sandboxes', ['dash', 'fleet', 'big']).secret)",
    ).split()[-1]
    web = command("web", bin)
    web[web.index("--bind") + 1] = f"127.0.0.1:{port}"
    web += ["--timeout", "300"]  # a 100 MiB export on a busy test machine
    worker = [*command("worker", bin), "--concurrency", "1", "--hostname", "w1@%h"]

    def answering() -> bool:
        try:
            return requests.get(deployed.base_url + "/accounts/login/", timeout=5).ok
        except requests.RequestException:  # not listening yet, or still loading
            return False

    def ready() -> bool:
        return b" ready." in (deployed.logs / "worker.log").read_bytes()

    try:
        deployed.start_in("web", web, web_env, web_home)
        deployed.start_in("worker", worker, worker_env, worker_home)
        deployed.wait_for(answering, 60, "gunicorn")
        deployed.wait_for(ready, 60, "the worker")
        yield deployed, secret, (web_home, worker_home)
    finally:
        for name in list(deployed.processes):
            deployed.stop(name)


def signed_in(base_url: str) -> requests.Session:
    login = base_url + "/accounts/login/"
    session = requests.Session()
    answer = session.post(
        login,
        data={
            "username": "admin",
            "password": "a-long-test-password-42",
            "csrfmiddlewaretoken": csrf(session, login),
        },
        headers={"Referer": login},
    )
    assert answer.ok and "sessionid" in session.cookies
    return session


def wait_imported(machines: Machines, session: requests.Session, progress_url: str) -> str:
    def report() -> str | None:
        page = session.get(machines.base_url + progress_url, allow_redirects=False, timeout=30)
        if page.status_code == 302:
            return page.headers["Location"]
        assert page.status_code == 200 and 'id="import-error"' not in page.text, page.text
        return None

    return machines.wait_for(report, 240, f"the import at {progress_url}")


def archives_under(*homes: Path) -> list[Path]:
    """Files that hold an upload, a snapshot or an export (anything a tar might be in),
    but the sandbox downloads a web host keeps to send again: a cache, which losing
    loses nothing (``kept_downloads``)."""
    return [
        p
        for home in homes
        for p in home.rglob("*")
        if p.is_file()
        and "download-cache" not in p.parts
        and (tarfile.is_tarfile(p) or p.suffix in (".part", ".upload"))
    ]


def kept_downloads(*homes: Path) -> list[Path]:
    return [p for home in homes for p in (home / "var" / "download-cache").rglob("*.tar")]


def test_upload_import_export_and_download_with_web_and_worker_sharing_no_directory(
    machines, fixtures_dir
):
    deployed, secret, homes = machines
    session = signed_in(deployed.base_url)

    # A dashboard upload: web stores it, the worker (elsewhere) imports it.
    data = snapshot_path(fixtures_dir, "small-a").read_bytes()
    new = deployed.base_url + "/workspaces/new/"
    sent = session.post(
        deployed.base_url + "/workspaces/new/upload/",
        data={"name": "dash", "csrfmiddlewaretoken": csrf(session, new)},
        files={"snapshot": ("small-a.tar", data, "application/x-tar")},
        headers={"Referer": new},
        allow_redirects=False,
    )
    assert sent.status_code == 302, sent.text[:2000]
    done = wait_imported(deployed, session, sent.headers["Location"])
    assert re.fullmatch(r"/w/dash/imports/\d+/", done), done
    assert session.get(deployed.base_url + done).status_code == 200

    # The SDK's persist to the snapshot store, imported by the worker; restored by web.
    store = SnapshotClient(deployed.base_url, secret, workspace="fleet", timeout=120)
    archive = small_archive()
    answer = asyncio.run(store.upload("sandbox-1", io.BytesIO(archive)))
    assert answer["sha256"] == hashlib.sha256(archive).hexdigest()
    wait_imported(deployed, session, answer["progress_url"])
    restored = asyncio.run(store.download("sandbox-1"))
    with restored:
        back = members(restored.read())
    assert back["notes/own.txt"] == members(archive)["notes/own.txt"]
    assert back[f"{S}/fleet-1.jsonl"] == members(archive)[f"{S}/fleet-1.jsonl"]
    # The web host kept the restore to send again; a cache: without it, the same files.
    [kept] = kept_downloads(*homes)
    kept.unlink()
    with asyncio.run(store.download("sandbox-1")) as again:
        assert members(again.read()) == back

    # A server export, then its download, byte for byte.
    auth = {"Authorization": f"Bearer {secret}"}
    made = requests.post(
        deployed.base_url + "/api/workspaces/dash/exports",
        json={"snapshot_id": "nightly"},
        headers=auth,
        timeout=120,
    )
    assert made.status_code == 201, made.text
    assert made.json()["path"] == "storage://exports/nightly.tar"
    got = requests.get(
        deployed.base_url + "/api/workspaces/dash/exports/nightly", headers=auth, timeout=120
    )
    assert got.status_code == 200
    stored = boto3.client("s3", endpoint_url=deployed.env["MEMORYUI_S3_ENDPOINT_URL"]).get_object(
        Bucket=BUCKET, Key="exports/nightly.tar"
    )
    assert got.content == stored["Body"].read()
    assert got.headers["X-Memoryui-Sha256"] == hashlib.sha256(got.content).hexdigest()
    assert members(got.content)["memories/MEMORY.md"]  # the workspace, curated

    in_store = objects(deployed.env["MEMORYUI_S3_ENDPOINT_URL"])
    assert "exports/nightly.tar" in in_store
    assert any(k.startswith("snapshots/fleet/sandbox-1/") for k in in_store)
    assert [k for k in in_store if k.startswith("uploads/dash-")], in_store
    assert not [k for k in in_store if k.startswith("uploads/progress/")], in_store
    assert archives_under(*homes) == []  # nothing kept on either machine but that cache


def tree_of(pid: int) -> list[int]:
    """A process and its descendants (gunicorn's and Celery's workers are children)."""
    pids, pending = [], [pid]
    while pending:
        current = pending.pop()
        try:
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        pids.append(current)
        pending += map(int, children)
    return pids


def peak_rss_mib(pid: int) -> float:
    """The largest peak resident set (VmHWM) in a process tree since the last reset."""
    peak = 0
    for each in tree_of(pid):
        with suppress(OSError):
            status = Path(f"/proc/{each}/status").read_text()
            peak = max(peak, int(re.search(r"VmHWM:\s+(\d+)", status).group(1)))
    return peak / 1024


def reset_peaks(pid: int) -> float:
    """Reset the peak of each process in the tree to its present size; answers the
    largest present size."""
    largest = 0
    for each in tree_of(pid):
        with suppress(OSError):
            Path(f"/proc/{each}/clear_refs").write_text("5")  # VmHWM := VmRSS
            status = Path(f"/proc/{each}/status").read_text()
            largest = max(largest, int(re.search(r"VmRSS:\s+(\d+)", status).group(1)))
    return largest / 1024


def test_100_mib_through_the_object_store_keeps_web_and_worker_memory_bounded(machines, tmp_path):
    """A 100 MiB persist, its import, the sandbox's restore and a server export with its
    download: neither process holds the archive in memory, the worker's import
    included."""
    deployed, secret, homes = machines
    session = signed_in(deployed.base_url)
    path = tmp_path / "big.tar"
    sent = big_workspace_archive(path)
    size = path.stat().st_size
    assert size > 100 * 1024 * 1024
    peaks: dict[str, dict[str, float]] = {}  # step: the peak of each process during it
    grew: dict[str, dict[str, float]] = {}  # step: by how much each process grew in it
    start: dict[str, float] = {}

    def step(name: str) -> None:
        peaks[name] = {n: peak_rss_mib(p.pid) for n, p in deployed.processes.items()}
        grew[name] = {n: peaks[name][n] - start.get(n, peaks[name][n]) for n in peaks[name]}
        for n, process in deployed.processes.items():
            start[n] = reset_peaks(process.pid)

    store = SnapshotClient(deployed.base_url, secret, workspace="big", timeout=300)
    # Once through every step with a small archive: what loading the code costs (boto3's
    # service models, say) is not counted below.
    warm = asyncio.run(store.upload("warm-up", io.BytesIO(small_archive("warm-1"))))
    wait_imported(deployed, session, warm["progress_url"])
    asyncio.run(store.download("warm-up")).close()
    warm_export = requests.post(
        deployed.base_url + "/api/workspaces/big/exports",
        json={"snapshot_id": "warm-up-export"},
        headers={"Authorization": f"Bearer {secret}"},
        timeout=300,
    )
    assert warm_export.status_code == 201, warm_export.text
    step("idle")
    with path.open("rb") as data:
        answer = asyncio.run(store.upload("sandbox-big", data))
    assert answer["size"] == size
    step("upload")
    wait_imported(deployed, session, answer["progress_url"])
    step("import")
    restored = asyncio.run(store.download("sandbox-big"))
    with restored, tarfile.open(fileobj=restored) as back:
        blob = back.extractfile("./data/blob-000.bin")
        assert blob is not None
        assert hashlib.sha256(blob.read()).hexdigest() == sent["data/blob-000.bin"]
    step("restore")
    auth = {"Authorization": f"Bearer {secret}"}
    made = requests.post(
        deployed.base_url + "/api/workspaces/big/exports",
        json={"snapshot_id": "big-export"},
        headers=auth,
        timeout=300,
    )
    assert made.status_code == 201, made.text
    step("export")
    digest = hashlib.sha256()
    with requests.get(
        deployed.base_url + "/api/workspaces/big/exports/big-export",
        headers=auth,
        stream=True,
        timeout=300,
    ) as got:
        assert got.status_code == 200
        for chunk in got.iter_content(1024 * 1024):
            digest.update(chunk)
    assert digest.hexdigest() == made.json()["sha256"] == got.headers["X-Memoryui-Sha256"]
    step("download")
    print(f"archive {size / 2**20:.0f} MiB; peak RSS (MiB) of each process tree by step:")
    for name, by_process in peaks.items():
        print(
            f"  {name:9} "
            + "  ".join(f"{n} {v:.0f} (+{grew[name][n]:.0f})" for n, v in by_process.items())
        )
    # What goes through the object store, and the export's reading of the database
    # (contents a file at a time, parts of the upload one at a time).
    steps = [("upload", "web"), ("restore", "web"), ("export", "web"), ("download", "web")]
    for name, process in steps:
        assert grew[name][process] < 32, f"{process} grew by {grew[name][process]:.0f} MiB"
    # The import holds at most 8 MiB of contents read ahead and a chunk of at most
    # 8 MiB (importer.reading.HELD_BYTES, syncing.STORE_CHUNK_BYTES): never the archive.
    assert grew["import"]["worker"] < 32, f"worker grew by {grew['import']['worker']:.0f} MiB"
    assert archives_under(*homes) == []
    path.unlink()


def test_with_object_storage_the_export_page_stores_the_archive_in_the_bucket(
    s3, db, settings, workspace_copy
):
    settings.STORAGES = s3_storages(s3)
    import_workspace(workspace_copy(), "a")
    admin = make_user("admin-a", staff=True)
    Membership.objects.create(workspace=Workspace.objects.get(name="a"), user=admin, role="admin")
    client = Client()
    client.force_login(admin)
    url = "/w/a/export/"
    page = client.get(url)
    assert "storage://exports/" in page.content.decode()

    with_state = client.post(
        url, {"snapshot_id": "s1", "destination": "server", "session_state": "on"}
    )
    assert with_state.status_code == 409
    assert "export without it" in with_state.content.decode()
    assert objects(s3) == {}

    done = client.post(url, {"snapshot_id": "s1", "destination": "server"}, follow=True)
    assert "Exported storage://exports/s1.tar" in done.content.decode()
    assert list(objects(s3)) == ["exports/s1.tar"]
    again = client.post(url, {"snapshot_id": "s1", "destination": "server"})
    assert again.status_code == 409 and "already exists" in again.content.decode()


def test_a_progress_file_removed_while_the_page_reads_it_is_no_progress_not_an_error(
    s3, db, settings
):
    """The worker removes a job's progress file when the import ends; the progress page
    may have just seen it (S3: a HEAD, then the GET finds no object)."""
    settings.STORAGES = s3_storages(s3)
    name = workspaces.progress_name(7)
    stored = object_storage.storage(object_storage.UPLOADS)
    stored.save(name, ContentFile(b'{"phase": "read", "done": 3, "total": 9}'))
    assert workspaces.read_progress(7)["done"] == 3
    real_open = stored.open

    def open_then_removed(path, mode="rb"):
        handle = real_open(path, mode)  # the storage has seen the object
        boto3.client("s3", endpoint_url=s3).delete_object(Bucket=BUCKET, Key=f"uploads/{path}")
        return handle

    with mock.patch.object(stored, "open", open_then_removed):
        assert workspaces.read_progress(7) == {}
