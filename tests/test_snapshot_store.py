"""The remote snapshot store's semantics over its HTTP API: one workspace, many
sandboxes; each download is that sandbox's own files and the workspace's served memory
(approved, passing lint); uploads answer before their import, which a worker runs."""

import gzip
import hashlib
import io
import tarfile
import zlib
from pathlib import Path

import pytest
from django.core.cache import cache
from django.db import OperationalError, connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from kombu.exceptions import OperationalError as KombuOperationalError

from generation import lint, tree
from generation.tree import directory as tree_directory
from memoryui import (
    curation,
    lint_allowances,
    object_storage,
    served_memory,
    snapshot_store,
    tasks,
    tokens,
    workspaces,
    writeback,
)
from memoryui.models import (
    AuditEvent,
    Blob,
    ImportJob,
    ImportRun,
    Layout,
    Membership,
    MemoryVersion,
    Role,
    Rollout,
    SkillFileVersion,
    UploadedSnapshot,
    UploadedSnapshotIndex,
    Webhook,
    WebhookDelivery,
    Workspace,
    WorkspaceFile,
)
from memoryui.workspaces import run_import_job
from tests.factories import make_user

M = "memories/engineering"
S = "sessions/engineering"
MEMORY_MD = MemoryVersion.Document.MEMORY_MD
SUMMARY = MemoryVersion.Document.MEMORY_SUMMARY
APPROVED_MD = b"# Task Group: deploys\n\nscope: deploys\n\n## Task 1: canary first\n\nok\n"
AGENTS_MD = b"# Task Group: deploys\n\nscope: deploys\n\n## Task 1: skip the canary\n\nfast\n"
SUMMARY_MD = b"## User Profile\n\nDeploys go through the runbook.\n"
SKILL = f"{M}/skills/deploy/SKILL.md"
FAKE_AWS_KEY = "AKIAZ3MSJV4WWNKWW5FG"


@pytest.fixture
def store(settings, tmp_path):
    settings.MEMORYUI_REMOTE_STORE_DIR = tmp_path / "store"
    return tmp_path / "store"


@pytest.fixture
def ops(db):
    user = make_user("ops", staff=True)
    return user, tokens.create_token(user, "t", ["w"]).secret


def rollout(rid: str, text: str) -> bytes:
    return (
        b'{"timestamp":"2026-11-30T10:00:00Z","type":"session_meta","payload":{"id":"'
        + rid.encode()
        + b'"}}\n{"timestamp":"2026-11-30T10:00:01Z","type":"response_item","payload":'
        + b'{"type":"message","role":"user","content":[{"type":"input_text","text":"'
        + text.encode()
        + b'"}]}}\n'
    )


def raw_memory(rid: str) -> bytes:
    return (
        f"rollout_id: {rid}\nupdated_at: 2026-11-30T10:00:00+00:00\n"
        f"rollout_path: {S}/{rid}.jsonl\nrollout_summary_file: rollout_summaries/{rid}_work.md\n"
        f"terminal_state: completed\n\n---\ndescription: {rid}\ntask: {rid}\n---\nDid {rid}.\n"
    ).encode()


def sandbox_files(
    rid: str,
    own: dict[str, bytes],
    *,
    memory_md: bytes = APPROVED_MD,
    more: dict[str, bytes] | None = None,
) -> dict[str, bytes]:
    return {
        **own,
        f"{S}/{rid}.jsonl": rollout(rid, f"task of {rid}"),
        f"{M}/MEMORY.md": memory_md,
        f"{M}/memory_summary.md": SUMMARY_MD,
        f"{M}/raw_memories/{rid}.md": raw_memory(rid),
        f"{M}/rollout_summaries/{rid}_work.md": f"# {rid}\n\nWorked.\n".encode(),
        **(more or {}),
    }


def sandbox(
    rid: str,
    own: dict[str, bytes],
    *,
    memory_md: bytes = APPROVED_MD,
    links: dict[str, str] | None = None,
    more: dict[str, bytes] | None = None,
) -> bytes:
    """A sandbox's archive as the SDK persists it: its own files, one rollout, and the
    layout's memory as phase one and two left it."""
    files = sandbox_files(rid, own, memory_md=memory_md, more=more)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for path, data in sorted(files.items()):
            info = tarfile.TarInfo(f"./{path}")
            info.size, info.mtime = len(data), 1_790_000_000
            info.mode = 0o755 if path.endswith(".sh") else 0o644
            archive.addfile(info, io.BytesIO(data))
        for path, target in (links or {}).items():
            info = tarfile.TarInfo(f"./{path}")
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
            archive.addfile(info)
    return out.getvalue()


def upload(secret: str, snapshot_id: str, data: bytes, capture) -> dict:
    """PUT the archive, then run the import the worker would run."""
    with capture(execute=False) as queued:
        answer = Client().put(
            f"/api/workspaces/w/snapshots/{snapshot_id}",
            data,
            content_type="application/x-tar",
            HTTP_AUTHORIZATION=f"Bearer {secret}",
        )
    assert answer.status_code == 202, answer.content
    assert len(queued) == 1
    job = run_import_job(answer.json()["import_job"])
    assert job is not None and job.status == ImportJob.Status.DONE, job and job.error
    return answer.json()


def download(secret: str, snapshot_id: str) -> dict[str, tarfile.TarInfo | bytes]:
    """path -> bytes of each file; path -> TarInfo of each link and directory."""
    answer = Client().get(
        f"/api/workspaces/w/snapshots/{snapshot_id}", HTTP_AUTHORIZATION=f"Bearer {secret}"
    )
    assert answer.status_code == 200, answer.content
    found: dict[str, tarfile.TarInfo | bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(b"".join(answer.streaming_content))) as archive:
        for info in archive:
            name = info.name.removeprefix("./").rstrip("/")
            if info.isreg():
                found[name] = archive.extractfile(info).read()  # type: ignore[union-attr]
                found[f"mode:{name}"] = info  # type: ignore[assignment]
            elif name:
                found[name] = info
    return found


