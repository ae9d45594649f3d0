"""The API's endpoints. Each one checks the same role as the page that does the same
thing, and calls the same functions (curation, pipeline, importer, write-back,
export)."""

import difflib
from datetime import date, datetime
from typing import Any, Literal

from django.db import transaction
from django.db.models import Exists, OuterRef
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from ninja import Field, Query, Schema, Status
from ninja.errors import HttpError
from ninja.pagination import LimitOffsetPagination, paginate
from pydantic import ConfigDict

from generation import review, tree
from generation.export import ExportError

from .. import curation, documents, pipeline, review_cards, search, skills, usage
from ..models import (
    GenerationRun,
    ImportRun,
    MemoryRead,
    MemoryVersion,
    Proposal,
    RawMemory,
    Role,
    Rollout,
    RolloutSummary,
    Workspace,
    WorkspaceFile,
)
from ..roles import has_role, role_of
from ..snapshots import export_to_store
from ..writeback import WritebackError, write_back
from .core import api, conflict, layout, workspace

DocumentName = Literal["memory_md", "memory_summary"]
SNAPSHOT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"


class Pages(LimitOffsetPagination):
    class Input(Schema):
        limit: int = Field(50, ge=1, le=200, description="items per page, 1-200")
        offset: int = Field(0, ge=0, description="items to skip")


class Detail(Schema):
    detail: str


ERRORS = {401: Detail, 403: Detail, 404: Detail, 409: Detail, 422: Detail}


# --- workspaces and layouts -----------------------------------------------------------


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


# --- MEMORY.md, memory_summary.md, skills ---------------------------------------------


class EntryOut(Schema):
    key: str
    kind: str
    title: str
    text: str


class VersionOut(Schema):
    number: int
    sha256: str
    author_kind: str
    author: str | None
    reason: str
    created_at: datetime
    needs_review: bool


class DocumentOut(Schema):
    document: str
    version: VersionOut
    text: str
    entries: list[EntryOut]


def _version(lay, document: str, number: int | None) -> MemoryVersion:
    versions = MemoryVersion.objects.filter(layout=lay, document=document).select_related("author")
    found = (
        versions.filter(number=number).first()
        if number is not None
        else versions.order_by("-number").first()
    )
    if found is None:
        raise Http404(
            f"No version {number} of {document}." if number else f"No {document} in this layout."
        )
    return found


def _version_out(v: MemoryVersion) -> dict:
    return {
        "number": v.number,
        "sha256": v.blob_id,
        "author_kind": v.author_kind,
        "author": v.author.get_username() if v.author else None,
        "reason": v.reason,
        "created_at": v.created_at,
        "needs_review": v.needs_review,
    }


@api.get(
    "/workspaces/{name}/layouts/{layout_id}/documents/{document}",
    response={200: DocumentOut, **ERRORS},
    tags=["memory"],
)
def get_document(
    request: HttpRequest,
    name: str,
    layout_id: int,
    document: DocumentName,
    version: int | None = Query(None, ge=1, description="a version number; default: current"),
):
    """The current (or a given) version of MEMORY.md or memory_summary.md, with its text
    and its top-level entries as the review pages parse them."""
    lay = layout(request, name, layout_id, Role.VIEWER)
    v = _version(lay, document, version)
    text = curation.text_of(v)
    return {
        "document": document,
        "version": _version_out(v),
        "text": text,
        "entries": [e.__dict__ for e in review.entries(text)],
    }


@api.get(
    "/workspaces/{name}/layouts/{layout_id}/documents/{document}/raw",
    response={200: None, **ERRORS},
    tags=["memory"],
)
def get_document_raw(
    request: HttpRequest,
    name: str,
    layout_id: int,
    document: DocumentName,
    version: int | None = Query(None, ge=1),
):
    """The exact bytes of a version (``text/markdown``)."""
    lay = layout(request, name, layout_id, Role.VIEWER)
    v = _version(lay, document, version)
    response = HttpResponse(
        documents.content(v.blob_id), content_type="text/markdown; charset=utf-8"
    )
    response["X-Memoryui-Version"] = str(v.number)
    return response


@api.get(
    "/workspaces/{name}/layouts/{layout_id}/documents/{document}/versions",
    response={200: list[VersionOut], **ERRORS},
    tags=["memory"],
)
@paginate(Pages)
def list_versions(request: HttpRequest, name: str, layout_id: int, document: DocumentName):
    lay = layout(request, name, layout_id, Role.VIEWER)
    versions = MemoryVersion.objects.filter(layout=lay, document=document).select_related("author")
    return [_version_out(v) for v in versions.order_by("-number")]


