"""What the review's views share: the route's proposal (its texts kept between
requests, the review page and every entry action need them), the review page's URL,
how many cards a page of it shows, and its meter (out of band, for a file decision)."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.shortcuts import get_object_or_404
from django.template.loader import render_to_string
from django.urls import reverse

from .. import documents, review_cards
from ..models import Layout, Proposal
from .common import HtmxHttpRequest

REVIEW_PAGE_SIZE = 25


def proposal_of(request: HtmxHttpRequest, pk: int) -> Proposal:
    """The route's proposal, in the layout ``workspace_view`` resolved (and checked the
    role for)."""
    return kept_proposal(request.layout, pk)


def kept_proposal(layout: Layout, pk: int) -> Proposal:
    """Proposal ``pk`` of ``layout`` (404 else) with its texts, read from the database
    only when this process does not keep that version of them. Its ``layout`` is the one
    given (with its workspace, as the route resolved it): not joined again."""
    proposals = Proposal.objects.select_related(
        "run", "base_memory_md", "base_memory_summary", "decided_by"
    ).defer("raw_memories_md", "selection")  # only the write-back reads these
    kept: tuple[str, str, str] | None = None
    key = (connection.settings_dict["NAME"], pk)
    if connection.vendor == "postgresql":
        # The texts only when the row is not the version this process keeps (NULL else:
        # the columns are NOT NULL), in the same query.
        kept = _KEPT.get(key)
        known = kept[0] if kept else ""
        fresh = "CASE WHEN {} = %s THEN NULL ELSE memoryui_proposal.{} END"
        proposals = proposals.defer("memory_md", "memory_summary").extra(
            select={
                "row_version": ROW_VERSION,
                "fresh_md": fresh.format(ROW_VERSION, "memory_md"),
                "fresh_summary": fresh.format(ROW_VERSION, "memory_summary"),
            },
            select_params=(known, known),
        )
    proposal = get_object_or_404(proposals, pk=pk, layout=layout)
    proposal.layout = layout
    if connection.vendor == "postgresql":
        found: Any = proposal
        if found.fresh_md is None and kept is not None:
            proposal.memory_md, proposal.memory_summary = kept[1], kept[2]
        else:
            # The objects the texts' caches hold (documents.same_text), kept as they are.
            proposal.memory_md = documents.same_text(found.fresh_md)
            proposal.memory_summary = documents.same_text(found.fresh_summary)
            _keep(key, (found.row_version, proposal.memory_md, proposal.memory_summary))
    # Elsewhere read with the proposal (Proposal.from_db): the same objects already.
    return proposal


# A version of the row: ``xmin`` (the transaction that wrote it) changes when another
# transaction updates the row, ``ctid`` (where it is) with every update, even in the same
# transaction; together they name one version, whose texts never change.
ROW_VERSION = "memoryui_proposal.xmin::text || memoryui_proposal.ctid::text"


# Proposals' texts (2.7 MB for the 10k tree: 7-20 ms to read from PostgreSQL, and every
# review page and entry action needs them) by database and pk: their row's version and
# texts. A few, the proposals being reviewed.
_KEPT: dict[tuple[str, int], tuple[str, str, str]] = {}
KEPT_PROPOSALS = 4


def _keep(key: tuple[str, int], version_and_texts: tuple[str, str, str]) -> None:
    _KEPT.pop(key, None)
    while len(_KEPT) >= KEPT_PROPOSALS:
        try:  # the oldest (another thread may be at it too)
            _KEPT.pop(next(iter(_KEPT)), None)
        except (RuntimeError, StopIteration):
            break
    _KEPT[key] = version_and_texts


def review_url(proposal: Proposal, anchor: str = "") -> str:
    url = reverse(
        "memoryui:proposal_review",
        args=[proposal.layout.workspace.name, proposal.layout_id, proposal.pk],
    )
    return url + (f"#{anchor}" if anchor else "")


def progress_bar(request: HtmxHttpRequest, proposal: Proposal) -> str:
    """The review page's meter, out of band: what a file decision answers beside its
    row, so that the count of files decided follows."""
    return render_to_string(
        "memoryui/proposal_review.html#progress",
        {"progress": review_cards.progress(proposal, request.user), "oob": True},
        request=request,
    )