def layout() -> Layout:
    return Layout.objects.get(workspace__name="w", memories_dir=M)


def accept_all(user) -> None:
    for version in MemoryVersion.objects.filter(needs_review=True):
        curation.accept_agent_change(version, user=user)


def accepted(
    ops, capture, own: dict[str, bytes] | None = None, *, links: dict[str, str] | None = None
) -> str:
    """Sandbox x's upload, its memory accepted: the token to restore with."""
    user, secret = ops
    upload(secret, "x", sandbox("rx", own or {}, links=links), capture)
    accept_all(user)
    return secret


@pytest.mark.django_db
def test_each_sandbox_downloads_its_own_files_and_the_workspaces_merged_memory(
    store, ops, django_capture_on_commit_callbacks
):
    user, secret = ops
    x_own = {"README.md": b"sandbox X\n", "bin/run.sh": b"#!/bin/sh\necho x\n"}
    upload(
        secret,
        "x",
        sandbox("rx", x_own, links={"docs/readme.md": "../README.md"}),
        django_capture_on_commit_callbacks,
    )
    accept_all(user)
    upload(
        secret,
        "y",
        sandbox("ry", {"README.md": b"sandbox Y\n", "y-only.txt": b"y\n"}),
        django_capture_on_commit_callbacks,
    )

    x = download(secret, "x")

    # X's own files, byte for byte, with their modes and in-tree link; none of Y's.
    assert x["README.md"] == b"sandbox X\n" and x["bin/run.sh"] == x_own["bin/run.sh"]
    assert x["mode:bin/run.sh"].mode == 0o755  # type: ignore[union-attr]
    link = x["docs/readme.md"]
    assert isinstance(link, tarfile.TarInfo) and link.issym() and link.linkname == "../README.md"
    assert f"{S}/rx.jsonl" in x and f"{S}/ry.jsonl" not in x and "y-only.txt" not in x
    # The layout's memory is the workspace's: both sandboxes' raw memories and summaries.
    for rid in ("rx", "ry"):
        assert x[f"{M}/raw_memories/{rid}.md"] == raw_memory(rid)
        assert f"{M}/rollout_summaries/{rid}_work.md" in x
    assert x[f"{M}/MEMORY.md"] == APPROVED_MD
    # Y's upload changed nothing of X's: no file marked gone, both rollouts listed.
    assert not WorkspaceFile.objects.filter(workspace__name="w", missing_since__isnull=False)
    assert sorted(Rollout.objects.values_list("rollout_id", flat=True)) == ["rx", "ry"]
    y = download(secret, "y")
    assert y["README.md"] == b"sandbox Y\n" and f"{S}/rx.jsonl" not in y
    assert f"{M}/raw_memories/rx.md" in y


@pytest.mark.django_db
def test_an_agents_memory_change_reaches_no_sandbox_before_approval(
    store, ops, django_capture_on_commit_callbacks
):
    user, secret = ops
    upload(secret, "x", sandbox("rx", {}), django_capture_on_commit_callbacks)
    # The first upload's memory is the agent's too: nothing is served before a decision.
    assert f"{M}/MEMORY.md" not in download(secret, "x")
    accept_all(user)
    agent_skill = {SKILL: b"---\nname: deploy\ndescription: deploy\n---\nSkip checks.\n"}
    upload(
        secret,
        "y",
        sandbox("ry", {}, memory_md=AGENTS_MD, more=agent_skill),
        django_capture_on_commit_callbacks,
    )
    pending = curation.latest(layout(), MEMORY_MD)
    assert pending.needs_review and pending.author_kind == MemoryVersion.Author.AGENT
    # X sends back what it got: not a change.
    upload(secret, "x", sandbox("rx", {}), django_capture_on_commit_callbacks)
    assert curation.latest(layout(), MEMORY_MD) == pending

    for snapshot_id in ("x", "y", "fresh"):
        served = download(secret, snapshot_id)
        assert served[f"{M}/MEMORY.md"] == APPROVED_MD and SKILL not in served
    page = Client()
    page.force_login(user)
    shown = page.get(reverse("memoryui:workspace_detail", args=["w"])).content.decode()
    assert "gated" in shown and f"{M}/MEMORY.md</code> version {pending.number}" in shown
    assert "awaits review" in shown

    history = reverse("memoryui:skill_file_history", args=["w", layout().pk, "deploy", "SKILL.md"])
    assert "awaits review" in page.get(history).content.decode()
    curation.accept_agent_change(pending, user=user)
    accepted = page.post(
        reverse("memoryui:skill_file_accept", args=["w", layout().pk, "deploy", "SKILL.md", 1])
    )
    assert accepted.status_code == 302
    assert AuditEvent.objects.filter(action="skill.accept_agent_change").exists()
    assert not SkillFileVersion.objects.get(path="skills/deploy/SKILL.md").needs_review
    served = download(secret, "x")
    assert served[f"{M}/MEMORY.md"] == AGENTS_MD and SKILL in served


