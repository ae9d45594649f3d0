"""Editing MEMORY.md and memory_summary.md by hand, one entry at a time: edit, delete,
add, pin. Every save is a new version (``memoryui.curation``), based on the version the
editor was opened with."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from generation import review

from .. import curation, entry_checks, forms
from ..models import AuditEvent, Layout, MemoryVersion, Role
from ..rendering import render_markdown
from ..roles import workspace_view
from .common import HtmxHttpRequest, bad_request, document_or_404


@workspace_view(Role.EDITOR)
@require_http_methods(["GET", "POST"])
def entry_edit(request: HtmxHttpRequest, name: str, layout_pk: int, document: str) -> HttpResponse:
    """Edit (or delete) one entry, or add one (no key). A save based on an outdated
    version is refused with both texts shown, so nobody's work is lost."""
    layout = request.layout
    document = document_or_404(document)
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
    """A person's edit gets the poisoning checks a proposal's entries get, against the
    rollouts it cites. It is saved, since a person wrote it on purpose; the warning says
    why it looks like an injected instruction, and the audit log keeps it beside the
    edit."""
    found = entry_checks.edit_flags(layout, text)
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
    layout = request.layout
    form = forms.PinForm(request.POST)
    if not form.is_valid():
        return bad_request(request, form, workspace=layout.workspace)
    try:
        pin = curation.set_pin(
            layout,
            document_or_404(document),
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
