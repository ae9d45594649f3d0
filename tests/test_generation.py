"""The generation pipeline from the dashboard's side: runs, jobs, proposals, faults.

The model is the local OpenAI-compatible test server (tests/scripted_model.py) over real
HTTP, through the real openai client."""

import io
import json
import shutil
from datetime import timedelta

import pytest
from agents.sandbox.memory.storage import _extract_selection_item
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from django.utils import timezone

from memoryui import pipeline, tasks
from memoryui.celery import app
from memoryui.importer import import_workspace
from memoryui.models import (
    GenerationRun,
    GenerationSettings,
    Layout,
    PhaseOneJob,
    PhaseOneResult,
    Proposal,
)
from memoryui.tasks import recover_stalled_runs, start_generation
from tests.factories import make_user
from tests.scripted_model import Reply

pytestmark = pytest.mark.django_db


@pytest.fixture
def layout(workspace_copy):
    ws = workspace_copy("small-a")
    import_workspace(ws, "a")
    layout = Layout.objects.get(workspace__name="a", memories_dir="memories/engineering")
    GenerationSettings.objects.create(layout=layout, concurrency=2)
    layout.tree = ws
    return layout


def tree_bytes(root):
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def phase_one_requests(server):
    """Phase one's requests: phase two's agent is the one that sends tools."""
    return [r for r in server.requests if "rollout" in json.dumps(r).lower() and "tools" not in r]


def run_now(layout, **kw):
    run = pipeline.start_run(layout, reextract=True)
    return pipeline.run_inline(run.pk, threads=1, sleep=kw.get("sleep", lambda s: None))


def test_run_extracts_every_rollout_and_proposes_without_touching_the_workspace(model, layout):
    before = tree_bytes(layout.tree)

    run = run_now(layout)

    assert run.status == GenerationRun.Status.DONE
    assert run.jobs.filter(status=PhaseOneJob.Status.DONE).count() == 3
    proposal = Proposal.objects.get(run=run)
    assert proposal.status == Proposal.Status.PENDING
    assert "# Task Group:" in proposal.memory_md and proposal.memory_summary.strip()
    assert len(proposal.selection) == 3
    assert sorted(proposal.retained) == sorted(i["rollout_id"] for i in proposal.selection)
    assert tree_bytes(layout.tree) == before


def test_phase_one_files_are_in_the_sdk_format(model, layout):

    run_now(layout)

    for result in PhaseOneResult.objects.filter(outcome="memory"):
        raw = result.files[f"raw_memories/{result.rollout_id}.md"]
        item = _extract_selection_item(raw.rstrip("\n"))
        assert item is not None and item.rollout_id == result.rollout_id
        assert item.rollout_summary_file in {f"{p}" for p in result.files}
        assert item.rollout_path == f"sessions/engineering/{result.rollout_id}.jsonl"


def test_a_second_run_reuses_phase_one_for_unchanged_rollouts(model, layout):
    run_now(layout)
    calls = len(phase_one_requests(model))

    second = run_now(layout)

    assert second.status == GenerationRun.Status.DONE
    assert second.jobs.filter(reused=True).count() == 3
    assert len(phase_one_requests(model)) == calls  # only phase two asked the model again
    assert PhaseOneResult.objects.count() == 3


def test_a_permanent_error_fails_that_rollout_and_the_others_go_on(model, layout):
    model.script(
        Reply(
            status=400,
            body={"error": {"message": "context too long", "type": "invalid_request_error"}},
        )
    )

    run = run_now(layout)

    failed = run.jobs.get(status=PhaseOneJob.Status.FAILED)
    assert "400" in failed.error and "context too long" in failed.error
    assert run.jobs.filter(status=PhaseOneJob.Status.DONE).count() == 2
    assert run.status == GenerationRun.Status.DONE
    assert Proposal.objects.filter(run=run).exists()


