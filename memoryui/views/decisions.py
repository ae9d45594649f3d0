"""What reviewers decide on a proposal: per entry (accept, reject, undo, viewed, pin),
per file an agent forgot (forget or keep), and on the whole (approve, request changes,
reject, reserve it while reviewing). A decision that comes too late (another reviewer's,
a held proposal) is refused with 409 and what happened instead. The review page itself
is ``proposals``; what the entry actions share (load, validate, refuse, the card they
answer with), ``entry_actions``."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.db import transaction
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from .. import agent_proposals, consolidation, curation, entry_checks, forms, review_cards
from ..models import MemoryVersion, Proposal, Role
from ..review_cards import key_slug
from ..roles import has_role, workspace_view
from .common import HtmxHttpRequest, bad_request
from .entry_actions import change_or_404, entry_action, entry_answer, invalid, refuse, reservation
from .review_common import REVIEW_PAGE_SIZE, progress_bar, proposal_of, review_url


@workspace_view(Role.REVIEWER)
@require_POST
@entry_action(forms.DecidePlaceForm, attempted="decision")
def proposal_decide(
    request: HtmxHttpRequest, proposal: Proposal, form: forms.DecidePlaceForm
) -> HttpResponse:
    """Accept or reject entries (one, with an optional edit, or all of a document). For
    htmx, one entry's decision answers with that entry's card and the progress bar
    only; without JavaScript, a redirect back to the same page, filter and entry."""
    document, decision = form.cleaned_data["document"], form.cleaned_data["decision"]
    keys = form.cleaned_data["key"]
    if form.cleaned_data["all"]:
        doc = next(d for d in curation.document_reviews(proposal) if d.document == document)
        theirs = curation.decided_by_others(proposal, document, request.user)
        keys = [c.key for c in curation.decidable(doc) if c.key not in theirs]
    with transaction.atomic():  # all of them or, when refused, none
        for key in keys:
            curation.decide(
                proposal,
                document,
                key,
                decision,
                user=request.user,
                edited_text=form.cleaned_data["edited_text"] if len(keys) == 1 else "",
            )
    return entry_answer(request, proposal, form, document, keys[0] if len(keys) == 1 else "")


@workspace_view(Role.REVIEWER)
@require_POST
@entry_action(forms.EntryActionForm, attempted="undo")
def proposal_undo(
    request: HtmxHttpRequest, proposal: Proposal, form: forms.EntryActionForm
) -> HttpResponse:
    """Take back the decision on one entry (audited): it is undecided again."""
    document, key = form.cleaned_data["document"], form.cleaned_data["key"]
    curation.undo_decision(proposal, document, key, user=request.user)
    return entry_answer(request, proposal, form, document, key)


@workspace_view(Role.VIEWER)
@require_POST
@entry_action(forms.EntryActionForm)
def proposal_viewed(
    request: HtmxHttpRequest, proposal: Proposal, form: forms.EntryActionForm
) -> HttpResponse:
    """Mark an entry viewed (``action=off``: not viewed): each member's own progress,
    so a viewer may mark entries too; it decides nothing."""
    document, key = form.cleaned_data["document"], form.cleaned_data["key"]
    change_or_404(proposal, document, key)
    curation.set_viewed(
        proposal, document, key, form.cleaned_data["action"] != "off", user=request.user
    )
    return entry_answer(request, proposal, form, document, key)


@workspace_view(Role.EDITOR)
@require_POST
@entry_action(forms.EntryActionForm)
def proposal_pin(
    request: HtmxHttpRequest, proposal: Proposal, form: forms.EntryActionForm
) -> HttpResponse:
    """Pin (or unpin) an entry of the current document from the review page."""
    document, key = form.cleaned_data["document"], form.cleaned_data["key"]
    try:
        curation.set_pin(
            proposal.layout,
            document,
            key,
            form.cleaned_data["action"] != "unpin",  # an intent, not a toggle
            user=request.user,
        )
    except KeyError:
        return bad_request(
            request,
            "Only an entry of the current document can be pinned; this one is new in the "
            "proposal (approve it first).",
            back=review_url(proposal),
            workspace=request.workspace,
        )
    return entry_answer(request, proposal, form, document, key)


@workspace_view(Role.REVIEWER)
@require_POST
@entry_action(forms.DuplicateAckForm, attempted="decision")
def proposal_duplicate(
    request: HtmxHttpRequest, proposal: Proposal, form: forms.DuplicateAckForm
) -> HttpResponse:
    """Say of one likely duplicate pair "keep both" or "not a duplicate" (or take it
    back): remembered for that pair only, audited. From a card, htmx gets the card
    back; from the submit dialog, the dialog."""
    data = form.cleaned_data
    curation.acknowledge_duplicate(
        proposal,
        data["document"],
        (data["first"], data["second"]),
        data["ack"],
        user=request.user,
    )
    if request.htmx and request.POST.get("from") == "dialog":
        return _submit_dialog(request, proposal, curation.UNDECIDED_ACCEPT)
    return entry_answer(request, proposal, form, data["document"], data["key"])


@workspace_view(Role.REVIEWER)
@require_http_methods(["GET", "POST"])
def proposal_approve(request: HtmxHttpRequest, name: str, layout_pk: int, pk: int) -> HttpResponse:
    """GET: the review's summary (accepted, rejected, edited, undecided, not viewed)
    and the choice of what the undecided entries become; a dialog for htmx, a page
    without. POST: approve with that choice."""
    proposal = proposal_of(request, pk)
    if request.method == "GET":
        return _submit_dialog(request, proposal, curation.UNDECIDED_ACCEPT)
    form = forms.ApproveForm(request.POST)
    if not form.is_valid():
        return invalid(request, proposal, form)
    undecided = form.cleaned_data["undecided"] or curation.UNDECIDED_ACCEPT
    reviews = curation.document_reviews(proposal)
    duplicates = curation.duplicates(reviews, undecided, proposal.duplicate_acks)
    if curation.open_duplicates(duplicates) and not form.cleaned_data["duplicates_ok"]:
        # Never approved silently: the dialog again, saying what to look at.
        return _submit_dialog(
            request, proposal, undecided, reviews=reviews, duplicates=duplicates, refused=True
        )
    try:
        versions = curation.approve(
            proposal, user=request.user, undecided=undecided, duplicates=duplicates
        )
    except curation.UnresolvedConflicts as exc:
        messages.error(
            request,
            f"Decide the {len(exc.conflicts)} entr{'y' if len(exc.conflicts) == 1 else 'ies'} "
            "that people and the model both changed first: "
            + ", ".join(c.title or c.key for c in exc.conflicts),
        )
        if request.htmx:  # from the dialog: the review page, which says so
            response = HttpResponse(status=204)
            response["HX-Redirect"] = review_url(proposal)
            return response
        return redirect("memoryui:proposal_review", name=name, layout_pk=layout_pk, pk=pk)
    except curation.DecisionRefused as exc:
        return refuse(request, proposal, exc, "approval")
    except curation.NeedsAnotherApproval as exc:
        messages.success(
            request,
            f"Your approval is recorded ({exc.approvals} of {exc.required}): the proposal "
            "applies when another reviewer approves it too.",
        )
        if request.htmx:
            response = HttpResponse(status=204)
            response["HX-Redirect"] = review_url(proposal)
            return response
        return redirect("memoryui:proposal_review", name=name, layout_pk=layout_pk, pk=pk)
    messages.success(
        request,
        f"Proposal approved: {len(versions)} new version{'s' if len(versions) != 1 else ''}.",
    )
    if request.htmx:  # from the dialog: a full page, where the approval leads
        response = HttpResponse(status=204)
        response["HX-Redirect"] = reverse("memoryui:memory_md", args=[name, layout_pk])
        return response
    return redirect("memoryui:memory_md", name=name, layout_pk=layout_pk)


def _submit_dialog(
    request: HtmxHttpRequest,
    proposal: Proposal,
    undecided: str,
    *,
    reviews: list[curation.DocumentReview] | None = None,
    duplicates: list[curation.Duplicate] | None = None,
    refused: bool = False,
    changes_form: forms.RequestChangesForm | None = None,
) -> HttpResponse:
    """The review's summary (counts, conflicts, likely duplicates with links to their
    cards, skill files and what approval does to each) and the choice for undecided
    entries: the dialog for htmx, a page without."""
    if reviews is None:
        reviews = curation.document_reviews(proposal)
    if duplicates is None:
        duplicates = curation.duplicates(reviews, undecided, proposal.duplicate_acks)
    template = "memoryui/proposal_approve.html" + ("#summary" if request.htmx else "")
    context = {
        "proposal": proposal,
        "layout": proposal.layout,
        "workspace": proposal.layout.workspace,
        "counts": {
            **review_cards.progress(proposal, request.user),
            **_flag_counts(proposal, reviews),
        },
        "conflicts": [c for d in reviews for c in d.conflicts if c.key not in d.decisions],
        "pending": proposal.status == Proposal.Status.PENDING,
        "held": curation.held_by_other(proposal, request.user),
        "duplicates": _duplicate_links(proposal, reviews, duplicates),
        "skill_files": consolidation.skill_diffs(proposal),
        "undecided": undecided,
        "refused": refused,
        "changes_form": changes_form or forms.RequestChangesForm(),
    }
    # A refusal in the dialog is swapped in like the dialog itself (htmx swaps 2xx).
    status = 400 if refused and not request.htmx else 200
    return render(request, template, context, status=status)


def _duplicate_links(
    proposal: Proposal,
    reviews: list[curation.DocumentReview],
    duplicates: list[curation.Duplicate],
) -> list[dict]:
    """Each duplicate's two entries with a link to their cards (the page of "all
    entries" that shows each)."""
    where: dict[tuple[str, str], tuple[str, int]] = {}
    for doc in reviews:
        for index, change in enumerate(doc.changes):
            for key in (change.key, *change.also):
                where[(doc.document, key)] = (change.key, index // REVIEW_PAGE_SIZE + 1)
    out = []
    for dup in duplicates:
        links = []
        for key, title in zip(dup.keys, dup.titles, strict=True):
            card, page = where.get((dup.document, key), (key, 1))
            query = urlencode({"show": "all", f"page_{dup.document}": page})
            anchor = f"entry-{dup.document}-{key_slug(card)}"
            links.append({"title": title or key, "url": f"{review_url(proposal)}?{query}#{anchor}"})
        out.append(
            {
                "document": MemoryVersion.Document(dup.document).label,
                "entries": links,
                "document_value": dup.document,
                "card": where.get((dup.document, dup.keys[0]), (dup.keys[0], 1))[0],
                "first": dup.keys[0],
                "second": dup.keys[1],
                "ack": dup.ack,
                "ack_label": curation.DUPLICATE_ACKS.get(dup.ack, ""),
                "ack_by": dup.ack_by,
            }
        )
    return out


def _flag_counts(proposal: Proposal, reviews: list[curation.DocumentReview]) -> dict[str, int]:
    """For the submit dialog: entries with a poisoning flag, how many a reviewer
    accepted explicitly, rejected, and how many approval keeps out (undecided)."""
    flagged = entry_checks.flagged_keys(proposal)
    decisions = {(d.document, k): v.decision for d in reviews for k, v in d.decisions.items()}
    states = [decisions.get(entry) for entry in flagged]
    return {
        "flagged": len(flagged),
        "flagged_accepted": states.count("accept"),
        "flagged_rejected": states.count("reject"),
        "quarantined": states.count(None),
    }


@workspace_view(Role.REVIEWER)
@require_http_methods(["GET", "POST"])
def proposal_reject(request: HtmxHttpRequest, name: str, layout_pk: int, pk: int) -> HttpResponse:
    """GET: what rejecting the proposal does, to confirm; POST: reject it."""
    proposal = proposal_of(request, pk)
    if request.method == "GET":
        template = "memoryui/proposal_approve.html" + ("#reject" if request.htmx else "")
        return render(
            request,
            template,
            {
                "proposal": proposal,
                "layout": proposal.layout,
                "workspace": proposal.layout.workspace,
                "rejecting": True,
                "decided": proposal.decisions.count(),
                "pending": proposal.status == Proposal.Status.PENDING,
                "held": curation.held_by_other(proposal, request.user),
            },
        )
    try:
        curation.reject_proposal(proposal, user=request.user)
    except curation.DecisionRefused as exc:
        return refuse(request, proposal, exc, "rejection")
    messages.info(request, "Proposal rejected; the current files stay as they are.")
    if request.htmx:
        response = HttpResponse(status=204)
        response["HX-Redirect"] = review_url(proposal)
        return response
    return redirect("memoryui:proposal_review", name=name, layout_pk=layout_pk, pk=pk)


@workspace_view(Role.REVIEWER)
@require_POST
def proposal_request_changes(
    request: HtmxHttpRequest, name: str, layout_pk: int, pk: int
) -> HttpResponse:
    """Close the proposal without applying it, with the reviewer's message (from the
    submit dialog): the next proposal of the layout shows it, phase two is told it."""
    proposal = proposal_of(request, pk)
    form = forms.RequestChangesForm(request.POST)
    if not form.is_valid():
        if request.htmx:  # the dialog again, saying what is missing
            return _submit_dialog(request, proposal, curation.UNDECIDED_ACCEPT, changes_form=form)
        return invalid(request, proposal, form)
    try:
        curation.request_changes(proposal, form.cleaned_data["message"], user=request.user)
    except curation.DecisionRefused as exc:
        return refuse(request, proposal, exc, "request for changes")
    messages.info(
        request,
        "Changes requested: the proposal is closed without applying it; the next one "
        "shows your message, and the next consolidation is told it.",
    )
    if request.htmx:
        response = HttpResponse(status=204)
        response["HX-Redirect"] = review_url(proposal)
        return response
    return redirect("memoryui:proposal_review", name=name, layout_pk=layout_pk, pk=pk)


@workspace_view(Role.REVIEWER)
@require_POST
def proposal_reserve(request: HtmxHttpRequest, name: str, layout_pk: int, pk: int) -> HttpResponse:
    """Start reviewing (reserve the proposal for 30 minutes: nobody else decides on it
    meanwhile) or stop (``action=release``). A workspace admin may release someone
    else's reservation, say one left by a reviewer who went home; nobody decides
    through one."""
    proposal = proposal_of(request, pk)
    releasing = request.POST.get("action") == "release"
    refused = ""
    try:
        if releasing:
            admin = has_role(request.user, proposal.layout.workspace, Role.ADMIN)
            curation.release(proposal, request.user, override=admin)
        else:
            curation.reserve(proposal, request.user)
    except curation.DecisionRefused as exc:
        if not request.htmx:
            return refuse(request, proposal, exc, "release" if releasing else "reservation")
        refused = str(exc)
        proposal.refresh_from_db(fields=["status", "reserved_by", "reserved_until"])
    if not request.htmx:
        return redirect("memoryui:proposal_review", name=name, layout_pk=layout_pk, pk=pk)
    return render(
        request,
        "memoryui/proposal_review.html#reservation",
        {
            "proposal": proposal,
            "layout": proposal.layout,
            "workspace": proposal.layout.workspace,
            "refused": refused,
            **reservation(request, proposal),
        },
        status=409 if refused else 200,
    )


@workspace_view(Role.REVIEWER)
@require_POST
def proposal_forget_decide(
    request: HtmxHttpRequest, name: str, layout_pk: int, pk: int
) -> HttpResponse:
    """Accept (forget) or reject (keep) the removal of one file an agent's proposal
    forgot; back to the review page's list (the file's row alone for htmx)."""
    proposal = proposal_of(request, pk)
    back = review_url(proposal) + "#forgotten"
    form = forms.ForgottenDecideForm(request.POST)
    if not form.is_valid():
        return bad_request(request, form, back=back, workspace=proposal.layout.workspace)
    path = form.cleaned_data["path"]
    if path not in proposal.forgotten:
        return bad_request(
            request,
            f"{path} is not a file this proposal forgets.",
            back=back,
            workspace=proposal.layout.workspace,
        )
    try:
        agent_proposals.decide_forgetting(
            proposal, [path], form.cleaned_data["decision"], user=request.user
        )
    except curation.DecisionRefused as exc:
        return refuse(request, proposal, exc, "decision")
    if not request.htmx:
        return redirect(back)
    (file,) = [f for f in agent_proposals.forgotten_files(proposal) if f["path"] == path]
    context = {
        "file": file,
        "proposal": proposal,
        "layout": proposal.layout,
        "workspace": proposal.layout.workspace,
        "can_decide": True,
    }
    row = render_to_string("memoryui/proposal_review.html#forgotten-file", context, request)
    return HttpResponse(row + progress_bar(request, proposal))
