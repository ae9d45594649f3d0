"""Review and curation pages: proposals reviewed like pull requests, entry edits and
pins, version history, the audit log. Roles are checked here, on the server."""

from __future__ import annotations

import csv
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.core.paginator import Paginator
from django.db import models, transaction
from django.http import Http404, HttpResponse, HttpResponseRedirect, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from generation import review
from generation.summary import injected_summary

from . import audit, consolidation, curation, diffs, entry_checks, forms, review_cards
from .models import AuditEvent, EntryCheck, Layout, MemoryVersion, Proposal, Role, Workspace
from .roles import has_role, require_role, workspace_view
from .views import HtmxHttpRequest, bad_request

DOCUMENTS = {d.value for d in MemoryVersion.Document}
REVIEW_PAGE_SIZE = 25


def _layout(request: HtmxHttpRequest, name: str, layout_pk: int, role: Role) -> Layout:
    """The route's layout, resolved by ``roles.workspace_view`` (which checked the view's
    role; this checks ``role`` too, from the cached memberships)."""
    require_role(request.user, request.layout.workspace, role)
    return request.layout


def _document(value: str) -> str:
    if value not in DOCUMENTS:
        raise Http404("No such document.")
    return value


# --- proposals ----------------------------------------------------------------------


def _proposal(request: HtmxHttpRequest, name: str, layout_pk: int, pk: int, role: Role) -> Proposal:
    layout = _layout(request, name, layout_pk, role)
    return get_object_or_404(
        Proposal.objects.select_related(
            "layout__workspace", "run", "base_memory_md", "base_memory_summary", "decided_by"
        ).defer("raw_memories_md", "selection"),  # only the write-back reads these
        pk=pk,
        layout=layout,
    )


@workspace_view(Role.VIEWER)
@require_GET
def proposal_list(request: HtmxHttpRequest, name: str, layout_pk: int) -> HttpResponse:
    layout = _layout(request, name, layout_pk, Role.VIEWER)
    proposals = Proposal.objects.filter(layout=layout).select_related("run", "decided_by")
    return render(
        request,
        "memoryui/proposal_list.html",
        {"layout": layout, "workspace": layout.workspace, "proposals": proposals[:100]},
    )


@workspace_view(Role.VIEWER)
@require_GET
def proposal_review(request: HtmxHttpRequest, name: str, layout_pk: int, pk: int) -> HttpResponse:
    proposal = _proposal(request, name, layout_pk, pk, Role.VIEWER)
    place = forms.ReviewPlaceForm(request.GET)
    if not place.is_valid():
        return bad_request(request, place, back=_review_url(proposal), workspace=request.workspace)
    show = place.place().get("show", "")
    perms = _permissions(request, proposal)
    comments: dict[str, list] = {}
    for comment in proposal.comments.select_related("author"):
        comments.setdefault(comment.key, []).append(comment)
    reviews = curation.document_reviews(proposal)
    findings = _lint(proposal)
    marks = review_cards.Marks.load(proposal, request.user)
    _note_lint_and_stale(
        marks, proposal, {doc.document: curation.decidable(doc) for doc in reviews}, findings
    )
    marks.note_checks(proposal, {doc.document: curation.decidable(doc) for doc in reviews})
    sections = []
    for doc in reviews:
        cites_all = _citation_status(proposal, curation.decidable(doc)) if show == "flagged" else {}
        shown = [
            c
            for c in doc.changes
            if _shown(
                c,
                show,
                marks,
                doc.document,
                show == "flagged" and _unsupported(c, cites_all.get(c.key)),
            )
        ]
        if show == "risk":  # the strongest reason first
            shown.sort(key=lambda c: marks.risk_order(doc.document, c))
        page = Paginator(shown, REVIEW_PAGE_SIZE).get_page(
            place.cleaned_data.get(f"page_{doc.document}")
        )
        citations = _citation_status(proposal, list(page.object_list))
        rows = [
            _row(
                review_cards.card(
                    doc.document,
                    change,
                    marks,
                    unsupported=_unsupported(change, citations.get(change.key, [])),
                ),
                citations.get(change.key, []),
                comments.get(change.key, []),
                {"show": show, "page": page.number},
                (doc.proposed_text, doc.base_text),
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
            "urls": _entry_urls(proposal),
            "progress": review_cards.progress(proposal, request.user, marks),
            **_reservation(request, proposal),
            "comments": comments.get("", []),
            "reviewers": _reviewers(proposal.layout.workspace),
            "ledger": [
                ("forgotten", proposal.removed),
                ("added", proposal.added),
                ("retained", proposal.retained),
            ],
            "protected": set(proposal.layout.protected.values_list("rollout_id", flat=True)),
            "reintroduced": curation.reintroduced(proposal),
            "injection": injected_summary(proposal.memory_summary.encode()),
            "lint": findings,
            "skill_changes": consolidation.skill_diffs(proposal),
        },
    )