class EntryUsageOut(Schema):
    key: str
    kind: str
    title: str
    reads: int
    runs: int
    failing_runs: int
    states: dict[str, int]
    first_read: datetime | None
    last_read: datetime | None


@api.get(
    "/workspaces/{name}/layouts/{layout_id}/usage/entries",
    response={200: list[EntryUsageOut], **ERRORS},
    tags=["memory"],
)
@paginate(Pages)
def list_entry_usage(
    request: HttpRequest,
    name: str,
    layout_id: int,
    version: int | None = Query(None, ge=1, description="a MEMORY.md version; default: current"),
):
    """How often agents read each MEMORY.md entry (its earlier forms' reads included),
    most read first: what the layout's Usage page lists."""
    lay = layout(request, name, layout_id, Role.VIEWER)
    v = _version(lay, "memory_md", version)
    return [
        {
            "key": entry.key,
            "kind": entry.kind,
            "title": entry.title,
            "reads": used.reads,
            "runs": used.runs,
            "failing_runs": used.read_by_failing_runs,
            "states": used.states,
            "first_read": used.first_read,
            "last_read": used.last_read,
        }
        for entry, used in usage.entries_by_reads(lay, v)
    ]


class MemoryReadOut(Schema):
    rollout_id: str
    segment: int
    item: int
    kind: str
    path: str
    how: str
    command: str
    read_at: datetime | None
    terminal_state: str
    memory_md_version: int | None
    entries: list[str]

    @staticmethod
    def resolve_rollout_id(read: MemoryRead) -> str:
        return read.rollout.rollout_id

    @staticmethod
    def resolve_memory_md_version(read: MemoryRead) -> int | None:
        return read.version.number if read.version else None

    @staticmethod
    def resolve_entries(read: MemoryRead) -> list[str]:
        return [e.key for e in read.entries.all()]


@api.get(
    "/workspaces/{name}/layouts/{layout_id}/usage/reads",
    response={200: list[MemoryReadOut], **ERRORS},
    tags=["memory"],
)
@paginate(Pages)
def list_memory_reads(
    request: HttpRequest,
    name: str,
    layout_id: int,
    kind: str = Query("", description="one kind: " + ", ".join(MemoryRead.Kind.values)),
):
    """Every read of the layout's memory found in its rollouts, latest first, with the
    MEMORY.md entries (keys of that version) each printed."""
    lay = layout(request, name, layout_id, Role.VIEWER)
    reads = MemoryRead.objects.filter(layout=lay)
    if kind:
        if kind not in MemoryRead.Kind.values:
            raise HttpError(422, f"kind: one of {', '.join(MemoryRead.Kind.values)}")
        reads = reads.filter(kind=kind)
    # A queryset: the page is cut in the database, then its rows' entries prefetched.
    return (
        reads.select_related("rollout", "version")
        .prefetch_related("entries")
        .order_by("-read_at", "-pk")
    )


class SkillFileOut(Schema):
    path: str
    size: int
    sha256: str
    version: int


class SkillOut(Schema):
    name: str
    files: list[SkillFileOut]


def _curated_skill_files(lay, path: str = ""):
    """The current curated version of each skill file (deleted ones left out): what the
    skill pages show and what a write-back or an export writes."""

    versions = skills.current_versions(lay, prefix=path).filter(blob__isnull=False)
    if path:
        versions = versions.filter(path=path)
    return versions.values_list("path", "number", "blob_id", "blob__size")


@api.get(
    "/workspaces/{name}/layouts/{layout_id}/skills",
    response={200: list[SkillOut], **ERRORS},
    tags=["memory"],
)
def list_skills(request: HttpRequest, name: str, layout_id: int):
    """Each skill and its files, as curated (the current version of each file)."""
    lay = layout(request, name, layout_id, Role.VIEWER)
    found: dict[str, list[dict]] = {}
    for path, number, sha256, size in _curated_skill_files(lay):
        skill = tree.skill_name(path)
        if skill:
            rel = path.removeprefix(f"skills/{skill}/")
            found.setdefault(skill, []).append(
                {"path": rel, "size": size, "sha256": sha256, "version": number}
            )
    return [{"name": k, "files": v} for k, v in sorted(found.items())]


