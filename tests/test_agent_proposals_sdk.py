"""The SDK's own consolidation reviewed task by task: a sandbox driven by the installed
SDK (``UnixLocalSandboxClient``, ``RemoteSnapshotSpec``) over real HTTP persists a
``MEMORY.md`` its agent changed; memoryui makes one proposal of it, a reviewer decides
each task, and a fresh sandbox restores exactly what was decided."""

import shlex
import tarfile
import uuid

import pytest

from generation import review
from memoryui import curation, tokens
from memoryui.models import Layout, MemoryVersion, Proposal, UploadedSnapshot
from memoryui_client import SnapshotClient
from tests.factories import make_user
from tests.test_remote_snapshots import (  # noqa: F401 (store, no_tracing: fixtures)
    fresh_session,
    no_tracing,
    resumed_session,
    run,
    store,
)

MD = MemoryVersion.Document.MEMORY_MD
SUMMARY = MemoryVersion.Document.MEMORY_SUMMARY
FOLDER = "memories/engineering"


def task(group: str, name: str, keywords: str, more: str = "") -> str:
    return (
        f"# Task Group: {group}\n\nscope: {name}\n\n"
        f"## Task 1: {name}, outcome success\n\n### keywords\n\n- {keywords}\n{more}"
    )


DEPLOYS = task("deploys", "deploy-billing", "billing, runbook")
DEPLOYS_EDITED = task("deploys", "deploy-billing", "billing, runbook, canary first")
ROTATION = task("key rotation", "rotate-keys", "vault, quarterly rotation of the signing keys")
SEARCH = task(
    "search index",
    "reindex-search",
    "opensearch, reindex",
    "\n## Reusable knowledge\n\n- reindex with an alias swap, never in place [Task 1]\n",
)
FIRST_MD = DEPLOYS + "\n" + ROTATION
FIRST_SUMMARY = "## User Profile\n\nDeploys billing.\n"
AGENTS_SUMMARY = "## User Profile\n\nDeploys billing, canary first.\n"


def write(memory_md: str, summary: str) -> str:
    return (
        f"mkdir -p {FOLDER} && printf %s {shlex.quote(memory_md)} > {FOLDER}/MEMORY.md"
        f" && printf %s {shlex.quote(summary)} > {FOLDER}/memory_summary.md"
    )


def key_of(proposal: Proposal, document: str, title: str, status: str) -> list[str]:
    (doc,) = [d for d in curation.document_reviews(proposal) if d.document == document]
    return [
        c.key
        for c in curation.decidable(doc)
        if c.status == status and title in (c.title + c.proposed + c.current)
    ]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("store", "no_tracing", "eager")
def test_an_agents_memory_change_is_reviewed_task_by_task_and_a_fresh_sandbox_gets_that(
    live_server, model, tmp_path
):
    staff = make_user("ops", staff=True)
    secret = tokens.create_token(staff, "sandbox", ["sandbox"]).secret
    remote = SnapshotClient(live_server.url, secret, workspace="sandbox")
    # The sandbox's first memory: the layout's first version is a proposal too.
    x_id = run(
        fresh_session(
            remote, tmp_path / "one", model, [("Remember.", write(FIRST_MD, FIRST_SUMMARY))]
        )
    )
    (first,) = Proposal.objects.all()
    assert (first.origin, first.snapshot_id, first.base_memory_md) == ("upload", x_id, None)
    curation.approve(first, user=staff)
    layout = Layout.objects.get(workspace__name="sandbox", memories_dir=FOLDER)
    approved = curation.latest_approved(layout, MD)

    # Resumed, the agent edits one task, removes another, adds a third and edits the
    # summary, and persists.
    changed_md = DEPLOYS_EDITED + "\n" + SEARCH
    injected = run(
        resumed_session(
            remote,
            x_id,
            tmp_path / "two",
            model,
            [("Consolidate.", write(changed_md, AGENTS_SUMMARY))],
        )
    )
    assert "Deploys billing." in injected
    assert (
        UploadedSnapshot.objects.get(snapshot_id=x_id).served[str(layout.pk)][MD] == approved.number
    )
    (proposal,) = Proposal.objects.filter(status=Proposal.Status.PENDING)
    assert proposal.origin == "upload" and proposal.snapshot_id == x_id
    assert proposal.base_memory_md == approved and proposal.inputs

    (edited,) = key_of(proposal, MD, "deploy-billing", "changed")
    added = key_of(proposal, MD, "reindex", "added")
    removed = key_of(proposal, MD, "rotate-keys", "removed")  # the task and its group
    assert len(added) == 3 and len(removed) == 2
    curation.decide(proposal, MD, edited, "accept", user=staff)
    for key in added:
        curation.decide(proposal, MD, key, "reject", user=staff)
    for key in removed:  # keep the task
        curation.decide(proposal, MD, key, "reject", user=staff)
    curation.approve(proposal, user=staff)

    expected = review.entries(DEPLOYS_EDITED + "\n" + ROTATION)
    # A fresh sandbox (an id never uploaded) and the resumed one get exactly that.
    with tarfile.open(fileobj=run(remote.download(uuid.uuid4().hex))) as archive:
        got_md = archive.extractfile(f"./{FOLDER}/MEMORY.md").read().decode()  # type: ignore[union-attr]
        got_summary = archive.extractfile(f"./{FOLDER}/memory_summary.md").read().decode()  # type: ignore[union-attr]
    assert [e.text.strip() for e in review.entries(got_md)] == [e.text.strip() for e in expected]
    assert got_summary == AGENTS_SUMMARY
    run(resumed_session(remote, x_id, tmp_path / "three", model, []))
    assert (tmp_path / "three" / FOLDER / "MEMORY.md").read_text() == got_md