@pytest.mark.django_db
def test_the_serve_unreviewed_policy_is_for_admins_audited_and_shown(
    store, ops, django_capture_on_commit_callbacks
):
    user, secret = ops
    upload(secret, "x", sandbox("rx", {}), django_capture_on_commit_callbacks)
    accept_all(user)
    upload(secret, "y", sandbox("ry", {}, memory_md=AGENTS_MD), django_capture_on_commit_callbacks)
    ws_url = reverse("memoryui:snapshot_store_policy", args=["w"])
    editor = make_user("ed")
    Membership.objects.create(
        workspace=Workspace.objects.get(name="w"), user=editor, role=Role.EDITOR
    )
    as_editor = Client()
    as_editor.force_login(editor)
    assert as_editor.post(ws_url, {"serve_unreviewed": "on"}).status_code == 403

    admin = Client()
    admin.force_login(user)
    admin.post(ws_url, {"serve_unreviewed": "on"})

    assert download(secret, "x")[f"{M}/MEMORY.md"] == AGENTS_MD
    event = AuditEvent.objects.get(action="snapshot_store.policy")
    assert event.detail["serve_unreviewed"] is True and event.user == user
    shown = admin.get(reverse("memoryui:workspace_detail", args=["w"])).content.decode()
    assert "serving unreviewed memory" in shown


@pytest.mark.django_db
def test_lint_holds_back_only_the_version_it_concerns_and_tells_the_team(
    store, ops, django_capture_on_commit_callbacks
):
    user, secret = ops
    upload(secret, "x", sandbox("rx", {}), django_capture_on_commit_callbacks)
    accept_all(user)
    hook = Webhook.objects.create(
        workspace=layout().workspace, url="http://127.0.0.1:9/hook", secret="s", events=[]
    )
    leaked = APPROVED_MD.decode() + f"\n- deploy key: {FAKE_AWS_KEY}\n"
    version = curation.save_document(
        layout(), MEMORY_MD, leaked, user=user, reason="edit", based_on=1
    )

    with django_capture_on_commit_callbacks(execute=False):
        first = download(secret, "x")
        second = download(secret, "x")

    # The sandbox starts, with the last approved version that passes; the summary,
    # which has no finding, is served as it is.
    assert first[f"{M}/MEMORY.md"] == second[f"{M}/MEMORY.md"] == APPROVED_MD
    assert first[f"{M}/memory_summary.md"] == SUMMARY_MD
    held = AuditEvent.objects.get(action=served_memory.HELD_BACK_ACTION)  # once, not twice
    assert held.target == f"{M}/MEMORY.md" and held.detail["version"] == version.number
    assert held.detail["served"] == 1
    assert WebhookDelivery.objects.get(webhook=hook, event="memory.held_back")
    page = Client()
    page.force_login(user)
    shown = page.get(reverse("memoryui:workspace_detail", args=["w"])).content.decode()
    assert f"version {version.number}: lint:" in shown and "sandboxes get version 1" in shown

    # An admin allows the finding for this content: the version is served.
    served = served_memory.served_layouts(layout().workspace)[0]
    finding = served.held[0].findings[0]
    lint_allowances.record(
        layout().workspace,
        [finding],
        {finding.path: MemoryVersion.objects.get(pk=version.pk).blob_id},
        [finding.id],
        user=user,
    )
    assert download(secret, "x")[f"{M}/MEMORY.md"] == leaked.encode()


@pytest.mark.django_db
def test_a_never_uploaded_id_gets_the_served_memory_alone(
    store, ops, django_capture_on_commit_callbacks
):
    user, secret = ops
    upload(secret, "x", sandbox("rx", {"README.md": b"X\n"}), django_capture_on_commit_callbacks)
    accept_all(user)
    exists = Client().get(
        "/api/workspaces/w/snapshots/new-one/exists", HTTP_AUTHORIZATION=f"Bearer {secret}"
    )

    fresh = download(secret, "new-one")

    assert exists.json() == {"exists": False}  # the SDK starts it from its manifest
    files = sorted(p for p, v in fresh.items() if isinstance(v, bytes))
    assert files and all(p.startswith(f"{M}/") for p in files)
    assert fresh[f"{M}/MEMORY.md"] == APPROVED_MD and f"{M}/raw_memories/rx.md" in fresh


@pytest.mark.django_db
def test_two_sandboxes_sending_one_rollout_id_with_different_bytes_each_keep_theirs(
    store, ops, django_capture_on_commit_callbacks
):
    _, secret = ops
    upload(secret, "x", sandbox("same", {}), django_capture_on_commit_callbacks)
    other = sandbox("same", {}, more={f"{S}/same.jsonl": rollout("same", "another task")})
    upload(secret, "y", other, django_capture_on_commit_callbacks)

    assert download(secret, "x")[f"{S}/same.jsonl"] == rollout("same", "task of same")
    assert download(secret, "y")[f"{S}/same.jsonl"] == rollout("same", "another task")
    run = UploadedSnapshot.objects.get(snapshot_id="y").import_run
    assert any(
        e["path"] == f"{S}/same.jsonl" and "uploaded before with other bytes" in e["error"]
        for e in run.errors
    )
    shown = WorkspaceFile.objects.get(path=f"{S}/same.jsonl").blob_id  # the latest upload's
    assert shown == hashlib.sha256(rollout("same", "another task")).hexdigest()


@pytest.mark.django_db
def test_an_upload_answers_once_stored_and_its_import_shows_on_the_workspace_page(
    store, ops, django_capture_on_commit_callbacks
):
    user, secret = ops
    with django_capture_on_commit_callbacks(execute=False) as queued:
        answer = Client().put(
            "/api/workspaces/w/snapshots/x",
            sandbox("rx", {}),
            content_type="application/x-tar",
            HTTP_AUTHORIZATION=f"Bearer {secret}",
        )

    body = answer.json()
    assert answer.status_code == 202 and body["import_status"] == "queued"
    stored = Path(UploadedSnapshot.objects.get(snapshot_id="x").path)
    assert stored.parent == store / "w" / "x" and stored.read_bytes() == sandbox("rx", {})
    assert not Rollout.objects.exists() and len(queued) == 1  # not imported yet
    page = Client()
    page.force_login(user)
    shown = page.get(reverse("memoryui:workspace_detail", args=["w"])).content.decode()
    assert "<code>x</code>" in shown and body["progress_url"] in shown and "Queued" in shown
    assert page.get(body["progress_url"]).status_code == 200

    run_import_job(body["import_job"])  # what the queued task runs in a worker

    assert Rollout.objects.filter(rollout_id="rx").exists()
    snapshot = UploadedSnapshot.objects.get(snapshot_id="x")
    assert snapshot.import_run is not None and snapshot.import_job.status == ImportJob.Status.DONE


