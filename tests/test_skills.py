"""Skill files as curated, versioned files: versions from imports, edits, additions,
deletions and restores (audited, stale saves refused), front matter shown as metadata,
roles, a proposal's skill changes decided file by file, and write-back and export
writing exactly the curated skill files (a deleted one deleted, through the journal)."""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

import pytest
from agents.sandbox.capabilities.skills import LocalDirLazySkillSource
from agents.sandbox.entries import LocalDir
from django.test import Client
from django.urls import reverse

from generation import journal
from memoryui import curation, pipeline, recovery, skills, snapshots, writeback
from memoryui.importer import import_workspace
from memoryui.models import (
    AuditEvent,
    Layout,
    Membership,
    Proposal,
    Role,
    SkillFileVersion,
)
from tests.factories import make_user
from tests.scripted_model import Reply

pytestmark = pytest.mark.django_db
ENG = "memories/engineering"
SKILL_MD = "skills/run-plain-python-tests/SKILL.md"
NEW_SKILL = (
    "---\nname: deploy-canary\ndescription: Promote a canary with deployctl.\n"
    'argument-hint: "[service]"\n---\n\n# Deploy a canary\n\n1. `deployctl promote`\n'
)


@pytest.fixture(autouse=True)
def journal_dir(settings, tmp_path):
    settings.MEMORYUI_JOURNAL_DIR = tmp_path / "journal"


def client_as(layout: Layout, role: Role, name: str | None = None) -> Client:
    user = make_user(name or f"as-{role}")
    Membership.objects.create(workspace=layout.workspace, user=user, role=role)
    client = Client()
    client.force_login(user)
    return client


def url(name: str, layout: Layout, *args) -> str:
    return reverse(f"memoryui:{name}", args=[layout.workspace.name, layout.pk, *args])


def versions(layout: Layout, path: str = SKILL_MD) -> list[tuple[int, str, str]]:
    return [
        (v.number, v.author_kind, v.reason)
        for v in SkillFileVersion.objects.filter(layout=layout, path=path).order_by("number")
    ]


def current_text(layout: Layout, path: str = SKILL_MD) -> str | None:
    data = skills.current_files(layout).get(path)
    return None if data is None else data.decode()


# --- import -----------------------------------------------------------------------------


def test_an_import_records_each_skill_file_as_its_first_version_and_a_changed_one_as_the_next(
    layout, ws
):
    assert versions(layout) == [(1, "agent", "imported from disk")]
    on_disk = ws / ENG / SKILL_MD
    assert current_text(layout) == on_disk.read_text()

    import_workspace(ws, "a")  # nothing changed: no new version
    assert len(versions(layout)) == 1

    on_disk.write_text(on_disk.read_text() + "\n3. The agent learned a step.\n")
    (ws / ENG / "skills/run-plain-python-tests/scripts").mkdir()
    (ws / ENG / "skills/run-plain-python-tests/scripts/run.sh").write_text("python3 t.py\n")
    import_workspace(ws, "a")

    assert versions(layout)[-1] == (2, "agent", "changed on disk")
    assert current_text(layout).endswith("3. The agent learned a step.\n")
    assert current_text(layout, "skills/run-plain-python-tests/scripts/run.sh") == "python3 t.py\n"

    on_disk.unlink()
    import_workspace(ws, "a")
    assert versions(layout)[-1] == (3, "agent", "deleted on disk")
    assert current_text(layout) is None


# --- the pages ----------------------------------------------------------------------------


def test_the_skill_page_shows_front_matter_as_metadata_above_the_rendered_body(layout):
    page = client_as(layout, Role.VIEWER).get(url("skill_detail", layout, "run-plain-python-tests"))
    html = page.content.decode()

    assert page.status_code == 200
    meta = html.split('<dl class="skill-meta">', 1)[1].split("</dl>", 1)[0]
    assert "<dt>name</dt>" in meta and "<code>run-plain-python-tests</code>" in meta
    assert "Run this workspace&#x27;s script-style tests without pytest." in meta
    body = html.split("</dl>", 1)[1]
    assert "<h1>Run plain Python tests</h1>" in body
    # The front matter is not rendered as markdown (it used to become a heading).
    assert "name: run-plain-python-tests" not in html
    assert "<hr" not in html.split('class="markdown"', 1)[1].split("</div>", 1)[0]
    # The layout's tabs say where the reader is, on the pages under a tab too.
    assert re.search(r'aria-current="page">Skills</a>', html)
    assert len(re.findall('aria-current="page"', html)) == 1


