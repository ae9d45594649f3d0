"""People deciding what agents remember: edits, pins, proposal decisions, approval,
restores. Every change is a new version and an audit event.

Saves are serialised per layout (a row lock on the layout) and carry the version they
were based on: a save based on anything but the latest version is refused, so two people
editing the same entry never overwrite each other.

Proposal decisions (entry decisions, approve, reject, reserve) read the proposal again
under a row lock and check it there: of two decisions at once exactly one finds the
proposal pending, the other is refused with what happened instead (``DecisionRefused``); skill file
decisions share that step (``memoryui.proposal_lock``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from generation import review

from . import (
    documents,
    entry_checks,
    proposal_lock,
    review_cards,
    skills,
    versioning,
)
from .entry_checks import agent_version_flags
from .models import (
    ApprovedEntry,
    AuditEvent,
    Comment,
    EntryDecision,
    EntryView,
    GenerationSettings,
    Layout,
    MemoryVersion,
    Pin,
    Proposal,
    ProtectedRawMemory,
    RejectedEntry,
    WorkspaceFile,
)
from .proposal_lock import AlreadyDecided as AlreadyDecided  # callers' name for it
from .proposal_lock import DecisionRefused, HeldByOther, held_by_other
from .proposal_lock import held_by as held_by  # callers' name for it

Document = MemoryVersion.Document


class StaleVersion(Exception):
    """The document changed since the version the edit was based on."""

    def __init__(self, latest: MemoryVersion | None) -> None:
        super().__init__("the document changed since you opened it")
        self.latest = latest


class EntryDecided(DecisionRefused):
    """Another reviewer decided this entry already (undo theirs to decide again)."""

    def __init__(self, proposal: Proposal, made: EntryDecision) -> None:
        when = timezone.localtime(made.decided_at)
        super().__init__(
            proposal,
            f"The entry {made.key} was already {made.get_decision_display().lower()}"
            f" by {made.user or 'someone'} at {when:%Y-%m-%d %H:%M:%S %Z};"
            " undo that decision to decide again.",
        )
        self.made = made


class UnresolvedConflicts(Exception):
    def __init__(self, conflicts: list[review.Conflict]) -> None:
        super().__init__(
            f"{len(conflicts)} conflicting entr{'y' if len(conflicts) == 1 else 'ies'} to decide"
        )
        self.conflicts = conflicts


def latest(layout: Layout, document: str) -> MemoryVersion | None:
    return versioning.latest(MemoryVersion, layout, document=document)


def latest_approved(layout: Layout, document: str) -> MemoryVersion | None:
    """The newest version not awaiting review: what sandboxes are served (lint aside),
    and what a proposal's decisions are merged with."""
    return (
        MemoryVersion.objects.filter(layout=layout, document=document, needs_review=False)
        .order_by("-number")
        .first()
    )


def text_of(version: MemoryVersion | None) -> str:
    """A version's text ("" for none or a deletion): the same object on every call, so
    the comparison caches keyed by it answer by identity (``documents.text``)."""
    if version is None or version.blob_id is None:
        return ""
    return documents.text(version.blob_id)


def save_document(
    layout: Layout,
    document: str,
    text: str,
    *,
    user: Any,
    author_kind: str = MemoryVersion.Author.PERSON,
    reason: str,
    based_on: int | None,
    moved: dict[str, str | None] | None = None,
) -> MemoryVersion:
    """Store ``text`` as the new current version, if ``based_on`` is still the latest
    version number (None: the document had no version). Pins follow their entries
    (``moved``: entries an edit renamed or deleted, see ``_follow_pins``)."""
    with transaction.atomic():
        current = versioning.locked_latest(
            MemoryVersion, layout, based_on, StaleVersion, document=document
        )
        version = versioning.create(
            MemoryVersion,
            layout,
            current,
            text.encode("utf-8"),
            user=user,
            author_kind=author_kind,
            reason=reason,
            document=document,
        )
        AuditEvent.record(
            layout.workspace,
            "version.create",
            user=user,
            layout=layout,
            target=f"{layout.memories_dir}/{Document(document).label}",
            version=version.number,
            sha256=version.blob_id,
            reason=reason,
        )
        _follow_pins(layout, document, text, moved or {}, user=user)
    return version


