"""Proposals reviewed like pull requests: the list, the review page (entry cards with
their diffs, flags, citations and comments, paged per document; ``review_cards``
presents each card, ``review_marks`` adds the page's flags), the folds a card loads
(rendered text, evidence), comments, assignment, the review queue, and protecting a
rollout from being forgotten. What reviewers decide is ``decisions``; what the entry
actions share, ``entry_actions``. Roles are checked here, on the server."""

from __future__ import annotations

from urllib.parse import quote, urlencode

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.paginator import Paginator
from django.db import models
from django.db.models import Count
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.middleware.csrf import get_token
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape
from django.utils.http import RFC3986_SUBDELIMS, url_has_allowed_host_and_scheme
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_GET, require_POST

from generation.summary import injected_summary

from .. import agent_proposals, consolidation, curation, entry_checks, forms, review_cards
from ..models import (
    ROLE_ORDER,
    EntryCheck,
    EntryDecision,
    Layout,
    Membership,
    Proposal,
    ProtectedRawMemory,
    RawMemory,
    Role,
    Rollout,
    Workspace,
)
from ..rendering import render_markdown
from ..roles import has_role, workspace_view
from . import review_marks
from .common import HtmxHttpRequest, bad_request
from .entry_actions import (
    change_or_404,
    entry_action,
    entry_answer,
    entry_urls,
    invalid,
    permissions,
    reservation,
)
from .review_common import REVIEW_PAGE_SIZE, proposal_of, review_url


@workspace_view(Role.VIEWER)
@require_GET
def proposal_list(request: HtmxHttpRequest, name: str, layout_pk: int) -> HttpResponse:
    layout = request.layout
    form = forms.ProposalOriginForm(request.GET)
    if not form.is_valid():
        return bad_request(request, form, workspace=layout.workspace)
    # A list of their origins and states: none of their texts (megabytes each).
    proposals = (
        Proposal.objects.filter(layout=layout)
        .select_related("layout__workspace", "run", "decided_by")
        .defer("memory_md", "memory_summary", "raw_memories_md", "selection")
    )
    if origin := form.cleaned_data["origin"]:
        proposals = proposals.filter(origin=origin)
    return render(
        request,
        "memoryui/proposal_list.html",
        {
            "layout": layout,
            "workspace": layout.workspace,
            "proposals": proposals[:100],
            "origin": origin,
            "origins": Proposal.Origin.choices,
        },
    )