def test_front_matter_keeps_other_keys_and_a_text_without_it_is_all_body():
    meta = skills.front_matter(NEW_SKILL)
    assert (meta.name, meta.description) == ("deploy-canary", "Promote a canary with deployctl.")
    assert meta.other == [("argument-hint", "[service]")]
    assert meta.body.startswith("# Deploy a canary")
    plain = skills.front_matter("# Just a title\n---\n")
    assert not plain.present and plain.body == "# Just a title\n---\n"


def test_the_skill_list_shows_descriptions_in_a_bounded_number_of_queries(
    layout, django_assert_max_num_queries
):
    client = client_as(layout, Role.VIEWER)
    for n in range(6):  # more skills must not mean more queries
        skills.save(
            layout,
            f"skills/extra-{n}/SKILL.md",
            f"---\nname: extra-{n}\ndescription: Extra skill {n}.\n---\nbody\n".encode(),
            user=None,
            based_on=None,
            action="skill.add",
            reason="test",
        )
    with django_assert_max_num_queries(9):
        page = client.get(url("skill_list", layout))

    html = page.content.decode()
    assert "Run this workspace&#x27;s script-style tests without pytest." in html
    assert "Extra skill 5." in html
    with django_assert_max_num_queries(8):
        detail = client.get(url("skill_detail", layout, "extra-5"))
    assert "<code>extra-5</code>" in detail.text
    assert html.count("not written back") >= 6  # added here, not yet on disk


def test_an_editor_edits_a_skill_file_as_a_new_audited_version(layout):
    editor = client_as(layout, Role.EDITOR, "eddie")
    form = editor.get(url("skill_file_edit", layout, "run-plain-python-tests", "SKILL.md"))
    assert form.status_code == 200 and 'name="based_on" value="1"' in form.content.decode()

    text = NEW_SKILL.replace("deploy-canary", "run-plain-python-tests")
    response = editor.post(
        url("skill_file_edit", layout, "run-plain-python-tests", "SKILL.md"),
        {"based_on": "1", "text": text},
    )

    assert response.status_code == 302
    assert versions(layout)[-1] == (2, "person", "edited")
    assert current_text(layout) == text
    event = AuditEvent.objects.get(action="skill.edit")
    assert event.actor == "eddie" and event.target == f"{ENG}/{SKILL_MD}"
    assert event.detail["version"] == 2


def test_a_stale_save_is_refused_with_both_texts_and_nothing_saved(layout):
    editor = client_as(layout, Role.EDITOR)
    path = url("skill_file_edit", layout, "run-plain-python-tests", "SKILL.md")
    editor.post(path, {"based_on": "1", "text": "theirs: saved first\n"})

    late = editor.post(path, {"based_on": "1", "text": "mine: based on version 1\n"})

    html = late.content.decode()
    assert late.status_code == 409
    assert "theirs: saved first" in html and "mine: based on version 1" in html
    assert 'name="based_on" value="2"' in html  # saving the merge is based on theirs
    assert current_text(layout) == "theirs: saved first\n"
    assert len(versions(layout)) == 2


