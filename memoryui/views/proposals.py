"""Proposals reviewed like pull requests: the list, the review page (entry cards with
their diffs, flags, citations and comments, paged per document), the folds a card loads
(rendered text, evidence), comments, assignment, the review queue, and protecting a
rollout from being forgotten. What reviewers decide is ``decisions``. Roles are checked
here, on the server."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from django import forms as django_forms
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.paginator import Paginator
from django.db import connection, models
from django.db.models import Count
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.middleware.csrf import get_token
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape, format_html
from django.utils.http import RFC3986_SUBDELIMS, url_has_allowed_host_and_scheme
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_GET, require_POST

from generation import lint, review
from generation.memory_md import CITATION_RE
from generation.summary import injected_summary

from .. import consolidation, curation, diffs, documents, entry_checks, forms, review_cards
from ..models import (
    ROLE_ORDER,
    EntryCheck,
    EntryDecision,
    Layout,
    Membership,
    MemoryVersion,
    Proposal,
    ProtectedRawMemory,
    RawMemory,
    Role,
    Rollout,
    Workspace,
)
from ..rendering import render_markdown
from ..roles import has_role, workspace_view
from ..writeback import layout_dirs
from .common import HtmxHttpRequest, bad_request, key_slug

REVIEW_PAGE_SIZE = 25


def proposal_of(request: HtmxHttpRequest, pk: int) -> Proposal:
    """The route's proposal, in the layout ``workspace_view`` resolved (and checked the
    role for)."""
    proposals = Proposal.objects.select_related(
        "layout__workspace", "run", "base_memory_md", "base_memory_summary", "decided_by"
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
    proposal = get_object_or_404(proposals, pk=pk, layout=request.layout)
    if connection.vendor == "postgresql":
        found: Any = proposal
        if found.fresh_md is None and kept is not None:
            proposal.memory_md, proposal.memory_summary = kept[1], kept[2]
        else:
            proposal.memory_md, proposal.memory_summary = found.fresh_md, found.fresh_summary
            _keep(key, (found.row_version, found.fresh_md, found.fresh_summary))
    # The texts' caches then find them by identity (documents.same_text).
    proposal.memory_md = documents.same_text(proposal.memory_md)
    proposal.memory_summary = documents.same_text(proposal.memory_summary)
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


@workspace_view(Role.VIEWER)
@require_GET
def proposal_list(request: HtmxHttpRequest, name: str, layout_pk: int) -> HttpResponse:
    layout = request.layout
    form = forms.ProposalOriginForm(request.GET)
    if not form.is_valid():
        return bad_request(request, form, workspace=layout.workspace)
    proposals = Proposal.objects.filter(layout=layout).select_related(
        "layout__workspace", "run", "decided_by"
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
    perms = _permissions(request, proposal)
    protected = set(proposal.layout.protected.values_list("rollout_id", flat=True))
    comments: dict[str, list] = {}
    for comment in proposal.comments.select_related("author"):
        comments.setdefault(comment.key, []).append(comment)
    reviews = curation.document_reviews(proposal)
    findings = _lint(proposal)
    marks = review_cards.Marks.load(proposal, request.user)
    decidable = {doc.document: curation.decidable(doc) for doc in reviews}
    _note_lint_and_stale(marks, proposal, decidable, findings)
    marks.note_checks(proposal, decidable)
    new_files = _run_files(proposal)
    doubles = duplicate_marks(proposal, reviews)
    sections = []
    for doc in reviews:
        cites_all = (
            _citation_status(proposal, decidable[doc.document], new_files)
            if show == "flagged"
            else {}
        )
        if show in ("", "all"):  # what _shown says, without a call per entry (thousands)
            shown = [c for c in doc.changes if show or c.status != "unchanged"]
        else:
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
        citations = _citation_status(proposal, list(page.object_list), new_files)
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
                doubles.get((doc.document, change.key), []),
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
            **reservation(request, proposal),
            "comments": comments.get("", []),
            "reviewers": _reviewers(proposal.layout.workspace),
            "ledger": _ledger(request, proposal, protected, perms["can_edit"]),
            "reintroduced": curation.reintroduced(proposal),
            "injection": injected_summary(proposal.memory_summary.encode()),
            **_lint_banner(proposal, findings, reviews, marks.poisoned),
            "skill_changes": consolidation.skill_diffs(proposal),
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


def _lint_banner(
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
    duplicates: list[dict[str, Any]] | None = None,
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
    diff = (  # a task's number is the proposal's on both sides: renumbering is no change
        diffs.side_by_side(
            review.numbered_like(change.current, change.proposed), change.proposed, context=2
        )
        if change.status == "changed"
        else None
    )
    suggestion = diffs.side_by_side(change.proposed, edited, context=2) if edited else None
    shown = (suggestion if suggestion is not None else diff) or []
    folded = len(shown) > FOLD_LINES + 5
    head_rows = shown[:FOLD_LINES] if folded else shown
    tail_rows = shown[FOLD_LINES:] if folded else None
    slug = f"entry-{document}-{key_slug(change.key)}"
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
        # The Rendered and Evidence folds' query, as the urlencode filter would write it.
        "entry_query": mark_safe(  # noqa: S308 (quoted: no character left to escape)
            f"document={quote(document, safe='/')}&amp;key={quote(change.key, safe='/')}"
        ),
        "diff_head": review_cards.diff_html(head_rows) if head_rows else None,
        "diff_tail": tail_rows,
        "diff_tail_html": review_cards.diff_html(tail_rows) if tail_rows else None,
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
        "duplicates": duplicates or [],
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
        "label_count": check.label_count,
        "labels_missing": check.labels_missing,
        "judged": check.judged,  # the model judge's verdict (memoryui.judging), or None
    }


def _lint(proposal: Proposal) -> list:
    """What the write-back's lint will say of the proposed files (cached by content;
    the texts' digests too, so a page after the first hashes nothing)."""
    base = proposal.layout.memories_dir
    dirs = layout_dirs(proposal.layout.workspace)
    findings = []
    for path, text in (
        (f"{base}/MEMORY.md", proposal.memory_md),
        (f"{base}/memory_summary.md", proposal.memory_summary),
    ):
        found = lint.cached_findings(path, entry_checks.sha(text), dirs)
        findings += lint.lint_file(path, text.encode(), dirs) if found is None else found
    return findings