@workspace_view(Role.VIEWER)
@require_GET
def proposal_review(request: HtmxHttpRequest, name: str, layout_pk: int, pk: int) -> HttpResponse:
    proposal = proposal_of(request, pk)
    place = forms.ReviewPlaceForm(request.GET)
    if not place.is_valid():
        return bad_request(request, place, back=review_url(proposal), workspace=request.workspace)
    show = place.place().get("show", "")
    perms = permissions(request, proposal)
    protected = set(proposal.layout.protected.values_list("rollout_id", flat=True))
    comments: dict[str, list] = {}
    for comment in proposal.comments.select_related("author"):
        comments.setdefault(comment.key, []).append(comment)
    reviews = curation.document_reviews(proposal)
    findings = review_marks.lint_findings(proposal)
    rejections = curation.rejections(proposal)
    marks = review_cards.Marks.load(
        proposal,
        request.user,
        decisions={(doc.document, k): d for doc in reviews for k, d in doc.decisions.items()},
        rejected=[(r.document, r.key) for r in rejections],
    )
    decidable = {doc.document: curation.decidable(doc) for doc in reviews}
    review_marks.note_lint_and_stale(marks, proposal, decidable, findings, reviews)
    marks.note_checks(proposal, decidable)
    new_files = review_marks.run_files(proposal)
    doubles = review_marks.duplicate_marks(proposal, reviews)
    pages = []
    for doc in reviews:
        cites_all: dict[str, list] = {}
        if show == "flagged":  # "unsupported" and "outdated" are flags: every change's
            cites_all = review_marks.citation_status(proposal, decidable[doc.document], new_files)
            marks.need_approvals(doc.document, decidable[doc.document])
        if show in ("", "all"):  # what is_shown says, without a call per entry (thousands)
            shown = doc.changes if show else decidable[doc.document]
        else:
            shown = [
                c
                for c in doc.changes
                if review_marks.is_shown(
                    c,
                    show,
                    marks,
                    doc.document,
                    show == "flagged" and review_marks.is_unsupported(c, cites_all.get(c.key)),
                )
            ]
        if show == "risk":  # the strongest reason first
            shown.sort(key=lambda c: marks.risk_order(doc.document, c))
        page = Paginator(shown, REVIEW_PAGE_SIZE).get_page(
            place.cleaned_data.get(f"page_{doc.document}")
        )
        pages.append((doc, shown, page))
    # What the cards of both documents need, read for all of them at once.
    listed = {doc.document: list(page.object_list) for doc, _, page in pages}
    citations = review_marks.citation_statuses(proposal, listed, new_files)
    marks.need_approvals_of(listed)
    sections = []
    for doc, shown, page in pages:
        cites = citations[doc.document]
        marks.need_usage(doc.document, page.object_list)
        rows = [
            review_cards.page_card(
                review_cards.card(
                    doc.document,
                    change,
                    marks,
                    unsupported=review_marks.is_unsupported(change, cites.get(change.key, [])),
                ),
                cites=cites.get(change.key, []),
                comments=comments.get(change.key, []),
                place={"show": show, "page": page.number},
                texts=(doc.proposed_text, doc.base_text),
                duplicates=doubles.get((doc.document, change.key), []),
            )
            for change in page.object_list
        ]
        query = {k: v for k, v in place.place().items() if k != f"page_{doc.document}"}
        sections.append(
            {
                "doc": doc,
                "rows": rows,
                "page": page,
                "hidden": len(doc.changes) - len(shown),
                "query": urlencode(query),
                "place": {**query, "page": page.number},
            }
        )
    return render(
        request,
        "memoryui/proposal_review.html",
        {
            "proposal": proposal,
            "layout": proposal.layout,
            "workspace": proposal.layout.workspace,
            "sections": sections,
            **perms,
            "show": show,
            "show_all": show == "all",
            "filters": forms.REVIEW_FILTERS,
            "urls": entry_urls(proposal, relative=True),
            "progress": review_cards.progress(proposal, request.user, marks),
            **reservation(request, proposal),
            "comments": comments.get("", []),
            "reviewers": _reviewers(proposal.layout.workspace),
            "ledger": _ledger(request, proposal, protected, perms["can_edit"]),
            "reintroduced": curation.reintroduced(proposal, rejections),
            "change_request": curation.change_request(proposal.layout, before=proposal),
            "injection": injected_summary(proposal.memory_summary.encode()),
            **review_marks.lint_banner(proposal, findings, reviews, marks.poisoned),
            "skill_changes": consolidation.skill_diffs(proposal),
            "forgotten_files": agent_proposals.forgotten_files(proposal),
        },
    )


