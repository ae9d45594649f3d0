"""memoryui as the SDK's remote snapshot store: the whole loop with the SDK's own
``UnixLocalSandboxClient`` and ``RemoteSnapshotSpec`` over real HTTP, hostile uploads
refused, and the client importable without Django."""

import asyncio
import gzip
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import pytest
from agents import RunConfig, Runner, set_tracing_disabled
from agents.models.openai_responses import OpenAIResponsesModel
from agents.run_config import SandboxRunConfig
from agents.sandbox import SandboxAgent
from agents.sandbox.capabilities.capabilities import Capabilities
from agents.sandbox.capabilities.memory import Memory
from agents.sandbox.config import MemoryGenerateConfig, MemoryLayoutConfig
from agents.sandbox.manifest import Manifest
from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient
from agents.sandbox.session.dependencies import Dependencies
from agents.sandbox.snapshot import RemoteSnapshotSpec
from agents.tracing import get_trace_provider
from django.test import Client
from django.urls import reverse
from openai import AsyncOpenAI

from memoryui import curation, pipeline, proposal_lint, search, tokens
from memoryui.celery import app
from memoryui.importer import import_workspace
from memoryui.models import (
    AuditEvent,
    GenerationRun,
    GenerationSettings,
    ImportJob,
    Layout,
    Membership,
    MemoryVersion,
    Proposal,
    Role,
    UploadedSnapshot,
    Workspace,
    WorkspaceFile,
)
from memoryui.snapshots import EXPORT_DOWNLOAD_ACTION
from memoryui.workspaces import run_import_job
from memoryui_client import MemoryuiError, SnapshotClient
from tests.factories import make_user
from tests.scripted_model import Reply
from tests.test_celery_worker import start_worker, stop, wait_for
from tests.test_object_storage import objects, s3, s3_storages  # noqa: F401 (s3: a fixture)

ENGINEERING = MemoryLayoutConfig(
    memories_dir="memories/engineering", sessions_dir="sessions/engineering"
)
SUMMARY = MemoryVersion.Document.MEMORY_SUMMARY


@pytest.fixture
def store(settings, tmp_path):
    settings.MEMORYUI_REMOTE_STORE_DIR = tmp_path / "store"
    return tmp_path / "store"


@pytest.fixture(params=["local directory", "object storage"])
def stored_in(request, store, settings) -> str | None:
    """The snapshot store in a local directory (the default), or in S3-compatible object
    storage (moto's server): the URL of the object store, or None."""
    if request.param == "local directory":
        return None
    url = request.getfixturevalue("s3")
    settings.STORAGES = s3_storages(url)
    return url


