"""An agent's files decided in Chromium, each in place: the raw memories its sandbox
forgot (forget or keep) and its skill files (accept or reject), on the review page; a
rollout id two sandboxes uploaded, shown on the later one's proposal.
With MEMORYUI_SCREENSHOTS=<dir> the test saves the page there."""

from __future__ import annotations

from pathlib import Path

import pytest

from memoryui.models import Layout, Membership, Proposal, Role
from tests.factories import make_user
from tests.test_agent_proposals import agent_edit, text, upload
from tests.test_agent_proposals_files import (
    ADDED,
    ENG,
    MD,
    POISON,
    POISONED,
    RAW,
    SKILL,
    restored_files,
    upload_files,
)
from tests.test_browser import browser, log_in  # noqa: F401 - the module's fixture
from tests.test_entry_checks_browser import SHOTS
from tests.test_review_browser import open_page, review_url

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

FORGOT = f"{ENG}/raw_memories/poll-billing-api-6d30c0.md"
KEPT = f"{ENG}/raw_memories/deploy-auth-proxy-dc4ee6.md"


def test_an_agents_forgotten_files_and_skill_files_are_decided_in_place(
    browser,  # noqa: F811
    live_server,
    ws,
    tmp_path,
):
    eng = Layout.objects.select_related("workspace").get(workspace__name="a", memories_dir=ENG)
    Membership.objects.create(workspace=eng.workspace, user=make_user("ada"), role=Role.REVIEWER)
    memories = ws / ENG
    own = {
        str(p.relative_to(ws)): p.read_bytes()
        for folder in ("raw_memories", "rollout_summaries")
        for p in (memories / folder).glob("*.md")
    }
    skill = (memories / SKILL).read_bytes()
    upload_files(ws, tmp_path, "sbx-s", {**own, f"{ENG}/{SKILL}": skill})
    restored_files(eng, "sbx-s")  # what it was served
    kept = {path: data for path, data in own.items() if path not in (FORGOT, KEPT)}
    upload_files(
        ws,
        tmp_path,
        "sbx-s",
        {
            **kept,
            f"{ENG}/{SKILL}": skill + b"3. Run one file alone with `-v`.\n",
            f"{ENG}/{ADDED}": b"---\nname: triage-flaky-tests\n---\n\nRerun it once.\n",
            f"{ENG}/{POISONED}": b"---\nname: setup-env\n---\n\n" + POISON.encode(),
        },
    )
    (proposal,) = Proposal.objects.all()
    context, page = open_page(browser, height=1400)
    try:
        log_in(page, live_server)
        page.goto(review_url(live_server, proposal))
        forgotten = page.locator("#forgotten")
        assert "2 files the agent forgot" in forgotten.inner_text()
        page.locator(f"li.forgotten-file:has-text('{FORGOT}') button[value=accept]").click()
        page.wait_for_selector(f"li.forgotten-file.decided-accept:has-text('{FORGOT}')")
        page.locator(f"li.forgotten-file:has-text('{KEPT}') button[value=reject]").click()
        page.wait_for_selector(f"li.forgotten-file.decided-reject:has-text('{KEPT}')")
        page.locator(f"article.skill-change:has-text('{ADDED}') button[value=reject]").click()
        page.wait_for_selector(f"article.skill-change.decided-reject:has-text('{ADDED}')")
        poisoned = page.locator(f"article.skill-change:has-text('{POISONED}')")
        assert "quarantined" in poisoned.inner_text()
        if SHOTS:
            Path(SHOTS).mkdir(parents=True, exist_ok=True)
            page.locator("#skills").scroll_into_view_if_needed()
            page.screenshot(path=str(Path(SHOTS) / "agent-files-skills.png"))
            forgotten.scroll_into_view_if_needed()
            page.screenshot(path=str(Path(SHOTS) / "agent-files-forgotten.png"))
    finally:
        context.close()

    proposal.refresh_from_db()
    assert proposal.forgotten_decisions == {FORGOT: "accept", KEPT: "reject"}
    assert proposal.skill_decisions == {ADDED: "reject"}


def test_a_rollout_id_two_sandboxes_uploaded_shows_on_the_later_ones_proposal(
    browser,  # noqa: F811
    live_server,
    ws,
    tmp_path,
):
    base = Layout.objects.select_related("workspace").get(
        workspace__name="a", memories_dir="memories"
    )
    Membership.objects.create(workspace=base.workspace, user=make_user("ada"), role=Role.VIEWER)
    for snapshot_id in ("sbx-one", "sbx-two"):
        (ws / RAW).write_bytes((ws / RAW).read_bytes() + f"\nSeen by {snapshot_id}.\n".encode())
        edit = agent_edit(text(base, MD)).replace("outreach, seats", f"outreach, {snapshot_id}")
        upload(ws, tmp_path, snapshot_id, edit, extra=[RAW])
    proposal = Proposal.objects.get(snapshot_id="sbx-two")
    context, page = open_page(browser)
    try:
        log_in(page, live_server)
        page.goto(review_url(live_server, proposal))
        clashes = page.locator("#clashes")
        clashes.scroll_into_view_if_needed()
        assert clashes.is_visible()
        assert f"{RAW}: sandbox sbx-one and sandbox sbx-two" in clashes.inner_text()
        if SHOTS:
            Path(SHOTS).mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(Path(SHOTS) / "agent-files-clash.png"))
    finally:
        context.close()