def edit_entry(
    layout: Layout, document: str, key: str, new_text: str, *, based_on: int, user: Any
) -> MemoryVersion:
    current = latest(layout, document)
    if current is None or current.number != based_on:
        raise StaleVersion(current)
    if new_text and not new_text.endswith("\n"):
        new_text += "\n"
    text = with_entry_replaced(text_of(current), key, new_text)
    # The edited entry starts where the old one was: the entries before it are unchanged.
    index = [e.key for e in review.entries(text_of(current))].index(key)
    after = review.entries(text)
    new_key = after[index].key if new_text.strip() and index < len(after) else None
    action = "deleted" if not new_text else "edited"
    return save_document(
        layout,
        document,
        text,
        user=user,
        reason=f"{action} entry {key}",
        based_on=based_on,
        moved={key: new_key},
    )


def add_entry(
    layout: Layout, document: str, text: str, *, based_on: int | None, user: Any
) -> MemoryVersion:
    current = latest(layout, document)
    if (current.number if current else None) != based_on:
        raise StaleVersion(current)
    new = with_entry_added(text_of(current), text)
    return save_document(
        layout, document, new, user=user, reason="added an entry", based_on=based_on
    )


def with_entry_replaced(document_text: str, key: str, new_text: str) -> str:
    """The document ``edit_entry`` saves: one entry replaced (removed when empty). The
    edited entry keeps the blank lines that separated the old one from the next, so an
    edit trimmed in a text box does not glue the next heading to it."""
    old = next((e.text for e in review.entries(document_text) if e.key == key), None)
    if new_text and old is not None:
        new_text = new_text.rstrip("\n") + (old[len(old.rstrip("\n")) :] or "\n")
    elif new_text and not new_text.endswith("\n"):
        new_text += "\n"
    return review.replace_entry(document_text, key, new_text)


def with_entry_added(document_text: str, text: str) -> str:
    """The document ``add_entry`` saves: ``text`` appended as a new entry."""
    added = text if text.endswith("\n") else text + "\n"
    return review.join([document_text, added] if document_text else [added])


def restore(layout: Layout, document: str, number: int, *, user: Any) -> MemoryVersion:
    old = MemoryVersion.objects.get(layout=layout, document=document, number=number)
    current = latest(layout, document)
    return save_document(
        layout,
        document,
        text_of(old),
        user=user,
        reason=f"restored version {number}",
        based_on=current.number if current else None,
    )


@dataclass(frozen=True)
class PinImpact:
    pin: Pin
    what: str  # "dropped", "altered", "renamed", "merged", "split"
    into: str = ""  # the title it has after the change, for a paired entry


def pins_affected_by(layout: Layout, document: str, before: str, after: str) -> list[PinImpact]:
    """The pinned entries that replacing ``before`` by ``after`` drops or alters (a
    renamed, merged or split one says what it becomes)."""
    pins = list(Pin.objects.filter(layout=layout, document=document).order_by("pk"))
    if not pins:
        return []
    after_entries = {e.key: e for e in review.entries(after)}
    paired = {
        old_key: change
        for change in review.compare(before, after)
        if change.previous
        for old_key in change.previous
    }
    impacts = []
    for pin in pins:
        entry = after_entries.get(pin.key)
        if entry is not None:
            if not review.same_text(entry.text, pin.text):
                impacts.append(PinImpact(pin, "altered"))
        elif pin.key in paired:
            change = paired[pin.key]
            impacts.append(PinImpact(pin, change.pairing or "renamed", change.title))
        else:
            impacts.append(PinImpact(pin, "dropped"))
    return impacts


