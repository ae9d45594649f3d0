"""Proof with the SDK's own code (openai-agents 0.24.0): its ``UnixLocalSandboxClient``
resumes from snapshots and session states that memoryui exported, its ``Memory()``
capability injects the curated ``memory_summary.md``, and its memory storage reads the
exported selection and raw memories without losing an item."""

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from agents.sandbox.capabilities.memory import Memory
from agents.sandbox.config import MemoryLayoutConfig
from agents.sandbox.manifest import Manifest
from agents.sandbox.memory.storage import SandboxMemoryStorage
from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient

from memoryui import curation, pipeline, snapshots, writeback
from memoryui.importer import import_workspace
from memoryui.models import (
    GenerationSettings,
    Layout,
    MemoryVersion,
    PhaseOneJob,
    PhaseOneResult,
    Proposal,
    Workspace,
)
from tests.factories import curate, make_user

pytestmark = pytest.mark.django_db

ENGINEERING = MemoryLayoutConfig(
    memories_dir="memories/engineering", sessions_dir="sessions/engineering"
)


@pytest.fixture
def sdk_tree(tmp_path, fixtures_dir):
    """small-a as the SDK left it: workspace/, snapshots/<id>.tar and session_state.json."""

    def copy(name: str = "small-a") -> Path:
        target = tmp_path / name
        shutil.copytree(fixtures_dir / name, target)
        for path in target.rglob("*"):  # the shared copy has no write bits
            path.chmod(path.stat().st_mode | 0o200)
        return target

    return copy


def run(coro):
    return asyncio.run(coro)


async def resume(state_path: Path):
    """What an operator does: load the exported session state, resume, start."""
    client = UnixLocalSandboxClient()
    state = client.deserialize_session_state(json.loads(state_path.read_text()))
    session = await client.resume(state)
    await session.start()
    return session, state


async def restore_into(archive: Path, root: Path) -> None:
    """Restore any archive with the SDK, through a fresh session state."""
    state = {
        "type": "unix_local",
        "snapshot": {"type": "local", "id": archive.stem, "base_path": str(archive.parent)},
        "manifest": {"root": str(root)},
    }
    client = UnixLocalSandboxClient()
    session = await client.resume(client.deserialize_session_state(state))
    await session.start()
    await session.shutdown()


def files_of(root: Path) -> dict[str, tuple[bytes | None, int]]:
    return {
        str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes(), p.stat().st_mode & 0o777)
        for p in sorted(root.rglob("*"))
    }


def test_an_imported_sdk_snapshot_exported_unchanged_restores_to_the_same_files(sdk_tree, tmp_path):
    tree = sdk_tree()
    original = next((tree / "snapshots").glob("*.tar"))
    workspace = import_workspace(original, "snap").workspace
    out = tmp_path / "out"

    result = snapshots.export_snapshot(
        workspace, snapshot_id="exported", base_path=out, session_state=True
    )

    assert result.plan.overlay == {}
    run(restore_into(original, tmp_path / "from-original"))
    session, state = run(resume(result.session_state))
    run(session.shutdown())
    restored = files_of(Path(state.manifest.root))
    assert restored == files_of(tmp_path / "from-original")
    assert len(restored) > 50


def test_the_session_state_is_repointed_from_the_imported_one(sdk_tree, tmp_path):
    tree = sdk_tree()
    imported = json.loads((tree / "session_state.json").read_text())
    workspace = import_workspace(tree / "workspace", "a").workspace
    out = tmp_path / "snapshots"

    result = snapshots.export_snapshot(
        workspace,
        snapshot_id="curated-1",
        base_path=out,
        session_state=True,
        workspace_root=tmp_path / "sandbox",
    )

    written = json.loads(result.session_state.read_text())
    assert result.session_state == out / "curated-1.session_state.json"
    assert result.session_state_source == str(tree / "session_state.json")
    assert written["snapshot"] == {"type": "local", "id": "curated-1", "base_path": str(out)}
    assert written["manifest"]["root"] == str(tmp_path / "sandbox")
    assert written["session_id"] == imported["session_id"]
    session, state = run(resume(result.session_state))
    run(session.shutdown())
    assert str(state.snapshot.base_path) == str(out) and state.snapshot.id == "curated-1"
    assert (tmp_path / "sandbox" / "memories" / "engineering" / "MEMORY.md").read_bytes() == (
        tree / "workspace" / "memories" / "engineering" / "MEMORY.md"
    ).read_bytes()


def test_a_workspace_imported_without_a_session_state_gets_a_fresh_one_that_resumes(
    workspace_copy, tmp_path
):
    workspace = import_workspace(workspace_copy("small-b"), "b").workspace

    result = snapshots.export_snapshot(
        workspace, snapshot_id="fresh", base_path=tmp_path / "s", session_state=True
    )

    assert result.session_state_source == ""
    session, state = run(resume(result.session_state))
    run(session.shutdown())
    assert Path(state.manifest.root) == tmp_path / "s" / "fresh-workspace"
    assert (Path(state.manifest.root) / "memories" / "MEMORY.md").is_file()


def test_the_sdks_memory_capability_injects_the_curated_summary_after_resuming(sdk_tree, tmp_path):
    tree = sdk_tree()
    workspace = import_workspace(tree / "workspace", "a").workspace
    layout = Layout.objects.get(workspace=workspace, memories_dir="memories/engineering")
    curated = (
        "## User Profile\nAda maintains the menus service.\n\n"
        "## General Tips\n- Curated by a person in memoryui: run the slug tests before deploying.\n"
    )
    curate(layout, MemoryVersion.Document.MEMORY_SUMMARY, curated, make_user("ada"))

    result = snapshots.export_snapshot(
        workspace, snapshot_id="curated", base_path=tmp_path / "s", session_state=True
    )

    async def instructions() -> str | None:
        session, state = await resume(result.session_state)
        memory = Memory(layout=ENGINEERING, generate=None)
        memory.bind(session)
        try:
            return await memory.instructions(state.manifest)
        finally:
            await session.shutdown()

    text = run(instructions())
    assert text is not None
    assert curated.strip() in text
    assert "Curated by a person in memoryui" in text
    old = (tree / "workspace" / "memories/engineering/memory_summary.md").read_text().strip()
    assert old not in text