def test_a_rate_limit_is_retried_after_the_servers_delay(model, layout):
    model.script(
        Reply(status=429, headers={"Retry-After": "3"}, body={"error": {"message": "slow down"}})
    )
    waits = []

    run = run_now(layout, sleep=waits.append)

    assert run.jobs.filter(status=PhaseOneJob.Status.DONE).count() == 3
    assert run.jobs.filter(attempts=2).count() == 1
    assert waits and waits[0] >= 3


def test_inline_and_celery_runs_take_the_same_steps_to_the_same_result(
    model, layout, tmp_path, eager
):
    """``run_inline`` and the Celery tasks call the same steps: on the same workspace and
    the same model answers (a rate limit on the first call) they end in the same state."""

    other = tmp_path / "other"
    shutil.copytree(layout.tree, other, symlinks=True)
    import_workspace(other, "b")
    twin = Layout.objects.get(workspace__name="b", memories_dir="memories/engineering")
    GenerationSettings.objects.create(layout=twin, concurrency=2)
    slow_down = Reply(status=429, body={"error": {"message": "slow down"}})

    def outcome(run_id):
        run = GenerationRun.objects.get(pk=run_id)
        proposal = Proposal.objects.get(run=run)
        jobs = sorted(run.jobs.values_list("rollout__rollout_id", "status", "attempts", "error"))
        return run.status, run.error, jobs, proposal.memory_md, proposal.memory_summary

    model.script(slow_down)
    inline = run_now(layout)
    model.script(slow_down)
    run = pipeline.start_run(twin, reextract=True)
    start_generation.delay(run.pk)  # eager: each task sent runs here, at once

    assert outcome(inline.pk)[0] == GenerationRun.Status.DONE
    assert sorted(a for _, _, a, _ in outcome(inline.pk)[2]) == [1, 1, 2]
    assert outcome(run.pk) == outcome(inline.pk)


def test_schema_violating_output_fails_after_one_repair(model, layout):
    bad = Reply(json={"rollout_slug": 5})
    model.script(bad, bad)

    run = run_now(layout)

    failed = run.jobs.get(status=PhaseOneJob.Status.FAILED)
    assert failed.error
    assert run.jobs.filter(status=PhaseOneJob.Status.DONE).count() == 2


def test_phase_two_failure_fails_the_run_with_its_reason(model, layout):
    pipeline.settings_for(layout)
    run = pipeline.start_run(layout, reextract=True)
    # Three phase-one answers from the demo, then phase two gets a permanent error.
    for job_id in pipeline.claim_window(run.pk) + pipeline.claim_window(run.pk):
        pipeline.process_job(job_id)
    for job_id in pipeline.claim_window(run.pk):
        pipeline.process_job(job_id)
    model.script(Reply(status=400, body={"error": {"message": "bad request"}}))
    assert pipeline.finish_phase_one(run.pk)
    pipeline.consolidate(run.pk)
    run.refresh_from_db()
    assert run.status == GenerationRun.Status.FAILED and "bad request" in run.error


def test_only_one_run_at_a_time_per_layout(model, layout):
    pipeline.start_run(layout, reextract=True)
    with pytest.raises(pipeline.RunConflict):
        pipeline.start_run(layout, reextract=True)


def test_without_a_model_generation_is_unavailable(settings, layout):
    settings.OPENAI_API_KEY = ""
    settings.OPENAI_BASE_URL = ""
    settings.MEMORYUI_DEMO_MODEL = "off"
    with pytest.raises(pipeline.GenerationUnavailable):
        pipeline.start_run(layout, reextract=True)


def test_cancelled_run_stops_its_jobs(model, layout):
    run = pipeline.start_run(layout, reextract=True)
    assert pipeline.cancel_run(run.pk)

    run = pipeline.run_inline(run.pk, threads=1)

    assert run.status == GenerationRun.Status.CANCELLED
    assert not run.jobs.exclude(status=PhaseOneJob.Status.CANCELLED).exists()
    assert model.requests == []


