"""A proposal as its reviewers see it, per document: its changes, the decisions so far,
what people changed meanwhile and the conflicts with it, the entries held back for their
poisoning flags, the likely duplicates approval would make, the rejected entries it
brings back. Reading only: deciding is ``entry_decisions`` and ``approval``."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import NamedTuple

from django.core.cache import cache

from generation import review

from .. import entry_checks
from ..models import EntryDecision, MemoryVersion, Proposal, RejectedEntry
from .versions import latest_approved_each, text_of

Document = MemoryVersion.Document


# What approval makes of the entries nobody decided: as proposed, or as they are now.
UNDECIDED_ACCEPT, UNDECIDED_REJECT = "accept", "reject"


@dataclass
class DocumentReview:
    document: str
    base_text: str
    proposed_text: str
    changes: list[review.Change]
    decisions: dict[str, EntryDecision]
    human_text: str | None  # the current text when people edited it during the run
    conflicts: list[review.Conflict]

    @property
    def label(self) -> str:
        return Document(self.document).label


def document_reviews(proposal: Proposal) -> list[DocumentReview]:
    decisions: dict[tuple[str, str], EntryDecision] = {
        (d.document, d.key): d for d in proposal.decisions.select_related("user")
    }
    approved = latest_approved_each(proposal.layout, (Document.MEMORY_MD, Document.MEMORY_SUMMARY))
    out = []
    for document, base, proposed in (
        (Document.MEMORY_MD, proposal.base_memory_md, proposal.memory_md),
        (Document.MEMORY_SUMMARY, proposal.base_memory_summary, proposal.memory_summary),
    ):
        base_text = text_of(base)
        # What was approved since the proposal's base (an agent's version awaiting
        # review is not: it is another proposal's).
        current = approved[document]
        human = text_of(current) if current and (base is None or current.pk != base.pk) else None
        mine = {k: d for (doc, k), d in decisions.items() if doc == document}
        conflicts = []
        if human is not None:  # only then: assembling a large document is not free
            assembled = assembled_text(base_text, proposed, mine)
            conflicts = review.merge(base_text, human, assembled).conflicts
        out.append(
            DocumentReview(
                document=document,
                base_text=base_text,
                proposed_text=proposed,
                changes=review.compare(base_text, proposed),
                decisions=mine,
                human_text=human,
                conflicts=conflicts,
            )
        )
    return out


def assembled_text(
    base_text: str,
    proposed: str,
    decisions: dict[str, EntryDecision],
    held: frozenset[str] = frozenset(),
) -> str:
    """The document the decisions make; ``held``: quarantined entries nobody decided,
    kept as they are now."""
    return review.assemble(
        review.compare(base_text, proposed),
        {
            **{k: EntryDecision.Decision.REJECT for k in held},
            **{k: d.decision for k, d in decisions.items()},
        },
        {k: d.edited_text for k, d in decisions.items() if d.edited_text},
    )


def approved_texts(
    proposal: Proposal,
    reviews: list[DocumentReview],
    poisoned: set[tuple[str, str]] | None = None,
) -> dict[str, str]:
    """Per document, the text approving now would make of the proposal: the decisions
    so far, undecided entries as proposed, quarantined ones nobody decided kept out
    (``poisoned``: the (document, key) of the flagged entries, when already read)."""
    if poisoned is None:
        held = {d: set(keys) for d, keys in quarantined(proposal, reviews).items()}
    else:
        held = {
            doc.document: {k for d, k in poisoned if d == doc.document and k not in doc.decisions}
            for doc in reviews
        }
    return {
        doc.document: assembled_text(
            doc.base_text, doc.proposed_text, doc.decisions, frozenset(held.get(doc.document, ()))
        )
        for doc in reviews
    }


def quarantined(proposal: Proposal, reviews: list[DocumentReview]) -> dict[str, dict[str, list]]:
    """Per document, the entries with a poisoning flag that no reviewer decided, and
    their flags: approval keeps them out (the current text stays) until someone accepts
    or rejects each explicitly."""

    flagged = entry_checks.flagged_keys(proposal)
    return {
        doc.document: {
            key: flags
            for (document, key), flags in flagged.items()
            if document == doc.document and key not in doc.decisions
        }
        for doc in reviews
    }


def decidable(doc: DocumentReview) -> list[review.Change]:
    """The entries a reviewer decides on: every change (unchanged ones are not)."""
    return list(review.changed(doc.base_text, doc.proposed_text))


@dataclass(frozen=True)
class Duplicate:
    """Two entries of what approving would make that are likely one entry twice;
    ``ack``: what a reviewer said of this pair ("keep": keep both, "different": not a
    duplicate; "" while nobody has)."""

    document: str
    keys: tuple[str, str]
    titles: tuple[str, str]
    ack: str = ""
    ack_by: str = ""

    @property
    def pair(self) -> str:
        return pair_id(self.document, self.keys)


DUPLICATE_ACKS = {"keep": "kept both", "different": "not a duplicate"}


def pair_id(document: str, keys: tuple[str, str] | list[str]) -> str:
    return " ".join([document, *sorted(keys)])


def open_duplicates(found: list[Duplicate]) -> list[Duplicate]:
    """The likely duplicates nobody has said anything of: approval waits for them."""
    return [d for d in found if not d.ack]


def duplicates(
    reviews: list[DocumentReview],
    undecided: str = UNDECIDED_ACCEPT,
    acks: dict[str, dict] | None = None,
) -> list[Duplicate]:
    """The duplicates (``review.duplicates``) in the documents approval would make with
    the decisions so far and ``undecided`` for the rest, when at least one of the two
    is an entry this proposal adds or changes (not two pieces of one split), with what
    reviewers said of each pair (``acks``: the proposal's ``duplicate_acks``)."""
    acks = acks or {}
    found = []
    for doc in reviews:
        for keys, titles in _document_duplicates(doc, undecided):
            said = acks.get(pair_id(doc.document, keys), {})
            found.append(
                Duplicate(doc.document, keys, titles, said.get("ack", ""), said.get("by", ""))
            )
    return found


# The pairs depend only on the texts compared and the decisions (what reviewers said of
# a pair is added on each read): a key naming those can never be stale, so nothing has
# to be invalidated. Assembling and comparing a 2,000-group document costs ~100 ms; the
# review page, each decision's answer and the submit dialog ask for it again.
DUPLICATES_TIMEOUT = 24 * 3600
# Raise when review.duplicates or review.assemble change what they find.
DUPLICATES_VERSION = 1


def _document_duplicates(
    doc: DocumentReview, undecided: str
) -> list[tuple[tuple[str, str], tuple[str, str]]]:
    """The keys and titles of the duplicate pairs of one document (``duplicates``),
    cached by what they depend on."""
    decided = sorted(
        (k, d.decision, entry_checks.sha(d.edited_text) if d.edited_text else "")
        for k, d in doc.decisions.items()
    )
    stamp = hashlib.sha256(
        repr(
            (
                entry_checks.sha(doc.base_text),
                entry_checks.sha(doc.proposed_text),
                undecided,
                decided,
            )
        ).encode()
    ).hexdigest()
    cache_key = f"memoryui:duplicates:{DUPLICATES_VERSION}:{doc.document}:{stamp}"
    found = cache.get(cache_key)
    if found is None:
        found = _find_duplicates(doc, undecided)
        cache.set(cache_key, found, DUPLICATES_TIMEOUT)
    return found


def _find_duplicates(
    doc: DocumentReview, undecided: str
) -> list[tuple[tuple[str, str], tuple[str, str]]]:
    decisions = {k: d.decision for k, d in doc.decisions.items()}
    if undecided == UNDECIDED_REJECT:
        for change in decidable(doc):
            decisions.setdefault(change.key, EntryDecision.Decision.REJECT)
    edits = {k: d.edited_text for k, d in doc.decisions.items() if d.edited_text}
    # From the task groups it needs when it can (seconds for a 27 MB MEMORY.md else).
    pairs = review.scoped_duplicates(doc.base_text, doc.proposed_text, decisions, edits)
    if pairs is None:
        pairs = review.duplicates(review.assemble(doc.changes, decisions, edits))
    touched = {
        key for change in decidable(doc) if change.proposed for key in (change.key, *change.also)
    }
    piece_of = {key: c.key for c in decidable(doc) for key in (c.key, *c.also)}
    found = []
    for first, second in pairs:
        if piece_of.get(first.key, first.key) == piece_of.get(second.key, second.key):
            continue  # two pieces of one split: decided as one change
        if first.key in touched or second.key in touched:
            found.append(((first.key, second.key), (first.title, second.title)))
    return found


class Rejection(NamedTuple):
    """An entry rejected in another proposal of the layout, as the review page reads it."""

    document: str
    key: str
    title: str
    text: str


def rejections(proposal: Proposal) -> list[Rejection]:
    """The entries people rejected in the layout's other proposals (one query: the
    review page's cards and its reintroduced notice both use them)."""
    rows = RejectedEntry.objects.filter(layout_id=proposal.layout_id).exclude(proposal=proposal)
    return [Rejection._make(r) for r in rows.values_list("document", "key", "title", "text")]


def reintroduced(proposal: Proposal, rejected: list[Rejection] | None = None) -> list[str]:
    """Titles of rejected entries that this proposal brings back (``rejected``: the
    ``rejections`` of the proposal, when read already)."""
    return [
        r.title or r.key
        for r in (rejections(proposal) if rejected is None else rejected)
        if review.contains_entry(proposal.memory_md, r.text)
        or review.contains_entry(proposal.memory_summary, r.text)
    ]