@api.get(
    "/workspaces/{name}/layouts/{layout_id}/skills/{skill}/files/{path:file_path}",
    response={200: None, **ERRORS},
    tags=["memory"],
)
def get_skill_file(request: HttpRequest, name: str, layout_id: int, skill: str, file_path: str):
    """A skill file's exact bytes, as curated (its current version)."""
    lay = layout(request, name, layout_id, Role.VIEWER)
    if "/" in skill or ".." in file_path.split("/"):
        raise Http404("No such skill file.")
    found = _curated_skill_files(lay, f"skills/{skill}/{file_path}").first()
    if found is None:
        raise Http404("No such skill file.")
    return HttpResponse(documents.content(found[2]), content_type="application/octet-stream")


# --- rollouts -------------------------------------------------------------------------


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
    return _Mapped(rollouts, _rollout_out)


class _Mapped:
    """A queryset whose slices are mapped (so the paginator counts and slices in SQL)."""

    def __init__(self, queryset, fn) -> None:
        self.queryset, self.fn = queryset, fn

    def all(self) -> "_Mapped":
        return self

    def count(self) -> int:
        return self.queryset.count()

    def __len__(self) -> int:
        return self.count()

    def __getitem__(self, index):
        return [self.fn(x) for x in self.queryset[index]]


def conflict_422(message: str):

    return HttpError(422, message)


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


# --- proposals ------------------------------------------------------------------------


class ProposalOut(Schema):
    id: int
    status: str
    origin: str = Field(
        description='"pipeline": a generation run made it; "upload": an agent\'s change a '
        'sandbox uploaded (snapshot_id); "import": an agent\'s change an import found'
    )
    run_id: int | None
    snapshot_id: str | None
    import_run_id: int | None
    inputs: list[str] = Field(description="an agent's proposal: the rollouts of its uploads")
    created_at: datetime
    decided_by: str | None
    decided_at: datetime | None
    reserved_by: str | None


class ChangeOut(Schema):
    document: str
    key: str
    status: str
    pairing: str = Field(
        "", description='"renamed", "merged", "split" or "rewritten" for a paired change'
    )
    previous: list[str] = Field(
        default_factory=list, description="keys of the removed entries a paired change replaces"
    )
    kind: str
    title: str
    current: str
    proposed: str
    diff: str
    decision: str | None
    edited_text: str
    state: str = Field("", description='"accept", "reject", "edited" or "" (undecided)')
    approval: str = Field(
        "",
        description='"approved": the proposed text is the one an earlier proposal approved; '
        '"outdated": an earlier proposal approved it and this one changes it again',
    )
    viewed: bool = Field(False, description="viewed (or decided) by the caller")
    flags: list[str] = Field(
        default_factory=list,
        description="what needs a look: pinned, rejected_before, outdated, ...",
    )


class ProgressOut(Schema):
    total: int
    decided: int
    accepted: int
    edited: int
    rejected: int
    undecided: int
    viewed: int
    not_viewed: int
    percent: int


class ProposalDetail(ProposalOut):
    changes: list[ChangeOut]
    conflicts: list[str]
    progress: ProgressOut


def _proposal_out(p: Proposal) -> dict:
    return {
        "id": p.pk,
        "status": p.status,
        "origin": p.origin,
        "run_id": p.run_id,
        "snapshot_id": p.snapshot_id or None,
        "import_run_id": p.import_run_id,
        "inputs": list(p.inputs),
        "created_at": p.created_at,
        "decided_by": p.decided_by.get_username() if p.decided_by else None,
        "decided_at": p.decided_at,
        "reserved_by": p.reserved_by.get_username() if p.reserved_by else None,
    }


def _proposal(request: HttpRequest, name: str, layout_id: int, pk: int, role: Role) -> Proposal:
    lay = layout(request, name, layout_id, role)
    return get_object_or_404(
        Proposal.objects.select_related(
            "layout__workspace",
            "base_memory_md",
            "base_memory_summary",
            "decided_by",
            "reserved_by",
        ).defer("raw_memories_md", "selection"),
        pk=pk,
        layout=lay,
    )