def _reviewers(workspace: Workspace) -> list:
    allowed = [r.value for r in ROLE_ORDER[ROLE_ORDER.index(Role.REVIEWER) :]]
    ids = Membership.objects.filter(workspace=workspace, role__in=allowed).values("user_id")
    return list(
        get_user_model()
        .objects.filter(
            models.Q(pk__in=ids) | models.Q(is_staff=True) | models.Q(is_superuser=True)
        )
        .order_by("username")
    )


def _run_files(proposal: Proposal) -> set[str]:
    """The files this proposal's run wrote (its rollout summaries among them)."""
    new_files: set[str] = set()
    if proposal.run is None:  # an agent's proposal: what it cites is imported
        return new_files
    for files in proposal.run.jobs.filter(result__isnull=False).values_list(
        "result__files", flat=True
    ):
        new_files.update(files or {})
    return new_files


def _citation_status(
    proposal: Proposal, changes: list[review.Change], new_files: set[str] | None = None
) -> dict[str, list]:
    """For the entries shown: each cited rollout summary, whether it exists (imported,
    or written by this proposal's run: ``new_files``, read when not given), and where
    it leads."""
    cited = {
        c.key: review_citations(review.with_members(proposal.memory_md, c.key, c.proposed))
        for c in changes
        if c.proposed
    }
    links = documents.resolve_citations(proposal.layout, {p for ps in cited.values() for p in ps})
    if new_files is None:
        new_files = _run_files(proposal)
    # A summary this run wrote is not on disk before the write-back: its link opens the
    # text from this proposal (marked pending), not the layout's missing citation.
    from_run = f"?proposal={proposal.pk}"
    return {
        key: [
            (
                links[p].exists or p in new_files,
                links[p].url if links[p].exists or p not in new_files else links[p].url + from_run,
                p,
                _short(p),
            )
            for p in paths
            if p in links
        ]
        for key, paths in cited.items()
    }


def _short(path: str, limit: int = 48) -> str:
    name = path.removeprefix("rollout_summaries/")
    return name if len(name) <= limit else name[: limit - 1] + "…"


def review_citations(text: str) -> list[str]:
    return list(dict.fromkeys(m.group(0) for m in CITATION_RE.finditer(text)))


@workspace_view(Role.VIEWER)
@require_GET
def proposal_entry(request: HtmxHttpRequest, name: str, layout_pk: int, pk: int) -> HttpResponse:
    """One entry as approval would apply it (a reviewer's edit, else the model's text),
    rendered: loaded when its "Rendered" fold opens (the fragment for htmx, a page
    without JavaScript), so the review page renders no Markdown it is not asked for."""

    proposal = proposal_of(request, pk)
    form = forms.EntryActionForm(request.GET)
    form.fields["anchor"].required = False
    if not form.is_valid():
        return invalid(request, proposal, form)
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
            "back": review_url(proposal, f"entry-{document}-{key_slug(key)}"),
        },
    )