def _ledger(
    request: HtmxHttpRequest, proposal: Proposal, protected: set[str], can_edit: bool
) -> list[tuple[str, int, SafeString]]:
    """The forgetting ledger: each kind, its number of rollouts and their list items
    (a link, and the protect form for editors). A selection holds hundreds of rollouts:
    the items are built here, from one ``reverse()`` for the page (quoting ids as
    ``reverse()`` would), instead of a dozen template nodes each."""
    layout = proposal.layout
    detail = reverse("memoryui:rollout_detail", args=[layout.workspace.name, layout.pk, "-"])
    base = detail.removesuffix("-/")
    protect = reverse("memoryui:protect", args=[layout.workspace.name, layout.pk])
    # The form's constant parts, escaped once; then only the id is escaped per item.
    token, here = escape(get_token(request)), escape(request.path)
    form = (
        f'<form class="inline" method="post" action="{escape(protect)}"><input type="hidden" '
        f'name="csrfmiddlewaretoken" value="{token}"><input type="hidden" name="rollout_id" '
        'value="'
    )
    after_id = (
        f'"><input type="hidden" name="next" value="{here}#ledger"><button type="submit" '
        'class="link" name="action" value="'
    )
    ledger = []
    for label, ids in (
        ("forgotten", proposal.removed),
        ("added", proposal.added),
        ("retained", proposal.retained),
    ):
        items = []
        for rid in ids:
            url = escape(f"{base}{quote(rid, safe=RFC3986_SUBDELIMS + '~:@')}/")
            shown, on = escape(rid), rid in protected
            action = "unprotect" if on else "protect"
            items.append(
                f'<li><a href="{url}">{shown}</a>{_PROTECTED_BADGE if on else ""}\n        '
                + (f'{form}{shown}{after_id}{action}">{action}</button></form>' if can_edit else "")
                + "</li>"
            )
        ledger.append((label, len(ids), mark_safe("".join(items))))  # noqa: S308 (escaped)
    return ledger


_PROTECTED_BADGE = ' <span class="badge pin">protected</span>'


def _reviewers(workspace: Workspace) -> list:
    allowed = [r.value for r in ROLE_ORDER[ROLE_ORDER.index(Role.REVIEWER) :]]
    ids = Membership.objects.filter(workspace=workspace, role__in=allowed).values("user_id")
    return list(
        get_user_model()
        .objects.filter(
            models.Q(pk__in=ids) | models.Q(is_staff=True) | models.Q(is_superuser=True)
        )
        .only("pk", "username")  # what the assignment menu shows
        .order_by("username")
    )


@workspace_view(Role.VIEWER)
@require_GET
@entry_action(forms.EntryActionForm)
def proposal_entry(
    request: HtmxHttpRequest, proposal: Proposal, form: forms.EntryActionForm
) -> HttpResponse:
    """One entry as approval would apply it (a reviewer's edit, else the model's text),
    rendered: loaded when its "Rendered" fold opens (the fragment for htmx, a page
    without JavaScript), so the review page renders no Markdown it is not asked for."""
    document, key = form.cleaned_data["document"], form.cleaned_data["key"]
    change = change_or_404(proposal, document, key)
    edited = (
        EntryDecision.objects.filter(proposal=proposal, document=document, key=key)
        .values_list("edited_text", flat=True)
        .first()
    )
    html = render_markdown(edited or change.proposed or change.current)
    if request.htmx:
        return HttpResponse(html)
    return render(
        request,
        "memoryui/proposal_entry.html",
        {
            "proposal": proposal,
            "layout": proposal.layout,
            "workspace": proposal.layout.workspace,
            "change": change,
            "html": html,
            "back": review_url(proposal, f"entry-{document}-{review_cards.key_slug(key)}"),
        },
    )


@workspace_view(Role.REVIEWER)
@require_GET
@entry_action(forms.EntryActionForm)
def proposal_edit(
    request: HtmxHttpRequest, proposal: Proposal, form: forms.EntryActionForm
) -> HttpResponse:
    """One entry's "Edit, then accept" form, its text as approval would apply it: loaded
    when the card's fold opens (the fragment for htmx, a page without JavaScript), so
    the review page does not carry every entry's text a second time."""
    return _entry_form(request, proposal, form, "edit-form")


@workspace_view(Role.REVIEWER)
@require_GET
@entry_action(forms.EntryActionForm)
def proposal_comment_form(
    request: HtmxHttpRequest, proposal: Proposal, form: forms.EntryActionForm
) -> HttpResponse:
    """One entry's comment form, as a page: the review page's script builds each card's
    form from one copy in the page, and without JavaScript the card links here."""
    return _entry_form(request, proposal, form, "comment-form")