def test_an_editor_adds_a_skill_file_at_a_checked_path(layout):
    editor = client_as(layout, Role.EDITOR)
    new = url("skill_file_new", layout)

    refused = {
        "/etc/passwd": "not an absolute one",
        "skills/../MEMORY.md": "may not contain &#x27;..&#x27;",
        "skills/x": "skills/&lt;name&gt;/&lt;file&gt;",
        "MEMORY.md": "skills/&lt;name&gt;/&lt;file&gt;",
        "skills/bad name/SKILL.md": "skills/&lt;name&gt;/&lt;file&gt;",
        "skills/a/one/two/three/x.md": "at most two folders below the skill",
        "skills/a/.hidden": "skills/&lt;name&gt;/&lt;file&gt;",
        "skills/a/" + "x" * 300: "at most 300 characters",
    }
    for path, message in refused.items():
        response = editor.post(new, {"path": path, "text": "x"})
        assert response.status_code == 400, path
        assert message in response.content.decode(), path
    too_big = editor.post(new, {"path": "skills/big/SKILL.md", "text": "x" * (256 * 1024 + 1)})
    assert too_big.status_code == 400 and "the limit is 262,144 bytes" in too_big.text
    exists = editor.post(new, {"path": SKILL_MD, "text": "x"})
    assert exists.status_code == 409 and "exists already" in exists.text
    assert SkillFileVersion.objects.count() == 1

    script = editor.post(new, {"path": "skills/deploy-canary/scripts/check.py", "text": "pass\n"})
    assert script.status_code == 302
    done = editor.post(new, {"path": "skills/deploy-canary/SKILL.md", "text": NEW_SKILL})

    assert done.status_code == 302
    assert current_text(layout, "skills/deploy-canary/SKILL.md") == NEW_SKILL
    assert AuditEvent.objects.filter(
        action="skill.add", target=f"{ENG}/skills/deploy-canary/SKILL.md"
    ).exists()
    listing = editor.get(url("skill_list", layout)).content.decode()
    assert "deploy-canary" in listing and "Promote a canary with deployctl." in listing


def test_delete_asks_first_then_deletes_as_a_version_and_restore_brings_it_back(layout):
    editor = client_as(layout, Role.EDITOR)
    delete = url("skill_file_delete", layout, "run-plain-python-tests", "SKILL.md")

    confirm = editor.get(delete)
    assert confirm.status_code == 200 and "Delete version 1" in confirm.text
    assert current_text(layout) is not None  # asking deletes nothing
    stale = editor.post(delete, {"based_on": "7"})
    assert stale.status_code == 409 and current_text(layout) is not None

    assert editor.post(delete, {"based_on": "1"}).status_code == 302
    assert current_text(layout) is None
    assert versions(layout)[-1] == (2, "person", "deleted")
    assert AuditEvent.objects.filter(action="skill.delete", detail__deleted=True).exists()
    listing = editor.get(url("skill_list", layout)).text
    assert "to delete" in listing  # still on disk until the write-back

    history = editor.get(url("skill_file_history", layout, "run-plain-python-tests", "SKILL.md"))
    assert "v2" in history.text and "deleted" in history.text
    restore = url("skill_file_restore", layout, "run-plain-python-tests", "SKILL.md", 1)
    page = editor.get(restore)
    assert page.status_code == 200 and "Restore version 1" in page.text
    assert current_text(layout) is None  # asking restores nothing

    assert editor.post(restore, {"based_on": "2"}).status_code == 302
    assert versions(layout)[-1] == (3, "person", "restored version 1")
    assert current_text(layout) == skills.text_of(
        SkillFileVersion.objects.get(layout=layout, path=SKILL_MD, number=1)
    )
    assert AuditEvent.objects.filter(action="skill.restore").count() == 1
    # A restore confirmed against an outdated version is refused.
    assert editor.post(restore, {"based_on": "2"}).status_code == 409
    assert len(versions(layout)) == 3


def test_viewers_read_skills_and_their_history_but_cannot_change_them(layout):
    viewer = client_as(layout, Role.VIEWER)
    file_args = ("run-plain-python-tests", "SKILL.md")

    detail = viewer.get(url("skill_detail", layout, "run-plain-python-tests")).text
    history = viewer.get(url("skill_file_history", layout, *file_args))

    assert history.status_code == 200
    assert ">edit</a>" not in detail and ">delete</a>" not in detail
    assert "Add a skill file" not in viewer.get(url("skill_list", layout)).text
    assert viewer.get(url("skill_file_edit", layout, *file_args)).status_code == 403
    assert (
        viewer.post(url("skill_file_delete", layout, *file_args), {"based_on": 1}).status_code
        == 403
    )
    assert viewer.post(url("skill_file_new", layout), {"path": "skills/x/a.md"}).status_code == 403
    assert (
        viewer.post(url("skill_file_restore", layout, *file_args, 1), {"based_on": 1}).status_code
        == 403
    )
    assert len(versions(layout)) == 1


