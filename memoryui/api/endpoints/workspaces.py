"""The workspaces a token may see, and their layouts with what each holds."""

from datetime import datetime

from django.http import HttpRequest
from ninja import Schema
from ninja.pagination import paginate

from ... import curation
from ...models import MemoryVersion, Proposal, RawMemory, Role, Rollout, RolloutSummary, Workspace
from ...roles import has_role, role_of
from ..core import ERRORS, Pages, api, layout, workspace


class LayoutOut(Schema):
    id: int
    memories_dir: str
    sessions_dir: str
    missing: bool


class WorkspaceOut(Schema):
    name: str
    source_kind: str
    last_imported_at: datetime | None
    role: str
    layouts: list[LayoutOut]


def _layout_out(lay) -> dict:
    return {
        "id": lay.pk,
        "memories_dir": lay.memories_dir,
        "sessions_dir": lay.sessions_dir,
        "missing": lay.missing_since is not None,
    }


def _workspace_out(request: HttpRequest, ws: Workspace) -> dict:

    role = role_of(request.user, ws)
    return {
        "name": ws.name,
        "source_kind": ws.source_kind,
        "last_imported_at": ws.last_imported_at,
        "role": role.value if role else "",
        "layouts": [_layout_out(lay) for lay in ws.layouts.all()],
    }


@api.get("/workspaces", response={200: list[WorkspaceOut], **ERRORS}, tags=["workspaces"])
@paginate(Pages)
def list_workspaces(request: HttpRequest):
    """The workspaces the token names and its owner may see."""
    names = request.api_token.workspaces  # type: ignore[attr-defined]
    found = Workspace.objects.filter(name__in=names).prefetch_related("layouts")
    return [_workspace_out(request, w) for w in found if has_role(request.user, w, Role.VIEWER)]


@api.get("/workspaces/{name}", response={200: WorkspaceOut, **ERRORS}, tags=["workspaces"])
def get_workspace(request: HttpRequest, name: str):
    return _workspace_out(request, workspace(request, name, Role.VIEWER))


class LayoutDetail(LayoutOut):
    rollouts: int
    raw_memories: int
    rollout_summaries: int
    memory_md_version: int | None
    memory_summary_version: int | None
    pending_proposals: int


@api.get(
    "/workspaces/{name}/layouts/{layout_id}",
    response={200: LayoutDetail, **ERRORS},
    tags=["workspaces"],
)
def get_layout(request: HttpRequest, name: str, layout_id: int):
    lay = layout(request, name, layout_id, Role.VIEWER)
    md = curation.latest(lay, MemoryVersion.Document.MEMORY_MD)
    summary = curation.latest(lay, MemoryVersion.Document.MEMORY_SUMMARY)
    return {
        **_layout_out(lay),
        "rollouts": Rollout.objects.filter(layout=lay).count(),
        "raw_memories": RawMemory.objects.filter(layout=lay).count(),
        "rollout_summaries": RolloutSummary.objects.filter(layout=lay).count(),
        "memory_md_version": md.number if md else None,
        "memory_summary_version": summary.number if summary else None,
        "pending_proposals": Proposal.objects.filter(
            layout=lay, status=Proposal.Status.PENDING
        ).count(),
    }
