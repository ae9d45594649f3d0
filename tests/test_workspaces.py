"""Workspaces from the dashboard (uploaded snapshots, registered directories), the
workspace roots every web path must resolve under, and the scheduled sync."""

import html
import io
import json
import shutil
import tarfile
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from memoryui import workspaces
from memoryui.celery import app
from memoryui.importer import import_workspace
from memoryui.models import (
    AuditEvent,
    ImportJob,
    ImportRun,
    Membership,
    MemoryVersion,
    Role,
    Workspace,
)
from memoryui.tasks import reimport_workspace
from memoryui.views.workspaces import SnapshotUploadHandler
from tests.factories import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def roots(tmp_path, settings):
    """One workspace root and one uploads dir, both fresh."""
    root = tmp_path / "roots"
    root.mkdir()
    settings.MEMORYUI_WORKSPACE_ROOTS = [root.resolve()]
    settings.MEMORYUI_UPLOAD_DIR = (tmp_path / "uploads").resolve()
    return root.resolve()


@pytest.fixture
def staff(client):
    user = make_user("ops", staff=True)
    client.force_login(user)
    return user


def manifest(fixtures_dir: Path, name: str) -> dict:
    return json.loads((fixtures_dir / name / "manifest.json").read_text())


def files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if not p.is_dir()) if path.exists() else []


def upload(client, name: str, data: bytes, workspace: str = ""):
    snapshot = io.BytesIO(data)
    snapshot.name = name
    return client.post(
        reverse("memoryui:workspace_upload"), {"name": workspace, "snapshot": snapshot}
    )


def layout_counts(run: ImportRun) -> dict[str, tuple[int, int, int]]:
    return {
        layout["memories_dir"]: (
            layout["rollouts"],
            layout["raw_memories"],
            layout["rollout_summaries"],
        )
        for layout in run.report["layouts"]
    }


def expected_counts(m: dict) -> dict[str, tuple[int, int, int]]:
    return {
        c["memories_dir"]: (c["rollouts"], c["raw_memories"], c["rollout_summaries"])
        for c in m["counts"].values()
    }


# --- uploads ---------------------------------------------------------------------------


def test_uploaded_snapshot_is_imported_by_the_task_and_opens_its_report(
    client, staff, roots, eager, fixtures_dir, settings, django_capture_on_commit_callbacks
):
    m = manifest(fixtures_dir, "small-a")
    data = (fixtures_dir / "small-a" / m["snapshot"]["path"]).read_bytes()

    with django_capture_on_commit_callbacks(execute=True):
        response = upload(client, f"{m['snapshot']['id']}.tar", data, "team-a")
    job = ImportJob.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("memoryui:import_progress", args=[job.pk])
    page = client.get(response["Location"], follow=True)

    workspace = Workspace.objects.get(name="team-a")
    run = workspace.imports.get()
    assert page.redirect_chain[-1][0] == reverse("memoryui:import_detail", args=["team-a", run.pk])
    assert "Import report" in page.content.decode()
    assert layout_counts(run) == expected_counts(m)
    assert run.errors == [] and run.triggered_by == staff
    assert workspace.files.count() == m["snapshot"]["members"] - 1  # all but the root "."
    # The snapshot stays in the uploads dir as the workspace's source; nothing else does.
    assert workspace.source_kind == Workspace.SourceKind.SNAPSHOT
    assert files_under(settings.MEMORYUI_UPLOAD_DIR) == [Path(workspace.source_path)]
    assert Path(workspace.source_path).read_bytes() == data


def test_import_progress_is_polled_until_the_report_opens(
    client, staff, roots, fixtures_dir, settings
):
    m = manifest(fixtures_dir, "small-a")
    data = (fixtures_dir / "small-a" / m["snapshot"]["path"]).read_bytes()
    upload(client, "snap.tar", data)  # the task is queued on commit, not run
    job = ImportJob.objects.get()
    url = reverse("memoryui:import_progress", args=[job.pk])
    assert job.name == "snap"

    queued = client.get(url).content.decode()
    assert "Queued" in queued and f'hx-get="{url}"' in queued and 'hx-trigger="every 1s"' in queued
    other = Client()
    other.force_login(make_user("someone-else"))
    assert other.get(url).status_code == 404

    ImportJob.objects.filter(pk=job.pk).update(status=ImportJob.Status.RUNNING)
    workspaces._ProgressFile(workspaces.progress_name(job.pk))("read", 1500, 0)
    running = client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert running.lstrip().startswith('<section id="import-progress"')
    assert "reading files" in running and "1,500" in running

    ImportJob.objects.filter(pk=job.pk).update(status=ImportJob.Status.QUEUED)
    workspaces.run_import_job(job.pk)
    done = client.get(url, headers={"HX-Request": "true"})
    run = ImportRun.objects.get(workspace__name="snap")
    assert done["HX-Redirect"] == reverse("memoryui:import_detail", args=["snap", run.pk])
    assert workspaces.read_progress(job.pk) == {}
    assert not (settings.MEMORYUI_UPLOAD_DIR / workspaces.progress_name(job.pk)).exists()