def test_a_file_path_that_leaves_the_skill_is_a_404(layout):
    editor = client_as(layout, Role.EDITOR)
    climbing = url("skill_file_edit", layout, "run-plain-python-tests", "x").replace(
        "/files/x/", "/files/../../MEMORY.md/"
    )
    assert editor.get(climbing).status_code == 404
    assert (
        editor.get(url("skill_file_edit", layout, "run-plain-python-tests", "nope.md")).status_code
        == 404
    )


# --- proposals, approval, write-back, export ------------------------------------------


def skill_proposal(layout: Layout, model, *tools) -> Proposal:
    run = pipeline.start_run(layout)  # phase one keeps the SDK's extractions
    while ids := pipeline.claim_window(run.pk):
        for job_id in ids:
            pipeline.process_job(job_id)
    assert pipeline.finish_phase_one(run.pk)
    model.script(Reply.tools(*tools), Reply(raw_text="Changed the skills."))
    pipeline.consolidate(run.pk)
    return Proposal.objects.get(run=run)


def test_a_skill_phase_two_deleted_is_deleted_by_the_write_back_and_left_out_of_the_export(
    model, layout, ws, tmp_path, monkeypatch
):
    proposal = skill_proposal(
        layout,
        model,
        ("delete_file", {"path": SKILL_MD}),
        ("write_file", {"path": "skills/deploy-canary/SKILL.md", "content": NEW_SKILL}),
    )
    assert proposal.skill_changes[SKILL_MD]["new"] is None
    reviewer = client_as(layout, Role.REVIEWER)
    review = reviewer.get(url("proposal_review", layout, proposal.pk)).text
    assert 'id="skills"' in review and "undecided: accepted with the proposal" in review

    curation.approve(proposal, user=make_user("ada"))

    assert current_text(layout) is None
    assert versions(layout)[-1] == (2, "pipeline", f"approved proposal #{proposal.pk}")
    assert current_text(layout, "skills/deploy-canary/SKILL.md") == NEW_SKILL

    result = writeback.write_back(layout)

    assert result.deleted == [f"{ENG}/{SKILL_MD}"]
    assert not (ws / ENG / SKILL_MD).exists()
    assert not (ws / ENG / "skills/run-plain-python-tests").exists()  # the emptied folder
    assert (ws / ENG / "skills/deploy-canary/SKILL.md").read_text() == NEW_SKILL
    event = AuditEvent.objects.get(action=writeback.WRITEBACK_ACTION)
    assert {"path": f"{ENG}/{SKILL_MD}", "deleted": True}.items() <= next(
        f for f in event.detail["files"] if f["path"].endswith(SKILL_MD)
    ).items()
    again = import_workspace(ws, "a")  # the database follows the disk: nothing new
    assert (again.added, again.changed) == (0, 0) and len(versions(layout)) == 2

    # The SDK's own skill reader finds the new skill and not the deleted one.
    monkeypatch.chdir(ws / ENG)
    source = LocalDirLazySkillSource(source=LocalDir(src=Path("skills")))
    found = {m.name: m.description for m in source.list_skill_metadata(skills_path="skills")}
    assert found == {"deploy-canary": "Promote a canary with deployctl."}

    exported = snapshots.export_snapshot(layout.workspace, snapshot_id="s1", base_path=tmp_path)
    with tarfile.open(exported.snapshot.path) as archive:
        names = {m.name.removeprefix("./") for m in archive.getmembers() if m.isfile()}
    assert {n for n in names if "/skills/" in n} == {f"{ENG}/skills/deploy-canary/SKILL.md"}


def test_the_export_before_a_write_back_already_leaves_a_deleted_skill_out(layout, ws, tmp_path):
    skills.save(layout, SKILL_MD, None, user=None, based_on=1, action="skill.delete", reason="test")
    exported = snapshots.export_snapshot(layout.workspace, snapshot_id="s2", base_path=tmp_path)
    with tarfile.open(exported.snapshot.path) as archive:
        names = {m.name.removeprefix("./") for m in archive.getmembers()}
    assert f"{ENG}/{SKILL_MD}" not in names
    assert f"{ENG}/MEMORY.md" in names
    assert (ws / ENG / SKILL_MD).exists()  # an export never touches the workspace