def test_concurrency_window_never_dispatches_more_than_the_limit(model, layout):
    run = pipeline.start_run(layout, reextract=True)  # concurrency 2, three rollouts
    first = pipeline.claim_window(run.pk)
    assert len(first) == 2 and pipeline.claim_window(run.pk) == []
    pipeline.process_job(first[0])
    assert len(pipeline.claim_window(run.pk)) == 1


def test_a_job_delivered_twice_runs_once(model, layout):
    run = pipeline.start_run(layout, reextract=True)
    job_id = pipeline.claim_window(run.pk)[0]
    pipeline.process_job(job_id)
    calls = len(model.requests)

    assert pipeline.process_job(job_id) is None
    assert len(model.requests) == calls


# --- work lost with a worker ------------------------------------------------------


def long_ago(seconds: int):

    return timezone.now() - timedelta(seconds=seconds)


@pytest.fixture
def sent(monkeypatch):
    """What the recovery task sends, instead of sending it."""

    sent = {"phase_one": [], "phase_two": []}
    monkeypatch.setattr(tasks.phase_one_task, "delay", sent["phase_one"].append)
    monkeypatch.setattr(tasks.phase_two_task, "delay", sent["phase_two"].append)
    return sent


def test_a_job_whose_task_was_never_sent_is_sent_again_after_a_lease(model, layout, settings, sent):

    run = pipeline.start_run(layout, reextract=True)
    lost = pipeline.claim_window(run.pk)  # marked sent; the worker died before sending
    recover_stalled_runs()
    assert sent["phase_one"] == []  # too early to tell from a busy queue

    run.jobs.filter(pk__in=lost).update(
        dispatched_at=long_ago(settings.MEMORYUI_JOB_LEASE_SECONDS + 1)
    )
    recover_stalled_runs()
    recover_stalled_runs()

    assert sorted(sent["phase_one"]) == sorted(lost)  # once per lease, not every sweep
    for job_id in lost:
        pipeline.process_job(job_id)
    assert run.jobs.filter(pk__in=lost, status=PhaseOneJob.Status.DONE).count() == 2


def test_a_job_held_by_a_dead_worker_is_sent_again_once_its_lease_has_passed(
    model, layout, settings, sent
):

    run = pipeline.start_run(layout, reextract=True)
    job_id = pipeline.claim_window(run.pk)[0]
    lease = settings.MEMORYUI_JOB_LEASE_SECONDS
    job = run.jobs.filter(pk=job_id)
    job.update(status=PhaseOneJob.Status.RUNNING, dispatched_at=long_ago(lease + 5))
    job.update(lease_until=long_ago(-60))  # still held
    recover_stalled_runs()
    assert job_id not in sent["phase_one"]

    job.update(lease_until=long_ago(1))  # the holder is gone
    recover_stalled_runs()

    assert job_id in sent["phase_one"]
    assert pipeline.process_job(job_id) == run.pk
    assert job.get().status == PhaseOneJob.Status.DONE


def test_a_lost_phase_two_is_sent_again(model, layout, settings, sent):

    run = pipeline.start_run(layout, reextract=True)
    pipeline.run_inline(run.pk, threads=1)  # phase one and two, for the answers' sake
    run.jobs.update(status=PhaseOneJob.Status.DONE)
    Proposal.objects.filter(run=run).delete()
    GenerationRun.objects.filter(pk=run.pk).update(
        status=GenerationRun.Status.CONSOLIDATING,
        phase_two_dispatched_at=long_ago(settings.MEMORYUI_JOB_LEASE_SECONDS + 1),
        phase_two_lease_until=long_ago(-60),  # a worker is consolidating
    )
    recover_stalled_runs()
    assert sent["phase_two"] == []

    GenerationRun.objects.filter(pk=run.pk).update(phase_two_lease_until=None)
    recover_stalled_runs()

    assert sent["phase_two"] == [run.pk]
    assert pipeline.consolidate(run.pk)
    assert GenerationRun.objects.get(pk=run.pk).status == GenerationRun.Status.DONE


