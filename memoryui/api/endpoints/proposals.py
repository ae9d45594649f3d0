"""Proposals: the list, one proposal's entries (each a review card, as
``review_cards`` presents it), the files an agent's proposal forgot, and progress, and
the decisions on them: per entry, per forgotten file, approve, request changes, reject."""

from datetime import datetime
from typing import Any, Literal

from django.db import transaction
from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Field, Query, Schema
from ninja.pagination import paginate
from pydantic import ConfigDict

from ... import agent_proposals, consolidation, curation, review_cards, skills
from ...models import Comment, Proposal, Role
from ..core import ERRORS, DocumentName, Mapped, Pages, api, conflict, conflict_422, layout
from .memory import VersionOut, version_out


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
    review_message: str = Field(
        "", description='with status "changes_requested": what the reviewer asked to change'
    )


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
    files: int = Field(
        description="files decided one by one: skill files it changes, files an agent forgot"
    )
    files_decided: int


class CommentOut(Schema):
    document: str = Field(description='"" for a comment on the whole proposal')
    key: str = Field(description='the entry commented on; "" for the whole proposal')
    line: int | None = Field(
        description="a line comment: the line (from 1) of the entry's text it was made on"
    )
    line_text: str = Field(description="what that line read then")
    at_line: int | None = Field(
        description="where that line is in the entry's text now (an edit may move it)"
    )
    outdated: bool = Field(description="an edit took the line away")
    author: str | None
    text: str
    created_at: datetime


class ForgottenOut(Schema):
    path: str = Field(description="a raw memory or rollout summary, relative to the workspace")
    decision: str = Field(
        description='"accept": forgotten on approval; "reject": kept; "" undecided (follows '
        "the approval's choice for undecided changes)"
    )


class SkillFileOut(Schema):
    path: str = Field(description="relative to the layout's memories dir: skills/<name>/...")
    status: str = Field(description='"added", "changed" or "deleted"')
    decision: str = Field(description='"accept", "reject" or "" (undecided)')
    flags: list[str] = Field(
        description="an agent's change: what the lint found; one with a flag is quarantined "
        "(kept out of an approval unless accepted)"
    )


class ClashOut(Schema):
    path: str
    sandboxes: list[str] = Field(description="the snapshot ids that uploaded it with other bytes")


class ProposalDetail(ProposalOut):
    changes: list[ChangeOut]
    skill_files: list[SkillFileOut] = Field(description="skill files it adds, changes or deletes")
    clashes: list[ClashOut] = Field(
        description="an agent's proposal: rollout files another sandbox uploaded with other "
        "bytes (each sandbox's restore keeps its own)"
    )
    forgotten: list[ForgottenOut] = Field(
        description="an agent's proposal: the files its sandbox was served and its upload "
        "lacks, each decided on its own"
    )
    conflicts: list[str]
    progress: ProgressOut
    comments: list[CommentOut]


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
        "review_message": p.review_message,
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
    status: Literal["pending", "approved", "rejected", "changes_requested"] | None = None,
    origin: Literal["pipeline", "upload", "import"] | None = None,
):
    lay = layout(request, name, layout_id, Role.VIEWER)
    found = Proposal.objects.filter(layout=lay).select_related("decided_by", "reserved_by")
    if status:
        found = found.filter(status=status)
    if origin:
        found = found.filter(origin=origin)
    return Mapped(
        found.defer("raw_memories_md", "selection", "memory_md", "memory_summary"), _proposal_out
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
    applied: dict[tuple[str, str], str] = {}
    for doc in curation.document_reviews(p):
        conflicts.extend(c.key for c in doc.conflicts)
        for c in doc.changes:
            decision = doc.decisions.get(c.key)
            applied[(doc.document, c.key)] = (decision and decision.edited_text) or c.proposed
        listed = [c for c in doc.changes if all or c.status != "unchanged"]
        marks.need_approvals(doc.document, listed)
        marks.need_usage(doc.document, listed)
        changes.extend(
            review_cards.card_json(review_cards.card(doc.document, c, marks)) for c in listed
        )
    return {
        **_proposal_out(p),
        "changes": changes,
        "conflicts": conflicts,
        "skill_files": [
            {k: f[k] for k in ("path", "status", "decision", "flags")}
            for f in consolidation.skill_diffs(p)
        ],
        "clashes": [
            {"path": c.get("path", ""), "sandboxes": list(c.get("sandboxes", []))}
            for c in p.clashes
        ],
        "forgotten": [
            {"path": f["path"], "decision": f["decision"]}
            for f in agent_proposals.forgotten_files(p)
        ],
        "progress": review_cards.progress(p, request.user, marks),
        "comments": [_comment_out(c, applied) for c in p.comments.select_related("author")],
    }


def _comment_out(comment: Comment, applied: dict[tuple[str, str], str]) -> dict[str, Any]:
    review_cards.anchor_comments([comment], applied.get((comment.document, comment.key), ""))
    return {
        "document": comment.document,
        "key": comment.key,
        "line": comment.line,
        "line_text": comment.line_text,
        "at_line": comment.at_line,  # type: ignore[attr-defined]
        "outdated": comment.outdated,  # type: ignore[attr-defined]
        "author": comment.author.get_username() if comment.author else None,
        "text": comment.text,
        "created_at": comment.created_at,
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


class ForgottenDecisionIn(Schema):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"paths": ["memories/raw_memories/prefs-6e64dc.md"], "decision": "reject"}]
        }
    )

    paths: list[str] = Field(..., min_length=1, max_length=1000)
    decision: Literal["accept", "reject"] = Field(
        description='"accept": forget the file when the proposal is approved; "reject": keep it'
    )


