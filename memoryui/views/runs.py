"""A layout's generation: its settings, starting a run, a run's live progress and
summary, cancelling it. The runs themselves are ``memoryui.pipeline``'s."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from generation import review
from generation.summary import injected_summary

from .. import curation, judging, pipeline
from ..forms import GenerationSettingsForm, approx_tokens
from ..models import GenerationRun, PhaseOneJob, Proposal, Role
from ..roles import has_role, workspace_view
from .common import HtmxHttpRequest
from .review_common import kept_proposal

EXTRA_PROMPT_WARNING_TOKENS = 5_000


@workspace_view(Role.VIEWER, post=Role.ADMIN)
@require_http_methods(["GET", "POST"])
def generation(request: HtmxHttpRequest, name: str, layout_pk: int) -> HttpResponse:
    """Generation settings of a layout and its runs; staff change settings and start."""
    layout = request.layout
    gs = pipeline.settings_for(layout)
    form = GenerationSettingsForm(request.POST or None, instance=gs)
    if request.method == "POST":
        if form.is_valid():
            saved = form.save(commit=False)
            saved.updated_by = request.user
            saved.save()
            if saved.judge_entries and "judge_entries" in form.changed_data:
                judging.judge_pending(layout)  # the worker reads their entries
            tokens = form.extra_prompt_tokens
            if tokens > EXTRA_PROMPT_WARNING_TOKENS:
                messages.warning(
                    request,
                    f"The extra prompt is about {tokens:,} tokens; keep it well under "
                    f"{EXTRA_PROMPT_WARNING_TOKENS:,}: it is sent with every model call.",
                )
            messages.success(request, "Generation settings saved.")
            return redirect("memoryui:generation", name=name, layout_pk=layout.pk)
    runs = list(layout.runs.select_related("created_by")[:20])
    return render(
        request,
        "memoryui/generation.html",
        {
            "layout": layout,
            "workspace": layout.workspace,
            "form": form,
            "runs": runs,
            "access": pipeline.model_access(),
            "extra_prompt_tokens": approx_tokens(gs.extra_prompt),
            "extra_prompt_warning": EXTRA_PROMPT_WARNING_TOKENS,
        },
    )


@workspace_view(Role.ADMIN)
@require_POST
def generation_start(request: HtmxHttpRequest, name: str, layout_pk: int) -> HttpResponse:
    layout = request.layout
    try:
        run = pipeline.start_run(
            layout, request.user, reextract=request.POST.get("reextract") == "on"
        )
    except (pipeline.RunConflict, pipeline.GenerationUnavailable) as exc:
        messages.error(request, str(exc))
        return redirect("memoryui:generation", name=name, layout_pk=layout.pk)
    from memoryui.tasks import start_generation  # noqa: PLC0415 (deferred: Celery loads when a task is sent)

    start_generation.delay_on_commit(run.pk)
    return redirect("memoryui:run_detail", name=name, layout_pk=layout.pk, run_pk=run.pk)


def _run(request: HtmxHttpRequest, run_pk: int) -> GenerationRun:
    run = get_object_or_404(
        GenerationRun.objects.select_related("created_by"), pk=run_pk, layout=request.layout
    )
    run.layout = request.layout
    return run


@workspace_view(Role.VIEWER)
@require_GET
def run_detail(request: HtmxHttpRequest, name: str, layout_pk: int, run_pk: int) -> HttpResponse:
    """A run's progress and, once done, a short summary of its proposal with a link to
    the review page (the proposal's text is never shown here: it can be megabytes).
    While the run is active the page polls its ``run-progress`` partial."""
    run = _run(request, run_pk)
    failures = list(
        run.jobs.filter(status=PhaseOneJob.Status.FAILED)
        .select_related("rollout")
        .order_by("pk")[:100]
    )
    progress = pipeline.progress(run)
    proposal = None
    if not run.is_active:
        # Its texts as the review page keeps them: comparing them again is then a cache's
        # answer, not a read of two large documents.
        pk = Proposal.objects.filter(run=run).values_list("pk", flat=True).first()
        proposal = kept_proposal(run.layout, pk) if pk is not None else None
    context = {
        "run": run,
        "layout": run.layout,
        "workspace": run.layout.workspace,
        "progress": progress,
        "stalled_since": pipeline.stalled_since(run, progress, timezone.now()),
        "lease_minutes": settings.MEMORYUI_JOB_LEASE_SECONDS // 60,
        "failures": failures,
        "elapsed": (
            (run.finished_at or timezone.now()) - (run.started_at or run.created_at)
        ).total_seconds(),
        "can_cancel": run.is_active and has_role(request.user, run.layout.workspace, Role.ADMIN),
        "proposal": proposal,
        "summary": _proposal_summary(proposal) if proposal is not None else None,
    }
    template = "memoryui/run_detail.html"
    if request.htmx and not request.htmx.history_restore_request:
        return render(request, template + "#run-progress", context)
    return render(request, template, context)


@lru_cache(maxsize=16)
def _counts(base: str, proposed: str) -> dict[str, int]:
    """Entries changed, added, removed, moved and paired from ``base`` to ``proposed``
    (~100,000 entries in a 100,000-rollout workspace's MEMORY.md: counted once)."""
    counts = {"changed": 0, "added": 0, "removed": 0, "moved": 0, "paired": 0}
    for change in review.changed(base, proposed):
        if change.status in counts:
            counts[change.status] += 1
        if change.paired:
            counts["paired"] += 1
    return counts


def _proposal_summary(proposal: Proposal) -> dict[str, Any]:
    """Per document: entries changed, added, removed (a renamed, merged or split entry
    counts once, as changed); skill files touched; the injection size."""
    docs = []
    for label, base, proposed in (
        ("MEMORY.md", proposal.base_memory_md, proposal.memory_md),
        ("memory_summary.md", proposal.base_memory_summary, proposal.memory_summary),
    ):
        docs.append({"label": label, "base": base, **_counts(curation.text_of(base), proposed)})
    skills = [
        {
            "path": rel,
            "status": "added"
            if change.get("old") is None
            else "deleted"
            if change.get("new") is None
            else "changed",
        }
        for rel, change in sorted((proposal.skill_changes or {}).items())
    ]
    return {
        "documents": docs,
        "skills": skills,
        "injection": injected_summary(proposal.memory_summary.encode()),
    }


@workspace_view(Role.ADMIN)
@require_POST
def run_cancel(request: HtmxHttpRequest, name: str, layout_pk: int, run_pk: int) -> HttpResponse:
    run = _run(request, run_pk)
    if pipeline.cancel_run(run.pk):
        messages.info(request, "Run cancelled; calls already under way finish and are discarded.")
    return redirect("memoryui:run_detail", name=name, layout_pk=layout_pk, run_pk=run.pk)