def approved_proposal(layout: Layout) -> Proposal:
    GenerationSettings.objects.get_or_create(layout=layout, defaults={"concurrency": 1})
    run_ = pipeline.start_run(layout, reextract=True)
    pipeline.run_inline(run_.pk, threads=1, sleep=lambda s: None)
    proposal = Proposal.objects.get(run=run_)
    curation.approve(proposal, user=make_user("approver"))
    return Proposal.objects.get(pk=proposal.pk)


def test_the_sdks_storage_reads_the_exported_selection_and_raw_memories_without_losing_an_item(
    model, sdk_tree, tmp_path
):
    tree = sdk_tree()
    workspace = import_workspace(tree / "workspace", "a").workspace
    layout = Layout.objects.get(workspace=workspace, memories_dir="memories/engineering")
    proposal = approved_proposal(layout)
    phase_one = {
        path: text
        for files in PhaseOneResult.objects.filter(
            pk__in=PhaseOneJob.objects.filter(run=proposal.run).values("result_id")
        ).values_list("files", flat=True)
        for path, text in files.items()
    }
    assert len(proposal.selection) == 3 and len(phase_one) == 6

    result = snapshots.export_snapshot(
        workspace, snapshot_id="consolidated", base_path=tmp_path / "s", session_state=True
    )

    async def read_back():
        session, _ = await resume(result.session_state)
        storage = SandboxMemoryStorage(session=session, layout=ENGINEERING)
        try:
            selection = await storage.read_phase_two_selection()
            current = await storage.build_phase_two_input_selection(
                max_raw_memories_for_consolidation=256
            )
            merged = await storage.read_text(Path("memories/engineering/raw_memories.md"))
            files = {
                p: await storage.read_text(Path("memories/engineering") / p) for p in phase_one
            }
            rebuilt = await storage.rebuild_raw_memories(selected_items=selection)
            rebuilt_text = await storage.read_text(Path("memories/engineering/raw_memories.md"))
            return selection, current, merged, files, rebuilt, rebuilt_text
        finally:
            await session.shutdown()

    selection, current, merged, files, rebuilt, rebuilt_text = run(read_back())
    assert [item.to_dict() for item in selection] == proposal.selection
    assert [item.rollout_id for item in current.selected] == [
        i["rollout_id"] for i in proposal.selection
    ]
    assert current.removed == [] and current.retained_rollout_ids == {
        i.rollout_id for i in selection
    }
    assert merged == proposal.raw_memories_md
    assert files == phase_one
    assert rebuilt and rebuilt_text == proposal.raw_memories_md


def test_a_write_back_is_what_the_sdk_reads_in_that_workspace(sdk_tree):
    tree = sdk_tree()
    workspace = import_workspace(tree / "workspace", "a").workspace
    layout = Layout.objects.get(workspace=workspace, memories_dir="memories/engineering")
    curated = "## General Tips\n- Written back by memoryui.\n"
    curate(layout, MemoryVersion.Document.MEMORY_SUMMARY, curated, make_user("ada"))

    writeback.write_back(layout)

    async def instructions() -> str | None:
        client = UnixLocalSandboxClient()
        session = await client.create(manifest=Manifest(root=str(tree / "workspace")))
        await session.start()
        memory = Memory(layout=ENGINEERING, generate=None)
        memory.bind(session)
        try:
            return await memory.instructions(session.state.manifest)
        finally:
            await session.shutdown()

    assert "Written back by memoryui." in (run(instructions()) or "")
    assert (
        Workspace.objects.get(pk=workspace.pk)
        .audit_events.filter(action="writeback.write")
        .exists()
    )


def test_an_export_built_from_the_previous_one_restores_as_one_built_from_nothing(
    sdk_tree, tmp_path, monkeypatch, own_download_cache
):
    """The second export copies the files unchanged since the first from it (a curated
    MEMORY.md between them); the SDK restores it to the files an export built from
    nothing restores to."""
    from memoryui import snapshot_members  # noqa: PLC0415 (the module whose clock is frozen)

    monkeypatch.setattr(snapshot_members.time, "time_ns", lambda: 1_790_000_000 * 10**9)
    tree = sdk_tree()
    workspace = import_workspace(tree / "workspace", "a").workspace
    layout = Layout.objects.get(workspace=workspace, memories_dir="memories/engineering")
    out = tmp_path / "out"
    snapshots.export_snapshot(workspace, snapshot_id="first", base_path=out)
    curate(layout, MemoryVersion.Document.MEMORY_MD, "## Curated\n- keep the canary\n")

    second = snapshots.export_snapshot(workspace, snapshot_id="second", base_path=out)
    for kept in own_download_cache.rglob("*.tar*"):
        kept.unlink()  # nothing to copy from: the third is built from nothing
    third = snapshots.export_snapshot(workspace, snapshot_id="third", base_path=out)

    assert second.snapshot.sha256 == third.snapshot.sha256
    run(restore_into(out / "second.tar", tmp_path / "second"))
    run(restore_into(out / "third.tar", tmp_path / "third"))
    restored = files_of(tmp_path / "second")
    assert restored == files_of(tmp_path / "third")
    assert restored["memories/engineering/MEMORY.md"][0] == b"## Curated\n- keep the canary\n"