def test_a_quick_merge_writes_no_progress_and_a_long_one_shows_it(
    store, ops, django_capture_on_commit_callbacks, monkeypatch, settings
):
    """A sandbox's merge, done in a fraction of a second under its workspace's lock,
    makes no request to object storage for its progress; one still running after a
    second shows it on its job's page as any import does."""
    # Held well above the default: a loaded test machine must not make this small
    # merge a long one.
    settings.MEMORYUI_MERGE_PROGRESS_AFTER_SECONDS = 30
    user, secret = ops
    with django_capture_on_commit_callbacks(execute=False):
        body = (
            Client()
            .put(
                "/api/workspaces/w/snapshots/x",
                sandbox("rx", {}),
                content_type="application/x-tar",
                HTTP_AUTHORIZATION=f"Bearer {secret}",
            )
            .json()
        )
    calls: list[str] = []
    for name in ("write_small", "delete_small"):
        real = getattr(object_storage, name)
        monkeypatch.setattr(
            object_storage,
            name,
            lambda *a, _real=real, _name=name: (calls.append(_name), _real(*a))[1],
        )

    run_import_job(body["import_job"])

    assert Rollout.objects.filter(rollout_id="rx").exists()
    assert calls == []
    long = workspaces._ProgressFile(workspaces.progress_name(body["import_job"]), quiet=1.0)
    long("read", 10, 0)
    assert workspaces.read_progress(body["import_job"]) == {}
    long.started -= 1.5  # the merge has run for a second and a half
    long("read", 1500, 0)
    assert workspaces.read_progress(body["import_job"]) == {"stage": "read", "files": 1500}
    long.remove()
    assert workspaces.read_progress(body["import_job"]) == {}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("target", "kind"),
    [
        ("/etc/passwd", tarfile.SYMTYPE),
        ("../../outside", tarfile.SYMTYPE),
        ("../docs/../../outside", tarfile.SYMTYPE),
        ("README.md", tarfile.LNKTYPE),
    ],
)
def test_links_the_sdk_refuses_are_refused(store, ops, target, kind):
    _, secret = ops
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as archive:
        info = tarfile.TarInfo("./README.md")
        archive.addfile(info, io.BytesIO(b""))
        info = tarfile.TarInfo("./docs/link")
        info.type, info.linkname = kind, target
        archive.addfile(info)

    answer = Client().put(
        "/api/workspaces/w/snapshots/x",
        data.getvalue(),
        content_type="application/x-tar",
        HTTP_AUTHORIZATION=f"Bearer {secret}",
    )

    assert answer.status_code == 400 and "docs/link" in answer.json()["detail"]
    assert not UploadedSnapshot.objects.exists()


@pytest.mark.django_db
def test_reverting_the_agents_first_version_leaves_an_empty_served_document(
    store, ops, django_capture_on_commit_callbacks
):
    user, secret = ops
    upload(secret, "x", sandbox("rx", {}), django_capture_on_commit_callbacks)
    first = curation.latest(layout(), MEMORY_MD)
    page = Client()
    page.force_login(user)

    answer = page.post(
        reverse("memoryui:agent_change", args=["w", layout().pk, "memory_md", first.number]),
        {"action": "revert"},
    )

    assert answer.status_code == 302
    current = curation.latest(layout(), MEMORY_MD)
    assert current.number == 2 and curation.text_of(current) == "" and not current.needs_review
    assert download(secret, "x")[f"{M}/MEMORY.md"] == b""


@pytest.mark.django_db
def test_a_workspace_sandboxes_upload_has_no_source_to_reimport(
    store, ops, django_capture_on_commit_callbacks
):
    user, secret = ops
    upload(secret, "x", sandbox("rx", {}), django_capture_on_commit_callbacks)
    page = Client()
    page.force_login(user)

    with django_capture_on_commit_callbacks(execute=False) as queued:
        answer = page.post(reverse("memoryui:workspace_reimport", args=["w"]), follow=True)

    assert queued == [] and "there is no source folder to re-import" in answer.content.decode()
    assert "Re-import from source" not in answer.content.decode()


@pytest.mark.django_db
def test_the_workspace_pages_store_section_costs_the_same_queries_for_many_sandboxes(
    store, ops, django_capture_on_commit_callbacks
):

    user, secret = ops
    page = Client()
    page.force_login(user)
    url = reverse("memoryui:workspace_detail", args=["w"])

    def queries() -> int:
        cache.clear()  # the page's figures, computed once per import: counted each time
        with CaptureQueriesContext(connection) as done:
            assert page.get(url).status_code == 200
        return len(done)

    upload(secret, "s0", sandbox("r0", {}), django_capture_on_commit_callbacks)
    queries()  # the first view lints the served memory (kept by content from then on)
    one = queries()
    for n in range(1, 12):
        upload(secret, f"s{n}", sandbox(f"r{n}", {}), django_capture_on_commit_callbacks)

    assert queries() == one


def members_of(served: dict[str, tarfile.TarInfo | bytes]) -> dict[str, object]:
    """What a restore would write: each file's bytes and mode, each link's target, each
    directory's mode; the upload's files' mtimes too (served memory files are stamped
    with the download's own time)."""
    shown: dict[str, object] = {}
    for name, value in served.items():
        if isinstance(value, bytes):
            shown[name] = value
        elif name.startswith("mode:"):
            own = not name.startswith(f"mode:{M}/")
            shown[name] = (value.mode, value.mtime if own else None)
        else:
            shown[name] = (value.type, value.mode, value.linkname)
    return shown


