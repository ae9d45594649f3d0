"""What the review page marks on its cards besides what ``review_cards`` reads from
the database: lint findings (and the banner listing them), entries citing only rollouts
this consolidation forgets (stale), each entry's citations and those citing none
(unsupported), likely duplicates, and which cards a filter shows."""

from __future__ import annotations

from functools import lru_cache
from typing import Any
from urllib.parse import urlencode

from generation import review
from generation.memory_md import CITATION_RE

from .. import curation, documents, review_cards, writeback
from ..models import MemoryVersion, Proposal
from ..review_cards import key_slug
from .review_common import REVIEW_PAGE_SIZE, review_url


def note_lint_and_stale(
    marks: review_cards.Marks,
    proposal: Proposal,
    changes: dict[str, list[review.Change]],
    findings: list,
    reviews: list[curation.DocumentReview] | None = None,
) -> None:
    """Mark the entries holding a line a lint finding points at, and those citing only
    rollouts this consolidation forgets (each card shows both). With ``reviews`` (whose
    decidable entries ``changes`` are: the review page's), the stale entries are kept
    per texts and forgotten rollouts."""
    marks.lint = _lint_entries(proposal, changes, findings)
    if reviews is not None:
        texts = tuple((d.document, d.base_text, d.proposed_text) for d in reviews)
        marks.stale = set(_stale_entries(texts, proposal.memory_md, frozenset(proposal.removed)))
        return
    forgotten = set(proposal.removed)
    marks.stale = {
        (document, c.key)
        for document, cs in changes.items()
        for c in cs
        if _stale(c, forgotten, proposal.memory_md)
    }


@lru_cache(maxsize=16)
def _stale_entries(
    texts: tuple[tuple[str, str, str], ...], memory_md: str, forgotten: frozenset[str]
) -> frozenset[tuple[str, str]]:
    """The (document, key) of every entry to decide citing only ``forgotten`` rollouts
    (``texts``: each document's base and proposed text)."""
    rollouts = set(forgotten)
    return frozenset(
        (document, c.key)
        for document, base, proposed in texts
        for c in review.changed(base, proposed)
        if _stale(c, rollouts, memory_md)
    )


DOCUMENT_FILES = {
    MemoryVersion.Document.MEMORY_MD: "MEMORY.md",
    MemoryVersion.Document.MEMORY_SUMMARY: "memory_summary.md",
}


def _lint_entries(
    proposal: Proposal, changes: dict[str, list[review.Change]], findings: list
) -> set[tuple[str, str]]:
    """The entries that hold a line a lint finding points at (the findings of the whole
    proposed files, cached by content)."""
    findings = [f for f in findings if f.line]
    if not findings:
        return set()
    texts = {
        MemoryVersion.Document.MEMORY_MD: proposal.memory_md,
        MemoryVersion.Document.MEMORY_SUMMARY: proposal.memory_summary,
    }
    found: set[tuple[str, str]] = set()
    for document, name in DOCUMENT_FILES.items():
        lines = texts[document].splitlines()
        needles = {
            lines[f.line - 1].strip()
            for f in findings
            if f.path.rsplit("/", 1)[-1] == name and 0 < f.line <= len(lines)
        } - {""}
        for change in changes.get(document, ()):
            if change.proposed and any(n in change.proposed for n in needles):
                found.add((document, change.key))
    return found