def _permissions(request: HtmxHttpRequest, proposal: Proposal) -> dict[str, bool]:
    workspace = proposal.layout.workspace
    can_review = has_role(request.user, workspace, Role.REVIEWER)
    pending = proposal.status == Proposal.Status.PENDING
    return {
        "can_review": can_review and not curation.held_by_other(proposal, request.user),
        "can_comment": can_review,  # also while another reviewer holds it
        "can_edit": has_role(request.user, workspace, Role.EDITOR),
        "can_decide": can_review and pending and not curation.held_by_other(proposal, request.user),
    }


def _note_lint_and_stale(
    marks: review_cards.Marks,
    proposal: Proposal,
    changes: dict[str, list[review.Change]],
    findings: list,
) -> None:
    """Mark the entries holding a line a lint finding points at, and those citing only
    rollouts this consolidation forgets (each card shows both)."""
    marks.lint = _lint_entries(proposal, changes, findings)
    forgotten = set(proposal.removed)
    marks.stale = {
        (document, c.key)
        for document, cs in changes.items()
        for c in cs
        if _stale(c, forgotten, proposal.memory_md)
    }


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


def _stale(change: review.Change, forgotten: set[str], memory_md: str) -> bool:
    """Whether every rollout the entry (a task group: its tasks) cites is one this
    consolidation forgets."""
    if not forgotten or not change.proposed:
        return False
    cited = review_citations(review.with_members(memory_md, change.key, change.proposed))
    return bool(cited) and all(_cited_rollout(path, forgotten) for path in cited)


def _cited_rollout(path: str, rollouts: set[str]) -> bool:
    """Whether ``rollout_summaries/<rollout id>_<slug>.md`` names one of ``rollouts``
    (ids may hold underscores too)."""
    name = path.rsplit("/", 1)[-1]
    return any(name[:i] in rollouts for i, ch in enumerate(name) if ch == "_")


def _unsupported(change: review.Change, cites: list | None) -> bool:
    return bool(change.kind in ("task_group", "task") and change.proposed and not cites)


def _shown(
    change: review.Change, show: str, marks: review_cards.Marks, document: str, unsupported: bool
) -> bool:
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


FOLD_LINES = 40
CITES_INLINE = 5


def _fold(text: str) -> tuple[str, str, int]:
    """A long block's first ``FOLD_LINES`` lines, the rest, and how many lines that is."""
    lines = text.splitlines(keepends=True)
    if len(lines) <= FOLD_LINES + 5:  # folding five lines away helps nobody
        return text, "", 0
    return "".join(lines[:FOLD_LINES]), "".join(lines[FOLD_LINES:]), len(lines) - FOLD_LINES


def _row(
    card: review_cards.Card,
    cites: list,
    comments: list,
    place: dict,
    documents: tuple[str, ...] = (),
) -> dict:
    """The template's view of one card (``review_cards.card``): its diff, folds and
    forms; ``place``: the filter and page its forms go back to."""
    document, change, decision = card.document, card.change, card.decision
    edited = card.edited_text
    applied = edited or change.proposed
    if edited:  # shown whole, in its own fold, under the suggestion
        head, tail, more = edited, "", 0
    elif change.status == "changed":  # the diff shows it
        head, tail, more = "", "", 0
    else:
        head, tail, more = _fold(change.current if change.status == "removed" else applied)
    diff = (
        diffs.side_by_side(change.current, change.proposed, context=2)
        if change.status == "changed"
        else None
    )
    suggestion = diffs.side_by_side(change.proposed, edited, context=2) if edited else None
    shown = suggestion if suggestion is not None else diff
    slug = f"entry-{document}-{_slug(change.key)}"
    hidden = format_html(
        '<input type="hidden" name="document" value="{}"><input type="hidden" name="key" '
        'value="{}"><input type="hidden" name="anchor" value="{}">',
        document,
        change.key,
        slug,
    )
    if place.get("show"):
        hidden += format_html('<input type="hidden" name="show" value="{}">', place["show"])
    if place.get("page") and str(place["page"]) != "1":
        hidden += format_html('<input type="hidden" name="page" value="{}">', place["page"])
    return {
        "hidden": hidden,
        "diff_head": shown[:FOLD_LINES] if shown and len(shown) > FOLD_LINES + 5 else shown,
        "diff_tail": shown[FOLD_LINES:] if shown and len(shown) > FOLD_LINES + 5 else None,
        "change": change,
        "document": document,
        "decision": decision,
        "state": card.state,
        "diff": diff,
        "suggestion": suggestion,
        "applied": applied,
        "head": head,
        "tail": tail,
        "more": more,
        "unsupported": card.flags["unsupported"],
        "cites": cites,
        "fold_cites": len(cites) > CITES_INLINE,
        "id": slug,
        "comments": comments,
        "card": card,
        # A task or section says which task group it is in (proposed, else current).
        "group_title": review.group_title(documents, change.group) if change.group else "",
        "approval": card.approval,
        "approved_in": card.approved_in,
        "viewed": card.viewed,
        "pinned": card.flags["pinned"],
        "rejected_before": card.flags["rejected_before"],
        "lint": card.flags["lint"],
        "stale": card.flags["stale"],
        "check": _check_view(card.check),
        "pinnable": bool(change.current) and change.status != "added",
    }