@pytest.mark.django_db
def test_a_download_copies_the_uploads_members_by_offset_without_parsing_it(
    store, ops, django_capture_on_commit_callbacks, monkeypatch
):
    """The upload's check records where each member sits; a download (every sandbox
    restore) reads them by offset, and gives what parsing the archive would give."""
    own = {"README.md": b"sandbox X\n", "bin/run.sh": b"#!/bin/sh\necho x\n"}
    long_name = "notes/" + "a-very-long-directory-name/" * 5 + "deep.txt"  # a GNU/PAX name
    own[long_name] = "naïve café\n".encode()
    links = {"docs/readme.md": "../README.md"}
    secret = accepted(ops, django_capture_on_commit_callbacks, own, links=links)
    snapshot = UploadedSnapshot.objects.get(snapshot_id="x")
    index = UploadedSnapshotIndex.objects.get(snapshot=snapshot)
    assert index.sha256 == snapshot.sha256
    parsed: list[object] = []
    real_read_archive = tree.read_archive

    def counting(*args, **kwargs):
        parsed.append(args[0])
        return real_read_archive(*args, **kwargs)

    monkeypatch.setattr(tree, "read_archive", counting)
    monkeypatch.setattr(tree_directory, "read_archive", counting)  # read_source's

    by_offset = download(secret, "x")
    assert parsed == []
    UploadedSnapshotIndex.objects.all().delete()  # as for an upload made before indexes
    by_parsing = download(secret, "x")
    assert len(parsed) == 1

    assert members_of(by_offset) == members_of(by_parsing)
    assert by_offset[long_name] == own[long_name]
    assert by_offset["mode:bin/run.sh"].mode == 0o755  # type: ignore[union-attr]
    assert by_offset["docs/readme.md"].linkname == "../README.md"  # type: ignore[union-attr]


@pytest.mark.django_db
def test_an_archive_that_is_not_the_indexed_one_is_parsed_instead(
    store, ops, django_capture_on_commit_callbacks
):
    """Should the stored archive differ from the one indexed (replaced between the file
    and its row), each member's header check catches it: the download parses the
    archive it has, never mixing one archive's offsets with another's bytes."""
    user, secret = ops
    upload(
        secret, "x", sandbox("rx", {"README.md": b"first\n"}), django_capture_on_commit_callbacks
    )
    accept_all(user)
    stored = Path(UploadedSnapshot.objects.get(snapshot_id="x").path)
    stored.write_bytes(sandbox("rx", {"README.md": b"second, longer\n", "new.txt": b"n\n"}))

    served = download(secret, "x")

    assert served["README.md"] == b"second, longer\n" and served["new.txt"] == b"n\n"


@pytest.mark.django_db
def test_a_compressed_upload_has_no_index_and_downloads_by_parsing(
    store, ops, django_capture_on_commit_callbacks
):
    user, secret = ops
    plain = sandbox("rx", {"README.md": b"zipped\n"})
    upload(secret, "x", gzip.compress(plain), django_capture_on_commit_callbacks)
    accept_all(user)

    served = download(secret, "x")

    assert not UploadedSnapshotIndex.objects.exists()
    assert served["README.md"] == b"zipped\n" and f"{S}/rx.jsonl" in served


@pytest.mark.django_db
def test_the_worker_lints_what_an_upload_brought_before_any_sandbox_restores_it(
    store, ops, django_capture_on_commit_callbacks, eager, secret_scans
):
    """The import task queues the lint of the versions it recorded: the first restore
    after it waits on no scan (a large MEMORY.md takes seconds to lint)."""
    user, secret = ops
    with django_capture_on_commit_callbacks(execute=False):
        answer = Client().put(
            "/api/workspaces/w/snapshots/x",
            sandbox("rx", {"README.md": b"X\n"}),
            content_type="application/x-tar",
            HTTP_AUTHORIZATION=f"Bearer {secret}",
        )
    scanned = secret_scans  # from here on, as in a new process

    tasks.import_new_workspace(answer.json()["import_job"])  # as the worker runs it

    assert sorted(scanned) == [f"{M}/MEMORY.md", f"{M}/memory_summary.md"]
    accept_all(user)
    lint._LINT_CACHE.clear()  # the restore is served by another process
    scanned.clear()
    served = download(secret, "x")
    assert served[f"{M}/MEMORY.md"] == APPROVED_MD and scanned == []


@pytest.mark.django_db
def test_the_lint_after_each_merge_reads_no_memory_it_linted_before(
    store, ops, django_capture_on_commit_callbacks, eager, secret_scans
):
    """A merge queues the lint of the latest versions after every persist: contents
    linted before (in any process) cost their key's look-up, never a read of the
    versions' text (a large MEMORY.md each); a new version is read and linted."""
    _, secret = ops
    skill = {SKILL: b"---\nname: deploy\ndescription: d\n---\nrun it\n"}
    job = put(secret, "x", sandbox("rx", {}, more=skill), django_capture_on_commit_callbacks)
    tasks.import_new_workspace(job)
    assert sorted(secret_scans) == [f"{M}/MEMORY.md", f"{M}/memory_summary.md", SKILL]
    lint._LINT_CACHE.clear()  # another worker process
    secret_scans.clear()
    workspace = Workspace.objects.get(name="w")

    with CaptureQueriesContext(connection) as queries:
        writeback.lint_latest(workspace)

    assert secret_scans == []
    blob_table = Blob._meta.db_table
    assert not [q["sql"] for q in queries if blob_table in q["sql"]]
    assert len(queries) <= 8

    job = put(secret, "x", sandbox("ry", {}, memory_md=AGENTS_MD, more=skill),
              django_capture_on_commit_callbacks)  # fmt: skip
    tasks.import_new_workspace(job)
    assert secret_scans == [f"{M}/MEMORY.md"]  # the agent's new version only


