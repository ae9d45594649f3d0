"""Teams editing memory_summary.md in the browser: one section, a new section or the
whole file, with a live meter of what the SDK will inject before anything is saved.

The meter always counts the whole resulting file (a section's edit applied to the
version the person opened) and cuts it with ``generation.summary.injected_summary``,
the function tested equal to the SDK's own truncation. Saves go through ``curation``:
a save based on an outdated version is refused with both texts shown, and every save is
a new version with an audit event. A save over the cap needs an explicit confirmation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from generation import review
from generation.memory_md import KIND_LABELS
from generation.summary import approx_tokens, injected_summary

from .. import curation, forms
from ..models import Layout, MemoryVersion, Role
from ..rendering import render_markdown
from ..roles import workspace_view
from .common import HtmxHttpRequest, bad_request

SUMMARY = MemoryVersion.Document.MEMORY_SUMMARY
# Characters of the kept text shown on either side of the marker in the cut preview.
AROUND_MARKER = 300


class Refused(Exception):
    """Input that names something that is not there (a version); answered with 400."""


@dataclass(frozen=True)
class Draft:
    """What a person is editing: a section (``key``), a new section, or the whole file,
    and the text of the version it applies to."""

    mode: str  # "section", "add" or "file"
    key: str
    title: str
    text: str
    base: str

    @property
    def result(self) -> str:
        """The whole file this edit would save (as curation computes it)."""
        if self.mode == "section":
            return curation.with_entry_replaced(self.base, self.key, self.text)
        if self.mode == "add":
            return curation.with_entry_added(self.base, self.text)
        return self.text


def _draft(base: str, key: str, add: bool, text: str | None) -> Draft:
    """``text`` None: the text as it is in ``base`` (opening the editor)."""
    if key:
        entry = next((e for e in review.entries(base) if e.key == key), None)
        if entry is None:
            raise Http404("No such section (it may have been changed or removed since).")
        title = entry.title or KIND_LABELS.get(entry.kind, entry.kind)
        return Draft("section", key, title, entry.text if text is None else text, base)
    if add:
        return Draft("add", "", "", text or "", base)
    return Draft("file", "", "", base if text is None else text, base)


def _base_text(layout: Layout, based_on: int | None, current: MemoryVersion | None) -> str:
    """The text of the version the person opened (``based_on``; None: no version yet)."""
    if based_on is None:
        return ""
    if current is not None and current.number == based_on:
        return curation.text_of(current)
    version = MemoryVersion.objects.filter(layout=layout, document=SUMMARY, number=based_on).first()
    if version is None:
        raise Refused(f"memory_summary.md has no version {based_on}.")
    return curation.text_of(version)


def _accepted(injection: Any, confirmed: int | None) -> bool:
    """Whether "Save anyway" covers this cut: it was given for at least as many cut
    tokens as the file now loses."""
    return confirmed is not None and injection.cut_tokens <= confirmed


def _meter(draft: Draft, *, confirmed: int | None = None) -> dict[str, Any]:
    """The token meter and previews of ``draft``, as the preview partial shows them."""
    injection = injected_summary(draft.result.encode("utf-8"))
    size = len(draft.text.encode("utf-8"))
    limit = settings.MEMORYUI_MAX_ENTRY_BYTES
    return {
        "draft": draft,
        "injection": injection,
        "text_tokens": approx_tokens(draft.text),
        "text_size": size,
        "size_limit": limit,
        "too_long": size > limit,
        # Rendering costs about 3 s a megabyte: never for text that cannot be saved.
        "rendered": render_markdown(draft.text) if size <= limit else None,
        "head_tokens": approx_tokens(injection.head),
        "tail_tokens": approx_tokens(injection.tail),
        "head_end": _last_lines(injection.head, AROUND_MARKER),
        "head_elided": len(injection.head) > AROUND_MARKER,
        "tail_start": _first_lines(injection.tail, AROUND_MARKER),
        "tail_elided": len(injection.tail) > AROUND_MARKER,
        # Ticked again only while the cut is no larger than what was accepted.
        "confirm_cut": injection.truncated and _accepted(injection, confirmed),
        "confirmed_before": confirmed,
    }


def _last_lines(text: str, limit: int) -> str:
    """The end of ``text``, about ``limit`` characters, from the start of a line."""
    if len(text) <= limit:
        return text
    end = text[-limit:]
    newline = end.find("\n")
    return end[newline + 1 :] if 0 <= newline < len(end) - 1 else end


def _first_lines(text: str, limit: int) -> str:
    """The start of ``text``, about ``limit`` characters, up to the end of a line."""
    if len(text) <= limit:
        return text
    start = text[:limit]
    newline = start.rfind("\n")
    return start[: newline + 1] if newline > 0 else start


def _editor(
    request: HtmxHttpRequest,
    layout: Layout,
    draft: Draft,
    *,
    based_on: int | None,
    current: MemoryVersion | None,
    status: int = 200,
    template: str = "memoryui/summary_edit.html",
    confirmed: int | None = None,
    **extra: Any,
) -> HttpResponse:
    context = {
        "layout": layout,
        "workspace": layout.workspace,
        "based_on": based_on or "",
        "current_number": current.number if current else None,
        "newer": (current.number if current else None) != based_on,
        **_meter(draft, confirmed=confirmed),
        **extra,
    }
    return render(request, template, context, status=status)


def _text(form: forms.SummaryEditForm) -> str:
    if form.too_long:  # the editor again, with the text, says how long it is
        return forms.normalize_newlines(str(form.data.get("text", "")))
    return form.cleaned_data["text"]


@workspace_view(Role.EDITOR)
@require_http_methods(["GET", "POST"])
def summary_edit(request: HtmxHttpRequest, name: str, layout_pk: int) -> HttpResponse:
    """Open the editor (GET: ``?key=`` a section, ``?add=1`` a new one, else the whole
    file), preview (POST with ``preview``) or save (POST)."""
    layout = request.layout
    form = forms.SummaryEditForm(request.POST if request.method == "POST" else request.GET)
    if not form.is_valid() and not form.too_long:
        return bad_request(request, form, workspace=layout.workspace)
    data = form.cleaned_data
    current = curation.latest(layout, SUMMARY)
    number = current.number if current else None
    if request.method == "GET":
        draft = _draft(curation.text_of(current), data["key"], data["add"], None)
        return _editor(request, layout, draft, based_on=number, current=current)

    based_on = data["based_on"]
    try:
        base = _base_text(layout, based_on, current)
    except Refused as exc:
        return bad_request(request, str(exc), workspace=layout.workspace)
    draft = _draft(base, data["key"], data["add"], _text(form))
    confirmed = data.get("confirm_cut")

    def again(status: int, **extra: Any) -> HttpResponse:
        return _editor(
            request,
            layout,
            draft,
            based_on=based_on,
            current=current,
            status=status,
            confirmed=confirmed,
            **extra,
        )

    if form.too_long:
        return again(400, errors=form.errors["text"])
    if data["preview"]:
        return again(200)
    if draft.mode == "add" and not draft.text.strip():
        return again(400, errors=["Write the new section first: there is nothing to add."])
    if based_on != number:
        return _stale(request, layout, draft, current)
    injection = injected_summary(draft.result.encode("utf-8"))
    if injection.truncated and not _accepted(injection, confirmed):
        grew = (
            f" “Save anyway” was ticked when about {confirmed:,} tokens were cut; the text "
            "has grown since, so look at the cut again."
            if confirmed is not None
            else ""
        )
        return again(
            400,
            errors=[
                f"Not saved: the file would be {injection.tokens:,} tokens, over the "
                f"{injection.max_tokens:,}-token cap, and agents would not see about "
                f"{injection.cut_tokens:,} tokens from its middle.{grew} Shorten it, or tick "
                "“Save anyway” to save it as it is."
            ],
        )
    if draft.result == base:
        messages.info(request, "Nothing changed: no new version.")
        return redirect("memoryui:memory_summary", name=name, layout_pk=layout_pk)
    try:
        version = _save(layout, draft, based_on, request.user)
    except curation.StaleVersion as exc:  # saved by someone else meanwhile
        return _stale(request, layout, draft, exc.latest)
    note = (
        f" It is over the cap: agents will not see about {injection.cut_tokens:,} tokens."
        if injection.truncated
        else ""
    )
    messages.success(request, f"Saved as version {version.number}.{note}")
    return redirect("memoryui:memory_summary", name=name, layout_pk=layout_pk)


def _save(layout: Layout, draft: Draft, based_on: int | None, user: Any) -> MemoryVersion:
    if draft.mode == "section":
        return curation.edit_entry(
            layout, SUMMARY, draft.key, draft.text, based_on=based_on or 0, user=user
        )
    if draft.mode == "add":
        return curation.add_entry(layout, SUMMARY, draft.text, based_on=based_on, user=user)
    return curation.save_document(
        layout, SUMMARY, draft.text, user=user, reason="edited the whole file", based_on=based_on
    )


def _stale(
    request: HtmxHttpRequest, layout: Layout, draft: Draft, current: MemoryVersion | None
) -> HttpResponse:
    """409: someone saved since this person opened the editor. Nothing is saved; both
    texts are shown and the editor holds theirs, now based on the latest version (a
    section removed meanwhile becomes a new section)."""
    latest_text = curation.text_of(current)
    sections = {e.key: e.text for e in review.entries(latest_text)}
    if draft.mode == "section" and draft.key in sections:
        theirs = sections[draft.key]
        mine = Draft("section", draft.key, draft.title, draft.text, latest_text)
    elif draft.mode == "section":
        theirs = latest_text
        mine = Draft("add", "", "", draft.text, latest_text)
    else:
        theirs = latest_text if draft.mode == "file" else ""
        mine = Draft(draft.mode, "", "", draft.text, latest_text)
    return _editor(
        request,
        layout,
        mine,
        based_on=current.number if current else None,
        current=current,
        status=409,
        stale=True,
        theirs=theirs,
        yours=draft.text,
    )


@workspace_view(Role.EDITOR)
@require_POST
def summary_preview(request: HtmxHttpRequest, name: str, layout_pk: int) -> HttpResponse:
    """The meter and previews for the text being edited (htmx, as the person types);
    nothing is saved. Without htmx: the whole editor page."""
    layout = request.layout
    form = forms.SummaryEditForm(request.POST)
    if not form.is_valid() and not form.too_long:
        return bad_request(request, form, workspace=layout.workspace)
    data = form.cleaned_data
    current = curation.latest(layout, SUMMARY)
    try:
        base = _base_text(layout, data["based_on"], current)
    except Refused as exc:
        return bad_request(request, str(exc), workspace=layout.workspace)
    draft = _draft(base, data["key"], data["add"], _text(form))
    template = "memoryui/summary_edit.html" + ("#summary-preview" if request.htmx else "")
    return _editor(
        request,
        layout,
        draft,
        based_on=data["based_on"],
        current=current,
        template=template,
        confirmed=data.get("confirm_cut"),
    )