def test_a_rejected_skill_change_keeps_the_file_and_an_accepted_one_is_applied(model, layout, ws):
    proposal = skill_proposal(
        layout,
        model,
        ("delete_file", {"path": SKILL_MD}),
        ("write_file", {"path": "skills/deploy-canary/SKILL.md", "content": NEW_SKILL}),
    )
    reviewer = client_as(layout, Role.REVIEWER, "rita")
    decide = url("proposal_skill_decide", layout, proposal.pk)
    review = url("proposal_review", layout, proposal.pk)

    rejected = reviewer.post(decide, {"path": SKILL_MD, "decision": "reject"})
    card = reviewer.post(
        decide,
        {"path": "skills/deploy-canary/SKILL.md", "decision": "accept"},
        HTTP_HX_REQUEST="true",
    )
    unknown = reviewer.post(decide, {"path": "skills/other/SKILL.md", "decision": "reject"})

    assert rejected.status_code == 302 and rejected["Location"] == review + "#skills"
    assert card.status_code == 200 and card.text.lstrip().startswith("<article")
    assert "accepted" in card.text and "<html" not in card.text
    assert unknown.status_code == 400 and "not a skill file this proposal changes" in unknown.text
    page = reviewer.get(review).text
    assert "rejected</span>" in page
    assert AuditEvent.objects.filter(action="proposal.skill_reject", actor="rita").exists()
    assert (
        client_as(layout, Role.VIEWER)
        .post(decide, {"path": SKILL_MD, "decision": "accept"})
        .status_code
        == 403
    )

    curation.approve(Proposal.objects.get(pk=proposal.pk), user=make_user("ada"))
    writeback.write_back(layout)

    assert len(versions(layout)) == 1 and current_text(layout) is not None
    assert (ws / ENG / SKILL_MD).exists()
    assert (ws / ENG / "skills/deploy-canary/SKILL.md").read_text() == NEW_SKILL
    # Decided proposals take no more decisions.
    late = reviewer.post(decide, {"path": SKILL_MD, "decision": "accept"})
    assert late.status_code == 409


def test_a_skill_decision_is_refused_like_an_entry_decision_while_another_reviewer_holds_it(
    model, layout
):
    proposal = skill_proposal(layout, model, ("delete_file", {"path": SKILL_MD}))
    curation.reserve(proposal, make_user("ada"))

    with pytest.raises(curation.HeldByOther):
        skills.decide(proposal, SKILL_MD, skills.REJECT, user=make_user("rita"))

    assert Proposal.objects.get(pk=proposal.pk).skill_decisions == {}
    assert not AuditEvent.objects.filter(action="proposal.skill_reject").exists()


def test_write_back_refuses_to_delete_a_skill_file_changed_on_disk_since_the_import(layout, ws):
    skills.save(layout, SKILL_MD, None, user=None, based_on=1, action="skill.delete", reason="test")
    on_disk = ws / ENG / SKILL_MD
    on_disk.write_text(on_disk.read_text() + "\nSomeone's local note.\n")

    with pytest.raises(writeback.Refused) as refused:
        writeback.write_back(layout)

    assert [c.path for c in refused.value.conflicts] == [f"{ENG}/{SKILL_MD}"]
    assert "Someone's local note." in on_disk.read_text()
    assert not AuditEvent.objects.filter(action=writeback.WRITEBACK_ACTION).exists()

    # Named by an admin, the deletion goes ahead.
    writeback.write_back(layout, overwrite=[f"{ENG}/{SKILL_MD}"])
    assert not on_disk.exists()