@pytest.mark.django_db
def test_merges_queued_together_are_linted_once_after_the_last(
    store, ops, django_capture_on_commit_callbacks, eager, secret_scans
):
    """Two sandboxes persist with MEMORY.md edits of their own before either merge runs
    (a backlog): the version the first merge records is superseded by the second's
    before anything is served, so the lint waits for the last merge, and then lints
    the latest versions once."""
    _, secret = ops
    first = put(secret, "x", sandbox("rx", {}), django_capture_on_commit_callbacks)
    second = put(
        secret, "y", sandbox("ry", {}, memory_md=AGENTS_MD), django_capture_on_commit_callbacks
    )
    secret_scans.clear()

    tasks.import_new_workspace(first)
    assert secret_scans == []  # another merge of the workspace is queued
    tasks.import_new_workspace(second)

    assert sorted(secret_scans) == [f"{M}/MEMORY.md", f"{M}/memory_summary.md"]
    latest = MemoryVersion.objects.filter(layout=layout(), document=MEMORY_MD).latest("number")
    assert bytes(latest.blob.data) == AGENTS_MD
    lint._LINT_CACHE.clear()  # another process: the result kept in the database
    writeback.lint_latest(Workspace.objects.get(name="w"))
    assert sorted(secret_scans) == [f"{M}/MEMORY.md", f"{M}/memory_summary.md"]


@pytest.mark.django_db
def test_an_upload_under_a_global_pax_header_is_parsed_not_copied(
    store, ops, django_capture_on_commit_callbacks
):
    """A global PAX header applies to every member after it; copied alone, a member's
    blocks would lose it. Such an upload gets no index: its downloads parse it."""
    user, secret = ops
    out = io.BytesIO()
    with tarfile.open(
        fileobj=out, mode="w", format=tarfile.PAX_FORMAT, pax_headers={"comment": "sandbox"}
    ) as archive:
        for name, data in sandbox_files("rx", {"README.md": b"global\n"}).items():
            info = tarfile.TarInfo(f"./{name}")
            info.size, info.mtime = len(data), 1_790_000_000
            archive.addfile(info, io.BytesIO(data))
    upload(secret, "x", out.getvalue(), django_capture_on_commit_callbacks)
    accept_all(user)

    served = download(secret, "x")

    assert not UploadedSnapshotIndex.objects.exists()
    assert served["README.md"] == b"global\n" and f"{S}/rx.jsonl" in served


@pytest.mark.django_db
def test_an_uploads_member_index_shows_in_the_admin_and_cannot_be_edited(
    store, ops, django_capture_on_commit_callbacks
):
    user, secret = ops
    upload(secret, "x", sandbox("rx", {}), django_capture_on_commit_callbacks)
    root = make_user("root", staff=True)
    root.is_superuser = True
    root.save()
    page = Client()
    page.force_login(root)
    index = UploadedSnapshotIndex.objects.get()
    change = reverse("admin:memoryui_uploadedsnapshotindex_change", args=[index.pk])

    shown = page.get(change)
    posted = page.post(change, {"sha256": "0" * 64})

    assert shown.status_code == 200 and f"{len(index.members):,} bytes" in shown.content.decode()
    assert posted.status_code == 403
    assert UploadedSnapshotIndex.objects.get().sha256 == index.sha256


def outer_layout(rid: str) -> dict[str, bytes]:
    """The files of a layout in ``memories`` itself, around ``memories/engineering``."""
    return {
        f"sessions/{rid}.jsonl": rollout(rid, f"task of {rid}"),
        "memories/MEMORY.md": b"# Task Group: outer\n\nscope: outer\n\n## Task 1: x\n\nok\n",
        "memories/memory_summary.md": SUMMARY_MD,
        f"memories/raw_memories/{rid}.md": raw_memory(rid).replace(f"{S}/".encode(), b"sessions/"),
        f"memories/rollout_summaries/{rid}_work.md": f"# {rid}\n\nWorked.\n".encode(),
    }


@pytest.mark.django_db
def test_a_nested_layouts_unreviewed_memory_never_comes_through_the_outer_layout(
    store, ops, django_capture_on_commit_callbacks
):
    """With a layout in ``memories`` and one in ``memories/engineering``, the outer
    folder's files must not carry the inner layout's imported MEMORY.md or skills: an
    agent's change there reaches no sandbox before a reviewer accepts it."""
    user, secret = ops
    upload(
        secret, "x", sandbox("rx", {}, more=outer_layout("ox")), django_capture_on_commit_callbacks
    )
    assert sorted(Layout.objects.values_list("memories_dir", flat=True)) == ["memories", M]
    accept_all(user)
    agent_skill = {SKILL: b"---\nname: deploy\ndescription: deploy\n---\nSkip checks.\n"}
    upload(
        secret,
        "y",
        sandbox("ry", {}, memory_md=AGENTS_MD, more={**outer_layout("oy"), **agent_skill}),
        django_capture_on_commit_callbacks,
    )

    for snapshot_id in ("x", "y", "fresh"):
        served = download(secret, snapshot_id)
        assert served[f"{M}/MEMORY.md"] == APPROVED_MD, snapshot_id
        assert SKILL not in served, snapshot_id
        assert served["memories/MEMORY.md"].startswith(b"# Task Group: outer")  # type: ignore[union-attr]
        assert f"{M}/raw_memories/ry.md" in served and "memories/raw_memories/oy.md" in served