def set_pin(layout: Layout, document: str, key: str, pinned: bool, *, user: Any) -> Pin | None:
    """Pin or unpin an entry. Doing what is already done changes nothing, so two
    people clicking Pin at once get one pin and one audit event. Raises KeyError when
    pinning an entry the current version does not have."""
    if not pinned:
        deleted, _ = Pin.objects.filter(layout=layout, document=document, key=key).delete()
        if deleted:
            AuditEvent.record(layout.workspace, "entry.unpin", user=user, layout=layout, target=key)
        return None
    entry = next(
        (e for e in review.entries(text_of(latest(layout, document))) if e.key == key), None
    )
    if entry is None:
        raise KeyError(key)
    with transaction.atomic():
        # get_or_create inserts in a savepoint and, when a concurrent click inserted
        # first (the unique constraint), reads that pin instead.
        pin, created = Pin.objects.get_or_create(
            layout=layout,
            document=document,
            key=key,
            defaults={
                "title": entry.title[:500],
                "text": entry.text,
                "pinned_by": user if getattr(user, "pk", None) else None,
            },
        )
        if created:
            AuditEvent.record(layout.workspace, "entry.pin", user=user, layout=layout, target=key)
    return pin


def pinned_texts(layout: Layout, memory_md: str) -> list[str]:
    """The pinned MEMORY.md entries as they are in ``memory_md`` (the version a
    consolidation starts from), so a pin keeps the entry's latest text, not the text
    it had when pinned. A pin whose entry is missing there keeps its stored text."""
    current = {e.key: e.text for e in review.entries(memory_md)}
    return [
        current.get(key, text)
        for key, text in Pin.objects.filter(layout=layout, document=Document.MEMORY_MD)
        .order_by("pk")
        .values_list("key", "text")
    ]


def _follow_pins(
    layout: Layout, document: str, text: str, moved: dict[str, str | None], *, user: Any
) -> None:
    """Pins follow their entry in a new version: they take its text, move with it when
    an edit renames it (``moved``: old key -> new key) and end when a person deletes
    it (new key None)."""
    pins = list(Pin.objects.filter(layout=layout, document=document))
    if not pins:
        return
    entries = {e.key: e for e in review.entries(text)}
    taken = {p.key for p in pins}
    before = {p.pk: (p.key, p.title, p.text) for p in pins}
    for pin in pins:
        if pin.key in moved and moved[pin.key] != pin.key:
            new_key = moved[pin.key]
            if new_key is None or new_key in taken:
                pin.delete()
                AuditEvent.record(
                    layout.workspace,
                    "entry.unpin",
                    user=user,
                    layout=layout,
                    target=pin.key,
                    reason="entry deleted" if new_key is None else f"merged into {new_key}",
                )
                continue
            taken.discard(pin.key)
            taken.add(new_key)
            pin.key = new_key
        entry = entries.get(pin.key)
        if entry is not None:
            pin.title, pin.text = entry.title[:500], entry.text
        if (pin.key, pin.title, pin.text) != before[pin.pk]:
            pin.save(update_fields=["key", "title", "text"])


def rejected_texts(layout: Layout) -> list[str]:
    return list(RejectedEntry.objects.filter(layout=layout).values_list("text", flat=True))


# --- proposals ------------------------------------------------------------------


@dataclass
class DocumentReview:
    document: str
    base_text: str
    proposed_text: str
    changes: list[review.Change]
    decisions: dict[str, EntryDecision]
    human_text: str | None  # the current text when people edited it during the run
    conflicts: list[review.Conflict]

    @property
    def label(self) -> str:
        return Document(self.document).label