def _check_view(check: EntryCheck | None) -> dict[str, Any] | None:
    """What a card shows of its entry's check: the flags (strongest first), and each
    claim with its evidence and where it came from."""
    if check is None:
        return None
    return {
        "risk": check.risk,
        "flags": check.flags,
        "claim_count": check.claim_count,
        "unsupported": check.unsupported,
        "tool_only": check.tool_only,
    }


def _lint(proposal: Proposal) -> list:
    """What the write-back's lint will say of the proposed files (cached by content)."""
    from generation import lint

    from .writeback import layout_dirs

    base = proposal.layout.memories_dir
    return lint.lint_files(
        [
            (f"{base}/MEMORY.md", proposal.memory_md.encode()),
            (f"{base}/memory_summary.md", proposal.memory_summary.encode()),
        ],
        layout_dirs(proposal.layout.workspace),
    )


def _slug(key: str) -> str:
    import hashlib

    return hashlib.sha1(key.encode()).hexdigest()[:12]


def _reviewers(workspace: Workspace) -> list:
    from django.contrib.auth import get_user_model

    from .models import ROLE_ORDER, Membership

    allowed = [r.value for r in ROLE_ORDER[ROLE_ORDER.index(Role.REVIEWER) :]]
    ids = Membership.objects.filter(workspace=workspace, role__in=allowed).values("user_id")
    return list(
        get_user_model()
        .objects.filter(
            models.Q(pk__in=ids) | models.Q(is_staff=True) | models.Q(is_superuser=True)
        )
        .order_by("username")
    )


def _citation_status(proposal: Proposal, changes: list[review.Change]) -> dict[str, list]:
    """For the entries shown: each cited rollout summary, whether it exists (imported,
    or written by this proposal's run), and where it leads."""
    from . import documents

    cited = {
        c.key: review_citations(review.with_members(proposal.memory_md, c.key, c.proposed))
        for c in changes
        if c.proposed
    }
    links = documents.resolve_citations(proposal.layout, {p for ps in cited.values() for p in ps})
    new_files: set[str] = set()
    for files in proposal.run.jobs.filter(result__isnull=False).values_list(
        "result__files", flat=True
    ):
        new_files.update(files or {})
    return {
        key: [
            (links[p].exists or p in new_files, links[p].url, p, _short(p))
            for p in paths
            if p in links
        ]
        for key, paths in cited.items()
    }


def _short(path: str, limit: int = 48) -> str:
    name = path.removeprefix("rollout_summaries/")
    return name if len(name) <= limit else name[: limit - 1] + "…"


def review_citations(text: str) -> list[str]:
    from generation.memory_md import CITATION_RE

    return list(dict.fromkeys(m.group(0) for m in CITATION_RE.finditer(text)))


@workspace_view(Role.REVIEWER)
@require_POST
def proposal_decide(request: HtmxHttpRequest, name: str, layout_pk: int, pk: int) -> HttpResponse:
    """Accept or reject entries (one, with an optional edit, or all of a document). For
    htmx, one entry's decision answers with that entry's card and the progress bar
    only; without JavaScript, a redirect back to the same page, filter and entry."""
    proposal = _proposal(request, name, layout_pk, pk, Role.REVIEWER)
    form = forms.DecidePlaceForm(request.POST)
    if not form.is_valid():
        return bad_request(request, form, back=_review_url(proposal), workspace=request.workspace)
    document, decision = form.cleaned_data["document"], form.cleaned_data["decision"]
    keys = form.cleaned_data["key"]
    if form.cleaned_data["all"]:
        doc = next(d for d in curation.document_reviews(proposal) if d.document == document)
        theirs = curation.decided_by_others(proposal, document, request.user)
        keys = [c.key for c in curation.decidable(doc) if c.key not in theirs]
    try:
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
    except curation.DecisionRefused as exc:
        return _refused(request, proposal, exc, "decision")
    if request.htmx and len(keys) == 1:
        return _card_response(request, proposal, document, keys[0], form)
    return redirect(_back(proposal, form, document))


@workspace_view(Role.REVIEWER)
@require_POST
def proposal_undo(request: HtmxHttpRequest, name: str, layout_pk: int, pk: int) -> HttpResponse:
    """Take back the decision on one entry (audited): it is undecided again."""
    proposal = _proposal(request, name, layout_pk, pk, Role.REVIEWER)
    form = forms.EntryActionForm(request.POST)
    if not form.is_valid():
        return bad_request(request, form, back=_review_url(proposal), workspace=request.workspace)
    document, key = form.cleaned_data["document"], form.cleaned_data["key"]
    try:
        curation.undo_decision(proposal, document, key, user=request.user)
    except curation.DecisionRefused as exc:
        return _refused(request, proposal, exc, "undo")
    if request.htmx:
        return _card_response(request, proposal, document, key, form)
    return redirect(_back(proposal, form, document))