def _entry_form(
    request: HtmxHttpRequest, proposal: Proposal, form: forms.EntryActionForm, part: str
) -> HttpResponse:
    """The entry's page with one of its forms (``part``: ``edit-form``, ``comment-form``),
    or, for htmx, the form alone."""
    document, key = form.cleaned_data["document"], form.cleaned_data["key"]
    change = change_or_404(proposal, document, key)
    edited = (
        EntryDecision.objects.filter(proposal=proposal, document=document, key=key)
        .values_list("edited_text", flat=True)
        .first()
    )
    place = form.place(document)
    applied = edited or change.proposed
    context = {
        "proposal": proposal,
        "layout": proposal.layout,
        "workspace": proposal.layout.workspace,
        "change": change,
        "editing": part == "edit-form",
        "commenting": part == "comment-form",
        "urls": entry_urls(proposal),
        "row": {
            "hidden": review_cards.hidden_inputs(
                document,
                key,
                {"show": place.get("show", ""), "page": place.get(f"page_{document}", "")},
            ),
            "applied": applied,
            "lines": len(applied.splitlines()),
        },
        "back": review_url(proposal, f"entry-{document}-{review_cards.key_slug(key)}"),
    }
    template = "memoryui/proposal_entry.html" + (f"#{part}" if request.htmx else "")
    return render(request, template, context)


@workspace_view(Role.VIEWER)
@require_GET
@entry_action(forms.EntryActionForm)
def proposal_evidence(
    request: HtmxHttpRequest, proposal: Proposal, form: forms.EntryActionForm
) -> HttpResponse:
    """One entry's claims, each with the passage that supports it (or "unsupported
    sentence") and the rollout item it most likely came from: loaded when the card's
    Evidence fold opens (the fragment for htmx, a page without JavaScript)."""
    document, key = form.cleaned_data["document"], form.cleaned_data["key"]
    change = change_or_404(proposal, document, key)
    if not change.proposed:
        raise Http404("No such entry in this proposal.")
    edited = (
        EntryDecision.objects.filter(proposal=proposal, document=document, key=key)
        .values_list("edited_text", flat=True)
        .first()
    )
    text = edited or change.proposed
    entry_checks.ensure(proposal, [(document, key, text)] if edited else [], only=(document, key))
    check = EntryCheck.objects.get(
        proposal=proposal, document=document, key=key, sha256=entry_checks.check_key(text)
    )
    context = {
        "proposal": proposal,
        "layout": proposal.layout,
        "workspace": proposal.layout.workspace,
        "change": change,
        "claims": check.claims,
        "back": review_url(proposal, f"entry-{document}-{review_cards.key_slug(key)}"),
    }
    template = "memoryui/proposal_evidence.html" + ("#claims" if request.htmx else "")
    return render(request, template, context)


@workspace_view(Role.REVIEWER)
@require_POST
@entry_action(forms.CommentPlaceForm)
def proposal_comment(
    request: HtmxHttpRequest, proposal: Proposal, form: forms.CommentPlaceForm
) -> HttpResponse:
    """Comment on an entry, on one line of it (``line``: of the entry's text as approval
    would apply it, what the diff's right-hand numbers count), or, without an entry, on
    the whole proposal."""
    document, key = form.cleaned_data["document"], form.cleaned_data["key"]
    line, line_text = form.cleaned_data["line"], ""
    if line:
        change = change_or_404(proposal, document, key)
        decision = proposal.decisions.filter(document=document, key=key).first()
        lines = ((decision and decision.edited_text) or change.proposed).splitlines()
        if line > len(lines):
            return bad_request(
                request,
                f"The entry has {len(lines)} lines: there is no line {line} to comment on.",
                back=review_url(proposal),
                workspace=request.workspace,
            )
        line_text = lines[line - 1]
    curation.add_comment(
        proposal,
        form.cleaned_data["text"],
        user=request.user,
        document=document,
        key=key,
        line=line,
        line_text=line_text,
    )
    return entry_answer(request, proposal, form, document, key if document else "")


