"""The local demo works on a copy of the bundled sample under var/: its write-backs never
change the repository's tracked files."""

import subprocess
from pathlib import Path

import pytest

from memoryui import curation, entry_checks, pipeline, workspaces
from memoryui.demo import DEMO_SANDBOX, SAMPLE, prepare_demo_workspace
from memoryui.importer import import_workspace
from memoryui.models import ImportRun, Layout, Proposal
from memoryui.writeback import write_back
from tests.factories import make_user

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parent.parent


def git_status(path: Path) -> str:
    result = subprocess.run(
        ["git", "status", "--porcelain", "--", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout


def test_the_demo_writes_back_into_its_copy_never_into_the_tracked_sample(settings, tmp_path):
    settings.VAR_DIR = tmp_path / "var"
    settings.MEMORYUI_DEMO_MODEL = "offline"  # what bin/start uses without a model
    assert git_status(SAMPLE) == ""

    settings.MEMORYUI_WORKSPACE_ROOTS = [(tmp_path / "var" / "workspaces").resolve()]  # default

    workspace = prepare_demo_workspace()
    copy = tmp_path / "var" / "workspaces" / "small-a"
    assert workspace.source_path == str(copy)
    # Under the workspace roots: the dashboard may re-import and sync it.
    assert workspaces.resolve_source(workspace.source_path) == copy.resolve()
    layout = Layout.objects.get(workspace=workspace, memories_dir="memories/engineering")
    run = pipeline.run_inline(pipeline.start_run(layout, reextract=True).pk, threads=1)
    curation.approve(Proposal.objects.get(run=run), user=make_user("demo", staff=True))
    result = write_back(layout)

    assert len(result.written) >= 3  # MEMORY.md, memory_summary.md, the selection, ...
    written = copy / "memories" / "engineering" / "MEMORY.md"
    assert written.read_bytes() != (SAMPLE / "memories" / "engineering" / "MEMORY.md").read_bytes()
    assert git_status(SAMPLE) == ""

    # The next start finds the copy already imported: nothing is imported again.
    imports = ImportRun.objects.filter(workspace=workspace).count()
    assert prepare_demo_workspace().pk == workspace.pk
    assert ImportRun.objects.filter(workspace=workspace).count() == imports


def test_a_demo_database_from_before_the_copy_is_moved_onto_the_copy(settings, tmp_path):

    settings.VAR_DIR = tmp_path / "var"
    import_workspace(SAMPLE, "small-a")  # what setup_demo used to do

    workspace = prepare_demo_workspace()
    copy = tmp_path / "var" / "workspaces" / "small-a"
    assert workspace.source_path == str(copy)
    layout = Layout.objects.get(workspace=workspace, memories_dir="memories/engineering")
    current = curation.latest(layout, "memory_md")
    curation.save_document(
        layout,
        "memory_md",
        curation.text_of(current) + "\n# Task Group: curated in the demo\n",
        user=None,
        reason="a test",
        based_on=current.number,
    )
    assert [w.path for w in write_back(layout).written] == ["memories/engineering/MEMORY.md"]
    assert "curated in the demo" in (copy / "memories" / "engineering" / "MEMORY.md").read_text()
    assert git_status(SAMPLE) == ""


def test_the_demo_starts_with_an_agents_consolidation_to_review(settings, tmp_path, client):
    """After bin/start the first page leads to a real review: the sample's sandbox
    state (sample/small-a-sandbox) is a proposal of the sandbox demo-sandbox with an
    edited, a merged, a removed and added tasks, one of them flagged."""
    settings.VAR_DIR = tmp_path / "var"
    workspace = prepare_demo_workspace()
    (proposal,) = Proposal.objects.filter(layout__workspace=workspace)
    assert (proposal.origin, proposal.snapshot_id) == ("upload", DEMO_SANDBOX)
    (doc, summary) = curation.document_reviews(proposal)
    statuses = sorted({(c.status, c.pairing) for c in curation.decidable(doc)})
    assert statuses == [("added", ""), ("changed", ""), ("changed", "merged"), ("removed", "")]
    assert curation.decidable(summary)
    flagged = entry_checks.flagged_keys(proposal)
    assert len(flagged) == 1 and "curl" in str(next(iter(flagged.values())))
    # Started again: no second proposal.
    prepare_demo_workspace()
    assert Proposal.objects.filter(layout__workspace=workspace).count() == 1

    client.force_login(make_user("demo", staff=True))
    home = client.get("/").content.decode()
    assert f"Review proposal #{proposal.pk}" in home and "demo-sandbox" in home