def test_recovery_fills_a_window_nobody_is_filling(model, layout, sent):

    run = pipeline.start_run(layout, reextract=True)  # start_generation was lost: nothing sent yet
    recover_stalled_runs()
    assert len(sent["phase_one"]) == 2  # the layout's concurrency
    assert run.jobs.filter(dispatched_at__isnull=False).count() == 2


def test_a_run_queued_under_the_former_task_names_still_runs(model, layout, eager):
    """Messages an older version queued name ``generation.tasks.*``, where the tasks
    were before they moved to ``memoryui.tasks``."""

    run = pipeline.start_run(layout, reextract=True)
    # eager: the tasks it sends run here
    app.tasks["generation.tasks.start_generation"].apply(args=(run.pk,))

    assert GenerationRun.objects.get(pk=run.pk).status == GenerationRun.Status.DONE
    assert Proposal.objects.filter(run=run).exists()
    assert {name for name in app.tasks if name.startswith("generation.tasks.")} == {
        f"generation.tasks.{name}"
        for name in (
            "reimport_workspace",
            "phase_one_task",
            "phase_two_task",
            "recover_stalled_runs",
            "start_generation",
        )
    }


# --- pages and command --------------------------------------------------------------


def test_staff_start_a_run_and_watch_it(client, model, layout, django_capture_on_commit_callbacks):
    client.force_login(make_user(staff=True))
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post(
            reverse("memoryui:generation_start", args=["a", layout.pk]), {"reextract": "on"}
        )
    run = GenerationRun.objects.get()
    assert response.status_code == 302 and response["Location"].endswith(f"/runs/{run.pk}/")
    pipeline.run_inline(run.pk, threads=1)

    page = client.get(response["Location"]).content.decode()
    fragment = client.get(response["Location"], headers={"HX-Request": "true"}).content.decode()

    assert "Done" in page and "3 / 3" in page
    # A summary and a link to the review page; never the proposal's whole diff.
    assert 'class="diff"' not in page and "Review the proposal →" in page
    assert fragment.lstrip().startswith('<section id="run-progress"') and "<html" not in fragment


def test_a_run_that_stopped_moving_says_so_and_what_to_check(client, model, layout, settings):
    run = pipeline.start_run(layout, reextract=True)
    client.force_login(make_user())
    url = reverse("memoryui:run_detail", args=["a", layout.pk, run.pk])
    assert 'id="stalled"' not in client.get(url).content.decode()

    job_id = pipeline.claim_window(run.pk)[0]
    pipeline.process_job(job_id)
    GenerationRun.objects.filter(pk=run.pk).update(started_at=long_ago(3600))
    run.jobs.filter(pk=job_id).update(finished_at=long_ago(25 * 60))
    page = client.get(url).content.decode()

    assert 'id="stalled"' in page and "moved for 25\xa0minutes." in page
    assert "celery -A memoryui beat" in page

    pipeline.cancel_run(run.pk)
    assert 'id="stalled"' not in client.get(url).content.decode()


def test_a_run_waiting_on_a_slow_model_call_of_a_live_worker_is_not_called_stalled(
    client, model, layout
):
    run = pipeline.start_run(layout, reextract=True)
    client.force_login(make_user())
    url = reverse("memoryui:run_detail", args=["a", layout.pk, run.pk])
    first, second = pipeline.claim_window(run.pk)
    pipeline.process_job(first)
    GenerationRun.objects.filter(pk=run.pk).update(started_at=long_ago(3600))
    run.jobs.filter(pk=first).update(finished_at=long_ago(25 * 60))
    # The second job's model call has taken 25 minutes so far; its worker renewed the
    # lease a moment ago.
    run.jobs.filter(pk=second).update(
        status=PhaseOneJob.Status.RUNNING, lease_until=pipeline.new_lease(long_ago(5))
    )
    assert 'id="stalled"' not in client.get(url).content.decode()

    run.jobs.filter(pk=second).update(lease_until=pipeline.new_lease(long_ago(25 * 60)))
    assert 'id="stalled"' in client.get(url).content.decode()