def test_a_second_delivery_of_the_import_task_does_nothing(client, staff, roots, fixtures_dir):
    data = fixtures_dir / "small-b" / manifest(fixtures_dir, "small-b")["snapshot"]["path"]
    upload(client, "b.tar", data.read_bytes())
    job = ImportJob.objects.get()

    assert workspaces.run_import_job(job.pk).status == ImportJob.Status.DONE
    assert workspaces.run_import_job(job.pk) is None
    assert ImportRun.objects.filter(workspace__name="b").count() == 1


def bomb() -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for i in range(5):
            info = tarfile.TarInfo(f"./data/zeros-{i}.bin")
            info.size = 400_000
            tar.addfile(info, io.BytesIO(b"\0" * info.size))
        rollout = b'{"rollout_id":"a-1"}\n'
        info = tarfile.TarInfo("./sessions/a-1.jsonl")
        info.size = len(rollout)
        tar.addfile(info, io.BytesIO(rollout))
    return out.getvalue()


def test_upload_of_an_archive_bomb_leaves_no_workspace_and_no_file(
    client, staff, roots, eager, settings, django_capture_on_commit_callbacks
):
    settings.MEMORYUI_MAX_IMPORT_BYTES = 1_000_000
    data = bomb()
    assert len(data) < 20_000

    with django_capture_on_commit_callbacks(execute=True):
        response = upload(client, "bomb.tar.gz", data)
    page = client.get(response["Location"]).content.decode()

    job = ImportJob.objects.get()
    assert job.status == ImportJob.Status.FAILED
    assert job.error == (
        "bomb.tar.gz expands past 976.6 KB when unpacked (MEMORYUI_MAX_IMPORT_BYTES); "
        "nothing was imported."
    )
    assert "expands past" in page and "No workspace was created" in page
    assert not Workspace.objects.exists() and not ImportRun.objects.exists()
    assert files_under(settings.MEMORYUI_UPLOAD_DIR) == []


def test_upload_of_a_file_that_is_not_a_tar_is_refused_and_not_kept(client, staff, roots, settings):
    response = upload(client, "notes.tar", b"these are notes, not an archive\n" * 100)

    assert response.status_code == 400
    assert "notes.tar is not a tar archive (plain or compressed)" in response.content.decode()
    assert not ImportJob.objects.exists() and not Workspace.objects.exists()
    assert files_under(settings.MEMORYUI_UPLOAD_DIR) == []


def test_upload_of_an_empty_archive_leaves_no_workspace(client, staff, roots, settings):
    empty = io.BytesIO()
    with tarfile.open(fileobj=empty, mode="w"):
        pass
    upload(client, "empty.tar", empty.getvalue())

    job = workspaces.run_import_job(ImportJob.objects.get().pk)

    assert job.status == ImportJob.Status.FAILED
    assert job.error == "empty.tar holds nothing to import."
    assert not Workspace.objects.exists()
    assert files_under(settings.MEMORYUI_UPLOAD_DIR) == []


def test_upload_whose_request_is_over_the_limit_is_refused_unread(
    client, staff, roots, settings, fixtures_dir
):
    settings.MEMORYUI_MAX_UPLOAD_BYTES = 10_000
    data = fixtures_dir / "small-a" / manifest(fixtures_dir, "small-a")["snapshot"]["path"]

    response = upload(client, "big.tar", data.read_bytes())

    assert response.status_code == 413
    assert "larger than the upload limit of 9.8 KB" in response.content.decode()
    assert response.wsgi_request.META["wsgi.input"].read_started is False
    assert not ImportJob.objects.exists()
    assert files_under(settings.MEMORYUI_UPLOAD_DIR) == []


def test_upload_over_the_limit_is_stopped_while_it_streams(
    client, staff, roots, settings, monkeypatch
):

    settings.MEMORYUI_MAX_UPLOAD_BYTES = 100_000
    data = bytes(300_000)  # the request passes the Content-Length check only by the slack
    monkeypatch.setattr("memoryui.views.workspaces.MULTIPART_SLACK", 250_000)
    written = []
    original = SnapshotUploadHandler.receive_data_chunk

    def spy(self, raw_data, start):
        original(self, raw_data, start)
        written.append(self.file.tell())

    monkeypatch.setattr(SnapshotUploadHandler, "receive_data_chunk", spy)

    response = upload(client, "big.tar", data)

    assert response.status_code == 413
    assert "larger than the upload limit of 97.7 KB" in response.content.decode()
    assert max(written) <= 100_000  # stopped at the first chunk over the limit
    assert not ImportJob.objects.exists()
    assert files_under(settings.MEMORYUI_UPLOAD_DIR) == []


