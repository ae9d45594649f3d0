"""The optional model judge (``generation.judge``) over a proposal's entries: the worker
asks the layout's phase-one model for a verdict on every checked entry text that has
none, keeps it once per text and rubric version (``JudgeVerdict``) and links it to the
text's stored check, where the review card shows it as the model's.

A verdict is an opinion beside the rule checks, never a reason to hold an entry: it is
not part of an ``EntryCheck``'s ``risk``, which alone decides the quarantine.
"""

from __future__ import annotations

import logging
from functools import partial

from django.db import IntegrityError, transaction

from generation import judge, llm

from . import entry_checks, pipeline
from .models import EntryDecision, GenerationSettings, JudgeVerdict, Layout, Proposal

logger = logging.getLogger(__name__)


def judge_proposal(proposal_id: int) -> int:
    """Give each stored check of the proposal (its entries and reviewers' edits) the
    model's verdict on its text, when the layout has the judge on: a verdict already kept
    for the same text is reused, the others are asked of the model one text at a time.
    Returns the number of model calls. Raises ``llm.TransientModelError`` for the task to
    retry; a permanent error leaves that text without a verdict (logged)."""
    proposal = Proposal.objects.select_related("layout").filter(pk=proposal_id).first()
    if proposal is None:
        return 0
    gs = GenerationSettings.objects.filter(layout_id=proposal.layout_id).first()
    if gs is None or not gs.judge_entries:
        return 0
    texts = {entry_checks.check_key(t): t for _, _, t in _texts(proposal)}
    unjudged = proposal.checks.filter(judged__isnull=True, sha256__in=list(texts))
    by_text: dict[str, list[int]] = {}
    for pk, digest in unjudged.values_list("pk", "sha256"):
        by_text.setdefault(texts[digest], []).append(pk)
    if not by_text:
        return 0
    kept = JudgeVerdict.objects.in_bulk([judge.key(t) for t in by_text], field_name="key")
    call: llm.ModelCall | None = None
    calls = 0
    for text, checks in by_text.items():
        verdict = kept.get(judge.key(text))
        if verdict is None:
            if call is None:
                snapshot = {"api": gs.api, "reasoning_effort": gs.reasoning_effort}
                call = llm.make_call(pipeline.model_config(snapshot, gs.phase_one_model))
            calls += 1
            try:
                found, usage = judge.judge(text, call)
            except llm.PermanentModelError as exc:
                logger.warning("the model judge gave no verdict on an entry: %s", exc)
                continue
            verdict = _keep(text, gs.phase_one_model, found, usage)
        proposal.checks.filter(pk__in=checks).update(judged=verdict)
    return calls


def judge_pending(layout: Layout) -> int:
    """Queue the judge for the layout's pending proposals (the judge was just turned on:
    their checks were computed without it); how many."""
    pending = Proposal.objects.filter(layout=layout, status=Proposal.Status.PENDING)
    ids = list(pending.values_list("pk", flat=True))
    for proposal_id in ids:
        transaction.on_commit(partial(entry_checks.queue_judge, proposal_id))
    return len(ids)


def _texts(proposal: Proposal) -> list[tuple[str, str, str]]:
    edits = EntryDecision.objects.filter(proposal=proposal).exclude(edited_text="")
    return [
        *entry_checks.proposed_texts(proposal),
        *edits.values_list("document", "key", "edited_text"),
    ]


def _keep(text: str, model: str, found: judge.Judgement, usage: llm.Usage) -> JudgeVerdict:
    """The verdict stored once per text (two workers judging it at once keep one)."""
    try:
        with transaction.atomic():
            return JudgeVerdict.objects.create(
                key=judge.key(text),
                rubric_version=judge.RUBRIC_VERSION,
                model=model[:100],
                verdict=found.verdict,
                reason=found.reason,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
            )
    except IntegrityError:
        return JudgeVerdict.objects.get(key=judge.key(text))