def test_a_job_taken_over_from_a_dead_worker_says_so_on_the_run_page(client, model, layout):
    run = pipeline.start_run(layout, reextract=True)
    client.force_login(make_user())
    url = reverse("memoryui:run_detail", args=["a", layout.pk, run.pk])
    first = pipeline.claim_window(run.pk)[0]
    assert 'id="taken-over"' not in client.get(url).content.decode()
    # A worker claimed the job and died: its lease ran out a moment ago.
    run.jobs.filter(pk=first).update(
        status=PhaseOneJob.Status.RUNNING, lease_until=long_ago(1), attempts=1
    )
    pipeline.process_job(first)

    assert run.jobs.get(pk=first).status == PhaseOneJob.Status.DONE
    page = client.get(url).content.decode()
    assert 'id="taken-over"' in page and "another worker took it over" in page


def test_running_run_page_polls_for_progress(client, model, layout):
    run = pipeline.start_run(layout, reextract=True)
    client.force_login(make_user())
    page = client.get(
        reverse("memoryui:run_detail", args=["a", layout.pk, run.pk])
    ).content.decode()
    assert 'hx-trigger="every 2s"' in page and "0 / 3" in page


def test_non_staff_cannot_start_cancel_or_change_settings(client, model, layout):
    client.force_login(make_user())
    run = pipeline.start_run(layout, reextract=True)
    assert (
        client.post(reverse("memoryui:generation_start", args=["a", layout.pk])).status_code == 403
    )
    assert (
        client.post(reverse("memoryui:run_cancel", args=["a", layout.pk, run.pk])).status_code
        == 403
    )
    response = client.post(
        reverse("memoryui:generation", args=["a", layout.pk]), {"concurrency": 3}
    )
    assert response.status_code == 403


def test_settings_are_validated_and_a_long_extra_prompt_warns(client, model, layout):
    client.force_login(make_user(staff=True))
    url = reverse("memoryui:generation", args=["a", layout.pk])
    data = {
        "phase_one_model": "gpt-5-mini",
        "phase_two_model": "gpt-5",
        "reasoning_effort": "low",
        "api": "chat_json_object",
        "max_raw_memories_for_consolidation": 5000,
        "concurrency": 4,
        "extra_prompt": "",
    }
    refused = client.post(url, data)
    assert refused.status_code == 200 and "4096" in refused.content.decode()

    data.update(max_raw_memories_for_consolidation=100, extra_prompt="word " * 6000)
    saved = client.post(url, data, follow=True)
    assert "keep it well under 5,000" in saved.content.decode()
    gs = GenerationSettings.objects.get(layout=layout)
    assert (gs.max_raw_memories_for_consolidation, gs.api, gs.reasoning_effort) == (
        100,
        "chat_json_object",
        "low",
    )


def test_offline_demo_runs_are_labelled_and_answered_in_process(client, model, layout, settings):
    settings.MEMORYUI_DEMO_MODEL = "offline"
    run = run_now(layout)
    client.force_login(make_user())
    page = client.get(
        reverse("memoryui:run_detail", args=["a", layout.pk, run.pk])
    ).content.decode()
    assert run.offline_demo and "offline demo model" in page
    # The demo model served in this process answered, not the configured server.
    assert run.status == GenerationRun.Status.DONE and Proposal.objects.filter(run=run).exists()
    assert model.requests == []


def test_generate_command_waits_and_reports(model, layout):
    out = io.StringIO()
    call_command(
        "generate",
        "a",
        "--layout",
        "memories/engineering",
        "--wait",
        "--threads",
        "1",
        "--reextract",
        stdout=out,
    )
    text = out.getvalue()
    assert "Done" in text and "3/3 rollouts" in text and "proposal #" in text


def test_generate_command_rejects_unknown_names(model, layout):

    with pytest.raises(CommandError, match="no workspace named 'nope'; there are: a"):
        call_command("generate", "nope")
    with pytest.raises(CommandError) as no_layout:
        call_command("generate", "a", "--layout", "memories/nope/")
    assert str(no_layout.value) == (
        "no layout memories/nope in a; its layouts are memories, memories/engineering"
    )