@workspace_view(Role.VIEWER)
@require_POST
def proposal_viewed(request: HtmxHttpRequest, name: str, layout_pk: int, pk: int) -> HttpResponse:
    """Mark an entry viewed (``action=off``: not viewed): each member's own progress,
    so a viewer may mark entries too; it decides nothing."""
    proposal = _proposal(request, name, layout_pk, pk, Role.VIEWER)
    form = forms.EntryActionForm(request.POST)
    if not form.is_valid():
        return bad_request(request, form, back=_review_url(proposal), workspace=request.workspace)
    document, key = form.cleaned_data["document"], form.cleaned_data["key"]
    if not any(c.key == key for c in review_cards.changes(proposal, document)):
        raise Http404("No such entry in this proposal.")
    curation.set_viewed(
        proposal, document, key, form.cleaned_data["action"] != "off", user=request.user
    )
    if request.htmx:
        return _card_response(request, proposal, document, key, form)
    return redirect(_back(proposal, form, document))


@workspace_view(Role.EDITOR)
@require_POST
def proposal_pin(request: HtmxHttpRequest, name: str, layout_pk: int, pk: int) -> HttpResponse:
    """Pin (or unpin) an entry of the current document from the review page."""
    proposal = _proposal(request, name, layout_pk, pk, Role.EDITOR)
    form = forms.EntryActionForm(request.POST)
    if not form.is_valid():
        return bad_request(request, form, back=_review_url(proposal), workspace=request.workspace)
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
            back=_review_url(proposal),
            workspace=request.workspace,
        )
    if request.htmx:
        return _card_response(request, proposal, document, key, form)
    return redirect(_back(proposal, form, document))


@workspace_view(Role.VIEWER)
@require_GET
def proposal_entry(request: HtmxHttpRequest, name: str, layout_pk: int, pk: int) -> HttpResponse:
    """One entry as approval would apply it (a reviewer's edit, else the model's text),
    rendered: loaded when its "Rendered" fold opens (the fragment for htmx, a page
    without JavaScript), so the review page renders no Markdown it is not asked for."""
    from .models import EntryDecision
    from .templatetags.markdown import render_markdown

    proposal = _proposal(request, name, layout_pk, pk, Role.VIEWER)
    form = forms.EntryActionForm(request.GET)
    form.fields["anchor"].required = False
    if not form.is_valid():
        return bad_request(request, form, back=_review_url(proposal), workspace=request.workspace)
    document, key = form.cleaned_data["document"], form.cleaned_data["key"]
    change = next((c for c in review_cards.changes(proposal, document) if c.key == key), None)
    if change is None:
        raise Http404("No such entry in this proposal.")
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
            "back": _review_url(proposal, f"entry-{document}-{_slug(key)}"),
        },
    )


@workspace_view(Role.VIEWER)
@require_GET
def proposal_evidence(request: HtmxHttpRequest, name: str, layout_pk: int, pk: int) -> HttpResponse:
    """One entry's claims, each with the passage that supports it (or "unsupported
    sentence") and the rollout item it most likely came from: loaded when the card's
    Evidence fold opens (the fragment for htmx, a page without JavaScript)."""
    from .models import EntryDecision

    proposal = _proposal(request, name, layout_pk, pk, Role.VIEWER)
    form = forms.EntryActionForm(request.GET)
    form.fields["anchor"].required = False
    if not form.is_valid():
        return bad_request(request, form, back=_review_url(proposal), workspace=request.workspace)
    document, key = form.cleaned_data["document"], form.cleaned_data["key"]
    change = next((c for c in review_cards.changes(proposal, document) if c.key == key), None)
    if change is None or not change.proposed:
        raise Http404("No such entry in this proposal.")
    edited = (
        EntryDecision.objects.filter(proposal=proposal, document=document, key=key)
        .values_list("edited_text", flat=True)
        .first()
    )
    text = edited or change.proposed
    entry_checks.ensure(proposal, [(document, key, text)] if edited else [], only=(document, key))
    check = EntryCheck.objects.get(
        proposal=proposal, document=document, key=key, sha256=entry_checks.sha(text)
    )
    context = {
        "proposal": proposal,
        "layout": proposal.layout,
        "workspace": proposal.layout.workspace,
        "change": change,
        "claims": check.claims,
        "back": _review_url(proposal, f"entry-{document}-{_slug(key)}"),
    }
    template = "memoryui/proposal_evidence.html" + ("#claims" if request.htmx else "")
    return render(request, template, context)


def _entry_urls(proposal: Proposal) -> dict[str, str]:
    """The entry actions' URLs, reversed once for all the cards of a page."""
    args = [proposal.layout.workspace.name, proposal.layout_id, proposal.pk]
    return {
        action: reverse(f"memoryui:proposal_{action}", args=args)
        for action in ("decide", "undo", "viewed", "pin", "comment", "entry", "evidence")
    }