def test_an_edited_skill_is_written_back_and_a_deletion_that_fails_midway_is_undone(layout, ws):
    edited = NEW_SKILL.replace("deploy-canary", "run-plain-python-tests")
    skills.save(
        layout, SKILL_MD, edited.encode(), user=None, based_on=1, action="skill.edit", reason="t"
    )
    writeback.write_back(layout)
    on_disk = ws / ENG / SKILL_MD
    assert on_disk.read_text() == edited
    skills.save(layout, SKILL_MD, None, user=None, based_on=2, action="skill.delete", reason="t")

    def die(name: str) -> None:
        if name == "removed":
            raise OSError("the disk went away")

    with pytest.raises(writeback.WritebackError, match="nothing changed"):
        writeback.write_back(layout, on_step=die)

    assert on_disk.read_text() == edited  # put back from the journal
    assert AuditEvent.objects.filter(
        action=writeback.WRITEBACK_FAILED_ACTION, detail__rolled_back=True
    ).exists()
    writeback.write_back(layout)
    assert not on_disk.exists()


def test_a_journal_with_a_deletion_rolls_forward_and_back(tmp_path):

    root = tmp_path / "ws"
    (root / "m/skills/a").mkdir(parents=True)
    target = root / "m/skills/a/SKILL.md"
    target.write_bytes(b"old")
    record = journal.begin(
        tmp_path / "j",
        root=root,
        allowed_dirs=["m"],
        changes=[("m/skills/a/SKILL.md", b"old", None)],
    )
    loaded = journal.load(tmp_path / "j")
    assert loaded is not None and loaded.files[0].new_sha256 is None

    assert journal.roll_forward(loaded) == ["m/skills/a/SKILL.md"]
    assert not target.exists()
    assert journal.disk_states(record) == {"m/skills/a/SKILL.md": journal.NEW}
    journal.roll_back(loaded)
    assert target.read_bytes() == b"old"


def test_the_write_back_page_lists_a_deleted_skill_as_to_delete_and_says_it_deleted_it(layout, ws):
    skills.save(layout, SKILL_MD, None, user=None, based_on=1, action="skill.delete", reason="t")
    admin = client_as(layout, Role.ADMIN)
    page = url("layout_writeback", layout)

    plan = admin.get(page).text
    dry = admin.post(page, {"action": "dry_run"}).text
    assert f"{ENG}/{SKILL_MD}" in plan and "to delete" in plan
    assert "(deleted)" in plan and "None" not in plan.split('id="planned-files"')[1][:4000]
    assert '<span class="badge warn">delete</span>' in dry
    assert (ws / ENG / SKILL_MD).exists()

    done = admin.post(page, {"action": "write"}, follow=True).text

    assert "deleted 1" in done
    assert not (ws / ENG / SKILL_MD).exists()


class Killed(BaseException):
    """A kill at a step boundary: the code under test catches only Exception."""


@pytest.mark.parametrize("step", range(1, 8))
def test_a_write_back_that_edits_and_deletes_skills_killed_at_any_step_is_recovered(
    layout, ws, settings, step
):

    script = ws / ENG / "skills/run-plain-python-tests/scripts/run.sh"
    script.parent.mkdir()
    script.write_text("python3 t.py\n")
    import_workspace(ws, "a")
    rel_script = "skills/run-plain-python-tests/scripts/run.sh"
    edited = NEW_SKILL.replace("deploy-canary", "run-plain-python-tests")
    skills.save(layout, SKILL_MD, edited.encode(), user=None, based_on=1, action="e", reason="t")
    skills.save(layout, rel_script, None, user=None, based_on=1, action="d", reason="t")
    old_skill = (ws / ENG / SKILL_MD).read_text()
    steps: list[str] = []

    def on_step(name: str) -> None:
        steps.append(name)
        if len(steps) == step:
            raise Killed(name)

    with pytest.raises(Killed):
        writeback.write_back(layout, on_step=on_step)
    recovery.recover_interrupted()

    # begin, journal, staged, renamed, removed, committed, done
    state = ((ws / ENG / SKILL_MD).read_text(), script.exists())
    assert state in ((old_skill, True), (edited, False)), steps
    assert state == ((old_skill, True) if step == 1 else (edited, False)), steps
    assert not list(Path(settings.MEMORYUI_JOURNAL_DIR).rglob("journal.json"))
    if step > 1:
        assert writeback.plan_layout(layout).changed == []  # the database agrees
        assert AuditEvent.objects.filter(action=writeback.WRITEBACK_ACTION).count() == 1