def test_creating_workspaces_needs_staff_or_the_add_permission(client, roots, fixtures_dir):
    user = make_user("maker")
    client.force_login(user)
    data = fixtures_dir / "small-a" / manifest(fixtures_dir, "small-a")["snapshot"]["path"]
    assert client.get(reverse("memoryui:workspace_new")).status_code == 403
    assert upload(client, "a.tar", data.read_bytes()).status_code == 403
    assert "New workspace" not in client.get("/").content.decode()

    user.user_permissions.add(Permission.objects.get(codename="add_workspace"))
    assert "New workspace" in client.get("/").content.decode()
    assert client.get(reverse("memoryui:workspace_new")).status_code == 200
    upload(client, "a.tar", data.read_bytes())
    workspaces.run_import_job(ImportJob.objects.get().pk)
    # The person who created it administers it (re-import, sync, members).
    assert Membership.objects.get(workspace__name="a", user=user).role == Role.ADMIN
    event = AuditEvent.objects.get(workspace__name="a")
    assert (event.action, event.actor, event.detail["kind"]) == (
        "workspace.create",
        "maker",
        "upload",
    )


# --- directories and the workspace roots -------------------------------------------


def test_registering_a_directory_under_the_roots_imports_it(
    client, staff, roots, eager, fixtures_dir, django_capture_on_commit_callbacks
):
    shutil.copytree(fixtures_dir / "small-a" / "workspace", roots / "agent-a" / "workspace")

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            reverse("memoryui:workspace_register"), {"path": "agent-a/workspace", "name": ""}
        )
    page = client.get(response["Location"], follow=True)

    workspace = Workspace.objects.get(name="agent-a")
    assert workspace.source_path == str(roots / "agent-a" / "workspace")
    assert workspace.source_kind == Workspace.SourceKind.DIRECTORY
    assert layout_counts(workspace.imports.get()) == expected_counts(
        manifest(fixtures_dir, "small-a")
    )
    assert "Import report" in page.content.decode()


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("agent/../../outside", "'..' is not allowed"),
        ("escape", "leads through a symbolic link to"),
        ("OUTSIDE", "is outside the workspace roots"),
        ("/etc/ssl", "is outside the workspace roots"),
    ],
)
def test_registering_a_directory_outside_the_roots_is_refused(
    client, staff, roots, tmp_path, path, reason
):
    outside = tmp_path / "outside"
    shutil.copytree(Path(__file__).parent, outside / "workspace")  # any readable tree
    (roots / "escape").symlink_to(outside)
    path = path.replace("OUTSIDE", str(outside))

    response = client.post(reverse("memoryui:workspace_register"), {"path": path, "name": "x"})

    page = html.unescape(response.content.decode())
    assert response.status_code == 400
    assert reason in page
    assert not ImportJob.objects.exists() and not Workspace.objects.exists()


def test_django_admin_refuses_a_workspace_source_outside_the_roots(client, roots, fixtures_dir):
    shutil.copytree(fixtures_dir / "small-a" / "workspace", roots / "a")
    workspace = import_workspace(roots / "a", "a").workspace
    root = make_user("root", staff=True)
    root.is_superuser = True
    root.save()
    client.force_login(root)
    change = reverse("admin:memoryui_workspace_change", args=[workspace.pk])
    form = {
        "name": "a",
        "source_kind": "directory",
        "source_path": "/etc/ssl",
        "sync_interval_minutes": "0",
    }

    response = client.post(change, form)

    assert response.status_code == 200
    assert "is outside the workspace roots" in response.content.decode()
    workspace.refresh_from_db()
    assert workspace.source_path == str(roots / "a")
    added = client.post(reverse("admin:memoryui_workspace_add"), {**form, "name": "etc"})
    assert added.status_code == 200 and not Workspace.objects.filter(name="etc").exists()
    # Inside the roots, given relative to one, is accepted and stored as the real path.
    shutil.copytree(fixtures_dir / "small-b" / "workspace", roots / "b")
    ok = client.post(change, {**form, "source_path": "b", "sync_interval_minutes": "10"})
    assert ok.status_code == 302
    workspace.refresh_from_db()
    assert workspace.source_path == str(roots / "b")
    assert workspace.next_sync_at is not None  # the sync interval set here is scheduled