def _card_response(
    request: HtmxHttpRequest,
    proposal: Proposal,
    document: str,
    key: str,
    form: forms.ReviewPlaceForm,
) -> HttpResponse:
    """One entry's card and, out of band, the progress bar: what an entry action
    changed, computed for that entry only (not the whole review)."""
    change = next((c for c in review_cards.changes(proposal, document) if c.key == key), None)
    if change is None:
        raise Http404("No such entry in this proposal.")
    marks = review_cards.Marks.load(proposal, request.user, key=key)
    _note_lint_and_stale(marks, proposal, {document: [change]}, _lint(proposal))
    marks.note_checks(proposal, {document: [change]}, key=key)
    cites = _citation_status(proposal, [change]).get(key, [])
    place = form.place(document)
    row = _row(
        review_cards.card(document, change, marks, unsupported=_unsupported(change, cites)),
        cites,
        list(proposal.comments.filter(key=key).select_related("author")),
        {"show": place.get("show", ""), "page": place.get(f"page_{document}", "")},
        (proposal.memory_md, curation.text_of(proposal.base_memory_md)),
    )
    context = {
        "proposal": proposal,
        "layout": proposal.layout,
        "workspace": proposal.layout.workspace,
        "row": row,
        **_permissions(request, proposal),
        "urls": _entry_urls(proposal),
        "progress": review_cards.progress(proposal, request.user),
        "oob": True,
    }
    card = render_to_string("memoryui/proposal_review.html#card", context, request=request)
    bar = render_to_string("memoryui/proposal_review.html#progress", context, request=request)
    return HttpResponse(card + bar)


def _back(proposal: Proposal, form: forms.ReviewPlaceForm, document: str) -> str:
    """The review page the action came from: its filter, its page, the entry."""
    query = form.place(document)
    url = reverse(
        "memoryui:proposal_review",
        args=[proposal.layout.workspace.name, proposal.layout_id, proposal.pk],
    )
    if query:
        url += "?" + urlencode(query)
    anchor = form.cleaned_data.get("anchor")
    return url + (f"#{anchor}" if anchor else "")


def _review_url(proposal: Proposal, anchor: str = "") -> str:
    url = reverse(
        "memoryui:proposal_review",
        args=[proposal.layout.workspace.name, proposal.layout_id, proposal.pk],
    )
    return url + (f"#{anchor}" if anchor else "")


@workspace_view(Role.REVIEWER)
@require_http_methods(["GET", "POST"])
def proposal_approve(request: HtmxHttpRequest, name: str, layout_pk: int, pk: int) -> HttpResponse:
    """GET: the review's summary (accepted, rejected, edited, undecided, not viewed)
    and the choice of what the undecided entries become; a dialog for htmx, a page
    without. POST: approve with that choice."""
    proposal = _proposal(request, name, layout_pk, pk, Role.REVIEWER)
    if request.method == "GET":
        return _submit_dialog(request, proposal, curation.UNDECIDED_ACCEPT)
    form = forms.ApproveForm(request.POST)
    if not form.is_valid():
        return bad_request(request, form, back=_review_url(proposal), workspace=request.workspace)
    undecided = form.cleaned_data["undecided"] or curation.UNDECIDED_ACCEPT
    reviews = curation.document_reviews(proposal)
    duplicates = curation.duplicates(reviews, undecided)
    if duplicates and not form.cleaned_data["duplicates_ok"]:
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
            response["HX-Redirect"] = _review_url(proposal)
            return response
        return redirect("memoryui:proposal_review", name=name, layout_pk=layout_pk, pk=pk)
    except curation.DecisionRefused as exc:
        return _refused(request, proposal, exc, "approval")
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
) -> HttpResponse:
    """The review's summary (counts, conflicts, likely duplicates with links to their
    cards, skill files and what approval does to each) and the choice for undecided
    entries: the dialog for htmx, a page without."""
    if reviews is None:
        reviews = curation.document_reviews(proposal)
    if duplicates is None:
        duplicates = curation.duplicates(reviews, undecided)
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
            anchor = f"entry-{dup.document}-{_slug(card)}"
            links.append(
                {"title": title or key, "url": f"{_review_url(proposal)}?{query}#{anchor}"}
            )
        out.append({"document": MemoryVersion.Document(dup.document).label, "entries": links})
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
    proposal = _proposal(request, name, layout_pk, pk, Role.REVIEWER)
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
        return _refused(request, proposal, exc, "rejection")
    messages.info(request, "Proposal rejected; the current files stay as they are.")
    if request.htmx:
        response = HttpResponse(status=204)
        response["HX-Redirect"] = _review_url(proposal)
        return response
    return redirect("memoryui:proposal_review", name=name, layout_pk=layout_pk, pk=pk)


@workspace_view(Role.REVIEWER)
@require_POST
def proposal_reserve(request: HtmxHttpRequest, name: str, layout_pk: int, pk: int) -> HttpResponse:
    """Start reviewing (reserve the proposal for 30 minutes: nobody else decides on it
    meanwhile) or stop (``action=release``). A workspace admin may release someone
    else's reservation, say one left by a reviewer who went home; nobody decides
    through one."""
    proposal = _proposal(request, name, layout_pk, pk, Role.REVIEWER)
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
            return _refused(request, proposal, exc, "release" if releasing else "reservation")
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
            **_reservation(request, proposal),
        },
        status=409 if refused else 200,
    )


