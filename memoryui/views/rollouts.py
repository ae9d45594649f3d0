"""The rollouts of a layout: the list (filtered, searched, paged by keys); the rollout
page, a transcript rendered by item type, beside its raw memory and rollout summary;
and one item in full, the fragment behind each "expand"."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial

from django.core.paginator import Paginator
from django.db.models import Exists, OuterRef
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.decorators.http import require_GET

from generation import tree

from .. import documents, rollout_reads, search, transcript
from ..forms import PageForm, RolloutFilterForm
from ..models import RawMemory, Role, Rollout, RolloutSummary, WorkspaceFile
from ..roles import workspace_view
from .common import HtmxHttpRequest, KeysThenRows, bad_request, cut_chars


def _rollout(request: HtmxHttpRequest, rollout_id: str) -> Rollout:
    """The rollout of the route's layout (``workspace_view`` resolved it), with its file
    and bytes."""
    rollout = get_object_or_404(
        Rollout.objects.select_related("file__blob"), layout=request.layout, rollout_id=rollout_id
    )
    rollout.layout = request.layout
    return rollout


def _parse(rollout: Rollout) -> tree.ParsedRollout:
    blob = rollout.file.blob
    if blob is None:
        return tree.ParsedRollout()
    return tree.parse_rollout(bytes(blob.data))


def _item_url(rollout: Rollout, segment: int, index: int) -> str:
    return reverse(
        "memoryui:rollout_item",
        args=[rollout.layout.workspace.name, rollout.layout_id, rollout.rollout_id, segment, index],
    )


@dataclass
class MemoryDoc:
    """A raw memory or rollout summary as the page shows it."""

    path: str
    headers: list[tuple[str, str]]
    body: str
    problem: str
    missing_since: datetime | None
    note: str = ""
    front_matter: list[tuple[str, str]] = field(default_factory=list)


_FRONT_MATTER_RE = re.compile(r"\A\s*---\n(.*?)\n---[ \t]*(?:\n|\Z)", re.DOTALL)
_FRONT_MATTER_KEY_RE = re.compile(r"^[A-Za-z_][\w-]*$")


def _split_front_matter(body: str) -> tuple[list[tuple[str, str]], str]:
    """The ``---`` block of ``key: value`` lines the SDK's prompt asks raw memories to
    start with, shown as fields; the body is left untouched when it is anything else."""
    match = _FRONT_MATTER_RE.match(body)
    if not match:
        return [], body
    fields = []
    for line in match.group(1).split("\n"):
        if not line.strip():
            continue
        key, sep, value = line.partition(":")
        if not sep or not _FRONT_MATTER_KEY_RE.match(key.strip()):
            return [], body
        fields.append((key.strip(), value.strip()))
    return fields, body[match.end() :]


def _memory_doc(file: WorkspaceFile, note: str = "") -> MemoryDoc:
    doc = MemoryDoc(file.path, [], "", file.problem, file.missing_since, note)
    if file.blob is None:
        return doc
    text, _ = tree.decode_text(bytes(file.blob.data))
    return _read_into(doc, text)


def memory_doc_of_text(path: str, text: str, note: str = "") -> MemoryDoc:
    """A raw memory or rollout summary not on disk (written by a run, pending write-back)."""
    return _read_into(MemoryDoc(path, [], "", "", None, note), text)


def _read_into(doc: MemoryDoc, text: str) -> MemoryDoc:
    head, body = tree.split_header_block(text)
    for line in head.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            doc.headers.append((key, value.strip()))
    doc.front_matter, doc.body = _split_front_matter(body)
    return doc


def _memory_docs(rollout: Rollout) -> tuple[list[MemoryDoc], list[MemoryDoc]]:
    """The rollout's raw memories and summaries (usually one each; a re-extraction
    with a new slug leaves the old summary behind), the ones on disk first and the
    summary the raw memory names before any other."""
    key = {"layout_id": rollout.layout_id, "rollout_id": rollout.rollout_id}
    raws = sorted(
        RawMemory.objects.filter(**key).select_related("file__blob"),
        key=lambda r: (r.file.missing_since is not None, r.file.path),
    )
    memories_dir = rollout.layout.memories_dir
    named = {f"{memories_dir}/{r.rollout_summary_file}" for r in raws if r.rollout_summary_file}
    summaries = sorted(
        RolloutSummary.objects.filter(**key).select_related("file__blob"),
        key=lambda s: tree.updated_at_sort_key(s.updated_at_raw),
        reverse=True,
    )
    summaries.sort(key=lambda s: (s.file.path not in named, s.file.missing_since is not None))
    summary_docs = []
    for summary in summaries:
        note = ""
        if named and summary.file.path not in named:
            note = "not the summary the raw memory names (left by an earlier extraction)"
        summary_docs.append(_memory_doc(summary.file, note))
    return [_memory_doc(r.file) for r in raws], summary_docs


@workspace_view(Role.VIEWER)
@require_GET
def rollout_detail(
    request: HtmxHttpRequest, name: str, layout_pk: int, rollout_id: str
) -> HttpResponse:
    paging = PageForm(request.GET)
    if not paging.is_valid():
        return bad_request(request, paging, workspace=request.workspace)
    rollout = _rollout(request, rollout_id)
    parsed = _parse(rollout)
    page = transcript.build_page(
        parsed,
        paging.cleaned_data["page"] or 1,
        item_url=partial(_item_url, rollout),
    )
    raw_memories, summaries = _memory_docs(rollout)
    memory_reads = rollout_reads.reads_by_item(rollout)
    for segment in page.segments:
        for entry in segment.entries:
            for item in entry.items:
                item.memory_reads = memory_reads.get((item.segment, item.index), [])
    return render(
        request,
        "memoryui/rollout_detail.html",
        {
            "rollout": rollout,
            "layout": rollout.layout,
            "workspace": rollout.layout.workspace,
            "file": rollout.file,
            "has_content": rollout.file.blob_id is not None,
            "page": page,
            "raw_memories": raw_memories,
            "summaries": summaries,
        },
    )


@workspace_view(Role.VIEWER)
@require_GET
def rollout_item(
    request: HtmxHttpRequest, name: str, layout_pk: int, rollout_id: str, segment: int, index: int
) -> HttpResponse:
    """One item in full: the htmx fragment that replaces its clipped version, or a page
    of its own without htmx."""
    rollout = _rollout(request, rollout_id)
    parsed = _parse(rollout)
    item = transcript.build_single(parsed, segment, index, item_url=partial(_item_url, rollout))
    if item is None:
        raise Http404("No such item in this rollout.")
    item.memory_reads = rollout_reads.reads_by_item(rollout).get((item.segment, item.index), [])
    context = {
        "rollout": rollout,
        "layout": rollout.layout,
        "workspace": rollout.layout.workspace,
        "item": item,
    }
    if request.htmx and not request.htmx.history_restore_request:
        return render(request, "memoryui/_rollout_item.html#item-body", context)
    page = transcript.page_of_item(parsed, segment, index)
    back = reverse("memoryui:rollout_detail", args=[name, layout_pk, rollout_id])
    context["back_url"] = (
        f"{back}?page={page}#{item.anchor}" if page > 1 else f"{back}#{item.anchor}"
    )
    return render(request, "memoryui/_rollout_item.html", context)


# --- the list -------------------------------------------------------------------------

ROLLOUTS_PER_PAGE = 50
TITLE_CHARS = 110


@workspace_view(Role.VIEWER)
@require_GET
def rollout_list(request: HtmxHttpRequest, name: str, layout_pk: int) -> HttpResponse:
    layout = request.layout
    paging = PageForm(request.GET)
    number = paging.cleaned_data["page"] if paging.is_valid() else None
    form = RolloutFilterForm(request.GET or None)
    rollouts = Rollout.objects.filter(layout=layout)
    query = ""
    if form.is_valid():
        data = form.cleaned_data
        if data["state"]:
            rollouts = rollouts.filter(terminal_state=data["state"])
        if data["since"]:
            rollouts = rollouts.filter(updated_day__gte=data["since"])
        if data["until"]:
            rollouts = rollouts.filter(updated_day__lte=data["until"])
        raw_ids = RawMemory.objects.filter(layout=layout).values("rollout_id")
        if data["memory"] == "none":
            rollouts = rollouts.exclude(rollout_id__in=raw_ids)
        elif data["memory"] == "some":
            rollouts = rollouts.filter(rollout_id__in=raw_ids)
        if data["selection"]:
            _, selection = documents.current_selection(layout)
            ids = [item.rollout_id for item in selection.items] if selection else []
            if data["selection"] == "selected":
                rollouts = rollouts.filter(rollout_id__in=ids)
            else:
                rollouts = rollouts.filter(rollout_id__in=raw_ids).exclude(rollout_id__in=ids)
        query = data["q"].strip()
        if query:
            rollouts = rollouts.filter(rollout_id__in=search.matching_rollout_ids(layout, query))
    rows = (
        Rollout.objects.select_related("file")
        .annotate(
            has_raw_memory=Exists(
                RawMemory.objects.filter(layout=layout, rollout_id=OuterRef("rollout_id"))
            )
        )
        .order_by("-sort_at", "-rollout_id")
    )
    kept = None
    # Documents an import wrote a moment ago, still without their search vectors, are
    # matched word for word until a worker has computed them (``memoryui.search``).
    indexing = bool(query) and search.index_pending_in(layout)
    if not (form.is_valid() and form.cleaned_data["selection"]) and not indexing:
        # What the filters and the search find changes only with an import (the
        # selection also with a write-back): the count, or a search's rollouts, are kept
        # until the next one, as the overview's figures are, instead of a count over
        # every rollout of the layout (~20 ms at 100,000) or a full-text match (~40 ms)
        # on each view and page.
        filters = form.cleaned_data if form.is_valid() else {}
        wanted = [str(filters.get(f) or "") for f in ("state", "since", "until", "memory")]
        searched = hashlib.sha256(query.encode()).hexdigest()[:32] if query else ""
        kept = (layout.workspace, ":".join(["rollouts", str(layout.pk), *wanted, searched]))
    page = Paginator(
        KeysThenRows(
            rollouts.order_by("-sort_at", "-rollout_id"), rows, read_once=bool(query), kept=kept
        ),
        ROLLOUTS_PER_PAGE,
    ).get_page(number)
    # One reverse() for the page (rollout ids need no quoting: ROLLOUT_ID_RE).
    detail = reverse("memoryui:rollout_detail", args=[layout.workspace.name, layout.pk, "-"])
    for rollout in page:
        rollout.detail_url = f"{detail.removesuffix('-/')}{rollout.rollout_id}/"
        rollout.short_title = cut_chars(rollout.title, TITLE_CHARS)
    params = request.GET.copy()
    params.pop("page", None)
    context = {
        "layout": layout,
        "workspace": layout.workspace,
        "form": form,
        "paging": paging,
        "page": page,
        "query": query,
        "indexing": indexing,
        "params": params.urlencode(),
        "states": tree.TERMINAL_STATES,
    }
    template = "memoryui/rollout_list.html"
    if request.htmx and not request.htmx.history_restore_request:
        template += "#rollout-table"
        context["fragment"] = True  # the count and notice go to the page's live region
    # Invalid filters (or page number) are shown with their messages, over the unfiltered
    # list (its first page).
    status = 400 if (form.is_bound and not form.is_valid()) or paging.errors else 200
    return render(request, template, context, status=status)