def duplicate_marks(
    proposal: Proposal, reviews: list[curation.DocumentReview]
) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """(document, card key) -> the likely duplicates its entry is part of in what
    approving now makes (pending entries as accepted): the other entry, a link to its
    card, the pair's keys and what a reviewer said of it."""
    found = curation.duplicates(reviews, acks=proposal.duplicate_acks)
    if not found:
        return {}
    where: dict[tuple[str, str], tuple[str, int]] = {}
    for doc in reviews:
        for index, change in enumerate(doc.changes):
            for key in (change.key, *change.also):
                where[(doc.document, key)] = (change.key, index // REVIEW_PAGE_SIZE + 1)
    marks: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for dup in found:
        for mine, other, title in (
            (dup.keys[0], dup.keys[1], dup.titles[1]),
            (dup.keys[1], dup.keys[0], dup.titles[0]),
        ):
            card, _ = where.get((dup.document, mine), (mine, 1))
            other_card, page = where.get((dup.document, other), (other, 1))
            query = urlencode({"show": "all", f"page_{dup.document}": page})
            marks.setdefault((dup.document, card), []).append(
                {
                    "title": title or other,
                    "url": f"{review_url(proposal)}?{query}"
                    f"#entry-{dup.document}-{key_slug(other_card)}",
                    "first": dup.keys[0],
                    "second": dup.keys[1],
                    "ack": dup.ack,
                    "ack_label": curation.DUPLICATE_ACKS.get(dup.ack, ""),
                    "ack_by": dup.ack_by,
                }
            )
    return marks


def lint_banner(
    proposal: Proposal,
    findings: list,
    reviews: list[curation.DocumentReview] | None = None,
    poisoned: set[tuple[str, str]] | None = None,
) -> dict[str, list]:
    """The lint findings that will block a write-back of what approving now makes
    (``lint``), and those only in text the decisions leave out (``lint_aside``: a
    rejected entry, a quarantined one nobody decided), which will not."""
    if not any(f.line for f in findings):
        return {"lint": findings, "lint_aside": []}
    if reviews is None:
        reviews = curation.document_reviews(proposal)
    approved = curation.approved_texts(proposal, reviews, poisoned)
    texts = {
        MemoryVersion.Document.MEMORY_MD: proposal.memory_md,
        MemoryVersion.Document.MEMORY_SUMMARY: proposal.memory_summary,
    }
    warn: list = []
    aside: list = []
    for finding in findings:
        document = next(
            (d for d, name in DOCUMENT_FILES.items() if finding.path.rsplit("/", 1)[-1] == name),
            None,
        )
        lines = texts[document].splitlines() if document else []
        line = lines[finding.line - 1].strip() if 0 < (finding.line or 0) <= len(lines) else ""
        left_out = document is not None and line and line not in approved.get(document, "")
        (aside if left_out else warn).append(finding)
    return {"lint": warn, "lint_aside": aside}


def _stale(change: review.Change, forgotten: set[str], memory_md: str) -> bool:
    """Whether every rollout the entry (a task group: its tasks) cites is one this
    consolidation forgets."""
    if not forgotten or not change.proposed:
        return False
    cited = entry_citations(memory_md, change.key, change.proposed)
    return bool(cited) and all(_cited_rollout(path, forgotten) for path in cited)


def _cited_rollout(path: str, rollouts: set[str]) -> bool:
    """Whether ``rollout_summaries/<rollout id>_<slug>.md`` names one of ``rollouts``
    (ids may hold underscores too)."""
    return any(candidate in rollouts for candidate in _rollout_ids(path))


@lru_cache(maxsize=8192)
def _rollout_ids(path: str) -> tuple[str, ...]:
    # What a summary's file name may start with as its rollout id: up to each "_".
    name = path.rsplit("/", 1)[-1]
    return tuple(name[:i] for i, ch in enumerate(name) if ch == "_")


def is_unsupported(change: review.Change, cites: list | None) -> bool:
    """A task group or task that cites no rollout summary (``cites``: its citations)."""
    return bool(change.kind in ("task_group", "task") and change.proposed and not cites)


def is_shown(
    change: review.Change, show: str, marks: review_cards.Marks, document: str, unsupported: bool
) -> bool:
    """Whether the filter ``show`` lists the entry (``unsupported``: it cites no rollout
    summary)."""
    if show == "all":
        return True
    if change.status == "unchanged":
        return False
    if show == "undecided":
        return (document, change.key) not in marks.decisions
    if show == "changed":
        return change.status == "changed"
    if show == "flagged":
        return review_cards.card(document, change, marks, unsupported=unsupported).flagged
    if show == "risk":
        return marks.risky(document, change)
    return True


def lint_findings(proposal: Proposal) -> list:
    """What the write-back's lint will say of the proposed files (kept by content in
    this process and in the database; the texts' digests too, so a page after the
    first hashes nothing)."""
    return writeback.lint_proposal(proposal)


def run_files(proposal: Proposal) -> set[str]:
    """The files this proposal's run wrote (its rollout summaries among them)."""
    new_files: set[str] = set()
    if proposal.run is None:  # an agent's proposal: what it cites is imported
        return new_files
    for files in proposal.run.jobs.filter(result__isnull=False).values_list(
        "result__files", flat=True
    ):
        new_files.update(files or {})
    return new_files


def citation_status(
    proposal: Proposal, changes: list[review.Change], new_files: set[str] | None = None
) -> dict[str, list]:
    """For the entries shown: each cited rollout summary, whether it exists (imported,
    or written by this proposal's run: ``new_files``, read when not given), and where
    it leads."""
    return citation_statuses(proposal, {"": changes}, new_files)[""]


def citation_statuses(
    proposal: Proposal,
    changes: dict[str, list[review.Change]],
    new_files: set[str] | None = None,
) -> dict[str, dict[str, list]]:
    """``citation_status`` of the entries of each document shown, the files looked up
    in one query for all of them."""
    cited = {
        document: {
            c.key: entry_citations(proposal.memory_md, c.key, c.proposed) for c in cs if c.proposed
        }
        for document, cs in changes.items()
    }
    links = documents.resolve_citations(
        proposal.layout, {p for by_key in cited.values() for ps in by_key.values() for p in ps}
    )
    if new_files is None:
        new_files = run_files(proposal)
    # A summary this run wrote is not on disk before the write-back: its link opens the
    # text from this proposal (marked pending), not the layout's missing citation.
    from_run = f"?proposal={proposal.pk}"
    return {
        document: {
            key: [
                (
                    links[p].exists or p in new_files,
                    links[p].url
                    if links[p].exists or p not in new_files
                    else links[p].url + from_run,
                    p,
                    _short(p),
                )
                for p in paths
                if p in links
            ]
            for key, paths in by_key.items()
        }
        for document, by_key in cited.items()
    }


def _short(path: str, limit: int = 48) -> str:
    name = path.removeprefix("rollout_summaries/")
    return name if len(name) <= limit else name[: limit - 1] + "…"


def entry_citations(memory_md: str, key: str, proposed: str) -> tuple[str, ...]:
    """The rollout summaries an entry of ``memory_md`` cites (a task group: with its
    tasks')."""
    return _citations(review.with_members(memory_md, key, proposed))


@lru_cache(maxsize=8192)
def _citations(text: str) -> tuple[str, ...]:
    # Once per entry's text: every view of a review page asks for all of them.
    return tuple(review_citations(text))


def review_citations(text: str) -> list[str]:
    return list(dict.fromkeys(m.group(0) for m in CITATION_RE.finditer(text)))