def bearer(secret: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


def tar_of(members: list[tuple[tarfile.TarInfo, bytes | None]], *, compress: bool = False) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz" if compress else "w") as archive:
        for info, data in members:
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def member(name: str, data: bytes = b"x", **kw) -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for k, v in kw.items():
        setattr(info, k, v)
    return info, data if info.isreg() else None


def link(name: str, target: str, kind: bytes) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info, None


def put(secret: str, name: str, snapshot_id: str, data: bytes):
    return Client().put(
        f"/api/workspaces/{name}/snapshots/{snapshot_id}",
        data,
        content_type="application/x-tar",
        **bearer(secret),
    )


# --- the client -----------------------------------------------------------------------


def test_the_client_imports_without_django():
    code = (
        "import sys, memoryui_client\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('django', 'memoryui')], "
        "sorted(sys.modules)\n"
        "print(memoryui_client.SnapshotClient.__name__)"
    )
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "SnapshotClient"


# --- hostile and oversized uploads ------------------------------------------------------


HOSTILE = {
    "escape": ([member("../../escaped.txt", b"owned")], "climbs out of the workspace"),
    "absolute": ([member("/tmp/absolute-escape.txt", b"owned")], "absolute path"),
    "symlink": ([link("memories/link.md", "/etc/passwd", tarfile.SYMTYPE)], "symbolic link"),
    "hardlink": ([link("memories/link.md", "/etc/passwd", tarfile.LNKTYPE)], "hard link"),
    "device": ([member("dev-null", b"", type=tarfile.CHRTYPE)], "device or FIFO"),
    "backslashes": ([member("memories\\..\\..\\escaped.txt", b"owned")], "Windows path"),
    "backslash": ([member("memories\\notes.md", b"fine?")], "Windows path"),
    "drive": ([member("C:escaped.txt", b"owned")], "Windows path"),
}


@pytest.mark.parametrize("kind", ["escape", "absolute", "backslashes", "backslash", "drive"])
def test_the_member_names_refused_are_those_the_sdks_restore_refuses(kind):
    from agents.sandbox.util.tar_utils import (  # noqa: PLC0415
        UnsafeTarMemberError,
        safe_tar_member_rel_path,
    )

    [(info, _)] = HOSTILE[kind][0]
    with pytest.raises(UnsafeTarMemberError):
        safe_tar_member_rel_path(info)


@pytest.mark.django_db
@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_hostile_archive_is_refused_whole_and_nothing_is_written(store, tmp_path, kind):
    members, reason = HOSTILE[kind]
    secret = tokens.create_token(make_user("ops", staff=True), "t", ["sandbox"]).secret
    good = member("memories/MEMORY.md", b"# Task Group: fine\n")
    data = tar_of([good, *members])

    response = put(secret, "sandbox", "hostile-1", data)

    assert response.status_code == 400
    detail = response.json()["detail"]
    assert detail.startswith("archive refused, nothing was stored") and reason in detail
    assert not Workspace.objects.filter(name="sandbox").exists()
    assert UploadedSnapshot.objects.count() == 0
    assert [p for p in store.rglob("*") if p.is_file()] == []
    assert not list(tmp_path.parent.rglob("escaped.txt"))
    assert not Path("/tmp/absolute-escape.txt").exists()


@pytest.mark.django_db
def test_an_archive_that_expands_past_the_import_limit_is_refused_as_too_large(store, settings):
    settings.MEMORYUI_MAX_IMPORT_BYTES = 1024 * 1024
    secret = tokens.create_token(make_user("ops", staff=True), "t", ["sandbox"]).secret
    bomb = tar_of(
        [member(f"sessions/{i}.jsonl", b"\0" * 512 * 1024) for i in range(8)], compress=True
    )
    assert len(bomb) < 64 * 1024  # small on the wire, 4 MB unpacked

    response = put(secret, "sandbox", "bomb", bomb)

    assert response.status_code == 413
    assert "expands past 1.0 MB" in response.json()["detail"]
    assert [p for p in store.rglob("*") if p.is_file()] == []
    assert not Workspace.objects.filter(name="sandbox").exists()


@pytest.mark.django_db
def test_an_upload_past_the_size_limit_or_not_a_tar_is_refused(store, settings):
    settings.MEMORYUI_REMOTE_MAX_UPLOAD_BYTES = 4096
    secret = tokens.create_token(make_user("ops", staff=True), "t", ["sandbox"]).secret

    big = put(secret, "sandbox", "big", tar_of([member("a.txt", b"a" * 10_000)]))
    garbage = put(secret, "sandbox", "junk", gzip.compress(b"not a tar at all"))
    bad_id = put(secret, "sandbox", "..", tar_of([member("a.txt")]))

    assert (
        big.status_code == 413 and "larger than the store accepts (4.0 KB)" in big.json()["detail"]
    )
    assert garbage.status_code == 400 and "archive refused" in garbage.json()["detail"]
    assert bad_id.status_code in (404, 422)
    assert [p for p in store.rglob("*") if p.is_file()] == []


@pytest.mark.django_db
def test_the_store_needs_the_roles_of_reimport_and_export(store, workspace_copy):
    import_workspace(workspace_copy("small-b"), "b")
    ws = Workspace.objects.get(name="b")
    data = tar_of([member("memories/MEMORY.md", b"# Task Group: x\n")])
    answers = {}
    for role in (Role.VIEWER, Role.EDITOR, Role.ADMIN):
        user = make_user(role.value)
        Membership.objects.create(workspace=ws, user=user, role=role)
        secret = tokens.create_token(user, "t", ["b"]).secret
        answers[role] = (
            put(secret, "b", f"s-{role.value}", data).status_code,
            Client().get("/api/workspaces/b/snapshots/s-admin", **bearer(secret)).status_code,
            Client().get("/api/workspaces/b/snapshots/s-admin/exists", **bearer(secret)).json(),
        )
    nobody = tokens.create_token(make_user("outsider"), "t", ["new-one"]).secret

    assert answers[Role.VIEWER][:2] == (403, 403) and answers[Role.EDITOR][:2] == (403, 403)
    assert answers[Role.ADMIN][:2] == (202, 200)
    assert answers[Role.VIEWER][2] == {"exists": False}  # asked before the admin uploaded
    assert answers[Role.ADMIN][2] == {"exists": True}
    assert put(nobody, "new-one", "s1", data).status_code == 404  # only staff create


# --- the whole loop with the SDK ---------------------------------------------------------


def run(coro):
    return asyncio.run(coro)


APPROVED_SUMMARY = "## User Profile\n\nReviewed in memoryui: deploys go through the runbook.\n"


@pytest.fixture
def no_tracing():
    """The SDK's tracing would try to export to OpenAI's servers: off for these tests."""

    provider = get_trace_provider()
    before = getattr(provider, "_disabled", False)
    set_tracing_disabled(True)
    yield
    set_tracing_disabled(before)


AGENTS_SUMMARY = "## User Profile\n\nUnreviewed: the agent wrote this about itself.\n"
AGENTS_MEMORY = "# Task Group: deploys\n\nDeploys follow the runbook.\n"


def sdk_model(server):
    """The SDK's own Responses model, pointed at the local test server."""

    client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
    return OpenAIResponsesModel(model="test-model", openai_client=client)


def memory_agent(server):
    """A sandbox agent with the SDK's ``Memory()``: every run is recorded as a rollout,
    and when the session closes the SDK's phase one and phase two write its memory."""

    generate = MemoryGenerateConfig(
        phase_one_model=sdk_model(server),
        phase_two_model=sdk_model(server),
        phase_one_model_settings=None,
        phase_two_model_settings=None,
    )
    return SandboxAgent(
        name="deployer",
        instructions="Deploy services when asked.",
        model=sdk_model(server),
        capabilities=[
            *Capabilities.default(),
            Memory(layout=ENGINEERING, read=None, generate=generate),
        ],
    )


@pytest.mark.django_db(transaction=True)
def test_a_sandbox_persists_to_memoryui_and_a_new_one_restores_the_approved_memory(
    live_server, model, store, tmp_path, no_tracing, eager
):

    staff = make_user("ops", staff=True)
    secret = tokens.create_token(staff, "sandbox", ["sandbox"]).secret
    remote = SnapshotClient(live_server.url, secret, workspace="sandbox")
    spec = RemoteSnapshotSpec(client_dependency_key="memoryui")
    agents_summary = AGENTS_SUMMARY
    write_memory = (
        f"printf %s {shlex.quote(AGENTS_SUMMARY)} > memories/engineering/memory_summary.md"
        f" && printf %s {shlex.quote(AGENTS_MEMORY)} > memories/engineering/MEMORY.md"
    )
    # The SDK's calls, in order: the agent's run, phase one of its rollout, then phase
    # two as an agent that edits the memory folder with the sandbox's shell.
    model.script(
        Reply(raw_text="Deployed billing with the runbook."),
        Reply(
            json={
                "rollout_slug": "deploy-billing",
                "rollout_summary": "# Deploy billing\n\nFollowed the runbook; it worked.\n",
                "raw_memory": "---\ndescription: deploy billing\ntask: deploy\n---\n"
                "Deploys follow the runbook.\n",
            }
        ),
        Reply.tools(("exec_command", {"cmd": write_memory})),
        Reply(raw_text="Consolidated the memory."),
    )

    async def first_session() -> str:
        client = UnixLocalSandboxClient(dependencies=Dependencies().bind_value("memoryui", remote))
        session = await client.create(snapshot=spec, manifest=Manifest(root=str(tmp_path / "one")))
        await session.start()
        assert not await remote_exists(session)
        result = await Runner.run(
            memory_agent(model),
            "Deploy the billing service.",
            run_config=RunConfig(sandbox=SandboxRunConfig(session=session)),
        )
        assert result.final_output == "Deployed billing with the runbook."
        # Closing runs the SDK's memory generation, then persists the workspace through
        # RemoteSnapshot -> memoryui's upload.
        await session.aclose()
        return session.state.snapshot.id

    async def remote_exists(session) -> bool:
        return await session.state.snapshot.restorable(dependencies=session.dependencies)

    snapshot_id = run(first_session())
    agent_tree = tmp_path / "one"
    assert (agent_tree / "memories/engineering/memory_summary.md").read_text() == AGENTS_SUMMARY

    # memoryui has the upload and shows the agent's rollout, and the memory the SDK
    # generated for it, as the agent's (unreviewed) versions.
    assert UploadedSnapshot.objects.filter(workspace__name="sandbox", snapshot_id=snapshot_id)
    assert run(remote.exists(snapshot_id)) and not run(remote.exists("never-uploaded"))
    layout = Layout.objects.get(workspace__name="sandbox", memories_dir="memories/engineering")
    (rollout_file,) = (agent_tree / "sessions/engineering").glob("*.jsonl")
    listed = (
        Client()
        .get(f"/api/workspaces/sandbox/layouts/{layout.pk}/rollouts?limit=200", **bearer(secret))
        .json()
    )
    assert [r["rollout_id"] for r in listed["items"]] == [rollout_file.stem]
    page = Client()
    page.force_login(staff)
    rollout_page = page.get(
        reverse("memoryui:rollout_detail", args=["sandbox", layout.pk, rollout_file.stem])
    ).content.decode()
    assert "Deploy the billing service." in rollout_page
    assert "Deployed billing with the runbook." in rollout_page
    imported_summary = curation.latest(layout, SUMMARY)
    assert curation.text_of(imported_summary) == AGENTS_SUMMARY
    assert imported_summary.author_kind == MemoryVersion.Author.AGENT

    # A generation run whose phase two rewrites the summary, then an approval through the
    # API.
    GenerationSettings.objects.create(layout=layout, concurrency=1)
    generation = pipeline.start_run(layout, staff)
    while not pipeline.finish_phase_one(generation.pk):
        for job_id in pipeline.claim_window(generation.pk):
            pipeline.process_job(job_id)
    model.script(
        Reply.tools(
            ("delete_file", {"path": "memory_summary.md"}),
            ("write_file", {"path": "memory_summary.md", "content": APPROVED_SUMMARY}),
        ),
        Reply(raw_text="Rewrote the summary."),
    )
    pipeline.consolidate(generation.pk)
    proposal = Proposal.objects.get(run=generation)
    approved = Client().post(
        f"/api/workspaces/sandbox/layouts/{layout.pk}/proposals/{proposal.pk}/approve",
        **bearer(secret),
    )
    assert approved.status_code == 200, approved.content
    approved_summary = curation.text_of(curation.latest(layout, SUMMARY))
    assert approved_summary == APPROVED_SUMMARY != agents_summary

    # A new sandbox restores from memoryui; its Memory() injects the approved summary.
    async def second_session() -> str | None:
        client = UnixLocalSandboxClient(dependencies=Dependencies().bind_value("memoryui", remote))
        state = client.deserialize_session_state(
            {
                "type": "unix_local",
                "snapshot": spec.build(snapshot_id).model_dump(),
                "manifest": {"root": str(tmp_path / "two")},
            }
        )
        session = await client.resume(state)
        await session.start()
        memory = Memory(layout=ENGINEERING, generate=None)
        memory.bind(session)
        try:
            return await memory.instructions(session.state.manifest)
        finally:
            await session.shutdown()

    text = run(second_session()) or ""
    assert approved_summary.strip() in text
    assert agents_summary.strip() not in text
    restored = tmp_path / "two" / "memories/engineering/memory_summary.md"
    assert restored.read_text() == approved_summary
    session_file = next((agent_tree / "sessions/engineering").glob("*.jsonl"))
    assert (tmp_path / "two" / "sessions/engineering" / session_file.name).read_bytes() == (
        session_file.read_bytes()
    )


@pytest.mark.django_db(transaction=True)
def test_the_client_reports_memoryuis_refusal_with_its_reason(live_server, store, eager):
    secret = tokens.create_token(make_user("ops", staff=True), "t", ["sandbox"]).secret
    remote = SnapshotClient(live_server.url, secret, workspace="sandbox")
    hostile = tar_of([member("../../escaped.txt", b"owned")])

    with pytest.raises(MemoryuiError) as refused:
        run(remote.upload("s1", io.BytesIO(hostile)))
    with pytest.raises(MemoryuiError) as unknown:
        run(SnapshotClient(live_server.url, "mui_wrong", workspace="sandbox").exists("s1"))

    assert refused.value.status == 400 and "climbs out of the workspace" in refused.value.detail
    assert unknown.value.status == 401
    assert (
        json.loads(json.dumps(run(remote.upload("s2", io.BytesIO(tar_of([member("a.txt")]))))))[
            "snapshot_id"
        ]
        == "s2"
    )


@pytest.mark.django_db
def test_with_the_generate_on_upload_policy_an_uploads_import_starts_a_run_per_layout(
    model, store, fixtures_dir, django_capture_on_commit_callbacks
):

    admin = make_user("ops", staff=True)
    secret = tokens.create_token(admin, "t", ["sandbox"]).secret
    archive = next((fixtures_dir / "small-a" / "snapshots").glob("*.tar")).read_bytes()

    def upload_and_import(snapshot_id: str) -> int:
        with django_capture_on_commit_callbacks(execute=False) as queued:
            answer = put(secret, "sandbox", snapshot_id, archive)
        assert answer.status_code == 202 and answer.json()["import_status"] == "queued"
        assert len(queued) == 1  # the import, in a worker
        with django_capture_on_commit_callbacks(execute=False) as started:
            job = run_import_job(answer.json()["import_job"])
        assert job is not None and job.status == ImportJob.Status.DONE
        # The runs started; the rest lint the agents' new proposals ahead of review and
        # (PostgreSQL) compute the search vectors of what the import wrote.
        others = (proposal_lint.lint_later, search._queue)
        return sum(getattr(c, "func", None) not in others for c in started)

    assert upload_and_import("s1") == 0
    page = Client()
    page.force_login(admin)
    page.post(
        reverse("memoryui:snapshot_store_policy", args=["sandbox"]), {"generate_on_upload": "on"}
    )

    sent = upload_and_import("s2")

    layouts = Layout.objects.filter(workspace__name="sandbox", missing_since__isnull=True)
    runs = GenerationRun.objects.filter(layout__in=layouts)
    assert runs.count() == layouts.count() > 0 and sent == runs.count()
    assert (
        "Start a generation run"
        in page.get(reverse("memoryui:webhook_list", args=["sandbox"])).content.decode()
    )


# --- one workspace, many sandboxes, with the SDK -------------------------------------


def sdk_sandbox(remote: SnapshotClient):
    client = UnixLocalSandboxClient(dependencies=Dependencies().bind_value("memoryui", remote))
    return client, RemoteSnapshotSpec(client_dependency_key="memoryui")


async def run_turns(session, model, turns: list[tuple[str, str | None]]) -> None:
    """``Runner.run`` once per (prompt, shell command or None) in ``session``."""

    for prompt, command in turns:
        if command:
            model.script(Reply.tools(("exec_command", {"cmd": command})), Reply(raw_text="Done."))
        else:
            model.script(Reply(raw_text="Done."))
        await Runner.run(
            memory_agent(model),
            prompt,
            run_config=RunConfig(sandbox=SandboxRunConfig(session=session)),
        )


async def fresh_session(remote: SnapshotClient, root: Path, model, turns) -> str:
    """A new sandbox: its turns, then its close (the SDK's memory generation, with the
    local test model's own answers, and the persist to memoryui). Its snapshot id."""
    client, spec = sdk_sandbox(remote)
    session = await client.create(snapshot=spec, manifest=Manifest(root=str(root)))
    await session.start()
    await run_turns(session, model, turns)
    await session.aclose()
    return session.state.snapshot.id


async def resumed_session(remote: SnapshotClient, snapshot_id: str, root: Path, model, turns):
    """Resume ``snapshot_id`` by its state into ``root``: the summary its ``Memory()``
    injects, then its turns and close."""
    client, spec = sdk_sandbox(remote)
    state = client.deserialize_session_state(
        {
            "type": "unix_local",
            "snapshot": spec.build(snapshot_id).model_dump(),
            "manifest": {"root": str(root)},
        }
    )
    session = await client.resume(state)
    await session.start()
    memory = Memory(layout=ENGINEERING, generate=None)
    memory.bind(session)
    injected = await memory.instructions(session.state.manifest) or ""
    if turns:
        await run_turns(session, model, turns)
        await session.aclose()
    else:
        await session.shutdown()
    return injected


def reading_agent(server):
    """A sandbox agent whose ``Memory()`` only reads: the summary goes into its
    instructions."""

    return SandboxAgent(
        name="reader",
        instructions="Answer.",
        model=sdk_model(server),
        capabilities=[*Capabilities.default(), Memory(layout=ENGINEERING, generate=None)],
    )


def own_tree(root: Path) -> dict[str, bytes | str]:
    """Each file's bytes and each link's target outside the memories folders."""
    found: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("memories/"):
            continue
        if path.is_symlink():
            found[rel] = f"-> {os.readlink(path)}"
        elif path.is_file():
            found[rel] = path.read_bytes()
    return found


def curate_summary(layout: Layout, user) -> None:
    """A person writes the summary sandboxes should get."""
    current = curation.latest(layout, SUMMARY)
    curation.save_document(
        layout,
        SUMMARY,
        APPROVED_SUMMARY,
        user=user,
        reason="reviewed",
        based_on=current.number if current else None,
    )


def accept_agent_versions(user) -> None:
    for version in MemoryVersion.objects.filter(needs_review=True):
        curation.accept_agent_change(version, user=user)


@pytest.mark.django_db(transaction=True)
def test_two_sandboxes_on_one_workspace_each_get_their_own_files_and_the_curated_memory(
    live_server, model, store, stored_in, tmp_path, no_tracing, eager
):
    staff = make_user("ops", staff=True)
    secret = tokens.create_token(staff, "sandbox", ["sandbox"]).secret
    remote = SnapshotClient(live_server.url, secret, workspace="sandbox")
    x_turns = [
        ("Write the deploy notes.", "mkdir -p notes && printf 'x notes\\n' > notes/x.md"),
        ("Link the latest notes.", "ln -s notes/x.md latest.md && chmod 755 notes"),
        ("Summarize.", None),
    ]
    y_turns = [("Write y's notes.", "mkdir -p notes && printf 'y\\n' > notes/y.md"), ("Ok.", None)]
    x_id = run(fresh_session(remote, tmp_path / "x", model, x_turns))
    accept_agent_versions(staff)
    y_id = run(fresh_session(remote, tmp_path / "y", model, y_turns))
    accept_agent_versions(staff)

    downloaded = tmp_path / "x-download"
    with tarfile.open(fileobj=run(remote.download(x_id))) as archive:
        archive.extractall(downloaded, filter="data")

    # X's own files and link, byte for byte; none of Y's.
    assert own_tree(downloaded) == own_tree(tmp_path / "x")
    assert (downloaded / "latest.md").is_symlink() and not (downloaded / "notes/y.md").exists()
    # Both sandboxes' rollouts are the workspace's; the curated memory is in both.
    layout = Layout.objects.get(workspace__name="sandbox", memories_dir="memories/engineering")
    listed = Client().get(
        f"/api/workspaces/sandbox/layouts/{layout.pk}/rollouts?limit=200", **bearer(secret)
    )
    rollouts = {
        p.stem
        for d in ("x", "y")
        for p in (tmp_path / d / ENGINEERING.sessions_dir).glob("*.jsonl")
    }
    assert len(rollouts) >= 2 and {r["rollout_id"] for r in listed.json()["items"]} == rollouts
    curate_summary(layout, staff)
    restored: dict[str, bytes] = {}
    for snapshot_id in (x_id, y_id):
        with run(remote.download(snapshot_id)) as got:
            restored[snapshot_id] = got.read()
        with tarfile.open(fileobj=io.BytesIO(restored[snapshot_id])) as archive:
            member = archive.extractfile("./memories/engineering/memory_summary.md")
            assert member is not None and member.read().decode() == APPROVED_SUMMARY
    # X restored again with nothing changed: the archive kept for it, sent as it is.
    with run(remote.download(x_id)) as again:
        assert again.read() == restored[x_id]
    built = AuditEvent.objects.filter(action=EXPORT_DOWNLOAD_ACTION).order_by("-pk")
    assert [e.detail["built"] for e in built[:3]] == [False, True, True]
    # Where the uploads were kept: the store's directory, or the bucket and nothing on disk.
    # Each sandbox's last upload, under its id's folder (earlier ones, merged, are gone).
    kept = sorted(p.parent.name for p in store.rglob("*.tar")) if store.exists() else []
    if stored_in is None:
        assert kept == sorted({x_id, y_id})
    else:
        assert kept == []
        keys = [k.split("/") for k in objects(stored_in) if k.startswith("snapshots/")]
        assert sorted(parts[-2] for parts in keys) == sorted({x_id, y_id})


@pytest.mark.django_db(transaction=True)
def test_a_resumed_sandboxs_persist_leaves_the_rows_of_the_files_it_did_not_change(
    live_server, model, store, tmp_path, no_tracing, eager
):
    """The SDK's restore writes every file anew, with a new time: a resumed sandbox's
    persist brings every file so. Its merge takes the files its run changed or wrote;
    the rows of the others stay as they were. So too for a second sandbox, which
    restores the served memory another sandbox's runs wrote and persists it back."""
    staff = make_user("ops", staff=True)
    secret = tokens.create_token(staff, "sandbox", ["sandbox"]).secret
    remote = SnapshotClient(live_server.url, secret, workspace="sandbox")
    first = [("Write the deploy notes.", "mkdir -p notes && printf 'x\\n' > notes/x.md")]
    x_id = run(fresh_session(remote, tmp_path / "one", model, first))
    files = WorkspaceFile.objects.filter(workspace__name="sandbox", blob__isnull=False)
    before = {f.path: (f.pk, f.blob_id, f.mtime_ns) for f in files}
    time.sleep(1.1)  # a tar keeps whole seconds: the restore's files get another one

    second = [("And the rollback notes.", "printf 'r\\n' > notes/rollback.md")]
    run(resumed_session(remote, x_id, tmp_path / "two", model, second))

    restored = tmp_path / "two" / "notes" / "x.md"
    assert restored.stat().st_mtime_ns != (tmp_path / "one" / "notes" / "x.md").stat().st_mtime_ns
    after = {f.path: (f.pk, f.blob_id, f.mtime_ns) for f in files.all()}
    assert after["notes/x.md"] == before["notes/x.md"]
    assert "notes/rollback.md" in after and "notes/rollback.md" not in before
    unchanged = [p for p, (_, blob, _) in before.items() if after[p][1] == blob]
    assert len(unchanged) >= 3
    assert {p: after[p] for p in unchanged} == {p: before[p] for p in unchanged}
    assert any(after[p][1] != blob for p, (_, blob, _) in before.items())  # the run's own

    time.sleep(1.1)
    third = [("Write y's notes.", "mkdir -p notes && printf 'y\\n' > notes/y.md")]
    run(resumed_session(remote, "sandbox-y", tmp_path / "y", model, third))

    final = {f.path: (f.pk, f.blob_id, f.mtime_ns) for f in files.all()}
    assert "notes/y.md" in final
    # What y restored and persisted back as it was (served memory x's runs wrote), every
    # file with the time of y's restore.
    y = tmp_path / "y"
    brought_back = [
        p
        for p, (_, blob, mtime_ns) in after.items()
        if (y / p).is_file()
        and hashlib.sha256((y / p).read_bytes()).hexdigest() == blob
        and (y / p).stat().st_mtime_ns != mtime_ns
    ]
    assert brought_back
    assert {p: final[p] for p in brought_back} == {p: after[p] for p in brought_back}


@pytest.mark.django_db(transaction=True)
def test_an_agents_rewrite_of_the_summary_reaches_a_restore_only_after_approval(
    live_server, model, store, tmp_path, no_tracing, eager
):
    staff = make_user("ops", staff=True)
    secret = tokens.create_token(staff, "sandbox", ["sandbox"]).secret
    remote = SnapshotClient(live_server.url, secret, workspace="sandbox")
    x_id = run(fresh_session(remote, tmp_path / "one", model, [("Deploy billing.", None)]))
    layout = Layout.objects.get(workspace__name="sandbox", memories_dir="memories/engineering")
    curate_summary(layout, staff)
    accept_agent_versions(staff)
    rewrite = f"printf %s {shlex.quote(AGENTS_SUMMARY)} > memories/engineering/memory_summary.md"

    # The sandbox resumes with the approved summary, and its agent rewrites it.
    injected = run(
        resumed_session(remote, x_id, tmp_path / "two", model, [("Rewrite it.", rewrite)])
    )
    agents = (tmp_path / "two/memories/engineering/memory_summary.md").read_text()
    pending = curation.latest(layout, SUMMARY)
    after_rewrite = run(resumed_session(remote, x_id, tmp_path / "three", model, []))
    curation.accept_agent_change(pending, user=staff)
    after_approval = run(resumed_session(remote, x_id, tmp_path / "four", model, []))

    assert APPROVED_SUMMARY.strip() in injected
    assert pending.needs_review and curation.text_of(pending) == agents != APPROVED_SUMMARY
    assert APPROVED_SUMMARY.strip() in after_rewrite and agents.strip() not in after_rewrite
    assert agents.strip() in after_approval


README = Path(__file__).resolve().parent.parent / "docs" / "sandboxes.md"  # the snippets


def readme_snippets() -> tuple[str, str]:
    """The remote snapshot store's two Python snippets in the README: persist and
    resume, then a fresh sandbox."""
    text = README.read_text()
    section = text[text.index("**Remote snapshot store.**") : text.index("**The client**")]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2, blocks
    return blocks[0], blocks[1]


async def run_snippet(code: str, namespace: dict) -> None:
    """Run README code (top-level ``await`` included) in ``namespace``."""
    body = textwrap.indent(code, "    ")
    exec(  # noqa: S102 (the README's own code, under test)
        f"async def _snippet():\n{body}\n    globals().update(locals())\n", namespace
    )
    await namespace["_snippet"]()


@pytest.mark.django_db(transaction=True)
def test_the_readmes_snippet_persists_and_resumes_a_sandbox_with_its_files(
    live_server, model, store, tmp_path, no_tracing, eager
):
    staff = make_user("ops", staff=True)
    token = tokens.create_token(staff, "sandbox", ["support-bot"]).secret
    snippet, _ = readme_snippets()
    first, later = snippet.split("\n# Later")
    later = later.split("\n", 1)[1]
    start, close = first.split("...  #")
    close = close.split("\n", 1)[1]
    namespace = {"memoryui_url": live_server.url, "token": token}
    namespace["workspace_root"] = str(tmp_path / "sandbox")

    async def persist() -> None:
        await run_snippet(start, namespace)
        await run_turns(namespace["session"], model, [("Note it.", "printf 'kept\\n' > notes.md")])
        await run_snippet(close, namespace)

    async def resume() -> str:
        await run_snippet(later, namespace)
        memory = Memory(layout=ENGINEERING, generate=None)
        memory.bind(namespace["session"])
        try:
            return await memory.instructions(namespace["session"].state.manifest) or ""
        finally:
            await namespace["session"].shutdown()

    run(persist())
    curate_summary(Layout.objects.get(workspace__name="support-bot"), staff)
    shutil.rmtree(tmp_path / "sandbox")  # even a new machine
    injected = run(resume())

    assert (tmp_path / "sandbox/notes.md").read_text() == "kept\n"
    assert APPROVED_SUMMARY.strip() in injected


@pytest.mark.django_db(transaction=True)
def test_the_readmes_fresh_sandbox_snippet_starts_with_the_curated_summary(
    live_server, model, store, tmp_path, no_tracing, eager, monkeypatch
):

    staff = make_user("ops", staff=True)
    token = tokens.create_token(staff, "sandbox", ["support-bot"]).secret
    remote = SnapshotClient(live_server.url, token, workspace="support-bot")
    run(fresh_session(remote, tmp_path / "first", model, [("Deploy billing.", None)]))
    layout = Layout.objects.get(
        workspace__name="support-bot", memories_dir=ENGINEERING.memories_dir
    )
    curate_summary(layout, staff)
    persist, fresh = readme_snippets()
    setup = persist.split("session = await")[0]
    namespace = {"memoryui_url": live_server.url, "token": token}
    namespace["workspace_root"] = str(tmp_path / "fresh")
    monkeypatch.chdir(tmp_path)

    async def start_fresh() -> str:
        await run_snippet(setup + fresh, namespace)
        session = namespace["session"]
        # A new id, never uploaded: the memory came from the seed, not from a restore.
        assert not await remote.exists(session.state.snapshot.id)
        model.script(Reply(raw_text="Hello."))
        before = len(model.requests)
        await Runner.run(
            reading_agent(model),
            "Hello.",
            run_config=RunConfig(sandbox=SandboxRunConfig(session=session)),
        )
        await session.shutdown()
        return json.dumps(model.requests[before]["instructions"])

    instructions = run(start_fresh())

    assert json.dumps(APPROVED_SUMMARY.strip())[1:-1] in instructions


@pytest.fixture
def tasks_to(broker):
    """This process sends its tasks (the live server's, on commit) to ``broker``, where
    a real worker takes them."""

    before = app.conf.broker_url
    app.conf.broker_url = broker
    app._pool = None  # the producers were made for the previous broker
    app.amqp._producer_pool = None
    yield broker
    app.conf.broker_url = before
    app._pool = None
    app.amqp._producer_pool = None


@pytest.mark.django_db(transaction=True)
def test_uploads_are_imported_by_a_real_worker_and_each_sandbox_gets_its_own_files(
    live_server, model, store, tmp_path, no_tracing, tasks_to
):

    staff = make_user("ops", staff=True)
    secret = tokens.create_token(staff, "sandbox", ["sandbox"]).secret
    remote = SnapshotClient(live_server.url, secret, workspace="sandbox")
    worker = start_worker(tasks_to, model.base_url, "store", tmp_path, beat=False)
    try:
        x_id = run(fresh_session(remote, tmp_path / "x", model, [("Write x.", "echo x > x.md")]))
        y_id = run(fresh_session(remote, tmp_path / "y", model, [("Write y.", "echo y > y.md")]))
        wait_for(
            lambda: ImportJob.objects.filter(status=ImportJob.Status.DONE).count() == 2,
            60,
            "the worker to import both uploads",
            worker,
        )
    finally:
        log = stop(worker)

    assert UploadedSnapshot.objects.filter(import_run__isnull=False).count() == 2, log
    downloaded = tmp_path / "x-download"
    with tarfile.open(fileobj=run(remote.download(x_id))) as archive:
        archive.extractall(downloaded, filter="data")
    assert own_tree(downloaded) == own_tree(tmp_path / "x") and "y.md" not in own_tree(downloaded)
    layout = Layout.objects.get(workspace__name="sandbox", memories_dir="memories/engineering")
    listed = Client().get(
        f"/api/workspaces/sandbox/layouts/{layout.pk}/rollouts?limit=200", **bearer(secret)
    )
    rollouts = {
        p.stem
        for d in ("x", "y")
        for p in (tmp_path / d / ENGINEERING.sessions_dir).glob("*.jsonl")
    }
    assert {r["rollout_id"] for r in listed.json()["items"]} == rollouts and y_id != x_id
