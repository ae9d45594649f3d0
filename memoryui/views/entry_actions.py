"""What the actions on a proposal's entries share: their preamble (the route's proposal,
the action's form, 400 when it does not validate, 409 when a decision comes too late),
and their answer (for htmx, the entry's card and the progress bar; without JavaScript,
a redirect back to the same page, filter and entry). The actions themselves are in
``decisions`` (decide, undo, viewed, pin, duplicates) and ``proposals`` (comments, the
folds a card loads)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar
from urllib.parse import urlencode

from django import forms as django_forms
from django.http import Http404, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse

from generation import review

from .. import curation, forms, review_cards
from ..models import MemoryVersion, Proposal, Role
from ..review_cards import key_slug
from ..roles import has_role
from . import review_marks
from .common import HtmxHttpRequest, bad_request
from .review_common import proposal_of, review_url

Form = TypeVar("Form", bound=django_forms.Form)
Document = MemoryVersion.Document


def entry_action(
    form_class: type[Form], *, attempted: str = ""
) -> Callable[
    [Callable[[HtmxHttpRequest, Proposal, Form], HttpResponse]], Callable[..., HttpResponse]
]:
    """Wrap an action on a proposal's entries in what every one does first: load the
    route's proposal, read ``form_class`` (from the POST, else the query), answer 400
    with the way back when it does not validate, and, when ``attempted`` names what the
    action records, answer 409 (``refuse``) when curation refuses it. The action gets
    the proposal and the valid form. A card's forms and links name their entry by the
    card's id (``entry``: ``<document>-<key_slug(key)>``) instead of its ``document``
    and ``key`` (a title: up to hundreds of characters, on every form and fold)."""

    def decorate(
        action: Callable[[HtmxHttpRequest, Proposal, Form], HttpResponse],
    ) -> Callable[..., HttpResponse]:
        @functools.wraps(action)
        def view(request: HtmxHttpRequest, name: str, layout_pk: int, pk: int) -> HttpResponse:
            proposal = proposal_of(request, pk)
            data: QueryDict = request.POST if request.method == "POST" else request.GET
            if "key" not in data and data.get("entry"):  # a card's: by its id
                data = data.copy()
                document, _, slug = str(data.get("entry", "")).rpartition("-")
                data["document"], data["key"] = document, entry_key(proposal, document, slug)
            form = form_class(data)
            if not form.is_valid():
                return invalid(request, proposal, form)
            if not attempted:
                return action(request, proposal, form)
            try:
                return action(request, proposal, form)
            except curation.DecisionRefused as exc:
                return refuse(request, proposal, exc, attempted)

        return view

    return decorate


def entry_key(proposal: Proposal, document: str, slug: str) -> str:
    """The key of the entry of ``document`` whose card id ends in ``slug`` ("" when
    none does: the form then says the key is missing)."""
    if document not in Document.values:
        return ""
    return next(
        (c.key for c in review_cards.changes(proposal, document) if key_slug(c.key) == slug), ""
    )


def change_or_404(proposal: Proposal, document: str, key: str) -> review.Change:
    """The proposal's change of the entry ``key`` of ``document``."""
    change = next((c for c in review_cards.changes(proposal, document) if c.key == key), None)
    if change is None:
        raise Http404("No such entry in this proposal.")
    return change


def invalid(request: HtmxHttpRequest, proposal: Proposal, form: django_forms.Form) -> HttpResponse:
    """A review action's form that does not validate: 400, with the way back."""
    return bad_request(request, form, back=review_url(proposal), workspace=request.workspace)


def refuse(
    request: HtmxHttpRequest, proposal: Proposal, exc: curation.DecisionRefused, attempted: str
) -> HttpResponse:
    """409: the decision was not recorded, and what happened instead (who decided
    what, when, or who holds the proposal); the fragment alone for htmx."""
    template = "memoryui/proposal_refused.html" + ("#refusal" if request.htmx else "")
    context = {
        "proposal": proposal,
        "layout": proposal.layout,
        "workspace": proposal.layout.workspace,
        "attempted": attempted,
        "reason": str(exc),
    }
    response = render(request, template, context, status=409)
    if request.htmx:  # into the review page's notice, not in place of the entry
        response["HX-Retarget"] = "#review-notice"
        response["HX-Reswap"] = "innerHTML"
    return response


def entry_answer(
    request: HtmxHttpRequest,
    proposal: Proposal,
    form: forms.ReviewPlaceForm,
    document: str,
    key: str,
) -> HttpResponse:
    """What an entry action answers: for htmx, that entry's card and the progress bar
    (``key``: the one entry acted on; empty when there is none); without JavaScript, a
    redirect back to the same page, filter and entry."""
    if request.htmx and key:
        return card_response(request, proposal, document, key, form)
    return redirect(back_to_review(proposal, form, document))