def _reservation(request: HtmxHttpRequest, proposal: Proposal) -> dict[str, bool]:
    workspace = proposal.layout.workspace
    return {
        "held": curation.held_by_other(proposal, request.user),
        "reserved_by_me": curation.held_by(proposal, request.user),
        "may_reserve": has_role(request.user, workspace, Role.REVIEWER),
        "may_release": has_role(request.user, workspace, Role.ADMIN),
    }


def _refused(
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


# --- editing, pinning ----------------------------------------------------------------


@workspace_view(Role.EDITOR)
@require_http_methods(["GET", "POST"])
def entry_edit(request: HtmxHttpRequest, name: str, layout_pk: int, document: str) -> HttpResponse:
    """Edit (or delete) one entry, or add one (no key). A save based on an outdated
    version is refused with both texts shown, so nobody's work is lost."""
    layout = _layout(request, name, layout_pk, Role.EDITOR)
    document = _document(document)
    form = forms.EntryForm(request.POST if request.method == "POST" else request.GET)
    if not form.is_valid():
        if set(form.errors) == {"text"}:  # too long: the editor again, with the text
            return _entry_too_long(request, layout, document, form)
        return bad_request(request, form, workspace=layout.workspace)
    key = form.cleaned_data["key"]
    current = curation.latest(layout, document)
    entries = {e.key: e for e in review.entries(curation.text_of(current))}
    based_on = form.cleaned_data["based_on"]
    stale = request.method == "POST" and based_on != (current.number if current else None)
    if key and key not in entries and not stale:
        raise Http404("No such entry (it may have been changed or removed since).")
    context = {
        "layout": layout,
        "workspace": layout.workspace,
        "document": document,
        "document_label": MemoryVersion.Document(document).label,
        "key": key,
        "text": entries[key].text if key in entries else "",
        "based_on": current.number if current else "",
        "preview": None,
    }
    if request.method == "GET":
        template = "memoryui/entry_edit.html"
        if request.htmx:  # opened inline, inside the entry
            template += "#edit-form"
        return render(request, template, context)
    text = form.cleaned_data["text"]
    base = based_on
    if form.cleaned_data["preview"]:
        from .templatetags.markdown import render_markdown

        context.update(text=text, based_on=based_on, preview=render_markdown(text))
        return render(request, "memoryui/entry_edit.html", context)
    try:
        if stale:
            raise curation.StaleVersion(current)
        if key:
            curation.edit_entry(layout, document, key, text, based_on=base or 0, user=request.user)
        else:
            curation.add_entry(layout, document, text, based_on=base, user=request.user)
    except curation.StaleVersion as exc:
        context.update(
            text=text,
            stale=True,
            theirs=entries[key].text if key and key in entries else curation.text_of(exc.latest),
            based_on=exc.latest.number if exc.latest else "",
        )
        return render(request, "memoryui/entry_edit.html", context, status=409)
    messages.success(request, "Saved as a new version.")
    _warn_of_poisoning(request, layout, document, key, text)
    view = (
        "memoryui:memory_md"
        if document == MemoryVersion.Document.MEMORY_MD
        else "memoryui:memory_summary"
    )
    return redirect(view, name=name, layout_pk=layout_pk)


def _warn_of_poisoning(
    request: HtmxHttpRequest, layout: Layout, document: str, key: str, text: str
) -> None:
    """A person's edit gets the poisoning checks a proposal's entries get (the pattern
    ones: an edit has no rollout to compare with). It is saved, since a person wrote it
    on purpose; the warning says why it looks like an injected instruction, and the
    audit log keeps it beside the edit."""
    from generation import poison

    found = poison.flags(text)
    if not found:
        return
    AuditEvent.record(
        layout.workspace,
        "entry.flagged",
        user=request.user,
        layout=layout,
        target=key or "new entry",
        document=document,
        poisoning_flags=[f"{f.label}: {f.reason}" for f in found],
    )
    messages.warning(
        request,
        "This entry looks like memory poisoning, which every future agent would obey: "
        + "; ".join(f"{f.label} ({f.reason})" for f in found),
    )


def _entry_too_long(
    request: HtmxHttpRequest, layout: Layout, document: str, form: forms.EntryForm
) -> HttpResponse:
    context = {
        "layout": layout,
        "workspace": layout.workspace,
        "document": document,
        "document_label": MemoryVersion.Document(document).label,
        "key": form.data.get("key", ""),
        "text": form.data.get("text", ""),
        "based_on": form.data.get("based_on", ""),
        "errors": form.errors["text"],
    }
    return render(request, "memoryui/entry_edit.html", context, status=400)


@workspace_view(Role.EDITOR)
@require_POST
def entry_pin(request: HtmxHttpRequest, name: str, layout_pk: int, document: str) -> HttpResponse:
    layout = _layout(request, name, layout_pk, Role.EDITOR)
    form = forms.PinForm(request.POST)
    if not form.is_valid():
        return bad_request(request, form, workspace=layout.workspace)
    try:
        pin = curation.set_pin(
            layout,
            _document(document),
            form.cleaned_data["key"],
            form.cleaned_data["action"] != "unpin",  # an intent, not a toggle
            user=request.user,
        )
    except KeyError:
        raise Http404("No such entry.") from None
    messages.success(
        request, "Pinned: kept verbatim by every consolidation." if pin else "Unpinned."
    )
    return redirect("memoryui:memory_md", name=name, layout_pk=layout_pk)


# --- versions --------------------------------------------------------------------


HISTORY_PAGE_SIZE = 50


@workspace_view(Role.VIEWER)
@require_GET
def versions(request: HtmxHttpRequest, name: str, layout_pk: int, document: str) -> HttpResponse:
    """The versions of a document and an entry-level comparison of two of them (by
    default the previous version and the current one): each changed, added, removed,
    renamed, merged or split entry with a small diff; unchanged entries only counted."""
    layout = _layout(request, name, layout_pk, Role.VIEWER)
    document = _document(document)
    all_versions = list(
        MemoryVersion.objects.filter(layout=layout, document=document)
        .select_related("author")
        .order_by("-number")
    )
    by_number = {v.number: v for v in all_versions}
    form = forms.CompareForm(request.GET)
    if not form.is_valid():
        return bad_request(request, form, workspace=layout.workspace)
    a, b = form.cleaned_data["a"], form.cleaned_data["b"]
    if a is None and b is None and len(all_versions) >= 2:
        a, b = all_versions[1].number, all_versions[0].number
    elif a is None and b is not None:
        a = max((n for n in by_number if n < b), default=b)
    elif b is None and a is not None:
        b = all_versions[0].number if all_versions else a
    comparison = None
    if a is not None and b is not None:
        if a not in by_number or b not in by_number:
            raise Http404("No such version.")
        comparison = _entry_diff(
            curation.text_of(by_number[a]),
            curation.text_of(by_number[b]),
            form.cleaned_data.get("page") or 1,
        )
    return render(
        request,
        "memoryui/versions.html",
        {
            "layout": layout,
            "workspace": layout.workspace,
            "document": document,
            "document_label": MemoryVersion.Document(document).label,
            "versions": all_versions,
            "a": a,
            "b": b,
            "comparison": comparison,
            "can_edit": has_role(request.user, layout.workspace, Role.EDITOR),
            "can_review": has_role(request.user, layout.workspace, Role.REVIEWER),
            "agent_changes": [
                (v, entry_checks.agent_version_flags(v)) for v in all_versions if v.needs_review
            ],
        },
    )


def _entry_diff(old: str, new: str, page: int = 1) -> dict[str, object]:
    """Entry-level changes from ``old`` to ``new``, a page of them with small diffs."""
    changes = review.compare(old, new)
    shown = [c for c in changes if c.status != "unchanged"]
    counts: dict[str, int] = {}
    for change in shown:
        counts[change.status] = counts.get(change.status, 0) + 1
    paired = sum(1 for c in shown if c.paired)
    listing = Paginator(shown, HISTORY_PAGE_SIZE).get_page(page)
    rows = [
        {
            "change": change,
            "diff": diffs.side_by_side(change.current, change.proposed, context=2)
            if change.status == "changed"
            else None,
            "id": f"change-{_slug(change.key)}",
        }
        for change in listing.object_list
    ]
    return {
        "rows": rows,
        "page": listing,
        "counts": sorted(counts.items()),
        "paired": paired,
        "unchanged": len(changes) - len(shown),
        "total": len(shown),
    }


@workspace_view(Role.EDITOR)
@require_http_methods(["GET", "POST"])
def version_restore(
    request: HtmxHttpRequest, name: str, layout_pk: int, document: str, number: int
) -> HttpResponse:
    """GET: what restoring version ``number`` would change, entry by entry, naming the
    pinned entries it would drop or alter; POST: restore it (as a new version)."""
    layout = _layout(request, name, layout_pk, Role.EDITOR)
    document = _document(document)
    old = MemoryVersion.objects.filter(layout=layout, document=document, number=number).first()
    if old is None:
        raise Http404("No such version.")
    if request.method == "POST":
        version = curation.restore(layout, document, number, user=request.user)
        messages.success(request, f"Version {number} restored as version {version.number}.")
        return redirect("memoryui:versions", name=name, layout_pk=layout_pk, document=document)
    current = curation.latest(layout, document)
    current_text, restored_text = curation.text_of(current), curation.text_of(old)
    return render(
        request,
        "memoryui/version_restore.html",
        {
            "layout": layout,
            "workspace": layout.workspace,
            "document": document,
            "document_label": MemoryVersion.Document(document).label,
            "version": old,
            "current": current,
            "comparison": _entry_diff(current_text, restored_text),
            "pins": curation.pins_affected_by(layout, document, current_text, restored_text),
        },
    )


# --- audit ---------------------------------------------------------------------------


@workspace_view(Role.VIEWER)
@require_GET
def audit_log(request: HtmxHttpRequest, name: str) -> HttpResponseBase:
    workspace = request.workspace
    events = AuditEvent.objects.filter(workspace=workspace).select_related("layout")
    form = forms.AuditFilterForm(request.GET)
    if not form.is_valid():
        return bad_request(request, form, workspace=workspace)
    action, actor = form.cleaned_data["action"], form.cleaned_data["actor"]
    if action:
        events = events.filter(action__startswith=action)
    if actor:
        events = events.filter(actor=actor)
    if form.cleaned_data["format"] == "csv":
        return _csv(events, workspace)
    paging = forms.PageForm(request.GET)
    if not paging.is_valid():
        return bad_request(request, paging, workspace=workspace)
    page = Paginator(events, 100).get_page(paging.cleaned_data["page"])
    return render(
        request,
        "memoryui/audit.html",
        {
            "workspace": workspace,
            "page": page,
            "rows": [(e, audit.describe(e), audit.detail_items(e.detail)) for e in page],
            "action": action,
            "actor": actor,
            "actions": AuditEvent.objects.filter(workspace=workspace)
            .order_by()
            .values_list("action", flat=True)
            .distinct(),
        },
    )


class _Echo:
    def write(self, value: str) -> str:
        return value


def _csv(events, workspace: Workspace) -> StreamingHttpResponse:
    writer = csv.writer(_Echo())
    header = ["time", "actor", "action", "layout", "target", "detail", "detail_json"]

    def rows():
        yield writer.writerow(header)
        for e in events.iterator(chunk_size=1000):
            yield writer.writerow(
                [
                    e.created_at.isoformat(),
                    _csv_safe(e.actor),
                    _csv_safe(e.action),
                    _csv_safe(e.layout.memories_dir if e.layout else ""),
                    _csv_safe(e.target),
                    _csv_safe(audit.readable(e)),
                    _csv_safe(audit.as_json(e.detail)),
                ]
            )

    response = StreamingHttpResponse(rows(), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="{workspace.name}-audit.csv"'
    return response


def _csv_safe(value: str) -> str:
    """Cells that a spreadsheet would run as a formula are quoted with an apostrophe."""
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


# --- comments, the queue, agent edits, protection ---------------------------------------


@workspace_view(Role.REVIEWER)
@require_POST
def proposal_comment(request: HtmxHttpRequest, name: str, layout_pk: int, pk: int) -> HttpResponse:
    proposal = _proposal(request, name, layout_pk, pk, Role.REVIEWER)
    form = forms.CommentPlaceForm(request.POST)
    if not form.is_valid():
        return bad_request(request, form, back=_review_url(proposal), workspace=request.workspace)
    document, key = form.cleaned_data["document"], form.cleaned_data["key"]
    curation.add_comment(
        proposal, form.cleaned_data["text"], user=request.user, document=document, key=key
    )
    if request.htmx and document and key:
        return _card_response(request, proposal, document, key, form)
    return redirect(_back(proposal, form, document))


@workspace_view(Role.REVIEWER)
@require_POST
def proposal_assign(request: HtmxHttpRequest, name: str, layout_pk: int, pk: int) -> HttpResponse:
    proposal = _proposal(request, name, layout_pk, pk, Role.REVIEWER)
    form = forms.AssignForm(request.POST)
    if not form.is_valid():
        return bad_request(request, form, back=_review_url(proposal), workspace=request.workspace)
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
    from django.db.models import Count

    from .models import EntryDecision as Decision

    pending = (
        Proposal.objects.filter(status=Proposal.Status.PENDING)
        .select_related("layout__workspace", "assigned_to", "reserved_by", "run")
        .annotate(decided=Count("decisions"))
        .order_by("created_at")
    )
    rows = [p for p in pending if has_role(request.user, p.layout.workspace, Role.REVIEWER)]
    progress = (
        Decision.objects.filter(proposal__in=[p.pk for p in rows])
        .values("user__username")
        .annotate(n=Count("pk"), proposals=Count("proposal", distinct=True))
        .order_by("-n")
    )
    mine = [p for p in rows if p.assigned_to_id == request.user.pk]
    return render(
        request,
        "memoryui/review_queue.html",
        {"rows": rows, "mine": mine, "progress": progress, "now": timezone.now()},
    )


@workspace_view(Role.REVIEWER)
@require_POST
def agent_change(
    request: HtmxHttpRequest, name: str, layout_pk: int, number: int, document: str
) -> HttpResponse:
    layout = _layout(request, name, layout_pk, Role.REVIEWER)
    form = forms.AgentChangeForm(request.POST)
    if not form.is_valid():
        return bad_request(request, form, workspace=layout.workspace)
    version = get_object_or_404(
        MemoryVersion, layout=layout, document=_document(document), number=number, needs_review=True
    )
    if form.cleaned_data["action"] == "revert":
        require_role(request.user, layout.workspace, Role.EDITOR)
        restored = curation.revert_agent_change(version, user=request.user)
        messages.success(request, f"The agent's edit was reverted (version {restored.number}).")
    else:
        curation.accept_agent_change(version, user=request.user)
        messages.success(request, "The agent's edit is accepted.")
    return redirect("memoryui:versions", name=name, layout_pk=layout_pk, document=document)


@workspace_view(Role.EDITOR)
@require_POST
def protect(request: HtmxHttpRequest, name: str, layout_pk: int) -> HttpResponse:
    layout = _layout(request, name, layout_pk, Role.EDITOR)
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
    from .models import ProtectedRawMemory, RawMemory, Rollout

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