def document_reviews(proposal: Proposal) -> list[DocumentReview]:
    decisions: dict[tuple[str, str], EntryDecision] = {
        (d.document, d.key): d for d in proposal.decisions.select_related("user")
    }
    out = []
    for document, base, proposed in (
        (Document.MEMORY_MD, proposal.base_memory_md, proposal.memory_md),
        (Document.MEMORY_SUMMARY, proposal.base_memory_summary, proposal.memory_summary),
    ):
        base_text = text_of(base)
        # What was approved since the proposal's base (an agent's version awaiting
        # review is not: it is another proposal's).
        current = latest_approved(proposal.layout, document)
        human = text_of(current) if current and (base is None or current.pk != base.pk) else None
        mine = {k: d for (doc, k), d in decisions.items() if doc == document}
        conflicts = []
        if human is not None:  # only then: assembling a large document is not free
            assembled = _assembled(base_text, proposed, mine)
            conflicts = review.merge(base_text, human, assembled).conflicts
        out.append(
            DocumentReview(
                document=document,
                base_text=base_text,
                proposed_text=proposed,
                changes=review.compare(base_text, proposed),
                decisions=mine,
                human_text=human,
                conflicts=conflicts,
            )
        )
    return out


def _assembled(
    base_text: str,
    proposed: str,
    decisions: dict[str, EntryDecision],
    held: frozenset[str] = frozenset(),
) -> str:
    """The document the decisions make; ``held``: quarantined entries nobody decided,
    kept as they are now."""
    return review.assemble(
        review.compare(base_text, proposed),
        {
            **{k: EntryDecision.Decision.REJECT for k in held},
            **{k: d.decision for k, d in decisions.items()},
        },
        {k: d.edited_text for k, d in decisions.items() if d.edited_text},
    )


def approved_texts(
    proposal: Proposal,
    reviews: list[DocumentReview],
    poisoned: set[tuple[str, str]] | None = None,
) -> dict[str, str]:
    """Per document, the text approving now would make of the proposal: the decisions
    so far, undecided entries as proposed, quarantined ones nobody decided kept out
    (``poisoned``: the (document, key) of the flagged entries, when already read)."""
    if poisoned is None:
        held = {d: set(keys) for d, keys in quarantined(proposal, reviews).items()}
    else:
        held = {
            doc.document: {k for d, k in poisoned if d == doc.document and k not in doc.decisions}
            for doc in reviews
        }
    return {
        doc.document: _assembled(
            doc.base_text, doc.proposed_text, doc.decisions, frozenset(held.get(doc.document, ()))
        )
        for doc in reviews
    }


def quarantined(proposal: Proposal, reviews: list[DocumentReview]) -> dict[str, dict[str, list]]:
    """Per document, the entries with a poisoning flag that no reviewer decided, and
    their flags: approval keeps them out (the current text stays) until someone accepts
    or rejects each explicitly."""

    flagged = entry_checks.flagged_keys(proposal)
    return {
        doc.document: {
            key: flags
            for (document, key), flags in flagged.items()
            if document == doc.document and key not in doc.decisions
        }
        for doc in reviews
    }


def decide(
    proposal: Proposal, document: str, key: str, decision: str, *, user: Any, edited_text: str = ""
) -> EntryDecision:
    """Record a reviewer's decision on one entry: the undecided -> decided transition
    (or the same reviewer changing their mind). Raises ``DecisionRefused`` when the
    proposal is decided or another reviewer holds it, and ``EntryDecided`` when another
    reviewer decided the entry; of two decisions at once the proposal's row lock makes
    the second see the first."""
    with proposal_lock.deciding(proposal, user):
        existing = (
            EntryDecision.objects.filter(proposal=proposal, document=document, key=key)
            .select_related("user")
            .first()
        )
        if existing is not None and not _same_person(existing.user_id, user):
            raise EntryDecided(proposal, existing)
        made, _ = EntryDecision.objects.update_or_create(
            proposal=proposal,
            document=document,
            key=key,
            defaults={
                "decision": decision,
                "edited_text": edited_text,
                "user": user if getattr(user, "pk", None) else None,
                "decided_at": timezone.now(),
            },
        )
        if getattr(user, "pk", None):  # deciding an entry is having looked at it
            EntryView.objects.bulk_create(
                [EntryView(proposal=proposal, document=document, key=key, user=user)],
                ignore_conflicts=True,
            )
        AuditEvent.record(
            proposal.layout.workspace,
            f"entry.{decision}",
            user=user,
            layout=proposal.layout,
            target=key,
            proposal=proposal.pk,
            document=document,
            edited=bool(edited_text),
            **_flags_detail(proposal, document, key, decision, edited_text),
        )
    return made