@workspace_view(Role.REVIEWER)
@require_POST
def proposal_assign(request: HtmxHttpRequest, name: str, layout_pk: int, pk: int) -> HttpResponse:
    proposal = proposal_of(request, pk)
    form = forms.AssignForm(request.POST)
    if not form.is_valid():
        return invalid(request, proposal, form)
    reviewer = form.cleaned_data["reviewer"]
    if reviewer is not None and not has_role(reviewer, proposal.layout.workspace, Role.REVIEWER):
        messages.error(request, f"{reviewer} is not a reviewer of this workspace.")
    else:
        curation.assign(proposal, reviewer, user=request.user)
    return redirect("memoryui:proposal_review", name=name, layout_pk=layout_pk, pk=pk)


@require_GET
def review_queue(request: HtmxHttpRequest) -> HttpResponse:
    """Proposals awaiting review in the workspaces where this person reviews, and how
    far each reviewer has got."""
    form = forms.ProposalOriginForm(request.GET)
    if not form.is_valid():
        return bad_request(request, form)
    pending = (
        Proposal.objects.filter(status=Proposal.Status.PENDING)
        .select_related("layout__workspace", "assigned_to", "reserved_by", "run")
        .annotate(decided=Count("decisions"))
        .order_by("created_at")
    )
    if origin := form.cleaned_data["origin"]:
        pending = pending.filter(origin=origin)
    rows = [p for p in pending if has_role(request.user, p.layout.workspace, Role.REVIEWER)]
    progress = (
        EntryDecision.objects.filter(proposal__in=[p.pk for p in rows])
        .values("user__username")
        .annotate(n=Count("pk"), proposals=Count("proposal", distinct=True))
        .order_by("-n")
    )
    mine = [p for p in rows if p.assigned_to_id == request.user.pk]
    return render(
        request,
        "memoryui/review_queue.html",
        {
            "rows": rows,
            "mine": mine,
            "progress": progress,
            "now": timezone.now(),
            "origin": origin,
            "origins": Proposal.Origin.choices,
        },
    )


@workspace_view(Role.EDITOR)
@require_POST
def protect(request: HtmxHttpRequest, name: str, layout_pk: int) -> HttpResponse:
    layout = request.layout
    form = forms.ProtectForm(request.POST)
    if not form.is_valid():
        return bad_request(request, form, workspace=layout.workspace)
    rollout_id = form.cleaned_data["rollout_id"]
    if not _known_rollout(layout, rollout_id):
        return bad_request(
            request,
            f"{rollout_id} is not a rollout of {layout.memories_dir}: nothing was protected.",
            workspace=layout.workspace,
        )
    back = safe_next(request, form.cleaned_data["next"]) or reverse(
        "memoryui:layout_detail", args=[name, layout_pk]
    )
    wanted = form.cleaned_data["action"] != "unprotect"  # an intent, not a toggle
    on = curation.set_protected(layout, rollout_id, wanted, user=request.user)
    messages.success(
        request,
        f"{rollout_id} is "
        + ("protected: the next consolidations keep it." if on else "no longer protected."),
    )
    return HttpResponseRedirect(back)  # a URL, never a view name as redirect() may take


def _known_rollout(layout: Layout, rollout_id: str) -> bool:
    """A rollout, raw memory (a run's new one included) or protection of the layout."""
    return any(
        model.objects.filter(layout=layout, rollout_id=rollout_id).exists()
        for model in (Rollout, RawMemory, ProtectedRawMemory)
    )


def safe_next(request: HtmxHttpRequest, url: str) -> str:
    """``url`` when it stays on this site (a path or this host), else ""."""
    if url and url_has_allowed_host_and_scheme(
        url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return url
    return ""
