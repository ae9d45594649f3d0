"""A layout's rollouts, filtered and searched as on the rollouts page, each with its
raw memory and rollout summary, and its JSONL as imported."""

from datetime import date, datetime
from typing import Literal

from django.db.models import Exists, OuterRef
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from ninja import Field, Query, Schema
from ninja.pagination import paginate

from generation import tree

from ... import documents, search
from ...models import RawMemory, Role, Rollout, RolloutSummary, WorkspaceFile
from ..core import ERRORS, Mapped, Pages, api, conflict_422, layout


class RolloutOut(Schema):
    rollout_id: str
    terminal_state: str
    updated_at: datetime | None
    title: str
    segments: int
    items: int
    has_raw_memory: bool


class RolloutFilters(Schema):
    state: str | None = Field(None, description="terminal state, e.g. completed")
    since: date | None = Field(None, description="updated on or after (YYYY-MM-DD)")
    until: date | None = Field(None, description="updated on or before (YYYY-MM-DD)")
    memory: Literal["some", "none"] | None = Field(None, description="with or without raw memory")
    q: str | None = Field(None, max_length=500, description="search transcripts and memories")


def _rollout_out(r: Rollout) -> dict:
    return {
        "rollout_id": r.rollout_id,
        "terminal_state": r.terminal_state,
        "updated_at": r.updated_at,
        "title": r.title,
        "segments": r.segment_count,
        "items": r.item_count,
        "has_raw_memory": getattr(r, "has_raw_memory", False),
    }


@api.get(
    "/workspaces/{name}/layouts/{layout_id}/rollouts",
    response={200: list[RolloutOut], **ERRORS},
    tags=["rollouts"],
)
@paginate(Pages)
def list_rollouts(request: HttpRequest, name: str, layout_id: int, filters: Query[RolloutFilters]):
    """Newest first, filtered and searched as on the rollouts page."""
    lay = layout(request, name, layout_id, Role.VIEWER)
    rollouts = Rollout.objects.filter(layout=lay)
    if filters.state:
        if filters.state not in tree.TERMINAL_STATES:
            raise conflict_422(f"state must be one of {', '.join(sorted(tree.TERMINAL_STATES))}")
        rollouts = rollouts.filter(terminal_state=filters.state)
    if filters.since:
        rollouts = rollouts.filter(updated_day__gte=filters.since)
    if filters.until:
        rollouts = rollouts.filter(updated_day__lte=filters.until)
    raw_ids = RawMemory.objects.filter(layout=lay).values("rollout_id")
    if filters.memory == "none":
        rollouts = rollouts.exclude(rollout_id__in=raw_ids)
    elif filters.memory == "some":
        rollouts = rollouts.filter(rollout_id__in=raw_ids)
    if filters.q and filters.q.strip():
        rollouts = rollouts.filter(rollout_id__in=search.matching_rollout_ids(lay, filters.q))
    rollouts = rollouts.annotate(
        has_raw_memory=Exists(
            RawMemory.objects.filter(layout=lay, rollout_id=OuterRef("rollout_id"))
        )
    ).order_by("-sort_at", "-rollout_id")
    return Mapped(rollouts, _rollout_out)


class RolloutDetail(RolloutOut):
    path: str
    raw_memory: str | None
    rollout_summary: str | None


def _file_text(file_id: int | None) -> str | None:
    if file_id is None:
        return None
    blob = WorkspaceFile.objects.filter(pk=file_id).values_list("blob_id", flat=True).first()
    return documents.content(blob).decode("utf-8", "replace") if blob else None


@api.get(
    "/workspaces/{name}/layouts/{layout_id}/rollouts/{rollout_id}",
    response={200: RolloutDetail, **ERRORS},
    tags=["rollouts"],
)
def get_rollout(request: HttpRequest, name: str, layout_id: int, rollout_id: str):
    """One rollout with its raw memory and rollout summary (texts)."""
    lay = layout(request, name, layout_id, Role.VIEWER)
    r = get_object_or_404(Rollout.objects.select_related("file"), layout=lay, rollout_id=rollout_id)
    raw = RawMemory.objects.filter(layout=lay, rollout_id=rollout_id).first()
    summary = RolloutSummary.objects.filter(layout=lay, rollout_id=rollout_id).first()
    return {
        **_rollout_out(r),
        "has_raw_memory": raw is not None,
        "path": r.file.path,
        "raw_memory": _file_text(raw.file_id if raw else None),
        "rollout_summary": _file_text(summary.file_id if summary else None),
    }


@api.get(
    "/workspaces/{name}/layouts/{layout_id}/rollouts/{rollout_id}/raw",
    response={200: None, **ERRORS},
    tags=["rollouts"],
)
def get_rollout_raw(request: HttpRequest, name: str, layout_id: int, rollout_id: str):
    """The rollout's JSONL exactly as imported."""
    lay = layout(request, name, layout_id, Role.VIEWER)
    r = get_object_or_404(Rollout.objects.select_related("file"), layout=lay, rollout_id=rollout_id)
    if not r.file.blob_id:
        raise Http404("The rollout's content was not stored (see the import report).")
    return HttpResponse(documents.content(r.file.blob_id), content_type="application/jsonl")