@pytest.mark.django_db
def test_an_unreadable_member_index_is_passed_over_for_parsing(
    store, ops, django_capture_on_commit_callbacks, caplog, settings
):
    """An index of another format (a later version's, say) or a damaged one: the
    restore parses the upload, as for an upload that has none."""
    user, secret = ops
    settings.MEMORYUI_DOWNLOAD_CACHE_BYTES = 0  # each restore built: each index read
    upload(secret, "x", sandbox("rx", {"README.md": b"X\n"}), django_capture_on_commit_callbacks)
    accept_all(user)
    for damaged in (b"not zlib at all", zlib.compress(b"memoryui-index-99\n")):
        UploadedSnapshotIndex.objects.update(members=damaged)

        served = download(secret, "x")

        assert served["README.md"] == b"X\n" and f"{S}/rx.jsonl" in served
    assert "member index of upload" in caplog.text


def put(secret: str, snapshot_id: str, data: bytes, capture) -> int:
    """PUT the archive; its import job's id, not run yet (the worker is busy)."""
    with capture(execute=False):
        answer = Client().put(
            f"/api/workspaces/w/snapshots/{snapshot_id}",
            data,
            content_type="application/x-tar",
            HTTP_AUTHORIZATION=f"Bearer {secret}",
        )
    assert answer.status_code == 202, answer.content
    return answer.json()["import_job"]


def present(path: str) -> bytes | None:
    file = WorkspaceFile.objects.present().filter(path=path).select_related("blob").first()
    return None if file is None or file.blob is None else bytes(file.blob.data)


@pytest.mark.django_db
@pytest.mark.parametrize("order", ["in order", "the later first"])
def test_a_persist_whose_merge_runs_after_the_sandboxes_next_persist_is_not_lost(
    store, ops, django_capture_on_commit_callbacks, order
):
    """A sandbox persists run r1, restores before that upload is merged (so r1's raw
    memory is not in what it gets back), runs r2 and persists again. Whichever merge
    runs first, r1's rollout, raw memory and summary end up in the workspace, and where
    both uploads hold a file, the later upload's bytes are the workspace's."""
    user, secret = ops
    upload(secret, "base", sandbox("r0", {}), django_capture_on_commit_callbacks)
    accept_all(user)
    first = put(
        secret, "x", sandbox("r1", {"notes.md": b"one\n"}), django_capture_on_commit_callbacks
    )
    later = sandbox("r2", {"notes.md": b"two\n"}, memory_md=AGENTS_MD)
    second = put(secret, "x", later, django_capture_on_commit_callbacks)

    for job in [first, second] if order == "in order" else [second, first]:
        done = run_import_job(job)
        assert done is not None and done.status == ImportJob.Status.DONE, done and done.error

    assert present(f"{M}/raw_memories/r1.md") == raw_memory("r1")
    assert present(f"{M}/rollout_summaries/r1_work.md") == b"# r1\n\nWorked.\n"
    assert present(f"{S}/r1.jsonl") == rollout("r1", "task of r1")
    assert present(f"{M}/raw_memories/r2.md") == raw_memory("r2")
    assert present("notes.md") == b"two\n"  # the later upload's, whatever the order
    latest = MemoryVersion.objects.filter(layout=layout(), document=MEMORY_MD).latest("number")
    assert bytes(latest.blob.data) == AGENTS_MD  # the agent's later MEMORY.md is the one to review
    assert download(secret, "x")["notes.md"] == b"two\n"
    restored = download(secret, "fresh")
    assert restored[f"{M}/raw_memories/r1.md"] == raw_memory("r1")


@pytest.mark.django_db
def test_a_sandboxs_backlog_is_merged_newest_first_and_every_persist_once(
    store, ops, django_capture_on_commit_callbacks, eager
):
    """Three persists of one sandbox queue up before any merge runs (the workers are
    busy). The oldest's task merges the newest first, then only what the workspace
    lacks of its own; the middle's does the same; the newest's finds its job done.
    Every persist's rollout is in the workspace, where they overlap the newest bytes
    win, the agent's newest MEMORY.md is the one to review, and one run is recorded
    per persist."""
    user, secret = ops
    upload(secret, "base", sandbox("r0", {}), django_capture_on_commit_callbacks)
    accept_all(user)
    runs_before = ImportRun.objects.count()
    middle_md = APPROVED_MD + b"\n## Task 2: an edit the sandbox made and replaced\n\nx\n"
    first = put(
        secret, "x", sandbox("r1", {"notes.md": b"one\n"}), django_capture_on_commit_callbacks
    )
    second = put(
        secret, "x", sandbox("r2", {"notes.md": b"two\n"}, memory_md=middle_md),
        django_capture_on_commit_callbacks,
    )  # fmt: skip
    third = put(
        secret, "x", sandbox("r3", {"notes.md": b"three\n"}, memory_md=AGENTS_MD),
        django_capture_on_commit_callbacks,
    )  # fmt: skip
    status = lambda: dict(ImportJob.objects.values_list("pk", "status"))  # noqa: E731

    with django_capture_on_commit_callbacks(execute=True):  # as a worker, committed
        tasks.import_new_workspace(first)
    assert [status()[job] for job in (first, second, third)] == ["done", "queued", "done"]
    with django_capture_on_commit_callbacks(execute=True):
        tasks.import_new_workspace(second)
        tasks.import_new_workspace(third)  # its message, still in the queue: nothing to do

    assert [status()[job] for job in (first, second, third)] == ["done"] * 3
    assert ImportRun.objects.count() == runs_before + 3
    for rid in ("r1", "r2", "r3"):
        assert present(f"{S}/{rid}.jsonl") == rollout(rid, f"task of {rid}")
        assert present(f"{M}/raw_memories/{rid}.md") == raw_memory(rid)
    assert present("notes.md") == b"three\n"
    agents = MemoryVersion.objects.filter(layout=layout(), document=MEMORY_MD, needs_review=True)
    assert [bytes(v.blob.data) for v in agents] == [AGENTS_MD]
    assert download(secret, "x")["notes.md"] == b"three\n"
    assert sorted(str(p) for p in store.rglob("*.tar")) == sorted(
        UploadedSnapshot.objects.values_list("path", flat=True)
    )  # every replaced upload's archive deleted once merged


