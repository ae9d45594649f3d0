"""A whole proposal decided: approve (its decided entries merged with what people
changed meanwhile, its skill file changes, its forgetting) or reject. Both are made under
the pending proposal's lock (``proposal_lock``) and the layout's, and audited. A request for
changes closes it like a rejection, with the reviewer's message for the next one."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from generation import review

from .. import live_review, proposal_lock, review_cards, skills, versioning
from ..models import (
    ApprovedEntry,
    AuditEvent,
    EntryDecision,
    GenerationSettings,
    Layout,
    MemoryVersion,
    Proposal,
    RejectedEntry,
    WorkspaceFile,
)
from .edits import save_document
from .reviews import (
    UNDECIDED_ACCEPT,
    UNDECIDED_REJECT,
    DocumentReview,
    Duplicate,
    assembled_text,
    decidable,
    document_reviews,
    quarantined,
)
from .versions import latest, latest_approved, text_of

Document = MemoryVersion.Document


class UnresolvedConflicts(Exception):
    def __init__(self, conflicts: list[review.Conflict]) -> None:
        super().__init__(
            f"{len(conflicts)} conflicting entr{'y' if len(conflicts) == 1 else 'ies'} to decide"
        )
        self.conflicts = conflicts


class NeedsAnotherApproval(Exception):  # noqa: N818 (an outcome, not a failure)
    """This approval is recorded; the layout requires more reviewers' approvals before
    the proposal applies."""

    def __init__(self, approvals: int, required: int) -> None:
        super().__init__(f"approval {approvals} of {required} recorded")
        self.approvals, self.required = approvals, required


def required_approvals(layout: Layout) -> int:
    found = GenerationSettings.objects.filter(layout=layout).values_list(
        "required_approvals", flat=True
    )
    return next(iter(found), 1)


def _count_approval(proposal: Proposal, user: Any) -> None:
    """When the layout requires more approvals than this one makes (each reviewer
    counts once): record it (audited, under the proposal's lock) and raise
    ``NeedsAnotherApproval``; otherwise return, and the approval applies."""
    required = required_approvals(proposal.layout)
    if required <= 1:
        return
    with proposal_lock.deciding(proposal, user):
        approvals = list(Proposal.objects.values_list("approvals", flat=True).get(pk=proposal.pk))
        who = getattr(user, "pk", None)
        if not any(a.get("user") == who for a in approvals):
            approvals.append({"user": who, "name": str(user), "at": timezone.now().isoformat()})
        if len(approvals) >= required:
            return
        Proposal.objects.filter(pk=proposal.pk).update(approvals=approvals)
        proposal.approvals = approvals
        AuditEvent.record(
            proposal.layout.workspace,
            "proposal.approval_recorded",
            user=user,
            layout=proposal.layout,
            target=f"proposal #{proposal.pk}",
            approvals=len(approvals),
            required=required,
        )
    raise NeedsAnotherApproval(len(approvals), required)


def _decided(proposal: Proposal, status: str, user: Any) -> None:
    """The pending -> decided transition, under the lock taken by ``proposal_lock.deciding``;
    a decision ends the reservation."""
    now = timezone.now()
    person = user if getattr(user, "pk", None) else None
    Proposal.objects.filter(pk=proposal.pk, status=Proposal.Status.PENDING).update(
        status=status, decided_by=person, decided_at=now, reserved_by=None, reserved_until=None
    )
    live_review.changed(proposal.pk)
    proposal.status, proposal.decided_by, proposal.decided_at = status, person, now
    proposal.reserved_by, proposal.reserved_until = None, None


def approve(
    proposal: Proposal,
    *,
    user: Any,
    undecided: str = UNDECIDED_ACCEPT,
    duplicates: list[Duplicate] | None = None,
) -> list[MemoryVersion]:
    """Turn the reviewed proposal into the current versions. Entries people changed
    while the consolidation ran are merged; a conflict must have been decided (accept:
    the model's text, reject: the people's). ``undecided``: what the entries nobody
    decided on become, the model's text (``"accept"``, as proposed) or the current
    text (``"reject"``: each gets a recorded rejection, under the same lock). Raises
    ``DecisionRefused`` when the proposal was decided meanwhile or another reviewer
    holds it."""
    created = []
    _count_approval(proposal, user)
    with proposal_lock.deciding(proposal, user):
        Layout.objects.select_for_update().filter(pk=proposal.layout_id).first()
        reviews = document_reviews(proposal)

        counts = review_cards.progress(proposal, user)
        if undecided == UNDECIDED_REJECT:
            _reject_undecided(proposal, reviews, user)
            reviews = document_reviews(proposal)  # with those rejections
        held = quarantined(proposal, reviews)
        for doc in reviews:
            kept_out = frozenset(held.get(doc.document, {}))
            final = _final_text(doc, kept_out)
            _record_rejections(proposal, doc, user)
            _record_approvals(proposal, doc, user, kept_out)
            renamed = _renamed(doc)
            if proposal.run_id is None:
                version = _settle_agent_versions(
                    proposal,
                    doc.document,
                    final,
                    user=user,
                    reason=f"approved agent proposal #{proposal.pk}",
                    moved=_kept(renamed, final),
                )
                created.extend([version] if version else [])
                continue
            current = latest(proposal.layout, doc.document)
            if versioning.unchanged(current, final.encode("utf-8")):
                continue
            created.append(
                save_document(
                    proposal.layout,
                    doc.document,
                    final,
                    user=user,
                    author_kind=MemoryVersion.Author.PIPELINE,
                    reason=f"approved proposal #{proposal.pk}",
                    based_on=current.number if current else None,
                    moved=_kept(renamed, final),
                )
            )
        # Skill files: the changes people did not reject become current versions.

        if proposal.run_id is None:  # an agent's: its own versions are settled too
            skill_versions = skills.settle_agent_changes(proposal, user=user, undecided=undecided)
        else:
            skill_versions = skills.approve_changes(proposal, user=user, undecided=undecided)
        forgotten, kept = _forget(proposal, undecided)
        _decided(proposal, Proposal.Status.APPROVED, user)
        detail: dict[str, Any] = {}
        if forgotten:
            detail["forgotten"] = forgotten
        if kept:
            detail["kept"] = kept
        if skill_versions:
            detail["skill_files"] = [v.path for v in skill_versions]
        if duplicates:
            detail["duplicates_approved"] = [" / ".join(d.titles) for d in duplicates]
        if any(held.values()):
            detail["quarantined"] = sorted(k for keys in held.values() for k in keys)
        AuditEvent.record(
            proposal.layout.workspace,
            "proposal.approve",
            user=user,
            layout=proposal.layout,
            target=f"proposal #{proposal.pk}",
            versions=[v.number for v in created],
            accepted=counts["accepted"],
            rejected=counts["rejected"]
            + (counts["undecided"] if undecided == UNDECIDED_REJECT else 0),
            undecided=undecided,
            counts=counts,
            **detail,
        )
    return created


def _final_text(doc: DocumentReview, kept_out: frozenset[str]) -> str:
    """The document as approved: the decided entries on the proposal, merged with what
    people changed meanwhile (a conflict must have been decided: accept takes the
    model's text)."""
    assembled = assembled_text(doc.base_text, doc.proposed_text, doc.decisions, kept_out)
    if doc.human_text is None:
        return assembled
    merged = review.merge(doc.base_text, doc.human_text, assembled)
    open_conflicts = [c for c in merged.conflicts if c.key not in doc.decisions]
    if open_conflicts:
        raise UnresolvedConflicts(open_conflicts)
    parts = {e.key: e.text for e in review.entries(merged.text)}
    for conflict in merged.conflicts:
        if doc.decisions[conflict.key].decision == EntryDecision.Decision.ACCEPT:
            parts[conflict.key] = conflict.model
    return review.renumber(review.join(t for t in parts.values() if t))


def _record_rejections(proposal: Proposal, doc: DocumentReview, user: Any) -> None:
    """Each rejected change's entries, so that later consolidations do not propose
    them again."""
    by_key = {c.key: c for c in doc.changes}
    for key, decision in doc.decisions.items():
        if decision.decision != EntryDecision.Decision.REJECT:
            continue
        change = by_key.get(key)
        if change is None or not change.proposed or change.status == "unchanged":
            continue
        for part_key, title, text in _proposed_parts(change):
            RejectedEntry.objects.create(
                layout=proposal.layout,
                document=doc.document,
                key=part_key,
                title=title[:500],
                text=text,
                proposal=proposal,
                rejected_by=user if getattr(user, "pk", None) else None,
            )


def _renamed(doc: DocumentReview) -> dict[str, str]:
    """Old key -> new key of the entries an accepted change renamed, merged or split
    (and the sections of a renamed task group): pins follow them."""
    return {
        old_key: change.key
        for change in doc.changes
        if change.previous
        and (
            change.key not in doc.decisions
            or doc.decisions[change.key].decision == EntryDecision.Decision.ACCEPT
        )
        for old_key in change.previous
    }


def _kept(renamed: dict[str, str], final: str) -> dict[str, str | None]:
    """The renames whose new entry is in the approved text."""
    keys = {e.key for e in review.entries(final)} if renamed else set()
    return {old: new for old, new in renamed.items() if new in keys}


def _proposed_parts(change: review.Change) -> list[tuple[str, str, str]]:
    """(key, title, text) of each proposed entry of a change: one, or every entry of
    a split."""
    if not change.pieces:
        return [(change.key, change.title, change.proposed)]
    out = []
    for _, side, key, text in change.pieces:
        if side == "new":
            first = review.entries(text)
            out.append((key, first[0].title if first else change.title, text))
    return out


def _reject_undecided(proposal: Proposal, reviews: list[DocumentReview], user: Any) -> None:
    person = user if getattr(user, "pk", None) else None
    now = timezone.now()
    for doc in reviews:
        EntryDecision.objects.bulk_create(
            EntryDecision(
                proposal=proposal,
                document=doc.document,
                key=c.key,
                decision=EntryDecision.Decision.REJECT,
                user=person,
                decided_at=now,
            )
            for c in decidable(doc)
            if c.key not in doc.decisions
        )


def _record_approvals(
    proposal: Proposal, doc: DocumentReview, user: Any, held: frozenset[str] = frozenset()
) -> None:
    """Remember the text of every entry this proposal changed and this approval
    accepts (explicitly or by approving the proposal as it stands; not the quarantined
    ones, ``held``). Entries it left as they were were not approved here, so a later
    change to them is not "outdated"."""
    for change in doc.changes:
        decision = doc.decisions.get(change.key)
        if (
            change.status == "unchanged"
            or not change.proposed
            or (decision and decision.decision == EntryDecision.Decision.REJECT)
        ):
            continue
        if decision is None and change.key in held:
            continue
        if decision and decision.edited_text:
            parts = [(change.key, decision.edited_text)]
        else:
            parts = [(key, text) for key, _, text in _proposed_parts(change)]
        for key, text in parts:
            ApprovedEntry.objects.update_or_create(
                layout=proposal.layout,
                document=doc.document,
                key=key,
                defaults={
                    "text": text,
                    "proposal": proposal,
                    "approved_by": user if getattr(user, "pk", None) else None,
                    "approved_at": timezone.now(),
                },
            )


def reject_proposal(proposal: Proposal, *, user: Any) -> None:
    """Reject the whole proposal; raises ``DecisionRefused`` when it was decided
    meanwhile or another reviewer holds it."""
    with proposal_lock.deciding(proposal, user):
        if proposal.run_id is None:  # an agent's: the approved text stays served
            Layout.objects.select_for_update().filter(pk=proposal.layout_id).first()
            for document in (Document.MEMORY_MD, Document.MEMORY_SUMMARY):
                approved = text_of(latest_approved(proposal.layout, document))
                _settle_agent_versions(
                    proposal,
                    document,
                    approved,
                    user=user,
                    reason=f"rejected agent proposal #{proposal.pk}",
                )
            skills.settle_agent_changes(proposal, user=user, approved=False)
        _decided(proposal, Proposal.Status.REJECTED, user)
        AuditEvent.record(
            proposal.layout.workspace,
            "proposal.reject",
            user=user,
            layout=proposal.layout,
            target=f"proposal #{proposal.pk}",
        )


def request_changes(proposal: Proposal, message: str, *, user: Any) -> None:
    """Close the proposal without applying it, asking for changes: the reviewer's
    ``message`` is kept (audited), the entries rejected so far are remembered as
    rejections (phase two is told not to write them again), and the next proposal of
    the layout shows the request (``change_request``) while phase two gets it as
    feedback (``review_feedback``). Raises ``DecisionRefused`` as ``reject_proposal``
    does."""
    message = message.strip()[:10_000]
    with proposal_lock.deciding(proposal, user):
        if proposal.run_id is None:  # an agent's: the approved text stays served
            Layout.objects.select_for_update().filter(pk=proposal.layout_id).first()
            for document in (Document.MEMORY_MD, Document.MEMORY_SUMMARY):
                approved = text_of(latest_approved(proposal.layout, document))
                _settle_agent_versions(
                    proposal,
                    document,
                    approved,
                    user=user,
                    reason=f"changes requested on agent proposal #{proposal.pk}",
                )
            skills.settle_agent_changes(proposal, user=user, approved=False)
        for doc in document_reviews(proposal):
            _record_rejections(proposal, doc, user)
        _decided(proposal, Proposal.Status.CHANGES_REQUESTED, user)
        Proposal.objects.filter(pk=proposal.pk).update(review_message=message)
        proposal.review_message = message
        AuditEvent.record(
            proposal.layout.workspace,
            "proposal.request_changes",
            user=user,
            layout=proposal.layout,
            target=f"proposal #{proposal.pk}",
            message=message,
            rejected=list(
                RejectedEntry.objects.filter(proposal=proposal).values_list("title", flat=True)
            ),
        )


def change_request(layout: Layout, *, before: Proposal | None = None) -> Proposal | None:
    """The proposal of ``layout`` decided last (before ``before``, when given), when
    its outcome was a request for changes: what the next proposal answers."""
    decided = Proposal.objects.filter(layout=layout).exclude(status=Proposal.Status.PENDING)
    if before is not None:
        decided = decided.filter(pk__lt=before.pk)
    last = (
        decided.select_related("decided_by")
        .only("pk", "status", "review_message", "decided_at", "decided_by", "layout_id")
        .order_by("-decided_at", "-pk")
        .first()
    )
    return last if last and last.status == Proposal.Status.CHANGES_REQUESTED else None


def review_feedback(layout: Layout) -> tuple[str, list[str]]:
    """What phase two is told of the last review when it asked for changes: the
    reviewer's message (with the proposal's number) and the titles of the entries it
    rejected; ("", []) when the last decided proposal was not a request for changes."""
    request = change_request(layout)
    if request is None:
        return "", []
    titles = RejectedEntry.objects.filter(proposal=request).values_list("title", flat=True)
    return (
        f"Changes requested on proposal #{request.pk}: {request.review_message}",
        [t for t in titles if t],
    )


def _forget(proposal: Proposal, undecided: str) -> tuple[list[str], list[str]]:
    """An agent's forgetting, approved file by file: the raw memories and rollout
    summaries whose removal was accepted (or left undecided while ``undecided`` accepts)
    are gone from the workspace from now on (as files gone from disk are: kept, marked),
    so no sandbox is served them and no consolidation selects them; the others stay.
    Returns (the paths forgotten, the paths kept)."""
    found = Proposal.objects.values_list("forgotten", "forgotten_decisions").get(pk=proposal.pk)
    forgotten, decisions = list(found[0] or []), dict(found[1] or {})
    if not forgotten:
        return [], []
    gone = [p for p in forgotten if decisions.get(p, undecided) != EntryDecision.Decision.REJECT]
    files = WorkspaceFile.objects.present().filter(
        workspace_id=proposal.layout.workspace_id, path__in=gone
    )
    paths = sorted(files.values_list("path", flat=True))
    files.update(missing_since=timezone.now())
    return paths, sorted(set(forgotten) - set(gone))


def _settle_agent_versions(
    proposal: Proposal,
    document: str,
    final: str,
    *,
    user: Any,
    reason: str,
    moved: dict[str, str | None] | None = None,
) -> MemoryVersion | None:
    """An agent's proposal decided: its versions of ``document`` stop awaiting review,
    and the newest approved version must then hold ``final`` (the approved text, or on
    a rejection the text approved before): when it does not (the agent's own version,
    now reviewed, is newer than the approved one, or the decisions changed its text), a
    new version with ``final`` is saved. Returns it, or None."""
    layout = proposal.layout
    ours = proposal.agent_versions.filter(document=document, needs_review=True)
    MemoryVersion.objects.filter(pk__in=list(ours.values_list("pk", flat=True))).update(
        needs_review=False
    )
    if text_of(latest_approved(layout, document)) == final:
        return None
    current = latest(layout, document)
    return save_document(
        layout,
        document,
        final,
        user=user,
        author_kind=MemoryVersion.Author.AGENT
        if reason.startswith("approved")
        else MemoryVersion.Author.PERSON,
        reason=reason,
        based_on=current.number if current else None,
        moved=moved,
    )
