"""A document's version history: two versions compared entry by entry, a restore
(as a new version), and the review of edits agents made through the API."""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from generation import review

from .. import agent_proposals, curation, diffs, entry_checks, forms
from ..models import MemoryVersion, Role
from ..review_cards import key_slug
from ..roles import has_role, require_role, workspace_view
from .common import HtmxHttpRequest, bad_request, document_or_404

HISTORY_PAGE_SIZE = 50


@workspace_view(Role.VIEWER)
@require_GET
def versions(request: HtmxHttpRequest, name: str, layout_pk: int, document: str) -> HttpResponse:
    """The versions of a document and an entry-level comparison of two of them (by
    default the previous version and the current one): each changed, added, removed,
    renamed, merged or split entry with a small diff; unchanged entries only counted."""
    layout = request.layout
    document = document_or_404(document)
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
                (v, entry_checks.agent_version_flags(v), agent_proposals.pending_for(v))
                for v in all_versions
                if v.needs_review
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
            "id": f"change-{key_slug(change.key)}",
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
    layout = request.layout
    document = document_or_404(document)
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


@workspace_view(Role.REVIEWER)
@require_POST
def agent_change(
    request: HtmxHttpRequest, name: str, layout_pk: int, number: int, document: str
) -> HttpResponse:
    layout = request.layout
    form = forms.AgentChangeForm(request.POST)
    if not form.is_valid():
        return bad_request(request, form, workspace=layout.workspace)
    version = get_object_or_404(
        MemoryVersion,
        layout=layout,
        document=document_or_404(document),
        number=number,
        needs_review=True,
    )
    revert = form.cleaned_data["action"] == "revert"
    if revert:
        require_role(request.user, layout.workspace, Role.EDITOR)
    proposal = agent_proposals.pending_for(version)
    if proposal is not None:
        # The whole version at once: accept all or reject all over its proposal, with
        # the proposal's checks, quarantine and merge.
        try:
            if revert:
                curation.reject_proposal(proposal, user=request.user)
                messages.success(request, f"Proposal #{proposal.pk} (the agent's edit) rejected.")
            else:
                curation.approve(proposal, user=request.user)
                messages.success(request, f"Proposal #{proposal.pk} (the agent's edit) approved.")
        except curation.DecisionRefused as exc:
            messages.error(request, str(exc))
        except curation.UnresolvedConflicts as exc:
            messages.error(request, f"{exc}: decide them on the proposal's review page.")
            return redirect("memoryui:proposal_review", name, layout_pk, proposal.pk)
    elif revert:
        restored = curation.revert_agent_change(version, user=request.user)
        messages.success(request, f"The agent's edit was reverted (version {restored.number}).")
    else:
        curation.accept_agent_change(version, user=request.user)
        messages.success(request, "The agent's edit is accepted.")
    return redirect("memoryui:versions", name=name, layout_pk=layout_pk, document=document)