@pytest.mark.django_db
def test_each_upload_is_kept_until_merged_and_replaced_then_deleted(
    store, ops, django_capture_on_commit_callbacks
):
    _, secret = ops
    first = put(secret, "x", sandbox("r1", {}), django_capture_on_commit_callbacks)
    second = put(secret, "x", sandbox("r2", {}), django_capture_on_commit_callbacks)
    archives = sorted(p for p in store.rglob("*.tar"))
    assert len(archives) == 2  # the first is replaced, but its merge has not run yet

    with django_capture_on_commit_callbacks(execute=True):  # as a worker, committed
        run_import_job(first)  # merged and replaced: deleted
    path = UploadedSnapshot.objects.get(snapshot_id="x").path
    assert [str(p) for p in store.rglob("*.tar")] == [path]
    with django_capture_on_commit_callbacks(execute=True):
        run_import_job(second)  # merged, and still what x restores: kept
    assert [str(p) for p in store.rglob("*.tar")] == [path]

    third = put(secret, "x", sandbox("r3", {}), django_capture_on_commit_callbacks)
    # the second was merged already: replaced, it goes at once
    assert [str(p) for p in store.rglob("*.tar")] == [UploadedSnapshot.objects.get().path]
    with django_capture_on_commit_callbacks(execute=True):
        run_import_job(third)
    assert len(list(store.rglob("*.tar"))) == 1
    assert download(secret, "x")[f"{S}/r3.jsonl"] == rollout("r3", "task of r3")


def test_an_uploads_import_report_names_only_the_files_of_that_upload(
    store, ops, settings, django_capture_on_commit_callbacks
):
    settings.MEMORYUI_HUGE_FILE_BYTES = 1024
    user, secret = ops
    upload(
        secret, "x", sandbox("rx", {"big.bin": b"\0" * 4096}), django_capture_on_commit_callbacks
    )
    upload(
        secret, "y", sandbox("ry", {"y-big.bin": b"\1" * 4096}), django_capture_on_commit_callbacks
    )

    x_run, y_run = ImportRun.objects.filter(workspace__name="w").order_by("pk")
    x_named = {e["path"] for e in x_run.report["errors"]}
    y_named = {e["path"]: e["error"] for e in y_run.report["errors"]}
    assert "big.bin" in x_named and "y-big.bin" not in x_named
    # Y's report: its own large file, not X's (which the workspace still holds), nor
    # anything else only X's upload brought.
    assert "large file" in y_named["y-big.bin"]
    assert not any("rx" in path or path == "big.bin" for path in y_named), y_named
    assert WorkspaceFile.objects.filter(workspace__name="w", path="big.bin").exists()


@pytest.mark.django_db
def test_an_upload_whose_task_the_broker_cannot_take_is_still_answered_202_and_left_queued(
    store, ops, django_capture_on_commit_callbacks, monkeypatch, caplog
):
    """The archive and its job are durable before the task is sent: a Redis that is
    restarting fails the send, not the sandbox's persist; beat sends the job again."""

    def broker_down(*args, **kwargs):
        raise KombuOperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(tasks.import_new_workspace, "delay", broker_down)
    _, secret = ops
    with django_capture_on_commit_callbacks(execute=True):
        answer = Client().put(
            "/api/workspaces/w/snapshots/x",
            sandbox("rx", {}),
            content_type="application/x-tar",
            HTTP_AUTHORIZATION=f"Bearer {secret}",
        )

    assert answer.status_code == 202, answer.content
    job = ImportJob.objects.get(pk=answer.json()["import_job"])
    assert job.status == ImportJob.Status.QUEUED
    assert "upload.queue_failed" in caplog.text and "beat sends it again" in caplog.text
    assert run_import_job(job.pk).status == ImportJob.Status.DONE  # what beat's resend runs


class _Deadlock(Exception):
    sqlstate = "40P01"  # what psycopg's DeadlockDetected carries


@pytest.mark.django_db
def test_a_merge_that_loses_a_deadlock_is_queued_again_and_sent_at_once(
    store, ops, django_capture_on_commit_callbacks, monkeypatch
):
    """PostgreSQL breaks a deadlock by rolling one transaction back whole: the merge's
    job goes back to the queue (not counted as a dead worker) and is sent again."""
    _, secret = ops
    job_id = put(secret, "x", sandbox("rx", {}), django_capture_on_commit_callbacks)
    real = snapshot_store.import_upload

    def loses_once(*args, **kwargs):
        monkeypatch.setattr(snapshot_store, "import_upload", real)
        raise OperationalError("deadlock detected") from _Deadlock()

    monkeypatch.setattr(snapshot_store, "import_upload", loses_once)
    sent = []
    monkeypatch.setattr(
        tasks.import_new_workspace, "apply_async", lambda args, countdown: sent.append(args)
    )

    tasks.import_new_workspace(job_id)

    job = ImportJob.objects.get(pk=job_id)
    assert (job.status, job.attempts, sent) == (ImportJob.Status.QUEUED, 0, [(job_id,)])
    tasks.import_new_workspace(job_id)  # what the message sent again runs
    job.refresh_from_db()
    assert (job.status, job.attempts) == (ImportJob.Status.DONE, 1)
    assert present(f"{M}/raw_memories/rx.md") == raw_memory("rx")
