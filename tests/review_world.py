"""A proposal of many changed entries, built directly (no generation run), for the
review-flow tests and the page benchmark."""

from __future__ import annotations

from generation import review
from memoryui import curation, entry_checks
from memoryui.models import GenerationRun, Layout, MemoryVersion, Proposal

MD = MemoryVersion.Document.MEMORY_MD
SUMMARY = MemoryVersion.Document.MEMORY_SUMMARY


def entry(i: int, scope: str, cites: int = 1) -> str:
    files = "".join(
        f"- rollout_summaries/r{i}-{c}_task.md (rollout_id=r{i}-{c}, terminal_state=completed)\n"
        for c in range(cites)
    )
    return (
        f"# Task Group: group {i:03d}\n\nscope: {scope}\n\n## Task 1: t{i}, outcome success\n\n"
        f"### rollout_summary_files\n\n{files}\n### keywords\n\n- k{i}\n"
    )


def head(i: int, scope: str) -> str:
    """Entry ``i``'s task group head alone (what a reviewer edits on its card)."""
    return f"# Task Group: group {i:03d}\n\nscope: {scope}\n\n"


def build(
    layout: Layout,
    n: int,
    *,
    user=None,
    cites: dict[int, int] | None = None,  # type: ignore[no-untyped-def]
    extra: str = "",
) -> Proposal:
    """A pending proposal over ``n`` entries of MEMORY.md, each one reworded by the
    model ("scope: model i" instead of "scope: person i"), with its entries checked;
    ``cites``: entry -> how many rollouts it cites; ``extra``: text appended to the
    proposal (a new entry)."""
    cites = cites or {}
    base_text = review.join(entry(i, f"person {i}") for i in range(n))
    proposed = review.join(
        [*(entry(i, f"model {i}", cites.get(i, 1)) for i in range(n)), *([extra] if extra else [])]
    )
    return proposal_over(layout, base_text, proposed, user=user)


def proposal_over(layout: Layout, base: str, proposed: str, *, user=None) -> Proposal:  # type: ignore[no-untyped-def]
    """A pending proposal turning the current MEMORY.md, made ``base``, into ``proposed``,
    its entries checked as the pipeline does when it stores a proposal."""
    current = curation.latest(layout, MD)
    base_version = curation.save_document(
        layout,
        MD,
        base,
        user=user,
        reason="test base",
        based_on=current.number if current else None,
    )
    summary = curation.latest(layout, SUMMARY)
    run = GenerationRun.objects.create(layout=layout, status=GenerationRun.Status.DONE)
    proposal = Proposal.objects.create(
        layout=layout,
        run=run,
        base_memory_md=base_version,
        base_memory_summary=summary,
        memory_md=proposed,
        memory_summary=curation.text_of(summary),
        raw_memories_md="",
    )
    entry_checks.ensure(proposal)
    return proposal
