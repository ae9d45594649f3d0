"""A proposal's *Result*: the whole MEMORY.md and memory_summary.md as approving now
would write them (the decisions so far, undecided entries as proposed, quarantined ones
kept out, people's edits meanwhile merged in), the changes against the current text
marked with a few lines of context, the rest folded."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from generation import review

from .. import curation
from ..models import MemoryVersion, Role
from ..roles import workspace_view
from .common import HtmxHttpRequest
from .review_common import proposal_of, review_url

CONTEXT = 3  # lines shown around each change


@dataclass(frozen=True)
class Line:
    kind: str  # "same", "added" (approval writes it), "removed" (approval drops it)
    number: int | None  # in the result ("removed": None)
    text: str


@dataclass(frozen=True)
class Segment:
    """Lines shown, or a run of unchanged lines folded (``folded``: True)."""

    lines: list[Line]
    folded: bool = False


def segments(current: str, result: str, context: int = CONTEXT) -> list[Segment]:
    """``result`` line by line against ``current``: each change with ``context`` lines
    around it, the unchanged runs between folded."""
    old, new = current.splitlines(), result.splitlines()
    out: list[Segment] = []
    shown: list[Line] = []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            same = [Line("same", j + 1, new[j]) for j in range(j1, j2)]
            first, last = j1 == 0, j2 == len(new)
            keep_head = 0 if first else context
            keep_tail = 0 if last else context
            if len(same) <= keep_head + keep_tail + 1:
                shown += same
                continue
            shown += same[:keep_head]
            if shown:
                out.append(Segment(shown))
            out.append(Segment(same[keep_head : len(same) - keep_tail], folded=True))
            shown = same[len(same) - keep_tail :]
            continue
        shown += [Line("removed", None, old[i]) for i in range(i1, i2)]
        shown += [Line("added", j + 1, new[j]) for j in range(j1, j2)]
    if shown:
        out.append(Segment(shown))
    return out


@workspace_view(Role.VIEWER)
@require_GET
def proposal_result(request: HtmxHttpRequest, name: str, layout_pk: int, pk: int) -> HttpResponse:
    proposal = proposal_of(request, pk)
    reviews = curation.document_reviews(proposal)
    texts = curation.approved_texts(proposal, reviews)
    documents = []
    for doc in reviews:
        result = texts[doc.document]
        conflicts = 0
        if doc.human_text is not None:  # approval merges people's edits made meanwhile
            merged = review.merge(doc.base_text, doc.human_text, result)
            result = merged.text
            conflicts = sum(1 for c in merged.conflicts if c.key not in doc.decisions)
        current = doc.human_text if doc.human_text is not None else doc.base_text
        parts = segments(current, result)
        documents.append(
            {
                "label": MemoryVersion.Document(doc.document).label,
                "document": doc.document,
                "segments": parts,
                "changed": sum(1 for s in parts for line in s.lines if line.kind != "same"),
                "conflicts": conflicts,
                "lines": len(result.splitlines()),
            }
        )
    return render(
        request,
        "memoryui/proposal_result.html",
        {
            "proposal": proposal,
            "layout": proposal.layout,
            "workspace": proposal.layout.workspace,
            "documents": documents,
            "back": review_url(proposal),
        },
    )
