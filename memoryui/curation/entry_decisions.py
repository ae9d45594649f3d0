"""Reviewers' decisions on a proposal's entries, one at a time: accept (maybe edited),
reject, undo; their *Viewed* marks; their word on a likely duplicate pair. Each decision
is made under the pending proposal's lock (``proposal_lock``), audited."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from generation import review

from .. import entry_checks, live_review, proposal_lock
from ..models import AuditEvent, EntryDecision, EntryView, MemoryVersion, Proposal
from .reviews import DUPLICATE_ACKS, pair_id

Document = MemoryVersion.Document


class EntryDecided(proposal_lock.DecisionRefused):
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
        for key in keys:  # both cards show the answer: pages open on them fetch them again
            live_review.note_change(proposal.pk, document, key)
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