@api.post(
    "/workspaces/{name}/layouts/{layout_id}/proposals/{proposal_id}/forgotten",
    response={200: ProposalDetail, **ERRORS},
    tags=["proposals"],
)
def decide_forgotten(
    request: HttpRequest, name: str, layout_id: int, proposal_id: int, body: ForgottenDecisionIn
):
    """Accept or reject the removal of files an agent's proposal forgot (reviewers), as
    the review page does."""
    p = _proposal(request, name, layout_id, proposal_id, Role.REVIEWER)
    unknown = [path for path in body.paths if path not in p.forgotten]
    if unknown:
        raise conflict_422(f"not a file this proposal forgets: {', '.join(unknown)}")
    try:
        agent_proposals.decide_forgetting(p, body.paths, body.decision, user=request.user)
    except ValueError as exc:
        raise conflict(str(exc)) from exc
    return get_proposal(request, name, layout_id, proposal_id, all=False)


class SkillDecisionIn(Schema):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"paths": ["skills/triage-flaky-tests/SKILL.md"], "decision": "reject"}]
        }
    )

    paths: list[str] = Field(..., min_length=1, max_length=1000)
    decision: Literal["accept", "reject"]


@api.post(
    "/workspaces/{name}/layouts/{layout_id}/proposals/{proposal_id}/skill_files",
    response={200: ProposalDetail, **ERRORS},
    tags=["proposals"],
)
def decide_skill_files(
    request: HttpRequest, name: str, layout_id: int, proposal_id: int, body: SkillDecisionIn
):
    """Accept or reject skill file changes (reviewers), as the review page does."""
    p = _proposal(request, name, layout_id, proposal_id, Role.REVIEWER)
    unknown = [path for path in body.paths if path not in (p.skill_changes or {})]
    if unknown:
        raise conflict_422(f"not a skill file this proposal changes: {', '.join(unknown)}")
    try:
        with transaction.atomic():  # all of them or, when refused, none
            for path in body.paths:
                skills.decide(p, path, body.decision, user=request.user)
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
    return {"status": Proposal.Status.APPROVED, "versions": [version_out(v) for v in versions]}


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


class RequestChangesIn(Schema):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"message": "Keep the deploy steps in one task group, as before."}]
        }
    )

    message: str = Field(
        ..., min_length=1, max_length=10_000, description="what the next proposal should change"
    )


@api.post(
    "/workspaces/{name}/layouts/{layout_id}/proposals/{proposal_id}/request-changes",
    response={200: ProposalOut, **ERRORS},
    tags=["proposals"],
)
def request_changes(
    request: HttpRequest, name: str, layout_id: int, proposal_id: int, body: RequestChangesIn
):
    """Close the proposal without applying it (reviewers), as the submit dialog does:
    the entries rejected so far are remembered, the next proposal of the layout shows
    ``message`` and phase two is told it. 409 when already decided or held by another
    reviewer."""
    if not body.message.strip():
        raise conflict_422("say what should change")
    p = _proposal(request, name, layout_id, proposal_id, Role.REVIEWER)
    try:
        curation.request_changes(p, body.message, user=request.user)
    except ValueError as exc:
        raise conflict(str(exc)) from exc
    p.refresh_from_db()
    return _proposal_out(p)
