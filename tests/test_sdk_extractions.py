"""Phase one starts from the SDK's results: rollouts the SDK already extracted (raw
memory and rollout summary on disk, transcript unchanged) cost no model call unless a
re-extraction is asked for, and a re-extracted rollout's new summary replaces the old
file at write-back instead of joining it."""

import io
import json
import tarfile
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from memoryui import pipeline, tokens, writeback
from memoryui.importer import import_workspace
from memoryui.models import GenerationRun, Proposal
from memoryui.snapshots import export_snapshot
from tests.factories import make_user
from tests.scripted_model import Reply

pytestmark = pytest.mark.django_db
ENG = "memories/engineering"


def phase_one(run: GenerationRun) -> None:
    while ids := pipeline.claim_window(run.pk):
        for job_id in ids:
            pipeline.process_job(job_id)
    assert pipeline.finish_phase_one(run.pk)


def summaries_on_disk(tree: Path) -> list[str]:
    return sorted(p.name for p in (tree / ENG / "rollout_summaries").glob("*.md"))


def test_rollouts_the_sdk_extracted_cost_no_model_call_and_feed_phase_two(model, layout):
    run = pipeline.start_run(layout)
    phase_one(run)

    assert model.requests == []
    assert run.jobs.count() == 0
    assert run.settings_snapshot["kept_extracted"] == 3
    # Phase two reads the three raw memories the SDK wrote.
    assert sorted(pipeline.raw_memory_texts(run)) == [
        "deploy-auth-proxy-dc4ee6",
        "eng-slugify-unicode-65aef7",
        "poll-billing-api-6d30c0",
    ]
    page = Client()
    page.force_login(make_user("root", staff=True))
    detail = page.get(reverse("memoryui:run_detail", args=["a", layout.pk, run.pk]))
    html = detail.content.decode()
    assert "3 rollouts already extracted on disk (by the SDK or a write-back) kept" in html
    assert '0 / 0 <small class="muted">(+3 kept)</small>' in html


def test_a_rollout_whose_transcript_grew_is_extracted_again(model, layout):
    tree = Path(layout.workspace.source_path)
    rollout = tree / "sessions/engineering/poll-billing-api-6d30c0.jsonl"
    segment = json.loads(rollout.read_text().splitlines()[-1])
    segment["updated_at"] = "2026-12-01T09:00:00+00:00"  # a resumed run appended a segment
    rollout.write_text(rollout.read_text() + json.dumps(segment) + "\n")
    import_workspace(tree, "a")

    run = pipeline.start_run(layout)
    phase_one(run)

    assert [job.rollout.rollout_id for job in run.jobs.select_related("rollout")] == [
        "poll-billing-api-6d30c0"
    ]
    assert run.settings_snapshot["kept_extracted"] == 2
    assert len(model.requests) == 1


def test_the_page_the_api_and_the_command_can_ask_for_a_reextraction(model, layout):
    admin = make_user("root", staff=True)
    page = Client()
    page.force_login(admin)
    start = reverse("memoryui:generation_start", args=["a", layout.pk])
    secret = tokens.create_token(admin, "t", ["a"]).secret

    form = page.get(reverse("memoryui:generation", args=["a", layout.pk])).content.decode()
    kept = page.post(start)
    kept_run = GenerationRun.objects.latest("pk")
    pipeline.cancel_run(kept_run.pk)
    again = page.post(start, {"reextract": "on"})
    page_run = GenerationRun.objects.latest("pk")
    pipeline.cancel_run(page_run.pk)
    api = Client().post(
        f"/api/workspaces/a/layouts/{layout.pk}/runs?reextract=true",
        HTTP_AUTHORIZATION=f"Bearer {secret}",
    )
    pipeline.cancel_run(api.json()["id"])
    api_kept = Client().post(
        f"/api/workspaces/a/layouts/{layout.pk}/runs", HTTP_AUTHORIZATION=f"Bearer {secret}"
    )
    pipeline.cancel_run(api_kept.json()["id"])
    call_command("generate", "a", "--layout", ENG, "--reextract", stdout=io.StringIO())
    command_run = GenerationRun.objects.latest("pk")

    assert 'name="reextract"' in form
    assert kept.status_code == again.status_code == 302
    assert kept_run.jobs.count() == 0 and page_run.jobs.count() == 3
    assert api.status_code == 201 and api.json()["kept_extracted"] == 0
    assert api_kept.json()["kept_extracted"] == 3 and api_kept.json()["total"] == 0
    assert command_run.jobs.count() == 3 and command_run.settings_snapshot["reextract"]


def test_a_reextracted_rollout_with_a_new_slug_has_one_summary_file_after_write_back(model, layout):
    tree = Path(layout.workspace.source_path)
    for path in tree.rglob("*"):  # the fixtures are shared without write bits
        path.chmod(path.stat().st_mode | 0o200)
    before = summaries_on_disk(tree)
    model.script(
        *(
            Reply(
                json={
                    "rollout_slug": f"new-slug-{n}",
                    "rollout_summary": f"# Summary {n}\n\nWhat happened, told again.\n",
                    "raw_memory": f"---\ndescription: task {n}\ntask: t{n}\n---\nLearned {n}.\n",
                }
            )
            for n in (1, 2, 3)
        ),
        Reply.tools(
            ("delete_file", {"path": "memory_summary.md"}),
            ("write_file", {"path": "memory_summary.md", "content": "## Tips\n- x\n"}),
        ),
        Reply(raw_text="Rewrote the summary."),
    )
    run = pipeline.start_run(layout, reextract=True)
    run = pipeline.run_inline(run.pk, threads=1, sleep=lambda s: None)
    assert run.status == GenerationRun.Status.DONE, (run.error, run.phase_two_note)
    proposal = Proposal.objects.get(run=run)
    secret = tokens.create_token(make_user("root", staff=True), "t", ["a"]).secret
    approved = Client().post(
        f"/api/workspaces/a/layouts/{layout.pk}/proposals/{proposal.pk}/approve",
        HTTP_AUTHORIZATION=f"Bearer {secret}",
    )
    assert approved.status_code == 200, approved.content

    exported = export_snapshot(layout.workspace, snapshot_id="after", base_path=tree.parent)
    with tarfile.open(exported.snapshot.path) as archive:
        in_export = sorted(
            Path(name).name
            for name in archive.getnames()
            if f"{ENG}/rollout_summaries/" in name and name.endswith(".md")
        )

    result = writeback.write_back(layout)

    after = summaries_on_disk(tree)
    assert len(before) == len(after) == 3
    assert all("_new-slug-" in name for name in after)
    rollout_ids = sorted(name.split("_new-slug-")[0] for name in after)
    assert rollout_ids == sorted(name.split("_")[0] for name in before)
    assert in_export == after
    assert sorted(result.deleted) == sorted(f"{ENG}/rollout_summaries/{n}" for n in before)
    raw = (tree / ENG / "raw_memories" / f"{rollout_ids[0]}.md").read_text()
    assert f"rollout_summary_file: rollout_summaries/{rollout_ids[0]}_new-slug-" in raw