def _flags_detail(
    proposal: Proposal, document: str, key: str, decision: str, edited_text: str
) -> dict[str, Any]:
    """For the audit log: the poisoning flags of the entry a reviewer accepts (of their
    edit, when they edited it), so an accepted flag is on record."""

    if decision != EntryDecision.Decision.ACCEPT:
        return {}
    text = edited_text or next(
        (t for d, k, t in entry_checks.proposed_texts(proposal) if (d, k) == (document, key)), ""
    )
    extra = [(document, key, edited_text)] if edited_text else []
    checks = entry_checks.ensure(proposal, extra, only=(document, key))
    check = entry_checks.check_of(checks, document, key, text)
    if check is None or not check.risk:
        return {}
    return {"poisoning_flags": [f"{f['label']}: {f['reason']}" for f in check.flags]}


def _same_person(user_id: int | None, user: Any) -> bool:
    return user_id is not None and user_id == getattr(user, "pk", None)


def decided_by_others(proposal: Proposal, document: str, user: Any) -> set[str]:
    """Keys of the document's entries another reviewer decided (a decision on "all"
    leaves them as they are)."""
    made = EntryDecision.objects.filter(proposal=proposal, document=document)
    if getattr(user, "pk", None):
        made = made.exclude(user=user)
    return set(made.values_list("key", flat=True))


def undo_decision(proposal: Proposal, document: str, key: str, *, user: Any) -> bool:
    """Take back the decision on one entry (it is undecided again); False when there
    was none. Refused like ``decide`` when the proposal is decided or held by someone
    else."""
    with proposal_lock.deciding(proposal, user):
        previous = (
            EntryDecision.objects.filter(proposal=proposal, document=document, key=key)
            .values_list("decision", "edited_text", "user__username")
            .first()
        )
        if previous is None:
            return False
        EntryDecision.objects.filter(proposal=proposal, document=document, key=key).delete()
        AuditEvent.record(
            proposal.layout.workspace,
            "entry.undo",
            user=user,
            layout=proposal.layout,
            target=key,
            proposal=proposal.pk,
            document=document,
            undone=previous[0],
            edited=bool(previous[1]),
            decided_by=previous[2],
        )
    return True


def set_viewed(proposal: Proposal, document: str, key: str, viewed: bool, *, user: Any) -> bool:
    """Mark one entry viewed by ``user`` (or not): progress only, not audited, and
    allowed on a decided proposal too. Doing what is done changes nothing."""
    if not viewed:
        EntryView.objects.filter(proposal=proposal, document=document, key=key, user=user).delete()
        return False
    with transaction.atomic():
        EntryView.objects.get_or_create(proposal=proposal, document=document, key=key, user=user)
    return True


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
    proposal.status, proposal.decided_by, proposal.decided_at = status, person, now
    proposal.reserved_by, proposal.reserved_until = None, None


UNDECIDED_ACCEPT, UNDECIDED_REJECT = "accept", "reject"


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

        skill_versions = skills.approve_changes(proposal, user=user, undecided=undecided)
        forgotten = _forget(proposal)
        _decided(proposal, Proposal.Status.APPROVED, user)
        detail: dict[str, Any] = {}
        if forgotten:
            detail["forgotten"] = forgotten
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
    assembled = _assembled(doc.base_text, doc.proposed_text, doc.decisions, kept_out)
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