@workspace_view(Role.VIEWER)
@require_GET
def proposal_evidence(request: HtmxHttpRequest, name: str, layout_pk: int, pk: int) -> HttpResponse:
    """One entry's claims, each with the passage that supports it (or "unsupported
    sentence") and the rollout item it most likely came from: loaded when the card's
    Evidence fold opens (the fragment for htmx, a page without JavaScript)."""

    proposal = proposal_of(request, pk)
    form = forms.EntryActionForm(request.GET)
    form.fields["anchor"].required = False
    if not form.is_valid():
        return invalid(request, proposal, form)
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
        proposal=proposal, document=document, key=key, sha256=entry_checks.check_key(text)
    )
    context = {
        "proposal": proposal,
        "layout": proposal.layout,
        "workspace": proposal.layout.workspace,
        "change": change,
        "claims": check.claims,
        "back": review_url(proposal, f"entry-{document}-{key_slug(key)}"),
    }
    template = "memoryui/proposal_evidence.html" + ("#claims" if request.htmx else "")
    return render(request, template, context)


def _entry_urls(proposal: Proposal) -> dict[str, str]:
    """The entry actions' URLs, reversed once for all the cards of a page."""
    args = [proposal.layout.workspace.name, proposal.layout_id, proposal.pk]
    return {
        action: reverse(f"memoryui:proposal_{action}", args=args)
        for action in (
            "decide",
            "undo",
            "viewed",
            "pin",
            "comment",
            "entry",
            "evidence",
            "duplicate",
        )
    }


def card_response(
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
    findings = _lint(proposal)
    _note_lint_and_stale(marks, proposal, {document: [change]}, findings)
    marks.note_checks(proposal, {document: [change]}, key=key)
    cites = _citation_status(proposal, [change]).get(key, [])
    place = form.place(document)
    row = _row(
        review_cards.card(document, change, marks, unsupported=_unsupported(change, cites)),
        cites,
        list(proposal.comments.filter(key=key).select_related("author")),
        {"show": place.get("show", ""), "page": place.get(f"page_{document}", "")},
        (proposal.memory_md, curation.text_of(proposal.base_memory_md)),
        # A decision can make (or unmake) a duplicate with any other entry.
        duplicate_marks(proposal, curation.document_reviews(proposal)).get((document, key), []),
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
    if (document, key) in marks.lint:  # the banner follows a decision on what it lists
        context.update(_lint_banner(proposal, findings))
        bar += render_to_string("memoryui/proposal_review.html#lint", context, request=request)
    return HttpResponse(card + bar)


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


def invalid(request: HtmxHttpRequest, proposal: Proposal, form: django_forms.Form) -> HttpResponse:
    """A review action's form that does not validate: 400, with the way back."""
    return bad_request(request, form, back=review_url(proposal), workspace=request.workspace)


def back_to_review(proposal: Proposal, form: forms.ReviewPlaceForm, document: str) -> str:
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


def review_url(proposal: Proposal, anchor: str = "") -> str:
    url = reverse(
        "memoryui:proposal_review",
        args=[proposal.layout.workspace.name, proposal.layout_id, proposal.pk],
    )
    return url + (f"#{anchor}" if anchor else "")


def reservation(request: HtmxHttpRequest, proposal: Proposal) -> dict[str, bool]:
    workspace = proposal.layout.workspace
    return {
        "held": curation.held_by_other(proposal, request.user),
        "reserved_by_me": curation.held_by(proposal, request.user),
        "may_reserve": has_role(request.user, workspace, Role.REVIEWER),
        "may_release": has_role(request.user, workspace, Role.ADMIN),
    }


@workspace_view(Role.REVIEWER)
@require_POST
def proposal_comment(request: HtmxHttpRequest, name: str, layout_pk: int, pk: int) -> HttpResponse:
    proposal = proposal_of(request, pk)
    form = forms.CommentPlaceForm(request.POST)
    if not form.is_valid():
        return invalid(request, proposal, form)
    document, key = form.cleaned_data["document"], form.cleaned_data["key"]
    curation.add_comment(
        proposal, form.cleaned_data["text"], user=request.user, document=document, key=key
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