@api.get(
    "/workspaces/{name}/layouts/{layout_id}/proposals",
    response={200: list[ProposalOut], **ERRORS},
    tags=["proposals"],
)
@paginate(Pages)
def list_proposals(
    request: HttpRequest,
    name: str,
    layout_id: int,
    status: Literal["pending", "approved", "rejected"] | None = None,
    origin: Literal["pipeline", "upload", "import"] | None = None,
):
    lay = layout(request, name, layout_id, Role.VIEWER)
    found = Proposal.objects.filter(layout=lay).select_related("decided_by", "reserved_by")
    if status:
        found = found.filter(status=status)
    if origin:
        found = found.filter(origin=origin)
    return _Mapped(
        found.defer("raw_memories_md", "selection", "memory_md", "memory_summary"), _proposal_out
    )


def _unified(current: str, proposed: str) -> str:

    return "".join(
        difflib.unified_diff(
            current.splitlines(keepends=True),
            proposed.splitlines(keepends=True),
            "current",
            "proposed",
        )
    )


@api.get(
    "/workspaces/{name}/layouts/{layout_id}/proposals/{proposal_id}",
    response={200: ProposalDetail, **ERRORS},
    tags=["proposals"],
)
def get_proposal(
    request: HttpRequest,
    name: str,
    layout_id: int,
    proposal_id: int,
    all: bool = Query(False, description="also entries the proposal leaves unchanged"),
):
    """The proposal's entries against the current files, each with a unified diff and
    its decision so far; ``conflicts``: entries people and the model both changed."""
    p = _proposal(request, name, layout_id, proposal_id, Role.VIEWER)
    changes: list[dict[str, Any]] = []
    conflicts: list[str] = []
    marks = review_cards.Marks.load(p, request.user)
    for doc in curation.document_reviews(p):
        conflicts.extend(c.key for c in doc.conflicts)
        for c in doc.changes:
            if c.status == "unchanged" and not all:
                continue
            card = review_cards.card(doc.document, c, marks)
            d = card.decision
            changes.append(
                {
                    "document": doc.document,
                    "key": c.key,
                    "status": c.status,
                    "pairing": c.pairing,
                    "previous": list(c.previous),
                    "kind": c.kind,
                    "title": c.title,
                    "current": c.current,
                    "proposed": c.proposed,
                    "diff": _unified(c.current, c.proposed),
                    "decision": d.decision if d else None,
                    "edited_text": d.edited_text if d else "",
                    "state": card.state,
                    "approval": card.approval,
                    "viewed": card.viewed,
                    "flags": sorted(k for k, v in card.flags.items() if v),
                    "reads": card.read.reads if card.read is not None else None,
                }
            )
    return {
        **_proposal_out(p),
        "changes": changes,
        "conflicts": conflicts,
        "progress": review_cards.progress(p, request.user, marks),
    }


class DecisionIn(Schema):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "document": "memory_md",
                    "keys": ["task_group:deploying the menus service"],
                    "decision": "accept",
                },
                {
                    "document": "memory_md",
                    "keys": ["task_group:deploying the menus service"],
                    "decision": "accept",
                    "edited_text": "# Task Group: deploying the menus service\n\nscope: ...\n",
                },
            ]
        }
    )

    document: DocumentName
    keys: list[str] = Field(..., min_length=1, max_length=1000, description="entry keys")
    decision: Literal["accept", "reject"]
    edited_text: str = Field("", max_length=100_000, description="only with a single key")


@api.post(
    "/workspaces/{name}/layouts/{layout_id}/proposals/{proposal_id}/decisions",
    response={200: ProposalDetail, **ERRORS},
    tags=["proposals"],
)
def decide(request: HttpRequest, name: str, layout_id: int, proposal_id: int, body: DecisionIn):
    """Accept or reject entries (reviewers), as the review page does."""
    p = _proposal(request, name, layout_id, proposal_id, Role.REVIEWER)
    if body.edited_text and len(body.keys) != 1:
        raise conflict_422("edited_text goes with exactly one key")
    doc = next(d for d in curation.document_reviews(p) if d.document == body.document)
    known = {c.key for c in doc.changes} | {k for c in doc.changes for k in c.previous}
    unknown = [k for k in body.keys if k not in known]
    if unknown:
        raise conflict_422(f"no such entry in the proposal's {body.document}: {', '.join(unknown)}")
    try:
        with transaction.atomic():  # all of them or, when refused, none
            for key in body.keys:
                curation.decide(
                    p,
                    body.document,
                    key,
                    body.decision,
                    user=request.user,
                    edited_text=body.edited_text,
                )
    except ValueError as exc:
        raise conflict(str(exc)) from exc
    return get_proposal(request, name, layout_id, proposal_id, all=False)


