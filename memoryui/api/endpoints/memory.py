"""A layout's memory: MEMORY.md and memory_summary.md (each version, its text, its
entries, its exact bytes), how often agents read each entry, and the curated skills."""

from datetime import datetime

from django.http import Http404, HttpRequest, HttpResponse
from ninja import Query, Schema
from ninja.errors import HttpError
from ninja.pagination import paginate

from generation import review, tree

from ... import curation, documents, skills, usage
from ...models import MemoryRead, MemoryVersion, Role
from ..core import ERRORS, DocumentName, Pages, api, layout


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


def version_out(v: MemoryVersion) -> dict:
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
        "version": version_out(v),
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
    return [version_out(v) for v in versions.order_by("-number")]


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