def carry_views(proposal: Proposal) -> int:
    """Carry each member's *Viewed* marks from the layout's previous proposal to this
    one for the entries whose proposed text is unchanged since (a task's number
    aside): like a pull request's viewed files, a mark resets only on what changed
    again. Returns how many marks were carried."""
    previous = (
        Proposal.objects.filter(layout=proposal.layout, pk__lt=proposal.pk)
        .order_by("-pk")
        .only("pk", "memory_md", "memory_summary")
        .first()
    )
    if previous is None:
        return 0
    views = list(EntryView.objects.filter(proposal=previous))
    if not views:
        return 0
    same: set[tuple[str, str]] = set()
    for document, before, after in (
        (Document.MEMORY_MD, previous.memory_md, proposal.memory_md),
        (Document.MEMORY_SUMMARY, previous.memory_summary, proposal.memory_summary),
    ):
        now = {e.key: e.text for e in review.entries(after)}
        same |= {
            (document, e.key)
            for e in review.entries(before)
            if e.key in now and review.same_text(e.text, now[e.key])
        }
    carried = [
        EntryView(proposal=proposal, document=v.document, key=v.key, user_id=v.user_id)
        for v in views
        if (v.document, v.key) in same
    ]
    EntryView.objects.bulk_create(carried, ignore_conflicts=True)
    return len(carried)


def decidable(doc: DocumentReview) -> list[review.Change]:
    """The entries a reviewer decides on: every change (unchanged ones are not)."""
    return [c for c in doc.changes if c.status != "unchanged"]


@dataclass(frozen=True)
class Duplicate:
    """Two entries of what approving would make that are likely one entry twice;
    ``ack``: what a reviewer said of this pair ("keep": keep both, "different": not a
    duplicate; "" while nobody has)."""

    document: str
    keys: tuple[str, str]
    titles: tuple[str, str]
    ack: str = ""
    ack_by: str = ""

    @property
    def pair(self) -> str:
        return pair_id(self.document, self.keys)


DUPLICATE_ACKS = {"keep": "kept both", "different": "not a duplicate"}


def pair_id(document: str, keys: tuple[str, str] | list[str]) -> str:
    return " ".join([document, *sorted(keys)])


def acknowledge_duplicate(
    proposal: Proposal, document: str, keys: tuple[str, str], ack: str, *, user: Any
) -> None:
    """Remember a reviewer's word on one likely duplicate pair ("keep" both, or
    "different": not a duplicate; "" takes it back), audited. Approval then lets that
    pair through; each other pair still needs its own."""
    if ack and ack not in DUPLICATE_ACKS:
        raise ValueError(ack)
    with proposal_lock.deciding(proposal, user) as locked:
        acks = dict(Proposal.objects.values_list("duplicate_acks", flat=True).get(pk=locked.pk))
        pair = pair_id(document, keys)
        if ack:
            acks[pair] = {"ack": ack, "by": str(user), "at": timezone.now().isoformat()}
        else:
            acks.pop(pair, None)
        Proposal.objects.filter(pk=proposal.pk).update(duplicate_acks=acks)
        proposal.duplicate_acks = acks
        AuditEvent.record(
            proposal.layout.workspace,
            "proposal.duplicate",
            user=user,
            layout=proposal.layout,
            target=f"proposal #{proposal.pk}",
            document=document,
            keys=sorted(keys),
            ack=ack or "undone",
        )


def open_duplicates(found: list[Duplicate]) -> list[Duplicate]:
    """The likely duplicates nobody has said anything of: approval waits for them."""
    return [d for d in found if not d.ack]