def test_web_reimport_of_a_workspace_outside_the_roots_is_refused(
    client, staff, roots, workspace_copy, eager, django_capture_on_commit_callbacks
):
    imported = import_workspace(workspace_copy("small-a"), "cli")  # by an operator, anywhere

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("memoryui:workspace_reimport", args=["cli"]), follow=True)

    page = response.content.decode()
    assert "Not re-imported" in page and "manage.py import_workspace" in page
    assert ImportRun.objects.count() == 1
    # A task queued anyway (or the path changed after it was queued) refuses too.

    reimport_workspace(imported.workspace.pk, staff.pk)
    refused = ImportRun.objects.order_by("pk").last()
    assert refused.status == ImportRun.Status.FAILED
    assert "outside the workspace roots" in refused.errors[0]["error"]


# --- scheduled sync ------------------------------------------------------------------


@pytest.fixture
def synced(client, staff, roots, fixtures_dir):
    """A workspace under the roots, imported, with the sync turned on from its page."""
    source = roots / "agent-a"
    shutil.copytree(fixtures_dir / "small-a" / "workspace", source)
    workspace = import_workspace(source, "agent-a").workspace
    response = client.post(
        reverse("memoryui:workspace_sync", args=["agent-a"]), {"sync_interval_minutes": "15"}
    )
    assert response.status_code == 302
    workspace.refresh_from_db()
    assert workspace.sync_interval_minutes == 15
    assert workspace.next_sync_at > timezone.now() + timedelta(minutes=14)
    return workspace


def beat_task():
    """The periodic task exactly as Celery beat names it."""

    return app.tasks[settings.CELERY_BEAT_SCHEDULE["sync-workspaces"]["task"]]


def test_scheduled_sync_picks_up_an_agent_edit(client, synced, eager):
    memory_md = Path(synced.source_path) / "memories" / "MEMORY.md"
    memory_md.write_text(memory_md.read_text() + "\n- Agent learned something new.\n")
    beat_task().apply()
    assert ImportRun.objects.filter(scheduled=True).count() == 0  # not due yet

    Workspace.objects.filter(pk=synced.pk).update(next_sync_at=timezone.now())
    beat_task().apply()

    run = ImportRun.objects.get(scheduled=True)
    assert run.changed == 1 and run.new_versions == ["memories/MEMORY.md"]
    latest = MemoryVersion.objects.filter(layout__memories_dir="memories").order_by("number").last()
    assert latest.number == 2 and latest.author_kind == MemoryVersion.Author.AGENT
    assert latest.needs_review
    synced.refresh_from_db()
    assert synced.next_sync_at > timezone.now() + timedelta(minutes=14)
    page = client.get(reverse("memoryui:workspace_detail", args=["agent-a"])).content.decode()
    section = page[page.index('id="last-sync"') :]
    assert "Last synced" in section and "1 changed" in section
    history = reverse("memoryui:versions", args=["agent-a", latest.layout_id, "memory_md"])
    assert f'<a href="{history}"><code>memories/MEMORY.md</code></a>' in section
    assert "scheduled sync" in page


def test_two_beats_never_sync_the_same_workspace_at_once(synced, eager):
    now = timezone.now()
    Workspace.objects.filter(pk=synced.pk).update(next_sync_at=now)
    # Both beats read the same due workspace; only the first update takes it.
    seen_by_both = list(
        Workspace.objects.filter(next_sync_at__lte=now).values_list("pk", "next_sync_at")
    )
    assert workspaces.claim_sync(*seen_by_both[0], now) is True
    assert workspaces.claim_sync(*seen_by_both[0], now) is False
    assert workspaces.claim_due_syncs(now + timedelta(minutes=5)) == []  # claimed, not due

    Workspace.objects.filter(pk=synced.pk).update(next_sync_at=now)
    beat_task().apply()
    beat_task().apply()
    assert ImportRun.objects.filter(scheduled=True).count() == 1


def test_a_sync_whose_source_is_gone_fails_once_and_waits_an_interval(synced, eager):
    shutil.rmtree(synced.source_path)
    Workspace.objects.filter(pk=synced.pk).update(next_sync_at=timezone.now())

    beat_task().apply()
    beat_task().apply()

    run = ImportRun.objects.get(scheduled=True)
    assert run.status == ImportRun.Status.FAILED and "does not exist" in run.errors[0]["error"]
    synced.refresh_from_db()
    assert synced.next_sync_at > timezone.now() + timedelta(minutes=14)


def test_sync_cannot_be_turned_on_outside_the_roots_or_by_non_admins(
    client, staff, roots, workspace_copy
):
    import_workspace(workspace_copy("small-a"), "cli")
    url = reverse("memoryui:workspace_sync", args=["cli"])

    response = client.post(url, {"sync_interval_minutes": "5"}, follow=True)

    assert "Scheduled sync not turned on" in response.content.decode()
    assert Workspace.objects.get(name="cli").sync_interval_minutes == 0
    client.force_login(make_user("viewer"))
    assert client.post(url, {"sync_interval_minutes": "0"}).status_code == 403