def card_response(
    request: HtmxHttpRequest,
    proposal: Proposal,
    document: str,
    key: str,
    form: forms.ReviewPlaceForm,
) -> HttpResponse:
    """One entry's card and, out of band, the progress bar: what an entry action
    changed, computed for that entry only (not the whole review)."""
    change = change_or_404(proposal, document, key)
    marks = review_cards.Marks.load(proposal, request.user, key=key)
    findings = review_marks.lint_findings(proposal)
    review_marks.note_lint_and_stale(marks, proposal, {document: [change]}, findings)
    marks.note_checks(proposal, {document: [change]}, key=key)
    cites = review_marks.citation_status(proposal, [change]).get(key, [])
    place = form.place(document)
    card = review_cards.card(
        document, change, marks, unsupported=review_marks.is_unsupported(change, cites)
    )
    row = review_cards.page_card(
        card,
        cites=cites,
        comments=list(proposal.comments.filter(key=key).select_related("author")),
        place={"show": place.get("show", ""), "page": place.get(f"page_{document}", "")},
        texts=(proposal.memory_md, curation.text_of(proposal.base_memory_md)),
        # A decision can make (or unmake) a duplicate with any other entry.
        duplicates=review_marks.duplicate_marks(proposal, curation.document_reviews(proposal)).get(
            (document, key), []
        ),
    )
    context = {
        "proposal": proposal,
        "layout": proposal.layout,
        "workspace": proposal.layout.workspace,
        "row": row,
        **permissions(request, proposal),
        "urls": entry_urls(proposal, relative=True),
        "progress": review_cards.progress(proposal, request.user),
        "oob": True,
    }
    html = render_to_string("memoryui/proposal_review.html#card", context, request=request)
    bar = render_to_string("memoryui/proposal_review.html#progress", context, request=request)
    if (document, key) in marks.lint:  # the banner follows a decision on what it lists
        context.update(review_marks.lint_banner(proposal, findings))
        bar += render_to_string("memoryui/proposal_review.html#lint", context, request=request)
    return HttpResponse(html + bar)


def back_to_review(proposal: Proposal, form: forms.ReviewPlaceForm, document: str) -> str:
    """The review page the action came from: its filter, its page, the entry."""
    query = form.place(document)
    url = reverse(
        "memoryui:proposal_review",
        args=[proposal.layout.workspace.name, proposal.layout_id, proposal.pk],
    )
    if query:
        url += "?" + urlencode(query)
    # The card's own id unless the form names another element (cards send none).
    key = form.cleaned_data.get("key")
    if isinstance(key, list):  # a decision's keys: one card's, or all (no card)
        key = key[0] if len(key) == 1 else ""
    anchor = form.cleaned_data.get("anchor") or (
        f"entry-{document}-{review_cards.key_slug(key)}" if document and key else ""
    )
    return url + (f"#{anchor}" if anchor else "")


def permissions(request: HtmxHttpRequest, proposal: Proposal) -> dict[str, bool]:
    """What the person may do on the review page: review (unless another reviewer
    holds the proposal), comment, edit (pin, protect) and decide."""
    workspace = proposal.layout.workspace
    can_review = has_role(request.user, workspace, Role.REVIEWER)
    pending = proposal.status == Proposal.Status.PENDING
    return {
        "can_review": can_review and not curation.held_by_other(proposal, request.user),
        "can_comment": can_review,  # also while another reviewer holds it
        "can_edit": has_role(request.user, workspace, Role.EDITOR),
        "can_decide": can_review and pending and not curation.held_by_other(proposal, request.user),
    }


def entry_urls(proposal: Proposal, *, relative: bool = False) -> dict[str, str]:
    """The entry actions' URLs, reversed once for all the cards of a page; ``relative``:
    to the review page, where the cards are (shorter, on every card)."""
    args = [proposal.layout.workspace.name, proposal.layout_id, proposal.pk]
    page = reverse("memoryui:proposal_review", args=args) if relative else ""
    return {
        action: reverse(f"memoryui:proposal_{action}", args=args).removeprefix(page)
        for action in (
            "decide",
            "undo",
            "viewed",
            "pin",
            "comment",
            "entry",
            "edit",
            "evidence",
            "duplicate",
        )
    }


def reservation(request: HtmxHttpRequest, proposal: Proposal) -> dict[str, bool]:
    workspace = proposal.layout.workspace
    return {
        "held": curation.held_by_other(proposal, request.user),
        "reserved_by_me": curation.held_by(proposal, request.user),
        "may_reserve": has_role(request.user, workspace, Role.REVIEWER),
        "may_release": has_role(request.user, workspace, Role.ADMIN),
    }