def duplicates(
    reviews: list[DocumentReview],
    undecided: str = UNDECIDED_ACCEPT,
    acks: dict[str, dict] | None = None,
) -> list[Duplicate]:
    """The duplicates (``review.duplicates``) in the documents approval would make with
    the decisions so far and ``undecided`` for the rest, when at least one of the two
    is an entry this proposal adds or changes (not two pieces of one split), with what
    reviewers said of each pair (``acks``: the proposal's ``duplicate_acks``)."""
    acks = acks or {}
    found = []
    for doc in reviews:
        decisions = {k: d.decision for k, d in doc.decisions.items()}
        if undecided == UNDECIDED_REJECT:
            for change in decidable(doc):
                decisions.setdefault(change.key, EntryDecision.Decision.REJECT)
        edits = {k: d.edited_text for k, d in doc.decisions.items() if d.edited_text}
        result = review.assemble(doc.changes, decisions, edits)
        touched = {
            key
            for change in decidable(doc)
            if change.proposed
            for key in (change.key, *change.also)
        }
        piece_of = {key: c.key for c in decidable(doc) for key in (c.key, *c.also)}
        for first, second in review.duplicates(result):
            if piece_of.get(first.key, first.key) == piece_of.get(second.key, second.key):
                continue  # two pieces of one split: decided as one change
            if first.key in touched or second.key in touched:
                keys = (first.key, second.key)
                said = acks.get(pair_id(doc.document, keys), {})
                found.append(
                    Duplicate(
                        doc.document,
                        keys,
                        (first.title, second.title),
                        said.get("ack", ""),
                        said.get("by", ""),
                    )
                )
    return found


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
        _decided(proposal, Proposal.Status.REJECTED, user)
        AuditEvent.record(
            proposal.layout.workspace,
            "proposal.reject",
            user=user,
            layout=proposal.layout,
            target=f"proposal #{proposal.pk}",
        )


def _forget(proposal: Proposal) -> list[str]:
    """An agent's forgetting, approved: the raw memories and rollout summaries it
    pruned are gone from the workspace from now on (as files gone from disk are: kept,
    marked), so no sandbox is served them and no consolidation selects them."""
    if not proposal.forgotten:
        return []
    files = WorkspaceFile.objects.present().filter(
        workspace_id=proposal.layout.workspace_id, path__in=list(proposal.forgotten)
    )
    paths = sorted(files.values_list("path", flat=True))
    files.update(missing_since=timezone.now())
    return paths


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


def reintroduced(proposal: Proposal) -> list[str]:
    """Titles of rejected entries that this proposal brings back."""
    texts = proposal.memory_md + "\n" + proposal.memory_summary
    return [
        r.title or r.key
        for r in RejectedEntry.objects.filter(layout=proposal.layout).exclude(proposal=proposal)
        if review.contains_entry(texts, r.text)
    ]


# --- agent edits, comments, the queue, protection ------------------------------------

RESERVATION = timedelta(minutes=30)


def accept_agent_change(version: MemoryVersion, *, user: Any) -> None:
    """Accept an agent's own edit; when it holds possible memory poisoning, the audit
    event names the flags the reviewer accepted it with."""

    found = agent_version_flags(version)
    flags: dict[str, Any] = (
        {"poisoning_flags": [f"{f.label}: {f.reason}" for f in found]} if found else {}
    )
    MemoryVersion.objects.filter(pk=version.pk).update(needs_review=False)
    AuditEvent.record(
        version.layout.workspace,
        "agent_change.accept",
        user=user,
        layout=version.layout,
        target=f"{Document(version.document).label} v{version.number}",
        **flags,
    )


def revert_agent_change(version: MemoryVersion, *, user: Any) -> MemoryVersion:
    """Put back the version before the agent's edit (as a new version); an empty
    document when the agent's was the first (a sandbox's upload brought it)."""
    if version.number > 1:
        restored = restore(version.layout, version.document, version.number - 1, user=user)
    else:
        current = latest(version.layout, version.document)
        restored = save_document(
            version.layout,
            version.document,
            "",
            user=user,
            reason="reverted the agent's first version",
            based_on=current.number if current else None,
        )
    MemoryVersion.objects.filter(pk=version.pk).update(needs_review=False)
    AuditEvent.record(
        version.layout.workspace,
        "agent_change.revert",
        user=user,
        layout=version.layout,
        target=f"{Document(version.document).label} v{version.number}",
        restored=restored.number,
    )
    return restored