class ApproveOut(Schema):
    status: str
    versions: list[VersionOut]


@api.post(
    "/workspaces/{name}/layouts/{layout_id}/proposals/{proposal_id}/approve",
    response={200: ApproveOut, **ERRORS},
    tags=["proposals"],
)
def approve(
    request: HttpRequest,
    name: str,
    layout_id: int,
    proposal_id: int,
    duplicates_ok: bool = Query(
        False, description="approve even though the result holds likely duplicates"
    ),
):
    """Approve as the review page does: 409 when already decided, held by another
    reviewer, while conflicts are undecided, or when the result holds likely duplicates
    (entries citing mostly the same rollouts in mostly the same words) that no reviewer
    acknowledged pair by pair on the review page and ``duplicates_ok`` is not set."""
    p = _proposal(request, name, layout_id, proposal_id, Role.REVIEWER)
    duplicates = curation.duplicates(curation.document_reviews(p), acks=p.duplicate_acks)
    waiting = curation.open_duplicates(duplicates)
    if waiting and not duplicates_ok:
        raise conflict(
            "likely duplicates (approve with duplicates_ok=true to keep both): "
            + "; ".join(" / ".join(d.titles) for d in waiting)
        )
    try:
        versions = curation.approve(p, user=request.user, duplicates=duplicates)
    except curation.UnresolvedConflicts as exc:
        raise conflict(f"{exc}: " + ", ".join(c.title or c.key for c in exc.conflicts)) from exc
    except curation.NeedsAnotherApproval:  # recorded; another reviewer's approval applies it
        return {"status": Proposal.Status.PENDING, "versions": []}
    except ValueError as exc:
        raise conflict(str(exc)) from exc
    return {"status": Proposal.Status.APPROVED, "versions": [_version_out(v) for v in versions]}


@api.post(
    "/workspaces/{name}/layouts/{layout_id}/proposals/{proposal_id}/reject",
    response={200: ProposalOut, **ERRORS},
    tags=["proposals"],
)
def reject(request: HttpRequest, name: str, layout_id: int, proposal_id: int):
    p = _proposal(request, name, layout_id, proposal_id, Role.REVIEWER)
    try:
        curation.reject_proposal(p, user=request.user)
    except ValueError as exc:
        raise conflict(str(exc)) from exc
    p.refresh_from_db()
    return _proposal_out(p)


# --- actions: import, generation, write-back, export ------------------------------------


class QueuedOut(Schema):
    queued: bool
    detail: str


@api.post("/workspaces/{name}/imports", response={202: QueuedOut, **ERRORS}, tags=["actions"])
def start_import(request: HttpRequest, name: str):
    """Re-import the workspace from its source (admins); a Celery task."""
    from memoryui.tasks import reimport_workspace  # noqa: PLC0415 (deferred: Celery loads when a task is sent)

    ws = workspace(request, name, Role.ADMIN)
    reimport_workspace.delay_on_commit(ws.pk, request.user.pk)
    return Status(202, {"queued": True, "detail": f"Re-import of {ws.name} queued."})


class ImportOut(Schema):
    id: int
    status: str
    started_at: datetime
    finished_at: datetime | None
    added: int
    changed: int
    unchanged: int
    missing: int
    errors: list[dict]


@api.get("/workspaces/{name}/imports", response={200: list[ImportOut], **ERRORS}, tags=["actions"])
@paginate(Pages)
def list_imports(request: HttpRequest, name: str):
    ws = workspace(request, name, Role.VIEWER)
    return _Mapped(
        ImportRun.objects.filter(workspace=ws),
        lambda r: {
            "id": r.pk,
            "status": r.status,
            "started_at": r.started_at,
            "finished_at": r.finished_at,
            "added": r.added,
            "changed": r.changed,
            "unchanged": r.unchanged,
            "missing": r.missing,
            "errors": r.errors,
        },
    )


class RunOut(Schema):
    id: int
    status: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: str
    total: int
    done: int
    failed: int
    input_tokens: int
    output_tokens: int
    proposal_id: int | None
    kept_extracted: int = 0  # rollouts already extracted on disk, left out of phase one


