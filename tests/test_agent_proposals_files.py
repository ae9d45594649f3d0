"""The files of an agent's change from a sandbox, each decided on its own: the raw
memories and rollout summaries its consolidation pruned (forget or keep)."""

import tarfile
from pathlib import Path

import pytest
from django.test import Client

from memoryui import curation, tokens
from memoryui.models import AuditEvent, Layout, MemoryVersion, Proposal
from memoryui.snapshot_store import sandbox_archive
from tests.test_agent_proposals import agent_edit, text, upload

MD = MemoryVersion.Document.MEMORY_MD
FORGOT = "memories/raw_memories/prefs-6e64dc.md"
KEPT = "memories/raw_memories/ops-ledger-sync-77656c.md"


@pytest.fixture
def base(ws) -> Layout:
    return Layout.objects.select_related("workspace").get(
        workspace__name="a", memories_dir="memories"
    )


def held(ws: Path, *missing: str) -> list[str]:
    """The layout's raw memories and rollout summaries but ``missing``."""
    return sorted(
        str(p.relative_to(ws))
        for folder in ("raw_memories", "rollout_summaries")
        for p in (ws / "memories" / folder).glob("*.md")
        if str(p.relative_to(ws)) not in missing
    )


def restored(layout: Layout, snapshot_id: str) -> set[str]:
    archive = sandbox_archive(layout.workspace, snapshot_id, user=None)
    with archive.fileobj, tarfile.open(fileobj=archive.fileobj) as tar:
        return {m.name.removeprefix("./") for m in tar.getmembers()}


def test_each_file_a_sandbox_forgot_is_decided_on_its_own(
    base, ws, tmp_path, admin_user, admin_client
):
    upload(ws, tmp_path, "sbx-a", text(base, MD))  # sends back what it has
    sandbox_archive(base.workspace, "sbx-a", user=None)  # what it was served
    upload(ws, tmp_path, "sbx-a", agent_edit(text(base, MD)), extra=held(ws, FORGOT, KEPT))
    (proposal,) = Proposal.objects.all()
    assert proposal.forgotten == [KEPT, FORGOT]
    review = f"/w/a/layouts/{base.pk}/proposals/{proposal.pk}/"
    page = admin_client.get(review).content.decode()
    assert "2 files the agent forgot" in page and page.count('name="path" value="memories/raw') == 2

    # The page forgets one (its row answers, for htmx), the API keeps the other.
    answer = admin_client.post(
        review + "forgotten/decide/",
        {"path": FORGOT, "decision": "accept"},
        headers={"HX-Request": "true"},
    )
    row = answer.content.decode()
    assert answer.status_code == 200 and FORGOT in row and ">forget</span>" in row
    assert "<html" not in row
    api = Client(HTTP_AUTHORIZATION=f"Bearer {tokens.create_token(admin_user, 'r', ['a']).secret}")
    url = f"/api/workspaces/a/layouts/{base.pk}/proposals/{proposal.pk}"
    kept = api.post(
        url + "/forgotten", {"paths": [KEPT], "decision": "reject"}, content_type="application/json"
    )
    assert kept.status_code == 200
    assert kept.json()["forgotten"] == [
        {"path": KEPT, "decision": "reject"},
        {"path": FORGOT, "decision": "accept"},
    ]
    assert ">keep</span>" in admin_client.get(review).content.decode()

    curation.approve(proposal, user=admin_user)

    names = restored(base, "sbx-a")
    assert FORGOT not in names and KEPT in names
    assert set(held(ws, FORGOT)) <= names
    assert [e.target for e in AuditEvent.objects.filter(action="proposal.forget_accept")] == [
        FORGOT
    ]
    assert [e.target for e in AuditEvent.objects.filter(action="proposal.forget_reject")] == [KEPT]
    approval = AuditEvent.objects.get(action="proposal.approve").detail
    assert approval["forgotten"] == [FORGOT] and approval["kept"] == [KEPT]


def test_forgotten_files_left_undecided_follow_the_approvals_choice(base, ws, tmp_path, admin_user):
    upload(ws, tmp_path, "sbx-a", text(base, MD))
    sandbox_archive(base.workspace, "sbx-a", user=None)
    upload(ws, tmp_path, "sbx-a", agent_edit(text(base, MD)), extra=held(ws, FORGOT, KEPT))
    (proposal,) = Proposal.objects.all()

    curation.approve(proposal, user=admin_user, undecided=curation.UNDECIDED_REJECT)

    assert {FORGOT, KEPT} <= restored(base, "sbx-a")


def test_a_file_the_proposal_did_not_forget_cannot_be_decided(
    base, ws, tmp_path, admin_user, admin_client
):
    upload(ws, tmp_path, "sbx-a", text(base, MD))
    sandbox_archive(base.workspace, "sbx-a", user=None)
    upload(ws, tmp_path, "sbx-a", agent_edit(text(base, MD)), extra=held(ws, FORGOT))
    (proposal,) = Proposal.objects.all()
    review = f"/w/a/layouts/{base.pk}/proposals/{proposal.pk}/"

    answer = admin_client.post(review + "forgotten/decide/", {"path": KEPT, "decision": "accept"})

    assert answer.status_code == 400
    proposal.refresh_from_db()
    assert proposal.forgotten_decisions == {}