def add_comment(
    proposal: Proposal, text: str, *, user: Any, document: str = "", key: str = ""
) -> Comment:
    comment = Comment.objects.create(
        proposal=proposal,
        document=document,
        key=key,
        text=text.strip()[:10_000],
        author=user if getattr(user, "pk", None) else None,
    )
    AuditEvent.record(
        proposal.layout.workspace,
        "comment.add",
        user=user,
        layout=proposal.layout,
        target=f"proposal #{proposal.pk}" + (f" {key}" if key else ""),
    )
    return comment


def reserve(proposal: Proposal, user: Any) -> None:
    """Reserve a pending proposal for ``user`` for ``RESERVATION`` (again: extend it);
    meanwhile nobody else can decide on it. Raises ``DecisionRefused`` when it is
    decided or someone else holds it."""
    with proposal_lock.deciding(proposal, user):
        until = timezone.now() + RESERVATION
        Proposal.objects.filter(pk=proposal.pk).update(reserved_by=user, reserved_until=until)
        AuditEvent.record(
            proposal.layout.workspace,
            "proposal.reserve",
            user=user,
            layout=proposal.layout,
            target=f"proposal #{proposal.pk}",
            until=until.isoformat(),
        )
    proposal.reserved_by, proposal.reserved_until = user, until


def release(proposal: Proposal, user: Any, *, override: bool = False) -> bool:
    """End a reservation: the holder's own, or anyone's with ``override`` (workspace
    admins). False when there was none to end; raises ``HeldByOther`` when someone
    else holds it and ``override`` is off."""
    with transaction.atomic():
        locked = proposal_lock.read_locked(proposal)
        if not (locked.reserved_until and locked.reserved_until > timezone.now()):
            released = False
        elif held_by_other(locked, user) and not override:
            raise HeldByOther(locked)
        else:
            holder = str(locked.reserved_by)
            Proposal.objects.filter(pk=proposal.pk).update(reserved_by=None, reserved_until=None)
            AuditEvent.record(
                proposal.layout.workspace,
                "proposal.release",
                user=user,
                layout=proposal.layout,
                target=f"proposal #{proposal.pk}",
                holder=holder,
            )
            released = True
    proposal.reserved_by, proposal.reserved_until = None, None
    return released


def assign(proposal: Proposal, reviewer: Any, *, user: Any) -> None:
    Proposal.objects.filter(pk=proposal.pk).update(assigned_to=reviewer)
    AuditEvent.record(
        proposal.layout.workspace,
        "proposal.assign",
        user=user,
        layout=proposal.layout,
        target=f"proposal #{proposal.pk}",
        reviewer=getattr(reviewer, "username", None),
    )


def set_protected(layout: Layout, rollout_id: str, protected: bool, *, user: Any) -> bool:
    """Protect a raw memory (keep it in the next selections) or stop protecting it.
    Doing what is already done changes nothing, so two clicks at once are one."""
    if not protected:
        deleted, _ = ProtectedRawMemory.objects.filter(
            layout=layout, rollout_id=rollout_id
        ).delete()
        if deleted:
            AuditEvent.record(
                layout.workspace,
                "raw_memory.unprotect",
                user=user,
                layout=layout,
                target=rollout_id,
            )
        return False
    with transaction.atomic():
        _, created = ProtectedRawMemory.objects.get_or_create(
            layout=layout,
            rollout_id=rollout_id,
            defaults={"protected_by": user if getattr(user, "pk", None) else None},
        )
        if created:
            AuditEvent.record(
                layout.workspace, "raw_memory.protect", user=user, layout=layout, target=rollout_id
            )
    return True