def _run_out(run: GenerationRun) -> dict:
    progress = pipeline.progress(run)
    proposal = Proposal.objects.filter(run=run).values_list("pk", flat=True).first()
    return {
        "id": run.pk,
        "status": run.status,
        "created_at": run.created_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "error": run.error,
        "total": progress.total,
        "done": progress.done,
        "failed": progress.failed,
        "input_tokens": progress.input_tokens,
        "output_tokens": progress.output_tokens,
        "proposal_id": proposal,
        "kept_extracted": int(run.settings_snapshot.get("kept_extracted", 0)),
    }


@api.post(
    "/workspaces/{name}/layouts/{layout_id}/runs",
    response={201: RunOut, 503: Detail, **ERRORS},
    tags=["actions"],
)
def start_run(request: HttpRequest, name: str, layout_id: int, reextract: bool = False):
    """Start a generation run (admins): 409 while one is active, 503 without a model.
    Rollouts already extracted on disk are kept unless ``reextract=true``."""

    from memoryui.tasks import start_generation  # noqa: PLC0415 (deferred: Celery loads when a task is sent)

    lay = layout(request, name, layout_id, Role.ADMIN)
    try:
        run = pipeline.start_run(lay, request.user, reextract=reextract)
    except pipeline.RunConflict as exc:
        raise conflict(str(exc)) from exc
    except pipeline.GenerationUnavailable as exc:
        raise HttpError(503, str(exc)) from exc
    start_generation.delay_on_commit(run.pk)
    return Status(201, _run_out(run))


@api.get(
    "/workspaces/{name}/layouts/{layout_id}/runs/{run_id}",
    response={200: RunOut, **ERRORS},
    tags=["actions"],
)
def get_run(request: HttpRequest, name: str, layout_id: int, run_id: int):
    lay = layout(request, name, layout_id, Role.VIEWER)
    return _run_out(get_object_or_404(GenerationRun, pk=run_id, layout=lay))


class WritebackIn(Schema):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"dry_run": True},
                {"overwrite": ["memories/engineering/MEMORY.md"], "allow_findings": []},
            ]
        }
    )

    dry_run: bool = False
    overwrite: list[str] = Field(default_factory=list, description="conflicting paths to replace")
    allow_findings: list[str] = Field(default_factory=list, description="lint finding ids")


class WritebackOut(Schema):
    dry_run: bool
    written: list[str]
    would_write: list[str]


@api.post(
    "/workspaces/{name}/layouts/{layout_id}/writeback",
    response={200: WritebackOut, **ERRORS},
    tags=["actions"],
)
def writeback(request: HttpRequest, name: str, layout_id: int, body: WritebackIn):
    """Write the curated files into the layout's directory (admins), as the write-back
    page does; 409 with the reason while conflicts or findings block it."""

    lay = layout(request, name, layout_id, Role.ADMIN)
    try:
        result = write_back(
            lay,
            user=request.user,
            overwrite=body.overwrite,
            allow_findings=body.allow_findings,
            dry_run=body.dry_run,
        )
    except WritebackError as exc:
        raise conflict(str(exc)) from exc
    return {
        "dry_run": body.dry_run,
        "written": [getattr(w, "path", str(w)) for w in result.written],
        "would_write": [f.path for f in result.would_write],
    }


class ExportIn(Schema):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"snapshot_id": "nightly-2026-12-01"},
                {
                    "snapshot_id": "engineering-only",
                    "layouts": ["memories/engineering"],
                    "session_state": True,
                },
            ]
        }
    )

    snapshot_id: str = Field(..., pattern=SNAPSHOT_ID_PATTERN)
    layouts: list[str] = Field(default_factory=list, description="memories dirs; none: all")
    allow_findings: list[str] = Field(default_factory=list)
    session_state: bool = False


class ExportOut(Schema):
    path: str
    sha256: str
    size: int
    members: int
    session_state: str


@api.post("/workspaces/{name}/exports", response={201: ExportOut, **ERRORS}, tags=["actions"])
def export(request: HttpRequest, name: str, body: ExportIn):
    """Export an SDK snapshot into the server's snapshot directory (admins)."""

    ws = workspace(request, name, Role.ADMIN)
    try:
        result = export_to_store(
            ws,
            snapshot_id=body.snapshot_id,
            memories_dirs=body.layouts,
            allow_findings=body.allow_findings,
            session_state=body.session_state,
            user=request.user,
        )
    except ExportError as exc:
        raise conflict(str(exc)) from exc
    info = result.snapshot
    return Status(
        201,
        {
            "path": result.location,
            "sha256": info.sha256,
            "size": info.size,
            "members": info.members,
            "session_state": str(result.session_state or ""),
        },
    )
